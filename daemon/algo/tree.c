/*
 * Tree: a binary tree over relative ranks numbered as a heap (v's children are 2v + 1 and
 * 2v + 2), with the data cut into pieces that flow through it as a pipeline.
 *   broadcast       node v at depth h receives piece k at time k + h - 1 and passes it to
 *                   both children at k + h.
 *   reduce          node v sends the sum of its subtree's piece k up at time 2k + L(v). Two
 *                   children may not reduce into the same piece in one round, so pieces go
 *                   every other step and siblings are offset by one: L(v) = 2 * height(v),
 *                   plus one for a second child. A node thus hears from both children before
 *                   it sends up.
 *   allreduce       double binary tree: half the data goes up and down the tree rooted at
 *                   node 0, half up and down its mirror image (rank n - 1 - i), in which the
 *                   leaves of the first are the inner nodes, so every node forwards about
 *                   as much as every other. Each half is reduced up the tree and the root
 *                   sends piece k down as soon as it has it, at time L(root) + 2k.
 *   allgather       binomial gather to node 0, then broadcast of all n blocks.
 *   reduce-scatter  reduce of all n blocks to node 0, then binomial scatter.
 *   scatter         binomial tree; barrier: binomial gather and fan-out of nothing.
 */
#include <errno.h>

#include "algo/algo_int.h"
#include "shm.h"

typedef struct btree {
    const algo_ctx_t *c;
    int mirror; /* the second tree of the double binary tree */
    uint32_t v; /* my heap index */
} btree_t;

static void bt_init(btree_t *bt, const algo_ctx_t *c, int mirror)
{
    bt->c = c;
    bt->mirror = mirror;
    bt->v = mirror ? c->n - 1 - c->me : rel_of(c, c->me);
}

static uint32_t bt_node(const btree_t *bt, uint32_t v)
{
    return bt->mirror ? bt->c->n - 1 - v : abs_of(bt->c, v);
}

static uint32_t depth(uint32_t v)
{
    return algo_log2_floor((uint64_t)v + 1);
}

/* Levels below v: its leftmost descendant h levels down is (v + 1) * 2^h - 1. */
static uint32_t height(uint32_t v, uint32_t n)
{
    uint32_t h = 0;

    while ((((uint64_t)v + 1) << (h + 1)) <= n)
        h++;
    return h;
}

static uint64_t up_lag(uint32_t v, uint32_t n)
{
    return 2ull * height(v, n) + (v > 0 && v % 2 == 0);
}

/* Pieces of [base, base + len) moving down: the root sends piece k at t0 + stride * k. */
static void bt_down(sbuild_t *b, const btree_t *bt, uint64_t base, uint64_t len, uint64_t t0,
                    uint64_t stride)
{
    uint32_t v = bt->v, n = bt->c->n, h = depth(v);
    uint64_t np = algo_pieces(len, depth(n - 1));

    for (uint64_t k = 0; k < np; k++) {
        uint64_t off = base + part_off(len, np, k),
                 plen = part_off(len, np, k + 1) - part_off(len, np, k);
        uint64_t t = t0 + stride * k + h;

        if (v > 0)
            sb_recv(b, t - 1, bt_node(bt, (v - 1) / 2), off, plen);
        for (uint64_t ch = 2ull * v + 1; ch <= 2ull * v + 2 && ch < n; ch++)
            sb_send(b, t, bt_node(bt, (uint32_t)ch), off, plen);
    }
}

/* Pieces of [base, base + len) moving up, reduced on the way; returns the time at which the
 * root holds every piece. */
static uint64_t bt_up(sbuild_t *b, const btree_t *bt, uint64_t base, uint64_t len)
{
    uint32_t v = bt->v, n = bt->c->n;
    uint64_t np = algo_pieces(len, depth(n - 1));

    for (uint64_t k = 0; k < np; k++) {
        uint64_t off = base + part_off(len, np, k),
                 plen = part_off(len, np, k + 1) - part_off(len, np, k);

        for (uint64_t ch = 2ull * v + 1; ch <= 2ull * v + 2 && ch < n; ch++)
            sb_reduce(b, 2 * k + up_lag((uint32_t)ch, n), bt_node(bt, (uint32_t)ch), off, plen);
        if (v > 0)
            sb_send(b, 2 * k + up_lag(v, n), bt_node(bt, (v - 1) / 2), off, plen);
    }
    return 2 * np + up_lag(0, n);
}

/* Reduce then broadcast on one tree, interleaved: piece k goes down from time L(root) + 2k. */
static void bt_allreduce(sbuild_t *b, const btree_t *bt, uint64_t base, uint64_t len)
{
    bt_up(b, bt, base, len);
    bt_down(b, bt, base, len, up_lag(0, bt->c->n), 2);
}

static void tree_allreduce(sbuild_t *b, const algo_ctx_t *c)
{
    uint64_t half = c->count - c->count / 2;
    btree_t a, m;

    bt_init(&a, c, 0);
    bt_init(&m, c, 1);
    bt_allreduce(b, &a, 0, half);
    bt_allreduce(b, &m, half, c->count - half);
}

static void tree_allgather(sbuild_t *b, const algo_ctx_t *c)
{
    btree_t bt;
    uint64_t t = binomial_gather(b, c, 0);

    bt_init(&bt, c, 0);
    bt_down(b, &bt, 0, node_off(c, c->n), t, 1);
}

static void tree_reduce_scatter(sbuild_t *b, const algo_ctx_t *c)
{
    btree_t bt;
    uint64_t t;

    bt_init(&bt, c, 0);
    t = bt_up(b, &bt, 0, node_off(c, c->n));
    binomial_scatter(b, c, t, 0, BLK_ABS_OUT);
}

int algo_tree_build(const algo_ctx_t *c, sbuild_t *b)
{
    btree_t bt;

    bt_init(&bt, c, 0);
    switch (c->kind) {
    case DESC_ALLREDUCE: tree_allreduce(b, c); return 0;
    case DESC_BROADCAST: bt_down(b, &bt, 0, c->count, 0, 1); return 0;
    case DESC_REDUCE: bt_up(b, &bt, 0, c->count); return 0;
    case DESC_ALLGATHER: tree_allgather(b, c); return 0;
    case DESC_REDUCE_SCATTER: tree_reduce_scatter(b, c); return 0;
    case DESC_SCATTER: binomial_scatter_kind(b, c); return 0;
    case DESC_BARRIER: binomial_bcast0(b, c, binomial_gather(b, c, 0)); return 0;
    default: return -EINVAL;
    }
}
