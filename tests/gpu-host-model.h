/* SPDX-License-Identifier: MIT */
#pragma once

/* The CUDA kernels' arithmetic run on the host (gpu/gpu-math.h), lane by lane and in the
 * order of the device's shuffles: test-gpu-math holds it to the CPU backend's reference, and
 * test-gpu holds the device to it bit for bit. */

#include <stdint.h>
#include <string.h>

#include "gpu-math.h"
#include "model.h"

static inline enum gpu_weight_kind host_weight_kind(enum tensor_type type) {
        switch (type) {
        case TENSOR_Q4_0: return GPU_WEIGHT_Q4_0;
        case TENSOR_Q4_1: return GPU_WEIGHT_Q4_1;
        case TENSOR_Q8_0: return GPU_WEIGHT_Q8_0;
        case TENSOR_F16: return GPU_WEIGHT_F16;
        case TENSOR_BF16: return GPU_WEIGHT_BF16;
        default: return GPU_WEIGHT_F32;
        }
}

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

/* One row of a quantized GGUF weight repacked as the device holds it: quants (16 or 32
 * bytes a block) and one scale word a block. */
static inline void host_repack_row(const struct weight *w, uint64_t row, uint8_t *quants, uint32_t *scales) {
        enum gpu_weight_kind kind = host_weight_kind(w->type);
        uint32_t nb = (uint32_t) (w->n_cols / GPU_QBLOCK), qb = gpu_block_quant_bytes(kind);
        uint32_t block_bytes = tensor_type_info(w->type)->block_bytes;
        for (uint32_t b = 0; b < nb; b++) {
                const uint8_t *block = w->data + row * w->row_bytes + (size_t) b * block_bytes;
                uint16_t d, m = 0;
                memcpy(&d, block, 2);
                if (kind == GPU_WEIGHT_Q4_1)
                        memcpy(&m, block + 2, 2);
                memcpy(quants + (size_t) b * qb, block + (kind == GPU_WEIGHT_Q4_1 ? 4 : 2), qb);
                scales[b] = (uint32_t) d | (uint32_t) m << 16;
        }
}

static inline void host_words(const void *p, uint32_t *words, uint32_t n) {
        memcpy(words, p, n * sizeof(uint32_t));
}

/* k_matmul_q's result for one row and token. */
static inline float host_row_dot(enum gpu_weight_kind kind, const uint8_t *quants, const uint32_t *scales, uint32_t nb,
                                 const int8_t *xq, const float *ds) {
        uint32_t lanes = gpu_lanes_per_row(nb), qb = gpu_block_quant_bytes(kind);
        float v[32] = { 0 };
        for (uint32_t sub = 0; sub < lanes; sub++) {
                float acc = 0.0f;
                for (uint32_t b = sub; b < nb; b += lanes) {
                        uint32_t w[8], a[8];
                        host_words(quants + (size_t) b * qb, w, qb / 4);
                        host_words(xq + (size_t) b * GPU_QBLOCK, a, 8);
                        acc = gpu_block_dot(kind, w, scales[b], a, ds[2 * b], ds[2 * b + 1], acc);
                }
                v[sub] = acc;
        }
        return gpu_lane_tree_sum(v, lanes);
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
        return gpu_lane_tree_sum(v, 32);
}
