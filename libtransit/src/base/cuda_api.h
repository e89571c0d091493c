/* cuda_api.h - the real CUDA entry points libtransit calls, resolved at run time.
 * libtransit never links against CUDA: it loads anywhere, and in a process that never
 * touches CUDA nothing here is ever resolved. */
#ifndef TRANSIT_CUDA_API_H
#define TRANSIT_CUDA_API_H

#include <cuda.h>
#include <cuda_runtime_api.h>

typedef struct transit_runtime_api {
    cudaError_t (*MallocManaged)(void **, size_t, unsigned int);
    cudaError_t (*Free)(void *);
    cudaError_t (*MemGetInfo)(size_t *, size_t *);
    cudaError_t (*GetDevice)(int *);
    cudaError_t (*RuntimeGetVersion)(int *);
    cudaError_t (*GetDriverEntryPoint)(const char *, void **, unsigned long long,
                                       enum cudaDriverEntryPointQueryResult *);
    cudaError_t (*GetDriverEntryPointByVersion)(const char *, void **, unsigned int, unsigned long long,
                                                enum cudaDriverEntryPointQueryResult *);
    cudaError_t (*MallocAsync)(void **, size_t, cudaStream_t);
    cudaError_t (*FreeAsync)(void *, cudaStream_t);
    cudaError_t (*StreamIsCapturing)(cudaStream_t, enum cudaStreamCaptureStatus *);
    const char *(*GetErrorName)(cudaError_t);
} transit_runtime_api;

typedef struct transit_driver_api {
    CUresult (*GetProcAddress)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
    CUresult (*MemAllocManaged)(CUdeviceptr *, size_t, unsigned int);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemGetInfo)(size_t *, size_t *);
    CUresult (*MemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
    CUresult (*MemRelease)(CUmemGenericAllocationHandle);
    CUresult (*CtxGetDevice)(CUdevice *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetName)(char *, int, CUdevice);
    CUresult (*DeviceGetUuid)(CUuuid *, CUdevice);
    CUresult (*DeviceTotalMem)(size_t *, CUdevice);
    CUresult (*MemAllocAsync)(CUdeviceptr *, size_t, CUstream);
    CUresult (*MemFreeAsync)(CUdeviceptr, CUstream);
    CUresult (*StreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
    CUresult (*GetErrorName)(CUresult, const char **);
    /* Used by the policies (policy.c); resolved by versioned name (CUDA 13 location forms). */
    CUresult (*MemPrefetchAsync)(CUdeviceptr, size_t, CUmemLocation, unsigned int, CUstream);
    CUresult (*MemAdvise)(CUdeviceptr, size_t, CUmem_advise, CUmemLocation);
    CUresult (*ThreadExchangeStreamCaptureMode)(CUstreamCaptureMode *);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*StreamCreate)(CUstream *, unsigned int);
    CUresult (*StreamQuery)(CUstream);
    CUresult (*StreamSynchronize)(CUstream);
    /* Hybrid's mover orders its side streams and the kernels' by events. */
    CUresult (*EventCreate)(CUevent *, unsigned int);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned int);
    /* The profile reads kernels' parameters (CUDA 12.4+; NULL before). */
    CUresult (*FuncGetParamInfo)(CUfunction, size_t, size_t *, size_t *);
    /* A launch may name a CUkernel where a CUfunction goes (the runtime's library loading does). */
    CUresult (*KernelGetParamInfo)(CUkernel, size_t, size_t *, size_t *);
} transit_driver_api;

/* The runtime the application uses (the cudart that called our hook); NULL if none loaded. */
const transit_runtime_api *transit_runtime(void);
/* The driver (libcuda.so.1); NULL if it cannot be loaded. */
const transit_driver_api *transit_driver(void);
/* dlsym as glibc implements it, bypassing our own interposition. */
void *transit_real_dlsym(void *handle, const char *name);
typedef void *(*transit_dlsym_fn)(void *, const char *);
transit_dlsym_fn transit_glibc_dlsym(void);

#endif
