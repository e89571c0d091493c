/*
 * options.c - the one option table and its callbacks.
 *
 * Callbacks run in srun/sbatch/salloc (remote == 0), where a bad value must stop the command
 * before a job exists, and again in slurmstepd (remote == 1) with the values srun forwarded.
 * In srun/sbatch/salloc a value is stored only after it passed the checks, so a rejected
 * option changes nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "spank_transit.h"

struct transit_opts transit_opts;

/* sbatch and salloc export each option to the srun steps inside as <this><name>.
 * Slurm formats a bare `--transit` (no value) there as "(null)" (22.05) or "", and srun then
 * passes that string to our callback, and forwards it to slurmstepd. */
#define TRANSIT_ALLOC_ENV_PREFIX "SLURM_SPANK__SLURM_SPANK_OPTION_transit_"
#define TRANSIT_ALLOC_ENV TRANSIT_ALLOC_ENV_PREFIX "transit"
#define SLURM_NULL_VALUE "(null)"
/* What srun, sbatch and salloc exit with after a refused option (Slurm's error_exit). */
#define SLURM_EXIT_ERROR_ENV "SLURM_EXIT_ERROR"
#define SLURM_DEFAULT_EXIT_ERROR 1

enum { OPT_POLICY = 1, OPT_MEM_LIMIT, OPT_REPORT_DIR };

#define TRANSIT_HELP "help" /* --transit=help: what the options and policies are, then exit */

/* One line per policy for --transit=help; a policy libtransit gains without a line here is still
 * listed, with no description. */
static const struct {
    const char *name, *what;
} policy_help[] = {
    {"base", "managed memory only: the driver migrates data on page faults"},
    {"prefetch", "replays the warm-up profile: before each kernel, prefetches what it touched last time"},
    {"advise", "after warm-up, the GPU reads host-resident data in place (zero-copy)"},
    {"hybrid", "keeps the most reused data on the GPU, reads the rest in place (experimental)"},
};

/* "base|prefetch|advise|hybrid|off", from libtransit's list of policies */
static char policy_arginfo[TRANSIT_WORD_MAX * 4];

struct spank_option transit_option_table[] = {
    {"transit", policy_arginfo,
     "[transit] Run the tasks under TRANSIT: host memory extends GPU memory, with this policy, "
     "given with '=' (--transit=advise); no value: $TRANSIT_POLICY, else the site default; "
     "off: no TRANSIT; help: what each policy does.",
     2, OPT_POLICY, transit_opt_policy},
    {"transit-mem-limit", "SIZE",
     "[transit] With --transit: emulate a GPU of SIZE (e.g. 40G, from 256M to 16T) and keep device use "
     "at or below it.",
     1, OPT_MEM_LIMIT, transit_opt_mem_limit},
    {"transit-report-dir", "DIR",
     "[transit] With --transit: write per-rank statistics under DIR/<jobid>/ (an absolute path you "
     "can write, or whose parent you can write).",
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

static bool is_local(void)
{
    spank_context_t ctx = spank_context();
    return ctx == S_CTX_LOCAL || ctx == S_CTX_ALLOCATOR;
}

/* --transit=help, on stdout: what each policy does, what a bare --transit runs here, the options. */
static void print_help(void)
{
    const char *site = transit_conf.policy[0] ? transit_conf.policy : transit_policy_name(TRANSIT_POLICY_BASE);
    printf("TRANSIT: host memory extends GPU memory. Options (srun, sbatch, salloc; the '=' is needed):\n"
           "  --transit=POLICY          run the tasks under TRANSIT with POLICY:\n");
    for (int i = 0; i < transit_policy_count(); i++) {
        const char *name = transit_policy_name((transit_policy)i), *what = "";
        for (size_t k = 0; k < sizeof(policy_help) / sizeof(policy_help[0]); k++)
            what = strcmp(policy_help[k].name, name) ? what : policy_help[k].what;
        printf("      %-9s %s\n", name, what);
    }
    printf("      %-9s no TRANSIT for this step\n"
           "  --transit                 $TRANSIT_POLICY, else this site's default: %s\n"
           "  --transit-mem-limit=SIZE  emulate a GPU of SIZE (256M to 16T, e.g. 40G): limit mode\n"
           "  --transit-report-dir=DIR  per-rank statistics under DIR/<jobid>/ (this site's default: %s)\n"
           "After the job: transit report JOBID. More: docs/usage.md of TRANSIT.\n",
           TRANSIT_OFF, site, transit_conf.report_dir[0] ? transit_conf.report_dir : "none");
    fflush(stdout);
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
    if (is_local()) {
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

/* True when this value of option `opt` came from the job's variable (its name with '_' for '-'):
 * Slurm (spank_process_env_options, in srun, sbatch and salloc) passes the variable's own string,
 * as getenv returns it, to the callback. */
static bool from_job(const char *opt, const char *optarg)
{
    char name[TRANSIT_WORD_MAX];
    snprintf(name, sizeof(name), "%s%s", TRANSIT_ALLOC_ENV_PREFIX, opt);
    for (char *c = name + strlen(TRANSIT_ALLOC_ENV_PREFIX); *c; c++)
        *c = *c == '-' ? '_' : *c;
    return optarg == getenv(name);
}

/* Where the value `optarg` of option `opt` came from. Slurm passes each callback the string it
 * parsed: a word of the command line itself (getopt's optarg points into the process's arguments,
 * which start at argv[0], program_invocation_name), the job's variable (from_job), or in sbatch a
 * word of an #SBATCH line, which sbatch copies out of the script into memory of its own (and
 * passes before the command line's). */
static enum transit_source source_of(const char *opt, const char *optarg)
{
    size_t len;
    if (!is_local() || !optarg)
        return TRANSIT_FROM_COMMAND_LINE;
    if (from_job(opt, optarg))
        return TRANSIT_FROM_JOB;
    transit_command_line(&len);
    uintptr_t at = (uintptr_t)optarg, args = (uintptr_t)program_invocation_name;
    bool in_args = at >= args && at < args + len;
    return !in_args && spank_context() == S_CTX_ALLOCATOR ? TRANSIT_FROM_SCRIPT : TRANSIT_FROM_COMMAND_LINE;
}

#define CMDLINE_MAX (1u << 20) /* the whole command line, as /proc/self/cmdline holds it */

/* True when `word` is what --transit=WORD takes: a policy, off or help. */
static bool is_transit_value(const char *word)
{
    char err[TRANSIT_ERR_MAX];
    transit_policy p;
    return !strcmp(word, TRANSIT_OFF) || !strcmp(word, TRANSIT_HELP) ||
           transit_parse_policy("TRANSIT_POLICY", word, &p, err, sizeof(err)) == 0;
}

/*
 * `srun --transit advise cmd`: --transit takes its value only after '=', so Slurm made `advise` the
 * program (sbatch: the script). Options do not show the command, so it is read from this process's
 * own command line. srun calls this from the option's callback, for a bare --transit: its options
 * come before the program, so the first `--transit` is its own. sbatch opens its script before any
 * option callback, so it calls this from slurm_spank_init (`before_script`): only the words before
 * the first one naming an existing file (the script) are its options; there --transit=help is
 * answered too.
 */
const char *transit_command_line(size_t *len)
{
    static char cmdline[CMDLINE_MAX];
    static ssize_t got_len = -1;
    ssize_t got;
    if (got_len < 0) {
        int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
        got_len = 0;
        while (fd >= 0 && got_len < (ssize_t)sizeof(cmdline) - 1 &&
               (got = read(fd, cmdline + got_len, sizeof(cmdline) - 1 - (size_t)got_len)) > 0)
            got_len += got;
        if (fd >= 0)
            close(fd);
        cmdline[got_len] = '\0';
    }
    *len = (size_t)got_len;
    return cmdline;
}

int transit_check_command_line(bool before_script)
{
    struct stat st;
    size_t len;
    const char *cmdline = transit_command_line(&len);
    if (!len)
        return 0; /* nothing to read: Slurm says the program is missing */
    const char *arg = cmdline + strlen(cmdline) + 1; /* past the command's own name */
    for (; arg < cmdline + len; arg += strlen(arg) + 1) {
        if (!strcmp(arg, "--") || (before_script && arg[0] != '-' && stat(arg, &st) == 0 && S_ISREG(st.st_mode)))
            break;
        if (before_script && !strcmp(arg, "--" "transit=" TRANSIT_HELP)) {
            print_help();
            exit(0);
        }
        if (strcmp(arg, "--transit") != 0)
            continue;
        const char *next = arg + strlen(arg) + 1;
        if (next < cmdline + len && is_transit_value(next)) {
            char shown[TRANSIT_SHOW_MAX];
            transit_show(next, shown, sizeof(shown));
            return transit_refuse("--transit %s: without '=' Slurm runs '%s' as the program; use --transit=%s",
                                  shown, shown, shown);
        }
        if (!before_script)
            break;
    }
    return 0;
}

int transit_opt_policy(int val, const char *optarg, int remote)
{
    (void)val;
    struct transit_opts next = transit_opts;
    next.requested = true;
    next.off = false;
    next.policy[0] = '\0';
    if (!optarg && !remote && is_local() && transit_check_command_line(false) < 0)
        return -1;
    if (is_bare(optarg, remote)) {
        transit_opts = next;
        return 0;
    }
    if (!remote && is_local() && !strcmp(optarg, TRANSIT_HELP)) {
        print_help();
        exit(0);
    }
    if (!strcmp(optarg, TRANSIT_OFF)) {
        next.off = true; /* nothing to check: the tasks are left alone */
        next.off_from = source_of("transit", optarg);
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
    next.mem_limit_from = source_of("transit-mem-limit", optarg);
    transit_opts = next;
    return 0;
}

/* The tasks create DIR/<jobid>/ as the user, and DIR itself when it is missing: the user must be
 * able to write DIR, or its parent when DIR does not exist. srun and sbatch run as the user, so
 * the kernel answers here what it would answer in the tasks (on a file system every node shares). */
static int check_writable(const char *dir)
{
    char parent[PATH_MAX], shown[TRANSIT_SHOW_MAX];
    struct stat st;
    const char *probe = dir;
    if (stat(dir, &st) < 0) {
        snprintf(parent, sizeof(parent), "%s", dir);
        char *slash = strrchr(parent, '/');
        while (slash && slash > parent && slash[1] == '\0') { /* "/a/b/" names /a/b */
            *slash = '\0';
            slash = strrchr(parent, '/');
        }
        if (slash)
            slash[slash == parent ? 1 : 0] = '\0';
        probe = parent;
    }
    if (faccessat(AT_FDCWD, probe, W_OK | X_OK, AT_EACCESS) == 0)
        return 0;
    int why = errno;
    char where[PATH_MAX + 32] = "write in it";
    if (probe != dir)
        snprintf(where, sizeof(where), "create it in %.300s", probe);
    transit_show(dir, shown, sizeof(shown));
    return transit_refuse("--transit-report-dir='%s': uid %u cannot %s (%s); use a directory you can write, "
                          "e.g. $HOME/transit", shown, (unsigned)geteuid(), where, strerror(why));
}

int transit_opt_report_dir(int val, const char *optarg, int remote)
{
    (void)val;
    char err[TRANSIT_ERR_MAX];
    struct transit_opts next = transit_opts;
    if (!remote &&
        transit_check_dir("--transit-report-dir", optarg ? optarg : "", true, err, sizeof(err)) < 0)
        return transit_refuse("%s", err);
    if (!remote && check_writable(optarg) < 0)
        return -1;
    if (store(next.report_dir, sizeof(next.report_dir), "transit-report-dir", NULL, "", optarg ? optarg : "",
              remote) < 0)
        return -1;
    /* DIR/ names DIR: the job's directory is DIR/<jobid>/, not DIR//<jobid>/ */
    for (size_t len = strlen(next.report_dir); len > 1 && next.report_dir[len - 1] == '/'; len--)
        next.report_dir[len - 1] = '\0';
    next.report_dir_from = source_of("transit-report-dir", optarg);
    transit_opts = next;
    return 0;
}
