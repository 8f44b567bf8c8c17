/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>

#include "tensor-parallel.h"

static struct tp_slice slice_of(uint32_t rows, uint32_t size, uint32_t rank) {
        uint32_t chunk = (rows + size - 1) / size, first = rank * chunk;
        uint32_t count = first >= rows ? 0 : rows - first < chunk ? rows - first : chunk;
        return (struct tp_slice) { first < rows ? first : rows, count, chunk };
}

int tp_size_check(const struct model_hparams *hp, uint32_t size, struct error *err) {
        if (size >= 1 && hp->n_head % size == 0 && hp->n_head_kv % size == 0)
                return 0;
        char divisors[256] = "";
        size_t at = 0;
        for (uint32_t d = 1; d <= hp->n_head_kv && at < sizeof(divisors) - 16; d++)
                if (hp->n_head % d == 0 && hp->n_head_kv % d == 0)
                        at += (size_t) snprintf(divisors + at, sizeof(divisors) - at, "%s%u", at ? ", " : "", d);
        return error_set(err, EINVAL,
                         "a tensor-parallel size of %u does not divide the model's %u attention heads and %u key-value heads; "
                         "the sizes that do: %s",
                         size, hp->n_head, hp->n_head_kv, divisors);
}

int tp_shard_plan(const struct model_hparams *hp, uint32_t size, uint32_t rank, struct tp_shard *ret,
                  struct error *err) {
        int r = tp_size_check(hp, size, err);
        if (r < 0)
                return r;
        if (rank >= size)
                return error_set(err, EINVAL, "rank %u of a tensor-parallel group of %u", rank, size);
        uint32_t heads = hp->n_head / size, kv_heads = hp->n_head_kv / size;
        *ret = (struct tp_shard) {
                .rank = rank,
                .size = size,
                .head0 = rank * heads,
                .n_head = heads,
                .kv_head0 = rank * kv_heads,
                .n_head_kv = kv_heads,
                .q = slice_of(hp->n_head * hp->head_dim, size, rank),
                .kv = slice_of(hp->n_head_kv * hp->head_dim, size, rank),
                .embd = slice_of(hp->n_embd, size, rank),
                .ff = slice_of(hp->n_ff, size, rank),
                .vocab = slice_of(hp->n_vocab, size, rank),
        };
        return 0;
}
