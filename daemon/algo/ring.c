/*
 * Ring: node i only ever sends to i + 1 and receives from i - 1 (relative to the root, for
 * the rooted kinds, where the ring is a chain that starts at the root).
 *   reduce-scatter  n - 1 steps; at step s node i passes on block i - s - 1 with its own
 *                   contribution added, so block i has passed every node when it reaches i.
 *   allgather       n - 1 steps; at step s node i passes on block i - s.
 *   allreduce       reduce-scatter then allgather of count cut into n blocks.
 *   broadcast       a pipelined chain: the data is cut into pieces so that every link of
 *                   the chain carries a different piece at once.
 *   reduce          the same chain run backwards, reducing as pieces travel to the root.
 *   scatter         the root sends the farthest node's block first; each node keeps what
 *                   still has to go further and passes it on one step later.
 *   barrier         allgather of nothing: after n - 1 steps every node has heard from all.
 */
#include <errno.h>

#include "algo/algo_int.h"
#include "shm.h"

static uint32_t ring_mod(const algo_ctx_t *c, uint64_t x)
{
    return (uint32_t)(x % c->n);
}

static void ring_rs(sbuild_t *b, const algo_ctx_t *c, const parts_t *p, uint64_t t0)
{
    uint32_t next = ring_mod(c, c->me + 1ull), prev = ring_mod(c, c->me + c->n - 1ull);

    for (uint32_t s = 0; s + 1 < c->n; s++) {
        uint32_t sb = ring_mod(c, 2ull * c->n + c->me - s - 1);
        uint32_t rb = ring_mod(c, 2ull * c->n + c->me - s - 2);

        sb_send(b, t0 + s, next, parts_off(p, sb), parts_off(p, sb + 1) - parts_off(p, sb));
        sb_reduce(b, t0 + s, prev, parts_off(p, rb), parts_off(p, rb + 1) - parts_off(p, rb));
    }
}

static void ring_ag(sbuild_t *b, const algo_ctx_t *c, const parts_t *p, uint64_t t0)
{
    uint32_t next = ring_mod(c, c->me + 1ull), prev = ring_mod(c, c->me + c->n - 1ull);

    for (uint32_t s = 0; s + 1 < c->n; s++) {
        uint32_t sb = ring_mod(c, 2ull * c->n + c->me - s);
        uint32_t rb = ring_mod(c, 2ull * c->n + c->me - s - 1);

        sb_send(b, t0 + s, next, parts_off(p, sb), parts_off(p, sb + 1) - parts_off(p, sb));
        sb_recv(b, t0 + s, prev, parts_off(p, rb), parts_off(p, rb + 1) - parts_off(p, rb));
    }
}

/* Chain position p receives piece k at time k + p - 1 and forwards it at k + p. */
static void chain_bcast(sbuild_t *b, const algo_ctx_t *c)
{
    uint32_t p = rel_of(c, c->me);
    uint64_t np = algo_pieces(c->count, c->n > 2 ? c->n - 2 : 0);

    for (uint64_t k = 0; k < np; k++) {
        uint64_t off = part_off(c->count, np, k), len = part_off(c->count, np, k + 1) - off;

        if (p > 0)
            sb_recv(b, k + p - 1, abs_of(c, p - 1), off, len);
        if (p + 1 < c->n)
            sb_send(b, k + p, abs_of(c, p + 1), off, len);
    }
}

/* The chain backwards: position p sends piece k toward the root at time k + n - 1 - p, one
 * step after its successor's partial sum of that piece arrived. */
static void chain_reduce(sbuild_t *b, const algo_ctx_t *c)
{
    uint32_t p = rel_of(c, c->me);
    uint64_t np = algo_pieces(c->count, c->n > 2 ? c->n - 2 : 0);

    for (uint64_t k = 0; k < np; k++) {
        uint64_t off = part_off(c->count, np, k), len = part_off(c->count, np, k + 1) - off;

        if (p + 1 < c->n)
            sb_reduce(b, k + c->n - 2 - p, abs_of(c, p + 1), off, len);
        if (p > 0)
            sb_send(b, k + c->n - 1 - p, abs_of(c, p - 1), off, len);
    }
}

/* The block for position q leaves the root at time n - 1 - q and moves one hop per step, so
 * every block reaches its owner at time n - 2. Position p keeps the blocks in transit in
 * relative order from its own (rel_off), which lands at OUT[0]. */
static void chain_scatter(sbuild_t *b, const algo_ctx_t *c)
{
    uint32_t p = rel_of(c, c->me), n = c->n;
    uint64_t base = rel_off(c, p);

    if (p == 0)
        sb_copy(b, 0, SCHED_BUF_IN, node_off(c, c->root), 0, node_len(c, c->root));
    else if (rel_off(c, n) - base > b->out_elems)
        b->out_elems = rel_off(c, n) - base;
    for (uint32_t t = p > 0 ? p - 1 : 0; t + 2 <= n; t++) {
        if (p > 0) {
            uint32_t q = n - 2 - t + p;
            sb_recv(b, t, abs_of(c, p - 1), rel_off(c, q) - base,
                    rel_off(c, q + 1) - rel_off(c, q));
        }
        if (p + 1 < n && t >= p) {
            uint32_t q = n - 1 - t + p;
            uint64_t len = rel_off(c, q + 1) - rel_off(c, q);
            if (p == 0)
                sb_step(b, t, STEP_SEND, SCHED_BUF_IN, abs_of(c, 1), node_off(c, abs_of(c, q)),
                        len);
            else
                sb_send(b, t, abs_of(c, p + 1), rel_off(c, q) - base, len);
        }
    }
}

static void ring_barrier(sbuild_t *b, const algo_ctx_t *c)
{
    uint32_t next = ring_mod(c, c->me + 1ull), prev = ring_mod(c, c->me + c->n - 1ull);

    for (uint32_t s = 0; s + 1 < c->n; s++) {
        sb_send(b, s, next, 0, 0);
        sb_recv(b, s, prev, 0, 0);
    }
}

int algo_ring_build(const algo_ctx_t *c, sbuild_t *b)
{
    parts_t p = algo_node_parts(c);

    switch (c->kind) {
    case DESC_ALLREDUCE:
        ring_rs(b, c, &p, 0);
        ring_ag(b, c, &p, c->n - 1);
        return 0;
    case DESC_REDUCE_SCATTER: ring_rs(b, c, &p, 0); return 0;
    case DESC_ALLGATHER: ring_ag(b, c, &p, 0); return 0;
    case DESC_BROADCAST: chain_bcast(b, c); return 0;
    case DESC_REDUCE: chain_reduce(b, c); return 0;
    case DESC_SCATTER: chain_scatter(b, c); return 0;
    case DESC_BARRIER: ring_barrier(b, c); return 0;
    default: return -EINVAL;
    }
}
