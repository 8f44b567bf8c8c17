/* SPDX-License-Identifier: MIT */
#pragma once

/* exp(x) in single precision as 2^n * p(b): n = round(x / ln 2) by the 1.5 * 2^23 trick,
 * b = x - n ln 2 in two steps (a short and a long part of ln 2), p a degree-5 minimax
 * polynomial evaluated in Estrin form with fused multiply-adds. This is the published
 * algorithm (and coefficients) of Arm's optimized-routines vector expf, which llama.cpp
 * uses for its softmax and SiLU on x86; computing exp the same way makes the rounding of
 * attention weights and activations agree with it. Maximum error about 1.5 ulp. Inputs
 * below about -104 give 0, above about 88.4 give infinity. */

#include <math.h>

#define EXP_POLY_SHIFT 0x1.8p23f
#define EXP_POLY_LOG2E 0x1.715476p+0f
#define EXP_POLY_LN2_HI 0x1.62e4p-1f
#define EXP_POLY_LN2_LO 0x1.7f7d1cp-20f
#define EXP_POLY_C1 0x1.ffffecp-1f
#define EXP_POLY_C2 0x1.fffdb6p-2f
#define EXP_POLY_C3 0x1.555e66p-3f
#define EXP_POLY_C4 0x1.573e2ep-5f
#define EXP_POLY_C5 0x1.0e4020p-7f
#define EXP_POLY_LIMIT 192.0f

static inline float exp_poly(float x) {
        float z = fmaf(x, EXP_POLY_LOG2E, EXP_POLY_SHIFT);
        float n = z - EXP_POLY_SHIFT;
        float b = fmaf(-n, EXP_POLY_LN2_LO, fmaf(-n, EXP_POLY_LN2_HI, x));
        if (!(fabsf(n) <= EXP_POLY_LIMIT)) /* far out of range, or NaN from -inf */
                return n <= 0.0f || isnan(n) ? 0.0f : INFINITY;
        float u = b * b;
        float p = fmaf(fmaf(fmaf(EXP_POLY_C5, b, EXP_POLY_C4), u, fmaf(EXP_POLY_C3, b, EXP_POLY_C2)), u,
                       fmaf(EXP_POLY_C1, b, 1.0f));
        return ldexpf(p, (int) n);
}
