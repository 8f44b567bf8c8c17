/* SPDX-License-Identifier: MIT */
#pragma once

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* RoPE on n_heads rows of head_dim floats at x: each pair of a row's first 2 * half elements,
 * (2i, 2i + 1), or with halves (i, i + half), turned by the angle whose cosine and sine are
 * c[i] and s[i]. One product
 * is fused into each sum, the way a compiler contracts a*c - b*s for FMA hardware, so the
 * rounding matches the reference. Inlined into every kernel set: where the set has FMA,
 * fmaf is the instruction, where generic code calls into libm for it. */
static inline __attribute__((always_inline)) void rope_rows(float *x, uint32_t n_heads, uint32_t head_dim, uint32_t half,
                                                            bool halves, const float *c, const float *s) {
        uint32_t step = halves ? 1 : 2, offset = halves ? half : 1;
        for (uint32_t h = 0; h < n_heads; h++) {
                float *xh = x + (size_t) h * head_dim;
                for (uint32_t i = 0; i < half; i++) {
                        float a = xh[step * i], b = xh[step * i + offset];
                        xh[step * i] = fmaf(a, c[i], -(b * s[i]));
                        xh[step * i + offset] = fmaf(a, s[i], b * c[i]);
                }
        }
}
