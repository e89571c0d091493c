/* advise.c - advise's SetAccessedBy on every managed allocation, and its fill: once an iteration
 * passed without an eviction or a sweep since advise applied, the device is filled towards
 * FILL_TARGET with chunks the estimate places on the host, at each smaps reading, instead of
 * staying at BOUND_TARGET, a margin for faults that no longer come; the first eviction once the
 * device is full or a fill brought data ends it (decide.h). */
#include "alloc_table.h"
#include "iteration.h"
#include "policy_int.h"
#include "recorder.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

void pol_advise_range(const transit_driver_api *drv, uint64_t ptr, uint64_t size, CUdevice dev)
{
    static int warned;
    CUresult e = transit_act_accessed_by(drv, ptr, size, dev);
    if (e != CUDA_SUCCESS) {
        transit_add(&pol.n.advise_errors, 1);
        transit_warn_once(&warned, "advise: cuMemAdvise(SetAccessedBy)", drv, e);
        return;
    }
    transit_add(&pol.n.advise_calls, 1);
    transit_add(&pol.n.advise_bytes, size);
}

/* Once: every allocation in the table now, later ones in transit_policy_on_alloc. */
void pol_advise_all(const transit_driver_api *drv, CUdevice dev)
{
    size_t n;
    if (__atomic_exchange_n(&pol.advise_applied, 1, __ATOMIC_ACQ_REL))
        return;
    pol_publish_demand();
    transit_alloc *all = transit_alloc_snapshot(TRANSIT_ALLOC_MANAGED, &n); /* no lock across driver calls */
    for (size_t i = 0; i < n; i++)
        pol_advise_range(drv, all[i].key, all[i].size, dev);
    free(all);
    if (transit_g.cfg.verbose)
        transit_log("advise: SetAccessedBy(device %d) on %" PRIu64 " allocations, %" PRIu64 " bytes", (int)dev,
                    transit_get(&pol.n.advise_calls), transit_get(&pol.n.advise_bytes));
}

/* Advise's fill begins after a whole iteration since it applied without an eviction or a sweep. */
void pol_start_fill_when_still(void)
{
    /* hybrid's placement decides what the device holds: no fill, but while its guard measures
     * advise's placement */
    bool advise_rules = transit_g.cfg.policy == TRANSIT_POLICY_ADVISE || pol_guard_measures_advise();
    if (!advise_rules || pol_fill_now() != TRANSIT_FILL_WAITING || !pol_estimating() ||
        !__atomic_load_n(&pol.advise_applied, __ATOMIC_ACQUIRE))
        return;
    uint64_t moves = transit_get(&pol.n.evict_count) + transit_get(&pol.n.sweep_ranges);
    uint64_t at_mark = __atomic_exchange_n(&pol.moves_at_mark, moves, __ATOMIC_RELAXED);
    __atomic_store_n(&pol.fill_state, transit_decide_fill_at_mark(TRANSIT_FILL_WAITING, true, true, at_mark, moves),
                     __ATOMIC_RELEASE);
}

/* Advise's fill (see the top of this file), at a smaps reading (`measured`, UINT64_MAX if none):
 * how far the reading is over L, to come down to FILL_TARGET... */
uint64_t pol_fill_over(uint64_t measured)
{
    return transit_decide_fill_over(measured, transit_g.cfg.mem_limit);
}

/* ...or how much to bring to the device (0 when the device is full). */
uint64_t pol_fill_room(uint64_t measured)
{
    return transit_decide_fill_room(measured, transit_g.cfg.mem_limit);
}

void pol_fill_is_full(uint64_t measured)
{
    __atomic_store_n(&pol.n.fill_reached, measured, __ATOMIC_RELAXED);
    __atomic_store_n(&pol.fill_state, TRANSIT_FILL_FULL, __ATOMIC_RELEASE);
}

/* Waits for its prefetches (the tick thread, never a launch): the next reading shows them.
 * A whole walk that found nothing the estimate places on the host ends the filling too. */
void pol_fill(const transit_driver_api *drv, CUdevice dev, CUstream stream, uint64_t measured, uint64_t room)
{
    static int warned;
    uint64_t ranges_before = transit_get(&pol.n.fill_ranges);
    bool whole_walk = pol.fill_cursor == 0;
    if (!ranges_before) /* the first fill: where the device set was */
        __atomic_store_n(&pol.n.fill_from, measured, __ATOMIC_RELAXED);
    if (pol_walk_spilled(drv, stream, PREFETCH_FILL, dev, &pol.fill_cursor, INFINITY, room) && whole_walk &&
        transit_get(&pol.n.fill_ranges) == ranges_before) {
        pol_fill_is_full(measured);
        return;
    }
    CUresult e = transit_act_stream_wait(drv, stream);
    if (e != CUDA_SUCCESS) {
        transit_warn_once(&warned, "advise: cuStreamSynchronize after a fill; no more fills", drv, e);
        __atomic_store_n(&pol.fill_state, TRANSIT_FILL_ENDED, __ATOMIC_RELEASE);
    }
}

bool pol_advise_due(void)
{
    return transit_g.cfg.policy == TRANSIT_POLICY_ADVISE && !transit_recorder_sees_launches() &&
           !__atomic_load_n(&pol.advise_applied, __ATOMIC_ACQUIRE) && transit_iteration_count() > transit_g.cfg.warmup_iters;
}
