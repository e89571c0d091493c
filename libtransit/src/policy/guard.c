/* guard.c - hybrid's guard in the live engine (its decision: model/guard.h). At the first profile's
 * end hybrid's placement is planned but held: the tick applies advise (SetAccessedBy; in limit
 * mode its fill follows as under advise), and the steps after advise's placement settled are
 * timed from the iteration marks. Then the tick reads where the profile's chunks are (advise's
 * placement, from the page tables), hybrid's placement and mover apply, and its steps are timed.
 * Blocks, not alternation: each switch moves up to L of placement, so the guard switches at most
 * twice and leaves out the step each switch runs in. If advise is faster, its placement as read
 * is applied in the place of hybrid's (the mover stops) for the rest of the run. */
#include "guard.h"
#include "host_residency.h"
#include "iteration.h"
#include "policy_int.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Advise's block waits at most this many marks after advise applied for its fill to settle. */
#define GUARD_FILL_WAIT 4

/* By guard_stage (policy_int.h). */
static const char *const stage_names[] = {"waiting",          "measuring-advise", "measuring-advise",
                                          "measuring-advise", "measuring-hybrid", "measuring-hybrid",
                                          "decided",          "decided",          "failed"};

static int stage_now(void)
{
    if (transit_g.cfg.policy != TRANSIT_POLICY_HYBRID || !transit_g.cfg.hybrid_guard)
        return GUARD_OFF;
    return __atomic_load_n(&pol.guard_stage, __ATOMIC_ACQUIRE);
}

static void set_stage(int stage)
{
    __atomic_store_n(&pol.guard_stage, stage, __ATOMIC_RELEASE);
}

const char *pol_guard_state_name(void)
{
    int s = stage_now();
    return s == GUARD_OFF ? "off" : stage_names[s];
}

const char *pol_guard_kept_name(void)
{
    int k = __atomic_load_n(&pol.guard_kept, __ATOMIC_ACQUIRE);
    return k == TRANSIT_GUARD_HYBRID ? "hybrid" : k == TRANSIT_GUARD_ADVISE ? "advise" : NULL;
}

int pol_guard_on_plan(void)
{
    pthread_mutex_lock(&pol.guard_lock);
    int stage = stage_now(), what = GUARD_PLAN_APPLY;
    if (stage == GUARD_WAITING) {
        set_stage(GUARD_ADVISE_DUE);
        what = GUARD_PLAN_HOLD;
    } else if (stage == GUARD_ADVISE_DUE || stage == GUARD_ADVISE || stage == GUARD_READ_DUE) {
        what = GUARD_PLAN_HOLD; /* the newest plan applies once advise's block is measured */
    } else if (stage == GUARD_REVERTING ||
               (stage == GUARD_DECIDED && __atomic_load_n(&pol.guard_kept, __ATOMIC_ACQUIRE) == TRANSIT_GUARD_ADVISE)) {
        what = GUARD_PLAN_DROP; /* advise's placement stays for the rest of the run */
    }
    pthread_mutex_unlock(&pol.guard_lock);
    return what;
}

bool pol_guard_due(void)
{
    return stage_now() == GUARD_ADVISE_DUE;
}

bool pol_guard_holds_advise(void)
{
    int s = stage_now();
    return s == GUARD_ADVISE_DUE || s == GUARD_ADVISE || s == GUARD_READ_DUE;
}

bool pol_guard_measures_advise(void)
{
    return stage_now() == GUARD_ADVISE;
}

/* guard_lock held: a new block, its placement in from now. */
static void begin_block(int stage)
{
    pol.guard_applied_at = transit_iteration_count();
    pol.guard_first_step = stage == GUARD_HYBRID ? pol.guard_applied_at : UINT64_MAX;
    pol.guard_next_step = pol.guard_applied_at;
    if (stage == GUARD_HYBRID)
        pol.guard_nhybrid = 0;
    set_stage(stage);
}

void pol_guard_apply_advise(const transit_driver_api *drv, CUdevice dev)
{
    pol_advise_all(drv, dev);
    pthread_mutex_lock(&pol.guard_lock);
    if (stage_now() == GUARD_ADVISE_DUE)
        begin_block(GUARD_ADVISE);
    pthread_mutex_unlock(&pol.guard_lock);
}

void pol_guard_placement_applied(void)
{
    pthread_mutex_lock(&pol.guard_lock);
    int stage = stage_now();
    if (stage == GUARD_SWITCH || stage == GUARD_HYBRID) /* a new plan in hybrid's block times it anew */
        begin_block(GUARD_HYBRID);
    else if (stage == GUARD_REVERTING)
        set_stage(GUARD_DECIDED);
    pthread_mutex_unlock(&pol.guard_lock);
}

/* guard_lock held: the medians and counts so far, for the stats. */
static transit_guard_verdict publish(void)
{
    transit_guard_verdict v = transit_guard_decide(pol.guard_hybrid_s, pol.guard_nhybrid, pol.guard_advise_s,
                                                   pol.guard_nadvise);
    __atomic_store_n(&pol.n.guard_hybrid_steps, (uint64_t)v.hybrid_steps, __ATOMIC_RELAXED);
    __atomic_store_n(&pol.n.guard_advise_steps, (uint64_t)v.advise_steps, __ATOMIC_RELAXED);
    __atomic_store_n(&pol.n.guard_hybrid_step_ns, (uint64_t)(v.hybrid_step_s * 1e9), __ATOMIC_RELAXED);
    __atomic_store_n(&pol.n.guard_advise_step_ns, (uint64_t)(v.advise_step_s * 1e9), __ATOMIC_RELAXED);
    return v;
}

/* guard_lock held: the block's steps that ended by mark `now` into `s` (until it has
 * TRANSIT_GUARD_STEPS); true once it has them. */
static bool collect(uint64_t now, double *s, size_t *n)
{
    for (uint64_t k = TRANSIT_MAX(pol.guard_next_step, pol.guard_first_step); now >= 2 && k <= now - 2; k++) {
        double t = transit_iteration_step_s(k);
        if (t > 0 && *n < TRANSIT_GUARD_STEPS)
            s[(*n)++] = t;
    }
    if (now >= 1)
        pol.guard_next_step = TRANSIT_MAX(pol.guard_next_step, now - 1);
    return *n >= TRANSIT_GUARD_STEPS;
}

/* Advise's placement as read, with the chunks and reuse it was read for, takes hybrid's place;
 * its by-reuse counters follow, and the mover gets an empty schedule (it stops). */
static void revert_to_advise(void)
{
    uint64_t by_class[2][TRANSIT_HYBRID_CLASSES] = {{0}};
    pthread_mutex_lock(&pol.hybrid_lock);
    free(pol.hybrid_chunk);
    free(pol.hybrid_reuse);
    free(pol.hybrid_resident);
    pol.hybrid_chunk = pol.guard_chunk;
    pol.hybrid_reuse = pol.guard_reuse;
    pol.hybrid_resident = pol.guard_resident;
    pol.hybrid_nchunks = pol.guard_nchunks;
    pol.guard_chunk = NULL;
    pol.guard_reuse = NULL;
    pol.guard_resident = NULL;
    pol.guard_nchunks = 0;
    transit_stream_schedule_free(&pol.hybrid_schedule);
    for (size_t i = 0; i < pol.hybrid_nchunks; i++)
        by_class[pol.hybrid_resident[i] ? 0 : 1][pol_reuse_class(pol.hybrid_reuse[i])] += TRANSIT_CHUNK_BYTES;
    for (int k = 0; k < TRANSIT_HYBRID_CLASSES; k++) {
        __atomic_store_n(&pol.n.hybrid_resident_by_reuse[k], by_class[0][k], __ATOMIC_RELAXED);
        __atomic_store_n(&pol.n.hybrid_host_by_reuse[k], by_class[1][k], __ATOMIC_RELAXED);
        __atomic_store_n(&pol.n.hybrid_streamed_by_reuse[k], 0, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&pol.n.planned_streamed_bytes, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&pol.n.planned_staged_peak, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pol.hybrid_lock);
    __atomic_store_n(&pol.hybrid_due, 1, __ATOMIC_RELEASE);
}

void pol_guard_mark(void)
{
    uint64_t now = transit_iteration_count();
    bool revert = false;
    pthread_mutex_lock(&pol.guard_lock);
    int stage = stage_now();
    if (stage == GUARD_ADVISE) {
        /* advise's block begins once its fill settled (none without records or in physical mode) */
        int fill = pol_fill_now();
        bool settled = !pol_estimating() || fill == TRANSIT_FILL_FULL || fill == TRANSIT_FILL_ENDED ||
                       now >= pol.guard_applied_at + GUARD_FILL_WAIT;
        if (pol.guard_first_step == UINT64_MAX && now >= 1 && settled)
            pol.guard_first_step = TRANSIT_MAX(now - 1, pol.guard_applied_at);
        bool full = collect(now, pol.guard_advise_s, &pol.guard_nadvise);
        publish();
        if (full)
            set_stage(GUARD_READ_DUE);
    } else if (stage == GUARD_HYBRID) {
        bool full = collect(now, pol.guard_hybrid_s, &pol.guard_nhybrid);
        transit_guard_verdict v = publish();
        if (full && v.kept != TRANSIT_GUARD_UNDECIDED) {
            __atomic_store_n(&pol.guard_kept, (int)v.kept, __ATOMIC_RELEASE);
            revert = v.kept == TRANSIT_GUARD_ADVISE;
            set_stage(revert ? GUARD_REVERTING : GUARD_DECIDED);
            if (transit_g.cfg.verbose)
                transit_log("hybrid's guard: %s kept (median step %.3f s with hybrid's placement, %.3f s with "
                            "advise's)", revert ? "advise" : "hybrid", v.hybrid_step_s, v.advise_step_s);
        }
    }
    pthread_mutex_unlock(&pol.guard_lock);
    if (revert)
        revert_to_advise(); /* no lock held across: hybrid_lock is taken inside */
}

/* Tick thread, outside the device's context: once advise's block is measured, where the profile's
 * chunks are now (a chunk the host holds half of or more is advise's host chunk); then hybrid's
 * placement applies. A profile without chunks (hybrid then acts as advise) leaves nothing to
 * compare. */
void pol_guard_read_advise(void)
{
    static int warned;
    if (stage_now() != GUARD_READ_DUE)
        return;
    pthread_mutex_lock(&pol.hybrid_lock);
    size_t n = pol.hybrid_nchunks;
    uint64_t *chunk = malloc((n + 1) * sizeof *chunk);
    uint32_t *reuse = malloc((n + 1) * sizeof *reuse);
    uint8_t *resident = malloc(n + 1);
    bool ok = chunk && reuse && resident && n;
    if (ok) {
        memcpy(chunk, pol.hybrid_chunk, n * sizeof *chunk);
        memcpy(reuse, pol.hybrid_reuse, n * sizeof *reuse);
    }
    pthread_mutex_unlock(&pol.hybrid_lock); /* the page-table walk runs outside it */
    int fd = ok ? open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC) : -1;
    bool read = fd >= 0;
    for (size_t i = 0; read && i < n; i++) {
        int64_t host = transit_host_bytes_in(fd, chunk[i] << TRANSIT_CHUNK_SHIFT, TRANSIT_CHUNK_BYTES);
        read = host >= 0;
        resident[i] = read && (uint64_t)host < TRANSIT_CHUNK_BYTES / 2;
    }
    if (fd >= 0)
        close(fd);
    pthread_mutex_lock(&pol.guard_lock);
    if (ok && read) {
        pol.guard_chunk = chunk;
        pol.guard_reuse = reuse;
        pol.guard_resident = resident;
        pol.guard_nchunks = n;
        set_stage(GUARD_SWITCH);
    } else {
        free(chunk);
        free(reuse);
        free(resident);
        set_stage(GUARD_FAILED);
    }
    pthread_mutex_unlock(&pol.guard_lock);
    if (ok && !read && !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        transit_warn("hybrid: its guard could not read advise's placement (/proc/self/pagemap); hybrid's placement "
                     "applies unmeasured");
    __atomic_store_n(&pol.hybrid_due, 1, __ATOMIC_RELEASE);
}

void pol_guard_after_fork(void)
{
    free(pol.guard_chunk);
    free(pol.guard_reuse);
    free(pol.guard_resident);
}
