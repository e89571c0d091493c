/* cuda_api.c - run-time resolution of the real CUDA runtime and driver functions. */
#include "cuda_api.h"
#include "internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

static void *(*real_dlsym)(void *, const char *);
static pthread_once_t dlsym_once = PTHREAD_ONCE_INIT;

static void resolve_dlsym(void)
{
    /* dlvsym is not interposed, so it reaches glibc's own dlsym. */
    real_dlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!real_dlsym)
        real_dlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
}

static void *no_dlsym(void *handle, const char *name)
{
    (void)handle, (void)name;
    return NULL;
}

transit_dlsym_fn transit_glibc_dlsym(void)
{
    pthread_once(&dlsym_once, resolve_dlsym);
    return real_dlsym ? real_dlsym : no_dlsym;
}

void *transit_real_dlsym(void *handle, const char *name)
{
    return transit_glibc_dlsym()(handle, name);
}

/* The application's cudart: the next definition after ours in the global scope, else a
 * loaded libcudart found by soname (Python loads it RTLD_LOCAL through torch). */
static void *find_runtime_symbol(const char *name)
{
    static const char *const sonames[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
    void *sym = transit_real_dlsym(RTLD_NEXT, name);
    for (size_t i = 0; !sym && i < sizeof sonames / sizeof sonames[0]; i++) {
        void *h = dlopen(sonames[i], RTLD_NOLOAD | RTLD_LAZY);
        if (h) {
            sym = transit_real_dlsym(h, name);
            dlclose(h);
        }
    }
    return sym;
}

static transit_runtime_api runtime;
static int runtime_ok;
static pthread_mutex_t resolve_lock = PTHREAD_MUTEX_INITIALIZER;

#define RESOLVE_RT(field, sym) runtime.field = (__typeof__(runtime.field))find_runtime_symbol(sym)

const transit_runtime_api *transit_runtime(void)
{
    if (__atomic_load_n(&runtime_ok, __ATOMIC_ACQUIRE))
        return &runtime;
    pthread_mutex_lock(&resolve_lock);
    if (!runtime_ok) {
        RESOLVE_RT(MallocManaged, "cudaMallocManaged");
        RESOLVE_RT(Free, "cudaFree");
        RESOLVE_RT(MemGetInfo, "cudaMemGetInfo");
        RESOLVE_RT(GetDevice, "cudaGetDevice");
        RESOLVE_RT(RuntimeGetVersion, "cudaRuntimeGetVersion");
        RESOLVE_RT(GetDriverEntryPoint, "cudaGetDriverEntryPoint");
        RESOLVE_RT(GetDriverEntryPointByVersion, "cudaGetDriverEntryPointByVersion");
        RESOLVE_RT(MallocAsync, "cudaMallocAsync");
        RESOLVE_RT(FreeAsync, "cudaFreeAsync");
        RESOLVE_RT(StreamIsCapturing, "cudaStreamIsCapturing");
        RESOLVE_RT(GetErrorName, "cudaGetErrorName");
        if (runtime.MallocManaged && runtime.Free && runtime.MemGetInfo && runtime.GetDevice)
            __atomic_store_n(&runtime_ok, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&resolve_lock);
    return runtime_ok ? &runtime : NULL;
}

static transit_driver_api driver;
static int driver_state; /* 0 unresolved, 1 ok, -1 unavailable */

#define RESOLVE_DRV(field, sym) driver.field = (__typeof__(driver.field))transit_real_dlsym(h, sym)

const transit_driver_api *transit_driver(void)
{
    int state = __atomic_load_n(&driver_state, __ATOMIC_ACQUIRE);
    if (state)
        return state > 0 ? &driver : NULL;
    pthread_mutex_lock(&resolve_lock);
    if (!driver_state) {
        void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
        if (!h)
            h = dlopen("libcuda.so.1", RTLD_LAZY);
        if (h) { /* kept open: the driver stays loaded for the life of the process */
            RESOLVE_DRV(GetProcAddress, "cuGetProcAddress_v2");
            RESOLVE_DRV(MemAllocManaged, "cuMemAllocManaged");
            RESOLVE_DRV(MemFree, "cuMemFree_v2");
            RESOLVE_DRV(MemGetInfo, "cuMemGetInfo_v2");
            RESOLVE_DRV(MemCreate, "cuMemCreate");
            RESOLVE_DRV(MemRelease, "cuMemRelease");
            RESOLVE_DRV(CtxGetDevice, "cuCtxGetDevice");
            RESOLVE_DRV(DeviceGet, "cuDeviceGet");
            RESOLVE_DRV(DeviceGetName, "cuDeviceGetName");
            RESOLVE_DRV(DeviceGetUuid, "cuDeviceGetUuid_v2");
            if (!driver.DeviceGetUuid)
                RESOLVE_DRV(DeviceGetUuid, "cuDeviceGetUuid");
            RESOLVE_DRV(DeviceTotalMem, "cuDeviceTotalMem_v2");
            RESOLVE_DRV(MemAllocAsync, "cuMemAllocAsync");
            RESOLVE_DRV(MemFreeAsync, "cuMemFreeAsync");
            RESOLVE_DRV(StreamIsCapturing, "cuStreamIsCapturing");
            RESOLVE_DRV(GetErrorName, "cuGetErrorName");
            RESOLVE_DRV(MemPrefetchAsync, "cuMemPrefetchAsync_v2");
            RESOLVE_DRV(MemAdvise, "cuMemAdvise_v2");
            RESOLVE_DRV(ThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode");
            RESOLVE_DRV(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
            RESOLVE_DRV(CtxSetCurrent, "cuCtxSetCurrent");
            RESOLVE_DRV(StreamCreate, "cuStreamCreate");
            RESOLVE_DRV(StreamQuery, "cuStreamQuery");
            RESOLVE_DRV(StreamSynchronize, "cuStreamSynchronize");
            RESOLVE_DRV(EventCreate, "cuEventCreate");
            RESOLVE_DRV(EventDestroy, "cuEventDestroy_v2");
            RESOLVE_DRV(EventRecord, "cuEventRecord");
            RESOLVE_DRV(StreamWaitEvent, "cuStreamWaitEvent");
            RESOLVE_DRV(FuncGetParamInfo, "cuFuncGetParamInfo");
            RESOLVE_DRV(KernelGetParamInfo, "cuKernelGetParamInfo");
        }
        __atomic_store_n(&driver_state, h && driver.MemAllocManaged && driver.MemFree ? 1 : -1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&resolve_lock);
    return driver_state > 0 ? &driver : NULL;
}
