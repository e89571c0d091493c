/* profile_build.c - the profile's aggregation: raw launches, parameter pointers and unified memory
 * records in, the transit.profile/1 fields out (profile_render.c; see profile.h, docs/profile.md). Pure. */
#include "profile_build_int.h"
#include "chunks.h"
#include "kernel_kind.h"
#include "multi_tensor.h"

#include <stdlib.h>
#include <string.h>

#define RENDER_START_BYTES (1u << 20)

static int cvec_push(cvec *c, uint64_t lo, uint64_t hi)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 8;
        crange *v = realloc(c->v, cap * sizeof *v);
        if (!v)
            return -1;
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = (crange){lo, hi};
    return 0;
}

static int by_lo(const void *a, const void *b)
{
    uint64_t x = ((const crange *)a)->lo, y = ((const crange *)b)->lo;
    return (x > y) - (x < y);
}

/* Sorted, and overlapping or adjacent ranges joined. */
static void cvec_merge(cvec *c)
{
    size_t m = 0;
    if (!c->n)
        return;
    qsort(c->v, c->n, sizeof *c->v, by_lo);
    for (size_t i = 1; i < c->n; i++) {
        if (c->v[i].lo <= c->v[m].hi + 1)
            c->v[m].hi = TRANSIT_MAX(c->v[m].hi, c->v[i].hi);
        else
            c->v[++m] = c->v[i];
    }
    c->n = m + 1;
}

static int by_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Index of the last element <= key in sorted v[0..n), or -1. */
static int64_t floor_index(const uint64_t *v, size_t n, uint64_t key)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid] <= key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (int64_t)lo - 1;
}

/* The allocation holding addr, or -1. */
static int64_t alloc_of(const profile_input *in, uint64_t addr)
{
    size_t lo = 0, hi = in->nallocs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (in->allocs[mid].addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (!lo || addr >= in->allocs[lo - 1].addr + in->allocs[lo - 1].bytes)
        return -1;
    return (int64_t)lo - 1;
}

/* The extent of each distinct parameter pointer: a pointer is where a tensor begins, and the
 * next one in the same allocation (or the allocation's end) where it ends, as far as launches
 * tell (an over-estimate where free blocks follow a tensor). */
static int pointer_extents(build *b)
{
    const profile_input *in = b->in;
    if (!(b->ptrs = malloc((in->nrefs + 1) * sizeof *b->ptrs)))
        return -1;
    for (uint64_t i = 0; i < in->nrefs; i++)
        if (alloc_of(in, in->refs[i].addr) >= 0)
            b->ptrs[b->nptrs++] = in->refs[i].addr;
        else
            b->refs_outside++;
    qsort(b->ptrs, b->nptrs, sizeof *b->ptrs, by_u64);
    size_t m = 0;
    for (size_t i = 0; i < b->nptrs; i++)
        if (!m || b->ptrs[i] != b->ptrs[m - 1])
            b->ptrs[m++] = b->ptrs[i];
    b->nptrs = m;
    if (!(b->ptr_end = malloc((m + 1) * sizeof *b->ptr_end)))
        return -1;
    for (size_t i = 0; i < m; i++) {
        int64_t a = alloc_of(in, b->ptrs[i]);
        uint64_t end = in->allocs[a].addr + in->allocs[a].bytes;
        b->ptr_end[i] = i + 1 < m && b->ptrs[i + 1] < end ? b->ptrs[i + 1] : end;
    }
    return 0;
}

/* Splits iteration `it` into phases: equal shares of kernel time when kernels were timed, else
 * equal counts of launches, at most PROFILE_MAX_PHASES. */
static int make_phases(build *b, iteration *it, uint64_t number)
{
    const profile_input *in = b->in;
    uint32_t maxord = 0;
    for (uint64_t i = 0; i < in->nlaunches; i++)
        if (in->launches[i].iteration == number)
            maxord = TRANSIT_MAX(maxord, in->launches[i].ordinal + 1);
    it->nordinals = maxord;
    if (!(it->by_ordinal = calloc(maxord + 1, sizeof *it->by_ordinal)) ||
        !(it->phase_of = calloc(maxord + 1, sizeof *it->phase_of)))
        return -1;
    uint64_t total = 0;
    for (uint64_t i = 0; i < in->nlaunches; i++) {
        const profile_launch *l = &in->launches[i];
        if (l->iteration != number || it->by_ordinal[l->ordinal])
            continue;
        it->by_ordinal[l->ordinal] = (uint32_t)i + 1;
        it->kernels++;
        if (l->start_ns && l->end_ns >= l->start_ns) {
            uint64_t d = l->end_ns - l->start_ns;
            total += d;
            it->timed = 1;
            it->t0 = it->t0 ? TRANSIT_MIN(it->t0, l->start_ns) : l->start_ns;
            it->t1 = TRANSIT_MAX(it->t1, l->end_ns);
        }
    }
    it->kernel_ns = total;
    uint32_t phases = TRANSIT_MIN(PROFILE_MAX_PHASES, TRANSIT_MAX(it->kernels, 1u));
    uint64_t cum = 0, seen = 0;
    uint32_t p = 0, in_phase = 0;
    for (uint32_t o = 0; o < maxord; o++) {
        if (!it->by_ordinal[o]) {
            it->phase_of[o] = NO_PHASE;
            continue;
        }
        const profile_launch *l = &in->launches[it->by_ordinal[o] - 1];
        uint64_t d = l->start_ns && l->end_ns >= l->start_ns ? l->end_ns - l->start_ns : 0;
        uint32_t want = it->timed && total ? (uint32_t)((__uint128_t)cum * phases / total)
                                           : (uint32_t)(seen * phases / it->kernels);
        if (in_phase && want > p && p + 1 < phases) {
            p++;
            in_phase = 0;
        }
        it->phase_of[o] = p;
        in_phase++;
        cum += d;
        seen++;
    }
    it->nphases = it->kernels ? p + 1 : 0;
    size_t n = it->nphases + 1;
    if (!(it->phase_start = calloc(n, sizeof(uint64_t))) || !(it->phase_end = calloc(n, sizeof(uint64_t))) ||
        !(it->phase_kernel_ns = calloc(n, sizeof(uint64_t))) || !(it->phase_first = calloc(n, sizeof(uint64_t))) ||
        !(it->phase_htod = calloc(n, sizeof(uint64_t))) || !(it->phase_dtoh = calloc(n, sizeof(uint64_t))) ||
        !(it->phase_faults = calloc(n, sizeof(uint64_t))) || !(it->touch = calloc(n, sizeof(cvec))))
        return -1;
    for (uint32_t q = 0; q < it->nphases; q++)
        it->phase_first[q] = UINT64_MAX;
    for (uint32_t o = 0; o < maxord; o++) {
        if (it->phase_of[o] == NO_PHASE)
            continue;
        uint32_t q = it->phase_of[o];
        const profile_launch *l = &in->launches[it->by_ordinal[o] - 1];
        it->phase_first[q] = TRANSIT_MIN(it->phase_first[q], o);
        if (l->start_ns && l->end_ns >= l->start_ns) {
            it->phase_start[q] = it->phase_start[q] ? TRANSIT_MIN(it->phase_start[q], l->start_ns) : l->start_ns;
            it->phase_end[q] = TRANSIT_MAX(it->phase_end[q], l->end_ns);
            it->phase_kernel_ns[q] += l->end_ns - l->start_ns;
        }
    }
    return 0;
}

typedef enum { REF_TOUCHES, REF_CARRIED, REF_OUTSIDE } ref_kind;

/* What a parameter pointer touches: its iteration (index into b->it), its launch's phase and its
 * extent's chunks [*lo, *hi]. REF_CARRIED for a cut tensor's tail; REF_OUTSIDE for a pointer in no
 * allocation (counted by pointer_extents) or a launch outside the window's phases. */
static ref_kind ref_touch(const build *b, const profile_ref *mt, size_t nmt, const profile_ref *r, uint32_t *itn,
                          uint32_t *phase, uint64_t *lo, uint64_t *hi)
{
    const profile_input *in = b->in;
    int64_t j = floor_index(b->ptrs, b->nptrs, r->addr);
    if (j < 0 || b->ptrs[j] != r->addr || r->launch >= in->nlaunches)
        return REF_OUTSIDE;
    if (transit_carried_over(in, mt, nmt, r))
        return REF_CARRIED;
    const profile_launch *l = &in->launches[r->launch];
    if (l->iteration < in->first_iteration || l->iteration >= in->first_iteration + in->iterations)
        return REF_OUTSIDE;
    *itn = (uint32_t)(l->iteration - in->first_iteration);
    const iteration *it = &b->it[*itn];
    if (l->ordinal >= it->nordinals || it->phase_of[l->ordinal] == NO_PHASE)
        return REF_OUTSIDE;
    *phase = it->phase_of[l->ordinal];
    *lo = CHUNK(r->addr);
    *hi = CHUNK(b->ptr_end[j] - 1);
    return REF_TOUCHES;
}

/* The launches' parameter pointers become their phases' touched chunks. */
static int add_pointer_touches(build *b, const profile_ref *mt, size_t nmt)
{
    int rc = 0;
    for (uint64_t i = 0; i < b->in->nrefs && !rc; i++) {
        uint32_t n, q;
        uint64_t lo, hi;
        ref_kind k = ref_touch(b, mt, nmt, &b->in->refs[i], &n, &q, &lo, &hi);
        b->refs_carried += k == REF_CARRIED;
        if (k == REF_TOUCHES)
            rc = cvec_push(&b->it[n].touch[q], lo, hi);
    }
    return rc;
}

/* The iteration and phase an event's GPU time falls in: the last whose first kernel began at or
 * before it. False when it came before the window's first timed kernel or after its last one ended,
 * or nothing was timed. */
static bool place_event(const build *b, uint64_t t, uint32_t *itn, uint32_t *phase)
{
    bool found = false;
    for (uint32_t i = 0; i < b->in->iterations; i++) {
        const iteration *it = &b->it[i];
        if (it->timed && it->t0 <= t) {
            *itn = i;
            found = true;
        }
    }
    if (!found)
        return false;
    const iteration *it = &b->it[*itn];
    if (*itn + 1 == b->in->iterations && t > it->t1)
        return false; /* after the window's last kernel: the next iteration's (the window's drain) */
    *phase = 0;
    for (uint32_t q = 0; q < it->nphases; q++)
        if (it->phase_start[q] && it->phase_start[q] <= t)
            *phase = q;
    return true;
}

static uint64_t event_last_chunk(const profile_event *e)
{
    return CHUNK(e->addr) + TRANSIT_MAX(e->chunks, 1u) - 1;
}

/* Every chunk the iteration's pointers touched, sorted and joined, into *all; -1 when out of memory. */
static int pointer_cover(const iteration *it, cvec *all)
{
    for (uint32_t q = 0; q < it->nphases; q++)
        for (size_t k = 0; k < it->touch[q].n; k++)
            if (cvec_push(all, it->touch[q].v[k].lo, it->touch[q].v[k].hi))
                return -1;
    cvec_merge(all);
    return 0;
}

/* Pushes the parts of chunks [lo, hi] that `cover` (sorted, joined) leaves out. */
static int push_uncovered(cvec *touch, const cvec *cover, uint64_t lo, uint64_t hi)
{
    size_t k = 0;
    while (k < cover->n && cover->v[k].hi < lo)
        k++;
    for (; lo <= hi && k < cover->n && cover->v[k].lo <= hi; k++) {
        if (cover->v[k].lo > lo && cvec_push(touch, lo, cover->v[k].lo - 1))
            return -1;
        if (cover->v[k].hi >= hi)
            return 0;
        lo = cover->v[k].hi + 1;
    }
    return lo <= hi ? cvec_push(touch, lo, hi) : 0;
}

/* Migration records: bytes per iteration and phase, and touches of what no pointer covers. A
 * chunk the pointers name takes its phases from them alone: a record's GPU time can fall in the
 * next launch's phase (design-notes.md, "Touches from records"). */
static int add_events(build *b)
{
    const profile_input *in = b->in;
    cvec *cover = calloc(in->iterations + 1, sizeof *cover);
    int rc = cover ? 0 : -1;
    for (uint32_t i = 0; !rc && i < in->iterations; i++)
        rc = pointer_cover(&b->it[i], &cover[i]);
    for (uint64_t i = 0; i < in->nevents && !rc; i++) {
        const profile_event *e = &in->events[i];
        uint32_t n, q;
        if (!place_event(b, e->start_ns, &n, &q)) {
            b->events_outside++;
            continue;
        }
        iteration *it = &b->it[n];
        switch (e->kind) {
        case PROFILE_HTOD: it->htod += e->bytes; it->phase_htod[q] += e->bytes; break;
        case PROFILE_DTOH: it->dtoh += e->bytes; it->phase_dtoh[q] += e->bytes; break;
        case PROFILE_FAULT: it->faults += e->bytes; it->phase_faults[q] += e->bytes; break;
        default: it->remote += e->bytes; break;
        }
        /* A DtoH migration is an eviction, not a use. */
        if (e->kind != PROFILE_DTOH)
            rc = push_uncovered(&it->touch[q], &cover[n], CHUNK(e->addr), event_last_chunk(e));
    }
    for (uint32_t i = 0; cover && i < in->iterations; i++)
        free(cover[i].v);
    free(cover);
    return rc;
}

/* Appends c to the growing array *v (false when out of memory; *v stays valid). */
static bool u64_push(uint64_t **v, size_t *n, size_t *cap, uint64_t c)
{
    if (*n == *cap) {
        size_t grown = *cap ? 2 * *cap : 1024;
        uint64_t *w = realloc(*v, grown * sizeof *w);
        if (!w)
            return false;
        *v = w;
        *cap = grown;
    }
    (*v)[(*n)++] = c;
    return true;
}

static int chunk_table(build *b)
{
    const profile_input *in = b->in;
    size_t n = 0, cap = 0;
    uint64_t *all = NULL;
    bool ok = true;
    for (uint32_t i = 0; i < in->iterations; i++)
        for (uint32_t q = 0; q < b->it[i].nphases; q++) {
            cvec *t = &b->it[i].touch[q];
            cvec_merge(t);
            for (size_t k = 0; k < t->n; k++)
                for (uint64_t c = t->v[k].lo; ok && c <= t->v[k].hi; c++)
                    ok = u64_push(&all, &n, &cap, c);
        }
    for (uint64_t i = 0; i < in->nevents; i++) /* migrations outside the window's phases too */
        for (uint64_t c = CHUNK(in->events[i].addr); ok && c <= event_last_chunk(&in->events[i]); c++)
            ok = u64_push(&all, &n, &cap, c);
    b->chunks = all;
    if (!ok)
        return -1;
    qsort(all, n, sizeof *all, by_u64);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (!m || all[i] != all[m - 1])
            all[m++] = all[i];
    b->nchunks = m;
    size_t k = m + 1;
    if (!(b->c_htod = calloc(k, 8)) || !(b->c_dtoh = calloc(k, 8)) || !(b->c_faults = calloc(k, 8)) ||
        !(b->c_remote = calloc(k, 8)) || !(b->c_reuse = calloc(k, 8)) || !(b->c_alloc = calloc(k, 8)) ||
        !(b->c_first = calloc(k, 8)) || !(b->c_last = calloc(k, 8)) || !(b->c_launches = calloc(k, 8)) ||
        !(b->c_rereading = calloc(k, 8)))
        return -1;
    for (size_t i = 0; i < m; i++) {
        uint64_t lo = all[i] << TRANSIT_CHUNK_SHIFT;
        int64_t a = alloc_of(in, lo);
        if (a < 0) { /* an allocation that begins inside the chunk */
            int64_t next = alloc_of(in, lo + TRANSIT_CHUNK_BYTES - 1);
            a = next;
        }
        b->c_alloc[i] = a;
        b->c_first[i] = b->c_last[i] = -1;
    }
    for (uint64_t i = 0; i < in->nevents; i++) {
        const profile_event *e = &in->events[i];
        for (uint64_t c = CHUNK(e->addr); c <= event_last_chunk(e); c++) {
            int64_t j = floor_index(b->chunks, m, c);
            uint64_t lo = TRANSIT_MAX(e->addr, c << TRANSIT_CHUNK_SHIFT);
            uint64_t hi = TRANSIT_MIN(e->addr + e->bytes, (c + 1) << TRANSIT_CHUNK_SHIFT);
            uint64_t part = e->chunks <= 1 ? e->bytes : hi > lo ? hi - lo : 0; /* merged: all in one chunk */
            uint64_t *col = e->kind == PROFILE_HTOD   ? b->c_htod
                            : e->kind == PROFILE_DTOH ? b->c_dtoh
                            : e->kind == PROFILE_FAULT ? b->c_faults
                                                       : b->c_remote;
            col[j] += part;
        }
    }
    /* Reuse: the most distinct phases of one profiled iteration that touch the chunk. The caching
     * allocator can put another tensor at a chunk from one iteration to the next, so a chunk is as
     * reused as its busiest iteration shows. First and last phase: the last iteration's. */
    uint64_t *count = calloc(k, 8);
    if (!count)
        return -1;
    for (uint32_t i = 0; i < in->iterations; i++) {
        const iteration *it = &b->it[i];
        bool last = i + 1 == in->iterations;
        memset(count, 0, k * 8);
        for (uint32_t q = 0; q < it->nphases; q++)
            for (size_t r = 0; r < it->touch[q].n; r++)
                for (uint64_t c = it->touch[q].v[r].lo; c <= it->touch[q].v[r].hi; c++) {
                    int64_t j = floor_index(b->chunks, m, c);
                    count[j]++;
                    if (last) {
                        if (b->c_first[j] < 0)
                            b->c_first[j] = q;
                        b->c_last[j] = q;
                    }
                }
        for (size_t j = 0; j < m; j++)
            b->c_reuse[j] = TRANSIT_MAX(b->c_reuse[j], count[j]);
    }
    free(count);
    return 0;
}

/* Per chunk, the most launches of one profiled iteration whose pointers reach it, and of those the
 * launches of kernels that re-read their operands (kernel_kind.h): what reading the chunk in place
 * costs, where its reuse counts phases of about a dozen launches each (design-notes.md, "Hybrid
 * at micro-batch 8"). */
static int launch_counts(build *b, const profile_ref *mt, size_t nmt)
{
    const profile_input *in = b->in;
    size_t m = b->nchunks, per = (size_t)in->iterations * (m + 1);
    uint32_t *launches = calloc(per + 1, sizeof *launches), *rereading = calloc(per + 1, sizeof *rereading);
    uint64_t *last = calloc(m + 1, sizeof *last); /* launch index + 1 that counted the chunk last */
    bool *rereads = calloc(in->nnames + 1, sizeof *rereads);
    int rc = launches && rereading && last && rereads ? 0 : -1;
    for (uint64_t k = 0; !rc && k < in->nnames; k++)
        rereads[k] = transit_kernel_rereads(in->names[k]);
    for (uint64_t i = 0; !rc && i < in->nrefs; i++) {
        const profile_ref *r = &in->refs[i];
        uint32_t n, q;
        uint64_t lo, hi;
        if (ref_touch(b, mt, nmt, r, &n, &q, &lo, &hi) != REF_TOUCHES)
            continue;
        uint32_t name = in->launches[r->launch].name;
        bool gemm = name < in->nnames && rereads[name];
        int64_t first = floor_index(b->chunks, m, lo);
        for (size_t j = first < 0 ? 0 : (size_t)first; j < m && b->chunks[j] <= hi; j++) {
            if (b->chunks[j] < lo || last[j] == (uint64_t)r->launch + 1)
                continue; /* one launch, several pointers into the chunk: one read */
            last[j] = (uint64_t)r->launch + 1;
            launches[(size_t)n * (m + 1) + j]++;
            rereading[(size_t)n * (m + 1) + j] += gemm;
        }
    }
    for (uint32_t n = 0; !rc && n < in->iterations; n++)
        for (size_t j = 0; j < m; j++) {
            b->c_launches[j] = TRANSIT_MAX(b->c_launches[j], launches[(size_t)n * (m + 1) + j]);
            b->c_rereading[j] = TRANSIT_MAX(b->c_rereading[j], rereading[(size_t)n * (m + 1) + j]);
        }
    free(launches);
    free(rereading);
    free(last);
    free(rereads);
    return rc;
}

static void free_build(build *b)
{
    for (uint32_t i = 0; b->it && i < b->in->iterations; i++) {
        iteration *it = &b->it[i];
        for (uint32_t q = 0; it->touch && q < it->nphases; q++)
            free(it->touch[q].v);
        free(it->touch);
        free(it->by_ordinal);
        free(it->phase_of);
        free(it->phase_start);
        free(it->phase_end);
        free(it->phase_kernel_ns);
        free(it->phase_first);
        free(it->phase_htod);
        free(it->phase_dtoh);
        free(it->phase_faults);
    }
    free(b->it);
    free(b->ptrs);
    free(b->ptr_end);
    free(b->chunks);
    free(b->c_htod);
    free(b->c_dtoh);
    free(b->c_faults);
    free(b->c_remote);
    free(b->c_reuse);
    free(b->c_alloc);
    free(b->c_first);
    free(b->c_last);
    free(b->c_launches);
    free(b->c_rereading);
}

TRANSIT_INTERNAL char *transit_profile_build(const profile_input *in, profile_summary *summary)
{
    build b = {.in = in};
    char *text = NULL;
    profile_ref *mt = NULL; /* the multi-tensor launches' pointers */
    size_t nmt = 0;
    if (!(b.it = calloc(in->iterations + 1, sizeof *b.it)) || pointer_extents(&b))
        goto out;
    for (uint32_t i = 0; i < in->iterations; i++)
        if (make_phases(&b, &b.it[i], in->first_iteration + i))
            goto out;
    if (transit_multi_tensor_refs(in, &mt, &nmt) || add_pointer_touches(&b, mt, nmt) || add_events(&b) ||
        chunk_table(&b) || launch_counts(&b, mt, nmt))
        goto out;
    if (summary)
        profile_summarize(&b, summary);
    for (size_t cap = RENDER_START_BYTES;; cap *= 2) {
        jbuf j = {malloc(cap), 0, cap, 0};
        if (!j.p)
            goto out;
        profile_render(&j, &b);
        if (!j.overflow) {
            text = j.p;
            break;
        }
        free(j.p);
    }
out:
    free(mt);
    free_build(&b);
    return text;
}
