/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <string.h>

#include "packed-weights.h"

/* The 12 scale bytes of a Q4_K or Q5_K super-block from its eight 6-bit scales and mins: the
 * inverse of k_quant_scale_min(). Sub-blocks 0..3 keep theirs in the low six bits of bytes
 * 0..3 (scales) and 4..7 (mins); 4..7 keep their low four bits in the nibbles of bytes 8..11
 * and their top two in the top bits of bytes 0..7. */
static void pack_scales(const uint8_t scale[8], const uint8_t min[8], uint8_t packed[12]) {
        for (unsigned s = 0; s < 4; s++) {
                packed[s] = (uint8_t) ((scale[s] & 63) | (scale[s + 4] >> 4) << 6);
                packed[s + 4] = (uint8_t) ((min[s] & 63) | (min[s + 4] >> 4) << 6);
                packed[s + 8] = (uint8_t) ((scale[s + 4] & 15) | (min[s + 4] & 15) << 4);
        }
}

/* The parts the two types share: the nibbles, the scales and mins, d and dmin. */
static void put_common(const uint8_t qs[QK_K / 2], const uint8_t packed[12], f16_bits d, f16_bits dmin, unsigned lane,
                       uint8_t *record, uint8_t *scales) {
        for (unsigned v = 0; v < QK_K / 8; v++) /* vector v = 8c + j holds bytes 4v .. 4v + 3 */
                memcpy(record + v * 4 * PACKED_ROWS + 4 * lane, qs + 4 * v, 4);
        for (unsigned s = 0; s < 8; s++) {
                uint8_t sc, m;
                k_quant_scale_min(packed, s, &sc, &m);
                record[PACKED_Q4_K_SCALES + s * PACKED_ROWS + lane] = sc;
                record[PACKED_Q4_K_MINS + s / 2 * 2 * PACKED_ROWS + 2 * lane + s % 2] = m;
        }
        f16_bits *ds = (f16_bits *) scales;
        ds[lane] = d;
        ds[PACKED_ROWS + lane] = dmin;
}

static void get_common(const uint8_t *record, const uint8_t *scales, unsigned lane, uint8_t qs[QK_K / 2],
                       uint8_t packed[12], f16_bits *d, f16_bits *dmin) {
        uint8_t sc[8], m[8];
        for (unsigned v = 0; v < QK_K / 8; v++)
                memcpy(qs + 4 * v, record + v * 4 * PACKED_ROWS + 4 * lane, 4);
        for (unsigned s = 0; s < 8; s++) {
                sc[s] = record[PACKED_Q4_K_SCALES + s * PACKED_ROWS + lane];
                m[s] = record[PACKED_Q4_K_MINS + s / 2 * 2 * PACKED_ROWS + 2 * lane + s % 2];
        }
        pack_scales(sc, m, packed);
        const f16_bits *ds = (const f16_bits *) scales;
        *d = ds[lane];
        *dmin = ds[PACKED_ROWS + lane];
}

void packed_q4_K_put(const struct block_q4_K *block, unsigned lane, uint8_t *record, uint8_t *scales) {
        put_common(block->qs, block->scales, block->d, block->dmin, lane, record, scales);
}

void packed_q4_K_get(const uint8_t *record, const uint8_t *scales, unsigned lane, struct block_q4_K *block) {
        get_common(record, scales, lane, block->qs, block->scales, &block->d, &block->dmin);
}

void packed_q5_K_put(const struct block_q5_K *block, unsigned lane, uint8_t *record, uint8_t *scales) {
        put_common(block->qs, block->scales, block->d, block->dmin, lane, record, scales);
        for (unsigned v = 0; v < QK_K / 32; v++)
                memcpy(record + PACKED_Q5_K_HIGH + v * 4 * PACKED_ROWS + 4 * lane, block->qh + 4 * v, 4);
}

void packed_q5_K_get(const uint8_t *record, const uint8_t *scales, unsigned lane, struct block_q5_K *block) {
        get_common(record, scales, lane, block->qs, block->scales, &block->d, &block->dmin);
        for (unsigned v = 0; v < QK_K / 32; v++)
                memcpy(block->qh + 4 * v, record + PACKED_Q5_K_HIGH + v * 4 * PACKED_ROWS + 4 * lane, 4);
}
