/* json.c - see json.h */
#include "json.h"

#include <stdarg.h>
#include <stdio.h>

void jb_printf(jbuf *b, const char *fmt, ...)
{
    va_list ap;
    if (b->overflow)
        return;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= b->cap - b->len) {
        b->overflow = 1;
        return;
    }
    b->len += (size_t)n;
}

void jb_str(jbuf *b, const char *s)
{
    if (!s) {
        jb_printf(b, "null");
        return;
    }
    jb_printf(b, "\"");
    for (; *s && !b->overflow; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            jb_printf(b, "\\%c", c);
        else if (c < 0x20)
            jb_printf(b, "\\u%04x", c);
        else
            jb_printf(b, "%c", c);
    }
    jb_printf(b, "\"");
}

void jb_trim_comma(jbuf *b)
{
    if (!b->overflow && b->len >= 2 && b->p[b->len - 2] == ',' && b->p[b->len - 1] == ' ')
        b->len -= 2;
    if (b->len < b->cap)
        b->p[b->len] = '\0';
}
