/* iteration.h - iteration boundaries, from whichever source reports them first: the C API,
 * the Python optimizer hook, or the kernel-sequence period detector. */
#ifndef TRANSIT_ITERATION_H
#define TRANSIT_ITERATION_H

#include <stddef.h>
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
/* Step s's time in seconds (0-based: from mark s + 1 to mark s + 2, as in the summary); -1 when
 * that step has not ended or is no longer kept. */
double transit_iteration_step_s(uint64_t s);
transit_iter_method transit_iteration_method(void);
void transit_iteration_reset(void);
typedef struct transit_iteration_snap {
    uint64_t count;          /* marks by the primary method */
    const char *method;      /* "none", "api", "python-hook", "kernel-period" */
    uint64_t by_method[4];   /* marks by each method (transit_iter_method) */
    size_t steps_measured;   /* steps after the warm-up, of the last 4096 */
    double step_mean_s, step_p50_s;
} transit_iteration_snap;
/* Without lock or allocation (the signal path renders the stats). */
void transit_iteration_summary(unsigned warmup, transit_iteration_snap *out);

#endif
