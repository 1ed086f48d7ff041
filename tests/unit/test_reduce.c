/*
 * Tests of common/reduce.c and common/dtype.c. Every kernel set the CPU supports is compared
 * element by element with a scalar reference written here, and the contract of reduce.h
 * (wrapping, order of evaluation, single rounding of 16-bit floats, NaN and signed zeros) is
 * also checked against hand-computed values, so that a bug shared by the kernels and the
 * reference cannot hide.
 */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "half.h"
#include "reduce.h"
#include "test_list.h"

#define NISAS 3
#define MAX_COUNT 4097
#define MAX_SRC 5
#define GUARD 64 /* bytes checked before and after dst for stray writes */

static const char *const isa_names[NISAS] = {"generic", "avx2", "avx512"};

static const size_t counts[] = {0, 1, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 1000, 4097};

/* ---- Helpers ------------------------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rnd64(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int is_float_type(int dt)
{
    return dt == HCCL_DATA_TYPE_FP16 || dt == HCCL_DATA_TYPE_FP32 || dt == HCCL_DATA_TYPE_FP64 ||
           dt == HCCL_DATA_TYPE_BFP16;
}

static int is_signed_int(int dt)
{
    return dt == HCCL_DATA_TYPE_INT8 || dt == HCCL_DATA_TYPE_INT16 || dt == HCCL_DATA_TYPE_INT32 ||
           dt == HCCL_DATA_TYPE_INT64;
}

/* Element i of a buffer of type dt, as raw bits (zero-extended). */
static uint64_t get_bits(int dt, const void *buf, size_t i)
{
    size_t size = dtype_size(dt);
    uint64_t v = 0;

    memcpy(&v, (const char *)buf + i * size, size); /* little-endian x86 */
    return v;
}

static void put_bits(int dt, void *buf, size_t i, uint64_t v)
{
    size_t size = dtype_size(dt);

    memcpy((char *)buf + i * size, &v, size);
}

static float f32_of(uint64_t b)
{
    uint32_t u = (uint32_t)b;
    float f;

    memcpy(&f, &u, sizeof f);
    return f;
}

static uint64_t bits_f32(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof u);
    return u;
}

static double f64_of(uint64_t b)
{
    double d;

    memcpy(&d, &b, sizeof d);
    return d;
}

static uint64_t bits_f64(double d)
{
    uint64_t u;

    memcpy(&u, &d, sizeof u);
    return u;
}

/* The value of raw bits b of float type dt, widened to double (exactly). */
static double float_value(int dt, uint64_t b)
{
    switch (dt) {
    case HCCL_DATA_TYPE_FP16: return fp16_to_float((uint16_t)b);
    case HCCL_DATA_TYPE_BFP16: return bf16_to_float((uint16_t)b);
    case HCCL_DATA_TYPE_FP32: return f32_of(b);
    default: return f64_of(b);
    }
}

/* The bits of v in float type dt; only used with values dt represents exactly. */
static uint64_t float_bits(int dt, double v)
{
    switch (dt) {
    case HCCL_DATA_TYPE_FP16: return float_to_fp16((float)v);
    case HCCL_DATA_TYPE_BFP16: return float_to_bf16((float)v);
    case HCCL_DATA_TYPE_FP32: return bits_f32((float)v);
    default: return bits_f64(v);
    }
}

/* Equal bits, except that any NaN equals any NaN (payloads are not part of the contract). */
static int same_result(int dt, uint64_t got, uint64_t want)
{
    if (is_float_type(dt) && isnan(float_value(dt, got)) && isnan(float_value(dt, want)))
        return 1;
    return got == want;
}

/* Selects an ISA for a test; 0 if this CPU lacks it (the test then checks nothing). */
static int use_isa(const char *isa)
{
    return reduce_select(isa) == 0;
}

/* The ISA selected before each test, restored after it even if the test failed. */
static char saved_isa[16];

static void save_isa(void)
{
    strncpy(saved_isa, reduce_isa(), sizeof saved_isa - 1);
}

static void restore_isa(void)
{
    ck_assert_int_eq(reduce_select(saved_isa), 0);
}

/* ---- Scalar reference ---------------------------------------------------------------------- */

static float ref_op_f32(int op, float acc, float x)
{
    switch (op) {
    case HCCL_REDUCE_SUM: return acc + x;
    case HCCL_REDUCE_PROD: return acc * x;
    case HCCL_REDUCE_MAX: return (x > acc || isnan(x)) ? x : acc;
    default: return (x < acc || isnan(x)) ? x : acc;
    }
}

static double ref_op_f64(int op, double acc, double x)
{
    switch (op) {
    case HCCL_REDUCE_SUM: return acc + x;
    case HCCL_REDUCE_PROD: return acc * x;
    case HCCL_REDUCE_MAX: return (x > acc || isnan(x)) ? x : acc;
    default: return (x < acc || isnan(x)) ? x : acc;
    }
}

/* Integers of any width: wrap in uint64_t and truncate; compare sign- or zero-extended. */
static uint64_t ref_int(int dt, int op, const uint64_t *in, unsigned n)
{
    unsigned bits = (unsigned)dtype_size(dt) * 8;
    uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
    uint64_t acc = in[0];

    for (unsigned k = 1; k < n; k++) {
        uint64_t x = in[k];
        if (op == HCCL_REDUCE_SUM) {
            acc += x;
        } else if (op == HCCL_REDUCE_PROD) {
            acc *= x;
        } else if (is_signed_int(dt)) {
            unsigned sh = 64 - bits; /* sign-extend both through the top bits */
            int64_t sa = (int64_t)(acc << sh) >> sh, sx = (int64_t)(x << sh) >> sh;
            if (op == HCCL_REDUCE_MAX ? sx > sa : sx < sa)
                acc = x;
        } else if (op == HCCL_REDUCE_MAX ? (x & mask) > (acc & mask) : (x & mask) < (acc & mask)) {
            acc = x;
        }
    }
    return acc & mask;
}

/* The expected bits of one result element from the bits of its n source elements. */
static uint64_t ref_elem(int dt, int op, const uint64_t *in, unsigned n)
{
    if (n == 1)
        return in[0]; /* a bit-exact copy */
    if (dt == HCCL_DATA_TYPE_FP32 || dt == HCCL_DATA_TYPE_FP16 || dt == HCCL_DATA_TYPE_BFP16) {
        /* fp16 and bf16 too: all of them in float, rounded once at the end. */
        float acc = (float)float_value(dt, in[0]);
        for (unsigned k = 1; k < n; k++)
            acc = ref_op_f32(op, acc, (float)float_value(dt, in[k]));
        if (dt == HCCL_DATA_TYPE_FP16)
            return float_to_fp16(acc);
        if (dt == HCCL_DATA_TYPE_BFP16)
            return float_to_bf16(acc);
        return bits_f32(acc);
    }
    if (dt == HCCL_DATA_TYPE_FP64) {
        double acc = f64_of(in[0]);
        for (unsigned k = 1; k < n; k++)
            acc = ref_op_f64(op, acc, f64_of(in[k]));
        return bits_f64(acc);
    }
    return ref_int(dt, op, in, n);
}

/* ---- Random inputs ------------------------------------------------------------------------- */

/* A special float value: NaN, +-Inf, +-0, a subnormal, the largest finite, 1. */
static uint64_t special_float(int dt)
{
    static const double vals[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1.0, -1.0};
    unsigned r = (unsigned)(rnd64() % 9);

    if (r < 7)
        return float_bits(dt, vals[r]);
    switch (dt) { /* smallest subnormal (r == 7) or largest finite (r == 8) */
    case HCCL_DATA_TYPE_FP16: return r == 7 ? 0x0001 : 0x7bff;
    case HCCL_DATA_TYPE_BFP16: return r == 7 ? 0x0001 : 0x7f7f;
    case HCCL_DATA_TYPE_FP32: return r == 7 ? 0x1 : 0x7f7fffff;
    default: return r == 7 ? 0x1 : 0x7fefffffffffffffull;
    }
}

/*
 * A random element: any bits for integers; for floats, mostly values between 2^-6 and 2^6 with
 * random sign and mantissa (so sums and products round in every way), and 1 in 32 special.
 */
static uint64_t random_elem(int dt)
{
    uint64_t r = rnd64();

    if (!is_float_type(dt))
        return r;
    if ((r & 31) == 0)
        return special_float(dt);
    uint64_t sign = (r >> 5) & 1, e = (r >> 6) % 13; /* unbiased exponent e - 6 */
    switch (dt) {
    case HCCL_DATA_TYPE_FP16: return sign << 15 | (e + 9) << 10 | (r >> 20 & 0x3ff);
    case HCCL_DATA_TYPE_BFP16: return sign << 15 | (e + 121) << 7 | (r >> 20 & 0x7f);
    case HCCL_DATA_TYPE_FP32: return sign << 31 | (e + 121) << 23 | (r >> 20 & 0x7fffff);
    default: return sign << 63 | (e + 1017) << 52 | (rnd64() & 0xfffffffffffffull);
    }
}

/* ---- The main comparison ------------------------------------------------------------------- */

enum placement { OUT_OF_PLACE, IN_PLACE_FIRST, IN_PLACE_LAST, NPLACEMENTS };

static const char *const placement_names[NPLACEMENTS] = {"out-of-place", "dst==srcs[0]",
                                                         "dst==srcs[last]"};

/* Buffers with room for a guard zone on both sides and a misalignment of up to 3 elements. */
#define BUF_BYTES (GUARD + (MAX_COUNT + 3) * 8 + GUARD)
static _Alignas(64) unsigned char src_mem[MAX_SRC][BUF_BYTES];
static _Alignas(64) unsigned char dst_mem[BUF_BYTES];
static uint64_t orig[MAX_SRC][MAX_COUNT];

struct reduce_case {
    const char *isa;
    int dt, op;
    size_t count;
    unsigned nsrc;
    enum placement where;
    int stream; /* reduce_n_stream instead of reduce_n */
};

/* The bytes of a buffer that a case uses: the guards, the data and its misalignment. */
static size_t case_extent(const struct reduce_case *c)
{
    return GUARD + (c->count + 3) * dtype_size(c->dt) + GUARD;
}

static void check_guards(const struct reduce_case *c, const unsigned char *mem,
                         const unsigned char *data)
{
    const unsigned char *end = data + c->count * dtype_size(c->dt);

    for (const unsigned char *p = mem; p < data; p++)
        CHECK(*p == 0xa5, "%s %s %s n=%zu nsrc=%u %s: wrote %td bytes before dst", c->isa,
              dtype_name(c->dt), redop_name(c->op), c->count, c->nsrc, placement_names[c->where],
              data - p);
    for (const unsigned char *p = end; p < mem + case_extent(c); p++)
        CHECK(*p == 0xa5, "%s %s %s n=%zu nsrc=%u %s: wrote byte %td past dst", c->isa,
              dtype_name(c->dt), redop_name(c->op), c->count, c->nsrc, placement_names[c->where],
              p - end);
}

/* Sources that are not dst must be left alone. */
static void check_sources(const struct reduce_case *c, unsigned char *const *data,
                          const unsigned char *dst)
{
    for (unsigned k = 0; k < c->nsrc; k++) {
        if (data[k] == dst)
            continue;
        for (size_t i = 0; i < c->count; i++)
            CHECK(get_bits(c->dt, data[k], i) == orig[k][i],
                  "%s %s %s n=%zu nsrc=%u %s: source %u changed at [%zu]", c->isa,
                  dtype_name(c->dt), redop_name(c->op), c->count, c->nsrc,
                  placement_names[c->where], k, i);
    }
}

static void run_case(const struct reduce_case *c)
{
    size_t size = dtype_size(c->dt);
    size_t skew = (c->count + c->nsrc) % 4; /* misaligns the buffers by 0..3 elements */
    const void *srcs[MAX_SRC];
    unsigned char *data[MAX_SRC];

    for (unsigned k = 0; k < c->nsrc; k++) {
        memset(src_mem[k], 0xa5, case_extent(c));
        data[k] = src_mem[k] + GUARD + ((skew + k) % 4) * size;
        for (size_t i = 0; i < c->count; i++) {
            put_bits(c->dt, data[k], i, random_elem(c->dt));
            orig[k][i] = get_bits(c->dt, data[k], i); /* truncated to the element size */
        }
        srcs[k] = data[k];
    }
    memset(dst_mem, 0xa5, case_extent(c));
    unsigned char *dst = dst_mem + GUARD + skew * size;
    unsigned char *dst_base = dst_mem;
    if (c->where != OUT_OF_PLACE) {
        unsigned k = c->where == IN_PLACE_FIRST ? 0 : c->nsrc - 1;
        dst = data[k];
        dst_base = src_mem[k];
    }

    (c->stream ? reduce_n_stream : reduce_n)((HcclDataType)c->dt, (HcclReduceOp)c->op, dst, srcs,
                                             c->nsrc, c->count);

    for (size_t i = 0; i < c->count; i++) {
        uint64_t in[MAX_SRC];
        for (unsigned k = 0; k < c->nsrc; k++)
            in[k] = orig[k][i];
        uint64_t want = ref_elem(c->dt, c->op, in, c->nsrc);
        uint64_t got = get_bits(c->dt, dst, i);
        CHECK(same_result(c->dt, got, want),
              "%s%s %s %s n=%zu nsrc=%u %s: [%zu] = %#llx, want %#llx (src0 %#llx src1 %#llx)",
              c->isa, c->stream ? " stream" : "", dtype_name(c->dt), redop_name(c->op), c->count,
              c->nsrc, placement_names[c->where], i, (unsigned long long)got,
              (unsigned long long)want, (unsigned long long)in[0],
              (unsigned long long)(c->nsrc > 1 ? in[1] : 0));
    }
    check_guards(c, dst_base, dst);
    check_sources(c, data, dst);
}

/* Every dtype x op x count x nsrc x placement, regular and streaming stores, for ISA _i. */
START_TEST(matches_reference)
{
    const char *isa = isa_names[_i];

    if (!use_isa(isa))
        return;
    rng_state = 0x2545f4914f6cdd1dull + (uint64_t)_i;
    for (int dt = 0; dt < HCCL_DATA_TYPE_RESERVED; dt++)
        for (int op = 0; op < HCCL_REDUCE_RESERVED; op++)
            for (size_t n = 0; n < sizeof(counts) / sizeof(counts[0]); n++)
                for (unsigned nsrc = 1; nsrc <= MAX_SRC; nsrc++)
                    for (int where = 0; where < NPLACEMENTS; where++)
                        for (int stream = 0; stream < 2; stream++) {
                            struct reduce_case c = {isa, dt, op, counts[n], nsrc, where, stream};
                            run_case(&c);
                        }
}
END_TEST

/* ---- The contract, value by value ---------------------------------------------------------- */

/*
 * Reduces `count` elements whose sources k all hold in[k] (raw bits), on the current ISA, and
 * checks that every element of the result has the bits `want` (any NaN matching any NaN).
 */
static void check_uniform(int dt, int op, const uint64_t *in, unsigned nsrc, uint64_t want)
{
    enum { COUNT = 100 }; /* whole vectors and a tail on every ISA */
    static uint64_t bufs[MAX_SRC][COUNT];
    static uint64_t out[COUNT];
    const void *srcs[MAX_SRC];

    for (unsigned k = 0; k < nsrc; k++) {
        for (size_t i = 0; i < COUNT; i++)
            put_bits(dt, bufs[k], i, in[k]);
        srcs[k] = bufs[k];
    }
    reduce_n((HcclDataType)dt, (HcclReduceOp)op, out, srcs, nsrc, COUNT);
    for (size_t i = 0; i < COUNT; i++) {
        uint64_t got = get_bits(dt, out, i);
        CHECK(same_result(dt, got, want), "%s %s %s nsrc=%u: [%zu] = %#llx, want %#llx",
              reduce_isa(), dtype_name(dt), redop_name(op), nsrc, i, (unsigned long long)got,
              (unsigned long long)want);
    }
}

struct int_case {
    int dt, op;
    uint64_t a, b, want; /* raw bits */
};

START_TEST(integer_wraparound)
{
    static const struct int_case cases[] = {
        {HCCL_DATA_TYPE_INT8, HCCL_REDUCE_SUM, 0x7f, 0x01, 0x80}, /* 127 + 1 = -128 */
        {HCCL_DATA_TYPE_UINT8, HCCL_REDUCE_SUM, 200, 100, 44},
        {HCCL_DATA_TYPE_INT8, HCCL_REDUCE_PROD, 0xf0, 0xf0, 0x00}, /* -16 * -16 = 256 */
        {HCCL_DATA_TYPE_UINT8, HCCL_REDUCE_PROD, 15, 17, 255},
        {HCCL_DATA_TYPE_UINT8, HCCL_REDUCE_PROD, 16, 17, 16},      /* 272 mod 256 */
        {HCCL_DATA_TYPE_INT16, HCCL_REDUCE_PROD, 300, 300, 24464}, /* 90000 - 65536 */
        {HCCL_DATA_TYPE_UINT16, HCCL_REDUCE_SUM, 0xffff, 0xffff, 0xfffe},
        {HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, 0x7fffffff, 1, 0x80000000},
        {HCCL_DATA_TYPE_UINT32, HCCL_REDUCE_SUM, 0xffffffff, 2, 1},
        {HCCL_DATA_TYPE_INT32, HCCL_REDUCE_PROD, 0x10000, 0x10000, 0},
        {HCCL_DATA_TYPE_UINT32, HCCL_REDUCE_PROD, 0x10001, 0x10001, 0x20001},
        {HCCL_DATA_TYPE_INT64, HCCL_REDUCE_SUM, 0x7fffffffffffffffull, 1, 0x8000000000000000ull},
        {HCCL_DATA_TYPE_UINT64, HCCL_REDUCE_PROD, 0x8000000000000000ull, 2, 0},
        {HCCL_DATA_TYPE_INT64, HCCL_REDUCE_PROD, 0x100000001ull, 0x100000001ull, 0x200000001ull},
        /* MAX and MIN: the same bits order differently when signed. */
        {HCCL_DATA_TYPE_INT8, HCCL_REDUCE_MAX, 0xff, 0x01, 0x01}, /* max(-1, 1) */
        {HCCL_DATA_TYPE_UINT8, HCCL_REDUCE_MAX, 0xff, 0x01, 0xff},
        {HCCL_DATA_TYPE_INT16, HCCL_REDUCE_MIN, 0x8000, 0x7fff, 0x8000},
        {HCCL_DATA_TYPE_UINT16, HCCL_REDUCE_MIN, 0x8000, 0x7fff, 0x7fff},
        {HCCL_DATA_TYPE_INT32, HCCL_REDUCE_MIN, 0xfffffffb, 3, 0xfffffffb}, /* min(-5, 3) */
        {HCCL_DATA_TYPE_UINT32, HCCL_REDUCE_MIN, 0xfffffffb, 3, 3},
        {HCCL_DATA_TYPE_INT64, HCCL_REDUCE_MAX, ~0ull, 0x8000000000000000ull, ~0ull},
        {HCCL_DATA_TYPE_UINT64, HCCL_REDUCE_MAX, ~0ull, 0, ~0ull},
        {HCCL_DATA_TYPE_UINT64, HCCL_REDUCE_MIN, 0x8000000000000000ull, 1, 1},
    };

    if (!use_isa(isa_names[_i]))
        return;
    for (size_t j = 0; j < sizeof(cases) / sizeof(cases[0]); j++) {
        uint64_t in[2] = {cases[j].a, cases[j].b};
        check_uniform(cases[j].dt, cases[j].op, in, 2, cases[j].want);
    }
    /* Three sources: 100 + 100 + 100 = 300 = 44 mod 256 in uint8; int8 gives 44 too. */
    uint64_t in3[3] = {100, 100, 100};
    check_uniform(HCCL_DATA_TYPE_UINT8, HCCL_REDUCE_SUM, in3, 3, 44);
    check_uniform(HCCL_DATA_TYPE_INT8, HCCL_REDUCE_SUM, in3, 3, 44);
}
END_TEST

/* fp16 and bf16 are summed in fp32 and rounded once, not after every source. */
START_TEST(half_types_round_once)
{
    if (!use_isa(isa_names[_i]))
        return;
    /* 1 + 2^-11 + 2^-11: step by step each addition is a tie that rounds back to 1. */
    uint64_t h3[3] = {0x3c00, 0x1000, 0x1000};
    check_uniform(HCCL_DATA_TYPE_FP16, HCCL_REDUCE_SUM, h3, 3, 0x3c01);
    /* 1 + 4 * 2^-12: never changes 1 step by step, is 1 + 2^-10 in fp32. */
    uint64_t h5[5] = {0x3c00, 0x0c00, 0x0c00, 0x0c00, 0x0c00};
    check_uniform(HCCL_DATA_TYPE_FP16, HCCL_REDUCE_SUM, h5, 5, 0x3c01);
    /* 60000 + 60000 - 60000: fp16 steps would overflow to Inf, fp32 does not. */
    uint64_t big[3] = {float_to_fp16(60000.0f), float_to_fp16(60000.0f), float_to_fp16(-60000.0f)};
    check_uniform(HCCL_DATA_TYPE_FP16, HCCL_REDUCE_SUM, big, 3, float_to_fp16(60000.0f));
    /* 256 * 256 / 256 (as * 2^-8): the fp16 product 65536 would be Inf. */
    uint64_t prod[3] = {0x5c00, 0x5c00, 0x1c00};
    check_uniform(HCCL_DATA_TYPE_FP16, HCCL_REDUCE_PROD, prod, 3, 0x5c00);
    /* bf16: 1 + 2^-8 + 2^-8 = 1 + 2^-7, where each step alone would round back to 1. */
    uint64_t b3[3] = {0x3f80, 0x3b80, 0x3b80};
    check_uniform(HCCL_DATA_TYPE_BFP16, HCCL_REDUCE_SUM, b3, 3, 0x3f81);
    /* The one rounding is to nearest even: 1 + 2^-11 + 2^-13 lies above the tie between 1 and
     * 1 + 2^-10 and rounds up; 1 + 2^-11 alone is the tie and rounds down to 1. */
    uint64_t up[3] = {0x3c00, 0x1000, 0x0800};
    check_uniform(HCCL_DATA_TYPE_FP16, HCCL_REDUCE_SUM, up, 3, 0x3c01);
    uint64_t tie[2] = {0x3c00, 0x1000};
    check_uniform(HCCL_DATA_TYPE_FP16, HCCL_REDUCE_SUM, tie, 2, 0x3c00);
}
END_TEST

/* fp32 and fp64 combine sources left to right, rounding each step: no tree, no reordering. */
START_TEST(float_left_to_right)
{
    if (!use_isa(isa_names[_i]))
        return;
    /* (1 + 2^24) - 2^24 is 0 in fp32 (the first sum rounds to 2^24); 1 + (2^24 - 2^24) is 1. */
    uint64_t a[3] = {bits_f32(1.0f), bits_f32(0x1p24f), bits_f32(-0x1p24f)};
    check_uniform(HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, a, 3, bits_f32(0.0f));
    /* ((1 + 2^24) + 1) - 2^24 = 0, while pairwise (1 + 2^24) + (1 - 2^24) = 1. */
    uint64_t b[4] = {bits_f32(1.0f), bits_f32(0x1p24f), bits_f32(1.0f), bits_f32(-0x1p24f)};
    check_uniform(HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, b, 4, bits_f32(0.0f));
    /* (2^100 * 2^100) * 2^-100 overflows to Inf; other orders give 2^100. */
    uint64_t p[3] = {bits_f32(0x1p100f), bits_f32(0x1p100f), bits_f32(0x1p-100f)};
    check_uniform(HCCL_DATA_TYPE_FP32, HCCL_REDUCE_PROD, p, 3, bits_f32(INFINITY));
    uint64_t d[4] = {bits_f64(1.0), bits_f64(0x1p53), bits_f64(1.0), bits_f64(-0x1p53)};
    check_uniform(HCCL_DATA_TYPE_FP64, HCCL_REDUCE_SUM, d, 4, bits_f64(0.0));
    uint64_t dp[3] = {bits_f64(0x1p1000), bits_f64(0x1p1000), bits_f64(0x1p-1000)};
    check_uniform(HCCL_DATA_TYPE_FP64, HCCL_REDUCE_PROD, dp, 3, bits_f64(INFINITY));
}
END_TEST

/*
 * NaN, infinities and signed zeros, in every float type and at every source position. Each row
 * gives three sources and the expected SUM, PROD, MAX, MIN (NAN meaning "any NaN").
 */
START_TEST(float_specials)
{
    static const double rows[][7] = {
        {NAN, 1, 2, NAN, NAN, NAN, NAN},
        {1, NAN, 2, NAN, NAN, NAN, NAN},
        {1, 2, NAN, NAN, NAN, NAN, NAN},
        {NAN, INFINITY, -INFINITY, NAN, NAN, NAN, NAN},
        {INFINITY, -INFINITY, 1, NAN, -INFINITY, INFINITY, -INFINITY},
        {INFINITY, 1, 2, INFINITY, INFINITY, INFINITY, 1},
        {-INFINITY, 1, 2, -INFINITY, -INFINITY, 2, -INFINITY},
        {0, INFINITY, 1, INFINITY, NAN, INFINITY, 0},
        /* Among equal values the earliest wins, so max(-0, +0) = -0 and max(+0, -0) = +0. */
        {-0.0, 0.0, -0.0, 0.0, 0.0, -0.0, -0.0},
        {0.0, -0.0, 0.0, 0.0, -0.0, 0.0, 0.0},
        {-0.0, -0.0, -0.0, -0.0, -0.0, -0.0, -0.0},
    };
    static const int float_types[] = {HCCL_DATA_TYPE_FP16, HCCL_DATA_TYPE_BFP16,
                                      HCCL_DATA_TYPE_FP32, HCCL_DATA_TYPE_FP64};

    if (!use_isa(isa_names[_i]))
        return;
    for (size_t t = 0; t < sizeof(float_types) / sizeof(float_types[0]); t++) {
        int dt = float_types[t];
        for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
            uint64_t in[3];
            for (int k = 0; k < 3; k++)
                in[k] = float_bits(dt, rows[r][k]);
            for (int op = 0; op < HCCL_REDUCE_RESERVED; op++)
                check_uniform(dt, op, in, 3, float_bits(dt, rows[r][3 + op]));
        }
    }
}
END_TEST

/* A NaN in one lane of one source poisons exactly that lane, whatever its position. */
START_TEST(nan_in_one_lane)
{
    enum { COUNT = 67 };
    static float a[COUNT], b[COUNT], c[COUNT], out[COUNT];
    const void *srcs[3] = {a, b, c};

    if (!use_isa(isa_names[_i]))
        return;
    for (int op = HCCL_REDUCE_MAX; op <= HCCL_REDUCE_MIN; op++)
        for (int lane = 0; lane < COUNT; lane++)
            for (int k = 0; k < 3; k++) {
                for (int i = 0; i < COUNT; i++)
                    a[i] = (float)i, b[i] = (float)-i, c[i] = 0.5f;
                ((float *)srcs[k])[lane] = NAN;
                reduce_n(HCCL_DATA_TYPE_FP32, (HcclReduceOp)op, out, srcs, 3, COUNT);
                for (int i = 0; i < COUNT; i++) {
                    float want =
                        op == HCCL_REDUCE_MAX ? fmaxf((float)i, 0.5f) : fminf((float)-i, 0.5f);
                    if (i == lane)
                        CHECK(isnan(out[i]), "%s %s: NaN in src %d lane %d lost", reduce_isa(),
                              redop_name(op), k, lane);
                    else
                        CHECK(out[i] == want, "%s %s: [%d] = %a, want %a", reduce_isa(),
                              redop_name(op), i, out[i], want);
                }
            }
}
END_TEST

/* ---- API edges, selection, threads --------------------------------------------------------- */

START_TEST(invalid_arguments_write_nothing)
{
    int32_t a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];
    const void *srcs[2] = {a, a};

    memset(out, 0x5a, sizeof out);
    reduce_n(HCCL_DATA_TYPE_RESERVED, HCCL_REDUCE_SUM, out, srcs, 2, 8);
    reduce_n((HcclDataType)-1, HCCL_REDUCE_SUM, out, srcs, 2, 8);
    reduce_n(HCCL_DATA_TYPE_INT32, HCCL_REDUCE_RESERVED, out, srcs, 2, 8);
    reduce_n(HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, out, srcs, 0, 8);
    reduce_n(HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, out, srcs, 2, 0);
    for (int i = 0; i < 8; i++)
        ck_assert_uint_eq((uint32_t)out[i], 0x5a5a5a5au);
    /* The same source twice is fine. */
    reduce_n(HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, out, srcs, 2, 8);
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(out[i], 2 * a[i]);
}
END_TEST

/* An fp16 signalling NaN is copied as it is when there is a single source. */
START_TEST(single_source_copies_bits)
{
    uint16_t in[19], out[19];
    const void *srcs[1] = {in};

    for (int i = 0; i < 19; i++)
        in[i] = (uint16_t)(0x7c01 + i);
    reduce_n(HCCL_DATA_TYPE_FP16, HCCL_REDUCE_SUM, out, srcs, 1, 19);
    ck_assert_mem_eq(out, in, sizeof in);
    reduce_n(HCCL_DATA_TYPE_FP16, HCCL_REDUCE_SUM, in, srcs, 1, 19);
    for (int i = 0; i < 19; i++)
        ck_assert_uint_eq(in[i], 0x7c01 + i);
}
END_TEST

START_TEST(select_isa)
{
    const char *best = "generic";

    for (int i = 0; i < NISAS; i++)
        if (reduce_select(isa_names[i]) == 0) {
            best = isa_names[i];
            ck_assert_str_eq(reduce_isa(), isa_names[i]);
        }
    ck_assert_int_eq(reduce_select("generic"), 0); /* every CPU has it */
    ck_assert_int_eq(reduce_select("bogus"), -1);
    ck_assert_str_eq(reduce_isa(), "generic"); /* a failed choice changes nothing */
    ck_assert_int_eq(reduce_select("GENERIC"), 0);

    unsetenv("HCCLD_SIMD");
    ck_assert_int_eq(reduce_select(NULL), 0);
    ck_assert_str_eq(reduce_isa(), best);
    setenv("HCCLD_SIMD", "generic", 1);
    ck_assert_int_eq(reduce_select(NULL), 0);
    ck_assert_str_eq(reduce_isa(), "generic");
    setenv("HCCLD_SIMD", "auto", 1);
    ck_assert_int_eq(reduce_select(NULL), 0);
    ck_assert_str_eq(reduce_isa(), best);
    setenv("HCCLD_SIMD", "sse9", 1); /* unknown: falls back to the best, and says so */
    ck_assert_int_eq(reduce_select(NULL), -1);
    ck_assert_str_eq(reduce_isa(), best);
    unsetenv("HCCLD_SIMD");
}
END_TEST

/* Threads reduce while another one keeps switching kernels: every result must still be right. */
#define THREAD_COUNT 1031

static void *reducer_thread(void *arg)
{
    static _Thread_local float a[THREAD_COUNT], b[THREAD_COUNT], out[THREAD_COUNT];
    const void *srcs[2] = {a, b};
    long bad = 0;

    (void)arg;
    for (int i = 0; i < THREAD_COUNT; i++)
        a[i] = (float)i, b[i] = 0.25f;
    for (int iter = 0; iter < 2000; iter++) {
        reduce_n(HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, out, srcs, 2, THREAD_COUNT);
        for (int i = 0; i < THREAD_COUNT; i++)
            bad += out[i] != (float)i + 0.25f;
    }
    return (void *)bad;
}

START_TEST(threads_while_switching)
{
    pthread_t th[2];

    for (int t = 0; t < 2; t++)
        ck_assert_int_eq(pthread_create(&th[t], NULL, reducer_thread, NULL), 0);
    for (int iter = 0; iter < 3000; iter++)
        (void)reduce_select(isa_names[iter % NISAS]);
    for (int t = 0; t < 2; t++) {
        void *bad;
        ck_assert_int_eq(pthread_join(th[t], &bad), 0);
        ck_assert_int_eq((long)bad, 0);
    }
}
END_TEST

/* ---- dtype.h ------------------------------------------------------------------------------- */

START_TEST(dtype_table)
{
    static const struct {
        int dt;
        size_t size;
        const char *name;
    } want[] = {
        {HCCL_DATA_TYPE_INT8, 1, "int8"},     {HCCL_DATA_TYPE_INT16, 2, "int16"},
        {HCCL_DATA_TYPE_INT32, 4, "int32"},   {HCCL_DATA_TYPE_FP16, 2, "half"},
        {HCCL_DATA_TYPE_FP32, 4, "float"},    {HCCL_DATA_TYPE_INT64, 8, "int64"},
        {HCCL_DATA_TYPE_UINT64, 8, "uint64"}, {HCCL_DATA_TYPE_UINT8, 1, "uint8"},
        {HCCL_DATA_TYPE_UINT16, 2, "uint16"}, {HCCL_DATA_TYPE_UINT32, 4, "uint32"},
        {HCCL_DATA_TYPE_FP64, 8, "double"},   {HCCL_DATA_TYPE_BFP16, 2, "bfloat16"},
    };

    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        ck_assert(dtype_valid(want[i].dt));
        ck_assert_uint_eq(dtype_size(want[i].dt), want[i].size);
        ck_assert_str_eq(dtype_name(want[i].dt), want[i].name);
        ck_assert_int_eq(dtype_from_name(want[i].name), want[i].dt);
    }
    ck_assert(!dtype_valid(-1));
    ck_assert(!dtype_valid(HCCL_DATA_TYPE_RESERVED));
    ck_assert_uint_eq(dtype_size(HCCL_DATA_TYPE_RESERVED), 0);
    ck_assert_uint_eq(dtype_size(-1), 0);
    ck_assert_str_eq(dtype_name(99), "invalid");
    ck_assert_int_eq(dtype_from_name("fp16"), HCCL_DATA_TYPE_FP16);
    ck_assert_int_eq(dtype_from_name("Float16"), HCCL_DATA_TYPE_FP16);
    ck_assert_int_eq(dtype_from_name("FP32"), HCCL_DATA_TYPE_FP32);
    ck_assert_int_eq(dtype_from_name("float32"), HCCL_DATA_TYPE_FP32);
    ck_assert_int_eq(dtype_from_name("fp64"), HCCL_DATA_TYPE_FP64);
    ck_assert_int_eq(dtype_from_name("float64"), HCCL_DATA_TYPE_FP64);
    ck_assert_int_eq(dtype_from_name("bf16"), HCCL_DATA_TYPE_BFP16);
    ck_assert_int_eq(dtype_from_name("BFP16"), HCCL_DATA_TYPE_BFP16);
    ck_assert_int_eq(dtype_from_name("Int32"), HCCL_DATA_TYPE_INT32);
    ck_assert_int_eq(dtype_from_name("int"), -1);
    ck_assert_int_eq(dtype_from_name(""), -1);
    ck_assert_int_eq(dtype_from_name(NULL), -1);
}
END_TEST

START_TEST(redop_table)
{
    static const char *const names[] = {"sum", "prod", "max", "min"};

    for (int op = 0; op < HCCL_REDUCE_RESERVED; op++) {
        ck_assert(redop_valid(op));
        ck_assert_str_eq(redop_name(op), names[op]);
        ck_assert_int_eq(redop_from_name(names[op]), op);
    }
    ck_assert_int_eq(redop_from_name("MAX"), HCCL_REDUCE_MAX);
    ck_assert_int_eq(redop_from_name("avg"), -1);
    ck_assert_int_eq(redop_from_name(NULL), -1);
    ck_assert(!redop_valid(HCCL_REDUCE_RESERVED));
    ck_assert(!redop_valid(-1));
    ck_assert_str_eq(redop_name(HCCL_REDUCE_RESERVED), "invalid");
}
END_TEST

Suite *reduce_suite(void)
{
    Suite *s = suite_create("reduce");
    TCase *kern = tcase_create("kernels");
    TCase *api = tcase_create("api");
    TCase *dt = tcase_create("dtype");

    /* Loop tests run once per ISA; an ISA the CPU lacks passes without checking anything. */
    tcase_set_timeout(kern, 120);
    tcase_add_checked_fixture(kern, save_isa, restore_isa);
    tcase_add_loop_test(kern, matches_reference, 0, NISAS);
    tcase_add_loop_test(kern, integer_wraparound, 0, NISAS);
    tcase_add_loop_test(kern, half_types_round_once, 0, NISAS);
    tcase_add_loop_test(kern, float_left_to_right, 0, NISAS);
    tcase_add_loop_test(kern, float_specials, 0, NISAS);
    tcase_add_loop_test(kern, nan_in_one_lane, 0, NISAS);
    suite_add_tcase(s, kern);

    tcase_set_timeout(api, 60);
    tcase_add_checked_fixture(api, save_isa, restore_isa);
    tcase_add_test(api, invalid_arguments_write_nothing);
    tcase_add_test(api, single_source_copies_bits);
    tcase_add_test(api, select_isa);
    tcase_add_test(api, threads_while_switching);
    suite_add_tcase(s, api);

    tcase_add_test(dt, dtype_table);
    tcase_add_test(dt, redop_table);
    suite_add_tcase(s, dt);
    return s;
}
