/* tick.c - the engine's periodic events: the tick thread's tick and the iteration mark. Each runs
 * limit mode's part (limit.c, fill.c) and dispatches the active policy's (ops.h). */
#include "iteration.h"
#include "policy_int.h"
#include "recorder.h"
#include "ticklog.h"

/* The active policy has work at this tick. */
static bool policy_due(void)
{
    return pol_ops->tick_due && pol_ops->tick_due();
}

/* At each iteration mark: the bound's peak since the last (see policy.h). */
uint64_t transit_policy_iteration_ended(void)
{
    uint64_t peak = __atomic_exchange_n(&pol.n.bound_peak_since, UINT64_MAX, __ATOMIC_RELAXED);
    __atomic_store_n(&pol.swept_since_mark, 0, __ATOMIC_RELAXED);
    if (peak != UINT64_MAX && (pol_planning() || (transit_limit_mode() && !pol_estimating())))
        pol_correct_target(peak);
    pol_start_fill_when_still(pol_ops->fill_rules && pol_ops->fill_rules());
    if (pol_ops->iteration_mark)
        pol_ops->iteration_mark();
    return peak;
}

/* Every tick (lifecycle.c's tick thread): limit mode's host check and evictions, the fill, and
 * the active policy's own tick (advise without launch callbacks right after the first iteration
 * mark past warm-up; hybrid's placement once planned). All act in the device's primary context
 * (the one PyTorch uses). */
void transit_policy_tick(void)
{
    pol_publish_demand(); /* what it depends on outside the policies' events: the recorder's state */
    const transit_driver_api *drv;
    int dev = transit_g.id.device;
    if (__atomic_load_n(&pol.stopping, __ATOMIC_ACQUIRE))
        return;
    transit_tick tick = {.t_s = transit_now() - transit_g.start_unix};
    uint64_t began = transit_monotonic_ns();
    /* Read once: an iteration mark on another thread may start the fill during this tick. */
    int fill_at_start = pol_fill_now();
    bool fill_held = pol_fill_holds(fill_at_start);
    uint64_t measured = pol_check_host_residency(fill_held);
    if (pol_ops->before_tick)
        pol_ops->before_tick();
    /* The RSS bound is recorded every tick; while the fill holds only smaps readings decide (the
     * RSS's non-managed part drifts by hundreds of MB, more than the fill's margin). */
    uint64_t over = pol_bound_over(fill_held, &tick.bound);
    if (fill_held)
        over = pol_fill_over(measured);
    tick.over_asked = over;
    uint64_t room = fill_at_start == TRANSIT_FILL_FILLING && !over ? pol_fill_room(measured) : 0;
    if (fill_at_start == TRANSIT_FILL_FILLING && measured != UINT64_MAX && !over && !room)
        pol_fill_is_full(measured);
    bool acts = pol_evict_due(fill_held) || over || room || pol.sweep_due || policy_due();
    if (acts && dev >= 0 && (drv = transit_act_driver()) &&
        transit_act_enter_context(drv, dev)) {
        CUstreamCaptureMode saved;
        bool relaxed = transit_act_relax_capture(drv, &saved);
        /* The bound shows evictions only once they ran: while earlier ones still do, it would ask
         * for them again. (Queried in relaxed mode: a query can break another thread's global
         * capture.) */
        if (over && pol.evict_stream && !transit_act_stream_idle(drv, pol.evict_stream))
            over = 0;
        /* An allocating thread making room has the bound to itself meanwhile; one that just made
         * room left a new bound, so it is read again. (While the fill holds, `over` is the smaps
         * reading's, which stays.) */
        bool bound_held = over && pthread_mutex_trylock(&pol.alloc_room_lock) == 0;
        if (!bound_held)
            over = 0;
        else if (!fill_held)
            over = pol_excess_now(0, false);
        if (over && fill_held && transit_act_own_stream(drv, &pol.evict_stream) && pol_ops->demote &&
            pol_ops->demote(drv, pol.evict_stream, transit_decide_demote_bytes(measured, transit_g.cfg.mem_limit)))
            over = 0; /* the policy's hold goes on: its own choice of chunks left instead */
        bool evicting = pol_evict_due(fill_held) || over, due = policy_due();
        if ((evicting || room) && transit_act_own_stream(drv, &pol.evict_stream))
            pol_evict(drv, pol.evict_stream, over, fill_held, 0);
        if (bound_held)
            pthread_mutex_unlock(&pol.alloc_room_lock);
        if (pol.sweep_due && transit_act_own_stream(drv, &pol.sweep_stream))
            pol_sweep(drv, pol.sweep_stream);
        if (room && transit_act_own_stream(drv, &pol.evict_stream))
            pol_fill(drv, dev, pol.evict_stream, measured, room);
        if (pol_ops->tick)
            pol_ops->tick(drv, dev, due);
        transit_act_restore_capture(drv, relaxed, &saved);
        tick.over = over;
    }
    if (transit_limit_mode()) {
        tick.planning = pol_planning();
        tick.sweep_due = pol.sweep_due;
        tick.fill_state = pol_fill_name();
        tick.estimate = transit_get(&pol.n.resident);
        tick.smaps_bound = measured;
        tick.evicted = transit_get(&pol.n.evict_bytes);
        tick.swept = transit_get(&pol.n.sweep_bytes);
        tick.htod = transit_recorder_htod_bytes();
        tick.dtoh = transit_recorder_dtoh_bytes();
        tick.managed = transit_get(&transit_g.n.managed_live);
        uint64_t evictions_read = __atomic_exchange_n(&pol.bound_peak_unlogged, 0, __ATOMIC_RELAXED);
        if (evictions_read && (tick.bound == UINT64_MAX || evictions_read > tick.bound))
            tick.bound = evictions_read;
        tick.work_ms = (double)(transit_monotonic_ns() - began) * 1e-6;
        transit_ticklog_write(&tick);
    }
}

