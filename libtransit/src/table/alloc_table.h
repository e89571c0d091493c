/* alloc_table.h - every live allocation TRANSIT made or counted, keyed by address (or VMM
 * handle), and the bookkeeping around it. The advise policy walks it; frees are matched against
 * it; limit mode's physical budget admits or refuses new ones. */
#ifndef TRANSIT_ALLOC_TABLE_H
#define TRANSIT_ALLOC_TABLE_H

#include "ranges.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { TRANSIT_ALLOC_MANAGED = 1, TRANSIT_ALLOC_VMM = 2 } transit_alloc_kind;

typedef struct transit_alloc {
    uint64_t key;  /* device pointer, or VMM handle */
    uint64_t size;
    int device;
    transit_alloc_kind kind;
} transit_alloc;

/* 0 on success, -1 when out of memory. A key already present is replaced. */
int transit_alloc_insert(const transit_alloc *a);
/* Removes key; returns 1 and fills *out (if non-NULL) when found, else 0. */
int transit_alloc_remove(uint64_t key, transit_alloc *out);
size_t transit_alloc_count(void);
/* A malloc'd copy of the live allocations of `kind` (count in *n), so that callers can make
 * driver calls for each without holding the table lock; NULL when none or out of memory. */
transit_alloc *transit_alloc_snapshot(transit_alloc_kind kind, size_t *n);
/* The parts of [addr, addr + bytes) that lie in live managed allocations, one piece per
 * allocation, in address order (at most `cap`; the count is returned). The driver rejects a
 * prefetch that reaches outside an allocation, and estimates built from 2 MiB chunks or merged
 * ranges do. */
size_t transit_alloc_clip(uint64_t addr, uint64_t bytes, transit_range *out, size_t cap);
/* Forgets everything (after fork: the child has no CUDA context). */
void transit_alloc_reset(void);

/* Kept free below the device's physical free memory in limit mode: room for the CUDA
 * context, library workspaces and NCCL buffers that do not come through TRANSIT. */
#define TRANSIT_PHYS_MARGIN (2ULL << 30)

bool transit_mem_need_budget(int device);
void transit_mem_after_fork(void);
/* Records the device's physical free and total memory, measured before TRANSIT's first
 * managed allocation on it. */
void transit_mem_set_budget(int device, uint64_t free_bytes, uint64_t total_bytes);
/* Limit mode's guard: 0 to go ahead, -1 when the allocation would take the process past the
 * device's physical free memory (counted and logged; the caller returns out-of-memory). */
int transit_mem_admit(int device, uint64_t size);
void transit_mem_allocated(uint64_t ptr, uint64_t size, int device);
/* 1, with its size, when ptr was a TRANSIT allocation (now forgotten), else 0. */
int transit_mem_freed(uint64_t ptr, uint64_t *size);
void transit_vmm_created(uint64_t handle, uint64_t size, int device);
void transit_vmm_released(uint64_t handle);
/* Row pitch and total bytes of a pitched allocation (rows aligned to 512 bytes, as
 * cudaMallocPitch does on every current GPU); -1 when the size overflows. */
int transit_pitched_size(size_t width, size_t height, size_t *pitch, size_t *bytes);
/* What cudaMemGetInfo reports in limit mode: total = L, free = L minus `resident`. */
void transit_mem_limit_info(uint64_t resident, size_t *free_bytes, size_t *total_bytes);


#endif
