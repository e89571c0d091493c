/* hybrid_guard.c - hybrid's guard (its decision: model/guard.h). At the first profile's
 * end hybrid's placement is planned but held: the tick applies advise (SetAccessedBy; in limit
 * mode its fill follows as under advise), and the steps after advise's placement settled are
 * timed from the iteration marks. Then the tick reads where the profile's chunks are (advise's
 * placement, from the page tables), hybrid's placement and mover apply, and its steps are timed.
 * Blocks, not alternation: each switch moves up to L of placement, so the guard switches at most
 * twice and leaves out the step each switch runs in. If advise is faster, its placement as read
 * is applied in the place of hybrid's (the mover stops) for the rest of the run. */
#include "host_residency.h"
#include "hybrid_int.h"
#include "iteration.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Advise's block waits at most this many marks after advise applied for its fill to settle. */
#define GUARD_FILL_WAIT 4

/* The guard's stages, in order: no plan yet; planned, advise to apply; advise's block; advise's
 * placement to read; hybrid's placement to apply; hybrid's block; advise kept, its placement to
 * apply; decided; advise's placement unreadable (hybrid's applies unmeasured). Off:
 * TRANSIT_HYBRID_GUARD=0. */
typedef enum {
    GUARD_WAITING,
    GUARD_ADVISE_DUE,
    GUARD_ADVISE,
    GUARD_READ_DUE,
    GUARD_SWITCH,
    GUARD_HYBRID,
    GUARD_REVERTING,
    GUARD_DECIDED,
    GUARD_FAILED,
    GUARD_OFF
} guard_stage;

/* The guard's state (gd.lock, a leaf; stage and kept are also read without it): the block's
 * placement applied at iteration count applied_at, its first timed step and the next to read
 * (0-based, transit_iteration_step_s), the blocks' step times, and advise's placement as read
 * (the chunks, their reuse, 1: on the device). */
static struct {
    pthread_mutex_t lock;
    int stage; /* guard_stage */
    int kept;  /* transit_guard_kept */
    uint64_t applied_at, first_step, next_step;
    double advise_s[TRANSIT_GUARD_STEPS], hybrid_s[TRANSIT_GUARD_STEPS];
    size_t nadvise, nhybrid;
    uint64_t *chunk;
    uint32_t *reuse;
    uint8_t *resident;
    size_t nchunks;
} gd = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* By guard_stage. */
static const char *const stage_names[] = {"waiting",          "measuring-advise", "measuring-advise",
                                          "measuring-advise", "measuring-hybrid", "measuring-hybrid",
                                          "decided",          "decided",          "failed"};

static int stage_now(void)
{
    if (!transit_g.cfg.hybrid_guard)
        return GUARD_OFF;
    return __atomic_load_n(&gd.stage, __ATOMIC_ACQUIRE);
}

static void set_stage(int stage)
{
    __atomic_store_n(&gd.stage, stage, __ATOMIC_RELEASE);
}

const char *hyb_guard_state_name(void)
{
    int s = stage_now();
    return s == GUARD_OFF ? "off" : stage_names[s];
}

const char *hyb_guard_kept_name(void)
{
    int k = __atomic_load_n(&gd.kept, __ATOMIC_ACQUIRE);
    return k == TRANSIT_GUARD_HYBRID ? "hybrid" : k == TRANSIT_GUARD_ADVISE ? "advise" : NULL;
}

int hyb_guard_on_plan(void)
{
    pthread_mutex_lock(&gd.lock);
    int stage = stage_now(), what = GUARD_PLAN_APPLY;
    if (stage == GUARD_WAITING) {
        set_stage(GUARD_ADVISE_DUE);
        what = GUARD_PLAN_HOLD;
    } else if (stage == GUARD_ADVISE_DUE || stage == GUARD_ADVISE || stage == GUARD_READ_DUE) {
        what = GUARD_PLAN_HOLD; /* the newest plan applies once advise's block is measured */
    } else if (stage == GUARD_REVERTING ||
               (stage == GUARD_DECIDED && __atomic_load_n(&gd.kept, __ATOMIC_ACQUIRE) == TRANSIT_GUARD_ADVISE)) {
        what = GUARD_PLAN_DROP; /* advise's placement stays for the rest of the run */
    }
    pthread_mutex_unlock(&gd.lock);
    return what;
}

bool hyb_guard_due(void)
{
    return stage_now() == GUARD_ADVISE_DUE;
}

bool hyb_guard_holds_advise(void)
{
    int s = stage_now();
    return s == GUARD_ADVISE_DUE || s == GUARD_ADVISE || s == GUARD_READ_DUE;
}

bool hyb_guard_measures_advise(void)
{
    return stage_now() == GUARD_ADVISE;
}

/* guard_lock held: a new block, its placement in from now. */
static void begin_block(int stage)
{
    gd.applied_at = transit_iteration_count();
    gd.first_step = stage == GUARD_HYBRID ? gd.applied_at : UINT64_MAX;
    gd.next_step = gd.applied_at;
    if (stage == GUARD_HYBRID)
        gd.nhybrid = 0;
    set_stage(stage);
}

void hyb_guard_apply_advise(const transit_driver_api *drv, CUdevice dev)
{
    pol_in_place_all(drv, dev);
    pthread_mutex_lock(&gd.lock);
    if (stage_now() == GUARD_ADVISE_DUE)
        begin_block(GUARD_ADVISE);
    pthread_mutex_unlock(&gd.lock);
}

void hyb_guard_placement_applied(void)
{
    pthread_mutex_lock(&gd.lock);
    int stage = stage_now();
    if (stage == GUARD_SWITCH || stage == GUARD_HYBRID) /* a new plan in hybrid's block times it anew */
        begin_block(GUARD_HYBRID);
    else if (stage == GUARD_REVERTING)
        set_stage(GUARD_DECIDED);
    pthread_mutex_unlock(&gd.lock);
}

/* guard_lock held: the medians and counts so far, for the stats. */
static transit_guard_verdict publish(void)
{
    transit_guard_verdict v = transit_guard_decide(gd.hybrid_s, gd.nhybrid, gd.advise_s,
                                                   gd.nadvise);
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
    for (uint64_t k = TRANSIT_MAX(gd.next_step, gd.first_step); now >= 2 && k <= now - 2; k++) {
        double t = transit_iteration_step_s(k);
        if (t > 0 && *n < TRANSIT_GUARD_STEPS)
            s[(*n)++] = t;
    }
    if (now >= 1)
        gd.next_step = TRANSIT_MAX(gd.next_step, now - 1);
    return *n >= TRANSIT_GUARD_STEPS;
}

/* Advise's placement as read, with the chunks and reuse it was read for, takes hybrid's place
 * (hyb_take_placement: the mover gets an empty schedule, it stops). */
static void revert_to_advise(void)
{
    uint64_t *chunk = gd.chunk;
    uint32_t *reuse = gd.reuse;
    uint8_t *resident = gd.resident;
    size_t n = gd.nchunks;
    gd.chunk = NULL;
    gd.reuse = NULL;
    gd.resident = NULL;
    gd.nchunks = 0;
    hyb_take_placement(chunk, reuse, resident, n);
}

void hyb_guard_mark(void)
{
    uint64_t now = transit_iteration_count();
    bool revert = false;
    pthread_mutex_lock(&gd.lock);
    int stage = stage_now();
    if (stage == GUARD_ADVISE) {
        /* advise's block begins once its fill settled (none without records or in physical mode) */
        int fill = pol_fill_now();
        bool settled = !pol_estimating() || fill == TRANSIT_FILL_FULL || fill == TRANSIT_FILL_ENDED ||
                       now >= gd.applied_at + GUARD_FILL_WAIT;
        if (gd.first_step == UINT64_MAX && now >= 1 && settled)
            gd.first_step = TRANSIT_MAX(now - 1, gd.applied_at);
        bool full = collect(now, gd.advise_s, &gd.nadvise);
        publish();
        if (full)
            set_stage(GUARD_READ_DUE);
    } else if (stage == GUARD_HYBRID) {
        bool full = collect(now, gd.hybrid_s, &gd.nhybrid);
        transit_guard_verdict v = publish();
        if (full && v.kept != TRANSIT_GUARD_UNDECIDED) {
            __atomic_store_n(&gd.kept, (int)v.kept, __ATOMIC_RELEASE);
            revert = v.kept == TRANSIT_GUARD_ADVISE;
            set_stage(revert ? GUARD_REVERTING : GUARD_DECIDED);
            if (transit_g.cfg.verbose)
                transit_log("hybrid's guard: %s kept (median step %.3f s with hybrid's placement, %.3f s with "
                            "advise's)", revert ? "advise" : "hybrid", v.hybrid_step_s, v.advise_step_s);
        }
    }
    pthread_mutex_unlock(&gd.lock);
    if (revert)
        revert_to_advise(); /* no lock held across: the placement's is taken inside */
}

/* Tick thread, outside the device's context: once advise's block is measured, where the profile's
 * chunks are now (a chunk the host holds half of or more is advise's host chunk); then hybrid's
 * placement applies. A profile without chunks (hybrid then acts as advise) leaves nothing to
 * compare. */
void hyb_guard_read_advise(void)
{
    static int warned;
    if (stage_now() != GUARD_READ_DUE)
        return;
    uint64_t *chunk;
    uint32_t *reuse;
    uint8_t *resident;
    size_t n;
    bool ok = hyb_copy_chunks(&chunk, &reuse, &resident, &n); /* the page-table walk runs outside its lock */
    int fd = ok ? open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC) : -1;
    bool read = fd >= 0;
    for (size_t i = 0; read && i < n; i++) {
        int64_t host = transit_host_bytes_in(fd, chunk[i] << TRANSIT_CHUNK_SHIFT, TRANSIT_CHUNK_BYTES);
        read = host >= 0;
        resident[i] = read && (uint64_t)host < TRANSIT_CHUNK_BYTES / 2;
    }
    if (fd >= 0)
        close(fd);
    pthread_mutex_lock(&gd.lock);
    if (ok && read) {
        gd.chunk = chunk;
        gd.reuse = reuse;
        gd.resident = resident;
        gd.nchunks = n;
        set_stage(GUARD_SWITCH);
    } else {
        free(chunk);
        free(reuse);
        free(resident);
        set_stage(GUARD_FAILED);
    }
    pthread_mutex_unlock(&gd.lock);
    if (ok && !read && !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        transit_warn("hybrid: its guard could not read advise's placement (/proc/self/pagemap); hybrid's placement "
                     "applies unmeasured");
    hyb_set_due();
}

void hyb_guard_after_fork(void)
{
    free(gd.chunk);
    free(gd.reuse);
    free(gd.resident);
    memset(&gd, 0, sizeof gd);
    pthread_mutex_init(&gd.lock, NULL);
}
