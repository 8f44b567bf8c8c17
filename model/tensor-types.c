/* SPDX-License-Identifier: MIT */
#include <assert.h>

#include "float16.h"
#include "tensor-types.h"

static const struct tensor_type_info type_table[TENSOR_TYPE_MAX] = {
        [TENSOR_F32] = { "F32", 1, 4 },
        [TENSOR_F16] = { "F16", 1, 2 },
        [TENSOR_Q4_0] = { "Q4_0", QUANT_BLOCK, sizeof(struct block_q4_0) },
        [TENSOR_Q4_1] = { "Q4_1", QUANT_BLOCK, sizeof(struct block_q4_1) },
        [TENSOR_Q8_0] = { "Q8_0", QUANT_BLOCK, sizeof(struct block_q8_0) },
        [TENSOR_Q8_1] = { "Q8_1", QUANT_BLOCK, sizeof(struct block_q8_1) },
        [TENSOR_BF16] = { "BF16", 1, 2 },
};

const struct tensor_type_info *tensor_type_info(uint32_t type) {
        if (type >= TENSOR_TYPE_MAX || !type_table[type].name)
                return NULL;
        return &type_table[type];
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
