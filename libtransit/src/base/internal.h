/* internal.h - shared by every libtransit source file (not installed): helpers, logging, clocks. */
#ifndef TRANSIT_INTERNAL_H
#define TRANSIT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* Exported for tests (bound through cffi in transit/_native.py) but not public API. */
#define TRANSIT_INTERNAL __attribute__((visibility("default")))

#define TRANSIT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TRANSIT_MAX(a, b) ((a) > (b) ? (a) : (b))

/* One log line on stderr, prefixed "transit: " (log.c). */
void transit_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A log line that the stats file also lists (the first TRANSIT_MAX_WARNINGS). */
#define TRANSIT_MAX_WARNINGS 8
#define TRANSIT_WARNING_BYTES 192
void transit_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The warnings so far (at most TRANSIT_MAX_WARNINGS), and forgetting them (a fork child). */
int transit_warning_count(void);
const char *transit_warning(int i);
void transit_warnings_reset(void);

/* Wall-clock seconds (timestamps) and monotonic nanoseconds (durations, never steps). */
double transit_now(void);
uint64_t transit_monotonic_ns(void);

/* Counters updated with atomics, read without locks by the stats writer. */
static inline void transit_add(uint64_t *c, uint64_t v)
{
    __atomic_fetch_add(c, v, __ATOMIC_RELAXED);
}
static inline void transit_sub(uint64_t *c, uint64_t v)
{
    __atomic_fetch_sub(c, v, __ATOMIC_RELAXED);
}
static inline uint64_t transit_get(const uint64_t *c)
{
    return __atomic_load_n(c, __ATOMIC_RELAXED);
}
static inline void transit_raise_peak(uint64_t *peak, uint64_t value)
{
    uint64_t old = __atomic_load_n(peak, __ATOMIC_RELAXED);
    while (value > old && !__atomic_compare_exchange_n(peak, &old, value, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
}

#endif
