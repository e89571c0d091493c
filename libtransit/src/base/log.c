/* log.c - one-line diagnostics on stderr, always prefixed "transit: "; the warnings the stats
 * file lists; clocks. */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
    char text[TRANSIT_MAX_WARNINGS][TRANSIT_WARNING_BYTES];
    int count; /* may pass TRANSIT_MAX_WARNINGS: those past it are logged only */
} warnings;

void transit_log(const char *fmt, ...)
{
    /* One write() per line so lines from many ranks never interleave mid-line. */
    char line[1024];
    int n = snprintf(line, sizeof line, "transit: ");
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof line - 1)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t ignored = write(STDERR_FILENO, line, (size_t)n);
    (void)ignored;
}

void transit_warn(const char *fmt, ...)
{
    char msg[TRANSIT_WARNING_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    transit_log("%s", msg);
    int i = __atomic_fetch_add(&warnings.count, 1, __ATOMIC_RELAXED);
    if (i < TRANSIT_MAX_WARNINGS)
        memcpy(warnings.text[i], msg, sizeof msg);
}

int transit_warning_count(void)
{
    int n = __atomic_load_n(&warnings.count, __ATOMIC_RELAXED);
    return n < TRANSIT_MAX_WARNINGS ? n : TRANSIT_MAX_WARNINGS;
}

const char *transit_warning(int i)
{
    return warnings.text[i];
}

void transit_warnings_reset(void)
{
    warnings.count = 0;
}

double transit_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t transit_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
