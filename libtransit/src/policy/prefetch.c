/* prefetch.c - the prefetch policy: the profiling window's HtoD migrations, attributed to launch
 * ordinals (attrib.c) and merged (ranges.c) by the profile store (engine.c), are prefetched
 * before each later launch of that ordinal (launches.c). */
#include "policy_int.h"

/* Prefetch has nothing to replay (its window took no kernel times, or nothing migrated in it),
 * and the managed total stays under BOUND_TARGET of its planned capacity: its launches do
 * nothing, as base's, and the launch callbacks can go off (and CUPTI with them, far under L)
 * after the window. Past that mark they come back with a new profile (the recorder's
 * window.c steers them). */
static bool replays_nothing(void)
{
    uint64_t capacity = pol_planned_capacity();
    bool ranges = __atomic_load_n(&pol.replay, __ATOMIC_ACQUIRE) && transit_get(&pol.n.ranges_count);
    return !ranges && capacity && transit_get(&transit_g.n.managed_peak) <= TRANSIT_BOUND_TARGET(capacity);
}

static bool needs_launches(void)
{
    return !replays_nothing();
}

const transit_policy_ops transit_policy_prefetch_ops = {
    .uses_profile = true,
    .replays_profile = true,
    .needs_launches = needs_launches,
};
