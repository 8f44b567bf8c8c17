/* SPDX-License-Identifier: MIT */
#include <assert.h>
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
        [TENSOR_BF16] = { "BF16", 1, 2 },
};

/* The ids GGUF defines that this project does not read, so that a refusal can name them. */
static const char *const unread_type_names[TENSOR_TYPE_MAX] = {
        [10] = "Q2_K",    [11] = "Q3_K",  [12] = "Q4_K",   [13] = "Q5_K",  [14] = "Q6_K",  [15] = "Q8_K",
        [16] = "IQ2_XXS", [17] = "IQ2_XS", [18] = "IQ3_XXS", [19] = "IQ1_S", [20] = "IQ4_NL", [21] = "IQ3_S",
        [22] = "IQ2_S",   [23] = "IQ4_XS", [24] = "I8",     [25] = "I16",   [26] = "I32",   [27] = "I64",
        [28] = "F64",     [29] = "IQ1_M", [34] = "TQ1_0",  [35] = "TQ2_0", [39] = "MXFP4",
};

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
        case TENSOR_TYPE_MAX:
                break;
        }
        assert(!"tensor_row_to_float: unsupported type");
}
