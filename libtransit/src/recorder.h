/* recorder.h - the CUPTI recorder: kernel-launch callbacks, activity records (kernels, unified
 * memory counters, external correlation), iteration tracking for the policies, the profiling
 * window, and the recorder's own statistics.
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
 * Profiling window: kernel activity, external correlation and the API records they need run
 * from the start through iteration TRANSIT_WARMUP_ITERS (iteration i is the span in which
 * transit_iteration_count() == i; iteration 0, with its lazy initialisations, is profiled but
 * its kernels carry no ordinal), kernel activity only while a profile needs kernel times
 * (transit_policy_needs_kernel_times: prefetch or limit mode, past half of L or of the device), for
 * CUPTI's kernel tracing instruments every kernel. A window that took none is taken again once they
 * are needed. After the window they are switched off. One iteration later (so that the window's
 * last kernels have completed and late records arrive) the recorder's thread flushes CUPTI, calls
 * transit_policy_profile_end() and switches the unified memory counters off too, except in limit
 * mode once the managed total has come near L (transit_policy_near_limit): TRANSIT's residency
 * estimate is then built from the HtoD/DtoH migration records, and the counters stay on, or come
 * back on, for the rest of the run. Further under L allocations and frees keep the estimate (a new
 * allocation counts resident).
 * transit_recorder_reprofile() opens a new window. Once the window is done, nothing acts at launches
 * any more (transit_policy_needs_launches) and the API or the Python hook marks iterations, the
 * launch callbacks go off too. An iteration later, far under L (transit_policy_far_under_limit),
 * CUPTI is detached (cuptiFinalize) until something needs it again (recorder.c, steer_detach).
 *
 * A small thread ("transit-rec") makes every CUPTI control call (enable, disable, flush) so
 * that none is made inside a CUPTI callback (but cuptiFinalize, at a launch's exit), and polls
 * iteration marks (the only source of boundaries when there are no launch callbacks). A second
 * one ("transit-tick") calls transit_policy_tick(): on an H200 the first stalled for 2 s at two
 * optimizer steps of warm-up while the bound rose by 8 GiB, and the evictions must not wait for it. */
#ifndef TRANSIT_RECORDER_H
#define TRANSIT_RECORDER_H

#include "internal.h"
#include "json.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum { TRANSIT_RECORDER_OFF, TRANSIT_RECORDER_DEGRADED, TRANSIT_RECORDER_CUPTI } transit_recorder_state;

/* Called at each managed allocation; starts the recorder the first time. Exported so that
 * the CPU tests can start it without a GPU (it then reports why it is off). */
TRANSIT_INTERNAL void transit_recorder_start(void);
/* A fork child starts with the recorder off and all counters cleared. */
void transit_recorder_after_fork(void);
transit_recorder_state transit_recorder_get_state(void);
/* True when kernel-launch callbacks arrive (state cupti, and not switched off after warm-up). */
bool transit_recorder_sees_launches(void);
/* True when unified-memory migration records can arrive (state cupti, counters configured, and
 * not silent since a re-attach; they are on while profiling and, in limit mode, near L). */
bool transit_recorder_sees_migrations(void);
/* Kernel launches counted in the last complete iteration (0 when unknown). */
uint32_t transit_recorder_prev_iteration_launches(void);
/* Another tool is about to take CUPTI through `call` (cuptiSubscribe, cuptiSubscribe_v2,
 * cuptiActivityRegisterCallbacks; hooks_cupti.c): the recorder gives CUPTI up for the rest of
 * the process and is degraded from then on. A no-op unless the recorder holds CUPTI in this
 * process. */
void transit_recorder_yield(const char *call);
/* Opens a new profiling window at the next iteration (prefetch: the kernel sequence changed).
 * Ignored while a window is open or after TRANSIT_MAX_REPROFILES. */
void transit_recorder_reprofile(const char *why);
/* HtoD and DtoH bytes in migration records so far. */
uint64_t transit_recorder_htod_bytes(void);
uint64_t transit_recorder_dtoh_bytes(void);
/* Iterations profiled so far (all windows) and re-profiling windows opened. */
uint64_t transit_recorder_profiled_iterations(void);
uint64_t transit_recorder_reprofiles(void);

/* Stats sections, each followed by ", "; no lock, no allocation (signal handler safe).
 * "migrations" and "faults": */
void transit_recorder_migrations_json(jbuf *b);
/* "recorder" and "timeline": */
void transit_recorder_state_json(jbuf *b);

#endif
