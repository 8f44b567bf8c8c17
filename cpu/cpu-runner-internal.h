/* SPDX-License-Identifier: MIT */
#pragma once

/* The CPU runner's state, shared by its parts: cpu-runner.c (creation and scratch),
 * forward-pass.c (the layers), attention.c (attention and the KV pool's rows),
 * cpu-runner-memory.c (sleep and wake-up). */

#include "cpu-runner.h"
#include "dot.h"
#include "kv-pool.h"
#include "matmul-shares.h"
#include "packed-model.h"
#include "thread-pool.h"

/* A matmul's input: the floats (normed input, attention output or the feed-forward's h),
 * their q8_1 blocks and the blocks' d and s as floats, and for K-quant weights their q8_K
 * super-blocks. */
struct activations {
        float *xn;             /* (tokens, max_dim) */
        struct block_q8_1 *xq; /* (tokens, max_dim / 32) */
        float *ds;             /* (tokens, max_dim / 32, 2) */
        int32_t *corrections;  /* (tokens, max_dim / 32, PACKED_CORRECTIONS) for packed Q4_0, Q5_0 and Q8_0 */
        int32_t *block_sums; /* (tokens, max_dim / 32) for the packed single-accumulator product */
        struct block_q8_K *xk;       /* (tokens, max_dim / 256) when some weight is a K-quant, else NULL */
};

#define SMALL_BATCH 4
#define K_ORDER_KINDS 3
/* Consecutive prompt tokens of a sequence whose attention goes together (as many as keep
 * their query heads within DOT_GROUP_MAX): each key and value is read and converted once for
 * all their query heads. */
#define ATTN_TILE_TOKENS 4

struct cpu_runner {
        const struct model *model;
        struct cpu_runner_config config;
        const struct dot_kernels *kernels;
        struct thread_pool *pool;
        struct kv_pool *kv;
        uint32_t q_dim, kv_dim, max_dim;
        unsigned released; /* enum backend_memory bits */
        bool use_packed;   /* $ASYNCLLM_CPU_PACKED=0 keeps the tiles on the original rows */
        bool k_quants;     /* some matmul weight is a K-quant: activations get q8_K blocks too */
        /* (K_ORDER_KINDS, T) with k_quants: per token of the slice, whether its K-quant products
         * take the batched order (k_quant_batched_order()), for the repacked types (Q4_K, Q2_K),
         * for the tiled ones (Q3_K, Q5_K, Q6_K), and never (the last layer's feed-forward and
         * the logits, which llama.cpp runs for the output tokens alone); set before each slice */
        bool *k_orders;
        struct packed_model packed;
        struct matmul_share *shares; /* (n_matmul_weights, n_threads), reset before each step */

        /* Scratch for one slice of a step, T = slice_tokens, reused across slices and steps. */
        uint32_t slice_tokens;   /* max_slice_tokens, at most max_batch_tokens */
        int32_t *slice_outputs;  /* (T) the slice's output token indices, from its first token */
        int32_t *slice_hidden;   /* (T) the slice's hidden-state token indices, likewise */
        float *x;                /* (T, n_embd) the residual stream */
        struct activations shared; /* (T, ...) written by the threads together */
        /* Per thread, for batches of at most SMALL_BATCH tokens: each thread normalizes and
         * quantizes the whole (small) batch itself, which saves the barrier after each such
         * phase; the values are the same on every thread. NULL when some weight is a float
         * matrix (the float path reads the shared xn). */
        struct activations *own;
        float *q;                /* (T, q_dim) */
        float *k;                /* (T, kv_dim) */
        float *v;                /* (T, kv_dim) */
        float *gate;             /* (T, n_ff) */
        float *up;               /* (T, n_ff) */
        float *branch;           /* (T, n_embd) a matmul's output before its post-norm; NULL without post-norms */
        /* (n_rope_tables, T, rope_dim / 2): the global layers' angles, then the sliding
         * layers' (rope_table()) */
        float *rope_cos;
        float *rope_sin;
        uint32_t n_rope_tables;
        /* Sliding-window attention starts reading at a multiple of this (the block size and
         * the 64 lanes both divide it), so that every position it reads keeps its lane and
         * its softmax run. */
        uint32_t window_align;
        float *thread_scratch;   /* (n_threads, max_model_len + max_dim) scores and rows */
        size_t thread_scratch_stride;
        uint32_t attn_tile_tokens;
        size_t attn_scores_floats; /* of a thread's scratch: the tile's scores, then its queries or a row */
        size_t attn_queries_floats;
        uint32_t *attn_done_until; /* (thread, key-value head): tokens before it are done */
        uint32_t attn_split_positions;
        /* (SMALL_BATCH * n_head_kv items) for attention shared between the threads: each
         * item's scores, rounded queries and lane rows (attn_split_scores(), _queries(),
         * _lanes()); NULL with one thread */
        float *attn_split;
        size_t attn_split_stride;
        uint64_t scratch_bytes;  /* all of the above */

        /* The step in progress, read by every worker. */
        const struct batch *batch;
        float *logits;
        bool store_own_kv;      /* attention_stores_own_kv() of the batch */
        bool shared_attention;  /* attention_is_shared() of the batch */
};

/* The share [begin, end) of n items that thread ith of nth works on. */
static inline void split(uint64_t n, unsigned ith, unsigned nth, uint64_t *begin, uint64_t *end) {
        *begin = n * ith / nth;
        *end = n * (ith + 1) / nth;
}

static inline const struct packed_weights *packed_for(const struct cpu_runner *r, size_t i) {
        return r->packed.weights && r->packed.weights[i].data ? &r->packed.weights[i] : NULL;
}

/* Which of the runner's RoPE tables a layer's positions turn by. */
static inline uint32_t rope_table(const struct cpu_runner *r, uint32_t layer) {
        return r->n_rope_tables > 1 && r->model->layers[layer].sliding ? 1 : 0;
}

/* attention.c */
void rope_tables(struct cpu_runner *r, unsigned ith, unsigned nth);
void store_kv(struct cpu_runner *r, uint32_t layer, unsigned ith, unsigned nth);
bool attention_stores_own_kv(const struct batch *b);
bool attention_is_shared(const struct cpu_runner *r, bool store_own_kv, unsigned nth);
void attention(struct cpu_runner *r, uint32_t layer, unsigned ith, unsigned nth);
void attention_shared(struct cpu_runner *r, uint32_t layer, unsigned ith, unsigned nth);
