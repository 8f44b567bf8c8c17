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
        TENSOR_Q2_K = 10,
        TENSOR_Q3_K = 11,
        TENSOR_Q4_K = 12,
        TENSOR_Q5_K = 13,
        TENSOR_Q6_K = 14,
        TENSOR_Q8_K = 15,
        TENSOR_BF16 = 30,
        TENSOR_TYPE_MAX = 40, /* ids at or above this are never valid */
};

#define QUANT_BLOCK 32
/* The K-quants' super-block: 256 elements in sub-blocks of 16 or 32 with their own scales. */
#define QK_K 256

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

/* The K-quants (llama.cpp's k_quants), super-blocks of QK_K elements. Each keeps a float
 * scale d (and for the "min" types Q2_K, Q4_K and Q5_K a second, dmin) as f16 and per
 * sub-block integer scales; tensor_row_to_float() spells out each layout's element order. */
/* 16 sub-blocks of 16: scales[s] low nibble the scale, high nibble the min; 2-bit quants,
 * element 128n + 32j + l (l < 32) in bits 2j of qs[32n + l];
 * x = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4), s = element / 16 */
struct block_q2_K {
        uint8_t scales[QK_K / 16];
        uint8_t qs[QK_K / 4];
        f16_bits d;
        f16_bits dmin;
};
/* 16 sub-blocks of 16 with 6-bit scales packed in 12 bytes (k_quant_q3_scales()); element
 * 128n + 32j + l: low two bits in bits 2j of qs[32n + l], the third (set means +0, clear -4)
 * bit 4n + j of hmask[l]; x = d * (scale[s] - 32) * q, s = element / 16 */
struct block_q3_K {
        uint8_t hmask[QK_K / 8];
        uint8_t qs[QK_K / 4];
        uint8_t scales[12];
        f16_bits d;
};
/* 8 sub-blocks of 32 with 6-bit scales and mins packed in 12 bytes (k_quant_scale_min());
 * element 64c + l: low nibble of qs[32c + l] (l < 32), element 64c + 32 + l its high nibble;
 * x = d * scale[s] * q - dmin * min[s], s = element / 32 */
struct block_q4_K {
        f16_bits d;
        f16_bits dmin;
        uint8_t scales[12];
        uint8_t qs[QK_K / 2];
};
/* As q4_K with a fifth bit: element 64c + l's is bit 2c of qh[l], element 64c + 32 + l's bit
 * 2c + 1 */
struct block_q5_K {
        f16_bits d;
        f16_bits dmin;
        uint8_t scales[12];
        uint8_t qh[QK_K / 8];
        uint8_t qs[QK_K / 2];
};
/* 16 sub-blocks of 16 with int8 scales; element 128n + 32j + l (l < 32): low four bits from
 * ql[64n + l] (j = 0), ql[64n + 32 + l] (j = 1), their high nibbles (j = 2, 3), the top two
 * bits 2j of qh[32n + l]; x = d * scales[s] * (q - 32), s = element / 16 */
struct block_q6_K {
        uint8_t ql[QK_K / 2];
        uint8_t qh[QK_K / 4];
        int8_t scales[QK_K / 16];
        f16_bits d;
};
/* The K-quants' activations: x = d * qs, d a float; bsums[k] the sum of qs[16k .. 16k + 15]. */
struct block_q8_K {
        float d;
        int8_t qs[QK_K];
        int16_t bsums[QK_K / 16];
};

_Static_assert(sizeof(struct block_q2_K) == 84, "q2_K block is 84 bytes");
_Static_assert(sizeof(struct block_q3_K) == 110, "q3_K block is 110 bytes");
_Static_assert(sizeof(struct block_q4_K) == 144, "q4_K block is 144 bytes");
_Static_assert(sizeof(struct block_q5_K) == 176, "q5_K block is 176 bytes");
_Static_assert(sizeof(struct block_q6_K) == 210, "q6_K block is 210 bytes");
_Static_assert(sizeof(struct block_q8_K) == 292, "q8_K block is 292 bytes");
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

/* Scale and min of sub-block s (0..7) of a Q4_K or Q5_K super-block, 6 bits each, from its
 * 12 bytes: sub-blocks 0..3 in the low six bits of bytes s and s + 4, sub-blocks 4..7 in
 * byte s + 4's nibbles with their top two bits in the spare bits of bytes s - 4 and s. */
static inline void k_quant_scale_min(const uint8_t scales[12], unsigned s, uint8_t *scale, uint8_t *min) {
        if (s < 4) {
                *scale = scales[s] & 63;
                *min = scales[s + 4] & 63;
        } else {
                *scale = (uint8_t) ((scales[s + 4] & 15) | (scales[s - 4] >> 6) << 4);
                *min = (uint8_t) ((scales[s + 4] >> 4) | (scales[s] >> 6) << 4);
        }
}

/* Scale s (0..15) of a Q3_K super-block, 0..63 (the weight's factor is the value - 32): low
 * four bits from the nibbles of bytes 0..7 (scales 0..7 low nibbles, 8..15 high), the top
 * two from bits 2(s / 4) of byte 8 + s % 4. */
static inline int32_t k_quant_q3_scale(const uint8_t scales[12], unsigned s) {
        uint32_t low = s < 8 ? scales[s] & 15u : (uint32_t) scales[s - 8] >> 4;
        uint32_t high = ((uint32_t) scales[8 + s % 4] >> (2 * (s / 4))) & 3u;
        return (int32_t) (low | high << 4);
}

/* Element e (0..255) of a K-quant super-block as the unsigned quant its layout stores:
 * 0..15 for Q4_K, 0..31 for Q5_K, 0..63 for Q6_K (weight - 32 after its scale), and for Q3_K
 * the signed -4..3 it stands for. */
static inline uint32_t k_quant_q4_element(const uint8_t qs[QK_K / 2], unsigned e) {
        return (uint32_t) (qs[e / 64 * 32 + e % 32] >> (4 * (e % 64 / 32))) & 15u;
}
static inline uint32_t k_quant_q5_element(const struct block_q5_K *b, unsigned e) {
        return k_quant_q4_element(b->qs, e) | ((uint32_t) (b->qh[e % 32] >> (e / 32)) & 1u) << 4;
}
static inline uint32_t k_quant_q6_element(const struct block_q6_K *b, unsigned e) {
        unsigned n = e / 128, j = e % 128 / 32, l = e % 32;
        uint32_t low = (uint32_t) (b->ql[64 * n + 32 * (j & 1) + l] >> (4 * (j >> 1))) & 15u;
        return low | ((uint32_t) (b->qh[32 * n + l] >> (2 * j)) & 3u) << 4;
}
static inline int32_t k_quant_q3_element(const struct block_q3_K *b, unsigned e) {
        unsigned n = e / 128, j = e % 128 / 32, l = e % 32;
        int32_t low = (b->qs[32 * n + l] >> (2 * j)) & 3;
        return low - ((b->hmask[l] >> (4 * n + j)) & 1 ? 0 : 4);
}
static inline uint32_t k_quant_q2_element(const struct block_q2_K *b, unsigned e) {
        return (uint32_t) (b->qs[e / 128 * 32 + e % 32] >> (2 * (e % 128 / 32))) & 3u;
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
