/* SPDX-License-Identifier: MIT */
/* llama.cpp's reference quantizers of the 32-element types that llama-quantize falls back to
 * on rows that are not whole K-quant super-blocks (Q4_0, Q5_0, Q5_1, Q8_0), and the row
 * quantizer over every type tests/requantize writes. Each block's scale comes from its
 * largest element as llama.cpp computes it, in float, rounded to f16 once. */
#include "config.h"

#include <float.h>
#include <math.h>

#include "float16.h"
#include "requantize.h"

/* The element of largest magnitude (the first of equals) and its sign. */
static float signed_absmax(const float *x) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QUANT_BLOCK; j++)
                if (amax < fabsf(x[j])) {
                        amax = fabsf(x[j]);
                        max = x[j];
                }
        return max;
}

/* d = max / -8, so that the largest element is code 0; codes are truncations of
 * x / d + 8.5, at most 15. */
void quantize_q4_0_block(const float *x, struct block_q4_0 *b) {
        float d = signed_absmax(x) / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f32_to_f16(d);
        for (int j = 0; j < QUANT_BLOCK / 2; j++) {
                int8_t low = (int8_t) (x[j] * id + 8.5f), high = (int8_t) (x[j + 16] * id + 8.5f);
                b->qs[j] = (uint8_t) ((low < 15 ? low : 15) | (high < 15 ? high : 15) << 4);
        }
}

static void pack_q5(const uint8_t q[QUANT_BLOCK], uint8_t qs[QUANT_BLOCK / 2], uint8_t qh[4]) {
        uint32_t high = 0;
        for (int j = 0; j < QUANT_BLOCK / 2; j++) {
                qs[j] = (uint8_t) ((q[j] & 15) | (q[j + 16] & 15) << 4);
                high |= (uint32_t) (q[j] >> 4 & 1) << j | (uint32_t) (q[j + 16] >> 4 & 1) << (j + 16);
        }
        for (int i = 0; i < 4; i++)
                qh[i] = (uint8_t) (high >> (8 * i));
}

/* As Q4_0 with d = max / -16; codes are truncations of x / d + 16.5, at most 31. */
void quantize_q5_0_block(const float *x, struct block_q5_0 *b) {
        float d = signed_absmax(x) / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f32_to_f16(d);
        uint8_t q[QUANT_BLOCK];
        for (int j = 0; j < QUANT_BLOCK; j++) {
                float v = x[j] * id;
                int8_t code = (int8_t) (v + 16.5f);
                q[j] = (uint8_t) (code < 31 ? code : 31);
        }
        pack_q5(q, b->qs, b->qh);
}

/* d = (max - min) / 31 and m = min; codes are truncations of (x - min) / d + 0.5, kept to
 * eight bits as they come (the largest rounds to 31). */
void quantize_q5_1_block(const float *x, struct block_q5_1 *b) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QUANT_BLOCK; j++) {
                if (x[j] < min)
                        min = x[j];
                if (x[j] > max)
                        max = x[j];
        }
        float d = (max - min) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f32_to_f16(d);
        b->m = f32_to_f16(min);
        uint8_t q[QUANT_BLOCK];
        for (int j = 0; j < QUANT_BLOCK; j++) {
                float v = (x[j] - min) * id;
                q[j] = (uint8_t) (v + 0.5f);
        }
        pack_q5(q, b->qs, b->qh);
}

/* d = amax / 127; codes are x / d rounded half away from zero. */
void quantize_q8_0_block(const float *x, struct block_q8_0 *b) {
        float amax = 0.0f;
        for (int j = 0; j < QUANT_BLOCK; j++)
                amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f32_to_f16(d);
        for (int j = 0; j < QUANT_BLOCK; j++)
                b->qs[j] = (int8_t) roundf(x[j] * id);
}

#define QUANTIZE_BLOCKS(block_type, block_elements, quantize_block)                                 \
        for (uint64_t i = 0; i < n / (block_elements); i++)                                         \
                quantize_block(x + i * (block_elements), (struct block_type *) out + i)

bool quantize_row(enum tensor_type type, const float *x, void *out, uint64_t n) {
        switch (type) {
        case TENSOR_Q4_0: QUANTIZE_BLOCKS(block_q4_0, QUANT_BLOCK, quantize_q4_0_block); return true;
        case TENSOR_Q5_0: QUANTIZE_BLOCKS(block_q5_0, QUANT_BLOCK, quantize_q5_0_block); return true;
        case TENSOR_Q5_1: QUANTIZE_BLOCKS(block_q5_1, QUANT_BLOCK, quantize_q5_1_block); return true;
        case TENSOR_Q8_0: QUANTIZE_BLOCKS(block_q8_0, QUANT_BLOCK, quantize_q8_0_block); return true;
        case TENSOR_Q2_K: QUANTIZE_BLOCKS(block_q2_K, QK_K, quantize_q2_K_block); return true;
        case TENSOR_Q3_K: QUANTIZE_BLOCKS(block_q3_K, QK_K, quantize_q3_K_block); return true;
        case TENSOR_Q4_K: QUANTIZE_BLOCKS(block_q4_K, QK_K, quantize_q4_K_block); return true;
        case TENSOR_Q5_K: QUANTIZE_BLOCKS(block_q5_K, QK_K, quantize_q5_K_block); return true;
        case TENSOR_Q6_K: QUANTIZE_BLOCKS(block_q6_K, QK_K, quantize_q6_K_block); return true;
        default: return false;
        }
}
