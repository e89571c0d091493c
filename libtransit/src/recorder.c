/* recorder.c - the CUPTI recorder; see recorder.h.
 *
 * Threads that run code here: the application's launching threads (launch callback), CUPTI's
 * buffer thread or any thread that flushes (buffer_completed), the recorder's own thread, and
 * whichever thread renders the statistics (no lock: counters are atomics, the rest is read
 * racily, which at worst shows a value one update old). */
#include "recorder.h"
#include "attrib.h"
#include "cuda_api.h"
#include "cupti_api.h"
#include "hist.h"
#include "internal.h"
#include "iteration.h"
#include "period.h"
#include "policy.h"
#include "profile.h"
#include "state.h"

/* cupti.h (through cupti_api.h) brings generated_cuda_meta.h: the launch parameter structs. */

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BUFFER_COUNT 32                 /* CUPTI activity buffers, allocated on first use (8 were too few on an H200) */
#define BUFFER_BYTES (4u << 20)
#define BUFFER_ALIGN 8                  /* CUPTI's record alignment */
#define THREAD_TICK_MS 20               /* both threads: iteration polling, CUPTI control; policy ticks */
#define FLUSH_PERIOD_MS 500             /* deliver partly filled buffers this often... */
#define FLUSH_PERIOD_LIMIT_MS 100       /* ...and more often in limit mode: the estimate lags by this much
                                         * (500 ms far under L did not change step times, and the records
                                         * took 3-7x longer to handle: H200, 17 pairs at 672daf3) */
#define EXIT_WAIT_MS 2000               /* at exit, how long to wait for both threads */
#define CORR_TABLE_BITS 18              /* correlation id -> ordinal, direct-mapped */
#define CORR_TABLE_SIZE (1u << CORR_TABLE_BITS)
#define TIMELINE_ENTRIES 512
#define MAX_REPROFILES 8                /* a sequence that keeps changing would keep profiling on */
#define REPROFILE_LAUNCH_FACTOR 2       /* an iteration this many times longer than profiled: changed */
#define MAX_REFINEMENTS 16              /* limit mode: one-iteration windows that add to the profile */
#define CORR_MISS_TOLERANCE 64          /* kernel records no launch callback placed before external ids go on
                                         * (a few race the enabling of kernel activity) */
/* TRANSIT's external correlation ids are (iteration << 32) | ordinal. CUSTOM2, because
 * PyTorch's profiler (Kineto) pushes its own ids as CUSTOM0 and CUSTOM1. */
#define EXTERNAL_KIND CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2
/* How limit mode keeps L without migration records (policy.c, rewind_clock): both warnings say it. */
#define BOUND_ALONE "L is kept by the measured bound alone, evicting round the managed memory, not by recency"

enum { WINDOW_COLLECTING, WINDOW_DRAINING, WINDOW_DONE };

/* Counters: atomics, read without lock by the stats renderer. */
static struct {
    uint64_t launches, kernel_records, api_records, dropped, buffers_refused, overhead_ns;
    uint64_t launches_profiling, overhead_profiling_ns; /* the part of the two above while profiling */
    uint64_t records_ns; /* the part of overhead_ns spent on activity records (buffer_completed), off the launches */
    uint64_t htod_bytes, htod_count, dtoh_bytes, dtoh_count, unrequested_bytes;
    uint64_t gpu_faults, thrashing, remote_map_bytes;
    uint64_t corr_callback, corr_external, corr_cross_checked, corr_disagree, corr_none;
    uint64_t runtime_callbacks, runtime_without_driver, launch_callbacks_back;
    uint64_t profiled_iterations, reprofiles, refine_windows, untimed_windows;
    uint64_t cupti_detaches, cupti_reattaches;
} rc;
static transit_hist htod_hist, dtoh_hist; /* under records_lock */

static int rec_state = TRANSIT_RECORDER_OFF;
static int start_claimed;
static int started; /* reason[] is valid */
static char reason[192];
static pid_t owner_pid;
static CUpti_SubscriberHandle subscriber;
static int activity_ok, um_ok; /* activity API usable; unified memory counters configured */

/* Iteration tracking. */
static uint64_t iter_seen;      /* the iteration count last handled */
static uint32_t iter_launches;  /* launches so far in the current iteration */
static uint32_t prev_launches;  /* launches in the previous iteration */

/* Profiling window (win_lock; win_phase/win_begin/win_end are also read racily at launches). */
static pthread_mutex_t win_lock = PTHREAD_MUTEX_INITIALIZER;
static int win_phase = WINDOW_DONE;
static int win_refine; /* the window refines the profile (open_window) */
static int win_untimed; /* the last full window took no kernel times: nothing needed them then */
static uint64_t win_begin, win_end, drain_until;
static uint32_t win_max_launches;
static int finalize_due;
static int want_profiling, want_um; /* what the window asks for */
static int want_external;           /* external correlation ids while profiling (see correlate); set
                                     * without TRANSIT_EXTERNAL_CORRELATION: callback ids missed */
static int have_profiling, have_um, have_external; /* what is enabled (written under control_lock only) */
static uint64_t launches_off_at; /* the iteration from which the launch callbacks are off; 0: on */
static uint64_t um_off_at;       /* likewise the unified memory counters (written under control_lock only) */
/* CUPTI detached while the recorder has nothing on (steer_detach; written under control_lock only):
 * asked for (the next launch's exit detaches), done, and the iteration it was last done at. */
static int detach_due, detached, detach_failed;
static uint64_t detached_at;
/* CUPTI was attached again with the unified memory counters configured, and none of their records
 * came since: after a re-attach they gave none in the H200 runs (runs 44, 46, 57-62), nor with
 * cuptiUnsubscribe before cuptiFinalize or the counters configured after their kind was enabled
 * (bench/results/reattach-um-experiment/). Until one comes the
 * estimate follows nothing (transit_recorder_sees_migrations), and limit mode keeps L by its
 * measured bound alone, as without records, instead of by an estimate that never sees data fault
 * back in and drains. */
static int um_silent;
static pthread_mutex_t control_lock = PTHREAD_MUTEX_INITIALIZER; /* serializes the recorder's CUPTI control calls */

/* Correlation id -> ((uint64_t)id << 32 | ordinal), from the launch callback and from
 * external-correlation records; kernel records look their ordinal up here. */
static uint64_t corr_from_callback[CORR_TABLE_SIZE];
static uint64_t corr_from_external[CORR_TABLE_SIZE];
static __thread int corr_pushed; /* this thread has an external id of ours on CUPTI's stack */
/* The enclosing runtime launch on this thread (cudaLaunchKernel and kin): its correlation id,
 * which the kernel record may carry instead of the driver call's, and whether the driver
 * launch callback came inside it. */
static __thread uint32_t runtime_corr;
static __thread int runtime_saw_driver;

static transit_period *period;
static pthread_mutex_t period_lock = PTHREAD_MUTEX_INITIALIZER;
/* Kernel-name hashes by function and CUPTI's name pointer (period_lock held): hashing a name took
 * 0.10-0.65 us for names of 96-439 characters on the development machine, at every launch. A
 * handle reused after a module unload, or a name CUPTI hands over in a new buffer, misses and is
 * hashed anew: no saving then, and no wrong hash. */
#define NAME_CACHE_SLOTS 4096
static struct {
    CUfunction f;
    const char *symbol;
    uint64_t hash;
} name_cache[NAME_CACHE_SLOTS];

static uint8_t *buffers[BUFFER_COUNT];
static int buffer_busy[BUFFER_COUNT];
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t records_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct timeline_entry {
    double t;
    uint64_t iteration, resident, htod, dtoh, faults, evicted; /* cumulative: a step's share is a difference */
    uint64_t bound_peak; /* limit mode's measured bound, highest since the previous entry; UINT64_MAX: unmeasured */
} timeline_entry;
static timeline_entry timeline[TIMELINE_ENTRIES];
static uint64_t timeline_count;

static pthread_mutex_t thread_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t thread_cond, thread_done;
static int threads_running, thread_stop; /* the recorder's thread and the policy's tick thread */
static uint64_t last_flush;                /* recorder thread only */

static int get_state(void)
{
    return __atomic_load_n(&rec_state, __ATOMIC_ACQUIRE);
}

static void set_state(transit_recorder_state s, const char *why)
{
    snprintf(reason, sizeof reason, "%s", why ? why : "");
    __atomic_store_n(&started, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&rec_state, (int)s, __ATOMIC_RELEASE);
}

static void wake_thread(void)
{
    pthread_cond_broadcast(&thread_cond); /* the tick thread waits on it too; an early tick does no harm */
}

/* ---- profiling window ---- */

static int in_window(uint64_t iteration)
{
    return __atomic_load_n(&win_phase, __ATOMIC_RELAXED) != WINDOW_DONE &&
           iteration >= __atomic_load_n(&win_begin, __ATOMIC_RELAXED) &&
           iteration < __atomic_load_n(&win_end, __ATOMIC_RELAXED);
}

/* win_lock held. A refinement window lasts one iteration (see transit_policy_profile_begin); a
 * full one gives the new profile its refinements anew. */
static void open_window(uint64_t begin, bool refine)
{
    __atomic_store_n(&win_refine, refine, __ATOMIC_RELAXED);
    if (!refine) {
        __atomic_store_n(&rc.refine_windows, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&win_untimed, 0, __ATOMIC_RELEASE);
    }
    win_begin = begin;
    win_end = begin + (refine ? 1 : transit_g.cfg.warmup_iters);
    win_max_launches = 0;
    __atomic_store_n(&finalize_due, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&win_phase, WINDOW_COLLECTING, __ATOMIC_RELEASE);
    __atomic_store_n(&want_profiling, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&want_um, 1, __ATOMIC_RELAXED);
    transit_policy_profile_begin(refine);
    if (!refine)
        transit_profile_window_begin(begin, transit_g.cfg.warmup_iters);
}

/* The iteration count moved from `seen` to `now`; `launches` ran in iteration `seen`. */
static void window_advance(uint64_t seen, uint64_t now, uint32_t launches)
{
    pthread_mutex_lock(&win_lock);
    if (now < seen) { /* a more explicit iteration source took over and counts from 0 */
        open_window(now + 1, false);
    } else if (win_phase == WINDOW_COLLECTING) {
        if (seen >= win_begin && seen < win_end) {
            transit_add(&rc.profiled_iterations, 1);
            win_max_launches = TRANSIT_MAX(win_max_launches, launches);
        }
        if (now >= win_end) {
            __atomic_store_n(&win_phase, WINDOW_DRAINING, __ATOMIC_RELEASE);
            drain_until = now + 1; /* one more iteration for late records; migrations still on */
            __atomic_store_n(&want_profiling, 0, __ATOMIC_RELAXED);
            if (!win_refine && !__atomic_load_n(&have_profiling, __ATOMIC_ACQUIRE)) {
                __atomic_store_n(&win_untimed, 1, __ATOMIC_RELEASE);
                transit_add(&rc.untimed_windows, 1);
            }
        }
    } else if (win_phase == WINDOW_DRAINING && now >= drain_until) {
        __atomic_store_n(&finalize_due, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&win_lock);
}

void transit_recorder_reprofile(const char *why)
{
    int opened = 0;
    if (get_state() != TRANSIT_RECORDER_CUPTI)
        return;
    pthread_mutex_lock(&win_lock);
    /* A refinement window would add the new sequence's ranges to the old profile: replaced. */
    if ((win_phase == WINDOW_DONE || win_refine) && transit_get(&rc.reprofiles) < MAX_REPROFILES) {
        transit_add(&rc.reprofiles, 1);
        open_window(__atomic_load_n(&iter_seen, __ATOMIC_ACQUIRE) + 1, false);
        opened = 1;
    }
    pthread_mutex_unlock(&win_lock);
    if (!opened)
        return;
    if (transit_get(&rc.reprofiles) == MAX_REPROFILES)
        transit_warn("re-profiled %d times (%s); this is the last time", MAX_REPROFILES, why);
    else if (transit_g.cfg.verbose)
        transit_log("re-profiling: %s", why);
    wake_thread();
}

static void timeline_add(uint64_t iteration)
{
    uint64_t i = __atomic_load_n(&timeline_count, __ATOMIC_RELAXED);
    timeline_entry *e = &timeline[i % TIMELINE_ENTRIES];
    e->t = transit_now() - transit_g.start_unix;
    e->iteration = iteration;
    e->resident = transit_policy_resident();
    e->htod = transit_get(&rc.htod_bytes);
    e->dtoh = transit_get(&rc.dtoh_bytes);
    e->faults = transit_get(&rc.gpu_faults);
    e->evicted = transit_policy_evicted_bytes();
    e->bound_peak = transit_policy_iteration_ended();
    __atomic_store_n(&timeline_count, i + 1, __ATOMIC_RELEASE);
}

/* Notices a new iteration mark (from any source); the first thread to see it handles it. */
static void iteration_check(void)
{
    uint64_t now = transit_iteration_count();
    uint64_t seen = __atomic_load_n(&iter_seen, __ATOMIC_ACQUIRE);
    if (now == seen || !__atomic_compare_exchange_n(&iter_seen, &seen, now, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    uint32_t launches = __atomic_exchange_n(&iter_launches, 0, __ATOMIC_ACQ_REL);
    if (launches)
        __atomic_store_n(&prev_launches, launches, __ATOMIC_RELAXED);
    timeline_add(now);
    if (get_state() == TRANSIT_RECORDER_CUPTI)
        window_advance(seen, now, launches);
    wake_thread();
}

/* ---- CUPTI control (never called inside a CUPTI callback) ---- */

static const CUpti_CallbackId launch_cbids[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,           CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,         CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
};

static const CUpti_CallbackId runtime_launch_cbids[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_v13000, /* nvcc's <<<>>> stubs since CUDA 13 */
    CUPTI_RUNTIME_TRACE_CBID___cudaLaunchKernel_ptsz_v13000,
};

static void profiling_failed(int enable, const char *what, int id, CUptiResult r)
{
    static int warned;
    if (r != CUPTI_SUCCESS && !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        transit_warn("recorder: %s %s %d failed: %s", enable ? "enabling" : "disabling", what, id,
                     transit_cupti_error(r));
}

static void set_kind(const transit_cupti_api *api, int enable, CUpti_ActivityKind kind)
{
    CUptiResult r = enable ? api->ActivityEnable(kind) : api->ActivityDisable(kind);
    profiling_failed(enable, "activity kind", (int)kind, r);
}

/* External correlation records come before API records only: with external ids on, every
 * driver and runtime call gets a record (Kineto enables the same kinds), so they cost far more
 * than the kernel records and are on only when asked for or needed. */
static void set_external(const transit_cupti_api *api, int enable)
{
    set_kind(api, enable, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
    set_kind(api, enable, CUPTI_ACTIVITY_KIND_DRIVER);
    set_kind(api, enable, CUPTI_ACTIVITY_KIND_RUNTIME);
}

/* Enables or disables the callbacks `ids` of `domain`; returns how many calls took. */
static uint64_t set_callbacks(const transit_cupti_api *api, int enable, CUpti_CallbackDomain domain,
                              const CUpti_CallbackId *ids, size_t n)
{
    uint64_t took = 0;
    for (size_t i = 0; i < n; i++)
        took += api->EnableCallback(enable, subscriber, domain, ids[i]) == CUPTI_SUCCESS;
    return took;
}

/* The driver's launch callbacks, on or off (every launch, see steer_launch_callbacks). */
static void set_launch_callbacks(const transit_cupti_api *api, int enable)
{
    set_callbacks(api, enable, CUPTI_CB_DOMAIN_DRIVER_API, launch_cbids, sizeof launch_cbids / sizeof launch_cbids[0]);
}

/* The runtime launch callbacks give kernel records the runtime call's correlation id and push
 * external ids (see correlate()): both serve profiling only, so they are on only while it is, and
 * after it each runtime launch costs one CUPTI callback less. rc.runtime_callbacks: how many
 * enabling took. */
static void set_runtime_callbacks(const transit_cupti_api *api, int enable)
{
    uint64_t took = set_callbacks(api, enable, CUPTI_CB_DOMAIN_RUNTIME_API, runtime_launch_cbids,
                                  sizeof runtime_launch_cbids / sizeof runtime_launch_cbids[0]);
    if (enable)
        __atomic_store_n(&rc.runtime_callbacks, took, __ATOMIC_RELAXED);
}

/* control_lock held: kernel activity and the runtime launch callbacks (wp), external correlation
 * (we) and the unified memory counters (wu) on or off. */
static void set_activity_locked(const transit_cupti_api *api, int wp, int we, int wu)
{
    if (wp != have_profiling) {
        set_runtime_callbacks(api, wp);
        set_kind(api, wp, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
        __atomic_store_n(&have_profiling, wp, __ATOMIC_RELEASE);
    }
    if (we != have_external) {
        set_external(api, we);
        __atomic_store_n(&have_external, we, __ATOMIC_RELEASE);
    }
    if (wu != have_um) {
        CUptiResult r = wu ? api->ActivityEnable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER)
                           : api->ActivityDisable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
        if (r != CUPTI_SUCCESS) {
            transit_warn("recorder: %s unified memory counters failed: %s; no migration records",
                         wu ? "enabling" : "disabling", transit_cupti_error(r));
            um_ok = 0;
        }
        __atomic_store_n(&have_um, wu && r == CUPTI_SUCCESS, __ATOMIC_RELEASE);
        __atomic_store_n(&um_off_at, have_um ? 0 : TRANSIT_MAX(transit_iteration_count(), 1), __ATOMIC_RELEASE);
    }
}

/* Only while the recorder holds CUPTI: after it gave CUPTI up, the buffers are the other tool's
 * (and while detached, a call would attach CUPTI again). */
static void flush(uint32_t flag)
{
    const transit_cupti_api *api = transit_cupti(NULL);
    if (api && activity_ok && get_state() == TRANSIT_RECORDER_CUPTI && !__atomic_load_n(&detached, __ATOMIC_ACQUIRE)) {
        CUptiResult r = api->ActivityFlushAll(flag);
        if (r != CUPTI_SUCCESS) {
            static int warned;
            if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
                transit_warn("recorder: cuptiActivityFlushAll failed: %s", transit_cupti_error(r));
        }
    }
}

/* ---- detaching CUPTI while the recorder has nothing on ---- */

/* control_lock held: the recorder gives CUPTI up for the rest of the process (degraded), closing
 * any window; one warning. */
static void degrade_locked(const char *why)
{
    __atomic_store_n(&detach_due, 0, __ATOMIC_RELEASE);
    set_state(TRANSIT_RECORDER_DEGRADED, why);
    pthread_mutex_lock(&win_lock);
    __atomic_store_n(&win_phase, WINDOW_DONE, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&win_lock);
    transit_warn("recorder degraded: %s%s", why, transit_limit_mode() ? "; from here in limit mode " BOUND_ALONE : "");
}

static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data);
static bool register_activity(const transit_cupti_api *api);

/* control_lock held, before turning anything on: CUPTI attached, a pending detach called off.
 * False when CUPTI cannot be had again (the recorder is then degraded). */
static bool attached_locked(const transit_cupti_api *api)
{
    char why[sizeof reason];
    if (__atomic_load_n(&detach_due, __ATOMIC_ACQUIRE)) { /* off first: a launch meanwhile must not count */
        set_launch_callbacks(api, 0);
        __atomic_store_n(&detach_due, 0, __ATOMIC_RELEASE);
    }
    if (!__atomic_load_n(&detached, __ATOMIC_ACQUIRE))
        return true;
    CUptiResult r = api->Subscribe(&subscriber, on_callback, NULL);
    if (r != CUPTI_SUCCESS) { /* a tool subscribed past hooks_cupti.c (a dlsym lookup with a library's handle) */
        snprintf(why, sizeof why, "attaching CUPTI again at iteration %" PRIu64 " failed: %s; iteration marks only "
                 "from there", transit_iteration_count(), transit_cupti_error(r));
        degrade_locked(why);
        return false;
    }
    if (activity_ok && !register_activity(api))
        activity_ok = um_ok = 0;
    __atomic_store_n(&um_silent, um_ok, __ATOMIC_RELEASE);
    __atomic_store_n(&detached, 0, __ATOMIC_RELEASE);
    transit_add(&rc.cupti_reattaches, 1);
    if (transit_limit_mode())
        transit_warn("recorder: CUPTI attached again at iteration %" PRIu64 " (detached at %" PRIu64 "): its unified "
                     "memory counters may give no records from here; until one comes limit mode " BOUND_ALONE,
                     transit_iteration_count(), __atomic_load_n(&detached_at, __ATOMIC_ACQUIRE));
    return true;
}

/* CUPTI attached costs step time even with every callback and activity kind off (Kineto tears it
 * down after a profile for this: pytorch/pytorch#146604 measured 10-20 %). On an H200 the median
 * step after warm-up was 3-4 % over runs without the recorder while subscribed (recorder pairs
 * 7-10; run 9: 1.042, 1.018-1.068 over 17 pairs), 5 % after unsubscribing alone (run 12, 7
 * pairs), and 0.993 (0.973-1.013) after cuptiFinalize (runs 11, 14 and 15: 41 pairs). So once
 * the recorder has nothing on (the launch callbacks went off an iteration ago, no window, no
 * activity kind), far under L (transit_policy_far_under_limit), and TRANSIT_CUPTI_DETACH allows,
 * it delivers its last records and detaches CUPTI with cuptiFinalize, at the exit of the next
 * launch on an application thread, where NVIDIA's cupti_finalize sample calls it
 * (detach_at_exit). attached_locked attaches it again when something needs it (limit mode near
 * L); its unified memory counters then gave no records in the H200 runs (um_silent), hence far
 * under L only: a job that started there rarely grows to L. Recorder thread. */
static void steer_detach(void)
{
    const transit_cupti_api *api = transit_cupti(NULL);
    uint64_t off = __atomic_load_n(&launches_off_at, __ATOMIC_ACQUIRE);
    if (!api || !transit_g.cfg.cupti_detach || !off || transit_iteration_count() <= off ||
        !transit_policy_far_under_limit())
        return;
    pthread_mutex_lock(&control_lock);
    if (get_state() == TRANSIT_RECORDER_CUPTI && !detached && !detach_due && !detach_failed && !have_profiling &&
        !have_um && !have_external && !__atomic_load_n(&want_profiling, __ATOMIC_RELAXED) &&
        __atomic_load_n(&win_phase, __ATOMIC_ACQUIRE) == WINDOW_DONE) {
        flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); /* records since the last flush, before CUPTI's buffers go */
        __atomic_store_n(&detach_due, 1, __ATOMIC_RELEASE);
        set_launch_callbacks(api, 1);
    }
    pthread_mutex_unlock(&control_lock);
}

/* In a launch's exit callback (on_callback), while a detach is due. trylock: the recorder thread
 * may be inside a CUPTI call under control_lock, and the next launch comes within microseconds. */
static void detach_at_exit(void)
{
    const transit_cupti_api *api = transit_cupti(NULL);
    if (pthread_mutex_trylock(&control_lock))
        return;
    if (__atomic_load_n(&detach_due, __ATOMIC_ACQUIRE) && get_state() == TRANSIT_RECORDER_CUPTI) {
        CUptiResult r = api->Finalize();
        if (r == CUPTI_SUCCESS) {
            __atomic_store_n(&detached, 1, __ATOMIC_RELEASE);
            __atomic_store_n(&detached_at, TRANSIT_MAX(transit_iteration_count(), 1), __ATOMIC_RELEASE);
            transit_add(&rc.cupti_detaches, 1);
        } else { /* stays attached, as before */
            set_launch_callbacks(api, 0);
            detach_failed = 1;
            transit_warn("recorder: cuptiFinalize failed: %s; CUPTI stays attached", transit_cupti_error(r));
        }
        __atomic_store_n(&detach_due, 0, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&control_lock);
}

/* control_lock held, the recorder holding CUPTI: what the window asks for. */
static void apply_locked(const transit_cupti_api *api)
{
    int wp = __atomic_load_n(&want_profiling, __ATOMIC_RELAXED) &&
             (transit_policy_needs_kernel_times() || transit_profile_collecting());
    /* Limit mode's estimate needs the migration records only near L (transit_policy_near_limit):
     * further under it, allocations and frees alone keep it, at or over what the device holds. */
    int wu = (__atomic_load_n(&want_um, __ATOMIC_RELAXED) || transit_policy_near_limit()) && um_ok;
    if ((wp || wu) && !attached_locked(api))
        return;
    set_activity_locked(api, wp, wp && __atomic_load_n(&want_external, __ATOMIC_RELAXED), wu);
}

static void apply_activity(void)
{
    const transit_cupti_api *api = transit_cupti(NULL);
    if (!api || !activity_ok)
        return;
    pthread_mutex_lock(&control_lock);
    if (get_state() == TRANSIT_RECORDER_CUPTI) /* not given up meanwhile (transit_recorder_yield) */
        apply_locked(api);
    pthread_mutex_unlock(&control_lock);
}

/* After warm-up every launch still went through a callback (on an H200 its own time was 0.37-0.42
 * us while profiling, and 0.16-0.27 us after it), serving the period detector alone
 * once nothing acts at launches (transit_policy_needs_launches) and an explicit source (the API
 * or the Python hook) marks the iterations: the callbacks then go off, and "kernels" and the
 * detector's count stop there. When something needs them again (limit mode's managed
 * total came near L) they come back, and a new profile is taken: the launches' ordinals restart
 * at the next iteration. */
static void steer_launch_callbacks(void)
{
    const transit_cupti_api *api = transit_cupti(NULL);
    transit_iter_method m = transit_iteration_method();
    bool needed = transit_policy_needs_launches(), back = false;
    pthread_mutex_lock(&control_lock);
    bool held = get_state() == TRANSIT_RECORDER_CUPTI; /* not given up meanwhile (transit_recorder_yield) */
    if (held && !launches_off_at && !needed && (m == TRANSIT_ITER_API || m == TRANSIT_ITER_PYHOOK) &&
        __atomic_load_n(&win_phase, __ATOMIC_ACQUIRE) == WINDOW_DONE) {
        set_launch_callbacks(api, 0);
        __atomic_store_n(&launches_off_at, TRANSIT_MAX(transit_iteration_count(), 1), __ATOMIC_RELEASE);
    } else if (held && launches_off_at && needed && attached_locked(api)) {
        set_launch_callbacks(api, 1);
        __atomic_store_n(&launches_off_at, 0, __ATOMIC_RELEASE);
        transit_add(&rc.launch_callbacks_back, 1);
        back = true;
    }
    pthread_mutex_unlock(&control_lock);
    if (back)
        transit_recorder_reprofile("the launch callbacks are back: the managed total came near the limit");
}

/* Another tool takes CUPTI (hooks_cupti.c): torch.profiler's Kineto subscribes when a profile
 * starts and registers its own activity buffers, and CUPTI has one subscriber and one pair of
 * buffer callbacks per process. Without giving way, the tool's subscription would fail and its
 * buffer callbacks would silently take TRANSIT's records. So the recorder gives CUPTI up for the
 * rest of the process, as if the tool had held it from the start (degraded): its own kinds and
 * callbacks go off, the records still pending are delivered to it, it unsubscribes, and no window
 * stays open. A start in progress holds control_lock: the yield waits for it.
 * Not undone: an external correlation id a thread pushed (only with external ids on) stays on
 * that thread's stack, and the tool may see it in its records. */
void transit_recorder_yield(const char *call)
{
    const transit_cupti_api *api;
    char why[sizeof reason];
    if (owner_pid != getpid() || !(api = transit_cupti(NULL)))
        return;
    pthread_mutex_lock(&control_lock);
    if (get_state() != TRANSIT_RECORDER_CUPTI) {
        pthread_mutex_unlock(&control_lock);
        return;
    }
    bool attached = !__atomic_load_n(&detached, __ATOMIC_ACQUIRE); /* detached: nothing of ours is left in CUPTI */
    if (attached) {
        set_launch_callbacks(api, 0);
        if (activity_ok) {
            set_activity_locked(api, 0, 0, 0);
            flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); /* ours, to buffer_completed, before the tool's callbacks replace it */
        }
    }
    snprintf(why, sizeof why, "another tool called %s at iteration %" PRIu64 " (torch.profiler, Nsight): TRANSIT gave "
             "CUPTI up; iteration marks only from there", call, transit_iteration_count());
    degrade_locked(why); /* from here no flush or control call of the recorder's reaches CUPTI */
    if (attached)
        api->Unsubscribe(subscriber);
    pthread_mutex_unlock(&control_lock);
}

static void finish_window(void)
{
    pthread_mutex_lock(&win_lock);
    if (win_phase != WINDOW_DRAINING) {
        pthread_mutex_unlock(&win_lock);
        return;
    }
    __atomic_store_n(&win_phase, WINDOW_DONE, __ATOMIC_RELEASE);
    __atomic_store_n(&want_um, 0, __ATOMIC_RELAXED);
    /* Under win_lock (then prof_lock, the order open_window takes them), so that a re-profile
     * cannot open its window between this one's end and the profile it builds. */
    bool learning = transit_policy_profile_end(win_max_launches, win_refine || !win_untimed);
    /* While limit mode plans its evictions, kernels the profile did not name for a chunk fault it
     * back in after it was evicted (it was resident when they ran in the profiled iterations):
     * one-iteration windows add those to the profile, for as long as they still find much (on an
     * H200, 4 of them took prefetch from 54,560 faults per iteration to under 1,000). None while
     * nothing acts at launches: the launch callbacks can go off right away (each refinement kept
     * them 3 iterations longer). */
    if (learning && transit_policy_plans_at_launches() && transit_get(&rc.refine_windows) < MAX_REFINEMENTS) {
        transit_add(&rc.refine_windows, 1);
        open_window(__atomic_load_n(&iter_seen, __ATOMIC_ACQUIRE) + 1, true);
    }
    pthread_mutex_unlock(&win_lock);
    transit_profile_window_end(true); /* the first full window's records are all in */
}

/* ---- the recorder thread ---- */

/* Kernel records whose correlation id no launch callback saw (a launch path the driver callbacks
 * miss) need the external ids to get an ordinal: they stay on from then on. */
static void check_callback_misses(void)
{
    uint64_t misses = transit_get(&rc.corr_none);
    if (misses <= CORR_MISS_TOLERANCE || __atomic_load_n(&want_external, __ATOMIC_RELAXED))
        return;
    __atomic_store_n(&want_external, 1, __ATOMIC_RELAXED);
    transit_warn("recorder: %" PRIu64 " kernel records carry a correlation id no launch callback saw; external "
                 "correlation ids on from now (an API record per CUDA call while profiling)", misses);
}

/* A window that took no kernel times is taken again once a profile needs them (the managed total
 * passed half of L, or of the device in physical mode), while the launch callbacks still count the
 * ordinals; after they went off, their coming back near L opens the new window
 * (steer_launch_callbacks). */
static void retake_untimed_profile(void)
{
    if (__atomic_load_n(&win_untimed, __ATOMIC_ACQUIRE) && !__atomic_load_n(&launches_off_at, __ATOMIC_ACQUIRE) &&
        __atomic_load_n(&win_phase, __ATOMIC_ACQUIRE) == WINDOW_DONE && transit_policy_needs_kernel_times())
        transit_recorder_reprofile("the managed total passed L/2 (in physical mode, half the device's memory): the "
                                   "profile places migrations by kernel times, which the last window did not take");
}

static void recorder_step(void)
{
    iteration_check();
    if (get_state() != TRANSIT_RECORDER_CUPTI)
        return;
    check_callback_misses();
    apply_activity();
    steer_launch_callbacks();
    int due = __atomic_exchange_n(&finalize_due, 0, __ATOMIC_ACQ_REL);
    uint64_t period_ns = (transit_limit_mode() ? FLUSH_PERIOD_LIMIT_MS : FLUSH_PERIOD_MS) * 1000000ull;
    uint64_t t = transit_monotonic_ns();
    if (due || ((have_profiling || have_um) && t - last_flush >= period_ns)) {
        /* The profile is built from the window's records: the buffer still filling holds some. */
        flush(due && transit_profile_collecting() ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
        last_flush = t;
    }
    if (due) {
        finish_window();
        apply_activity(); /* physical mode: the migration counters go off now */
    }
    retake_untimed_profile();
    steer_detach();
}

/* Runs step every THREAD_TICK_MS (sooner when woken) until stop_threads(). */
static void run_loop(void (*step)(void))
{
    pthread_mutex_lock(&thread_lock);
    while (!thread_stop) {
        struct timespec deadline;
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_nsec += THREAD_TICK_MS * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&thread_cond, &thread_lock, &deadline);
        if (thread_stop)
            break;
        pthread_mutex_unlock(&thread_lock);
        step();
        pthread_mutex_lock(&thread_lock);
    }
    threads_running--;
    pthread_cond_broadcast(&thread_done);
    pthread_mutex_unlock(&thread_lock);
}

static void *recorder_main(void *arg)
{
    (void)arg;
    run_loop(recorder_step);
    return NULL;
}

static void *tick_main(void *arg)
{
    (void)arg;
    run_loop(transit_policy_tick);
    return NULL;
}

static void init_thread_sync(void)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&thread_cond, &ca);
    pthread_cond_init(&thread_done, &ca);
    pthread_condattr_destroy(&ca);
}

static void start_thread(const char *name, void *(*main_fn)(void *), const char *lost)
{
    pthread_t t;
    sigset_t all, old;
    pthread_mutex_lock(&thread_lock);
    threads_running++;
    pthread_mutex_unlock(&thread_lock);
    sigfillset(&all); /* the application's signals (SIGINT, SIGTERM) never land on these threads */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&t, NULL, main_fn, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err) {
        pthread_mutex_lock(&thread_lock);
        threads_running--;
        pthread_mutex_unlock(&thread_lock);
        transit_warn("recorder: cannot start its %s thread (error %d): %s", name, err, lost);
        return;
    }
    pthread_setname_np(t, name);
    pthread_detach(t);
}

static void start_threads(void)
{
    thread_stop = 0;
    start_thread("transit-rec", recorder_main, "no CUPTI flushes, no iteration polling");
    start_thread("transit-tick", tick_main, "no policy ticks (limit mode evicts only at launches)");
}

static void stop_threads(void)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += EXIT_WAIT_MS / 1000;
    transit_policy_stop(); /* a tick's evictions can run for seconds: they stop at their next batch */
    pthread_mutex_lock(&thread_lock);
    thread_stop = 1;
    pthread_cond_broadcast(&thread_cond);
    while (threads_running)
        if (pthread_cond_timedwait(&thread_done, &thread_lock, &deadline))
            break; /* never hang the exit: the threads are detached */
    pthread_mutex_unlock(&thread_lock);
}

/* Runs before the stats file is written (registered after it, atexit runs in reverse). */
static void at_exit(void)
{
    if (owner_pid != getpid())
        return;
    stop_threads();
    iteration_check(); /* a last mark the thread had no time to see */
    flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    transit_profile_window_end(false); /* a run shorter than the window */
}

/* ---- activity records ---- */

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = NULL;
    *size = 0;
    *max_records = 0;
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < BUFFER_COUNT; i++) {
        if (buffer_busy[i])
            continue;
        if (!buffers[i]) {
            void *p = NULL;
            if (posix_memalign(&p, BUFFER_ALIGN, BUFFER_BYTES))
                break;
            buffers[i] = p;
        }
        buffer_busy[i] = 1;
        *buffer = buffers[i];
        *size = BUFFER_BYTES;
        break;
    }
    pthread_mutex_unlock(&pool_lock);
    if (!*buffer) /* CUPTI then drops records and counts them */
        transit_add(&rc.buffers_refused, 1);
}

static void release_buffer(uint8_t *buffer)
{
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < BUFFER_COUNT; i++)
        if (buffers[i] == buffer)
            buffer_busy[i] = 0;
    pthread_mutex_unlock(&pool_lock);
}

static uint32_t window_ordinal(uint64_t iteration, uint32_t ordinal)
{
    return in_window(iteration) ? ordinal : TRANSIT_ATTRIB_NO_ORDINAL;
}

static void corr_store(uint64_t *table, uint32_t corr, uint32_t ordinal)
{
    __atomic_store_n(&table[corr & (CORR_TABLE_SIZE - 1)], (uint64_t)corr << 32 | ordinal, __ATOMIC_RELAXED);
}

/* 1 and *ordinal when table holds corr. */
static int corr_find(const uint64_t *table, uint32_t corr, uint32_t *ordinal)
{
    uint64_t e = __atomic_load_n(&table[corr & (CORR_TABLE_SIZE - 1)], __ATOMIC_RELAXED);
    if (corr == 0 || (uint32_t)(e >> 32) != corr)
        return 0;
    *ordinal = (uint32_t)e;
    return 1;
}

static void kernel_record(uint32_t corr, uint64_t start, uint64_t end)
{
    uint32_t from_cb = 0, from_ext = 0, ordinal = TRANSIT_ATTRIB_NO_ORDINAL;
    transit_add(&rc.kernel_records, 1);
    if (!start || end < start) /* no timing (CUPTI lacked device memory, or a forced flush) */
        return;
    int cb = corr_find(corr_from_callback, corr, &from_cb);
    int ext = corr_find(corr_from_external, corr, &from_ext);
    if (cb)
        ordinal = from_cb;
    else if (ext)
        ordinal = from_ext;
    transit_add(cb ? &rc.corr_callback : ext ? &rc.corr_external : &rc.corr_none, 1);
    if (cb && ext)
        transit_add(from_cb == from_ext ? &rc.corr_cross_checked : &rc.corr_disagree, 1);
    transit_profile_kernel(corr, start, end);
    transit_policy_profile_kernel(start, end, ordinal);
}

static void unified_memory_record(const CUpti_ActivityUnifiedMemoryCounter3 *u)
{
    if (__atomic_load_n(&um_silent, __ATOMIC_RELAXED))
        __atomic_store_n(&um_silent, 0, __ATOMIC_RELEASE);
    switch (u->counterKind) {
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD:
        transit_add(&rc.htod_bytes, u->value);
        transit_add(&rc.htod_count, 1);
        transit_hist_add(&htod_hist, u->value);
        transit_policy_htod(u->start, u->address, u->value);
        transit_profile_event(PROFILE_HTOD, u->start, u->address, u->value);
        break;
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH:
        transit_add(&rc.dtoh_bytes, u->value);
        transit_add(&rc.dtoh_count, 1);
        transit_hist_add(&dtoh_hist, u->value);
        /* TRANSIT's own evictions are prefetches (cause USER); the driver's are not ours. */
        if (u->flags == CUPTI_ACTIVITY_UNIFIED_MEMORY_MIGRATION_CAUSE_EVICTION)
            transit_add(&rc.unrequested_bytes, u->value);
        transit_policy_dtoh(u->address, u->value);
        transit_profile_event(PROFILE_DTOH, u->start, u->address, u->value);
        break;
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT:
        transit_add(&rc.gpu_faults, u->value ? u->value : 1); /* value: fault groups for the page */
        transit_policy_gpu_fault(u->address);
        transit_profile_event(PROFILE_FAULT, u->start, u->address, u->value ? u->value : 1);
        break;
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING:
        transit_add(&rc.thrashing, 1);
        break;
    case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP:
        transit_add(&rc.remote_map_bytes, u->value);
        transit_profile_event(PROFILE_REMOTE, u->start, u->address, u->value);
        break;
    default:
        break;
    }
}

static void record(const CUpti_Activity *a)
{
    switch (a->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)a;
        kernel_record(k->correlationId, k->start, k->end);
        break;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const CUpti_ActivityExternalCorrelation *e = (const CUpti_ActivityExternalCorrelation *)a;
        if (e->externalKind == EXTERNAL_KIND)
            corr_store(corr_from_external, e->correlationId,
                       window_ordinal(e->externalId >> 32, (uint32_t)e->externalId));
        break;
    }
    case CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER:
        unified_memory_record((const CUpti_ActivityUnifiedMemoryCounter3 *)a);
        break;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
        transit_add(&rc.api_records, 1);
        break;
    default:
        break;
    }
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                                      size_t valid)
{
    (void)size;
    uint64_t t0 = transit_monotonic_ns();
    const transit_cupti_api *api = transit_cupti(NULL);
    size_t dropped = 0;
    if (api && buffer && valid) {
        CUpti_Activity *a = NULL;
        pthread_mutex_lock(&records_lock);
        while (api->ActivityGetNextRecord(buffer, valid, &a) == CUPTI_SUCCESS)
            record(a);
        pthread_mutex_unlock(&records_lock);
    }
    if (api && api->ActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS)
        transit_add(&rc.dropped, dropped);
    if (buffer)
        release_buffer(buffer);
    uint64_t ns = transit_monotonic_ns() - t0;
    transit_add(&rc.overhead_ns, ns);
    transit_add(&rc.records_ns, ns);
}

/* ---- launch callbacks ---- */

/* The launch's function and stream; 0 for a callback that is not a kernel launch. */
/* What a kernel launch's parameters say: its function, stream and arguments (the argument
 * pointers, or the packed buffer in `extra`). */
typedef struct launch_args {
    CUfunction f;
    CUstream stream;
    void **params, **extra;
} launch_args;

/* 0 for a callback that is not a kernel launch. */
static int launch_params(CUpti_CallbackId cbid, const void *params, launch_args *a)
{
    int ptsz = 0;
    if (!params)
        return 0;
    switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
        ptsz = 1;
        __attribute__((fallthrough)); /* the same parameters */
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel: {
        const cuLaunchKernel_params *p = params;
        *a = (launch_args){p->f, p->hStream, p->kernelParams, p->extra};
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
        ptsz = 1;
        __attribute__((fallthrough));
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel: {
        const cuLaunchCooperativeKernel_params *p = params;
        *a = (launch_args){p->f, p->hStream, p->kernelParams, NULL};
        break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
        ptsz = 1;
        __attribute__((fallthrough));
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx: {
        const cuLaunchKernelEx_params *p = params;
        *a = (launch_args){p->f, p->config ? p->config->hStream : NULL, p->kernelParams, p->extra};
        break;
    }
    default:
        return 0;
    }
    /* A _ptsz launch on stream 0 means the calling thread's default stream. */
    if (ptsz && !a->stream)
        a->stream = CU_STREAM_PER_THREAD;
    return 1;
}

/* period_lock held. */
static uint64_t kernel_hash(const char *symbol, CUfunction f)
{
    if (!symbol)
        return (uint64_t)(uintptr_t)f;
    if (!f)
        return transit_period_hash_name(symbol);
    size_t slot = ((uintptr_t)f >> 4) % NAME_CACHE_SLOTS;
    if (name_cache[slot].f != f || name_cache[slot].symbol != symbol) {
        name_cache[slot].f = f;
        name_cache[slot].symbol = symbol;
        name_cache[slot].hash = transit_period_hash_name(symbol);
    }
    return name_cache[slot].hash;
}

static void feed_period(const char *symbol, CUfunction f)
{
    uint32_t ordinal;
    unsigned flags;
    if (!period)
        return;
    pthread_mutex_lock(&period_lock);
    flags = transit_period_feed(period, kernel_hash(symbol, f), &ordinal);
    pthread_mutex_unlock(&period_lock);
    if (flags & TRANSIT_PERIOD_BEGIN)
        transit_iteration_mark(TRANSIT_ITER_KERNEL_PERIOD);
    /* Sub-step periods (layers) come and go while the detector locks on; only when it is the
     * iteration source does a change mean the iterations themselves changed. */
    if ((flags & TRANSIT_PERIOD_CHANGED) && transit_policy_uses_profile() &&
        transit_iteration_method() == TRANSIT_ITER_KERNEL_PERIOD)
        transit_recorder_reprofile("the kernel sequence changed");
}

/* Puts (iteration << 32 | ordinal) on CUPTI's per-thread external-id stack, replacing the
 * previous launch's, when external ids are on. CUPTI labels an API record with the id on the stack
 * when the call begins (the H200 runs showed runtime launches labelled with the previous launch's
 * id when the push came only in the driver callback inside them), so a runtime launch pushes the
 * label its driver launch is about to get, and the driver callback pushes it again. */
static void push_external(uint64_t iteration, uint32_t ordinal)
{
    int on = __atomic_load_n(&have_external, __ATOMIC_ACQUIRE);
    if (!corr_pushed && !on) /* the usual launch: nothing to pop, nothing to push */
        return;
    const transit_cupti_api *api = transit_cupti(NULL);
    if (corr_pushed) {
        api->ActivityPopExternalCorrelationId(EXTERNAL_KIND, NULL);
        corr_pushed = 0;
    }
    if (on)
        corr_pushed = api->ActivityPushExternalCorrelationId(EXTERNAL_KIND, iteration << 32 | ordinal) ==
                      CUPTI_SUCCESS;
}

/* Labels the launch for the activity records: the callback's correlation id, and the enclosing
 * runtime call's, which the kernel record may carry instead. Callback ids alone placed every
 * kernel record in the H200 runs; external ids, with the API records they need, are the
 * fallback (check_callback_misses). */
static void correlate(const transit_launch *l, uint32_t corr)
{
    push_external(l->iteration, l->ordinal);
    if (!__atomic_load_n(&have_profiling, __ATOMIC_ACQUIRE))
        return;
    uint32_t ordinal = window_ordinal(l->iteration, l->ordinal);
    corr_store(corr_from_callback, corr, ordinal);
    if (runtime_corr)
        corr_store(corr_from_callback, runtime_corr, ordinal);
}

/* Runtime launches are not launches here (their driver call is): only their correlation id is
 * kept for the driver callback nested inside, and its label pushed ahead of it. */
static void runtime_launch(const CUpti_CallbackData *cb)
{
    if (cb->callbackSite == CUPTI_API_ENTER) {
        runtime_corr = cb->correlationId;
        runtime_saw_driver = 0;
        if (__atomic_load_n(&have_external, __ATOMIC_ACQUIRE)) {
            iteration_check();
            push_external(__atomic_load_n(&iter_seen, __ATOMIC_ACQUIRE),
                          __atomic_load_n(&iter_launches, __ATOMIC_ACQUIRE));
        }
        return;
    }
    if (!runtime_saw_driver) /* the driver callback did not fire inside: launches are missed */
        transit_add(&rc.runtime_without_driver, 1);
    runtime_corr = 0;
}

/* A callback's own time, apart while profiling: the cost after warm-up is what stays. */
static void count_overhead(uint64_t ns, bool launch)
{
    transit_add(&rc.overhead_ns, ns);
    if (!__atomic_load_n(&have_profiling, __ATOMIC_ACQUIRE))
        return;
    transit_add(&rc.overhead_profiling_ns, ns);
    if (launch)
        transit_add(&rc.launches_profiling, 1);
}

static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void *data)
{
    const CUpti_CallbackData *cb = data;
    launch_args args = {0};
    (void)userdata;
    if (!cb || get_state() != TRANSIT_RECORDER_CUPTI)
        return;
    if (__atomic_load_n(&detach_due, __ATOMIC_ACQUIRE)) { /* the launch callbacks are on for this alone */
        if (cb->callbackSite == CUPTI_API_EXIT)
            detach_at_exit();
        return;
    }
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
        uint64_t t0 = transit_monotonic_ns();
        runtime_launch(cb);
        count_overhead(transit_monotonic_ns() - t0, false);
        return;
    }
    if (domain != CUPTI_CB_DOMAIN_DRIVER_API || cb->callbackSite != CUPTI_API_ENTER ||
        !launch_params(cbid, cb->functionParams, &args))
        return;
    uint64_t t0 = transit_monotonic_ns();
    runtime_saw_driver = 1;
    transit_add(&rc.launches, 1);
    feed_period(cb->symbolName, args.f); /* may mark an iteration that begins with this launch */
    iteration_check();
    transit_launch l = {
        .stream = args.stream,
        .iteration = __atomic_load_n(&iter_seen, __ATOMIC_ACQUIRE),
        .ordinal = __atomic_fetch_add(&iter_launches, 1, __ATOMIC_ACQ_REL),
    };
    correlate(&l, cb->correlationId);
    transit_profile_launch(l.iteration, l.ordinal, cb->correlationId, runtime_corr, cb->symbolName, args.f, args.params,
                           args.extra);
    uint32_t profiled = __atomic_load_n(&win_max_launches, __ATOMIC_RELAXED);
    if (transit_policy_uses_profile() && profiled &&
        __atomic_load_n(&win_phase, __ATOMIC_RELAXED) == WINDOW_DONE && l.ordinal == profiled * REPROFILE_LAUNCH_FACTOR)
        transit_recorder_reprofile("an iteration ran far more kernels than profiled");
    transit_policy_launch(&l);
    count_overhead(transit_monotonic_ns() - t0, true);
}

/* ---- start ---- */

static void configure_unified_memory(const transit_cupti_api *api)
{
    static const CUpti_ActivityUnifiedMemoryCounterKind kinds[] = {
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_THRASHING,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_REMOTE_MAP,
    };
    enum { ALL = sizeof kinds / sizeof kinds[0], MIGRATIONS_ONLY = 2 };
    CUpti_ActivityUnifiedMemoryCounterConfig config[ALL];
    for (uint32_t i = 0; i < ALL; i++)
        config[i] = (CUpti_ActivityUnifiedMemoryCounterConfig){
            .scope = CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_ALL_DEVICES, .kind = kinds[i], .enable = 1};
    CUptiResult r = api->ActivityConfigureUnifiedMemoryCounter(config, ALL);
    if (r != CUPTI_SUCCESS) {
        CUptiResult r2 = api->ActivityConfigureUnifiedMemoryCounter(config, MIGRATIONS_ONLY);
        transit_warn("recorder: unified memory counters: %s%s", transit_cupti_error(r),
                     r2 == CUPTI_SUCCESS ? "; migrations only (no faults, thrashing, remote maps)" : "; none");
        r = r2;
    }
    um_ok = r == CUPTI_SUCCESS;
}

/* The buffer callbacks and the unified memory counters (again after a detach, attached_locked). */
static bool register_activity(const transit_cupti_api *api)
{
    CUptiResult r = api->ActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) {
        transit_warn("recorder: cuptiActivityRegisterCallbacks failed: %s; launch callbacks only",
                     transit_cupti_error(r));
        return false;
    }
    configure_unified_memory(api);
    return true;
}

/* control_lock held (transit_recorder_start). */
static void start_cupti(void)
{
    const char *why = NULL;
    char msg[sizeof reason];
    const transit_cupti_api *api;
    CUptiResult r;

    if (!transit_g.cfg.recorder) {
        set_state(TRANSIT_RECORDER_OFF, "TRANSIT_RECORDER is off");
        return;
    }
    if (!(api = transit_cupti(&why))) {
        set_state(TRANSIT_RECORDER_OFF, why);
        transit_warn("recorder off: %s", why);
        return;
    }
    r = api->Subscribe(&subscriber, on_callback, NULL);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
        set_state(TRANSIT_RECORDER_DEGRADED, "another CUPTI subscriber is active (torch.profiler, Nsight): no "
                                             "launch callbacks or activity records, iteration marks only");
        transit_warn("recorder degraded: CUPTI is taken by another subscriber; no migration statistics, prefetch "
                     "acts as base, advise applies after warm-up by iteration marks");
        return;
    }
    if (r != CUPTI_SUCCESS) {
        snprintf(msg, sizeof msg, "cuptiSubscribe failed: %s", transit_cupti_error(r));
        set_state(TRANSIT_RECORDER_OFF, msg);
        transit_warn("recorder off: %s", msg);
        return;
    }
    for (size_t i = 0; i < sizeof launch_cbids / sizeof launch_cbids[0]; i++) {
        r = api->EnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, launch_cbids[i]);
        if (r != CUPTI_SUCCESS) { /* leave CUPTI to other tools */
            snprintf(msg, sizeof msg, "cuptiEnableCallback(%u) failed: %s", (unsigned)launch_cbids[i],
                     transit_cupti_error(r));
            api->Unsubscribe(subscriber);
            set_state(TRANSIT_RECORDER_OFF, msg);
            transit_warn("recorder off: %s", msg);
            return;
        }
    }
    activity_ok = register_activity(api);
    if (!(period = transit_period_create(0)))
        transit_warn("recorder: out of memory for the kernel-period detector; no automatic iteration marks");
    __atomic_store_n(&want_external, transit_g.cfg.external_correlation, __ATOMIC_RELAXED);
    pthread_mutex_lock(&win_lock);
    open_window(1, false); /* iteration 0 runs with activity on, but its kernels carry no ordinal */
    pthread_mutex_unlock(&win_lock);
    set_state(TRANSIT_RECORDER_CUPTI, NULL);
    if (activity_ok)
        apply_locked(api);
}

void transit_recorder_start(void)
{
    static int at_exit_registered; /* inherited across fork, like the registration itself */
    int expected = 0;
    if (__atomic_load_n(&start_claimed, __ATOMIC_ACQUIRE) ||
        !__atomic_compare_exchange_n(&start_claimed, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    owner_pid = getpid();
    init_thread_sync(); /* before CUPTI: launch callbacks signal thread_cond from then on */
    pthread_mutex_lock(&control_lock); /* a tool taking CUPTI meanwhile waits (transit_recorder_yield) */
    start_cupti();
    pthread_mutex_unlock(&control_lock);
    if (transit_limit_mode() && !transit_recorder_sees_migrations())
        transit_warn("limit mode without migration records: " BOUND_ALONE
                     "; no residency estimate (resident bytes read min(managed, limit))");
    start_threads();
    if (!at_exit_registered) {
        at_exit_registered = 1;
        atexit(at_exit);
    }
}

void transit_recorder_after_fork(void)
{
    pthread_mutex_init(&win_lock, NULL);
    pthread_mutex_init(&control_lock, NULL);
    pthread_mutex_init(&period_lock, NULL);
    memset(name_cache, 0, sizeof name_cache); /* the child's modules are its own */
    pthread_mutex_init(&pool_lock, NULL);
    pthread_mutex_init(&records_lock, NULL);
    pthread_mutex_init(&thread_lock, NULL);
    init_thread_sync();
    threads_running = thread_stop = 0;
    last_flush = 0;
    memset(&rc, 0, sizeof rc);
    memset(&htod_hist, 0, sizeof htod_hist);
    memset(&dtoh_hist, 0, sizeof dtoh_hist);
    rec_state = TRANSIT_RECORDER_OFF;
    start_claimed = started = 0;
    reason[0] = '\0';
    owner_pid = 0;
    subscriber = NULL;
    activity_ok = um_ok = 0;
    iter_seen = 0;
    iter_launches = prev_launches = 0;
    win_phase = WINDOW_DONE;
    win_refine = win_untimed = 0;
    win_begin = win_end = drain_until = 0;
    win_max_launches = 0;
    launches_off_at = um_off_at = 0;
    detach_due = detached = detach_failed = um_silent = 0;
    detached_at = 0;
    finalize_due = want_profiling = want_um = want_external = have_profiling = have_um = have_external = 0;
    corr_pushed = 0;
    runtime_corr = 0;
    transit_period_destroy(period);
    period = NULL;
    memset(buffer_busy, 0, sizeof buffer_busy); /* the buffers themselves are reused */
    timeline_count = 0;
}

/* ---- queries and statistics ---- */

uint64_t transit_recorder_htod_bytes(void)
{
    return transit_get(&rc.htod_bytes);
}

uint64_t transit_recorder_dtoh_bytes(void)
{
    return transit_get(&rc.dtoh_bytes);
}

transit_recorder_state transit_recorder_get_state(void)
{
    return (transit_recorder_state)get_state();
}

bool transit_recorder_sees_launches(void)
{
    return get_state() == TRANSIT_RECORDER_CUPTI && !__atomic_load_n(&launches_off_at, __ATOMIC_ACQUIRE);
}

bool transit_recorder_sees_migrations(void)
{
    return get_state() == TRANSIT_RECORDER_CUPTI && __atomic_load_n(&um_ok, __ATOMIC_RELAXED) &&
           !__atomic_load_n(&um_silent, __ATOMIC_ACQUIRE);
}

uint32_t transit_recorder_prev_iteration_launches(void)
{
    return __atomic_load_n(&prev_launches, __ATOMIC_RELAXED);
}

uint64_t transit_recorder_profiled_iterations(void)
{
    return transit_get(&rc.profiled_iterations);
}

uint64_t transit_recorder_reprofiles(void)
{
    return transit_get(&rc.reprofiles);
}

static void direction_json(jbuf *b, const char *name, uint64_t bytes, uint64_t count, const transit_hist *h)
{
    char counts[256], sizes[256];
    if (transit_hist_json(h, TRANSIT_HIST_COUNT, counts, sizeof counts) < 0)
        snprintf(counts, sizeof counts, "null");
    if (transit_hist_json(h, TRANSIT_HIST_BYTES, sizes, sizeof sizes) < 0)
        snprintf(sizes, sizeof sizes, "null");
    jb_printf(b,
              "\"%s\": {\"bytes\": %" PRIu64 ", \"count\": %" PRIu64 ", \"histogram\": %s, \"histogram_bytes\": %s}, ",
              name, bytes, count, counts, sizes);
}

void transit_recorder_migrations_json(jbuf *b)
{
    jb_printf(b, "\"migrations\": {");
    direction_json(b, "htod", transit_get(&rc.htod_bytes), transit_get(&rc.htod_count), &htod_hist);
    direction_json(b, "dtoh", transit_get(&rc.dtoh_bytes), transit_get(&rc.dtoh_count), &dtoh_hist);
    jb_printf(b, "\"unrequested_bytes\": %" PRIu64 "}, ", transit_get(&rc.unrequested_bytes));
    jb_printf(b, "\"faults\": {\"gpu_page_faults\": %" PRIu64 ", \"thrashing\": %" PRIu64
                 ", \"remote_map_bytes\": %" PRIu64 "}, ",
              transit_get(&rc.gpu_faults), transit_get(&rc.thrashing), transit_get(&rc.remote_map_bytes));
}

void transit_recorder_state_json(jbuf *b)
{
    static const char *const names[] = {"off", "degraded", "cupti"};
    int s = get_state();
    const transit_period *p = period;
    jb_printf(b, "\"recorder\": {\"state\": \"%s\", \"reason\": ", names[s]);
    if (!__atomic_load_n(&started, __ATOMIC_ACQUIRE))
        jb_str(b, "not started: no managed allocation yet (the recorder starts at the first one)");
    else
        jb_str(b, reason[0] ? reason : NULL);
    jb_printf(b,
              ", \"kernels\": %" PRIu64 ", \"kernel_records\": %" PRIu64 ", \"api_records\": %" PRIu64
              ", \"dropped_records\": %" PRIu64 ", \"buffers_refused\": %" PRIu64 ", \"overhead_s\": %.6f"
              ", \"records_s\": %.6f, \"kernels_profiling\": %" PRIu64 ", \"overhead_profiling_s\": %.6f"
              ", \"profiling\": %s, \"refining\": %s, \"windows_without_kernel_times\": %" PRIu64
              ", \"unified_memory_counters\": %s"
              ", \"unified_memory_counters_off_at_iteration\": %" PRIu64
              ", \"launch_callbacks_off_at_iteration\": %" PRIu64 ", \"launch_callbacks_back\": %" PRIu64
              ", \"cupti_detached\": %s, \"cupti_detached_at_iteration\": %" PRIu64 ", \"cupti_detaches\": %" PRIu64
              ", \"cupti_reattaches\": %" PRIu64 ", \"unified_memory_silent_since_reattach\": %s",
              transit_get(&rc.launches), transit_get(&rc.kernel_records), transit_get(&rc.api_records),
              transit_get(&rc.dropped), transit_get(&rc.buffers_refused),
              (double)transit_get(&rc.overhead_ns) * 1e-9, (double)transit_get(&rc.records_ns) * 1e-9,
              transit_get(&rc.launches_profiling),
              (double)transit_get(&rc.overhead_profiling_ns) * 1e-9, have_profiling ? "true" : "false",
              __atomic_load_n(&win_refine, __ATOMIC_RELAXED) && __atomic_load_n(&win_phase, __ATOMIC_RELAXED) != WINDOW_DONE
                  ? "true"
                  : "false",
              transit_get(&rc.untimed_windows), have_um ? "true" : "false",
              __atomic_load_n(&um_off_at, __ATOMIC_ACQUIRE),
              __atomic_load_n(&launches_off_at, __ATOMIC_ACQUIRE),
              transit_get(&rc.launch_callbacks_back), __atomic_load_n(&detached, __ATOMIC_ACQUIRE) ? "true" : "false",
              __atomic_load_n(&detached_at, __ATOMIC_ACQUIRE), transit_get(&rc.cupti_detaches),
              transit_get(&rc.cupti_reattaches), __atomic_load_n(&um_silent, __ATOMIC_ACQUIRE) ? "true" : "false");
    jb_printf(b,
              ", \"correlation\": {\"external_ids\": \"%s\", \"callback\": %" PRIu64 ", \"external\": %" PRIu64
              ", \"cross_checked\": %" PRIu64 ", \"disagree\": %" PRIu64 ", \"none\": %" PRIu64
              ", \"runtime_callbacks\": %" PRIu64 ", \"runtime_without_driver\": %" PRIu64 "}",
              !__atomic_load_n(&want_external, __ATOMIC_RELAXED)       ? "off"
              : transit_g.cfg.external_correlation                    ? "on: TRANSIT_EXTERNAL_CORRELATION"
                                                                       : "on: callback ids missed",
              transit_get(&rc.corr_callback), transit_get(&rc.corr_external), transit_get(&rc.corr_cross_checked),
              transit_get(&rc.corr_disagree), transit_get(&rc.corr_none), transit_get(&rc.runtime_callbacks),
              transit_get(&rc.runtime_without_driver));
    jb_printf(b, ", \"period\": {\"length\": %u, \"iterations\": %" PRIu64 ", \"changes\": %" PRIu64 "}}, ",
              p ? transit_period_length(p) : 0, p ? transit_period_iterations(p) : 0,
              p ? transit_period_changes(p) : 0);

    uint64_t n = __atomic_load_n(&timeline_count, __ATOMIC_ACQUIRE);
    jb_printf(b, "\"timeline\": [");
    for (uint64_t i = n > TIMELINE_ENTRIES ? n - TIMELINE_ENTRIES : 0; i < n; i++) {
        const timeline_entry *e = &timeline[i % TIMELINE_ENTRIES];
        jb_printf(b,
                  "{\"t\": %.3f, \"iteration\": %" PRIu64 ", \"resident_bytes\": %" PRIu64 ", \"htod_bytes\": %" PRIu64
                  ", \"dtoh_bytes\": %" PRIu64 ", \"gpu_page_faults\": %" PRIu64 ", \"evicted_bytes\": %" PRIu64
                  ", \"device_bound_peak_bytes\": ",
                  e->t, e->iteration, e->resident, e->htod, e->dtoh, e->faults, e->evicted);
        if (e->bound_peak == UINT64_MAX)
            jb_printf(b, "null}, ");
        else
            jb_printf(b, "%" PRIu64 "}, ", e->bound_peak);
    }
    jb_trim_comma(b);
    jb_printf(b, "], ");
}
