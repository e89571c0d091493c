/* config.h - every TRANSIT_* variable, parsed and validated in one place.
 *
 * One table in config.c lists every TRANSIT_* name any part of TRANSIT reads: libtransit's own
 * variables (with their type and bounds) and the few that only the Python tools and scripts read.
 * libtransit's loader, the SPANK plugin's checks in srun/sbatch/salloc and `transit run` all use it,
 * so a value is accepted or refused the same way everywhere. */
#ifndef TRANSIT_CONFIG_H
#define TRANSIT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { TRANSIT_POLICY_BASE, TRANSIT_POLICY_PREFETCH, TRANSIT_POLICY_ADVISE, TRANSIT_POLICY_HYBRID } transit_policy;

typedef struct transit_config {
    transit_policy policy;      /* TRANSIT_POLICY: base|prefetch|advise|hybrid (default base) */
    uint64_t mem_limit;         /* TRANSIT_MEM_LIMIT: bytes, 256M..16T; 0 = physical mode */
    char out_dir[4096];         /* TRANSIT_OUT: stats directory; "" = no stats file */
    unsigned warmup_iters;      /* TRANSIT_WARMUP_ITERS: 1..1000 (default 2) */
    uint64_t prefetch_gap;      /* TRANSIT_PREFETCH_GAP: size, 4K..1G (default 128K) */
    bool recorder;              /* TRANSIT_RECORDER: bool (default on) */
    bool verbose;               /* TRANSIT_VERBOSE: bool (default off) */
    bool external_correlation;  /* TRANSIT_EXTERNAL_CORRELATION: bool (default off: on only once launch
                                 * callbacks miss kernel records) */
    bool cupti_detach;          /* TRANSIT_CUPTI_DETACH: bool (default on): detach CUPTI while the recorder
                                 * has nothing on (recorder.c, steer_detach) */
    bool tick_log;              /* TRANSIT_TICK_LOG: bool (default off): limit mode's per-tick CSV beside
                                 * the stats file (needs TRANSIT_OUT) */
    bool profile;               /* TRANSIT_PROFILE: bool (default off): the warm-up profile beside the stats
                                 * file, rank<R>.<host>.<pid>.profile.json.gz (needs TRANSIT_OUT) */
    unsigned profile_steady;    /* TRANSIT_PROFILE_STEADY: an iteration, 1..1000000, or 0 (default: off): that
                                 * steady iteration (or the first after it with no other window open) is
                                 * observed, rank<R>.<host>.<pid>.steady.profile.json.gz (needs TRANSIT_PROFILE) */
    bool hybrid_mover;          /* TRANSIT_HYBRID_MOVER: bool (default on): hybrid's look-ahead mover in
                                 * limit mode; off: its host chunks are all read in place */
    bool hybrid_remap;          /* TRANSIT_HYBRID_REMAP: bool (default off): hybrid's placement sends each
                                 * device chunk to the host and back in bulk (design-notes.md, "Hybrid's
                                 * steady iteration") */
    bool hybrid_guard;          /* TRANSIT_HYBRID_GUARD: bool (default on): hybrid measures a few steady
                                 * iterations with advise's placement and a few with its own, and keeps
                                 * the faster (model/guard.h) */
    unsigned stats_interval_s;  /* TRANSIT_STATS_INTERVAL: seconds between refreshes of a running process's
                                 * stats file, 0 (at exit only) or 5..86400 (default 60) */
} transit_config;

#define TRANSIT_DEFAULT_WARMUP_ITERS 2u
#define TRANSIT_DEFAULT_PREFETCH_GAP (128u * 1024u)
#define TRANSIT_DEFAULT_STATS_INTERVAL_S 60u
#define TRANSIT_MIN_STATS_INTERVAL_S 5u
#define TRANSIT_MAX_STATS_INTERVAL_S 86400u

/* A value shown in a message: at most this many characters of it, control and non-ASCII bytes
 * escaped, so that one hostile value can neither flood nor split the line. */
#define TRANSIT_SHOW_CHARS 80
#define TRANSIT_SHOW_MAX (TRANSIT_SHOW_CHARS * 4 + 4) /* every byte escaped as \xNN, then "..." */

const char *transit_policy_name(transit_policy p);
/* The number of policies; transit_policy_name(0 .. count-1) names them. */
int transit_policy_count(void);

/* Writes `text` as shown in messages (see TRANSIT_SHOW_CHARS) into out (TRANSIT_SHOW_MAX bytes). */
void transit_show(const char *text, char *out, size_t outlen);

/* Each parser and check returns 0 on success, or -1 with one line in err naming the variable or
 * option, the value and what is allowed. */

/* The size grammar: a whole or decimal number, then optionally K, M, G or T (powers of 1024), then
 * optionally B or iB; rounded down to whole bytes. `var` picks the bounds: a size variable of the
 * table has its own, any other name gets 1 byte to 1024T. */
int transit_parse_size(const char *var, const char *text, uint64_t *out, char *err, size_t errlen);
int transit_parse_policy(const char *var, const char *text, transit_policy *out, char *err, size_t errlen);
int transit_parse_bool(const char *var, const char *text, bool *out, char *err, size_t errlen);
int transit_parse_uint(const char *var, const char *text, unsigned lo, unsigned hi, unsigned *out,
                       char *err, size_t errlen);

/* Checks `text` by the rules of the table's variable `var` (e.g. "TRANSIT_MEM_LIMIT"), naming it
 * `shown` in the message (e.g. "--transit-mem-limit"). */
int transit_check_value(const char *var, const char *shown, const char *text, char *err, size_t errlen);

/* A directory a user names for TRANSIT's output: absolute, no control characters, not under /proc,
 * /sys or /dev (after resolving what exists of it), and what exists of it a directory; with
 * parent_must_exist (the plugin's report directory) its parent exists. */
int transit_check_dir(const char *shown, const char *path, bool parent_must_exist, char *err, size_t errlen);

/* The table's name closest to `name` (edit distance), for "did you mean ...?". */
const char *transit_nearest_name(const char *name);

/* Checks an environment ("NAME=value" strings, NULL-terminated) as a task would get it: every
 * TRANSIT_* name must be in the table, and libtransit must accept every value and their
 * combination (as transit_config_load would in the task). */
int transit_env_check(char *const envp[], char *err, size_t errlen);

/* Reads the whole TRANSIT_* environment into cfg. */
int transit_config_load(transit_config *cfg, char *err, size_t errlen);

#endif
