/* SPDX-License-Identifier: MIT */
/* attn_scores and attn_values (dot.h) for AVX-512, sixteen positions at a time. One position's
 * 16 lanes are one 512-bit vector, built with the same fused multiply-adds as the single
 * product; then sixteen positions' vectors are summed together, each by lanes_sum16()'s tree,
 * with shuffles that pair halves, quarters, pairs and single lanes of two vectors, so that
 * every add is the tree's add for two positions at once. The single product spent most of its
 * time on that horizontal sum, one position at a time. The sixteen keys are converted from
 * f16 once for all the queries (the group's heads), not once per query. Values go lane by
 * lane: the positions of one lane accumulate in registers for every query, 64 columns at
 * a time, each row converted once; for 64 lanes the four that fold together are added as
 * they are made. Heads whose size is not a multiple of 64 go one position
 * at a time (attention-by-position.h). Included by dot-x86-template.h for the AVX-512 set,
 * after its single-position products. */

#include "f16-walk.h"

#define ATTN_ATTRS __attribute__((target(DOT_TARGET), always_inline)) static inline

/* The lanes_sum16() of each of l[0..15], position p's in lane p. */
ATTN_ATTRS __m512 attn_sum16_each(const __m512 l[16]) {
        __m512 a[8], b[4], c[2];
        /* l[e] + l[e + 8]: the 256-bit halves, for positions 2k and 2k + 1 */
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++)
                a[k] = _mm512_add_ps(_mm512_shuffle_f32x4(l[2 * k], l[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(l[2 * k], l[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
        /* + 4 apart: the 128-bit quarters; b[k]'s quarter q is position 4k + q */
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
                b[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
        /* (b0 + b2) and (b1 + b3) within each quarter */
        _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++)
                c[k] = _mm512_add_ps(_mm512_shuffle_ps(b[2 * k], b[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_ps(b[2 * k], b[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
        /* the last pair: lane 4q + r now holds position q + 4r */
        __m512 d = _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
        return _mm512_permutexvar_ps(_mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0), d);
}

/* Element i of row k (n of them, a multiple of 64, converted from f16) against q: lane
 * i % 16 (wide: i % 64, then lanes_sum64()'s first fold to 16), fused multiply-adds from +0. */
ATTN_ATTRS __m512 attn_key_lanes(const float *k, const float *q, size_t n, bool wide) {
        const __m512 zero = _mm512_setzero_ps();
        __m512 acc[4] = { zero, zero, zero, zero };
        for (size_t i = 0; i < n; i += 64)
                _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
                        __m512 kf = _mm512_load_ps(k + i + 16 * c);
                        __m512 qf = _mm512_loadu_ps(q + i + 16 * c);
                        if (wide)
                                acc[c] = _mm512_fmadd_ps(kf, qf, acc[c]);
                        else
                                acc[0] = _mm512_fmadd_ps(kf, qf, acc[0]);
                }
        if (!wide)
                return acc[0];
        return _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]));
}

/* n a multiple of 64; inlined with n constant for the common head sizes, so that the
 * loops over a row unroll and the query stays in registers across positions. */
ATTN_ATTRS void attn_scores_runs(const struct f16_rows *keys, unsigned n_pos, const float *q, size_t q_stride,
                                  unsigned n_q, size_t n, bool wide, float scale, float *scores, size_t scores_stride) {
        /* The query meets its key in the wide product's lanes; no remainder, so the double
         * sum of the single product is the float one. */
        const __m512 scale_v = _mm512_set1_ps(scale);
        float converted[16 * DOT_F16_MAX_DIM] __attribute__((aligned(64)));
        struct f16_walk walk = f16_walk_start(keys, 0, 1), ahead = f16_walk_start(keys, F16_WALK_PREFETCH_POSITIONS, 1);
        enum f16_fetch keys_how = f16_keys_fetch(wide, n_pos);
        for (unsigned j0 = 0; j0 < n_pos; j0 += 16) {
                unsigned m = n_pos - j0 < 16 ? n_pos - j0 : 16;
                for (unsigned p = 0; p < m; p++, f16_walk_next(&walk)) {
                        f16_walk_prefetch_ahead(&ahead, j0 + p, n_pos, n, keys_how);
                        f16_walk_fetch_beside(&walk, n, keys_how);
                        const f16_bits *row = f16_walk_row(&walk);
                        for (size_t i = 0; i < n; i += 16)
                                _mm512_store_ps(converted + p * n + i,
                                                _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (row + i))));
                }
                for (unsigned g = 0; g < n_q; g++) {
                        const float *qg = q + g * q_stride;
                        __m512 l[16];
                        _Pragma("GCC unroll 16") for (unsigned p = 0; p < 16; p++)
                                l[p] = p < m ? attn_key_lanes(converted + p * n, qg, n, wide) : _mm512_setzero_ps();
                        __m512 dots = attn_sum16_each(l);
                        _mm512_mask_storeu_ps(scores + g * scores_stride + j0, (__mmask16) ((1u << m) - 1),
                                              _mm512_mul_ps(dots, scale_v));
                }
        }
}

/* One lane's sums for n_q (<= 4) queries and the 64 columns from i: positions j = l,
 * l + n_lanes, ... below n_pos, each value row converted once for all the queries. */
ATTN_ATTRS void attn_values_sums(const struct f16_rows *values, unsigned l, unsigned n_lanes, unsigned n_pos, const float *w,
                                 size_t w_stride, unsigned n_q, size_t i, __m512 acc[4][4]) {
        _Pragma("GCC unroll 4") for (unsigned g = 0; g < 4; g++)
                _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)
                        acc[g][c] = _mm512_setzero_ps();
        struct f16_walk walk = f16_walk_start(values, l, n_lanes);
        for (unsigned j = l; j < n_pos; j += n_lanes, f16_walk_next(&walk)) {
                const f16_bits *v = f16_walk_row(&walk) + i;
                __m512 vf[4];
                _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)
                        vf[c] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (v + 16 * c)));
                _Pragma("GCC unroll 4") for (unsigned g = 0; g < n_q; g++) {
                        __m512 wg = _mm512_set1_ps(w[g * w_stride + j]);
                        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)
                                acc[g][c] = _mm512_fmadd_ps(vf[c], wg, acc[g][c]);
                }
        }
}

/* Lane l of 16 for n_q (<= 4) queries and the 64 columns from i, stored as row l. */
ATTN_ATTRS void attn_values_lane(const struct f16_rows *values, unsigned l, unsigned n_pos, const float *w, size_t w_stride,
                                 unsigned n_q, size_t i, size_t n, float *lanes, size_t lanes_stride) {
        __m512 acc[4][4];
        attn_values_sums(values, l, 16, n_pos, w, w_stride, n_q, i, acc);
        _Pragma("GCC unroll 4") for (unsigned g = 0; g < n_q; g++)
                _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)
                        _mm512_storeu_ps(lanes + g * lanes_stride + (size_t) l * n + i + 16 * c, acc[g][c]);
}

/* Row e of the 64-lane fold (dot.h), (lane e + lane 32 + e) + (lane 16 + e + lane 48 + e),
 * for n_q (<= 4) queries and the 64 columns from i: a walk per lane reads whole rows (a
 * walk per sixteen columns had cost more in starting and stepping walks, a decode's lanes
 * having a few positions each, than in products). The pair 0 and 2 waits in row e while
 * lanes 1 and 3 are made. */
ATTN_ATTRS void attn_values_fold(const struct f16_rows *values, unsigned e, unsigned n_pos, const float *w, size_t w_stride,
                                 unsigned n_q, size_t i, size_t n, float *lanes, size_t lanes_stride) {
        __m512 first[4][4], second[4][4];
        attn_values_sums(values, e, 64, n_pos, w, w_stride, n_q, i, first);
        attn_values_sums(values, e + 32, 64, n_pos, w, w_stride, n_q, i, second);
        _Pragma("GCC unroll 4") for (unsigned g = 0; g < n_q; g++)
                _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++)
                        _mm512_storeu_ps(lanes + g * lanes_stride + (size_t) e * n + i + 16 * c,
                                         _mm512_add_ps(first[g][c], second[g][c]));
        attn_values_sums(values, e + 16, 64, n_pos, w, w_stride, n_q, i, first);
        attn_values_sums(values, e + 48, 64, n_pos, w, w_stride, n_q, i, second);
        _Pragma("GCC unroll 4") for (unsigned g = 0; g < n_q; g++)
                _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
                        float *row = lanes + g * lanes_stride + (size_t) e * n + i + 16 * c;
                        _mm512_storeu_ps(row, _mm512_add_ps(_mm512_loadu_ps(row), _mm512_add_ps(first[g][c], second[g][c])));
                }
}

/* Row (or lane) e's part for queries g0.. (n_q_part of them, <= 4) from column i: folded
 * (64 lanes, 64 columns) or one lane (16 lanes, 64 columns). */
ATTN_ATTRS void attn_values_part(const struct f16_rows *values, unsigned e, unsigned n_pos, const float *w, size_t w_stride,
                                 const unsigned n_q_part, size_t i, size_t n, float *lanes, size_t lanes_stride, bool fold) {
        if (fold)
                attn_values_fold(values, e, n_pos, w, w_stride, n_q_part, i, n, lanes, lanes_stride);
        else
                attn_values_lane(values, e, n_pos, w, w_stride, n_q_part, i, n, lanes, lanes_stride);
}

#define ATTN_FOLD_COLUMNS 64
#define ATTN_LANE_COLUMNS 64
#include "attention-entries.h"
