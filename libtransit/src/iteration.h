/* iteration.h - iteration boundaries, from whichever source reports them first: the C API,
 * the Python optimizer hook, or the kernel-sequence period detector. */
#ifndef TRANSIT_ITERATION_H
#define TRANSIT_ITERATION_H

#include "json.h"

#include <stdint.h>

typedef enum {
    TRANSIT_ITER_NONE,
    TRANSIT_ITER_API,
    TRANSIT_ITER_PYHOOK,
    TRANSIT_ITER_KERNEL_PERIOD,
} transit_iter_method;

/* Records the end of an iteration reported by `method`. Every method is counted (the report
 * shows whether they agree); the most explicit one seen so far (api > python-hook >
 * kernel-period) is primary: it times steps and drives the policies. Returns 1 when this
 * mark came from the primary method. */
int transit_iteration_mark(transit_iter_method method);
/* `method` will report iterations (the Python hook is registered): it becomes primary now, so
 * that the period detector's sub-step "iterations" never drive a policy before its first mark. */
void transit_iteration_claim(transit_iter_method method);
uint64_t transit_iteration_count(void);
transit_iter_method transit_iteration_method(void);
void transit_iteration_reset(void);
/* "iterations": {...}, */
void transit_iteration_stats_json(jbuf *b, unsigned warmup);

#endif
