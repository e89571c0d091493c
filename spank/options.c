/*
 * options.c - the one option table and its callbacks.
 *
 * Callbacks run in srun/sbatch/salloc (remote == 0), where a bad value must stop the command
 * before a job exists, and again in slurmstepd (remote == 1) with the values srun forwarded.
 * In srun/sbatch/salloc a value is stored only after it passed the checks, so a rejected
 * option changes nothing.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "spank_transit.h"

struct transit_opts transit_opts;

/* sbatch and salloc export --transit to the srun steps inside as this variable. Slurm formats
 * a bare `--transit` (no value) there as "(null)" (22.05) or "", and srun then passes that
 * string to our callback, and forwards it to slurmstepd. */
#define TRANSIT_ALLOC_ENV "SLURM_SPANK__SLURM_SPANK_OPTION_transit_transit"
#define SLURM_NULL_VALUE "(null)"
/* What srun, sbatch and salloc exit with after a refused option (Slurm's error_exit). */
#define SLURM_EXIT_ERROR_ENV "SLURM_EXIT_ERROR"
#define SLURM_DEFAULT_EXIT_ERROR 1

enum { OPT_POLICY = 1, OPT_MEM_LIMIT, OPT_REPORT_DIR };

/* "base|prefetch|advise|hybrid|off", from libtransit's list of policies */
static char policy_arginfo[TRANSIT_WORD_MAX * 4];

struct spank_option transit_option_table[] = {
    {"transit", policy_arginfo,
     "[transit] Run the tasks under TRANSIT: host memory extends GPU memory, with this policy "
     "(no value: $TRANSIT_POLICY or the site default; off: no TRANSIT).",
     2, OPT_POLICY, transit_opt_policy},
    {"transit-mem-limit", "SIZE",
     "[transit] With --transit: emulate a GPU of SIZE (e.g. 40G, from 256M to 16T) and keep device use "
     "at or below it.",
     1, OPT_MEM_LIMIT, transit_opt_mem_limit},
    {"transit-report-dir", "DIR",
     "[transit] With --transit: write per-rank statistics under DIR/<jobid>/ (an absolute path whose "
     "parent exists).",
     1, OPT_REPORT_DIR, transit_opt_report_dir},
    SPANK_OPTIONS_TABLE_END,
};

void transit_options_init(void)
{
    size_t n = 0;
    for (int i = 0; i < transit_policy_count(); i++)
        n += (size_t)snprintf(policy_arginfo + n, sizeof(policy_arginfo) - n, "%s|",
                              transit_policy_name((transit_policy)i));
    snprintf(policy_arginfo + n, sizeof(policy_arginfo) - n, "%s", TRANSIT_OFF);
}

void transit_opts_reset(struct transit_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
}

const char *transit_effective_policy(const struct transit_opts *opts, const char *env_policy,
                                     const struct transit_conf *conf)
{
    if (opts->policy[0])
        return opts->policy;
    if (env_policy)
        return env_policy;
    return conf->policy[0] ? conf->policy : NULL;
}

const char *transit_effective_report_dir(const struct transit_opts *opts, const struct transit_conf *conf)
{
    if (opts->report_dir[0])
        return opts->report_dir;
    return conf->report_dir[0] ? conf->report_dir : NULL;
}

/* Slurm answers a refused option with a second line that repeats the whole value ("Invalid
 * --transit argument: ...", 5,000 characters for a long one), and then exits. Exiting here, as
 * Slurm would a moment later and with its exit code, leaves TRANSIT's line alone. Nothing exists
 * yet to clean up: options are parsed before any allocation or step is requested. */
int transit_refuse(const char *fmt, ...)
{
    char line[TRANSIT_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    slurm_error("transit: %s", line);
    spank_context_t ctx = spank_context();
    if (ctx == S_CTX_LOCAL || ctx == S_CTX_ALLOCATOR) {
        const char *code = getenv(SLURM_EXIT_ERROR_ENV);
        exit(code && atoi(code) > 0 ? atoi(code) : SLURM_DEFAULT_EXIT_ERROR);
    }
    return -1;
}

/* Copies a user value into dst after `var`'s rules accepted it; -1 (and one line, ending with
 * `also`: what the option allows beyond the variable) otherwise. In slurmstepd (remote) the value
 * is recorded as it is: a refusal there would silently run the job without TRANSIT, while the
 * task's own checks fail the task with the same message. */
static int store(char *dst, size_t dstlen, const char *opt, const char *var, const char *also,
                 const char *value, int remote)
{
    char err[TRANSIT_ERR_MAX], shown[TRANSIT_SHOW_MAX], name[TRANSIT_WORD_MAX];
    size_t len = strlen(value);
    snprintf(name, sizeof(name), "--%s", opt);
    if (!remote && var && transit_check_value(var, name, value, err, sizeof(err)) < 0)
        return transit_refuse("%s%s", err, also);
    if (len >= dstlen) {
        transit_show(value, shown, sizeof(shown));
        return transit_refuse("%s='%s' is longer than %zu characters", name, shown, dstlen - 1);
    }
    memcpy(dst, value, len + 1);
    return 0;
}

/* True when the --transit value stands for a bare `--transit`: no value, or Slurm's rendering of
 * "no value" as inherited from sbatch/salloc (checked in srun; slurmstepd gets what srun accepted). */
static bool is_bare(const char *optarg, int remote)
{
    if (!optarg)
        return true;
    if (optarg[0] != '\0' && strcmp(optarg, SLURM_NULL_VALUE) != 0)
        return false;
    const char *inherited = getenv(TRANSIT_ALLOC_ENV);
    return remote || (inherited && !strcmp(inherited, optarg));
}

int transit_opt_policy(int val, const char *optarg, int remote)
{
    (void)val;
    struct transit_opts next = transit_opts;
    next.requested = true;
    next.off = false;
    next.policy[0] = '\0';
    if (is_bare(optarg, remote)) {
        transit_opts = next;
        return 0;
    }
    if (!strcmp(optarg, TRANSIT_OFF)) {
        next.off = true; /* nothing to check: the tasks are left alone */
        transit_opts = next;
        return 0;
    }
    if (store(next.policy, sizeof(next.policy), "transit", "TRANSIT_POLICY",
              ", or off (plain --transit: the site default)", optarg, remote) < 0)
        return -1;
    transit_opts = next;
    return 0;
}

int transit_opt_mem_limit(int val, const char *optarg, int remote)
{
    (void)val;
    struct transit_opts next = transit_opts;
    if (store(next.mem_limit, sizeof(next.mem_limit), "transit-mem-limit", "TRANSIT_MEM_LIMIT", "",
              optarg ? optarg : "", remote) < 0)
        return -1;
    transit_opts = next;
    return 0;
}

int transit_opt_report_dir(int val, const char *optarg, int remote)
{
    (void)val;
    char err[TRANSIT_ERR_MAX];
    struct transit_opts next = transit_opts;
    if (!remote &&
        transit_check_dir("--transit-report-dir", optarg ? optarg : "", true, err, sizeof(err)) < 0)
        return transit_refuse("%s", err);
    if (store(next.report_dir, sizeof(next.report_dir), "transit-report-dir", NULL, "", optarg ? optarg : "",
              remote) < 0)
        return -1;
    transit_opts = next;
    return 0;
}
