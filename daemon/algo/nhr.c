/*
 * NHR: HCCL's nonuniform hierarchical ring, for any number of nodes n in K = ceil(log2 n) steps
 * per phase, each node sending to one neighbour and receiving from another at every step.
 *   reduce-scatter  at step s = 0 .. K-1, with D = 2^s and m_s = floor((n - 1 + D) / 2D):
 *                   node r sends its partial sums of the blocks r - D - 2Di (i < m_s) to r - D,
 *                   and adds r + D's partial sums of r - 2Di into its own. Each step halves the
 *                   blocks a node answers for (those of its own parity at stride 2D), until
 *                   each holds its own block, reduced: n - 1 blocks sent in all, as ring, in
 *                   log steps, as H-D_R, with no fold for a node count that is no power of two.
 *   allgather       the same steps backwards, sends and receives swapped.
 *   allreduce       reduce-scatter then allgather of count cut into n blocks.
 *   broadcast       a binomial scatter of the n blocks from the root, then the allgather.
 *   reduce          the reduce-scatter, then a binomial gather of the n blocks to the root.
 *   scatter         binomial tree; barrier by dissemination.
 * The blocks of a step lie 2D apart (mod n), so a step is up to m_s transfers (the allgather
 * merges those that come out adjacent). HCCL lays out an allreduce's blocks so that each step's are
 * adjacent; here they stay in node order (a rank's block is where the layout puts it).
 */

#include "algo/algo_int.h"

static uint32_t nhr_mod(const algo_ctx_t *c, int64_t x)
{
    int64_t n = c->n;

    return (uint32_t)(((x % n) + n) % n);
}

/* Blocks first, first - stride, ... (m of them, mod n) as steps of op with peer at time t; with
 * merge, a block next to the one before (below it) joins its transfer. The reduce-scatter does
 * not merge: a transfer must not span a block reduced into already and one that was not
 * (sched_fresh_reads: level 1 may then read the rank's input in place). */
static void nhr_blocks(sbuild_t *b, const algo_ctx_t *c, const parts_t *p, uint64_t t, uint8_t op,
                       uint32_t peer, int64_t first, uint32_t stride, uint32_t m, int merge)
{
    for (uint32_t i = 0; i < m;) {
        uint32_t hi = nhr_mod(c, first - (int64_t)i * stride), lo = hi;
        for (i++; merge && i < m && lo > 0 && nhr_mod(c, first - (int64_t)i * stride) == lo - 1;
             i++)
            lo--;
        sb_step(b, t, op, SCHED_BUF_OUT, peer, parts_off(p, lo),
                parts_off(p, hi + 1) - parts_off(p, lo));
    }
}

static uint64_t nhr_reduce_scatter(sbuild_t *b, const algo_ctx_t *c, const parts_t *p, uint64_t t0)
{
    uint32_t K = algo_log2_ceil(c->n);
    int64_t r = c->me;

    for (uint32_t s = 0; s < K; s++) {
        uint32_t d = 1u << s, m = (c->n - 1 + d) / (2 * d);
        nhr_blocks(b, c, p, t0 + s, STEP_SEND, nhr_mod(c, r - d), r - d, 2 * d, m, 0);
        nhr_blocks(b, c, p, t0 + s, STEP_RECV_REDUCE, nhr_mod(c, r + d), r, 2 * d, m, 0);
    }
    return t0 + K;
}

static uint64_t nhr_allgather(sbuild_t *b, const algo_ctx_t *c, const parts_t *p, uint64_t t0)
{
    uint32_t K = algo_log2_ceil(c->n);
    int64_t r = c->me;

    for (uint32_t s = K; s-- > 0;) {
        uint32_t d = 1u << s, m = (c->n - 1 + d) / (2 * d);
        uint64_t t = t0 + K - 1 - s;
        nhr_blocks(b, c, p, t, STEP_SEND, nhr_mod(c, r + d), r, 2 * d, m, 1);
        nhr_blocks(b, c, p, t, STEP_RECV, nhr_mod(c, r - d), r - d, 2 * d, m, 1);
    }
    return t0 + K;
}

int algo_nhr_build(const algo_ctx_t *c, sbuild_t *b)
{
    return algo_rs_ag_build(c, b, nhr_reduce_scatter, nhr_allgather);
}
