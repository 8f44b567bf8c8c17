/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <string.h>

extern "C" {
#include "model.h"
}
#include "cuda-weights.h"

size_t cuda_arena_align(size_t n) {
        return (n + CUDA_ARENA_ALIGN - 1) / CUDA_ARENA_ALIGN * CUDA_ARENA_ALIGN;
}

int cuda_weight_kind(enum tensor_type type, enum gpu_weight_kind *ret) {
        switch (type) {
        case TENSOR_Q4_0: *ret = GPU_WEIGHT_Q4_0; return 0;
        case TENSOR_Q4_1: *ret = GPU_WEIGHT_Q4_1; return 0;
        case TENSOR_Q8_0: *ret = GPU_WEIGHT_Q8_0; return 0;
        case TENSOR_F32: *ret = GPU_WEIGHT_F32; return 0;
        case TENSOR_F16: *ret = GPU_WEIGHT_F16; return 0;
        case TENSOR_BF16: *ret = GPU_WEIGHT_BF16; return 0;
        default: return -EOPNOTSUPP;
        }
}

/* Where a weight goes in the arena, and, with image set, its bytes written there: the
 * quantized kinds as quants and scales side by side (gpu-math.h), the float kinds as the
 * file's rows. Returns the arena's new end. */
size_t cuda_place_weight(const struct weight *w, struct gpu_weight *gw, uint8_t *base, uint8_t *image, size_t at) {
        enum gpu_weight_kind kind = GPU_WEIGHT_F32;
        cuda_weight_kind(w->type, &kind);
        *gw = (struct gpu_weight) { kind, (uint32_t) w->n_rows, (uint32_t) w->n_cols, NULL, NULL, NULL };
        if (kind > GPU_WEIGHT_Q8_0) {
                size_t bytes = (size_t) w->n_rows * w->row_bytes;
                gw->rows = base + at;
                if (image)
                        memcpy(image + at, w->data, bytes);
                return cuda_arena_align(at + bytes);
        }
        size_t nb = w->n_cols / GPU_QBLOCK, qb = gpu_block_quant_bytes(kind), n = (size_t) w->n_rows * nb;
        size_t scales_at = cuda_arena_align(at + n * qb);
        gw->quants = base + at;
        gw->scales = (const uint32_t *) (base + scales_at);
        if (image) {
                uint8_t *quants = image + at;
                uint32_t *scales = (uint32_t *) (image + scales_at);
                for (size_t i = 0; i < n; i++) {
                        const uint8_t *block = w->data + (i / nb) * w->row_bytes + (i % nb) * tensor_type_info(w->type)->block_bytes;
                        uint16_t d, m = 0;
                        memcpy(&d, block, 2);
                        if (kind == GPU_WEIGHT_Q4_1)
                                memcpy(&m, block + 2, 2);
                        memcpy(quants + i * qb, block + (kind == GPU_WEIGHT_Q4_1 ? 4 : 2), qb);
                        scales[i] = (uint32_t) d | (uint32_t) m << 16;
                }
        }
        return cuda_arena_align(scales_at + n * 4);
}
