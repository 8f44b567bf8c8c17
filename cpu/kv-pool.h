/* SPDX-License-Identifier: MIT */
#pragma once

/* Storage of the paged KV cache on the CPU: keys and values in f16, per layer a run of
 * blocks of block_size token slots, each slot kv_dim values (all KV heads side by side).
 * Which sequence owns which block is the engine's business, not this file's. */

#include <stdint.h>

#include "error.h"
#include "tensor-types.h"

struct kv_pool {
        uint32_t n_layer;
        uint32_t n_blocks;
        uint32_t block_size;
        uint32_t kv_dim;
        f16_bits *k; /* (n_layer, n_blocks, block_size, kv_dim) */
        f16_bits *v; /* (n_layer, n_blocks, block_size, kv_dim) */
};

int kv_pool_new(uint32_t n_layer, uint32_t n_blocks, uint32_t block_size, uint32_t kv_dim, struct kv_pool **ret,
                struct error *err);
void kv_pool_free(struct kv_pool *pool);

static inline uint64_t kv_pool_slot(const struct kv_pool *pool, uint32_t layer, uint32_t block, uint32_t offset) {
        return (((uint64_t) layer * pool->n_blocks + block) * pool->block_size + offset) * pool->kv_dim;
}
