/*
 * NB: HCCL's nonuniform Bruck, for any number of nodes n in ceil(log2 n) steps per phase, with
 * no extra traffic when n is no power of two (H-D_R folds the extra nodes in and out; ring takes
 * n - 1 steps). With K = ceil(log2 n) and, at step k, d = 2^k and c_k = min(d, n - d) blocks
 * (the last step of an n that is no power of two moves fewer: the nonuniform part):
 *   allgather       at step k = 0 .. K-1 node i sends the blocks i .. i + c_k - 1 (cyclic) to
 *                   i - d and receives i + d .. i + d + c_k - 1 from i + d. After step k it holds
 *                   i .. i + min(2d, n) - 1: every block once, in its own place, n - 1 in all.
 *   reduce-scatter  the same steps backwards, sends and receives swapped, receiving reduces:
 *                   at k = K-1 .. 0 node i sends its partial sums of i + d .. i + d + c_k - 1 to
 *                   i + d and adds i - d's of i .. i + c_k - 1. Each block's contributions climb
 *                   the allgather's tree of that block toward its owner.
 *   allreduce       reduce-scatter then allgather of count cut into n blocks (bandwidth as
 *                   ring's, steps as H-D_R's without its fold).
 *   broadcast       a binomial scatter of the n blocks from the root, then the allgather.
 *   reduce          the reduce-scatter, then a binomial gather of the n blocks to the root.
 *   scatter         binomial tree (binomial.c); barrier by dissemination.
 * A cyclic range that wraps past node n - 1 moves as two transfers, the part up to the end
 * first, on both sides alike (sb_cyclic).
 */

#include "algo/algo_int.h"

/* The same in up to three pieces, cut at `x` and `y` blocks from first (both <= cnt), so that
 * no transfer reads a range partly reduced into already (sched_fresh_reads: the executor may
 * then leave the input where it is). */
static void nb_cut(sbuild_t *b, const algo_ctx_t *c, const parts_t *p, uint64_t t, uint8_t op,
                   uint32_t peer, uint32_t first, uint32_t cnt, uint32_t x, uint32_t y)
{
    uint32_t lo = x < y ? x : y, hi = x < y ? y : x;

    sb_cyclic(b, c, p, t, op, peer, first, lo);
    sb_cyclic(b, c, p, t, op, peer, first + lo, hi - lo);
    sb_cyclic(b, c, p, t, op, peer, first + hi, cnt - hi);
}

static uint32_t nb_mod(const algo_ctx_t *c, uint64_t x)
{
    return (uint32_t)(x % c->n);
}

/* Steps k = 0 .. K-1 at t0 + k; returns the first time after them. */
static uint64_t nb_allgather(sbuild_t *b, const algo_ctx_t *c, const parts_t *p, uint64_t t0)
{
    uint32_t K = algo_log2_ceil(c->n);

    for (uint32_t k = 0; k < K; k++) {
        uint32_t d = 1u << k, cnt = d < c->n - d ? d : c->n - d;
        sb_cyclic(b, c, p, t0 + k, STEP_SEND, nb_mod(c, (uint64_t)c->me + c->n - d), c->me, cnt);
        sb_cyclic(b, c, p, t0 + k, STEP_RECV, nb_mod(c, (uint64_t)c->me + d), c->me + d, cnt);
    }
    return t0 + K;
}

/* The allgather's steps backwards: step k at t0 + K - 1 - k. Before step k a node i has
 * reduced into blocks i .. i + w - 1 (w: the largest c_j of the steps before), so the range
 * it sends (which starts d blocks on) is reduced into up to w - d blocks, and the one the
 * receiver adds into (its own first blocks) up to w: both ends cut there alike. */
static uint64_t nb_reduce_scatter(sbuild_t *b, const algo_ctx_t *c, const parts_t *p, uint64_t t0)
{
    uint32_t K = algo_log2_ceil(c->n), w = 0;

    for (uint32_t k = K; k-- > 0;) {
        uint32_t d = 1u << k, cnt = d < c->n - d ? d : c->n - d;
        uint32_t x = w > d ? (w - d < cnt ? w - d : cnt) : 0, y = w < cnt ? w : cnt;
        uint64_t t = t0 + K - 1 - k;
        nb_cut(b, c, p, t, STEP_SEND, nb_mod(c, (uint64_t)c->me + d), c->me + d, cnt, x, y);
        nb_cut(b, c, p, t, STEP_RECV_REDUCE, nb_mod(c, (uint64_t)c->me + c->n - d), c->me, cnt, x,
               y);
        w = cnt > w ? cnt : w;
    }
    return t0 + K;
}

int algo_nb_build(const algo_ctx_t *c, sbuild_t *b)
{
    return algo_rs_ag_build(c, b, nb_reduce_scatter, nb_allgather);
}
