/* launch.c - the launch callback: every kernel launch on the application's threads, before the
 * kernel is queued (its iteration and ordinal, the period detector, correlation ids for its
 * kernel record), then to the sink. */
#include "iteration.h"
#include "recorder_int.h"
#include "state.h"

#include <string.h>

/* Per launching thread (thread-local, so outside the recorder's struct): an external id of ours
 * on CUPTI's stack, and the enclosing runtime launch (cudaLaunchKernel and kin): its correlation
 * id, which the kernel record may carry instead of the driver call's, and whether the driver
 * launch callback came inside it. */
static __thread int corr_pushed;
static __thread uint32_t runtime_corr;
static __thread int runtime_saw_driver;

/* The forking thread's own (the child's other threads are gone). */
void rec_launch_after_fork(void)
{
    corr_pushed = 0;
    runtime_corr = 0;
    runtime_saw_driver = 0;
}


/* ---- launch callbacks ---- */

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
    if (rec.name_cache[slot].f != f || rec.name_cache[slot].symbol != symbol) {
        rec.name_cache[slot].f = f;
        rec.name_cache[slot].symbol = symbol;
        rec.name_cache[slot].hash = transit_period_hash_name(symbol);
    }
    return rec.name_cache[slot].hash;
}

static void feed_period(const char *symbol, CUfunction f)
{
    uint32_t ordinal;
    unsigned flags;
    if (!rec.period)
        return;
    pthread_mutex_lock(&rec.period_lock);
    flags = transit_period_feed(rec.period, kernel_hash(symbol, f), &ordinal);
    pthread_mutex_unlock(&rec.period_lock);
    if (flags & TRANSIT_PERIOD_BEGIN)
        transit_iteration_mark(TRANSIT_ITER_KERNEL_PERIOD);
    /* Sub-step periods (layers) come and go while the detector locks on; only when it is the
     * iteration source does a change mean the iterations themselves changed. */
    if ((flags & TRANSIT_PERIOD_CHANGED) && rec_wants(TRANSIT_DEMAND_PROFILE) &&
        transit_iteration_method() == TRANSIT_ITER_KERNEL_PERIOD)
        transit_recorder_reprofile("the kernel sequence changed");
}

/* Puts (iteration << 32 | ordinal) on CUPTI's per-thread external-id stack, replacing the
 * previous launch's, when external ids are on. CUPTI labels an API record with the id on the stack
 * when the call begins, so a runtime launch pushes the label its driver launch is about to get,
 * and the driver callback pushes it again. */
static void push_external(uint64_t iteration, uint32_t ordinal)
{
    int on = __atomic_load_n(&rec.have_external, __ATOMIC_ACQUIRE);
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
 * runtime call's, which the kernel record may carry instead. External ids, with the API records
 * they need, are the fallback when callback ids miss (window.c, check_callback_misses). */
static void correlate(const transit_launch *l, uint32_t corr)
{
    push_external(l->iteration, l->ordinal);
    if (!__atomic_load_n(&rec.have_profiling, __ATOMIC_ACQUIRE))
        return;
    uint32_t ordinal = rec_window_ordinal(l->iteration, l->ordinal);
    rec_corr_store(rec.corr_from_callback, corr, ordinal);
    if (runtime_corr)
        rec_corr_store(rec.corr_from_callback, runtime_corr, ordinal);
}

/* Runtime launches are not launches here (their driver call is): only their correlation id is
 * kept for the driver callback nested inside, and its label pushed ahead of it. */
static void runtime_launch(const CUpti_CallbackData *cb)
{
    if (cb->callbackSite == CUPTI_API_ENTER) {
        runtime_corr = cb->correlationId;
        runtime_saw_driver = 0;
        if (__atomic_load_n(&rec.have_external, __ATOMIC_ACQUIRE)) {
            rec_iteration_check();
            push_external(__atomic_load_n(&rec.iter_seen, __ATOMIC_ACQUIRE),
                          __atomic_load_n(&rec.iter_launches, __ATOMIC_ACQUIRE));
        }
        return;
    }
    if (!runtime_saw_driver) /* the driver callback did not fire inside: launches are missed */
        transit_add(&rec.n.runtime_without_driver, 1);
    runtime_corr = 0;
}

/* A callback's own time, apart while profiling: the cost after warm-up is what stays. */
static void count_overhead(uint64_t ns, bool launch)
{
    transit_add(&rec.n.overhead_ns, ns);
    if (!__atomic_load_n(&rec.have_profiling, __ATOMIC_ACQUIRE))
        return;
    transit_add(&rec.n.overhead_profiling_ns, ns);
    if (launch)
        transit_add(&rec.n.launches_profiling, 1);
}

void CUPTIAPI rec_on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                 const void *data)
{
    const CUpti_CallbackData *cb = data;
    launch_args args = {0};
    (void)userdata;
    if (!cb || rec_get_state() != TRANSIT_RECORDER_CUPTI)
        return;
    if (__atomic_load_n(&rec.detach_due, __ATOMIC_ACQUIRE)) { /* the launch callbacks are on for this alone */
        if (cb->callbackSite == CUPTI_API_EXIT)
            rec_detach_at_exit();
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
    transit_add(&rec.n.launches, 1);
    feed_period(cb->symbolName, args.f); /* may mark an iteration that begins with this launch */
    rec_iteration_check();
    transit_launch l = {
        .stream = args.stream,
        .iteration = __atomic_load_n(&rec.iter_seen, __ATOMIC_ACQUIRE),
        .ordinal = __atomic_fetch_add(&rec.iter_launches, 1, __ATOMIC_ACQ_REL),
        .corr = cb->correlationId,
        .runtime_corr = runtime_corr,
        .symbol = cb->symbolName,
        .function = args.f,
        .params = args.params,
        .extra = args.extra,
    };
    correlate(&l, cb->correlationId);
    uint32_t profiled = __atomic_load_n(&rec.win_max_launches, __ATOMIC_RELAXED);
    if (rec_wants(TRANSIT_DEMAND_PROFILE) && profiled &&
        __atomic_load_n(&rec.win_phase, __ATOMIC_RELAXED) == WINDOW_DONE && l.ordinal == profiled * REPROFILE_LAUNCH_FACTOR)
        transit_recorder_reprofile("an iteration ran far more kernels than profiled");
    rec.sink->launch(&l);
    count_overhead(transit_monotonic_ns() - t0, true);
}
