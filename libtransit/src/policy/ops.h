/* ops.h - a placement policy as the engine sees it: what it is (flags) and the events it reacts
 * to (NULL: nothing to do). The engine (engine.c) picks the active policy's table at load from
 * the configuration, and only it and config.c ask which policy is active; every other file acts
 * through the table. A policy calls the services below it (policy_int.h: the profile store, the
 * chunk estimate, TRANSIT's own migrations, limit mode, in-place reading, the fill), never
 * another policy. Adding one: a file defining its table, its row in engine.c's list, and its
 * pure decisions in model/decide.c (docs/design.md, "Adding a policy"). */
#ifndef TRANSIT_POLICY_OPS_H
#define TRANSIT_POLICY_OPS_H

#include "actions.h"
#include "events.h"
#include "profile.h"

#include <stdbool.h>
#include <stdint.h>

struct transit_policy_snap; /* policy.h */

typedef struct transit_policy_ops {
    bool uses_profile;    /* the profile store collects for it (limit mode's does for every policy) */
    bool replays_profile; /* the profile's ranges are prefetched at their launches */
    bool in_place;        /* once applied, host data is read in place (SetAccessedBy): no planning */

    /* A managed allocation was made (after limit mode counted it). */
    void (*on_alloc)(uint64_t ptr, uint64_t size, int device);
    /* Whether the launch callbacks are still needed (the demand word). */
    bool (*needs_launches)(void);
    /* At a launch: whether it acts (no driver call), then, outside a capture, in the device's
     * context, after limit mode's room and prefetch's replay, what it does. */
    bool (*launch_due)(const transit_launch *l);
    void (*launch)(const transit_driver_api *drv, const transit_launch *l, CUdevice dev);
    /* The tick: before it enters the device's context (page-table readings); whether it has work
     * (which makes the tick enter the context); over the measured bound while the hold of the
     * device lasts, `excess` bytes sent to the host its own way instead of by recency (false: none
     * sent); and at the tick's end, in the context. `due` is tick_due as read before this tick's
     * evictions. */
    void (*before_tick)(void);
    bool (*tick_due)(void);
    bool (*demote)(const transit_driver_api *drv, CUstream stream, uint64_t excess);
    void (*tick)(const transit_driver_api *drv, CUdevice dev, bool due);
    /* Whether advise's fill rules the device now (fill.c). */
    bool (*fill_rules)(void);
    /* At each iteration mark, after limit mode's correction and the fill's start. */
    void (*iteration_mark)(void);
    /* A full profiling window ended: its profile's summary (profile.h). */
    transit_profile_planner window_end;
    /* Its own thread's step (lifecycle.c starts the thread in limit mode, TRANSIT_HYBRID_MOVER). */
    void (*move_step)(void);
    /* The process exits: its threads stop waiting. */
    void (*stop)(void);
    void (*after_fork)(void);
    /* Its part of the stats (transit_policy_snapshot), without lock or allocation. */
    void (*snapshot)(struct transit_policy_snap *s);
} transit_policy_ops;

/* One table per policy file. */
extern const transit_policy_ops transit_policy_base_ops;     /* base.c */
extern const transit_policy_ops transit_policy_prefetch_ops; /* prefetch.c */
extern const transit_policy_ops transit_policy_advise_ops;   /* advise.c */
extern const transit_policy_ops transit_policy_hybrid_ops;   /* hybrid.c */

#endif
