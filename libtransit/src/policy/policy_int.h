/* policy_int.h - the services the policies call downward, and the state they share.
 *
 * Services: shared.c (the state, the active policy's table, what the policies need of the
 * recorder: the demand word), estimate.c (limit mode's chunk estimate), moves.c (TRANSIT's own
 * migrations, counted by purpose, and the launches' room), limit.c (limit mode: the measured
 * bound, evictions, sweeps, room before an allocation), in_place.c (SetAccessedBy: host data read
 * in place), fill.c (advise's fill of the device, which hybrid's hold also keeps).
 * The engine (engine.c: the recorder's events and the profile store; launches.c; tick.c) calls
 * them and the active policy's table (ops.h); the policies (base.c, prefetch.c, advise.c,
 * hybrid*.c) call only them. None of them calls a policy or the engine.
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
#include "ops.h"
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

/* The policies' shared state (shared.c defines it). Counters are atomics; the rest is written
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

} policy;

extern policy pol;
/* The active policy's table (engine.c's transit_policy_load sets it; base until then). */
extern const transit_policy_ops *pol_ops;

/* shared.c */
void pol_raise_peaks(uint64_t resident);
bool pol_estimating(void);
bool pol_planning(void);
bool pol_plans_at_launches(void);
bool pol_uses_profile(void);
bool pol_far_under_limit(void);
uint64_t pol_planned_capacity(void);
int pol_fill_now(void);
bool pol_fill_holds(int state);
const char *pol_fill_name(void);
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
uint64_t pol_check_host_residency(bool fill_held);
uint64_t pol_bound_over(bool fill_held, uint64_t *bound_read);
uint64_t pol_excess_now(uint64_t coming, bool fill_held);
bool pol_evict_due(bool fill_held);
void pol_evict(const transit_driver_api *drv, CUstream stream, uint64_t asked, bool fill_held, uint64_t coming);
void pol_sweep(const transit_driver_api *drv, CUstream stream);
bool pol_own_tick_stream(const transit_driver_api *drv, CUstream *stream);
/* in_place.c */
bool pol_in_place_applied(void);
void pol_in_place_all(const transit_driver_api *drv, CUdevice dev);
void pol_in_place_on_alloc(uint64_t ptr, uint64_t size, int device);
/* fill.c */
void pol_start_fill_when_still(bool rules);
uint64_t pol_fill_over(uint64_t measured);
uint64_t pol_fill_room(uint64_t measured);
void pol_fill_is_full(uint64_t measured);
void pol_fill(const transit_driver_api *drv, CUdevice dev, CUstream stream, uint64_t measured, uint64_t room);
void pol_fill_hold(void);

#endif
