/* alloc_table.c - open-addressing hash table (linear probing, backward-shift deletion), plus
 * the managed allocations as spans sorted by address, for clipping ranges to them. */
#include "alloc_table.h"
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define INITIAL_SLOTS 1024u /* a training process holds a few hundred to a few thousand blocks */

static transit_alloc *slots; /* key 0 marks an empty slot: no allocation lives at address 0 */
static size_t nslots, nlive;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct span {
    uint64_t start, end;
} span;
static span *spans; /* managed allocations, sorted by start, non-overlapping; under `lock` */
static size_t nspans, spans_cap;

/* Index of the first span whose end is past addr. */
static size_t span_after(uint64_t addr)
{
    size_t lo = 0, hi = nspans;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (spans[mid].end <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void span_remove(uint64_t start)
{
    size_t i = span_after(start);
    if (i < nspans && spans[i].start == start) {
        memmove(&spans[i], &spans[i + 1], (nspans - i - 1) * sizeof *spans);
        nspans--;
    }
}

/* Room for one more span, so that an insert never fails half-way. */
static int span_reserve(void)
{
    if (nspans < spans_cap)
        return 0;
    size_t cap = spans_cap ? spans_cap * 2 : INITIAL_SLOTS;
    span *grown = realloc(spans, cap * sizeof *spans);
    if (!grown)
        return -1;
    spans = grown;
    spans_cap = cap;
    return 0;
}

/* After span_reserve(). The driver never hands out overlapping live allocations: a span the new
 * one overlaps belongs to an allocation whose free was not seen (a context reset frees without
 * any cuMemFree), and is dropped, so that the spans stay sorted and disjoint. */
static void span_insert(uint64_t start, uint64_t size)
{
    uint64_t end = start + size;
    size_t i = span_after(start), stale = i;
    while (stale < nspans && spans[stale].start < end)
        stale++;
    memmove(&spans[i + 1], &spans[stale], (nspans - stale) * sizeof *spans);
    spans[i] = (span){.start = start, .end = end};
    nspans = nspans - (stale - i) + 1;
}

static size_t slot_of(uint64_t key, size_t n)
{
    key ^= key >> 33; /* fmix64: device pointers share their high bits and low zero bits */
    key *= 0xff51afd7ed558ccdULL;
    key ^= key >> 33;
    return (size_t)key & (n - 1);
}

static int grow(void)
{
    size_t n = nslots ? nslots * 2 : INITIAL_SLOTS;
    transit_alloc *fresh = calloc(n, sizeof *fresh);
    if (!fresh)
        return -1;
    for (size_t i = 0; i < nslots; i++) {
        if (!slots[i].key)
            continue;
        size_t j = slot_of(slots[i].key, n);
        while (fresh[j].key)
            j = (j + 1) & (n - 1);
        fresh[j] = slots[i];
    }
    free(slots);
    slots = fresh;
    nslots = n;
    return 0;
}

TRANSIT_INTERNAL int transit_alloc_insert(const transit_alloc *a)
{
    int rc = 0;
    pthread_mutex_lock(&lock);
    if (((nlive + 1) * 4 > nslots * 3 && grow()) || /* keep the load under 3/4 */
        (a->kind == TRANSIT_ALLOC_MANAGED && span_reserve())) {
        rc = -1;
        goto out;
    }
    size_t i = slot_of(a->key, nslots);
    while (slots[i].key && slots[i].key != a->key)
        i = (i + 1) & (nslots - 1);
    if (!slots[i].key)
        nlive++;
    else if (slots[i].kind == TRANSIT_ALLOC_MANAGED)
        span_remove(slots[i].key);
    slots[i] = *a;
    if (a->kind == TRANSIT_ALLOC_MANAGED)
        span_insert(a->key, a->size);
out:
    pthread_mutex_unlock(&lock);
    return rc;
}

TRANSIT_INTERNAL int transit_alloc_remove(uint64_t key, transit_alloc *out)
{
    int found = 0;
    pthread_mutex_lock(&lock);
    if (!nslots || !key)
        goto out;
    size_t i = slot_of(key, nslots);
    while (slots[i].key && slots[i].key != key)
        i = (i + 1) & (nslots - 1);
    if (!slots[i].key)
        goto out;
    found = 1;
    if (out)
        *out = slots[i];
    if (slots[i].kind == TRANSIT_ALLOC_MANAGED)
        span_remove(key);
    /* Backward-shift deletion keeps every probe chain unbroken without tombstones. */
    size_t hole = i;
    for (size_t j = (i + 1) & (nslots - 1); slots[j].key; j = (j + 1) & (nslots - 1)) {
        size_t home = slot_of(slots[j].key, nslots);
        if (((j - home) & (nslots - 1)) >= ((j - hole) & (nslots - 1))) {
            slots[hole] = slots[j];
            hole = j;
        }
    }
    memset(&slots[hole], 0, sizeof slots[hole]);
    nlive--;
out:
    pthread_mutex_unlock(&lock);
    return found;
}

TRANSIT_INTERNAL size_t transit_alloc_count(void)
{
    pthread_mutex_lock(&lock);
    size_t n = nlive;
    pthread_mutex_unlock(&lock);
    return n;
}

TRANSIT_INTERNAL transit_alloc *transit_alloc_snapshot(transit_alloc_kind kind, size_t *n)
{
    transit_alloc *copy;
    *n = 0;
    pthread_mutex_lock(&lock);
    copy = nlive ? malloc(nlive * sizeof *copy) : NULL;
    for (size_t i = 0; copy && i < nslots; i++)
        if (slots[i].key && slots[i].kind == kind)
            copy[(*n)++] = slots[i];
    pthread_mutex_unlock(&lock);
    return copy;
}

TRANSIT_INTERNAL size_t transit_alloc_clip(uint64_t addr, uint64_t bytes, transit_range *out, size_t cap)
{
    size_t n = 0;
    uint64_t end = addr + bytes;
    pthread_mutex_lock(&lock);
    for (size_t i = span_after(addr); i < nspans && spans[i].start < end && n < cap; i++) {
        uint64_t lo = TRANSIT_MAX(addr, spans[i].start), hi = TRANSIT_MIN(end, spans[i].end);
        out[n++] = (transit_range){.addr = lo, .bytes = hi - lo};
    }
    pthread_mutex_unlock(&lock);
    return n;
}

TRANSIT_INTERNAL void transit_alloc_reset(void)
{
    /* Called in a fork child, where the parent's lock may have been held: start afresh. */
    pthread_mutex_init(&lock, NULL);
    free(slots);
    free(spans);
    slots = NULL;
    spans = NULL;
    nslots = nlive = nspans = spans_cap = 0;
}
