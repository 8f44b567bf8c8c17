/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <math.h>
#include <string.h>

#include "attention-by-position.h"
#include "dot.h"
#include "exp-poly.h"
#include "float16.h"
#include "gelu-table.h"
#include "quantize.h"
#include "rope.h"

/* A Q4_0 block's exact integer product with an activation block. */
static int32_t q4_0_block_isum(const struct block_q4_0 *w, const struct block_q8_1 *act) {
        int32_t isum = 0;
        for (int j = 0; j < QUANT_BLOCK / 2; j++)
                isum += ((w->qs[j] & 15) - 8) * act->qs[j] + ((w->qs[j] >> 4) - 8) * act->qs[j + 16];
        return isum;
}

static float dot_q4_0_scalar(const void *weight_row, const struct block_q8_1 *act, size_t n_blocks) {
        const struct block_q4_0 *w = weight_row;
        float sum = 0.0f;
        for (size_t b = 0; b < n_blocks; b++)
                sum += (float) q4_0_block_isum(&w[b], &act[b]) * (f16_to_f32(w[b].d) * f16_to_f32(act[b].d));
        return sum;
}

static float dot_q4_1_scalar(const void *weight_row, const struct block_q8_1 *act, size_t n_blocks) {
        const struct block_q4_1 *w = weight_row;
        float sum = 0.0f;
        for (size_t b = 0; b < n_blocks; b++) {
                int32_t isum = 0;
                for (int j = 0; j < QUANT_BLOCK / 2; j++)
                        isum += (w[b].qs[j] & 15) * act[b].qs[j] + (w[b].qs[j] >> 4) * act[b].qs[j + 16];
                /* the offset m meets the activation sum, precomputed as s = d * sum(q) */
                sum += (float) isum * (f16_to_f32(w[b].d) * f16_to_f32(act[b].d)) +
                       f16_to_f32(w[b].m) * f16_to_f32(act[b].s);
        }
        return sum;
}

/* The 5-bit types in llama.cpp's x86 order (dot.h), so that the other sets' single products
 * and tiles are held to these bits, not to a tolerance: eight lanes of four elements, each
 * lane's exact integer sum meeting d_w * d_a in one fma per block, lanes_sum8() at the end;
 * Q5_1's offset m * s summed apart by fma, as the peer's compiler contracts it. */
static void q5_lanes_scalar(const uint8_t *qs, const uint8_t *qh, int32_t bias, const int8_t *act, float scale,
                            float lanes[PACKED_LANES]) {
        for (unsigned l = 0; l < PACKED_LANES; l++) {
                int32_t isum = 0;
                for (unsigned k = 4 * l; k < 4 * l + 4; k++)
                        isum += ((int32_t) q5_element(qs, qh, k) - bias) * act[k];
                lanes[l] = fmaf((float) isum, scale, lanes[l]);
        }
}

static float dot_q5_0_scalar(const void *weight_row, const struct block_q8_1 *act, size_t n_blocks) {
        const struct block_q5_0 *w = weight_row;
        float lanes[PACKED_LANES] = { 0 };
        for (size_t b = 0; b < n_blocks; b++)
                q5_lanes_scalar(w[b].qs, w[b].qh, 16, act[b].qs, f16_to_f32(w[b].d) * f16_to_f32(act[b].d), lanes);
        return lanes_sum8(lanes);
}

static float dot_q5_1_scalar(const void *weight_row, const struct block_q8_1 *act, size_t n_blocks) {
        const struct block_q5_1 *w = weight_row;
        float lanes[PACKED_LANES] = { 0 }, off = 0.0f;
        for (size_t b = 0; b < n_blocks; b++) {
                q5_lanes_scalar(w[b].qs, w[b].qh, 0, act[b].qs, f16_to_f32(w[b].d) * f16_to_f32(act[b].d), lanes);
                off = fmaf(f16_to_f32(w[b].m), f16_to_f32(act[b].s), off);
        }
        return lanes_sum8(lanes) + off;
}

static float dot_q8_0_scalar(const void *weight_row, const struct block_q8_1 *act, size_t n_blocks) {
        const struct block_q8_0 *w = weight_row;
        float sum = 0.0f;
        for (size_t b = 0; b < n_blocks; b++) {
                int32_t isum = 0;
                for (int j = 0; j < QUANT_BLOCK; j++)
                        isum += w[b].qs[j] * act[b].qs[j];
                sum += (float) isum * (f16_to_f32(w[b].d) * f16_to_f32(act[b].d));
        }
        return sum;
}

float dot_single_q4_0_reference(const void *weight_row, const struct block_q8_1 *act, size_t n_blocks) {
        const struct block_q4_0 *w = weight_row;
        float acc = 0.0f;
        for (size_t b = 0; b < n_blocks; b++)
                acc = fmaf((float) q4_0_block_isum(&w[b], &act[b]), f16_to_f32(w[b].d) * f16_to_f32(act[b].d), acc);
        return acc;
}

float dot_single_q8_0_reference(const void *weight_row, const struct block_q8_1 *act, size_t n_blocks) {
        const struct block_q8_0 *w = weight_row;
        float acc = 0.0f;
        for (size_t b = 0; b < n_blocks; b++) {
                int32_t isum = 0;
                for (int j = 0; j < QUANT_BLOCK; j++)
                        isum += w[b].qs[j] * act[b].qs[j];
                acc = fmaf((float) isum, f16_to_f32(w[b].d) * f16_to_f32(act[b].d), acc);
        }
        return acc;
}

/* The reference tiles: one product at a time. */
#define SCALAR_TILE(type)                                                                                               \
        static void tile_##type##_scalar(const void *weight_rows, size_t row_bytes, const struct block_q8_1 *act,      \
                                         const float *act_ds, size_t act_stride, unsigned n_tokens, size_t n_blocks,   \
                                         float out[DOT_TILE_TOKENS * DOT_TILE_ROWS]) {                                 \
                (void) act_ds; /* the reference converts its own */                                                     \
                for (unsigned t = 0; t < n_tokens; t++)                                                                 \
                        for (unsigned r = 0; r < DOT_TILE_ROWS; r++)                                                    \
                                out[t * DOT_TILE_ROWS + r] = dot_##type##_scalar(                                      \
                                        (const uint8_t *) weight_rows + r * row_bytes, act + t * act_stride, n_blocks); \
        }
SCALAR_TILE(q4_0)
SCALAR_TILE(q4_1)
SCALAR_TILE(q5_0)
SCALAR_TILE(q5_1)
SCALAR_TILE(q8_0)

/* The reference for the packed product: one row and token at a time, in dot.h's order (eight
 * lanes, one float accumulator each; or, for the single-accumulator product, the block's
 * lanes summed first into one), from the packed bytes themselves, with the weights' bias taken off each
 * quant and the activation's scales converted here (the ds and corrections tables are the
 * SIMD sets' shortcuts, checked against this). */
static float packed_row_scalar(const struct packed_weights *w, uint64_t row, const struct block_q8_1 *act, bool single) {
        unsigned r = (unsigned) (row % PACKED_ROWS);
        const uint8_t *quants = w->data + row / PACKED_ROWS * w->group_bytes;
        const uint8_t *scales = quants + w->n_blocks * w->quant_bytes;
        int32_t bias = packed_quant_bias(w->type);
        bool five_bits = w->type == TENSOR_Q5_0 || w->type == TENSOR_Q5_1;
        bool has_m = w->type == TENSOR_Q4_1 || w->type == TENSOR_Q5_1;
        float lanes[PACKED_LANES] = { 0 }, off = 0.0f, acc = 0.0f;
        for (uint64_t b = 0; b < w->n_blocks; b++) {
                const uint8_t *rec = quants + b * w->quant_bytes;
                const f16_bits *s = (const f16_bits *) (scales + b * w->scale_bytes);
                float scale = f16_to_f32(s[r]) * f16_to_f32(act[b].d);
                int32_t block_sum = 0;
                for (unsigned l = 0; l < PACKED_LANES; l++) {
                        int32_t isum = 0;
                        for (unsigned k = 0; k < 4; k++) {
                                int32_t q;
                                if (w->type == TENSOR_Q8_0)
                                        q = rec[l * 4 * PACKED_ROWS + 4 * r + k];
                                else { /* lanes 0..3 are low nibbles, 4..7 the high ones of the same bytes */
                                        uint8_t v = rec[l % 4 * 4 * PACKED_ROWS + 4 * r + k];
                                        q = l < 4 ? v & 15 : v >> 4;
                                        if (five_bits) /* bit l of byte k of the fifth vector's lane */
                                                q |= (rec[4 * 4 * PACKED_ROWS + 4 * r + k] >> l & 1) << 4;
                                }
                                isum += (q - bias) * act[b].qs[4 * l + k];
                        }
                        if (single)
                                block_sum += isum;
                        else
                                lanes[l] = fmaf((float) isum, scale, lanes[l]);
                }
                if (single)
                        acc = fmaf((float) block_sum, scale, acc);
                if (has_m)
                        off = fmaf(f16_to_f32(s[PACKED_ROWS + r]), f16_to_f32(act[b].s), off);
        }
        if (single)
                return acc;
        return has_m ? lanes_sum8(lanes) + off : lanes_sum8(lanes);
}

static void packed_rows_scalar(const struct packed_weights *w, uint64_t group_begin, uint64_t group_end,
                               const struct packed_activations *a, unsigned n_tokens, float *out, size_t out_stride,
                               bool accumulate, bool single) {
        for (uint64_t row = group_begin * PACKED_ROWS; row < group_end * PACKED_ROWS && row < w->n_rows; row++)
                for (unsigned t = 0; t < n_tokens; t++) {
                        float v = packed_row_scalar(w, row, a->xq + t * a->stride, single);
                        float *o = &out[t * out_stride + row];
                        *o = accumulate ? *o + v : v;
                }
}

static void packed_scalar(const struct packed_weights *w, uint64_t group_begin, uint64_t group_end,
                          const struct packed_activations *a, unsigned n_tokens, float *out, size_t out_stride,
                          bool accumulate) {
        packed_rows_scalar(w, group_begin, group_end, a, n_tokens, out, out_stride, accumulate, false);
}

static void packed_single_scalar(const struct packed_weights *w, uint64_t group_begin, uint64_t group_end,
                                 const struct packed_activations *a, unsigned n_tokens, float *out, size_t out_stride,
                                 bool accumulate) {
        packed_rows_scalar(w, group_begin, group_end, a, n_tokens, out, out_stride, accumulate, true);
}

static void dot_f16_scalar(const f16_bits *k, const float *q, size_t q_stride, unsigned n_q, size_t n, float *out) {
        for (unsigned g = 0; g < n_q; g++) {
                float lanes[16] = { 0 };
                for (size_t i = 0; i < n; i++)
                        lanes[i % 16] = fmaf(f16_to_f32(k[i]), q[g * q_stride + i], lanes[i % 16]);
                out[g] = lanes_sum16(lanes);
        }
}

static void dot_f16_wide_scalar(const f16_bits *k, const float *q, size_t q_stride, unsigned n_q, size_t n, float *out) {
        size_t whole = n / 64 * 64;
        for (unsigned g = 0; g < n_q; g++) {
                const float *qg = q + g * q_stride;
                float lanes[64] = { 0 };
                for (size_t i = 0; i < whole; i++)
                        lanes[i % 64] = fmaf(f16_to_f32(k[i]), qg[i], lanes[i % 64]);
                double sum = lanes_sum64(lanes, 1);
                for (size_t i = whole; i < n; i++)
                        sum += (double) (f16_to_f32(k[i]) * qg[i]);
                out[g] = (float) sum;
        }
}

static void axpy_f16_scalar(float *acc, size_t acc_stride, const f16_bits *v, const float *w, unsigned n_q, size_t n) {
        for (unsigned g = 0; g < n_q; g++)
                for (size_t i = 0; i < n; i++)
                        acc[g * acc_stride + i] = fmaf(f16_to_f32(v[i]), w[g], acc[g * acc_stride + i]);
}

static void attn_scores_scalar(const struct f16_rows *keys, unsigned n_pos, const float *q, size_t q_stride, unsigned n_q,
                               size_t n, bool wide, float scale, float *scores, size_t scores_stride) {
        attn_scores_by_position(wide ? dot_f16_wide_scalar : dot_f16_scalar, keys, n_pos, q, q_stride, n_q, n, scale, scores,
                                scores_stride);
}

static void attn_values_scalar(const struct f16_rows *values, unsigned n_pos, const float *w, size_t w_stride, unsigned n_q,
                               size_t n, unsigned n_lanes, unsigned first_row, unsigned n_rows, float *lanes,
                               size_t lanes_stride) {
        attn_values_by_position(axpy_f16_scalar, values, n_pos, w, w_stride, n_q, n, n_lanes, first_row, n_rows, lanes,
                                lanes_stride);
}

static void quantize_q8_1_scalar(const float *x, struct block_q8_1 *out, float *ds, size_t n) {
        quantize_row_q8_1(x, out, n);
        for (size_t b = 0; ds && b < n / QUANT_BLOCK; b++) {
                ds[2 * b] = f16_to_f32(out[b].d);
                ds[2 * b + 1] = f16_to_f32(out[b].s);
        }
}

static void round_f16_scalar(float *x, size_t n) {
        for (size_t i = 0; i < n; i++)
                x[i] = f16_to_f32(f32_to_f16(x[i]));
}

static void sum_lanes_scalar(const float *lanes, size_t stride, unsigned n_valid, size_t n, float *out) {
        for (size_t i = 0; i < n; i++) {
                float l[16];
                for (unsigned e = 0; e < 16; e++)
                        l[e] = e < n_valid ? lanes[e * stride + i] : 0.0f;
                out[i] = lanes_sum16(l);
        }
}

static void softmax_f16_scalar(float *x, size_t n) {
        float max = -INFINITY;
        for (size_t i = 0; i < n; i++)
                max = x[i] > max ? x[i] : max; /* inline, unlike fmaxf */
        for (size_t i = 0; i < n; i++)
                x[i] = exp_poly(x[i] - max);
        double sum = 0.0;
        for (size_t j = 0; j < n; j += 16) {
                float run[16] = { 0 };
                memcpy(run, x + j, (n - j < 16 ? n - j : 16) * sizeof(float));
                sum += lanes_sum16(run);
        }
        float inv = (float) (1.0 / sum);
        for (size_t i = 0; i < n; i++)
                x[i] = f16_to_f32(f32_to_f16(x[i] * inv));
}

static void rope_scalar(float *x, uint32_t n_heads, uint32_t head_dim, uint32_t half, bool halves, const float *cos,
                        const float *sin) {
        rope_rows(x, n_heads, head_dim, half, halves, cos, sin);
}

static void swiglu_scalar(float *h, const float *g, const float *u, size_t n) {
        for (size_t i = 0; i < n; i++)
                h[i] = g[i] / (1.0f + exp_poly(0.0f - g[i])) * u[i];
}

static void geglu_scalar(float *h, const float *g, const float *u, size_t n) {
        const float *gelu = gelu_table();
        for (size_t i = 0; i < n; i++)
                h[i] = g[i] <= -10.0f ? 0.0f : g[i] >= 10.0f ? g[i] * u[i] : gelu[f32_to_f16(g[i])] * u[i];
}

const struct dot_kernels dot_kernels_scalar = {
        .name = "scalar",
        .q4_0 = dot_q4_0_scalar,
        .q4_1 = dot_q4_1_scalar,
        .q5_0 = dot_q5_0_scalar,
        .q5_1 = dot_q5_1_scalar,
        .q8_0 = dot_q8_0_scalar,
        .tile_q4_0 = tile_q4_0_scalar,
        .tile_q4_1 = tile_q4_1_scalar,
        .tile_q5_0 = tile_q5_0_scalar,
        .tile_q5_1 = tile_q5_1_scalar,
        .tile_q8_0 = tile_q8_0_scalar,
        .packed_q4_0 = packed_scalar,
        .packed_q4_1 = packed_scalar,
        .packed_q5_0 = packed_scalar,
        .packed_q5_1 = packed_scalar,
        .packed_q8_0 = packed_scalar,
        .packed_single_accumulator = packed_single_scalar,
        .attn_scores = attn_scores_scalar,
        .attn_values = attn_values_scalar,
        .round_f16 = round_f16_scalar,
        .sum_lanes = sum_lanes_scalar,
        .softmax_f16 = softmax_f16_scalar,
        .quantize_q8_1 = quantize_q8_1_scalar,
        .rope = rope_scalar,
        .activation_corrections = packed_activation_corrections,
        .swiglu = swiglu_scalar,
        .q2_K = dot_q2_K_reference, .q3_K = dot_q3_K_reference, .q4_K = dot_q4_K_reference,
        .q5_K = dot_q5_K_reference, .q6_K = dot_q6_K_reference, .quantize_q8_K = quantize_row_q8_K,
        .tile_q2_K = tile_q2_K_reference, .tile_q3_K = tile_q3_K_reference, .tile_q4_K = tile_q4_K_reference,
        .tile_q5_K = tile_q5_K_reference, .tile_q6_K = tile_q6_K_reference,
        .geglu = geglu_scalar,
};
