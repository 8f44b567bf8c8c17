/* SPDX-License-Identifier: MIT */
#pragma once

/* The CUDA kernels' arithmetic run on the host (gpu/gpu-math.h), lane by lane and in the
 * order of the device's shuffles: test-gpu-math holds it to the CPU backend's reference, and
 * test-gpu holds the device to it bit for bit. */

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "gpu-math.h"
#include "model.h"

/* q8_1 quantization of a row of n floats (k_quantize's work). */
static inline void host_quantize_row(const float *x, uint32_t n, int8_t *q, float *ds) {
        for (uint32_t b = 0; b < n / GPU_QBLOCK; b++) {
                float amax = 0.0f;
                for (uint32_t j = 0; j < GPU_QBLOCK; j++)
                        amax = fmaxf(amax, fabsf(x[b * GPU_QBLOCK + j]));
                float inverse = gpu_q8_inverse_scale(amax);
                int32_t sum = 0;
                for (uint32_t j = 0; j < GPU_QBLOCK; j++) {
                        int32_t v = gpu_q8_quantize(x[b * GPU_QBLOCK + j], inverse);
                        q[b * GPU_QBLOCK + j] = (int8_t) v;
                        sum += v;
                }
                gpu_q8_block_scales(amax, sum, &ds[2 * b], &ds[2 * b + 1]);
        }
}

static inline void host_words(const void *p, uint32_t *words, uint32_t n) {
        memcpy(words, p, n * sizeof(uint32_t));
}

/* k_matmul_q's result for one row and token: the CPU's order (gpu-math.h; the K-quants' own),
 * from the row as the device holds it (gpu_repack_row(): lane-major quants and scales) and
 * the token's activations in block order. */
static inline float host_row_dot(enum gpu_weight_kind kind, const uint8_t *quants, const uint32_t *scales, uint32_t nb,
                                 const int8_t *xq, const float *ds, bool single_accumulator) {
        uint32_t nbp = gpu_padded_blocks(nb);
        float lanes[GPU_ROW_LANES] = { 0 }, off = 0.0f, acc = 0.0f;
        for (uint32_t b = 0; b < nb; b++) {
                uint32_t words[8], a[8];
                for (uint32_t w = 0; w < gpu_block_quant_bytes(kind) / 4; w++)
                        host_words(quants + gpu_lane_major_offset(nbp, b, 4 * w), &words[w], 1);
                host_words(xq + (size_t) b * GPU_QBLOCK, a, 8);
                if (gpu_k_quant(kind)) {
                        uint32_t mins = gpu_k_has_mins(kind) ? scales[nbp + b] : 0;
                        for (uint32_t l = 0; l < GPU_ROW_LANES; l++) {
                                struct gpu_k_factors f = gpu_k_lane_factors(kind, scales[b], mins, l);
                                lanes[l] = gpu_k_lane_step(kind, words[gpu_lane_word(kind, l)], l, a[l], &f, ds[2 * b], lanes[l]);
                        }
                        continue;
                }
                float wd = gpu_f16_to_f32(scales[b] & 0xffff), scale = wd * ds[2 * b];
                int32_t block_sum = 0;
                for (uint32_t l = 0; l < GPU_ROW_LANES; l++) {
                        int32_t isum = gpu_lane_isum(kind, words[gpu_lane_word(kind, l)], l, a[l]);
                        block_sum += isum;
                        lanes[l] = fmaf((float) isum, scale, lanes[l]);
                }
                acc = fmaf((float) block_sum, scale, acc);
                if (gpu_has_offset(kind))
                        off = fmaf(gpu_f16_to_f32(scales[b] >> 16), ds[2 * b + 1], off);
        }
        if (single_accumulator)
                return acc;
        return gpu_has_offset(kind) ? gpu_lanes_sum8(lanes) + off : gpu_lanes_sum8(lanes);
}

/* k_matmul_f's result for one row (F32, F16 or BF16, as in the file) and token. */
static inline float host_row_dot_float(enum gpu_weight_kind kind, const void *row, uint32_t n, const float *x) {
        float v[32] = { 0 };
        for (uint32_t lane = 0; lane < 32; lane++) {
                float acc = 0.0f;
                for (uint32_t i = lane; i < n; i += 32)
                        acc = fmaf(gpu_float_weight(kind, row, i), x[i], acc);
                v[lane] = acc;
        }
        return gpu_lane_tree_sum(v);
}

/* k_attention's output for one query head of a token at position pos (0-based): keys[j] and
 * values[j] the f16 rows of position j (hd elements), q the query after RoPE. */
static inline void host_attention(const uint16_t *const *keys, const uint16_t *const *values, uint32_t pos, const float *q,
                                  uint32_t hd, bool generated, float scale, float *scores, float *out) {
        float query[256], max = -INFINITY;
        uint32_t n = pos + 1, n_lanes = gpu_value_lanes(generated);
        for (uint32_t i = 0; i < hd; i++)
                query[i] = gpu_round_f16(q[i]);
        for (uint32_t j = 0; j < n; j++) {
                scores[j] = gpu_score_dot(keys[j], query, hd, generated) * scale;
                max = fmaxf(max, scores[j]);
        }
        double sum = 0.0;
        for (uint32_t r = 0; r * 16 < n; r++) {
                float run[16];
                for (uint32_t e = 0; e < 16; e++)
                        run[e] = r * 16 + e < n ? gpu_exp(scores[r * 16 + e] - max) : 0.0f;
                sum += (double) gpu_lanes_sum16(run);
        }
        float inverse = (float) (1.0 / sum);
        for (uint32_t i = 0; i < hd; i++) {
                float lanes[64] = { 0 }, rows[16];
                for (uint32_t j = 0; j < n; j++)
                        lanes[j % n_lanes] = fmaf(gpu_f16_to_f32(values[j][i]),
                                                  gpu_round_f16(gpu_exp(scores[j] - max) * inverse), lanes[j % n_lanes]);
                for (uint32_t e = 0; e < 16; e++)
                        rows[e] = generated ? gpu_fold64(lanes[e], lanes[16 + e], lanes[32 + e], lanes[48 + e]) : lanes[e];
                out[i] = gpu_lanes_sum16(rows);
        }
}
