/* Entry points of the level-1 algorithms: argument checks and the dispatch. */
#include <errno.h>
#include <stdlib.h>

#include "algo/algo_int.h"
#include "desc_check.h"
#include "shm.h"

static int (*const builders[ALGO_COUNT])(const algo_ctx_t *, sbuild_t *) = {
    [ALGO_RING] = algo_ring_build,         [ALGO_MESH] = algo_mesh_build,
    [ALGO_HDR] = algo_hdr_build,           [ALGO_TREE] = algo_tree_build,
    [ALGO_PAIRWISE] = algo_pairwise_build, [ALGO_NB] = algo_nb_build,
    [ALGO_NHR] = algo_nhr_build,
};

uint64_t algo_layout_elems(int kind, uint32_t n, uint64_t count)
{
    switch (kind) {
    case DESC_ALLGATHER:
    case DESC_REDUCE_SCATTER:
    case DESC_ALLTOALL: return (uint64_t)n * count;
    case DESC_BARRIER: return 0;
    default: return count;
    }
}

void sched_traffic(const sched_t *s, uint64_t *sent, uint64_t *received)
{
    *sent = *received = 0;
    for (uint32_t i = 0; i < s->nsteps; i++) {
        if (s->steps[i].op == STEP_SEND)
            *sent += s->steps[i].len;
        else if (s->steps[i].op == STEP_RECV || s->steps[i].op == STEP_RECV_REDUCE)
            *received += s->steps[i].len;
    }
}

void sched_free(sched_t *s)
{
    if (s == NULL)
        return;
    free(s->steps);
    free(s->round_start);
    s->steps = NULL;
    s->round_start = NULL;
    s->nsteps = s->nrounds = 0;
}

/* The kinds whose layout has a block per rank, which algo_build_ranks sizes per node. */
static int per_rank_kind(int kind)
{
    return kind == DESC_ALLGATHER || kind == DESC_REDUCE_SCATTER || kind == DESC_SCATTER ||
           kind == DESC_ALLTOALL;
}

/* blk: node blocks of their own sizes (see algo_int.h), or NULL for count each. */
static int build(int algo, int kind, uint32_t nnodes, uint32_t me, uint32_t root, uint64_t count,
                 const uint64_t *blk, sched_t *out)
{
    algo_ctx_t c = {.kind = kind, .n = nnodes, .me = me, .count = count, .blk = blk};
    uint64_t layout;
    sbuild_t b;
    int rc;

    if (out == NULL || !algo_serves(algo, kind) || nnodes == 0 || me >= nnodes)
        return -EINVAL;
    if (desc_is_rooted((uint8_t)kind) && root >= nnodes)
        return -EINVAL;
    /* Every offset a schedule names lies below n * count, so that product must fit. */
    if (count > UINT64_MAX / nnodes / 2)
        return -EINVAL;
    c.root = desc_is_rooted((uint8_t)kind) ? root : 0;
    if (kind == DESC_BARRIER)
        c.count = 0;
    if (blk != NULL) {
        c.count = blk[nnodes] > 0; /* only whether there is data: offsets come from blk */
        layout = kind == DESC_SCATTER ? node_len(&c, me) : blk[nnodes];
    } else {
        layout = algo_layout_elems(kind, nnodes, c.count);
    }
    sb_init(&b, me, kind == DESC_BARRIER, layout);
    /* Without data there is nothing to move; only a barrier synchronizes. */
    rc = c.count == 0 && kind != DESC_BARRIER ? 0 : builders[algo](&c, &b);
    if (rc != 0) {
        free(b.e);
        return rc;
    }
    return sb_finish(&b, out);
}

int algo_build_ranks(int algo, int kind, uint32_t nnodes, uint32_t me, uint32_t root, uint64_t unit,
                     const uint32_t *ranks, sched_t *out)
{
    uint64_t total = 0, scale, *blk;
    int rc;

    if (ranks == NULL)
        return build(algo, kind, nnodes, me, root, unit, NULL, out);
    if (!per_rank_kind(kind) || nnodes == 0 || me >= nnodes)
        return -EINVAL;
    for (uint32_t i = 0; i < nnodes; i++)
        total += ranks[i];
    /* ALLTOALL: this node's block with node i holds ranks[me] * ranks[i] units. */
    scale = kind == DESC_ALLTOALL ? ranks[me] : 1;
    if (total > 0 && scale > 0 && unit > UINT64_MAX / 4 / total / scale)
        return -EINVAL;
    if ((blk = malloc((nnodes + 1ull) * sizeof(*blk))) == NULL)
        return -ENOMEM;
    blk[0] = 0;
    for (uint32_t i = 0; i < nnodes; i++)
        blk[i + 1] = blk[i] + scale * ranks[i] * unit;
    rc = build(algo, kind, nnodes, me, root, unit, blk, out);
    free(blk);
    return rc;
}

int algo_build(int algo, int kind, uint32_t nnodes, uint32_t me, uint32_t root, uint64_t count,
               sched_t *out)
{
    return build(algo, kind, nnodes, me, root, count, NULL, out);
}
