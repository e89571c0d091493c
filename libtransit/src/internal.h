/* internal.h - shared by every libtransit source file (not installed). */
#ifndef TRANSIT_INTERNAL_H
#define TRANSIT_INTERNAL_H

#include <stdint.h>
#include <stddef.h>

/* Exported for tests (bound through cffi in transit/_native.py) but not public API. */
#define TRANSIT_INTERNAL __attribute__((visibility("default")))

#define TRANSIT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TRANSIT_MAX(a, b) ((a) > (b) ? (a) : (b))

/* One log line on stderr, prefixed "transit: ". */
void transit_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
