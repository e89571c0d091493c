/* engine.c - the policy engine: it picks the active policy's table at load, keeps the profile
 * store that prefetch and limit mode replay, and turns the recorder's and the hooks' events
 * into calls of the services and of the table (see policy.h, ops.h; the launch event is
 * launches.c's, the tick and iteration mark tick.c's). */
#include "policy_int.h"
#include "profile.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* The policies, by transit_policy (config.h): the one place that asks which is active. */
void transit_policy_load(void)
{
    static const transit_policy_ops *const tables[] = {
        [TRANSIT_POLICY_BASE] = &transit_policy_base_ops,
        [TRANSIT_POLICY_PREFETCH] = &transit_policy_prefetch_ops,
        [TRANSIT_POLICY_ADVISE] = &transit_policy_advise_ops,
        [TRANSIT_POLICY_HYBRID] = &transit_policy_hybrid_ops,
    };
    pol_ops = tables[transit_g.cfg.policy];
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

uint64_t transit_policy_evicted_bytes(void)
{
    return transit_get(&pol.n.evict_bytes) + transit_get(&pol.n.sweep_bytes);
}

/* The profile store's part of a window's opening (prof_lock after the recorder's win_lock). */
static void store_begin(bool refine)
{
    if (!pol_uses_profile())
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
    if (!pol_uses_profile())
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
        transit_profile_window_begin(first, 1, true, pol_ops->window_end != NULL);
    } else {
        store_begin(kind == TRANSIT_WINDOW_REFINE);
        if (kind == TRANSIT_WINDOW_FULL)
            transit_profile_window_begin(first, transit_g.cfg.warmup_iters, false, pol_ops->window_end != NULL);
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
    transit_profile_window_end(true, pol_ops->window_end); /* the first full window's records are all in */
}

void transit_policy_exit(void)
{
    transit_profile_window_end(false, pol_ops->window_end); /* a run shorter than its window */
}

void transit_policy_stop(void)
{
    __atomic_store_n(&pol.stopping, 1, __ATOMIC_RELEASE);
    if (pol_ops->stop)
        pol_ops->stop();
}

void transit_policy_on_alloc(uint64_t ptr, uint64_t size, int device)
{
    transit_profile_allocated(ptr, size);
    /* PyTorch's device tensors are first touched by the GPU, which populates them on the device
     * without any migration record: count a new allocation as resident from the start. */
    if (transit_limit_mode())
        pol_mark_resident(ptr, size, false);
    pol_raise_peaks(transit_policy_resident());
    if (pol_ops->on_alloc)
        pol_ops->on_alloc(ptr, size, device);
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
    if (pol_ops->after_fork)
        pol_ops->after_fork();
    memset(&pol, 0, sizeof pol);
    pthread_mutex_init(&pol.prof_lock, NULL);
    pthread_mutex_init(&pol.chunks_lock, NULL);
    pthread_mutex_init(&pol.alloc_room_lock, NULL);
    pol.moves_at_mark = UINT64_MAX;
    pol.n.bound_peak_since = UINT64_MAX;
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
        .guard_state = "off",
    };
    if (pol_ops->snapshot)
        pol_ops->snapshot(s);
}

/* The active policy's own thread (lifecycle.c): hybrid's mover, in limit mode only (its staging
 * is the margin under L). */
bool transit_policy_runs_mover(void)
{
    return pol_ops->move_step && transit_limit_mode() && transit_g.cfg.hybrid_mover;
}

void transit_policy_move_step(void)
{
    pol_ops->move_step();
}
