/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <string.h>

#include "packed-weights.h"

/* Where dword v of a row's qs (v < 16) or hmask (v >= 16, dword v - 16) goes: that row's lane
 * of vector v, the file's bytes as they are (packed-weights.h). */
static size_t lane_dword(unsigned v, unsigned lane) {
        return v * 4 * PACKED_ROWS + 4 * lane;
}

static size_t scale_byte(unsigned s, unsigned lane) {
        return PACKED_Q3_K_SCALES + s / 2 * 2 * PACKED_ROWS + 2 * lane + s % 2;
}

void packed_q3_K_put(const struct block_q3_K *block, unsigned lane, uint8_t *record, uint8_t *scales) {
        for (unsigned v = 0; v < QK_K / 16; v++)
                memcpy(record + lane_dword(v, lane), block->qs + 4 * v, 4);
        for (unsigned v = 0; v < QK_K / 32; v++)
                memcpy(record + lane_dword(QK_K / 16 + v, lane), block->hmask + 4 * v, 4);
        for (unsigned s = 0; s < QK_K / 16; s++)
                record[scale_byte(s, lane)] = (uint8_t) (int8_t) (k_quant_q3_scale(block->scales, s) - 32);
        ((f16_bits *) scales)[lane] = block->d;
}

/* The inverse of k_quant_q3_scale(): scale s's low four bits in nibble s / 8 of byte s % 8,
 * its top two in bits 2(s / 4) of byte 8 + s % 4. */
void packed_q3_K_get(const uint8_t *record, const uint8_t *scales, unsigned lane, struct block_q3_K *block) {
        for (unsigned v = 0; v < QK_K / 16; v++)
                memcpy(block->qs + 4 * v, record + lane_dword(v, lane), 4);
        for (unsigned v = 0; v < QK_K / 32; v++)
                memcpy(block->hmask + 4 * v, record + lane_dword(QK_K / 16 + v, lane), 4);
        memset(block->scales, 0, sizeof(block->scales));
        for (unsigned s = 0; s < QK_K / 16; s++) {
                unsigned value = (unsigned) ((int8_t) record[scale_byte(s, lane)] + 32);
                block->scales[s % 8] |= (uint8_t) ((value & 15) << (s < 8 ? 0 : 4));
                block->scales[8 + s % 4] |= (uint8_t) ((value >> 4) << (2 * (s / 4)));
        }
        block->d = ((const f16_bits *) scales)[lane];
}
