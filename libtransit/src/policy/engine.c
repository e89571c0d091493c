/* engine.c - the policies' state, what they need of the recorder (the demand word), the profile
 * store that prefetch and limit mode replay, and the recorder's events (see policy.h). */
#include "iteration.h"
#include "policy_int.h"
#include "profile.h"
#include "recorder.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

policy pol = {
    .prof_lock = PTHREAD_MUTEX_INITIALIZER,
    .chunks_lock = PTHREAD_MUTEX_INITIALIZER,
    .alloc_room_lock = PTHREAD_MUTEX_INITIALIZER,
    .hybrid_lock = PTHREAD_MUTEX_INITIALIZER,
    .guard_lock = PTHREAD_MUTEX_INITIALIZER,
    .moves_at_mark = UINT64_MAX,
    .n = {.bound_peak_since = UINT64_MAX},
};


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

static bool uses_profile(void)
{
    transit_policy p = transit_g.cfg.policy;
    return p == TRANSIT_POLICY_PREFETCH || p == TRANSIT_POLICY_HYBRID || transit_limit_mode();
}

bool pol_in_place(void)
{
    return transit_g.cfg.policy == TRANSIT_POLICY_ADVISE || transit_g.cfg.policy == TRANSIT_POLICY_HYBRID;
}

/* Limit mode's evictions go at launches, in their order (docs/design.md, "Limit mode"). */
bool pol_planning(void)
{
    return pol_estimating() && __atomic_load_n(&pol.replay, __ATOMIC_ACQUIRE) &&
           !(pol_in_place() && __atomic_load_n(&pol.advise_applied, __ATOMIC_ACQUIRE));
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
    bool plans = transit_g.cfg.policy == TRANSIT_POLICY_PREFETCH || transit_limit_mode();
    return plans && (!capacity || transit_get(&transit_g.n.managed_peak) > capacity / 2);
}

/* Prefetch has nothing to replay (its window took no kernel times, or nothing migrated in it),
 * and the managed total stays under BOUND_TARGET of its planned capacity: its launches do
 * nothing, as base's, and the launch callbacks can go off (and CUPTI with them, far under L)
 * after the window. Past that mark they come back with a new profile (the recorder's
 * rec_steer_launch_callbacks). */
static bool prefetch_replays_nothing(void)
{
    uint64_t capacity = pol_planned_capacity();
    bool ranges = __atomic_load_n(&pol.replay, __ATOMIC_ACQUIRE) && transit_get(&pol.n.ranges_count);
    return !ranges && capacity && transit_get(&transit_g.n.managed_peak) <= TRANSIT_BOUND_TARGET(capacity);
}

/* Limit mode evicts at launches only once the managed total came near L. */
static bool needs_launches(void)
{
    const transit_config *c = &transit_g.cfg;
    return (c->policy == TRANSIT_POLICY_PREFETCH && !prefetch_replays_nothing()) ||
           (c->policy == TRANSIT_POLICY_ADVISE && !__atomic_load_n(&pol.advise_applied, __ATOMIC_ACQUIRE)) ||
           (c->policy == TRANSIT_POLICY_HYBRID && pol_mover_active()) ||
           near_limit();
}

/* Not while the managed total stays under BOUND_TARGET, where no eviction can come of it (the
 * launch callbacks go off then, needs_launches). */
bool pol_plans_at_launches(void)
{
    return pol_planning() && needs_launches();
}

uint64_t transit_policy_resident(void)
{
    uint64_t live = transit_get(&transit_g.n.managed_live);
    if (!transit_limit_mode())
        return live; /* physical mode: the driver decides; TRANSIT does not estimate */
    if (pol_estimating())
        return transit_get(&pol.n.resident);
    return TRANSIT_MIN(live, transit_g.cfg.mem_limit);
}

int pol_fill_now(void)
{
    return __atomic_load_n(&pol.fill_state, __ATOMIC_ACQUIRE);
}

/* While filling or full, only the smaps readings decide evictions (advise.c). */
bool pol_fill_holds(int state)
{
    return state == TRANSIT_FILL_FILLING || state == TRANSIT_FILL_FULL;
}

/* What limit mode decides from (decide.h). */
transit_limit_view pol_limit_view(bool fill_held)
{
    return (transit_limit_view){.limit = transit_g.cfg.mem_limit, .estimating = pol_estimating(),
                                .planning = pol_planning(), .fill_held = fill_held,
                                .correction = transit_get(&pol.n.target_correction)};
}

uint64_t transit_policy_evicted_bytes(void)
{
    return transit_get(&pol.n.evict_bytes) + transit_get(&pol.n.sweep_bytes);
}

/* The profile store's part of a window's opening (prof_lock after the recorder's win_lock). */
static void store_begin(bool refine)
{
    if (!uses_profile())
        return;
    pthread_mutex_lock(&pol.prof_lock);
    pol.refining = refine && pol.replay;
    if (!pol.refining) { /* a new profile: its planning corrects itself anew */
        __atomic_store_n(&pol.replay, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&pol.n.target_correction, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&pol.n.corrected_marks, 0, __ATOMIC_RELAXED);
    }
    if (!pol.fresh && !(pol.fresh = transit_ranges_create(transit_g.cfg.prefetch_gap, 0)))
        transit_warn("prefetch: out of memory for the range table; acting as base");
    if (pol.fresh && !pol.attrib && !(pol.attrib = transit_attrib_create(pol.fresh, 0, 0)))
        transit_warn("prefetch: out of memory for migration attribution; acting as base");
    if (pol.fresh)
        transit_ranges_reset(pol.fresh);
    if (pol.attrib) {
        transit_attrib_retarget(pol.attrib, pol.fresh);
        transit_attrib_flush(pol.attrib); /* forget kernels and migrations of an earlier window */
    }
    pol.collecting = pol.fresh && pol.attrib; /* the stats keep the last finished profile's totals */
    pthread_mutex_unlock(&pol.prof_lock);
}

static bool store_end(uint32_t max_launches, bool timed)
{
    bool learning = false;
    if (!uses_profile())
        return false;
    pthread_mutex_lock(&pol.prof_lock);
    bool built = pol.collecting && timed; /* untimed, no migration could be placed: no profile, not an empty one */
    if (pol.collecting) {
        pol.collecting = 0;
        transit_attrib_flush(pol.attrib);
    }
    if (built) {
        transit_attrib_counts n = transit_attrib_get_counts(pol.attrib);
        __atomic_store_n(&pol.n.unattributed_bytes, n.unattributed_bytes, __ATOMIC_RELAXED);
        if ((pol.refining && transit_ranges_add_all(pol.fresh, pol.ranges)) || transit_ranges_finalize(pol.fresh)) {
            transit_warn(pol.refining ? "limit mode: out of memory refining the profile; the earlier one stays"
                                  : "prefetch: out of memory merging ranges; acting as base");
        } else {
            transit_ranges *replayed = pol.ranges;
            /* A full range table can drop old ranges: the merged total may then be smaller. */
            uint64_t before = pol.refining ? transit_ranges_total_bytes(replayed) : 0, after = transit_ranges_total_bytes(pol.fresh);
            learning = !pol.refining || (after > before && after - before > before / REFINE_GROWTH_DIV);
            pol.ranges = pol.fresh;
            pol.fresh = replayed; /* reset when the next window begins */
            transit_add(&pol.n.refinements, pol.refining);
            __atomic_store_n(&pol.n.ranges_count, transit_ranges_total_count(pol.ranges), __ATOMIC_RELAXED);
            __atomic_store_n(&pol.n.ranges_bytes, transit_ranges_total_bytes(pol.ranges), __ATOMIC_RELAXED);
            __atomic_store_n(&pol.n.ranges_dropped, transit_ranges_dropped(pol.ranges), __ATOMIC_RELAXED);
            __atomic_store_n(&pol.replay, 1, __ATOMIC_RELEASE);
            if (transit_g.cfg.verbose)
                transit_log("%s: %zu ranges, %" PRIu64 " bytes over up to %u launches per iteration "
                            "(%" PRIu64 " migrations attributed, %" PRIu64 " not)",
                            pol.refining ? "profile refined" : "profile", transit_ranges_total_count(pol.ranges),
                            transit_ranges_total_bytes(pol.ranges), max_launches, n.attributed, n.unattributed);
        }
    }
    pthread_mutex_unlock(&pol.prof_lock);
    return learning;
}

void transit_policy_kernel(uint32_t corr, uint64_t start_ns, uint64_t end_ns, uint32_t ordinal)
{
    transit_profile_kernel(corr, start_ns, end_ns);
    if (!__atomic_load_n(&pol.collecting, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&pol.prof_lock);
    if (pol.collecting)
        transit_attrib_kernel(pol.attrib, start_ns, end_ns, ordinal);
    pthread_mutex_unlock(&pol.prof_lock);
}

static void htod(uint64_t start_ns, uint64_t addr, uint64_t bytes)
{
    if (__atomic_load_n(&pol.collecting, __ATOMIC_RELAXED)) {
        pthread_mutex_lock(&pol.prof_lock);
        if (pol.collecting)
            transit_attrib_migration(pol.attrib, start_ns, addr, bytes);
        pthread_mutex_unlock(&pol.prof_lock);
    }
    /* While planning, the chunks the estimate lacks count resident as the next victims: either a
     * kernel the profile did not name for the chunk faulted it back in after its eviction, or the
     * record is older than an eviction already queued at a later launch (the CPU runs ahead), and
     * the extra eviction does nothing. */
    if (pol_estimating())
        pol_mark_resident(addr, bytes, pol_planning());
}

static void dtoh(uint64_t addr, uint64_t bytes)
{
    if (pol_estimating() && !pol_planning())
        pol_mark_gone(addr, bytes);
}

/* A fault on memory no processor has touched populates it on the device without any HtoD
 * record; count the faulting page's neighbourhood as resident (an estimate). */
static void gpu_fault(uint64_t addr)
{
    if (pol_estimating() && !pol_planning())
        pol_mark_resident(addr & ~(uint64_t)(FAULT_POPULATE_BYTES - 1), FAULT_POPULATE_BYTES, false);
}

void transit_policy_um_record(const transit_um_record *r)
{
    static const profile_event_kind kinds[] = {[TRANSIT_MIGRATION_HTOD] = PROFILE_HTOD,
                                               [TRANSIT_MIGRATION_DTOH] = PROFILE_DTOH,
                                               [TRANSIT_GPU_FAULT] = PROFILE_FAULT, [TRANSIT_REMOTE_MAP] = PROFILE_REMOTE};
    if (r->kind == TRANSIT_MIGRATION_HTOD)
        htod(r->start_ns, r->addr, r->value);
    else if (r->kind == TRANSIT_MIGRATION_DTOH)
        dtoh(r->addr, r->value);
    else if (r->kind == TRANSIT_GPU_FAULT)
        gpu_fault(r->addr);
    transit_profile_event(kinds[r->kind], r->start_ns, r->addr, r->value);
}

void transit_policy_profile_begin(uint64_t first, transit_window_kind kind)
{
    if (kind == TRANSIT_WINDOW_STEADY) {
        transit_profile_window_begin(first, 1, true, transit_g.cfg.policy == TRANSIT_POLICY_HYBRID);
    } else {
        store_begin(kind == TRANSIT_WINDOW_REFINE);
        if (kind == TRANSIT_WINDOW_FULL)
            transit_profile_window_begin(first, transit_g.cfg.warmup_iters, false,
                                         transit_g.cfg.policy == TRANSIT_POLICY_HYBRID);
    }
    pol_publish_demand();
}

bool transit_policy_profile_end(uint32_t max_launches, bool timed)
{
    bool learning = store_end(max_launches, timed);
    pol_publish_demand();
    return learning;
}

void transit_policy_window_closed(void)
{
    transit_profile_window_end(true, transit_g.cfg.policy == TRANSIT_POLICY_HYBRID ? pol_hybrid_plan : NULL); /* the first full window's records are all in */
}

void transit_policy_exit(void)
{
    transit_profile_window_end(false, transit_g.cfg.policy == TRANSIT_POLICY_HYBRID ? pol_hybrid_plan : NULL); /* a run shorter than its window */
}

void transit_policy_stop(void)
{
    __atomic_store_n(&pol.stopping, 1, __ATOMIC_RELEASE);
    pol_mover_wake();
}

void transit_policy_on_alloc(uint64_t ptr, uint64_t size, int device)
{
    const transit_driver_api *drv;
    transit_profile_allocated(ptr, size);
    /* PyTorch's device tensors are first touched by the GPU, which populates them on the device
     * without any migration record: count a new allocation as resident from the start. */
    if (transit_limit_mode())
        pol_mark_resident(ptr, size, false);
    pol_raise_peaks(transit_policy_resident());
    if (pol_in_place() && __atomic_load_n(&pol.advise_applied, __ATOMIC_ACQUIRE) &&
        (drv = transit_act_driver())) {
        CUstreamCaptureMode saved;
        bool relaxed = transit_act_relax_capture(drv, &saved);
        pol_advise_range(drv, ptr, size, device);
        transit_act_restore_capture(drv, relaxed, &saved);
    }
    pol_publish_demand();
}

void transit_policy_on_free(uint64_t ptr, uint64_t size)
{
    if (transit_limit_mode())
        pol_mark_gone(ptr, size);
    pol_publish_demand();
}

/* The profile's collector resets with its own transit_profile_after_fork (lifecycle.c's list). */
void transit_policy_after_fork(void)
{
    transit_ranges_destroy(pol.ranges);
    transit_ranges_destroy(pol.fresh);
    transit_attrib_destroy(pol.attrib);
    transit_chunks_destroy(pol.chunks);
    free(pol.hybrid_chunk);
    free(pol.hybrid_reuse);
    free(pol.hybrid_resident);
    transit_stream_schedule_free(&pol.hybrid_schedule);
    pol_mover_after_fork();
    pol_guard_after_fork();
    memset(&pol, 0, sizeof pol);
    pthread_mutex_init(&pol.hybrid_lock, NULL);
    pthread_mutex_init(&pol.guard_lock, NULL);
    pthread_mutex_init(&pol.prof_lock, NULL);
    pthread_mutex_init(&pol.chunks_lock, NULL);
    pthread_mutex_init(&pol.alloc_room_lock, NULL);
    pol.moves_at_mark = UINT64_MAX;
    pol.n.bound_peak_since = UINT64_MAX;
}

/* What the recorder must collect for the policies now (events.h): recomputed at every change of
 * what it depends on (allocations, frees, profiles, advise applying, ticks). */
void pol_publish_demand(void)
{
    uint32_t bits = (uses_profile() ? TRANSIT_DEMAND_PROFILE : 0) |
                    (needs_kernel_times() || transit_profile_collecting() ? TRANSIT_DEMAND_KERNEL_TIMES : 0) |
                    (needs_launches() ? TRANSIT_DEMAND_LAUNCHES : 0) | (near_limit() ? TRANSIT_DEMAND_NEAR_LIMIT : 0) |
                    (pol_far_under_limit() ? TRANSIT_DEMAND_FAR_UNDER : 0) |
                    (pol_plans_at_launches() ? TRANSIT_DEMAND_PLANS_AT_LAUNCHES : 0) |
                    (transit_profile_collecting() ? TRANSIT_DEMAND_EVERY_RECORD : 0);
    transit_recorder_set_demand(bits);
}

const char *pol_fill_name(void)
{
    static const char *const names[] = {"waiting", "filling", "full", "ended"};
    return names[pol_fill_now()];
}

void transit_policy_refresh_demand(void)
{
    pol_publish_demand();
}

void transit_policy_snapshot(transit_policy_snap *s)
{
    *s = (transit_policy_snap){
        .n = pol.n,
        .resident = transit_policy_resident(),
        .estimating = pol_estimating(),
        .planning = pol_planning(),
        .replaying = __atomic_load_n(&pol.replay, __ATOMIC_RELAXED),
        .advise_applied = __atomic_load_n(&pol.advise_applied, __ATOMIC_RELAXED),
        .fill_state = pol_fill_name(),
        .hybrid_due = __atomic_load_n(&pol.hybrid_due, __ATOMIC_RELAXED),
        .guard_state = pol_guard_state_name(),
        .guard_kept = pol_guard_kept_name(),
    };
}
