/* SPDX-License-Identifier: MIT */
#pragma once

/* Quantized weight matrices repacked for the exact-sum product (cpu/dot.h, dot_packed_fn):
 * PACKED_ROWS rows interleaved so that one vector lane belongs to one row. For each block of
 * 32 columns, dword q of every row's quants sits in lane q of one 64-byte vector: one
 * unsigned-by-signed dot instruction (vpdpbusd) then multiplies four consecutive elements of
 * all sixteen rows by the same four activation bytes, and eight of them leave each lane with
 * its row's exact int32 block sum. The float work is one fused multiply-add per block and
 * row instead of one per element lane.
 *
 * A group of PACKED_ROWS rows (the last one padded with zero rows) is one stretch of
 * group_bytes at data + g * group_bytes:
 *   quants: n_blocks records of quant_bytes; record b holds quant_bytes / 64 vectors, and
 *           vector q lane r (bytes 4r..4r+3) is bytes 4q..4q+3 of row r's block b.
 *           For 4-bit types the low nibbles of vector q are elements 4q..4q+3 and the high
 *           nibbles elements 16+4q..16+4q+3, as in the GGUF block. Q8_0 quants are stored
 *           biased as unsigned bytes (w + 128), so that vpdpbusd takes them as they are.
 *   scales: n_blocks records of scale_bytes: the 16 rows' d as f16, then for Q4_1 their m.
 * The integer block sums are exact; for Q4_0 and Q8_0 the kernels subtract bias * sum(a),
 * with sum(a) the activation block's exact sum of quants (packed_activation_sums()). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor-types.h"

#define PACKED_ROWS 16
#define PACKED_TOKENS_MAX 8
#define PACKED_ALIGN 64

struct packed_weights {
        enum tensor_type type; /* TENSOR_Q4_0, TENSOR_Q4_1 or TENSOR_Q8_0 */
        uint64_t n_rows, n_cols;
        uint64_t n_groups; /* ceil(n_rows / PACKED_ROWS) */
        uint64_t n_blocks; /* n_cols / QUANT_BLOCK */
        uint32_t quant_bytes; /* per block of a group: 256 (4-bit) or 512 (Q8_0) */
        uint32_t scale_bytes; /* per block of a group: 32 (d), 64 (d, m) */
        uint64_t group_bytes; /* a multiple of PACKED_ALIGN */
        uint8_t *data;        /* PACKED_ALIGN-aligned, n_groups * group_bytes; NULL when empty */
};

/* What the kernels subtract per activation block, times sum(a): 8 for Q4_0 (nibbles stored
 * as 0..15), 128 for Q8_0 (stored w + 128), 0 for Q4_1 (its offset is m * s). */
static inline int32_t packed_quant_bias(enum tensor_type type) {
        return type == TENSOR_Q4_0 ? 8 : type == TENSOR_Q8_0 ? 128 : 0;
}

/* Whether packed_weights_build() takes this type. */
static inline bool packed_type_supported(enum tensor_type type) {
        return type == TENSOR_Q4_0 || type == TENSOR_Q4_1 || type == TENSOR_Q8_0;
}

/* The layout for n_rows rows of n_cols (a multiple of 32) elements, data left NULL. -EINVAL
 * for an unsupported type or shape. */
int packed_weights_init(struct packed_weights *p, enum tensor_type type, uint64_t n_rows, uint64_t n_cols);

/* Bytes the repacked copy takes. */
static inline uint64_t packed_weights_bytes(const struct packed_weights *p) {
        return p->n_groups * p->group_bytes;
}

/* Repacks the rows (row_bytes apart) into dest (PACKED_ALIGN-aligned, packed_weights_bytes()
 * long, owned by the caller), which becomes p->data. Callers that pack many matrices put
 * them in one arena: large pages then serve the whole stream. */
void packed_weights_fill(struct packed_weights *p, uint8_t *dest, const void *rows, uint64_t row_bytes);

/* init and fill into memory of its own, which packed_weights_free() releases. -EINVAL, -ENOMEM. */
int packed_weights_build(enum tensor_type type, const void *rows, uint64_t row_bytes, uint64_t n_rows, uint64_t n_cols,
                         struct packed_weights *ret);

void packed_weights_free(struct packed_weights *p);

/* sums[b] = the sum of activation block b's 32 quants, exact. */
void packed_activation_sums(const struct block_q8_1 *xq, size_t n_blocks, int32_t *sums);
