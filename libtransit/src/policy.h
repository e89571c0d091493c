/* policy.h - what the placement policies (base, prefetch, advise) and the recorder that
 * feeds them offer the rest of libtransit. */
#ifndef TRANSIT_POLICY_H
#define TRANSIT_POLICY_H

#include "json.h"

#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>

void transit_policy_after_fork(void);
/* Limit mode, before a managed allocation of `size` bytes is made: room for it (may evict and wait). */
void transit_policy_before_alloc(uint64_t size);
/* At exit, before the tick thread is waited for: ticks, evictions and sweeps stop at their next batch. */
void transit_policy_stop(void);
void transit_policy_on_alloc(uint64_t ptr, uint64_t size, int device);
void transit_policy_on_free(uint64_t ptr, uint64_t size);
/* Bytes of managed memory believed resident on the device (limit mode's estimate). */
uint64_t transit_policy_resident(void);
/* At each iteration mark: limit mode's measured bound, the highest reading since the previous
 * mark (UINT64_MAX when it was not measured meanwhile), for the timeline; while planning, it
 * also corrects the launches' eviction target. */
uint64_t transit_policy_iteration_ended(void);
/* Bytes limit mode asked to move to the host so far (evictions and sweeps), for the timeline. */
uint64_t transit_policy_evicted_bytes(void);
/* The fields of the stats document's "memory" object that the policies know (no braces). */
void transit_policy_memory_json(jbuf *b);
/* The recorder/policy sections of the stats document, each followed by ", ". */
void transit_policy_stats_json(jbuf *b);

/* ---- Called by the recorder (recorder.c). ---- */

/* One kernel launch, seen at API entry on the launching thread, before the kernel is queued. */
typedef struct transit_launch {
    CUstream stream;    /* the launch's stream; CU_STREAM_PER_THREAD for a _ptsz launch on stream 0 */
    uint64_t iteration; /* transit_iteration_count() at the launch */
    uint32_t ordinal;   /* launches before this one in the same iteration */
} transit_launch;

void transit_policy_launch(const transit_launch *l);
/* Whether the policies use the profiling window's ranges (prefetch; every policy in limit mode):
 * a changed kernel sequence then calls for a new profile. */
bool transit_policy_uses_profile(void);
/* Limit mode, once the profile is built: evictions go at the launches (see policy.c). */
bool transit_policy_planning(void);
/* Limit mode, and the managed total has passed L - L/16 (for good: the peak counts). Until then
 * nothing is evicted, and the estimate needs no migration records (see recorder.h). */
bool transit_policy_near_limit(void);
/* Physical mode, or limit mode with the managed total never past L/2: no reading of the estimate
 * or the bound could ask for anything yet (no smaps reading is taken, the recorder may detach CUPTI). */
bool transit_policy_far_under_limit(void);
/* Whether a profile needs kernel times now (prefetch or limit mode, the managed total past half of
 * L, or of the device in physical mode): they place migrations at launch ordinals, and nothing else
 * uses them (see recorder.h). */
bool transit_policy_needs_kernel_times(void);
/* Whether the policies still act at launches: prefetch while it has ranges to replay or the
 * managed total nears its planned capacity, advise until it applied, limit mode once the managed
 * total came near L. */
bool transit_policy_needs_launches(void);
/* Limit mode plans its evictions at launches: planning, and the managed total has passed
 * L - L/16. Refinement windows open only then. */
bool transit_policy_plans_at_launches(void);
/* A new profiling window begins (the ranges are forgotten; with refine, while planning, they are
 * kept, replayed, and added to), and the window's end after its records were flushed (the
 * ranges are built; max_launches: most launches in one profiled iteration). The end says whether
 * another refinement is worth its iterations: the window built a new profile (even an empty
 * one), or its refinement still grew the profile by more than 1/REFINE_GROWTH_DIV. A window
 * without kernel times (timed false: transit_policy_needs_kernel_times() was false) builds none and
 * leaves nothing to replay. Called from the recorder's thread or an iteration-noticing thread. */
void transit_policy_profile_begin(bool refine);
bool transit_policy_profile_end(uint32_t max_launches, bool timed);
/* Activity records, in the order CUPTI delivers them (CUPTI's buffer thread). */
void transit_policy_profile_kernel(uint64_t start_ns, uint64_t end_ns, uint32_t ordinal);
void transit_policy_htod(uint64_t start_ns, uint64_t addr, uint64_t bytes);
void transit_policy_dtoh(uint64_t addr, uint64_t bytes);
void transit_policy_gpu_fault(uint64_t addr);
/* Periodically from the tick thread (recorder.c): limit mode's host check and evictions, and advise
 * when there are no launch callbacks. */
void transit_policy_tick(void);

#endif
