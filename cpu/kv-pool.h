/* SPDX-License-Identifier: MIT */
#pragma once

/* Storage of the paged KV cache on the CPU: keys and values in f16, per layer a run of
 * blocks of block_size token slots, each slot kv_dim values (all KV heads side by side).
 * Which sequence owns which block is the engine's business, not this file's. The arrays are
 * mapped and faulted in whole at creation, as vLLM reserves its KV cache up front, so a step
 * never takes a page fault; while the engine sleeps they can be given back. */

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "tensor-types.h"

struct kv_pool {
        uint32_t n_layer;
        uint32_t n_blocks;
        uint32_t block_size;
        uint32_t kv_dim;
        size_t array_bytes; /* of k, and of v */
        f16_bits *k; /* (n_layer, n_blocks, block_size, kv_dim); NULL while released */
        f16_bits *v; /* (n_layer, n_blocks, block_size, kv_dim); NULL while released */
};

int kv_pool_new(uint32_t n_layer, uint32_t n_blocks, uint32_t block_size, uint32_t kv_dim, struct kv_pool **ret,
                struct error *err);
/* Frees the pool, released or not. */
void kv_pool_free(struct kv_pool *pool);

/* Unmaps k and v; their contents are lost. Releasing twice is a no-op. */
void kv_pool_release(struct kv_pool *pool);
/* Maps k and v again, zeroed and faulted in. Restoring a pool that holds its arrays is a
 * no-op. */
int kv_pool_restore(struct kv_pool *pool, struct error *err);

/* Bytes of k and v held now: 0 while released. */
uint64_t kv_pool_bytes(const struct kv_pool *pool);

/* The first element of a block of a layer. Inside a block the runner keeps each head's
 * rows together (head, slot, head_dim): attention.c, kv_row(). */
static inline uint64_t kv_pool_block(const struct kv_pool *pool, uint32_t layer, uint32_t block) {
        return ((uint64_t) layer * pool->n_blocks + block) * pool->block_size * pool->kv_dim;
}

/* Bytes of one block's keys and values over n_layer layers: what a block costs. */
static inline uint64_t kv_pool_block_bytes(uint32_t n_layer, uint32_t block_size, uint32_t kv_dim) {
        return (uint64_t) block_size * n_layer * kv_dim * 2 /* K and V */ * sizeof(f16_bits);
}
