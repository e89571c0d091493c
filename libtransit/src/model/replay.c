/* replay.c - see replay.h. */
#include "replay.h"
#include "chunks.h"
#include "config.h"
#include "decide.h"
#include "placement.h"
#include "stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VICTIMS 256

typedef struct replay {
    const transit_replay_input *in;
    const transit_replay_params *p;
    transit_chunks *device;
    transit_range *known; /* every chunk some phase touches, merged, by address: the fill's walk */
    size_t nknown;
    bool applied;                /* advise, hybrid: SetAccessedBy on everything */
    transit_fill_state fill;
    uint64_t moves, moves_at_mark; /* evicted chunks so far; at the last iteration mark */
    bool failed;                   /* out of memory */
    /* hybrid's look-ahead: bytes its mover streams each way per iteration, the staging room it
     * holds at most, and per phase the touched bytes it has staged (not read in place) */
    uint64_t streamed_bytes, staged_peak_bytes;
    uint64_t *staged_touch;
} replay;

static int by_addr(const void *a, const void *b)
{
    uint64_t x = ((const transit_range *)a)->addr, y = ((const transit_range *)b)->addr;
    return (x > y) - (x < y);
}

static int known_chunks(replay *r)
{
    const transit_replay_input *in = r->in;
    size_t n = in->touch_offsets[in->nphases];
    if (!(r->known = malloc((n + 1) * sizeof *r->known)))
        return -1;
    memcpy(r->known, in->touch, n * sizeof *r->known);
    qsort(r->known, n, sizeof *r->known, by_addr);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t end = r->known[i].addr + r->known[i].bytes;
        if (m && r->known[i].addr <= r->known[m - 1].addr + r->known[m - 1].bytes) {
            uint64_t prev_end = r->known[m - 1].addr + r->known[m - 1].bytes;
            r->known[m - 1].bytes = TRANSIT_MAX(prev_end, end) - r->known[m - 1].addr;
        } else {
            r->known[m++] = r->known[i];
        }
    }
    r->nknown = m;
    return 0;
}

/* The bytes of [ranges] that are not on the simulated device. */
static uint64_t spilled_bytes(const replay *r, const transit_range *ranges, size_t n)
{
    transit_range out[VICTIMS];
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        for (uint64_t at = ranges[i].addr, end = at + ranges[i].bytes; at < end;) {
            size_t k = transit_chunks_spilled(r->device, at, end - at, out, VICTIMS, &at);
            for (size_t j = 0; j < k; j++)
                total += out[j].bytes;
        }
    return total;
}

/* Base and prefetch (and advise before it applies): room is made for the phase's chunks, least
 * recently used first, then they are brought in. */
static void migrate_for(replay *r, const transit_range *need, size_t n, transit_replay_iteration *it)
{
    transit_limit_view v = {.limit = r->p->limit, .estimating = true, .planning = true};
    transit_range victims[VICTIMS];
    uint64_t target = transit_decide_launch_target(&v);
    for (size_t k; (k = transit_chunks_make_room(r->device, need, n, target, victims, VICTIMS));) {
        for (size_t j = 0; j < k; j++) {
            it->dtoh_bytes += victims[j].bytes;
            it->evicted_chunks += victims[j].bytes / TRANSIT_CHUNK_BYTES;
            r->moves += victims[j].bytes / TRANSIT_CHUNK_BYTES;
        }
        if (k < VICTIMS)
            break;
    }
    uint64_t before = transit_chunks_resident_bytes(r->device);
    for (size_t j = 0; j < n; j++)
        transit_chunks_migrated(r->device, need[j].addr, need[j].bytes);
    uint64_t in = transit_chunks_resident_bytes(r->device) - before;
    it->htod_bytes += in;
    if (r->p->policy != TRANSIT_POLICY_PREFETCH)
        it->faults += in / TRANSIT_CHUNK_BYTES;
}

/* Advise's fill: host chunks in address order until FILL_TARGET. */
static uint64_t fill(replay *r)
{
    transit_range parts[VICTIMS];
    uint64_t room = transit_decide_fill_room(transit_chunks_resident_bytes(r->device), r->p->limit), filled = 0;
    for (size_t i = 0; i < r->nknown && filled < room; i++)
        for (uint64_t at = r->known[i].addr, end = at + r->known[i].bytes; at < end && filled < room;) {
            size_t k = transit_chunks_spilled(r->device, at, end - at, parts, VICTIMS, &at);
            for (size_t j = 0; j < k && filled < room; j++) {
                uint64_t take = TRANSIT_MIN(parts[j].bytes, room - filled);
                transit_chunks_migrated(r->device, parts[j].addr, take);
                filled += take;
            }
        }
    r->fill = TRANSIT_FILL_FULL;
    return filled;
}

/* The stream plan for the placement: what the mover moves, and what each phase finds staged. */
static int plan_streams(replay *r, const uint8_t *resident)
{
    const transit_replay_input *in = r->in;
    transit_stream_input s = {in->nphases, in->touch_offsets, in->touch, in->compute_ns, in->nchunks, in->chunk_addr,
                              resident, TRANSIT_HYBRID_STAGING(r->p->limit), r->p->prefetch_htod_bps, r->p->dtoh_bps,
                              in->first_launch};
    uint32_t *issue = malloc((in->nchunks + 1) * sizeof *issue), *back = malloc((in->nchunks + 1) * sizeof *back);
    r->staged_touch = calloc(in->nphases + 1, sizeof *r->staged_touch);
    int rc = -1;
    if (!issue || !back || !r->staged_touch || transit_stream_plan(&s, issue, back, &r->staged_peak_bytes))
        goto out;
    for (uint64_t i = 0; i < in->nchunks; i++)
        r->streamed_bytes += issue[i] != TRANSIT_STREAM_NONE ? TRANSIT_CHUNK_BYTES : 0;
    for (uint32_t q = 0; q < in->nphases; q++)
        for (uint64_t k = in->touch_offsets[q]; k < in->touch_offsets[q + 1]; k++)
            for (uint64_t at = in->touch[k].addr; at < in->touch[k].addr + in->touch[k].bytes; at += TRANSIT_CHUNK_BYTES) {
                uint64_t i = transit_chunk_at(in->chunk_addr, in->nchunks, at);
                if (i < in->nchunks && issue[i] != TRANSIT_STREAM_NONE)
                    r->staged_touch[q] += TRANSIT_CHUNK_BYTES;
            }
    rc = 0;
out:
    free(issue);
    free(back);
    return rc;
}

/* Hybrid's placement, once: placed chunks in (prefetch), the others out. */
static int place(replay *r, transit_replay_iteration *it)
{
    const transit_replay_input *in = r->in;
    uint8_t *resident = malloc(in->nchunks + 1);
    if (!resident || transit_hybrid_place(in->chunk_reuse, in->nchunks, transit_hybrid_capacity(r->p->limit), resident) ||
        (r->p->look_ahead && plan_streams(r, resident))) {
        free(resident);
        return -1;
    }
    /* Out first, then in: the simulated device has room for L, not for both sets at once. */
    for (int in_pass = 0; in_pass < 2; in_pass++)
        for (uint64_t i = 0; i < in->nchunks; i++) {
            transit_range c = {in->chunk_addr[i], TRANSIT_CHUNK_BYTES};
            uint64_t out = spilled_bytes(r, &c, 1);
            if (in_pass && resident[i] && out) {
                transit_chunks_migrated(r->device, c.addr, c.bytes);
                it->htod_bytes += out;
            } else if (!in_pass && !resident[i] && out < c.bytes) {
                transit_chunks_dropped(r->device, c.addr, c.bytes);
                it->dtoh_bytes += c.bytes - out;
            }
        }
    it->transfer_s += (double)it->htod_bytes / r->p->prefetch_htod_bps + (double)it->dtoh_bytes / r->p->dtoh_bps;
    free(resident);
    r->applied = true;
    return 0;
}

static void run_iteration(replay *r, uint64_t iteration, transit_replay_iteration *it)
{
    const transit_replay_input *in = r->in;
    const transit_replay_params *p = r->p;
    bool advise = p->policy == TRANSIT_POLICY_ADVISE;
    if (p->policy == TRANSIT_POLICY_HYBRID && !r->applied && iteration == p->warmup + 2 && place(r, it))
        r->failed = true;
    if (advise && r->fill == TRANSIT_FILL_FILLING) { /* the first reading of the iteration */
        it->fill_bytes = fill(r);
        it->htod_bytes += it->fill_bytes;
        it->transfer_s += (double)it->fill_bytes / p->prefetch_htod_bps;
    }
    for (uint32_t q = 0; q < in->nphases; q++) {
        const transit_range *need = in->touch + in->touch_offsets[q];
        size_t n = in->touch_offsets[q + 1] - in->touch_offsets[q];
        /* advise applies at its launch, before the kernel: the whole phase is advised */
        for (uint32_t o = in->first_launch[q]; advise && !r->applied && o < (q + 1 < in->nphases ? in->first_launch[q + 1]
                                                                                               : in->launches); o++)
            r->applied = transit_decide_advise_at_launch(iteration, p->warmup, o, in->launches);
        transit_replay_iteration phase = {0};
        if (r->applied)
            phase.zero_copy_bytes = spilled_bytes(r, need, n) - (r->staged_touch ? r->staged_touch[q] : 0);
        else
            migrate_for(r, need, n, &phase);
        double rate = p->policy == TRANSIT_POLICY_PREFETCH ? p->prefetch_htod_bps : p->fault_htod_bps;
        it->transfer_s += (double)phase.htod_bytes / rate + (double)phase.dtoh_bytes / p->dtoh_bps +
                          (double)phase.zero_copy_bytes / p->zero_copy_bps;
        it->compute_s += (double)in->compute_ns[q] * 1e-9;
        it->htod_bytes += phase.htod_bytes;
        it->dtoh_bytes += phase.dtoh_bytes;
        it->faults += phase.faults;
        it->zero_copy_bytes += phase.zero_copy_bytes;
        it->evicted_chunks += phase.evicted_chunks;
        it->resident_peak_bytes = TRANSIT_MAX(it->resident_peak_bytes, transit_chunks_resident_bytes(r->device));
    }
    /* the iteration's mark */
    uint64_t at_mark = r->moves_at_mark;
    if (r->applied && r->fill == TRANSIT_FILL_WAITING) {
        r->moves_at_mark = r->moves;
        r->fill = transit_decide_fill_at_mark(r->fill, true, true, at_mark, r->moves);
    }
    if (r->staged_touch) { /* the mover's transfers, behind the compute by the plan */
        it->streamed_bytes = r->streamed_bytes;
        it->htod_bytes += r->streamed_bytes;
        it->dtoh_bytes += r->streamed_bytes;
        it->resident_peak_bytes += r->staged_peak_bytes;
    }
    it->step_s = it->compute_s + it->transfer_s;
}

TRANSIT_INTERNAL int transit_replay_run(const transit_replay_input *in, const transit_replay_params *p,
                                        transit_replay_iteration *out, char *err, size_t errlen)
{
    replay r = {.in = in, .p = p, .fill = TRANSIT_FILL_WAITING, .moves_at_mark = UINT64_MAX};
    uint64_t most = 0;
    for (uint32_t q = 0; q < in->nphases; q++) {
        uint64_t bytes = 0;
        for (uint64_t i = in->touch_offsets[q]; i < in->touch_offsets[q + 1]; i++)
            bytes += in->touch[i].bytes;
        most = TRANSIT_MAX(most, bytes);
    }
    size_t capacity = (size_t)(TRANSIT_MAX(p->limit, most) / TRANSIT_CHUNK_BYTES) + 16;
    if (known_chunks(&r) || !(r.device = transit_chunks_create(capacity))) {
        free(r.known);
        snprintf(err, errlen, "out of memory for the simulated device");
        return -1;
    }
    for (uint32_t i = 0; i < p->warmup + p->iterations; i++) {
        transit_replay_iteration it = {0};
        run_iteration(&r, i + 1, &it);
        if (i >= p->warmup)
            out[i - p->warmup] = it;
    }
    transit_chunks_destroy(r.device);
    free(r.known);
    free(r.staged_touch);
    if (r.failed) {
        snprintf(err, errlen, "out of memory for hybrid's placement");
        return -1;
    }
    return 0;
}
