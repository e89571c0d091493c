/* ranges.h - per-kernel-ordinal address ranges for the prefetch policy.
 *
 * Profiling adds [addr, addr+bytes) under the ordinal of the kernel a migration was
 * attributed to (attrib.c). transit_ranges_finalize() sorts each ordinal's ranges and merges
 * those that overlap, touch, or lie at most `gap` bytes apart. After that,
 * transit_ranges_get() is O(1), allocates nothing and searches nothing: the prefetch policy
 * calls it on every kernel launch.
 *
 * Memory is bounded: raw ranges are kept in a buffer of `raw_cap` entries; when it fills up,
 * it is merged in place (merging is associative, so the final result does not change), and a
 * range that still does not fit is dropped and counted. Not thread-safe. */
#ifndef TRANSIT_RANGES_H
#define TRANSIT_RANGES_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

#define TRANSIT_RANGES_GAP_DEFAULT (128u * 1024u)  /* TRANSIT_PREFETCH_GAP default */
#define TRANSIT_RANGES_RAW_CAP_DEFAULT (1u << 20)  /* 24 MiB of raw ranges */
#define TRANSIT_RANGES_MAX_ORDINALS (1u << 22)     /* kernels per iteration; bounds the index */

typedef struct transit_range {
    uint64_t addr;
    uint64_t bytes;
} transit_range;

typedef struct transit_ranges transit_ranges;

/* raw_cap 0 means TRANSIT_RANGES_RAW_CAP_DEFAULT. NULL when out of memory. */
TRANSIT_INTERNAL transit_ranges *transit_ranges_create(uint64_t gap, size_t raw_cap);
TRANSIT_INTERNAL void transit_ranges_destroy(transit_ranges *r);
/* Forgets everything (re-profiling); keeps gap and capacity. */
TRANSIT_INTERNAL void transit_ranges_reset(transit_ranges *r);
/* Records a range for a kernel ordinal. 0 on success; -1 when it was dropped (buffer full
 * of distinct ranges, ordinal >= TRANSIT_RANGES_MAX_ORDINALS, or called after finalize).
 * bytes == 0 is ignored. */
TRANSIT_INTERNAL int transit_ranges_add(transit_ranges *r, uint32_t ordinal, uint64_t addr, uint64_t bytes);
/* Sorts and merges; builds the per-ordinal index. 0 on success, -1 when out of memory (the
 * object then stays unfinalized and can be finalized again). */
TRANSIT_INTERNAL int transit_ranges_finalize(transit_ranges *r);
TRANSIT_INTERNAL int transit_ranges_finalized(const transit_ranges *r);
/* The merged ranges of an ordinal, ascending by address; *count = 0 (and NULL) for an ordinal
 * without ranges or before finalize. */
TRANSIT_INTERNAL const transit_range *transit_ranges_get(const transit_ranges *r, uint32_t ordinal,
                                                        size_t *count);
/* Adds every range of the finalized src, under its ordinal, to dst (not finalized): what an
 * earlier profile knew goes into the next. 0 on success; -1 when src is not finalized or dst is
 * (ranges dst has no room for are dropped and counted as in transit_ranges_add). */
TRANSIT_INTERNAL int transit_ranges_add_all(transit_ranges *dst, const transit_ranges *src);
/* Totals over all ordinals of the merged ranges (after finalize). */
TRANSIT_INTERNAL size_t transit_ranges_total_count(const transit_ranges *r);
TRANSIT_INTERNAL uint64_t transit_ranges_total_bytes(const transit_ranges *r);
/* Ranges dropped because the raw buffer was full. */
TRANSIT_INTERNAL uint64_t transit_ranges_dropped(const transit_ranges *r);

#endif
