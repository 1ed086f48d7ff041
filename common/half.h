/*
 * Scalar conversions between float and the two 16-bit floating-point formats of the HCCL API:
 * IEEE binary16 ("fp16", "half") and bfloat16. They work on bit patterns only (no FP arithmetic)
 * so that they are exact whatever the MXCSR flush-to-zero / denormals-are-zero settings are.
 *
 * NaNs follow what x86 F16C hardware does, so that the portable and the vector reduction
 * kernels agree bit for bit: a NaN keeps its sign and the top bits of its payload, and comes out
 * quiet. Rounding is to nearest, ties to even.
 */
#ifndef HCCLD_COMMON_HALF_H
#define HCCLD_COMMON_HALF_H

#include <stdint.h>
#include <string.h>

static inline float half_bits_to_float(uint32_t bits)
{
    float f;

    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint32_t half_float_to_bits(float f)
{
    uint32_t bits;

    memcpy(&bits, &f, sizeof bits);
    return bits;
}

/* Every fp16 value is exactly representable as a float, so this conversion never rounds. */
static inline float fp16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;

    if (exp == 0x1f) /* Inf, or NaN made quiet as F16C does. */
        return half_bits_to_float(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0));
    if (exp != 0) /* Normal: only the exponent bias changes (15 -> 127). */
        return half_bits_to_float(sign | ((exp + 112) << 23) | (mant << 13));
    if (mant == 0)
        return half_bits_to_float(sign);
    /* Subnormal fp16 (mant * 2^-24) is a normal float: shift the leading 1 into bit 10. */
    int shift = __builtin_clz(mant) - 21;
    mant = (mant << shift) & 0x3ffu;
    return half_bits_to_float(sign | ((uint32_t)(113 - shift) << 23) | (mant << 13));
}

/* Rounds to nearest even; too large values become Inf, too small ones (signed) zero. */
static inline uint16_t float_to_fp16(float f)
{
    uint32_t x = half_float_to_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;

    if (ax > 0x7f800000u) /* NaN: keep the top 9 payload bits, set the quiet bit. */
        return sign | 0x7e00u | (uint16_t)((ax >> 13) & 0x3ffu);
    if (ax >= 0x477ff000u) /* >= 65520 = 65504 + half an ulp: rounds to Inf (as does Inf). */
        return sign | 0x7c00u;
    if (ax >= 0x38800000u) {
        /* Normal fp16 (>= 2^-14): rebias the exponent, then round the 13 dropped bits; a carry
         * out of the mantissa correctly bumps the exponent. */
        uint32_t r = ax - (112u << 23);
        r += 0xfffu + ((r >> 13) & 1);
        return sign | (uint16_t)(r >> 13);
    }
    if (ax <= 0x33000000u) /* <= 2^-25, half the smallest subnormal: ties go to even zero. */
        return sign;
    /* Subnormal fp16: the result counts units of 2^-24; the float is mant * 2^(e - 150). */
    uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - (ax >> 23); /* 14..24, as 2^-25 < |f| < 2^-14 */
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1)))
        q++; /* may reach 0x400, the smallest normal, which is the right encoding */
    return sign | (uint16_t)q;
}

/* bfloat16 is the top half of a float, so widening is a shift (NaNs are kept as they are). */
static inline float bf16_to_float(uint16_t h)
{
    return half_bits_to_float((uint32_t)h << 16);
}

/* Rounds to nearest even; a carry out of the mantissa rounds the largest floats to Inf. */
static inline uint16_t float_to_bf16(float f)
{
    uint32_t x = half_float_to_bits(f);

    /* A NaN must not be rounded: a payload only in the low bits would turn it into Inf. */
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

#endif
