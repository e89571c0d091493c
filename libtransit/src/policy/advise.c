/* advise.c - the advise policy: halfway through the first iteration after warm-up (at a launch;
 * without launch callbacks, at the first tick past warm-up) every managed allocation, and every
 * later one, gets SetAccessedBy(device) (in_place.c): host data is read in place. In limit mode
 * its fill (fill.c) then brings the device towards L. */
#include "iteration.h"
#include "policy_int.h"
#include "recorder.h"

static bool needs_launches(void)
{
    return !pol_in_place_applied();
}

static bool launch_due(const transit_launch *l)
{
    uint32_t prev = transit_recorder_prev_iteration_launches();
    return !pol_in_place_applied() &&
           transit_decide_advise_at_launch(l->iteration, transit_g.cfg.warmup_iters, l->ordinal, prev);
}

static void launch(const transit_driver_api *drv, const transit_launch *l, CUdevice dev)
{
    (void)l;
    pol_in_place_all(drv, dev);
}

static bool tick_due(void)
{
    return !transit_recorder_sees_launches() && !pol_in_place_applied() &&
           transit_iteration_count() > transit_g.cfg.warmup_iters;
}

static void tick(const transit_driver_api *drv, CUdevice dev, bool due)
{
    if (due)
        pol_in_place_all(drv, dev);
}

static bool fill_rules(void)
{
    return true;
}

const transit_policy_ops transit_policy_advise_ops = {
    .in_place = true,
    .on_alloc = pol_in_place_on_alloc,
    .needs_launches = needs_launches,
    .launch_due = launch_due,
    .launch = launch,
    .tick_due = tick_due,
    .tick = tick,
    .fill_rules = fill_rules,
};
