/* launches.c - the engine's launch event (the recorder's): limit mode's room for the profiled
 * ranges and their replay (a policy that replays the profile prefetches them), then the active
 * policy's own launch (advise's applying halfway through the first iteration after warm-up,
 * hybrid's mover at a phase's first launch). Never on a capturing stream; nothing here
 * synchronizes. */
#include "policy_int.h"
#include "profile.h"

#include <string.h>

/* Whether the profile has ranges for this launch (most launches have none: no driver call). */
static bool has_ranges(uint32_t ordinal)
{
    size_t n = 0;
    if (!__atomic_load_n(&pol.replay, __ATOMIC_ACQUIRE))
        return false;
    pthread_mutex_lock(&pol.prof_lock);
    if (pol.replay)
        transit_ranges_get(pol.ranges, ordinal, &n);
    pthread_mutex_unlock(&pol.prof_lock);
    return n > 0;
}

/* The ordinal's profiled ranges, copied out in batches (no lock is held across a driver call),
 * each widened to the chunks it touches (the driver brings in more than its records name; a
 * chunk the previous range already took is not taken twice): room is made for them (limit
 * mode), then they are prefetched (a policy that replays the profile). */
static void replay_ordinal(const transit_driver_api *drv, const transit_launch *l, CUdevice dev)
{
    bool planned = pol_plans_at_launches(), prefetching = pol_ops->replays_profile;
    transit_range batch[PREFETCH_BATCH];
    uint64_t taken_to = 0;
    for (size_t done = 0;;) {
        size_t n = 0, total = 0, m = 0;
        pthread_mutex_lock(&pol.prof_lock);
        const transit_range *r = pol.replay ? transit_ranges_get(pol.ranges, l->ordinal, &total) : NULL;
        if (r && done < total) {
            n = TRANSIT_MIN(total - done, (size_t)PREFETCH_BATCH);
            memcpy(batch, r + done, n * sizeof *batch);
        }
        pthread_mutex_unlock(&pol.prof_lock);
        if (!n)
            return;
        done += n;
        for (size_t i = 0; i < n; i++) {
            uint64_t lo = TRANSIT_MAX(batch[i].addr & ~(TRANSIT_CHUNK_BYTES - 1), taken_to);
            uint64_t hi = (batch[i].addr + batch[i].bytes + TRANSIT_CHUNK_BYTES - 1) & ~(TRANSIT_CHUNK_BYTES - 1);
            if (lo < hi)
                batch[m++] = (transit_range){.addr = lo, .bytes = hi - lo};
            taken_to = TRANSIT_MAX(taken_to, hi);
        }
        if (planned)
            pol_make_room(drv, batch, m, l->stream);
        for (size_t k = 0; prefetching && k < m; k++)
            pol_prefetch_range(drv, batch[k], dev, PREFETCH_REPLAY, l->stream);
    }
}

void transit_policy_launch(const transit_launch *l)
{
    transit_profile_launch(l->iteration, l->ordinal, l->corr, l->runtime_corr, l->symbol, l->function, l->params,
                           l->extra);
    bool do_replay = (pol_ops->replays_profile || pol_plans_at_launches()) && has_ranges(l->ordinal);
    bool do_own = pol_ops->launch_due && pol_ops->launch_due(l);
    const transit_driver_api *drv;
    CUstreamCaptureMode saved;
    CUdevice dev;
    if (!(do_replay || do_own) || !(drv = transit_act_driver()))
        return;
    bool relaxed = transit_act_relax_capture(drv, &saved);
    if (transit_act_capturing(drv, l->stream)) {
        transit_add(&pol.n.capture_skips, 1);
    } else if (transit_act_current_device(drv, &dev) == CUDA_SUCCESS) {
        if (do_replay)
            replay_ordinal(drv, l, dev);
        if (do_own)
            pol_ops->launch(drv, l, dev);
    }
    transit_act_restore_capture(drv, relaxed, &saved);
}
