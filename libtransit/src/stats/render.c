/* render.c - the stats document (schema transit.rank/1, transit/report/README.md), rendered from
 * each module's snapshot: the only place the stats' JSON is written. No lock and no allocation:
 * the signal path renders it too. */
#include "config.h"
#include "decide.h"
#include "iteration.h"
#include "policy.h"
#include "recorder.h"
#include "state.h"
#include "stats.h"
#include "timeline.h"

#include <inttypes.h>
#include <stdio.h>

static const char *yes(bool b)
{
    return b ? "true" : "false";
}

static void render_allocations(jbuf *b)
{
    const transit_counters *n = &transit_g.n;
    int dev = transit_g.id.device >= 0 && transit_g.id.device < TRANSIT_MAX_DEVICES ? transit_g.id.device : 0;
    uint64_t allocs = transit_get(&n->alloc_count), frees = transit_get(&n->free_count);
    jb_printf(b,
              "\"allocations\": {\"count\": %" PRIu64 ", \"frees\": %" PRIu64 ", \"live\": %" PRIu64
              ", \"managed_bytes_total\": %" PRIu64 ", \"managed_bytes_live\": %" PRIu64
              ", \"managed_bytes_peak\": %" PRIu64 ", \"vmm_count\": %" PRIu64 ", \"vmm_bytes\": %" PRIu64
              ", \"refused\": %" PRIu64 ", \"refused_calls\": %" PRIu64 ", \"refused_bytes\": %" PRIu64
              ", \"physical_budget_bytes\": %" PRIu64 "}, ",
              allocs, frees, allocs - frees, transit_get(&n->managed_total), transit_get(&n->managed_live),
              transit_get(&n->managed_peak), transit_get(&n->vmm_count), transit_get(&n->vmm_live),
              transit_get(&n->refused), transit_get(&n->refused_calls), transit_get(&n->refused_bytes),
              transit_g.phys_budget[dev]);
    jb_printf(b, "\"memory\": {\"device_total_bytes\": %" PRIu64 ", ", transit_g.device_total[dev]);
}

static void render_memory(jbuf *b, const transit_policy_snap *p)
{
    jb_printf(b,
              "\"resident_bytes\": %" PRIu64 ", \"resident_peak_bytes\": %" PRIu64 ", \"overshoot_peak_bytes\": %" PRIu64
              ", \"spilled_peak_bytes\": %" PRIu64 ", \"resident_estimated\": %s, ",
              p->resident, p->n.resident_peak, p->n.overshoot_peak, p->n.spilled_peak, yes(p->estimating));
    /* The measured bound (limit mode): null until smaps was read. */
    if (p->n.host_checks)
        jb_printf(b,
                  "\"host_resident_measured_bytes\": %" PRIu64 ", \"device_bound_bytes\": %" PRIu64
                  ", \"device_bound_peak_bytes\": %" PRIu64 ", \"rss_drift_peak_bytes\": %" PRIu64 "}, ",
                  p->n.host_measured, p->n.device_bound, p->n.device_bound_peak, p->n.rss_drift_peak);
    else
        jb_printf(b, "\"host_resident_measured_bytes\": null, \"device_bound_bytes\": null, "
                     "\"device_bound_peak_bytes\": null, \"rss_drift_peak_bytes\": null}, ");
}

static void direction(jbuf *b, const char *name, uint64_t bytes, uint64_t count, const transit_hist *h)
{
    char counts[256], sizes[256];
    if (transit_hist_json(h, TRANSIT_HIST_COUNT, counts, sizeof counts) < 0)
        snprintf(counts, sizeof counts, "null");
    if (transit_hist_json(h, TRANSIT_HIST_BYTES, sizes, sizeof sizes) < 0)
        snprintf(sizes, sizeof sizes, "null");
    jb_printf(b,
              "\"%s\": {\"bytes\": %" PRIu64 ", \"count\": %" PRIu64 ", \"histogram\": %s, \"histogram_bytes\": %s}, ",
              name, bytes, count, counts, sizes);
}

static void render_migrations(jbuf *b, const transit_recorder_snap *r)
{
    jb_printf(b, "\"migrations\": {");
    direction(b, "htod", r->n.htod_bytes, r->n.htod_count, &r->htod_hist);
    direction(b, "dtoh", r->n.dtoh_bytes, r->n.dtoh_count, &r->dtoh_hist);
    jb_printf(b, "\"unrequested_bytes\": %" PRIu64 "}, ", r->n.unrequested_bytes);
    jb_printf(b, "\"faults\": {\"gpu_page_faults\": %" PRIu64 ", \"thrashing\": %" PRIu64
                 ", \"remote_map_bytes\": %" PRIu64 "}, ",
              r->n.gpu_faults, r->n.thrashing, r->n.remote_map_bytes);
}

/* A median step in seconds, or null when none was measured. */
static void step_s(jbuf *b, const char *name, uint64_t ns)
{
    if (ns)
        jb_printf(b, "\"%s\": %.6f, ", name, (double)ns * 1e-9);
    else
        jb_printf(b, "\"%s\": null, ", name);
}

/* Hybrid's guard (model/guard.h): the placement it kept and both blocks' median steps. */
static void render_guard(jbuf *b, const transit_policy_snap *p)
{
    const transit_policy_counters *n = &p->n;
    jb_printf(b, "\"fallback\": {\"state\": \"%s\", ", p->guard_state);
    if (p->guard_kept)
        jb_printf(b, "\"kept\": \"%s\", ", p->guard_kept);
    else
        jb_printf(b, "\"kept\": null, ");
    step_s(b, "hybrid_step_s", n->guard_hybrid_step_ns);
    step_s(b, "advise_step_s", n->guard_advise_step_ns);
    jb_printf(b, "\"hybrid_steps\": %" PRIu64 ", \"advise_steps\": %" PRIu64 "}}, ", n->guard_hybrid_steps,
              n->guard_advise_steps);
}

/* Hybrid's placement: what it moved, the bytes it keeps, leaves and streams by reuse class, and
 * what its mover planned and did. */
static void render_hybrid(jbuf *b, const transit_policy_snap *p)
{
    static const char *const classes[TRANSIT_HYBRID_CLASSES] = {"1", "2", "3-4", "5-8", "9+"};
    const transit_policy_counters *n = &p->n;
    jb_printf(b,
              "\"hybrid\": {\"plans\": %" PRIu64 ", \"applied\": %" PRIu64 ", \"due\": %s, \"placed_host_bytes\": %" PRIu64
              ", \"placed_device_bytes\": %" PRIu64 ", \"demoted_ranges\": %" PRIu64 ", \"demoted_bytes\": %" PRIu64
              ", \"remapped_ranges\": %" PRIu64 ", \"remapped_bytes\": %" PRIu64 ", ",
              n->hybrid_plans, n->hybrid_applied, yes(p->hybrid_due), n->placed_host_bytes, n->placed_device_bytes,
              n->demoted_ranges, n->demoted_bytes, n->remapped_ranges, n->remapped_bytes);
    /* where the placed chunks were at the last iteration mark (TRANSIT_PROFILE); null: not read */
    if (n->placement_readings)
        jb_printf(b, "\"placement_readings\": %" PRIu64 ", \"placed_device_on_host_bytes\": %" PRIu64
                     ", \"placed_host_on_host_bytes\": %" PRIu64 ", ",
                  n->placement_readings, n->placed_device_on_host_bytes, n->placed_host_on_host_bytes);
    else
        jb_printf(b, "\"placement_readings\": 0, \"placed_device_on_host_bytes\": null, "
                     "\"placed_host_on_host_bytes\": null, ");
    jb_printf(b, "\"by_reuse\": {");
    for (int k = 0; k < TRANSIT_HYBRID_CLASSES; k++)
        jb_printf(b,
                  "\"%s\": {\"resident_bytes\": %" PRIu64 ", \"host_bytes\": %" PRIu64 ", \"streamed_bytes\": %" PRIu64
                  "}, ",
                  classes[k], n->hybrid_resident_by_reuse[k], n->hybrid_host_by_reuse[k], n->hybrid_streamed_by_reuse[k]);
    jb_trim_comma(b);
    jb_printf(b,
              "}, \"mover\": {\"planned_streamed_bytes\": %" PRIu64 ", \"planned_staged_peak_bytes\": %" PRIu64
              ", \"phases\": %" PRIu64 ", \"in_ranges\": %" PRIu64 ", \"in_bytes\": %" PRIu64 ", \"out_ranges\": %" PRIu64
              ", \"out_bytes\": %" PRIu64 ", \"waits\": %" PRIu64 ", \"late\": %" PRIu64 ", \"dropped\": %" PRIu64 "}, ",
              n->planned_streamed_bytes, n->planned_staged_peak, n->mover_phases, n->stream_in_ranges, n->stream_in_bytes,
              n->stream_out_ranges, n->stream_out_bytes, n->mover_waits, n->mover_late, n->mover_dropped);
    render_guard(b, p);
}

static void render_policies(jbuf *b, const transit_policy_snap *p, const transit_recorder_snap *r)
{
    uint64_t limit = transit_g.cfg.mem_limit;
    const transit_policy_counters *n = &p->n;
    jb_printf(b,
              "\"prefetch\": {\"calls\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"errors\": %" PRIu64 ", \"ranges\": %" PRIu64
              ", \"range_bytes\": %" PRIu64 ", \"ranges_dropped\": %" PRIu64 ", \"unattributed_bytes\": %" PRIu64
              ", \"profiled_iterations\": %" PRIu64 ", \"reprofiles\": %" PRIu64 ", \"refinements\": %" PRIu64
              ", \"replaying\": %s}, ",
              n->prefetch_calls, n->prefetch_bytes, n->prefetch_errors, n->ranges_count, n->ranges_bytes,
              n->ranges_dropped, n->unattributed_bytes, r->n.profiled_iterations, r->n.reprofiles, n->refinements,
              yes(p->replaying));
    jb_printf(b,
              "\"advise\": {\"calls\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"errors\": %" PRIu64
              ", \"applied\": %s, \"fill\": {\"state\": \"%s\", \"target_bytes\": %" PRIu64 ", \"ranges\": %" PRIu64
              ", \"bytes\": %" PRIu64 ", \"from_bytes\": %" PRIu64 ", \"reached_bytes\": %" PRIu64 "}}, ",
              n->advise_calls, n->advise_bytes, n->advise_errors, yes(p->advise_applied), p->fill_state,
              limit ? TRANSIT_FILL_TARGET(limit) : 0, n->fill_ranges, n->fill_bytes, n->fill_from, n->fill_reached);
    render_hybrid(b, p);
    jb_printf(b,
              "\"evictions\": {\"count\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"errors\": %" PRIu64
              ", \"target_bytes\": %" PRIu64 ", \"bound_target_bytes\": %" PRIu64 ", \"bound_bytes\": %" PRIu64
              ", \"at_launch\": %s, \"at_launch_bytes\": %" PRIu64 ", \"target_correction_bytes\": %" PRIu64
              ", \"cold_bytes\": %" PRIu64 ", \"untracked_bytes\": %" PRIu64 ", \"sweeps\": %" PRIu64
              ", \"sweep_ranges\": %" PRIu64 ", \"sweep_bytes\": %" PRIu64 ", \"clock_rewinds\": %" PRIu64 "}, ",
              n->evict_count, n->evict_bytes, n->evict_errors, limit ? TRANSIT_EVICT_TARGET(limit) : 0,
              limit ? TRANSIT_BOUND_TARGET(limit) : 0, n->bound_evict_bytes, yes(p->planning), n->launch_evict_bytes,
              n->target_correction, n->cold_bytes, n->untracked_bytes, n->sweeps, n->sweep_ranges, n->sweep_bytes,
              n->clock_rewinds);
    jb_printf(b, "\"capture_skips\": %" PRIu64 ", ", n->capture_skips);
}

static void render_iterations(jbuf *b)
{
    transit_iteration_snap it;
    unsigned warmup = transit_g.cfg.warmup_iters;
    transit_iteration_summary(warmup, &it);
    jb_printf(b,
              "\"iterations\": {\"count\": %" PRIu64 ", \"method\": \"%s\", \"warmup\": %u, \"by_method\": {\"api\": %" PRIu64
              ", \"python-hook\": %" PRIu64 ", \"kernel-period\": %" PRIu64 "}, ",
              it.count, it.method, warmup, it.by_method[TRANSIT_ITER_API], it.by_method[TRANSIT_ITER_PYHOOK],
              it.by_method[TRANSIT_ITER_KERNEL_PERIOD]);
    if (it.steps_measured)
        jb_printf(b, "\"steps_measured\": %zu, \"step_time_mean_s\": %.6f, \"step_time_p50_s\": %.6f}, ",
                  it.steps_measured, it.step_mean_s, it.step_p50_s);
    else
        jb_printf(b, "\"steps_measured\": 0, \"step_time_mean_s\": null, \"step_time_p50_s\": null}, ");
}

static void render_recorder(jbuf *b, const transit_recorder_snap *r)
{
    static const char *const names[] = {"off", "degraded", "cupti"};
    const transit_recorder_counters *n = &r->n;
    jb_printf(b, "\"recorder\": {\"state\": \"%s\", \"reason\": ", names[r->state]);
    if (!r->started)
        jb_str(b, "not started: no managed allocation yet (the recorder starts at the first one)");
    else
        jb_str(b, r->reason[0] ? r->reason : NULL);
    jb_printf(b,
              ", \"kernels\": %" PRIu64 ", \"kernel_records\": %" PRIu64 ", \"api_records\": %" PRIu64
              ", \"dropped_records\": %" PRIu64 ", \"buffers_refused\": %" PRIu64 ", \"overhead_s\": %.6f"
              ", \"records_s\": %.6f, \"kernels_profiling\": %" PRIu64 ", \"overhead_profiling_s\": %.6f"
              ", \"profiling\": %s, \"refining\": %s, \"windows_without_kernel_times\": %" PRIu64
              ", \"unified_memory_counters\": %s, \"unified_memory_counters_off_at_iteration\": %" PRIu64
              ", \"launch_callbacks_off_at_iteration\": %" PRIu64 ", \"launch_callbacks_back\": %" PRIu64
              ", \"cupti_detached\": %s, \"cupti_detached_at_iteration\": %" PRIu64 ", \"cupti_detaches\": %" PRIu64
              ", \"cupti_reattaches\": %" PRIu64 ", \"unified_memory_silent_since_reattach\": %s",
              n->launches, n->kernel_records, n->api_records, n->dropped, n->buffers_refused,
              (double)n->overhead_ns * 1e-9, (double)n->records_ns * 1e-9, n->launches_profiling,
              (double)n->overhead_profiling_ns * 1e-9, yes(r->profiling), yes(r->refining), n->untimed_windows,
              yes(r->unified_memory), r->um_off_at, r->launches_off_at, n->launch_callbacks_back, yes(r->detached),
              r->detached_at, n->cupti_detaches, n->cupti_reattaches, yes(r->um_silent));
    jb_printf(b,
              ", \"correlation\": {\"external_ids\": \"%s\", \"callback\": %" PRIu64 ", \"external\": %" PRIu64
              ", \"cross_checked\": %" PRIu64 ", \"disagree\": %" PRIu64 ", \"none\": %" PRIu64
              ", \"runtime_callbacks\": %" PRIu64 ", \"runtime_without_driver\": %" PRIu64 "}",
              !r->external_ids                        ? "off"
              : transit_g.cfg.external_correlation    ? "on: TRANSIT_EXTERNAL_CORRELATION"
                                                      : "on: callback ids missed",
              n->corr_callback, n->corr_external, n->corr_cross_checked, n->corr_disagree, n->corr_none,
              n->runtime_callbacks, n->runtime_without_driver);
    jb_printf(b, ", \"period\": {\"length\": %u, \"iterations\": %" PRIu64 ", \"changes\": %" PRIu64 "}}, ",
              r->period_length, r->period_iterations, r->period_changes);
}

static void render_timeline(jbuf *b)
{
    uint64_t n = transit_timeline_count();
    jb_printf(b, "\"timeline\": [");
    for (uint64_t i = n > TIMELINE_ENTRIES ? n - TIMELINE_ENTRIES : 0; i < n; i++) {
        const transit_timeline_entry *e = transit_timeline_entry_at(i);
        jb_printf(b,
                  "{\"t\": %.3f, \"iteration\": %" PRIu64 ", \"resident_bytes\": %" PRIu64 ", \"htod_bytes\": %" PRIu64
                  ", \"dtoh_bytes\": %" PRIu64 ", \"gpu_page_faults\": %" PRIu64 ", \"evicted_bytes\": %" PRIu64
                  ", \"device_bound_peak_bytes\": ",
                  e->t, e->iteration, e->resident, e->htod, e->dtoh, e->faults, e->evicted);
        if (e->bound_peak == UINT64_MAX)
            jb_printf(b, "null}, ");
        else
            jb_printf(b, "%" PRIu64 "}, ", e->bound_peak);
    }
    jb_trim_comma(b);
    jb_printf(b, "], ");
}

void transit_stats_render(jbuf *b, const char *exit_reason)
{
    transit_recorder_snap r;
    transit_policy_snap p;
    transit_recorder_snapshot(&r);
    transit_policy_snapshot(&p);
    double now = transit_now();
    jb_printf(b, "{\"schema\": \"transit.rank/1\", \"version\": \"%s\", \"partial\": %s, ", TRANSIT_VERSION,
              yes(!exit_reason));
    transit_state_identity_json(b);
    transit_state_config_json(b);
    jb_printf(b, "\"cuda_active\": %s, \"cuda_error\": ", yes(transit_g.cuda_active));
    jb_str(b, transit_g.cuda_error[0] ? transit_g.cuda_error : NULL);
    jb_printf(b, ", \"time\": {\"start_unix\": %.3f, \"written_unix\": %.3f, \"end_unix\": ", transit_g.start_unix, now);
    if (exit_reason)
        jb_printf(b, "%.3f", now);
    else
        jb_printf(b, "null");
    jb_printf(b, ", \"exit_reason\": ");
    jb_str(b, exit_reason);
    jb_printf(b, "}, ");
    render_allocations(b);
    render_memory(b, &p);
    render_migrations(b, &r);
    render_policies(b, &p, &r);
    render_iterations(b);
    render_recorder(b, &r);
    render_timeline(b);
    jb_printf(b, "\"warnings\": [");
    for (int i = 0; i < transit_warning_count(); i++) {
        jb_str(b, transit_warning(i));
        jb_printf(b, ", ");
    }
    jb_trim_comma(b);
    jb_printf(b, "]}\n");
}
