/* The reduction kernels for AVX2 + FMA + F16C; reduce.c uses them if the CPU has all three. */
#if !defined(__AVX2__) || !defined(__F16C__)
#error "compile reduce_avx2.c with -mavx2 -mfma -mf16c"
#endif

#define REDUCE_VB 32
#define REDUCE_SFX(name) name##_avx2
#include "reduce_impl.h"
