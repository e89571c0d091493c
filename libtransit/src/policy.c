/* policy.c - the placement policies, acting at kernel launches (recorder.c calls in):
 *   base     - nothing: the driver's reactive faults and evictions;
 *   prefetch - the profiling window's HtoD migrations, attributed to launch ordinals
 *              (attrib.c) and merged (ranges.c), are prefetched to the device before each
 *              later launch of that ordinal, on the launch's stream, widened to whole 2 MiB
 *              chunks (the driver brings in more than its records name, chunks.h);
 *   advise   - at the middle of the first iteration after warm-up (by kernel count), every
 *              managed allocation, and every later one, gets SetAccessedBy(device): data
 *              resident on the host is then read over the interconnect instead of migrated.
 * In limit mode every policy also evicts: TRANSIT's estimate of device-resident bytes (2 MiB
 * chunks, chunks.c) is kept at or under L by prefetching the least recently migrated chunks to
 * the host. Two ways, one after the other:
 *   - from the first launch on, until the profile is built (warm-up, re-profiling): HtoD records
 *     and GPU faults add, DtoH records and frees remove; the tick thread evicts, every tick
 *     the estimate is over L, on TRANSIT's own non-blocking stream. This runs in the GPU's time,
 *     behind it: the records arrive late, and a fused optimizer step migrates gigabytes between
 *     two ticks.
 *   - once the profile is built (all policies profile in limit mode; advise until it applies),
 *     in the launches' order: at a launch with profiled chunks, those resident become the most
 *     recent, and the least recent others are evicted on the launch's stream, before the kernel,
 *     until the estimate with the launch's chunks added is at EVICT_TARGET; then they count
 *     resident. The CPU runs ahead of the GPU, but each stream runs its work in the order it was
 *     queued, so the device follows the estimate as kernel after kernel reaches it, bursts
 *     included. DtoH records are then the evictions already counted; an HtoD record adds only
 *     the chunks the estimate lacks, as the next victims (transit_policy_htod); short-lived
 *     one-iteration windows refine the profile; each iteration's measured bound peak corrects
 *     the target (correct_target).
 * The record-driven estimate alone lets the device drift gigabytes over L within an iteration
 * (on an H200 the measured bound rose ~10 GiB per iteration), so every tick also measures, once
 * the managed total passed L/2 (HOST_CHECK_FROM; far under L nothing is measured, and until it
 * passes L - L/16 the migration records are off after warm-up, recorder.h):
 * managed bytes minus host-resident ones is a bound on what the device holds (untouched pages
 * count as device). Host-resident bytes come from the process's
 * RSS (one counter, cheap) minus its non-managed part, which every HOST_CHECK_PERIOD_S (longer
 * when smaps is slow to read) is re-measured against the Rss of the /dev/nvidia-uvm mappings in
 * smaps (host_residency.c). When the bound is over EVICT_TARGET, the estimate's LRU chunks are
 * evicted until the bound would be at BOUND_TARGET, once the evictions asked for earlier are done
 * (until then the bound cannot show them). Before a managed allocation the allocating thread does
 * the same with the allocation counted in, and waits for it (transit_policy_before_alloc). When
 * the smaps reading finds the bound near L and over the estimate by more than HOST_CHECK_SLACK,
 * the chunks the estimate lost are found by a sweep:
 * every chunk the estimate places on the host goes there again (a no-op for pages already
 * there), in address order, SWEEP_PASS_S per tick, on a stream of its own, the next pass once the
 * stream ran the last (a whole sweep at once held the thread for seconds, the device went over L
 * meanwhile, and then far under it). While planning the launches' correction makes up for what the
 * estimate misses; once it is at its cap and a reading still finds the bound over BOUND_TARGET and
 * the estimate by HOST_CHECK_SLACK, one sweep per iteration runs while planning too (on the
 * single-GPU H200 machine the estimate sat at its floor, 496 MiB, while the device held 1.5-1.75
 * GiB); over L, as many sweeps as it takes, and the bound's evictions down to EVICT_TARGET. The
 * sweep runs on TRANSIT's stream, not in the launches' order: a chunk whose eviction a launch
 * queued can go before the kernels ahead of that launch ran, and fault back (not measured).
 * Advise, once applied, holds still: host data is read in place, nothing migrates. After a whole
 * iteration without an eviction or a sweep, the fill begins: at each smaps reading the device is
 * filled towards FILL_TARGET with chunks the estimate places on the host (some are on the device
 * already: the next reading shows what moved), instead of staying at BOUND_TARGET, a margin for
 * faults that no longer come (on an H200 at L = 25.5 GiB it left 1.4 GiB of L unused). Once a
 * reading is near FILL_TARGET the device is full and fills stop. Meanwhile only the smaps
 * readings decide; the first eviction (a reading over L) once the device is full or a fill
 * brought data ends the fill for good and the margins above apply again.
 *
 * Without migration records (the recorder degraded by another CUPTI subscriber, or off) nothing
 * gives recency: limit mode keeps L by the measured bound alone (no planning, no sweep, no fill),
 * and the evictions go round the managed memory in address order (rewind_clock).
 *
 * Never on a capturing stream; TRANSIT's own CUDA calls run in relaxed capture mode; nothing at a
 * launch synchronizes (the fill, on the tick thread, and an allocating thread that made room wait
 * for their own streams). */
#include "policy.h"
#include "alloc_table.h"
#include "attrib.h"
#include "chunks.h"
#include "cuda_api.h"
#include "decide.h"
#include "host_residency.h"
#include "internal.h"
#include "iteration.h"
#include "profile.h"
#include "ranges.h"
#include "recorder.h"
#include "state.h"
#include "ticklog.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The estimate is evicted from L down to EVICT_TARGET, so not at every tick; the measured bound
 * from EVICT_TARGET down to BOUND_TARGET: data keeps faulting in during the tick and while the
 * evictions run, and the bound is what must not pass L. */
#define EVICT_TARGET TRANSIT_EVICT_TARGET
#define BOUND_TARGET TRANSIT_BOUND_TARGET
#define EVICT_BATCH 64                      /* victim ranges picked per hold of the chunks lock */
#define SWEEP_PASS_S 0.02                   /* a tick's part of a sweep: the thread also measures, flushes */
#define PREFETCH_BATCH 64                   /* ranges copied per hold of the profile lock */
#define REFINE_GROWTH_DIV 32                /* a refinement that grew the profile less: the last */
#define FAULT_POPULATE_BYTES (64u << 10)    /* what a GPU fault on untouched memory makes resident */
#define DEFAULT_DEVICE_BYTES (256ull << 30) /* chunk capacity when the device size is unknown */
#define CLIP_PIECES 16                      /* allocation-bounded pieces fetched per transit_alloc_clip call */
/* The measured bound over the estimate before a sweep (untouched pages count in the bound). */
#define HOST_CHECK_SLACK(limit) TRANSIT_MIN(1ull << 30, (limit) / 8)
#define HOST_CHECK_PERIOD_S 0.25            /* smaps costs the kernel a walk of every mapping: not more often */
#define HOST_CHECK_DUTY_DIV 10              /* ...nor for more than 1/10 of the tick thread's time */
#define HOST_CHECK_FROM(limit) ((limit) / 2) /* ...nor while the managed total stays under it */
#define FILL_TARGET TRANSIT_FILL_TARGET

static struct {
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
    uint64_t clock_rewinds; /* without records: turns of the eviction clock (rewind_clock) */
} pc = {.bound_peak_since = UINT64_MAX};

/* The profile (prefetch policy, and limit mode): while a window collects, attrib feeds `fresh`;
 * at its end, `fresh` is finalized and becomes `ranges`, which launches replay. A refinement
 * window (limit mode, while planning) goes on replaying, and what it collects is added to what
 * the profile already knew. */
static pthread_mutex_t prof_lock = PTHREAD_MUTEX_INITIALIZER;
static transit_ranges *ranges, *fresh;
static transit_attrib *attrib;
static int collecting, replay, refining;

/* Limit mode's residency estimate. */
static pthread_mutex_t chunks_lock = PTHREAD_MUTEX_INITIALIZER;
static transit_chunks *chunks;

static int advise_applied;
/* Advise's fill (see the top of this file): waiting until advise applied and an iteration passed
 * without an eviction or sweep; filling until a reading is within FILL_STEP_MIN of FILL_TARGET;
 * full (no more fills: data the application itself moves to the host stays there); ended by an
 * eviction. */
enum { FILL_WAITING = TRANSIT_FILL_WAITING, FILL_FILLING = TRANSIT_FILL_FILLING, FILL_FULL = TRANSIT_FILL_FULL,
       FILL_ENDED = TRANSIT_FILL_ENDED };
static const char *const fill_state_names[] = {"waiting", "filling", "full", "ended"};
static int fill_state;
static uint64_t moves_at_mark = UINT64_MAX; /* evictions and sweep ranges at the last mark since advise applied */
static uint64_t fill_cursor;                /* where the next fill goes on (tick thread only) */
/* Tick thread only; created in the application's context. The sweep has its own stream, so that
 * the evictions the bound asks for never queue behind a sweep's thousands of ranges. */
static CUstream evict_stream, sweep_stream;
/* Allocating threads make room before a managed allocation (transit_policy_before_alloc), one at a
 * time, on a stream of their own; meanwhile the tick leaves the bound to them. */
static pthread_mutex_t alloc_room_lock = PTHREAD_MUTEX_INITIALIZER;
static CUstream alloc_stream;
static int stopping; /* the process exits: ticks and evictions stop at their next batch */
static int context_entered;   /* by the tick thread */
static int context_gave_up;   /* entering it failed: no more tries (a fork child tries anew) */
static int no_stream;         /* a stream could not be created: no more tries (likewise) */
static int sweep_due;                   /* the host check found the estimate short; until a sweep ends
                                         * (tick thread only, like the rest below) */
static int swept_since_mark;            /* a sweep began while planning since the last iteration mark
                                         * (cleared by the marking thread) */
static uint64_t sweep_cursor;           /* where the sweep goes on (tick thread only) */
static double host_check_next;         /* tick thread only */
/* RSS minus the smaps Rss of the managed mappings at the last host check: the process's
 * non-managed resident bytes (set by the tick thread, read by allocating threads too; valid once
 * rss_calibrated). */
static int64_t rss_not_managed;
static int rss_calibrated;
/* The highest bound evictions read since the tick log's last line (0: none); the line takes it. */
static uint64_t bound_peak_unlogged;

/* What a TRANSIT prefetch is for: it decides the direction and the counters. */
typedef enum { PREFETCH_REPLAY, PREFETCH_FILL, PREFETCH_EVICT, PREFETCH_SWEEP } prefetch_purpose;
/* What each purpose counts: ranges (calls), bytes. */
static uint64_t *const counted[][2] = {[PREFETCH_REPLAY] = {&pc.prefetch_calls, &pc.prefetch_bytes},
                                       [PREFETCH_FILL] = {&pc.fill_ranges, &pc.fill_bytes},
                                       [PREFETCH_EVICT] = {&pc.evict_count, &pc.evict_bytes},
                                       [PREFETCH_SWEEP] = {&pc.sweep_ranges, &pc.sweep_bytes}};
_Static_assert(sizeof counted / sizeof counted[0] == PREFETCH_SWEEP + 1, "a purpose without counters");

static void warn_once(int *flag, const char *what, const transit_driver_api *drv, CUresult r)
{
    const char *name = NULL;
    if (__atomic_exchange_n(flag, 1, __ATOMIC_RELAXED))
        return;
    if (drv->GetErrorName)
        drv->GetErrorName(r, &name);
    transit_warn("%s failed: %s (counted; further failures are not logged)", what, name ? name : "CUresult error");
}

static void raise_peaks(uint64_t resident)
{
    uint64_t live = transit_get(&transit_g.n.managed_live);
    uint64_t limit = transit_g.cfg.mem_limit;
    transit_raise_peak(&pc.resident_peak, resident);
    if (limit && resident > limit)
        transit_raise_peak(&pc.overshoot_peak, resident - limit);
    if (live > resident)
        transit_raise_peak(&pc.spilled_peak, live - resident);
}

/* The estimate follows recency only when migration records arrive. Without them (the recorder
 * degraded or off) limit mode still measures its bound and evicts by it (see rewind_clock). */
static bool estimating(void)
{
    return transit_limit_mode() && transit_recorder_sees_migrations();
}

bool transit_policy_uses_profile(void)
{
    return transit_g.cfg.policy == TRANSIT_POLICY_PREFETCH || transit_limit_mode();
}

/* Limit mode's evictions go at launches, in their order (see the top of this file). */
bool transit_policy_planning(void)
{
    return estimating() && __atomic_load_n(&replay, __ATOMIC_ACQUIRE) &&
           !(transit_g.cfg.policy == TRANSIT_POLICY_ADVISE && __atomic_load_n(&advise_applied, __ATOMIC_ACQUIRE));
}

/* Under BOUND_TARGET no reading of the estimate or the bound asks for an eviction. */
bool transit_policy_near_limit(void)
{
    return transit_limit_mode() && transit_get(&transit_g.n.managed_peak) > BOUND_TARGET(transit_g.cfg.mem_limit);
}

bool transit_policy_far_under_limit(void)
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
static uint64_t planned_capacity(void)
{
    return transit_limit_mode() ? transit_g.cfg.mem_limit : device_bytes();
}

/* CUPTI's kernel tracing instruments every kernel (its timing code runs on the GPU), and only
 * the ranges replayed or planned at launches need the times: prefetch's, and limit mode's. Until
 * the managed total passes half of their planned capacity no data is expected to migrate, and a
 * profile would be empty. */
bool transit_policy_needs_kernel_times(void)
{
    uint64_t capacity = planned_capacity();
    bool plans = transit_g.cfg.policy == TRANSIT_POLICY_PREFETCH || transit_limit_mode();
    return plans && (!capacity || transit_get(&transit_g.n.managed_peak) > capacity / 2);
}

/* Prefetch has nothing to replay (its window took no kernel times, or nothing migrated in it),
 * and the managed total stays under BOUND_TARGET of its planned capacity: its launches do
 * nothing, as base's, and the launch callbacks can go off (and CUPTI with them, far under L)
 * after the window. Past that mark they come back with a new profile (recorder.c,
 * steer_launch_callbacks). */
static bool prefetch_replays_nothing(void)
{
    uint64_t capacity = planned_capacity();
    bool ranges = __atomic_load_n(&replay, __ATOMIC_ACQUIRE) && transit_get(&pc.ranges_count);
    return !ranges && capacity && transit_get(&transit_g.n.managed_peak) <= BOUND_TARGET(capacity);
}

/* Limit mode evicts at launches only once the managed total came near L. */
bool transit_policy_needs_launches(void)
{
    const transit_config *c = &transit_g.cfg;
    return (c->policy == TRANSIT_POLICY_PREFETCH && !prefetch_replays_nothing()) ||
           (c->policy == TRANSIT_POLICY_ADVISE && !__atomic_load_n(&advise_applied, __ATOMIC_ACQUIRE)) ||
           transit_policy_near_limit();
}

/* Not while the managed total stays under BOUND_TARGET, where no eviction can come of it (the
 * launch callbacks go off then, transit_policy_needs_launches). */
bool transit_policy_plans_at_launches(void)
{
    return transit_policy_planning() && transit_policy_needs_launches();
}

uint64_t transit_policy_resident(void)
{
    uint64_t live = transit_get(&transit_g.n.managed_live);
    if (!transit_limit_mode())
        return live; /* physical mode: the driver decides; TRANSIT does not estimate */
    if (estimating())
        return transit_get(&pc.resident);
    return TRANSIT_MIN(live, transit_g.cfg.mem_limit);
}

static int fill_now(void)
{
    return __atomic_load_n(&fill_state, __ATOMIC_ACQUIRE);
}

/* While filling or full, only the smaps readings decide evictions (see the top of this file). */
static bool fill_holds(int state)
{
    return state == FILL_FILLING || state == FILL_FULL;
}

/* What limit mode decides from (decide.h). */
static transit_limit_view limit_view(bool fill_held)
{
    return (transit_limit_view){.limit = transit_g.cfg.mem_limit, .estimating = estimating(),
                                .planning = transit_policy_planning(), .fill_held = fill_held,
                                .correction = transit_get(&pc.target_correction)};
}

/* ---- limit mode: the chunk estimate (chunks_lock held) ---- */

static transit_chunks *chunks_locked(void)
{
    if (!chunks) {
        uint64_t device = device_bytes() ? device_bytes() : DEFAULT_DEVICE_BYTES;
        uint64_t bytes = TRANSIT_MAX(device, 2 * transit_g.cfg.mem_limit);
        if (!(chunks = transit_chunks_create((size_t)(bytes / TRANSIT_CHUNK_BYTES)))) {
            static int warned;
            if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
                transit_warn("limit mode: out of memory for the residency estimate; no evictions");
        }
    }
    return chunks;
}

static void chunks_changed(void)
{
    uint64_t resident = transit_chunks_resident_bytes(chunks);
    __atomic_store_n(&pc.resident, resident, __ATOMIC_RELAXED);
    if (estimating()) /* without records the estimate is only the eviction clock's */
        raise_peaks(resident);
}

/* Cold: only the chunks the estimate lacks, as the next victims (see transit_policy_htod). */
static void mark_resident(uint64_t addr, uint64_t bytes, bool cold)
{
    pthread_mutex_lock(&chunks_lock);
    if (chunks_locked()) {
        uint64_t untracked = 0;
        if (cold)
            transit_add(&pc.cold_bytes, transit_chunks_arrived_cold(chunks, addr, bytes, &untracked));
        else
            untracked = transit_chunks_migrated(chunks, addr, bytes);
        transit_add(&pc.untracked_bytes, untracked);
        chunks_changed();
    }
    pthread_mutex_unlock(&chunks_lock);
}

static void mark_gone(uint64_t addr, uint64_t bytes)
{
    pthread_mutex_lock(&chunks_lock);
    if (chunks) {
        transit_chunks_dropped(chunks, addr, bytes);
        chunks_changed();
    }
    pthread_mutex_unlock(&chunks_lock);
}

/* ---- CUDA calls made by TRANSIT ---- */

static bool capturing(const transit_driver_api *drv, CUstream stream)
{
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    /* An error (e.g. the legacy stream during another stream's global capture) counts as capturing. */
    return !drv->StreamIsCapturing || drv->StreamIsCapturing(stream, &status) != CUDA_SUCCESS ||
           status != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* Relaxed capture mode for this thread, so a capture elsewhere cannot make TRANSIT's calls
 * fail; restore_capture_mode() puts back what the application had. */
static bool relax_capture_mode(const transit_driver_api *drv, CUstreamCaptureMode *saved)
{
    *saved = CU_STREAM_CAPTURE_MODE_RELAXED;
    return drv->ThreadExchangeStreamCaptureMode && drv->ThreadExchangeStreamCaptureMode(saved) == CUDA_SUCCESS;
}

static void restore_capture_mode(const transit_driver_api *drv, bool relaxed, CUstreamCaptureMode *saved)
{
    if (relaxed)
        drv->ThreadExchangeStreamCaptureMode(saved);
}

/* Prefetches the parts of r that lie in live allocations: to the device (a prefetch policy
 * replay, advise's fill) or to the host (a limit-mode eviction or sweep), and counts the outcome.
 * False when the driver refused a part. */
static bool prefetch_range(const transit_driver_api *drv, transit_range r, CUdevice dev, prefetch_purpose why,
                           CUstream stream)
{
    static int warned_device, warned_host;
    bool to_host = why == PREFETCH_EVICT || why == PREFETCH_SWEEP;
    const CUmemLocation to = {.type = to_host ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE,
                              .id = to_host ? 0 : dev};
    transit_range piece[CLIP_PIECES];
    bool all_went = true;
    for (uint64_t at = r.addr, end = r.addr + r.bytes; at < end;) {
        size_t pieces = transit_alloc_clip(at, end - at, piece, CLIP_PIECES);
        if (!pieces)
            break;
        at = piece[pieces - 1].addr + piece[pieces - 1].bytes;
        for (size_t k = 0; k < pieces; k++) {
            CUresult e = drv->MemPrefetchAsync(piece[k].addr, piece[k].bytes, to, 0, stream);
            if (e != CUDA_SUCCESS) {
                all_went = false;
                transit_add(to_host ? &pc.evict_errors : &pc.prefetch_errors, 1);
                warn_once(to_host ? &warned_host : &warned_device,
                          to_host ? "limit mode: cuMemPrefetchAsync to the host"
                                  : "prefetch or advise's fill: cuMemPrefetchAsync to the device",
                          drv, e);
                if (why == PREFETCH_EVICT) /* still on the device: keep counting it */
                    mark_resident(piece[k].addr, piece[k].bytes, false);
                continue;
            }
            transit_add(counted[why][0], 1);
            transit_add(counted[why][1], piece[k].bytes);
            if (why == PREFETCH_FILL) /* the most recent: the last to go if the fill ends */
                mark_resident(piece[k].addr, piece[k].bytes, false);
        }
    }
    return all_went;
}

/* Limit mode, at a launch (see the top of this file): the launch's chunks, need[0..n), become the
 * most recent; the least recent others (never the launch's own) are evicted on the launch's
 * stream until the estimate with them added is at EVICT_TARGET less the measured correction;
 * then they count resident.
 * An eviction the driver refuses stops the evicting (its chunks count resident again; picking
 * more would cycle). */
static void make_room(const transit_driver_api *drv, const transit_range *need, size_t n, CUstream stream)
{
    transit_limit_view v = limit_view(false);
    uint64_t target = transit_decide_launch_target(&v);
    transit_range victims[EVICT_BATCH];
    bool refused = false;
    pthread_mutex_lock(&chunks_lock);
    if (!chunks_locked()) {
        pthread_mutex_unlock(&chunks_lock);
        return;
    }
    for (size_t v; !refused && (v = transit_chunks_make_room(chunks, need, n, target, victims, EVICT_BATCH));) {
        chunks_changed();
        pthread_mutex_unlock(&chunks_lock); /* no lock across a driver call */
        for (size_t j = 0; j < v; j++) {
            bool went = prefetch_range(drv, victims[j], 0, PREFETCH_EVICT, stream);
            refused |= !went;
            transit_add(&pc.launch_evict_bytes, went ? victims[j].bytes : 0);
        }
        pthread_mutex_lock(&chunks_lock);
    }
    for (size_t k = 0; k < n; k++)
        transit_chunks_migrated(chunks, need[k].addr, need[k].bytes);
    chunks_changed();
    pthread_mutex_unlock(&chunks_lock);
}

/* The ordinal's profiled ranges, copied out in batches (no lock is held across a driver call),
 * each widened to the chunks it touches (the driver brings in more than its records name; a
 * chunk the previous range already took is not taken twice): room is made for them (limit
 * mode), then they are prefetched (prefetch policy). */
static void replay_ordinal(const transit_driver_api *drv, const transit_launch *l, CUdevice dev)
{
    bool planned = transit_policy_plans_at_launches(), prefetching = transit_g.cfg.policy == TRANSIT_POLICY_PREFETCH;
    transit_range batch[PREFETCH_BATCH];
    uint64_t taken_to = 0;
    for (size_t done = 0;;) {
        size_t n = 0, total = 0, m = 0;
        pthread_mutex_lock(&prof_lock);
        const transit_range *r = replay ? transit_ranges_get(ranges, l->ordinal, &total) : NULL;
        if (r && done < total) {
            n = TRANSIT_MIN(total - done, (size_t)PREFETCH_BATCH);
            memcpy(batch, r + done, n * sizeof *batch);
        }
        pthread_mutex_unlock(&prof_lock);
        if (!n)
            return;
        done += n;
        for (size_t i = 0; i < n; i++) {
            uint64_t lo = TRANSIT_MAX(batch[i].addr & ~(TRANSIT_CHUNK_BYTES - 1), taken_to);
            uint64_t hi = (batch[i].addr + batch[i].bytes + TRANSIT_CHUNK_BYTES - 1) & ~(TRANSIT_CHUNK_BYTES - 1);
            if (lo < hi)
                batch[m++] = (transit_range){.addr = lo, .bytes = hi - lo};
            taken_to = TRANSIT_MAX(taken_to, hi);
        }
        if (planned)
            make_room(drv, batch, m, l->stream);
        for (size_t k = 0; prefetching && k < m; k++)
            prefetch_range(drv, batch[k], dev, PREFETCH_REPLAY, l->stream);
    }
}

/* From *cursor on, in address order, the parts of managed allocations that the estimate places
 * on the host are prefetched for `why`: to the host again (a sweep's paced part) or to the device
 * (a fill, at most `budget` bytes), until the clock passes `until` (the estimate's chunks are read
 * in batches under the lock; no lock across a driver call). True once the walk passed the last
 * allocation; the cursor then starts over. */
static bool walk_spilled(const transit_driver_api *drv, CUstream stream, prefetch_purpose why, CUdevice dev,
                         uint64_t *cursor, double until, uint64_t budget)
{
    transit_range piece[CLIP_PIECES], runs[EVICT_BATCH];
    for (;;) {
        size_t pieces = transit_alloc_clip(*cursor, UINT64_MAX - *cursor, piece, CLIP_PIECES);
        if (!pieces) {
            *cursor = 0;
            return true;
        }
        for (size_t i = 0; i < pieces; i++) {
            for (uint64_t at = piece[i].addr, end = at + piece[i].bytes; at < end;) {
                size_t k = 0;
                pthread_mutex_lock(&chunks_lock);
                if (chunks)
                    k = transit_chunks_spilled(chunks, at, end - at, runs, EVICT_BATCH, &at);
                else
                    at = end;
                pthread_mutex_unlock(&chunks_lock);
                for (size_t j = 0; j < k; j++) {
                    transit_range r = {runs[j].addr, TRANSIT_MIN(runs[j].bytes, budget)};
                    prefetch_range(drv, r, dev, why, stream);
                    if (!(budget -= r.bytes)) {
                        *cursor = r.addr + r.bytes;
                        return false;
                    }
                }
                *cursor = at;
                if (transit_now() >= until || __atomic_load_n(&stopping, __ATOMIC_ACQUIRE))
                    return false;
            }
        }
    }
}

/* The bound on device-resident managed bytes, given the host-resident ones. */
static uint64_t bound_from_host(uint64_t host)
{
    uint64_t live = transit_get(&transit_g.n.managed_live);
    return live > host ? live - host : 0;
}

/* A reading of the bound, for the stats and the launches' correction. */
static void record_bound(uint64_t bound)
{
    __atomic_store_n(&pc.device_bound, bound, __ATOMIC_RELAXED);
    transit_raise_peak(&pc.device_bound_peak, bound);
    /* UINT64_MAX (no reading since the last take) gives way to any reading. */
    uint64_t seen = __atomic_load_n(&pc.bound_peak_since, __ATOMIC_RELAXED);
    while ((seen == UINT64_MAX || bound > seen) &&
           !__atomic_compare_exchange_n(&pc.bound_peak_since, &seen, bound, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

/* The bound on device-resident managed bytes (see the top of this file) from the RSS, now;
 * UINT64_MAX before the first smaps reading or when the RSS cannot be read. */
static uint64_t read_bound(void)
{
    bool calibrated = transit_limit_mode() && __atomic_load_n(&rss_calibrated, __ATOMIC_ACQUIRE);
    int64_t rss = calibrated ? transit_process_rss() : -1;
    int64_t not_managed = __atomic_load_n(&rss_not_managed, __ATOMIC_RELAXED);
    if (rss < 0)
        return UINT64_MAX;
    return bound_from_host(rss > not_managed ? (uint64_t)(rss - not_managed) : 0);
}

/* What a bound is over BOUND_TARGET when it is over EVICT_TARGET; 0 otherwise, and while the fill
 * holds. While planning the launches evict (see bound_over): only a bound over L is taken down, to
 * EVICT_TARGET, a safety net (on an H200 at L = 25.5 GiB the first planned iteration of prefetch
 * went to 32.1 GiB, its estimate at 21.5, before the next smaps reading started a sweep; with it,
 * 25.9 GiB). Acting earlier, over L - L/64, thrashed instead (H200, L = 25.5 GiB): the first
 * planned step of base and prefetch took 29-37 s, against 8-19 s in runs of this form, and base's
 * bound went 6.0 GiB over L, against 0.3-2.7 over L in them. */
static uint64_t bound_excess(uint64_t bound, bool fill_held)
{
    transit_limit_view v = limit_view(fill_held);
    return transit_decide_bound_excess(&v, bound);
}

/* What the bound, read now, asks to evict with `coming` bytes about to be allocated counted in
 * (bound_excess); 0 when it cannot be read. */
static uint64_t excess_now(uint64_t coming, bool fill_held)
{
    uint64_t bound = read_bound();
    return bound == UINT64_MAX ? 0 : bound_excess(bound + coming, fill_held);
}

static int by_address(const void *a, const void *b)
{
    uint64_t x = ((const transit_alloc *)a)->key, y = ((const transit_alloc *)b)->key;
    return (x > y) - (x < y);
}

/* Without migration records the estimate never sees data fault back in: each chunk evicted stays
 * counted on the host. So once the bound asks for more than the estimate has left, every live
 * managed allocation counts resident again, in address order, the lowest as the next victim: the
 * evictions go round the managed memory like a clock hand, not by recency (a chunk the host holds
 * already costs a prefetch that moves nothing, and the bound, read again, asks on). False when
 * nothing is allocated (or no memory for the snapshot). */
static bool rewind_clock(void)
{
    size_t n;
    transit_alloc *all = transit_alloc_snapshot(TRANSIT_ALLOC_MANAGED, &n);
    if (!all)
        return false;
    qsort(all, n, sizeof *all, by_address);
    pthread_mutex_lock(&chunks_lock);
    if (chunks_locked()) {
        for (size_t i = 0; i < n; i++)
            transit_chunks_migrated(chunks, all[i].key, all[i].size);
        chunks_changed();
    }
    pthread_mutex_unlock(&chunks_lock);
    free(all);
    transit_add(&pc.clock_rewinds, 1);
    return true;
}

/* One tick's evictions: least recently migrated chunks of the estimate until it is at
 * EVICT_TARGET, and lower by bound_over, what the measured bound asks (bound_excess; 0 when not
 * measured, or earlier evictions still run); while advise's fill holds,
 * only by bound_over, what the smaps reading is over FILL_TARGET, and any eviction ends the fill.
 * The evictions are not paced: on an H200, evictions limited to 20 ms a tick fell behind the
 * faults and left the device 10 GiB over L for whole iterations. Nor are they split over threads:
 * the driver ran such calls one after another, no faster than one thread
 * (bench/results/evict-parallel-h200.json). Whenever the stream ran every
 * batch queued so far (after every batch, on an H200: cuMemPrefetchAsync to the host returned
 * only once the data had moved, bench/results/evict-cost-h200x2.json), the bound (with
 * `coming`, an allocation about to be made, counted in) is read again and can ask for more: the
 * GPU faults data in while the evictions run (on an H200 one of 0.86 GiB took 1.4 s while the
 * bound rose 1.6 GiB, and the next tick had to wait for it).
 * Two limited forms (against draining the estimate when evictions do not lower the bound) did
 * not do better on an H200 at L = 25.5 GiB, one run per policy and form: re-reading only while
 * readings fell, advise's warm-up 0.73 and 1.58 GiB over L (alone; beside the GPU tests); the
 * re-readings' asks capped at L/16, base 3.36 and prefetch 1.29 GiB over. This form had 0.18
 * (advise), 0.59 (base) and 0.86 (prefetch) in its first runs and 1.61 (advise, beside the GPU
 * tests) in a later one: the runs vary as much as the forms. Tried and reverted: the tick's
 * evictions and sweeps sending only the chunks that would move by /proc/self/pagemap (skipping
 * those the host held whole). Pagemap found 112.1 of the 112.3 GB that base's tick evicted off
 * the host, while the DtoH records of the whole run came to 54 GB; the sweeps skipped 40-98 GB
 * and finished 5-11 times in a run instead of 15-18; 23-26 ticks per run took over 1 s (up to 17 s;
 * base's estimate drained to 1.1 GiB), against at most 7 ticks (up to 2.8 s) in the 17 runs of
 * other forms, and side by side steps 3-4 took 62-98 s against 29-47 s (H200, L = 25.5 GiB, the
 * pagemap files in cap27-experiments). */
static void evict(const transit_driver_api *drv, CUstream stream, uint64_t bound_over, bool fill_held,
                  uint64_t coming)
{
    /* While the fill holds, or without records, only the reading counts: the estimate, whole
     * chunks, may be over L (without records it counts everything allocated since the clock's
     * last turn). */
    uint64_t target = fill_held || !estimating() ? UINT64_MAX : EVICT_TARGET(transit_g.cfg.mem_limit);
    transit_range victims[EVICT_BATCH];
    bool rewound = false;
    while (!__atomic_load_n(&stopping, __ATOMIC_ACQUIRE)) {
        size_t n = 0;
        pthread_mutex_lock(&chunks_lock);
        uint64_t resident = chunks ? transit_chunks_resident_bytes(chunks) : 0;
        uint64_t goal = TRANSIT_MIN(target, resident > bound_over ? resident - bound_over : 0), picked = 0;
        if (resident > goal) { /* so chunks exist */
            n = transit_chunks_pick_victims(chunks, goal, victims, EVICT_BATCH);
            chunks_changed();
            picked = resident - transit_chunks_resident_bytes(chunks);
        }
        pthread_mutex_unlock(&chunks_lock);
        if (!n && bound_over && !estimating() && !rewound) { /* once: nothing allocated, nothing to pick */
            rewound = true;
            if (rewind_clock())
                continue;
        }
        if (!n)
            break;
        /* The device did not hold still (only the tick thread ends a fill). Not while filling
         * before anything was filled: the RSS's bound, which let the fill begin, can read under
         * the first smaps reading (on an H200, 987 against 1,053 MiB at L = 1 GiB); this
         * eviction takes the device back under L, and the fill goes on from there. */
        if (fill_held)
            __atomic_store_n(&fill_state, transit_decide_fill_at_eviction((transit_fill_state)fill_now(), transit_get(&pc.fill_ranges)),
                             __ATOMIC_RELEASE);
        /* What went below the estimate's own target, the bound asked for. */
        uint64_t after = resident - picked;
        transit_add(&pc.bound_evict_bytes,
                    (target > after ? target - after : 0) - (target > resident ? target - resident : 0));
        /* The bound shows these only once they ran: count them off what it asked for. */
        bound_over = bound_over > picked ? bound_over - picked : 0;
        bool refused = false;
        for (size_t i = 0; i < n; i++)
            refused |= !prefetch_range(drv, victims[i], 0, PREFETCH_EVICT, stream);
        /* A refused range is counted resident again, at the LRU's tail: picking victims again
         * now would cycle through the estimate for as long as the driver refuses (for ever, when
         * it never supports the prefetch). The next tick tries again. */
        if (refused)
            return;
        if (!fill_held && (!drv->StreamQuery || drv->StreamQuery(stream) == CUDA_SUCCESS)) {
            uint64_t now = read_bound();
            if (now != UINT64_MAX) {
                record_bound(now);
                transit_raise_peak(&bound_peak_unlogged, now);
                bound_over = TRANSIT_MAX(bound_over, bound_excess(now + coming, false));
            }
        }
    }
}

/* While a sweep is due: its next SWEEP_PASS_S, once the stream ran the previous pass (queued
 * faster than the driver ran them, the passes kept the stream busy for seconds). */
static void sweep(const transit_driver_api *drv, CUstream stream)
{
    static int warned;
    CUresult e = drv->StreamQuery ? drv->StreamQuery(stream) : CUDA_SUCCESS;
    if (e == CUDA_ERROR_NOT_READY)
        return;
    if (e != CUDA_SUCCESS) { /* the stream is broken: no sweep would ever end */
        warn_once(&warned, "limit mode: cuStreamQuery on the sweep's stream; this sweep is dropped", drv, e);
        sweep_due = 0;
        return;
    }
    if (walk_spilled(drv, stream, PREFETCH_SWEEP, 0, &sweep_cursor, transit_now() + SWEEP_PASS_S, UINT64_MAX)) {
        sweep_due = 0;
        transit_add(&pc.sweeps, 1);
    }
}

/* The launches' correction (below) is at its cap. */
static bool target_correction_capped(void)
{
    return transit_get(&pc.target_correction) >= EVICT_TARGET(transit_g.cfg.mem_limit) / 2;
}

/* While planning the device still holds more than the estimate: data that kernels the profile
 * did not name for it faulted back in (on an H200, 4.5-6.7 GiB of 36 after training). So each
 * iteration's measured bound peak moves the launches' target: down by what it was over
 * BOUND_TARGET, up by what it was under, within [EVICT_TARGET / 2, EVICT_TARGET]. The first mark
 * after planning began is skipped: that iteration still flushed what the estimate did not know.
 * Without records the same correction moves the bound's targets (bound_excess): the tick, behind
 * the GPU, is all there is, and data faults back in while it evicts. */
static void correct_target(uint64_t peak)
{
    uint64_t limit = transit_g.cfg.mem_limit;
    if (__atomic_fetch_add(&pc.corrected_marks, 1, __ATOMIC_RELAXED) == 0)
        return;
    __atomic_store_n(&pc.target_correction, transit_decide_correction(transit_get(&pc.target_correction), peak, limit),
                     __ATOMIC_RELAXED);
}

/* Advise's fill begins after a whole iteration since it applied without an eviction or a sweep. */
static void start_fill_when_still(void)
{
    if (fill_now() != FILL_WAITING || !estimating() || !__atomic_load_n(&advise_applied, __ATOMIC_ACQUIRE))
        return;
    uint64_t moves = transit_get(&pc.evict_count) + transit_get(&pc.sweep_ranges);
    uint64_t at_mark = __atomic_exchange_n(&moves_at_mark, moves, __ATOMIC_RELAXED);
    __atomic_store_n(&fill_state, transit_decide_fill_at_mark(TRANSIT_FILL_WAITING, true, true, at_mark, moves),
                     __ATOMIC_RELEASE);
}

uint64_t transit_policy_evicted_bytes(void)
{
    return transit_get(&pc.evict_bytes) + transit_get(&pc.sweep_bytes);
}

uint64_t transit_policy_iteration_ended(void)
{
    uint64_t peak = __atomic_exchange_n(&pc.bound_peak_since, UINT64_MAX, __ATOMIC_RELAXED);
    __atomic_store_n(&swept_since_mark, 0, __ATOMIC_RELAXED);
    if (peak != UINT64_MAX && (transit_policy_planning() || (transit_limit_mode() && !estimating())))
        correct_target(peak);
    start_fill_when_still();
    return peak;
}

/* Every HOST_CHECK_PERIOD_S, from the tick thread: the estimate against smaps. The read walks
 * the page tables of every host-resident page (35 ms for 4 GiB of 4 KiB pages on the development
 * machine's CPU), so with tens of GiB spilled one read can outlast the period: the next check
 * then waits HOST_CHECK_DUTY_DIV times as long as the read took, leaving the thread to its records.
 * None until the managed total passed HOST_CHECK_FROM: far under L no reading could ask for
 * anything, and from there the RSS is calibrated before an allocation can take the total past L
 * (the allocating thread makes room by it, transit_policy_before_alloc).
 * Returns the bound this reading gives; UINT64_MAX when there was none. */
static uint64_t check_host_residency(bool fill_held)
{
    double now = transit_now();
    if (!transit_limit_mode() || transit_policy_far_under_limit() || now < host_check_next)
        return UINT64_MAX;
    int64_t rss_before = transit_process_rss();
    int64_t host = transit_uvm_host_rss();
    int64_t rss_after = transit_process_rss();
    host_check_next = now + TRANSIT_MAX(HOST_CHECK_PERIOD_S, (transit_now() - now) * HOST_CHECK_DUTY_DIV);
    if (host < 0)
        return UINT64_MAX;
    if (rss_before >= 0 && rss_after >= 0) {
        /* Migrations go on during the smaps walk: the RSS is taken as halfway between. */
        int64_t not_managed = (rss_before + rss_after) / 2 - host;
        if (rss_calibrated)
            transit_raise_peak(&pc.rss_drift_peak, (uint64_t)llabs(not_managed - rss_not_managed));
        __atomic_store_n(&rss_not_managed, not_managed, __ATOMIC_RELAXED);
        __atomic_store_n(&rss_calibrated, 1, __ATOMIC_RELEASE);
    }
    uint64_t bound = bound_from_host((uint64_t)host);
    record_bound(bound);
    __atomic_store_n(&pc.host_measured, (uint64_t)host, __ATOMIC_RELAXED);
    transit_add(&pc.host_checks, 1);
    /* Near L, with the estimate short: the bound-driven evictions could only take chunks the
     * estimate knows, while the ones it lost stayed on the device for good. (While planning and
     * under L, at most one sweep per iteration, as the launches' evictions change the bound faster
     * than a sweep ends, and none until the correction is at its cap, since the launches'
     * evictions flush out what the estimate lacks. Over L, always: on an H200 at L = 25.5 GiB the
     * first planned iterations of base and prefetch went to 34.1 GiB without a sweep, and to
     * 30.7-32.2 GiB with one sweep per iteration, which left the bound 1.6-2.2 GiB over L for 12 s
     * after it. Not while the fill holds: the device is near L on purpose, and what the estimate
     * lost counts in the readings the fill follows.) */
    uint64_t limit = transit_g.cfg.mem_limit;
    bool planning = transit_policy_planning();
    /* Once advise applied nothing comes back by itself: a sweep under L would only send data the
     * device reads to the host (on an H200 one took the device from 24.1 to 21.25 GiB and left
     * 2 GB of gradients and parameters there: the next step took 14.7 s, the later ones 6.7-6.9 s;
     * without it 6.3 s and 5.8-6.7 s). */
    uint64_t sweep_above = __atomic_load_n(&advise_applied, __ATOMIC_ACQUIRE) ? limit : BOUND_TARGET(limit);
    bool sweep_allowed = !planning || bound > limit ||
                         (target_correction_capped() && !__atomic_load_n(&swept_since_mark, __ATOMIC_RELAXED));
    if (estimating() && !sweep_due && sweep_allowed && !fill_held && bound > sweep_above &&
        bound > transit_get(&pc.resident) + HOST_CHECK_SLACK(limit)) {
        sweep_due = 1;
        if (planning)
            __atomic_store_n(&swept_since_mark, 1, __ATOMIC_RELAXED);
    }
    return bound;
}

static void advise_range(const transit_driver_api *drv, uint64_t ptr, uint64_t size, CUdevice dev)
{
    static int warned;
    const CUmemLocation by = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev};
    CUresult e = drv->MemAdvise(ptr, size, CU_MEM_ADVISE_SET_ACCESSED_BY, by);
    if (e != CUDA_SUCCESS) {
        transit_add(&pc.advise_errors, 1);
        warn_once(&warned, "advise: cuMemAdvise(SetAccessedBy)", drv, e);
        return;
    }
    transit_add(&pc.advise_calls, 1);
    transit_add(&pc.advise_bytes, size);
}

/* Once: every allocation in the table now, later ones in transit_policy_on_alloc. */
static void advise_all(const transit_driver_api *drv, CUdevice dev)
{
    size_t n;
    if (__atomic_exchange_n(&advise_applied, 1, __ATOMIC_ACQ_REL))
        return;
    transit_alloc *all = transit_alloc_snapshot(TRANSIT_ALLOC_MANAGED, &n); /* no lock across driver calls */
    for (size_t i = 0; i < n; i++)
        advise_range(drv, all[i].key, all[i].size, dev);
    free(all);
    if (transit_g.cfg.verbose)
        transit_log("advise: SetAccessedBy(device %d) on %" PRIu64 " allocations, %" PRIu64 " bytes", (int)dev,
                    transit_get(&pc.advise_calls), transit_get(&pc.advise_bytes));
}

static const transit_driver_api *policy_driver(void)
{
    const transit_driver_api *drv = transit_driver();
    if (!drv || !drv->MemPrefetchAsync || !drv->MemAdvise || !drv->CtxGetDevice) {
        static int warned;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            transit_warn("policy: the driver lacks cuMemPrefetchAsync_v2/cuMemAdvise_v2 (CUDA 12.2+); acting as base");
        return NULL;
    }
    return drv;
}

/* ---- called by the recorder ---- */

/* Whether the profile has ranges for this launch (most launches have none: no driver call). */
static bool has_ranges(uint32_t ordinal)
{
    size_t n = 0;
    if (!__atomic_load_n(&replay, __ATOMIC_ACQUIRE))
        return false;
    pthread_mutex_lock(&prof_lock);
    if (replay)
        transit_ranges_get(ranges, ordinal, &n);
    pthread_mutex_unlock(&prof_lock);
    return n > 0;
}

void transit_policy_launch(const transit_launch *l)
{
    const transit_config *c = &transit_g.cfg;
    uint32_t prev = transit_recorder_prev_iteration_launches();
    bool do_replay =
        (c->policy == TRANSIT_POLICY_PREFETCH || transit_policy_plans_at_launches()) && has_ranges(l->ordinal);
    bool do_advise = c->policy == TRANSIT_POLICY_ADVISE && !__atomic_load_n(&advise_applied, __ATOMIC_ACQUIRE) &&
                     transit_decide_advise_at_launch(l->iteration, c->warmup_iters, l->ordinal, prev);
    const transit_driver_api *drv;
    CUstreamCaptureMode saved;
    CUdevice dev;
    if (!(do_replay || do_advise) || !(drv = policy_driver()))
        return;
    bool relaxed = relax_capture_mode(drv, &saved);
    if (capturing(drv, l->stream)) {
        transit_add(&pc.capture_skips, 1);
    } else if (drv->CtxGetDevice(&dev) == CUDA_SUCCESS) {
        if (do_replay)
            replay_ordinal(drv, l, dev);
        if (do_advise)
            advise_all(drv, dev);
    }
    restore_capture_mode(drv, relaxed, &saved);
}

void transit_policy_profile_begin(bool refine)
{
    if (!transit_policy_uses_profile())
        return;
    pthread_mutex_lock(&prof_lock);
    refining = refine && replay;
    if (!refining) { /* a new profile: its planning corrects itself anew */
        __atomic_store_n(&replay, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&pc.target_correction, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&pc.corrected_marks, 0, __ATOMIC_RELAXED);
    }
    if (!fresh && !(fresh = transit_ranges_create(transit_g.cfg.prefetch_gap, 0)))
        transit_warn("prefetch: out of memory for the range table; acting as base");
    if (fresh && !attrib && !(attrib = transit_attrib_create(fresh, 0, 0)))
        transit_warn("prefetch: out of memory for migration attribution; acting as base");
    if (fresh)
        transit_ranges_reset(fresh);
    if (attrib) {
        transit_attrib_retarget(attrib, fresh);
        transit_attrib_flush(attrib); /* forget kernels and migrations of an earlier window */
    }
    collecting = fresh && attrib; /* the stats keep the last finished profile's totals */
    pthread_mutex_unlock(&prof_lock);
}

bool transit_policy_profile_end(uint32_t max_launches, bool timed)
{
    bool learning = false;
    if (!transit_policy_uses_profile())
        return false;
    pthread_mutex_lock(&prof_lock);
    bool built = collecting && timed; /* untimed, no migration could be placed: no profile, not an empty one */
    if (collecting) {
        collecting = 0;
        transit_attrib_flush(attrib);
    }
    if (built) {
        transit_attrib_counts n = transit_attrib_get_counts(attrib);
        __atomic_store_n(&pc.unattributed_bytes, n.unattributed_bytes, __ATOMIC_RELAXED);
        if ((refining && transit_ranges_add_all(fresh, ranges)) || transit_ranges_finalize(fresh)) {
            transit_warn(refining ? "limit mode: out of memory refining the profile; the earlier one stays"
                                  : "prefetch: out of memory merging ranges; acting as base");
        } else {
            transit_ranges *replayed = ranges;
            /* A full range table can drop old ranges: the merged total may then be smaller. */
            uint64_t before = refining ? transit_ranges_total_bytes(replayed) : 0, after = transit_ranges_total_bytes(fresh);
            learning = !refining || (after > before && after - before > before / REFINE_GROWTH_DIV);
            ranges = fresh;
            fresh = replayed; /* reset when the next window begins */
            transit_add(&pc.refinements, refining);
            __atomic_store_n(&pc.ranges_count, transit_ranges_total_count(ranges), __ATOMIC_RELAXED);
            __atomic_store_n(&pc.ranges_bytes, transit_ranges_total_bytes(ranges), __ATOMIC_RELAXED);
            __atomic_store_n(&pc.ranges_dropped, transit_ranges_dropped(ranges), __ATOMIC_RELAXED);
            __atomic_store_n(&replay, 1, __ATOMIC_RELEASE);
            if (transit_g.cfg.verbose)
                transit_log("%s: %zu ranges, %" PRIu64 " bytes over up to %u launches per iteration "
                            "(%" PRIu64 " migrations attributed, %" PRIu64 " not)",
                            refining ? "profile refined" : "profile", transit_ranges_total_count(ranges),
                            transit_ranges_total_bytes(ranges), max_launches, n.attributed, n.unattributed);
        }
    }
    pthread_mutex_unlock(&prof_lock);
    return learning;
}

void transit_policy_profile_kernel(uint64_t start_ns, uint64_t end_ns, uint32_t ordinal)
{
    if (!__atomic_load_n(&collecting, __ATOMIC_RELAXED))
        return;
    pthread_mutex_lock(&prof_lock);
    if (collecting)
        transit_attrib_kernel(attrib, start_ns, end_ns, ordinal);
    pthread_mutex_unlock(&prof_lock);
}

void transit_policy_htod(uint64_t start_ns, uint64_t addr, uint64_t bytes)
{
    if (__atomic_load_n(&collecting, __ATOMIC_RELAXED)) {
        pthread_mutex_lock(&prof_lock);
        if (collecting)
            transit_attrib_migration(attrib, start_ns, addr, bytes);
        pthread_mutex_unlock(&prof_lock);
    }
    /* While planning, the chunks the estimate lacks count resident as the next victims: either a
     * kernel the profile did not name for the chunk faulted it back in after its eviction, or the
     * record is older than an eviction already queued at a later launch (the CPU runs ahead), and
     * the extra eviction does nothing. */
    if (estimating())
        mark_resident(addr, bytes, transit_policy_planning());
}

void transit_policy_dtoh(uint64_t addr, uint64_t bytes)
{
    if (estimating() && !transit_policy_planning())
        mark_gone(addr, bytes);
}

/* A fault on memory no processor has touched populates it on the device without any HtoD
 * record; count the faulting page's neighbourhood as resident (an estimate). */
void transit_policy_gpu_fault(uint64_t addr)
{
    if (estimating() && !transit_policy_planning())
        mark_resident(addr & ~(uint64_t)(FAULT_POPULATE_BYTES - 1), FAULT_POPULATE_BYTES, false);
}

/* The tick thread makes the application's device context its own (the primary context the
 * runtime uses), once; false, with one warning, if it cannot. */
static bool enter_context(const transit_driver_api *drv, int dev)
{
    CUcontext ctx;
    CUresult e = CUDA_ERROR_NOT_SUPPORTED;
    if (context_entered)
        return true;
    if (context_gave_up)
        return false;
    if (!drv->DevicePrimaryCtxRetain || !drv->CtxSetCurrent ||
        (e = drv->DevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS || (e = drv->CtxSetCurrent(ctx)) != CUDA_SUCCESS) {
        warn_once(&context_gave_up, "policy: entering the primary context from the tick thread", drv, e);
        return false;
    }
    context_entered = 1;
    return true;
}

/* While planning the launches evict; the tick for the estimate only once it is PLAN_SLACK over
 * L, when launches with profiled chunks stopped coming (CUDA graphs, a kernel sequence changed
 * after the last re-profile, an evaluation phase), and for the bound once it is over L
 * (bound_excess). */
static bool evict_due(bool fill_held)
{
    transit_limit_view v = limit_view(fill_held);
    return transit_decide_evict_due(&v, transit_get(&pc.resident));
}

/* What the bound, read now and recorded, asks to evict (bound_excess); 0 before the first smaps
 * reading or when the RSS cannot be read. While planning only over L: evictions in the GPU's time
 * took the estimate's chunks, ahead of the GPU in the launches' order, and drained it, while the
 * device kept what the estimate did not know; the launches' evictions flush that out within an
 * iteration (every chunk the profile names is counted, then evicted in its turn), and what they
 * do not, the sweep finds (check_host_residency). */
static uint64_t bound_over(bool fill_held, uint64_t *bound_read)
{
    uint64_t bound = read_bound();
    *bound_read = bound;
    if (bound == UINT64_MAX)
        return 0;
    record_bound(bound);
    return bound_excess(bound, fill_held);
}

/* Advise's fill (see the top of this file), at a smaps reading (`measured`, UINT64_MAX if none):
 * how far the reading is over L, to come down to FILL_TARGET... */
static uint64_t fill_over(uint64_t measured)
{
    return transit_decide_fill_over(measured, transit_g.cfg.mem_limit);
}

/* ...or how much to bring to the device (0 when the device is full). */
static uint64_t fill_room(uint64_t measured)
{
    return transit_decide_fill_room(measured, transit_g.cfg.mem_limit);
}

static void fill_is_full(uint64_t measured)
{
    __atomic_store_n(&pc.fill_reached, measured, __ATOMIC_RELAXED);
    __atomic_store_n(&fill_state, FILL_FULL, __ATOMIC_RELEASE);
}

/* Waits for its prefetches (the tick thread, never a launch): the next reading shows them.
 * A whole walk that found nothing the estimate places on the host ends the filling too. */
static void fill(const transit_driver_api *drv, CUdevice dev, CUstream stream, uint64_t measured, uint64_t room)
{
    static int warned;
    uint64_t ranges_before = transit_get(&pc.fill_ranges);
    bool whole_walk = fill_cursor == 0;
    if (!ranges_before) /* the first fill: where the device set was */
        __atomic_store_n(&pc.fill_from, measured, __ATOMIC_RELAXED);
    if (walk_spilled(drv, stream, PREFETCH_FILL, dev, &fill_cursor, INFINITY, room) && whole_walk &&
        transit_get(&pc.fill_ranges) == ranges_before) {
        fill_is_full(measured);
        return;
    }
    CUresult e = drv->StreamSynchronize ? drv->StreamSynchronize(stream) : CUDA_ERROR_NOT_SUPPORTED;
    if (e != CUDA_SUCCESS) {
        warn_once(&warned, "advise: cuStreamSynchronize after a fill; no more fills", drv, e);
        __atomic_store_n(&fill_state, FILL_ENDED, __ATOMIC_RELEASE);
    }
}

static bool advise_due(void)
{
    return transit_g.cfg.policy == TRANSIT_POLICY_ADVISE && !transit_recorder_sees_launches() &&
           !__atomic_load_n(&advise_applied, __ATOMIC_ACQUIRE) && transit_iteration_count() > transit_g.cfg.warmup_iters;
}

/* One of TRANSIT's non-blocking streams, created at first use; false, with one warning for all of
 * them, when the driver cannot create it. */
static bool own_stream(const transit_driver_api *drv, CUstream *stream)
{
    CUstream created;
    if (__atomic_load_n(stream, __ATOMIC_ACQUIRE))
        return true;
    if (__atomic_load_n(&no_stream, __ATOMIC_RELAXED))
        return false;
    CUresult e = drv->StreamCreate ? drv->StreamCreate(&created, CU_STREAM_NON_BLOCKING) : CUDA_ERROR_NOT_SUPPORTED;
    if (e == CUDA_SUCCESS) {
        __atomic_store_n(stream, created, __ATOMIC_RELEASE); /* allocating threads read the tick's */
        return true;
    }
    warn_once(&no_stream, "limit mode: cuStreamCreate for evictions; no evictions", drv, e);
    return false;
}

/* From the tick thread (recorder.c), every tick: limit mode's host check and evictions; and,
 * without launch callbacks, advise right after the first iteration mark past warm-up. Both act in
 * the device's primary context (the one PyTorch uses). */
void transit_policy_tick(void)
{
    const transit_driver_api *drv;
    int dev = transit_g.id.device;
    if (__atomic_load_n(&stopping, __ATOMIC_ACQUIRE))
        return;
    transit_tick tick = {.t_s = transit_now() - transit_g.start_unix};
    uint64_t began = transit_monotonic_ns();
    /* Read once: an iteration mark on another thread may start the fill during this tick. */
    int fill_at_start = fill_now();
    bool fill_held = fill_holds(fill_at_start);
    uint64_t measured = check_host_residency(fill_held);
    /* The RSS bound is recorded every tick; while the fill holds only smaps readings decide (the
     * RSS's non-managed part drifts by hundreds of MB, more than the fill's margin). */
    uint64_t over = bound_over(fill_held, &tick.bound);
    if (fill_held)
        over = fill_over(measured);
    tick.over_asked = over;
    uint64_t room = fill_at_start == FILL_FILLING && !over ? fill_room(measured) : 0;
    if (fill_at_start == FILL_FILLING && measured != UINT64_MAX && !over && !room)
        fill_is_full(measured);
    if ((evict_due(fill_held) || over || room || sweep_due || advise_due()) && dev >= 0 && (drv = policy_driver()) &&
        enter_context(drv, dev)) {
        CUstreamCaptureMode saved;
        bool relaxed = relax_capture_mode(drv, &saved);
        /* The bound shows evictions only once they ran: while earlier ones still do, it would ask
         * for them again. (Queried in relaxed mode: a query can break another thread's global
         * capture.) */
        if (over && evict_stream && (!drv->StreamQuery || drv->StreamQuery(evict_stream) != CUDA_SUCCESS))
            over = 0;
        /* An allocating thread making room has the bound to itself meanwhile; one that just made
         * room left a new bound, so it is read again. (While the fill holds, `over` is the smaps
         * reading's, which stays.) */
        bool bound_held = over && pthread_mutex_trylock(&alloc_room_lock) == 0;
        if (!bound_held)
            over = 0;
        else if (!fill_held)
            over = excess_now(0, false);
        bool evicting = evict_due(fill_held) || over, advising = advise_due();
        if ((evicting || room) && own_stream(drv, &evict_stream))
            evict(drv, evict_stream, over, fill_held, 0);
        if (bound_held)
            pthread_mutex_unlock(&alloc_room_lock);
        if (sweep_due && own_stream(drv, &sweep_stream))
            sweep(drv, sweep_stream);
        if (room && own_stream(drv, &evict_stream))
            fill(drv, dev, evict_stream, measured, room);
        if (advising)
            advise_all(drv, dev);
        restore_capture_mode(drv, relaxed, &saved);
        tick.over = over;
    }
    if (transit_limit_mode()) {
        tick.planning = transit_policy_planning();
        tick.sweep_due = sweep_due;
        tick.fill_state = fill_state_names[fill_now()];
        tick.estimate = transit_get(&pc.resident);
        tick.smaps_bound = measured;
        tick.evicted = transit_get(&pc.evict_bytes);
        tick.swept = transit_get(&pc.sweep_bytes);
        tick.htod = transit_recorder_htod_bytes();
        tick.dtoh = transit_recorder_dtoh_bytes();
        tick.managed = transit_get(&transit_g.n.managed_live);
        uint64_t evictions_read = __atomic_exchange_n(&bound_peak_unlogged, 0, __ATOMIC_RELAXED);
        if (evictions_read && (tick.bound == UINT64_MAX || evictions_read > tick.bound))
            tick.bound = evictions_read;
        tick.work_ms = (double)(transit_monotonic_ns() - began) * 1e-6;
        transit_ticklog_write(&tick);
    }
}

/* ---- the rest of libtransit ---- */

/* Limit mode: a new allocation counts on the device at once (the bound counts untouched pages as
 * device), and PyTorch's allocator takes gigabytes at a time: on an H200 a new segment took the
 * bound 1.8 GiB over L between two ticks, and the tick's evictions then ran for 2.7 s. So, by the
 * tick's rule with the allocation counted in, the allocating thread evicts first, on a stream of
 * its own, and waits for it (an allocation is no launch): the allocation then fits. It holds
 * alloc_room_lock meanwhile, which keeps the tick's bound evictions off, and first waits for those
 * the tick queued already (the bound shows evictions only once they ran). Only in the device's
 * context (a thread may allocate before any runtime call made one current), not while advise's
 * fill holds, and while planning only over L (bound_excess). */
void transit_policy_before_alloc(uint64_t size)
{
    static int warned;
    const transit_driver_api *drv;
    CUdevice dev;
    if (__atomic_load_n(&stopping, __ATOMIC_ACQUIRE) || !excess_now(size, fill_holds(fill_now())) ||
        !(drv = policy_driver()) || drv->CtxGetDevice(&dev) != CUDA_SUCCESS || (int)dev != transit_g.id.device)
        return;
    CUstreamCaptureMode saved;
    bool relaxed = relax_capture_mode(drv, &saved);
    pthread_mutex_lock(&alloc_room_lock);
    CUstream tick_stream = __atomic_load_n(&evict_stream, __ATOMIC_ACQUIRE);
    if (tick_stream && drv->StreamSynchronize)
        drv->StreamSynchronize(tick_stream);
    /* Read again: the tick's evictions ran, another allocating thread may have made the room, an
     * iteration mark may have started the fill. */
    uint64_t over = excess_now(size, fill_holds(fill_now()));
    if (over && own_stream(drv, &alloc_stream)) {
        evict(drv, alloc_stream, over, false, size);
        CUresult e = drv->StreamSynchronize ? drv->StreamSynchronize(alloc_stream) : CUDA_ERROR_NOT_SUPPORTED;
        if (e != CUDA_SUCCESS)
            warn_once(&warned, "limit mode: cuStreamSynchronize after evicting for an allocation", drv, e);
    }
    pthread_mutex_unlock(&alloc_room_lock);
    restore_capture_mode(drv, relaxed, &saved);
}

void transit_policy_stop(void)
{
    __atomic_store_n(&stopping, 1, __ATOMIC_RELEASE);
}

void transit_policy_on_alloc(uint64_t ptr, uint64_t size, int device)
{
    const transit_driver_api *drv;
    transit_recorder_start();
    transit_profile_allocated(ptr, size);
    /* PyTorch's device tensors are first touched by the GPU, which populates them on the device
     * without any migration record: count a new allocation as resident from the start. */
    if (transit_limit_mode())
        mark_resident(ptr, size, false);
    raise_peaks(transit_policy_resident());
    if (transit_g.cfg.policy == TRANSIT_POLICY_ADVISE && __atomic_load_n(&advise_applied, __ATOMIC_ACQUIRE) &&
        (drv = policy_driver())) {
        CUstreamCaptureMode saved;
        bool relaxed = relax_capture_mode(drv, &saved);
        advise_range(drv, ptr, size, device);
        restore_capture_mode(drv, relaxed, &saved);
    }
}

void transit_policy_on_free(uint64_t ptr, uint64_t size)
{
    if (transit_limit_mode())
        mark_gone(ptr, size);
}

void transit_policy_after_fork(void)
{
    transit_iteration_reset();
    transit_recorder_after_fork();
    transit_ticklog_after_fork();
    transit_profile_after_fork();
    pthread_mutex_init(&prof_lock, NULL);
    pthread_mutex_init(&chunks_lock, NULL);
    pthread_mutex_init(&alloc_room_lock, NULL);
    transit_ranges_destroy(ranges);
    transit_ranges_destroy(fresh);
    transit_attrib_destroy(attrib);
    transit_chunks_destroy(chunks);
    ranges = fresh = NULL;
    attrib = NULL;
    chunks = NULL;
    collecting = replay = refining = advise_applied = sweep_due = swept_since_mark = 0;
    fill_state = FILL_WAITING;
    moves_at_mark = UINT64_MAX;
    fill_cursor = 0;
    evict_stream = sweep_stream = alloc_stream = NULL;
    stopping = 0;
    context_entered = context_gave_up = no_stream = 0;
    host_check_next = 0;
    sweep_cursor = 0;
    rss_calibrated = 0;
    memset(&pc, 0, sizeof pc);
    pc.bound_peak_since = UINT64_MAX;
}

void transit_policy_memory_json(jbuf *b)
{
    jb_printf(b,
              "\"resident_bytes\": %" PRIu64 ", \"resident_peak_bytes\": %" PRIu64
              ", \"overshoot_peak_bytes\": %" PRIu64 ", \"spilled_peak_bytes\": %" PRIu64
              ", \"resident_estimated\": %s, ",
              transit_policy_resident(), transit_get(&pc.resident_peak), transit_get(&pc.overshoot_peak),
              transit_get(&pc.spilled_peak), estimating() ? "true" : "false");
    /* The measured bound (limit mode): null until smaps was read. */
    if (transit_get(&pc.host_checks))
        jb_printf(b,
                  "\"host_resident_measured_bytes\": %" PRIu64 ", \"device_bound_bytes\": %" PRIu64
                  ", \"device_bound_peak_bytes\": %" PRIu64 ", \"rss_drift_peak_bytes\": %" PRIu64,
                  transit_get(&pc.host_measured), transit_get(&pc.device_bound), transit_get(&pc.device_bound_peak),
                  transit_get(&pc.rss_drift_peak));
    else
        jb_printf(b, "\"host_resident_measured_bytes\": null, \"device_bound_bytes\": null, "
                     "\"device_bound_peak_bytes\": null, \"rss_drift_peak_bytes\": null");
}

void transit_policy_stats_json(jbuf *b)
{
    const transit_config *c = &transit_g.cfg;
    transit_recorder_migrations_json(b);
    jb_printf(b,
              "\"prefetch\": {\"calls\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"errors\": %" PRIu64
              ", \"ranges\": %" PRIu64 ", \"range_bytes\": %" PRIu64 ", \"ranges_dropped\": %" PRIu64
              ", \"unattributed_bytes\": %" PRIu64 ", \"profiled_iterations\": %" PRIu64 ", \"reprofiles\": %" PRIu64
              ", \"refinements\": %" PRIu64
              ", \"replaying\": %s}, ",
              transit_get(&pc.prefetch_calls), transit_get(&pc.prefetch_bytes), transit_get(&pc.prefetch_errors),
              transit_get(&pc.ranges_count), transit_get(&pc.ranges_bytes), transit_get(&pc.ranges_dropped),
              transit_get(&pc.unattributed_bytes), transit_recorder_profiled_iterations(),
              transit_recorder_reprofiles(), transit_get(&pc.refinements),
              __atomic_load_n(&replay, __ATOMIC_RELAXED) ? "true" : "false");
    jb_printf(b,
              "\"advise\": {\"calls\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"errors\": %" PRIu64
              ", \"applied\": %s, \"fill\": {\"state\": \"%s\", \"target_bytes\": %" PRIu64
              ", \"ranges\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"from_bytes\": %" PRIu64
              ", \"reached_bytes\": %" PRIu64 "}}, ",
              transit_get(&pc.advise_calls), transit_get(&pc.advise_bytes), transit_get(&pc.advise_errors),
              __atomic_load_n(&advise_applied, __ATOMIC_RELAXED) ? "true" : "false",
              fill_state_names[__atomic_load_n(&fill_state, __ATOMIC_RELAXED)],
              c->mem_limit ? FILL_TARGET(c->mem_limit) : 0, transit_get(&pc.fill_ranges), transit_get(&pc.fill_bytes),
              transit_get(&pc.fill_from), transit_get(&pc.fill_reached));
    jb_printf(b,
              "\"evictions\": {\"count\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"errors\": %" PRIu64
              ", \"target_bytes\": %" PRIu64 ", \"bound_target_bytes\": %" PRIu64 ", \"bound_bytes\": %" PRIu64
              ", \"at_launch\": %s, \"at_launch_bytes\": %" PRIu64 ", \"target_correction_bytes\": %" PRIu64
              ", \"cold_bytes\": %" PRIu64
              ", \"untracked_bytes\": %" PRIu64 ", \"sweeps\": %" PRIu64
              ", \"sweep_ranges\": %" PRIu64 ", \"sweep_bytes\": %" PRIu64 ", \"clock_rewinds\": %" PRIu64 "}, ",
              transit_get(&pc.evict_count), transit_get(&pc.evict_bytes), transit_get(&pc.evict_errors),
              c->mem_limit ? EVICT_TARGET(c->mem_limit) : 0, c->mem_limit ? BOUND_TARGET(c->mem_limit) : 0,
              transit_get(&pc.bound_evict_bytes), transit_policy_planning() ? "true" : "false",
              transit_get(&pc.launch_evict_bytes),
              transit_get(&pc.target_correction),
              transit_get(&pc.cold_bytes), transit_get(&pc.untracked_bytes),
              transit_get(&pc.sweeps), transit_get(&pc.sweep_ranges), transit_get(&pc.sweep_bytes),
              transit_get(&pc.clock_rewinds));
    jb_printf(b, "\"capture_skips\": %" PRIu64 ", ", transit_get(&pc.capture_skips));
    transit_iteration_stats_json(b, c->warmup_iters);
    transit_recorder_state_json(b);
}
