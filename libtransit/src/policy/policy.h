/* policy.h - the placement policies (base, prefetch, advise, hybrid) and limit mode, as the
 * layers above them (lifecycle, hooks, stats) use them. How they decide: docs/design.md; the
 * rules themselves are pure functions in decide.h. Each policy is one table (ops.h) the engine
 * dispatches these events to.
 *   base     - nothing: the driver's reactive faults and evictions;
 *   prefetch - the profiling window's HtoD migrations, attributed to launch ordinals (attrib.c)
 *              and merged (ranges.c), are prefetched before each later launch of that ordinal;
 *   advise   - at the middle of the first iteration after warm-up, every managed allocation (and
 *              every later one) gets SetAccessedBy(device): host data is read in place;
 *   hybrid   - at the end of the profile's window the most reused chunks are placed on the
 *              device, the rest on the host, read in place (model/placement.h).
 * In limit mode every policy also keeps TRANSIT's estimate of device-resident bytes, and the
 * measured bound, at or under L by evicting the least recently migrated chunks. */
#ifndef TRANSIT_POLICY_H
#define TRANSIT_POLICY_H

#include "events.h"
#include "placement.h"

#include <stdbool.h>
#include <stdint.h>

/* Counters: atomics, read without lock for the stats. */
typedef struct transit_policy_counters {
    uint64_t prefetch_calls, prefetch_bytes, prefetch_errors;
    uint64_t launch_evict_bytes, cold_bytes, refinements;
    uint64_t advise_calls, advise_bytes, advise_errors;
    uint64_t evict_count, evict_bytes, evict_errors;
    uint64_t resident, resident_peak, overshoot_peak, spilled_peak;
    uint64_t ranges_count, ranges_bytes, ranges_dropped, unattributed_bytes;
    uint64_t untracked_bytes, capture_skips;
    uint64_t sweeps, sweep_ranges, sweep_bytes;
    uint64_t host_measured, host_checks, device_bound_peak; /* host_checks 0: never measured */
    uint64_t device_bound, bound_evict_bytes, rss_drift_peak;
    uint64_t bound_peak_since; /* highest bound since the last iteration mark; UINT64_MAX: none */
    uint64_t corrected_marks, target_correction;
    uint64_t fill_ranges, fill_bytes, fill_from, fill_reached;
    uint64_t clock_rewinds; /* without records: turns of the eviction clock (estimate.c) */
    /* hybrid: placements planned and applied, the bytes each moved, bytes by reuse class */
    uint64_t hybrid_plans, hybrid_applied;
    uint64_t placed_host_ranges, placed_host_bytes, placed_device_ranges, placed_device_bytes;
    uint64_t demoted_ranges, demoted_bytes; /* placed chunks sent to the host by readings over L */
    uint64_t remapped_ranges, remapped_bytes; /* device chunks sent out and back (TRANSIT_HYBRID_REMAP) */
    /* with TRANSIT_PROFILE, at each iteration mark once placed: the host-held bytes of the chunks
     * placed on the device and of those placed on the host (pagemap; readings 0: none yet) */
    uint64_t placement_readings, placed_device_on_host_bytes, placed_host_on_host_bytes;
    uint64_t hybrid_resident_by_reuse[TRANSIT_HYBRID_CLASSES], hybrid_host_by_reuse[TRANSIT_HYBRID_CLASSES];
    /* hybrid's mover: its plan (bytes each way per iteration, by reuse class a part of the host
     * bytes; the staging it holds at most), and what it did: phases issued, launches that waited
     * for an arrival or found it not issued yet (read in place), phases dropped (queue full) */
    uint64_t hybrid_streamed_by_reuse[TRANSIT_HYBRID_CLASSES], planned_streamed_bytes, planned_staged_peak;
    uint64_t stream_in_ranges, stream_in_bytes, stream_out_ranges, stream_out_bytes;
    uint64_t mover_phases, mover_waits, mover_late, mover_dropped;
    /* hybrid's guard: steps measured with each placement and their medians (ns; 0: none) */
    uint64_t guard_hybrid_steps, guard_advise_steps, guard_hybrid_step_ns, guard_advise_step_ns;
} transit_policy_counters;

/* What the stats show of the policies (transit_policy_snapshot). */
typedef struct transit_policy_snap {
    transit_policy_counters n;
    uint64_t resident;        /* transit_policy_resident() */
    bool estimating;          /* the estimate follows migration records */
    bool planning;            /* limit mode's evictions go at launches */
    bool replaying;           /* a profile is built */
    bool advise_applied;
    const char *fill_state;   /* "waiting", "filling", "full", "ended" */
    bool hybrid_due;          /* a placement is planned and not applied yet */
    const char *guard_state;  /* hybrid's guard: "off", "waiting", "measuring-advise", "measuring-hybrid",
                               * "decided", "failed" */
    const char *guard_kept;   /* "hybrid", "advise", or NULL before the guard decided */
} transit_policy_snap;

/* At load, once the configuration is read: the active policy's table (base until then). */
void transit_policy_load(void);

/* ---- the recorder's events (lifecycle.c wires them into the sink) ---- */
void transit_policy_launch(const transit_launch *l);
void transit_policy_kernel(uint32_t corr, uint64_t start_ns, uint64_t end_ns, uint32_t ordinal);
void transit_policy_um_record(const transit_um_record *r);
void transit_policy_profile_begin(uint64_t first, transit_window_kind kind);
bool transit_policy_profile_end(uint32_t max_launches, bool timed);
void transit_policy_window_closed(void);
/* At each iteration mark: limit mode's measured bound, the highest reading since the previous
 * mark (UINT64_MAX when it was not measured meanwhile), for the timeline; while planning it also
 * corrects the launches' eviction target, and advise's fill may begin. */
uint64_t transit_policy_iteration_ended(void);

/* ---- allocations (hooks) ---- */
/* Limit mode, before a managed allocation of `size` bytes: room for it (may evict and wait). */
void transit_policy_before_alloc(uint64_t size);
void transit_policy_on_alloc(uint64_t ptr, uint64_t size, int device);
void transit_policy_on_free(uint64_t ptr, uint64_t size);

/* ---- the tick thread and the process (lifecycle) ---- */
/* Every 20 ms: limit mode's host check and evictions, and advise without launch callbacks. */
void transit_policy_tick(void);
/* Whether the active policy runs a thread of its own (hybrid's mover), and that thread's step:
 * it blocks until there is work or for a short while. */
bool transit_policy_runs_mover(void);
void transit_policy_move_step(void);
/* At exit, before the tick thread is waited for: ticks, evictions and sweeps stop at their next batch. */
void transit_policy_stop(void);
/* At exit: a profile window the run ended in is written as it is. */
void transit_policy_exit(void);
void transit_policy_after_fork(void);

/* What the recorder must collect for the policies, published now (before the recorder starts;
 * every change the policies see publishes it too). */
void transit_policy_refresh_demand(void);
/* Bytes of managed memory believed resident on the device (limit mode's estimate; physical
 * mode: all of it). */
uint64_t transit_policy_resident(void);
/* Bytes limit mode asked to move to the host so far (evictions and sweeps), for the timeline. */
uint64_t transit_policy_evicted_bytes(void);
/* Without lock or allocation (the signal path renders the stats). */
void transit_policy_snapshot(transit_policy_snap *out);

#endif
