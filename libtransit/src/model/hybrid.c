/* hybrid.c - see hybrid.h. */
#include "hybrid.h"

#include <stdlib.h>

/* Each count's field in the cost, saturated: 21 bits (2 million launches) each. */
#define COST_FIELD_BITS 21
#define COST_FIELD_MAX ((1u << COST_FIELD_BITS) - 1)

typedef struct ranked {
    uint64_t cost;
    size_t index;
} ranked;

TRANSIT_INTERNAL uint64_t transit_hybrid_cost(uint32_t reuse, uint32_t launches, uint32_t rereading_launches)
{
    uint64_t r = TRANSIT_MIN(reuse, COST_FIELD_MAX), l = TRANSIT_MIN(TRANSIT_MAX(launches, reuse), COST_FIELD_MAX),
             g = TRANSIT_MIN(rereading_launches, COST_FIELD_MAX);
    return g << (2 * COST_FIELD_BITS) | l << COST_FIELD_BITS | r;
}

/* Costliest first; among equals, lower addresses first (the order is then the same every run). */
static int by_cost(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->cost != y->cost)
        return x->cost > y->cost ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* The chunks in placement order, costliest first; NULL out of memory. */
static ranked *rank_by_cost(const uint64_t *cost, size_t n)
{
    ranked *order = malloc((n + 1) * sizeof *order);
    if (!order)
        return NULL;
    for (size_t i = 0; i < n; i++)
        order[i] = (ranked){cost[i], i};
    qsort(order, n, sizeof *order, by_cost);
    return order;
}

TRANSIT_INTERNAL int transit_hybrid_place(const uint64_t *cost, size_t n, uint64_t capacity, uint8_t *resident)
{
    ranked *order = rank_by_cost(cost, n);
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

TRANSIT_INTERNAL size_t transit_hybrid_demote(const uint64_t *cost, size_t n, uint64_t excess, uint8_t *resident,
                                              size_t *out, size_t out_cap)
{
    ranked *order = rank_by_cost(cost, n);
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
