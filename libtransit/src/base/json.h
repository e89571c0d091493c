/* json.h - append-only JSON text into a fixed buffer (no allocation: usable from a signal handler). */
#ifndef TRANSIT_JSON_H
#define TRANSIT_JSON_H

#include <stddef.h>

typedef struct jbuf {
    char *p;
    size_t len, cap;
    int overflow; /* set when text did not fit; the document is then incomplete */
} jbuf;

void jb_printf(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string (quoted, escaped), or null when s is NULL. */
void jb_str(jbuf *b, const char *s);
/* Removes a trailing ", " so lists and objects can be built with a comma after each item. */
void jb_trim_comma(jbuf *b);

#endif
