/*
 * The reduction kernels, as a template: reduce.c (portable), reduce_avx2.c and reduce_avx512.c
 * each include this file once, after defining
 *   REDUCE_VB      the vector width in bytes (16, 32 or 64), and
 *   REDUCE_SFX(x)  the name of x for that ISA (x##_generic, x##_avx2, x##_avx512).
 * The file then defines the table REDUCE_SFX(reduce_table) of kernels for every data type and
 * operator.
 *
 * The loops use GCC vector extensions, so the same source becomes SSE2, AVX2 or AVX-512 code
 * depending on the flags of the including file, and needs no alias analysis or cost model to
 * vectorize. Only fp16 needs intrinsics (F16C), picked below from the compiler's ISA macros.
 * Vectors are loaded and stored with memcpy: the buffers are unaligned, may alias each other
 * exactly (in place), and have no particular effective type.
 *
 * Every kernel exists twice: REDUCE_SFX(reduce_table) stores as usual, REDUCE_SFX(reduce_table_nt)
 * with non-temporal (streaming) stores, which write whole lines to memory without reading them
 * first and without filling the cache: for outputs far larger than the cache, a third less DRAM
 * traffic. The streaming kernels need dst aligned to REDUCE_VB (their tails store as usual) and
 * leave the ordering of their stores to the caller (an sfence, reduce_n_stream).
 */

/* Declarations shared by the three files (reduce.c needs all the tables). */
#ifndef HCCLD_REDUCE_IMPL_DECLS
#define HCCLD_REDUCE_IMPL_DECLS

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "half.h"
#include "hccl/hccl.h"

/* A kernel for one data type and operator; it gets nsrc >= 2 and count >= 1. */
typedef void (*reduce_kernel_fn)(void *dst, const void *const *srcs, unsigned nsrc, size_t count);

extern const reduce_kernel_fn reduce_table_generic[HCCL_DATA_TYPE_RESERVED][HCCL_REDUCE_RESERVED];
extern const reduce_kernel_fn reduce_table_avx2[HCCL_DATA_TYPE_RESERVED][HCCL_REDUCE_RESERVED];
extern const reduce_kernel_fn reduce_table_avx512[HCCL_DATA_TYPE_RESERVED][HCCL_REDUCE_RESERVED];
extern const reduce_kernel_fn reduce_table_nt_generic[HCCL_DATA_TYPE_RESERVED]
                                                     [HCCL_REDUCE_RESERVED];
extern const reduce_kernel_fn reduce_table_nt_avx2[HCCL_DATA_TYPE_RESERVED][HCCL_REDUCE_RESERVED];
extern const reduce_kernel_fn reduce_table_nt_avx512[HCCL_DATA_TYPE_RESERVED][HCCL_REDUCE_RESERVED];

#endif

#if !defined(REDUCE_VB) || !defined(REDUCE_SFX)
#error "define REDUCE_VB and REDUCE_SFX before including reduce_impl.h"
#endif

#define VB REDUCE_VB

typedef uint8_t vu8 __attribute__((vector_size(VB)));
typedef int8_t vs8 __attribute__((vector_size(VB)));
typedef uint16_t vu16 __attribute__((vector_size(VB)));
typedef int16_t vs16 __attribute__((vector_size(VB)));
typedef uint32_t vu32 __attribute__((vector_size(VB)));
typedef int32_t vs32 __attribute__((vector_size(VB)));
typedef uint64_t vu64 __attribute__((vector_size(VB)));
typedef int64_t vs64 __attribute__((vector_size(VB)));
typedef float vf32 __attribute__((vector_size(VB)));
typedef double vf64 __attribute__((vector_size(VB)));
/* The 16-bit floats of one vf32: half as many bytes, as many lanes. */
typedef uint16_t vh16 __attribute__((vector_size(VB / 2)));

/* ---- Loads and stores ---------------------------------------------------------------------- */

#define DEFINE_LOAD_STORE(tag, ST, VT)                                                             \
    static inline VT ld_##tag(const ST *p)                                                         \
    {                                                                                              \
        VT v;                                                                                      \
        memcpy(&v, p, sizeof v);                                                                   \
        return v;                                                                                  \
    }                                                                                              \
    static inline void st_##tag(ST *p, VT v)                                                       \
    {                                                                                              \
        memcpy(p, &v, sizeof v);                                                                   \
    }                                                                                              \
    static inline void nt_##tag(ST *p, VT v)                                                       \
    {                                                                                              \
        stream_vec(p, &v);                                                                         \
    }

/*
 * Streaming stores of a whole vector (stream_vec, VB bytes) and of half a vector (stream_half,
 * the fp16/bf16 results of one vf32), to addresses aligned to their size. Targets without them
 * store as usual.
 */
#if defined(__SSE2__)
#include <immintrin.h>
#if VB == 64
#define STREAM_VEC(p, x) _mm512_stream_si512((void *)(p), (x))
#define STREAM_HALF(p, x) _mm256_stream_si256((__m256i *)(p), (x))
typedef __m512i stream_vec_t;
typedef __m256i stream_half_t;
#elif VB == 32
#define STREAM_VEC(p, x) _mm256_stream_si256((__m256i *)(p), (x))
#define STREAM_HALF(p, x) _mm_stream_si128((__m128i *)(p), (x))
typedef __m256i stream_vec_t;
typedef __m128i stream_half_t;
#elif defined(__x86_64__)
#define STREAM_VEC(p, x) _mm_stream_si128((__m128i *)(p), (x))
#define STREAM_HALF(p, x) _mm_stream_si64((long long *)(p), (x))
typedef __m128i stream_vec_t;
typedef long long stream_half_t;
#endif
#endif

#ifdef STREAM_VEC
static inline void stream_vec(void *p, const void *v)
{
    stream_vec_t x;

    memcpy(&x, v, sizeof x);
    STREAM_VEC(p, x);
}

static inline void stream_half(void *p, const void *v)
{
    stream_half_t x;

    memcpy(&x, v, sizeof x);
    STREAM_HALF(p, x);
}
#else
static inline void stream_vec(void *p, const void *v)
{
    memcpy(p, v, VB);
}

static inline void stream_half(void *p, const void *v)
{
    memcpy(p, v, VB / 2);
}
#endif

DEFINE_LOAD_STORE(i8, int8_t, vs8)
DEFINE_LOAD_STORE(u8, uint8_t, vu8)
DEFINE_LOAD_STORE(i16, int16_t, vs16)
DEFINE_LOAD_STORE(u16, uint16_t, vu16)
DEFINE_LOAD_STORE(i32, int32_t, vs32)
DEFINE_LOAD_STORE(u32, uint32_t, vu32)
DEFINE_LOAD_STORE(i64, int64_t, vs64)
DEFINE_LOAD_STORE(u64, uint64_t, vu64)
DEFINE_LOAD_STORE(f32, float, vf32)
DEFINE_LOAD_STORE(f64, double, vf64)

/* bfloat16 widens by a shift and narrows with round-to-nearest-even, as float_to_bf16 does. */
static inline vf32 ld_bf16(const uint16_t *p)
{
    vh16 h;

    memcpy(&h, p, sizeof h);
    return (vf32)(__builtin_convertvector(h, vu32) << 16);
}

static inline vh16 narrow_bf16(vf32 v)
{
    vu32 x = (vu32)v;
    vu32 rounded = (x + 0x7fffu + ((x >> 16) & 1)) >> 16;
    vu32 quiet_nan = (x >> 16) | 0x40u;
    vu32 is_nan = (vu32)((x & 0x7fffffffu) > 0x7f800000u);

    return __builtin_convertvector((quiet_nan & is_nan) | (rounded & ~is_nan), vh16);
}

static inline void st_bf16(uint16_t *p, vf32 v)
{
    vh16 h = narrow_bf16(v);

    memcpy(p, &h, sizeof h);
}

static inline void nt_bf16(uint16_t *p, vf32 v)
{
    vh16 h = narrow_bf16(v);

    stream_half(p, &h);
}

/* fp16 uses F16C where the ISA has it; the immediate asks for round-to-nearest-even whatever
 * MXCSR says. */
#if VB == 64 && defined(__AVX512F__)
#include <immintrin.h>

static inline vf32 ld_fp16(const uint16_t *p)
{
    return (vf32)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

static inline void st_fp16(uint16_t *p, vf32 v)
{
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph((__m512)v, _MM_FROUND_TO_NEAREST_INT));
}

static inline void nt_fp16(uint16_t *p, vf32 v)
{
    _mm256_stream_si256((__m256i *)p, _mm512_cvtps_ph((__m512)v, _MM_FROUND_TO_NEAREST_INT));
}
#elif VB == 32 && defined(__F16C__)
#include <immintrin.h>

static inline vf32 ld_fp16(const uint16_t *p)
{
    return (vf32)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline void st_fp16(uint16_t *p, vf32 v)
{
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph((__m256)v, _MM_FROUND_TO_NEAREST_INT));
}

static inline void nt_fp16(uint16_t *p, vf32 v)
{
    _mm_stream_si128((__m128i *)p, _mm256_cvtps_ph((__m256)v, _MM_FROUND_TO_NEAREST_INT));
}
#else
static inline vf32 ld_fp16(const uint16_t *p)
{
    uint16_t h[VB / 4];
    vf32 v;

    memcpy(h, p, sizeof h);
    for (int j = 0; j < VB / 4; j++)
        v[j] = fp16_to_float(h[j]);
    return v;
}

static inline void st_fp16(uint16_t *p, vf32 v)
{
    uint16_t h[VB / 4];

    for (int j = 0; j < VB / 4; j++)
        h[j] = float_to_fp16(v[j]);
    memcpy(p, h, sizeof h);
}

static inline void nt_fp16(uint16_t *p, vf32 v)
{
    uint16_t h[VB / 4];

    for (int j = 0; j < VB / 4; j++)
        h[j] = float_to_fp16(v[j]);
    stream_half(p, h);
}
#endif

/* ---- Operators: op(acc, x), acc holding the earlier sources -------------------------------- */

/* Integers: SUM and PROD in unsigned lanes, where wrapping is defined; comparisons in the
 * type's own signedness. A comparison gives all-ones lanes where true, used as a bit mask. */
#define DEFINE_INT_OPS(tag, VT, UVT)                                                               \
    static inline VT add_##tag(VT acc, VT x)                                                       \
    {                                                                                              \
        return (VT)((UVT)acc + (UVT)x);                                                            \
    }                                                                                              \
    static inline VT mul_##tag(VT acc, VT x)                                                       \
    {                                                                                              \
        return (VT)((UVT)acc * (UVT)x);                                                            \
    }                                                                                              \
    static inline VT max_##tag(VT acc, VT x)                                                       \
    {                                                                                              \
        VT take = (VT)(x > acc);                                                                   \
        return (x & take) | (acc & ~take);                                                         \
    }                                                                                              \
    static inline VT min_##tag(VT acc, VT x)                                                       \
    {                                                                                              \
        VT take = (VT)(x < acc);                                                                   \
        return (x & take) | (acc & ~take);                                                         \
    }

DEFINE_INT_OPS(i8, vs8, vu8)
DEFINE_INT_OPS(u8, vu8, vu8)
DEFINE_INT_OPS(i16, vs16, vu16)
DEFINE_INT_OPS(u16, vu16, vu16)
DEFINE_INT_OPS(i32, vs32, vu32)
DEFINE_INT_OPS(u32, vu32, vu32)
DEFINE_INT_OPS(i64, vs64, vu64)
DEFINE_INT_OPS(u64, vu64, vu64)

/*
 * Floating point: x replaces acc only if it is strictly larger (smaller) or NaN, so a NaN, once
 * in acc, stays (nothing compares larger than it), and among equal values (+0.0 and -0.0) the
 * earliest source wins. IT is the integer vector type of the lane masks.
 */
#define DEFINE_FLOAT_OPS(tag, VT, IT)                                                              \
    static inline VT add_##tag(VT acc, VT x)                                                       \
    {                                                                                              \
        return acc + x;                                                                            \
    }                                                                                              \
    static inline VT mul_##tag(VT acc, VT x)                                                       \
    {                                                                                              \
        return acc * x;                                                                            \
    }                                                                                              \
    static inline VT max_##tag(VT acc, VT x)                                                       \
    {                                                                                              \
        IT take = (x > acc) | (x != x);                                                            \
        return (VT)(((IT)x & take) | ((IT)acc & ~take));                                           \
    }                                                                                              \
    static inline VT min_##tag(VT acc, VT x)                                                       \
    {                                                                                              \
        IT take = (x < acc) | (x != x);                                                            \
        return (VT)(((IT)x & take) | ((IT)acc & ~take));                                           \
    }

DEFINE_FLOAT_OPS(f32, vf32, vs32)
DEFINE_FLOAT_OPS(f64, vf64, vs64)

/* ---- Kernels ------------------------------------------------------------------------------- */

/*
 * NAME reduces buffers of storage type ST, N elements at a time, which LD widens into one
 * vector of type VT and SV narrows back (TSV in the tail, into a stack buffer). Each step reads
 * every source's N elements before it writes dst's, which is what makes dst == srcs[k] safe. The
 * 2-source case, the common one in ring and tree algorithms, keeps both pointers in registers and
 * does two vectors per iteration. The last count % N elements go through zero-padded stack copies,
 * so the tail is computed by the very same vector code as the rest (out of line, to keep the main
 * loop's frame small).
 */
#define DEFINE_KERNEL(NAME, ST, VT, N, LD, SV, TSV, OP)                                            \
    static inline VT NAME##_step(const void *const *srcs, unsigned nsrc, size_t i)                 \
    {                                                                                              \
        VT acc = LD((const ST *)srcs[0] + i);                                                      \
        for (unsigned k = 1; k < nsrc; k++)                                                        \
            acc = OP(acc, LD((const ST *)srcs[k] + i));                                            \
        return acc;                                                                                \
    }                                                                                              \
    static __attribute__((noinline)) void NAME##_tail(ST *d, const void *const *srcs,              \
                                                      unsigned nsrc, size_t i, size_t rem)         \
    {                                                                                              \
        ST buf[N];                                                                                 \
        VT acc;                                                                                    \
                                                                                                   \
        memset(buf, 0, sizeof buf);                                                                \
        memcpy(buf, (const ST *)srcs[0] + i, rem * sizeof(ST));                                    \
        acc = LD(buf);                                                                             \
        for (unsigned k = 1; k < nsrc; k++) {                                                      \
            memcpy(buf, (const ST *)srcs[k] + i, rem * sizeof(ST));                                \
            acc = OP(acc, LD(buf));                                                                \
        }                                                                                          \
        TSV(buf, acc);                                                                             \
        memcpy(d, buf, rem * sizeof(ST));                                                          \
    }                                                                                              \
    static void NAME(void *dst, const void *const *srcs, unsigned nsrc, size_t count)              \
    {                                                                                              \
        ST *d = dst;                                                                               \
        size_t i = 0;                                                                              \
                                                                                                   \
        if (nsrc == 2) {                                                                           \
            const ST *a = srcs[0], *b = srcs[1];                                                   \
            for (; i + 2 * (N) <= count; i += 2 * (N)) {                                           \
                VT x0 = OP(LD(a + i), LD(b + i));                                                  \
                VT x1 = OP(LD(a + i + (N)), LD(b + i + (N)));                                      \
                SV(d + i, x0);                                                                     \
                SV(d + i + (N), x1);                                                               \
            }                                                                                      \
        }                                                                                          \
        for (; i + (N) <= count; i += (N))                                                         \
            SV(d + i, NAME##_step(srcs, nsrc, i));                                                 \
        if (i < count)                                                                             \
            NAME##_tail(d + i, srcs, nsrc, i, count - i);                                          \
    }

/* The four operators of one data type; OPS names the operator family (f32 for fp16/bf16). PFX
 * tells the regular kernels (st) from the streaming ones (nt), PFX_tag being their store. */
#define DEFINE_KERNELS(PFX, tag, ST, VT, N, LD, OPS)                                               \
    DEFINE_KERNEL(PFX##_sum_##tag, ST, VT, N, LD, PFX##_##tag, st_##tag, add_##OPS)                \
    DEFINE_KERNEL(PFX##_prod_##tag, ST, VT, N, LD, PFX##_##tag, st_##tag, mul_##OPS)               \
    DEFINE_KERNEL(PFX##_max_##tag, ST, VT, N, LD, PFX##_##tag, st_##tag, max_##OPS)                \
    DEFINE_KERNEL(PFX##_min_##tag, ST, VT, N, LD, PFX##_##tag, st_##tag, min_##OPS)

#define DEFINE_ALL_KERNELS(PFX)                                                                    \
    DEFINE_KERNELS(PFX, i8, int8_t, vs8, VB, ld_i8, i8)                                            \
    DEFINE_KERNELS(PFX, u8, uint8_t, vu8, VB, ld_u8, u8)                                           \
    DEFINE_KERNELS(PFX, i16, int16_t, vs16, VB / 2, ld_i16, i16)                                   \
    DEFINE_KERNELS(PFX, u16, uint16_t, vu16, VB / 2, ld_u16, u16)                                  \
    DEFINE_KERNELS(PFX, i32, int32_t, vs32, VB / 4, ld_i32, i32)                                   \
    DEFINE_KERNELS(PFX, u32, uint32_t, vu32, VB / 4, ld_u32, u32)                                  \
    DEFINE_KERNELS(PFX, i64, int64_t, vs64, VB / 8, ld_i64, i64)                                   \
    DEFINE_KERNELS(PFX, u64, uint64_t, vu64, VB / 8, ld_u64, u64)                                  \
    DEFINE_KERNELS(PFX, f32, float, vf32, VB / 4, ld_f32, f32)                                     \
    DEFINE_KERNELS(PFX, f64, double, vf64, VB / 8, ld_f64, f64)                                    \
    DEFINE_KERNELS(PFX, fp16, uint16_t, vf32, VB / 4, ld_fp16, f32)                                \
    DEFINE_KERNELS(PFX, bf16, uint16_t, vf32, VB / 4, ld_bf16, f32)

DEFINE_ALL_KERNELS(st)
DEFINE_ALL_KERNELS(nt)

#define KERNEL_ROW(PFX, tag)                                                                       \
    {                                                                                              \
        [HCCL_REDUCE_SUM] = PFX##_sum_##tag, [HCCL_REDUCE_PROD] = PFX##_prod_##tag,                \
        [HCCL_REDUCE_MAX] = PFX##_max_##tag, [HCCL_REDUCE_MIN] = PFX##_min_##tag,                  \
    }

#define KERNEL_TABLE(PFX)                                                                          \
    {                                                                                              \
        [HCCL_DATA_TYPE_INT8] = KERNEL_ROW(PFX, i8), [HCCL_DATA_TYPE_UINT8] = KERNEL_ROW(PFX, u8), \
        [HCCL_DATA_TYPE_INT16] = KERNEL_ROW(PFX, i16),                                             \
        [HCCL_DATA_TYPE_UINT16] = KERNEL_ROW(PFX, u16),                                            \
        [HCCL_DATA_TYPE_INT32] = KERNEL_ROW(PFX, i32),                                             \
        [HCCL_DATA_TYPE_UINT32] = KERNEL_ROW(PFX, u32),                                            \
        [HCCL_DATA_TYPE_INT64] = KERNEL_ROW(PFX, i64),                                             \
        [HCCL_DATA_TYPE_UINT64] = KERNEL_ROW(PFX, u64),                                            \
        [HCCL_DATA_TYPE_FP32] = KERNEL_ROW(PFX, f32),                                              \
        [HCCL_DATA_TYPE_FP64] = KERNEL_ROW(PFX, f64),                                              \
        [HCCL_DATA_TYPE_FP16] = KERNEL_ROW(PFX, fp16),                                             \
        [HCCL_DATA_TYPE_BFP16] = KERNEL_ROW(PFX, bf16),                                            \
    }

const reduce_kernel_fn
    REDUCE_SFX(reduce_table)[HCCL_DATA_TYPE_RESERVED][HCCL_REDUCE_RESERVED] = KERNEL_TABLE(st);
const reduce_kernel_fn
    REDUCE_SFX(reduce_table_nt)[HCCL_DATA_TYPE_RESERVED][HCCL_REDUCE_RESERVED] = KERNEL_TABLE(nt);

#undef VB
