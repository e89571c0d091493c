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

/* "NAME=value" for the name in the first `n` bytes of `name`, malloc'd; NULL when out of memory. */
static char *env_entry(const char *name, size_t n, const char *value)
{
    size_t size = n + 1 + strlen(value) + 1;
    char *s = malloc(size);
    if (s)
        snprintf(s, size, "%.*s=%s", (int)n, name, value);
    return s;
}

/*
 * --export decides what of the user's environment the tasks get. Slurm builds the tasks'
 * environment from it after the plugin ran, and keeps the option from plugins, so it is read here
 * and the TRANSIT_* part built as Slurm builds it. sbatch works it out from its command line, else
 * SBATCH_EXPORT, else the script's #SBATCH lines, and puts it in SLURM_EXPORT_ENV (for the job's
 * sruns) unless it is ALL: that is read here, unless the variable was set when sbatch started
 * (sbatch leaves it then). Otherwise the option is read from the command line (`--export=V`,
 * `--export V`; the last one counts, as in Slurm), else from the variable that stands for it
 * (srun: SRUN_EXPORT_ENV, else SLURM_EXPORT_ENV; sbatch: SBATCH_EXPORT). slurmstepd checks the
 * environment Slurm really built as well (step.c).
 *
 * Without --export the tasks get all of the user's environment. A list goes item by item, a later
 * item over an earlier one: NAME=value sets NAME, a bare NAME gives the user's value where there is
 * one. srun and sbatch (Slurm 22.05, as measured on the dev cluster) differ in ALL and NONE (in any
 * case): srun ignores NONE and what follows it, and an ALL before it puts the user's environment
 * over all the items; sbatch reads NONE as a variable's name (NONE alone: no variables), and an ALL
 * puts the user's environment over the items before it only. sbatch's list is the job's
 * environment, which each of its steps' sruns filters again with SLURM_EXPORT_ENV.
 */
bool transit_export_env_preset;
static char *export_buf;      /* the --export that counts, split in place */
static char **export_items;   /* its items (srun: up to NONE), NULL-terminated; NULL: no --export */
static bool export_by_srun;   /* read as srun reads it, else as sbatch does */

/* The next item of the --export list at *rest, NUL-terminated in place, as Slurm splits the list:
 * at a comma outside quotes, an item wholly in quotes without them. NULL at the end. */
static char *next_item(char **rest)
{
    char *s = *rest;
    bool in_single = false, in_double = false;
    size_t i = 0;
    if (!*s)
        return NULL;
    for (; s[i] && (s[i] != ',' || in_single || in_double); i++) {
        if (s[i] == '\'')
            in_single = !in_single;
        else if (s[i] == '"')
            in_double = !in_double;
    }
    *rest = s[i] ? s + i + 1 : s + i;
    s[i] = '\0';
    /* closed quotes: s[0] opened one and a later byte closed it, so i >= 2 */
    if (!in_single && !in_double && (s[0] == '\'' || s[0] == '"') && s[i - 1] == s[0]) {
        s[i - 1] = '\0';
        return s + 1;
    }
    return s;
}

/* Reads the --export that counts into export_items. 0, or -1 when out of memory. */
static int read_exports(void)
{
    const char *list = NULL;
    free(export_buf);
    free(export_items);
    export_buf = NULL;
    export_items = NULL;
    export_by_srun = spank_context() == S_CTX_LOCAL;
    if (!strcmp(program_invocation_short_name, "sbatch") && !transit_export_env_preset) {
        list = getenv("SLURM_EXPORT_ENV");
    } else {
        size_t len;
        const char *cmdline = transit_command_line(&len);
        for (const char *arg = len ? cmdline + strlen(cmdline) + 1 : cmdline; arg < cmdline + len;
             arg += strlen(arg) + 1) {
            if (!strcmp(arg, "--"))
                break;
            const char *next = arg + strlen(arg) + 1;
            if (!strncmp(arg, "--export=", 9))
                list = arg + 9;
            else if (!strcmp(arg, "--export") && next < cmdline + len)
                list = next;
        }
        if (!list)
            list = !export_by_srun               ? getenv("SBATCH_EXPORT")
                   : getenv("SRUN_EXPORT_ENV") ? getenv("SRUN_EXPORT_ENV")
                                               : getenv("SLURM_EXPORT_ENV");
    }
    if (!list)
        return 0;
    size_t count = 2; /* items, at most one more than the commas; the NULL */
    for (const char *c = list; *c; c++)
        count += *c == ',';
    export_buf = strdup(list);
    export_items = calloc(count, sizeof(*export_items));
    if (!export_buf || !export_items)
        return -1;
    size_t n = 0;
    for (char *rest = export_buf, *item; (item = next_item(&rest)) != NULL;) {
        if (export_by_srun && !strcasecmp(item, "NONE"))
            break;
        export_items[n++] = item;
    }
    return 0;
}

/* The user's value of the variable whose name is the first `n` bytes of `name`, or NULL. */
static const char *user_value(const char *name, size_t n)
{
    for (char **e = environ; *e; e++)
        if (!strncmp(*e, name, n) && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

/* The value Slurm gives the tasks, before the plugin's own, of the variable whose name is the
 * first `n` bytes of `name`: from --export and the user's environment; NULL when none. */
static const char *task_value(const char *name, size_t n)
{
    const char *user = user_value(name, n), *value = NULL;
    bool all = false;
    if (!export_items)
        return user;
    for (char **item = export_items; *item; item++) {
        if (!strcasecmp(*item, "ALL")) {
            all = true;
            if (user && !export_by_srun) /* sbatch: the user's over the items before */
                value = user;
        } else if (!strncmp(*item, name, n) && (*item)[n] == '=') {
            value = *item + n + 1;
        } else if (!strncmp(*item, name, n) && (*item)[n] == '\0' && user) {
            value = user;
        }
    }
    if (all && export_by_srun && user) /* srun: the user's over all the items */
        return user;
    return value;
}

static const char *task_getenv(const char *name)
{
    return task_value(name, strlen(name));
}

/* The TRANSIT_* part of the environment the tasks will get: the variables of the user's
 * environment and of --export as Slurm passes them on, except those the plugin sets, then the
 * plugin's. 0, or -1 when out of memory. */
static int task_environment(const char *policy, const char *mem_limit, const char *report_dir, char ***out)
{
    const char *own[][2] = {{"TRANSIT_POLICY", policy}, {"TRANSIT_MEM_LIMIT", mem_limit}, {"TRANSIT_OUT", report_dir}};
    size_t n = 0, nitems = 0, count = 0, nown = sizeof(own) / sizeof(own[0]);
    for (char **e = environ; *e; e++)
        count++;
    for (char **item = export_items; item && *item; item++)
        nitems++;
    count += nitems;
    char **envp = calloc(count + nown + 1, sizeof(*envp));
    if (!envp)
        return -1;
    for (size_t i = 0; i < count; i++) {
        const char *e = i < nitems ? export_items[i] : environ[i - nitems], *value;
        size_t len = strcspn(e, "=");
        bool skip = strncmp(e, ENV_PREFIX, strlen(ENV_PREFIX)) != 0 || !e[len];
        for (size_t k = 0; k < nown && !skip; k++) /* the plugin sets these itself */
            skip = own[k][1] && len == strlen(own[k][0]) && !strncmp(e, own[k][0], len);
        for (size_t k = 0; k < n && !skip; k++) /* each variable once */
            skip = !strncmp(envp[k], e, len + 1);
        if (skip || !(value = task_value(e, len)))
            continue;
        if (!(envp[n++] = env_entry(e, len, value)))
            goto oom;
    }
    for (size_t k = 0; k < nown; k++)
        if (own[k][1] && !(envp[n++] = env_entry(own[k][0], strlen(own[k][0]), own[k][1])))
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

    if (read_exports() < 0)
        return transit_refuse("out of memory reading --export");
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
