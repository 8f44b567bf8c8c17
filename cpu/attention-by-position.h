/* SPDX-License-Identifier: MIT */
#pragma once

/* attn_scores and attn_values (dot.h) one position at a time, on a set's single-position
 * products: the scalar reference, the AVX2 set, and the AVX-512 set for head sizes its
 * vectors do not fit. The single-position products follow dot.h's definitions for one key
 * or value row:
 *   dot(k, q, q_stride, n_q, n, out): out[g] = the product of k and q + g * q_stride;
 *   axpy(acc, acc_stride, v, w, n_q, n): acc_g[i] = fma(v[i], w[g], acc_g[i]). */

#include <string.h>

#include "dot.h"

typedef void (*f16_dot_fn)(const f16_bits *k, const float *q, size_t q_stride, unsigned n_q, size_t n, float *out);
typedef void (*f16_axpy_fn)(float *acc, size_t acc_stride, const f16_bits *v, const float *w, unsigned n_q, size_t n);

static inline void attn_scores_by_position(f16_dot_fn dot, const struct f16_rows *keys, unsigned n_pos, const float *q,
                                           size_t q_stride, unsigned n_q, size_t n, float scale, float *scores,
                                           size_t scores_stride) {
        float dots[DOT_GROUP_MAX];
        for (unsigned j = 0; j < n_pos; j++) {
                dot(f16_row(keys, j), q, q_stride, n_q, n, dots);
                for (unsigned g = 0; g < n_q; g++)
                        scores[g * scores_stride + j] = dots[g] * scale;
        }
}

/* Rows e in [first, end), end <= min(n_rows, 16), become (row e + row 32 + e) + (row 16 +
 * e + row 48 + e), rows from n_rows on counting as +0 (lanes_sum64()'s first fold), in
 * place. */
static inline void attn_fold64(float *rows, unsigned n_rows, unsigned first, unsigned end, size_t n) {
        for (unsigned e = first; e < end; e++)
                for (size_t i = 0; i < n; i++) {
                        float l[4];
                        for (unsigned k = 0; k < 4; k++)
                                l[k] = e + 16 * k < n_rows ? rows[(e + 16 * k) * n + i] : 0.0f;
                        rows[e * n + i] = (l[0] + l[2]) + (l[1] + l[3]);
                }
}

/* The rows in [first_row, first_row + n_rows) (dot.h: attn_values): the lanes l with l %
 * 16 in that range, position by position, then folded. */
static inline void attn_values_by_position(f16_axpy_fn axpy, const struct f16_rows *values, unsigned n_pos,
                                           const float *w, size_t w_stride, unsigned n_q, size_t n, unsigned n_lanes,
                                           unsigned first_row, unsigned n_rows, float *lanes, size_t lanes_stride) {
        unsigned n_used = n_pos < n_lanes ? n_pos : n_lanes; /* lanes that some position reaches */
        unsigned end_row = first_row + n_rows < 16 ? first_row + n_rows : 16;
        float wj[DOT_GROUP_MAX];
        for (unsigned g = 0; g < n_q; g++)
                for (unsigned l = 0; l < n_used; l++)
                        if (l % 16 >= first_row && l % 16 < end_row)
                                memset(lanes + g * lanes_stride + (size_t) l * n, 0, n * sizeof(float));
        for (unsigned j = 0; j < n_pos; j++) {
                if (j % 16 < first_row || j % 16 >= end_row)
                        continue;
                for (unsigned g = 0; g < n_q; g++)
                        wj[g] = w[g * w_stride + j];
                axpy(lanes + (size_t) (j % n_lanes) * n, lanes_stride, f16_row(values, j), wj, n_q, n);
        }
        if (n_lanes == 64)
                for (unsigned g = 0; g < n_q; g++)
                        attn_fold64(lanes + g * lanes_stride, n_used, first_row, end_row < n_used ? end_row : n_used, n);
}
