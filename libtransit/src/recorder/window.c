/* window.c - iterations and the profiling window (see recorder.h), and the recorder thread's step. */
#include "iteration.h"
#include "recorder_int.h"
#include "state.h"
#include "wake.h"

#include <inttypes.h>

/* ---- profiling window ---- */

/* win_lock held. Refinement and steady windows last one iteration; a full one gives the new
 * profile its refinements anew. */
void rec_open_window(uint64_t begin, transit_window_kind kind)
{
    __atomic_store_n(&rec.win_kind, (int)kind, __ATOMIC_RELAXED);
    if (kind == TRANSIT_WINDOW_FULL) {
        __atomic_store_n(&rec.n.refine_windows, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&rec.win_untimed, 0, __ATOMIC_RELEASE);
    }
    rec.win_begin = begin;
    rec.win_end = begin + (kind == TRANSIT_WINDOW_FULL ? transit_g.cfg.warmup_iters : 1);
    rec.win_max_launches = 0;
    __atomic_store_n(&rec.finalize_due, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&rec.win_phase, WINDOW_COLLECTING, __ATOMIC_RELEASE);
    __atomic_store_n(&rec.want_profiling, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&rec.want_um, 1, __ATOMIC_RELAXED);
    rec.sink->profile_begin(begin, kind);
}

static bool window_is(transit_window_kind kind)
{
    return __atomic_load_n(&rec.win_kind, __ATOMIC_RELAXED) == (int)kind;
}

/* win_lock held, the window that ended at iteration `now` finished: whether a refinement opened
 * now would delay TRANSIT_PROFILE_STEADY's window past its iteration. It would run in now+1 and
 * drain in now+2, and the next window could begin at now+5 (open_steady_window): the steady
 * iteration is one that no other window slows down. The refinement held back opens after it. */
static bool steady_window_near(uint64_t now)
{
    uint64_t asked = transit_g.cfg.profile_steady;
    return asked && !rec.steady_taken && now + 5 > asked;
}

/* win_lock held, no window open: TRANSIT_PROFILE_STEADY's iteration (or, when a window was open
 * then, the first one after it) is observed once. */
static void open_steady_window(uint64_t now)
{
    uint64_t asked = transit_g.cfg.profile_steady;
    if (!asked || rec.steady_taken || now + 1 < asked)
        return;
    rec.steady_taken = 1;
    rec_open_window(now + 1, TRANSIT_WINDOW_STEADY);
}

/* The iteration count moved from `seen` to `now`; `launches` ran in iteration `seen`. */
static void window_advance(uint64_t seen, uint64_t now, uint32_t launches)
{
    pthread_mutex_lock(&rec.win_lock);
    if (now < seen) { /* a more explicit iteration source took over and counts from 0 */
        rec_open_window(now + 1, TRANSIT_WINDOW_FULL);
    } else if (rec.win_phase == WINDOW_DONE) {
        open_steady_window(now);
    } else if (rec.win_phase == WINDOW_COLLECTING) {
        if (seen >= rec.win_begin && seen < rec.win_end) {
            if (!window_is(TRANSIT_WINDOW_STEADY)) /* the policies' profiles: what they plan from */
                transit_add(&rec.n.profiled_iterations, 1);
            rec.win_max_launches = TRANSIT_MAX(rec.win_max_launches, launches);
        }
        if (now >= rec.win_end) {
            __atomic_store_n(&rec.win_phase, WINDOW_DRAINING, __ATOMIC_RELEASE);
            rec.drain_until = now + 1; /* one more iteration for late records; migrations still on */
            __atomic_store_n(&rec.want_profiling, 0, __ATOMIC_RELAXED);
            if (window_is(TRANSIT_WINDOW_FULL) && !__atomic_load_n(&rec.have_profiling, __ATOMIC_ACQUIRE)) {
                __atomic_store_n(&rec.win_untimed, 1, __ATOMIC_RELEASE);
                transit_add(&rec.n.untimed_windows, 1);
            }
        }
    } else if (rec.win_phase == WINDOW_DRAINING && now >= rec.drain_until) {
        __atomic_store_n(&rec.finalize_due, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&rec.win_lock);
}

void transit_recorder_reprofile(const char *why)
{
    int opened = 0;
    if (rec_get_state() != TRANSIT_RECORDER_CUPTI)
        return;
    pthread_mutex_lock(&rec.win_lock);
    /* A refinement window would add the new sequence's ranges to the old profile: replaced. */
    if ((rec.win_phase == WINDOW_DONE || window_is(TRANSIT_WINDOW_REFINE)) && transit_get(&rec.n.reprofiles) < MAX_REPROFILES) {
        transit_add(&rec.n.reprofiles, 1);
        rec_open_window(__atomic_load_n(&rec.iter_seen, __ATOMIC_ACQUIRE) + 1, TRANSIT_WINDOW_FULL);
        opened = 1;
    }
    pthread_mutex_unlock(&rec.win_lock);
    if (!opened)
        return;
    if (transit_get(&rec.n.reprofiles) == MAX_REPROFILES)
        transit_warn("re-profiled %d times (%s); this is the last time", MAX_REPROFILES, why);
    else if (transit_g.cfg.verbose)
        transit_log("re-profiling: %s", why);
    transit_wake();
}

/* Notices a new iteration mark (from any source); the first thread to see it handles it. */
void rec_iteration_check(void)
{
    uint64_t now = transit_iteration_count();
    uint64_t seen = __atomic_load_n(&rec.iter_seen, __ATOMIC_ACQUIRE);
    if (now == seen || !__atomic_compare_exchange_n(&rec.iter_seen, &seen, now, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    uint32_t launches = __atomic_exchange_n(&rec.iter_launches, 0, __ATOMIC_ACQ_REL);
    if (launches)
        __atomic_store_n(&rec.prev_launches, launches, __ATOMIC_RELAXED);
    rec.sink->iteration(now, launches);
    if (rec_get_state() == TRANSIT_RECORDER_CUPTI)
        window_advance(seen, now, launches);
    transit_wake();
}

static void finish_window(void)
{
    pthread_mutex_lock(&rec.win_lock);
    if (rec.win_phase != WINDOW_DRAINING) {
        pthread_mutex_unlock(&rec.win_lock);
        return;
    }
    __atomic_store_n(&rec.win_phase, WINDOW_DONE, __ATOMIC_RELEASE);
    __atomic_store_n(&rec.want_um, 0, __ATOMIC_RELAXED);
    /* Under win_lock (then the policies' profile lock, the order open_window takes them), so that
     * a re-profile cannot open its window between this one's end and the profile it builds. A
     * steady window has no profile to build (events.h). */
    bool learning = !window_is(TRANSIT_WINDOW_STEADY) &&
                    rec.sink->profile_end(rec.win_max_launches, window_is(TRANSIT_WINDOW_REFINE) || !rec.win_untimed);
    /* While limit mode plans its evictions, kernels the profile did not name for a chunk fault it
     * back in after its eviction: one-iteration windows add those to the profile while they still
     * find much, and not while nothing acts at launches (docs/design-notes.md, "Refinements"). */
    uint64_t now = __atomic_load_n(&rec.iter_seen, __ATOMIC_ACQUIRE);
    bool refine = (learning || (window_is(TRANSIT_WINDOW_STEADY) && rec.refine_held)) &&
                  rec_wants(TRANSIT_DEMAND_PLANS_AT_LAUNCHES) && transit_get(&rec.n.refine_windows) < MAX_REFINEMENTS;
    rec.refine_held = refine && steady_window_near(now);
    if (refine && !rec.refine_held) {
        transit_add(&rec.n.refine_windows, 1);
        rec_open_window(now + 1, TRANSIT_WINDOW_REFINE);
    }
    pthread_mutex_unlock(&rec.win_lock);
    rec.sink->window_closed();
}

/* ---- the recorder thread ---- */

/* Kernel records whose correlation id no launch callback saw (a launch path the driver callbacks
 * miss) need the external ids to get an ordinal: they stay on from then on. */
static void check_callback_misses(void)
{
    uint64_t misses = transit_get(&rec.n.corr_none);
    if (misses <= CORR_MISS_TOLERANCE || __atomic_load_n(&rec.want_external, __ATOMIC_RELAXED))
        return;
    __atomic_store_n(&rec.want_external, 1, __ATOMIC_RELAXED);
    transit_warn("recorder: %" PRIu64 " kernel records carry a correlation id no launch callback saw; external "
                 "correlation ids on from now (an API record per CUDA call while profiling)", misses);
}

/* A window that took no kernel times is taken again once a profile needs them (the managed total
 * passed half of L, or of the device in physical mode), while the launch callbacks still count the
 * ordinals; after they went off, their coming back near L opens the new window
 * (steer_launch_callbacks). */
static void retake_untimed_profile(void)
{
    if (__atomic_load_n(&rec.win_untimed, __ATOMIC_ACQUIRE) && !__atomic_load_n(&rec.launches_off_at, __ATOMIC_ACQUIRE) &&
        __atomic_load_n(&rec.win_phase, __ATOMIC_ACQUIRE) == WINDOW_DONE && rec_wants(TRANSIT_DEMAND_KERNEL_TIMES))
        transit_recorder_reprofile("the managed total passed L/2 (in physical mode, half the device's memory): the "
                                   "profile places migrations by kernel times, which the last window did not take");
}

/* Whether the draining window's kernel records are in. The GPU can run seconds behind the
 * launches, and the forced flush at the window's end returns a record not yet complete without
 * its times (CUPTI's documentation of cuptiActivityFlushAll), so the end waits for them: every
 * launch while kernel activity was on gives one record. At most WINDOW_RECORDS_WAIT_MS. */
static bool window_records_in(uint64_t t)
{
    uint64_t launched = transit_get(&rec.n.launches_profiling), recorded = transit_get(&rec.n.kernel_records);
    if (!rec.finalize_wait_ns)
        rec.finalize_wait_ns = t;
    bool late = t - rec.finalize_wait_ns >= WINDOW_RECORDS_WAIT_MS * 1000000ull;
    if (recorded + WINDOW_RECORDS_MISSING_OK < launched && !late)
        return false;
    if (recorded + WINDOW_RECORDS_MISSING_OK < launched)
        transit_warn("recorder: %" PRIu64 " kernel records of the profiling window did not come in %d ms; the "
                     "profile goes without their kernel times", launched - recorded, WINDOW_RECORDS_WAIT_MS);
    rec.finalize_wait_ns = 0;
    return true;
}

/* After warm-up every launch would still go through a callback, serving the period detector
 * alone, once nothing acts at launches (the demand) and an explicit source (the API or the Python
 * hook) marks the iterations: the callbacks then go off, and "kernels" and the detector's count
 * stop there. When something needs them again (limit mode's managed
 * total came near L) they come back, and a new profile is taken: the launches' ordinals restart
 * at the next iteration. A window opened meanwhile (a steady one) brings them back for itself: it
 * begins at the next iteration. */
static void steer_launch_callbacks(void)
{
    const transit_cupti_api *api = transit_cupti(NULL);
    transit_iter_method m = transit_iteration_method();
    bool demanded = rec_wants(TRANSIT_DEMAND_LAUNCHES), back = false;
    bool needed = demanded || __atomic_load_n(&rec.win_phase, __ATOMIC_ACQUIRE) != WINDOW_DONE;
    pthread_mutex_lock(&rec.control_lock);
    bool held = rec_get_state() == TRANSIT_RECORDER_CUPTI; /* not given up meanwhile (transit_recorder_yield) */
    if (held && !rec.launches_off_at && !needed && (m == TRANSIT_ITER_API || m == TRANSIT_ITER_PYHOOK)) {
        rec_set_launch_callbacks(api, 0);
        __atomic_store_n(&rec.launches_off_at, TRANSIT_MAX(transit_iteration_count(), 1), __ATOMIC_RELEASE);
    } else if (held && rec.launches_off_at && needed && rec_attached_locked(api)) {
        rec_set_launch_callbacks(api, 1);
        __atomic_store_n(&rec.launches_off_at, 0, __ATOMIC_RELEASE);
        transit_add(&rec.n.launch_callbacks_back, 1);
        back = demanded;
    }
    pthread_mutex_unlock(&rec.control_lock);
    if (back)
        transit_recorder_reprofile("the launch callbacks are back: the managed total came near the limit");
}

void transit_recorder_step(void)
{
    rec_iteration_check();
    if (rec_get_state() != TRANSIT_RECORDER_CUPTI)
        return;
    check_callback_misses();
    rec_apply_activity();
    steer_launch_callbacks();
    uint64_t period_ns = (transit_limit_mode() ? FLUSH_PERIOD_LIMIT_MS : FLUSH_PERIOD_MS) * 1000000ull;
    uint64_t t = transit_monotonic_ns();
    bool finalizing = __atomic_load_n(&rec.finalize_due, __ATOMIC_ACQUIRE);
    if (!finalizing) /* none due, or a re-profile opened a new window meanwhile */
        rec.finalize_wait_ns = 0;
    bool waiting = finalizing && !window_records_in(t);
    int due = !waiting && __atomic_exchange_n(&rec.finalize_due, 0, __ATOMIC_ACQ_REL);
    if (due || ((waiting || rec.have_profiling || rec.have_um) && t - rec.last_flush >= period_ns)) {
        /* A window whose consumer wants every record: the buffer still filling holds some. */
        rec_flush(due && rec_wants(TRANSIT_DEMAND_EVERY_RECORD) ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
        rec.last_flush = t;
    }
    if (due) {
        finish_window();
        rec_apply_activity(); /* physical mode: the migration counters go off now */
    }
    retake_untimed_profile();
    rec_steer_detach();
}
