/*
 * Judges a descriptor read from a client's ring before the daemon acts on it: enums, ranks,
 * counts and every block it names must lie inside that client's own arena.
 */
#ifndef HCCLD_COMMON_DESC_CHECK_H
#define HCCLD_COMMON_DESC_CHECK_H

#include <stdint.h>

#include "shm.h"

/* The blocks a descriptor names on one side: nblocks blocks of bytes each, stride apart. */
typedef struct desc_side {
    uint64_t off;
    uint64_t stride;
    uint64_t bytes;
    uint32_t nblocks;
} desc_side_t;

/* Which blocks a rank's descriptor uses; nblocks 0 where a side is unused for this rank. */
void desc_sides(const desc_t *d, uint32_t nranks, uint32_t rank, desc_side_t *send_p,
                desc_side_t *recv_p);

/* HCCL_SUCCESS, or the HcclResult to complete it with and, in *why, a static reason. The byte
 * size of one block is returned in *block_bytes_p on success. */
int desc_check(const desc_t *d, uint32_t nranks, uint32_t rank, uint64_t arena_bytes,
               const char **why);

/* What two ranks' descriptors for the same collective piece disagree on ("operation", "count",
 * ...), or NULL when they match. */
const char *desc_disagree(const desc_t *a, const desc_t *b);
/* The level-1 algorithm a descriptor asks for, by name ("the comm's algorithm" for none). */
const char *desc_algo_named(const desc_t *d);

int desc_is_collective(uint8_t kind);
int desc_is_reduction(uint8_t kind);
/* Whether kind has a root (broadcast, reduce, scatter). */
int desc_is_rooted(uint8_t kind);
const char *desc_kind_name(uint8_t kind);

#endif
