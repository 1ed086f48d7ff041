/* The schedule builder: steps stamped with virtual times become rounds (see algo_int.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo_int.h"
#include "shm.h"

/* Pipelines cut data into pieces of roughly sqrt(count * K / depth) elements: with a latency
 * of alpha and a cost of beta per element, a pipeline of P pieces over `depth` extra hops
 * takes (P + depth) * (alpha + beta * count / P), which is least at P = sqrt(depth * count /
 * (alpha / beta)). K stands for alpha / beta in elements; 8192 four-byte elements is about
 * what 25 us of latency costs on a 10 Gb/s link. It is a constant on purpose: every node must
 * cut the same pieces, so the choice may depend only on what all nodes know alike. */
#define PIPE_K 8192u
#define PIPE_MAX_PIECES 1024u

void sb_init(sbuild_t *b, uint32_t me, int keep_empty, uint64_t out_elems)
{
    memset(b, 0, sizeof(*b));
    b->me = me;
    b->keep_empty = keep_empty;
    b->out_elems = out_elems;
}

static int sb_grow(sbuild_t *b)
{
    uint32_t cap = b->cap ? b->cap * 2 : 64;
    sb_entry_t *e;

    if (b->cap > UINT32_MAX / 4)
        return -ENOMEM;
    e = realloc(b->e, (size_t)cap * sizeof(*e));
    if (e == NULL)
        return -ENOMEM;
    b->e = e;
    b->cap = cap;
    return 0;
}

static void sb_append(sbuild_t *b, uint64_t t, const step_t *st)
{
    if (b->err != 0)
        return;
    if (b->n == b->cap && (b->err = sb_grow(b)) != 0)
        return;
    b->e[b->n] = (sb_entry_t){.t = t, .seq = b->n, .st = *st};
    b->n++;
}

void sb_step(sbuild_t *b, uint64_t t, uint8_t op, uint8_t buf, uint32_t peer, uint64_t off,
             uint64_t len)
{
    step_t st = {.op = op, .buf = buf, .peer = peer, .off = off, .len = len};

    if (len == 0 && !b->keep_empty)
        return;
    sb_append(b, t, &st);
}

void sb_local(sbuild_t *b, uint64_t t, uint8_t op, uint8_t buf, uint64_t src_off, uint64_t dst_off,
              uint64_t len)
{
    step_t st = {
        .op = op, .buf = buf, .peer = b->me, .off = dst_off, .len = len, .src_off = src_off};

    if (len == 0)
        return;
    sb_append(b, t, &st);
}

void sb_cyclic(sbuild_t *b, const algo_ctx_t *c, const parts_t *p, uint64_t t, uint8_t op,
               uint32_t peer, uint32_t first, uint32_t cnt)
{
    first %= c->n;
    uint32_t end = first + cnt <= c->n ? first + cnt : c->n;

    sb_step(b, t, op, SCHED_BUF_OUT, peer, parts_off(p, first),
            parts_off(p, end) - parts_off(p, first));
    if (first + cnt > c->n)
        sb_step(b, t, op, SCHED_BUF_OUT, peer, 0, parts_off(p, first + cnt - c->n));
}

static int entry_cmp(const void *pa, const void *pb)
{
    const sb_entry_t *a = pa, *b = pb;

    if (a->t != b->t)
        return a->t < b->t ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static uint32_t count_rounds(const sbuild_t *b)
{
    uint32_t r = 0;

    for (uint32_t i = 0; i < b->n; i++)
        if (i == 0 || b->e[i].t != b->e[i - 1].t)
            r++;
    return r;
}

/* Copies the sorted steps out, opening a round wherever the time changes. */
static void fill_rounds(const sbuild_t *b, sched_t *s)
{
    uint64_t scratch = 0;
    uint32_t r = 0;

    for (uint32_t i = 0; i < b->n; i++) {
        if (i == 0 || b->e[i].t != b->e[i - 1].t) {
            s->round_start[r++] = i;
            scratch = 0;
        }
        s->steps[i] = b->e[i].st;
        if (s->steps[i].op == STEP_RECV_REDUCE) {
            scratch += s->steps[i].len;
            if (scratch > s->scratch_elems)
                s->scratch_elems = scratch;
        }
    }
    s->round_start[r] = b->n;
}

static int sorted(const sbuild_t *b)
{
    for (uint32_t i = 1; i < b->n; i++)
        if (b->e[i].t < b->e[i - 1].t)
            return 0;
    return 1;
}

int sb_finish(sbuild_t *b, sched_t *s)
{
    int rc = b->err;

    memset(s, 0, sizeof(*s));
    if (rc == 0) {
        /* Most algorithms add steps in time order already. */
        if (!sorted(b))
            qsort(b->e, b->n, sizeof(*b->e), entry_cmp);
        s->nsteps = b->n;
        s->nrounds = count_rounds(b);
        s->out_elems = b->out_elems;
        s->steps = malloc((size_t)(b->n ? b->n : 1) * sizeof(*s->steps));
        s->round_start = malloc(((size_t)s->nrounds + 1) * sizeof(*s->round_start));
        if (s->steps == NULL || s->round_start == NULL)
            rc = -ENOMEM;
        else
            fill_rounds(b, s);
    }
    free(b->e);
    b->e = NULL;
    if (rc != 0)
        sched_free(s);
    return rc;
}

uint32_t algo_log2_floor(uint64_t x)
{
    return x <= 1 ? 0 : 63u - (uint32_t)__builtin_clzll(x);
}

uint32_t algo_log2_ceil(uint64_t x)
{
    return x <= 1 ? 0 : algo_log2_floor(x - 1) + 1;
}

static uint64_t isqrt(uint64_t x)
{
    uint64_t r = 0;

    for (uint64_t bit = 1ull << 62; bit != 0; bit >>= 2) {
        if (x >= r + bit) {
            x -= r + bit;
            r = (r >> 1) + bit;
        } else {
            r >>= 1;
        }
    }
    return r;
}

uint64_t algo_pieces(uint64_t count, uint64_t depth)
{
    uint64_t p, cap = count < PIPE_MAX_PIECES ? count : PIPE_MAX_PIECES;

    if (count == 0 || depth == 0)
        return 1;
    if (count > UINT64_MAX / depth)
        p = PIPE_MAX_PIECES;
    else
        p = isqrt(depth * count / PIPE_K);
    if (p > cap)
        p = cap;
    return p ? p : 1;
}

parts_t algo_node_parts(const algo_ctx_t *c)
{
    if (c->blk != NULL)
        return (parts_t){.total = c->blk[c->n], .np = c->n, .offs = c->blk};
    if (c->kind == DESC_REDUCE_SCATTER || c->kind == DESC_ALLGATHER || c->kind == DESC_ALLTOALL)
        return (parts_t){.total = (uint64_t)c->n * c->count, .fixed = c->count, .np = c->n};
    return (parts_t){.total = c->count, .fixed = 0, .np = c->n};
}

int algo_rs_ag_build(const algo_ctx_t *c, sbuild_t *b, algo_phase_fn rs, algo_phase_fn ag)
{
    parts_t p = algo_node_parts(c);

    switch (c->kind) {
    case DESC_ALLGATHER: ag(b, c, &p, 0); return 0;
    case DESC_REDUCE_SCATTER: rs(b, c, &p, 0); return 0;
    case DESC_ALLREDUCE: ag(b, c, &p, rs(b, c, &p, 0)); return 0;
    case DESC_BROADCAST: ag(b, c, &p, binomial_parts_scatter(b, c, &p, 0)); return 0;
    case DESC_REDUCE: binomial_parts_gather(b, c, &p, rs(b, c, &p, 0)); return 0;
    case DESC_SCATTER: binomial_scatter_kind(b, c); return 0;
    case DESC_BARRIER: algo_dissemination(b, c); return 0;
    default: return -EINVAL;
    }
}
