/* recorder.h - the CUPTI recorder: kernel-launch callbacks, activity records (kernels, unified
 * memory counters, external correlation), iteration tracking, the profiling window. It delivers
 * what it sees to a sink (events.h, wired by lifecycle.c) and reads the policies' demand word; it
 * never calls the policies.
 *
 * One CUPTI subscriber, started at the first managed allocation (after activation, so CUPTI's
 * own start-up can never re-enter activation). Launches are seen at the driver's launch
 * functions (runtime launches reach them too, so nothing is counted twice); callbacks on the
 * runtime's launch functions only note their correlation id, which kernel records may carry.
 * States:
 *   cupti    - subscribed: launch callbacks and activity records (CUPTI detached while none is
 *              on, far under L, and attached again when one is needed);
 *   degraded - another subscriber holds CUPTI (torch.profiler, Nsight), from the start or since
 *              it took CUPTI over (transit_recorder_yield): no launch callbacks and no activity
 *              (its buffers are not ours to take); iteration marks only;
 *   off      - TRANSIT_RECORDER=0, libcupti missing, CUPTI failed, or CUDA never used.
 *
 * Profiling window (window.c): kernel activity, external correlation and the API records they
 * need run from the start through iteration TRANSIT_WARMUP_ITERS (iteration i is the span in which
 * transit_iteration_count() == i; iteration 0, with its lazy initialisations, is profiled but its
 * kernels carry no ordinal), kernel activity only while the demand asks for kernel times (CUPTI's
 * kernel tracing instruments every kernel). A window that took none is taken again once they are
 * needed. One iteration after the window (its last kernels have completed, late records arrived)
 * the recorder's thread flushes CUPTI, tells the sink the window ended, and switches the unified
 * memory counters off, except while the demand says limit mode is near L (its estimate is built
 * from the migration records then). Once the window is done, nothing acts at launches any more
 * and the API or the Python hook marks iterations, the launch callbacks go off too; an iteration
 * later, far under L, CUPTI is detached (cuptiFinalize) until something needs it again
 * (session.c, rec_steer_detach).
 *
 * Threads: launching threads (launch.c), CUPTI's buffer thread or any flushing thread
 * (records.c), and the recorder's thread (lifecycle.c runs transit_recorder_step every 20 ms),
 * which makes every CUPTI control call (enable, disable, flush) so that none is made inside a
 * CUPTI callback (but cuptiFinalize, at a launch's exit). */
#ifndef TRANSIT_RECORDER_H
#define TRANSIT_RECORDER_H

#include "events.h"
#include "hist.h"
#include "internal.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum { TRANSIT_RECORDER_OFF, TRANSIT_RECORDER_DEGRADED, TRANSIT_RECORDER_CUPTI } transit_recorder_state;

/* Counters: atomics, read without lock for the stats. */
typedef struct transit_recorder_counters {
    uint64_t launches, kernel_records, api_records, dropped, buffers_refused, overhead_ns;
    uint64_t launches_profiling, overhead_profiling_ns; /* the part of the two above while profiling */
    uint64_t records_ns; /* the part of overhead_ns spent on activity records (buffer_completed), off the launches */
    uint64_t htod_bytes, htod_count, dtoh_bytes, dtoh_count, unrequested_bytes;
    uint64_t gpu_faults, thrashing, remote_map_bytes;
    uint64_t corr_callback, corr_external, corr_cross_checked, corr_disagree, corr_none;
    uint64_t runtime_callbacks, runtime_without_driver, launch_callbacks_back;
    uint64_t profiled_iterations, reprofiles, refine_windows, untimed_windows;
    uint64_t cupti_detaches, cupti_reattaches;
} transit_recorder_counters;

/* What the stats show of the recorder (transit_recorder_snapshot). */
typedef struct transit_recorder_snap {
    transit_recorder_state state;
    bool started;       /* reason is valid */
    const char *reason; /* why it is off or degraded, "" otherwise */
    transit_recorder_counters n;
    transit_hist htod_hist, dtoh_hist;
    bool profiling, refining, unified_memory, detached, um_silent, external_ids, external_forced;
    uint64_t um_off_at, launches_off_at, detached_at;
    uint32_t period_length;
    uint64_t period_iterations, period_changes;
} transit_recorder_snap;

/* Called at each managed allocation; starts the recorder the first time. Exported so that the CPU
 * tests can start it without a GPU (it then reports why it is off). */
TRANSIT_INTERNAL void transit_recorder_start(void);
/* Where events go (lifecycle.c); and what the policies need now (policy.c, at each change). */
void transit_recorder_set_sink(const transit_sink *sink);
void transit_recorder_set_demand(uint32_t bits);
/* The recorder thread's work, every THREAD_TICK_MS (lifecycle.c). */
void transit_recorder_step(void);
/* Notices a new iteration mark now (the recorder thread polls; at exit, a last one). */
void transit_recorder_poll_iteration(void);
/* At exit, once the threads stopped: the records still in CUPTI's buffers. */
void transit_recorder_exit(void);
/* A fork child starts with the recorder off and all counters cleared. */
void transit_recorder_after_fork(void);
/* Another tool is about to take CUPTI through `call` (cuptiSubscribe, cuptiSubscribe_v2,
 * cuptiActivityRegisterCallbacks; hooks_cupti.c): the recorder gives CUPTI up for the rest of the
 * process and is degraded from then on. A no-op unless the recorder holds CUPTI in this process. */
void transit_recorder_yield(const char *call);
/* Opens a new profiling window at the next iteration (the kernel sequence changed). Ignored while
 * a window is open or after MAX_REPROFILES. */
void transit_recorder_reprofile(const char *why);

transit_recorder_state transit_recorder_get_state(void);
/* True when kernel-launch callbacks arrive (state cupti, and not switched off after warm-up). */
bool transit_recorder_sees_launches(void);
/* True when unified-memory migration records can arrive (state cupti, counters configured, and
 * not silent since a re-attach; they are on while profiling and, in limit mode, near L). */
bool transit_recorder_sees_migrations(void);
/* Kernel launches counted in the last complete iteration (0 when unknown). */
uint32_t transit_recorder_prev_iteration_launches(void);
/* HtoD and DtoH bytes in migration records so far, GPU page faults so far. */
uint64_t transit_recorder_htod_bytes(void);
uint64_t transit_recorder_dtoh_bytes(void);
uint64_t transit_recorder_gpu_faults(void);
/* Iterations profiled so far (all windows) and re-profiling windows opened. */
uint64_t transit_recorder_profiled_iterations(void);
uint64_t transit_recorder_reprofiles(void);
/* Without lock or allocation (the signal path renders the stats). */
void transit_recorder_snapshot(transit_recorder_snap *out);

#endif
