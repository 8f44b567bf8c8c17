/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <string.h>

#include "packed-weights.h"

/* Where sub-block s's scale (mins: PACKED_Q2_K_MINS) of the row in lane goes: pairs of
 * sub-blocks, as Q3_K's and Q6_K's scales (packed-weights.h). */
static size_t pair_byte(size_t base, unsigned s, unsigned lane) {
        return base + s / 2 * 2 * PACKED_ROWS + 2 * lane + s % 2;
}

void packed_q2_K_put(const struct block_q2_K *block, unsigned lane, uint8_t *record, uint8_t *scales) {
        for (unsigned v = 0; v < QK_K / 16; v++)
                memcpy(record + v * 4 * PACKED_ROWS + 4 * lane, block->qs + 4 * v, 4);
        for (unsigned s = 0; s < QK_K / 16; s++) {
                record[pair_byte(PACKED_Q2_K_SCALES, s, lane)] = block->scales[s] & 15;
                record[pair_byte(PACKED_Q2_K_MINS, s, lane)] = block->scales[s] >> 4;
        }
        f16_bits *ds = (f16_bits *) scales;
        ds[lane] = block->d;
        ds[PACKED_ROWS + lane] = block->dmin;
}

void packed_q2_K_get(const uint8_t *record, const uint8_t *scales, unsigned lane, struct block_q2_K *block) {
        for (unsigned v = 0; v < QK_K / 16; v++)
                memcpy(block->qs + 4 * v, record + v * 4 * PACKED_ROWS + 4 * lane, 4);
        for (unsigned s = 0; s < QK_K / 16; s++)
                block->scales[s] = (uint8_t) (record[pair_byte(PACKED_Q2_K_SCALES, s, lane)] |
                                              record[pair_byte(PACKED_Q2_K_MINS, s, lane)] << 4);
        const f16_bits *ds = (const f16_bits *) scales;
        block->d = ds[lane];
        block->dmin = ds[PACKED_ROWS + lane];
}
