/* stream.c - see stream.h. */
#include "stream.h"
#include "chunks.h"

#include <stdbool.h>
#include <stdlib.h>

typedef struct use {
    uint32_t first, last, phases;
} use;

typedef struct candidate {
    uint32_t first;
    uint64_t index;
} candidate;

typedef struct plan {
    const transit_stream_input *in;
    use *uses;       /* per chunk */
    double *start_s; /* nphases + 1 phase start times, the last the iteration's end */
    double *release; /* when each streamed chunk still holding a slot is back on the host, ascending */
    size_t nrelease;
    candidate *order; /* by first use */
} plan;

TRANSIT_INTERNAL uint64_t transit_chunk_at(const uint64_t *chunk_addr, uint64_t n, uint64_t addr)
{
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (chunk_addr[mid] < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && chunk_addr[lo] == addr ? lo : n;
}

static void count_uses(plan *p)
{
    const transit_stream_input *in = p->in;
    for (uint64_t i = 0; i < in->nchunks; i++)
        p->uses[i] = (use){TRANSIT_STREAM_NONE, 0, 0};
    for (uint32_t q = 0; q < in->nphases; q++)
        for (uint64_t r = in->touch_offsets[q]; r < in->touch_offsets[q + 1]; r++)
            for (uint64_t at = in->touch[r].addr; at < in->touch[r].addr + in->touch[r].bytes; at += TRANSIT_CHUNK_BYTES) {
                uint64_t i = transit_chunk_at(in->chunk_addr, in->nchunks, at);
                if (i == in->nchunks)
                    continue;
                use *u = &p->uses[i];
                if (u->first == TRANSIT_STREAM_NONE)
                    u->first = q;
                if (u->phases == 0 || u->last != q)
                    u->phases++;
                u->last = q;
            }
}

/* The first phase that starts at or after t (nphases if none). */
static uint32_t phase_from(const plan *p, double t)
{
    uint32_t lo = 0, hi = p->in->nphases;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (p->start_s[mid] < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int by_first_use(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

static void forget_released(plan *p, double t)
{
    size_t k = 0;
    while (k < p->nrelease && p->release[k] <= t)
        k++;
    for (size_t j = k; j < p->nrelease; j++)
        p->release[j - k] = p->release[j];
    p->nrelease -= k;
}

static void hold_until(plan *p, double t)
{
    size_t j = p->nrelease++;
    for (; j > 0 && p->release[j - 1] > t; j--)
        p->release[j] = p->release[j - 1];
    p->release[j] = t;
}

static uint64_t schedule(plan *p, size_t ncandidates, uint32_t *issue, uint32_t *back)
{
    const transit_stream_input *in = p->in;
    const uint64_t slots = in->staging_bytes / TRANSIT_CHUNK_BYTES;
    const double in_s = (double)TRANSIT_CHUNK_BYTES / in->htod_bps, out_s = (double)TRANSIT_CHUNK_BYTES / in->dtoh_bps;
    /* the last issue's phase start; the HtoD and DtoH side streams' ends */
    double issued_at = 0, htod_free = 0, dtoh_free = 0;
    uint64_t peak = 0;
    for (size_t k = 0; k < ncandidates && slots; k++) {
        uint64_t i = p->order[k].index;
        const use *u = &p->uses[i];
        forget_released(p, issued_at);
        double slot_free = issued_at; /* issues go in plan order; a slot frees at the slots-th last release */
        if (p->nrelease >= slots)
            slot_free = TRANSIT_MAX(slot_free, p->release[p->nrelease - slots]);
        uint32_t q = phase_from(p, slot_free);
        double arrives = TRANSIT_MAX(htod_free, p->start_s[q]) + in_s; /* after those issued before it */
        if (q >= u->first || arrives > p->start_s[u->first])
            continue; /* it would arrive late: read in place */
        issue[i] = q;
        back[i] = u->last;
        issued_at = p->start_s[q];
        htod_free = arrives;
        forget_released(p, issued_at);
        peak = TRANSIT_MAX(peak, p->nrelease + 1);
        dtoh_free = TRANSIT_MAX(dtoh_free, p->start_s[u->last + 1]) + out_s;
        hold_until(p, dtoh_free);
    }
    return peak * TRANSIT_CHUNK_BYTES;
}

TRANSIT_INTERNAL int transit_stream_plan(const transit_stream_input *in, uint32_t *issue, uint32_t *back,
                                         uint64_t *peak_staged_bytes)
{
    plan p = {.in = in,
              .uses = malloc((in->nchunks + 1) * sizeof *p.uses),
              .start_s = malloc((in->nphases + 1) * sizeof *p.start_s),
              .release = malloc((in->nchunks + 1) * sizeof *p.release),
              .order = malloc((in->nchunks + 1) * sizeof *p.order)};
    int rc = -1;
    if (!p.uses || !p.start_s || !p.release || !p.order)
        goto out;
    count_uses(&p);
    p.start_s[0] = 0;
    for (uint32_t q = 0; q < in->nphases; q++)
        p.start_s[q + 1] = p.start_s[q] + (double)in->compute_ns[q] * 1e-9;
    size_t n = 0;
    for (uint64_t i = 0; i < in->nchunks; i++) {
        issue[i] = back[i] = TRANSIT_STREAM_NONE;
        if (!in->resident[i] && p.uses[i].phases >= 2)
            p.order[n++] = (candidate){p.uses[i].first, i};
    }
    qsort(p.order, n, sizeof *p.order, by_first_use);
    *peak_staged_bytes = schedule(&p, n, issue, back);
    rc = 0;
out:
    free(p.uses);
    free(p.start_s);
    free(p.release);
    free(p.order);
    return rc;
}

/* The phase at whose start chunk i goes back, or NONE: after its last use, wrapping to the next
 * iteration's first phase unless that one brings it in again. */
static uint32_t back_phase(const transit_stream_input *in, const uint32_t *issue, const uint32_t *back, uint64_t i)
{
    if (back[i] == TRANSIT_STREAM_NONE)
        return TRANSIT_STREAM_NONE;
    uint32_t q = back[i] + 1;
    if (q < in->nphases)
        return q;
    return issue[i] == 0 ? TRANSIT_STREAM_NONE : 0;
}

/* The ranges of the chunks phase[] names for each phase, coalesced, in address order: without
 * out, counted into at[q + 1]; with it, written at at[q] (each phase's next free slot). */
static void phase_ranges(const transit_stream_input *in, const uint32_t *phase, uint64_t *last, uint64_t *at,
                         transit_range *out)
{
    for (uint32_t q = 0; q < in->nphases; q++)
        last[q] = UINT64_MAX;
    for (uint64_t i = 0; i < in->nchunks; i++) {
        uint32_t q = phase[i];
        if (q == TRANSIT_STREAM_NONE)
            continue;
        uint64_t addr = in->chunk_addr[i];
        bool extends = last[q] != UINT64_MAX && last[q] + TRANSIT_CHUNK_BYTES == addr;
        last[q] = addr;
        if (!out) {
            at[q + 1] += !extends;
        } else if (extends) {
            out[at[q] - 1].bytes += TRANSIT_CHUNK_BYTES;
        } else {
            out[at[q]++] = (transit_range){addr, TRANSIT_CHUNK_BYTES};
        }
    }
}

/* The ranges of the chunks phase[] names, grouped by phase: offsets[0..nphases] into them. */
static transit_range *group(const transit_stream_input *in, const uint32_t *phase, uint64_t *last, uint64_t *offsets)
{
    for (uint32_t q = 0; q <= in->nphases; q++)
        offsets[q] = 0;
    phase_ranges(in, phase, last, offsets, NULL);
    for (uint32_t q = 0; q < in->nphases; q++)
        offsets[q + 1] += offsets[q];
    transit_range *out = malloc((offsets[in->nphases] + 1) * sizeof *out);
    uint64_t *cursor = malloc((in->nphases + 1) * sizeof *cursor);
    if (out && cursor) {
        for (uint32_t q = 0; q <= in->nphases; q++)
            cursor[q] = offsets[q];
        phase_ranges(in, phase, last, cursor, out);
    } else {
        free(out);
        out = NULL;
    }
    free(cursor);
    return out;
}

TRANSIT_INTERNAL int transit_stream_schedule_make(const transit_stream_input *in, const uint32_t *issue,
                                                  const uint32_t *back, transit_stream_schedule *out)
{
    plan p = {.in = in, .uses = malloc((in->nchunks + 1) * sizeof *p.uses)};
    uint32_t *back_at = malloc((in->nchunks + 1) * sizeof *back_at);
    uint64_t *last = malloc((in->nphases + 1) * sizeof *last);
    *out = (transit_stream_schedule){.nphases = in->nphases,
                                     .ordinal = malloc((in->nphases + 1) * sizeof *out->ordinal),
                                     .in_offsets = malloc((in->nphases + 1) * sizeof *out->in_offsets),
                                     .back_offsets = malloc((in->nphases + 1) * sizeof *out->back_offsets),
                                     .wait = malloc((in->nphases + 1) * sizeof *out->wait)};
    int rc = -1;
    if (!p.uses || !back_at || !last || !out->ordinal || !out->in_offsets || !out->back_offsets || !out->wait)
        goto out;
    count_uses(&p);
    for (uint32_t q = 0; q < in->nphases; q++) {
        out->ordinal[q] = in->first_ordinal[q];
        out->wait[q] = TRANSIT_STREAM_NONE;
    }
    for (uint64_t i = 0; i < in->nchunks; i++) {
        back_at[i] = back_phase(in, issue, back, i);
        if (issue[i] == TRANSIT_STREAM_NONE)
            continue;
        uint32_t *w = &out->wait[p.uses[i].first];
        *w = *w == TRANSIT_STREAM_NONE ? issue[i] : TRANSIT_MAX(*w, issue[i]);
        out->streamed_bytes += TRANSIT_CHUNK_BYTES;
    }
    if ((out->in = group(in, issue, last, out->in_offsets)) && (out->back = group(in, back_at, last, out->back_offsets)))
        rc = 0;
out:
    free(p.uses);
    free(back_at);
    free(last);
    if (rc)
        transit_stream_schedule_free(out);
    return rc;
}

TRANSIT_INTERNAL void transit_stream_schedule_free(transit_stream_schedule *s)
{
    free(s->ordinal);
    free(s->in_offsets);
    free(s->back_offsets);
    free(s->in);
    free(s->back);
    free(s->wait);
    *s = (transit_stream_schedule){0};
}
