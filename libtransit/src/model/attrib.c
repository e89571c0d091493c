/* attrib.c - migration -> kernel ordinal attribution; see attrib.h.
 *
 * Kernels sit in a ring buffer kept sorted by start time (records arrive nearly in order, so
 * insertion moves few entries). Waiting migrations sit in a min-heap by start time. */
#include "attrib.h"

#include <stdlib.h>

typedef struct kernel_rec {
    uint64_t start, end;
    uint32_t ordinal;
} kernel_rec;

typedef struct migration_rec {
    uint64_t start, addr, bytes;
} migration_rec;

struct transit_attrib {
    transit_ranges *out;
    kernel_rec *kernels; /* ring: logical index i is kernels[(k_head + i) % k_cap] */
    size_t k_cap, k_head, k_len;
    int kernels_evicted; /* migrations older than the oldest kept kernel are then unattributable */
    uint64_t max_end;    /* latest kernel end seen */
    migration_rec *pending; /* min-heap by start */
    size_t p_cap, p_len;
    transit_attrib_counts counts;
};

transit_attrib *transit_attrib_create(transit_ranges *out, size_t kernel_cap, size_t pending_cap)
{
    transit_attrib *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->out = out;
    a->k_cap = kernel_cap ? kernel_cap : TRANSIT_ATTRIB_KERNEL_CAP_DEFAULT;
    a->p_cap = pending_cap ? pending_cap : TRANSIT_ATTRIB_PENDING_CAP_DEFAULT;
    a->kernels = malloc(a->k_cap * sizeof *a->kernels);
    a->pending = malloc(a->p_cap * sizeof *a->pending);
    if (!a->kernels || !a->pending) {
        transit_attrib_destroy(a);
        return NULL;
    }
    return a;
}

void transit_attrib_destroy(transit_attrib *a)
{
    if (!a)
        return;
    free(a->kernels);
    free(a->pending);
    free(a);
}

static kernel_rec *kernel_at(transit_attrib *a, size_t i)
{
    return &a->kernels[(a->k_head + i) % a->k_cap];
}

static void unattributed(transit_attrib *a, uint64_t bytes)
{
    a->counts.unattributed++;
    a->counts.unattributed_bytes += bytes;
}

/* Assigns m using the kept kernels; requires a kernel ending at or after m->start. */
static void resolve(transit_attrib *a, const migration_rec *m)
{
    /* after = number of kept kernels with start <= m->start. */
    size_t lo = 0, hi = a->k_len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (kernel_at(a, mid)->start <= m->start)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t after = lo;
    const kernel_rec *owner = NULL;
    for (size_t i = after; i > 0 && after - i < TRANSIT_ATTRIB_CONTAIN_SCAN; i--) {
        if (kernel_at(a, i - 1)->end >= m->start) {
            owner = kernel_at(a, i - 1);
            break;
        }
    }
    if (!owner && after < a->k_len && (after > 0 || !a->kernels_evicted))
        owner = kernel_at(a, after);
    if (!owner || owner->ordinal == TRANSIT_ATTRIB_NO_ORDINAL) {
        unattributed(a, m->bytes);
        return;
    }
    a->counts.attributed++;
    a->counts.attributed_bytes += m->bytes;
    transit_ranges_add(a->out, owner->ordinal, m->addr, m->bytes);
}

static void heap_swap(migration_rec *x, migration_rec *y)
{
    migration_rec t = *x;
    *x = *y;
    *y = t;
}

static void heap_push(transit_attrib *a, const migration_rec *m)
{
    size_t i = a->p_len++;
    a->pending[i] = *m;
    while (i > 0 && a->pending[(i - 1) / 2].start > a->pending[i].start) {
        heap_swap(&a->pending[(i - 1) / 2], &a->pending[i]);
        i = (i - 1) / 2;
    }
}

static migration_rec heap_pop(transit_attrib *a)
{
    migration_rec top = a->pending[0];
    a->pending[0] = a->pending[--a->p_len];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, least = i;
        if (l < a->p_len && a->pending[l].start < a->pending[least].start)
            least = l;
        if (r < a->p_len && a->pending[r].start < a->pending[least].start)
            least = r;
        if (least == i)
            break;
        heap_swap(&a->pending[least], &a->pending[i]);
        i = least;
    }
    return top;
}

void transit_attrib_kernel(transit_attrib *a, uint64_t start_ns, uint64_t end_ns, uint32_t ordinal)
{
    if (a->k_len == a->k_cap) {
        a->k_head = (a->k_head + 1) % a->k_cap;
        a->k_len--;
        a->kernels_evicted = 1;
    }
    size_t i = a->k_len++;
    while (i > 0 && kernel_at(a, i - 1)->start > start_ns) {
        *kernel_at(a, i) = *kernel_at(a, i - 1);
        i--;
    }
    *kernel_at(a, i) = (kernel_rec){.start = start_ns, .end = end_ns, .ordinal = ordinal};
    if (end_ns > a->max_end)
        a->max_end = end_ns;
    while (a->p_len > 0 && a->pending[0].start <= a->max_end) {
        migration_rec m = heap_pop(a);
        resolve(a, &m);
    }
}

void transit_attrib_migration(transit_attrib *a, uint64_t start_ns, uint64_t addr, uint64_t bytes)
{
    migration_rec m = {.start = start_ns, .addr = addr, .bytes = bytes};
    if (a->k_len > 0 && start_ns <= a->max_end)
        resolve(a, &m);
    else if (a->p_len < a->p_cap)
        heap_push(a, &m);
    else
        unattributed(a, bytes);
}

void transit_attrib_retarget(transit_attrib *a, transit_ranges *out)
{
    a->out = out;
}

void transit_attrib_flush(transit_attrib *a)
{
    while (a->p_len > 0)
        unattributed(a, heap_pop(a).bytes);
    a->k_len = 0;
    a->k_head = 0;
    a->kernels_evicted = 0;
    a->max_end = 0;
}

transit_attrib_counts transit_attrib_get_counts(const transit_attrib *a)
{
    transit_attrib_counts c = a->counts;
    c.pending = a->p_len;
    return c;
}
