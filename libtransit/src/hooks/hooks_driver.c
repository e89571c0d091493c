/* hooks_driver.c - the driver entry points TRANSIT replaces, and cuGetProcAddress, one of the
 * two doors through which programs reach the driver without linking it (the other, dlsym, is
 * dlsym.c's). Never cuGetExportTable (private, and not needed). VMM calls (cuMemCreate,
 * cuMemRelease) pass through and are only counted. */
#include "cuda_api.h"
#include "hook_table.h"
#include "hooks.h"
#include "internal.h"
#include "actions.h"
#include "alloc_table.h"
#include "lifecycle.h"
#include "state.h"

#include <string.h>

#define HOOK __attribute__((visibility("default")))

/* cudaGetDriverEntryPoint is deprecated in CUDA 13 but programs still call it. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static CUresult fail(const transit_driver_api *drv, CUresult r)
{
    const char *name = NULL;
    if (!__atomic_load_n(&transit_g.cuda_active, __ATOMIC_RELAXED)) {
        if (drv && drv->GetErrorName)
            drv->GetErrorName(r, &name);
        transit_note_cuda_error(name ? name : "CUresult error");
    }
    return r;
}

static const transit_driver_api *driver_for_hook(void)
{
    transit_ensure_active();
    const transit_driver_api *drv = transit_driver();
    if (!drv)
        transit_note_cuda_error("libcuda.so.1 not loadable");
    return drv;
}

static CUresult alloc_managed(const transit_driver_api *drv, CUdeviceptr *dptr, size_t size)
{
    CUdevice dev;
    if (!dptr)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = drv->CtxGetDevice(&dev);
    if (r != CUDA_SUCCESS)
        return fail(drv, r);
    if (transit_mem_need_budget(dev)) {
        size_t free_b, total_b;
        if ((r = drv->MemGetInfo(&free_b, &total_b)) != CUDA_SUCCESS)
            return fail(drv, r);
        transit_mem_set_budget(dev, free_b, total_b);
    }
    if (transit_hook_admit(dev, size))
        return CUDA_ERROR_OUT_OF_MEMORY;
    if ((r = drv->MemAllocManaged(dptr, size, CU_MEM_ATTACH_GLOBAL)) != CUDA_SUCCESS)
        return fail(drv, r);
    transit_hook_allocated(*dptr, size, dev);
    return CUDA_SUCCESS;
}

HOOK CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    const transit_driver_api *drv = driver_for_hook();
    return drv ? alloc_managed(drv, dptr, bytesize) : CUDA_ERROR_NOT_INITIALIZED;
}

HOOK CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                 unsigned int element_size)
{
    (void)element_size;
    const transit_driver_api *drv = driver_for_hook();
    if (!drv)
        return CUDA_ERROR_NOT_INITIALIZED;
    size_t bytes;
    if (!pitch)
        return CUDA_ERROR_INVALID_VALUE;
    if (transit_pitched_size(width, height, pitch, &bytes))
        return CUDA_ERROR_OUT_OF_MEMORY;
    return alloc_managed(drv, dptr, bytes);
}

HOOK CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    const transit_driver_api *drv = driver_for_hook();
    if (!drv)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dptr)
        transit_hook_freed(dptr);
    return drv->MemFree(dptr);
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t size, CUstream stream)
{
    const transit_driver_api *drv = driver_for_hook();
    if (!drv)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (transit_act_capturing(drv, stream) && drv->MemAllocAsync) /* must stay a graph node */
        return drv->MemAllocAsync(dptr, size, stream);
    return alloc_managed(drv, dptr, size);
}

static CUresult free_async(CUdeviceptr dptr, CUstream stream)
{
    const transit_driver_api *drv = driver_for_hook();
    if (!drv)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dptr && transit_hook_freed(dptr))
        return drv->MemFree(dptr);
    return drv->MemFreeAsync ? drv->MemFreeAsync(dptr, stream) : CUDA_ERROR_NOT_SUPPORTED;
}

HOOK CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream stream)
{
    return alloc_async(dptr, size, stream);
}
/* The _ptsz forms read stream 0 as the calling thread's default stream. */
static CUstream per_thread_stream(CUstream stream)
{
    return stream ? stream : CU_STREAM_PER_THREAD;
}

HOOK CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream stream)
{
    return alloc_async(dptr, size, per_thread_stream(stream));
}
HOOK CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
    return free_async(dptr, stream);
}
HOOK CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream)
{
    return free_async(dptr, per_thread_stream(stream));
}

HOOK CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    if (transit_in_real_call) { /* TRANSIT itself, through the runtime: the real numbers */
        const transit_driver_api *real = transit_driver();
        return real ? real->MemGetInfo(free_bytes, total_bytes) : CUDA_ERROR_NOT_INITIALIZED;
    }
    const transit_driver_api *drv = driver_for_hook();
    if (!drv)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = drv->MemGetInfo(free_bytes, total_bytes);
    if (r != CUDA_SUCCESS)
        return fail(drv, r);
    transit_note_cuda_ok();
    if (transit_limit_mode())
        transit_hook_limit_info(free_bytes, total_bytes);
    return r;
}

HOOK CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                          unsigned long long flags)
{
    const transit_driver_api *drv = driver_for_hook();
    if (!drv || !drv->MemCreate)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = drv->MemCreate(handle, size, prop, flags);
    if (r == CUDA_SUCCESS && prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        transit_vmm_created(*handle, size, prop->location.id);
    return r;
}

HOOK CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    const transit_driver_api *drv = driver_for_hook();
    if (!drv || !drv->MemRelease)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = drv->MemRelease(handle);
    if (r == CUDA_SUCCESS)
        transit_vmm_released(handle);
    return r;
}

static CUresult proc_address(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
    const transit_driver_api *drv = transit_driver(); /* no activation: a lookup is not CUDA use */
    if (!drv || !drv->GetProcAddress)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = drv->GetProcAddress(symbol, pfn, version, flags, status);
    if (r == CUDA_SUCCESS && pfn && *pfn) {
        void *hook = transit_driver_hook(symbol, version, (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0);
        if (hook)
            *pfn = hook;
    }
    return r;
}

HOOK CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                  CUdriverProcAddressQueryResult *status)
{
    return proc_address(symbol, pfn, version, flags, status);
}

/* The CUDA 11/12 form, without the status argument (cuda.h maps the name to _v2). */
#undef cuGetProcAddress
HOOK CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    return proc_address(symbol, pfn, version, flags, NULL);
}

#define DRIVER_HOOK(symbol, since, hook, per_thread) {symbol, since, (void *)(hook), (void *)(per_thread)},
static const struct {
    const char *symbol;
    int since;
    void *hook, *per_thread_hook;
} driver_hooks[] = {TRANSIT_DRIVER_HOOKS(DRIVER_HOOK)};

TRANSIT_INTERNAL void *transit_driver_hook(const char *symbol, int cuda_version, int per_thread)
{
    if (!symbol || symbol[0] != 'c' || symbol[1] != 'u')
        return NULL;
    for (size_t i = 0; i < sizeof driver_hooks / sizeof driver_hooks[0]; i++)
        if (cuda_version >= driver_hooks[i].since && strcmp(symbol, driver_hooks[i].symbol) == 0)
            return per_thread && driver_hooks[i].per_thread_hook ? driver_hooks[i].per_thread_hook
                                                                 : driver_hooks[i].hook;
    return NULL;
}
