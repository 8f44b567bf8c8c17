/* SPDX-License-Identifier: MIT */
#pragma once

/* Rows j = first, first + stride, ... of a head in the paged KV cache (dot.h, struct
 * f16_rows), a block-table step at a time rather than a division per row: the attention
 * kernels walk a lane's positions this way. */

#include <stdbool.h>
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
        return w->rows->base + (size_t) w->rows->block_table[w->block] * w->rows->block_stride + (size_t) w->offset * w->rows->row_stride;
}

static inline void f16_walk_next(struct f16_walk *w) {
        w->block += w->step_blocks;
        w->offset += w->step_offset;
        if (w->offset >= w->rows->block_size) {
                w->offset -= w->rows->block_size;
                w->block++;
        }
}

/* How many positions ahead of its reads the scores kernels fetch key rows: a decode token's
 * keys come from memory, and the conversions waited on them (attn_scores 9.8% -> 7.6% of a
 * 32-sequence decode on the Intel AVX-512 machine). */
#define F16_WALK_PREFETCH_POSITIONS 32

/* Fetches a row's n elements into the cache, a line at a time. */
static inline void f16_prefetch_row(const f16_bits *row, size_t n) {
        for (size_t b = 0; b < n * sizeof(f16_bits); b += 64)
                __builtin_prefetch((const char *) row + b, 0, 3);
}

/* The same, non-temporal: for a row read once, soon. */
static inline void f16_stream_row(const f16_bits *row, size_t n) {
        for (size_t b = 0; b < n * sizeof(f16_bits); b += 64)
                __builtin_prefetch((const char *) row + b, 0, 0);
}

/* A walk by single positions F16_WALK_PREFETCH_POSITIONS ahead of the reads (started
 * there): called once per position read, it fetches its row's n elements into the cache
 * while it is still below n_pos, and steps. read_once (a generated token's keys, which no
 * other item of the step reads; a prompt's tiles read them again): non-temporal, which
 * took bench-batched -p 256 S_TG B=32 1.05x, 1.02x and 1.02x in three sittings of ABBA
 * rounds (8 of 10, 4 of 8, 9 of 16 pairs) and B=8 1.07x on the Zen 4 machine; for prompts
 * as well, pp512 went 0.96x in one of two sittings. The values fetched beside the keys wait
 * in the cache for the value sums, after the softmax: non-temporal, they went 0.98x. */
static inline void f16_walk_prefetch_ahead(struct f16_walk *ahead, unsigned position, unsigned n_pos, size_t n,
                                           bool read_once) {
        if (position + F16_WALK_PREFETCH_POSITIONS >= n_pos)
                return;
        if (read_once)
                f16_stream_row(f16_walk_row(ahead), n);
        else
                f16_prefetch_row(f16_walk_row(ahead), n);
        f16_walk_next(ahead);
}

/* Fetches the n elements of the current row's counterpart in rows->fetch_beside, if any:
 * paced by the reads of the scores kernels. Issued all together before them, the fetches
 * had no effect (the core drops software prefetches it has no room for). */
static inline void f16_walk_fetch_beside(const struct f16_walk *w, size_t n) {
        if (!w->rows->fetch_beside)
                return;
        f16_prefetch_row(w->rows->fetch_beside + (f16_walk_row(w) - w->rows->base), n);
}
