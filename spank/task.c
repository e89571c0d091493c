/*
 * task.c - slurm_spank_task_init (slurmstepd, in each task just before exec, as the user):
 * give a TRANSIT task its environment. Everything but the job's own steps is left alone.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <slurm/slurm.h>

#include "spank_transit.h"
#include "transit.h"

#define REPORT_DIR_MODE 0775
#define GETENV_FIRST_LEN 256

/* Batch scripts, salloc's interactive shell and the extern step only start other steps. */
static bool is_job_step(uint32_t stepid)
{
    return stepid != SLURM_BATCH_SCRIPT && stepid != SLURM_EXTERN_CONT &&
           stepid != SLURM_INTERACTIVE_STEP;
}

/* The task's value of `name` in *out (malloc'd, NULL when unset); the buffer grows until the
 * whole value fits. 0, or -1 on failure. */
static int task_getenv(spank_t sp, const char *name, char **out)
{
    *out = NULL;
    for (size_t len = GETENV_FIRST_LEN; len <= INT_MAX; len *= 2) {
        char *buf = malloc(len);
        if (!buf)
            return -1;
        spank_err_t rc = spank_getenv(sp, name, buf, (int)len);
        if (rc == ESPANK_SUCCESS) {
            *out = buf;
            return 0;
        }
        free(buf);
        if (rc == ESPANK_ENV_NOEXIST)
            return 0;
        if (rc != ESPANK_NOSPACE)
            return -1;
    }
    return -1;
}

/* mkdir -p; existing directories are fine (every task of the job tries). */
static int make_dirs(char *path, char *err, size_t errlen)
{
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(path, REPORT_DIR_MODE) < 0 && errno != EEXIST) {
            snprintf(err, errlen, "cannot create report directory %.300s: %s", path, strerror(errno));
            return -1;
        }
        *p = saved;
        if (saved == '\0')
            return 0;
    }
}

int transit_task_init(spank_t sp)
{
    char err[TRANSIT_ERR_MAX] = "";
    char out_dir[PATH_MAX];
    char *ld_preload = NULL, *pythonpath = NULL;
    transit_env_var vars[TRANSIT_TASK_ENV_MAX];
    int nvars = 0, rc = -1;
    uint32_t jobid, stepid;

    if (!spank_remote(sp) || !transit_opts.requested || transit_opts.off)
        return 0;
    if (spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_ID, &jobid) != ESPANK_SUCCESS) {
        snprintf(err, sizeof(err), "cannot read the job and step id");
        goto fail;
    }
    if (!is_job_step(stepid))
        return 0;

    const char *report_dir = transit_effective_report_dir(&transit_opts, &transit_conf);
    const char *out = NULL;
    if (report_dir) {
        int n = snprintf(out_dir, sizeof(out_dir), "%s/%u/", report_dir, jobid);
        if (n < 0 || (size_t)n >= sizeof(out_dir)) {
            snprintf(err, sizeof(err), "report directory %.300s is too long", report_dir);
            goto fail;
        }
        if (make_dirs(out_dir, err, sizeof(err)) < 0)
            goto fail;
        out = out_dir;
    }
    if (task_getenv(sp, "LD_PRELOAD", &ld_preload) < 0 || task_getenv(sp, "PYTHONPATH", &pythonpath) < 0) {
        snprintf(err, sizeof(err), "cannot read the task's LD_PRELOAD/PYTHONPATH");
        goto fail;
    }

    transit_task_request req = {
        .policy = transit_effective_policy(&transit_opts, &transit_conf),
        .mem_limit = transit_opts.mem_limit[0] ? transit_opts.mem_limit : NULL,
        .out_dir = out,
        .lib_path = transit_conf.lib[0] ? transit_conf.lib : NULL,
        .hook_dir = transit_conf.hook_dir[0] ? transit_conf.hook_dir : NULL,
        .ld_preload = ld_preload,
        .pythonpath = pythonpath,
    };
    if (!req.lib_path) {
        snprintf(err, sizeof(err), "plugstack.conf gives no lib= for spank_transit.so");
        goto fail;
    }
    nvars = transit_task_env(&req, vars, err, sizeof(err));
    if (nvars < 0) {
        nvars = 0;
        goto fail;
    }
    for (int i = 0; i < nvars; i++) {
        spank_err_t serr = spank_setenv(sp, vars[i].name, vars[i].value, 1);
        if (serr != ESPANK_SUCCESS) {
            snprintf(err, sizeof(err), "cannot set %s: %s", vars[i].name, spank_strerror(serr));
            goto fail;
        }
    }
    rc = 0;

fail:
    if (rc < 0)
        slurm_error("transit: %s", err);
    transit_task_env_free(vars, nvars);
    free(ld_preload);
    free(pythonpath);
    return rc;
}
