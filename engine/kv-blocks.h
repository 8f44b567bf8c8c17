/* SPDX-License-Identifier: MIT */
#pragma once

/* The paged KV cache's bookkeeping: a pool of fixed-size blocks with reference counts, each
 * request's block list, and automatic prefix caching. A full block is named by a chained
 * hash of its tokens and everything before them; a later request whose prompt starts with
 * the same tokens takes a reference on those blocks instead of computing them again. Free
 * blocks wait in LRU order and keep their cached contents until they are reused. Owned by the
 * engine thread: no locking. The KV data itself lives in the backend. */

#include <stdbool.h>
#include <stdint.h>

#include "error.h"

struct kv_blocks;

/* The blocks of one request, in position order, and the hashes of its full blocks. */
struct kv_block_list {
        int32_t *ids;
        uint32_t n;
        uint32_t cap;
        uint64_t *hashes;   /* (cap) chain hash of block i when i < n_hashed */
        uint32_t n_hashed;  /* leading full blocks already hashed (and offered to the cache) */
};

struct kv_blocks_stats {
        uint32_t n_blocks;
        uint32_t n_free;   /* blocks no request holds (cached or not) */
        uint32_t n_cached; /* blocks holding a cached prefix, held or free */
        uint64_t query_tokens; /* prompt tokens looked up in the prefix cache */
        uint64_t hit_tokens;   /* of which served from it */
};

int kv_blocks_new(uint32_t n_blocks, uint32_t block_size, bool prefix_caching, struct kv_blocks **ret,
                  struct error *err);
void kv_blocks_free(struct kv_blocks *kv);

uint32_t kv_blocks_block_size(const struct kv_blocks *kv);
uint32_t kv_blocks_n_free(const struct kv_blocks *kv);
void kv_blocks_stats(const struct kv_blocks *kv, struct kv_blocks_stats *ret);

/* Looks up the longest cached run of full blocks that starts tokens, leaving at least one
 * token uncached (its logits are needed), takes a reference on each and appends them to the
 * empty list. Returns the number of tokens served from the cache. -ENOMEM. */
int kv_blocks_match_prefix(struct kv_blocks *kv, struct kv_block_list *list, const int32_t *tokens,
                           uint32_t n_tokens);

/* Blocks needed to grow list to n_tokens tokens. */
uint32_t kv_blocks_needed(const struct kv_blocks *kv, const struct kv_block_list *list, uint32_t n_tokens);

/* Grows list to cover n_tokens tokens with fresh blocks (evicting cached free blocks, oldest
 * first). -ENOSPC, list unchanged, when not enough blocks are free; -ENOMEM. */
int kv_blocks_allocate(struct kv_blocks *kv, struct kv_block_list *list, uint32_t n_tokens);

/* Offers the full blocks among the first n_computed tokens (whose KV is now written) to the
 * prefix cache. */
void kv_blocks_commit(struct kv_blocks *kv, struct kv_block_list *list, const int32_t *tokens, uint32_t n_computed);

/* Drops the list's references, last block first (so a request's tail is evicted before its
 * shared head), and empties it; its memory is kept for reuse. */
void kv_blocks_release(struct kv_blocks *kv, struct kv_block_list *list);

void kv_block_list_free(struct kv_block_list *list);

/* Forgets every cached prefix. -EBUSY when a request still holds a block. */
int kv_blocks_reset_prefix_cache(struct kv_blocks *kv);
