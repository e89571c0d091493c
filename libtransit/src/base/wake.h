/* wake.h - the library's two threads wait here between their steps (lifecycle.c), and any
 * thread can wake them early (an iteration mark, a re-profile). */
#ifndef TRANSIT_WAKE_H
#define TRANSIT_WAKE_H

#include <pthread.h>
#include <stdbool.h>

/* Waits up to ms or until woken; false once transit_wait_stop() was called. */
bool transit_wait(unsigned ms);
void transit_wake(void);
void transit_wait_stop(void);
/* After fork, or before starting the threads again. */
void transit_wait_reset(void);
/* A condition variable whose timed waits count on CLOCK_MONOTONIC (a wall-clock step cannot
 * stretch them). */
void transit_cond_init_monotonic(pthread_cond_t *cond);

#endif
