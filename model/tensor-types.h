/* SPDX-License-Identifier: MIT */
#pragma once

/* Tensor element types as numbered by the GGUF format, their block layouts and the
 * per-type facts every other file looks up here instead of switching on the type.
 * The block structs compile as C and as CUDA C alike. */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define _Static_assert static_assert
#endif

enum tensor_type {
        TENSOR_F32 = 0,
        TENSOR_F16 = 1,
        TENSOR_Q4_0 = 2,
        TENSOR_Q4_1 = 3,
        TENSOR_Q5_0 = 6,
        TENSOR_Q5_1 = 7,
        TENSOR_Q8_0 = 8,
        TENSOR_Q8_1 = 9,
        TENSOR_BF16 = 30,
        TENSOR_TYPE_MAX = 40, /* ids at or above this are never valid */
};

#define QUANT_BLOCK 32

typedef uint16_t f16_bits;  /* IEEE binary16, stored */
typedef uint16_t bf16_bits; /* bfloat16, stored */

/* x[j] = ((qs[j] & 15) - 8) * d, x[j + 16] = ((qs[j] >> 4) - 8) * d */
struct block_q4_0 {
        f16_bits d;
        uint8_t qs[QUANT_BLOCK / 2];
};
/* x[j] = (qs[j] & 15) * d + m, x[j + 16] = (qs[j] >> 4) * d + m */
struct block_q4_1 {
        f16_bits d;
        f16_bits m;
        uint8_t qs[QUANT_BLOCK / 2];
};
/* q[j] = (qs[j] & 15) | (bit j of qh) << 4 and q[j + 16] = (qs[j] >> 4) | (bit j + 16 of qh) << 4,
 * qh read as a little-endian uint32; x[j] = (q[j] - 16) * d */
struct block_q5_0 {
        f16_bits d;
        uint8_t qh[4];
        uint8_t qs[QUANT_BLOCK / 2];
};
/* q[j] as for q5_0; x[j] = q[j] * d + m */
struct block_q5_1 {
        f16_bits d;
        f16_bits m;
        uint8_t qh[4];
        uint8_t qs[QUANT_BLOCK / 2];
};
/* x[j] = qs[j] * d */
struct block_q8_0 {
        f16_bits d;
        int8_t qs[QUANT_BLOCK];
};
/* As q8_0, plus s = d * sum(qs), which folds a q4_1 weight block's offset m into the dot
 * product. Used for activations. */
struct block_q8_1 {
        f16_bits d;
        f16_bits s;
        int8_t qs[QUANT_BLOCK];
};

_Static_assert(sizeof(struct block_q4_0) == 18, "q4_0 block is 18 bytes");
_Static_assert(sizeof(struct block_q4_1) == 20, "q4_1 block is 20 bytes");
_Static_assert(sizeof(struct block_q5_0) == 22, "q5_0 block is 22 bytes");
_Static_assert(sizeof(struct block_q5_1) == 24, "q5_1 block is 24 bytes");
_Static_assert(sizeof(struct block_q8_0) == 34, "q8_0 block is 34 bytes");
_Static_assert(sizeof(struct block_q8_1) == 36, "q8_1 block is 36 bytes");

/* Element j (0..31) of a 5-bit block: its low four bits from the nibbles, the fifth from qh. */
static inline uint32_t q5_element(const uint8_t qs[QUANT_BLOCK / 2], const uint8_t qh[4], unsigned j) {
        uint32_t high = (uint32_t) qh[0] | (uint32_t) qh[1] << 8 | (uint32_t) qh[2] << 16 | (uint32_t) qh[3] << 24;
        uint32_t low = j < QUANT_BLOCK / 2 ? qs[j] & 15u : qs[j - QUANT_BLOCK / 2] >> 4;
        return low | ((high >> j) & 1u) << 4;
}

struct tensor_type_info {
        const char *name;    /* NULL for an id this project does not know */
        uint32_t block_size; /* elements per block (1 for plain floats) */
        uint32_t block_bytes;
};

/* NULL when the id is unknown or unsupported. */
const struct tensor_type_info *tensor_type_info(uint32_t type);

/* The GGUF format's name for a type id, supported or not ("Q6_K" for 14); NULL for an id the
 * format does not define. For messages about a file's types. */
const char *tensor_type_name(uint32_t type);

/* The supported types' names in id order, comma-separated ("F32, F16, ..."), into out
 * (size bytes, truncated if short). For messages that say what a file may hold. */
void tensor_type_supported_names(char *out, size_t size);

/* Bytes of one row of n elements; 0 when n is not a multiple of the block size. */
uint64_t tensor_row_bytes(enum tensor_type type, uint64_t n);

/* Writes n floats decoded from a row of the given type. */
void tensor_row_to_float(enum tensor_type type, const void *row, float *out, uint64_t n);
