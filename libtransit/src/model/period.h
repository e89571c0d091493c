/* period.h - automatic iteration detection from the period of the kernel-name sequence.
 *
 * Feed one hash per kernel launch (transit_period_hash_name of the kernel's name). The
 * detector keys every launch by a signature of the last TRANSIT_PERIOD_WINDOW names and looks
 * for a signature that recurs at a steady spacing: at least TRANSIT_PERIOD_LOCK_OCCURRENCES
 * times, with all spacings after the first (which may span a longer warm-up iteration) within
 * the tolerance max(TRANSIT_PERIOD_TOL_MIN, spacing / TRANSIT_PERIOD_TOL_DIV) of each other.
 * That signature becomes the anchor: each later occurrence begins an iteration, and the
 * period P is the spacing. A signature that once recurred irregularly never becomes an
 * anchor again in the same search epoch, so a lock on repeated sub-structure (the layers of a
 * model) can happen only during the first iteration, is lost when the layers end, and is not
 * retaken.
 *
 * Such a lock must not mark iterations: a run of identical layers looks exactly like a run of
 * steps until it ends, and each mark would count an iteration the program did not make (on a
 * 12-layer model's kernels, 33 marks inside its first step). So a new lock is trusted, and
 * marks, only when something tells it from a part of a longer iteration:
 *   - it explains its cycle: the anchor first occurred less than one period after the cycle
 *     began (creation, or the loss of a trusted lock), so nothing before it is left for a longer
 *     iteration to hold (a sequence periodic from the start, or the one that follows a change);
 *   - its first spacing was longer than every later one: the anchor recurred across a longer
 *     first iteration (optimizer state, autotuning), which a run of identical layers never has;
 *   - its period spans every part (below) lost in this cycle: it is the iteration that held them.
 * Otherwise the lock is held: it returns neither BEGIN nor LOCKED. Lost while held, it was a
 * part, whose section (from the anchor's first occurrence to the end of its last iteration) the
 * third rule weighs. A held lock is trusted once a respacing makes its period span the parts, or
 * once it has lasted TRANSIT_PERIOD_HOLD_ITERATIONS iterations, more than a model has layers;
 * its first BEGIN is then the iteration that begins, not a catch-up. The step of a layered model
 * is trusted by the second or the third rule, so its marks come as soon as it is locked. What
 * the rules cannot tell apart: a layer run that begins less than one layer period after its
 * cycle does (nothing before it, or right after a change) is trusted and marked, as all locks
 * were before; a prefix followed by steps that all repeat the first exactly is held and marked
 * only after TRANSIT_PERIOD_HOLD_ITERATIONS iterations.
 *
 * Once locked, it tolerates noise: an anchor a little late or early (within tolerance) still
 * begins an iteration; a spurious early anchor is ignored; a missing anchor begins the
 * iteration P launches after the previous one, reported when the tolerance has run out, and
 * TRANSIT_PERIOD_MAX_MISSES consecutive misses lose the lock (the sequence changed), after
 * which the search resumes. When the anchor recurs twice in a row at the same new spacing,
 * the period changes to it (gradient accumulation changed). The first BEGIN of a lock taken
 * after an earlier one (held or not) and a new period are reported as TRANSIT_PERIOD_CHANGED,
 * so prefetch can re-profile.
 *
 * Memory is fixed at creation: a signature table sized by history_cap, reset whenever its
 * search epoch exceeds history_cap launches. Periods up to about history_cap / 4 launches
 * are found (four occurrences of a signature must fall in one epoch). Not thread-safe.
 *
 * Any stable 64-bit identity of a kernel works as the hash (the CUfunction handle is as good
 * as a hash of the name, and cheaper). */
#ifndef TRANSIT_PERIOD_H
#define TRANSIT_PERIOD_H

#include <stdint.h>

#include "internal.h"

#define TRANSIT_PERIOD_HISTORY_DEFAULT (1u << 18) /* launches per search epoch: 4 MiB of table,
                                                     iterations up to ~50,000 launches */
#define TRANSIT_PERIOD_WINDOW 12                  /* kernel names per signature */
#define TRANSIT_PERIOD_MIN 8                      /* shortest iteration, in launches */
#define TRANSIT_PERIOD_LOCK_OCCURRENCES 4
#define TRANSIT_PERIOD_TOL_MIN 4
#define TRANSIT_PERIOD_TOL_DIV 8
#define TRANSIT_PERIOD_MAX_MISSES 2
#define TRANSIT_PERIOD_HOLD_ITERATIONS 128        /* a held lock's limit: a layer run repeats once
                                                     per layer (Llama 3 405B: 126) */

/* Flags returned by transit_period_feed. */
#define TRANSIT_PERIOD_LOCKED 1u  /* a period is known; *ordinal is valid */
#define TRANSIT_PERIOD_BEGIN 2u   /* this launch begins an iteration (ordinal 0, or later if inferred) */
#define TRANSIT_PERIOD_CHANGED 4u /* the period is new: a lock's first BEGIN after an earlier lock, or
                                     its length changed */

typedef struct transit_period transit_period;

/* 64-bit FNV-1a of a kernel name. */
TRANSIT_INTERNAL uint64_t transit_period_hash_name(const char *name);
/* history_cap 0 means TRANSIT_PERIOD_HISTORY_DEFAULT. NULL when out of memory. */
TRANSIT_INTERNAL transit_period *transit_period_create(uint32_t history_cap);
TRANSIT_INTERNAL void transit_period_destroy(transit_period *p);
/* One kernel launch. Returns TRANSIT_PERIOD_* flags; when LOCKED, *ordinal is the launch's
 * position within its iteration (launches since the iteration began). */
TRANSIT_INTERNAL unsigned transit_period_feed(transit_period *p, uint64_t name_hash, uint32_t *ordinal);
/* The current period in launches (0 when not locked, or while the lock is held). */
TRANSIT_INTERNAL uint32_t transit_period_length(const transit_period *p);
/* Iterations begun (BEGIN flags returned) and CHANGED flags returned, since creation. */
TRANSIT_INTERNAL uint64_t transit_period_iterations(const transit_period *p);
TRANSIT_INTERNAL uint64_t transit_period_changes(const transit_period *p);

#endif
