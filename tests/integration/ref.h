/* Reference data and results for collective tests, independent of the library's kernels. */
#ifndef HCCLD_TESTS_REF_H
#define HCCLD_TESTS_REF_H

#include <stdint.h>

#include "hccl/hccl.h"

/* The value rank r puts at element k: a small integer, exact in every data type (so sums and
 * products of a few ranks are exact too); non-negative for unsigned types, 1..3 for PROD. */
int64_t ref_val(int dt, int op, uint32_t r, uint64_t k);
int64_t ref_reduce(int op, int64_t a, int64_t b);
/* Reduction of ref_val over ranks 0..n-1 at element k. */
int64_t ref_reduced(int dt, int op, uint32_t n, uint64_t k);
void ref_store(int dt, void *buf, uint64_t i, int64_t v);
/* Writes ref_val(dt, op, r, first + i) into buf[i] for i < count. */
void ref_fill(int dt, int op, uint32_t r, void *buf, uint64_t first, uint64_t count);
/* Whether buf[i] holds exactly v (bitwise, after encoding v in the type). */
int ref_equal(int dt, const void *buf, uint64_t i, int64_t v);

#endif
