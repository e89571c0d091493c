/* policy_int.h - what the policy files share: the one state struct and their entry points.
 *
 * Files: engine.c (state, what the policies need of the recorder, the profile store, the
 * recorder's events), estimate.c (limit mode's chunk estimate), moves.c (TRANSIT's own
 * migrations, counted by purpose), launches.c (what happens at a kernel launch), limit.c (limit
 * mode's tick: the measured bound, evictions, sweeps, room before an allocation), advise.c
 * (SetAccessedBy and the fill), hybrid.c (placement by reuse), guard.c (hybrid against advise's
 * placement), mover.c (hybrid's look-ahead mover), profile.c (the profile's collector and writer).
 *
 * Lock order, where more than one is held: the recorder's win_lock (its sink calls), then
 * prof_lock; alloc_room_lock, then chunks_lock. chunks_lock and prof_lock are never held across a
 * driver call, nor together. */
#ifndef TRANSIT_POLICY_INT_H
#define TRANSIT_POLICY_INT_H

#include "actions.h"
#include "attrib.h"
#include "chunks.h"
#include "decide.h"
#include "guard.h"
#include "placement.h"
#include "profile_data.h"
#include "policy.h"
#include "ranges.h"
#include "state.h"
#include "stream.h"

#include <pthread.h>

#define EVICT_BATCH 64                      /* victim ranges picked per hold of the chunks lock */
#define SWEEP_PASS_S 0.02                   /* a tick's part of a sweep: the thread also measures, flushes */
#define PREFETCH_BATCH 64                   /* ranges copied per hold of the profile lock */
#define REFINE_GROWTH_DIV 32                /* a refinement that grew the profile less: the last */
#define FAULT_POPULATE_BYTES (64u << 10)    /* what a GPU fault on untouched memory makes resident */
#define DEFAULT_DEVICE_BYTES (256ull << 30) /* chunk capacity when the device size is unknown */
/* The measured bound over the estimate before a sweep (untouched pages count in the bound). */
#define HOST_CHECK_SLACK(limit) TRANSIT_MIN(1ull << 30, (limit) / 8)
#define HOST_CHECK_PERIOD_S 0.25             /* smaps costs the kernel a walk of every mapping: not more often */
#define HOST_CHECK_DUTY_DIV 10               /* ...nor for more than 1/10 of the tick thread's time */
#define HOST_CHECK_FROM(limit) ((limit) / 2) /* ...nor while the managed total stays under it */

/* What a TRANSIT prefetch is for: it decides the direction and the counters. */
typedef enum {
    PREFETCH_REPLAY,
    PREFETCH_FILL,
    PREFETCH_EVICT,
    PREFETCH_SWEEP,
    PREFETCH_PLACE_HOST,
    PREFETCH_PLACE_DEVICE,
    PREFETCH_STREAM_IN, /* hybrid's mover */
    PREFETCH_STREAM_OUT,
    PREFETCH_DEMOTE, /* hybrid's least reused placed chunks, for a reading over its target */
    PREFETCH_REMAP   /* hybrid's device chunks, out for the bulk prefetch back (TRANSIT_HYBRID_REMAP) */
} prefetch_purpose;

/* Hybrid's guard (guard.c), in order: no plan yet; planned, advise to apply; advise's block;
 * advise's placement to read; hybrid's placement to apply; hybrid's block; advise kept, its
 * placement to apply; decided; advise's placement unreadable (hybrid's applies unmeasured). Off:
 * another policy, or TRANSIT_HYBRID_GUARD=0. */
typedef enum {
    GUARD_WAITING,
    GUARD_ADVISE_DUE,
    GUARD_ADVISE,
    GUARD_READ_DUE,
    GUARD_SWITCH,
    GUARD_HYBRID,
    GUARD_REVERTING,
    GUARD_DECIDED,
    GUARD_FAILED,
    GUARD_OFF
} guard_stage;

/* What pol_hybrid_plan does with a new plan while the guard runs. */
enum { GUARD_PLAN_APPLY, GUARD_PLAN_HOLD, GUARD_PLAN_DROP };

/* The policies' mutable state (engine.c defines it). Counters are atomics; the rest is written
 * under the lock, or by the thread, named beside it. */
typedef struct policy {
    transit_policy_counters n;

    /* The profile (prefetch, and limit mode): while a window collects, attrib feeds `fresh`; at
     * its end `fresh` is finalized and becomes `ranges`, which launches replay. A refinement window
     * (limit mode, while planning) goes on replaying, and what it collects is added (prof_lock). */
    pthread_mutex_t prof_lock;
    transit_ranges *ranges, *fresh;
    transit_attrib *attrib;
    int collecting, replay, refining;

    pthread_mutex_t chunks_lock; /* limit mode's residency estimate */
    transit_chunks *chunks;

    int advise_applied;
    int fill_state;         /* transit_fill_state: advise's fill */
    uint64_t moves_at_mark; /* evictions and sweep ranges at the last mark since advise applied */
    uint64_t fill_cursor;   /* where the next fill goes on (tick thread only) */

    /* Tick thread only; created in the application's context. The sweep has its own stream, so that
     * the evictions the bound asks for never queue behind a sweep's thousands of ranges. */
    CUstream evict_stream, sweep_stream;
    /* Allocating threads make room before a managed allocation, one at a time, on a stream of
     * their own; meanwhile the tick leaves the bound to them. */
    pthread_mutex_t alloc_room_lock;
    CUstream alloc_stream;
    int stopping; /* the process exits: ticks and evictions stop at their next batch */

    int sweep_due;           /* the host check found the estimate short; until a sweep ends (tick thread) */
    int swept_since_mark;    /* a sweep began while planning since the last iteration mark */
    uint64_t sweep_cursor;   /* where the sweep goes on (tick thread) */
    double host_check_next;  /* tick thread */
    /* RSS minus the smaps Rss of the managed mappings at the last host check: the process's
     * non-managed resident bytes (set by the tick thread, read by allocating threads too; valid
     * once rss_calibrated). */
    int64_t rss_not_managed;
    int rss_calibrated;
    uint64_t bound_peak_unlogged; /* the highest bound evictions read since the tick log's last line */

    /* Hybrid's placement (hybrid_lock), planned at a profile's end and applied by the tick when
     * due: the profile's chunks, their reuse and where it keeps each (1: device; demotions clear
     * it), and its mover's schedule. */
    pthread_mutex_t hybrid_lock;
    transit_stream_schedule hybrid_schedule;
    int hybrid_due;
    int hybrid_reading_due; /* an iteration mark since the last reading of where placed chunks are */
    uint64_t *hybrid_chunk;
    uint32_t *hybrid_reuse;
    uint8_t *hybrid_resident;
    size_t hybrid_nchunks;

    /* Hybrid's guard (guard_lock, a leaf; guard_stage and guard_kept are also read without it):
     * the block's placement applied at iteration count guard_applied_at, its first timed step and
     * the next to read (0-based, transit_iteration_step_s), the blocks' step times, and advise's
     * placement as read (the chunks, their reuse, 1: on the device). */
    pthread_mutex_t guard_lock;
    int guard_stage; /* guard_stage */
    int guard_kept;  /* transit_guard_kept */
    uint64_t guard_applied_at, guard_first_step, guard_next_step;
    double guard_advise_s[TRANSIT_GUARD_STEPS], guard_hybrid_s[TRANSIT_GUARD_STEPS];
    size_t guard_nadvise, guard_nhybrid;
    uint64_t *guard_chunk;
    uint32_t *guard_reuse;
    uint8_t *guard_resident;
    size_t guard_nchunks;
} policy;

extern policy pol;

/* engine.c */
void pol_raise_peaks(uint64_t resident);
bool pol_estimating(void);
bool pol_planning(void);
bool pol_plans_at_launches(void);
bool pol_far_under_limit(void);
const char *pol_fill_name(void);
uint64_t pol_planned_capacity(void);
int pol_fill_now(void);
bool pol_fill_holds(int state);
transit_limit_view pol_limit_view(bool fill_held);
void pol_publish_demand(void);
/* estimate.c (chunks_lock taken inside) */
transit_chunks *pol_chunks_locked(void);
void pol_chunks_changed(void);
void pol_mark_resident(uint64_t addr, uint64_t bytes, bool cold);
void pol_mark_gone(uint64_t addr, uint64_t bytes);
bool pol_rewind_clock(void);
/* moves.c */
bool pol_prefetch_range(const transit_driver_api *drv, transit_range r, CUdevice dev, prefetch_purpose why,
                        CUstream stream);
void pol_make_room(const transit_driver_api *drv, const transit_range *need, size_t n, CUstream stream);
bool pol_walk_spilled(const transit_driver_api *drv, CUstream stream, prefetch_purpose why, CUdevice dev,
                      uint64_t *cursor, double until, uint64_t budget);
/* limit.c */
void pol_correct_target(uint64_t peak);
/* advise.c */
void pol_advise_range(const transit_driver_api *drv, uint64_t ptr, uint64_t size, CUdevice dev);
void pol_advise_all(const transit_driver_api *drv, CUdevice dev);
void pol_start_fill_when_still(void);
uint64_t pol_fill_over(uint64_t measured);
uint64_t pol_fill_room(uint64_t measured);
void pol_fill_is_full(uint64_t measured);
void pol_fill(const transit_driver_api *drv, CUdevice dev, CUstream stream, uint64_t measured, uint64_t room);
bool pol_advise_due(void);
/* hybrid.c */
void pol_hybrid_plan(const profile_summary *profile);
bool pol_hybrid_due(void);
void pol_hybrid_apply(const transit_driver_api *drv, CUdevice dev, CUstream stream);
bool pol_hybrid_demote(const transit_driver_api *drv, CUstream stream, uint64_t excess);
void pol_hybrid_mark(void);
void pol_hybrid_read_placement(void);
int pol_reuse_class(uint32_t reuse);
/* guard.c (guard_lock, then hybrid_lock is never nested: taken one after the other) */
int pol_guard_on_plan(void);
bool pol_guard_due(void);
bool pol_guard_holds_advise(void);
bool pol_guard_measures_advise(void);
void pol_guard_apply_advise(const transit_driver_api *drv, CUdevice dev);
void pol_guard_placement_applied(void);
void pol_guard_mark(void);
void pol_guard_read_advise(void);
void pol_guard_after_fork(void);
const char *pol_guard_state_name(void);
const char *pol_guard_kept_name(void);
/* advise and hybrid read host data in place once they applied */
bool pol_in_place(void);
/* mover.c (its own lock, mv.lock, taken last and around no other) */
bool pol_mover_active(void);
bool pol_mover_starts_phase(uint32_t ordinal);
void pol_mover_launch(const transit_driver_api *drv, const transit_launch *l);
void pol_mover_hand_over(transit_stream_schedule *s);
void pol_mover_wake(void);
void pol_mover_after_fork(void);

#endif
