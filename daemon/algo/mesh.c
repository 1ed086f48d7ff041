/*
 * Fullmesh: every block goes straight from the node that has it to the node that needs it,
 * and a node posts all its sends at once.
 *   reduce-scatter  one round: block j to node j, and the n - 1 contributions to the node's
 *                   own block reduced into it (see mesh_rs).
 *   allgather       one round: own block to everyone, everyone's block from them.
 *   allreduce       reduce-scatter then allgather of count cut into n blocks.
 *   broadcast       the root sends block j to node j, then an allgather to which the root
 *                   only contributes its own block.
 *   reduce          reduce-scatter, then every node sends its block to the root.
 *   scatter, alltoall, barrier   one round of direct transfers.
 */
#include <errno.h>

#include "algo/algo_int.h"
#include "shm.h"

#define NO_NODE UINT32_MAX

static uint32_t peer_at(const algo_ctx_t *c, uint32_t d, int up)
{
    return (uint32_t)(up ? ((uint64_t)c->me + d) % c->n : ((uint64_t)c->me + c->n - d) % c->n);
}

static uint64_t blk_len(const parts_t *p, uint32_t j)
{
    return parts_off(p, j + 1ull) - parts_off(p, j);
}

/* The contributions to my block all arrive in one round, each reduced into it (the executor
 * holds them aside until the round's transfers are done, then folds them in step order: the
 * one from me - 1 first, so results do not depend on arrival order). OUT is exactly the
 * layout, so the executor can work in the caller's buffer. Returns the first time after the
 * phase. */
static uint64_t mesh_rs(sbuild_t *b, const algo_ctx_t *c, const parts_t *p, uint64_t t0)
{
    uint64_t len = blk_len(p, c->me), mine = parts_off(p, c->me);

    for (uint32_t d = 1; d < c->n; d++) {
        uint32_t j = peer_at(c, d, 1);
        sb_send(b, t0, j, parts_off(p, j), blk_len(p, j));
    }
    for (uint32_t d = 1; d < c->n; d++)
        sb_reduce(b, t0, peer_at(c, d, 0), mine, len);
    return t0 + 1;
}

/* Node `skip` (the root of a broadcast, which has everything) receives nothing. */
static void mesh_ag(sbuild_t *b, const algo_ctx_t *c, const parts_t *p, uint64_t t0, uint32_t skip)
{
    for (uint32_t d = 1; d < c->n; d++) {
        uint32_t to = peer_at(c, d, 1), from = peer_at(c, d, 0);

        if (to != skip)
            sb_send(b, t0, to, parts_off(p, c->me), blk_len(p, c->me));
        if (c->me != skip)
            sb_recv(b, t0, from, parts_off(p, from), blk_len(p, from));
    }
}

static void mesh_bcast(sbuild_t *b, const algo_ctx_t *c, const parts_t *p)
{
    if (c->me == c->root) {
        for (uint32_t d = 1; d < c->n; d++) {
            uint32_t j = peer_at(c, d, 1);
            sb_send(b, 0, j, parts_off(p, j), blk_len(p, j));
        }
    } else {
        sb_recv(b, 0, c->root, parts_off(p, c->me), blk_len(p, c->me));
    }
    mesh_ag(b, c, p, 1, c->root);
}

static void mesh_gather(sbuild_t *b, const algo_ctx_t *c, const parts_t *p, uint64_t t0)
{
    if (c->me != c->root) {
        sb_send(b, t0, c->root, parts_off(p, c->me), blk_len(p, c->me));
        return;
    }
    for (uint32_t d = 1; d < c->n; d++) {
        uint32_t j = peer_at(c, d, 0);
        sb_recv(b, t0, j, parts_off(p, j), blk_len(p, j));
    }
}

static void mesh_scatter(sbuild_t *b, const algo_ctx_t *c)
{
    if (c->me != c->root) {
        sb_recv(b, 0, c->root, 0, node_len(c, c->me));
        return;
    }
    sb_copy(b, 0, SCHED_BUF_IN, node_off(c, c->me), 0, node_len(c, c->me));
    for (uint32_t d = 1; d < c->n; d++) {
        uint32_t j = peer_at(c, d, 1);
        sb_step(b, 0, STEP_SEND, SCHED_BUF_IN, j, node_off(c, j), node_len(c, j));
    }
}

/* Blocks of their own sizes as node_off gives them: this node's to and from each node. */
static void mesh_alltoall(sbuild_t *b, const algo_ctx_t *c)
{
    sb_copy(b, 0, SCHED_BUF_IN, node_off(c, c->me), node_off(c, c->me), node_len(c, c->me));
    for (uint32_t d = 1; d < c->n; d++) {
        uint32_t to = peer_at(c, d, 1), from = peer_at(c, d, 0);

        sb_step(b, 0, STEP_SEND, SCHED_BUF_IN, to, node_off(c, to), node_len(c, to));
        sb_recv(b, 0, from, node_off(c, from), node_len(c, from));
    }
}

int algo_mesh_build(const algo_ctx_t *c, sbuild_t *b)
{
    parts_t p = algo_node_parts(c);

    switch (c->kind) {
    case DESC_ALLREDUCE: mesh_ag(b, c, &p, mesh_rs(b, c, &p, 0), NO_NODE); return 0;
    case DESC_REDUCE_SCATTER: mesh_rs(b, c, &p, 0); return 0;
    case DESC_ALLGATHER: mesh_ag(b, c, &p, 0, NO_NODE); return 0;
    case DESC_BROADCAST: mesh_bcast(b, c, &p); return 0;
    case DESC_REDUCE: mesh_gather(b, c, &p, mesh_rs(b, c, &p, 0)); return 0;
    case DESC_SCATTER: mesh_scatter(b, c); return 0;
    case DESC_ALLTOALL: mesh_alltoall(b, c); return 0;
    case DESC_BARRIER: mesh_ag(b, c, &p, 0, NO_NODE); return 0;
    default: return -EINVAL;
    }
}
