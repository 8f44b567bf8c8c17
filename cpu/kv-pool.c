/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kv-pool.h"

/* The arrays are mapped in whole large pages. */
static size_t mapping_bytes(size_t bytes) {
        const size_t huge = 2u << 20;
        return (bytes + huge - 1) / huge * huge;
}

/* Zeroed anonymous memory, in large pages where the kernel has them: a decode step reads
 * each sequence's rows from blocks scattered over the pool, and with small pages most of
 * those reads also missed the TLB. Faulted in now so that no step pays for it. */
static f16_bits *map_array(size_t bytes) {
        size_t length = mapping_bytes(bytes);
        void *p = mmap(NULL, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
                return NULL;
        (void) madvise(p, length, MADV_HUGEPAGE);
        if (madvise(p, length, MADV_POPULATE_WRITE) < 0) {
                /* kernels before 5.14: a write to each page */
                long page = sysconf(_SC_PAGESIZE);
                for (size_t offset = 0; offset < length; offset += (size_t) page)
                        ((volatile char *) p)[offset] = 0;
        }
        return p;
}

static void unmap_array(f16_bits **array, size_t bytes) {
        if (*array)
                munmap(*array, mapping_bytes(bytes));
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
