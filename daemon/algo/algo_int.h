/*
 * Internals shared by the level-1 algorithms: the schedule builder and the index arithmetic
 * they have in common. Not for use outside daemon/algo.
 *
 * Algorithms place each step at a virtual time. Both ends of a transfer give it the same
 * time, and each phase of a composed algorithm starts after the last time of the previous
 * phase on every node, so ordering all steps by time gives one global order that every node
 * follows: that is why the schedules cannot deadlock. The builder sorts a node's steps by
 * time, keeps steps of equal time in the order they were added (both ends add transfers
 * between the same pair in the same order) and turns each distinct time into one round.
 */
#ifndef HCCLD_ALGO_ALGO_INT_H
#define HCCLD_ALGO_ALGO_INT_H

#include <stddef.h>
#include <stdint.h>

#include "algo/algo.h"

typedef struct algo_ctx {
    int kind;   /* enum desc_kind */
    uint32_t n; /* nodes */
    uint32_t me;
    uint32_t root;  /* 0 for kinds without a root */
    uint64_t count; /* elements per block; 0 for BARRIER */
    /* Kinds with a block per node, when nodes hold different numbers of ranks
     * (algo_build_ranks): node i's layout block is [blk[i], blk[i + 1]) (ALLTOALL: this
     * node's blocks to and from node i); NULL: i * count, count each. */
    const uint64_t *blk;
} algo_ctx_t;

/* Where node i's layout block starts (ALLGATHER, REDUCE_SCATTER, SCATTER, ALLTOALL; i <= n). */
static inline uint64_t node_off(const algo_ctx_t *c, uint64_t i)
{
    return c->blk != NULL ? c->blk[i] : i * c->count;
}

static inline uint64_t node_len(const algo_ctx_t *c, uint64_t i)
{
    return node_off(c, i + 1) - node_off(c, i);
}

/* Where relative rank q's block starts when blocks are kept in relative order, the root's
 * first (q <= n): the sizes of the blocks of relative ranks below q. */
static inline uint64_t rel_off(const algo_ctx_t *c, uint32_t q)
{
    uint32_t wrap = c->n - c->root;

    if (c->blk == NULL)
        return (uint64_t)q * c->count;
    return q <= wrap ? c->blk[c->root + q] - c->blk[c->root]
                     : c->blk[c->n] - c->blk[c->root] + c->blk[q - wrap];
}

typedef struct sb_entry {
    uint64_t t;
    uint32_t seq;
    step_t st;
} sb_entry_t;

typedef struct sbuild {
    sb_entry_t *e;
    uint32_t n, cap;
    uint32_t me;
    int keep_empty; /* BARRIER: zero-length steps are the synchronization itself */
    int err;        /* -ENOMEM once an append failed */
    uint64_t out_elems;
} sbuild_t;

void sb_init(sbuild_t *b, uint32_t me, int keep_empty, uint64_t out_elems);
void sb_step(sbuild_t *b, uint64_t t, uint8_t op, uint8_t buf, uint32_t peer, uint64_t off,
             uint64_t len);
/* Sorts into rounds and fills out; frees the builder's memory either way. */
int sb_finish(sbuild_t *b, sched_t *out);

static inline void sb_send(sbuild_t *b, uint64_t t, uint32_t peer, uint64_t off, uint64_t len)
{
    sb_step(b, t, STEP_SEND, SCHED_BUF_OUT, peer, off, len);
}

static inline void sb_recv(sbuild_t *b, uint64_t t, uint32_t peer, uint64_t off, uint64_t len)
{
    sb_step(b, t, STEP_RECV, SCHED_BUF_OUT, peer, off, len);
}

static inline void sb_reduce(sbuild_t *b, uint64_t t, uint32_t peer, uint64_t off, uint64_t len)
{
    sb_step(b, t, STEP_RECV_REDUCE, SCHED_BUF_OUT, peer, off, len);
}

/* A local step (COPY or REDUCE) from buf[src_off, +len) into OUT[dst_off, +len). */
void sb_local(sbuild_t *b, uint64_t t, uint8_t op, uint8_t buf, uint64_t src_off, uint64_t dst_off,
              uint64_t len);

static inline void sb_copy(sbuild_t *b, uint64_t t, uint8_t buf, uint64_t src_off, uint64_t dst_off,
                           uint64_t len)
{
    sb_local(b, t, STEP_COPY, buf, src_off, dst_off, len);
}

/* Start of part i when `total` elements are split into `parts` nearly equal parts. */
static inline uint64_t part_off(uint64_t total, uint64_t parts, uint64_t i)
{
    uint64_t q = total / parts, r = total % parts;

    return i * q + (i < r ? i : r);
}

/* Blocks 0..np-1 of a buffer: block i at offs[i] (np + 1 entries, offs[np] = total), or
 * `fixed` elements each (block i at i * fixed), or, when both are unset, `total` elements cut
 * into np nearly equal blocks. */
typedef struct parts {
    uint64_t total;
    uint64_t fixed;
    uint32_t np;
    const uint64_t *offs;
} parts_t;

static inline uint64_t parts_off(const parts_t *p, uint64_t i)
{
    return p->offs ? p->offs[i] : p->fixed ? i * p->fixed : part_off(p->total, p->np, i);
}

/* One block per node: the layout's blocks for the kinds that have n of them, else the data
 * cut into n nearly equal blocks (ALLREDUCE, and the phases that make up REDUCE and
 * BROADCAST). Blocks may be empty when count < n. */
parts_t algo_node_parts(const algo_ctx_t *c);

/* How many pieces a pipeline of `depth` extra hops should cut `count` elements into. */
uint64_t algo_pieces(uint64_t count, uint64_t depth);
/* floor(log2(x)) for x >= 1, and the smallest L with 2^L >= x. */
uint32_t algo_log2_floor(uint64_t x);
uint32_t algo_log2_ceil(uint64_t x);

static inline uint32_t rel_of(const algo_ctx_t *c, uint32_t node)
{
    return (uint32_t)(((uint64_t)node + c->n - c->root) % c->n);
}

static inline uint32_t abs_of(const algo_ctx_t *c, uint32_t rel)
{
    return (uint32_t)(((uint64_t)rel + c->root) % c->n);
}

/*
 * Block ranges for the binomial scatter and gather: how node `rel` names blocks [q0, q1) of
 * relative ranks. ABS keeps block q at OUT[node_off(abs(q))] (or reads IN there, for the root
 * of SCATTER); REL keeps it at OUT[rel_off(q) - rel_off(rel)], so a node's own block lands at
 * OUT[0].
 */
enum blk_mode { BLK_ABS_OUT, BLK_ABS_IN, BLK_REL };
void blk_emit(sbuild_t *b, const algo_ctx_t *c, uint64_t t, uint8_t op, enum blk_mode mode,
              uint32_t peer_rel, uint32_t rel, uint32_t q0, uint32_t q1);

/* Binomial trees over relative ranks; each returns the first time after its last step. */
uint64_t binomial_scatter(sbuild_t *b, const algo_ctx_t *c, uint64_t t0, int from_in,
                          enum blk_mode keep);
uint64_t binomial_gather(sbuild_t *b, const algo_ctx_t *c, uint64_t t0);
uint64_t binomial_bcast0(sbuild_t *b, const algo_ctx_t *c, uint64_t t0);
/* The same over the blocks of p in OUT, node i's block being block i (the relative ranks
 * [q0, q1) are the cyclic range of blocks root + q0 ..): the halves of BROADCAST and REDUCE
 * that NB and NHR compose with their allgather and reduce-scatter. */
uint64_t binomial_parts_scatter(sbuild_t *b, const algo_ctx_t *c, const parts_t *p, uint64_t t0);
uint64_t binomial_parts_gather(sbuild_t *b, const algo_ctx_t *c, const parts_t *p, uint64_t t0);
/* The whole SCATTER collective on a binomial tree (root's copy and staging included). */
void binomial_scatter_kind(sbuild_t *b, const algo_ctx_t *c);

/* BARRIER by dissemination: at step k send to i + 2^k, hear from i - 2^k (hdr.c). */
void algo_dissemination(sbuild_t *b, const algo_ctx_t *c);

/* Blocks first .. first + cnt - 1 of p, cyclic (mod n), as one or two steps of op with peer
 * at time t: the part up to block n - 1 first, on both sides alike. */
void sb_cyclic(sbuild_t *b, const algo_ctx_t *c, const parts_t *p, uint64_t t, uint8_t op,
               uint32_t peer, uint32_t first, uint32_t cnt);

/* One phase of a composed schedule over blocks p, from time t0; returns the first time after
 * it. */
typedef uint64_t (*algo_phase_fn)(sbuild_t *b, const algo_ctx_t *c, const parts_t *p, uint64_t t0);
/* ALLGATHER by ag, REDUCE_SCATTER by rs, ALLREDUCE by rs then ag over n blocks, BROADCAST by a
 * binomial scatter of those blocks then ag, REDUCE by rs then a binomial gather, SCATTER on a
 * binomial tree, BARRIER by dissemination; -EINVAL for ALLTOALL (NB, NHR). */
int algo_rs_ag_build(const algo_ctx_t *c, sbuild_t *b, algo_phase_fn rs, algo_phase_fn ag);

/* Per-algorithm builders: 0 or -EINVAL for a kind they do not serve. */
int algo_ring_build(const algo_ctx_t *c, sbuild_t *b);
int algo_mesh_build(const algo_ctx_t *c, sbuild_t *b);
int algo_hdr_build(const algo_ctx_t *c, sbuild_t *b);
int algo_tree_build(const algo_ctx_t *c, sbuild_t *b);
int algo_pairwise_build(const algo_ctx_t *c, sbuild_t *b);
int algo_nb_build(const algo_ctx_t *c, sbuild_t *b);
int algo_nhr_build(const algo_ctx_t *c, sbuild_t *b);

#endif
