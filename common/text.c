/* A message built piece by piece in a fixed buffer (text.h). */
#include "text.h"

#include <stdio.h>

void text_vadd(char *buf, size_t cap, size_t *at, const char *fmt, va_list ap)
{
    if (cap == 0)
        return;
    if (text_full(cap, *at)) { /* a 1-byte buffer, or one cut before: just the end */
        *at = cap - 1;
        buf[*at] = '\0';
        return;
    }
    int k = vsnprintf(buf + *at, cap - *at, fmt, ap);
    if (k < 0) { /* an encoding error: keep what was there */
        buf[*at] = '\0';
        return;
    }
    *at = (size_t)k < cap - *at ? *at + (size_t)k : cap - 1;
}

void text_add(char *buf, size_t cap, size_t *at, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    text_vadd(buf, cap, at, fmt, ap);
    va_end(ap);
}
