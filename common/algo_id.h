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
    ALGO_NB,       /* "NB": nonuniform Bruck, any node count in log steps, no extra traffic */
    ALGO_NHR,      /* "NHR": nonuniform hierarchical ring, the same in other steps */
    ALGO_COUNT
};

/* What chose a collective's level-1 algorithm: the cost model on measured links, a setting, or
 * the fixed model of HCCL_DETERMINISTIC (profiles and logs name it). */
enum algo_src {
    ALGO_SRC_MODEL = 0,
    ALGO_SRC_HCCL_ALGO,      /* the HCCL_ALGO variable */
    ALGO_SRC_CONFIG,         /* HcclCommConfig.hcclAlgo (HCCL_ALGO's syntax, per comm) */
    ALGO_SRC_HCCL_ALGORITHM, /* the HCCL_ALGORITHM shorthand */
    ALGO_SRC_DETERMINISTIC,  /* the cost model on fixed link figures (HCCL_DETERMINISTIC) */
    ALGO_SRC_RETRY,          /* the same for op retry on 3 daemons or more (span/rerun.c) */
    ALGO_SRC_CALL,           /* the op's own (desc_algo: HcclAllReduceAlgo, hccl.all_reduce) */
    ALGO_SRC_COUNT
};

/* Whether algo serves kind (enum desc_kind): ring, H-D_R, tree: all but alltoall; fullmesh: all,
 * alltoall included (one round, every block direct); pairwise: alltoall only; NB and NHR:
 * allreduce, allgather, reduce-scatter and barrier. */
int algo_serves(int algo, int kind);
/* The HCCL_ALGO name of algo, "?" for an unknown id. */
const char *algo_name(int algo);
/* The id of an HCCL_ALGO name, any case; -1 if there is none. */
int algo_from_name(const char *s);
/* "model", "HCCL_ALGO", "hcclAlgo", "HCCL_ALGORITHM" or "HCCL_DETERMINISTIC"; "?" otherwise. */
const char *algo_src_name(int src);

#endif
