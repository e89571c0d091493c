/* hooks.h - lookup of TRANSIT's replacement for a CUDA symbol. */
#ifndef TRANSIT_HOOKS_H
#define TRANSIT_HOOKS_H

#include "internal.h"

#include <stdint.h>

/* TRANSIT's hook for a driver symbol as cuGetProcAddress names it ("cuMemAlloc" with the
 * requested CUDA version), or NULL when TRANSIT leaves it alone. per_thread: the caller asked for
 * per-thread default stream versions (CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, or the
 * runtime's cudaEnablePerThreadDefaultStream): the stream-ordered hooks then read stream 0 as
 * the calling thread's default stream, as the driver's _ptsz functions do. */
TRANSIT_INTERNAL void *transit_driver_hook(const char *symbol, int cuda_version, int per_thread);
/* TRANSIT's hook for an exported symbol name ("cuMemAlloc_v2", "cudaMalloc"), or NULL. */
void *transit_exported_hook(const char *name);

/* alloc.c: around every allocation hook's real call (limit mode's guard and room, the bookkeeping,
 * the recorder's start, the policies). */
int transit_hook_admit(int device, uint64_t size);
void transit_hook_allocated(uint64_t ptr, uint64_t size, int device);
/* 1 when ptr was a TRANSIT allocation (now forgotten), else 0. */
int transit_hook_freed(uint64_t ptr);
void transit_hook_limit_info(size_t *free_bytes, size_t *total_bytes);

#endif
