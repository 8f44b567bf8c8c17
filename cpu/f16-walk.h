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

/* How a walk fetches rows ahead of its reads. */
enum f16_fetch {
        F16_FETCH_PLAIN,  /* into every level (T0): rows read again (a prompt's tiles) */
        F16_FETCH_STREAM, /* non-temporal: a generated token's keys, read once */
        F16_FETCH_L2,     /* into L2 (T1): the same over a long context, see below */
};

/* From this many positions on, a generated token's keys ahead and the values beside them
 * are fetched into L2 (T1), not into L1: the first-level misses a core can have in flight
 * seem to hold a long context's attention to ~9 GB/s. bench-batched -B 1 -p 1024 -n 256,
 * ABBA rounds on the Zen 4 machine: 1.075x, 1.097x, 1.011x, 1.099x, 1.061x in five
 * sittings; -B 32 -p 256 1.035x and 0.990x. Over short contexts T1 looked no better than
 * the stream (bench-core tg256 0.975x, within the noise), so they keep it. */
#define F16_WALK_L2_POSITIONS 256

/* Fetches a row's n elements, a line at a time. */
static inline void f16_fetch_row(const f16_bits *row, size_t n, enum f16_fetch how) {
        for (size_t b = 0; b < n * sizeof(f16_bits); b += 64)
                switch (how) {
                case F16_FETCH_PLAIN: __builtin_prefetch((const char *) row + b, 0, 3); break;
                case F16_FETCH_STREAM: __builtin_prefetch((const char *) row + b, 0, 0); break;
                case F16_FETCH_L2: __builtin_prefetch((const char *) row + b, 0, 2); break;
                }
}

/* How a scores kernel over n_pos positions fetches keys ahead (wide: a generated token's,
 * read once). */
static inline enum f16_fetch f16_keys_fetch(bool wide, unsigned n_pos) {
        return !wide ? F16_FETCH_PLAIN : n_pos >= F16_WALK_L2_POSITIONS ? F16_FETCH_L2 : F16_FETCH_STREAM;
}

/* A walk by single positions F16_WALK_PREFETCH_POSITIONS ahead of the reads (started
 * there): called once per position read, it fetches its row's n elements while it is still
 * below n_pos, and steps. A generated token's keys, which no other item of the step reads,
 * stream (non-temporal: bench-batched -p 256 S_TG B=32 1.05x, 1.02x and 1.02x in three
 * sittings of ABBA rounds, B=8 1.07x, on the Zen 4 machine, against T0) or, over long
 * contexts, go to L2 (F16_WALK_L2_POSITIONS); a prompt's tiles read them again and keep
 * T0 (streamed, pp512 went 0.96x in one of two sittings). */
static inline void f16_walk_prefetch_ahead(struct f16_walk *ahead, unsigned position, unsigned n_pos, size_t n,
                                           enum f16_fetch how) {
        if (position + F16_WALK_PREFETCH_POSITIONS >= n_pos)
                return;
        f16_fetch_row(f16_walk_row(ahead), n, how);
        f16_walk_next(ahead);
}

/* Fetches the n elements of the current row's counterpart in rows->fetch_beside, if any:
 * paced by the reads of the scores kernels. Issued all together before them, the fetches
 * had no effect (the core drops software prefetches it has no room for). They wait in the
 * cache for the value sums, after the softmax, so they do not stream (non-temporal: 0.98x);
 * keys_how F16_FETCH_L2 (a long context) puts them in L2 as well. */
static inline void f16_walk_fetch_beside(const struct f16_walk *w, size_t n, enum f16_fetch keys_how) {
        if (!w->rows->fetch_beside)
                return;
        f16_fetch_row(w->rows->fetch_beside + (f16_walk_row(w) - w->rows->base), n,
                      keys_how == F16_FETCH_L2 ? F16_FETCH_L2 : F16_FETCH_PLAIN);
}
