/*
 * init.c - slurm_spank_init, in every context: read and check plugstack.conf's arguments, and
 * register the options where users can give them (srun, sbatch/salloc) and where they arrive
 * (slurmstepd).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spank_transit.h"

int transit_init(spank_t sp, int ac, char **av)
{
    char err[TRANSIT_ERR_MAX];
    spank_context_t ctx = spank_context();

    transit_opts_reset(&transit_opts);
    transit_options_init();
    if (transit_conf_parse(&transit_conf, ac, av, err, sizeof(err)) < 0 ||
        transit_conf_check(&transit_conf, err, sizeof(err)) < 0)
        goto fail;
    if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR && ctx != S_CTX_REMOTE)
        return 0;
    /* sbatch (the allocator that reads a script) opens the script before any option callback */
    if (ctx == S_CTX_ALLOCATOR && !strcmp(program_invocation_short_name, "sbatch")) {
        if (transit_check_command_line(true) < 0)
            return -1;
        transit_export_env_preset = getenv("SLURM_EXPORT_ENV") != NULL;
    }
    for (struct spank_option *opt = transit_option_table; opt->name; opt++) {
        spank_err_t rc = spank_option_register(sp, opt);
        if (rc != ESPANK_SUCCESS) {
            snprintf(err, sizeof(err), "cannot register --%s: %s", opt->name, spank_strerror(rc));
            goto fail;
        }
    }
    return 0;

fail:
    slurm_error("transit: %s", err);
    return -1;
}
