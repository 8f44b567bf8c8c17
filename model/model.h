/* SPDX-License-Identifier: MIT */
#pragma once

/* A Llama-family model described entirely by its GGUF metadata: hyperparameters from the
 * architecture's keys, weights as views into the mapped file (quantized types stay
 * quantized; only the small norm vectors are decoded to float). */

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "gguf.h"

struct model_hparams {
        uint32_t n_layer;
        uint32_t n_embd;
        uint32_t n_ff;
        uint32_t n_head;
        uint32_t n_head_kv;
        uint32_t head_dim;  /* n_embd / n_head */
        uint32_t rope_dim;  /* dimensions rotated by RoPE, <= head_dim */
        uint32_t n_ctx_train;
        uint32_t n_vocab;
        float rope_theta;
        float rms_eps;
};

/* The widest row of activations a forward pass keeps: the hidden state (n_embd), the
 * attention's output (n_head * head_dim) or the feed-forward's (n_ff). */
static inline uint32_t model_max_width(const struct model_hparams *hp) {
        uint32_t w = hp->n_embd, q = hp->n_head * hp->head_dim;
        if (q > w)
                w = q;
        return hp->n_ff > w ? hp->n_ff : w;
}

/* A 2-D weight: rows of n_cols elements, each row a run of quant blocks. */
struct weight {
        enum tensor_type type;
        uint64_t n_rows;
        uint64_t n_cols;
        uint64_t row_bytes;
        const uint8_t *data;
};

struct model_layer {
        float *attn_norm; /* (n_embd) */
        struct weight wq; /* (n_head * head_dim) rows of n_embd */
        struct weight wk; /* (n_head_kv * head_dim) rows of n_embd */
        struct weight wv; /* (n_head_kv * head_dim) rows of n_embd */
        struct weight wo; /* n_embd rows of n_head * head_dim */
        float *ffn_norm;  /* (n_embd) */
        struct weight w_gate; /* n_ff rows of n_embd */
        struct weight w_up;   /* n_ff rows of n_embd */
        struct weight w_down; /* n_embd rows of n_ff */
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
        struct model_layer *layers; /* (n_layer) */
};

int model_load(const char *path, struct model **ret, struct error *err);

/* Builds the model from an already-open file and takes ownership of it (also on failure). */
int model_from_gguf(struct gguf_file *file, struct model **ret, struct error *err);

void model_free(struct model *m);

/* Bytes of quantized weights the model reads per forward pass. */
uint64_t model_weight_bytes(const struct model *m);
