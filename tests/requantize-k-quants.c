/* SPDX-License-Identifier: MIT */
/* llama.cpp's reference quantizers of the K-quants (Q2_K .. Q6_K) without an importance
 * matrix: each sub-block's scale (and min) fitted by a small search for the least weighted
 * error, the sub-block scales quantized against the largest to 4, 6 or 8 bits, and every
 * element quantized again against its sub-block's scale as stored. The search's sums run in
 * float in llama.cpp's order; a product is never fused into a sum (built with contraction
 * off), so every byte comes out as llama.cpp's. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "float16.h"
#include "requantize.h"

/* Below this a group counts as all zero. */
#define GROUP_MAX_EPS 1e-15f

/* x rounded to the nearest integer, ties to even, as llama.cpp does it: adding 1.5 * 2^23
 * leaves the integer in the low mantissa bits (|x| < 2^22). */
static int nearest_int(float x) {
        float shifted = x + 12582912.0f;
        int32_t bits;
        memcpy(&bits, &shifted, sizeof(bits));
        return (bits & 0x007fffff) - 0x00400000;
}

static int clamp_int(int v, int lo, int hi) {
        return v < lo ? lo : v > hi ? hi : v;
}

/* The value of largest magnitude (the first of equals), signed. */
static float signed_absmax(const float *x, int n) {
        float amax = 0.0f, max = 0.0f;
        for (int i = 0; i < n; i++)
                if (fabsf(x[i]) > amax) {
                        amax = fabsf(x[i]);
                        max = x[i];
                }
        return max;
}

/* x ~ scale * L + min over n elements, L in 0..nmax, min <= 0, minimizing the weighted
 * squared (or, use_mad, absolute) error: first the range's own scale, then nstep + 1
 * candidate scales (nmax + rmin + rdelta * is) / range, each refitted by weighted least
 * squares (min clamped to 0), the best kept. Returns the scale, *neg_min = -min. */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min, float rmin,
                           float rdelta, int nstep, bool use_mad) {
        float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
        for (int i = 1; i < n; i++) {
                if (x[i] < min)
                        min = x[i];
                if (x[i] > max)
                        max = x[i];
                sum_w += w[i];
                sum_x += w[i] * x[i];
        }
        if (min > 0)
                min = 0;
        if (max == min) {
                memset(L, 0, (size_t) n);
                *neg_min = -min;
                return 0.0f;
        }
        float iscale = nmax / (max - min), scale = 1 / iscale, best_error = 0;
        for (int i = 0; i < n; i++) {
                L[i] = (uint8_t) clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
                float diff = scale * L[i] + min - x[i];
                best_error += w[i] * (use_mad ? fabsf(diff) : diff * diff);
        }
        uint8_t trial[32];
        for (int is = 0; is <= nstep; is++) {
                iscale = (rmin + rdelta * is + nmax) / (max - min);
                float sum_l = 0, sum_l2 = 0, sum_xl = 0;
                for (int i = 0; i < n; i++) {
                        int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
                        trial[i] = (uint8_t) l;
                        sum_l += w[i] * l;
                        sum_l2 += w[i] * l * l;
                        sum_xl += w[i] * l * x[i];
                }
                float det = sum_w * sum_l2 - sum_l * sum_l;
                if (!(det > 0))
                        continue;
                float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
                float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
                if (this_min > 0) {
                        this_min = 0;
                        this_scale = sum_xl / sum_l2;
                }
                float error = 0;
                for (int i = 0; i < n; i++) {
                        float diff = this_scale * trial[i] + this_min - x[i];
                        error += w[i] * (use_mad ? fabsf(diff) : diff * diff);
                }
                if (error < best_error) {
                        memcpy(L, trial, (size_t) n);
                        best_error = error;
                        scale = this_scale;
                        min = this_min;
                }
        }
        *neg_min = -min;
        return scale;
}

/* The levels l = round(iscale * x) in -nmax..nmax-1, stored as l + offset, and the sums of
 * w x l and w l^2 with weights w = x^2. */
static void symmetric_levels(int n, int nmax, const float *x, float iscale, int offset, int8_t *L, float *sumlx_out,
                             float *suml2_out) {
        float sumlx = 0, suml2 = 0;
        for (int i = 0; i < n; i++) {
                int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
                L[i] = (int8_t) (l + offset);
                float w = x[i] * x[i];
                sumlx += w * x[i] * l;
                suml2 += w * l * l;
        }
        *sumlx_out = sumlx;
        *suml2_out = suml2;
}

/* x ~ scale * (L - nmax), L in 0..2nmax-1, weights x^2: the scale from the largest element
 * (it becomes -nmax), then 18 others near it, each refitted by weighted least squares; the
 * best kept. Q6_K's sub-blocks (at most 16 elements). */
static float fit_symmetric_scale(int n, int nmax, const float *x, int8_t *L) {
        float max = signed_absmax(x, n), sumlx, suml2;
        if (fabsf(max) < GROUP_MAX_EPS) {
                memset(L, 0, (size_t) n);
                return 0.0f;
        }
        symmetric_levels(n, nmax, x, -nmax / max, nmax, L, &sumlx, &suml2);
        float scale = suml2 != 0 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
        for (int is = -9; is <= 9; is++) {
                if (is == 0)
                        continue;
                int8_t trial[16];
                symmetric_levels(n, nmax, x, -(nmax + 0.1f * is) / max, nmax, trial, &sumlx, &suml2);
                if (suml2 > 0 && sumlx * sumlx > best * suml2) {
                        memcpy(L, trial, (size_t) n);
                        scale = sumlx / suml2;
                        best = scale * sumlx;
                }
        }
        return scale;
}

/* x ~ scale * (L - nmax) with weights x^2, Q3_K's sub-blocks: the scale from the largest
 * element, then up to five passes that move single elements to the level that raises
 * sumlx^2 / suml2, the least-squares fit's gain. */
static float fit_q3_scale(int n, int nmax, const float *x, int8_t *L) {
        float max = signed_absmax(x, n), sumlx, suml2;
        if (fabsf(max) < GROUP_MAX_EPS) {
                memset(L, 0, (size_t) n);
                return 0.0f;
        }
        symmetric_levels(n, nmax, x, -nmax / max, 0, L, &sumlx, &suml2);
        for (int pass = 0; pass < 5; pass++) {
                int changed = 0;
                for (int i = 0; i < n; i++) {
                        float w = x[i] * x[i];
                        float slx = sumlx - w * x[i] * L[i];
                        if (!(slx > 0))
                                continue;
                        float sl2 = suml2 - w * L[i] * L[i];
                        int l = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                        if (l == L[i])
                                continue;
                        slx += w * x[i] * l;
                        sl2 += w * l * l;
                        if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                                L[i] = (int8_t) l;
                                sumlx = slx;
                                suml2 = sl2;
                                changed++;
                        }
                }
                if (!changed)
                        break;
        }
        for (int i = 0; i < n; i++)
                L[i] = (int8_t) (L[i] + nmax);
        return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Four 2-bit levels a byte: element 128n + 32j + l in bits 2j of qs[32n + l]. */
static void pack_2bit(const uint8_t L[QK_K], uint8_t qs[QK_K / 4]) {
        for (int n = 0; n < QK_K / 128; n++)
                for (int l = 0; l < 32; l++) {
                        const uint8_t *q = L + 128 * n + l;
                        qs[32 * n + l] = (uint8_t) (q[0] | q[32] << 2 | q[64] << 4 | q[96] << 6);
                }
}

/* 16 sub-blocks of 16, each fitted as scale * L - min (L 0..3, absolute error weighted by
 * |x|), scales and mins to 4 bits against the largest (d = max / 15). */
void quantize_q2_K_block(const float *x, struct block_q2_K *b) {
        uint8_t L[QK_K];
        float scales[QK_K / 16], mins[QK_K / 16], max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 16; j++) {
                float w[16];
                for (int l = 0; l < 16; l++)
                        w[l] = fabsf(x[16 * j + l]);
                scales[j] = fit_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
                if (scales[j] > max_scale)
                        max_scale = scales[j];
                if (mins[j] > max_min)
                        max_min = mins[j];
        }
        memset(b->scales, 0, sizeof(b->scales));
        b->d = f32_to_f16(0.0f);
        b->dmin = f32_to_f16(0.0f);
        if (max_scale > 0) {
                float iscale = 15.0f / max_scale;
                for (int j = 0; j < QK_K / 16; j++)
                        b->scales[j] = (uint8_t) nearest_int(iscale * scales[j]);
                b->d = f32_to_f16(max_scale / 15.0f);
        }
        if (max_min > 0) {
                float iscale = 15.0f / max_min;
                for (int j = 0; j < QK_K / 16; j++)
                        b->scales[j] = (uint8_t) (b->scales[j] | nearest_int(iscale * mins[j]) << 4);
                b->dmin = f32_to_f16(max_min / 15.0f);
        }
        for (int j = 0; j < QK_K / 16; j++) {
                float d = f16_to_f32(b->d) * (b->scales[j] & 15);
                if (d == 0)
                        continue;
                float dm = f16_to_f32(b->dmin) * (b->scales[j] >> 4);
                for (int i = 0; i < 16; i++)
                        L[16 * j + i] = (uint8_t) clamp_int(nearest_int((x[16 * j + i] + dm) / d), 0, 3);
        }
        pack_2bit(L, b->qs);
}

/* Q3_K's and Q6_K's 16 sub-blocks of 16 each fitted by fit; the scale of largest magnitude
 * (the first of equals). */
static float fit_sub_blocks_of_16(const float *x, int nmax, float (*fit)(int, int, const float *, int8_t *),
                                  int8_t L[QK_K], float scales[QK_K / 16]) {
        for (int j = 0; j < QK_K / 16; j++)
                scales[j] = fit(16, nmax, x + 16 * j, L + 16 * j);
        return signed_absmax(scales, QK_K / 16);
}

/* 16 sub-blocks of 16, each fitted as scale * L (L -4..3), scales to signed 6 bits against
 * the one of largest magnitude (d = -max / 32). */
void quantize_q3_K_block(const float *x, struct block_q3_K *b) {
        int8_t L[QK_K];
        float scales[QK_K / 16], max_scale = fit_sub_blocks_of_16(x, 4, fit_q3_scale, L, scales);
        memset(b->scales, 0, sizeof(b->scales));
        b->d = f32_to_f16(0.0f);
        if (max_scale != 0) {
                float iscale = -32.0f / max_scale;
                for (int j = 0; j < QK_K / 16; j++) {
                        int8_t l = (int8_t) nearest_int(iscale * scales[j]);
                        int code = clamp_int(l, -32, 31) + 32;
                        if (j < 8)
                                b->scales[j] = (uint8_t) (code & 15);
                        else
                                b->scales[j - 8] = (uint8_t) (b->scales[j - 8] | (code & 15) << 4);
                        b->scales[8 + j % 4] = (uint8_t) (b->scales[8 + j % 4] | (code >> 4) << (2 * (j / 4)));
                }
                b->d = f32_to_f16(1 / iscale);
        }
        for (int j = 0; j < QK_K / 16; j++) {
                float d = f16_to_f32(b->d) * (float) (k_quant_q3_scale(b->scales, (unsigned) j) - 32);
                if (d == 0)
                        continue;
                for (int i = 0; i < 16; i++)
                        L[16 * j + i] = (int8_t) (clamp_int(nearest_int(x[16 * j + i] / d), -4, 3) + 4);
        }
        /* The third bit of element e is bit e / 32 of hmask[e % 32]. */
        uint8_t low[QK_K];
        memset(b->hmask, 0, sizeof(b->hmask));
        for (int e = 0; e < QK_K; e++) {
                if (L[e] > 3)
                        b->hmask[e % 32] = (uint8_t) (b->hmask[e % 32] | 1 << (e / 32));
                low[e] = (uint8_t) (L[e] > 3 ? L[e] - 4 : L[e]);
        }
        pack_2bit(low, b->qs);
}

/* Q4_K's and Q5_K's levels L (0..nmax), scales and mins: 8 sub-blocks of 32, each fitted as
 * scale * L - min with weights mean|x| + |x| (the mean as the root of the mean square), the
 * scales and mins to 6 bits against the largest (d = max / 63), packed as
 * k_quant_scale_min() reads them. */
static void fit_k_quant_scale_min(const float *x, int nmax, float rmin, int nstep, uint8_t L[QK_K], uint8_t packed[12],
                                  f16_bits *d_out, f16_bits *dmin_out) {
        float scales[QK_K / 32], mins[QK_K / 32], max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 32; j++) {
                const float *xs = x + 32 * j;
                float sum_x2 = 0, w[32];
                for (int l = 0; l < 32; l++)
                        sum_x2 += xs[l] * xs[l];
                float av_x = sqrtf(sum_x2 / 32);
                for (int l = 0; l < 32; l++)
                        w[l] = av_x + fabsf(xs[l]);
                scales[j] = fit_scale_min(32, nmax, xs, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep, false);
                if (scales[j] > max_scale)
                        max_scale = scales[j];
                if (mins[j] > max_min)
                        max_min = mins[j];
        }
        float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f, inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
        for (int j = 0; j < QK_K / 32; j++) {
                uint8_t ls = (uint8_t) nearest_int(inv_scale * scales[j]), lm = (uint8_t) nearest_int(inv_min * mins[j]);
                ls = ls < 63 ? ls : 63;
                lm = lm < 63 ? lm : 63;
                if (j < 4) {
                        packed[j] = ls;
                        packed[j + 4] = lm;
                } else {
                        packed[j + 4] = (uint8_t) ((ls & 15) | (lm & 15) << 4);
                        packed[j - 4] = (uint8_t) (packed[j - 4] | (ls >> 4) << 6);
                        packed[j] = (uint8_t) (packed[j] | (lm >> 4) << 6);
                }
        }
        *d_out = f32_to_f16(max_scale / 63.0f);
        *dmin_out = f32_to_f16(max_min / 63.0f);
        for (int j = 0; j < QK_K / 32; j++) {
                uint8_t sc, m;
                k_quant_scale_min(packed, (unsigned) j, &sc, &m);
                float d = f16_to_f32(*d_out) * sc;
                if (d == 0)
                        continue;
                float dm = f16_to_f32(*dmin_out) * m;
                for (int i = 0; i < 32; i++)
                        L[32 * j + i] = (uint8_t) clamp_int(nearest_int((x[32 * j + i] + dm) / d), 0, nmax);
        }
}

void quantize_q4_K_block(const float *x, struct block_q4_K *b) {
        uint8_t L[QK_K];
        fit_k_quant_scale_min(x, 15, -1.0f, 20, L, b->scales, &b->d, &b->dmin);
        for (int c = 0; c < QK_K / 64; c++)
                for (int l = 0; l < 32; l++)
                        b->qs[32 * c + l] = (uint8_t) (L[64 * c + l] | L[64 * c + 32 + l] << 4);
}

void quantize_q5_K_block(const float *x, struct block_q5_K *b) {
        uint8_t L[QK_K];
        fit_k_quant_scale_min(x, 31, -0.5f, 15, L, b->scales, &b->d, &b->dmin);
        memset(b->qh, 0, sizeof(b->qh));
        for (int c = 0; c < QK_K / 64; c++)
                for (int l = 0; l < 32; l++) {
                        uint8_t lo = L[64 * c + l], hi = L[64 * c + 32 + l];
                        b->qh[l] = (uint8_t) (b->qh[l] | (lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
                        b->qs[32 * c + l] = (uint8_t) ((lo & 15) | (hi & 15) << 4);
                }
}

/* 16 sub-blocks of 16, each fitted as scale * (L - 32) (L 0..63), scales to int8 against the
 * one of largest magnitude (d = -max / 128). */
void quantize_q6_K_block(const float *x, struct block_q6_K *b) {
        int8_t L[QK_K];
        float scales[QK_K / 16], max_scale = fit_sub_blocks_of_16(x, 32, fit_symmetric_scale, L, scales);
        if (fabsf(max_scale) < GROUP_MAX_EPS) {
                memset(b, 0, sizeof(*b));
                return;
        }
        float iscale = -128.0f / max_scale;
        b->d = f32_to_f16(1 / iscale);
        for (int j = 0; j < QK_K / 16; j++) {
                int s = nearest_int(iscale * scales[j]);
                b->scales[j] = (int8_t) (s < 127 ? s : 127);
        }
        for (int j = 0; j < QK_K / 16; j++) {
                float d = f16_to_f32(b->d) * b->scales[j];
                if (d == 0)
                        continue;
                for (int i = 0; i < 16; i++)
                        L[16 * j + i] = (int8_t) (clamp_int(nearest_int(x[16 * j + i] / d), -32, 31) + 32);
        }
        /* Element 128n + 32j + l: low nibble in ql[64n + 32(j & 1) + l] (high nibble for j >= 2),
         * top two bits 2j of qh[32n + l]. */
        for (int n = 0; n < QK_K / 128; n++)
                for (int l = 0; l < 32; l++) {
                        const int8_t *q = L + 128 * n + l;
                        b->ql[64 * n + l] = (uint8_t) ((q[0] & 15) | (q[64] & 15) << 4);
                        b->ql[64 * n + 32 + l] = (uint8_t) ((q[32] & 15) | (q[96] & 15) << 4);
                        b->qh[32 * n + l] = (uint8_t) (q[0] >> 4 | (q[32] >> 4) << 2 | (q[64] >> 4) << 4 | (q[96] >> 4) << 6);
                }
}
