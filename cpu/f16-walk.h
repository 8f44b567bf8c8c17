/* SPDX-License-Identifier: MIT */
#pragma once

/* Rows j = first, first + stride, ... of a head in the paged KV cache (dot.h, struct
 * f16_rows), a block-table step at a time rather than a division per row: the attention
 * kernels walk a lane's positions this way. */

#include <stdint.h>

#include "dot.h"

struct f16_walk {
        const struct f16_rows *rows;
        uint32_t block, offset, step_blocks, step_offset;
};

static inline struct f16_walk f16_walk_start(const struct f16_rows *rows, unsigned first, unsigned stride) {
        return (struct f16_walk) { rows, first / rows->block_size, first % rows->block_size, stride / rows->block_size,
                                   stride % rows->block_size };
}

static inline const f16_bits *f16_walk_row(const struct f16_walk *w) {
        return w->rows->base + ((size_t) w->rows->block_table[w->block] * w->rows->block_size + w->offset) * w->rows->row_stride;
}

static inline void f16_walk_next(struct f16_walk *w) {
        w->block += w->step_blocks;
        w->offset += w->step_offset;
        if (w->offset >= w->rows->block_size) {
                w->offset -= w->rows->block_size;
                w->block++;
        }
}
