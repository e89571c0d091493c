/* lifecycle.c - libtransit's life in a process: what it does at load, at activation (the first
 * interposed CUDA call), at the first managed allocation (the recorder and TRANSIT's threads), at
 * every fork (one list resets every module), at exit and on SIGTERM/SIGINT; and the wiring of the
 * recorder's events into the policies and the stats.
 *
 * libtransit is inert until the process calls an interposed CUDA entry point: the constructor
 * only adjusts PyTorch's allocator settings; activation (config, signal handlers, exit hook, the
 * threads) happens on the first CUDA call, so bash or the torchrun agent see no effect at all;
 * the recorder starts at the first managed allocation (after activation, so CUPTI's own start-up
 * can never re-enter it).
 *
 * Threads: "transit-rec" runs the recorder's step (every CUPTI control call, iteration polling)
 * and the stats refresh; "transit-tick" runs the policies' tick (limit mode's evictions must
 * never wait behind a CUPTI call: on an H200 one stalled the recorder's thread for 2 s while the
 * bound rose by 8 GiB); "transit-move", hybrid's look-ahead mover in limit mode (its step waits
 * for posted phases itself). */
#include "lifecycle.h"
#include "actions.h"
#include "alloc_table.h"
#include "iteration.h"
#include "policy.h"
#include "profile.h"
#include "recorder.h"
#include "state.h"
#include "stats.h"
#include "ticklog.h"
#include "timeline.h"
#include "wake.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define THREAD_TICK_MS 20 /* the recorder's and the tick's: iteration polling, CUPTI control; policy ticks */
#define EXIT_WAIT_MS 2000 /* at exit, how long to wait for the threads */

static struct {
    pthread_mutex_t activate_lock;
    int expandable_segments_disabled;
    int started; /* the recorder (first managed allocation) */
    pthread_mutex_t thread_lock;
    pthread_cond_t thread_done;
    int threads_running;
    const char *exit_reason; /* a signal's name outlives the exit that follows */
    struct sigaction previous_term, previous_int;
} life = {.activate_lock = PTHREAD_MUTEX_INITIALIZER, .thread_lock = PTHREAD_MUTEX_INITIALIZER, .exit_reason = "exit"};

/* ---- the recorder's events ---- */

static void on_iteration(uint64_t iteration, uint32_t launches)
{
    (void)launches;
    transit_timeline_entry e = {
        .t = transit_now() - transit_g.start_unix,
        .iteration = iteration,
        .resident = transit_policy_resident(),
        .htod = transit_recorder_htod_bytes(),
        .dtoh = transit_recorder_dtoh_bytes(),
        .faults = transit_recorder_gpu_faults(),
        .evicted = transit_policy_evicted_bytes(),
    };
    e.bound_peak = transit_policy_iteration_ended();
    transit_timeline_add(&e);
}

static const transit_sink sink = {
    .launch = transit_policy_launch,
    .kernel = transit_policy_kernel,
    .um_record = transit_policy_um_record,
    .profile_begin = transit_policy_profile_begin,
    .profile_end = transit_policy_profile_end,
    .window_closed = transit_policy_window_closed,
    .iteration = on_iteration,
};

/* ---- fork ---- */

/* In a fork child the parent's CUDA context is unusable: every module forgets it, and starts over
 * if the child itself calls CUDA (multiprocessing workers, data loaders). The one list. */
static void after_fork_child(void)
{
    pthread_mutex_init(&life.activate_lock, NULL);
    pthread_mutex_init(&life.thread_lock, NULL);
    life.started = 0;
    life.threads_running = 0;
    transit_state_after_fork();
    transit_warnings_reset();
    transit_alloc_reset();
    transit_mem_after_fork();
    transit_actions_after_fork();
    transit_iteration_reset();
    transit_ticklog_after_fork();
    transit_recorder_after_fork();
    transit_policy_after_fork();
    transit_profile_after_fork();
    transit_timeline_after_fork();
    transit_wait_reset();
}

/* ---- exit and signals ---- */

/* A thread's step, and how long it waits between steps (0: the step itself waits). */
typedef struct thread_spec {
    void (*step)(void);
    unsigned wait_ms;
} thread_spec;

static void *thread_main(void *arg)
{
    const thread_spec *spec = arg;
    while (transit_wait(spec->wait_ms))
        spec->step();
    pthread_mutex_lock(&life.thread_lock);
    life.threads_running--;
    pthread_cond_broadcast(&life.thread_done);
    pthread_mutex_unlock(&life.thread_lock);
    return NULL;
}

static void recorder_thread_step(void)
{
    transit_recorder_step();
    transit_stats_refresh();
}

static void start_thread(const char *name, const thread_spec *spec, const char *lost)
{
    pthread_t t;
    sigset_t all, old;
    pthread_mutex_lock(&life.thread_lock);
    life.threads_running++;
    pthread_mutex_unlock(&life.thread_lock);
    sigfillset(&all); /* the application's signals (SIGINT, SIGTERM) never land on these threads */
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&t, NULL, thread_main, (void *)spec);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err) {
        pthread_mutex_lock(&life.thread_lock);
        life.threads_running--;
        pthread_mutex_unlock(&life.thread_lock);
        transit_warn("cannot start the %s thread (error %d): %s", name, err, lost);
        return;
    }
    pthread_setname_np(t, name);
    pthread_detach(t);
}

static void start_threads(void)
{
    transit_cond_init_monotonic(&life.thread_done);
    transit_wait_reset();
    static const thread_spec recorder = {recorder_thread_step, THREAD_TICK_MS}, tick = {transit_policy_tick, THREAD_TICK_MS},
                             move = {transit_policy_move_step, 0};
    start_thread("transit-rec", &recorder, "no CUPTI flushes, no iteration polling, no stats refresh");
    start_thread("transit-tick", &tick, "no policy ticks (limit mode evicts only at launches)");
    /* hybrid's look-ahead mover (limit mode only: its staging is the margin under L) */
    if (transit_policy_runs_mover())
        start_thread("transit-move", &move, "no look-ahead mover (hybrid reads its host chunks in place)");
}

static void stop_threads(void)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += EXIT_WAIT_MS / 1000;
    transit_policy_stop(); /* a tick's evictions can run for seconds: they stop at their next batch */
    transit_wait_stop();
    pthread_mutex_lock(&life.thread_lock);
    while (life.threads_running)
        if (pthread_cond_timedwait(&life.thread_done, &life.thread_lock, &deadline))
            break; /* never hang the exit: the threads are detached */
    pthread_mutex_unlock(&life.thread_lock);
}

/* The recorder's last records and the profile of a run shorter than its window, then the stats. */
static void at_exit(void)
{
    if (transit_g.id.pid == getpid()) {
        stop_threads();
        if (life.started) {
            transit_recorder_exit();
            transit_policy_exit();
        }
    }
    transit_stats_write(life.exit_reason);
}

static void on_signal(int sig, siginfo_t *info, void *uctx)
{
    const struct sigaction *prev = sig == SIGTERM ? &life.previous_term : &life.previous_int;
    life.exit_reason = sig == SIGTERM ? "SIGTERM" : "SIGINT";
    transit_stats_write(life.exit_reason);
    if (prev->sa_flags & SA_SIGINFO) {
        prev->sa_sigaction(sig, info, uctx);
    } else if (prev->sa_handler != SIG_DFL) {
        prev->sa_handler(sig); /* e.g. Python's: it raises KeyboardInterrupt, exit follows */
    } else {
        sigaction(sig, prev, NULL);
        raise(sig);
    }
}

/* Takes over sig, unless the process ignores it (a background job's SIGINT): an ignored signal
 * ends nothing, so it must not write the final statistics either. */
static void take_over(int sig, const struct sigaction *sa, struct sigaction *previous)
{
    sigaction(sig, NULL, previous);
    if ((previous->sa_flags & SA_SIGINFO) || previous->sa_handler != SIG_IGN)
        sigaction(sig, sa, previous);
}

static void install_exit_handlers(void)
{
    static int installed; /* inherited across fork, like the registrations */
    struct sigaction sa;
    if (installed)
        return;
    installed = 1;
    atexit(at_exit);
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    take_over(SIGTERM, &sa, &life.previous_term);
    take_over(SIGINT, &sa, &life.previous_int);
}

/* ---- activation ---- */

void transit_activate(void)
{
    char err[512];
    pthread_mutex_lock(&life.activate_lock);
    if (transit_g.active)
        goto out;
    if (transit_config_load(&transit_g.cfg, err, sizeof err)) {
        transit_log("%s", err);
        _exit(1); /* before any CUDA work: never run half-configured */
    }
    transit_state_init();
    transit_policy_load();
    static int atfork_registered;
    if (!atfork_registered) {
        atfork_registered = 1;
        pthread_atfork(NULL, NULL, after_fork_child);
    }
    if (life.expandable_segments_disabled)
        transit_warn("PYTORCH_CUDA_ALLOC_CONF: expandable_segments switched off (VMM memory cannot be managed)");
    install_exit_handlers();
    start_threads();
    if (transit_g.cfg.verbose)
        transit_log("active: policy=%s mode=%s limit=%llu out=%s", transit_policy_name(transit_g.cfg.policy),
                    transit_limit_mode() ? "limit" : "physical", (unsigned long long)transit_g.cfg.mem_limit,
                    transit_g.cfg.out_dir[0] ? transit_g.cfg.out_dir : "(none)");
    __atomic_store_n(&transit_g.active, 1, __ATOMIC_RELEASE);
out:
    pthread_mutex_unlock(&life.activate_lock);
}

void transit_lifecycle_first_managed(void)
{
    int expected = 0;
    if (__atomic_load_n(&life.started, __ATOMIC_ACQUIRE) ||
        !__atomic_compare_exchange_n(&life.started, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    transit_policy_refresh_demand();
    transit_recorder_start();
}

/* ---- load ---- */

/* PyTorch reads its allocator settings before any CUDA call, so this must happen at load
 * time. Expandable segments allocate through cuMemCreate, which cannot be managed memory. */
static void disable_expandable_segments(const char *var)
{
    static const char key[] = "expandable_segments:";
    const char *v = getenv(var);
    const char *hit;
    size_t value_len;
    if (!v || !(hit = strstr(v, key)))
        return;
    hit += sizeof key - 1;
    if (strncasecmp(hit, "true", 4) == 0)
        value_len = 4;
    else if (*hit == '1')
        value_len = 1;
    else
        return;
    size_t prefix = (size_t)(hit - v);
    const char *suffix = hit + value_len;
    char *out = malloc(prefix + 5 + strlen(suffix) + 1);
    if (!out)
        return;
    memcpy(out, v, prefix);
    memcpy(out + prefix, "False", 5);
    strcpy(out + prefix + 5, suffix);
    setenv(var, out, 1);
    free(out);
    life.expandable_segments_disabled = 1;
}

__attribute__((constructor)) static void transit_load(void)
{
    transit_recorder_set_sink(&sink);
    disable_expandable_segments("PYTORCH_CUDA_ALLOC_CONF");
    disable_expandable_segments("PYTORCH_ALLOC_CONF");
}
