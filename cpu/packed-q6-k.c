/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <string.h>

#include "packed-weights.h"

void packed_q6_K_put(const struct block_q6_K *block, unsigned lane, uint8_t *record, uint8_t *scales) {
        for (unsigned e = 0; e < QK_K; e++) /* element e = 32s + 4k + i is byte i of lane `lane` in vector 8s + k */
                record[e / 4 * 4 * PACKED_ROWS + 4 * lane + e % 4] = (uint8_t) k_quant_q6_element(block, e);
        for (unsigned s = 0; s < QK_K / 16; s++)
                record[PACKED_Q6_K_SCALES + s / 2 * 2 * PACKED_ROWS + 2 * lane + s % 2] = (uint8_t) block->scales[s];
        ((f16_bits *) scales)[lane] = block->d;
}

/* The inverse of k_quant_q6_element(): element 128n + 32j + l's low four bits are nibble j / 2
 * of ql[64n + 32(j % 2) + l], its top two bits 2j, 2j + 1 of qh[32n + l]. */
void packed_q6_K_get(const uint8_t *record, const uint8_t *scales, unsigned lane, struct block_q6_K *block) {
        memset(block->ql, 0, sizeof(block->ql));
        memset(block->qh, 0, sizeof(block->qh));
        for (unsigned e = 0; e < QK_K; e++) {
                unsigned q = record[e / 4 * 4 * PACKED_ROWS + 4 * lane + e % 4];
                unsigned n = e / 128, j = e % 128 / 32, l = e % 32;
                block->ql[64 * n + 32 * (j % 2) + l] |= (uint8_t) ((q & 15) << (4 * (j / 2)));
                block->qh[32 * n + l] |= (uint8_t) ((q >> 4) << (2 * j));
        }
        for (unsigned s = 0; s < QK_K / 16; s++)
                block->scales[s] = (int8_t) record[PACKED_Q6_K_SCALES + s / 2 * 2 * PACKED_ROWS + 2 * lane + s % 2];
        block->d = ((const f16_bits *) scales)[lane];
}
