/*
 * task.c - slurm_spank_task_init (slurmstepd, in each task just before exec, as the user):
 * give a TRANSIT task its environment, or fail it with the one line step.c kept. Everything
 * but the job's own steps is left alone (step.c decides).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "spank_transit.h"
#include "transit.h"

#define GETENV_FIRST_LEN 256

int transit_getenv_alloc(spank_t sp, const char *name, char **out)
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

int transit_task_init(spank_t sp)
{
    char err[TRANSIT_ERR_MAX] = "";
    char *ld_preload = NULL, *pythonpath = NULL;
    transit_env_var vars[TRANSIT_TASK_ENV_MAX];
    int nvars = 0, rc = -1;

    if (!spank_remote(sp) || !transit_step.active)
        return 0;
    if (transit_step.error[0]) {
        snprintf(err, sizeof(err), "%s", transit_step.error);
        goto fail;
    }
    if (transit_getenv_alloc(sp, "LD_PRELOAD", &ld_preload) < 0 ||
        transit_getenv_alloc(sp, "PYTHONPATH", &pythonpath) < 0) {
        snprintf(err, sizeof(err), "cannot read the task's LD_PRELOAD/PYTHONPATH");
        goto fail;
    }
    transit_task_request req = {
        .policy = transit_step.policy,
        .mem_limit = transit_step.mem_limit,
        .out_dir = transit_step.job_dir[0] ? transit_step.job_dir : NULL,
        .lib_path = transit_conf.lib,
        .hook_dir = transit_conf.hook_dir[0] ? transit_conf.hook_dir : NULL,
        .ld_preload = ld_preload,
        .pythonpath = pythonpath,
    };
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
