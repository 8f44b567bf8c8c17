/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kv-blocks.h"
#include "rng.h"

#define NO_BLOCK (-1)
#define HASH_SEED UINT64_C(0x6a09e667f3bcc908)

struct block {
        uint32_t ref_count;
        bool cached;         /* in the hash table under hash */
        uint64_t hash;
        uint64_t parent_hash; /* checked on a hit, with the tokens, so a hash collision can never serve wrong KV */
        int32_t lru_prev, lru_next;   /* free list links, when ref_count == 0 */
        int32_t bucket_next;          /* hash chain, when cached */
};

struct kv_blocks {
        uint32_t n_blocks;
        uint32_t block_size;
        bool prefix_caching;
        struct block *blocks;
        int32_t *block_tokens; /* (n_blocks, block_size) the tokens of each cached block */
        int32_t lru_head, lru_tail; /* free blocks, least recently freed first */
        uint32_t n_free;
        uint32_t n_cached;
        int32_t *buckets; /* (n_buckets) */
        uint32_t n_buckets;
        uint64_t query_tokens, hit_tokens;
};

static uint64_t chain_hash(uint64_t parent, const int32_t *tokens, uint32_t n) {
        uint64_t h = parent ^ HASH_SEED;
        for (uint32_t i = 0; i < n; i++) {
                h ^= (uint32_t) tokens[i];
                h = rng_splitmix64(&h);
        }
        return h;
}

static void lru_unlink(struct kv_blocks *kv, int32_t id) {
        struct block *b = &kv->blocks[id];
        if (b->lru_prev != NO_BLOCK)
                kv->blocks[b->lru_prev].lru_next = b->lru_next;
        else
                kv->lru_head = b->lru_next;
        if (b->lru_next != NO_BLOCK)
                kv->blocks[b->lru_next].lru_prev = b->lru_prev;
        else
                kv->lru_tail = b->lru_prev;
        b->lru_prev = b->lru_next = NO_BLOCK;
        kv->n_free--;
}

static void lru_append(struct kv_blocks *kv, int32_t id) {
        struct block *b = &kv->blocks[id];
        b->lru_prev = kv->lru_tail;
        b->lru_next = NO_BLOCK;
        if (kv->lru_tail != NO_BLOCK)
                kv->blocks[kv->lru_tail].lru_next = id;
        else
                kv->lru_head = id;
        kv->lru_tail = id;
        kv->n_free++;
}

static uint32_t bucket_of(const struct kv_blocks *kv, uint64_t hash) {
        return (uint32_t) (hash & (kv->n_buckets - 1));
}

static void cache_remove(struct kv_blocks *kv, int32_t id) {
        struct block *b = &kv->blocks[id];
        int32_t *link = &kv->buckets[bucket_of(kv, b->hash)];
        while (*link != id)
                link = &kv->blocks[*link].bucket_next;
        *link = b->bucket_next;
        b->bucket_next = NO_BLOCK;
        b->cached = false;
        kv->n_cached--;
}

static int32_t cache_find(const struct kv_blocks *kv, uint64_t hash, uint64_t parent, const int32_t *tokens) {
        for (int32_t id = kv->buckets[bucket_of(kv, hash)]; id != NO_BLOCK; id = kv->blocks[id].bucket_next) {
                const struct block *b = &kv->blocks[id];
                if (b->hash == hash && b->parent_hash == parent &&
                    memcmp(kv->block_tokens + (size_t) id * kv->block_size, tokens, kv->block_size * sizeof(int32_t)) == 0)
                        return id;
        }
        return NO_BLOCK;
}

int kv_blocks_new(uint32_t n_blocks, uint32_t block_size, bool prefix_caching, struct kv_blocks **ret,
                  struct error *err) {
        if (n_blocks == 0 || n_blocks > INT32_MAX / 2 || block_size == 0)
                return error_set(err, EINVAL, "a KV cache needs at least one block of at least one token");
        struct kv_blocks *kv = calloc(1, sizeof(*kv));
        if (!kv)
                return error_set(err, ENOMEM, "out of memory");
        kv->n_blocks = n_blocks;
        kv->block_size = block_size;
        kv->prefix_caching = prefix_caching;
        kv->n_buckets = 1;
        while (kv->n_buckets < n_blocks)
                kv->n_buckets <<= 1;
        kv->blocks = calloc(n_blocks, sizeof(*kv->blocks));
        kv->buckets = malloc(kv->n_buckets * sizeof(*kv->buckets));
        kv->block_tokens = prefix_caching ? calloc((size_t) n_blocks * block_size, sizeof(int32_t)) : NULL;
        if (!kv->blocks || !kv->buckets || (prefix_caching && !kv->block_tokens)) {
                kv_blocks_free(kv);
                return error_set(err, ENOMEM, "out of memory for %u KV blocks", n_blocks);
        }
        for (uint32_t i = 0; i < kv->n_buckets; i++)
                kv->buckets[i] = NO_BLOCK;
        kv->lru_head = kv->lru_tail = NO_BLOCK;
        for (uint32_t i = 0; i < n_blocks; i++) {
                kv->blocks[i].bucket_next = NO_BLOCK;
                lru_append(kv, (int32_t) i);
        }
        *ret = kv;
        return 0;
}

void kv_blocks_free(struct kv_blocks *kv) {
        if (!kv)
                return;
        free(kv->blocks);
        free(kv->buckets);
        free(kv->block_tokens);
        free(kv);
}

uint32_t kv_blocks_block_size(const struct kv_blocks *kv) {
        return kv->block_size;
}

uint32_t kv_blocks_n_free(const struct kv_blocks *kv) {
        return kv->n_free;
}

void kv_blocks_stats(const struct kv_blocks *kv, struct kv_blocks_stats *ret) {
        *ret = (struct kv_blocks_stats) {
                .n_blocks = kv->n_blocks,
                .n_free = kv->n_free,
                .n_cached = kv->n_cached,
                .query_tokens = kv->query_tokens,
                .hit_tokens = kv->hit_tokens,
        };
}

static int list_reserve(struct kv_block_list *list, uint32_t n) {
        if (n <= list->cap)
                return 0;
        uint32_t cap = list->cap ? list->cap : 4;
        while (cap < n)
                cap *= 2;
        int32_t *ids = realloc(list->ids, cap * sizeof(*ids));
        if (!ids)
                return -ENOMEM;
        list->ids = ids;
        uint64_t *hashes = realloc(list->hashes, cap * sizeof(*hashes));
        if (!hashes)
                return -ENOMEM;
        list->hashes = hashes;
        list->cap = cap;
        return 0;
}

static void take_ref(struct kv_blocks *kv, int32_t id) {
        if (kv->blocks[id].ref_count++ == 0)
                lru_unlink(kv, id);
}

int kv_blocks_match_prefix(struct kv_blocks *kv, struct kv_block_list *list, const int32_t *tokens,
                           uint32_t n_tokens) {
        if (!kv->prefix_caching || n_tokens == 0)
                return 0;
        kv->query_tokens += n_tokens;
        /* the last token is always computed: its logits start the output */
        uint32_t max_blocks = (n_tokens - 1) / kv->block_size;
        int r = list_reserve(list, max_blocks);
        if (r < 0)
                return r;
        uint64_t parent = 0;
        uint32_t matched = 0;
        for (; matched < max_blocks; matched++) {
                const int32_t *block = tokens + (size_t) matched * kv->block_size;
                uint64_t h = chain_hash(parent, block, kv->block_size);
                int32_t id = cache_find(kv, h, parent, block);
                if (id == NO_BLOCK)
                        break;
                take_ref(kv, id);
                list->ids[list->n++] = id;
                list->hashes[list->n_hashed++] = h;
                parent = h;
        }
        kv->hit_tokens += (uint64_t) matched * kv->block_size;
        return (int) (matched * kv->block_size);
}

uint32_t kv_blocks_needed(const struct kv_blocks *kv, const struct kv_block_list *list, uint32_t n_tokens) {
        uint32_t want = (n_tokens + kv->block_size - 1) / kv->block_size;
        return want > list->n ? want - list->n : 0;
}

int kv_blocks_allocate(struct kv_blocks *kv, struct kv_block_list *list, uint32_t n_tokens) {
        uint32_t need = kv_blocks_needed(kv, list, n_tokens);
        if (need == 0)
                return 0;
        if (need > kv->n_free)
                return -ENOSPC;
        int r = list_reserve(list, list->n + need);
        if (r < 0)
                return r;
        for (uint32_t i = 0; i < need; i++) {
                int32_t id = kv->lru_head;
                if (kv->blocks[id].cached)
                        cache_remove(kv, id);
                take_ref(kv, id);
                list->ids[list->n++] = id;
        }
        return 0;
}

void kv_blocks_commit(struct kv_blocks *kv, struct kv_block_list *list, const int32_t *tokens, uint32_t n_computed) {
        if (!kv->prefix_caching)
                return;
        uint32_t full = n_computed / kv->block_size;
        if (full > list->n)
                full = list->n;
        for (uint32_t i = list->n_hashed; i < full; i++) {
                uint64_t parent = i ? list->hashes[i - 1] : 0;
                const int32_t *block = tokens + (size_t) i * kv->block_size;
                uint64_t h = chain_hash(parent, block, kv->block_size);
                int32_t id = list->ids[i];
                struct block *b = &kv->blocks[id];
                list->hashes[i] = h;
                list->n_hashed = i + 1;
                /* an equal block already cached stays the one found; this copy stays private */
                if (b->cached || cache_find(kv, h, parent, block) != NO_BLOCK)
                        continue;
                b->hash = h;
                b->parent_hash = parent;
                b->cached = true;
                memcpy(kv->block_tokens + (size_t) id * kv->block_size, block, kv->block_size * sizeof(int32_t));
                uint32_t bucket = bucket_of(kv, h);
                b->bucket_next = kv->buckets[bucket];
                kv->buckets[bucket] = id;
                kv->n_cached++;
        }
}

void kv_blocks_release(struct kv_blocks *kv, struct kv_block_list *list) {
        for (uint32_t i = list->n; i-- > 0;) {
                int32_t id = list->ids[i];
                if (--kv->blocks[id].ref_count == 0)
                        lru_append(kv, id);
        }
        list->n = 0;
        list->n_hashed = 0;
}

void kv_block_list_free(struct kv_block_list *list) {
        free(list->ids);
        free(list->hashes);
        *list = (struct kv_block_list) { 0 };
}

int kv_blocks_reset_prefix_cache(struct kv_blocks *kv) {
        if (kv->n_free != kv->n_blocks)
                return -EBUSY;
        for (uint32_t i = 0; i < kv->n_blocks; i++)
                if (kv->blocks[i].cached)
                        cache_remove(kv, (int32_t) i);
        return 0;
}
