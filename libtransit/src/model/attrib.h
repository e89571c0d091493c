/* attrib.h - attributes unified-memory HtoD migrations to kernel ordinals (prefetch profiling).
 *
 * CUPTI delivers kernel activity records and unified-memory counter records in separate
 * buffers, so one kind may arrive before or after the other. A migration is assigned to the
 * kernel whose [start, end] contains its start (the latest-starting such kernel among the
 * last TRANSIT_ATTRIB_CONTAIN_SCAN), else to the first kernel that starts after it:
 * fault-driven migrations precede or overlap the kernel that faulted. A migration waits until
 * a kernel ending at or after its start has been seen; then its range goes to
 * transit_ranges_add(out, ordinal, addr, bytes).
 *
 * Bounded: the last kernel_cap kernels (sorted by start) and pending_cap waiting migrations.
 * A migration that cannot be attributed (no ordinal, older than every kept kernel, pending
 * buffer full, or still waiting at transit_attrib_flush) is counted, not kept. Not thread-safe. */
#ifndef TRANSIT_ATTRIB_H
#define TRANSIT_ATTRIB_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"
#include "ranges.h"

#define TRANSIT_ATTRIB_NO_ORDINAL UINT32_MAX /* kernel launched outside a known iteration */
#define TRANSIT_ATTRIB_KERNEL_CAP_DEFAULT (1u << 16)
#define TRANSIT_ATTRIB_PENDING_CAP_DEFAULT (1u << 16)
#define TRANSIT_ATTRIB_CONTAIN_SCAN 16 /* concurrent kernels examined for containment */

typedef struct transit_attrib transit_attrib;

typedef struct transit_attrib_counts {
    uint64_t attributed, attributed_bytes;     /* sent to ranges */
    uint64_t unattributed, unattributed_bytes; /* counted and forgotten */
    uint64_t pending;                          /* still waiting for a later kernel */
} transit_attrib_counts;

/* Caps of 0 mean the defaults. NULL when out of memory. `out` is borrowed. */
TRANSIT_INTERNAL transit_attrib *transit_attrib_create(transit_ranges *out, size_t kernel_cap,
                                                      size_t pending_cap);
TRANSIT_INTERNAL void transit_attrib_destroy(transit_attrib *a);
/* A kernel activity record: GPU timestamps (ns) and its launch ordinal within the iteration
 * (from the external correlation id), or TRANSIT_ATTRIB_NO_ORDINAL. */
TRANSIT_INTERNAL void transit_attrib_kernel(transit_attrib *a, uint64_t start_ns, uint64_t end_ns,
                                            uint32_t ordinal);
/* An HtoD migration record (its start timestamp decides; the end does not matter). */
TRANSIT_INTERNAL void transit_attrib_migration(transit_attrib *a, uint64_t start_ns, uint64_t addr,
                                               uint64_t bytes);
/* Later migrations go to `out` instead (borrowed). */
TRANSIT_INTERNAL void transit_attrib_retarget(transit_attrib *a, transit_ranges *out);
/* End of profiling: migrations still waiting become unattributed; kept kernels are forgotten. */
TRANSIT_INTERNAL void transit_attrib_flush(transit_attrib *a);
TRANSIT_INTERNAL transit_attrib_counts transit_attrib_get_counts(const transit_attrib *a);

#endif
