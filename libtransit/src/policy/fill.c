/* fill.c - advise's fill: once an iteration passed without an eviction or a sweep since host data
 * is read in place, the device is filled towards FILL_TARGET with chunks the estimate places on
 * the host, at each smaps reading, instead of staying at BOUND_TARGET, a margin for faults that
 * no longer come; the first eviction once the device is full or a fill brought data ends it
 * (decide.h). While it holds (filling or full) only smaps readings decide evictions; hybrid's
 * placement holds the device the same way (pol_fill_hold). */
#include "policy_int.h"

#include <math.h>

/* The fill begins after a whole iteration since in-place reading applied without an eviction or
 * a sweep, where its rules apply (`rules`: the active policy's fill_rules). */
void pol_start_fill_when_still(bool rules)
{
    if (!rules || pol_fill_now() != TRANSIT_FILL_WAITING || !pol_estimating() || !pol_in_place_applied())
        return;
    uint64_t moves = transit_get(&pol.n.evict_count) + transit_get(&pol.n.sweep_ranges);
    uint64_t at_mark = __atomic_exchange_n(&pol.moves_at_mark, moves, __ATOMIC_RELAXED);
    __atomic_store_n(&pol.fill_state, transit_decide_fill_at_mark(TRANSIT_FILL_WAITING, true, true, at_mark, moves),
                     __ATOMIC_RELEASE);
}

/* At a smaps reading (`measured`, UINT64_MAX if none): how far the reading is over L, to come
 * down to FILL_TARGET... */
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

/* A placement now holds the device as a full fill does. */
void pol_fill_hold(void)
{
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
