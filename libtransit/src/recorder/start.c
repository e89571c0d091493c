/* start.c - the recorder's start (CUPTI subscribed with the launch callback, the first window
 * open), its last flush at exit and its fork reset; see recorder.h. */
#include "recorder_int.h"
#include "state.h"

#include <string.h>
#include <unistd.h>

void transit_recorder_start(void)
{
    int expected = 0;
    if (__atomic_load_n(&rec.start_claimed, __ATOMIC_ACQUIRE) ||
        !__atomic_compare_exchange_n(&rec.start_claimed, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    rec.owner_pid = getpid();
    pthread_mutex_lock(&rec.control_lock); /* a tool taking CUPTI meanwhile waits (transit_recorder_yield) */
    if (rec_subscribe_locked(rec_on_callback)) {
        /* iteration 0 runs with activity on, but its kernels carry no ordinal */
        pthread_mutex_lock(&rec.win_lock);
        rec_open_window(1, TRANSIT_WINDOW_FULL);
        pthread_mutex_unlock(&rec.win_lock);
        rec_hold_locked();
    }
    pthread_mutex_unlock(&rec.control_lock);
    if (transit_limit_mode() && !transit_recorder_sees_migrations())
        transit_warn("limit mode without migration records: " BOUND_ALONE
                     "; no residency estimate (resident bytes read min(managed, limit))");
}

/* Everything but the sink (the wiring outlives a fork) and the activity buffers (reused). */
void transit_recorder_after_fork(void)
{
    const transit_sink *sink = rec.sink;
    uint8_t *buffers[BUFFER_COUNT];
    memcpy(buffers, rec.buffers, sizeof buffers);
    transit_period_destroy(rec.period);
    memset(&rec, 0, sizeof rec);
    pthread_mutex_init(&rec.win_lock, NULL);
    pthread_mutex_init(&rec.control_lock, NULL);
    pthread_mutex_init(&rec.period_lock, NULL);
    pthread_mutex_init(&rec.pool_lock, NULL);
    pthread_mutex_init(&rec.records_lock, NULL);
    rec.win_phase = WINDOW_DONE;
    rec.sink = sink;
    memcpy(rec.buffers, buffers, sizeof buffers);
    rec_launch_after_fork();
}

void transit_recorder_exit(void)
{
    if (rec.owner_pid != getpid())
        return;
    rec_iteration_check(); /* a last mark the thread had no time to see */
    rec_flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

void transit_recorder_poll_iteration(void)
{
    rec_iteration_check();
}
