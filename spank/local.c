/*
 * local.c - srun, sbatch and salloc, after all options are parsed: the last check before the
 * job is submitted, so that a request the tasks would refuse fails here with one line. The
 * user's own TRANSIT_* environment, which the tasks inherit, is checked here too, as libtransit
 * will read it in the tasks: with what the plugin sets in their place.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"
#include "spank_transit.h"

extern char **environ;

#define ENV_PREFIX "TRANSIT_"
#define EXPORT_BYTES_MAX 65536 /* the --export values kept */

/* What srun's step runs with, for the line at its end (transit_local_exit). */
static struct {
    bool active;
    const char *policy; /* NULL: libtransit's default */
    const char *mem_limit, *report_dir;
} step_summary;

/* The job and step srun launched the step in (slurm_spank_local_user_init): in a heterogeneous
 * job, the component's own job (Slurm 22.05 names the first of a step over several). */
static struct {
    bool known;
    uint32_t job_id, step_id;
} launched;

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

/*
 * --export decides what of the user's environment the tasks get: all of it with ALL (or without
 * --export), else only the variables it names; and its NAME=value items go over it. Slurm builds
 * the tasks' environment from it after the plugin ran, and keeps the option from plugins. sbatch
 * works it out from its command line, else SBATCH_EXPORT, else the script's #SBATCH lines, and
 * puts it in SLURM_EXPORT_ENV (for the job's sruns) unless it is ALL: that is read here, unless the
 * variable was set when sbatch started (sbatch leaves it then). Otherwise the option is read from
 * the command line (`--export=V`, `--export V`; the last one counts, as in Slurm), else from the
 * variable that stands for it (srun: SRUN_EXPORT_ENV, else SLURM_EXPORT_ENV; sbatch: SBATCH_EXPORT).
 * Its TRANSIT_ items are kept, NAME=value and bare NAME alike. slurmstepd checks the environment
 * Slurm really built as well (step.c).
 */
bool transit_export_env_preset;
#define EXPORTS_MAX 64
static char exports_buf[EXPORT_BYTES_MAX];
static const char *exports[EXPORTS_MAX];
static size_t nexports;
static bool user_env_exported = true; /* ALL, or no --export */

static void add_exports(const char *value)
{
    static size_t used;
    size_t len = strlen(value);
    nexports = 0;
    user_env_exported = false;
    if (used + len + 1 > sizeof(exports_buf)) {
        user_env_exported = true; /* past 64 KiB of --export: slurmstepd still checks what Slurm builds */
        return;
    }
    char *copy = memcpy(exports_buf + used, value, len + 1), *rest = NULL;
    used += len + 1;
    for (char *item = strtok_r(copy, ",", &rest); item; item = strtok_r(NULL, ",", &rest)) {
        if (!strcasecmp(item, "ALL")) /* as Slurm reads it */
            user_env_exported = true;
        else if (!strncmp(item, ENV_PREFIX, strlen(ENV_PREFIX)) && nexports < EXPORTS_MAX)
            exports[nexports++] = item;
    }
}

static void read_exports(void)
{
    size_t len;
    bool given = false;
    if (!strcmp(program_invocation_short_name, "sbatch") && !transit_export_env_preset) {
        const char *worked_out = getenv("SLURM_EXPORT_ENV");
        if (worked_out)
            add_exports(worked_out);
        return;
    }
    const char *cmdline = transit_command_line(&len);
    for (const char *arg = len ? cmdline + strlen(cmdline) + 1 : cmdline; arg < cmdline + len;
         arg += strlen(arg) + 1) {
        if (!strcmp(arg, "--"))
            break;
        const char *next = arg + strlen(arg) + 1;
        if (!strncmp(arg, "--export=", 9))
            add_exports(arg + 9);
        else if (!strcmp(arg, "--export") && next < cmdline + len)
            add_exports(next);
        else
            continue;
        given = true;
    }
    const char *from_env = spank_context() != S_CTX_LOCAL ? getenv("SBATCH_EXPORT")
                           : getenv("SRUN_EXPORT_ENV")    ? getenv("SRUN_EXPORT_ENV")
                                                          : getenv("SLURM_EXPORT_ENV");
    if (!given && from_env)
        add_exports(from_env);
}

/* True when --export gives the tasks the user's own value of the variable that the NAME or
 * NAME=value string `entry` names. */
static bool user_var_exported(const char *entry)
{
    size_t n = strcspn(entry, "=");
    if (user_env_exported)
        return true;
    for (size_t i = 0; i < nexports; i++)
        if (!strncmp(exports[i], entry, n) && exports[i][n] == '\0')
            return true;
    return false;
}

/* NAME's value in the tasks' environment before the plugin's own: --export's, else the user's. */
static const char *task_getenv(const char *name)
{
    for (size_t i = nexports; i-- > 0;)
        if (sets(exports[i], name))
            return exports[i] + strlen(name) + 1;
    return user_var_exported(name) ? getenv(name) : NULL;
}

/* True when --export sets the variable of the NAME=value string `entry` itself. */
static bool exported(const char *entry)
{
    size_t n = strcspn(entry, "=");
    for (size_t i = 0; i < nexports; i++)
        if (!strncmp(exports[i], entry, n) && exports[i][n] == '=')
            return true;
    return false;
}

/* The TRANSIT_* part of the environment the tasks will get: the user's variables and --export's
 * (over them), except those the plugin sets, then the plugin's. 0, or -1 when out of memory. */
static int task_environment(const char *policy, const char *mem_limit, const char *report_dir, char ***out)
{
    size_t n = 0, count = nexports;
    for (char **e = environ; *e; e++)
        count++;
    char **envp = calloc(count + 4, sizeof(*envp));
    if (!envp)
        return -1;
    for (size_t i = 0; i < count; i++) {
        const char *e = i < nexports ? exports[i] : environ[i - nexports];
        if (strncmp(e, ENV_PREFIX, strlen(ENV_PREFIX)) != 0 || !strchr(e, '=') ||
            (policy && sets(e, "TRANSIT_POLICY")) || (mem_limit && sets(e, "TRANSIT_MEM_LIMIT")) ||
            (report_dir && sets(e, "TRANSIT_OUT")) || (i >= nexports && (exported(e) || !user_var_exported(e))))
            continue;
        if (!(envp[n++] = strdup(e)))
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

/* An option as a refusal names it: with where it came from, when that is not the command line. */
static void option_name(char *buf, size_t len, const char *option, enum transit_source from)
{
    const char *before = from == TRANSIT_FROM_SCRIPT ? "#SBATCH " : from == TRANSIT_FROM_JOB ? "the job's " : "";
    snprintf(buf, len, "%s%s%s", before, option, from == TRANSIT_FROM_JOB ? " (from sbatch or salloc)" : "");
}

int transit_local_post_opt(spank_t sp)
{
    (void)sp;
    char err[TRANSIT_ERR_MAX];
    char **envp = NULL;

    /* an option the command got from the job has nothing to act on in a step without TRANSIT,
     * and was checked when the job was submitted */
    char sub[96], off[96]; /* "the job's --transit-report-dir (from sbatch or salloc)" */
    bool limit = transit_opts.mem_limit[0] && transit_opts.mem_limit_from != TRANSIT_FROM_JOB;
    bool dir = transit_opts.report_dir[0] && transit_opts.report_dir_from != TRANSIT_FROM_JOB;
    enum transit_source sub_from = limit ? transit_opts.mem_limit_from : transit_opts.report_dir_from;
    if (limit || dir)
        option_name(sub, sizeof(sub), limit ? "--transit-mem-limit" : "--transit-report-dir", sub_from);
    if (!transit_opts.requested) {
        char shown[TRANSIT_SHOW_MAX];
        if (!limit && !dir)
            return 0;
        transit_show(limit ? transit_opts.mem_limit : transit_opts.report_dir, shown, sizeof(shown));
        return transit_refuse("%s='%s' needs --transit (e.g. --transit=advise)", sub, shown);
    }
    /* an off overrides the weaker values of the other options, as a command line overrides the
     * script's (they go unused); one given with it, or overriding it, conflicts */
    if (transit_opts.off && (limit || dir) && sub_from >= transit_opts.off_from) {
        option_name(off, sizeof(off), "--transit=off", transit_opts.off_from);
        if (sub_from == transit_opts.off_from)
            return transit_refuse("%s runs no TRANSIT, so %s has nothing to act on; drop one of them", off, sub);
        return transit_refuse("%s runs no TRANSIT, so %s has nothing to act on; give this %s --transit=POLICY "
                              "too, or drop %s", off, sub, program_invocation_short_name, sub);
    }
    if (transit_opts.off)
        return 0;

    read_exports();
    const char *env_policy = task_getenv("TRANSIT_POLICY"), *env_limit = task_getenv("TRANSIT_MEM_LIMIT");
    const char *env_out = task_getenv("TRANSIT_OUT");
    const char *policy = transit_effective_policy(&transit_opts, env_policy, &transit_conf);
    const char *mem_limit = transit_opts.mem_limit[0] ? transit_opts.mem_limit : env_limit;
    const char *report_dir = transit_effective_report_dir(&transit_opts, &transit_conf);
    if (policy && !strcmp(policy, TRANSIT_OFF)) { /* TRANSIT_POLICY=off: as --transit=off */
        if (limit || dir)
            return transit_refuse("TRANSIT_POLICY=off from the environment runs no TRANSIT, so %s has nothing "
                                  "to act on; unset TRANSIT_POLICY or drop the option", sub);
        return 0;
    }

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
    step_summary.active = true;
    step_summary.policy = policy;
    step_summary.mem_limit = mem_limit;
    step_summary.report_dir = report_dir;
    return 0;
}

int transit_local_user_init(spank_t sp)
{
    launched.known = step_summary.active && spank_get_item(sp, S_JOB_ID, &launched.job_id) == ESPANK_SUCCESS &&
                     spank_get_item(sp, S_JOB_STEPID, &launched.step_id) == ESPANK_SUCCESS;
    return 0;
}

/* srun, when the step it launched has ended: one line saying what the step ran with and where its
 * stats are. sbatch and salloc only submit; their steps' sruns print it. */
int transit_local_exit(spank_t sp)
{
    (void)sp;
    if (!step_summary.active || !launched.known || spank_context() != S_CTX_LOCAL)
        return 0;
    char limit[TRANSIT_WORD_MAX + 16] = "physical mode", where[PATH_MAX + 64] = "no stats (no report directory)";
    if (step_summary.mem_limit)
        snprintf(limit, sizeof(limit), "limit %s", step_summary.mem_limit);
    if (step_summary.report_dir)
        snprintf(where, sizeof(where), "stats in %.300s/%u/", step_summary.report_dir, launched.job_id);
    slurm_info("transit: step %u.%u: %s, %s; %s; transit report %u", launched.job_id, launched.step_id,
               step_summary.policy ? step_summary.policy : transit_policy_name(TRANSIT_POLICY_BASE), limit, where,
               launched.job_id);
    return 0;
}
