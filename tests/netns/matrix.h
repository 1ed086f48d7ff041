/*
 * The collectives checked across namespaces: allreduce, allgather, broadcast, reducescatter and
 * alltoall over several data types and counts (odd ones included), each result compared
 * element by element, bitwise, with the reference of tests/integration/ref.h.
 */
#ifndef HCCLD_TESTS_NETNS_MATRIX_H
#define HCCLD_TESTS_NETNS_MATRIX_H

#include <stdint.h>

#include "hccl/hccl.h"

typedef struct matrix_arg {
    int big;       /* also counts of 1M+3 elements (several MB per rank) */
    int allreduce; /* allreduce only */
} matrix_arg_t;

/* A rank_fn (harness.h): runs the matrix on comm; 0 if every result was exact. */
int matrix_run(HcclComm comm, uint32_t r, uint32_t n, void *arg);

#endif
