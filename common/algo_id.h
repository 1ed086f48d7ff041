/* Level-1 algorithm ids and their HCCL_ALGO names, known to the daemon (which runs them) and to
 * libhccl (which names the one an op used in its profile). */
#ifndef HCCLD_COMMON_ALGO_ID_H
#define HCCLD_COMMON_ALGO_ID_H

enum algo_id {
    ALGO_RING = 0,
    ALGO_MESH,     /* "fullmesh": every node talks to every other directly */
    ALGO_HDR,      /* "H-D_R": recursive halving-doubling, any node count */
    ALGO_TREE,     /* binary tree; double binary tree for allreduce */
    ALGO_PAIRWISE, /* all-to-all: in round d, send to me+d, receive from me-d */
    ALGO_COUNT
};

/* The HCCL_ALGO name of algo, "?" for an unknown id. */
const char *algo_name(int algo);
/* The id of an HCCL_ALGO name, any case; -1 if there is none. */
int algo_from_name(const char *s);

#endif
