/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "packed-weights.h"

/* Where a block's f16 scale(s), quants and fifth bits sit, per type; m and qh are NULL for
 * types without them. */
static uint8_t *block_fields(enum tensor_type type, uint8_t *block, f16_bits **d, f16_bits **m, uint8_t **qh) {
        *m = NULL;
        *qh = NULL;
        switch (type) {
        case TENSOR_Q4_0: {
                struct block_q4_0 *b = (void *) block;
                *d = &b->d;
                return b->qs;
        }
        case TENSOR_Q4_1: {
                struct block_q4_1 *b = (void *) block;
                *d = &b->d;
                *m = &b->m;
                return b->qs;
        }
        case TENSOR_Q5_0: {
                struct block_q5_0 *b = (void *) block;
                *d = &b->d;
                *qh = b->qh;
                return b->qs;
        }
        case TENSOR_Q5_1: {
                struct block_q5_1 *b = (void *) block;
                *d = &b->d;
                *m = &b->m;
                *qh = b->qh;
                return b->qs;
        }
        default: {
                struct block_q8_0 *b = (void *) block;
                *d = &b->d;
                return (uint8_t *) b->qs;
        }
        }
}

static bool five_bits(enum tensor_type type) {
        return type == TENSOR_Q5_0 || type == TENSOR_Q5_1;
}

/* Dwords of one row's quants in a block record, beside the 5-bit types' dword of fifth bits. */
static uint32_t quant_dwords(enum tensor_type type) {
        return type == TENSOR_Q8_0 ? QUANT_BLOCK / 4 : QUANT_BLOCK / 8;
}

/* packed_q5_high() undone: the block's qh. */
static void q5_qh_from_high(uint32_t high, uint8_t qh[4]) {
        uint32_t bits = 0;
        for (unsigned l = 0; l < PACKED_LANES; l++)
                for (unsigned k = 0; k < 4; k++)
                        bits |= (high >> (8 * k + l) & 1u) << (4 * l + k);
        for (unsigned i = 0; i < 4; i++)
                qh[i] = (uint8_t) (bits >> (8 * i));
}

int packed_weights_init(struct packed_weights *p, enum tensor_type type, uint64_t n_rows, uint64_t n_cols) {
        *p = (struct packed_weights) { 0 };
        if (!packed_type_supported(type) || n_cols % tensor_type_info(type)->block_size != 0)
                return -EINVAL;
        if (packed_k_quant(type)) {
                *p = (struct packed_weights) {
                        .type = type,
                        .n_rows = n_rows,
                        .n_cols = n_cols,
                        .n_groups = (n_rows + PACKED_ROWS - 1) / PACKED_ROWS,
                        .n_blocks = n_cols / QK_K,
                        .quant_bytes = type == TENSOR_Q2_K   ? PACKED_Q2_K_QUANT_BYTES
                                       : type == TENSOR_Q3_K ? PACKED_Q3_K_QUANT_BYTES
                                       : type == TENSOR_Q4_K ? PACKED_Q4_K_QUANT_BYTES
                                       : type == TENSOR_Q5_K ? PACKED_Q5_K_QUANT_BYTES
                                                             : PACKED_Q6_K_QUANT_BYTES,
                        /* d, and dmin for the types with mins */
                        .scale_bytes = (type == TENSOR_Q3_K || type == TENSOR_Q6_K ? 1 : 2) * PACKED_ROWS * sizeof(f16_bits),
                };
                p->group_bytes = (p->n_blocks * (p->quant_bytes + p->scale_bytes) + PACKED_ALIGN - 1) / PACKED_ALIGN * PACKED_ALIGN;
                return 0;
        }
        *p = (struct packed_weights) {
                .type = type,
                .n_rows = n_rows,
                .n_cols = n_cols,
                .n_groups = (n_rows + PACKED_ROWS - 1) / PACKED_ROWS,
                .n_blocks = n_cols / QUANT_BLOCK,
                .quant_bytes = PACKED_ROWS * 4 * (quant_dwords(type) + (five_bits(type) ? 1 : 0)),
                .scale_bytes = type == TENSOR_Q4_1 || type == TENSOR_Q5_1 ? 2 * PACKED_ROWS * sizeof(f16_bits)
                                                                          : PACKED_ROWS * sizeof(f16_bits),
        };
        p->group_bytes = (p->n_blocks * (p->quant_bytes + p->scale_bytes) + PACKED_ALIGN - 1) / PACKED_ALIGN * PACKED_ALIGN;
        return 0;
}

void packed_weights_fill(struct packed_weights *p, uint8_t *dest, const void *rows, uint64_t row_bytes) {
        uint64_t block_bytes = tensor_type_info(p->type)->block_bytes;
        uint32_t n_dwords = quant_dwords(p->type);

        p->data = dest;
        memset(dest, 0, packed_weights_bytes(p)); /* padding rows: zero quants and scales */
        for (uint64_t row = 0; row < p->n_rows; row++) {
                unsigned lane = (unsigned) (row % PACKED_ROWS);
                uint8_t *quants = dest + row / PACKED_ROWS * p->group_bytes;
                uint8_t *scales = quants + p->n_blocks * p->quant_bytes;
                const uint8_t *src = (const uint8_t *) rows + row * row_bytes;
                if (packed_k_quant(p->type)) {
                        for (uint64_t b = 0; b < p->n_blocks; b++) {
                                const void *block = src + b * block_bytes;
                                uint8_t *rec = quants + b * p->quant_bytes, *s = scales + b * p->scale_bytes;
                                if (p->type == TENSOR_Q2_K)
                                        packed_q2_K_put(block, lane, rec, s);
                                else if (p->type == TENSOR_Q3_K)
                                        packed_q3_K_put(block, lane, rec, s);
                                else if (p->type == TENSOR_Q4_K)
                                        packed_q4_K_put(block, lane, rec, s);
                                else if (p->type == TENSOR_Q5_K)
                                        packed_q5_K_put(block, lane, rec, s);
                                else
                                        packed_q6_K_put(block, lane, rec, s);
                        }
                        continue;
                }
                for (uint64_t b = 0; b < p->n_blocks; b++) {
                        f16_bits *d, *m;
                        uint8_t *qh;
                        const uint8_t *qs = block_fields(p->type, (uint8_t *) src + b * block_bytes, &d, &m, &qh); /* only read */
                        uint8_t *rec = quants + b * p->quant_bytes;
                        for (uint32_t q = 0; q < n_dwords; q++)
                                for (unsigned k = 0; k < 4; k++) {
                                        uint8_t v = qs[4 * q + k];
                                        /* Q8_0 as unsigned w + 128: flipping the sign bit adds 128 mod 256 */
                                        rec[q * 4 * PACKED_ROWS + 4 * lane + k] = p->type == TENSOR_Q8_0 ? v ^ 0x80 : v;
                                }
                        if (qh) {
                                uint32_t high = packed_q5_high(qh);
                                memcpy(rec + n_dwords * 4 * PACKED_ROWS + 4 * lane, &high, sizeof(high));
                        }
                        f16_bits *s = (f16_bits *) (scales + b * p->scale_bytes);
                        s[lane] = *d;
                        if (m)
                                s[PACKED_ROWS + lane] = *m;
                }
        }
}

void packed_weights_row(const struct packed_weights *p, uint64_t row, void *out) {
        uint64_t block_bytes = tensor_type_info(p->type)->block_bytes;
        uint32_t n_dwords = quant_dwords(p->type);
        unsigned lane = (unsigned) (row % PACKED_ROWS);
        const uint8_t *quants = p->data + row / PACKED_ROWS * p->group_bytes;
        const uint8_t *scales = quants + p->n_blocks * p->quant_bytes;
        if (packed_k_quant(p->type)) {
                for (uint64_t b = 0; b < p->n_blocks; b++) {
                        const uint8_t *rec = quants + b * p->quant_bytes, *s = scales + b * p->scale_bytes;
                        void *block = (uint8_t *) out + b * block_bytes;
                        if (p->type == TENSOR_Q2_K)
                                packed_q2_K_get(rec, s, lane, block);
                        else if (p->type == TENSOR_Q3_K)
                                packed_q3_K_get(rec, s, lane, block);
                        else if (p->type == TENSOR_Q4_K)
                                packed_q4_K_get(rec, s, lane, block);
                        else if (p->type == TENSOR_Q5_K)
                                packed_q5_K_get(rec, s, lane, block);
                        else
                                packed_q6_K_get(rec, s, lane, block);
                }
                return;
        }
        for (uint64_t b = 0; b < p->n_blocks; b++) {
                uint8_t *block = (uint8_t *) out + b * block_bytes;
                const f16_bits *s = (const f16_bits *) (scales + b * p->scale_bytes);
                f16_bits *d, *m;
                uint8_t *qh;
                uint8_t *qs = block_fields(p->type, block, &d, &m, &qh);
                *d = s[lane];
                if (m)
                        *m = s[PACKED_ROWS + lane];
                const uint8_t *rec = quants + b * p->quant_bytes;
                for (uint32_t q = 0; q < n_dwords; q++)
                        for (unsigned k = 0; k < 4; k++) {
                                uint8_t v = rec[q * 4 * PACKED_ROWS + 4 * lane + k];
                                qs[4 * q + k] = p->type == TENSOR_Q8_0 ? v ^ 0x80 : v;
                        }
                if (qh) {
                        uint32_t high;
                        memcpy(&high, rec + n_dwords * 4 * PACKED_ROWS + 4 * lane, sizeof(high));
                        q5_qh_from_high(high, qh);
                }
        }
}

int packed_weights_build(enum tensor_type type, const void *rows, uint64_t row_bytes, uint64_t n_rows, uint64_t n_cols,
                         struct packed_weights *ret) {
        int rc = packed_weights_init(ret, type, n_rows, n_cols);
        if (rc < 0)
                return rc;
        if (row_bytes < tensor_row_bytes(type, n_cols)) {
                *ret = (struct packed_weights) { 0 };
                return -EINVAL;
        }
        uint64_t size = packed_weights_bytes(ret);
        if (size == 0)
                return 0;
        uint8_t *data = aligned_alloc(PACKED_ALIGN, size);
        if (!data) {
                *ret = (struct packed_weights) { 0 };
                return -ENOMEM;
        }
        packed_weights_fill(ret, data, rows, row_bytes);
        return 0;
}

void packed_weights_free(struct packed_weights *p) {
        free(p->data);
        *p = (struct packed_weights) { 0 };
}

void packed_activation_corrections(const struct block_q8_1 *xq, size_t n_blocks, int32_t *corrections) {
        static const enum tensor_type biased[] = { TENSOR_Q4_0, TENSOR_Q8_0, TENSOR_Q5_0 };
        for (size_t b = 0; b < n_blocks; b++) {
                int32_t *c = corrections + b * PACKED_CORRECTIONS;
                for (unsigned l = 0; l < PACKED_LANES; l++) {
                        const int8_t *q = xq[b].qs + 4 * l;
                        int32_t lane_sum = q[0] + q[1] + q[2] + q[3];
                        for (size_t i = 0; i < sizeof(biased) / sizeof(biased[0]); i++)
                                c[packed_correction_offset(biased[i]) + l] = -packed_quant_bias(biased[i]) * lane_sum;
                }
        }
}

void packed_block_sums(const struct block_q8_1 *xq, size_t n_blocks, int32_t *sums) {
        for (size_t b = 0; b < n_blocks; b++) {
                int32_t sum = 0;
                for (unsigned i = 0; i < QUANT_BLOCK; i++)
                        sum += xq[b].qs[i];
                sums[b] = sum;
        }
}
