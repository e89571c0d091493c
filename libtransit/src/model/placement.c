/* placement.c - see placement.h. */
#include "placement.h"

#include <stdlib.h>

typedef struct ranked {
    uint32_t reuse;
    size_t index;
} ranked;

/* Most reused first; among equals, lower addresses first (the order is then the same every run). */
static int by_reuse(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->reuse != y->reuse)
        return x->reuse > y->reuse ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* The chunks in placement order, most reused first; NULL out of memory. */
static ranked *rank_by_reuse(const uint32_t *reuse, size_t n)
{
    ranked *order = malloc((n + 1) * sizeof *order);
    if (!order)
        return NULL;
    for (size_t i = 0; i < n; i++)
        order[i] = (ranked){reuse[i], i};
    qsort(order, n, sizeof *order, by_reuse);
    return order;
}

TRANSIT_INTERNAL int transit_hybrid_place(const uint32_t *reuse, size_t n, uint64_t capacity, uint8_t *resident)
{
    ranked *order = rank_by_reuse(reuse, n);
    if (!order)
        return -1;
    uint64_t held = 0;
    for (size_t k = 0; k < n; k++) {
        size_t i = order[k].index;
        resident[i] = held + TRANSIT_CHUNK_BYTES <= capacity;
        held += resident[i] ? TRANSIT_CHUNK_BYTES : 0;
    }
    free(order);
    return 0;
}

TRANSIT_INTERNAL size_t transit_hybrid_demote(const uint32_t *reuse, size_t n, uint64_t excess, uint8_t *resident,
                                              size_t *out, size_t out_cap)
{
    ranked *order = rank_by_reuse(reuse, n);
    size_t m = 0;
    if (!order)
        return 0;
    uint64_t freed = 0;
    for (size_t k = n; k-- > 0 && freed < excess && m < out_cap;) {
        size_t i = order[k].index;
        if (!resident[i])
            continue;
        resident[i] = 0;
        out[m++] = i;
        freed += TRANSIT_CHUNK_BYTES;
    }
    free(order);
    return m;
}

TRANSIT_INTERNAL uint64_t transit_hybrid_capacity(uint64_t limit)
{
    return TRANSIT_EVICT_TARGET(limit);
}
