/*
 * plugin.c - the SPANK entry points: a thin dispatcher to one file per context.
 *
 *   slurm_spank_init           every context: plugstack.conf arguments, option registration (init.c)
 *   slurm_spank_init_post_opt  local/allocator: validate before the job exists (local.c)
 *   slurm_spank_task_init      remote: the task's environment (task.c)
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
    spank_context_t ctx = spank_context();
    if (ctx == S_CTX_LOCAL || ctx == S_CTX_ALLOCATOR)
        return transit_local_post_opt(sp);
    return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    return transit_task_init(sp);
}
