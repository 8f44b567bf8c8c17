/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <math.h>

#include "clock.h"
#include "cpu-runner-internal.h"
#include "profiler.h"
#include "quantize.h"
#include "rms-norm.h"

/* Up to this many tokens a thread takes several groups of a packed matmul at a time; more,
 * and one group is a thread's work at a time (matmul_take_size). */
#define MATMUL_FEW_TOKENS 8
/* How much of its next matmul's first take a thread fetches while it waits at a barrier:
 * about what memory delivers in an average wait of a decode step (~1.5 us). */
#define BARRIER_FETCH_MAX 16384

/* Groups of a packed matmul a thread takes from its own run at a time (matmul-shares.h):
 * about eight takes per thread, enough to even out, few enough that a take costs little next
 * to computing it; one group at a time for many tokens. */
static uint32_t matmul_take_size(const struct packed_weights *packed, uint32_t n_tokens, unsigned nth) {
        uint64_t size = packed->n_groups / (8 * (uint64_t) nth);
        return size == 0 || n_tokens > MATMUL_FEW_TOKENS ? 1 : (uint32_t) size;
}

/* A barrier that fetches what this thread's next matmul reads first while it waits. A decode
 * step's phases between the matmuls (attention, norms, the barriers themselves) are a
 * quarter of its time, and the memory stood idle through them: the weights' stream
 * restarted cold at every matmul. */
static void barrier_before_matmul(const struct cpu_runner *r, size_t weight_index, uint32_t n_tokens, unsigned ith,
                                  unsigned nth) {
        const struct packed_weights *packed = packed_for(r, weight_index);
        const uint8_t *from = NULL;
        size_t bytes = 0;
        if (packed) {
                uint64_t g0 = matmul_share_begin(packed->n_groups, ith, nth);
                if (g0 < matmul_share_begin(packed->n_groups, ith + 1, nth)) {
                        from = packed->data + g0 * packed->group_bytes;
                        bytes = (size_t) matmul_take_size(packed, n_tokens, nth) * packed->group_bytes;
                        if (bytes > BARRIER_FETCH_MAX)
                                bytes = BARRIER_FETCH_MAX;
                }
        }
        thread_pool_barrier_fetch(r->pool, from, bytes);
}

/* Per token of the slice, whether a K-quant weight's products take llama.cpp's batched order
 * (dot-k-quants.h; cpu_runner.k_orders). */
static const bool *k_quant_orders(const struct cpu_runner *r, size_t weight_index, enum tensor_type type) {
        uint32_t last_layer = r->model->hp.n_layer - 1;
        unsigned kind = weight_index >= (size_t) last_layer * WEIGHTS_PER_LAYER + 4 ? 2
                        : type == TENSOR_Q4_K || type == TENSOR_Q2_K                ? 0
                                                                                    : 1;
        return r->k_orders + (size_t) kind * r->slice_tokens;
}

static void set_k_orders(struct cpu_runner *r, const struct batch *b) {
        bool *repacked = r->k_orders, *tiled = repacked + r->slice_tokens, *never = tiled + r->slice_tokens;
        for (uint32_t t = 0; t < b->n_tokens; t++) {
                uint32_t position = (uint32_t) b->positions[t], n_prompt = b->seqs[b->seq_ids[t]].n_prompt;
                repacked[t] = k_quant_batched_order(TENSOR_Q4_K, position, n_prompt);
                tiled[t] = k_quant_batched_order(TENSOR_Q6_K, position, n_prompt);
                never[t] = false;
        }
}

/* Rows of a K-quant weight a thread takes at a time: their weights (18 KiB of Q4_K at 2048
 * columns) stay in L1 and L2 while the step's tokens pass over them in tiles. */
#define K_QUANT_ROW_BLOCK 16

/* A K-quant weight, each token in its own order: packed, the groups of sixteen rows shared out
 * as for the other packed weights; else this thread's share of the rows in blocks, each
 * block against the tokens in tiles of DOT_K_TILE_TOKENS. */
static void matmul_k_quant(const struct cpu_runner *r, size_t weight_index, dot_k_tile_fn tile, const struct activations *a,
                           uint32_t n_tokens, float *out, uint32_t out_stride, bool accumulate, unsigned ith,
                           unsigned nth) {
        const struct weight *w = matmul_weight(r->model, weight_index);
        size_t n_super = w->n_cols / QK_K;
        const bool *batched = k_quant_orders(r, weight_index, w->type);
        const struct packed_weights *packed = packed_for(r, weight_index);
        if (packed) { /* groups of sixteen rows across the threads, every token in one call */
                dot_packed_k_fn fn = dot_packed_k_kernel_for(r->kernels, w->type);
                struct matmul_share *shares = &r->shares[weight_index * nth];
                uint32_t take = matmul_take_size(packed, n_tokens, nth), n;
                uint64_t g0;
                while (matmul_shares_take(shares, ith, nth, take, &g0, &n))
                        fn(packed, g0, g0 + n, a->xk, n_super, batched, n_tokens, out, out_stride, accumulate);
                return;
        }
        uint64_t begin, end;
        split(w->n_rows, ith, nth, &begin, &end);
        for (uint64_t row0 = begin; row0 < end; row0 += K_QUANT_ROW_BLOCK) {
                unsigned n_rows = end - row0 < K_QUANT_ROW_BLOCK ? (unsigned) (end - row0) : K_QUANT_ROW_BLOCK;
                for (uint32_t t0 = 0; t0 < n_tokens; t0 += DOT_K_TILE_TOKENS) {
                        unsigned n = n_tokens - t0 < DOT_K_TILE_TOKENS ? n_tokens - t0 : DOT_K_TILE_TOKENS;
                        tile(w->data + row0 * w->row_bytes, w->row_bytes, n_rows, a->xk + (size_t) t0 * n_super, n_super,
                             batched + t0, n, n_super, out + (size_t) t0 * out_stride + row0, out_stride, accumulate);
                }
        }
}

/* out[t * out_stride + row] (+)= W[row] . x[t] for this thread's share of W's rows. Each
 * result depends only on its row and token, never on the split or the batch: the tiles give
 * the bits of the single products. Rows go in tiles of four across the threads, and each
 * tile of weights (in L1) meets every token before the next is loaded. */
static void matmul(const struct cpu_runner *r, size_t weight_index, const struct activations *a, uint32_t n_tokens,
                   float *out, uint32_t out_stride, bool accumulate, float *row_scratch, unsigned ith, unsigned nth) {
        const struct weight *w = matmul_weight(r->model, weight_index);
        dot_k_tile_fn k_tile = dot_k_tile_kernel_for(r->kernels, w->type);
        if (k_tile) {
                matmul_k_quant(r, weight_index, k_tile, a, n_tokens, out, out_stride, accumulate, ith, nth);
                return;
        }
        const struct packed_weights *packed = packed_for(r, weight_index);
        const float *x = a->xn;
        const struct block_q8_1 *xq = a->xq;
        uint64_t begin, end;
        size_t n_blocks = w->n_cols / QUANT_BLOCK;
        bool single = single_accumulator_product(r->model, weight_index);
        /* unpacked, the single-accumulator product goes one row at a time through its reference */
        dot_q_fn dot = !single                    ? dot_kernel_for(r->kernels, w->type)
                       : w->type == TENSOR_Q4_0 ? dot_single_q4_0_reference
                                                : dot_single_q8_0_reference;
        dot_tile_fn tile = single ? NULL : dot_tile_kernel_for(r->kernels, w->type);
        uint64_t n_tiles = tile ? w->n_rows / DOT_TILE_ROWS : 0;

        /* Packed: groups of sixteen rows across the threads, every token in one call, the
         * group's weights staying in L1 while the tokens pass over them. */
        if (packed) {
                dot_packed_fn fn = single ? r->kernels->packed_single_accumulator : dot_packed_kernel_for(r->kernels, w->type);
                struct matmul_share *shares = &r->shares[weight_index * nth];
                struct packed_activations pa = { xq, a->ds, a->corrections, n_blocks, a->block_sums };
                uint32_t take = matmul_take_size(packed, n_tokens, nth), n;
                uint64_t g0;
                while (matmul_shares_take(shares, ith, nth, take, &g0, &n))
                        fn(packed, g0, g0 + n, &pa, n_tokens, out, out_stride, accumulate);
                return;
        }

        split(n_tiles, ith, nth, &begin, &end);
        for (uint64_t g = begin; g < end; g++) {
                uint64_t row0 = g * DOT_TILE_ROWS;
                for (uint32_t t0 = 0; t0 < n_tokens; t0 += DOT_TILE_TOKENS) {
                        unsigned n = n_tokens - t0 < DOT_TILE_TOKENS ? n_tokens - t0 : DOT_TILE_TOKENS;
                        float v[DOT_TILE_TOKENS * DOT_TILE_ROWS];
                        tile(w->data + row0 * w->row_bytes, w->row_bytes, xq + (size_t) t0 * n_blocks,
                             a->ds + (size_t) t0 * n_blocks * 2, n_blocks, n, n_blocks, v);
                        for (unsigned t = 0; t < n; t++)
                                for (unsigned k = 0; k < DOT_TILE_ROWS; k++) {
                                        float *o = &out[(size_t) (t0 + t) * out_stride + row0 + k];
                                        *o = accumulate ? *o + v[t * DOT_TILE_ROWS + k] : v[t * DOT_TILE_ROWS + k];
                                }
                }
        }
        /* rows left over from the tiles, float weights and the single-accumulator product, one product at a time */
        split(w->n_rows - n_tiles * DOT_TILE_ROWS, ith, nth, &begin, &end);
        for (uint64_t row = n_tiles * DOT_TILE_ROWS + begin; row < n_tiles * DOT_TILE_ROWS + end; row++) {
                const uint8_t *wrow = w->data + row * w->row_bytes;
                if (!dot)
                        tensor_row_to_float(w->type, wrow, row_scratch, w->n_cols);
                for (uint32_t t = 0; t < n_tokens; t++) {
                        float v;
                        if (dot)
                                v = dot(wrow, xq + t * n_blocks, n_blocks);
                        else {
                                const float *xt = x + (size_t) t * w->n_cols;
                                v = 0.0f;
                                for (uint64_t i = 0; i < w->n_cols; i++)
                                        v += row_scratch[i] * xt[i];
                        }
                        float *o = &out[(size_t) t * out_stride + row];
                        *o = accumulate ? *o + v : v;
                }
        }
}

/* Quantizes token row i of a (width elements at x) for the matmuls: its q8_1 blocks, their
 * scales as floats, and, when the packed product runs, the lanes' corrections and the blocks'
 * sums it reads; its q8_K super-blocks too when some weight is a K-quant. */
static void quantize_row(const struct cpu_runner *r, const struct activations *a, const float *x, uint64_t i,
                         uint32_t width) {
        size_t n_blocks = width / QUANT_BLOCK;
        r->kernels->quantize_q8_1(x, a->xq + i * n_blocks, a->ds + i * n_blocks * 2, width);
        if (r->k_quants && width % QK_K == 0)
                r->kernels->quantize_q8_K(x, a->xk + i * (width / QK_K), width);
        if (r->packed.arena) {
                r->kernels->activation_corrections(a->xq + i * n_blocks, n_blocks,
                                                   a->corrections + i * n_blocks * PACKED_CORRECTIONS);
                packed_block_sums(a->xq + i * n_blocks, n_blocks, a->block_sums + i * n_blocks);
        }
}

/* Normalizes and quantizes this thread's share of tokens: xn = norm(x) * weight, xq = q8(xn). */
static void norm_tokens(struct cpu_runner *r, const struct activations *a, const float *weight, const int32_t *rows,
                        uint32_t n_rows, unsigned ith, unsigned nth) {
        const struct model_hparams *hp = &r->model->hp;
        uint64_t begin, end;
        split(n_rows, ith, nth, &begin, &end);
        for (uint64_t i = begin; i < end; i++) {
                uint32_t t = rows ? (uint32_t) rows[i] : (uint32_t) i;
                float *xn = a->xn + i * hp->n_embd;
                rms_norm(r->x + (size_t) t * hp->n_embd, weight, xn, hp->n_embd, hp->rms_eps);
                quantize_row(r, a, xn, i, hp->n_embd);
        }
}

static void quantize_tokens(struct cpu_runner *r, const struct activations *a, const float *x, uint32_t width,
                            uint32_t n_tokens, unsigned ith, unsigned nth) {
        uint64_t begin, end;
        split(n_tokens, ith, nth, &begin, &end);
        for (uint64_t t = begin; t < end; t++)
                quantize_row(r, a, x + t * width, t, width);
}

/* h = act(gate) * up, the feed-forward's gated activation, quantized for the down matmul. */
static void gated_activation(struct cpu_runner *r, const struct activations *a, unsigned ith, unsigned nth) {
        uint32_t n_ff = r->model->hp.n_ff;
        void (*act)(float *, const float *, const float *, size_t) =
                r->model->hp.ffn_activation == FFN_GELU ? r->kernels->geglu : r->kernels->swiglu;
        uint64_t begin, end;
        split(r->batch->n_tokens, ith, nth, &begin, &end);
        for (uint64_t t = begin; t < end; t++) {
                float *h = a->xn + t * n_ff;
                act(h, r->gate + t * n_ff, r->up + t * n_ff, n_ff);
                quantize_row(r, a, h, t, n_ff);
        }
}

/* x += W a: the attention's or the feed-forward's output joins the residual stream, through
 * its own RMS norm first where the layer has one (post_norm): x += norm(W a) * post_norm,
 * the sum made whole in r->branch before any token is normalized. */
static void residual_matmul(struct cpu_runner *r, size_t weight_index, const float *post_norm,
                            const struct activations *a, float *row_scratch, unsigned ith, unsigned nth) {
        const struct model_hparams *hp = &r->model->hp;
        uint32_t T = r->batch->n_tokens;
        if (!post_norm) {
                matmul(r, weight_index, a, T, r->x, hp->n_embd, true, row_scratch, ith, nth);
                return;
        }
        matmul(r, weight_index, a, T, r->branch, hp->n_embd, false, row_scratch, ith, nth);
        thread_pool_barrier(r->pool);
        uint64_t begin, end;
        split(T, ith, nth, &begin, &end);
        for (uint64_t t = begin; t < end; t++) {
                float *out = r->branch + t * hp->n_embd, *x = r->x + t * hp->n_embd;
                rms_norm(out, post_norm, out, hp->n_embd, hp->rms_eps);
                for (uint32_t i = 0; i < hp->n_embd; i++)
                        x[i] += out[i];
        }
}

/* logits = cap * tanh(logits / cap), this thread's share of the step's logits. */
static void softcap_logits(struct cpu_runner *r, unsigned ith, unsigned nth) {
        const struct model_hparams *hp = &r->model->hp;
        float cap = hp->logit_softcap, inv = 1.0f / cap;
        uint64_t begin, end;
        split((uint64_t) r->batch->n_outputs * hp->n_vocab, ith, nth, &begin, &end);
        for (uint64_t i = begin; i < end; i++)
                r->logits[i] = tanhf(r->logits[i] * inv) * cap;
}

/* A tied output matrix's repacked rows give the embeddings: the file's pages were dropped
 * once repacked, and reading rows from the file faulted them back in, up to the whole
 * table (27 MiB of resident memory after a serving run). row_scratch holds one row's
 * blocks. */
static void embed(struct cpu_runner *r, float *row_scratch, unsigned ith, unsigned nth) {
        const struct model *m = r->model;
        const struct batch *b = r->batch;
        const struct packed_weights *packed = m->tied_output ? packed_for(r, n_matmul_weights(m) - 1) : NULL;
        uint64_t begin, end;
        split(b->n_tokens, ith, nth, &begin, &end);
        for (uint64_t t = begin; t < end; t++) {
                const void *row = m->token_embd.data + (uint64_t) b->tokens[t] * m->token_embd.row_bytes;
                if (packed) {
                        packed_weights_row(packed, b->tokens[t], row_scratch);
                        row = row_scratch;
                }
                float *x = r->x + t * m->hp.n_embd;
                tensor_row_to_float(m->token_embd.type, row, x, m->hp.n_embd);
                if (m->hp.embd_scale != 1.0f)
                        for (uint32_t i = 0; i < m->hp.n_embd; i++)
                                x[i] *= m->hp.embd_scale;
        }
}

/* The final hidden states the batch asks for: the residual stream through the output norm,
 * in float, as the logits' matmul reads it (before its quantization). */
static void hidden_states(struct cpu_runner *r, unsigned ith, unsigned nth) {
        const struct model_hparams *hp = &r->model->hp;
        const struct batch *b = r->batch;
        uint64_t begin, end;
        split(b->n_hidden, ith, nth, &begin, &end);
        for (uint64_t i = begin; i < end; i++)
                rms_norm(r->x + (size_t) b->hidden_tokens[i] * hp->n_embd, r->model->output_norm,
                         b->hidden + i * hp->n_embd, hp->n_embd, hp->rms_eps);
}

/* Under the profiler, thread 0 times each phase of a layer from the barrier that began it to
 * the one that ended it: every thread's share of the phase, the wait for the slowest
 * included. Returns the phase's end, the next one's start. */
static double phase_done(bool profiled, const char *phase, uint32_t layer, double start) {
        if (!profiled)
                return 0;
        double end = monotonic_seconds();
        profiler_span(PROFILE_TRACK_ENGINE, "layer", phase, start, end, "layer", layer);
        return end;
}

static void forward_worker(void *ctx, unsigned ith, unsigned nth) {
        struct cpu_runner *r = ctx;
        const struct model *m = r->model;
        const struct model_hparams *hp = &m->hp;
        const struct batch *b = r->batch;
        uint32_t T = b->n_tokens;
        float *row_scratch = r->thread_scratch + ith * r->thread_scratch_stride + r->attn_scores_floats;
        /* The phases that feed a matmul (norm, quantization, swiglu) run on every thread for
         * the whole batch when it is small, on the thread's own activations: no barrier
         * before the matmul. Otherwise the threads share them out. */
        bool small = r->own && T <= SMALL_BATCH;
        const struct activations *a = small ? &r->own[ith] : &r->shared;
        unsigned feed_ith = small ? 0 : ith, feed_nth = small ? 1 : nth;

        bool profiled = ith == 0 && profiler_active();
        double mark = profiled ? monotonic_seconds() : 0;

        embed(r, row_scratch, ith, nth);
        rope_tables(r, ith, nth);
        barrier_before_matmul(r, 0, T, ith, nth);
        mark = phase_done(profiled, "embed", 0, mark);

        for (uint32_t layer = 0; layer < hp->n_layer; layer++) {
                const struct model_layer *l = &m->layers[layer];
                size_t w = (size_t) layer * WEIGHTS_PER_LAYER; /* the layer's first weight */
                double layer_start = mark;

                norm_tokens(r, a, l->attn_norm, NULL, T, feed_ith, feed_nth);
                if (!small)
                        barrier_before_matmul(r, w + 0, T, ith, nth);
                matmul(r, w + 0, a, T, r->q, r->q_dim, false, row_scratch, ith, nth);
                matmul(r, w + 1, a, T, r->k, r->kv_dim, false, row_scratch, ith, nth);
                matmul(r, w + 2, a, T, r->v, r->kv_dim, false, row_scratch, ith, nth);
                barrier_before_matmul(r, w + 3, T, ith, nth);
                mark = phase_done(profiled, "qkv", layer, mark);
                if (!r->store_own_kv) {
                        store_kv(r, layer, ith, nth);
                        barrier_before_matmul(r, w + 3, T, ith, nth);
                }
                if (r->shared_attention)
                        attention_shared(r, layer, ith, nth); /* into shared.xn */
                else
                        attention(r, layer, ith, nth); /* into shared.xn */
                barrier_before_matmul(r, w + 3, T, ith, nth);
                mark = phase_done(profiled, "attention", layer, mark);
                quantize_tokens(r, a, r->shared.xn, r->q_dim, T, feed_ith, feed_nth);
                if (!small)
                        barrier_before_matmul(r, w + 3, T, ith, nth);
                residual_matmul(r, w + 3, l->attn_post_norm, a, row_scratch, ith, nth);
                barrier_before_matmul(r, w + 4, T, ith, nth);
                mark = phase_done(profiled, "attn_output", layer, mark);

                norm_tokens(r, a, l->ffn_norm, NULL, T, feed_ith, feed_nth);
                if (!small)
                        barrier_before_matmul(r, w + 4, T, ith, nth);
                matmul(r, w + 4, a, T, r->gate, hp->n_ff, false, row_scratch, ith, nth);
                matmul(r, w + 5, a, T, r->up, hp->n_ff, false, row_scratch, ith, nth);
                barrier_before_matmul(r, w + 6, T, ith, nth);
                mark = phase_done(profiled, "ffn_gate_up", layer, mark);
                gated_activation(r, a, feed_ith, feed_nth);
                if (!small)
                        barrier_before_matmul(r, w + 6, T, ith, nth);
                residual_matmul(r, w + 6, l->ffn_post_norm, a, row_scratch, ith, nth);
                if (layer + 1 < hp->n_layer)
                        barrier_before_matmul(r, w + WEIGHTS_PER_LAYER, T, ith, nth);
                else
                        barrier_before_matmul(r, n_matmul_weights(m) - 1, b->n_outputs, ith, nth);
                mark = phase_done(profiled, "ffn_down", layer, mark);
                if (profiled)
                        profiler_span(PROFILE_TRACK_ENGINE, "layer", "layer", layer_start, mark, "layer", layer);
        }

        hidden_states(r, ith, nth);
        norm_tokens(r, a, m->output_norm, b->output_tokens, b->n_outputs, feed_ith, feed_nth);
        if (!small)
                barrier_before_matmul(r, n_matmul_weights(m) - 1, b->n_outputs, ith, nth);
        matmul(r, n_matmul_weights(m) - 1, a, b->n_outputs, r->logits, hp->n_vocab, false, row_scratch, ith, nth);
        if (hp->logit_softcap != 0.0f && r->logits) {
                thread_pool_barrier(r->pool);
                softcap_logits(r, ith, nth);
        }
        /* thread 0's own share of the logits: the others may still be at theirs */
        phase_done(profiled, "logits", hp->n_layer, mark);
}

static void run_slice(struct cpu_runner *r, const struct batch *slice, float *logits) {
        unsigned nth = r->config.n_threads;
        for (size_t i = 0; i < n_matmul_weights(r->model); i++) {
                const struct packed_weights *packed = packed_for(r, i);
                if (packed)
                        matmul_shares_reset(&r->shares[i * nth], nth, packed->n_groups);
        }
        r->batch = slice;
        r->logits = logits;
        if (r->k_quants)
                set_k_orders(r, slice);
        r->store_own_kv = attention_stores_own_kv(slice);
        r->shared_attention = attention_is_shared(r, r->store_own_kv, nth);
        thread_pool_run(r->pool, forward_worker, r);
        r->batch = NULL;
        r->logits = NULL;
}

int cpu_runner_forward(struct cpu_runner *r, const struct batch *batch, float *logits, struct error *err) {
        static const char *const what[] = {
                [BACKEND_MEMORY_WEIGHTS] = "model weights are",
                [BACKEND_MEMORY_KV_CACHE] = "KV cache is",
                [BACKEND_MEMORY_WEIGHTS | BACKEND_MEMORY_KV_CACHE] = "model weights and the KV cache are",
        };
        if (r->released)
                return error_set(err, EBUSY, "cannot run a step: the %s released (the engine is asleep)",
                                 what[r->released]);
        struct batch_limits limits = {
                .max_tokens = r->config.max_batch_tokens,
                .max_model_len = r->config.max_model_len,
                .n_vocab = r->model->hp.n_vocab,
                .block_size = r->kv->block_size,
                .n_blocks = r->kv->n_blocks,
        };
        int rc = batch_validate(batch, &limits, err);
        if (rc < 0)
                return rc;
        /* A long step goes through the layers in slices of consecutive tokens: a slice's
         * tokens read the keys and values of earlier slices' tokens as a later chunk reads
         * an earlier chunk's, so each token gets the bits it would get in one slice. */
        uint32_t n_vocab = r->model->hp.n_vocab, n_embd = r->model->hp.n_embd, out = 0, hid = 0;
        for (uint32_t first = 0; first < batch->n_tokens; first += r->slice_tokens) {
                uint32_t n = batch->n_tokens - first < r->slice_tokens ? batch->n_tokens - first : r->slice_tokens;
                uint32_t n_out = 0, n_hid = 0;
                for (; out + n_out < batch->n_outputs && (uint32_t) batch->output_tokens[out + n_out] < first + n; n_out++)
                        r->slice_outputs[n_out] = batch->output_tokens[out + n_out] - (int32_t) first;
                for (; hid + n_hid < batch->n_hidden && (uint32_t) batch->hidden_tokens[hid + n_hid] < first + n; n_hid++)
                        r->slice_hidden[n_hid] = batch->hidden_tokens[hid + n_hid] - (int32_t) first;
                struct batch slice = {
                        .n_tokens = n,
                        .tokens = batch->tokens + first,
                        .positions = batch->positions + first,
                        .seq_ids = batch->seq_ids + first,
                        .n_seqs = batch->n_seqs,
                        .seqs = batch->seqs,
                        .n_outputs = n_out,
                        .output_tokens = r->slice_outputs,
                        .n_hidden = n_hid,
                        .hidden_tokens = r->slice_hidden,
                        .hidden = batch->hidden ? batch->hidden + (size_t) hid * n_embd : NULL,
                };
                run_slice(r, &slice, logits ? logits + (size_t) out * n_vocab : NULL);
                out += n_out;
                hid += n_hid;
        }
        return 0;
}
