/* hybrid_mover.c - hybrid's look-ahead mover (its plan: model/stream.h). The tick
 * hands the schedule over once the placement is applied; the mover thread installs it. At a
 * phase's first launch the launch hook records an event on the kernels' stream, makes that stream
 * wait for the arrivals the phase is the first to use when the mover issued them in this
 * iteration (both asynchronous; an arrival not yet issued is read in place), and posts the phase.
 * The mover thread then issues the phase's transfers on its own streams: back to the host after
 * that event (the chunks' last kernels have run), in to the device followed by the arrival event.
 * Nothing here synchronizes in a launch hook or acts on a capturing stream (launches.c checks).
 * mv.lock is held across the hook's two event calls, so that the mover never destroys an event in
 * use; the installed schedule changes only on the mover thread, which reads it without the lock. */
#include "hybrid_int.h"
#include "wake.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MOVER_QUEUE 4096u /* posted phases not yet issued; past that a phase is dropped (counted) */
#define MOVER_IDLE_MS 20  /* the thread's wait when nothing is posted (it checks for a stop) */

typedef struct posted {
    uint32_t phase;
    uint64_t iteration;
} posted;

typedef struct mover {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int wake_ready;
    transit_stream_schedule s; /* installed */
    CUevent *launched, *arrived;
    uint64_t *arrived_for; /* per phase: the iteration + 1 whose arrivals arrived[] follows; 0 none */
    int active;
    transit_stream_schedule next; /* handed over, not installed yet */
    int next_due;
    posted queue[MOVER_QUEUE];
    uint32_t head, tail;
    CUstream htod, dtoh;
    int in_context; /* the mover thread made the primary context current */
} mover;

static mover mv = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void wake_ready_locked(void)
{
    if (mv.wake_ready)
        return;
    transit_cond_init_monotonic(&mv.wake);
    mv.wake_ready = 1;
}

bool hyb_mover_active(void)
{
    return __atomic_load_n(&mv.active, __ATOMIC_ACQUIRE);
}

/* The phase whose first launch has this ordinal, or NONE (lock held). */
static uint32_t phase_at(uint32_t ordinal)
{
    uint32_t lo = 0, hi = mv.s.nphases;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (mv.s.ordinal[mid] < ordinal)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < mv.s.nphases && mv.s.ordinal[lo] == ordinal ? lo : TRANSIT_STREAM_NONE;
}

static bool has(const uint64_t *offsets, uint32_t q)
{
    return offsets[q + 1] > offsets[q];
}

/* Whether the launch with this ordinal starts a phase of the installed schedule: most launches do
 * not, and need no driver call (not even the capture check). */
bool hyb_mover_starts_phase(uint32_t ordinal)
{
    if (!__atomic_load_n(&mv.active, __ATOMIC_ACQUIRE))
        return false;
    pthread_mutex_lock(&mv.lock);
    bool starts = mv.active && phase_at(ordinal) != TRANSIT_STREAM_NONE;
    pthread_mutex_unlock(&mv.lock);
    return starts;
}

void hyb_mover_launch(const transit_driver_api *drv, const transit_launch *l)
{
    pthread_mutex_lock(&mv.lock);
    uint32_t q = mv.active ? phase_at(l->ordinal) : TRANSIT_STREAM_NONE;
    if (q != TRANSIT_STREAM_NONE) {
        bool backs = has(mv.s.back_offsets, q), ins = has(mv.s.in_offsets, q);
        uint32_t w = mv.s.wait[q];
        if (backs)
            transit_act_record(drv, mv.launched[q], l->stream);
        if (w != TRANSIT_STREAM_NONE && mv.arrived_for[w] == l->iteration + 1) {
            transit_act_wait_event(drv, l->stream, mv.arrived[w]);
            transit_add(&pol.n.mover_waits, 1);
        } else if (w != TRANSIT_STREAM_NONE) {
            transit_add(&pol.n.mover_late, 1);
        }
        if ((backs || ins) && mv.tail - mv.head < MOVER_QUEUE) {
            mv.queue[mv.tail++ % MOVER_QUEUE] = (posted){q, l->iteration};
            wake_ready_locked();
            pthread_cond_signal(&mv.wake);
        } else if (backs || ins) {
            transit_add(&pol.n.mover_dropped, 1);
        }
    }
    pthread_mutex_unlock(&mv.lock);
}

void hyb_mover_hand_over(transit_stream_schedule *s)
{
    pthread_mutex_lock(&mv.lock);
    transit_stream_schedule_free(&mv.next);
    mv.next = *s;
    mv.next_due = 1;
    wake_ready_locked();
    pthread_cond_signal(&mv.wake);
    pthread_mutex_unlock(&mv.lock);
    *s = (transit_stream_schedule){0};
}

static void destroy_events(const transit_driver_api *drv, CUevent *ev, uint32_t n)
{
    for (uint32_t q = 0; ev && q < n; q++)
        transit_act_event_destroy(drv, ev[q]);
    free(ev);
}

static CUevent *create_events(const transit_driver_api *drv, uint32_t n)
{
    CUevent *ev = calloc(n + 1, sizeof *ev);
    for (uint32_t q = 0; ev && q < n; q++)
        if (transit_act_event_create(drv, &ev[q]) != CUDA_SUCCESS) {
            destroy_events(drv, ev, q);
            return NULL;
        }
    return ev;
}

/* Mover thread: the handed-over schedule, with its events, replaces the installed one. */
static void install(const transit_driver_api *drv)
{
    static int warned;
    pthread_mutex_lock(&mv.lock);
    transit_stream_schedule s = mv.next;
    mv.next = (transit_stream_schedule){0};
    mv.next_due = 0;
    pthread_mutex_unlock(&mv.lock);
    bool events = transit_act_has_events(drv);
    CUevent *launched = events ? create_events(drv, s.nphases) : NULL;
    CUevent *arrived = events ? create_events(drv, s.nphases) : NULL;
    uint64_t *arrived_for = calloc(s.nphases + 1, sizeof *arrived_for);
    bool ok = launched && arrived && arrived_for && transit_act_own_stream(drv, &mv.htod) &&
              transit_act_own_stream(drv, &mv.dtoh);
    if (!ok) {
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            transit_warn("hybrid: no events or streams for its mover; host chunks are read in place");
        destroy_events(drv, launched, s.nphases);
        destroy_events(drv, arrived, s.nphases);
        free(arrived_for);
        transit_stream_schedule_free(&s);
        return;
    }
    pthread_mutex_lock(&mv.lock);
    transit_stream_schedule old = mv.s;
    CUevent *old_launched = mv.launched, *old_arrived = mv.arrived;
    free(mv.arrived_for);
    mv.s = s;
    mv.launched = launched;
    mv.arrived = arrived;
    mv.arrived_for = arrived_for;
    mv.head = mv.tail = 0; /* phases posted for the old schedule */
    __atomic_store_n(&mv.active, s.nphases && s.streamed_bytes, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&mv.lock);
    destroy_events(drv, old_launched, old.nphases);
    destroy_events(drv, old_arrived, old.nphases);
    transit_stream_schedule_free(&old);
}

/* Mover thread: phase p's transfers. */
static void issue(const transit_driver_api *drv, CUdevice dev, posted p)
{
    const transit_stream_schedule *s = &mv.s;
    uint32_t q = p.phase;
    if (has(s->back_offsets, q)) {
        transit_act_wait_event(drv, mv.dtoh, mv.launched[q]);
        for (uint64_t r = s->back_offsets[q]; r < s->back_offsets[q + 1]; r++)
            pol_prefetch_range(drv, s->back[r], dev, PREFETCH_STREAM_OUT, mv.dtoh);
    }
    if (has(s->in_offsets, q)) {
        for (uint64_t r = s->in_offsets[q]; r < s->in_offsets[q + 1]; r++)
            pol_prefetch_range(drv, s->in[r], dev, PREFETCH_STREAM_IN, mv.htod);
        transit_act_record(drv, mv.arrived[q], mv.htod);
        pthread_mutex_lock(&mv.lock);
        mv.arrived_for[q] = p.iteration + 1;
        pthread_mutex_unlock(&mv.lock);
    }
    transit_add(&pol.n.mover_phases, 1);
}

/* In limit mode the mover runs while its hold lasts (hyb_apply): an eviction ends it, and
 * from there its chunks are read in place. */
static bool hold_ended(void)
{
    static int warned;
    if (!transit_limit_mode() || pol_fill_holds(pol_fill_now()))
        return false;
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        transit_warn("hybrid: an eviction over L ended its mover; its chunks are read in place from here");
    return true;
}

/* The mover thread's step (hybrid's move_step; lifecycle.c runs the thread): waits for a posted
 * phase or a schedule, then acts. */
void hyb_mover_step(void)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_nsec += MOVER_IDLE_MS * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&mv.lock);
    wake_ready_locked();
    while (!mv.next_due && mv.head == mv.tail && !__atomic_load_n(&pol.stopping, __ATOMIC_ACQUIRE))
        if (pthread_cond_timedwait(&mv.wake, &mv.lock, &deadline))
            break;
    bool installing = mv.next_due, posted_one = !installing && mv.head != mv.tail;
    posted p = posted_one ? mv.queue[mv.head++ % MOVER_QUEUE] : (posted){0};
    pthread_mutex_unlock(&mv.lock);
    const transit_driver_api *drv;
    int dev = transit_g.id.device;
    if (!(installing || posted_one) || __atomic_load_n(&pol.stopping, __ATOMIC_ACQUIRE) || dev < 0 ||
        !(drv = transit_act_driver()))
        return;
    if (!mv.in_context && transit_act_use_primary_context(drv, dev) != CUDA_SUCCESS)
        return;
    mv.in_context = 1;
    if (installing) {
        install(drv);
    } else if (hold_ended()) {
        __atomic_store_n(&mv.active, 0, __ATOMIC_RELEASE);
    } else {
        issue(drv, dev, p);
    }
}

void hyb_mover_wake(void)
{
    pthread_mutex_lock(&mv.lock);
    wake_ready_locked();
    pthread_cond_broadcast(&mv.wake);
    pthread_mutex_unlock(&mv.lock);
}

/* The child's copy of the parent's events and streams is unusable (hybrid's after_fork). */
void hyb_mover_after_fork(void)
{
    transit_stream_schedule_free(&mv.s);
    transit_stream_schedule_free(&mv.next);
    free(mv.launched);
    free(mv.arrived);
    free(mv.arrived_for);
    memset(&mv, 0, sizeof mv);
    pthread_mutex_init(&mv.lock, NULL);
}
