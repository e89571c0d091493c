/*
 * local.c - srun, sbatch and salloc, after all options are parsed: the last check before the
 * job is submitted, so that a request the tasks would refuse fails here with one line. The
 * user's own TRANSIT_* environment, which the tasks inherit, is checked here too, as libtransit
 * will read it in the tasks: with what the plugin sets in their place.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "spank_transit.h"

extern char **environ;

#define ENV_PREFIX "TRANSIT_"

/* "transit: note: <before> NAME='<value>' from the environment<after>" */
static void note(const char *before, const char *name, const char *value, const char *after)
{
    char shown[TRANSIT_SHOW_MAX];
    transit_show(value, shown, sizeof(shown));
    slurm_info("transit: note: %s%s='%s' from the environment%s", before, name, shown, after);
}

/* True when the "NAME=value" string `entry` sets `name`. */
static bool sets(const char *entry, const char *name)
{
    size_t n = strlen(name);
    return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

/* One "NAME=value" string, malloc'd; NULL when out of memory. */
static char *env_entry(const char *name, const char *value)
{
    size_t n = strlen(name) + 1 + strlen(value) + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s=%s", name, value);
    return s;
}

/* The TRANSIT_* part of the environment the tasks will get: the user's variables, except those
 * the plugin sets, then the plugin's. 0, or -1 when out of memory. */
static int task_environment(const char *policy, const char *mem_limit, const char *report_dir, char ***out)
{
    size_t n = 0, count = 0;
    for (char **e = environ; *e; e++)
        count++;
    char **envp = calloc(count + 4, sizeof(*envp));
    if (!envp)
        return -1;
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, ENV_PREFIX, strlen(ENV_PREFIX)) != 0 || (policy && sets(*e, "TRANSIT_POLICY")) ||
            (mem_limit && sets(*e, "TRANSIT_MEM_LIMIT")) || (report_dir && sets(*e, "TRANSIT_OUT")))
            continue;
        if (!(envp[n++] = strdup(*e)))
            goto oom;
    }
    if ((policy && !(envp[n++] = env_entry("TRANSIT_POLICY", policy))) ||
        (mem_limit && !(envp[n++] = env_entry("TRANSIT_MEM_LIMIT", mem_limit))) ||
        (report_dir && !(envp[n++] = env_entry("TRANSIT_OUT", report_dir))))
        goto oom;
    *out = envp;
    return 0;
oom:
    for (size_t i = 0; i < n; i++)
        free(envp[i]);
    free(envp);
    return -1;
}

int transit_local_post_opt(spank_t sp)
{
    (void)sp;
    char err[TRANSIT_ERR_MAX];
    char **envp = NULL;

    if (!transit_opts.requested) {
        if (transit_opts.mem_limit[0] || transit_opts.report_dir[0])
            return transit_refuse("--transit-mem-limit and --transit-report-dir need --transit "
                                  "(e.g. --transit=advise)");
        return 0;
    }
    if (transit_opts.off)
        return 0;

    const char *env_policy = getenv("TRANSIT_POLICY"), *env_limit = getenv("TRANSIT_MEM_LIMIT");
    const char *env_out = getenv("TRANSIT_OUT");
    const char *policy = transit_effective_policy(&transit_opts, env_policy, &transit_conf);
    const char *mem_limit = transit_opts.mem_limit[0] ? transit_opts.mem_limit : env_limit;
    const char *report_dir = transit_effective_report_dir(&transit_opts, &transit_conf);

    if (task_environment(policy, mem_limit, report_dir, &envp) < 0)
        return transit_refuse("out of memory checking the environment");
    int rc = transit_env_check(envp, err, sizeof(err));
    for (char **e = envp; *e; e++)
        free(*e);
    free(envp);
    if (rc < 0)
        return transit_refuse("%s", err);

    /* the option wins over the environment, and says so; the environment alone is noted where it
     * changes what the tasks do beyond the policy: limit mode, or where the stats go */
    char what[TRANSIT_WORD_MAX + 32];
    if (transit_opts.policy[0] && env_policy && strcmp(env_policy, transit_opts.policy) != 0) {
        snprintf(what, sizeof(what), "--transit=%s overrides ", transit_opts.policy);
        note(what, "TRANSIT_POLICY", env_policy, "");
    }
    if (transit_opts.mem_limit[0] && env_limit && strcmp(env_limit, transit_opts.mem_limit) != 0) {
        snprintf(what, sizeof(what), "--transit-mem-limit=%s overrides ", transit_opts.mem_limit);
        note(what, "TRANSIT_MEM_LIMIT", env_limit, "");
    } else if (!transit_opts.mem_limit[0] && env_limit) {
        note("", "TRANSIT_MEM_LIMIT", env_limit, " turns limit mode on, as --transit-mem-limit would");
    }
    if (report_dir && env_out && strncmp(env_out, report_dir, strlen(report_dir)) != 0)
        note("the report directory <report_dir>/<jobid>/ overrides ", "TRANSIT_OUT", env_out, "");
    return 0;
}
