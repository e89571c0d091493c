/* hooks_runtime.c - the CUDA runtime entry points TRANSIT replaces (exported; LD_PRELOAD puts
 * them ahead of libcudart). Device allocations become managed allocations. */
#include "cuda_api.h"
#include "hooks.h"
#include "internal.h"
#include "actions.h"
#include "alloc_table.h"
#include "lifecycle.h"
#include "state.h"

#define HOOK __attribute__((visibility("default")))

/* cudaGetDriverEntryPoint is deprecated in CUDA 13 but programs still call it. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static cudaError_t fail(const transit_runtime_api *rt, cudaError_t e)
{
    if (!__atomic_load_n(&transit_g.cuda_active, __ATOMIC_RELAXED))
        transit_note_cuda_error(rt->GetErrorName ? rt->GetErrorName(e) : "cudaError");
    return e;
}

/* The device's real free and total memory, never the limit-mode view of TRANSIT's driver hook. */
static cudaError_t real_mem_get_info(const transit_runtime_api *rt, size_t *free_bytes, size_t *total_bytes)
{
    transit_in_real_call++;
    cudaError_t e = rt->MemGetInfo(free_bytes, total_bytes);
    transit_in_real_call--;
    return e;
}

static const transit_runtime_api *runtime_for_hook(void)
{
    transit_ensure_active();
    const transit_runtime_api *rt = transit_runtime();
    if (!rt)
        transit_note_cuda_error("libcudart not found in the process");
    return rt;
}

static cudaError_t malloc_managed(const transit_runtime_api *rt, void **ptr, size_t size)
{
    int dev;
    if (!ptr)
        return cudaErrorInvalidValue;
    cudaError_t e = rt->GetDevice(&dev);
    if (e != cudaSuccess)
        return fail(rt, e);
    if (transit_mem_need_budget(dev)) {
        size_t free_b, total_b;
        if ((e = real_mem_get_info(rt, &free_b, &total_b)) != cudaSuccess)
            return fail(rt, e);
        transit_mem_set_budget(dev, free_b, total_b);
    }
    if (size == 0) { /* cudaMalloc(0) succeeds with NULL; cudaMallocManaged(0) would not */
        *ptr = NULL;
        return cudaSuccess;
    }
    if (transit_hook_admit(dev, size))
        return cudaErrorMemoryAllocation;
    if ((e = rt->MallocManaged(ptr, size, cudaMemAttachGlobal)) != cudaSuccess)
        return fail(rt, e);
    transit_hook_allocated((uint64_t)(uintptr_t)*ptr, size, dev);
    return cudaSuccess;
}

/* The one capture guard (actions.c) asks the driver; without one, leaving the call to the
 * runtime is the safe side. */
static bool capturing(cudaStream_t stream)
{
    const transit_driver_api *drv = transit_driver();
    return !drv || transit_act_capturing(drv, (CUstream)stream);
}

HOOK cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    const transit_runtime_api *rt = runtime_for_hook();
    return rt ? malloc_managed(rt, devPtr, size) : cudaErrorInitializationError;
}

HOOK cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
    const transit_runtime_api *rt = runtime_for_hook();
    if (!rt)
        return cudaErrorInitializationError;
    size_t bytes;
    if (!pitch)
        return cudaErrorInvalidValue;
    if (transit_pitched_size(width, height, pitch, &bytes))
        return cudaErrorMemoryAllocation;
    return malloc_managed(rt, devPtr, bytes);
}

HOOK cudaError_t cudaFree(void *devPtr)
{
    const transit_runtime_api *rt = runtime_for_hook();
    if (!rt)
        return cudaErrorInitializationError;
    if (devPtr)
        transit_hook_freed((uint64_t)(uintptr_t)devPtr); /* before the address can be reused */
    cudaError_t e = rt->Free(devPtr);
    if (e != cudaSuccess)
        return fail(rt, e);
    transit_note_cuda_ok();
    return e;
}

/* Stream-ordered allocation becomes a plain managed allocation, except inside graph capture,
 * where the allocation must stay a graph node. */
static cudaError_t malloc_async(void **devPtr, size_t size, cudaStream_t stream)
{
    const transit_runtime_api *rt = runtime_for_hook();
    if (!rt)
        return cudaErrorInitializationError;
    if (capturing(stream) && rt->MallocAsync)
        return rt->MallocAsync(devPtr, size, stream);
    return malloc_managed(rt, devPtr, size);
}

static cudaError_t free_async(void *devPtr, cudaStream_t stream)
{
    const transit_runtime_api *rt = runtime_for_hook();
    if (!rt)
        return cudaErrorInitializationError;
    if (devPtr && transit_hook_freed((uint64_t)(uintptr_t)devPtr))
        return rt->Free(devPtr); /* managed memory has no stream-ordered free */
    return rt->FreeAsync ? rt->FreeAsync(devPtr, stream) : cudaErrorNotSupported;
}

HOOK cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream)
{
    return malloc_async(devPtr, size, stream);
}
/* The _ptsz forms read stream 0 as the calling thread's default stream. */
static cudaStream_t per_thread_stream(cudaStream_t stream)
{
    return stream ? stream : cudaStreamPerThread;
}

HOOK cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t stream)
{
    return malloc_async(devPtr, size, per_thread_stream(stream));
}
HOOK cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream)
{
    return free_async(devPtr, stream);
}
HOOK cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t stream)
{
    return free_async(devPtr, per_thread_stream(stream));
}

HOOK cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    const transit_runtime_api *rt = runtime_for_hook();
    if (!rt)
        return cudaErrorInitializationError;
    cudaError_t e = real_mem_get_info(rt, free_bytes, total_bytes);
    if (e != cudaSuccess)
        return fail(rt, e);
    transit_note_cuda_ok();
    if (transit_limit_mode())
        transit_hook_limit_info(free_bytes, total_bytes);
    return e;
}

/* PyTorch reaches the driver (cuMemCreate, ...) through these: hand out TRANSIT's hooks.
 * version 0: the unversioned call, which asks for the ABI of the application's own runtime. */
static cudaError_t entry_point(const char *symbol, void **fn, unsigned int version, unsigned long long flags,
                               enum cudaDriverEntryPointQueryResult *status)
{
    const transit_runtime_api *rt = runtime_for_hook();
    int runtime_version = 0;
    cudaError_t e;
    if (!rt)
        return cudaErrorInitializationError;
    if (version)
        e = rt->GetDriverEntryPointByVersion ? rt->GetDriverEntryPointByVersion(symbol, fn, version, flags, status)
                                             : cudaErrorNotSupported;
    else
        e = rt->GetDriverEntryPoint ? rt->GetDriverEntryPoint(symbol, fn, flags, status) : cudaErrorNotSupported;
    if (!version && rt->RuntimeGetVersion && rt->RuntimeGetVersion(&runtime_version) == cudaSuccess)
        version = (unsigned int)runtime_version;
    if (e == cudaSuccess && fn && *fn) {
        void *hook = transit_driver_hook(symbol, (int)version, (flags & cudaEnablePerThreadDefaultStream) != 0);
        if (hook)
            *fn = hook;
    }
    return e;
}

HOOK cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn, unsigned long long flags,
                                         enum cudaDriverEntryPointQueryResult *status)
{
    return entry_point(symbol, fn, 0, flags, status);
}
HOOK cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **fn, unsigned long long flags,
                                              enum cudaDriverEntryPointQueryResult *status)
{
    return entry_point(symbol, fn, 0, flags, status);
}
HOOK cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn, unsigned int version,
                                                  unsigned long long flags,
                                                  enum cudaDriverEntryPointQueryResult *status)
{
    return entry_point(symbol, fn, version, flags, status);
}
HOOK cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **fn, unsigned int version,
                                                       unsigned long long flags,
                                                       enum cudaDriverEntryPointQueryResult *status)
{
    return entry_point(symbol, fn, version, flags, status);
}
