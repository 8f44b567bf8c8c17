/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>

#include "kv-pool.h"

int kv_pool_new(uint32_t n_layer, uint32_t n_blocks, uint32_t block_size, uint32_t kv_dim, struct kv_pool **ret,
                struct error *err) {
        if (n_layer == 0 || n_blocks == 0 || block_size == 0 || kv_dim == 0)
                return error_set(err, EINVAL, "KV pool dimensions must be positive");
        uint64_t elements = (uint64_t) n_layer * n_blocks * block_size * kv_dim;
        struct kv_pool *pool = calloc(1, sizeof(*pool));
        if (!pool)
                return error_set(err, ENOMEM, "out of memory");
        *pool = (struct kv_pool) { n_layer, n_blocks, block_size, kv_dim, NULL, NULL };
        pool->k = calloc(elements, sizeof(f16_bits));
        pool->v = calloc(elements, sizeof(f16_bits));
        if (!pool->k || !pool->v) {
                kv_pool_free(pool);
                return error_set(err, ENOMEM, "cannot allocate a KV pool of %llu bytes",
                                 (unsigned long long) (2 * elements * sizeof(f16_bits)));
        }
        *ret = pool;
        return 0;
}

void kv_pool_free(struct kv_pool *pool) {
        if (!pool)
                return;
        free(pool->k);
        free(pool->v);
        free(pool);
}
