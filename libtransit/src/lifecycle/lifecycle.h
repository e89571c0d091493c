/* lifecycle.h - activation, the first managed allocation, fork, exit (lifecycle.c). */
#ifndef TRANSIT_LIFECYCLE_H
#define TRANSIT_LIFECYCLE_H

#include "state.h"

/* Idempotent; cheap after the first call. Exits the process on a bad TRANSIT_* value. */
void transit_activate(void);
static inline void transit_ensure_active(void)
{
    if (!__atomic_load_n(&transit_g.active, __ATOMIC_ACQUIRE))
        transit_activate();
}
/* At each managed allocation: the first one starts the recorder and the threads (after
 * activation, so CUPTI's own start-up can never re-enter it). */
void transit_lifecycle_first_managed(void);

#endif
