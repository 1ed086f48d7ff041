/* The reduction kernels for AVX-512 (F, BW, VL, DQ) + FMA + F16C; reduce.c uses them if the
 * CPU has all of these. */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) ||                   \
    !defined(__AVX512DQ__) || !defined(__F16C__)
#error "compile reduce_avx512.c with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c"
#endif

#define REDUCE_VB 64
#define REDUCE_SFX(name) name##_avx512
#include "reduce_impl.h"
