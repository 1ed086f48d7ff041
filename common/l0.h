/*
 * Level 0: one collective among the ranks of one node, executed on memory that every rank's
 * segment exposes. The work is a set of lanes (each: inputs -> outputs, `count` elements,
 * reduced or copied); l0_run_part runs one of nparts equal, disjoint shares of it, so that the
 * daemon's workers (or, later, the ranks themselves) can split an operation without locks.
 * Every output element is written exactly once and only after all inputs it depends on are read.
 */
#ifndef HCCLD_COMMON_L0_H
#define HCCLD_COMMON_L0_H

#include <stddef.h>
#include <stdint.h>

typedef struct l0_rank {
    uint8_t *send;        /* first send block */
    uint8_t *recv;        /* first receive block */
    uint64_t send_stride; /* bytes between send blocks */
    uint64_t recv_stride;
} l0_rank_t;

typedef struct l0_op {
    uint8_t kind; /* enum desc_kind; DESC_SEND moves ranks[0].send -> ranks[1].recv */
    uint8_t dtype;
    uint8_t redop;
    uint32_t root;
    uint32_t nranks;
    uint64_t count;      /* elements per block */
    uint32_t only_plus1; /* 0: all outputs; r + 1: only rank r's (each rank computes its own) */
    uint8_t stream;      /* write outputs with streaming stores (reduce_n_stream): large ops */
    const l0_rank_t *ranks;
} l0_op_t;

/* Total bytes the operation writes; callers use it to decide how many parts to run. */
uint64_t l0_bytes(const l0_op_t *op);
void l0_run_part(const l0_op_t *op, unsigned part, unsigned nparts);

#endif
