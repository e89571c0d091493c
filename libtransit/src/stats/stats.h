/* stats.h - the per-process statistics file (schema "transit.rank/1"): rendered from every
 * module's snapshot (render.c), written at exit and on SIGTERM/SIGINT, and refreshed while the
 * process runs every TRANSIT_STATS_INTERVAL seconds ("partial": true). */
#ifndef TRANSIT_STATS_H
#define TRANSIT_STATS_H

#include "json.h"

/* Renders the whole document into b; exit_reason NULL: the process is still running. */
void transit_stats_render(jbuf *b, const char *exit_reason);
/* Writes $TRANSIT_OUT/rank<R>.<host>.<pid>.json atomically (temp file + rename). The final write
 * (an exit reason) is the last: a refresh never replaces it. */
void transit_stats_write(const char *exit_reason);
/* From the recorder's thread at each step: a partial write once the interval has passed. */
void transit_stats_refresh(void);

#endif
