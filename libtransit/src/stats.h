/* stats.h - the per-process statistics file (schema "transit.rank/1"). */
#ifndef TRANSIT_STATS_H
#define TRANSIT_STATS_H

#include "json.h"

#include <stddef.h>

/* Registers the exit hook and the SIGTERM/SIGINT handlers (at activation). */
void transit_stats_install(void);
/* The "identity" and "config" objects, each followed by ", " (the profile carries them too). */
void transit_stats_render_identity(jbuf *b);
void transit_stats_render_config(jbuf *b);
/* Renders the whole document into b. */
void transit_stats_render(jbuf *b, const char *exit_reason);
/* path gets $TRANSIT_OUT/rank<R>.<host>.<pid><suffix> (TRANSIT_OUT set), its directory created;
 * -1, logged, when that fails. */
int transit_out_path(char *path, size_t n, const char *suffix);
/* Writes $TRANSIT_OUT/rank<R>.<host>.<pid>.json atomically (temp file + rename). */
void transit_stats_write(const char *exit_reason);

#endif
