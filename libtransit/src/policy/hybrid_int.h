/* hybrid_int.h - what the hybrid policy's files share: hybrid.c (its table and events),
 * hybrid_place.c (the placement: planned at a profile's end, applied by the tick, demoted, read),
 * hybrid_guard.c (the guard against advise's placement) and hybrid_mover.c (the look-ahead
 * mover). hybrid.c calls the other three; the guard calls the placement; no call goes back.
 *
 * Locks: the placement's and the guard's are never nested (taken one after the other); the
 * mover's is taken last and around no other. */
#ifndef TRANSIT_HYBRID_INT_H
#define TRANSIT_HYBRID_INT_H

#include "guard.h"
#include "placement.h"
#include "policy_int.h"

/* What the guard lets a new plan do. */
enum { GUARD_PLAN_APPLY, GUARD_PLAN_HOLD, GUARD_PLAN_DROP };

/* hybrid_place.c */
int hyb_reuse_class(uint32_t reuse);
void hyb_plan(const profile_summary *profile, bool apply);
bool hyb_due(void);
void hyb_set_due(void);
void hyb_mark(void);
void hyb_read_placement(void);
bool hyb_apply(const transit_driver_api *drv, CUdevice dev, CUstream stream, transit_stream_schedule *handed);
bool hyb_demote(const transit_driver_api *drv, CUstream stream, uint64_t excess);
bool hyb_copy_chunks(uint64_t **chunk, uint32_t **reuse, uint8_t **resident, size_t *n);
void hyb_take_placement(uint64_t *chunk, uint32_t *reuse, uint8_t *resident, size_t n);
void hyb_place_after_fork(void);
/* hybrid_guard.c */
int hyb_guard_on_plan(void);
bool hyb_guard_due(void);
bool hyb_guard_holds_advise(void);
bool hyb_guard_measures_advise(void);
void hyb_guard_apply_advise(const transit_driver_api *drv, CUdevice dev);
void hyb_guard_placement_applied(void);
void hyb_guard_mark(void);
void hyb_guard_read_advise(void);
void hyb_guard_after_fork(void);
const char *hyb_guard_state_name(void);
const char *hyb_guard_kept_name(void);
/* hybrid_mover.c */
bool hyb_mover_active(void);
bool hyb_mover_starts_phase(uint32_t ordinal);
void hyb_mover_launch(const transit_driver_api *drv, const transit_launch *l);
void hyb_mover_hand_over(transit_stream_schedule *s);
void hyb_mover_step(void);
void hyb_mover_wake(void);
void hyb_mover_after_fork(void);

#endif
