/* ticklog.h - limit mode's per-tick CSV (TRANSIT_TICK_LOG=1): what the tick thread's eviction
 * control saw and did at each tick, beside the stats file as rank<R>.<host>.<pid>.ticks.csv. The
 * stats timeline has one entry per iteration; this shows how the device follows L between marks
 * (a warm-up ramp lasts seconds). Tick thread only. */
#ifndef TRANSIT_TICKLOG_H
#define TRANSIT_TICKLOG_H

#include <stdbool.h>
#include <stdint.h>

typedef struct transit_tick {
    double t_s;                 /* since activation */
    bool planning, sweep_due;   /* sweep_due: at the tick's end */
    const char *fill_state;     /* advise's fill: waiting, filling, full, ended */
    uint64_t estimate;          /* the chunk estimate of device-resident bytes, at the tick's end */
    uint64_t bound;             /* the highest RSS bound read since the last line: this tick's, and
                                 * those evictions read meanwhile; UINT64_MAX when none */
    uint64_t smaps_bound;       /* the smaps reading's bound; UINT64_MAX when none this tick */
    uint64_t over_asked, over;  /* what the tick's own reading asked to evict; what was asked of the
                                 * eviction (0 while earlier evictions ran or an allocating thread
                                 * made room; re-readings during it may have asked more) */
    uint64_t evicted, swept;    /* cumulative bytes asked to the host: evictions, sweeps */
    uint64_t htod, dtoh;        /* cumulative HtoD and DtoH bytes in migration records: what moved
                                 * (an eviction of a chunk already on the host moves nothing) */
    uint64_t managed;           /* managed bytes allocated, at the tick's end: the bound is these
                                 * less the host-resident ones, so a rise of both is allocation,
                                 * of the bound alone data faulting in */
    double work_ms;             /* the tick's policy work (monotonic clock) */
} transit_tick;

/* Appends one line (the header first); with TRANSIT_TICK_LOG off, nothing. */
void transit_ticklog_write(const transit_tick *t);
void transit_ticklog_after_fork(void);

#endif
