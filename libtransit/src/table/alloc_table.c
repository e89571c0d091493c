/* alloc_table.c - open-addressing hash table (linear probing, backward-shift deletion), plus
 * the managed allocations as spans sorted by address, for clipping ranges to them; and the
 * bookkeeping every allocation hook shares: counters, limit mode's physical budget. */
#include "alloc_table.h"
#include "internal.h"
#include "state.h"

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

/* ---- the allocations' bookkeeping ---- */

static uint64_t last_refused_size; /* a retry of the same refused request counts once */

/* VMM handles share the table with device pointers, which never have the top bit set. */
static uint64_t vmm_key(uint64_t handle)
{
    return handle | (1ULL << 63);
}

void transit_mem_after_fork(void)
{
    last_refused_size = 0;
}

bool transit_mem_need_budget(int device)
{
    return device >= 0 && device < TRANSIT_MAX_DEVICES && transit_g.phys_budget[device] == 0;
}

void transit_mem_set_budget(int device, uint64_t free_bytes, uint64_t total_bytes)
{
    if (device < 0 || device >= TRANSIT_MAX_DEVICES)
        return;
    uint64_t usable = free_bytes + transit_get(&transit_g.n.vmm_live);
    transit_g.phys_budget[device] = usable > TRANSIT_PHYS_MARGIN ? usable - TRANSIT_PHYS_MARGIN : 1;
    if (!transit_g.device_total[device])
        transit_g.device_total[device] = total_bytes;
    if (transit_limit_mode() && transit_g.cfg.mem_limit > transit_g.phys_budget[device])
        transit_warn("TRANSIT_MEM_LIMIT (%llu bytes) is above the device's usable free memory (%llu bytes)",
                     (unsigned long long)transit_g.cfg.mem_limit,
                     (unsigned long long)transit_g.phys_budget[device]);
}

int transit_mem_admit(int device, uint64_t size)
{
    if (!transit_limit_mode() || device < 0 || device >= TRANSIT_MAX_DEVICES)
        return 0;
    uint64_t budget = transit_g.phys_budget[device];
    uint64_t in_use = transit_get(&transit_g.n.managed_live) + transit_get(&transit_g.n.vmm_live);
    if (!budget || (size <= budget && in_use <= budget - size))
        return 0;
    transit_add(&transit_g.n.refused_calls, 1);
    if (__atomic_exchange_n(&last_refused_size, size, __ATOMIC_RELAXED) != size) {
        transit_add(&transit_g.n.refused, 1);
        transit_add(&transit_g.n.refused_bytes, size);
        transit_log("refused a managed allocation of %llu bytes on device %d: the process would hold %llu bytes, "
                    "past the %llu bytes of physical device memory limit mode may use",
                    (unsigned long long)size, device, (unsigned long long)(in_use + size),
                    (unsigned long long)budget);
    }
    return -1;
}

void transit_mem_allocated(uint64_t ptr, uint64_t size, int device)
{
    transit_alloc a = {.key = ptr, .size = size, .device = device, .kind = TRANSIT_ALLOC_MANAGED};
    __atomic_store_n(&last_refused_size, 0, __ATOMIC_RELAXED);
    if (transit_alloc_insert(&a))
        transit_warn("allocation table is out of memory; a free of %llu bytes will not be matched",
                     (unsigned long long)size);
    transit_add(&transit_g.n.alloc_count, 1);
    transit_add(&transit_g.n.managed_total, size);
    transit_add(&transit_g.n.managed_live, size);
    transit_raise_peak(&transit_g.n.managed_peak, transit_get(&transit_g.n.managed_live));
    transit_note_cuda_ok();
    transit_note_device(device);
}

int transit_mem_freed(uint64_t ptr, uint64_t *size)
{
    transit_alloc a;
    if (!transit_alloc_remove(ptr, &a))
        return 0;
    transit_add(&transit_g.n.free_count, 1);
    transit_sub(&transit_g.n.managed_live, a.size);
    *size = a.size;
    return 1;
}

void transit_vmm_created(uint64_t handle, uint64_t size, int device)
{
    transit_alloc a = {.key = vmm_key(handle), .size = size, .device = device, .kind = TRANSIT_ALLOC_VMM};
    transit_alloc_insert(&a);
    transit_add(&transit_g.n.vmm_count, 1);
    transit_add(&transit_g.n.vmm_live, size);
    transit_note_cuda_ok();
}

void transit_vmm_released(uint64_t handle)
{
    transit_alloc a;
    if (!transit_alloc_remove(vmm_key(handle), &a))
        return;
    transit_sub(&transit_g.n.vmm_live, a.size);
}

int transit_pitched_size(size_t width, size_t height, size_t *pitch, size_t *bytes)
{
    const size_t align = 512;
    if (width > SIZE_MAX - align)
        return -1;
    *pitch = (width + align - 1) / align * align;
    if (height && *pitch > SIZE_MAX / height)
        return -1;
    *bytes = *pitch * height;
    return 0;
}

void transit_mem_limit_info(uint64_t resident, size_t *free_bytes, size_t *total_bytes)
{
    uint64_t limit = transit_g.cfg.mem_limit;
    *total_bytes = (size_t)limit;
    *free_bytes = (size_t)(resident < limit ? limit - resident : 0);
}
