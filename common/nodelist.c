#include "nodelist.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct expand_ctx {
    nodelist_cb cb;
    void *arg;
    size_t count;
    char buf[NODELIST_HOST_MAX];
} expand_ctx_t;

/* A decimal number of s[0..n): its value and width; -EINVAL unless all digits (at most 18). */
static int parse_num(const char *s, size_t n, unsigned long long *v)
{
    *v = 0;
    if (n == 0 || n > 18)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -EINVAL;
        *v = *v * 10 + (unsigned long long)(s[i] - '0');
    }
    return 0;
}

static int expand(expand_ctx_t *x, size_t plen, const char *item, size_t len);

/* Expands the bracket body[0..n) for the item whose prefix fills buf[0..plen); rest follows. */
static int expand_bracket(expand_ctx_t *x, size_t plen, const char *body, size_t n,
                          const char *rest, size_t rlen)
{
    const char *p = body, *end = body + n;
    char num[24];
    int rc;

    if (n == 0)
        return -EINVAL;
    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p)), *dash;
        unsigned long long lo, hi;
        if (comma == NULL)
            comma = end;
        dash = memchr(p, '-', (size_t)(comma - p));
        const char *lo_end = dash != NULL ? dash : comma;
        int width = (int)(lo_end - p);
        if (parse_num(p, (size_t)(lo_end - p), &lo) != 0)
            return -EINVAL;
        hi = lo;
        if (dash != NULL && (parse_num(dash + 1, (size_t)(comma - dash - 1), &hi) != 0 || hi < lo))
            return -EINVAL;
        if (hi - lo >= NODELIST_MAX_HOSTS)
            return -E2BIG;
        for (unsigned long long v = lo; v <= hi; v++) {
            int k = snprintf(num, sizeof(num), "%0*llu", width, v);
            if (plen + (size_t)k >= sizeof(x->buf))
                return -E2BIG;
            memcpy(x->buf + plen, num, (size_t)k);
            if ((rc = expand(x, plen + (size_t)k, rest, rlen)) != 0)
                return rc;
        }
        if (comma == end)
            return 0;
        p = comma + 1;
        if (p == end)
            return -EINVAL; /* "[1,]" */
    }
}

/* Expands item[0..len) after the prefix already in buf[0..plen). */
static int expand(expand_ctx_t *x, size_t plen, const char *item, size_t len)
{
    const char *open = memchr(item, '[', len), *close;
    size_t pre = open != NULL ? (size_t)(open - item) : len;

    if (memchr(item, ']', pre) != NULL)
        return -EINVAL;
    if (plen + pre >= sizeof(x->buf))
        return -E2BIG;
    memcpy(x->buf + plen, item, pre);
    if (open == NULL) {
        if (plen + pre == 0)
            return -EINVAL;
        x->buf[plen + pre] = '\0';
        if (++x->count > NODELIST_MAX_HOSTS)
            return -E2BIG;
        return x->cb(x->buf, x->arg);
    }
    close = memchr(open, ']', len - pre);
    if (close == NULL || memchr(open + 1, '[', (size_t)(close - open - 1)) != NULL)
        return -EINVAL;
    return expand_bracket(x, plen + pre, open + 1, (size_t)(close - open - 1), close + 1,
                          len - (size_t)(close + 1 - item));
}

int nodelist_each(const char *list, nodelist_cb cb, void *arg)
{
    expand_ctx_t x = {.cb = cb, .arg = arg};
    const char *p = list;
    int rc, depth = 0;

    if (list == NULL || *list == '\0')
        return -EINVAL;
    for (const char *q = list;; q++) {
        if (*q == '[')
            depth++;
        else if (*q == ']')
            depth--;
        if (depth < 0 || depth > 1)
            return -EINVAL;
        if (*q != '\0' && (*q != ',' || depth != 0))
            continue;
        if (depth != 0)
            return -EINVAL;
        if (q == p)
            return -EINVAL; /* an empty item */
        if ((rc = expand(&x, 0, p, (size_t)(q - p))) != 0)
            return rc;
        if (*q == '\0')
            return 0;
        p = q + 1;
    }
}

typedef struct first_ctx {
    char *out;
    size_t cap;
    int have;
} first_ctx_t;

static int take_first(const char *host, void *arg)
{
    first_ctx_t *f = arg;

    if (!f->have && (size_t)snprintf(f->out, f->cap, "%s", host) >= f->cap)
        return -E2BIG;
    f->have = 1;
    return 0;
}

int nodelist_first(const char *list, char *out, size_t cap)
{
    first_ctx_t f = {.out = out, .cap = cap};
    int rc = nodelist_each(list, take_first, &f);

    return rc != 0 ? rc : f.have ? 0 : -EINVAL;
}
