/* SPDX-License-Identifier: MIT */
#pragma once

#include <stddef.h>

#include "tensor-types.h"

/* Quantizes n floats (a multiple of 32) to int8 blocks: d = max|x| / 127,
 * q = round_half_even(x * 127 / max|x|), s = d * sum(q). The same activations serve Q4_0, Q4_1 and Q8_0 weights. */
void quantize_row_q8_1(const float *x, struct block_q8_1 *out, size_t n);
