/* hook_table.h - the one list of what libtransit interposes. libtransit.map exports exactly the
 * names below (and transit_*, dlsym); tests/unit/test_hook_table.py fails when the map, the built
 * library's exports, the HOOK definitions and this list disagree.
 *
 * TRANSIT_EXPORTED_HOOKS: X(name, door), every exported CUDA/CUPTI entry point. door 1: dlsym()
 * hands out the hook for `name` too (programs that dlopen libcudart or libcuda reach these past
 * LD_PRELOAD); door 0: only the dynamic loader resolves it to the hook.
 *
 * TRANSIT_DRIVER_HOOKS: X(symbol, since, hook, per_thread_hook), what cuGetProcAddress hands out
 * for `symbol` from CUDA version `since` (the first whose ABI the hook has), and for per-thread
 * default stream lookups where the driver has a _ptsz form. */
#ifndef TRANSIT_HOOK_TABLE_H
#define TRANSIT_HOOK_TABLE_H

#define TRANSIT_EXPORTED_HOOKS(X)                                                                                    \
    X(cuMemAlloc_v2, 1)                                                                                              \
    X(cuMemFree_v2, 1)                                                                                               \
    X(cuMemAllocPitch_v2, 1)                                                                                         \
    X(cuMemGetInfo_v2, 1)                                                                                            \
    X(cuMemAllocAsync, 1)                                                                                            \
    X(cuMemAllocAsync_ptsz, 1)                                                                                       \
    X(cuMemFreeAsync, 1)                                                                                             \
    X(cuMemFreeAsync_ptsz, 1)                                                                                        \
    X(cuMemCreate, 1)                                                                                                \
    X(cuMemRelease, 1)                                                                                               \
    X(cuGetProcAddress, 1)                                                                                           \
    X(cuGetProcAddress_v2, 1)                                                                                        \
    X(cudaMalloc, 1)                                                                                                 \
    X(cudaFree, 1)                                                                                                   \
    X(cudaMallocPitch, 1)                                                                                            \
    X(cudaMemGetInfo, 1)                                                                                             \
    X(cudaMallocAsync, 1)                                                                                            \
    X(cudaFreeAsync, 1)                                                                                              \
    X(cudaMallocAsync_ptsz, 1)                                                                                       \
    X(cudaFreeAsync_ptsz, 1)                                                                                         \
    X(cudaGetDriverEntryPoint, 1)                                                                                    \
    X(cudaGetDriverEntryPointByVersion, 1)                                                                           \
    X(cudaGetDriverEntryPoint_ptsz, 0)                                                                               \
    X(cudaGetDriverEntryPointByVersion_ptsz, 0)                                                                      \
    X(cuptiSubscribe, 0)                                                                                             \
    X(cuptiSubscribe_v2, 0)                                                                                          \
    X(cuptiActivityRegisterCallbacks, 0)

#define TRANSIT_DRIVER_HOOKS(X)                                                                                      \
    X("cuMemAlloc", 3020, cuMemAlloc_v2, NULL)                                                                       \
    X("cuMemFree", 3020, cuMemFree_v2, NULL)                                                                         \
    X("cuMemAllocPitch", 3020, cuMemAllocPitch_v2, NULL)                                                             \
    X("cuMemGetInfo", 3020, cuMemGetInfo_v2, NULL)                                                                   \
    X("cuMemAllocAsync", 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz)                                               \
    X("cuMemFreeAsync", 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz)                                                  \
    X("cuMemCreate", 10020, cuMemCreate, NULL)                                                                       \
    X("cuMemRelease", 10020, cuMemRelease, NULL)                                                                     \
    X("cuGetProcAddress", 12000, cuGetProcAddress_v2, NULL)                                                          \
    X("cuGetProcAddress", 11030, cuGetProcAddress, NULL)

#endif
