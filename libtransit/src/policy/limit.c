/* limit.c - limit mode, a service the engine's tick (tick.c) and the policies call: the measured
 * bound on what the device holds (managed bytes minus host-resident ones, host_residency.c), the
 * evictions it asks for, the sweeps for what the estimate lost, the per-iteration correction of
 * the launches' target, and the room made before an allocation. Why each rule is as it is:
 * docs/design-notes.md, "Limit mode". */
#include "host_residency.h"
#include "policy_int.h"

#include <math.h>
#include <stdlib.h>

/* The bound on device-resident managed bytes, given the host-resident ones. */
static uint64_t pol_bound_from_host(uint64_t host)
{
    uint64_t live = transit_get(&transit_g.n.managed_live);
    return live > host ? live - host : 0;
}

/* A reading of the bound, for the stats and the launches' correction. */
static void pol_record_bound(uint64_t bound)
{
    __atomic_store_n(&pol.n.device_bound, bound, __ATOMIC_RELAXED);
    transit_raise_peak(&pol.n.device_bound_peak, bound);
    /* UINT64_MAX (no reading since the last take) gives way to any reading. */
    uint64_t seen = __atomic_load_n(&pol.n.bound_peak_since, __ATOMIC_RELAXED);
    while ((seen == UINT64_MAX || bound > seen) &&
           !__atomic_compare_exchange_n(&pol.n.bound_peak_since, &seen, bound, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

/* The bound on device-resident managed bytes (see the top of this file) from the RSS, now;
 * UINT64_MAX before the first smaps reading or when the RSS cannot be read. */
static uint64_t pol_read_bound(void)
{
    bool calibrated = transit_limit_mode() && __atomic_load_n(&pol.rss_calibrated, __ATOMIC_ACQUIRE);
    int64_t rss = calibrated ? transit_process_rss() : -1;
    int64_t not_managed = __atomic_load_n(&pol.rss_not_managed, __ATOMIC_RELAXED);
    if (rss < 0)
        return UINT64_MAX;
    return pol_bound_from_host(rss > not_managed ? (uint64_t)(rss - not_managed) : 0);
}

/* What a bound asks to evict (transit_decide_bound_excess; docs/design-notes.md, "The bound's
 * safety net while planning"). */
static uint64_t pol_bound_excess(uint64_t bound, bool fill_held)
{
    transit_limit_view v = pol_limit_view(fill_held);
    return transit_decide_bound_excess(&v, bound);
}

/* What the bound, read now, asks to evict with `coming` bytes about to be allocated counted in
 * (bound_excess); 0 when it cannot be read. */
uint64_t pol_excess_now(uint64_t coming, bool fill_held)
{
    uint64_t bound = pol_read_bound();
    return bound == UINT64_MAX ? 0 : pol_bound_excess(bound + coming, fill_held);
}

/* One tick's evictions: the estimate's least recently migrated chunks until it is at EVICT_TARGET,
 * and lower by `asked`, what the measured bound asks; while advise's fill holds, only by `asked`.
 * Whenever the stream ran what was queued, the bound (with `coming`, an allocation about to be
 * made, counted in) is read again and may ask for more: the GPU faults data in while evictions
 * run. Not paced, not split over threads, not filtered by pagemap (docs/design-notes.md,
 * "Evictions"). */
void pol_evict(const transit_driver_api *drv, CUstream stream, uint64_t asked, bool fill_held, uint64_t coming)
{
    /* While the fill holds, or without records, only the reading counts: the estimate, whole
     * chunks, may be over L (without records it counts everything allocated since the clock's
     * last turn). */
    uint64_t target = fill_held || !pol_estimating() ? UINT64_MAX : TRANSIT_EVICT_TARGET(transit_g.cfg.mem_limit);
    transit_range victims[EVICT_BATCH];
    bool rewound = false;
    while (!__atomic_load_n(&pol.stopping, __ATOMIC_ACQUIRE)) {
        size_t n = 0;
        pthread_mutex_lock(&pol.chunks_lock);
        uint64_t resident = pol.chunks ? transit_chunks_resident_bytes(pol.chunks) : 0;
        uint64_t goal = TRANSIT_MIN(target, resident > asked ? resident - asked : 0), picked = 0;
        if (resident > goal) { /* so chunks exist */
            n = transit_chunks_pick_victims(pol.chunks, goal, victims, EVICT_BATCH);
            pol_chunks_changed();
            picked = resident - transit_chunks_resident_bytes(pol.chunks);
        }
        pthread_mutex_unlock(&pol.chunks_lock);
        if (!n && asked && !pol_estimating() && !rewound) { /* once: nothing allocated, nothing to pick */
            rewound = true;
            if (pol_rewind_clock())
                continue;
        }
        if (!n)
            break;
        /* The device did not hold still: the fill ends, unless nothing was filled yet (the RSS's
         * bound, which let it begin, can read under the first smaps reading). */
        if (fill_held)
            __atomic_store_n(&pol.fill_state, transit_decide_fill_at_eviction((transit_fill_state)pol_fill_now(), transit_get(&pol.n.fill_ranges)),
                             __ATOMIC_RELEASE);
        /* What went below the estimate's own target, the bound asked for. */
        uint64_t after = resident - picked;
        transit_add(&pol.n.bound_evict_bytes,
                    (target > after ? target - after : 0) - (target > resident ? target - resident : 0));
        /* The bound shows these only once they ran: count them off what it asked for. */
        asked = asked > picked ? asked - picked : 0;
        bool refused = false;
        for (size_t i = 0; i < n; i++)
            refused |= !pol_prefetch_range(drv, victims[i], 0, PREFETCH_EVICT, stream);
        /* A refused range is counted resident again, at the LRU's tail: picking victims again
         * now would cycle through the estimate for as long as the driver refuses (for ever, when
         * it never supports the prefetch). The next tick tries again. */
        if (refused)
            return;
        if (!fill_held && transit_act_stream_idle(drv, stream)) {
            uint64_t now = pol_read_bound();
            if (now != UINT64_MAX) {
                pol_record_bound(now);
                transit_raise_peak(&pol.bound_peak_unlogged, now);
                asked = TRANSIT_MAX(asked, pol_bound_excess(now + coming, false));
            }
        }
    }
}

/* While a sweep is due: its next SWEEP_PASS_S, once the stream ran the previous pass (queued
 * faster than the driver ran them, the passes kept the stream busy for seconds). */
void pol_sweep(const transit_driver_api *drv, CUstream stream)
{
    static int warned;
    CUresult e = transit_act_stream_query(drv, stream);
    if (e == CUDA_ERROR_NOT_READY)
        return;
    if (e != CUDA_SUCCESS) { /* the stream is broken: no sweep would ever end */
        transit_warn_once(&warned, "limit mode: cuStreamQuery on the sweep's stream; this sweep is dropped", drv, e);
        pol.sweep_due = 0;
        return;
    }
    if (pol_walk_spilled(drv, stream, PREFETCH_SWEEP, 0, &pol.sweep_cursor, transit_now() + SWEEP_PASS_S, UINT64_MAX)) {
        pol.sweep_due = 0;
        transit_add(&pol.n.sweeps, 1);
    }
}

/* The launches' correction (below) is at its cap. */
static bool pol_target_correction_capped(void)
{
    return transit_get(&pol.n.target_correction) >= TRANSIT_EVICT_TARGET(transit_g.cfg.mem_limit) / 2;
}

/* While planning the device holds more than the estimate (data that kernels the profile did not
 * name for it faulted back in): each iteration's measured bound peak corrects the launches' target
 * (transit_decide_correction). The first mark after planning began is skipped: that iteration
 * still flushed what the estimate did not know. Without records the same correction moves the
 * bound's targets. */
void pol_correct_target(uint64_t peak)
{
    uint64_t limit = transit_g.cfg.mem_limit;
    if (__atomic_fetch_add(&pol.n.corrected_marks, 1, __ATOMIC_RELAXED) == 0)
        return;
    __atomic_store_n(&pol.n.target_correction, transit_decide_correction(transit_get(&pol.n.target_correction), peak, limit),
                     __ATOMIC_RELAXED);
}

/* Every HOST_CHECK_PERIOD_S, from the tick thread: the estimate against smaps. The read walks the
 * page tables of every host-resident page, so with tens of GiB spilled one read can outlast the
 * period: the next check then waits HOST_CHECK_DUTY_DIV times as long as the read took.
 * None until the managed total passed HOST_CHECK_FROM: far under L no reading could ask for
 * anything, and from there the RSS is calibrated before an allocation can take the total past L
 * (the allocating thread makes room by it, transit_policy_before_alloc).
 * Returns the bound this reading gives; UINT64_MAX when there was none. */
uint64_t pol_check_host_residency(bool fill_held)
{
    double now = transit_now();
    if (!transit_limit_mode() || pol_far_under_limit() || now < pol.host_check_next)
        return UINT64_MAX;
    int64_t rss_before = transit_process_rss();
    int64_t host = transit_uvm_host_rss();
    int64_t rss_after = transit_process_rss();
    pol.host_check_next = now + TRANSIT_MAX(HOST_CHECK_PERIOD_S, (transit_now() - now) * HOST_CHECK_DUTY_DIV);
    if (host < 0)
        return UINT64_MAX;
    if (rss_before >= 0 && rss_after >= 0) {
        /* Migrations go on during the smaps walk: the RSS is taken as halfway between. */
        int64_t not_managed = (rss_before + rss_after) / 2 - host;
        if (pol.rss_calibrated)
            transit_raise_peak(&pol.n.rss_drift_peak, (uint64_t)llabs(not_managed - pol.rss_not_managed));
        __atomic_store_n(&pol.rss_not_managed, not_managed, __ATOMIC_RELAXED);
        __atomic_store_n(&pol.rss_calibrated, 1, __ATOMIC_RELEASE);
    }
    uint64_t bound = pol_bound_from_host((uint64_t)host);
    pol_record_bound(bound);
    __atomic_store_n(&pol.n.host_measured, (uint64_t)host, __ATOMIC_RELAXED);
    transit_add(&pol.n.host_checks, 1);
    /* Near L with the estimate short, a sweep finds what the estimate lost: the bound's evictions
     * can only take chunks it knows. While planning and under L at most one per iteration, and
     * none until the correction is at its cap; over L always; never while the fill holds
     * (docs/design-notes.md, "Sweeps"). */
    uint64_t limit = transit_g.cfg.mem_limit;
    bool planning = pol_planning();
    /* Once advise applied nothing comes back by itself: a sweep under L would only send data the
     * device reads to the host. */
    uint64_t sweep_above = __atomic_load_n(&pol.advise_applied, __ATOMIC_ACQUIRE) ? limit : TRANSIT_BOUND_TARGET(limit);
    bool sweep_allowed = !planning || bound > limit ||
                         (pol_target_correction_capped() && !__atomic_load_n(&pol.swept_since_mark, __ATOMIC_RELAXED));
    if (pol_estimating() && !pol.sweep_due && sweep_allowed && !fill_held && bound > sweep_above &&
        bound > transit_get(&pol.n.resident) + HOST_CHECK_SLACK(limit)) {
        pol.sweep_due = 1;
        if (planning)
            __atomic_store_n(&pol.swept_since_mark, 1, __ATOMIC_RELAXED);
    }
    return bound;
}

/* While planning the launches evict; the tick for the estimate only once it is PLAN_SLACK over
 * L, when launches with profiled chunks stopped coming (CUDA graphs, a kernel sequence changed
 * after the last re-profile, an evaluation phase), and for the bound once it is over L
 * (bound_excess). */
bool pol_evict_due(bool fill_held)
{
    transit_limit_view v = pol_limit_view(fill_held);
    return transit_decide_evict_due(&v, transit_get(&pol.n.resident));
}

/* What the bound, read now and recorded, asks to evict; 0 before the first smaps reading or when
 * the RSS cannot be read. */
uint64_t pol_bound_over(bool fill_held, uint64_t *bound_read)
{
    uint64_t bound = pol_read_bound();
    *bound_read = bound;
    if (bound == UINT64_MAX)
        return 0;
    pol_record_bound(bound);
    return pol_bound_excess(bound, fill_held);
}

/* The tick's stream for TRANSIT's own moves (evictions, the fill, a placement), created on first
 * use; false when it cannot be. */
bool pol_own_tick_stream(const transit_driver_api *drv, CUstream *stream)
{
    if (!transit_act_own_stream(drv, &pol.evict_stream))
        return false;
    *stream = pol.evict_stream;
    return true;
}

/* Limit mode: a new allocation counts on the device at once, and PyTorch's allocator takes
 * gigabytes at a time; so, by the tick's rule with the allocation counted in, the allocating
 * thread evicts first, on a stream of its own, and waits for it (an allocation is no launch). It
 * holds alloc_room_lock meanwhile, which keeps the tick's bound evictions off, and first waits for
 * those the tick queued (the bound shows evictions only once they ran). Only in the device's
 * context, not while advise's fill holds, and while planning only over L. */
void transit_policy_before_alloc(uint64_t size)
{
    static int warned;
    const transit_driver_api *drv;
    CUdevice dev;
    if (__atomic_load_n(&pol.stopping, __ATOMIC_ACQUIRE) || !pol_excess_now(size, pol_fill_holds(pol_fill_now())) ||
        !(drv = transit_act_driver()) || transit_act_current_device(drv, &dev) != CUDA_SUCCESS || (int)dev != transit_g.id.device)
        return;
    CUstreamCaptureMode saved;
    bool relaxed = transit_act_relax_capture(drv, &saved);
    pthread_mutex_lock(&pol.alloc_room_lock);
    CUstream tick_stream = __atomic_load_n(&pol.evict_stream, __ATOMIC_ACQUIRE);
    if (tick_stream)
        transit_act_stream_wait(drv, tick_stream);
    /* Read again: the tick's evictions ran, another allocating thread may have made the room, an
     * iteration mark may have started the fill. */
    uint64_t over = pol_excess_now(size, pol_fill_holds(pol_fill_now()));
    if (over && transit_act_own_stream(drv, &pol.alloc_stream)) {
        pol_evict(drv, pol.alloc_stream, over, false, size);
        CUresult e = transit_act_stream_wait(drv, pol.alloc_stream);
        if (e != CUDA_SUCCESS)
            transit_warn_once(&warned, "limit mode: cuStreamSynchronize after evicting for an allocation", drv, e);
    }
    pthread_mutex_unlock(&pol.alloc_room_lock);
    transit_act_restore_capture(drv, relaxed, &saved);
}
