/* session.c - the recorder's hold on CUPTI: subscribing, what is enabled, detaching while nothing
 * is on and attaching again, giving CUPTI up to another tool (see recorder.h). Every control call
 * is made under control_lock, from the recorder's thread (or the start, or a yielding tool). */
#include "iteration.h"
#include "recorder_int.h"
#include "state.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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
        took += api->EnableCallback(enable, rec.subscriber, domain, ids[i]) == CUPTI_SUCCESS;
    return took;
}

/* The driver's launch callbacks, on or off (every launch, see steer_launch_callbacks). */
void rec_set_launch_callbacks(const transit_cupti_api *api, int enable)
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
        __atomic_store_n(&rec.n.runtime_callbacks, took, __ATOMIC_RELAXED);
}

/* control_lock held: kernel activity and the runtime launch callbacks (wp), external correlation
 * (we) and the unified memory counters (wu) on or off. */
void rec_set_activity_locked(const transit_cupti_api *api, int wp, int we, int wu)
{
    if (wp != rec.have_profiling) {
        set_runtime_callbacks(api, wp);
        set_kind(api, wp, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
        __atomic_store_n(&rec.have_profiling, wp, __ATOMIC_RELEASE);
    }
    if (we != rec.have_external) {
        set_external(api, we);
        __atomic_store_n(&rec.have_external, we, __ATOMIC_RELEASE);
    }
    if (wu != rec.have_um) {
        CUptiResult r = wu ? api->ActivityEnable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER)
                           : api->ActivityDisable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
        if (r != CUPTI_SUCCESS) {
            transit_warn("recorder: %s unified memory counters failed: %s; no migration records",
                         wu ? "enabling" : "disabling", transit_cupti_error(r));
            rec.um_ok = 0;
        }
        __atomic_store_n(&rec.have_um, wu && r == CUPTI_SUCCESS, __ATOMIC_RELEASE);
        __atomic_store_n(&rec.um_off_at, rec.have_um ? 0 : TRANSIT_MAX(transit_iteration_count(), 1), __ATOMIC_RELEASE);
    }
}

/* Only while the recorder holds CUPTI: after it gave CUPTI up, the buffers are the other tool's
 * (and while detached, a call would attach CUPTI again). */
void rec_flush(uint32_t flag)
{
    const transit_cupti_api *api = transit_cupti(NULL);
    if (api && rec.activity_ok && rec_get_state() == TRANSIT_RECORDER_CUPTI && !__atomic_load_n(&rec.detached, __ATOMIC_ACQUIRE)) {
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
void rec_degrade_locked(const char *why)
{
    __atomic_store_n(&rec.detach_due, 0, __ATOMIC_RELEASE);
    rec_set_state(TRANSIT_RECORDER_DEGRADED, why);
    pthread_mutex_lock(&rec.win_lock);
    __atomic_store_n(&rec.win_phase, WINDOW_DONE, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&rec.win_lock);
    transit_warn("recorder degraded: %s%s", why, transit_limit_mode() ? "; from here in limit mode " BOUND_ALONE : "");
}

/* control_lock held, before turning anything on: CUPTI attached, a pending detach called off.
 * False when CUPTI cannot be had again (the recorder is then degraded). */
bool rec_attached_locked(const transit_cupti_api *api)
{
    char why[sizeof rec.reason];
    if (__atomic_load_n(&rec.detach_due, __ATOMIC_ACQUIRE)) { /* off first: a launch meanwhile must not count */
        rec_set_launch_callbacks(api, 0);
        __atomic_store_n(&rec.detach_due, 0, __ATOMIC_RELEASE);
    }
    if (!__atomic_load_n(&rec.detached, __ATOMIC_ACQUIRE))
        return true;
    CUptiResult r = api->Subscribe(&rec.subscriber, rec.on_callback, NULL);
    if (r != CUPTI_SUCCESS) { /* a tool subscribed past hooks_cupti.c (a dlsym lookup with a library's handle) */
        snprintf(why, sizeof why, "attaching CUPTI again at iteration %" PRIu64 " failed: %s; iteration marks only "
                 "from there", transit_iteration_count(), transit_cupti_error(r));
        rec_degrade_locked(why);
        return false;
    }
    if (rec.activity_ok && !rec_register_activity(api))
        rec.activity_ok = rec.um_ok = 0;
    __atomic_store_n(&rec.um_silent, rec.um_ok, __ATOMIC_RELEASE);
    __atomic_store_n(&rec.detached, 0, __ATOMIC_RELEASE);
    transit_add(&rec.n.cupti_reattaches, 1);
    if (transit_limit_mode())
        transit_warn("recorder: CUPTI attached again at iteration %" PRIu64 " (detached at %" PRIu64 "): its unified "
                     "memory counters may give no records from here; until one comes limit mode " BOUND_ALONE,
                     transit_iteration_count(), __atomic_load_n(&rec.detached_at, __ATOMIC_ACQUIRE));
    return true;
}

/* CUPTI attached costs step time even with every callback and activity kind off (Kineto tears it
 * down after a profile for the same reason; docs/design-notes.md, "Detaching CUPTI"). So once the
 * recorder has nothing on (the launch callbacks went off an iteration ago, no window, no activity
 * kind), far under L (the demand), and TRANSIT_CUPTI_DETACH allows, it delivers its last records
 * and detaches CUPTI with cuptiFinalize at the exit of the next launch on an application thread,
 * where NVIDIA's cupti_finalize sample calls it (rec_detach_at_exit). rec_attached_locked attaches
 * it again when something needs it; its unified memory counters then give no records (um_silent),
 * hence far under L only. Recorder thread. */
void rec_steer_detach(void)
{
    const transit_cupti_api *api = transit_cupti(NULL);
    uint64_t off = __atomic_load_n(&rec.launches_off_at, __ATOMIC_ACQUIRE);
    if (!api || !transit_g.cfg.cupti_detach || !off || transit_iteration_count() <= off ||
        !rec_wants(TRANSIT_DEMAND_FAR_UNDER))
        return;
    pthread_mutex_lock(&rec.control_lock);
    if (rec_get_state() == TRANSIT_RECORDER_CUPTI && !rec.detached && !rec.detach_due && !rec.detach_failed && !rec.have_profiling &&
        !rec.have_um && !rec.have_external && !__atomic_load_n(&rec.want_profiling, __ATOMIC_RELAXED) &&
        __atomic_load_n(&rec.win_phase, __ATOMIC_ACQUIRE) == WINDOW_DONE) {
        rec_flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); /* records since the last flush, before CUPTI's buffers go */
        __atomic_store_n(&rec.detach_due, 1, __ATOMIC_RELEASE);
        rec_set_launch_callbacks(api, 1);
    }
    pthread_mutex_unlock(&rec.control_lock);
}

/* In a launch's exit callback (on_callback), while a detach is due. trylock: the recorder thread
 * may be inside a CUPTI call under control_lock, and the next launch comes within microseconds. */
void rec_detach_at_exit(void)
{
    const transit_cupti_api *api = transit_cupti(NULL);
    if (pthread_mutex_trylock(&rec.control_lock))
        return;
    if (__atomic_load_n(&rec.detach_due, __ATOMIC_ACQUIRE) && rec_get_state() == TRANSIT_RECORDER_CUPTI) {
        CUptiResult r = api->Finalize();
        if (r == CUPTI_SUCCESS) {
            __atomic_store_n(&rec.detached, 1, __ATOMIC_RELEASE);
            __atomic_store_n(&rec.detached_at, TRANSIT_MAX(transit_iteration_count(), 1), __ATOMIC_RELEASE);
            transit_add(&rec.n.cupti_detaches, 1);
        } else { /* stays attached, as before */
            rec_set_launch_callbacks(api, 0);
            rec.detach_failed = 1;
            transit_warn("recorder: cuptiFinalize failed: %s; CUPTI stays attached", transit_cupti_error(r));
        }
        __atomic_store_n(&rec.detach_due, 0, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&rec.control_lock);
}

/* control_lock held, the recorder holding CUPTI: what the window asks for. */
void rec_apply_locked(const transit_cupti_api *api)
{
    int wp = __atomic_load_n(&rec.want_profiling, __ATOMIC_RELAXED) && rec_wants(TRANSIT_DEMAND_KERNEL_TIMES);
    /* Limit mode's estimate needs the migration records only near L: further under it,
     * allocations and frees alone keep it, at or over what the device holds. */
    int wu = (__atomic_load_n(&rec.want_um, __ATOMIC_RELAXED) || rec_wants(TRANSIT_DEMAND_NEAR_LIMIT)) && rec.um_ok;
    if ((wp || wu) && !rec_attached_locked(api))
        return;
    rec_set_activity_locked(api, wp, wp && __atomic_load_n(&rec.want_external, __ATOMIC_RELAXED), wu);
}

void rec_apply_activity(void)
{
    const transit_cupti_api *api = transit_cupti(NULL);
    if (!api || !rec.activity_ok)
        return;
    pthread_mutex_lock(&rec.control_lock);
    if (rec_get_state() == TRANSIT_RECORDER_CUPTI) /* not given up meanwhile (transit_recorder_yield) */
        rec_apply_locked(api);
    pthread_mutex_unlock(&rec.control_lock);
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
    char why[sizeof rec.reason];
    if (rec.owner_pid != getpid() || !(api = transit_cupti(NULL)))
        return;
    pthread_mutex_lock(&rec.control_lock);
    if (rec_get_state() != TRANSIT_RECORDER_CUPTI) {
        pthread_mutex_unlock(&rec.control_lock);
        return;
    }
    bool attached = !__atomic_load_n(&rec.detached, __ATOMIC_ACQUIRE); /* detached: nothing of ours is left in CUPTI */
    if (attached) {
        rec_set_launch_callbacks(api, 0);
        if (rec.activity_ok) {
            rec_set_activity_locked(api, 0, 0, 0);
            rec_flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); /* ours, to buffer_completed, before the tool's callbacks replace it */
        }
    }
    snprintf(why, sizeof why, "another tool called %s at iteration %" PRIu64 " (torch.profiler, Nsight): TRANSIT gave "
             "CUPTI up; iteration marks only from there", call, transit_iteration_count());
    rec_degrade_locked(why); /* from here no flush or control call of the recorder's reaches CUPTI */
    if (attached)
        api->Unsubscribe(rec.subscriber);
    pthread_mutex_unlock(&rec.control_lock);
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
    rec.um_ok = r == CUPTI_SUCCESS;
}

/* The buffer callbacks and the unified memory counters (again after a detach, attached_locked). */
bool rec_register_activity(const transit_cupti_api *api)
{
    CUptiResult r = api->ActivityRegisterCallbacks(rec_buffer_requested, rec_buffer_completed);
    if (r != CUPTI_SUCCESS) {
        transit_warn("recorder: cuptiActivityRegisterCallbacks failed: %s; launch callbacks only",
                     transit_cupti_error(r));
        return false;
    }
    configure_unified_memory(api);
    return true;
}

/* control_lock held (transit_recorder_start): CUPTI subscribed with `on_callback` (launch.c's, also
 * for every attach after a detach), the launch callbacks on, the buffer callbacks registered.
 * False, with the state saying why, when the recorder cannot have CUPTI. */
bool rec_subscribe_locked(CUpti_CallbackFunc on_callback)
{
    const char *why = NULL;
    char msg[sizeof rec.reason];
    const transit_cupti_api *api;
    CUptiResult r;

    if (!transit_g.cfg.recorder) {
        rec_set_state(TRANSIT_RECORDER_OFF, "TRANSIT_RECORDER is off");
        return false;
    }
    if (!(api = transit_cupti(&why))) {
        rec_set_state(TRANSIT_RECORDER_OFF, why);
        transit_warn("recorder off: %s", why);
        return false;
    }
    rec.on_callback = on_callback;
    r = api->Subscribe(&rec.subscriber, on_callback, NULL);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
        rec_set_state(TRANSIT_RECORDER_DEGRADED, "another CUPTI subscriber is active (torch.profiler, Nsight): no "
                                             "launch callbacks or activity records, iteration marks only");
        transit_warn("recorder degraded: CUPTI is taken by another subscriber; no migration statistics, prefetch "
                     "acts as base, advise applies after warm-up by iteration marks");
        return false;
    }
    if (r != CUPTI_SUCCESS) {
        snprintf(msg, sizeof msg, "cuptiSubscribe failed: %s", transit_cupti_error(r));
        rec_set_state(TRANSIT_RECORDER_OFF, msg);
        transit_warn("recorder off: %s", msg);
        return false;
    }
    for (size_t i = 0; i < sizeof launch_cbids / sizeof launch_cbids[0]; i++) {
        r = api->EnableCallback(1, rec.subscriber, CUPTI_CB_DOMAIN_DRIVER_API, launch_cbids[i]);
        if (r != CUPTI_SUCCESS) { /* leave CUPTI to other tools */
            snprintf(msg, sizeof msg, "cuptiEnableCallback(%u) failed: %s", (unsigned)launch_cbids[i],
                     transit_cupti_error(r));
            api->Unsubscribe(rec.subscriber);
            rec_set_state(TRANSIT_RECORDER_OFF, msg);
            transit_warn("recorder off: %s", msg);
            return false;
        }
    }
    rec.activity_ok = rec_register_activity(api);
    if (!(rec.period = transit_period_create(0)))
        transit_warn("recorder: out of memory for the kernel-period detector; no automatic iteration marks");
    __atomic_store_n(&rec.want_external, transit_g.cfg.external_correlation, __ATOMIC_RELAXED);
    return true;
}

/* control_lock held, once subscribed and the first window is open: the recorder holds CUPTI. */
void rec_hold_locked(void)
{
    rec_set_state(TRANSIT_RECORDER_CUPTI, NULL);
    if (rec.activity_ok)
        rec_apply_locked(transit_cupti(NULL));
}
