/*
 * Tests of common/half.h against references written here from the definitions of the formats
 * (exact values computed in double, nearest value found by search), and against the CPU's own
 * F16C conversions where it has them, since the vector reduction kernels use those.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "half.h"
#include "test_list.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_X86 1
#endif

static uint32_t bits_of(float f)
{
    uint32_t b;

    memcpy(&b, &f, sizeof b);
    return b;
}

static float float_of(uint32_t b)
{
    float f;

    memcpy(&f, &b, sizeof f);
    return f;
}

/* A small deterministic generator, so that a failure can be reproduced. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd32(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static int fp16_is_nan(uint16_t h)
{
    return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}

static int bf16_is_nan(uint16_t h)
{
    return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
}

/* ---- fp16 references ------------------------------------------------------------------------ */

/*
 * The magnitude of fp16 code k (0 <= k <= 0x7c00), from the definition of binary16. Code 0x7c00
 * (Inf) comes out as 2^16, the value the next step after the largest finite one would have,
 * which is where IEEE rounding decides between 65504 and Inf.
 */
static double fp16_code_value(unsigned k)
{
    unsigned e = k >> 10, m = k & 0x3ff;

    return e == 0 ? ldexp(m, -24) : ldexp(1024 + m, (int)e - 25);
}

/* The nearest fp16 to f (ties to even), found by binary search over the ordered codes. */
static uint16_t ref_float_to_fp16(float f)
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    unsigned lo = 0, hi = 0x7c00;

    if (isinf(f) || a >= fp16_code_value(0x7c00))
        return sign | 0x7c00;
    while (hi - lo > 1) { /* invariant: value(lo) <= a < value(hi) */
        unsigned mid = (lo + hi) / 2;
        if (fp16_code_value(mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double dlo = a - fp16_code_value(lo), dhi = fp16_code_value(hi) - a;
    if (dlo < dhi || (dlo == dhi && (lo & 1) == 0))
        return sign | (uint16_t)lo;
    return sign | (uint16_t)hi;
}

START_TEST(fp16_to_float_exact)
{
    for (unsigned h = 0; h < 0x10000; h++) {
        float f = fp16_to_float((uint16_t)h);
        if (fp16_is_nan((uint16_t)h)) {
            CHECK(isnan(f) && !!signbit(f) == !!(h & 0x8000), "fp16 %04x: NaN became %a", h, f);
            continue;
        }
        double want = (h & 0x7c00) == 0x7c00 ? INFINITY : fp16_code_value(h & 0x7fff);
        if (h & 0x8000)
            want = -want;
        CHECK((double)f == want && !!signbit(f) == !!(h & 0x8000), "fp16 %04x -> %a, want %a", h, f,
              want);
    }
}
END_TEST

START_TEST(fp16_roundtrip_all)
{
    for (unsigned h = 0; h < 0x10000; h++) {
        uint16_t back = float_to_fp16(fp16_to_float((uint16_t)h));
        if (fp16_is_nan((uint16_t)h)) {
            /* Signalling NaNs come back quiet (as with F16C); quiet ones unchanged. */
            CHECK(back == (h | 0x200), "fp16 NaN %04x came back as %04x", h, back);
        } else {
            CHECK(back == h, "fp16 %04x came back as %04x", h, back);
        }
    }
}
END_TEST

START_TEST(fp16_round_ties_to_even)
{
    /* 1 + 2^-11 is halfway between 1 and 1 + 2^-10: the even one (1) wins. */
    ck_assert_uint_eq(float_to_fp16(1.0f + 0x1p-11f), 0x3c00);
    /* 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: the even one (1 + 2^-9). */
    ck_assert_uint_eq(float_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);
    ck_assert_uint_eq(float_to_fp16(-(1.0f + 3 * 0x1p-11f)), 0xbc02);
    /* Just above and below a tie. */
    ck_assert_uint_eq(float_to_fp16(nextafterf(1.0f + 0x1p-11f, 2.0f)), 0x3c01);
    ck_assert_uint_eq(float_to_fp16(nextafterf(1.0f + 3 * 0x1p-11f, 0.0f)), 0x3c01);
    /* A carry out of the mantissa goes into the exponent: 2 - 2^-12 rounds to 2. */
    ck_assert_uint_eq(float_to_fp16(2.0f - 0x1p-12f), 0x4000);
}
END_TEST

START_TEST(fp16_overflow)
{
    ck_assert_uint_eq(float_to_fp16(65504.0f), 0x7bff);
    ck_assert_uint_eq(float_to_fp16(nextafterf(65520.0f, 0.0f)), 0x7bff);
    ck_assert_uint_eq(float_to_fp16(65520.0f), 0x7c00); /* the tie goes to the even "2^16" */
    ck_assert_uint_eq(float_to_fp16(-65520.0f), 0xfc00);
    ck_assert_uint_eq(float_to_fp16(1e10f), 0x7c00);
    ck_assert_uint_eq(float_to_fp16(3.4028235e38f), 0x7c00);
    ck_assert_uint_eq(float_to_fp16(INFINITY), 0x7c00);
    ck_assert_uint_eq(float_to_fp16(-INFINITY), 0xfc00);
}
END_TEST

START_TEST(fp16_subnormals_and_nan)
{
    ck_assert_uint_eq(float_to_fp16(0x1p-24f), 0x0001); /* smallest subnormal */
    ck_assert_uint_eq(float_to_fp16(0x1p-25f), 0x0000); /* tie with 0: even is 0 */
    ck_assert_uint_eq(float_to_fp16(nextafterf(0x1p-25f, 1.0f)), 0x0001);
    ck_assert_uint_eq(float_to_fp16(3 * 0x1p-25f), 0x0002);        /* tie 1 / 2: even is 2 */
    ck_assert_uint_eq(float_to_fp16(5 * 0x1p-25f), 0x0002);        /* tie 2 / 3: even is 2 */
    ck_assert_uint_eq(float_to_fp16(0x3ffp-24f), 0x03ff);          /* largest subnormal */
    ck_assert_uint_eq(float_to_fp16(0x1p-14f - 0x1p-25f), 0x0400); /* tie 3ff / 400 */
    ck_assert_uint_eq(float_to_fp16(0x1p-14f), 0x0400);            /* smallest normal */
    ck_assert_uint_eq(float_to_fp16(-0x1p-24f), 0x8001);
    ck_assert_uint_eq(float_to_fp16(0x1p-130f), 0x0000); /* float subnormal */
    ck_assert_uint_eq(float_to_fp16(-0x1p-130f), 0x8000);
    ck_assert_uint_eq(float_to_fp16(-0.0f), 0x8000);
    ck_assert_float_eq(fp16_to_float(0x0001), 0x1p-24f);
    ck_assert_float_eq(fp16_to_float(0x8200), -0x1p-15f);
    /* A float NaN whose payload is only in the low bits must not become Inf. */
    ck_assert(fp16_is_nan(float_to_fp16(float_of(0x7f800001))));
    ck_assert(fp16_is_nan(float_to_fp16(float_of(0xff800001))));
    ck_assert_uint_eq(float_to_fp16(float_of(0xff800001)) & 0x8000, 0x8000);
    ck_assert_uint_eq(float_to_fp16(NAN) & 0x7e00, 0x7e00);
}
END_TEST

/* Every halfway point between neighbouring fp16 values, and the floats right beside it. */
START_TEST(fp16_all_ties_vs_reference)
{
    for (unsigned k = 0; k < 0x7c00; k++) {
        float mid = (float)((fp16_code_value(k) + fp16_code_value(k + 1)) / 2); /* exact */
        float probes[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
        for (int j = 0; j < 3; j++)
            for (int s = 0; s < 2; s++) {
                float f = s ? -probes[j] : probes[j];
                CHECK(float_to_fp16(f) == ref_float_to_fp16(f), "float %a -> fp16 %04x, want %04x",
                      f, float_to_fp16(f), ref_float_to_fp16(f));
            }
    }
}
END_TEST

START_TEST(fp16_random_vs_reference)
{
    for (int n = 0; n < 400000; n++) {
        uint32_t b = rnd32();
        /* Half of the probes get an exponent in or near fp16's range, where rounding happens. */
        if (n & 1)
            b = (b & 0x807fffffu) | ((uint32_t)(98 + rnd32() % 48) << 23);
        float f = float_of(b);
        if (isnan(f))
            continue;
        CHECK(float_to_fp16(f) == ref_float_to_fp16(f), "float %a (%08x) -> %04x, want %04x", f, b,
              float_to_fp16(f), ref_float_to_fp16(f));
    }
}
END_TEST

#ifdef HAVE_X86
__attribute__((target("f16c"))) static float hw_fp16_to_float(uint16_t h)
{
    return _cvtsh_ss(h);
}

__attribute__((target("f16c"))) static uint16_t hw_float_to_fp16(float f)
{
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
#endif

/* The portable kernels use half.h, the AVX ones F16C: they must agree bit for bit, NaNs too. */
START_TEST(fp16_matches_f16c)
{
#ifdef HAVE_X86
    unsigned eax, ebx, ecx, edx;

    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & bit_F16C))
        return; /* no F16C, nothing to compare with */
    for (unsigned h = 0; h < 0x10000; h++)
        CHECK(bits_of(fp16_to_float((uint16_t)h)) == bits_of(hw_fp16_to_float((uint16_t)h)),
              "fp16 %04x: %08x, F16C says %08x", h, bits_of(fp16_to_float((uint16_t)h)),
              bits_of(hw_fp16_to_float((uint16_t)h)));
    for (int n = 0; n < 400000; n++) {
        uint32_t b = rnd32();
        if (n & 1)
            b = (b & 0x807fffffu) | ((uint32_t)(98 + rnd32() % 48) << 23);
        float f = float_of(b);
        CHECK(float_to_fp16(f) == hw_float_to_fp16(f), "float %08x: %04x, F16C says %04x", b,
              float_to_fp16(f), hw_float_to_fp16(f));
    }
#endif
}
END_TEST

/* ---- bfloat16 ------------------------------------------------------------------------------- */

/* The nearest bf16 to f (ties to even): the two candidates are f truncated and the next code
 * up in magnitude, whose distance to f is exact in double. */
static uint16_t ref_float_to_bf16(float f)
{
    uint32_t b = bits_of(f);
    uint32_t sign = b & 0x80000000u, lo = b & 0x7fff0000u, hi = lo + 0x10000u;
    double a = fabs((double)f);
    double vlo = fabs((double)float_of(lo));
    /* hi may be the Inf code; IEEE rounding then measures against 2^128. */
    double vhi = hi == 0x7f800000u ? ldexp(1.0, 128) : fabs((double)float_of(hi));

    if ((b & 0x7fffffffu) == 0x7f800000u)
        return (uint16_t)(b >> 16);
    double dlo = a - vlo, dhi = vhi - a;
    uint32_t pick = (dlo < dhi || (dlo == dhi && ((lo >> 16) & 1) == 0)) ? lo : hi;
    return (uint16_t)((sign | pick) >> 16);
}

START_TEST(bf16_roundtrip_all)
{
    for (unsigned h = 0; h < 0x10000; h++) {
        float f = bf16_to_float((uint16_t)h);
        CHECK(bits_of(f) == h << 16, "bf16 %04x -> %08x", h, bits_of(f)); /* NaNs too */
        uint16_t back = float_to_bf16(f);
        if (bf16_is_nan((uint16_t)h)) {
            CHECK(bf16_is_nan(back) && (back & 0x8000) == (h & 0x8000),
                  "bf16 NaN %04x came back as %04x", h, back);
        } else {
            CHECK(back == h, "bf16 %04x came back as %04x", h, back);
        }
    }
}
END_TEST

START_TEST(bf16_rounding)
{
    ck_assert_uint_eq(float_to_bf16(1.0f + 0x1p-8f), 0x3f80);     /* tie: even is 1 */
    ck_assert_uint_eq(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie: even is 1+2^-6 */
    ck_assert_uint_eq(float_to_bf16(nextafterf(1.0f + 0x1p-8f, 2.0f)), 0x3f81);
    ck_assert_uint_eq(float_to_bf16(-(1.0f + 3 * 0x1p-8f)), 0xbf82);
    ck_assert_uint_eq(float_to_bf16(2.0f - 0x1p-9f), 0x4000); /* carry into exponent */
    ck_assert_uint_eq(float_to_bf16(3.4028235e38f), 0x7f80);  /* FLT_MAX rounds up: Inf */
    ck_assert_uint_eq(float_to_bf16(-3.4028235e38f), 0xff80);
    ck_assert_uint_eq(float_to_bf16(float_of(0x7f7f7fffu)), 0x7f7f); /* just below the tie */
    ck_assert_uint_eq(float_to_bf16(INFINITY), 0x7f80);
    ck_assert_uint_eq(float_to_bf16(float_of(0x00008000u)), 0x0000); /* subnormal tie to 0 */
    ck_assert_uint_eq(float_to_bf16(float_of(0x00018000u)), 0x0002); /* subnormal tie to 2 */
    ck_assert_uint_eq(float_to_bf16(float_of(0x00008001u)), 0x0001);
    ck_assert_uint_eq(float_to_bf16(-0.0f), 0x8000);
    /* NaNs with payload only in the low half must stay NaN, not round to Inf or wrap. */
    ck_assert(bf16_is_nan(float_to_bf16(float_of(0x7f800001u))));
    ck_assert(bf16_is_nan(float_to_bf16(float_of(0x7fffffffu))));
    ck_assert(bf16_is_nan(float_to_bf16(float_of(0xff800001u))));
    ck_assert_uint_eq(float_to_bf16(float_of(0xff800001u)) & 0x8000, 0x8000);
}
END_TEST

START_TEST(bf16_random_vs_reference)
{
    for (int n = 0; n < 400000; n++) {
        uint32_t b = rnd32();
        /* Every other probe sits exactly on a tie, or next to one. */
        if (n & 1)
            b = (b & 0xffff0000u) | (0x7fffu + rnd32() % 3);
        float f = float_of(b);
        if (isnan(f))
            continue;
        CHECK(float_to_bf16(f) == ref_float_to_bf16(f), "float %08x -> %04x, want %04x", b,
              float_to_bf16(f), ref_float_to_bf16(f));
    }
}
END_TEST

Suite *half_suite(void)
{
    Suite *s = suite_create("half");
    TCase *fp16 = tcase_create("fp16");
    TCase *bf16 = tcase_create("bf16");

    tcase_set_timeout(fp16, 60);
    tcase_add_test(fp16, fp16_to_float_exact);
    tcase_add_test(fp16, fp16_roundtrip_all);
    tcase_add_test(fp16, fp16_round_ties_to_even);
    tcase_add_test(fp16, fp16_overflow);
    tcase_add_test(fp16, fp16_subnormals_and_nan);
    tcase_add_test(fp16, fp16_all_ties_vs_reference);
    tcase_add_test(fp16, fp16_random_vs_reference);
    tcase_add_test(fp16, fp16_matches_f16c);
    suite_add_tcase(s, fp16);

    tcase_set_timeout(bf16, 60);
    tcase_add_test(bf16, bf16_roundtrip_all);
    tcase_add_test(bf16, bf16_rounding);
    tcase_add_test(bf16, bf16_random_vs_reference);
    suite_add_tcase(s, bf16);
    return s;
}
