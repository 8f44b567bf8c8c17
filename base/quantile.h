/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdint.h>

/* The quantile (0..1) of n values, linearly interpolated between closest ranks; sorts the
 * values in place. 0 when n is 0. */
double quantile_sorting(double *values, uint32_t n, double quantile);
