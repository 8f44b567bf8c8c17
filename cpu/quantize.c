/* SPDX-License-Identifier: MIT */
#include <math.h>

#include "float16.h"
#include "quantize.h"

void quantize_row_q8_1(const float *x, struct block_q8_1 *out, size_t n) {
        for (size_t b = 0; b < n / QUANT_BLOCK; b++, x += QUANT_BLOCK) {
                float amax = 0.0f;
                for (int j = 0; j < QUANT_BLOCK; j++)
                        amax = fmaxf(amax, fabsf(x[j]));
                /* The scale multiplies by 127 / amax (not 1 / d) and rounds half to even, as
                 * llama.cpp's x86 path does: an activation sitting on a rounding boundary then
                 * lands on the same integer, which matters where outlier channels make d large. */
                float d = amax / 127.0f;
                float inv_d = amax != 0.0f ? 127.0f / amax : 0.0f;
                int sum = 0;
                for (int j = 0; j < QUANT_BLOCK; j++) {
                        int q = (int) nearbyintf(x[j] * inv_d);
                        out[b].qs[j] = (int8_t) q;
                        sum += q;
                }
                out[b].d = f32_to_f16(d);
                out[b].s = f32_to_f16((float) sum * d);
        }
}
