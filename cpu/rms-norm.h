/* SPDX-License-Identifier: MIT */
#pragma once

#include <math.h>
#include <stdint.h>

/* out = x / sqrt(mean(x^2) + eps) * weight, as the reference computes it: squares rounded to
 * float, summed in double; x times the scale, then times the weight. out may be x. */
static inline void rms_norm(const float *x, const float *weight, float *out, uint32_t n, float eps) {
        double sum = 0.0;
        for (uint32_t i = 0; i < n; i++)
                sum += (double) (x[i] * x[i]);
        float scale = 1.0f / sqrtf((float) (sum / n) + eps);
        for (uint32_t i = 0; i < n; i++)
                out[i] = x[i] * scale * weight[i];
}
