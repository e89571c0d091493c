/* hist.h - migration size histogram (count and bytes per size bin).
 *
 * Bins, by migration size s in bytes (boundaries are exact):
 *   "<4K"     s <  4096
 *   "4K-64K"  4096    <= s < 65536
 *   "64K-1M"  65536   <= s < 1048576
 *   "1M-2M"   1048576 <= s <= 2097152   (2 MiB itself lands here: UVM evicts in 2 MiB units)
 *   ">2M"     s > 2097152
 *
 * A plain value type (no allocation) so stats can embed one per direction. Not thread-safe:
 * the caller serializes updates. */
#ifndef TRANSIT_HIST_H
#define TRANSIT_HIST_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

#define TRANSIT_HIST_BINS 5

typedef struct transit_hist {
    uint64_t count[TRANSIT_HIST_BINS];
    uint64_t bytes[TRANSIT_HIST_BINS];
} transit_hist;

typedef enum { TRANSIT_HIST_COUNT = 0, TRANSIT_HIST_BYTES = 1 } transit_hist_field;

/* The bin (0..TRANSIT_HIST_BINS-1) a migration of `bytes` belongs to. */
TRANSIT_INTERNAL int transit_hist_bin(uint64_t bytes);
/* The bin's JSON key ("<4K", "4K-64K", ...). Static storage. */
TRANSIT_INTERNAL const char *transit_hist_label(int bin);
TRANSIT_INTERNAL void transit_hist_add(transit_hist *h, uint64_t bytes);
/* Writes {"<4K": n, "4K-64K": n, "64K-1M": n, "1M-2M": n, ">2M": n} (counts or bytes) into
 * buf, NUL-terminated. Returns the length written, or -1 (buf holds "") when cap is too small.
 * No allocation: usable from a signal handler. */
TRANSIT_INTERNAL int transit_hist_json(const transit_hist *h, transit_hist_field field, char *buf,
                                       size_t cap);

#endif
