/* ranges.c - per-kernel-ordinal address ranges, merged with a gap threshold; see ranges.h. */
#include "ranges.h"

#include <stdlib.h>

typedef struct raw_range {
    uint32_t ordinal;
    uint64_t addr;
    uint64_t end; /* exclusive */
} raw_range;

struct transit_ranges {
    uint64_t gap;
    raw_range *raw; /* raw_cap entries; after finalize, the merged ranges sorted by (ordinal, addr) */
    size_t raw_cap;
    size_t raw_len;
    size_t merged_len;    /* prefix of raw that is already merged (and sorted) */
    transit_range *flat;  /* finalize: merged ranges as (addr, bytes), in ordinal order */
    uint32_t *first;      /* finalize: ranges of ordinal o are flat[first[o] .. first[o+1]) */
    uint32_t n_ordinals;  /* finalize: first has n_ordinals + 1 entries */
    uint64_t total_bytes;
    uint64_t dropped;
};

transit_ranges *transit_ranges_create(uint64_t gap, size_t raw_cap)
{
    transit_ranges *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->gap = gap;
    r->raw_cap = raw_cap ? TRANSIT_MIN(raw_cap, (size_t)UINT32_MAX) : TRANSIT_RANGES_RAW_CAP_DEFAULT;
    r->raw = malloc(r->raw_cap * sizeof *r->raw);
    if (!r->raw) {
        free(r);
        return NULL;
    }
    return r;
}

static void drop_index(transit_ranges *r)
{
    free(r->flat);
    free(r->first);
    r->flat = NULL;
    r->first = NULL;
    r->n_ordinals = 0;
    r->total_bytes = 0;
}

void transit_ranges_destroy(transit_ranges *r)
{
    if (!r)
        return;
    drop_index(r);
    free(r->raw);
    free(r);
}

void transit_ranges_reset(transit_ranges *r)
{
    drop_index(r);
    r->raw_len = 0;
    r->merged_len = 0;
    r->dropped = 0;
}

static int compare_raw(const void *pa, const void *pb)
{
    const raw_range *a = pa, *b = pb;
    if (a->ordinal != b->ordinal)
        return a->ordinal < b->ordinal ? -1 : 1;
    if (a->addr != b->addr)
        return a->addr < b->addr ? -1 : 1;
    return 0;
}

/* Sorts raw[0..raw_len) and merges, per ordinal, ranges closer than gap; compacts in place. */
static void merge_raw(transit_ranges *r)
{
    if (r->merged_len == r->raw_len)
        return;
    qsort(r->raw, r->raw_len, sizeof *r->raw, compare_raw);
    size_t out = 0;
    for (size_t i = 0; i < r->raw_len; i++) {
        raw_range *cur = &r->raw[i];
        raw_range *last = out ? &r->raw[out - 1] : NULL;
        /* cur->addr >= last->addr (sorted), so only the gap after last->end matters. */
        int mergeable = last && last->ordinal == cur->ordinal &&
                        (cur->addr <= last->end || cur->addr - last->end <= r->gap);
        if (mergeable) {
            if (cur->end > last->end)
                last->end = cur->end;
        } else {
            r->raw[out++] = *cur;
        }
    }
    r->raw_len = out;
    r->merged_len = out;
}

int transit_ranges_add(transit_ranges *r, uint32_t ordinal, uint64_t addr, uint64_t bytes)
{
    if (bytes == 0)
        return 0;
    if (r->flat || ordinal >= TRANSIT_RANGES_MAX_ORDINALS || addr + bytes < addr) {
        r->dropped++;
        return -1;
    }
    if (r->raw_len == r->raw_cap) {
        merge_raw(r);
        if (r->raw_len == r->raw_cap) {
            r->dropped++;
            return -1;
        }
    }
    r->raw[r->raw_len++] = (raw_range){.ordinal = ordinal, .addr = addr, .end = addr + bytes};
    return 0;
}

int transit_ranges_finalize(transit_ranges *r)
{
    if (r->flat)
        return 0;
    merge_raw(r);
    uint32_t n_ordinals = r->raw_len ? r->raw[r->raw_len - 1].ordinal + 1 : 0;
    /* At least one entry each, so finalized-ness is simply flat != NULL. */
    transit_range *flat = malloc((r->raw_len ? r->raw_len : 1) * sizeof *flat);
    uint32_t *first = malloc(((size_t)n_ordinals + 1) * sizeof *first);
    if (!flat || !first) {
        free(flat);
        free(first);
        return -1;
    }
    uint64_t total = 0;
    size_t i = 0;
    for (uint32_t o = 0; o <= n_ordinals; o++) {
        first[o] = (uint32_t)i;
        while (i < r->raw_len && r->raw[i].ordinal == o) {
            flat[i] = (transit_range){.addr = r->raw[i].addr, .bytes = r->raw[i].end - r->raw[i].addr};
            total += flat[i].bytes;
            i++;
        }
    }
    r->flat = flat;
    r->first = first;
    r->n_ordinals = n_ordinals;
    r->total_bytes = total;
    return 0;
}

int transit_ranges_finalized(const transit_ranges *r)
{
    return r->flat != NULL;
}

const transit_range *transit_ranges_get(const transit_ranges *r, uint32_t ordinal, size_t *count)
{
    if (!r->flat || ordinal >= r->n_ordinals || r->first[ordinal] == r->first[ordinal + 1]) {
        *count = 0;
        return NULL;
    }
    *count = r->first[ordinal + 1] - r->first[ordinal];
    return &r->flat[r->first[ordinal]];
}

int transit_ranges_add_all(transit_ranges *dst, const transit_ranges *src)
{
    if (!src->flat || dst->flat)
        return -1;
    for (uint32_t o = 0; o < src->n_ordinals; o++)
        for (uint32_t i = src->first[o]; i < src->first[o + 1]; i++)
            transit_ranges_add(dst, o, src->flat[i].addr, src->flat[i].bytes);
    return 0;
}

size_t transit_ranges_total_count(const transit_ranges *r)
{
    return r->flat ? r->raw_len : 0;
}

uint64_t transit_ranges_total_bytes(const transit_ranges *r)
{
    return r->total_bytes;
}

uint64_t transit_ranges_dropped(const transit_ranges *r)
{
    return r->dropped;
}
