/* SPDX-License-Identifier: MIT */
#pragma once

/* The K-quant products' references: a weight row of K-quant super-blocks (tensor-types.h)
 * times activations quantized to Q8_K, in the float order of the product llama.cpp's x86
 * build (AVX-512) runs for that type and token, so that every kernel set is held to these
 * bits and the model to llama.cpp's. Per super-block the integer sums are exact; llama.cpp
 * has two products per type, and the orders differ only in how those sums meet the floats:
 *
 *   single (one token: a decode step, a short prompt, the last layer's feed-forward):
 *     Q3_K, Q5_K, Q6_K (its vector products): eight int32 lanes, lane l summing elements
 *       4l..4l+3 of every run of 32 times their sub-block's scale (Q6_K's quants unsigned,
 *       lane l less 32 x the scaled activation sums of sub-blocks 2l and 2l + 1), then
 *           lane[l] = fmaf((float) ilane_l, d_a * d_w, lane[l]),  result lanes_sum8(lane);
 *       Q5_K adds its mins apart, summs = fmaf(-d_a * dmin_w, (float) imin, summs).
 *     Q4_K, Q2_K (its repacked 8-row products, picked for these types on this build):
 *           acc = fmaf((float) isum, d_w * d_a, acc);  accm = fmaf((float) imin, dmin_w * d_a, accm)
 *       per super-block, result acc - accm.
 *   batched (the prompt's tokens, k_quant_batched_order()):
 *     Q3_K, Q5_K, Q6_K (its tiled product): r = (float) isum * d_w; for Q5_K
 *       r = fmaf(-dmin_w, (float) imin, r); acc = fmaf(r, d_a, acc).
 *     Q4_K, Q2_K: the repacked order per run of 64 (Q4_K) or 128 (Q2_K) elements instead of
 *       per super-block. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor-types.h"

typedef float (*dot_k_fn)(const void *weight_row, const struct block_q8_K *act, size_t n_super, bool batched);

float dot_q2_K_reference(const void *weight_row, const struct block_q8_K *act, size_t n_super, bool batched);
float dot_q3_K_reference(const void *weight_row, const struct block_q8_K *act, size_t n_super, bool batched);
float dot_q4_K_reference(const void *weight_row, const struct block_q8_K *act, size_t n_super, bool batched);
float dot_q5_K_reference(const void *weight_row, const struct block_q8_K *act, size_t n_super, bool batched);
float dot_q6_K_reference(const void *weight_row, const struct block_q8_K *act, size_t n_super, bool batched);

/* llama.cpp passes a prompt in micro-batches of this many tokens (its default). */
#define K_QUANT_PROMPT_UBATCH 512

/* Whether the token at position of a sequence whose prompt is n_prompt tokens takes the
 * batched order, as llama.cpp's prompt pass picks it: in each micro-batch of the prompt, the
 * tiled product (Q3_K, Q5_K, Q6_K) for micro-batches of 8 tokens or more, the repacked
 * product's batched order (Q4_K, Q2_K) for its whole groups of four tokens (the last
 * size % 4 go one by one). Generated tokens take the single order. A function of the
 * position and the prompt alone, so a sequence's bits never depend on how it is batched. */
bool k_quant_batched_order(enum tensor_type type, uint32_t position, uint32_t n_prompt);

/* n floats (a multiple of QK_K) to Q8_K blocks as llama.cpp does: per super-block the element
 * of largest magnitude (the first, on a tie) sets iscale = -127 / it, q = min(127,
 * round_half_even(iscale * x)), d = 1 / iscale, bsums the sums of each run of 16 quants. */
void quantize_row_q8_K(const float *x, struct block_q8_K *out, size_t n);
