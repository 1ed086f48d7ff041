/*
 * Where the ranks of a comm across daemons sit, as level 1 sees them. Nodes may hold any
 * number of ranks, in any order of rank ids (torchrun's and hccl-run's blocks, Open MPI's
 * --map-by node round robin, Slurm's cyclic or uneven distributions). Per-rank blocks of a
 * collective are laid out by position: node-major order without gaps, node i's ranks in rank
 * order (the order of its local members) at positions first[i] .. first[i + 1] - 1. A node's
 * blocks are then contiguous, each byte crosses the network once per node, and node blocks
 * have their own sizes (algo_build_ranks), so nothing moves that no rank has. With equal
 * contiguous blocks (equal and in_order) a rank's position is the rank itself; otherwise
 * level 0 permutes.
 */
#ifndef HCCLD_SPAN_PLACE_H
#define HCCLD_SPAN_PLACE_H

#include <stdint.h>

typedef struct span_place {
    uint32_t nranks, nnodes;
    uint32_t L;         /* the most ranks any node holds */
    uint32_t *node;     /* [nranks]: each rank's node */
    uint32_t *count;    /* [nnodes]: ranks on each node */
    uint32_t *pos;      /* [nranks]: each rank's position */
    uint32_t *pos_rank; /* [nranks]: the rank at each position */
    uint32_t *first;    /* [nnodes + 1]: node i's first position; first[nnodes] = nranks */
    int equal;          /* every node holds L ranks */
    int in_order;       /* pos[g] == g for every rank: contiguous blocks, maybe unequal */
} span_place_t;

/* From rank_node[g] < nnodes for g < nranks (every node holding at least one rank). 0,
 * -EINVAL (a node index out of range, or a node without ranks) or -ENOMEM. */
int span_place_init(span_place_t *p, const uint32_t *rank_node, uint32_t nranks, uint32_t nnodes);
void span_place_free(span_place_t *p);

#endif
