/* chunks.h - limit mode's estimate of what is device-resident, in 2 MiB chunks.
 *
 * Each chunk that data migrated into (CUPTI HtoD records, TRANSIT's prefetches included) is a node
 * in an LRU list ordered by the last such migration, and counts as 2 MiB resident: the driver
 * moves more than CUPTI's records name (probably its own prefetching around faults; on an H200
 * page-granular counting fell 9-12 GiB short of what the device held after training). The pages the
 * records name (4 KiB granularity) only decide when a chunk is forgotten: once all of them
 * have left the device. When the estimate exceeds the emulated capacity L, the policy asks for
 * victims: the least-recently-migrated chunks, until resident bytes <= target, as address
 * ranges (adjacent chunks coalesced) to prefetch to the host. Every operation is O(1) per
 * chunk touched. Memory is fixed at creation (max_chunks nodes); data migrating into a chunk
 * when all nodes are in use is counted as untracked. Not thread-safe. */
#ifndef TRANSIT_CHUNKS_H
#define TRANSIT_CHUNKS_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"
#include "ranges.h"

#define TRANSIT_CHUNK_SHIFT 21 /* 2 MiB: UVM's eviction unit */
#define TRANSIT_CHUNK_BYTES (1ull << TRANSIT_CHUNK_SHIFT)
#define TRANSIT_CHUNK_PAGE_SHIFT 12 /* the pages records name are tracked per 4 KiB */

typedef struct transit_chunks transit_chunks;

/* max_chunks: how many chunks can be resident at once (device memory / 2 MiB is enough).
 * NULL when out of memory or max_chunks == 0. */
TRANSIT_INTERNAL transit_chunks *transit_chunks_create(size_t max_chunks);
TRANSIT_INTERNAL void transit_chunks_destroy(transit_chunks *c);
/* [addr, addr+bytes) migrated to the device (may span chunks): its chunks become resident and
 * most recently migrated. Returns the bytes that could not be tracked (0 normally). */
TRANSIT_INTERNAL uint64_t transit_chunks_migrated(transit_chunks *c, uint64_t addr, uint64_t bytes);
/* [addr, addr+bytes) migrated to the device, but it may already have left again: its chunks not
 * resident become resident as the least recently migrated (the next victims); resident ones
 * stay where they are. Returns the bytes of the chunks added; *untracked gets the bytes that
 * could not be tracked. */
TRANSIT_INTERNAL uint64_t transit_chunks_arrived_cold(transit_chunks *c, uint64_t addr, uint64_t bytes,
                                                      uint64_t *untracked);
/* [addr, addr+bytes) is no longer on the device: migrated to the host, or its allocation freed.
 * Chunks left without any of the pages that migrated in are forgotten. */
TRANSIT_INTERNAL void transit_chunks_dropped(transit_chunks *c, uint64_t addr, uint64_t bytes);
TRANSIT_INTERNAL uint64_t transit_chunks_resident_bytes(const transit_chunks *c);
TRANSIT_INTERNAL size_t transit_chunks_count(const transit_chunks *c);
/* Picks least-recently-migrated chunks until resident bytes <= target or out_cap ranges are
 * filled, marks them non-resident, and writes them to out as ranges ascending by address,
 * adjacent chunks coalesced, each chunk whole (evicting only the pages the records named left
 * the rest on the device, unseen). Returns the number of ranges written;
 * call again if resident is still above target (out was full). */
TRANSIT_INTERNAL size_t transit_chunks_pick_victims(transit_chunks *c, uint64_t target, transit_range *out,
                                                    size_t out_cap);
/* A launch is about to use need[0..n) (disjoint ranges): its resident chunks become the most
 * recently migrated (chunks not resident stay so: nothing moved yet), and victims are picked as in
 * transit_chunks_pick_victims, never among the launch's own chunks, until resident bytes plus what
 * the launch adds (its chunks not resident) are at most target. Returns the number of ranges
 * written; call again while that is out_cap. The caller evicts the victims, then marks need
 * migrated. */
TRANSIT_INTERNAL size_t transit_chunks_make_room(transit_chunks *c, const transit_range *need, size_t n,
                                                 uint64_t target, transit_range *out, size_t out_cap);
/* The parts of [addr, addr+bytes) in chunks without any resident page (what the estimate places
 * on the host), ascending, adjacent chunks coalesced, at most out_cap ranges. *resume is where
 * to continue: addr + bytes once all of it was looked at. */
TRANSIT_INTERNAL size_t transit_chunks_spilled(const transit_chunks *c, uint64_t addr, uint64_t bytes,
                                               transit_range *out, size_t out_cap, uint64_t *resume);

#endif
