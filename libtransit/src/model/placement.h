/* placement.h - the hybrid policy's placement, a pure function of the warm-up profile: each 2 MiB
 * chunk's reuse is the most distinct phases of one profiled iteration that touch it (profile_build.c).
 * The most reused chunks stay on the device up to its capacity; the rest live on the host and
 * are read in place (zero-copy). Parameters and gradients, touched by every micro-batch, stay;
 * optimizer moments, touched once per step, go: the host then holds what is used least, where
 * advise leaves whatever recency left there, and prefetch moves the most used data round. */
#ifndef TRANSIT_PLACEMENT_H
#define TRANSIT_PLACEMENT_H

#include "chunks.h"
#include "decide.h"
#include "internal.h"

#include <stddef.h>
#include <stdint.h>

/* Reuse classes the stats count placed bytes in: 1, 2, 3-4, 5-8, 9 and more. */
#define TRANSIT_HYBRID_CLASSES 5

/* resident[i] = 1 for the chunks (of reuse[0..n)) hybrid keeps on the device, most reused first
 * (equal reuse: lower index, i.e. address, first) up to `capacity` bytes. 0, or -1 out of memory. */
TRANSIT_INTERNAL int transit_hybrid_place(const uint32_t *reuse, size_t n, uint64_t capacity, uint8_t *resident);
/* Which placed chunks go to the host when a measured reading finds the device `excess` bytes over
 * its target while hybrid holds it (what the profile does not see: PyTorch's workspaces, a new
 * segment): the least reused first, equal reuse from the highest address (the placement's order
 * reversed), whole chunks until `excess` is covered. Clears their resident[] and writes their
 * indices to out[0..out_cap); returns how many. */
TRANSIT_INTERNAL size_t transit_hybrid_demote(const uint32_t *reuse, size_t n, uint64_t excess, uint8_t *resident,
                                              size_t *out, size_t out_cap);
/* The device bytes hybrid places in limit mode: the launches' target, EVICT_TARGET. */
TRANSIT_INTERNAL uint64_t transit_hybrid_capacity(uint64_t limit);
/* With the look-ahead mover (stream.h), the room for chunks in flight or staged: the margin
 * between that capacity and L (L/32, 850 MB at L = 27 GB), so placed + staged stays within L. */
#define TRANSIT_HYBRID_STAGING(limit) ((limit) - transit_hybrid_capacity(limit))

#endif
