/* SPDX-License-Identifier: MIT */
#pragma once

/* The CUDA backend's kernels, as launchers on a stream (C++, for gpu/ only). Each output
 * element is reduced by one thread or one fixed group of lanes, in an order that depends on
 * the shapes of the model alone: a token's results are the same bits in any batch, chunk or
 * launch. gpu-math.h holds the arithmetic; the host tests model it. */

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "gpu-math.h"

/* A matmul weight on the device: repacked quants and scales for the quantized kinds, the
 * file's rows for the float ones. */
struct gpu_weight {
        enum gpu_weight_kind kind;
        uint32_t n_rows, n_cols;
        const uint8_t *quants;  /* (n_rows, n_cols / 32, block_quant_bytes) */
        const uint32_t *scales; /* (n_rows, scale words, n_cols / 32) */
        const void *rows;       /* float kinds: (n_rows, n_cols) of F32, F16 or BF16 */
        bool single_accumulator; /* quantized: weight_single_accumulator()'s order (gpu-math.h) */
};

/* Activations of a matmul: float rows (read by float weights) and their q8_1 quantization
 * (read by quantized ones, lane-major: gpu-math.h), width elements per token. */
struct gpu_activations {
        float *x;     /* (tokens, width) */
        int8_t *q;    /* (tokens, nbp * 32) with nbp = gpu_padded_blocks(width / 32) */
        float *ds;    /* (tokens, 2, nbp): each row's d, then its s */
        uint32_t width;
};

/* Bytes of a->q and floats of a->ds for n tokens of width elements. */
static inline size_t gpu_activation_quant_bytes(uint32_t width, size_t n) {
        return n * gpu_padded_blocks(width / GPU_QBLOCK) * GPU_QBLOCK;
}

static inline size_t gpu_activation_scale_floats(uint32_t width, size_t n) {
        return n * 2 * gpu_padded_blocks(width / GPU_QBLOCK);
}

/* The paged KV pool of one layer: (n_blocks, n_head_kv, block_size, head_dim) f16 each. */
struct gpu_kv_layer {
        uint16_t *k, *v;
        uint32_t block_size, n_head_kv, head_dim;
};

/* What attention and the KV store read of the step. */
struct gpu_step {
        uint32_t n_tokens;
        const int32_t *tokens, *positions, *seq_ids; /* (n_tokens) */
        const int32_t *block_tables;                 /* (n_seqs, max_blocks) */
        uint32_t max_blocks;
        const int32_t *n_prompt;                     /* (n_seqs) positions below it are the prompt */
};

cudaError_t gpu_embed(cudaStream_t s, const struct gpu_weight *w, const struct gpu_step *step, float *x);

/* out = rms_norm(x[rows[i]]) * weight for i < n (rows NULL: row i), quantized into out. */
cudaError_t gpu_rms_norm_quantize(cudaStream_t s, const float *x, const int32_t *rows, uint32_t n, const float *weight,
                                  float eps, const struct gpu_activations *out);

/* Quantizes a->x (n tokens) into a->q and a->ds. */
cudaError_t gpu_quantize(cudaStream_t s, uint32_t n, const struct gpu_activations *a);

/* a->x = silu(gate) * up, quantized; gate and up are (n, a->width). */
cudaError_t gpu_swiglu_quantize(cudaStream_t s, uint32_t n, const float *gate, const float *up,
                                const struct gpu_activations *a);

/* out = silu(gate) * up over n rows of width floats, not quantized (a tensor-parallel rank's
 * columns of the hidden layer, gathered before they are quantized whole). */
cudaError_t gpu_swiglu(cudaStream_t s, uint32_t n, uint32_t width, const float *gate, const float *up, float *out);

/* The rows of an all-gather put in order: out[t * rows + i] (+)= gathered[(rank, t, i % chunk)]
 * for rank = i / chunk (model/tensor-parallel.h's layout), t < n_tokens, i < rows. */
cudaError_t gpu_gather_rows(cudaStream_t s, const float *gathered, uint32_t n_tokens, uint32_t chunk, uint32_t rows,
                            float *out, bool accumulate);

/* out[t * out_stride + row] (+)= W[row] . x[t] for n tokens, in the CPU's order for the
 * weight (its lanes, or one accumulator where w->single_accumulator says so). */
cudaError_t gpu_matmul(cudaStream_t s, const struct gpu_weight *w, const struct gpu_activations *a, uint32_t n,
                       float *out, uint32_t out_stride, bool accumulate);

/* RoPE on each token's query and key heads (in place in q and k), the cosines and sines of
 * position p's pairs at rope_cos and rope_sin + p * rope_dim / 2, then its key and value
 * stored at its position's slot, in f16. */
cudaError_t gpu_rope_store_kv(cudaStream_t s, const struct gpu_step *step, float *q, float *k, const float *v,
                              uint32_t n_head, uint32_t rope_dim, const float *rope_cos, const float *rope_sin,
                              const struct gpu_kv_layer *kv);

/* Causal attention of each token over its sequence's positions up to its own, read through
 * its block table, in the CPU's order for a prompt position or a generated token; out is
 * (n_tokens, n_head * head_dim). */
cudaError_t gpu_attention(cudaStream_t s, const struct gpu_step *step, const float *q, uint32_t n_head, float scale,
                          const struct gpu_kv_layer *kv, float *out);
