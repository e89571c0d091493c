/* actions.c - see actions.h. */
#include "actions.h"
#include "internal.h"

/* Tried once per process (a fork child tries anew). */
typedef struct actions {
    int context_entered;
    int context_gave_up; /* entering the context failed: no more tries */
    int no_stream;       /* a stream could not be created: no more tries */
} actions;
static actions acts;

void transit_warn_once(int *flag, const char *what, const transit_driver_api *drv, CUresult r)
{
    const char *name = NULL;
    if (__atomic_exchange_n(flag, 1, __ATOMIC_RELAXED))
        return;
    if (drv->GetErrorName)
        drv->GetErrorName(r, &name);
    transit_warn("%s failed: %s (counted; further failures are not logged)", what, name ? name : "CUresult error");
}

bool transit_act_capturing(const transit_driver_api *drv, CUstream stream)
{
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    /* e.g. the legacy stream during another stream's global capture: an error */
    return !drv->StreamIsCapturing || drv->StreamIsCapturing(stream, &status) != CUDA_SUCCESS ||
           status != CU_STREAM_CAPTURE_STATUS_NONE;
}

bool transit_act_relax_capture(const transit_driver_api *drv, CUstreamCaptureMode *saved)
{
    *saved = CU_STREAM_CAPTURE_MODE_RELAXED;
    return drv->ThreadExchangeStreamCaptureMode && drv->ThreadExchangeStreamCaptureMode(saved) == CUDA_SUCCESS;
}

void transit_act_restore_capture(const transit_driver_api *drv, bool relaxed, CUstreamCaptureMode *saved)
{
    if (relaxed)
        drv->ThreadExchangeStreamCaptureMode(saved);
}

bool transit_act_own_stream(const transit_driver_api *drv, CUstream *stream)
{
    CUstream created;
    if (__atomic_load_n(stream, __ATOMIC_ACQUIRE))
        return true;
    if (__atomic_load_n(&acts.no_stream, __ATOMIC_RELAXED))
        return false;
    CUresult e = drv->StreamCreate ? drv->StreamCreate(&created, CU_STREAM_NON_BLOCKING) : CUDA_ERROR_NOT_SUPPORTED;
    if (e == CUDA_SUCCESS) {
        __atomic_store_n(stream, created, __ATOMIC_RELEASE); /* allocating threads read the tick's */
        return true;
    }
    transit_warn_once(&acts.no_stream, "limit mode: cuStreamCreate for evictions; no evictions", drv, e);
    return false;
}

CUresult transit_act_use_primary_context(const transit_driver_api *drv, int dev)
{
    CUcontext ctx;
    CUresult e = CUDA_ERROR_NOT_SUPPORTED;
    if (drv->DevicePrimaryCtxRetain && drv->CtxSetCurrent && (e = drv->DevicePrimaryCtxRetain(&ctx, dev)) == CUDA_SUCCESS)
        e = drv->CtxSetCurrent(ctx);
    return e;
}

bool transit_act_enter_context(const transit_driver_api *drv, int dev)
{
    CUresult e;
    if (acts.context_entered)
        return true;
    if (acts.context_gave_up)
        return false;
    if ((e = transit_act_use_primary_context(drv, dev)) != CUDA_SUCCESS) {
        transit_warn_once(&acts.context_gave_up, "policy: entering the primary context from the tick thread", drv, e);
        return false;
    }
    acts.context_entered = 1;
    return true;
}

const transit_driver_api *transit_act_driver(void)
{
    const transit_driver_api *drv = transit_driver();
    if (!drv || !drv->MemPrefetchAsync || !drv->MemAdvise || !drv->CtxGetDevice) {
        static int warned;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            transit_warn("policy: the driver lacks cuMemPrefetchAsync_v2/cuMemAdvise_v2 (CUDA 12.2+); acting as base");
        return NULL;
    }
    return drv;
}

CUresult transit_act_prefetch(const transit_driver_api *drv, uint64_t addr, uint64_t bytes, CUmemLocation to,
                              CUstream stream)
{
    return drv->MemPrefetchAsync(addr, bytes, to, 0, stream);
}

CUresult transit_act_accessed_by(const transit_driver_api *drv, uint64_t addr, uint64_t bytes, CUdevice dev)
{
    const CUmemLocation by = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev};
    return drv->MemAdvise(addr, bytes, CU_MEM_ADVISE_SET_ACCESSED_BY, by);
}

CUresult transit_act_stream_query(const transit_driver_api *drv, CUstream stream)
{
    return drv->StreamQuery ? drv->StreamQuery(stream) : CUDA_SUCCESS;
}

bool transit_act_stream_idle(const transit_driver_api *drv, CUstream stream)
{
    return transit_act_stream_query(drv, stream) == CUDA_SUCCESS;
}

CUresult transit_act_stream_wait(const transit_driver_api *drv, CUstream stream)
{
    return drv->StreamSynchronize ? drv->StreamSynchronize(stream) : CUDA_ERROR_NOT_SUPPORTED;
}

bool transit_act_has_events(const transit_driver_api *drv)
{
    return drv->EventCreate && drv->EventDestroy && drv->EventRecord && drv->StreamWaitEvent;
}

CUresult transit_act_event_create(const transit_driver_api *drv, CUevent *event)
{
    return drv->EventCreate(event, CU_EVENT_DISABLE_TIMING);
}

void transit_act_event_destroy(const transit_driver_api *drv, CUevent event)
{
    if (event) /* the driver keeps a pending event until it completes */
        drv->EventDestroy(event);
}

CUresult transit_act_record(const transit_driver_api *drv, CUevent event, CUstream stream)
{
    return drv->EventRecord(event, stream);
}

CUresult transit_act_wait_event(const transit_driver_api *drv, CUstream stream, CUevent event)
{
    return drv->StreamWaitEvent(stream, event, 0);
}

CUresult transit_act_current_device(const transit_driver_api *drv, CUdevice *dev)
{
    return drv->CtxGetDevice(dev);
}

void transit_actions_after_fork(void)
{
    acts = (actions){0};
}
