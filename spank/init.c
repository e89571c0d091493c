/*
 * init.c - slurm_spank_init, in every context: read plugstack.conf arguments and register
 * the options where users can give them (srun, sbatch/salloc) and where they arrive (slurmstepd).
 */
#include <stdio.h>

#include "spank_transit.h"

int transit_init(spank_t sp, int ac, char **av)
{
    char err[TRANSIT_ERR_MAX], why[TRANSIT_ERR_MAX];
    spank_context_t ctx = spank_context();

    transit_opts_reset(&transit_opts);
    if (transit_conf_parse(&transit_conf, ac, av, err, sizeof(err)) < 0)
        goto fail;
    /* the site's default policy= follows libtransit's rules like a user's --transit= */
    if (transit_conf.policy[0] && transit_conf.lib[0] &&
        transit_opts_check(&transit_opts, &transit_conf, why, sizeof(why)) < 0) {
        snprintf(err, sizeof(err), "plugstack.conf: %.400s", why);
        goto fail;
    }
    if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR && ctx != S_CTX_REMOTE)
        return 0;
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
