/* recorder_int.h - what the recorder's files share: its one state struct and their entry points.
 *
 * Files, each calling only those before it: recorder.c (state, queries), records.c (activity
 * buffers and their records), session.c (CUPTI attach, detach, yield, what is enabled), window.c
 * (iterations, the profiling window, the recorder thread's step), launch.c (the launch callback,
 * correlation, the period detector), start.c (start, exit, fork reset).
 *
 * Lock order, where more than one is held: control_lock, then win_lock, then (in the sink's
 * profile_begin/profile_end) the policies' own. records_lock, pool_lock and period_lock are leaves.
 * No lock is held across a CUPTI control call made from a CUPTI callback (there is none, but
 * cuptiFinalize at a launch's exit, which only tries control_lock). */
#ifndef TRANSIT_RECORDER_INT_H
#define TRANSIT_RECORDER_INT_H

#include "cupti_api.h"
#include "period.h"
#include "recorder.h"

#include <pthread.h>
#include <sys/types.h>

#define BUFFER_COUNT 32           /* CUPTI activity buffers, allocated on first use (8 were too few on an H200) */
#define BUFFER_BYTES (4u << 20)
#define BUFFER_ALIGN 8            /* CUPTI's record alignment */
#define FLUSH_PERIOD_MS 500       /* deliver partly filled buffers this often... */
#define FLUSH_PERIOD_LIMIT_MS 100 /* ...and more often in limit mode: the estimate lags by this much */
#define CORR_TABLE_BITS 18        /* correlation id -> ordinal, direct-mapped */
#define CORR_TABLE_SIZE (1u << CORR_TABLE_BITS)
#define MAX_REPROFILES 8          /* a sequence that keeps changing would keep profiling on */
#define REPROFILE_LAUNCH_FACTOR 2 /* an iteration this many times longer than profiled: changed */
#define MAX_REFINEMENTS 16        /* limit mode: one-iteration windows that add to the profile */
#define CORR_MISS_TOLERANCE 64    /* kernel records no launch callback placed before external ids go on
                                   * (a few race the enabling of kernel activity) */
#define WINDOW_RECORDS_WAIT_MS 30000 /* a window's end waits this long at most for its kernel records... */
#define WINDOW_RECORDS_MISSING_OK 16  /* ...and not for these few (launches that race the kind going off) */
#define NAME_CACHE_SLOTS 4096     /* kernel-name hashes by function and name pointer */
/* TRANSIT's external correlation ids are (iteration << 32) | ordinal. CUSTOM2, because
 * PyTorch's profiler (Kineto) pushes its own ids as CUSTOM0 and CUSTOM1. */
#define EXTERNAL_KIND CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2
/* How limit mode keeps L without migration records (policy/limit.c): every warning that says so. */
#define BOUND_ALONE "L is kept by the measured bound alone, evicting round the managed memory, not by recency"

enum { WINDOW_COLLECTING, WINDOW_DRAINING, WINDOW_DONE };

/* The recorder's mutable state (recorder.c defines it). Counters are atomics; flags read at
 * launches are read with atomics; the rest is written under the lock named beside it. */
typedef struct recorder {
    transit_recorder_counters n;
    transit_hist htod_hist, dtoh_hist; /* records_lock */
    const transit_sink *sink;          /* set once, before the recorder starts */
    uint32_t demand;                   /* TRANSIT_DEMAND_* bits, set by the policies */

    int state; /* transit_recorder_state */
    int start_claimed;
    int started; /* reason is valid */
    char reason[192];
    pid_t owner_pid;
    CUpti_SubscriberHandle subscriber;
    CUpti_CallbackFunc on_callback; /* launch.c's, subscribed at the start and at every attach */
    int activity_ok, um_ok; /* activity API usable; unified memory counters configured */

    uint64_t iter_seen;     /* the iteration count last handled */
    uint32_t iter_launches; /* launches so far in the current iteration */
    uint32_t prev_launches; /* launches in the previous iteration */

    /* The profiling window (win_lock; phase, begin and end are also read racily at launches). */
    pthread_mutex_t win_lock;
    int win_phase;
    int win_kind;    /* transit_window_kind */
    int steady_taken; /* TRANSIT_PROFILE_STEADY's window was opened */
    int refine_held;  /* a refinement waits for the steady window's end (window.c) */
    int win_untimed; /* the last full window took no kernel times: nothing needed them then */
    uint64_t win_begin, win_end, drain_until;
    uint32_t win_max_launches;
    int finalize_due;

    /* What the window asks for, and what is enabled (control_lock). */
    pthread_mutex_t control_lock;
    int want_profiling, want_um;
    int want_external; /* external correlation ids while profiling; set without
                        * TRANSIT_EXTERNAL_CORRELATION when callback ids missed */
    int have_profiling, have_um, have_external;
    uint64_t launches_off_at; /* the iteration from which the launch callbacks are off; 0: on */
    uint64_t um_off_at;       /* likewise the unified memory counters */
    /* CUPTI detached while the recorder has nothing on: asked for (the next launch's exit
     * detaches), done, and the iteration it was last done at. */
    int detach_due, detached, detach_failed;
    uint64_t detached_at;
    /* CUPTI was attached again with the unified memory counters configured, and none of their
     * records came since (docs/design-notes.md, "CUPTI re-attach"): until one comes the estimate
     * follows nothing and limit mode keeps L by its measured bound alone. */
    int um_silent;

    /* Correlation id -> ((uint64_t)id << 32 | ordinal), from the launch callback and from
     * external-correlation records; kernel records look their ordinal up here. */
    uint64_t corr_from_callback[CORR_TABLE_SIZE];
    uint64_t corr_from_external[CORR_TABLE_SIZE];

    transit_period *period; /* period_lock */
    pthread_mutex_t period_lock;
    struct {
        CUfunction f;
        const char *symbol;
        uint64_t hash;
    } name_cache[NAME_CACHE_SLOTS]; /* period_lock */

    uint8_t *buffers[BUFFER_COUNT]; /* pool_lock */
    int buffer_busy[BUFFER_COUNT];
    pthread_mutex_t pool_lock;
    pthread_mutex_t records_lock;
    uint64_t last_flush;        /* recorder thread only */
    uint64_t finalize_wait_ns;  /* recorder thread only: since when the window's end waits */
} recorder;

extern recorder rec;

static inline bool rec_wants(uint32_t bit)
{
    return (__atomic_load_n(&rec.demand, __ATOMIC_ACQUIRE) & bit) != 0;
}

/* recorder.c */
int rec_get_state(void);
void rec_set_state(transit_recorder_state s, const char *why);
int rec_in_window(uint64_t iteration);
uint32_t rec_window_ordinal(uint64_t iteration, uint32_t ordinal);
/* window.c */
void rec_open_window(uint64_t begin, transit_window_kind kind);
void rec_iteration_check(void);
/* session.c */
void rec_flush(uint32_t flag);
void rec_degrade_locked(const char *why);
bool rec_attached_locked(const transit_cupti_api *api);
void rec_apply_locked(const transit_cupti_api *api);
void rec_apply_activity(void);
void rec_set_launch_callbacks(const transit_cupti_api *api, int enable);
void rec_detach_at_exit(void);
void rec_steer_detach(void);
bool rec_subscribe_locked(CUpti_CallbackFunc on_callback);
void rec_hold_locked(void);
bool rec_register_activity(const transit_cupti_api *api);
/* records.c */
void CUPTIAPI rec_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records);
void CUPTIAPI rec_buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size, size_t valid);
void rec_corr_store(uint64_t *table, uint32_t corr, uint32_t ordinal);
/* launch.c */
void CUPTIAPI rec_on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data);
void rec_launch_after_fork(void);

#endif
