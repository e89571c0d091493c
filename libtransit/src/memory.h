/* memory.h - the bookkeeping every allocation hook shares, whichever API level it sits at. */
#ifndef TRANSIT_MEMORY_H
#define TRANSIT_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Kept free below the device's physical free memory in limit mode: room for the CUDA
 * context, library workspaces and NCCL buffers that do not come through TRANSIT. */
#define TRANSIT_PHYS_MARGIN (2ULL << 30)

bool transit_mem_need_budget(int device);
void transit_mem_after_fork(void);
/* Records the device's physical free and total memory, measured before TRANSIT's first
 * managed allocation on it. */
void transit_mem_set_budget(int device, uint64_t free_bytes, uint64_t total_bytes);
/* Limit mode guard: 0 to go ahead (after transit_policy_before_alloc, which may first make room
 * for it under L), -1 when the allocation would take the process past the device's physical free
 * memory (counted and logged; the caller returns out-of-memory). */
int transit_mem_admit(int device, uint64_t size);
void transit_mem_allocated(uint64_t ptr, uint64_t size, int device);
/* 1 when ptr was a TRANSIT allocation (now forgotten), else 0. */
int transit_mem_freed(uint64_t ptr);
void transit_vmm_created(uint64_t handle, uint64_t size, int device);
void transit_vmm_released(uint64_t handle);
/* Row pitch and total bytes of a pitched allocation (rows aligned to 512 bytes, as
 * cudaMallocPitch does on every current GPU); -1 when the size overflows. */
int transit_pitched_size(size_t width, size_t height, size_t *pitch, size_t *bytes);
/* What cudaMemGetInfo reports in limit mode: total = L, free = L minus resident. */
void transit_mem_limit_info(size_t *free_bytes, size_t *total_bytes);

#endif
