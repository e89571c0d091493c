/* wake.c - see wake.h. */
#include "wake.h"

#include <pthread.h>
#include <time.h>

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int stop;
    int ready; /* cond is initialised (with CLOCK_MONOTONIC) */
} w = {.lock = PTHREAD_MUTEX_INITIALIZER};

void transit_cond_init_monotonic(pthread_cond_t *cond)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &ca);
    pthread_condattr_destroy(&ca);
}

static void ready_locked(void)
{
    if (w.ready)
        return;
    transit_cond_init_monotonic(&w.cond);
    w.ready = 1;
}

bool transit_wait(unsigned ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += ms / 1000;
    deadline.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&w.lock);
    ready_locked();
    if (!w.stop)
        pthread_cond_timedwait(&w.cond, &w.lock, &deadline);
    bool go_on = !w.stop;
    pthread_mutex_unlock(&w.lock);
    return go_on;
}

void transit_wake(void)
{
    pthread_mutex_lock(&w.lock);
    ready_locked();
    pthread_cond_broadcast(&w.cond); /* an early step does no harm */
    pthread_mutex_unlock(&w.lock);
}

void transit_wait_stop(void)
{
    pthread_mutex_lock(&w.lock);
    ready_locked();
    w.stop = 1;
    pthread_cond_broadcast(&w.cond);
    pthread_mutex_unlock(&w.lock);
}

void transit_wait_reset(void)
{
    pthread_mutex_init(&w.lock, NULL);
    w.ready = 0;
    w.stop = 0;
}
