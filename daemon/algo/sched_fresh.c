/* Which reads of OUT find the node's input untouched (see sched_fresh_reads in algo.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"

/* Disjoint, sorted, non-adjacent ranges [a, b) of OUT written so far. */
typedef struct ranges {
    uint64_t (*v)[2];
    uint32_t n, cap;
} ranges_t;

/* Index of the first range that ends after x. */
static uint32_t first_after(const ranges_t *w, uint64_t x)
{
    uint32_t lo = 0, hi = w->n;

    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (w->v[mid][1] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* 1: [a, b) lies in one written range; 0: it meets none; -1: partly written. */
static int written(const ranges_t *w, uint64_t a, uint64_t b)
{
    uint32_t i = first_after(w, a);

    if (i == w->n || w->v[i][0] >= b)
        return 0;
    return w->v[i][0] <= a && b <= w->v[i][1] ? 1 : -1;
}

static int add(ranges_t *w, uint64_t a, uint64_t b)
{
    uint32_t i, j;

    if (a >= b)
        return 0;
    /* Ranges that touch or overlap [a, b) are i..j-1; they merge into one. */
    i = a == 0 ? 0 : first_after(w, a - 1);
    for (j = i; j < w->n && w->v[j][0] <= b; j++) {
        a = w->v[j][0] < a ? w->v[j][0] : a;
        b = w->v[j][1] > b ? w->v[j][1] : b;
    }
    if (i == j) {
        if (w->n == w->cap) {
            uint32_t cap = w->cap ? w->cap * 2 : 16;
            void *v = realloc(w->v, cap * sizeof(*w->v));
            if (v == NULL)
                return -ENOMEM;
            w->v = v;
            w->cap = cap;
        }
        memmove(&w->v[i + 1], &w->v[i], (w->n - i) * sizeof(*w->v));
        w->n++;
    } else if (j > i + 1) {
        memmove(&w->v[i + 1], &w->v[j], (w->n - j) * sizeof(*w->v));
        w->n -= j - i - 1;
    }
    w->v[i][0] = a;
    w->v[i][1] = b;
    return 0;
}

/* The flag for a read of OUT[a, a + len) (0 beyond the input's `in` elements or once
 * written), or -1 when the read straddles the input's end or a write. */
static int read_flag(const ranges_t *w, uint64_t in, uint64_t a, uint64_t len, uint8_t bit)
{
    uint64_t b = a + len;

    if (len == 0 || a >= in)
        return 0;
    if (b > in)
        return -1;
    switch (written(w, a, b)) {
    case 0: return bit;
    case 1: return 0;
    default: return -1;
    }
}

int sched_fresh_reads(const sched_t *s, uint64_t len, uint8_t *fresh, int *all)
{
    ranges_t w = {0};
    int rc = 0;

    for (uint32_t k = 0; k < s->nrounds && rc == 0; k++) {
        uint32_t first = s->round_start[k], last = s->round_start[k + 1];
        /* Every read of a round sees OUT as the rounds before left it. */
        for (uint32_t i = first; i < last && rc == 0; i++) {
            const step_t *st = &s->steps[i];
            int src = 0, dst = 0;
            if (st->buf == SCHED_BUF_OUT && st->op != STEP_RECV && st->op != STEP_RECV_REDUCE)
                src = read_flag(&w, len, st->op == STEP_SEND ? st->off : st->src_off, st->len,
                                SCHED_FRESH_SRC);
            if (st->op == STEP_RECV_REDUCE || st->op == STEP_REDUCE)
                dst = read_flag(&w, len, st->off, st->len, SCHED_FRESH_DST);
            if (src < 0 || dst < 0)
                rc = -EINVAL;
            fresh[i] = (uint8_t)(src | dst);
            /* Reductions of one round into one range apply in step order, one group of
             * L1_FOLD_MAX (exec/l1.c) at a time: the next group must read what this one wrote. */
            if (rc == 0 && st->op == STEP_RECV_REDUCE)
                rc = add(&w, st->off, st->off + st->len);
        }
        for (uint32_t i = first; i < last && rc == 0; i++)
            if (s->steps[i].op != STEP_SEND)
                rc = add(&w, s->steps[i].off, s->steps[i].off + s->steps[i].len);
    }
    if (rc == 0)
        *all = len == 0 || written(&w, 0, len) == 1;
    free(w.v);
    return rc;
}
