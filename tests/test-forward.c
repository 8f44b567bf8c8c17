/* SPDX-License-Identifier: MIT */
/* The CPU forward pass on synthetic Llama and Gemma 3 models of several shapes and weight
 * types (files the test writes itself): against a plain token-at-a-time reference written
 * here, and for invariance: the same logits alone or batched with other sequences, however
 * the prompt is chunked, whatever blocks hold its KV cache, with any thread count; and the
 * same logits with the packed product as with the tiles. Sequences run well past the Gemma
 * shapes' sliding windows, far enough that attention skips whole blocks before them. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-runner.h"
#include "dot.h"
#include "float16.h"
#include "model.h"
#include "quantize.h"
#include "synthetic-llama.h"
#include "test-helpers.h"

#define MAX_LEN 160
#define BLOCK_SIZE 4

static struct model *load_synthetic(const struct synthetic_llama_config *cfg) {
        char *dir = test_tmpdir();
        char *path = test_path_join(dir, "model.gguf");
        struct model *m;
        struct error err;
        ck_assert_int_eq(synthetic_llama_write(path, cfg), 0);
        ck_assert_msg(model_load(path, &m, &err) == 0, "%s", err.message);
        free(path);
        test_tmpdir_remove(dir); /* the mapping outlives the unlinked file */
        return m;
}

/* --- the reference: one token at a time, contiguous f16 KV, scalar kernels ------------------ */

struct reference {
        const struct model *m;
        f16_bits *k, *v; /* (n_layer, MAX_LEN, kv_dim) */
        uint32_t length;
};

static float round_f16(float x) {
        return f16_to_f32(f32_to_f16(x));
}

static void ref_matvec(const struct weight *w, const float *x, float *out) {
        float *row = malloc(sizeof(float) * w->n_cols);
        struct block_q8_1 *xq = malloc(sizeof(*xq) * (w->n_cols / QUANT_BLOCK));
        dot_q_fn dot = dot_kernel_for(&dot_kernels_scalar, w->type);
        dot_k_fn dot_k = dot_k_kernel_for(&dot_kernels_scalar, w->type);
        quantize_row_q8_1(x, xq, w->n_cols);
        if (dot_k) { /* one token at a time: llama.cpp's single-token order */
                struct block_q8_K *xk = malloc(sizeof(*xk) * (w->n_cols / QK_K));
                quantize_row_q8_K(x, xk, w->n_cols);
                for (uint64_t r = 0; r < w->n_rows; r++)
                        out[r] = dot_k(w->data + r * w->row_bytes, xk, w->n_cols / QK_K, false);
                free(xk);
        }
        for (uint64_t r = 0; r < w->n_rows; r++) {
                const uint8_t *wrow = w->data + r * w->row_bytes;
                if (dot_k)
                        break;
                if (dot) {
                        out[r] = dot(wrow, xq, w->n_cols / QUANT_BLOCK);
                        continue;
                }
                tensor_row_to_float(w->type, wrow, row, w->n_cols);
                double s = 0.0;
                for (uint64_t i = 0; i < w->n_cols; i++)
                        s += (double) row[i] * x[i];
                out[r] = (float) s;
        }
        free(row);
        free(xq);
}

static void ref_rmsnorm(const float *x, const float *w, float *out, uint32_t n, float eps) {
        double ss = 0.0;
        for (uint32_t i = 0; i < n; i++)
                ss += (double) x[i] * x[i];
        float scale = (float) (1.0 / sqrt(ss / n + eps));
        for (uint32_t i = 0; i < n; i++)
                out[i] = x[i] * scale * w[i];
}

/* RoPE from its definition in double: pair i's angle pos * base^(-2i / rope_dim) divided by
 * its frequency factor, scaled, blended by YaRN's ramp, its cosine and sine times the
 * magnitude. */
static void ref_rope(float *x, uint32_t n_heads, const struct model *m, bool sliding, uint32_t pos) {
        const struct model_hparams *hp = &m->hp;
        uint32_t half = hp->rope_dim / 2;
        double base = sliding ? hp->rope_theta_local : hp->rope_theta, scale = sliding ? 1.0 : hp->rope_scale;
        const float *factors = model_rope_factors(m, MAX_LEN);
        double magnitude = hp->rope_attn_factor * (hp->rope_ext_factor != 0.0f ? 1.0 + 0.1 * log(1.0 / scale) : 1.0);
        /* the pairs that turn beta_fast and beta_slow times in the original context */
        double low = floor(hp->rope_dim * log(hp->n_ctx_orig / (hp->rope_beta_fast * 2 * M_PI)) / (2 * log(base)));
        double high = ceil(hp->rope_dim * log(hp->n_ctx_orig / (hp->rope_beta_slow * 2 * M_PI)) / (2 * log(base)));
        low = fmax(low, 0.0);
        high = fmin(high, hp->rope_dim - 1.0);
        for (uint32_t h = 0; h < n_heads; h++)
                for (uint32_t i = 0; i < half; i++) {
                        double unscaled = pos * pow(base, -2.0 * i / hp->rope_dim) / (factors ? factors[i] : 1.0);
                        double mix = (1.0 - fmin(1.0, fmax(0.0, (i - low) / fmax(0.001, high - low)))) * hp->rope_ext_factor;
                        double angle = scale * unscaled * (1.0 - mix) + unscaled * mix;
                        float c = (float) (cos(angle) * magnitude), s = (float) (sin(angle) * magnitude);
                        float *p = x + h * hp->head_dim + (hp->rope_pairing == ROPE_HALVES ? i : 2 * i);
                        float *p2 = p + (hp->rope_pairing == ROPE_HALVES ? half : 1);
                        float a = *p, b = *p2;
                        *p = a * c - b * s;
                        *p2 = a * s + b * c;
                }
}

static void add_bias(float *x, const float *bias, uint32_t n) {
        for (uint32_t i = 0; bias && i < n; i++)
                x[i] += bias[i];
}

/* GELU's tanh form in double, at x rounded to f16 and rounded to f16, as llama.cpp tabulates
 * it (x itself from 10 up, 0 from -10 down). */
static float ref_gelu(float x) {
        if (x <= -10.0f || x >= 10.0f)
                return x <= -10.0f ? 0.0f : x;
        double h = round_f16(x);
        return round_f16((float) (0.5 * h * (1.0 + tanh(0.7978845608028654 * h * (1.0 + 0.044715 * h * h)))));
}

/* x += norm(branch) * post_norm, or x += branch without one. */
static void ref_residual(float *x, float *branch, const float *post_norm, const struct model_hparams *hp) {
        if (post_norm)
                ref_rmsnorm(branch, post_norm, branch, hp->n_embd, hp->rms_eps);
        for (uint32_t i = 0; i < hp->n_embd; i++)
                x[i] += branch[i];
}

/* One token through the reference; hidden (may be NULL) gets its final hidden state. */
static void ref_step(struct reference *ref, int32_t token, float *logits, float *hidden) {
        const struct model *m = ref->m;
        const struct model_hparams *hp = &m->hp;
        uint32_t E = hp->n_embd, hd = hp->head_dim, qd = hp->n_head * hd, kvd = hp->n_head_kv * hd, F = hp->n_ff;
        uint32_t pos = ref->length++;
        float *x = calloc(E, 4), *xn = calloc(qd > E ? qd : E, 4), *q = calloc(qd, 4), *k = calloc(kvd, 4),
              *v = calloc(kvd, 4), *att = calloc(qd, 4), *tmp = calloc(E > F ? E : F, 4), *g = calloc(F, 4),
              *u = calloc(F, 4), *scores = calloc(MAX_LEN, 4);

        tensor_row_to_float(m->token_embd.type, m->token_embd.data + (uint64_t) token * m->token_embd.row_bytes, x, E);
        for (uint32_t i = 0; i < E; i++)
                x[i] *= hp->embd_scale;
        for (uint32_t l = 0; l < hp->n_layer; l++) {
                const struct model_layer *L = &m->layers[l];
                /* a sliding layer sees the positions pos - window + 1 .. pos */
                uint32_t first = L->sliding && pos >= hp->sliding_window ? pos + 1 - hp->sliding_window : 0;
                ref_rmsnorm(x, L->attn_norm, xn, E, hp->rms_eps);
                ref_matvec(&L->wq, xn, q);
                ref_matvec(&L->wk, xn, k);
                ref_matvec(&L->wv, xn, v);
                add_bias(q, L->bq, qd);
                add_bias(k, L->bk, kvd);
                add_bias(v, L->bv, kvd);
                for (uint32_t h = 0; L->attn_q_norm && h < hp->n_head; h++)
                        ref_rmsnorm(q + h * hd, L->attn_q_norm, q + h * hd, hd, hp->rms_eps);
                for (uint32_t h = 0; L->attn_k_norm && h < hp->n_head_kv; h++)
                        ref_rmsnorm(k + h * hd, L->attn_k_norm, k + h * hd, hd, hp->rms_eps);
                ref_rope(q, hp->n_head, m, L->sliding, pos);
                ref_rope(k, hp->n_head_kv, m, L->sliding, pos);
                double temperature = 1.0 + hp->attn_temp_scale * log(floor((double) pos / hp->n_ctx_orig) + 1.0);
                for (uint32_t i = 0; i < qd; i++)
                        q[i] *= temperature * hp->query_scale;
                for (uint32_t i = 0; i < kvd; i++) {
                        ref->k[((size_t) l * MAX_LEN + pos) * kvd + i] = f32_to_f16(k[i]);
                        ref->v[((size_t) l * MAX_LEN + pos) * kvd + i] = f32_to_f16(v[i]);
                }
                for (uint32_t h = 0; h < hp->n_head; h++) {
                        uint32_t kvh = h / (hp->n_head / hp->n_head_kv);
                        double max = -INFINITY, sum = 0.0;
                        for (uint32_t j = first; j <= pos; j++) {
                                double s = 0.0;
                                for (uint32_t i = 0; i < hd; i++)
                                        s += (double) round_f16(q[h * hd + i]) *
                                             f16_to_f32(ref->k[((size_t) l * MAX_LEN + j) * kvd + kvh * hd + i]);
                                scores[j] = (float) (s * hp->score_scale);
                                max = fmax(max, scores[j]);
                        }
                        for (uint32_t j = first; j <= pos; j++)
                                sum += exp(scores[j] - max);
                        for (uint32_t i = 0; i < hd; i++) {
                                double o = 0.0;
                                for (uint32_t j = first; j <= pos; j++)
                                        o += round_f16((float) (exp(scores[j] - max) / sum)) *
                                             f16_to_f32(ref->v[((size_t) l * MAX_LEN + j) * kvd + kvh * hd + i]);
                                att[h * hd + i] = (float) o;
                        }
                }
                ref_matvec(&L->wo, att, tmp);
                ref_residual(x, tmp, L->attn_post_norm, hp);
                ref_rmsnorm(x, L->ffn_norm, xn, E, hp->rms_eps);
                ref_matvec(&L->w_gate, xn, g);
                ref_matvec(&L->w_up, xn, u);
                for (uint32_t i = 0; i < F; i++)
                        g[i] = (hp->ffn_activation == FFN_GELU ? ref_gelu(g[i]) : g[i] / (1.0f + expf(-g[i]))) * u[i];
                ref_matvec(&L->w_down, g, tmp);
                ref_residual(x, tmp, L->ffn_post_norm, hp);
        }
        ref_rmsnorm(x, m->output_norm, xn, E, hp->rms_eps);
        if (hidden)
                memcpy(hidden, xn, sizeof(float) * E);
        ref_matvec(&m->output, xn, logits);
        free(x); free(xn); free(q); free(k); free(v); free(att); free(tmp); free(g); free(u); free(scores);
}

/* --- helpers to drive the runner ----------------------------------------------------------- */

static struct cpu_runner *new_sliced_runner(const struct model *m, unsigned threads, uint32_t max_batch,
                                            uint32_t max_slice) {
        struct cpu_runner_config config = {
                .n_threads = threads, .max_batch_tokens = max_batch, .max_model_len = MAX_LEN,
                .block_size = BLOCK_SIZE, .n_kv_blocks = 4 * MAX_LEN / BLOCK_SIZE, .max_slice_tokens = max_slice,
        };
        struct cpu_runner *r;
        struct error err;
        ck_assert_msg(cpu_runner_new(m, &config, &r, &err) == 0, "%s", err.message);
        return r;
}

static struct cpu_runner *new_runner(const struct model *m, unsigned threads, uint32_t max_batch) {
        return new_sliced_runner(m, threads, max_batch, 0);
}

struct test_seq {
        const int32_t *tokens;
        uint32_t n_tokens;
        int32_t block_table[MAX_LEN / BLOCK_SIZE];
};

/* Runs the sequences to the end, each step taking up to `chunk` tokens of every unfinished
 * sequence in one batch; logits[s] receives one row per token of sequence s. */
static void run_batched(struct cpu_runner *r, const struct model *m, struct test_seq *seqs, uint32_t n_seqs,
                        uint32_t chunk, float **logits) {
        uint32_t V = m->hp.n_vocab, done[8] = { 0 };
        int32_t tokens[256], positions[256], seq_ids[256], outputs[256];
        struct batch_seq bs[8];
        float *out = malloc(sizeof(float) * 256 * V);
        for (;;) {
                uint32_t n = 0;
                for (uint32_t s = 0; s < n_seqs; s++) {
                        bs[s] = (struct batch_seq) { seqs[s].block_table, MAX_LEN / BLOCK_SIZE, seqs[s].n_tokens / 2 };
                        for (uint32_t i = 0; i < chunk && done[s] + i < seqs[s].n_tokens; i++, n++) {
                                tokens[n] = seqs[s].tokens[done[s] + i];
                                positions[n] = (int32_t) (done[s] + i);
                                seq_ids[n] = (int32_t) s;
                                outputs[n] = (int32_t) n;
                        }
                }
                if (n == 0)
                        break;
                struct batch b = { .n_tokens = n, .tokens = tokens, .positions = positions, .seq_ids = seq_ids,
                        .n_seqs = n_seqs, .seqs = bs, .n_outputs = n, .output_tokens = outputs };
                struct error err;
                ck_assert_msg(cpu_runner_forward(r, &b, out, &err) == 0, "%s", err.message);
                for (uint32_t t = 0; t < n; t++) {
                        uint32_t s = (uint32_t) seq_ids[t];
                        memcpy(logits[s] + (size_t) positions[t] * V, out + (size_t) t * V, sizeof(float) * V);
                }
                for (uint32_t s = 0; s < n_seqs; s++)
                        done[s] = done[s] + chunk < seqs[s].n_tokens ? done[s] + chunk : seqs[s].n_tokens;
        }
        free(out);
}

static const struct synthetic_llama_config shapes[] = {
        { .n_layer = 2, .n_embd = 64, .n_ff = 128, .n_head = 4, .n_head_kv = 2, .n_vocab = 300, .n_ctx = 128,
          .weight_type = TENSOR_Q4_1, .embd_type = TENSOR_Q8_0, .tied_output = true, .seed = 1 },
        { .n_layer = 3, .n_embd = 96, .n_ff = 160, .n_head = 6, .n_head_kv = 1, .n_vocab = 320, .n_ctx = 128,
          .weight_type = TENSOR_Q4_0, .embd_type = TENSOR_F16, .tied_output = false, .rope_theta = 100000, .seed = 2 },
        { .n_layer = 1, .n_embd = 128, .n_ff = 256, .n_head = 8, .n_head_kv = 8, .n_vocab = 260, .n_ctx = 64,
          .weight_type = TENSOR_Q8_0, .embd_type = TENSOR_Q8_0, .tied_output = true, .seed = 3 },
        { .n_layer = 2, .n_embd = 64, .n_ff = 96, .n_head = 2, .n_head_kv = 1, .n_vocab = 270, .n_ctx = 64,
          .weight_type = TENSOR_F32, .embd_type = TENSOR_F32, .tied_output = false, .seed = 4 },
        { .n_layer = 2, .n_embd = 64, .n_ff = 128, .n_head = 4, .n_head_kv = 4, .n_vocab = 280, .n_ctx = 64,
          .weight_type = TENSOR_F16, .embd_type = TENSOR_BF16, .tied_output = true, .seed = 5 },
        { .n_layer = 2, .n_embd = 64, .n_ff = 128, .n_head = 4, .n_head_kv = 2, .n_vocab = 290, .n_ctx = 64,
          .weight_type = TENSOR_BF16, .embd_type = TENSOR_Q4_1, .tied_output = false, .seed = 6 },
        { .n_layer = 2, .n_embd = 96, .n_ff = 160, .n_head = 3, .n_head_kv = 1, .n_vocab = 310, .n_ctx = 64,
          .weight_type = TENSOR_Q5_0, .embd_type = TENSOR_Q5_1, .tied_output = false, .seed = 7 },
        { .n_layer = 2, .n_embd = 64, .n_ff = 128, .n_head = 4, .n_head_kv = 2, .n_vocab = 300, .n_ctx = 64,
          .weight_type = TENSOR_Q5_1, .embd_type = TENSOR_Q5_0, .tied_output = true, .seed = 8 },
        /* K-quants: every type as the layers' weights and as the embedding (tied or the
         * output), widths of whole 256-element super-blocks */
        { .n_layer = 1, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2, .n_vocab = 300, .n_ctx = 64,
          .weight_type = TENSOR_Q4_K, .embd_type = TENSOR_Q6_K, .tied_output = true, .seed = 14 },
        { .n_layer = 1, .n_embd = 256, .n_ff = 256, .n_head = 2, .n_head_kv = 1, .n_vocab = 280, .n_ctx = 64,
          .weight_type = TENSOR_Q6_K, .embd_type = TENSOR_Q2_K, .tied_output = false, .seed = 15 },
        { .n_layer = 1, .n_embd = 256, .n_ff = 256, .n_head = 4, .n_head_kv = 4, .n_vocab = 290, .n_ctx = 64,
          .weight_type = TENSOR_Q5_K, .embd_type = TENSOR_Q3_K, .tied_output = false, .seed = 16 },
        { .n_layer = 1, .n_embd = 256, .n_ff = 256, .n_head = 4, .n_head_kv = 1, .n_vocab = 270, .n_ctx = 64,
          .weight_type = TENSOR_Q3_K, .embd_type = TENSOR_Q5_K, .tied_output = true, .seed = 17 },
        { .n_layer = 1, .n_embd = 256, .n_ff = 256, .n_head = 2, .n_head_kv = 2, .n_vocab = 260, .n_ctx = 64,
          .weight_type = TENSOR_Q2_K, .embd_type = TENSOR_Q4_K, .tied_output = true, .seed = 18 },
        /* The Llama layout's variations: qwen2's query, key and value biases under YaRN (an
         * original context whose ramp spans pairs 10 to 23 of 32); qwen3's query and key norms
         * with Llama 3's frequency factors; phi3's fused projections and long factors (the
         * served 160 positions pass its original 32); mistral3's attention temperature, the
         * queries scaled by up to 1.8 over an original context of 4 */
        { .architecture = "qwen2", .n_layer = 2, .n_embd = 128, .n_ff = 192, .n_head = 2, .n_head_kv = 1,
          .n_vocab = 300, .n_ctx = 4096, .weight_type = TENSOR_F32, .embd_type = TENSOR_Q8_0, .tied_output = false,
          .rope_scaling_type = "yarn", .rope_scaling_factor = 4.0f, .rope_scaling_original_context = 4096,
          .seed = 19 },
        { .architecture = "qwen3", .n_layer = 2, .n_embd = 128, .n_ff = 192, .n_head = 4, .n_head_kv = 2,
          .n_vocab = 290, .n_ctx = 64, .weight_type = TENSOR_F16, .embd_type = TENSOR_F16, .tied_output = true,
          .rope_freqs = true, .rope_theta = 500000, .seed = 20 },
        { .architecture = "phi3", .n_layer = 2, .n_embd = 96, .n_ff = 160, .n_head = 3, .n_head_kv = 3,
          .n_vocab = 280, .n_ctx = 256, .weight_type = TENSOR_Q8_0, .embd_type = TENSOR_Q8_0, .tied_output = false,
          .rope_scaling_original_context = 32, .seed = 21 },
        { .architecture = "mistral3", .n_layer = 2, .n_embd = 64, .n_ff = 128, .n_head = 4, .n_head_kv = 2,
          .n_vocab = 300, .n_ctx = 64, .weight_type = TENSOR_F32, .embd_type = TENSOR_F32, .tied_output = false,
          .rope_scaling_original_context = 4, .attention_temperature_scale = 0.5f, .seed = 22 },
        /* Gemma 3: heads wider than n_embd / n_head, sliding and global layers (every second
         * global) with their own RoPE bases, a window of 8; float weights, so that no
         * activation quantization hides a last-bit difference from the invariance checks */
        { .architecture = "gemma3", .n_layer = 3, .n_embd = 64, .n_ff = 128, .n_head = 2, .n_head_kv = 1,
          .head_dim = 64, .n_vocab = 300, .n_ctx = 256, .weight_type = TENSOR_F32, .embd_type = TENSOR_Q8_0,
          .tied_output = true, .rope_theta = 1e6f, .rope_theta_local = 10000.0f, .sliding_window = 8,
          .sliding_window_pattern = 2, .seed = 12 },
        /* every layer sliding (pattern 3 over 2 layers), heads of 32 (one position at a time),
         * a window of 5, the default pattern's local base */
        { .architecture = "gemma3", .n_layer = 2, .n_embd = 96, .n_ff = 160, .n_head = 3, .n_head_kv = 3,
          .head_dim = 32, .n_vocab = 310, .n_ctx = 256, .weight_type = TENSOR_Q5_0, .embd_type = TENSOR_F16,
          .tied_output = false, .sliding_window = 5, .sliding_window_pattern = 3, .seed = 13 },
};
#define N_GEMMA_SHAPES 2

static void make_tokens(int32_t *tokens, uint32_t n, uint32_t n_vocab, uint32_t salt) {
        for (uint32_t i = 0; i < n; i++)
                tokens[i] = (int32_t) ((i * 2654435761u + salt * 40503u) % n_vocab);
}

START_TEST(test_matches_reference) {
        const struct synthetic_llama_config *cfg = &shapes[_i];
        struct model *m = load_synthetic(cfg);
        uint32_t V = m->hp.n_vocab, n = 20, kvd = m->hp.n_head_kv * m->hp.head_dim;
        ck_assert_uint_eq(m->hp.n_embd, cfg->n_embd);
        ck_assert_uint_eq(m->hp.n_head_kv, cfg->n_head_kv);
        ck_assert(m->tied_output == cfg->tied_output);

        int32_t tokens[20];
        make_tokens(tokens, n, V, 7);
        struct test_seq seq = { tokens, n, { 0 } };
        for (uint32_t i = 0; i < MAX_LEN / BLOCK_SIZE; i++)
                seq.block_table[i] = (int32_t) (MAX_LEN / BLOCK_SIZE - 1 - i) * 2; /* scattered blocks */
        float *got = malloc(sizeof(float) * n * V), *want = malloc(sizeof(float) * V);
        struct cpu_runner *r = new_runner(m, 2, 64);
        float *rows[1] = { got };
        run_batched(r, m, &seq, 1, n, rows); /* the whole prompt in one pass */

        struct reference ref = { m, calloc((size_t) m->hp.n_layer * MAX_LEN * kvd, 2),
                                 calloc((size_t) m->hp.n_layer * MAX_LEN * kvd, 2), 0 };
        double worst = 0.0;
        for (uint32_t t = 0; t < n; t++) {
                ref_step(&ref, tokens[t], want, NULL);
                double scale = 0.0;
                for (uint32_t v = 0; v < V; v++)
                        scale = fmax(scale, fabs(want[v]));
                for (uint32_t v = 0; v < V; v++) {
                        double e = fabs(got[(size_t) t * V + v] - want[v]) / (scale + 1e-6);
                        worst = fmax(worst, e);
                }
        }
        printf("shape %d (%s weights): largest logit error relative to the logit range %.2e\n", _i,
               tensor_type_info(cfg->weight_type)->name, worst);
        /* Same quantization steps on both sides: only float summation order and the RoPE
         * angle's rounding differ, which can flip an int8 rounding of an activation or the
         * f16 rounding of a query (one token's logits, 2e-3 of the range) now and then. */
        ck_assert_msg(worst < 5e-3, "shape %d: relative error %.3e", _i, worst);
        free(ref.k);
        free(ref.v);
        free(got);
        free(want);
        cpu_runner_free(r);
        model_free(m);
}
END_TEST

/* The final hidden states a batch asks for (what embeddings pool) are the reference's, for
 * the tokens asked, across slices; asking for them changes no logit bit. */
START_TEST(test_hidden_states) {
        const struct synthetic_llama_config *cfg = &shapes[_i];
        struct model *m = load_synthetic(cfg);
        uint32_t V = m->hp.n_vocab, E = m->hp.n_embd, n = 20, kvd = m->hp.n_head_kv * m->hp.head_dim;
        int32_t tokens[20], positions[20], seq_ids[20], outputs[20], wanted[20];
        uint32_t n_wanted = 0;
        make_tokens(tokens, n, V, 11);
        int32_t table[MAX_LEN / BLOCK_SIZE];
        for (uint32_t i = 0; i < MAX_LEN / BLOCK_SIZE; i++)
                table[i] = (int32_t) i;
        for (uint32_t t = 0; t < n; t++) {
                positions[t] = (int32_t) t;
                seq_ids[t] = 0;
                outputs[t] = (int32_t) t;
                if (t % 3 == 0 || t == n - 1)
                        wanted[n_wanted++] = (int32_t) t;
        }
        struct batch_seq bs = { table, MAX_LEN / BLOCK_SIZE, n };
        float *plain = malloc(sizeof(float) * n * V), *with = malloc(sizeof(float) * n * V);
        float *hidden = malloc(sizeof(float) * n_wanted * E), *want = malloc(sizeof(float) * V),
              *want_hidden = malloc(sizeof(float) * E);
        struct error err;
        struct cpu_runner *r = new_sliced_runner(m, 2, 64, 7);
        struct batch b = { .n_tokens = n, .tokens = tokens, .positions = positions, .seq_ids = seq_ids,
                .n_seqs = 1, .seqs = &bs, .n_outputs = n, .output_tokens = outputs };
        ck_assert_msg(cpu_runner_forward(r, &b, plain, &err) == 0, "%s", err.message);
        b.n_hidden = n_wanted;
        b.hidden_tokens = wanted;
        b.hidden = hidden;
        ck_assert_msg(cpu_runner_forward(r, &b, with, &err) == 0, "%s", err.message);
        ck_assert_msg(memcmp(plain, with, sizeof(float) * n * V) == 0, "shape %d: hidden states changed the logits", _i);

        struct reference ref = { m, calloc((size_t) m->hp.n_layer * MAX_LEN * kvd, 2),
                                 calloc((size_t) m->hp.n_layer * MAX_LEN * kvd, 2), 0 };
        double worst = 0.0;
        for (uint32_t t = 0, w = 0; t < n; t++) {
                ref_step(&ref, tokens[t], want, want_hidden);
                if (w == n_wanted || wanted[w] != (int32_t) t)
                        continue;
                double scale = 0.0;
                for (uint32_t i = 0; i < E; i++)
                        scale = fmax(scale, fabs(want_hidden[i]));
                for (uint32_t i = 0; i < E; i++)
                        worst = fmax(worst, fabs(hidden[(size_t) w * E + i] - want_hidden[i]) / (scale + 1e-6));
                w++;
        }
        printf("shape %d: largest hidden-state error relative to its range %.2e\n", _i, worst);
        ck_assert_msg(worst < 5e-3, "shape %d: relative error %.3e", _i, worst);

        b.hidden = NULL; /* no room for what it asks */
        ck_assert_int_eq(cpu_runner_forward(r, &b, with, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "no room"));
        free(ref.k);
        free(ref.v);
        free(plain);
        free(with);
        free(hidden);
        free(want);
        free(want_hidden);
        cpu_runner_free(r);
        model_free(m);
}
END_TEST

START_TEST(test_invariance) {
        const struct synthetic_llama_config *cfg = &shapes[_i];
        struct model *m = load_synthetic(cfg);
        uint32_t V = m->hp.n_vocab, lens[3] = { 23, 9, 31 };
        int32_t tokens[3][31];
        struct test_seq seqs[3];
        float *alone[3], *together[3];
        for (uint32_t s = 0; s < 3; s++) {
                make_tokens(tokens[s], lens[s], V, s + 11);
                seqs[s] = (struct test_seq) { tokens[s], lens[s], { 0 } };
                for (uint32_t i = 0; i < MAX_LEN / BLOCK_SIZE; i++)
                        seqs[s].block_table[i] = (int32_t) (i * 3 + s); /* interleaved owners */
                alone[s] = calloc((size_t) lens[s] * V, sizeof(float));
                together[s] = calloc((size_t) lens[s] * V, sizeof(float));
        }

        /* three threads take a step in slices of 7 tokens: slices end inside sequences and
         * hold outputs of several */
        struct cpu_runner *one = new_runner(m, 1, 256), *three = new_sliced_runner(m, 3, 256, 7);
        for (uint32_t s = 0; s < 3; s++)
                run_batched(one, m, &seqs[s], 1, 1, &alone[s]); /* token by token, alone */
        static const uint32_t chunks[] = { 1, 5, 16, 64 };
        for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
                /* other blocks for the same sequences: block ids must not matter either */
                for (uint32_t s = 0; s < 3; s++)
                        for (uint32_t i = 0; i < MAX_LEN / BLOCK_SIZE; i++)
                                seqs[s].block_table[i] = (int32_t) (((i + c) % (MAX_LEN / BLOCK_SIZE)) * 3 + (s + c) % 3);
                run_batched(c % 2 ? three : one, m, seqs, 3, chunks[c], together);
                for (uint32_t s = 0; s < 3; s++)
                        ck_assert_msg(memcmp(alone[s], together[s], sizeof(float) * lens[s] * V) == 0,
                                      "shape %d: sequence %u differs batched in chunks of %u", _i, s, chunks[c]);
        }
        for (uint32_t s = 0; s < 3; s++) {
                free(alone[s]);
                free(together[s]);
        }
        cpu_runner_free(one);
        cpu_runner_free(three);
        model_free(m);
}
END_TEST

/* The packed product (ASYNCLLM_CPU_PACKED, on by default) computes llama.cpp's x86 order, as
 * the x86 tiles do, and a Q8_0 output's logits product is the same on both paths: the whole
 * forward pass has the same bits either way, for a prompt in one
 * pass, in chunks beside other sequences (more tokens at once than one pass takes), and
 * token by token. The scalar set's tiles keep an order of their own, so that set is left out. */
START_TEST(test_packed_matches_tiles) {
        const struct synthetic_llama_config *cfg = &shapes[_i];
        const struct dot_kernels *selected;
        ck_assert_int_eq(dot_kernels_select(&selected, NULL), 0);
        if (strcmp(selected->name, "scalar") == 0) {
                fprintf(stderr, "SKIP part: the scalar kernels' tiles do not use llama.cpp's x86 order\n");
                return;
        }
        struct model *m = load_synthetic(cfg);
        uint32_t V = m->hp.n_vocab, lens[3] = { 23, 9, 31 };
        int32_t tokens[3][31];
        struct test_seq seqs[3];
        float *got[2][3];
        for (uint32_t s = 0; s < 3; s++) {
                make_tokens(tokens[s], lens[s], V, s + 5);
                seqs[s] = (struct test_seq) { tokens[s], lens[s], { 0 } };
                for (uint32_t i = 0; i < MAX_LEN / BLOCK_SIZE; i++)
                        seqs[s].block_table[i] = (int32_t) (i * 3 + s);
        }
        static const uint32_t chunks[] = { 1, 5, 64 };
        for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
                for (int packed = 0; packed < 2; packed++) {
                        ck_assert_int_eq(setenv("ASYNCLLM_CPU_PACKED", packed ? "1" : "0", 1), 0);
                        struct cpu_runner *r = new_runner(m, 2, 256);
                        for (uint32_t s = 0; s < 3; s++)
                                got[packed][s] = calloc((size_t) lens[s] * V, sizeof(float));
                        run_batched(r, m, seqs, 3, chunks[c], got[packed]);
                        cpu_runner_free(r);
                }
                for (uint32_t s = 0; s < 3; s++) {
                        ck_assert_msg(memcmp(got[0][s], got[1][s], sizeof(float) * lens[s] * V) == 0,
                                      "shape %d (%s weights): sequence %u differs packed, in chunks of %u", _i,
                                      tensor_type_info(cfg->weight_type)->name, s, chunks[c]);
                        free(got[0][s]);
                        free(got[1][s]);
                }
        }
        /* any other value is an error that names it, not a silent default */
        ck_assert_int_eq(setenv("ASYNCLLM_CPU_PACKED", "yes", 1), 0);
        struct cpu_runner_config config = {
                .n_threads = 2, .max_batch_tokens = 64, .max_model_len = MAX_LEN, .block_size = BLOCK_SIZE,
                .n_kv_blocks = MAX_LEN / BLOCK_SIZE,
        };
        struct cpu_runner *r = NULL;
        struct error err;
        ck_assert_int_eq(cpu_runner_new(m, &config, &r, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "ASYNCLLM_CPU_PACKED=yes"));
        ck_assert_ptr_null(r);
        ck_assert_int_eq(unsetenv("ASYNCLLM_CPU_PACKED"), 0);
        model_free(m);
}
END_TEST

/* The Gemma shapes past their windows: positions to 149, so that attention starts reading
 * past whole runs of 64 positions outside the window. The model's hyperparameters as
 * written; the logits as the reference's for one long sequence; alone token by token, the
 * same bits batched in chunks with other sequences, sliced, on three threads, and with a
 * decode step's attention shared between the threads. */
START_TEST(test_sliding_window_long) {
        const struct synthetic_llama_config *cfg = &shapes[sizeof(shapes) / sizeof(shapes[0]) - N_GEMMA_SHAPES + _i];
        struct model *m = load_synthetic(cfg);
        const struct model_hparams *hp = &m->hp;
        ck_assert_uint_eq(hp->sliding_window, cfg->sliding_window);
        ck_assert_uint_eq(hp->head_dim, cfg->head_dim);
        ck_assert(hp->rope_pairing == ROPE_HALVES && hp->ffn_activation == FFN_GELU && m->post_norms);
        ck_assert_float_eq(hp->embd_scale, sqrtf((float) cfg->n_embd));
        ck_assert_float_eq(hp->query_scale, 1.0f / sqrtf((float) cfg->head_dim));
        ck_assert_float_eq(hp->rope_theta_local, cfg->rope_theta_local > 0.0f ? cfg->rope_theta_local : 10000.0f);
        for (uint32_t l = 0; l < hp->n_layer; l++)
                ck_assert(m->layers[l].sliding == (l % cfg->sliding_window_pattern < cfg->sliding_window_pattern - 1));

        uint32_t V = hp->n_vocab, kvd = hp->n_head_kv * hp->head_dim, lens[3] = { 150, 70, 131 };
        int32_t tokens[3][150];
        struct test_seq seqs[3];
        float *alone[3], *together[3];
        for (uint32_t s = 0; s < 3; s++) {
                make_tokens(tokens[s], lens[s], V, s + 21);
                seqs[s] = (struct test_seq) { tokens[s], lens[s], { 0 } };
                for (uint32_t i = 0; i < MAX_LEN / BLOCK_SIZE; i++)
                        seqs[s].block_table[i] = (int32_t) (i * 3 + 2 - s);
                alone[s] = calloc((size_t) lens[s] * V, sizeof(float));
                together[s] = calloc((size_t) lens[s] * V, sizeof(float));
        }
        struct cpu_runner *one = new_runner(m, 1, 256), *three = new_sliced_runner(m, 3, 256, 7);
        for (uint32_t s = 0; s < 3; s++)
                run_batched(one, m, &seqs[s], 1, 1, &alone[s]);

        struct reference ref = { m, calloc((size_t) hp->n_layer * MAX_LEN * kvd, 2),
                                 calloc((size_t) hp->n_layer * MAX_LEN * kvd, 2), 0 };
        float *want = malloc(sizeof(float) * V);
        double worst = 0.0;
        for (uint32_t t = 0; t < lens[0]; t++) {
                ref_step(&ref, tokens[0][t], want, NULL);
                double scale = 0.0;
                for (uint32_t v = 0; v < V; v++)
                        scale = fmax(scale, fabs(want[v]));
                for (uint32_t v = 0; v < V; v++)
                        worst = fmax(worst, fabs(alone[0][(size_t) t * V + v] - want[v]) / (scale + 1e-6));
        }
        printf("gemma shape %d over %u positions: largest logit error relative to the logit range %.2e\n", _i,
               lens[0], worst);
        ck_assert_msg(worst < 5e-3, "gemma shape %d: relative error %.3e", _i, worst);

        static const uint32_t chunks[] = { 7, 64, 1 };
        for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
                run_batched(c % 2 ? one : three, m, seqs, 3, chunks[c], together);
                for (uint32_t s = 0; s < 3; s++)
                        ck_assert_msg(memcmp(alone[s], together[s], sizeof(float) * lens[s] * V) == 0,
                                      "gemma shape %d: sequence %u differs batched in chunks of %u", _i, s, chunks[c]);
        }
        struct cpu_runner_config config = {
                .n_threads = 2, .max_batch_tokens = 64, .max_model_len = MAX_LEN, .block_size = BLOCK_SIZE,
                .n_kv_blocks = 4 * MAX_LEN / BLOCK_SIZE, .attn_split_positions = 1,
        };
        struct cpu_runner *shared;
        struct error err;
        ck_assert_msg(cpu_runner_new(m, &config, &shared, &err) == 0, "%s", err.message);
        run_batched(shared, m, seqs, 3, 1, together);
        for (uint32_t s = 0; s < 3; s++)
                ck_assert_msg(memcmp(alone[s], together[s], sizeof(float) * lens[s] * V) == 0,
                              "gemma shape %d: sequence %u differs with shared attention", _i, s);
        for (uint32_t s = 0; s < 3; s++) {
                free(alone[s]);
                free(together[s]);
        }
        free(ref.k);
        free(ref.v);
        free(want);
        cpu_runner_free(one);
        cpu_runner_free(three);
        cpu_runner_free(shared);
        model_free(m);
}
END_TEST

START_TEST(test_rejects_bad_batches) {
        struct model *m = load_synthetic(&shapes[0]);
        struct cpu_runner *r = new_runner(m, 2, 8);
        int32_t table[MAX_LEN / BLOCK_SIZE] = { 0 }, tok = 5, pos = 0, sid = 0, out = 0;
        struct batch_seq bs = { table, MAX_LEN / BLOCK_SIZE, 0 };
        float *logits = malloc(sizeof(float) * m->hp.n_vocab);
        struct error err;
        struct batch b = { .n_tokens = 1, .tokens = &tok, .positions = &pos, .seq_ids = &sid,
                .n_seqs = 1, .seqs = &bs, .n_outputs = 1, .output_tokens = &out };

        tok = (int32_t) m->hp.n_vocab;
        ck_assert_int_eq(cpu_runner_forward(r, &b, logits, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "outside the vocabulary"));
        tok = 5;
        pos = MAX_LEN;
        ck_assert_int_eq(cpu_runner_forward(r, &b, logits, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "position"));
        pos = 0;
        table[0] = 4 * MAX_LEN / BLOCK_SIZE;
        ck_assert_int_eq(cpu_runner_forward(r, &b, logits, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "block id"));
        table[0] = 0;
        sid = 1;
        ck_assert_int_eq(cpu_runner_forward(r, &b, logits, &err), -EINVAL);
        sid = 0;
        b.n_tokens = 9;
        ck_assert_int_eq(cpu_runner_forward(r, &b, logits, &err), -EINVAL);
        int32_t toks[2] = { 5, 6 }, poss[2] = { 0, 1 }, sids[2] = { 0, 0 }, outs[2] = { 1, 0 };
        struct batch two = { .n_tokens = 2, .tokens = toks, .positions = poss, .seq_ids = sids,
                .n_seqs = 1, .seqs = &bs, .n_outputs = 2, .output_tokens = outs };
        ck_assert_int_eq(cpu_runner_forward(r, &two, logits, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "must rise"));
        b.n_tokens = 1;
        ck_assert_int_eq(cpu_runner_forward(r, &b, logits, &err), 0);
        free(logits);
        cpu_runner_free(r);
        model_free(m);
}
END_TEST

/* A decode step's attention shared between the threads (cpu_runner_config's
 * attn_split_positions) gives the bits of one thread per (token, key-value head): for one
 * sequence and for three decoding together, from the first position on (below a block, and
 * below 16 positions, one thread's share of positions or of rows is empty), with heads of 16
 * and 32 elements (one position at a time) and of 64 (the kernels' runs of positions). */
static const struct synthetic_llama_config shared_attention_shapes[] = {
        { .n_layer = 2, .n_embd = 128, .n_ff = 128, .n_head = 2, .n_head_kv = 1, .n_vocab = 280, .n_ctx = 64,
          .weight_type = TENSOR_Q4_1, .embd_type = TENSOR_Q8_0, .tied_output = true, .seed = 9 },
        { .n_layer = 2, .n_embd = 192, .n_ff = 128, .n_head = 3, .n_head_kv = 3, .n_vocab = 280, .n_ctx = 64,
          .weight_type = TENSOR_Q8_0, .embd_type = TENSOR_Q8_0, .tied_output = true, .seed = 10 },
};

START_TEST(test_shared_attention_matches) {
        const struct synthetic_llama_config *cfg = _i < 2 ? &shared_attention_shapes[_i] : &shapes[_i - 2];
        struct model *m = load_synthetic(cfg);
        uint32_t V = m->hp.n_vocab, lens[3] = { 40, 17, 64 };
        int32_t tokens[3][64];
        struct test_seq seqs[3];
        for (uint32_t s = 0; s < 3; s++) {
                make_tokens(tokens[s], lens[s], V, s + 11);
                seqs[s] = (struct test_seq) { tokens[s], lens[s], { 0 } };
                for (uint32_t i = 0; i < MAX_LEN / BLOCK_SIZE; i++)
                        seqs[s].block_table[i] = (int32_t) (i * 3 + 2 - s);
        }
        for (uint32_t n_seqs = 1; n_seqs <= 3; n_seqs += 2) {
                float *got[2][3];
                for (int shared = 0; shared < 2; shared++) {
                        struct cpu_runner_config config = {
                                .n_threads = 2, .max_batch_tokens = 64, .max_model_len = MAX_LEN,
                                .block_size = BLOCK_SIZE, .n_kv_blocks = 4 * MAX_LEN / BLOCK_SIZE,
                                .attn_split_positions = shared ? 1 : UINT32_MAX,
                        };
                        struct cpu_runner *r;
                        struct error err;
                        ck_assert_msg(cpu_runner_new(m, &config, &r, &err) == 0, "%s", err.message);
                        for (uint32_t s = 0; s < n_seqs; s++)
                                got[shared][s] = calloc((size_t) lens[s] * V, sizeof(float));
                        run_batched(r, m, seqs, n_seqs, 1, got[shared]);
                        cpu_runner_free(r);
                }
                for (uint32_t s = 0; s < n_seqs; s++) {
                        for (uint32_t j = 0; j < lens[s]; j++)
                                ck_assert_msg(memcmp(got[0][s] + (size_t) j * V, got[1][s] + (size_t) j * V,
                                                     sizeof(float) * V) == 0,
                                              "shape %d: sequence %u of %u, position %u differs with shared attention",
                                              _i, s, n_seqs, j);
                        free(got[0][s]);
                        free(got[1][s]);
                }
        }
        model_free(m);
}
END_TEST

int main(void) {
        Suite *s = suite_create("forward");
        TCase *tc = tcase_create("forward");
        tcase_set_timeout(tc, 300);
        int n_shapes = (int) (sizeof(shapes) / sizeof(shapes[0]));
        tcase_add_loop_test(tc, test_matches_reference, 0, n_shapes);
        tcase_add_loop_test(tc, test_invariance, 0, n_shapes);
        tcase_add_loop_test(tc, test_hidden_states, 0, n_shapes);
        tcase_add_loop_test(tc, test_packed_matches_tiles, 0, n_shapes);
        tcase_add_test(tc, test_rejects_bad_batches);
        tcase_add_loop_test(tc, test_shared_attention_matches, 0, 2 + n_shapes);
        tcase_add_loop_test(tc, test_sliding_window_long, 0, N_GEMMA_SHAPES);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
