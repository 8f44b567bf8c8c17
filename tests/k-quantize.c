/* SPDX-License-Identifier: MIT */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "float16.h"
#include "k-quantize.h"

static int clamp_int(float v, int lo, int hi) {
        long r = lrintf(v);
        return r < lo ? lo : r > hi ? hi : (int) r;
}

/* Per sub-block of `width`: its offset (the minimum, if below 0, as a positive min) and its
 * scale for codes 0..max_code; then d and dmin so that the largest scale and min take
 * `levels` - 1, each sub-block's integer scale and min, and the codes. */
static void quantize_asymmetric(const float *x, unsigned width, int max_code, int levels, float *d_out, float *dmin_out,
                                int *scales, int *mins, int *codes) {
        unsigned n_sub = QK_K / width;
        float scale_f[16], min_f[16], max_scale = 0.0f, max_min = 0.0f;
        for (unsigned s = 0; s < n_sub; s++) {
                float lo = 0.0f, hi = 0.0f;
                for (unsigned e = s * width; e < s * width + width; e++) {
                        lo = fminf(lo, x[e]);
                        hi = fmaxf(hi, x[e]);
                }
                min_f[s] = -lo;
                scale_f[s] = (hi - lo) / (float) max_code;
                max_scale = fmaxf(max_scale, scale_f[s]);
                max_min = fmaxf(max_min, min_f[s]);
        }
        float d = f16_to_f32(f32_to_f16(max_scale / (float) (levels - 1)));
        float dmin = f16_to_f32(f32_to_f16(max_min / (float) (levels - 1)));
        *d_out = d;
        *dmin_out = dmin;
        for (unsigned s = 0; s < n_sub; s++) {
                scales[s] = d > 0.0f ? clamp_int(scale_f[s] / d, 0, levels - 1) : 0;
                mins[s] = dmin > 0.0f ? clamp_int(min_f[s] / dmin, 0, levels - 1) : 0;
                float step = d * (float) scales[s], offset = dmin * (float) mins[s];
                for (unsigned e = s * width; e < s * width + width; e++)
                        codes[e] = step > 0.0f ? clamp_int((x[e] + offset) / step, 0, max_code) : 0;
        }
}

/* Per sub-block of 16: a signed scale for codes -max_code..max_code (Q6_K: -32..31, Q3_K:
 * -4..3), d so that the largest |scale| takes scale_max. */
static void quantize_symmetric(const float *x, int code_lo, int code_hi, int scale_lo, int scale_hi, float *d_out,
                               int *scales, int *codes) {
        float scale_f[16], max_abs_scale = 0.0f;
        for (unsigned s = 0; s < 16; s++) {
                float amax = 0.0f;
                for (unsigned e = 16 * s; e < 16 * s + 16; e++)
                        amax = fmaxf(amax, fabsf(x[e]));
                scale_f[s] = amax / (float) code_hi;
                max_abs_scale = fmaxf(max_abs_scale, scale_f[s]);
        }
        float d = f16_to_f32(f32_to_f16(max_abs_scale / (float) scale_hi));
        *d_out = d;
        for (unsigned s = 0; s < 16; s++) {
                scales[s] = d > 0.0f ? clamp_int(scale_f[s] / d, scale_lo, scale_hi) : 0;
                float step = d * (float) scales[s];
                for (unsigned e = 16 * s; e < 16 * s + 16; e++)
                        codes[e] = step != 0.0f ? clamp_int(x[e] / step, code_lo, code_hi) : 0;
        }
}

/* Q4_K's and Q5_K's 12 bytes of 6-bit scales and mins, as k_quant_scale_min() reads them. */
static void pack_scales_mins(const int *scales, const int *mins, uint8_t out[12]) {
        memset(out, 0, 12);
        for (unsigned s = 0; s < 8; s++) {
                if (s < 4) {
                        out[s] |= (uint8_t) (scales[s] & 63);
                        out[s + 4] |= (uint8_t) (mins[s] & 63);
                } else {
                        out[s + 4] = (uint8_t) ((scales[s] & 15) | (mins[s] & 15) << 4);
                        out[s - 4] |= (uint8_t) ((scales[s] >> 4) << 6);
                        out[s] |= (uint8_t) ((mins[s] >> 4) << 6);
                }
        }
}

static void quantize_q4_K(const float *x, struct block_q4_K *b, bool five, struct block_q5_K *b5) {
        int scales[8], mins[8], codes[QK_K];
        float d, dmin;
        quantize_asymmetric(x, 32, five ? 31 : 15, 64, &d, &dmin, scales, mins, codes);
        uint8_t *packed = five ? b5->scales : b->scales;
        uint8_t *qs = five ? b5->qs : b->qs;
        pack_scales_mins(scales, mins, packed);
        memset(qs, 0, QK_K / 2);
        if (five)
                memset(b5->qh, 0, sizeof(b5->qh));
        for (unsigned e = 0; e < QK_K; e++) {
                qs[e / 64 * 32 + e % 32] |= (uint8_t) ((codes[e] & 15) << (4 * (e % 64 / 32)));
                if (five)
                        b5->qh[e % 32] |= (uint8_t) ((codes[e] >> 4) << (e / 32));
        }
        if (five) {
                b5->d = f32_to_f16(d);
                b5->dmin = f32_to_f16(dmin);
        } else {
                b->d = f32_to_f16(d);
                b->dmin = f32_to_f16(dmin);
        }
}

static void quantize_q2_K(const float *x, struct block_q2_K *b) {
        int scales[16], mins[16], codes[QK_K];
        float d, dmin;
        quantize_asymmetric(x, 16, 3, 16, &d, &dmin, scales, mins, codes);
        memset(b, 0, sizeof(*b));
        for (unsigned s = 0; s < 16; s++)
                b->scales[s] = (uint8_t) (scales[s] | mins[s] << 4);
        for (unsigned e = 0; e < QK_K; e++)
                b->qs[e / 128 * 32 + e % 32] |= (uint8_t) (codes[e] << (2 * (e % 128 / 32)));
        b->d = f32_to_f16(d);
        b->dmin = f32_to_f16(dmin);
}

static void quantize_q3_K(const float *x, struct block_q3_K *b) {
        int scales[16], codes[QK_K];
        float d;
        quantize_symmetric(x, -4, 3, -32, 31, &d, scales, codes);
        memset(b, 0, sizeof(*b));
        for (unsigned s = 0; s < 16; s++) {
                unsigned stored = (unsigned) (scales[s] + 32);
                b->scales[s % 8] |= (uint8_t) ((stored & 15) << (s < 8 ? 0 : 4));
                b->scales[8 + s % 4] |= (uint8_t) ((stored >> 4) << (2 * (s / 4)));
        }
        for (unsigned e = 0; e < QK_K; e++) {
                unsigned n = e / 128, j = e % 128 / 32, l = e % 32, biased = (unsigned) (codes[e] + 4);
                b->qs[32 * n + l] |= (uint8_t) ((biased & 3) << (2 * j));
                b->hmask[l] |= (uint8_t) ((biased >> 2) << (4 * n + j));
        }
        b->d = f32_to_f16(d);
}

static void quantize_q6_K(const float *x, struct block_q6_K *b) {
        int scales[16], codes[QK_K];
        float d;
        quantize_symmetric(x, -32, 31, -128, 127, &d, scales, codes);
        memset(b, 0, sizeof(*b));
        for (unsigned s = 0; s < 16; s++)
                b->scales[s] = (int8_t) scales[s];
        for (unsigned e = 0; e < QK_K; e++) {
                unsigned n = e / 128, j = e % 128 / 32, l = e % 32, biased = (unsigned) (codes[e] + 32);
                b->ql[64 * n + 32 * (j & 1) + l] |= (uint8_t) ((biased & 15) << (4 * (j >> 1)));
                b->qh[32 * n + l] |= (uint8_t) ((biased >> 4) << (2 * j));
        }
        b->d = f32_to_f16(d);
}

void k_quantize_row(enum tensor_type type, const float *x, void *out, uint64_t n) {
        for (uint64_t k = 0; k < n / QK_K; k++, x += QK_K) {
                switch (type) {
                case TENSOR_Q2_K: quantize_q2_K(x, (struct block_q2_K *) out + k); break;
                case TENSOR_Q3_K: quantize_q3_K(x, (struct block_q3_K *) out + k); break;
                case TENSOR_Q4_K: quantize_q4_K(x, (struct block_q4_K *) out + k, false, NULL); break;
                case TENSOR_Q5_K: quantize_q4_K(x, NULL, true, (struct block_q5_K *) out + k); break;
                default: quantize_q6_K(x, (struct block_q6_K *) out + k); break;
                }
        }
}
