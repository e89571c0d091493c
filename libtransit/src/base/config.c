/* config.c - parsing and validation of TRANSIT_* values (shared with the SPANK plugin and, through
 * cffi, with `transit run`). */
#include "config.h"
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* The one list of policies: the plugin's help, `transit run` and every check derive from it. */
static const char *const policy_names[] = {"base", "prefetch", "advise", "hybrid"};
#define NPOLICIES ((int)(sizeof policy_names / sizeof policy_names[0]))

#define KIB 1024ull
#define MIB (1024ull * KIB)
#define GIB (1024ull * MIB)
#define TIB (1024ull * GIB)
/* Bounds of a size that is not one of the table's variables (e.g. `transit` CLI arguments). */
#define ANY_SIZE_MIN 1ull
#define ANY_SIZE_MAX (1024ull * TIB)
#define SIZE_MAX_DECIMALS 9
#define REPORT_DIR_ROOM 64 /* what the plugin appends: "/<jobid>/step-<stepid>.json" and a temp suffix */

typedef enum { VAR_POLICY, VAR_SIZE, VAR_UINT, VAR_BOOL, VAR_DIR, VAR_TOOL } var_kind;

typedef struct transit_var {
    const char *name;
    var_kind kind;
    size_t field;      /* offset in transit_config (unused for VAR_TOOL) */
    uint64_t lo, hi;   /* VAR_SIZE, VAR_UINT: the allowed range */
    const char *zero;  /* VAR_UINT: when set, 0 is allowed too and means this */
} transit_var;

#define FIELD(f) offsetof(transit_config, f)

/* Every TRANSIT_* name. VAR_TOOL names are read by TRANSIT's Python tools and scripts, not by
 * libtransit; they are listed so that the checks do not refuse them as typos. */
static const transit_var vars[] = {
    {"TRANSIT_POLICY", VAR_POLICY, FIELD(policy), 0, 0, NULL},
    {"TRANSIT_MEM_LIMIT", VAR_SIZE, FIELD(mem_limit), 256 * MIB, 16 * TIB, NULL},
    {"TRANSIT_OUT", VAR_DIR, FIELD(out_dir), 0, 0, NULL},
    {"TRANSIT_WARMUP_ITERS", VAR_UINT, FIELD(warmup_iters), 1, 1000, NULL},
    {"TRANSIT_PREFETCH_GAP", VAR_SIZE, FIELD(prefetch_gap), 4 * KIB, 1 * GIB, NULL},
    {"TRANSIT_RECORDER", VAR_BOOL, FIELD(recorder), 0, 0, NULL},
    {"TRANSIT_VERBOSE", VAR_BOOL, FIELD(verbose), 0, 0, NULL},
    {"TRANSIT_EXTERNAL_CORRELATION", VAR_BOOL, FIELD(external_correlation), 0, 0, NULL},
    {"TRANSIT_CUPTI_DETACH", VAR_BOOL, FIELD(cupti_detach), 0, 0, NULL},
    {"TRANSIT_TICK_LOG", VAR_BOOL, FIELD(tick_log), 0, 0, NULL},
    {"TRANSIT_PROFILE", VAR_BOOL, FIELD(profile), 0, 0, NULL},
    {"TRANSIT_PROFILE_STEADY", VAR_UINT, FIELD(profile_steady), 1, 1000000, "off"},
    {"TRANSIT_HYBRID_MOVER", VAR_BOOL, FIELD(hybrid_mover), 0, 0, NULL},
    {"TRANSIT_HYBRID_REMAP", VAR_BOOL, FIELD(hybrid_remap), 0, 0, NULL},
    {"TRANSIT_HYBRID_GUARD", VAR_BOOL, FIELD(hybrid_guard), 0, 0, NULL},
    {"TRANSIT_STATS_INTERVAL", VAR_UINT, FIELD(stats_interval_s), TRANSIT_MIN_STATS_INTERVAL_S,
     TRANSIT_MAX_STATS_INTERVAL_S, "at exit only"},
    /* transit launch/submit and the sbatch templates */
    {"TRANSIT_GLOBAL_BATCH", VAR_TOOL, 0, 0, 0, NULL},
    {"TRANSIT_LOCAL_BATCH", VAR_TOOL, 0, 0, 0, NULL},
    {"TRANSIT_GRAD_ACCUM", VAR_TOOL, 0, 0, 0, NULL},
    {"TRANSIT_TP", VAR_TOOL, 0, 0, 0, NULL},
    {"TRANSIT_PP", VAR_TOOL, 0, 0, 0, NULL},
    {"TRANSIT_CANDIDATES", VAR_TOOL, 0, 0, 0, NULL},
    /* transit report */
    {"TRANSIT_REPORT_DIR", VAR_TOOL, 0, 0, 0, NULL},
    /* scripts/dev-cluster */
    {"TRANSIT_DEV_CLUSTER_PORT", VAR_TOOL, 0, 0, 0, NULL},
    {"TRANSIT_DEV_CLUSTER_DIR", VAR_TOOL, 0, 0, 0, NULL},
    {"TRANSIT_DEV_CLUSTER_GPUS", VAR_TOOL, 0, 0, 0, NULL},
    {"TRANSIT_DEV_CLUSTER_ACCOUNTING", VAR_TOOL, 0, 0, 0, NULL},
    {"TRANSIT_DEV_CLUSTER_PREFIX", VAR_TOOL, 0, 0, 0, NULL},
    /* scripts/slurm-chroot, scripts/torchtitan-versions */
    {"TRANSIT_CHROOT_DIR", VAR_TOOL, 0, 0, 0, NULL},
    {"TRANSIT_TORCHTITAN_DIR", VAR_TOOL, 0, 0, 0, NULL},
    /* bench/device_setup.sh */
    {"TRANSIT_PREBUILT", VAR_TOOL, 0, 0, 0, NULL},
    {"TRANSIT_CARRIED_LIB", VAR_TOOL, 0, 0, 0, NULL},
};
#define NVARS (sizeof vars / sizeof vars[0])

static const transit_var *find_var(const char *name)
{
    for (size_t i = 0; name && i < NVARS; i++) {
        if (strcmp(vars[i].name, name) == 0)
            return &vars[i];
    }
    return NULL;
}

TRANSIT_INTERNAL const char *transit_policy_name(transit_policy p)
{
    return policy_names[p];
}

TRANSIT_INTERNAL int transit_policy_count(void)
{
    return NPOLICIES;
}

TRANSIT_INTERNAL void transit_show(const char *text, char *out, size_t outlen)
{
    size_t n = 0, i;
    if (!outlen)
        return;
    for (i = 0; text && text[i] && i < TRANSIT_SHOW_CHARS && n + 5 < outlen; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '\n' || c == '\t' || c == '\r' || c == '\\' || c == '\'') {
            out[n++] = '\\';
            out[n++] = c == '\n' ? 'n' : c == '\t' ? 't' : c == '\r' ? 'r' : (char)c;
        } else if (c < 0x20 || c >= 0x7f) {
            n += (size_t)snprintf(out + n, outlen - n, "\\x%02x", c);
        } else {
            out[n++] = (char)c;
        }
    }
    if (text && text[i] && n + 3 < outlen) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
}

/* `bytes` in the largest of K, M, G, T that states it exactly, else in B: the bounds in messages. */
static void format_size(uint64_t bytes, char *out, size_t outlen)
{
    static const char units[] = "KMGT";
    int u = -1;
    while (u < 3 && bytes && bytes % 1024 == 0) {
        bytes /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(out, outlen, "%lluB", (unsigned long long)bytes);
    else
        snprintf(out, outlen, "%llu%c", (unsigned long long)bytes, units[u]);
}

/* The grammar alone, exactly in integers: 0 and *out set, or -1. */
static int size_grammar(const char *text, uint64_t *out)
{
    const char *p = text;
    uint64_t whole = 0, frac = 0, pow10 = 1;
    unsigned ndigits = 0, ndecimals = 0, shift = 0;

    for (; *p >= '0' && *p <= '9'; p++, ndigits++) {
        if (whole > (UINT64_MAX - 9) / 10)
            return -1;
        whole = whole * 10 + (uint64_t)(*p - '0');
    }
    if (*p == '.') {
        for (p++; *p >= '0' && *p <= '9'; p++, ndecimals++) {
            if (ndecimals == SIZE_MAX_DECIMALS)
                return -1;
            frac = frac * 10 + (uint64_t)(*p - '0');
            pow10 *= 10;
        }
        if (!ndecimals)
            return -1;
    }
    if (!ndigits && !ndecimals)
        return -1;
    switch (*p) {
    case 'K': case 'k': shift = 10; break;
    case 'M': case 'm': shift = 20; break;
    case 'G': case 'g': shift = 30; break;
    case 'T': case 't': shift = 40; break;
    default: break;
    }
    if (shift && (p[1] == 'i' || p[1] == 'I') && (p[2] == 'B' || p[2] == 'b'))
        p += 3; /* GiB */
    else if (shift && (p[1] == 'B' || p[1] == 'b'))
        p += 2; /* GB */
    else if (shift || *p == 'B' || *p == 'b')
        p++;    /* G, or B alone */
    if (*p || whole > (UINT64_MAX >> shift))
        return -1;
    /* frac / 10^n units, rounded down, without overflow: 10^n = 2^n 5^n with n <= 9 */
    uint64_t frac_bytes;
    if (shift >= ndecimals) {
        uint64_t pow5 = pow10 >> ndecimals, s = shift - ndecimals;
        frac_bytes = (frac / pow5 << s) + ((frac % pow5) << s) / pow5;
    } else {
        frac_bytes = (frac << shift) / pow10;
    }
    if ((whole << shift) > UINT64_MAX - frac_bytes)
        return -1;
    *out = (whole << shift) + frac_bytes;
    return 0;
}

static void size_bounds(const char *var, uint64_t *lo, uint64_t *hi)
{
    const transit_var *v = find_var(var);
    *lo = v && v->kind == VAR_SIZE ? v->lo : ANY_SIZE_MIN;
    *hi = v && v->kind == VAR_SIZE ? v->hi : ANY_SIZE_MAX;
}

static int parse_size_as(const char *var, const char *shown, const char *text, uint64_t *out, char *err,
                         size_t errlen)
{
    char value[TRANSIT_SHOW_MAX], lo_text[32], hi_text[32];
    uint64_t lo, hi, bytes = 0;
    size_bounds(var, &lo, &hi);
    format_size(lo, lo_text, sizeof lo_text);
    format_size(hi, hi_text, sizeof hi_text);
    transit_show(text, value, sizeof value);
    if (!text || size_grammar(text, &bytes) < 0) {
        snprintf(err, errlen, "%s='%s' is not a size; use a whole or decimal number with an optional K, M, G "
                 "or T (powers of 1024) and an optional B or iB, from %s to %s", shown, value, lo_text,
                 hi_text);
        return -1;
    }
    if (bytes < lo || bytes > hi) {
        snprintf(err, errlen, "%s='%s' is out of range; use a size from %s to %s", shown, value, lo_text,
                 hi_text);
        return -1;
    }
    *out = bytes;
    return 0;
}

TRANSIT_INTERNAL int transit_parse_size(const char *var, const char *text, uint64_t *out, char *err,
                                        size_t errlen)
{
    return parse_size_as(var, var, text, out, err, errlen);
}

/* "base, prefetch, advise or hybrid" */
static void policy_list(char *out, size_t outlen)
{
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; i < NPOLICIES && n < outlen; i++)
        n += (size_t)snprintf(out + n, outlen - n, "%s%s", i == 0 ? "" : i == NPOLICIES - 1 ? " or " : ", ",
                              policy_names[i]);
}

TRANSIT_INTERNAL int transit_parse_policy(const char *var, const char *text, transit_policy *out,
                                          char *err, size_t errlen)
{
    char value[TRANSIT_SHOW_MAX], allowed[128];
    for (int i = 0; text && i < NPOLICIES; i++) {
        if (strcmp(text, policy_names[i]) == 0) {
            *out = (transit_policy)i;
            return 0;
        }
    }
    transit_show(text, value, sizeof value);
    policy_list(allowed, sizeof allowed);
    snprintf(err, errlen, "%s='%s' is not a policy; use %s", var, value, allowed);
    return -1;
}

TRANSIT_INTERNAL int transit_parse_bool(const char *var, const char *text, bool *out, char *err,
                                        size_t errlen)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    char value[TRANSIT_SHOW_MAX];
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
    transit_show(text, value, sizeof value);
    snprintf(err, errlen, "%s='%s' is not a boolean; use 1/0, true/false, yes/no or on/off", var, value);
    return -1;
}

/* A whole number in [lo, hi], or 0 when zero_means is set. */
static int parse_uint_as(const char *var, const char *text, unsigned lo, unsigned hi, const char *zero_means,
                         unsigned *out, char *err, size_t errlen)
{
    char value[TRANSIT_SHOW_MAX];
    char *end = NULL;
    unsigned long v = 0;
    bool ok = text && *text >= '0' && *text <= '9';
    if (ok) {
        errno = 0;
        v = strtoul(text, &end, 10);
        ok = !errno && !*end && ((v >= lo && v <= hi) || (zero_means && v == 0));
    }
    if (ok) {
        *out = (unsigned)v;
        return 0;
    }
    transit_show(text, value, sizeof value);
    if (zero_means)
        snprintf(err, errlen, "%s='%s' is not allowed; use 0 (%s) or a whole number from %u to %u", var,
                 value, zero_means, lo, hi);
    else
        snprintf(err, errlen, "%s='%s' is not allowed; use a whole number from %u to %u", var, value, lo, hi);
    return -1;
}

TRANSIT_INTERNAL int transit_parse_uint(const char *var, const char *text, unsigned lo, unsigned hi,
                                        unsigned *out, char *err, size_t errlen)
{
    return parse_uint_as(var, text, lo, hi, NULL, out, err, errlen);
}

static int parse_dir(const char *shown, const char *text, char *out, size_t outlen, char *err, size_t errlen)
{
    char value[TRANSIT_SHOW_MAX];
    size_t len = text ? strlen(text) : 0;
    bool control = false;
    for (size_t i = 0; i < len; i++)
        control |= (unsigned char)text[i] < 0x20 || text[i] == 0x7f;
    if (len == 0 || len >= outlen || control) {
        transit_show(text, value, sizeof value);
        snprintf(err, errlen, "%s='%s' is not usable; use a directory path of 1 to %zu bytes without control "
                 "characters", shown, value, outlen - 1);
        return -1;
    }
    memcpy(out, text, len + 1);
    return 0;
}

/* Parses `text` as variable v into cfg (or only checks it when cfg is NULL), naming it `shown`. */
static int parse_var(const transit_var *v, const char *shown, const char *text, transit_config *cfg,
                     char *err, size_t errlen)
{
    transit_config scratch;
    char *field = (char *)(cfg ? cfg : &scratch) + v->field;
    switch (v->kind) {
    case VAR_POLICY: return transit_parse_policy(shown, text, (transit_policy *)(void *)field, err, errlen);
    case VAR_SIZE: return parse_size_as(v->name, shown, text, (uint64_t *)(void *)field, err, errlen);
    case VAR_UINT:
        return parse_uint_as(shown, text, (unsigned)v->lo, (unsigned)v->hi, v->zero,
                             (unsigned *)(void *)field, err, errlen);
    case VAR_BOOL: return transit_parse_bool(shown, text, (bool *)(void *)field, err, errlen);
    case VAR_DIR: return parse_dir(shown, text, field, sizeof scratch.out_dir, err, errlen);
    case VAR_TOOL: return 0;
    }
    return 0;
}

TRANSIT_INTERNAL int transit_check_value(const char *var, const char *shown, const char *text, char *err,
                                         size_t errlen)
{
    const transit_var *v = find_var(var);
    if (!v) {
        snprintf(err, errlen, "internal error: %s is not a TRANSIT variable", var);
        return -1;
    }
    return parse_var(v, shown, text, NULL, err, errlen);
}

static bool under(const char *path, const char *top)
{
    size_t n = strlen(top);
    return strncmp(path, top, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

TRANSIT_INTERNAL int transit_check_dir(const char *shown, const char *path, bool parent_must_exist, char *err,
                                       size_t errlen)
{
    static const char *const refused[] = {"/proc", "/sys", "/dev"};
    char value[TRANSIT_SHOW_MAX], probe[PATH_MAX], resolved[PATH_MAX], whole[2 * PATH_MAX];
    struct stat st;

    transit_show(path, value, sizeof value);
    if (parse_dir(shown, path, probe, sizeof probe - REPORT_DIR_ROOM, err, errlen) < 0)
        return -1;
    if (path[0] != '/') {
        snprintf(err, errlen, "%s='%s' is not an absolute path; use a directory path starting with /", shown,
                 value);
        return -1;
    }
    /* the deepest part of the path that exists, resolved (symbolic links, ..), then the rest */
    size_t kept = strlen(probe);
    unsigned missing = 0;
    while (kept > 1 && probe[kept - 1] == '/')
        probe[--kept] = '\0';
    while (!realpath(probe, resolved)) {
        char *slash = strrchr(probe, '/');
        kept = slash == probe ? 1 : (size_t)(slash - probe);
        probe[kept] = '\0';
        missing++;
    }
    bool is_dir = stat(resolved, &st) == 0 && S_ISDIR(st.st_mode);
    if ((parent_must_exist && missing > 1) || !is_dir) {
        snprintf(err, errlen, "%s='%s': %s; use a directory%s", shown, value,
                 missing == 0 ? "it is not a directory" : "its parent is not an existing directory",
                 parent_must_exist ? " whose parent exists" : "");
        return -1;
    }
    if (missing)
        snprintf(whole, sizeof whole, "%s/%s", resolved, path + kept + strspn(path + kept, "/"));
    else
        snprintf(whole, sizeof whole, "%s", resolved);
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        if (under(whole, refused[i])) {
            snprintf(err, errlen, "%s='%s' is under %s; use a directory outside /proc, /sys and /dev", shown,
                     value, refused[i]);
            return -1;
        }
    }
    return 0;
}

/* Edit distance (insertions, deletions, substitutions) between the first 64 bytes of a and b. */
static size_t distance(const char *a, const char *b)
{
    enum { CAP = 64 };
    size_t la = strnlen(a, CAP), lb = strnlen(b, CAP), row[CAP + 1];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            best = TRANSIT_MIN(best, up + 1);
            best = TRANSIT_MIN(best, row[j - 1] + 1);
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

TRANSIT_INTERNAL const char *transit_nearest_name(const char *name)
{
    const char *best = vars[0].name;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < NVARS; i++) {
        size_t d = distance(name, vars[i].name);
        if (d < best_d) {
            best_d = d;
            best = vars[i].name;
        }
    }
    return best;
}

/* Where load() reads a variable: the process environment or an envp array. */
typedef const char *(*lookup_fn)(const char *name, void *ctx);

static const char *lookup_getenv(const char *name, void *ctx)
{
    (void)ctx;
    return getenv(name);
}

static const char *lookup_envp(const char *name, void *ctx)
{
    size_t n = strlen(name);
    for (char *const *e = ctx; *e; e++) {
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    }
    return NULL;
}

/* An unset variable keeps the default; a set one, even empty, must be valid. */
static int load(transit_config *cfg, lookup_fn lookup, void *ctx, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->policy = TRANSIT_POLICY_BASE;
    cfg->warmup_iters = TRANSIT_DEFAULT_WARMUP_ITERS;
    cfg->prefetch_gap = TRANSIT_DEFAULT_PREFETCH_GAP;
    cfg->recorder = true;
    cfg->cupti_detach = true;
    cfg->hybrid_mover = true;
    cfg->hybrid_guard = true;
    cfg->stats_interval_s = TRANSIT_DEFAULT_STATS_INTERVAL_S;

    for (size_t i = 0; i < NVARS; i++) {
        const char *v = lookup(vars[i].name, ctx);
        if (v && parse_var(&vars[i], vars[i].name, v, cfg, err, errlen) < 0)
            return -1;
    }
    if (cfg->profile && !cfg->out_dir[0]) {
        snprintf(err, errlen, "TRANSIT_PROFILE is on but TRANSIT_OUT is not set; set TRANSIT_OUT to the "
                              "directory for the profile, or TRANSIT_PROFILE=0");
        return -1;
    }
    if (cfg->profile_steady && !cfg->profile) {
        snprintf(err, errlen, "TRANSIT_PROFILE_STEADY=%u needs TRANSIT_PROFILE=1 (the steady profile is written "
                              "beside the warm-up one); set TRANSIT_PROFILE=1, or TRANSIT_PROFILE_STEADY=0",
                 cfg->profile_steady);
        return -1;
    }
    if (cfg->tick_log && !cfg->out_dir[0]) {
        snprintf(err, errlen, "TRANSIT_TICK_LOG is on but TRANSIT_OUT is not set; set TRANSIT_OUT to the "
                              "directory for the tick log, or TRANSIT_TICK_LOG=0");
        return -1;
    }
    return 0;
}

int transit_config_load(transit_config *cfg, char *err, size_t errlen)
{
    return load(cfg, lookup_getenv, NULL, err, errlen);
}

TRANSIT_INTERNAL int transit_env_check(char *const envp[], char *err, size_t errlen)
{
    static const char prefix[] = "TRANSIT_";
    char name[256], shown[TRANSIT_SHOW_MAX];
    for (char *const *e = envp; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (strncmp(*e, prefix, sizeof prefix - 1) != 0 || !eq)
            continue;
        size_t n = TRANSIT_MIN((size_t)(eq - *e), sizeof name - 1);
        memcpy(name, *e, n);
        name[n] = '\0';
        if (find_var(name) && (size_t)(eq - *e) == n)
            continue;
        transit_show(name, shown, sizeof shown);
        snprintf(err, errlen, "%s is not a TRANSIT variable (did you mean %s?); fix or unset it", shown,
                 transit_nearest_name(name));
        return -1;
    }
    transit_config cfg;
    return load(&cfg, lookup_envp, (void *)envp, err, errlen);
}
