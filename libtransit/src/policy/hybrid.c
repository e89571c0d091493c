/* hybrid.c - the hybrid policy: at the end of each profiling window the most reused 2 MiB chunks
 * are placed on the device up to its capacity and the rest on the host, read in place
 * (hybrid_place.c); in limit mode its look-ahead mover streams the host chunks two phases or more
 * touch (hybrid_mover.c); its guard first times a few steps with advise's placement and keeps it
 * if faster (hybrid_guard.c). This file is its table: which of them each event reaches. */
#include "hybrid_int.h"

static void window_end(const profile_summary *profile)
{
    int guarded = hyb_guard_on_plan();
    if (guarded != GUARD_PLAN_DROP)
        hyb_plan(profile, guarded == GUARD_PLAN_APPLY);
}

static bool launch_due(const transit_launch *l)
{
    return hyb_mover_starts_phase(l->ordinal);
}

static void launch(const transit_driver_api *drv, const transit_launch *l, CUdevice dev)
{
    (void)dev;
    hyb_mover_launch(drv, l);
}

/* Outside the device's context: the page-table readings. */
static void before_tick(void)
{
    hyb_read_placement();
    hyb_guard_read_advise();
}

static bool tick_due(void)
{
    return hyb_guard_due() || hyb_due();
}

/* While the guard measures advise's placement, its fill's eviction rules hold. */
static bool demote(const transit_driver_api *drv, CUstream stream, uint64_t excess)
{
    return !hyb_guard_holds_advise() && hyb_demote(drv, stream, excess);
}

static void tick(const transit_driver_api *drv, CUdevice dev, bool due)
{
    CUstream stream;
    transit_stream_schedule handed;
    (void)due;
    if (hyb_guard_due())
        hyb_guard_apply_advise(drv, dev);
    if (hyb_due() && pol_own_tick_stream(drv, &stream) && hyb_apply(drv, dev, stream, &handed)) {
        hyb_mover_hand_over(&handed);
        hyb_guard_placement_applied();
    }
}

static void iteration_mark(void)
{
    hyb_mark();
    hyb_guard_mark();
}

static void after_fork(void)
{
    hyb_place_after_fork();
    hyb_mover_after_fork();
    hyb_guard_after_fork();
}

static void snapshot(transit_policy_snap *s)
{
    s->hybrid_due = hyb_due();
    s->guard_state = hyb_guard_state_name();
    s->guard_kept = hyb_guard_kept_name();
}

const transit_policy_ops transit_policy_hybrid_ops = {
    .uses_profile = true,
    .in_place = true,
    .on_alloc = pol_in_place_on_alloc,
    .needs_launches = hyb_mover_active,
    .launch_due = launch_due,
    .launch = launch,
    .before_tick = before_tick,
    .tick_due = tick_due,
    .demote = demote,
    .tick = tick,
    .fill_rules = hyb_guard_measures_advise,
    .iteration_mark = iteration_mark,
    .window_end = window_end,
    .move_step = hyb_mover_step,
    .stop = hyb_mover_wake,
    .after_fork = after_fork,
    .snapshot = snapshot,
};
