/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <string.h>

extern "C" {
#include "model.h"
}
#include "cuda-weights.h"

size_t cuda_arena_align(size_t n) {
        return (n + CUDA_ARENA_ALIGN - 1) / CUDA_ARENA_ALIGN * CUDA_ARENA_ALIGN;
}

/* Where a weight goes in the arena, and, with image set, its bytes written there: the
 * quantized kinds as quants and scales side by side (gpu-math.h), the float kinds as the
 * file's rows. Returns the arena's new end. */
size_t cuda_place_weight(const struct weight *w, struct gpu_weight *gw, uint8_t *base, uint8_t *image, size_t at) {
        enum gpu_weight_kind kind = gpu_weight_kind_of(w->type);
        *gw = (struct gpu_weight) { kind, (uint32_t) w->n_rows, (uint32_t) w->n_cols, NULL, NULL, NULL };
        if (kind > GPU_WEIGHT_Q8_0) {
                size_t bytes = (size_t) w->n_rows * w->row_bytes;
                gw->rows = base + at;
                if (image)
                        memcpy(image + at, w->data, bytes);
                return cuda_arena_align(at + bytes);
        }
        uint32_t nb = (uint32_t) (w->n_cols / GPU_QBLOCK), nbp = gpu_padded_blocks(nb), qb = gpu_block_quant_bytes(kind);
        size_t n = (size_t) w->n_rows * nbp, scales_at = cuda_arena_align(at + n * qb);
        gw->quants = base + at;
        gw->scales = (const uint32_t *) (base + scales_at);
        if (image) {
                uint32_t block_bytes = tensor_type_info(w->type)->block_bytes;
                for (uint64_t r = 0; r < w->n_rows; r++)
                        gpu_repack_row(kind, w->data + r * w->row_bytes, block_bytes, nb, image + at + r * nbp * qb,
                                       (uint32_t *) (image + scales_at) + r * nbp);
        }
        return cuda_arena_align(scales_at + n * 4);
}
