/*
 * step.c - slurmstepd, once per node and step, before any task exists:
 *   slurm_spank_init_post_opt (as root): what the step gets (policy, limit, report directory),
 *     and the job's directory in the site's report_dir=, created and given to the job's user;
 *   slurm_spank_user_init (as the user): the job's directory in a --transit-report-dir the user
 *     chose, and on the step's first node the step file <job dir>/step-<stepid>.json.
 * A failure here is kept in transit_step.error and reported by every task (task.c), where the
 * user sees it; slurmstepd's own log is not where a user looks.
 *
 * The privileged code trusts nothing below the site's report directory: the job's directory is
 * created with mkdirat() and opened with O_NOFOLLOW relative to the report directory, and owner
 * and mode are set on the opened directory (fchown, fchmod), so a symbolic link or a directory
 * planted where the job's directory goes is refused, never followed.
 */
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>

#include "config.h"
#include "json.h"
#include "spank_transit.h"

#define STEP_SCHEMA "transit.step/1"
#define STEP_JSON_MIN 16384 /* plus room for the node list */

struct transit_step transit_step;

/* The job's TRANSIT_POLICY and TRANSIT_MEM_LIMIT, which its tasks inherit. */
static char env_policy[TRANSIT_WORD_MAX], env_limit[TRANSIT_WORD_MAX];

static void step_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void step_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(transit_step.error, sizeof(transit_step.error), fmt, ap);
    va_end(ap);
}

/* Batch scripts, salloc's interactive shell and the extern step only start other steps. */
static bool is_job_step(uint32_t stepid)
{
    return stepid != SLURM_BATCH_SCRIPT && stepid != SLURM_EXTERN_CONT && stepid != SLURM_INTERACTIVE_STEP;
}

/* The job's value of `name` in buf, or NULL when unset; a value that does not fit is an error
 * (srun refused it already, so it reached the job some other way). */
static const char *job_getenv(spank_t sp, const char *name, char *buf, int len)
{
    spank_err_t rc = spank_getenv(sp, name, buf, len);
    if (rc == ESPANK_NOSPACE)
        step_error("%s in the job's environment is longer than %d characters", name, len - 1);
    return rc == ESPANK_SUCCESS ? buf : NULL;
}

/*
 * Opens <base>/<jobid>, creating it when missing, owned by the job's user with the site's mode.
 * As root (privileged) a directory that exists already must belong to the user, or to root (the
 * same job's step on another node is creating it); it is then given to the user. As the user, it
 * must be the user's own, and `create_base` creates a missing <base> first (its parent exists:
 * srun checked). -1 with transit_step.error set on any failure.
 */
static int open_job_dir(const char *base, bool privileged, bool create_base)
{
    const char *who = privileged ? "an administrator must remove it" : "remove it";
    char name[16];
    struct stat st;
    int basefd = -1, fd = -1;

    snprintf(name, sizeof(name), "%u", transit_step.job_id);
    if (create_base && mkdir(base, 0777) < 0 && errno != EEXIST) {
        step_error("cannot create the report directory %.300s: %s", base, strerror(errno));
        goto fail;
    }
    if ((basefd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        step_error("cannot open the report directory %.300s: %s", base, strerror(errno));
        goto fail;
    }
    bool created = mkdirat(basefd, name, TRANSIT_JOB_DIR_MODE) == 0;
    if (!created && errno != EEXIST) {
        step_error("cannot create %.300s/%s: %s", base, name, strerror(errno));
        goto fail;
    }
    fd = openat(basefd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        int why = errno;
        struct stat found; /* only to say what it is: the refusal above did not follow it */
        bool link = fstatat(basefd, name, &found, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(found.st_mode);
        step_error("%.300s/%s is not a directory this job can use (%s); %s", base, name,
                   link ? "a symbolic link" : strerror(why), who);
        goto fail;
    }
    uid_t expected = privileged ? transit_step.uid : geteuid();
    if (st.st_uid != expected && !(privileged && st.st_uid == 0)) {
        step_error("%.300s/%s belongs to uid %u, not to the job's user (uid %u); %s", base, name,
                   (unsigned)st.st_uid, (unsigned)expected, who);
        goto fail;
    }
    if (st.st_uid != expected) { /* root's, fresh from mkdirat here or on another node */
        if (fchown(fd, transit_step.uid, transit_step.gid) < 0) {
            step_error("cannot give %.300s/%s to uid %u: %s", base, name, (unsigned)transit_step.uid,
                       strerror(errno));
            goto fail;
        }
        created = true;
    }
    if (created && fchmod(fd, transit_conf.job_dir_mode) < 0) {
        step_error("cannot set the mode of %.300s/%s: %s", base, name, strerror(errno));
        goto fail;
    }
    close(basefd);
    return fd;
fail:
    if (fd >= 0)
        close(fd);
    if (basefd >= 0)
        close(basefd);
    return -1;
}

/*
 * The TRANSIT_* variables the tasks will read, checked as libtransit will read them. srun checked
 * its own environment, but `--export=ALL,TRANSIT_...=...` (srun or sbatch) builds the job's
 * environment past it: this is the first place the plugin sees that environment, and the step
 * fails here, before any task runs the user's program, with the line libtransit would print.
 */
static void check_job_environment(spank_t sp)
{
    char **job_env = NULL, **envp = NULL, err[TRANSIT_ERR_MAX];
    size_t n = 0, count = 0;
    if (spank_get_item(sp, S_JOB_ENV, &job_env) != ESPANK_SUCCESS || !job_env) {
        step_error("cannot read the job's environment from Slurm");
        return;
    }
    for (char **e = job_env; *e; e++)
        count++;
    if (!(envp = calloc(count + 1, sizeof(*envp)))) {
        step_error("out of memory checking the job's environment");
        return;
    }
    /* what the tasks get in place of the job's own: the option's policy and limit, the job's
     * directory as TRANSIT_OUT (checked where it is created) */
    bool own_out = transit_effective_report_dir(&transit_opts, &transit_conf) != NULL;
    for (char **e = job_env; *e; e++) {
        if (strncmp(*e, "TRANSIT_", 8) != 0 || (transit_opts.policy[0] && !strncmp(*e, "TRANSIT_POLICY=", 15)) ||
            (transit_opts.mem_limit[0] && !strncmp(*e, "TRANSIT_MEM_LIMIT=", 18)) ||
            (own_out && !strncmp(*e, "TRANSIT_OUT=", 12)))
            continue;
        envp[n++] = *e;
    }
    if (transit_env_check(envp, err, sizeof(err)) < 0) {
        step_error("%s (in the job's environment: --export or the submitting shell)", err);
        transit_step.env_refused = true;
    }
    free(envp);
}

int transit_step_post_opt(spank_t sp)
{
    memset(&transit_step, 0, sizeof(transit_step));
    if (!transit_opts.requested || transit_opts.off)
        return 0;
    if (spank_get_item(sp, S_JOB_STEPID, &transit_step.step_id) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_ID, &transit_step.job_id) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_UID, &transit_step.uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_GID, &transit_step.gid) != ESPANK_SUCCESS) {
        transit_step.active = true;
        step_error("cannot read the job's ids from Slurm");
        return 0;
    }
    if (!is_job_step(transit_step.step_id))
        return 0;
    transit_step.policy = transit_effective_policy(
        &transit_opts, job_getenv(sp, "TRANSIT_POLICY", env_policy, sizeof(env_policy)), &transit_conf);
    if (transit_step.policy && !strcmp(transit_step.policy, TRANSIT_OFF) && !transit_step.error[0])
        return 0; /* TRANSIT_POLICY=off in the job's environment: as --transit=off */
    transit_step.active = true;
    transit_step.mem_limit = transit_opts.mem_limit[0]
                                 ? transit_opts.mem_limit
                                 : job_getenv(sp, "TRANSIT_MEM_LIMIT", env_limit, sizeof(env_limit));
    if (!transit_step.error[0])
        check_job_environment(sp);

    const char *report_dir = transit_effective_report_dir(&transit_opts, &transit_conf);
    if (!report_dir)
        return 0;
    int n = snprintf(transit_step.job_dir, sizeof(transit_step.job_dir), "%s/%u/", report_dir,
                     transit_step.job_id);
    if (n < 0 || (size_t)n >= sizeof(transit_step.job_dir)) {
        step_error("the report directory %.300s is too long", report_dir);
        return 0;
    }
    if (!transit_opts.report_dir[0]) { /* the site's: root creates the job's directory */
        int fd = open_job_dir(report_dir, true, false);
        if (fd >= 0)
            close(fd);
    }
    return 0;
}

/* <job dir>/step-<stepid>.json, written as the user through a temporary file and a rename. */
static int write_step_file(spank_t sp, int dirfd)
{
    char tmp[64], final[64], user_buf[1024];
    char *nodes = NULL;
    uint32_t ntasks = 0;
    struct passwd pw, *found = NULL;
    struct timespec now;
    uint64_t limit = 0;
    transit_policy policy = TRANSIT_POLICY_BASE;
    int fd, rc = -1;
    char err[TRANSIT_ERR_MAX];

    /* a step refused for its environment is recorded with what could be read of it */
    const char *refused = transit_step.env_refused ? transit_step.error : NULL;
    if (transit_step.policy &&
        transit_parse_policy("TRANSIT_POLICY", transit_step.policy, &policy, err, sizeof(err)) && !refused)
        goto bad_value;
    if (transit_step.mem_limit &&
        transit_parse_size("TRANSIT_MEM_LIMIT", transit_step.mem_limit, &limit, err, sizeof(err)) && !refused)
        goto bad_value;
    if (transit_getenv_alloc(sp, "SLURM_STEP_NODELIST", &nodes) < 0) {
        step_error("cannot read SLURM_STEP_NODELIST for the step file");
        return -1;
    }
    (void)spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &ntasks);
    (void)getpwuid_r(transit_step.uid, &pw, user_buf, sizeof(user_buf), &found);
    clock_gettime(CLOCK_REALTIME, &now);

    size_t cap = STEP_JSON_MIN + 6 * (nodes ? strlen(nodes) : 0);
    jbuf b = {.p = malloc(cap), .cap = cap};
    if (!b.p) {
        step_error("out of memory writing the step file");
        goto out;
    }
    jb_printf(&b, "{\"schema\": \"%s\", \"job_id\": \"%u\", \"step_id\": \"%u\", \"user\": ", STEP_SCHEMA,
              transit_step.job_id, transit_step.step_id);
    jb_str(&b, found ? pw.pw_name : NULL);
    jb_printf(&b, ", \"uid\": %u, \"policy\": \"%s\", \"mode\": \"%s\", \"limit_bytes\": ",
              (unsigned)transit_step.uid, transit_policy_name(policy), limit ? "limit" : "physical");
    if (limit)
        jb_printf(&b, "%llu", (unsigned long long)limit);
    else
        jb_printf(&b, "null");
    jb_printf(&b, ", \"report_dir\": ");
    jb_str(&b, transit_effective_report_dir(&transit_opts, &transit_conf));
    jb_printf(&b, ", \"options\": {\"transit\": ");
    jb_str(&b, transit_opts.policy[0] ? transit_opts.policy : NULL);
    jb_printf(&b, ", ");
    if (transit_opts.mem_limit[0]) {
        jb_printf(&b, "\"transit-mem-limit\": ");
        jb_str(&b, transit_opts.mem_limit);
        jb_printf(&b, ", ");
    }
    if (transit_opts.report_dir[0]) {
        jb_printf(&b, "\"transit-report-dir\": ");
        jb_str(&b, transit_opts.report_dir);
        jb_printf(&b, ", ");
    }
    jb_trim_comma(&b);
    jb_printf(&b, "}, \"nodes\": ");
    jb_str(&b, nodes);
    jb_printf(&b, ", \"ntasks\": %u, \"start_unix\": %.3f, \"refused\": ", ntasks,
              (double)now.tv_sec + now.tv_nsec / 1e9);
    jb_str(&b, refused);
    jb_printf(&b, "}\n");
    if (b.overflow) {
        step_error("the step file does not fit in %zu bytes", cap);
        goto out;
    }

    snprintf(final, sizeof(final), "step-%u.json", transit_step.step_id);
    snprintf(tmp, sizeof(tmp), ".step-%u.json.%ld.tmp", transit_step.step_id, (long)getpid());
    /* the job directory's mode without execute bits, as libtransit gives the stats files */
    mode_t mode = transit_conf.job_dir_mode & 0666;
    fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    bool written = fd >= 0 && fchmod(fd, mode) == 0 && write(fd, b.p, b.len) == (ssize_t)b.len;
    if (fd >= 0 && close(fd) < 0)
        written = false;
    if (!written || renameat(dirfd, tmp, dirfd, final) < 0) {
        step_error("cannot write %.300s%s: %s", transit_step.job_dir, final, strerror(errno));
        if (fd >= 0)
            unlinkat(dirfd, tmp, 0);
        goto out;
    }
    rc = 0;
out:
    free(b.p);
    free(nodes);
    return rc;
bad_value:
    step_error("%s", err);
    return -1;
}

int transit_step_user_init(spank_t sp)
{
    uint32_t nodeid = 0;
    if (!transit_step.active || (transit_step.error[0] && !transit_step.env_refused) || !transit_step.job_dir[0])
        return 0;
    const char *report_dir = transit_effective_report_dir(&transit_opts, &transit_conf);
    int fd = open_job_dir(report_dir, false, transit_opts.report_dir[0] != '\0');
    if (fd < 0)
        return 0;
    if (spank_get_item(sp, S_JOB_NODEID, &nodeid) == ESPANK_SUCCESS && nodeid == 0)
        (void)write_step_file(sp, fd);
    close(fd);
    return 0;
}
