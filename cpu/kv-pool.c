/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "kv-pool.h"

/* Zeroed anonymous memory, faulted in now so that no step pays for it. */
static f16_bits *map_array(size_t bytes) {
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        return p == MAP_FAILED ? NULL : p;
}

static void unmap_array(f16_bits **array, size_t bytes) {
        if (*array)
                munmap(*array, bytes);
        *array = NULL;
}

int kv_pool_new(uint32_t n_layer, uint32_t n_blocks, uint32_t block_size, uint32_t kv_dim, struct kv_pool **ret,
                struct error *err) {
        uint64_t elements;
        size_t bytes;
        int r;

        if (n_layer == 0 || n_blocks == 0 || block_size == 0 || kv_dim == 0)
                return error_set(err, EINVAL, "KV pool dimensions must be positive");
        if (__builtin_mul_overflow((uint64_t) n_layer * n_blocks, (uint64_t) block_size * kv_dim, &elements) ||
            __builtin_mul_overflow(elements, sizeof(f16_bits), &bytes) || bytes > SIZE_MAX / 2)
                return error_set(err, ENOMEM, "a KV pool of %u layers of %u blocks of %u tokens of %u values is too large to address",
                                 n_layer, n_blocks, block_size, kv_dim);
        struct kv_pool *pool = calloc(1, sizeof(*pool));
        if (!pool)
                return error_set(err, ENOMEM, "out of memory");
        *pool = (struct kv_pool) { n_layer, n_blocks, block_size, kv_dim, bytes, NULL, NULL };
        if ((r = kv_pool_restore(pool, err)) < 0) {
                kv_pool_free(pool);
                return r;
        }
        *ret = pool;
        return 0;
}

void kv_pool_free(struct kv_pool *pool) {
        if (!pool)
                return;
        kv_pool_release(pool);
        free(pool);
}

void kv_pool_release(struct kv_pool *pool) {
        unmap_array(&pool->k, pool->array_bytes);
        unmap_array(&pool->v, pool->array_bytes);
}

int kv_pool_restore(struct kv_pool *pool, struct error *err) {
        if (pool->k)
                return 0;
        pool->k = map_array(pool->array_bytes);
        pool->v = map_array(pool->array_bytes);
        if (!pool->k || !pool->v) {
                kv_pool_release(pool);
                return error_set(err, ENOMEM, "cannot allocate a KV pool of %llu bytes",
                                 2 * (unsigned long long) pool->array_bytes);
        }
        return 0;
}

uint64_t kv_pool_bytes(const struct kv_pool *pool) {
        return pool->k ? 2 * (uint64_t) pool->array_bytes : 0;
}
