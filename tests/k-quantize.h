/* SPDX-License-Identifier: MIT */
#pragma once

/* Plain quantizers for the K-quant layouts, for synthetic test models: a sub-block's scale
 * (and min) from its range, the super-block's d (and dmin) from the largest of them. Not
 * llama.cpp's search for the best scales (tests/requantize has that); every value they
 * write is a valid block whose dequantization approximates the input. */

#include <stdint.h>

#include "tensor-types.h"

/* n floats (a multiple of QK_K) into blocks of a K-quant type. */
void k_quantize_row(enum tensor_type type, const float *x, void *out, uint64_t n);
