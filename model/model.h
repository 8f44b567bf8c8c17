/* SPDX-License-Identifier: MIT */
#pragma once

/* A decoder-only transformer described entirely by its GGUF metadata: hyperparameters from
 * the architecture's keys, weights as views into the mapped file (quantized types stay
 * quantized; only the small norm vectors are decoded to float). Each architecture is the
 * Llama layout plus the variations named here (which norms, activation, RoPE pairing,
 * scales, sliding-window layers); the backends implement those operations, never a whole
 * forward pass per architecture. */

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "gguf.h"

/* The gated feed-forward's activation: h = act(gate) * up. */
enum ffn_activation {
        FFN_SILU, /* SwiGLU */
        FFN_GELU, /* GeGLU, GELU's tanh approximation */
};

/* Which elements of a head RoPE turns together. */
enum rope_pairing {
        ROPE_ADJACENT, /* (2i, 2i + 1): llama.cpp's "normal" RoPE */
        ROPE_HALVES,   /* (i, i + rope_dim / 2): llama.cpp's NeoX RoPE */
};

struct model_hparams {
        uint32_t n_layer;
        uint32_t n_embd;
        uint32_t n_ff;
        uint32_t n_head;
        uint32_t n_head_kv;
        uint32_t head_dim;  /* attention.key_length, n_embd / n_head by default */
        uint32_t rope_dim;  /* dimensions rotated by RoPE, <= head_dim */
        uint32_t n_ctx_train;
        /* The longest context the file declares: context_length, or under YaRN the original
         * context times the factor when that is longer (vLLM's reading of YaRN). */
        uint32_t n_ctx_max;
        uint32_t n_vocab;
        float rope_theta;   /* RoPE base of the global (full-context) layers */
        float rope_scale;   /* their angles are multiplied by it (rope.scaling.factor's inverse); 1 = none */
        /* Context extension as the file declares it (rope.scaling.*), with llama.cpp's meaning:
         * YaRN mixes each pair's scaled and unscaled angle by a ramp over the pairs between the
         * correction dimensions that beta_fast and beta_slow rotations in n_ctx_orig
         * positions mark (rope_ext_factor 1; 0 = plain scaling); every cosine and sine is
         * multiplied by rope_attn_factor. */
        uint32_t n_ctx_orig;
        float rope_ext_factor;
        float rope_attn_factor;
        float rope_beta_fast;
        float rope_beta_slow;
        /* Queries are multiplied by 1 + attn_temp_scale * log(floor(position / n_ctx_orig) + 1)
         * after RoPE (Llama 4's attention temperature); 0 = none. */
        float attn_temp_scale;
        float rms_eps;
        enum ffn_activation ffn_activation;
        enum rope_pairing rope_pairing;
        float embd_scale;   /* token embeddings are multiplied by it; 1 = none */
        float query_scale;  /* queries are multiplied by it after RoPE, before they meet the keys */
        float score_scale;  /* attention scores are multiplied by it before the softmax */
        float logit_softcap; /* logits = cap * tanh(logits / cap); 0 = none */
        /* Sliding-window layers (model_layer.sliding) attend only to the last sliding_window
         * positions, their own included, with RoPE base rope_theta_local; 0 = none. */
        uint32_t sliding_window;
        float rope_theta_local;
        /* pooling_type as the file declares it for embeddings (llama.cpp's numbering: 0 none,
         * 1 mean, 2 cls, 3 last, 4 rank); -1 when it declares none. */
        int32_t pooling_type;
};

/* The widest row of activations a forward pass keeps: the hidden state (n_embd), the
 * attention's output (n_head * head_dim) or the feed-forward's (n_ff). */
static inline uint32_t model_max_width(const struct model_hparams *hp) {
        uint32_t w = hp->n_embd, q = hp->n_head * hp->head_dim;
        if (q > w)
                w = q;
        return hp->n_ff > w ? hp->n_ff : w;
}

/* The factor on the queries of a token at position (model_hparams.attn_temp_scale), in
 * llama.cpp's precision. */
static inline float attention_temperature(const struct model_hparams *hp, uint32_t position) {
        return (float) (log(floor((float) position / (float) hp->n_ctx_orig) + 1.0) * hp->attn_temp_scale + 1.0);
}

/* A 2-D weight: rows of n_cols elements, each row a run of quant blocks. */
struct weight {
        enum tensor_type type;
        uint64_t n_rows;
        uint64_t n_cols;
        uint64_t row_bytes;
        const uint8_t *data;
};

/* Whether a matmul weight's products keep one float accumulator per row and token, the exact
 * integer sum of each block of 32 added by one fma (acc = fmaf(isum, d_w * d_a, acc)), instead
 * of eight lanes summed at the end. llama.cpp's x86 build repacks Q4_0 matrices whose row
 * count is a multiple of 8 and its repacked products (one token or many) run that order; the
 * logits of a Q8_0 output weight take it by our choice (docs/design.md). is_output: w makes
 * the logits. */
static inline bool weight_single_accumulator(const struct weight *w, bool is_output) {
        return w->type == TENSOR_Q4_0 ? w->n_rows % 8 == 0 : is_output && w->type == TENSOR_Q8_0;
}

struct model_layer {
        bool sliding;     /* a sliding-window layer (model_hparams.sliding_window) */
        float *attn_norm; /* (n_embd) */
        /* (n_head * head_dim), (n_head_kv * head_dim) twice: added to the projections, or NULL */
        float *bq, *bk, *bv;
        float *attn_q_norm; /* (head_dim) RMS norm of each query head after its projection, or NULL */
        float *attn_k_norm; /* (head_dim) the same for each key head, or NULL */
        struct weight wq; /* (n_head * head_dim) rows of n_embd */
        struct weight wk; /* (n_head_kv * head_dim) rows of n_embd */
        struct weight wv; /* (n_head_kv * head_dim) rows of n_embd */
        struct weight wo; /* n_embd rows of n_head * head_dim */
        /* (n_embd) RMS norm of the attention's output before it joins the residual stream, or NULL;
         * present together with ffn_post_norm */
        float *attn_post_norm;
        float *ffn_norm;  /* (n_embd) */
        struct weight w_gate; /* n_ff rows of n_embd */
        struct weight w_up;   /* n_ff rows of n_embd */
        struct weight w_down; /* n_embd rows of n_ff */
        float *ffn_post_norm; /* (n_embd) the same for the feed-forward's output, or NULL */
};

struct model {
        struct gguf_file *file;
        char *architecture;
        char *name;
        struct model_hparams hp;
        struct weight token_embd; /* n_vocab rows of n_embd */
        float *output_norm;       /* (n_embd) */
        struct weight output;     /* n_vocab rows of n_embd; token_embd when tied */
        bool tied_output;
        bool post_norms; /* every layer has attn_post_norm and ffn_post_norm */
        struct model_layer *layers; /* (n_layer) */
        /* (rope_dim / 2) each: every layer's angle of pair i is divided by factor i. One table
         * (rope_freqs, Llama 3's frequency scaling), or two, chosen by the context the
         * runner serves (model_rope_factors), or none. */
        float *rope_freqs;
        float *rope_factors_long;
        float *rope_factors_short;
};

/* The RoPE frequency factors for serving sequences of up to max_model_len positions, or
 * NULL: the long factors once max_model_len passes the original context, as llama.cpp
 * chooses them. */
static inline const float *model_rope_factors(const struct model *m, uint32_t max_model_len) {
        if (m->rope_freqs || !m->rope_factors_long)
                return m->rope_freqs;
        return max_model_len > m->hp.n_ctx_orig ? m->rope_factors_long : m->rope_factors_short;
}

int model_load(const char *path, struct model **ret, struct error *err);

/* Builds the model from an already-open file and takes ownership of it (also on failure). */
int model_from_gguf(struct gguf_file *file, struct model **ret, struct error *err);

void model_free(struct model *m);

/* Bytes of quantized weights the model reads per forward pass. */
uint64_t model_weight_bytes(const struct model *m);
