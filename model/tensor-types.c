/* SPDX-License-Identifier: MIT */
#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>

#include "float16.h"
#include "tensor-types.h"

static const struct tensor_type_info type_table[TENSOR_TYPE_MAX] = {
        [TENSOR_F32] = { "F32", 1, 4 },
        [TENSOR_F16] = { "F16", 1, 2 },
        [TENSOR_Q4_0] = { "Q4_0", QUANT_BLOCK, sizeof(struct block_q4_0) },
        [TENSOR_Q4_1] = { "Q4_1", QUANT_BLOCK, sizeof(struct block_q4_1) },
        [TENSOR_Q5_0] = { "Q5_0", QUANT_BLOCK, sizeof(struct block_q5_0) },
        [TENSOR_Q5_1] = { "Q5_1", QUANT_BLOCK, sizeof(struct block_q5_1) },
        [TENSOR_Q8_0] = { "Q8_0", QUANT_BLOCK, sizeof(struct block_q8_0) },
        [TENSOR_Q8_1] = { "Q8_1", QUANT_BLOCK, sizeof(struct block_q8_1) },
        [TENSOR_Q2_K] = { "Q2_K", QK_K, sizeof(struct block_q2_K) },
        [TENSOR_Q3_K] = { "Q3_K", QK_K, sizeof(struct block_q3_K) },
        [TENSOR_Q4_K] = { "Q4_K", QK_K, sizeof(struct block_q4_K) },
        [TENSOR_Q5_K] = { "Q5_K", QK_K, sizeof(struct block_q5_K) },
        [TENSOR_Q6_K] = { "Q6_K", QK_K, sizeof(struct block_q6_K) },
        [TENSOR_Q8_K] = { "Q8_K", QK_K, sizeof(struct block_q8_K) },
        [TENSOR_BF16] = { "BF16", 1, 2 },
};

/* The ids GGUF defines that this project does not read, so that a refusal can name them. */
static const char *const unread_type_names[TENSOR_TYPE_MAX] = {
        [16] = "IQ2_XXS", [17] = "IQ2_XS", [18] = "IQ3_XXS", [19] = "IQ1_S", [20] = "IQ4_NL", [21] = "IQ3_S",
        [22] = "IQ2_S",   [23] = "IQ4_XS", [24] = "I8",     [25] = "I16",   [26] = "I32",   [27] = "I64",
        [28] = "F64",     [29] = "IQ1_M", [34] = "TQ1_0",  [35] = "TQ2_0", [39] = "MXFP4",
};

/* One K-quant super-block as llama.cpp's dequantization computes it, float operation for
 * float operation: its compiler contracts "a * q - m" into one fma, so that is written out. */
static void k_quant_block_to_float(enum tensor_type type, const void *block, float out[QK_K]) {
        switch (type) {
        case TENSOR_Q2_K: {
                const struct block_q2_K *b = block;
                float d = f16_to_f32(b->d), dmin = f16_to_f32(b->dmin);
                for (unsigned e = 0; e < QK_K; e++) {
                        unsigned s = e / 16, q = k_quant_q2_element(b, e);
                        out[e] = fmaf(d * (float) (b->scales[s] & 15), (float) q, -(dmin * (float) (b->scales[s] >> 4)));
                }
                return;
        }
        case TENSOR_Q3_K: {
                const struct block_q3_K *b = block;
                float d = f16_to_f32(b->d);
                for (unsigned e = 0; e < QK_K; e++)
                        out[e] = d * (float) (k_quant_q3_scale(b->scales, e / 16) - 32) * (float) k_quant_q3_element(b, e);
                return;
        }
        case TENSOR_Q4_K: case TENSOR_Q5_K: {
                const struct block_q4_K *b4 = block;
                const struct block_q5_K *b5 = block;
                bool five = type == TENSOR_Q5_K;
                float d = f16_to_f32(five ? b5->d : b4->d), dmin = f16_to_f32(five ? b5->dmin : b4->dmin);
                for (unsigned e = 0; e < QK_K; e++) {
                        uint8_t scale, min;
                        k_quant_scale_min(five ? b5->scales : b4->scales, e / 32, &scale, &min);
                        uint32_t q = five ? k_quant_q5_element(b5, e) : k_quant_q4_element(b4->qs, e);
                        out[e] = fmaf(d * (float) scale, (float) q, -(dmin * (float) min));
                }
                return;
        }
        case TENSOR_Q6_K: {
                const struct block_q6_K *b = block;
                float d = f16_to_f32(b->d);
                for (unsigned e = 0; e < QK_K; e++)
                        out[e] = d * (float) b->scales[e / 16] * (float) ((int32_t) k_quant_q6_element(b, e) - 32);
                return;
        }
        case TENSOR_Q8_K: {
                const struct block_q8_K *b = block;
                for (unsigned e = 0; e < QK_K; e++)
                        out[e] = b->d * (float) b->qs[e];
                return;
        }
        default:
                assert(!"k_quant_block_to_float: not a K-quant");
        }
}

const struct tensor_type_info *tensor_type_info(uint32_t type) {
        if (type >= TENSOR_TYPE_MAX || !type_table[type].name)
                return NULL;
        return &type_table[type];
}

const char *tensor_type_name(uint32_t type) {
        if (type >= TENSOR_TYPE_MAX)
                return NULL;
        return type_table[type].name ? type_table[type].name : unread_type_names[type];
}

void tensor_type_supported_names(char *out, size_t size) {
        size_t used = 0;
        if (size > 0)
                out[0] = '\0';
        for (uint32_t type = 0; type < TENSOR_TYPE_MAX; type++) {
                if (!type_table[type].name || used >= size)
                        continue;
                int n = snprintf(out + used, size - used, "%s%s", used ? ", " : "", type_table[type].name);
                used += n > 0 ? (size_t) n : 0;
        }
}

uint64_t tensor_row_bytes(enum tensor_type type, uint64_t n) {
        const struct tensor_type_info *info = tensor_type_info(type);
        if (!info || n % info->block_size != 0)
                return 0;
        return n / info->block_size * info->block_bytes;
}

void tensor_row_to_float(enum tensor_type type, const void *row, float *out, uint64_t n) {
        switch (type) {
        case TENSOR_F32: {
                const float *x = row;
                for (uint64_t i = 0; i < n; i++)
                        out[i] = x[i];
                return;
        }
        case TENSOR_F16: {
                const f16_bits *x = row;
                for (uint64_t i = 0; i < n; i++)
                        out[i] = f16_to_f32(x[i]);
                return;
        }
        case TENSOR_BF16: {
                const bf16_bits *x = row;
                for (uint64_t i = 0; i < n; i++)
                        out[i] = bf16_to_f32(x[i]);
                return;
        }
        case TENSOR_Q4_0: {
                const struct block_q4_0 *b = row;
                for (uint64_t k = 0; k < n / QUANT_BLOCK; k++, out += QUANT_BLOCK) {
                        float d = f16_to_f32(b[k].d);
                        for (int j = 0; j < QUANT_BLOCK / 2; j++) {
                                out[j] = (float) ((b[k].qs[j] & 15) - 8) * d;
                                out[j + 16] = (float) ((b[k].qs[j] >> 4) - 8) * d;
                        }
                }
                return;
        }
        case TENSOR_Q4_1: {
                const struct block_q4_1 *b = row;
                for (uint64_t k = 0; k < n / QUANT_BLOCK; k++, out += QUANT_BLOCK) {
                        float d = f16_to_f32(b[k].d), m = f16_to_f32(b[k].m);
                        for (int j = 0; j < QUANT_BLOCK / 2; j++) {
                                out[j] = (float) (b[k].qs[j] & 15) * d + m;
                                out[j + 16] = (float) (b[k].qs[j] >> 4) * d + m;
                        }
                }
                return;
        }
        case TENSOR_Q5_0: {
                const struct block_q5_0 *b = row;
                for (uint64_t k = 0; k < n / QUANT_BLOCK; k++, out += QUANT_BLOCK) {
                        float d = f16_to_f32(b[k].d);
                        for (unsigned j = 0; j < QUANT_BLOCK; j++)
                                out[j] = (float) ((int32_t) q5_element(b[k].qs, b[k].qh, j) - 16) * d;
                }
                return;
        }
        case TENSOR_Q5_1: {
                const struct block_q5_1 *b = row;
                for (uint64_t k = 0; k < n / QUANT_BLOCK; k++, out += QUANT_BLOCK) {
                        float d = f16_to_f32(b[k].d), m = f16_to_f32(b[k].m);
                        for (unsigned j = 0; j < QUANT_BLOCK; j++)
                                out[j] = (float) q5_element(b[k].qs, b[k].qh, j) * d + m;
                }
                return;
        }
        case TENSOR_Q8_0: {
                const struct block_q8_0 *b = row;
                for (uint64_t k = 0; k < n / QUANT_BLOCK; k++, out += QUANT_BLOCK) {
                        float d = f16_to_f32(b[k].d);
                        for (int j = 0; j < QUANT_BLOCK; j++)
                                out[j] = (float) b[k].qs[j] * d;
                }
                return;
        }
        case TENSOR_Q8_1: {
                const struct block_q8_1 *b = row;
                for (uint64_t k = 0; k < n / QUANT_BLOCK; k++, out += QUANT_BLOCK) {
                        float d = f16_to_f32(b[k].d);
                        for (int j = 0; j < QUANT_BLOCK; j++)
                                out[j] = (float) b[k].qs[j] * d;
                }
                return;
        }
        case TENSOR_Q2_K: case TENSOR_Q3_K: case TENSOR_Q4_K: case TENSOR_Q5_K: case TENSOR_Q6_K: case TENSOR_Q8_K:
                for (uint64_t k = 0; k < n / QK_K; k++, out += QK_K)
                        k_quant_block_to_float(type, (const uint8_t *) row + k * type_table[type].block_bytes, out);
                return;
        case TENSOR_TYPE_MAX:
                break;
        }
        assert(!"tensor_row_to_float: unsupported type");
}
