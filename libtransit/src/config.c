/* config.c - parsing and validation of TRANSIT_* values (shared with the SPANK plugin). */
#include "config.h"
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const policy_names[] = {"base", "prefetch", "advise"};

const char *transit_policy_name(transit_policy p)
{
    return policy_names[p];
}

/* Shown values are cut so one hostile value cannot flood the log line. */
#define SHOWN "%.64s%s"
#define SHOW(t) (t), (strlen(t) > 64 ? "..." : "")

TRANSIT_INTERNAL int transit_parse_size(const char *var, const char *text, uint64_t *out, char *err,
                                        size_t errlen)
{
    static const char allowed[] =
        "a number with an optional unit K, M, G or T (powers of 1024), e.g. 40G, 512M, 1.5T";
    const char *p = text;
    char *end = NULL;
    double value;
    double scale = 1.0;

    if (!text || !*text)
        goto bad;
    if (!isdigit((unsigned char)*p) && *p != '.')
        goto bad;
    errno = 0;
    value = strtod(p, &end);
    if (errno || end == p || !isfinite(value) || value < 0)
        goto bad;
    switch (toupper((unsigned char)*end)) {
    case 'K': scale = 1024.0; end++; break;
    case 'M': scale = 1024.0 * 1024; end++; break;
    case 'G': scale = 1024.0 * 1024 * 1024; end++; break;
    case 'T': scale = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (scale > 1.0 && (*end == 'i' || *end == 'I'))
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0')
        goto bad;
    value *= scale;
    if (value < 1.0 || value > 1.8e19) /* 0 and absurdities are mistakes, not sizes */
        goto bad;
    *out = (uint64_t)value;
    return 0;
bad:
    snprintf(err, errlen, "%s='" SHOWN "' is not a size; use %s", var, SHOW(text ? text : ""), allowed);
    return -1;
}

TRANSIT_INTERNAL int transit_parse_policy(const char *var, const char *text, transit_policy *out,
                                          char *err, size_t errlen)
{
    for (size_t i = 0; text && i < sizeof policy_names / sizeof policy_names[0]; i++) {
        if (strcmp(text, policy_names[i]) == 0) {
            *out = (transit_policy)i;
            return 0;
        }
    }
    snprintf(err, errlen, "%s='" SHOWN "' is not a policy; use base, prefetch or advise", var,
             SHOW(text ? text : ""));
    return -1;
}

TRANSIT_INTERNAL int transit_parse_bool(const char *var, const char *text, bool *out, char *err,
                                        size_t errlen)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; text && i < 4; i++) {
        if (strcasecmp(text, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(text, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    snprintf(err, errlen, "%s='" SHOWN "' is not a boolean; use 1/0, true/false, yes/no or on/off", var,
             SHOW(text ? text : ""));
    return -1;
}

TRANSIT_INTERNAL int transit_parse_uint(const char *var, const char *text, unsigned lo, unsigned hi,
                                        unsigned *out, char *err, size_t errlen)
{
    char *end = NULL;
    unsigned long v;
    if (!text || !isdigit((unsigned char)*text))
        goto bad;
    errno = 0;
    v = strtoul(text, &end, 10);
    if (errno || *end || v < lo || v > hi)
        goto bad;
    *out = (unsigned)v;
    return 0;
bad:
    snprintf(err, errlen, "%s='" SHOWN "' is not allowed; use a whole number from %u to %u", var,
             SHOW(text ? text : ""), lo, hi);
    return -1;
}

/* An unset variable keeps the default; a set one, even empty, must be valid. */
int transit_config_load(transit_config *cfg, char *err, size_t errlen)
{
    const char *v;
    memset(cfg, 0, sizeof *cfg);
    cfg->policy = TRANSIT_POLICY_BASE;
    cfg->warmup_iters = TRANSIT_DEFAULT_WARMUP_ITERS;
    cfg->prefetch_gap = TRANSIT_DEFAULT_PREFETCH_GAP;
    cfg->recorder = true;
    cfg->cupti_detach = true;
    cfg->stats_interval_s = TRANSIT_DEFAULT_STATS_INTERVAL_S;

    if ((v = getenv("TRANSIT_POLICY")) && transit_parse_policy("TRANSIT_POLICY", v, &cfg->policy, err, errlen))
        return -1;
    if ((v = getenv("TRANSIT_MEM_LIMIT")) &&
        transit_parse_size("TRANSIT_MEM_LIMIT", v, &cfg->mem_limit, err, errlen))
        return -1;
    if ((v = getenv("TRANSIT_WARMUP_ITERS")) &&
        transit_parse_uint("TRANSIT_WARMUP_ITERS", v, 1, 1000, &cfg->warmup_iters, err, errlen))
        return -1;
    if ((v = getenv("TRANSIT_PREFETCH_GAP")) &&
        transit_parse_size("TRANSIT_PREFETCH_GAP", v, &cfg->prefetch_gap, err, errlen))
        return -1;
    if ((v = getenv("TRANSIT_RECORDER")) && transit_parse_bool("TRANSIT_RECORDER", v, &cfg->recorder, err, errlen))
        return -1;
    if ((v = getenv("TRANSIT_VERBOSE")) && transit_parse_bool("TRANSIT_VERBOSE", v, &cfg->verbose, err, errlen))
        return -1;
    if ((v = getenv("TRANSIT_EXTERNAL_CORRELATION")) &&
        transit_parse_bool("TRANSIT_EXTERNAL_CORRELATION", v, &cfg->external_correlation, err, errlen))
        return -1;
    if ((v = getenv("TRANSIT_CUPTI_DETACH")) &&
        transit_parse_bool("TRANSIT_CUPTI_DETACH", v, &cfg->cupti_detach, err, errlen))
        return -1;
    if ((v = getenv("TRANSIT_TICK_LOG")) && transit_parse_bool("TRANSIT_TICK_LOG", v, &cfg->tick_log, err, errlen))
        return -1;
    if ((v = getenv("TRANSIT_PROFILE")) && transit_parse_bool("TRANSIT_PROFILE", v, &cfg->profile, err, errlen))
        return -1;
    if ((v = getenv("TRANSIT_STATS_INTERVAL"))) {
        if (transit_parse_uint("TRANSIT_STATS_INTERVAL", v, 0, TRANSIT_MAX_STATS_INTERVAL_S, &cfg->stats_interval_s, err,
                               errlen))
            return -1;
        if (cfg->stats_interval_s && cfg->stats_interval_s < TRANSIT_MIN_STATS_INTERVAL_S) {
            snprintf(err, errlen, "TRANSIT_STATS_INTERVAL='" SHOWN "' is not allowed; use 0 (at exit only) or a whole "
                     "number of seconds from %u to %u", SHOW(v), TRANSIT_MIN_STATS_INTERVAL_S, TRANSIT_MAX_STATS_INTERVAL_S);
            return -1;
        }
    }
    if ((v = getenv("TRANSIT_OUT"))) {
        if (!*v || strlen(v) >= sizeof cfg->out_dir) {
            snprintf(err, errlen, "TRANSIT_OUT='" SHOWN "' is not usable; use a directory path of 1 to %zu bytes",
                     SHOW(v), sizeof cfg->out_dir - 1);
            return -1;
        }
        strcpy(cfg->out_dir, v);
    }
    if (cfg->profile && !cfg->out_dir[0]) {
        snprintf(err, errlen, "TRANSIT_PROFILE is on but TRANSIT_OUT is not set; set TRANSIT_OUT to the "
                              "directory for the profile, or TRANSIT_PROFILE=0");
        return -1;
    }
    if (cfg->tick_log && !cfg->out_dir[0]) {
        snprintf(err, errlen, "TRANSIT_TICK_LOG is on but TRANSIT_OUT is not set; set TRANSIT_OUT to the "
                              "directory for the tick log, or TRANSIT_TICK_LOG=0");
        return -1;
    }
    return 0;
}
