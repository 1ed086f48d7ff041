/*
 * Where the ranks of a comm across daemons sit, as level 1 sees them. Nodes may hold any
 * number of ranks, in any order of rank ids (torchrun's and hccl-run's blocks, Open MPI's
 * --map-by node round robin, Slurm's cyclic or uneven distributions). Level 1 gives every node
 * L slots, L the most ranks any node holds: slot s = node * L + j holds the node's j-th rank in
 * rank order, or nothing (padding, on nodes with fewer ranks). Per-rank blocks of a collective
 * (allgather, reduce-scatter, alltoall, scatter) are laid out by slot, so a node's blocks are
 * contiguous and each byte crosses the network once per node. With equal contiguous blocks
 * slot s is rank s (identity); otherwise level 0 permutes, and padding slots travel unused.
 */
#ifndef HCCLD_SCHED_MULTI_PLACE_H
#define HCCLD_SCHED_MULTI_PLACE_H

#include <stdint.h>

#define PLACE_NONE UINT32_MAX

typedef struct multi_place {
    uint32_t nranks, nnodes;
    uint32_t L;          /* slots per node: the most ranks any node holds */
    uint32_t *node;      /* [nranks]: each rank's node */
    uint32_t *slot;      /* [nranks]: each rank's slot */
    uint32_t *slot_rank; /* [nnodes * L]: the rank in each slot, or PLACE_NONE */
    uint32_t *count;     /* [nnodes]: ranks on each node */
    int identity;        /* slot[g] == g for every rank: equal contiguous blocks */
} multi_place_t;

/* From rank_node[g] < nnodes for g < nranks (every node holding at least one rank). 0,
 * -EINVAL (a node index out of range, or a node without ranks) or -ENOMEM. */
int multi_place_init(multi_place_t *p, const uint32_t *rank_node, uint32_t nranks, uint32_t nnodes);
void multi_place_free(multi_place_t *p);

#endif
