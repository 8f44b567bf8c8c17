/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <string.h>

#include "packed-weights.h"

/* Where dword v of a row's ql (v < 32) or qh (v >= 32, dword v - 32) goes: that row's lane of
 * vector v, the file's bytes as they are (packed-weights.h). */
static size_t lane_dword(unsigned v, unsigned lane) {
        return v * 4 * PACKED_ROWS + 4 * lane;
}

void packed_q6_K_put(const struct block_q6_K *block, unsigned lane, uint8_t *record, uint8_t *scales) {
        for (unsigned v = 0; v < QK_K / 8; v++)
                memcpy(record + lane_dword(v, lane), block->ql + 4 * v, 4);
        for (unsigned v = 0; v < QK_K / 16; v++)
                memcpy(record + lane_dword(QK_K / 8 + v, lane), block->qh + 4 * v, 4);
        for (unsigned s = 0; s < QK_K / 16; s++)
                record[PACKED_Q6_K_SCALES + s / 2 * 2 * PACKED_ROWS + 2 * lane + s % 2] = (uint8_t) block->scales[s];
        ((f16_bits *) scales)[lane] = block->d;
}

void packed_q6_K_get(const uint8_t *record, const uint8_t *scales, unsigned lane, struct block_q6_K *block) {
        for (unsigned v = 0; v < QK_K / 8; v++)
                memcpy(block->ql + 4 * v, record + lane_dword(v, lane), 4);
        for (unsigned v = 0; v < QK_K / 16; v++)
                memcpy(block->qh + 4 * v, record + lane_dword(QK_K / 8 + v, lane), 4);
        for (unsigned s = 0; s < QK_K / 16; s++)
                block->scales[s] = (int8_t) record[PACKED_Q6_K_SCALES + s / 2 * 2 * PACKED_ROWS + 2 * lane + s % 2];
        block->d = ((const f16_bits *) scales)[lane];
}
