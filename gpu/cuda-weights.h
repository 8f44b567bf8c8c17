/* SPDX-License-Identifier: MIT */
#pragma once

/* The weights as the kernels read them (C++, for gpu/ only): quantized rows repacked into
 * quants and scales (gpu-math.h), float rows as in the file, each region of the arena on a
 * CUDA_ARENA_ALIGN boundary so that every load can be 16 bytes wide. */

#include <stddef.h>

extern "C" {
#include "model.h"
}
#include "cuda-kernels.h"

#define CUDA_ARENA_ALIGN 256

size_t cuda_arena_align(size_t n);

/* Places rows first .. first + count - 1 of w (of a type gpu_weight_kind_of() knows) in the
 * arena at offset at from base, filling *gw with their device pointers (a weight of count
 * rows), and, with image set, writes their bytes to image + at. Returns the offset after them. */
size_t cuda_place_weight(const struct weight *w, uint32_t first, uint32_t count, struct gpu_weight *gw, uint8_t *base,
                         uint8_t *image, size_t at);

/* Rows first .. first + count - 1 of a placed weight, as a weight of their own. */
struct gpu_weight cuda_weight_rows(const struct gpu_weight *w, uint32_t first, uint32_t count);
