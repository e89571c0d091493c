/* moves.c - TRANSIT's own migrations, each for a purpose that decides its direction and counters:
 * a prefetch's replay, advise's fill, limit mode's evictions and sweeps, hybrid's placement and
 * its mover's streams; and the launches' room. */
#include "alloc_table.h"
#include "policy_int.h"

#include <math.h>
#include <string.h>

#define CLIP_PIECES 16 /* allocation-bounded pieces fetched per transit_alloc_clip call */

/* What each purpose moves where, what it counts (ranges, bytes), and what the estimate learns once
 * it went: a chunk brought in is the last to go, one sent out is gone (an eviction or a sweep
 * took its victims off already: limit.c). */
enum { MARK_NONE, MARK_RESIDENT, MARK_GONE };
static const struct {
    bool to_host;
    int mark;
    uint64_t *ranges, *bytes;
} purpose[] = {
    [PREFETCH_REPLAY] = {false, MARK_NONE, &pol.n.prefetch_calls, &pol.n.prefetch_bytes},
    [PREFETCH_FILL] = {false, MARK_RESIDENT, &pol.n.fill_ranges, &pol.n.fill_bytes},
    [PREFETCH_EVICT] = {true, MARK_NONE, &pol.n.evict_count, &pol.n.evict_bytes},
    [PREFETCH_SWEEP] = {true, MARK_NONE, &pol.n.sweep_ranges, &pol.n.sweep_bytes},
    [PREFETCH_PLACE_HOST] = {true, MARK_GONE, &pol.n.placed_host_ranges, &pol.n.placed_host_bytes},
    [PREFETCH_PLACE_DEVICE] = {false, MARK_RESIDENT, &pol.n.placed_device_ranges, &pol.n.placed_device_bytes},
    [PREFETCH_STREAM_IN] = {false, MARK_RESIDENT, &pol.n.stream_in_ranges, &pol.n.stream_in_bytes},
    [PREFETCH_STREAM_OUT] = {true, MARK_GONE, &pol.n.stream_out_ranges, &pol.n.stream_out_bytes},
    [PREFETCH_DEMOTE] = {true, MARK_GONE, &pol.n.demoted_ranges, &pol.n.demoted_bytes},
    [PREFETCH_REMAP] = {true, MARK_GONE, &pol.n.remapped_ranges, &pol.n.remapped_bytes}};
_Static_assert(sizeof purpose / sizeof purpose[0] == PREFETCH_REMAP + 1, "a purpose without its row");

/* Prefetches the parts of r that lie in live allocations: to the device (a prefetch policy
 * replay, advise's fill, hybrid's device chunks) or to the host (a limit-mode eviction or sweep,
 * hybrid's host chunks), and counts the outcome. False when the driver refused a part. */
bool pol_prefetch_range(const transit_driver_api *drv, transit_range r, CUdevice dev, prefetch_purpose why,
                           CUstream stream)
{
    static int warned_device, warned_host;
    bool to_host = purpose[why].to_host;
    const CUmemLocation to = {.type = to_host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE,
                              .id = to_host ? 0 : dev};
    transit_range piece[CLIP_PIECES];
    bool all_went = true;
    for (uint64_t at = r.addr, end = r.addr + r.bytes; at < end;) {
        size_t pieces = transit_alloc_clip(at, end - at, piece, CLIP_PIECES);
        if (!pieces)
            break;
        at = piece[pieces - 1].addr + piece[pieces - 1].bytes;
        for (size_t k = 0; k < pieces; k++) {
            CUresult e = transit_act_prefetch(drv, piece[k].addr, piece[k].bytes, to, stream);
            if (e != CUDA_SUCCESS) {
                all_went = false;
                transit_add(to_host ? &pol.n.evict_errors : &pol.n.prefetch_errors, 1);
                transit_warn_once(to_host ? &warned_host : &warned_device,
                          to_host ? "limit mode or hybrid: cuMemPrefetchAsync to the host"
                                  : "prefetch, advise's fill or hybrid: cuMemPrefetchAsync to the device",
                          drv, e);
                if (why == PREFETCH_EVICT) /* still on the device: keep counting it */
                    pol_mark_resident(piece[k].addr, piece[k].bytes, false);
                continue;
            }
            transit_add(purpose[why].ranges, 1);
            transit_add(purpose[why].bytes, piece[k].bytes);
            if (purpose[why].mark == MARK_RESIDENT)
                pol_mark_resident(piece[k].addr, piece[k].bytes, false);
            else if (purpose[why].mark == MARK_GONE)
                pol_mark_gone(piece[k].addr, piece[k].bytes);
        }
    }
    return all_went;
}

/* Limit mode, at a launch (see the top of this file): the launch's chunks, need[0..n), become the
 * most recent; the least recent others (never the launch's own) are evicted on the launch's
 * stream until the estimate with them added is at EVICT_TARGET less the measured correction;
 * then they count resident.
 * An eviction the driver refuses stops the evicting (its chunks count resident again; picking
 * more would cycle). */
void pol_make_room(const transit_driver_api *drv, const transit_range *need, size_t n, CUstream stream)
{
    transit_limit_view v = pol_limit_view(false);
    uint64_t target = transit_decide_launch_target(&v);
    transit_range victims[EVICT_BATCH];
    bool refused = false;
    pthread_mutex_lock(&pol.chunks_lock);
    if (!pol_chunks_locked()) {
        pthread_mutex_unlock(&pol.chunks_lock);
        return;
    }
    for (size_t v; !refused && (v = transit_chunks_make_room(pol.chunks, need, n, target, victims, EVICT_BATCH));) {
        pol_chunks_changed();
        pthread_mutex_unlock(&pol.chunks_lock); /* no lock across a driver call */
        for (size_t j = 0; j < v; j++) {
            bool went = pol_prefetch_range(drv, victims[j], 0, PREFETCH_EVICT, stream);
            refused |= !went;
            transit_add(&pol.n.launch_evict_bytes, went ? victims[j].bytes : 0);
        }
        pthread_mutex_lock(&pol.chunks_lock);
    }
    for (size_t k = 0; k < n; k++)
        transit_chunks_migrated(pol.chunks, need[k].addr, need[k].bytes);
    pol_chunks_changed();
    pthread_mutex_unlock(&pol.chunks_lock);
}

/* From *cursor on, in address order, the parts of managed allocations that the estimate places
 * on the host are prefetched for `why`: to the host again (a sweep's paced part) or to the device
 * (a fill, at most `budget` bytes), until the clock passes `until` (the estimate's chunks are read
 * in batches under the lock; no lock across a driver call). True once the walk passed the last
 * allocation; the cursor then starts over. */
bool pol_walk_spilled(const transit_driver_api *drv, CUstream stream, prefetch_purpose why, CUdevice dev,
                         uint64_t *cursor, double until, uint64_t budget)
{
    transit_range piece[CLIP_PIECES], runs[EVICT_BATCH];
    for (;;) {
        size_t pieces = transit_alloc_clip(*cursor, UINT64_MAX - *cursor, piece, CLIP_PIECES);
        if (!pieces) {
            *cursor = 0;
            return true;
        }
        for (size_t i = 0; i < pieces; i++) {
            for (uint64_t at = piece[i].addr, end = at + piece[i].bytes; at < end;) {
                size_t k = 0;
                pthread_mutex_lock(&pol.chunks_lock);
                if (pol.chunks)
                    k = transit_chunks_spilled(pol.chunks, at, end - at, runs, EVICT_BATCH, &at);
                else
                    at = end;
                pthread_mutex_unlock(&pol.chunks_lock);
                for (size_t j = 0; j < k; j++) {
                    transit_range r = {runs[j].addr, TRANSIT_MIN(runs[j].bytes, budget)};
                    pol_prefetch_range(drv, r, dev, why, stream);
                    if (!(budget -= r.bytes)) {
                        *cursor = r.addr + r.bytes;
                        return false;
                    }
                }
                *cursor = at;
                if (transit_now() >= until || __atomic_load_n(&pol.stopping, __ATOMIC_ACQUIRE))
                    return false;
            }
        }
    }
}
