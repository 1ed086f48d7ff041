/*
 * Pairwise all-to-all: in round d (1 <= d < n) node i sends its block for i + d and receives
 * the block of i - d, so every node sends and receives exactly one block per round and no
 * node is ever the target of many senders at once. Blocks may differ in size (node_off).
 */
#include <errno.h>

#include "algo/algo_int.h"
#include "shm.h"

int algo_pairwise_build(const algo_ctx_t *c, sbuild_t *b)
{
    if (c->kind != DESC_ALLTOALL)
        return -EINVAL;
    sb_copy(b, 0, SCHED_BUF_IN, node_off(c, c->me), node_off(c, c->me), node_len(c, c->me));
    for (uint32_t d = 1; d < c->n; d++) {
        uint32_t to = (uint32_t)(((uint64_t)c->me + d) % c->n);
        uint32_t from = (uint32_t)(((uint64_t)c->me + c->n - d) % c->n);

        sb_step(b, d - 1, STEP_SEND, SCHED_BUF_IN, to, node_off(c, to), node_len(c, to));
        sb_recv(b, d - 1, from, node_off(c, from), node_len(c, from));
    }
    return 0;
}
