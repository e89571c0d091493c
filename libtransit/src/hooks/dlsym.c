/* dlsym.c - the dlsym door (door 1 in hook_table.h): programs that dlopen libcudart or libcuda
 * reach the hooks through dlsym(handle, ...), past LD_PRELOAD, so dlsym hands out TRANSIT's hook
 * for an exported name. */
#include "cupti_api.h"
#include "cuda_api.h"
#include "hook_table.h"
#include "hooks.h"
#include "internal.h"

#include <dlfcn.h>
#include <string.h>

#define HOOK __attribute__((visibility("default")))

/* cudaGetDriverEntryPoint is deprecated in CUDA 13 but programs still call it. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* Exported names, as dlsym sees them (door 1 in hook_table.h). Runtime names are here too because
 * programs that load libcudart with dlopen reach cudaMalloc through dlsym(handle, ...), past
 * LD_PRELOAD. */
extern CUresult cuMemAllocAsync_ptsz(CUdeviceptr *, size_t, CUstream);
extern CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
/* The CUDA 11/12 form (cuda.h maps the name to _v2; both are hooks, hooks_driver.c). */
#undef cuGetProcAddress
extern CUresult cuGetProcAddress(const char *, void **, int, cuuint64_t);
extern cudaError_t cudaMalloc(void **, size_t);
extern cudaError_t cudaFree(void *);
extern cudaError_t cudaMallocPitch(void **, size_t *, size_t, size_t);
extern cudaError_t cudaMemGetInfo(size_t *, size_t *);
extern cudaError_t cudaMallocAsync(void **, size_t, cudaStream_t);
extern cudaError_t cudaFreeAsync(void *, cudaStream_t);
extern cudaError_t cudaMallocAsync_ptsz(void **, size_t, cudaStream_t);
extern cudaError_t cudaFreeAsync_ptsz(void *, cudaStream_t);
extern cudaError_t cudaGetDriverEntryPoint(const char *, void **, unsigned long long,
                                           enum cudaDriverEntryPointQueryResult *);
extern cudaError_t cudaGetDriverEntryPointByVersion(const char *, void **, unsigned int, unsigned long long,
                                                    enum cudaDriverEntryPointQueryResult *);
extern cudaError_t cudaGetDriverEntryPoint_ptsz(const char *, void **, unsigned long long,
                                                enum cudaDriverEntryPointQueryResult *);
extern cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *, void **, unsigned int, unsigned long long,
                                                         enum cudaDriverEntryPointQueryResult *);
extern CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
extern CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *,
                                     CUpti_SubscriberParams *);
extern CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);

#define EXPORTED_HOOK(name, door) {#name, door ? (void *)(name) : NULL},
static const struct {
    const char *name;
    void *hook; /* NULL: the dynamic loader's only (door 0) */
} exported_hooks[] = {TRANSIT_EXPORTED_HOOKS(EXPORTED_HOOK)};

void *transit_exported_hook(const char *name)
{
    if (!name || name[0] != 'c' || name[1] != 'u')
        return NULL;
    for (size_t i = 0; i < sizeof exported_hooks / sizeof exported_hooks[0]; i++)
        if (exported_hooks[i].hook && strcmp(name, exported_hooks[i].name) == 0)
            return exported_hooks[i].hook;
    return NULL;
}

/* The tail call matters: glibc's dlsym reads its return address to know who called it (for
 * RTLD_NEXT), and a sibling call leaves the application's return address in place, so RTLD_NEXT
 * keeps meaning "after the caller", not "after libtransit". Forced at every build type. */
HOOK __attribute__((optimize("O2", "optimize-sibling-calls"))) void *dlsym(void *handle, const char *name)
{
    void *hook = transit_exported_hook(name);
    if (hook)
        return hook;
    return transit_glibc_dlsym()(handle, name);
}
