/* chunks.c - LRU of device-resident 2 MiB chunks for limit mode; see chunks.h.
 *
 * Nodes live in one array allocated at creation; a free list threads the unused ones. The
 * map from chunk index to node is open addressing with linear probing and backward-shift
 * deletion (no tombstones), at most half full. */
#include "chunks.h"

#include <stdlib.h>

#define PAGES_PER_CHUNK (1u << (TRANSIT_CHUNK_SHIFT - TRANSIT_CHUNK_PAGE_SHIFT))
#define PAGE_BYTES (1ull << TRANSIT_CHUNK_PAGE_SHIFT)
#define WORDS_PER_CHUNK (PAGES_PER_CHUNK / 64)
#define NIL UINT32_MAX

typedef struct node {
    uint64_t chunk;  /* address >> TRANSIT_CHUNK_SHIFT */
    uint32_t prev, next; /* LRU list (head: least recently migrated), or free list (next) */
    uint32_t pages;  /* resident pages */
    uint64_t bits[WORDS_PER_CHUNK];
} node;

struct transit_chunks {
    node *nodes;
    size_t max_chunks;
    uint32_t free_head;
    uint32_t *slots; /* node index, or NIL */
    size_t mask;
    uint32_t lru_head, lru_tail;
    size_t count;
};

transit_chunks *transit_chunks_create(size_t max_chunks)
{
    if (max_chunks == 0 || max_chunks >= NIL / 2)
        return NULL;
    transit_chunks *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    size_t n_slots = 1;
    while (n_slots < 2 * max_chunks)
        n_slots <<= 1;
    c->nodes = malloc(max_chunks * sizeof *c->nodes);
    c->slots = malloc(n_slots * sizeof *c->slots);
    if (!c->nodes || !c->slots) {
        transit_chunks_destroy(c);
        return NULL;
    }
    for (size_t i = 0; i < n_slots; i++)
        c->slots[i] = NIL;
    for (size_t i = 0; i < max_chunks; i++)
        c->nodes[i].next = i + 1 < max_chunks ? (uint32_t)(i + 1) : NIL;
    c->max_chunks = max_chunks;
    c->mask = n_slots - 1;
    c->free_head = 0;
    c->lru_head = c->lru_tail = NIL;
    return c;
}

void transit_chunks_destroy(transit_chunks *c)
{
    if (!c)
        return;
    free(c->nodes);
    free(c->slots);
    free(c);
}

static size_t slot_of(const transit_chunks *c, uint64_t chunk)
{
    return (size_t)((chunk * 0x9E3779B97F4A7C15ull) >> 32) & c->mask;
}

/* The slot holding chunk, or the empty slot where it would go. */
static size_t find_slot(const transit_chunks *c, uint64_t chunk)
{
    size_t s = slot_of(c, chunk);
    while (c->slots[s] != NIL && c->nodes[c->slots[s]].chunk != chunk)
        s = (s + 1) & c->mask;
    return s;
}

static void map_remove(transit_chunks *c, size_t s)
{
    /* Backward-shift deletion: move later entries of the probe run into the hole when
     * their home slot does not lie cyclically in (hole, their slot]. */
    size_t hole = s;
    size_t i = s;
    for (;;) {
        i = (i + 1) & c->mask;
        if (c->slots[i] == NIL)
            break;
        size_t home = slot_of(c, c->nodes[c->slots[i]].chunk);
        if (((i - home) & c->mask) >= ((i - hole) & c->mask)) {
            c->slots[hole] = c->slots[i];
            hole = i;
        }
    }
    c->slots[hole] = NIL;
}

static void lru_unlink(transit_chunks *c, uint32_t n)
{
    node *x = &c->nodes[n];
    if (x->prev != NIL)
        c->nodes[x->prev].next = x->next;
    else
        c->lru_head = x->next;
    if (x->next != NIL)
        c->nodes[x->next].prev = x->prev;
    else
        c->lru_tail = x->prev;
}

static void lru_append(transit_chunks *c, uint32_t n)
{
    node *x = &c->nodes[n];
    x->prev = c->lru_tail;
    x->next = NIL;
    if (c->lru_tail != NIL)
        c->nodes[c->lru_tail].next = n;
    else
        c->lru_head = n;
    c->lru_tail = n;
}

static void lru_prepend(transit_chunks *c, uint32_t n)
{
    node *x = &c->nodes[n];
    x->prev = NIL;
    x->next = c->lru_head;
    if (c->lru_head != NIL)
        c->nodes[c->lru_head].prev = n;
    else
        c->lru_tail = n;
    c->lru_head = n;
}

static void forget_node(transit_chunks *c, size_t slot, uint32_t n)
{
    lru_unlink(c, n);
    map_remove(c, slot);
    c->nodes[n].next = c->free_head;
    c->free_head = n;
    c->count--;
}

/* Sets (on != 0) or clears pages [first, last] of a chunk's bitmap; returns how many changed. */
static uint32_t mark_pages(node *x, uint32_t first, uint32_t last, int on)
{
    uint32_t changed = 0;
    for (uint32_t w = first / 64; w <= last / 64; w++) {
        uint32_t lo = w == first / 64 ? first % 64 : 0;
        uint32_t hi = w == last / 64 ? last % 64 : 63;
        uint64_t mask = (hi == 63 ? ~0ull : ((1ull << (hi + 1)) - 1)) & ~((1ull << lo) - 1);
        uint64_t before = x->bits[w];
        x->bits[w] = on ? before | mask : before & ~mask;
        changed += (uint32_t)__builtin_popcountll(before ^ x->bits[w]);
    }
    return changed;
}

/* The pages [*first, *last] of chunk that [addr, end) overlaps. */
static void page_span(uint64_t addr, uint64_t end, uint64_t chunk, uint32_t *first, uint32_t *last)
{
    uint64_t lo = TRANSIT_MAX(addr, chunk << TRANSIT_CHUNK_SHIFT);
    uint64_t hi = TRANSIT_MIN(end, (chunk + 1) << TRANSIT_CHUNK_SHIFT) - 1;
    *first = (uint32_t)((lo >> TRANSIT_CHUNK_PAGE_SHIFT) % PAGES_PER_CHUNK);
    *last = (uint32_t)((hi >> TRANSIT_CHUNK_PAGE_SHIFT) % PAGES_PER_CHUNK);
}

/* The chunk's node, made (not in the LRU list yet) when absent; NIL when out of nodes. *made
 * says whether it was. */
static uint32_t node_of(transit_chunks *c, uint64_t chunk, int *made)
{
    size_t s = find_slot(c, chunk);
    uint32_t n = c->slots[s];
    *made = n == NIL;
    if (n != NIL || c->free_head == NIL)
        return n;
    n = c->free_head;
    c->free_head = c->nodes[n].next;
    c->nodes[n] = (node){.chunk = chunk, .prev = NIL, .next = NIL};
    c->slots[s] = n;
    c->count++;
    return n;
}

/* Marks the pages of [addr, addr+bytes) resident. Hot: its chunks become the most recently
 * migrated. Cold: only the chunks not resident yet are added, as the least recently migrated.
 * Returns the bytes of the chunks added; *untracked gets the bytes that found no free node. */
static uint64_t add_range(transit_chunks *c, uint64_t addr, uint64_t bytes, int cold, uint64_t *untracked)
{
    uint64_t added = 0;
    uint64_t end = addr + bytes;
    if (bytes == 0 || end < addr)
        return 0;
    for (uint64_t chunk = addr >> TRANSIT_CHUNK_SHIFT; chunk <= (end - 1) >> TRANSIT_CHUNK_SHIFT; chunk++) {
        uint32_t first, last;
        int made;
        page_span(addr, end, chunk, &first, &last);
        uint32_t n = node_of(c, chunk, &made);
        if (n == NIL) {
            *untracked += (uint64_t)(last - first + 1) * PAGE_BYTES;
            continue;
        }
        if (cold && !made)
            continue;
        if (made)
            added += TRANSIT_CHUNK_BYTES;
        else
            lru_unlink(c, n);
        if (cold)
            lru_prepend(c, n);
        else
            lru_append(c, n);
        c->nodes[n].pages += mark_pages(&c->nodes[n], first, last, 1);
    }
    return added;
}

uint64_t transit_chunks_migrated(transit_chunks *c, uint64_t addr, uint64_t bytes)
{
    uint64_t untracked = 0;
    add_range(c, addr, bytes, 0, &untracked);
    return untracked;
}

uint64_t transit_chunks_arrived_cold(transit_chunks *c, uint64_t addr, uint64_t bytes, uint64_t *untracked)
{
    return add_range(c, addr, bytes, 1, untracked);
}

void transit_chunks_dropped(transit_chunks *c, uint64_t addr, uint64_t bytes)
{
    uint64_t end = addr + bytes;
    if (bytes == 0 || end < addr)
        return;
    for (uint64_t chunk = addr >> TRANSIT_CHUNK_SHIFT; chunk <= (end - 1) >> TRANSIT_CHUNK_SHIFT; chunk++) {
        uint32_t first, last;
        page_span(addr, end, chunk, &first, &last);
        size_t s = find_slot(c, chunk);
        uint32_t n = c->slots[s];
        if (n == NIL)
            continue;
        c->nodes[n].pages -= mark_pages(&c->nodes[n], first, last, 0);
        if (c->nodes[n].pages == 0)
            forget_node(c, s, n);
    }
}

uint64_t transit_chunks_resident_bytes(const transit_chunks *c)
{
    return (uint64_t)c->count * TRANSIT_CHUNK_BYTES;
}

size_t transit_chunks_spilled(const transit_chunks *c, uint64_t addr, uint64_t bytes, transit_range *out,
                              size_t out_cap, uint64_t *resume)
{
    uint64_t end = addr + bytes, at = addr;
    size_t n = 0;
    while (at < end) {
        uint64_t chunk = at >> TRANSIT_CHUNK_SHIFT;
        uint64_t next = TRANSIT_MIN((chunk + 1) << TRANSIT_CHUNK_SHIFT, end);
        if (c->slots[find_slot(c, chunk)] == NIL) {
            if (n && out[n - 1].addr + out[n - 1].bytes == at)
                out[n - 1].bytes += next - at;
            else if (n < out_cap)
                out[n++] = (transit_range){.addr = at, .bytes = next - at};
            else
                break;
        }
        at = next;
    }
    *resume = at;
    return n;
}

size_t transit_chunks_count(const transit_chunks *c)
{
    return c->count;
}

static int compare_range(const void *pa, const void *pb)
{
    const transit_range *a = pa, *b = pb;
    return a->addr < b->addr ? -1 : a->addr > b->addr;
}

size_t transit_chunks_pick_victims(transit_chunks *c, uint64_t target, transit_range *out, size_t out_cap)
{
    size_t n_out = 0;
    while (transit_chunks_resident_bytes(c) > target && n_out < out_cap && c->lru_head != NIL) {
        uint32_t n = c->lru_head;
        uint64_t chunk = c->nodes[n].chunk;
        out[n_out++] = (transit_range){.addr = chunk << TRANSIT_CHUNK_SHIFT, .bytes = TRANSIT_CHUNK_BYTES};
        forget_node(c, find_slot(c, chunk), n);
    }
    qsort(out, n_out, sizeof *out, compare_range);
    size_t merged = 0;
    for (size_t i = 0; i < n_out; i++) {
        if (merged && out[merged - 1].addr + out[merged - 1].bytes == out[i].addr)
            out[merged - 1].bytes += out[i].bytes;
        else
            out[merged++] = out[i];
    }
    return merged;
}

/* The resident chunks of [addr, addr+bytes) become the most recently migrated (chunks not
 * resident stay so: nothing moved yet); the bytes of the chunks it touches are added to *all and
 * those of the resident ones to *resident: one hash lookup per chunk on the launch path. */
static void touch_counting(transit_chunks *c, uint64_t addr, uint64_t bytes, uint64_t *all, uint64_t *resident)
{
    uint64_t end = addr + bytes;
    if (bytes == 0 || end < addr)
        return;
    for (uint64_t chunk = addr >> TRANSIT_CHUNK_SHIFT; chunk <= (end - 1) >> TRANSIT_CHUNK_SHIFT; chunk++) {
        uint32_t n = c->slots[find_slot(c, chunk)];
        *all += TRANSIT_CHUNK_BYTES;
        if (n != NIL) {
            lru_unlink(c, n);
            lru_append(c, n);
            *resident += TRANSIT_CHUNK_BYTES;
        }
    }
}

size_t transit_chunks_make_room(transit_chunks *c, const transit_range *need, size_t n, uint64_t target,
                                transit_range *out, size_t out_cap)
{
    uint64_t all = 0, own = 0;
    for (size_t k = 0; k < n; k++)
        touch_counting(c, need[k].addr, need[k].bytes, &all, &own);
    uint64_t incoming = all - own;
    if (transit_chunks_resident_bytes(c) + incoming <= target)
        return 0;
    /* The launch's own chunks are the most recent: picking stops before them. */
    return transit_chunks_pick_victims(c, TRANSIT_MAX(target > incoming ? target - incoming : 0, own), out, out_cap);
}
