/* SPDX-License-Identifier: MIT */
#pragma once

/* Random Llama models in GGUF form for tests: every key the loader and the tokenizer read,
 * a byte-level "gpt2" vocabulary (or a real one copied from another file), and seeded
 * weights small enough to keep activations sane. Other architectures, with the tensors and
 * keys llama.cpp's converter writes for them: "gemma3" (extra norms, head size, sliding
 * window), "qwen2" (q, k and v biases), "qwen3" (per-head q and k norms), "phi3" (fused qkv,
 * gate and up fused in ffn_up, long and short rope factors), "mistral3" (llama's layout).
 * Also the reference quantizers the tests use to build expected values. */

#include <stdbool.h>
#include <stdint.h>

#include "gguf-writer.h"
#include "tensor-types.h"

/* 3 control tokens and the 256 byte tokens come first; n_vocab must be at least this. */
#define SYNTHETIC_LLAMA_MIN_VOCAB 259

struct synthetic_llama_config {
        uint32_t n_layer;
        uint32_t n_embd;
        uint32_t n_ff;
        uint32_t n_head;
        uint32_t n_head_kv;
        uint32_t n_vocab;
        uint32_t n_ctx;
        enum tensor_type weight_type; /* the linear weights: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, a K-quant, F16, F32 or BF16 */
        enum tensor_type embd_type;   /* token_embd.weight, and output.weight when untied */
        bool tied_output;             /* no output.weight in the file */
        /* Standard deviations of token_embd (0: 0.5) and of output.weight (0: 0.5 / sqrt(n_embd)).
         * With a large vocabulary, a tied output whose rows are large gives each token's own row
         * a logit far above the rest: smaller embeddings keep the next token uncertain. */
        float embd_std;
        float output_std;
        float rope_theta;             /* 0 means 10000 */
        uint64_t seed;
        /* gemma3 only: attention.key_length and value_length (0: n_embd / n_head, not
         * written), attention.sliding_window (0: not written), attention.sliding_window_pattern
         * (0: not written), rope.freq_base_swa (0: not written) */
        uint32_t head_dim;
        uint32_t sliding_window;
        uint32_t sliding_window_pattern;
        float rope_theta_local;

        /* Rope options, for any architecture. rope_freqs: a rope_freqs.weight tensor holding
         * Llama 3.1's frequency factors (factor 8, low and high frequency factors 1 and 4,
         * original context 8192) for head_dim and rope_theta. The ARCH.rope.scaling.* keys:
         * type ("linear", "yarn"; NULL: no key), factor, original_context_length and
         * attn_factor, then yarn_beta_fast, yarn_beta_slow and yarn_log_multiplier; a zero
         * leaves its key out. phi3 always has rope_factors_long and rope_factors_short. */
        bool rope_freqs;
        const char *rope_scaling_type;
        float rope_scaling_factor;
        uint32_t rope_scaling_original_context;
        float rope_scaling_attn_factor;
        float yarn_beta_fast;
        float yarn_beta_slow;
        float yarn_log_multiplier;
        float attention_temperature_scale; /* ARCH.attention.temperature_scale (0: not written) */

        /* A GGUF (llama.cpp's models/ggml-vocab-NAME.gguf) whose tokenizer.* keys replace the
         * synthetic vocabulary; n_vocab is then its token count and the field is ignored. */
        const char *vocab_path;

        /* Fault injection for loader tests; each is off when NULL. */
        const char *architecture;  /* general.architecture and the key prefix; "llama" when NULL */
        const char *omit_key;      /* a metadata key left out */
        const char *string_key;    /* a metadata key written as a string instead of its type */
        const char *omit_tensor;   /* a tensor left out */
        const char *extra_row_tensor; /* a 2-D tensor written with one row too many */
};

/* Adds the whole model to w (which the caller may extend before writing). 0 or negative errno
 * (-EINVAL for a configuration this generator cannot express; the error of opening
 * vocab_path, told on stderr). */
int synthetic_llama_build(struct gguf_writer *w, const struct synthetic_llama_config *cfg);

/* Builds the model and writes it to path. 0 or negative errno. */
int synthetic_llama_write(const char *path, const struct synthetic_llama_config *cfg);

/* Encodes n floats (a multiple of the block size for quantized types) as type: F32, F16,
 * BF16 (round to nearest even), Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 or a K-quant (Q2_K .. Q6_K). */
void test_quantize_row(enum tensor_type type, const float *x, void *out, uint64_t n);

uint16_t test_f32_to_bf16(float f);

/* A seeded generator (splitmix64) with uniform and normal draws. */
struct test_rng {
        uint64_t state;
};

uint64_t test_rng_next(struct test_rng *rng);
float test_rng_uniform(struct test_rng *rng); /* [0, 1) */
float test_rng_normal(struct test_rng *rng);  /* mean 0, standard deviation 1 */
