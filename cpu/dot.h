/* SPDX-License-Identifier: MIT */
#pragma once

/* Dot products of one weight row with one activation row, per weight type and per
 * instruction set. Quantized weights meet activations quantized per block of 32 to int8
 * (block_q8_1); the integer products are exact and only the float accumulation order differs
 * between instruction sets. The scalar set is the reference every other one is tested
 * against. */

#include <stdbool.h>
#include <stddef.h>

#include "dot-k-quants.h"
#include "error.h"
#include "packed-weights.h"
#include "tensor-types.h"

/* Sum over n_blocks blocks of weight_row (of the kernel's weight type) times act. */
typedef float (*dot_q_fn)(const void *weight_row, const struct block_q8_1 *act, size_t n_blocks);

/* A tile of those products: DOT_TILE_ROWS weight rows (row_bytes apart) by n_tokens
 * (1..DOT_TILE_TOKENS) activation rows (act_stride blocks apart; act_ds holds each block's
 * d and s as floats, two per block, as quantize_q8_1 leaves them), into
 * out[t * DOT_TILE_ROWS + r]. Each weight block is unpacked once for all the tokens, and the
 * sixteen sums run side by side; each result has exactly the bits the set's dot_q_fn gives
 * for that row and token, so batching never changes a sequence's numbers. */
#define DOT_GROUP_MAX 16
#define DOT_F16_MAX_DIM 256

/* The f16 key (or value) rows of one sequence, layer and key-value head in the paged KV
 * pool: position j's row is base + block_table[j / block_size] * block_stride +
 * (j % block_size) * row_stride. fetch_beside, when set, is another array laid out the same
 * way (the values beside the keys): the scores kernels fetch its row into the cache as they
 * read each key row, so that it is there when the value sums come to it. */
struct f16_rows {
        const f16_bits *base;
        const int32_t *block_table;
        uint32_t block_size;
        size_t row_stride, block_stride;
        const f16_bits *fetch_beside;
};

static inline const f16_bits *f16_row(const struct f16_rows *rows, uint32_t j) {
        return rows->base + (size_t) rows->block_table[j / rows->block_size] * rows->block_stride +
               (size_t) (j % rows->block_size) * rows->row_stride;
}

#define DOT_TILE_ROWS 4
#define DOT_TILE_TOKENS 4
typedef void (*dot_tile_fn)(const void *weight_rows, size_t row_bytes, const struct block_q8_1 *act, const float *act_ds,
                            size_t act_stride, unsigned n_tokens, size_t n_blocks, float out[DOT_TILE_TOKENS * DOT_TILE_ROWS]);

/* The packed product on repacked weights (packed-weights.h): for the rows of groups
 * [group_begin, group_end) and n_tokens (at least one) tokens, token t's row at
 * out[t * out_stride + row] is set to (or, with accumulate, has added to it) the product in
 * llama.cpp's x86 order, which the x86 single products and tiles follow:
 *     lane[l] = 0 (l < 8); for each block b in order, for each lane l:
 *         lane[l] = fmaf((float) isum_bl, d_w[b] * d_a[b], lane[l])
 *     result = lanes_sum8(lane), for Q4_1 and Q5_1 + off with off = fmaf(m_w[b], s_a[b], off)
 * in order, isum_bl being the exact integer product of the block's elements 4l..4l+3 (for 4-
 * and 5-bit weights in the dequantized element order: the low nibbles are elements 0..15). So
 * each result has the bits of the AVX2 and AVX-512 sets' dot_q_fn for that row and token, and
 * depends only on its row and token; every set, the scalar one included, gives those bits.
 * Rows past n_rows (the last group's padding) are not written. */
struct packed_activations {
        const struct block_q8_1 *xq; /* token t's blocks at xq + t * stride */
        const float *ds;             /* their d and s as floats: ds[2 * (t * stride + b)] and the next */
        const int32_t *corrections;  /* packed_activation_corrections(), block (t * stride + b)'s at
                                      * corrections + (t * stride + b) * PACKED_CORRECTIONS; Q4_0, Q5_0 and
                                      * Q8_0 only */
        size_t stride;               /* blocks from one token to the next */
        const int32_t *block_sums;   /* packed_block_sums(), block (t * stride + b)'s; the
                                      * single-accumulator product only */
};
typedef void (*dot_packed_fn)(const struct packed_weights *w, uint64_t group_begin, uint64_t group_end,
                              const struct packed_activations *a, unsigned n_tokens, float *out, size_t out_stride,
                              bool accumulate);

/* The packed K-quant product on packed K-quant weights (packed-weights.h): for the rows of groups
 * [group_begin, group_end) and n_tokens tokens (token t's Q8_K super-blocks at act +
 * t * act_stride), token t's row at out[t * out_stride + row] is set to (or, with accumulate,
 * has added to it) exactly the type's reference (row, token, batched[t]): the K-quant orders
 * (dot-k-quants.h), sixteen rows at a time. Rows past n_rows are not written. */
typedef void (*dot_packed_k_fn)(const struct packed_weights *w, uint64_t group_begin, uint64_t group_end,
                                const struct block_q8_K *act, size_t act_stride, const bool *batched, unsigned n_tokens,
                                float *out, size_t out_stride, bool accumulate);

/* The single-accumulator product, for the weights weight_single_accumulator() names (Q4_0
 * matrices as llama.cpp repacks them, the logits of a Q8_0 output weight): one accumulator
 * per row and token instead of eight lanes,
 *     acc = 0; for each block b in order: acc = fmaf((float) isum_b, d_w[b] * d_a[b], acc)
 * with isum_b the exact integer product of the block's 32 elements. For Q8_0 logits it is our
 * choice: logits feed no further quantization, so their rounding, ~1e-7 of a logit away from
 * llama.cpp's lanes, cannot be amplified as a layer's can, and the work per block is a third
 * of the lanes' (docs/design.md). These are the references, on rows of GGUF blocks; every
 * set's packed_single_accumulator gives their bits. */
float dot_single_q4_0_reference(const void *weight_row, const struct block_q8_1 *act, size_t n_blocks);
float dot_single_q8_0_reference(const void *weight_row, const struct block_q8_1 *act, size_t n_blocks);

struct dot_kernels {
        const char *name;
        dot_q_fn q4_0;
        dot_q_fn q4_1;
        dot_q_fn q5_0;
        dot_q_fn q5_1;
        dot_q_fn q8_0;
        dot_tile_fn tile_q4_0;
        dot_tile_fn tile_q4_1;
        dot_tile_fn tile_q5_0;
        dot_tile_fn tile_q5_1;
        dot_tile_fn tile_q8_0;
        dot_packed_fn packed_q4_0;
        dot_packed_fn packed_q4_1;
        dot_packed_fn packed_q5_0;
        dot_packed_fn packed_q5_1;
        dot_packed_fn packed_q8_0;
        /* The single-accumulator product (above) on packed Q4_0 or Q8_0 weights, as
         * dot_packed_fn otherwise. */
        dot_packed_fn packed_single_accumulator;
        /* The packed K-quant products; NULL where the set has none (the tiles run). */
        dot_packed_k_fn packed_q2_K;
        dot_packed_k_fn packed_q3_K;
        dot_packed_k_fn packed_q4_K;
        dot_packed_k_fn packed_q5_K;
        dot_packed_k_fn packed_q6_K;
        /* Attention over the f16 KV cache of one sequence and key-value head, for a group of
         * n_q queries (the query heads that share it, of one or more tokens; n_q <= DOT_GROUP_MAX, n <= DOT_F16_MAX_DIM
         * elements per head), positions 0..n_pos-1. Each query's numbers are what it alone
         * would get, in the summation order of llama.cpp's f16 products on x86; every set
         * gives the same bits.
         * attn_scores: scores[g * scores_stride + j] = dot(keys' row j, q_g) * scale with
         * q_g = q + g * q_stride. The dot: element i goes to lane i % 16 by fused multiply-add,
         * then lanes_sum16() (llama.cpp's f16 matrix product, used for a prompt); or, wide,
         * lane i % 64 over whole runs of 64 and lanes_sum64(), the rest added in double (its
         * vector dot product, used for one generated token).
         * attn_values: lane l of query g is the sum over positions j = l, l + n_lanes, ... in
         * order of fma(values' row j [i], w[g * w_stride + j], sum) from +0. Row e <
         * min(n_pos, 16) of lanes_g = lanes + g * lanes_stride, lanes_g[e * n + i], is lane e
         * (16 lanes), or lanes_sum64()'s first fold (lane e + lane 32 + e) + (lane 16 + e +
         * lane 48 + e), a lane no position reaches being +0 (64 lanes): the 16 rows that
         * sum_lanes() then adds. Only rows e = first_row .. first_row + n_rows - 1 are made
         * (row e sums the positions j = e mod 16), and only rows e, 16 + e, 32 + e and 48 + e
         * of lanes_g are written (the last three as scratch), so that threads can share one
         * head's rows. */
        void (*attn_scores)(const struct f16_rows *keys, unsigned n_pos, const float *q, size_t q_stride, unsigned n_q,
                            size_t n, bool wide, float scale, float *scores, size_t scores_stride);
        void (*attn_values)(const struct f16_rows *values, unsigned n_pos, const float *w, size_t w_stride, unsigned n_q,
                            size_t n, unsigned n_lanes, unsigned first_row, unsigned n_rows, float *lanes,
                            size_t lanes_stride);
        /* x[i] rounded to f16 and back: f16_to_f32(f32_to_f16(x[i])), NaNs aside. */
        void (*round_f16)(float *x, size_t n);
        /* out[i] = the sum of lanes[e * stride + i] over e < 16 by the tree of lanes_sum16();
         * rows from n_valid on count as +0.0 and are not read. */
        void (*sum_lanes)(const float *lanes, size_t stride, unsigned n_valid, size_t n, float *out);
        /* One query's scores x[0..n) (n >= 1) made its softmax weights as the reference's
         * attention without flash attention makes them: e[i] = exp(x[i] - max x) with
         * exp_poly.h's exp, summed per run of 16 by lanes_sum16() (a short last run padded with
         * +0), the runs added in double; then x[i] = e[i] * (float) (1 / sum), rounded to f16
         * and back. */
        void (*softmax_f16)(float *x, size_t n);
        /* quantize_row_q8_1() (the reference, quantize.c) with the same bits; ds (if not NULL)
         * gets each block's d and s as floats, converted once here rather than in every tile. */
        void (*quantize_q8_1)(const float *x, struct block_q8_1 *out, float *ds, size_t n);
        /* rope_rows() (rope.h) with the same bits. */
        void (*rope)(float *x, uint32_t n_heads, uint32_t head_dim, uint32_t half, bool halves, const float *cos,
                     const float *sin);
        /* packed_activation_corrections() (the reference, packed-weights.c), same values. */
        void (*activation_corrections)(const struct block_q8_1 *xq, size_t n_blocks, int32_t *corrections);
        /* h[i] = silu(g[i]) * u[i], with the exp of exp_poly.h so that every set, and the
         * reference, round alike. */
        void (*swiglu)(float *h, const float *g, const float *u, size_t n);
        /* The K-quant products and their activations' quantizer (dot-k-quants.h), each with
         * its reference's bits; and their tiles (dot_k_tile_fn). */
        dot_k_fn q2_K, q3_K, q4_K, q5_K, q6_K;
        dot_k_tile_fn tile_q2_K, tile_q3_K, tile_q4_K, tile_q5_K, tile_q6_K;
        void (*quantize_q8_K)(const float *x, struct block_q8_K *out, size_t n);
        /* h[i] = gelu(g[i]) * u[i] as llama.cpp's CPU backend makes its GeGLU: 0 for g[i] <=
         * -10, g[i] * u[i] for g[i] >= 10, else gelu_table() at g[i] rounded to f16, times
         * u[i]. */
        void (*geglu)(float *h, const float *g, const float *u, size_t n);
};

/* The sum of 8 lanes as the 256-bit horizontal add of llama.cpp's x86 block products does
 * it: each lane with the one 4 apart, then 2 apart, then the last pair. */
static inline float lanes_sum8(const float l[8]) {
        return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

/* The sum of 16 lanes as a halving tree: (l[e] + l[e + 8]), then + 4 apart, then + 2 apart,
 * then the last pair; the order a 512-bit horizontal add uses. */
static inline float lanes_sum16(const float l[16]) {
        float a[8], b[4];
        for (int e = 0; e < 8; e++)
                a[e] = l[e + 8] + l[e];
        for (int e = 0; e < 4; e++)
                b[e] = a[e + 4] + a[e];
        return (b[0] + b[2]) + (b[1] + b[3]);
}

/* 64 lanes (four 16-wide vectors) folded pairwise, 0 with 2 and 1 with 3, then the sum of
 * the 16 lanes left. lanes[i * stride] is lane i. */
static inline float lanes_sum64(const float *lanes, size_t stride) {
        float l[16];
        for (int e = 0; e < 16; e++)
                l[e] = (lanes[e * stride] + lanes[(32 + e) * stride]) + (lanes[(16 + e) * stride] + lanes[(48 + e) * stride]);
        return lanes_sum16(l);
}

extern const struct dot_kernels dot_kernels_scalar;
#if HAVE_X86_64_KERNELS
extern const struct dot_kernels dot_kernels_avx2;
extern const struct dot_kernels dot_kernels_avx512vnni;
/* The AVX-512 set with the packed 4-bit products tuned for AMD cores (packed-dot-avx512.h):
 * the same bits. */
extern const struct dot_kernels dot_kernels_avx512vnni_amd;
#endif
/* The x86 sets' names (dot_kernels_by_name()), for the tests that go over every set the CPU
 * has. */
#define DOT_X86_SET_NAMES { "avx2", "avx512vnni", "avx512vnni-amd" }

/* The fastest set the CPU supports (on an AMD core, its variant where a set has one), or the
 * one named by $ASYNCLLM_CPU_KERNELS (scalar, avx2, avx512vnni, avx512vnni-amd) when that is
 * set. -EINVAL, with a message listing the sets this CPU runs, when it names another. */
int dot_kernels_select(const struct dot_kernels **ret, struct error *err);

/* The set with this name if the CPU supports it, else NULL. */
const struct dot_kernels *dot_kernels_by_name(const char *name);

/* The kernel for a quantized weight type, NULL for float types. */
dot_q_fn dot_kernel_for(const struct dot_kernels *k, enum tensor_type type);
dot_tile_fn dot_tile_kernel_for(const struct dot_kernels *k, enum tensor_type type);
dot_packed_fn dot_packed_kernel_for(const struct dot_kernels *k, enum tensor_type type);
/* The packed K-quant product for a K-quant weight type, or NULL. */
dot_packed_k_fn dot_packed_k_kernel_for(const struct dot_kernels *k, enum tensor_type type);
/* The K-quant product for a K-quant weight type (whose activations are Q8_K), else NULL. */
dot_k_fn dot_k_kernel_for(const struct dot_kernels *k, enum tensor_type type);
dot_k_tile_fn dot_k_tile_kernel_for(const struct dot_kernels *k, enum tensor_type type);
