/* log.c - one-line diagnostics on stderr, always prefixed "transit: ". */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

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
