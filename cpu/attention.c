/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <math.h>
#include <string.h>

#include "cpu-runner-internal.h"
#include "float16.h"
#include "rms-norm.h"
#include "rope-angles.h"

/* Turns each head's pairs (rope.h) by token t's angles in the layer's table. */
static void rope(const struct cpu_runner *r, float *x, uint32_t n_heads, uint32_t t, uint32_t layer) {
        const struct model_hparams *hp = &r->model->hp;
        uint32_t half = hp->rope_dim / 2;
        size_t at = ((size_t) rope_table(r, layer) * r->slice_tokens + t) * half;
        r->kernels->rope(x, n_heads, hp->head_dim, half, hp->rope_pairing == ROPE_HALVES, r->rope_cos + at,
                         r->rope_sin + at);
}

/* Each token's angles (rope-angles.h): table 0 for the global layers, table 1 for the
 * sliding ones. */
void rope_tables(struct cpu_runner *r, unsigned ith, unsigned nth) {
        const struct batch *b = r->batch;
        uint32_t half = r->model->hp.rope_dim / 2;
        uint64_t begin, end;
        split(b->n_tokens, ith, nth, &begin, &end);
        for (uint32_t k = 0; k < r->n_rope_tables; k++) {
                struct rope_angles angles;
                rope_angles_init(&angles, r->model, k == 1, r->config.max_model_len);
                float *cos_k = r->rope_cos + (size_t) k * r->slice_tokens * half;
                float *sin_k = r->rope_sin + (size_t) k * r->slice_tokens * half;
                for (uint64_t t = begin; t < end; t++)
                        rope_angles_row(&angles, (float) b->positions[t], cos_k + t * half, sin_k + t * half);
        }
}

/* The first element of a head's row at a slot of a block of the KV pool: a block keeps each
 * head's rows together, (head, slot, head_dim), so that attention reads a head's part of a
 * block as consecutive lines. */
static uint64_t kv_row(const struct cpu_runner *r, uint32_t layer, uint32_t block, uint32_t head, uint32_t slot) {
        uint32_t bs = r->kv->block_size, hd = r->model->hp.head_dim;
        return kv_pool_block(r->kv, layer, block) + ((uint64_t) head * bs + slot) * hd;
}

/* Key-value head kv_head's keys or values (pool: the KV pool's k or v) in a layer, read
 * through block_table; fetch_beside: the other pool, whose rows the scores kernels fetch
 * beside the keys they read, or NULL. */
static struct f16_rows kv_head_rows(const struct cpu_runner *r, const f16_bits *pool, const f16_bits *fetch_beside,
                                    uint32_t layer, uint32_t kv_head, const int32_t *block_table) {
        size_t head_base = kv_row(r, layer, 0, kv_head, 0);
        return (struct f16_rows) { pool + head_base, block_table, r->kv->block_size, r->model->hp.head_dim,
                                   kv_pool_block(r->kv, 0, 1), fetch_beside ? fetch_beside + head_base : NULL };
}

/* Token t's query heads of key-value head kv_head, n_tokens consecutive tokens of them,
 * rounded to f16 precision into q16: the queries meet the f16 keys at f16 precision, as in
 * the reference. */
static void round_queries(const struct cpu_runner *r, uint32_t t, uint32_t n_tokens, uint32_t kv_head, float *q16) {
        const struct model_hparams *hp = &r->model->hp;
        size_t head_floats = (size_t) (hp->n_head / hp->n_head_kv) * hp->head_dim;
        for (uint32_t i = 0; i < n_tokens; i++)
                memcpy(q16 + i * head_floats, r->q + (size_t) (t + i) * r->q_dim + kv_head * head_floats,
                       head_floats * sizeof(float));
        r->kernels->round_f16(q16, n_tokens * head_floats);
}

/* Where attention writes token t's output for query head g of key-value head kv_head. */
static float *attention_output(const struct cpu_runner *r, uint32_t t, uint32_t kv_head, uint32_t g) {
        const struct model_hparams *hp = &r->model->hp;
        return r->shared.xn + (size_t) t * r->q_dim + ((size_t) kv_head * (hp->n_head / hp->n_head_kv) + g) * hp->head_dim;
}

/* Makes token t's query heads of key-value head h and its key head h ready for attention
 * (their biases and RMS norms where the layer has them, RoPE, the queries' temperature and
 * scale), and stores that key
 * and value in the KV pool. */
static void store_kv_head(struct cpu_runner *r, uint32_t layer, uint32_t t, uint32_t h) {
        const struct model_hparams *hp = &r->model->hp;
        const struct model_layer *l = &r->model->layers[layer];
        const struct batch *b = r->batch;
        const struct batch_seq *seq = &b->seqs[b->seq_ids[t]];
        uint32_t pos = (uint32_t) b->positions[t], group = hp->n_head / hp->n_head_kv;
        uint32_t bs = r->kv->block_size, hd = hp->head_dim, block = (uint32_t) seq->block_table[pos / bs];
        float *q = r->q + (size_t) t * r->q_dim + (size_t) h * group * hd;
        float *k = r->k + (size_t) t * r->kv_dim + (size_t) h * hd, *v = r->v + (size_t) t * r->kv_dim + (size_t) h * hd;
        if (l->bq) {
                const float *bq = l->bq + (size_t) h * group * hd, *bk = l->bk + (size_t) h * hd, *bv = l->bv + (size_t) h * hd;
                for (uint32_t i = 0; i < group * hd; i++)
                        q[i] += bq[i];
                for (uint32_t i = 0; i < hd; i++) {
                        k[i] += bk[i];
                        v[i] += bv[i];
                }
        }
        if (l->attn_q_norm) {
                for (uint32_t g = 0; g < group; g++)
                        rms_norm(q + (size_t) g * hd, l->attn_q_norm, q + (size_t) g * hd, hd, hp->rms_eps);
                rms_norm(k, l->attn_k_norm, k, hd, hp->rms_eps);
        }
        rope(r, q, group, t, layer);
        rope(r, k, 1, t, layer);
        if (hp->attn_temp_scale != 0.0f) {
                float temperature = attention_temperature(hp, pos);
                for (uint32_t i = 0; i < group * hd; i++)
                        q[i] *= temperature;
        }
        if (hp->query_scale != 1.0f)
                for (uint32_t i = 0; i < group * hd; i++)
                        q[i] *= hp->query_scale;
        uint64_t row = kv_row(r, layer, block, h, pos % bs);
        for (uint32_t i = 0; i < hd; i++) {
                r->kv->k[row + i] = f32_to_f16(k[i]);
                r->kv->v[row + i] = f32_to_f16(v[i]);
        }
}

/* store_kv_head() for every head of this thread's tokens. */
void store_kv(struct cpu_runner *r, uint32_t layer, unsigned ith, unsigned nth) {
        uint64_t begin, end;
        split(r->batch->n_tokens, ith, nth, &begin, &end);
        for (uint64_t t = begin; t < end; t++)
                for (uint32_t h = 0; h < r->model->hp.n_head_kv; h++)
                        store_kv_head(r, layer, (uint32_t) t, h);
}

/* Whether each token of a small batch is its sequence's only one: then a token's attention
 * under one key-value head reads no key or value that another head or token stores in this
 * step, and attention can store its own before it reads (store_kv_head()), without a
 * barrier between. */
bool attention_stores_own_kv(const struct batch *b) {
        if (b->n_tokens > SMALL_BATCH)
                return false;
        for (uint32_t t = 0; t < b->n_tokens; t++)
                for (uint32_t u = 0; u < t; u++)
                        if (b->seq_ids[u] == b->seq_ids[t])
                                return false;
        return true;
}

/* Attention items are (token, key-value head) pairs costing (position + 1) per query head
 * each; a thread's share is cut by cost, not by count, so that a mixed step's long-context
 * prompt tokens do not all land on one thread. Returns the first item at which the running
 * cost reaches target. */
static uint64_t item_at_cost(const struct batch *b, uint32_t n_items_per_token, uint32_t heads_per_item, uint64_t target) {
        uint64_t before = 0;
        for (uint32_t t = 0; t < b->n_tokens; t++) {
                uint64_t cost = ((uint64_t) b->positions[t] + 1) * heads_per_item;
                if (before + cost * n_items_per_token > target)
                        return (uint64_t) t * n_items_per_token + (target - before + cost - 1) / cost;
                before += cost * n_items_per_token;
        }
        return (uint64_t) b->n_tokens * n_items_per_token;
}

/* The batch's attention cost in item_at_cost()'s units: (position + 1) per query head. */
static uint64_t attention_cost(const struct cpu_runner *r) {
        uint64_t total = 0;
        for (uint32_t t = 0; t < r->batch->n_tokens; t++)
                total += ((uint64_t) r->batch->positions[t] + 1) * r->model->hp.n_head;
        return total;
}

/* Thread ith's run of attention items [begin, end), of nth threads' even shares of total. */
static void attention_run(const struct cpu_runner *r, uint64_t total, unsigned ith, unsigned nth, uint64_t *begin,
                          uint64_t *end) {
        const struct model_hparams *hp = &r->model->hp;
        const struct batch *b = r->batch;
        uint32_t group = hp->n_head / hp->n_head_kv;
        *begin = item_at_cost(b, hp->n_head_kv, group, total * ith / nth);
        *end = ith + 1 == nth ? (uint64_t) b->n_tokens * hp->n_head_kv
                              : item_at_cost(b, hp->n_head_kv, group, total * (ith + 1) / nth);
}

/* Tokens from t on (at most max) that go with t under key-value head kv_head: consecutive
 * prompt positions of t's sequence whose items are below end. */
static uint32_t attention_tile(const struct batch *b, uint32_t t, uint32_t kv_head, uint32_t n_head_kv, uint64_t end,
                               uint32_t max) {
        uint32_t n = 1;
        if ((uint32_t) b->positions[t] >= b->seqs[b->seq_ids[t]].n_prompt)
                return 1;
        while (n < max && t + n < b->n_tokens && (uint64_t) (t + n) * n_head_kv + kv_head < end &&
               b->seq_ids[t + n] == b->seq_ids[t] && b->positions[t + n] == b->positions[t] + (int32_t) n &&
               (uint32_t) b->positions[t + n] < b->seqs[b->seq_ids[t]].n_prompt)
                n++;
        return n;
}

/* The first position a layer's attention reads for queries at positions first_pos ..
 * n_pos - 1 of a sequence: 0, or in a sliding layer the first position of first_pos's
 * window rounded down to a multiple of window_align and kept at least 64 positions before
 * n_pos (every lane of the sums then has a position, as when reading from 0). The positions
 * before it lie outside every such query's window: their weights would be exactly 0, which
 * adds nothing to any sum, so leaving them out changes no bit. */
static uint32_t first_read(const struct cpu_runner *r, uint32_t layer, uint32_t first_pos, uint32_t n_pos) {
        uint32_t window = r->model->layers[layer].sliding ? r->model->hp.sliding_window : 0;
        if (window == 0 || first_pos < window || n_pos < 64)
                return 0;
        uint32_t from = first_pos + 1 - window;
        if (from > n_pos - 64)
                from = n_pos - 64;
        return from / r->window_align * r->window_align;
}

/* In a sliding layer, the scores of the positions from `from` on that lie outside the window
 * of the query at pos become -inf, llama.cpp's mask: position j is hidden when pos - j >=
 * sliding_window. */
static void mask_outside_window(const struct cpu_runner *r, uint32_t layer, float *scores, uint32_t from, uint32_t pos) {
        uint32_t window = r->model->layers[layer].sliding ? r->model->hp.sliding_window : 0;
        for (uint32_t j = from; window && j + window <= pos; j++)
                scores[j] = -INFINITY;
}

/* Causal grouped-query attention of each (token, key-value head) in this thread's share over
 * the token's sequence, positions 0..pos in order, read through the block table; the query
 * heads of the group, and of a few consecutive prompt tokens, go together,
 * so that each key and value is converted once for them all. A tile's earlier tokens also
 * meet the keys of its later positions: their scores are not used and their weights are 0,
 * which adds exactly nothing to the value sums. Sums follow the lane order of llama.cpp's
 * f16 matrix products, so that rounding matches the reference: its tiled product (16 lanes)
 * for prompt positions, its vector dot product (64 lanes) for generated ones; position j
 * feeds lane j % lanes. The order depends only on the sequence, and each head's numbers are
 * what it would get alone. */
void attention(struct cpu_runner *r, uint32_t layer, unsigned ith, unsigned nth) {
        const struct model_hparams *hp = &r->model->hp;
        const struct batch *b = r->batch;
        const struct dot_kernels *kern = r->kernels;
        uint32_t group = hp->n_head / hp->n_head_kv, hd = hp->head_dim;
        size_t scores_stride = (size_t) r->config.max_model_len + 16;
        float scale = hp->score_scale;
        float *scores = r->thread_scratch + ith * r->thread_scratch_stride; /* (tile heads, scores_stride) */
        float *q16 = scores + r->attn_scores_floats;                        /* (tile heads, hd) */
        float *lanes = q16 + r->attn_queries_floats;                         /* (tile heads, 64, hd) */
        uint32_t *done_until = r->attn_done_until + (size_t) ith * hp->n_head_kv;
        size_t lanes_stride = (size_t) 64 * hd;
        uint64_t begin, end;
        attention_run(r, attention_cost(r), ith, nth, &begin, &end);
        memset(done_until, 0, hp->n_head_kv * sizeof(*done_until));
        for (uint64_t item = begin; item < end; item++) {
                uint32_t t = (uint32_t) (item / hp->n_head_kv), kv_head = (uint32_t) (item % hp->n_head_kv);
                if (t < done_until[kv_head])
                        continue; /* in a tile already computed */
                uint32_t n_tile = attention_tile(b, t, kv_head, hp->n_head_kv, end, r->attn_tile_tokens);
                done_until[kv_head] = t + n_tile;
                if (r->store_own_kv)
                        store_kv_head(r, layer, t, kv_head);
                const struct batch_seq *seq = &b->seqs[b->seq_ids[t]];
                uint32_t n_pos = (uint32_t) b->positions[t + n_tile - 1] + 1; /* the tile's last token's */
                bool prompt = (uint32_t) b->positions[t] < seq->n_prompt;
                uint32_t n_lanes = prompt ? 16 : 64, n_q = n_tile * group;
                uint32_t from = first_read(r, layer, (uint32_t) b->positions[t], n_pos);
                const int32_t *blocks = seq->block_table + from / r->kv->block_size;

                struct f16_rows values = kv_head_rows(r, r->kv->v, NULL, layer, kv_head, blocks);
                /* A generated token's values are read lane by lane, positions 64 apart in
                 * blocks scattered over the pool, and the sums waited on each row. */
                struct f16_rows keys = kv_head_rows(r, r->kv->k, prompt ? NULL : r->kv->v, layer, kv_head, blocks);

                round_queries(r, t, n_tile, kv_head, q16);
                kern->attn_scores(&keys, n_pos - from, q16, hd, n_q, hd, !prompt, scale, scores + from, scores_stride);

                /* The weights meet the f16 values at f16 precision, as in the reference's
                 * attention without flash attention; a query's positions past its own (the
                 * tile's later tokens) weigh nothing. */
                for (uint32_t g = 0; g < n_q; g++) {
                        float *sg = scores + g * scores_stride;
                        uint32_t pos = (uint32_t) b->positions[t + g / group];
                        mask_outside_window(r, layer, sg, from, pos);
                        kern->softmax_f16(sg + from, pos + 1 - from);
                        for (uint32_t j = pos + 1; j < n_pos; j++)
                                sg[j] = 0.0f;
                }
                kern->attn_values(&values, n_pos - from, scores + from, scores_stride, n_q, hd, n_lanes, 0, 16, lanes,
                                  lanes_stride);
                for (uint32_t g = 0; g < n_q; g++) {
                        uint32_t n_read = (uint32_t) b->positions[t + g / group] + 1 - from;
                        kern->sum_lanes(lanes + g * lanes_stride, hd, n_read < 16 ? n_read : 16, hd,
                                        attention_output(r, t + g / group, kv_head, g % group));
                }
        }
}

/* How much more than its fair share of attention's reads the busiest thread may get from
 * attention()'s runs of items before a decode step shares them out (attention_shared()).
 * Shared when they were even already (two sequences at 1024 positions on two threads), a
 * step lost ~8%: half of each head's values then come from the other core's cache. */
#define ATTN_SHARE_IMBALANCE 1.2

/* Whether this decode step shares each item's attention between the threads: every token
 * its sequence's only one and generated (not a prompt position), some context of at least
 * attn_split_positions (below, the extra barriers cost more than the evener split saves),
 * and attention()'s runs of items uneven (one sequence's 3 key-value heads on 2 threads: two
 * thirds of the reads on one). */
bool attention_is_shared(const struct cpu_runner *r, bool store_own_kv, unsigned nth) {
        const struct model_hparams *hp = &r->model->hp;
        const struct batch *b = r->batch;
        if (!store_own_kv || !r->attn_split)
                return false;
        uint32_t group = hp->n_head / hp->n_head_kv, longest = 0;
        for (uint32_t t = 0; t < b->n_tokens; t++) {
                /* a prompt position fed alone (a one-token chunk) sums in the prompt's order,
                 * which only attention() has */
                if ((uint32_t) b->positions[t] < b->seqs[b->seq_ids[t]].n_prompt)
                        return false;
                longest = (uint32_t) b->positions[t] + 1 > longest ? (uint32_t) b->positions[t] + 1 : longest;
        }
        if (longest < r->attn_split_positions)
                return false;
        uint64_t total = attention_cost(r), busiest = 0;
        for (unsigned i = 0; i < nth; i++) {
                uint64_t begin, end, cost = 0;
                attention_run(r, total, i, nth, &begin, &end);
                for (uint64_t item = begin; item < end; item++)
                        cost += ((uint64_t) b->positions[item / hp->n_head_kv] + 1) * group;
                busiest = cost > busiest ? cost : busiest;
        }
        return (double) busiest > ATTN_SHARE_IMBALANCE * (double) total / nth;
}

/* Item i's part of attn_split: the scores of its query heads, their queries rounded to f16,
 * and their 64 lane rows of a head. */
static float *attn_split_scores(const struct cpu_runner *r, uint32_t item) {
        return r->attn_split + item * r->attn_split_stride;
}

static float *attn_split_queries(const struct cpu_runner *r, uint32_t item) {
        uint32_t group = r->model->hp.n_head / r->model->hp.n_head_kv;
        return attn_split_scores(r, item) + (size_t) group * (r->config.max_model_len + 16);
}

static float *attn_split_lanes(const struct cpu_runner *r, uint32_t item) {
        const struct model_hparams *hp = &r->model->hp;
        return attn_split_queries(r, item) + (size_t) (hp->n_head / hp->n_head_kv) * hp->head_dim;
}

/* attention() for a decode step, each (token, key-value head) shared by all the threads in
 * phases with barriers between: one thread stores the item's key and value and rounds its
 * queries; each thread scores a run of whole blocks of positions; a thread takes each
 * query's softmax; each thread makes a run of the 16 rows of value sums (row e: the
 * positions e mod 16); a thread adds each query's rows. Every number is made by the same
 * kernels over the same positions in the same order as when one thread has the item, so
 * the results are the same bits. */
void attention_shared(struct cpu_runner *r, uint32_t layer, unsigned ith, unsigned nth) {
        const struct model_hparams *hp = &r->model->hp;
        const struct batch *b = r->batch;
        const struct dot_kernels *kern = r->kernels;
        uint32_t group = hp->n_head / hp->n_head_kv, hd = hp->head_dim, bs = r->kv->block_size;
        uint32_t n_items = b->n_tokens * hp->n_head_kv;
        size_t scores_stride = (size_t) r->config.max_model_len + 16, lanes_stride = (size_t) 64 * hd;

        for (uint32_t item = ith; item < n_items; item += nth) {
                uint32_t t = item / hp->n_head_kv, kv_head = item % hp->n_head_kv;
                store_kv_head(r, layer, t, kv_head);
                round_queries(r, t, 1, kv_head, attn_split_queries(r, item));
        }
        thread_pool_barrier(r->pool);

        /* positions from..n_pos - 1 of each item (first_read()), in whole blocks per thread */
        for (uint32_t item = 0; item < n_items; item++) {
                uint32_t t = item / hp->n_head_kv, kv_head = item % hp->n_head_kv;
                const struct batch_seq *seq = &b->seqs[b->seq_ids[t]];
                uint32_t n_pos = (uint32_t) b->positions[t] + 1, from = first_read(r, layer, n_pos - 1, n_pos);
                uint32_t n_blocks = (n_pos - from + bs - 1) / bs, per_thread = (n_blocks + nth - 1) / nth;
                uint32_t first = from + ith * per_thread * bs, end = from + (ith + 1) * per_thread * bs;
                if (end > n_pos)
                        end = n_pos;
                if (first >= end)
                        continue;
                struct f16_rows keys = kv_head_rows(r, r->kv->k, r->kv->v, layer, kv_head, seq->block_table + first / bs);
                kern->attn_scores(&keys, end - first, attn_split_queries(r, item), hd, group, hd, true, hp->score_scale,
                                  attn_split_scores(r, item) + first, scores_stride);
        }
        thread_pool_barrier(r->pool);

        for (uint32_t query = ith; query < n_items * group; query += nth) {
                uint32_t item = query / group, pos = (uint32_t) b->positions[item / hp->n_head_kv];
                uint32_t from = first_read(r, layer, pos, pos + 1);
                float *scores = attn_split_scores(r, item) + (query % group) * scores_stride;
                mask_outside_window(r, layer, scores, from, pos);
                kern->softmax_f16(scores + from, pos + 1 - from);
        }
        thread_pool_barrier(r->pool);

        uint32_t first_row = 16 * ith / nth, end_row = 16 * (ith + 1) / nth;
        for (uint32_t item = 0; item < n_items && first_row < end_row; item++) {
                uint32_t t = item / hp->n_head_kv, kv_head = item % hp->n_head_kv;
                const struct batch_seq *seq = &b->seqs[b->seq_ids[t]];
                uint32_t n_pos = (uint32_t) b->positions[t] + 1, from = first_read(r, layer, n_pos - 1, n_pos);
                struct f16_rows values = kv_head_rows(r, r->kv->v, NULL, layer, kv_head, seq->block_table + from / bs);
                kern->attn_values(&values, n_pos - from, attn_split_scores(r, item) + from, scores_stride, group, hd, 64,
                                  first_row, end_row - first_row, attn_split_lanes(r, item), lanes_stride);
        }
        thread_pool_barrier(r->pool);

        for (uint32_t query = ith; query < n_items * group; query += nth) {
                uint32_t item = query / group, t = item / hp->n_head_kv, kv_head = item % hp->n_head_kv;
                uint32_t n_pos = (uint32_t) b->positions[t] + 1, g = query % group;
                uint32_t n_read = n_pos - first_read(r, layer, n_pos - 1, n_pos);
                kern->sum_lanes(attn_split_lanes(r, item) + g * lanes_stride, hd, n_read < 16 ? n_read : 16, hd,
                                attention_output(r, t, kv_head, g));
        }
}
