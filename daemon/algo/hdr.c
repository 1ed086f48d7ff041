/*
 * H-D_R: recursive halving and doubling for any number of nodes.
 * With p the largest power of two <= n and r = n - p, the first 2r relative ranks pair up:
 * each odd one ("extra") hands its data to the even one below it at time 0 and takes the
 * result back at the end, so that p nodes (new ranks v) run the power-of-two algorithm in
 * between. Node v stands for relative ranks {2v, 2v+1} if v < r, else {v + r}; the data are
 * cut into p groups, group v being what v owns at the end of a reduce-scatter.
 *   reduce-scatter  halving: at distance d = p/2 .. 1, keep the half of the current window
 *                   that holds v, send the other half to v ^ d and reduce what it sends back.
 *   allgather       doubling: at distance d = 1 .. p/2, swap windows with v ^ d.
 *   allreduce       halving then doubling over count cut into p groups (Rabenseifner).
 *   reduce          halving, then a binomial gather of the groups to v = 0 (the root).
 *   broadcast       binomial scatter of the groups from the root, then doubling (van de
 *                   Geijn).
 *   scatter         binomial tree (binomial.c).
 *   barrier         dissemination: at step k send to i + 2^k, hear from i - 2^k.
 * For REDUCE_SCATTER and ALLGATHER group v is the blocks of the nodes v stands for, which
 * are adjacent, so the groups stay contiguous.
 */
#include <errno.h>

#include "algo/algo_int.h"
#include "shm.h"

typedef struct hdr {
    const algo_ctx_t *c;
    uint32_t p, r, logp;
    uint32_t rel;
    int extra;    /* an odd relative rank below 2r: sits out between the folds */
    uint32_t v;   /* new rank among the p, when not extra */
    int by_block; /* groups are pairs of layout blocks (REDUCE_SCATTER, ALLGATHER) */
    parts_t parts;
} hdr_t;

static void hdr_init(hdr_t *h, const algo_ctx_t *c)
{
    h->c = c;
    h->logp = algo_log2_floor(c->n);
    h->p = 1u << h->logp;
    h->r = c->n - h->p;
    h->rel = rel_of(c, c->me);
    h->extra = h->rel < 2 * h->r && (h->rel & 1);
    h->v = h->rel < 2 * h->r ? h->rel / 2 : h->rel - h->r;
    h->by_block = c->kind == DESC_REDUCE_SCATTER || c->kind == DESC_ALLGATHER;
    h->parts = h->by_block ? algo_node_parts(c) : (parts_t){.total = c->count, .np = h->p};
}

/* The first relative rank that v stands for, which is also the first block of its group. */
static uint32_t v_rel(const hdr_t *h, uint32_t v)
{
    return v < h->r ? 2 * v : v + h->r;
}

static uint32_t v_node(const hdr_t *h, uint32_t v)
{
    return abs_of(h->c, v_rel(h, v));
}

static uint64_t gstart(const hdr_t *h, uint32_t v)
{
    return parts_off(&h->parts, h->by_block ? v_rel(h, v) : v);
}

/* One step on groups [g0, g1) with new rank `peer`. */
static void gstep(sbuild_t *b, const hdr_t *h, uint64_t t, uint8_t op, uint32_t peer, uint32_t g0,
                  uint32_t g1)
{
    sb_step(b, t, op, SCHED_BUF_OUT, v_node(h, peer), gstart(h, g0), gstart(h, g1) - gstart(h, g0));
}

static void halving(sbuild_t *b, const hdr_t *h, uint64_t t0)
{
    for (uint32_t j = 0; j < h->logp; j++) {
        uint32_t d = h->p >> (j + 1), lo = h->v & ~(2 * d - 1), peer = h->v ^ d;
        uint32_t keep = (h->v & d) ? lo + d : lo, give = (h->v & d) ? lo : lo + d;

        gstep(b, h, t0 + j, STEP_SEND, peer, give, give + d);
        gstep(b, h, t0 + j, STEP_RECV_REDUCE, peer, keep, keep + d);
    }
}

static void doubling(sbuild_t *b, const hdr_t *h, uint64_t t0)
{
    for (uint32_t j = 0; j < h->logp; j++) {
        uint32_t d = 1u << j, peer = h->v ^ d;

        gstep(b, h, t0 + j, STEP_SEND, peer, h->v & ~(d - 1), (h->v & ~(d - 1)) + d);
        gstep(b, h, t0 + j, STEP_RECV, peer, peer & ~(d - 1), (peer & ~(d - 1)) + d);
    }
}

/* Binomial scatter of groups from v = 0: v receives [v, v + lowbit(v)) from v - lowbit(v). */
static void group_scatter(sbuild_t *b, const hdr_t *h, uint64_t t0)
{
    for (uint32_t j = 0; j < h->logp; j++) {
        uint32_t d = h->p >> (j + 1);

        if (h->v % (2 * d) == 0)
            gstep(b, h, t0 + j, STEP_SEND, h->v + d, h->v + d, h->v + 2 * d);
        else if (h->v % (2 * d) == d)
            gstep(b, h, t0 + j, STEP_RECV, h->v - d, h->v, h->v + d);
    }
}

static void group_gather(sbuild_t *b, const hdr_t *h, uint64_t t0)
{
    for (uint32_t j = 0; j < h->logp; j++) {
        uint32_t d = 1u << j;

        if (h->v % (2 * d) == d)
            gstep(b, h, t0 + j, STEP_SEND, h->v - d, h->v, h->v + d);
        else if (h->v % (2 * d) == 0)
            gstep(b, h, t0 + j, STEP_RECV, h->v + d, h->v + d, h->v + 2 * d);
    }
}

/* One transfer of [off, +len) between an extra (odd rel below 2r) and the even rel below it:
 * from the extra to the even one (the fold-in), or back when `to_extra` (the fold-out). The
 * receiving side applies `op`. Nodes from 2r on take no part. */
static void fold(sbuild_t *b, const hdr_t *h, uint64_t t, int to_extra, uint8_t op, uint64_t off,
                 uint64_t len)
{
    const algo_ctx_t *c = h->c;

    if (h->rel >= 2 * h->r)
        return;
    if (h->extra == !to_extra)
        sb_send(b, t, abs_of(c, h->extra ? h->rel - 1 : h->rel + 1), off, len);
    else
        sb_step(b, t, op, SCHED_BUF_OUT, abs_of(c, h->extra ? h->rel - 1 : h->rel + 1), off, len);
}

void algo_dissemination(sbuild_t *b, const algo_ctx_t *c)
{
    for (uint32_t k = 0; k < algo_log2_ceil(c->n); k++) {
        uint64_t d = 1ull << k;

        sb_send(b, k, (uint32_t)((c->me + d) % c->n), 0, 0);
        sb_recv(b, k, (uint32_t)((c->me + c->n - d) % c->n), 0, 0);
    }
}

/* Times: fold-in at 0, then two phases of logp steps each (t1, t2), then fold-out (t3). */
static void hdr_phases(sbuild_t *b, const hdr_t *h)
{
    uint64_t t1 = 1, t2 = t1 + h->logp, t3 = t2 + h->logp;
    /* The odd node's block of a pair that folds (REDUCE_SCATTER, ALLGATHER: root 0); a node
     * past the last pair folds nothing and gets an empty range. */
    uint32_t o = (h->rel | 1) < h->c->n ? (h->rel | 1) : 0;
    uint64_t all = h->parts.total, odd = node_off(h->c, o);
    uint64_t cnt = (h->rel | 1) < h->c->n ? node_off(h->c, o + 1ull) - odd : 0;
    int in = !h->extra;

    switch (h->c->kind) {
    case DESC_ALLREDUCE:
        fold(b, h, 0, 0, STEP_RECV_REDUCE, 0, all);
        if (in) {
            halving(b, h, t1);
            doubling(b, h, t2);
        }
        fold(b, h, t3, 1, STEP_RECV, 0, all);
        break;
    case DESC_REDUCE_SCATTER:
        fold(b, h, 0, 0, STEP_RECV_REDUCE, 0, all);
        if (in)
            halving(b, h, t1);
        fold(b, h, t3, 1, STEP_RECV, odd, cnt);
        break;
    case DESC_ALLGATHER:
        fold(b, h, 0, 0, STEP_RECV, odd, cnt);
        if (in)
            doubling(b, h, t2);
        fold(b, h, t3, 1, STEP_RECV, 0, all);
        break;
    case DESC_REDUCE:
        fold(b, h, 0, 0, STEP_RECV_REDUCE, 0, all);
        if (in) {
            halving(b, h, t1);
            group_gather(b, h, t2);
        }
        break;
    default: /* DESC_BROADCAST */
        if (in) {
            group_scatter(b, h, t1);
            doubling(b, h, t2);
        }
        fold(b, h, t3, 1, STEP_RECV, 0, all);
        break;
    }
}

int algo_hdr_build(const algo_ctx_t *c, sbuild_t *b)
{
    hdr_t h;

    switch (c->kind) {
    case DESC_SCATTER: binomial_scatter_kind(b, c); return 0;
    case DESC_BARRIER: algo_dissemination(b, c); return 0;
    case DESC_ALLREDUCE:
    case DESC_REDUCE_SCATTER:
    case DESC_ALLGATHER:
    case DESC_REDUCE:
    case DESC_BROADCAST: break;
    default: return -EINVAL;
    }
    hdr_init(&h, c);
    hdr_phases(b, &h);
    return 0;
}
