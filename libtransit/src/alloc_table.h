/* alloc_table.h - every live allocation TRANSIT made or counted, keyed by address (or VMM
 * handle). The advise policy walks it; frees are matched against it. */
#ifndef TRANSIT_ALLOC_TABLE_H
#define TRANSIT_ALLOC_TABLE_H

#include "ranges.h"

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

#endif
