/*
 * Binomial trees over relative ranks (rank minus root, modulo n), for any n: the scatter and
 * gather of whole blocks that tree and H-D_R share, and a plain broadcast for barriers.
 * In the tree of n nodes, node rel's subtree is [rel, rel + lowbit(rel)) clipped to n, and it
 * hears from rel - lowbit(rel). Step j of L = ceil(log2 n) steps pairs nodes 2^(L-1-j) apart
 * going down (scatter, broadcast) and 2^j apart going up (gather).
 */
#include "algo/algo_int.h"

/* Emits one transfer of blocks [q0, q1) as up to two steps: a range of relative ranks maps to
 * absolute blocks that wrap past n - 1 once, and both ends split at the same place so that
 * their lengths match even when one end keeps blocks in relative order. */
void blk_emit(sbuild_t *b, const algo_ctx_t *c, uint64_t t, uint8_t op, enum blk_mode mode,
              uint32_t peer_rel, uint32_t rel, uint32_t q0, uint32_t q1)
{
    uint32_t wrap = c->n - c->root, peer = abs_of(c, peer_rel);
    uint32_t seg[2][2] = {{q0, q1 < wrap ? q1 : wrap}, {q0 > wrap ? q0 : wrap, q1}};

    if (c->count == 0) {
        sb_step(b, t, op, SCHED_BUF_OUT, peer, 0, 0);
        return;
    }
    for (int i = 0; i < 2; i++) {
        uint32_t a = seg[i][0], e = seg[i][1];
        uint64_t off;

        if (a >= e)
            continue;
        uint64_t len;
        if (mode == BLK_REL) {
            off = rel_off(c, a) - rel_off(c, rel);
            len = rel_off(c, e) - rel_off(c, a);
        } else {
            /* Whole layout blocks, which may differ in size (see node_off). */
            off = node_off(c, abs_of(c, a));
            len = node_off(c, abs_of(c, a) + (uint64_t)(e - a)) - off;
        }
        sb_step(b, t, op, mode == BLK_ABS_IN ? SCHED_BUF_IN : SCHED_BUF_OUT, peer, off, len);
    }
}

static uint32_t min_u32(uint32_t a, uint64_t b)
{
    return b < a ? (uint32_t)b : a;
}

/* How a walk of the tree moves relative blocks [q0, q1) with relative rank peer_rel at time t
 * (op: STEP_SEND or STEP_RECV); arg is the walk's caller's. */
typedef void (*tree_move_fn)(sbuild_t *b, const algo_ctx_t *c, uint64_t t, uint8_t op,
                             uint32_t peer_rel, uint32_t rel, uint32_t q0, uint32_t q1,
                             const void *arg);

/* Down the tree (scatter): at step j, distance 2^(L-1-j), a node hands its upper half on. */
static uint64_t tree_down(sbuild_t *b, const algo_ctx_t *c, uint64_t t0, tree_move_fn move,
                          const void *arg)
{
    uint32_t rel = rel_of(c, c->me), levels = algo_log2_ceil(c->n);

    for (uint32_t j = 0; j < levels; j++) {
        uint64_t d = 1ull << (levels - 1 - j);

        if (rel % (2 * d) == 0 && rel + d < c->n)
            move(b, c, t0 + j, STEP_SEND, (uint32_t)(rel + d), rel, (uint32_t)(rel + d),
                 min_u32(c->n, rel + 2 * d), arg);
        else if (rel % (2 * d) == d)
            move(b, c, t0 + j, STEP_RECV, (uint32_t)(rel - d), rel, rel, min_u32(c->n, rel + d),
                 arg);
    }
    return t0 + levels;
}

/* Up the tree (gather): at step j, distance 2^j, a node hands its subtree to its parent. */
static uint64_t tree_up(sbuild_t *b, const algo_ctx_t *c, uint64_t t0, tree_move_fn move,
                        const void *arg)
{
    uint32_t rel = rel_of(c, c->me), levels = algo_log2_ceil(c->n);

    for (uint32_t j = 0; j < levels; j++) {
        uint64_t d = 1ull << j;

        if (rel % (2 * d) == d)
            move(b, c, t0 + j, STEP_SEND, (uint32_t)(rel - d), rel, rel, min_u32(c->n, rel + d),
                 arg);
        else if (rel % (2 * d) == 0 && rel + d < c->n)
            move(b, c, t0 + j, STEP_RECV, (uint32_t)(rel + d), rel, (uint32_t)(rel + d),
                 min_u32(c->n, rel + 2 * d), arg);
    }
    return t0 + levels;
}

/* Layout blocks (blk_emit): `keep` as they are kept, the root's sends read from IN if from_in. */
typedef struct blk_walk {
    int from_in;
    enum blk_mode keep;
} blk_walk_t;

static void move_blocks(sbuild_t *b, const algo_ctx_t *c, uint64_t t, uint8_t op, uint32_t peer_rel,
                        uint32_t rel, uint32_t q0, uint32_t q1, const void *arg)
{
    const blk_walk_t *w = arg;
    enum blk_mode m = op == STEP_SEND && rel == 0 && w->from_in ? BLK_ABS_IN : w->keep;

    blk_emit(b, c, t, op, m, peer_rel, rel, q0, q1);
}

/* The blocks of parts_t arg: relative ranks [q0, q1) are the cyclic range root + q0 ... */
static void move_parts(sbuild_t *b, const algo_ctx_t *c, uint64_t t, uint8_t op, uint32_t peer_rel,
                       uint32_t rel, uint32_t q0, uint32_t q1, const void *arg)
{
    sb_cyclic(b, c, arg, t, op, abs_of(c, peer_rel), c->root + q0, q1 - q0);
}

uint64_t binomial_scatter(sbuild_t *b, const algo_ctx_t *c, uint64_t t0, int from_in,
                          enum blk_mode keep)
{
    blk_walk_t w = {.from_in = from_in, .keep = keep};

    return tree_down(b, c, t0, move_blocks, &w);
}

uint64_t binomial_gather(sbuild_t *b, const algo_ctx_t *c, uint64_t t0)
{
    blk_walk_t w = {.keep = BLK_ABS_OUT};

    return tree_up(b, c, t0, move_blocks, &w);
}

uint64_t binomial_parts_scatter(sbuild_t *b, const algo_ctx_t *c, const parts_t *p, uint64_t t0)
{
    return tree_down(b, c, t0, move_parts, p);
}

uint64_t binomial_parts_gather(sbuild_t *b, const algo_ctx_t *c, const parts_t *p, uint64_t t0)
{
    return tree_up(b, c, t0, move_parts, p);
}

static void move_nothing(sbuild_t *b, const algo_ctx_t *c, uint64_t t, uint8_t op,
                         uint32_t peer_rel, uint32_t rel, uint32_t q0, uint32_t q1, const void *arg)
{
    sb_step(b, t, op, SCHED_BUF_OUT, abs_of(c, peer_rel), 0, 0);
}

/* Zero-length fan-out from the root: the second half of a tree barrier. */
uint64_t binomial_bcast0(sbuild_t *b, const algo_ctx_t *c, uint64_t t0)
{
    return tree_down(b, c, t0, move_nothing, NULL);
}

/* SCATTER by binomial tree: the root copies its own block and sends each child its subtree's
 * blocks straight from IN; the others keep their subtree in relative order, own block first
 * (blocks of their own sizes, see rel_off). */
void binomial_scatter_kind(sbuild_t *b, const algo_ctx_t *c)
{
    uint32_t rel = rel_of(c, c->me);

    if (rel == 0) {
        sb_copy(b, 0, SCHED_BUF_IN, node_off(c, c->root), 0, node_len(c, c->root));
    } else {
        uint32_t low = rel & (0u - rel), sub = c->n - rel < low ? c->n - rel : low;
        uint64_t held = rel_off(c, rel + sub) - rel_off(c, rel);
        if (held > b->out_elems)
            b->out_elems = held;
    }
    binomial_scatter(b, c, 0, 1, BLK_REL);
}
