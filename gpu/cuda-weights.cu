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

/* Where a weight's rows go in the arena, and, with image set, their bytes written there: the
 * quantized kinds as quants and scales side by side (gpu-math.h), the float kinds as the
 * file's rows. Returns the arena's new end. */
size_t cuda_place_weight(const struct weight *w, uint32_t first, uint32_t count, struct gpu_weight *gw, uint8_t *base,
                         uint8_t *image, size_t at) {
        enum gpu_weight_kind kind = gpu_weight_kind_of(w->type);
        const uint8_t *data = w->data + (size_t) first * w->row_bytes;
        *gw = (struct gpu_weight) { kind, count, (uint32_t) w->n_cols, NULL, NULL, NULL, weight_single_accumulator(w, false) };
        if (kind > GPU_WEIGHT_Q8_0) {
                size_t bytes = (size_t) count * w->row_bytes;
                gw->rows = base + at;
                if (image)
                        memcpy(image + at, data, bytes);
                return cuda_arena_align(at + bytes);
        }
        uint32_t nb = (uint32_t) (w->n_cols / GPU_QBLOCK), nbp = gpu_padded_blocks(nb), qb = gpu_block_quant_bytes(kind);
        size_t n = (size_t) count * nbp, scales_at = cuda_arena_align(at + n * qb), row_words = gpu_row_scale_words(kind, nbp);
        gw->quants = base + at;
        gw->scales = (const uint32_t *) (base + scales_at);
        if (image) {
                uint32_t block_bytes = tensor_type_info(w->type)->block_bytes;
                for (uint64_t r = 0; r < count; r++)
                        gpu_repack_row(kind, data + r * w->row_bytes, block_bytes, nb, image + at + r * nbp * qb,
                                       (uint32_t *) (image + scales_at) + r * row_words);
        }
        return cuda_arena_align(scales_at + count * row_words * 4);
}

struct gpu_weight cuda_weight_rows(const struct gpu_weight *w, uint32_t first, uint32_t count) {
        struct gpu_weight v = *w;
        v.n_rows = count;
        if (w->kind > GPU_WEIGHT_Q8_0) {
                size_t elem = w->kind == GPU_WEIGHT_F32 ? 4 : 2;
                v.rows = (const uint8_t *) w->rows + (size_t) first * w->n_cols * elem;
                return v;
        }
        uint32_t nbp = gpu_padded_blocks(w->n_cols / GPU_QBLOCK);
        v.quants = w->quants + (size_t) first * nbp * gpu_block_quant_bytes(w->kind);
        v.scales = w->scales + (size_t) first * gpu_row_scale_words(w->kind, nbp);
        return v;
}
