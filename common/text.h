/*
 * A message built piece by piece in a fixed buffer (a status answer, an event's text, a log line
 * listing ranks or costs): each piece is cut at the buffer's end, never written past it, and the
 * buffer always ends in a NUL. The one place that does the arithmetic of snprintf's return.
 */
#ifndef HCCLD_COMMON_TEXT_H
#define HCCLD_COMMON_TEXT_H

#include <stdarg.h>
#include <stddef.h>

/* Appends printf(fmt, ...) at buf + *at (cap: buf's size, *at <= cap - 1 on entry; start with
 * *at = 0) and moves *at to the new end. A piece that does not fit is cut; *at then rests at
 * cap - 1 and later pieces add nothing. cap 0 writes nothing. */
void text_add(char *buf, size_t cap, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void text_vadd(char *buf, size_t cap, size_t *at, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* Whether nothing more fits: a piece was cut, or the buffer is exactly full. */
static inline int text_full(size_t cap, size_t at)
{
    return at + 1 >= cap;
}

#endif
