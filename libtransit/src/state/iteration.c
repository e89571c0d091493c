/* iteration.c - see iteration.h. Step times are kept in a bounded ring for mean and median. */
#include "iteration.h"
#include "internal.h"
#include "state.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define STEP_TIMES_KEPT 4096

static const char *const method_names[] = {"none", "api", "python-hook", "kernel-period"};

static int primary; /* transit_iter_method */
static uint64_t count;  /* marks by the primary method */
static uint64_t by_method[4];
static double last_mark;
static double step_times[STEP_TIMES_KEPT]; /* step i (1-based) at [(i-1) % KEPT] */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Lower is more explicit. */
static int precedence(int m)
{
    return m == TRANSIT_ITER_API ? 0 : m == TRANSIT_ITER_PYHOOK ? 1 : m == TRANSIT_ITER_KERNEL_PERIOD ? 2 : 3;
}

/* lock held. A more explicit source restarts the count from it. */
static void take_over(transit_iter_method m)
{
    if (precedence((int)m) < precedence(primary)) {
        primary = (int)m;
        count = 0;
    }
}

void transit_iteration_claim(transit_iter_method m)
{
    pthread_mutex_lock(&lock);
    take_over(m);
    pthread_mutex_unlock(&lock);
}

int transit_iteration_mark(transit_iter_method m)
{
    int taken = 0;
    pthread_mutex_lock(&lock);
    by_method[m]++;
    take_over(m);
    if ((int)m == primary) {
        double now = transit_now();
        count++;
        if (count > 1)
            step_times[(count - 2) % STEP_TIMES_KEPT] = now - last_mark;
        last_mark = now;
        taken = 1;
    }
    pthread_mutex_unlock(&lock);
    return taken;
}

uint64_t transit_iteration_count(void)
{
    return __atomic_load_n(&count, __ATOMIC_ACQUIRE);
}

double transit_iteration_step_s(uint64_t s)
{
    pthread_mutex_lock(&lock);
    uint64_t steps = count > 1 ? count - 1 : 0;
    double t = s < steps && steps - s <= STEP_TIMES_KEPT ? step_times[s % STEP_TIMES_KEPT] : -1;
    pthread_mutex_unlock(&lock);
    return t;
}

transit_iter_method transit_iteration_method(void)
{
    return (transit_iter_method)__atomic_load_n(&primary, __ATOMIC_ACQUIRE);
}

void transit_iteration_reset(void)
{
    pthread_mutex_init(&lock, NULL);
    primary = TRANSIT_ITER_NONE;
    count = 0;
    memset(by_method, 0, sizeof by_method);
    last_mark = 0;
}

/* In-place heapsort: glibc's qsort may allocate, and this runs from the SIGTERM/SIGINT handler. */
static void sift_down(double *a, size_t root, size_t n)
{
    for (size_t child; (child = 2 * root + 1) < n; root = child) {
        if (child + 1 < n && a[child + 1] > a[child])
            child++;
        if (a[root] >= a[child])
            return;
        double t = a[root];
        a[root] = a[child];
        a[child] = t;
    }
}

static void sort_doubles(double *a, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        sift_down(a, i, n);
    for (size_t end = n; end-- > 1;) {
        double t = a[0];
        a[0] = a[end];
        a[end] = t;
        sift_down(a, 0, end);
    }
}

/* Step k runs from mark k to mark k+1; steps within the warm-up are left out. */
void transit_iteration_summary(unsigned warmup, transit_iteration_snap *out)
{
    static double sorted[STEP_TIMES_KEPT]; /* static: this may run in a signal handler */
    uint64_t marks = transit_iteration_count();
    uint64_t steps = marks > 1 ? marks - 1 : 0;
    size_t n = 0;
    double sum = 0;
    for (uint64_t s = steps > STEP_TIMES_KEPT ? steps - STEP_TIMES_KEPT : 0; s < steps; s++) {
        if (s < warmup)
            continue;
        sorted[n] = step_times[s % STEP_TIMES_KEPT];
        sum += sorted[n++];
    }
    *out = (transit_iteration_snap){.count = marks, .method = method_names[transit_iteration_method()],
                                    .steps_measured = n};
    memcpy(out->by_method, by_method, sizeof out->by_method);
    if (n) {
        sort_doubles(sorted, n);
        out->step_mean_s = sum / (double)n;
        out->step_p50_s = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    }
}
