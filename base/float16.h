/* SPDX-License-Identifier: MIT */
#pragma once

/* Conversions between float and the 16-bit storage formats, bit-exact and portable:
 * round to nearest even, infinities and NaN preserved, subnormals handled. */

#include <stdint.h>
#include <string.h>

static inline float f32_from_bits(uint32_t u) {
        float f;
        memcpy(&f, &u, sizeof(f));
        return f;
}

static inline uint32_t f32_to_bits(float f) {
        uint32_t u;
        memcpy(&u, &f, sizeof(u));
        return u;
}

static inline float f16_to_f32(uint16_t h) {
        uint32_t sign = (uint32_t) (h & 0x8000) << 16;
        uint32_t exponent = (h >> 10) & 0x1f;
        uint32_t mantissa = h & 0x3ff;

        if (exponent == 0x1f) /* inf or NaN */
                return f32_from_bits(sign | 0x7f800000u | (mantissa << 13));
        if (exponent == 0) {
                if (mantissa == 0)
                        return f32_from_bits(sign);
                /* subnormal: value = mantissa * 2^-24 */
                float v = (float) mantissa * 0x1p-24f;
                return sign ? -v : v;
        }
        return f32_from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

static inline uint16_t f32_to_f16(float f) {
        uint32_t u = f32_to_bits(f);
        uint32_t sign = (u >> 16) & 0x8000;
        uint32_t abs = u & 0x7fffffffu;

        if (abs >= 0x7f800000u) /* inf or NaN (keep NaN quiet and non-zero) */
                return (uint16_t) (sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0));
        if (abs >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
                return (uint16_t) (sign | 0x7c00);
        if (abs < 0x38800000u) { /* below the smallest normal f16: subnormal or zero */
                float a = f32_from_bits(abs);
                /* adding 0.5 (2^-1) aligns the f16 subnormal step 2^-24 with the float ulp,
                 * so the FPU does the round-to-nearest-even for us */
                uint32_t r = f32_to_bits(a + 0.5f) - 0x3f000000u;
                return (uint16_t) (sign | r);
        }
        uint32_t mantissa_odd = (abs >> 13) & 1;
        abs += 0xfff + mantissa_odd; /* round to nearest even on the 13 dropped bits */
        return (uint16_t) (sign | ((abs - 0x38000000u) >> 13));
}

static inline float bf16_to_f32(uint16_t b) {
        return f32_from_bits((uint32_t) b << 16);
}
