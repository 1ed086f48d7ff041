/*
 * Closed forms of the schedules' costs (see cost.h for the model), and the selection.
 * Each form follows its schedule's rounds (round_of) and pipelines (pipeline), with blocks
 * of B / n bytes rather than the exact split and without the steps that empty blocks drop,
 * so they are approximations; the unit tests hold them to the replay of the real schedules
 * (cost_replay.c) within a few tens of percent.
 */
#include <errno.h>

#include "algo/algo_int.h"
#include "algo/cost.h"
#include "shm.h"

#define ELEM_BYTES 4.0

typedef struct cf {
    const link_cost_t *lc;
    double a, b, g; /* alpha, beta, gamma */
    double o;       /* processor overhead per message */
    double n, B;    /* nodes; bytes per block */
    uint32_t nn;
    double lp, p, r; /* log2 p, p = largest power of two <= n, r = n - p */
    double lc2;      /* ceil(log2 n) */
    double depth;    /* deepest level of the heap-numbered binary tree */
} cf_t;

/* One round in which a node sends to and receives from `fan` peers (or, one way, only sends
 * or only receives) `bytes` each, reducing what it receives if `red`. The processor issues
 * one message every o; with shared_nic the link issues one every beta * bytes; the round
 * ends when the last message has arrived and been handled, or when the processor has
 * handled all of them. */
static double round_of(const cf_t *c, double bytes, double fan, int red, int one_way)
{
    double wire = c->b * bytes, each = c->lc->shared_nic && wire > c->o ? wire : c->o;
    double last = c->a + 2 * c->o + wire + (fan - 1) * each;
    double cpu = (one_way ? 1 : 2) * fan * c->o;

    return (last > cpu ? last : cpu) + (red ? c->g * bytes : 0);
}

static double rnd(const cf_t *c, double bytes, double fan, int red)
{
    return round_of(c, bytes, fan, red, 0);
}

static double rnd_one_way(const cf_t *c, double bytes, double fan)
{
    return round_of(c, bytes, fan, 0, 1);
}

static double pieces(double bytes, uint64_t depth)
{
    return (double)algo_pieces((uint64_t)(bytes / ELEM_BYTES + 0.5), depth);
}

/* A pipeline of P pieces over `hops` links: the first piece takes `hop` per link, and each
 * further piece leaves `period` after the one before (sends are eager, so the latencies of
 * the links overlap and only the busiest stage paces the pipeline). */
static double pipeline(double P, double hops, double period, double hop)
{
    return (P - 1) * period + hops * hop;
}

static double ring_cost(const cf_t *c, int kind)
{
    double n1 = c->n - 1, blk = c->B / c->n, P = pieces(c->B, c->nn > 2 ? c->nn - 2 : 0);

    switch (kind) {
    case DESC_ALLREDUCE: return n1 * (rnd(c, blk, 1, 1) + rnd(c, blk, 1, 0));
    case DESC_REDUCE_SCATTER: return n1 * rnd(c, c->B, 1, 1);
    case DESC_ALLGATHER:
    case DESC_SCATTER: return n1 * rnd(c, c->B, 1, 0);
    case DESC_BROADCAST:
        return pipeline(P, c->n - 1, c->b * c->B / P + 2 * c->o, rnd(c, c->B / P, 1, 0));
    case DESC_REDUCE:
        return pipeline(P, c->n - 1, (c->b > c->g ? c->b : c->g) * c->B / P + 2 * c->o,
                        rnd(c, c->B / P, 1, 1));
    default: return n1 * rnd(c, 0, 1, 0); /* DESC_BARRIER */
    }
}

/* Reduce-scatter of blocks of `blk` bytes: one round to everyone, then the n - 1 received
 * blocks folded into the own one. */
static double mesh_rs(const cf_t *c, double blk)
{
    return rnd(c, blk, c->n - 1, 0) + (c->n - 1) * c->g * blk;
}

static double mesh_cost(const cf_t *c, int kind)
{
    double n1 = c->n - 1, blk = c->B / c->n;

    switch (kind) {
    case DESC_ALLREDUCE: return mesh_rs(c, blk) + rnd(c, blk, n1, 0);
    case DESC_REDUCE_SCATTER: return mesh_rs(c, c->B);
    case DESC_BROADCAST: return rnd_one_way(c, blk, n1) + rnd(c, blk, n1, 0);
    case DESC_REDUCE: return mesh_rs(c, blk) + rnd_one_way(c, blk, n1);
    case DESC_SCATTER: return rnd_one_way(c, c->B, n1);
    case DESC_BARRIER: return rnd(c, 0, n1, 0);
    default: return rnd(c, c->B, n1, 0); /* ALLGATHER, ALLTOALL */
    }
}

/* Halving or doubling over `bytes` in all: log2 p rounds moving half, a quarter, ... */
static double halve(const cf_t *c, double bytes, int red)
{
    return c->lp * rnd(c, 0, 1, 0) + (c->b + (red ? c->g : 0)) * bytes * (1 - 1 / c->p);
}

/* Binomial scatter or gather of n blocks of blk bytes: the root's link carries n - 1 of them. */
static double binomial_of(const cf_t *c, double blk)
{
    return c->lc2 * rnd_one_way(c, 0, 1) + c->b * blk * (c->n - 1);
}

static double binomial(const cf_t *c)
{
    return binomial_of(c, c->B);
}

static double hdr_cost(const cf_t *c, int kind)
{
    double fold = c->r > 0 ? 1 : 0, all = c->n * c->B;

    switch (kind) {
    case DESC_ALLREDUCE:
        return fold * (rnd(c, c->B, 1, 1) + rnd(c, c->B, 1, 0)) + halve(c, c->B, 1) +
               halve(c, c->B, 0);
    case DESC_REDUCE_SCATTER:
        return fold * (rnd(c, all, 1, 1) + rnd(c, c->B, 1, 0)) + halve(c, all, 1);
    case DESC_ALLGATHER: return fold * (rnd(c, c->B, 1, 0) + rnd(c, all, 1, 0)) + halve(c, all, 0);
    case DESC_BROADCAST: return fold * rnd(c, c->B, 1, 0) + 2 * halve(c, c->B, 0);
    case DESC_REDUCE: return fold * rnd(c, c->B, 1, 1) + halve(c, c->B, 1) + halve(c, c->B, 0);
    case DESC_SCATTER: return binomial(c);
    default: return c->lc2 * rnd(c, 0, 1, 0); /* DESC_BARRIER: dissemination */
    }
}

/* Pipelined broadcast and reduce of `bytes` on the binary tree (two children per node). */
static double tree_down(const cf_t *c, double bytes)
{
    double P = pieces(bytes, (uint64_t)c->depth), s = bytes / P;
    double wire = c->b * s * (c->lc->shared_nic ? 2 : 1);

    return pipeline(P, c->depth, wire + 3 * c->o, c->a + wire + 3 * c->o);
}

/* Up the tree a node takes in two children's pieces for every piece it sends on. */
static double tree_up(const cf_t *c, double bytes)
{
    double P = pieces(bytes, (uint64_t)c->depth), s = bytes / P;
    double in = c->b * (c->lc->shared_nic ? 2 : 1), step = c->b + c->g;

    return pipeline(P, c->depth, (in > step ? in : step) * s + 3 * c->o,
                    rnd(c, s, 1, 1) + c->g * s);
}

/* Both trees at once: a piece every two rounds, each round carrying a piece of each tree (an
 * inner node of one tree sends to two children and up the other, hence 3 with shared_nic;
 * with a link per pair, 1.5: a node's parent in one tree is at times its child in the other,
 * and their messages then share that link); up and down the tree, plus a round for the
 * staggered siblings. */
static double tree_allreduce(const cf_t *c)
{
    double half = c->B / 2, P = pieces(half, (uint64_t)c->depth), s = half / P;

    return pipeline(P, 2 * c->depth + 1,
                    2 * (c->b * (c->lc->shared_nic ? 3 : 1.5) + c->g) * s + 6 * c->o,
                    rnd(c, s, 1, 1));
}

static double tree_cost(const cf_t *c, int kind)
{
    switch (kind) {
    case DESC_ALLREDUCE: return tree_allreduce(c);
    case DESC_BROADCAST: return tree_down(c, c->B);
    case DESC_REDUCE: return tree_up(c, c->B);
    case DESC_ALLGATHER: return binomial(c) + tree_down(c, c->n * c->B);
    case DESC_REDUCE_SCATTER: return tree_up(c, c->n * c->B) + binomial(c);
    case DESC_SCATTER: return binomial(c);
    default: return 2 * c->lc2 * rnd_one_way(c, 0, 1); /* DESC_BARRIER */
    }
}

/* NB's allgather (or, reducing, its reduce-scatter) of blocks of `blk` bytes: ceil(log2 n)
 * rounds, round k moving min(2^k, n - 2^k) blocks each way. */
static double nb_phase(const cf_t *c, double blk, int red)
{
    double t = 0;

    for (uint32_t d = 1; d < c->nn; d *= 2)
        t += rnd(c, (d < c->nn - d ? d : c->nn - d) * blk, 1, red);
    return t;
}

/* NHR's reduce-scatter (red) or allgather of blocks of `blk` bytes: step s moves m_s =
 * floor((n - 1 + 2^s) / 2^(s+1)) blocks to one peer, each a message of its own, which queue on
 * that link (and on the processor, o each way). */
static double nhr_phase(const cf_t *c, double blk, int red)
{
    double t = 0, w = c->b * blk, each = w > c->o ? w : c->o;

    for (uint32_t d = 1; d < c->nn; d *= 2) {
        double m = (double)((c->nn - 1 + d) / (2 * d));
        double last = c->a + 2 * c->o + w + (m - 1) * each, cpu = 2 * m * c->o;
        t += (last > cpu ? last : cpu) + (red ? c->g * m * blk : 0);
    }
    return t;
}

/* NB and NHR: a reduce-scatter phase, an allgather phase, or both over blocks of B / n (phase
 * gives one of them, reducing if red), the blocks scattered from or gathered to a root on a
 * binomial tree; barrier by dissemination. */
static double phases_cost(const cf_t *c, int kind, double (*phase)(const cf_t *, double, int))
{
    double blk = c->B / c->n;

    switch (kind) {
    case DESC_ALLREDUCE: return phase(c, blk, 1) + phase(c, blk, 0);
    case DESC_REDUCE_SCATTER: return phase(c, c->B, 1);
    case DESC_ALLGATHER: return phase(c, c->B, 0);
    case DESC_BROADCAST: return binomial_of(c, blk) + phase(c, blk, 0);
    case DESC_REDUCE: return phase(c, blk, 1) + binomial_of(c, blk);
    case DESC_SCATTER: return binomial(c);
    default: return c->lc2 * rnd(c, 0, 1, 0); /* DESC_BARRIER: dissemination */
    }
}

static void cf_init(cf_t *c, uint32_t n, uint64_t bytes, const link_cost_t *lc)
{
    uint32_t lp = algo_log2_floor(n);

    c->lc = lc;
    c->a = lc->alpha_us;
    c->b = lc->beta_us_per_byte;
    c->g = lc->gamma_us_per_byte;
    c->o = lc->overhead_us;
    c->nn = n;
    c->n = n;
    c->B = (double)((bytes + 3) / 4) * ELEM_BYTES;
    c->lp = lp;
    c->p = (double)(1u << lp);
    c->r = n - c->p;
    c->lc2 = algo_log2_ceil(n);
    c->depth = algo_log2_floor(n);
}

double algo_cost_formula(int algo, int kind, uint32_t nnodes, uint64_t bytes, const link_cost_t *lc)
{
    cf_t c;

    if (!algo_serves(algo, kind) || nnodes == 0 || lc == NULL)
        return -1;
    if (nnodes == 1 || (bytes == 0 && kind != DESC_BARRIER))
        return 0;
    cf_init(&c, nnodes, bytes, lc);
    switch (algo) {
    case ALGO_RING: return ring_cost(&c, kind);
    case ALGO_MESH: return mesh_cost(&c, kind);
    case ALGO_HDR: return hdr_cost(&c, kind);
    case ALGO_TREE: return tree_cost(&c, kind);
    case ALGO_NB: return phases_cost(&c, kind, nb_phase);
    case ALGO_NHR: return phases_cost(&c, kind, nhr_phase);
    default: return (c.n - 1) * rnd(&c, c.B, 1, 0); /* pairwise */
    }
}

double algo_cost(int algo, int kind, uint32_t nnodes, uint64_t bytes, const link_cost_t *lc)
{
    if (nnodes <= ALGO_COST_REPLAY_MAX)
        return algo_cost_replay(algo, kind, nnodes, bytes, lc);
    return algo_cost_formula(algo, kind, nnodes, bytes, lc);
}

int algo_select_costs(int kind, uint32_t nnodes, uint64_t bytes, const link_cost_t *lc,
                      double *costs)
{
    int best = -EINVAL;

    for (int a = 0; a < ALGO_COUNT; a++) {
        costs[a] = algo_serves(a, kind) ? algo_cost(a, kind, nnodes, bytes, lc) : -1;
        if (costs[a] >= 0 && (best < 0 || costs[a] < costs[best]))
            best = a;
    }
    return best;
}

int algo_select(int kind, uint32_t nnodes, uint64_t bytes, const link_cost_t *lc, double *cost_p)
{
    double costs[ALGO_COUNT];
    int best = algo_select_costs(kind, nnodes, bytes, lc, costs);

    if (best >= 0 && cost_p != NULL)
        *cost_p = costs[best];
    return best;
}

link_cost_t algo_cost_fixed(void)
{
    return (link_cost_t){.alpha_us = 25,
                         .beta_us_per_byte = 1.0 / 1250,
                         .gamma_us_per_byte = 1.0 / 10000,
                         .overhead_us = 5,
                         .shared_nic = 1};
}
