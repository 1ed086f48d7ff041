/*
 * Element-wise reduction of n buffers into one: the arithmetic of allreduce, reduce and
 * reduce-scatter. The kernels exist in a portable version and in AVX2 and AVX-512 versions;
 * one of them is selected once per process (reduce_select) and used by every thread.
 *
 * Results are the same whichever kernel runs:
 *  - Integers: SUM and PROD wrap modulo 2^bits; MAX and MIN compare signed or unsigned as the
 *    type says.
 *  - fp32 and fp64: sources are combined left to right, ((s0 op s1) op s2) ..., each step
 *    rounded to the type, so results are bit-exact with a scalar loop doing the same.
 *  - fp16 and bf16: every source is widened to fp32, all of them are combined left to right in
 *    fp32, and the result is rounded once, to nearest even.
 *  - MAX and MIN of floating-point types give NaN if any source is NaN. Otherwise they give the
 *    largest (smallest) source, and among equal ones the earliest: max(-0.0, +0.0) is -0.0 and
 *    max(+0.0, -0.0) is +0.0. (NaN payloads are whatever the hardware propagates.)
 *  - nsrc == 1 is a bit-exact copy (an fp16 signalling NaN is not quieted).
 */
#ifndef HCCLD_COMMON_REDUCE_H
#define HCCLD_COMMON_REDUCE_H

#include <stddef.h>

#include "hccl/hccl.h"

/*
 * dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[nsrc-1][i] for i < count. dst may be the
 * very same pointer as any srcs[k] (in place) but must not partially overlap one. Buffers need
 * no particular alignment. Does nothing if dt or op is invalid, nsrc is 0 or count is 0
 * (callers validate client requests with dtype_valid/redop_valid first). Thread-safe; does not
 * allocate.
 */
void reduce_n(HcclDataType dt, HcclReduceOp op, void *dst, const void *const *srcs, unsigned nsrc,
              size_t count);

/*
 * reduce_n, but dst is written with non-temporal (streaming) stores where it is aligned, which
 * bypass the cache: for outputs much larger than the cache that nobody reads soon, they save
 * the read of every destination line. The stores are complete (fenced) when it returns. nsrc
 * == 1 is a streamed copy. More than REDUCE_STREAM_MAX_SRCS sources, or a destination never
 * aligned to the vector size, go the usual way.
 */
#define REDUCE_STREAM_MAX_SRCS 64u
void reduce_n_stream(HcclDataType dt, HcclReduceOp op, void *dst, const void *const *srcs,
                     unsigned nsrc, size_t count);

/*
 * Selects the kernels: "generic", "avx2" or "avx512" (case-insensitive). NULL selects the
 * ISA named by the environment variable HCCLD_SIMD if set (and not "auto"), else the best
 * one the CPU has. Returns 0, or -1 if the named ISA is unknown or this CPU lacks it; then an
 * explicit choice leaves the selection unchanged, and NULL falls back to the best ISA.
 * reduce_n selects with NULL by itself on first use if nobody called this before.
 */
int reduce_select(const char *isa);

/* The name of the selected ISA ("generic", "avx2" or "avx512"). */
const char *reduce_isa(void);

#endif
