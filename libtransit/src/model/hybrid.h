/* hybrid.h - the hybrid policy's placement, a pure function of the warm-up profile: each 2 MiB
 * chunk is ranked by what reading it in place would cost (transit_hybrid_cost, from the profile's
 * launch counts and reuse, profile_build.c). The costliest chunks stay on the device up to its
 * capacity; the rest live on the host and are read in place (zero-copy) unless the mover streams
 * them. Parameters and gradients, touched by every micro-batch and by GEMMs, stay; optimizer
 * moments, touched once per step by an elementwise kernel, go: the host then holds what is
 * cheapest to reach there, where advise leaves whatever recency left there, and prefetch moves
 * the most used data round. */
#ifndef TRANSIT_HYBRID_H
#define TRANSIT_HYBRID_H

#include "chunks.h"
#include "decide.h"
#include "internal.h"

#include <stddef.h>
#include <stdint.h>

/* Reuse classes the stats count placed bytes in: 1, 2, 3-4, 5-8, 9 and more. */
#define TRANSIT_HYBRID_CLASSES 5

/* A chunk's rank by the cost of reading it in place, higher first: the launches of kernels that
 * re-read their operands (GEMM, attention: kernel_kind.h) that touch it, then all launches that
 * touch it, then its reuse (phases). A GEMM reads an operand left on the host again for every
 * output tile, so a chunk any of them touch leaves only after every chunk none touch
 * (design-notes.md, "Hybrid's placement by in-place cost"). A chunk only migration records name
 * has no launch count: its phases stand in. Profiles without launch counts rank by reuse. */
TRANSIT_INTERNAL uint64_t transit_hybrid_cost(uint32_t reuse, uint32_t launches, uint32_t rereading_launches);
/* resident[i] = 1 for the chunks (of cost[0..n), transit_hybrid_cost) hybrid keeps on the device,
 * costliest first (equal cost: lower index, i.e. address, first) up to `capacity` bytes. 0, or -1
 * out of memory. */
TRANSIT_INTERNAL int transit_hybrid_place(const uint64_t *cost, size_t n, uint64_t capacity, uint8_t *resident);
/* Which placed chunks go to the host when a measured reading finds the device `excess` bytes over
 * its target while hybrid holds it (what the profile does not see: PyTorch's workspaces, a new
 * segment): the cheapest first, equal cost from the highest address (the placement's order
 * reversed), whole chunks until `excess` is covered. Clears their resident[] and writes their
 * indices to out[0..out_cap); returns how many. */
TRANSIT_INTERNAL size_t transit_hybrid_demote(const uint64_t *cost, size_t n, uint64_t excess, uint8_t *resident,
                                              size_t *out, size_t out_cap);
/* The device bytes hybrid places in limit mode: the launches' target, EVICT_TARGET. */
TRANSIT_INTERNAL uint64_t transit_hybrid_capacity(uint64_t limit);
/* With the look-ahead mover (stream.h), the room for chunks in flight or staged: the margin
 * between that capacity and L (L/32, 850 MB at L = 27 GB), so placed + staged stays within L. */
#define TRANSIT_HYBRID_STAGING(limit) ((limit) - transit_hybrid_capacity(limit))

#endif
