/* SPDX-License-Identifier: MIT */
#pragma once

/* How a model splits over the ranks of a tensor-parallel group. Every weight matrix is split
 * by its output rows, so each rank computes whole rows, each in the one order a row has
 * (no rank adds another's partial sums), and the group's outputs are the bits of the whole
 * model on one device. Where a product needs the whole input (the attention's output into
 * the output projection, the feed-forward's into the down projection) or the next step needs
 * the whole output (the hidden state, the logits), the ranks all-gather their slices.
 *
 * A slice of n rows is chunk = ceil(n / size) rows at rank * chunk (the last rank's may be
 * shorter, or empty), so that every rank sends the same count and the gathered chunks, rank
 * after rank, are the rows in order. Attention splits by heads: the query heads and the
 * key-value heads each in size equal parts, so that each rank's query heads read its own
 * key-value heads. */

#include <stdint.h>

#include "error.h"
#include "model.h"

struct tp_slice {
        uint32_t first; /* the first row this rank computes */
        uint32_t count; /* how many (chunk or fewer) */
        uint32_t chunk; /* what each rank sends in a gather: ceil(rows / size) */
};

struct tp_shard {
        uint32_t rank, size;
        uint32_t head0, n_head;       /* this rank's query heads */
        uint32_t kv_head0, n_head_kv; /* and key-value heads */
        struct tp_slice q, kv;        /* rows of wq; of wk and wv (whole heads) */
        struct tp_slice embd;         /* rows of wo and w_down: the hidden state's */
        struct tp_slice ff;           /* rows of w_gate and w_up */
        struct tp_slice vocab;        /* rows of the output matrix: the logits */
};

/* rank's share of a model split size ways. -EINVAL naming the sizes that divide the model's
 * heads when size does not. */
int tp_shard_plan(const struct model_hparams *hp, uint32_t size, uint32_t rank, struct tp_shard *ret, struct error *err);

/* Whether size divides both the query heads and the key-value heads. */
int tp_size_check(const struct model_hparams *hp, uint32_t size, struct error *err);

/* Row i of rows split size ways: where an all-gather of per-rank (tokens, chunk) buffers puts
 * row i of token t, in the (size, tokens, chunk) gathered buffer. */
static inline uint64_t tp_gathered_index(uint32_t chunk, uint32_t tokens, uint32_t t, uint32_t i) {
        uint32_t rank = i / chunk;
        return ((uint64_t) rank * tokens + t) * chunk + i % chunk;
}
