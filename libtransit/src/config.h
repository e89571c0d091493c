/* config.h - every TRANSIT_* variable, parsed and validated in one place. */
#ifndef TRANSIT_CONFIG_H
#define TRANSIT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { TRANSIT_POLICY_BASE, TRANSIT_POLICY_PREFETCH, TRANSIT_POLICY_ADVISE } transit_policy;

typedef struct transit_config {
    transit_policy policy;      /* TRANSIT_POLICY: base|prefetch|advise (default base) */
    uint64_t mem_limit;         /* TRANSIT_MEM_LIMIT: bytes; 0 = physical mode */
    char out_dir[4096];         /* TRANSIT_OUT: stats directory; "" = no stats file */
    unsigned warmup_iters;      /* TRANSIT_WARMUP_ITERS: 1..1000 (default 2) */
    uint64_t prefetch_gap;      /* TRANSIT_PREFETCH_GAP: size (default 128K) */
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
    unsigned stats_interval_s;  /* TRANSIT_STATS_INTERVAL: seconds between refreshes of a running process's
                                 * stats file, 0 (at exit only) or 5..86400 (default 60) */
} transit_config;

#define TRANSIT_DEFAULT_WARMUP_ITERS 2u
#define TRANSIT_DEFAULT_PREFETCH_GAP (128u * 1024u)
#define TRANSIT_DEFAULT_STATS_INTERVAL_S 60u
#define TRANSIT_MIN_STATS_INTERVAL_S 5u
#define TRANSIT_MAX_STATS_INTERVAL_S 86400u

const char *transit_policy_name(transit_policy p);

/* Each parser returns 0 on success, or -1 with one line in err naming `var`, the bad value
 * and what is allowed. */
int transit_parse_size(const char *var, const char *text, uint64_t *out, char *err, size_t errlen);
int transit_parse_policy(const char *var, const char *text, transit_policy *out, char *err, size_t errlen);
int transit_parse_bool(const char *var, const char *text, bool *out, char *err, size_t errlen);
int transit_parse_uint(const char *var, const char *text, unsigned lo, unsigned hi, unsigned *out,
                       char *err, size_t errlen);

/* Reads the whole TRANSIT_* environment into cfg. */
int transit_config_load(transit_config *cfg, char *err, size_t errlen);

#endif
