/*
 * What a rank asks of the level-1 algorithms, from its environment and its comm's config, and
 * the per-collective choice that follows:
 *   HCCL_ALGO (or HcclCommConfig.hcclAlgo, which takes its place for that comm) in HCCL's
 *   syntax (algo_env.h); HCCL_ALGORITHM, the tuning guides' shorthand for the level-1 algorithm
 *   of every collective: RING, MESH, RHD, TREE or PAIRWISE (any case; hcclD's own names ring,
 *   fullmesh, H-D_R, ... too), applied as HCCL_ALGO's global level1:NAME is. Where both force a
 *   collective and disagree, HCCL_ALGO wins and the notice says so.
 */
#ifndef HCCLD_ALGO_ALGO_WANT_H
#define HCCLD_ALGO_ALGO_WANT_H

#include <stddef.h>

#include "algo/algo_env.h"

/* Longest HCCL_ALGO (or hcclAlgo) string a rank may send, and HCCL_ALGORITHM. */
#define ALGO_WANT_ALGO_MAX 512
#define ALGO_WANT_ALGORITHM_MAX 32

typedef struct algo_want {
    char algo[ALGO_WANT_ALGO_MAX];           /* HCCL_ALGO syntax, "" none */
    char algorithm[ALGO_WANT_ALGORITHM_MAX]; /* HCCL_ALGORITHM, "" none */
    int algo_by_config;                      /* algo is the comm config's hcclAlgo */
    int deterministic;                       /* HCCL_DETERMINISTIC / hcclDeterministic */
} algo_want_t;

/* Fills *w from a request's fields (NULL: ""). -EINVAL with the reason in err when a string
 * does not fit. */
int algo_want_set(algo_want_t *w, const char *algo, const char *algorithm, int algo_by_config,
                  int deterministic, char *err, size_t errlen);
/* The forced algorithm of each collective and what forced it (algo_env_t.src). 0, or -EINVAL
 * with the parser's reason in err. notice (if not NULL) gets "" or the disagreement between
 * HCCL_ALGO and HCCL_ALGORITHM, for a WARN. */
int algo_want_resolve(const algo_want_t *w, algo_env_t *out, char *err, size_t errlen, char *notice,
                      size_t noticelen);

#endif
