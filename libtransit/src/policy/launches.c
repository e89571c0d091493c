/* launches.c - what the policies do at a kernel launch (the recorder's launch event): prefetch's
 * replay of the profiled ranges, limit mode's room for them, advise's applying halfway through
 * the first iteration after warm-up, and hybrid's mover at a phase's first launch. Never on a
 * capturing stream; nothing here synchronizes. */
#include "policy_int.h"
#include "profile.h"
#include "recorder.h"

#include <string.h>

/* ---- called by the recorder ---- */

/* Whether the profile has ranges for this launch (most launches have none: no driver call). */
bool pol_has_ranges(uint32_t ordinal)
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
 * mode), then they are prefetched (prefetch policy). */
void pol_replay_ordinal(const transit_driver_api *drv, const transit_launch *l, CUdevice dev)
{
    bool planned = pol_plans_at_launches(), prefetching = transit_g.cfg.policy == TRANSIT_POLICY_PREFETCH;
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
    const transit_config *c = &transit_g.cfg;
    transit_profile_launch(l->iteration, l->ordinal, l->corr, l->runtime_corr, l->symbol, l->function, l->params,
                           l->extra);
    uint32_t prev = transit_recorder_prev_iteration_launches();
    bool do_replay =
        (c->policy == TRANSIT_POLICY_PREFETCH || pol_plans_at_launches()) && pol_has_ranges(l->ordinal);
    bool do_advise = c->policy == TRANSIT_POLICY_ADVISE && !__atomic_load_n(&pol.advise_applied, __ATOMIC_ACQUIRE) &&
                     transit_decide_advise_at_launch(l->iteration, c->warmup_iters, l->ordinal, prev);
    bool do_move = c->policy == TRANSIT_POLICY_HYBRID && pol_mover_starts_phase(l->ordinal);
    const transit_driver_api *drv;
    CUstreamCaptureMode saved;
    CUdevice dev;
    if (!(do_replay || do_advise || do_move) || !(drv = transit_act_driver()))
        return;
    bool relaxed = transit_act_relax_capture(drv, &saved);
    if (transit_act_capturing(drv, l->stream)) {
        transit_add(&pol.n.capture_skips, 1);
    } else if (transit_act_current_device(drv, &dev) == CUDA_SUCCESS) {
        if (do_replay)
            pol_replay_ordinal(drv, l, dev);
        if (do_advise)
            pol_advise_all(drv, dev);
        if (do_move)
            pol_mover_launch(drv, l);
    }
    transit_act_restore_capture(drv, relaxed, &saved);
}
