/* ticklog.c - see ticklog.h. */
#include "ticklog.h"
#include "state.h"
#include "stats.h"

#include <inttypes.h>
#include <stdio.h>

static FILE *out;
static int gave_up;

static void put_bytes(uint64_t v, char sep)
{
    if (v == UINT64_MAX)
        fprintf(out, "%c", sep);
    else
        fprintf(out, "%" PRIu64 "%c", v, sep);
}

void transit_ticklog_write(const transit_tick *t)
{
    char path[sizeof transit_g.cfg.out_dir + 320];
    if (!transit_g.cfg.tick_log || gave_up)
        return;
    if (!out) {
        if (transit_out_path(path, sizeof path, ".ticks.csv") || !(out = fopen(path, "we"))) {
            gave_up = 1;
            transit_warn("TRANSIT_TICK_LOG: cannot write %s; no tick log", path);
            return;
        }
        setvbuf(out, NULL, _IOLBF, 0); /* whole lines, so a killed process leaves a readable file */
        fprintf(out, "t_s,planning,fill_state,sweep_due,estimate_bytes,bound_bytes,smaps_bound_bytes,"
                     "over_asked_bytes,over_bytes,evicted_bytes,swept_bytes,htod_bytes,work_ms\n");
    }
    fprintf(out, "%.3f,%d,%d,%d,", t->t_s, t->planning, t->fill_state, t->sweep_due);
    put_bytes(t->estimate, ',');
    put_bytes(t->bound, ',');
    put_bytes(t->smaps_bound, ',');
    put_bytes(t->over_asked, ',');
    put_bytes(t->over, ',');
    put_bytes(t->evicted, ',');
    put_bytes(t->swept, ',');
    put_bytes(t->htod, ',');
    fprintf(out, "%.3f\n", t->work_ms);
}

/* The parent's stream stays the parent's: the child writes its own file. */
void transit_ticklog_after_fork(void)
{
    out = NULL;
    gave_up = 0;
}
