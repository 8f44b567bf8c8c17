/* SPDX-License-Identifier: MIT */
#pragma once

/* Single kernels of the CUDA backend on the device, for the GPU tests to hold against the
 * host model of their arithmetic (tests/gpu-host-model.h). */

#include <stdbool.h>
#include <stdint.h>

#include "error.h"
#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Quantizes n_tokens rows of x (w->n_cols floats each) on the device into xq and ds, and
 * multiplies w by them into out (n_tokens rows of w->n_rows), in the order the CPU takes for
 * w (weight_single_accumulator(w, is_output)). */
int cuda_ops_matmul(const struct weight *w, const float *x, uint32_t n_tokens, bool is_output, float *out,
                    int8_t *xq, float *ds, struct error *err);

#ifdef __cplusplus
}
#endif
