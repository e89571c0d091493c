/* decide.h - the policies' rules as pure functions of their inputs: what limit mode evicts and
 * when, how its target is corrected, when advise applies and fills, what a hybrid placement keeps.
 * The live engine (policy.c) and `transit replay` (replay.c) decide with the same functions; the
 * CPU tests exercise them directly. No CUDA, no global state. */
#ifndef TRANSIT_DECIDE_H
#define TRANSIT_DECIDE_H

#include "chunks.h"
#include "internal.h"

#include <stdbool.h>
#include <stdint.h>

/* Limit mode's margins under L. The estimate is evicted down to EVICT_TARGET, so not at every
 * tick; the measured bound from EVICT_TARGET down to BOUND_TARGET (data faults in while the
 * evictions run, and the bound is what must not pass L); advise's fill goes up to FILL_TARGET
 * (room for an allocation between two readings), and not for less than FILL_STEP_MIN. */
#define TRANSIT_EVICT_TARGET(limit) ((limit) - (limit) / 32)
#define TRANSIT_BOUND_TARGET(limit) ((limit) - (limit) / 16)
#define TRANSIT_FILL_TARGET(limit) ((limit) - (limit) / 128)
#define TRANSIT_FILL_STEP_MIN (16 * TRANSIT_CHUNK_BYTES)
/* While planning, the tick evicts for the estimate only this far over L (the launches evict). */
#define TRANSIT_PLAN_SLACK(limit) ((limit) / 16)

/* What limit mode's estimate and bound evictions are working from. */
typedef struct transit_limit_view {
    uint64_t limit;      /* L */
    bool estimating;     /* migration records arrive: the estimate follows recency */
    bool planning;       /* the profile is built: evictions go at launches */
    bool fill_held;      /* advise's fill is filling or full: only smaps readings decide */
    uint64_t correction; /* the per-iteration target correction (transit_decide_correction) */
} transit_limit_view;

/* What a measured bound asks to evict: to BOUND_TARGET less the correction (without records the
 * correction moves the bound's targets), once it is over EVICT_TARGET less the correction; while
 * planning only a bound over L, down to EVICT_TARGET (the launches evict); nothing while the
 * fill holds. */
TRANSIT_INTERNAL uint64_t transit_decide_bound_excess(const transit_limit_view *v, uint64_t bound);

/* Whether the tick evicts for the estimate (`resident` bytes): only with records; while planning
 * once it is PLAN_SLACK over L, otherwise once it is over L and the fill does not hold. */
TRANSIT_INTERNAL bool transit_decide_evict_due(const transit_limit_view *v, uint64_t resident);

/* The launches' eviction target: EVICT_TARGET less the correction. */
TRANSIT_INTERNAL uint64_t transit_decide_launch_target(const transit_limit_view *v);

/* The correction after an iteration whose measured bound peaked at `peak`: down by what it was
 * over BOUND_TARGET, up by what it was under, within [0, EVICT_TARGET / 2]. */
TRANSIT_INTERNAL uint64_t transit_decide_correction(uint64_t correction, uint64_t peak, uint64_t limit);

/* Advise applies at the launch halfway (by launches) through the first iteration after warm-up. */
TRANSIT_INTERNAL bool transit_decide_advise_at_launch(uint64_t iteration, unsigned warmup_iters, uint32_t ordinal,
                                                      uint32_t prev_iteration_launches);

/* Advise's fill (policy.c): waiting for an iteration without evictions or sweeps since advise
 * applied; filling towards FILL_TARGET at each smaps reading; full; ended by an eviction. */
typedef enum { TRANSIT_FILL_WAITING, TRANSIT_FILL_FILLING, TRANSIT_FILL_FULL, TRANSIT_FILL_ENDED } transit_fill_state;

/* At an iteration mark: the fill begins when advise applied, records arrive, and the evictions
 * and sweep ranges counted (`moves`) did not change since the previous mark (`moves_at_mark`). */
TRANSIT_INTERNAL transit_fill_state transit_decide_fill_at_mark(transit_fill_state s, bool applied, bool estimating,
                                                                uint64_t moves_at_mark, uint64_t moves);
/* At an eviction while the fill holds: it ends the fill once the device was full or a fill brought
 * data (an eviction before that takes the device back under L, and the fill goes on). */
TRANSIT_INTERNAL transit_fill_state transit_decide_fill_at_eviction(transit_fill_state s, uint64_t filled_ranges);
/* How much a fill brings at a smaps reading `measured` (UINT64_MAX: none), in whole chunks; 0
 * within FILL_STEP_MIN of FILL_TARGET (the device is then full). */
TRANSIT_INTERNAL uint64_t transit_decide_fill_room(uint64_t measured, uint64_t limit);
/* What a reading over L asks a holding fill to evict, down to FILL_TARGET. */
TRANSIT_INTERNAL uint64_t transit_decide_fill_over(uint64_t measured, uint64_t limit);
/* What a reading over L asks hybrid's hold to send to the host (placement.h, transit_hybrid_demote):
 * down to BOUND_TARGET, so that the mover's staging and what the profile does not see fit under L
 * after one demotion rather than after one per reading. */
TRANSIT_INTERNAL uint64_t transit_decide_demote_bytes(uint64_t measured, uint64_t limit);

#endif
