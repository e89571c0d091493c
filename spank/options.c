/*
 * options.c - the one option table and its callbacks.
 *
 * Callbacks run in srun/sbatch/salloc (remote == 0), where a bad value must stop the command
 * before a job exists, and again in slurmstepd (remote == 1) with the values srun forwarded.
 * In srun/sbatch/salloc a value is stored only after it passed the checks, so a rejected
 * option changes nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spank_transit.h"
#include "transit.h"

struct transit_opts transit_opts;

/* sbatch and salloc export --transit to the srun steps inside as this variable. Slurm formats
 * a bare `--transit` (no value) there as "(null)" (22.05) or "", and srun then passes that
 * string to our callback, and forwards it to slurmstepd. */
#define TRANSIT_ALLOC_ENV "SLURM_SPANK__SLURM_SPANK_OPTION_transit_transit"
#define SLURM_NULL_VALUE "(null)"

enum { OPT_POLICY = 1, OPT_MEM_LIMIT, OPT_REPORT_DIR };

struct spank_option transit_option_table[] = {
    {"transit", "base|prefetch|advise|off",
     "Run the tasks under TRANSIT: host memory extends GPU memory, with this policy "
     "(no value: the site default; off: no TRANSIT).",
     2, OPT_POLICY, transit_opt_policy},
    {"transit-mem-limit", "SIZE",
     "With --transit: emulate a GPU of SIZE (e.g. 40G) and keep device use at or below it.",
     1, OPT_MEM_LIMIT, transit_opt_mem_limit},
    {"transit-report-dir", "DIR",
     "With --transit: write per-rank statistics under DIR/<jobid>/ (absolute path).",
     1, OPT_REPORT_DIR, transit_opt_report_dir},
    SPANK_OPTIONS_TABLE_END,
};

void transit_opts_reset(struct transit_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
}

const char *transit_effective_policy(const struct transit_opts *opts, const struct transit_conf *conf)
{
    if (opts->policy[0])
        return opts->policy;
    return conf->policy[0] ? conf->policy : NULL;
}

const char *transit_effective_report_dir(const struct transit_opts *opts, const struct transit_conf *conf)
{
    if (opts->report_dir[0])
        return opts->report_dir;
    return conf->report_dir[0] ? conf->report_dir : NULL;
}

int transit_opts_check(const struct transit_opts *opts, const struct transit_conf *conf, char *err,
                       size_t errlen)
{
    if (!conf->lib[0]) {
        snprintf(err, errlen, "plugstack.conf gives no lib= for spank_transit.so; ask the administrator");
        return -1;
    }
    transit_task_request req = {
        .policy = transit_effective_policy(opts, conf),
        .mem_limit = opts->mem_limit[0] ? opts->mem_limit : NULL,
        .lib_path = conf->lib,
        .hook_dir = conf->hook_dir[0] ? conf->hook_dir : NULL,
    };
    transit_env_var vars[TRANSIT_TASK_ENV_MAX];
    int n = transit_task_env(&req, vars, err, errlen);
    if (n < 0)
        return -1;
    transit_task_env_free(vars, n);
    return 0;
}

/* Copies a user value into dst; -1 (and one error line) when empty or too long. */
static int store(char *dst, size_t dstlen, const char *opt, const char *value)
{
    size_t len = strlen(value);
    if (len == 0) {
        slurm_error("transit: --%s= needs a value", opt);
        return -1;
    }
    if (len >= dstlen) {
        slurm_error("transit: --%s: value longer than %zu characters", opt, dstlen - 1);
        return -1;
    }
    memcpy(dst, value, len + 1);
    return 0;
}

/* Accepts `next` as the new option state if libtransit's rules accept it; `also` completes
 * libtransit's list of allowed values with what only the option allows. In slurmstepd the
 * request is recorded as it is: a refusal there would silently run the job without TRANSIT,
 * while the task's own transit_task_env() call fails the task with the same message. */
static int commit(const struct transit_opts *next, int remote, const char *opt, const char *also)
{
    char err[TRANSIT_ERR_MAX];
    if (!remote && transit_opts_check(next, &transit_conf, err, sizeof(err)) < 0) {
        slurm_error("transit: --%s: %s%s", opt, err, also);
        return -1;
    }
    transit_opts = *next;
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
    if (is_bare(optarg, remote))
        return commit(&next, remote, "transit", "");
    if (optarg[0] == '\0') {
        slurm_error("transit: --transit= needs a value: base, prefetch, advise or off "
                    "(or plain --transit for the site default)");
        return -1;
    }
    if (!strcmp(optarg, TRANSIT_OFF)) {
        next.off = true; /* nothing to check: the tasks are left alone */
        transit_opts = next;
        return 0;
    }
    if (store(next.policy, sizeof(next.policy), "transit", optarg) < 0)
        return -1;
    return commit(&next, remote, "transit", " (or off)");
}

int transit_opt_mem_limit(int val, const char *optarg, int remote)
{
    (void)val;
    struct transit_opts next = transit_opts;
    if (store(next.mem_limit, sizeof(next.mem_limit), "transit-mem-limit", optarg ? optarg : "") < 0)
        return -1;
    return commit(&next, remote, "transit-mem-limit", "");
}

int transit_opt_report_dir(int val, const char *optarg, int remote)
{
    (void)val;
    (void)remote;
    struct transit_opts next = transit_opts;
    if (store(next.report_dir, sizeof(next.report_dir) - TRANSIT_JOBID_SUFFIX_MAX, "transit-report-dir",
              optarg ? optarg : "") < 0)
        return -1;
    if (next.report_dir[0] != '/') {
        slurm_error("transit: --transit-report-dir=%.100s: must be an absolute path", optarg);
        return -1;
    }
    transit_opts = next;
    return 0;
}
