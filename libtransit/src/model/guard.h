/* guard.h - hybrid's guard: after warm-up hybrid measures a few steady iterations with advise's
 * placement and a few with its own, in the same run, and keeps the faster for the rest of it
 * (policy/hybrid_guard.c runs the blocks; docs/design-notes.md, "Hybrid against advise, and the guard").
 * The decision is a pure function of the recorded step times. */
#ifndef TRANSIT_GUARD_H
#define TRANSIT_GUARD_H

#include "internal.h"

#include <stddef.h>

/* Steps each placement is measured over: a median of 3 outvotes one disturbed step. */
#define TRANSIT_GUARD_STEPS 3
/* At most this many samples are read per placement (more are ignored). */
#define TRANSIT_GUARD_MAX_STEPS 16
/* Advise is kept only when its median step is more than this share under hybrid's: within it the
 * two are tied (steps of one placement spread by about 1%), and hybrid, in force when the guard
 * decides, stays without moving the placement again. */
#define TRANSIT_GUARD_TIE 0.02

typedef enum {
    TRANSIT_GUARD_UNDECIDED, /* fewer than TRANSIT_GUARD_STEPS usable samples of either placement */
    TRANSIT_GUARD_HYBRID,
    TRANSIT_GUARD_ADVISE,
} transit_guard_kept;

typedef struct transit_guard_verdict {
    transit_guard_kept kept;
    double hybrid_step_s, advise_step_s; /* medians of the usable samples; 0 when there are none */
    size_t hybrid_steps, advise_steps;   /* usable samples: finite and positive */
} transit_guard_verdict;

/* The verdict from the step times (seconds) of hybrid's and advise's blocks; samples that are not
 * finite and positive (a step time lost) are left out. */
TRANSIT_INTERNAL transit_guard_verdict transit_guard_decide(const double *hybrid_s, size_t nhybrid,
                                                            const double *advise_s, size_t nadvise);

#endif
