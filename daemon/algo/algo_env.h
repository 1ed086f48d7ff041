/*
 * HCCL_ALGO, in HCCL's syntax:
 *   level0:NA;level1:ring                                  every collective
 *   allreduce=level0:NA;level1:H-D_R/allgather=level1:ring  per collective, '/' between them
 * Collectives: allreduce, allgather, reducescatter, broadcast, reduce, alltoall, scatter,
 * barrier. level0 names the in-node algorithm; hcclD has one, so NA, ESS and fullmesh are
 * accepted and change nothing. level1 is ring, H-D_R, fullmesh, tree, pairwise, or NA (choose
 * automatically). Names and collectives are case-insensitive; blanks around tokens and empty
 * items (a trailing ';' or '/') are ignored. A global item and per-collective items may be
 * mixed: the per-collective ones win. A global algorithm applies to the collectives it
 * serves (level1:ring leaves alltoall automatic); a per-collective one that cannot serve its
 * collective is an error, as is any unknown name.
 */
#ifndef HCCLD_ALGO_ALGO_ENV_H
#define HCCLD_ALGO_ALGO_ENV_H

#include <stddef.h>
#include <stdint.h>

#include "shm.h"

typedef struct algo_env {
    int level1[DESC_KIND_MAX];  /* enum algo_id by enum desc_kind; -1 = automatic */
    uint8_t src[DESC_KIND_MAX]; /* enum algo_src (algo_id.h): the setting behind level1[k] */
    /* HCCL's algorithms named that hcclD has not, and what runs for each ("NHR as H-D_R"). */
    char instead[80];
} algo_env_t;

/* Parses s into *out (all automatic for NULL or blank s); a forced kind's src is
 * ALGO_SRC_HCCL_ALGO, the others' ALGO_SRC_MODEL. Returns 0, or -EINVAL with a message naming
 * the bad token in err; *out is then all automatic. */
int algo_env_parse(const char *s, algo_env_t *out, char *err, size_t errlen);
/* The same for a string in HCCL_ALGO's syntax that another setting holds: its messages start
 * with name (e.g. "hcclAlgo") instead of "HCCL_ALGO". */
int algo_env_parse_as(const char *name, const char *s, algo_env_t *out, char *err, size_t errlen);
/* The collective name HCCL_ALGO uses for a kind ("allreduce", ...), or NULL. */
const char *algo_env_op_name(int kind);

#endif
