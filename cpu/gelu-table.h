/* SPDX-License-Identifier: MIT */
#pragma once

/* GELU at every f16 value, as llama.cpp's CPU backend tabulates it for its GELU and GeGLU:
 * entry h is 0.5 x (1 + tanh(sqrt(2 / pi) x (1 + 0.044715 x^2))) for x = f16 h, computed in
 * float (1 + 0.044715 x x by one fused multiply-add, as the compiler contracts the
 * reference's expression) and rounded to f16, stored here as the float of that f16 so that
 * a vector gather reads it directly. Built on first use; 65536 entries. */
const float *gelu_table(void);
