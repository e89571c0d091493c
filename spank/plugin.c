/*
 * plugin.c - the SPANK entry points: a thin dispatcher to one file per context.
 *
 *   slurm_spank_init           every context: plugstack.conf arguments, option registration (init.c)
 *   slurm_spank_init_post_opt  srun/sbatch/salloc: validate before the job exists (local.c);
 *                              slurmstepd, as root: what the step gets, the job's directory (step.c)
 *   slurm_spank_local_user_init srun, when it launches its step: which job and step (a heterogeneous
 *                              job's component is a job of its own) (local.c)
 *   slurm_spank_user_init      slurmstepd, as the user: the user's job directory, the step file (step.c)
 *   slurm_spank_task_init      slurmstepd, in each task: the task's environment (task.c)
 *   slurm_spank_exit           srun, after its step: one line on what it ran with (local.c)
 */
#include "spank_transit.h"

SPANK_PLUGIN(transit, 1);

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    return transit_init(sp, ac, av);
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    switch (spank_context()) {
    case S_CTX_LOCAL:
    case S_CTX_ALLOCATOR:
        return transit_local_post_opt(sp);
    case S_CTX_REMOTE:
        return transit_step_post_opt(sp);
    default:
        return 0;
    }
}

int slurm_spank_local_user_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    return transit_local_user_init(sp);
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    return spank_context() == S_CTX_REMOTE ? transit_step_user_init(sp) : 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    return transit_task_init(sp);
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    return spank_context() == S_CTX_LOCAL ? transit_local_exit(sp) : 0;
}
