/* shared.c - the policies' shared state, the active policy's table, and what the services and
 * the engine ask of them: limit mode's phase (estimating, planning), the fill's state, and the
 * demand word the recorder reads (events.h). */
#include "policy_int.h"
#include "profile.h"
#include "recorder.h"

policy pol = {
    .prof_lock = PTHREAD_MUTEX_INITIALIZER,
    .chunks_lock = PTHREAD_MUTEX_INITIALIZER,
    .alloc_room_lock = PTHREAD_MUTEX_INITIALIZER,
    .moves_at_mark = UINT64_MAX,
    .n = {.bound_peak_since = UINT64_MAX},
};

const transit_policy_ops *pol_ops = &transit_policy_base_ops;

void pol_raise_peaks(uint64_t resident)
{
    uint64_t live = transit_get(&transit_g.n.managed_live);
    uint64_t limit = transit_g.cfg.mem_limit;
    transit_raise_peak(&pol.n.resident_peak, resident);
    if (limit && resident > limit)
        transit_raise_peak(&pol.n.overshoot_peak, resident - limit);
    if (live > resident)
        transit_raise_peak(&pol.n.spilled_peak, live - resident);
}

/* The estimate follows recency only when migration records arrive. Without them (the recorder
 * degraded or off) limit mode still measures its bound and evicts by it (pol_rewind_clock). */
bool pol_estimating(void)
{
    return transit_limit_mode() && transit_recorder_sees_migrations();
}

bool pol_uses_profile(void)
{
    return pol_ops->uses_profile || transit_limit_mode();
}

/* Limit mode's evictions go at launches, in their order (docs/design.md, "Limit mode"). */
bool pol_planning(void)
{
    return pol_estimating() && __atomic_load_n(&pol.replay, __ATOMIC_ACQUIRE) &&
           !(pol_ops->in_place && __atomic_load_n(&pol.advise_applied, __ATOMIC_ACQUIRE));
}

/* Under BOUND_TARGET no reading of the estimate or the bound asks for an eviction. */
static bool near_limit(void)
{
    return transit_limit_mode() && transit_get(&transit_g.n.managed_peak) > TRANSIT_BOUND_TARGET(transit_g.cfg.mem_limit);
}

bool pol_far_under_limit(void)
{
    return !transit_limit_mode() || transit_get(&transit_g.n.managed_peak) <= HOST_CHECK_FROM(transit_g.cfg.mem_limit);
}

/* The device's memory; 0 when unknown. */
static uint64_t device_bytes(void)
{
    int dev = transit_g.id.device;
    return dev >= 0 && dev < TRANSIT_MAX_DEVICES ? transit_g.device_total[dev] : 0;
}

/* What prefetch and limit mode plan for: L in limit mode, the device's memory in physical mode
 * (0 when unknown). */
uint64_t pol_planned_capacity(void)
{
    return transit_limit_mode() ? transit_g.cfg.mem_limit : device_bytes();
}

/* CUPTI's kernel tracing instruments every kernel (its timing code runs on the GPU), and only
 * the ranges replayed or planned at launches need the times: prefetch's, and limit mode's. Until
 * the managed total passes half of their planned capacity no data is expected to migrate, and a
 * profile would be empty. */
static bool needs_kernel_times(void)
{
    uint64_t capacity = pol_planned_capacity();
    bool plans = pol_ops->replays_profile || transit_limit_mode();
    return plans && (!capacity || transit_get(&transit_g.n.managed_peak) > capacity / 2);
}

/* The active policy still acts at launches, or limit mode evicts at them: only once the managed
 * total came near L. */
static bool needs_launches(void)
{
    return (pol_ops->needs_launches && pol_ops->needs_launches()) || near_limit();
}

/* Not while the managed total stays under BOUND_TARGET, where no eviction can come of it (the
 * launch callbacks go off then, needs_launches). */
bool pol_plans_at_launches(void)
{
    return pol_planning() && needs_launches();
}

int pol_fill_now(void)
{
    return __atomic_load_n(&pol.fill_state, __ATOMIC_ACQUIRE);
}

/* While filling or full, only the smaps readings decide evictions (fill.c). */
bool pol_fill_holds(int state)
{
    return state == TRANSIT_FILL_FILLING || state == TRANSIT_FILL_FULL;
}

const char *pol_fill_name(void)
{
    static const char *const names[] = {"waiting", "filling", "full", "ended"};
    return names[pol_fill_now()];
}

/* What limit mode decides from (decide.h). */
transit_limit_view pol_limit_view(bool fill_held)
{
    return (transit_limit_view){.limit = transit_g.cfg.mem_limit, .estimating = pol_estimating(),
                                .planning = pol_planning(), .fill_held = fill_held,
                                .correction = transit_get(&pol.n.target_correction)};
}

/* What the recorder must collect for the policies now (events.h): recomputed at every change of
 * what it depends on (allocations, frees, profiles, advise applying, ticks). */
void pol_publish_demand(void)
{
    uint32_t bits = (pol_uses_profile() ? TRANSIT_DEMAND_PROFILE : 0) |
                    (needs_kernel_times() || transit_profile_collecting() ? TRANSIT_DEMAND_KERNEL_TIMES : 0) |
                    (needs_launches() ? TRANSIT_DEMAND_LAUNCHES : 0) | (near_limit() ? TRANSIT_DEMAND_NEAR_LIMIT : 0) |
                    (pol_far_under_limit() ? TRANSIT_DEMAND_FAR_UNDER : 0) |
                    (pol_plans_at_launches() ? TRANSIT_DEMAND_PLANS_AT_LAUNCHES : 0) |
                    (transit_profile_collecting() ? TRANSIT_DEMAND_EVERY_RECORD : 0);
    transit_recorder_set_demand(bits);
}
