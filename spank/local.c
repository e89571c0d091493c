/*
 * local.c - srun, sbatch and salloc, after all options are parsed: the last check before the
 * job is submitted, so that a request the tasks would refuse fails here with one line.
 */
#include "spank_transit.h"

int transit_local_post_opt(spank_t sp)
{
    (void)sp;
    char err[TRANSIT_ERR_MAX];

    if (!transit_opts.requested) {
        if (transit_opts.mem_limit[0] || transit_opts.report_dir[0]) {
            slurm_error("transit: --transit-mem-limit and --transit-report-dir need --transit");
            return -1;
        }
        return 0;
    }
    if (transit_opts.off)
        return 0;
    if (transit_opts_check(&transit_opts, &transit_conf, err, sizeof(err)) < 0) {
        slurm_error("transit: %s", err);
        return -1;
    }
    return 0;
}
