/* decide.c - see decide.h. Why each rule is what it is: docs/design-notes.md, "Limit mode". */
#include "decide.h"

TRANSIT_INTERNAL uint64_t transit_decide_bound_excess(const transit_limit_view *v, uint64_t bound)
{
    uint64_t correction = v->estimating ? 0 : v->correction;
    if (v->fill_held)
        return 0;
    if (v->planning)
        return bound > v->limit ? bound - TRANSIT_EVICT_TARGET(v->limit) : 0;
    return bound > TRANSIT_EVICT_TARGET(v->limit) - correction ? bound - (TRANSIT_BOUND_TARGET(v->limit) - correction)
                                                               : 0;
}

TRANSIT_INTERNAL bool transit_decide_evict_due(const transit_limit_view *v, uint64_t resident)
{
    if (!v->estimating)
        return false;
    if (v->planning)
        return resident > v->limit + TRANSIT_PLAN_SLACK(v->limit);
    return resident > v->limit && !v->fill_held;
}

TRANSIT_INTERNAL uint64_t transit_decide_launch_target(const transit_limit_view *v)
{
    return TRANSIT_EVICT_TARGET(v->limit) - v->correction;
}

TRANSIT_INTERNAL uint64_t transit_decide_correction(uint64_t correction, uint64_t peak, uint64_t limit)
{
    int64_t c = (int64_t)correction + (int64_t)peak - (int64_t)TRANSIT_BOUND_TARGET(limit);
    return (uint64_t)TRANSIT_MIN(TRANSIT_MAX(c, 0), (int64_t)(TRANSIT_EVICT_TARGET(limit) / 2));
}

TRANSIT_INTERNAL bool transit_decide_advise_at_launch(uint64_t iteration, unsigned warmup_iters, uint32_t ordinal,
                                                      uint32_t prev_iteration_launches)
{
    return iteration > warmup_iters && prev_iteration_launches && ordinal == prev_iteration_launches / 2;
}

TRANSIT_INTERNAL transit_fill_state transit_decide_fill_at_mark(transit_fill_state s, bool applied, bool estimating,
                                                                uint64_t moves_at_mark, uint64_t moves)
{
    return s == TRANSIT_FILL_WAITING && applied && estimating && moves_at_mark == moves ? TRANSIT_FILL_FILLING : s;
}

TRANSIT_INTERNAL transit_fill_state transit_decide_fill_at_eviction(transit_fill_state s, uint64_t filled_ranges)
{
    bool holds = s == TRANSIT_FILL_FILLING || s == TRANSIT_FILL_FULL;
    return holds && (s == TRANSIT_FILL_FULL || filled_ranges) ? TRANSIT_FILL_ENDED : s;
}

TRANSIT_INTERNAL uint64_t transit_decide_fill_room(uint64_t measured, uint64_t limit)
{
    uint64_t target = TRANSIT_FILL_TARGET(limit);
    if (measured == UINT64_MAX || measured + TRANSIT_FILL_STEP_MIN > target)
        return 0;
    return (target - measured + TRANSIT_CHUNK_BYTES - 1) & ~(TRANSIT_CHUNK_BYTES - 1);
}

TRANSIT_INTERNAL uint64_t transit_decide_fill_over(uint64_t measured, uint64_t limit)
{
    return measured != UINT64_MAX && measured > limit ? measured - TRANSIT_FILL_TARGET(limit) : 0;
}

TRANSIT_INTERNAL uint64_t transit_decide_demote_bytes(uint64_t measured, uint64_t limit)
{
    return measured != UINT64_MAX && measured > limit ? measured - TRANSIT_BOUND_TARGET(limit) : 0;
}
