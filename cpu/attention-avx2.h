/* SPDX-License-Identifier: MIT */
/* attn_scores and attn_values (dot.h) for AVX2, eight positions at a time, with the bits of
 * the single-position products. A position's 16 lanes are two 256-bit halves built with the
 * single product's fused multiply-adds; the first step of lanes_sum16() (half + half) leaves
 * one vector per position, and eight positions' vectors are then summed together by the
 * rest of the tree with shuffles that pair 128-bit halves, pairs and single lanes of two
 * vectors, every add being the tree's add for two positions at once. Eight keys are
 * converted from f16 once for all the queries of the group. Values go lane by lane, the
 * positions of one lane accumulating in registers for up to four queries, each row
 * converted once; for 64 lanes the four lanes that fold together are summed as they finish.
 * Heads whose size is not a multiple of 64 go one position at a time
 * (attention-by-position.h). Included by dot-x86-template.h for the AVX2 set, after its
 * single-position products. */

#include "f16-walk.h"

#define ATTN_ATTRS __attribute__((target(DOT_TARGET), always_inline)) static inline

/* The rest of lanes_sum16() for eight positions, a[p] holding position p's (lane e + lane
 * e + 8) for e < 8; position p's sum comes back in lane p. */
ATTN_ATTRS __m256 attn_sum8_each(const __m256 a[8]) {
        __m256 b[4], c[2];
        /* + 4 apart: the 128-bit halves; b[k] holds position 2k low, 2k + 1 high */
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
                b[k] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * k], a[2 * k + 1], 0x20),
                                     _mm256_permute2f128_ps(a[2 * k], a[2 * k + 1], 0x31));
        /* (b0 + b2) and (b1 + b3) within each half */
        _Pragma("GCC unroll 2") for (int k = 0; k < 2; k++)
                c[k] = _mm256_add_ps(_mm256_shuffle_ps(b[2 * k], b[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm256_shuffle_ps(b[2 * k], b[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
        /* the last pair: the low half holds positions 0, 2, 4, 6 and the high half 1, 3, 5, 7 */
        __m256 d = _mm256_add_ps(_mm256_shuffle_ps(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
        return _mm256_permutevar8x32_ps(d, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* Element i of row k (n of them, a multiple of 64, converted from f16) against q, wide: lane
 * i % 64 by fused multiply-adds from +0, then lanes_sum64()'s first fold to 16; returns
 * lanes e + (e + 8) for e < 8, the first step of lanes_sum16(). */
ATTN_ATTRS __m256 attn_key_lanes_wide(const float *k, const float *q, size_t n) {
        __m256 acc[8];
        _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++)
                acc[c] = _mm256_setzero_ps();
        for (size_t i = 0; i < n; i += 64)
                _Pragma("GCC unroll 8") for (int c = 0; c < 8; c++)
                        acc[c] = _mm256_fmadd_ps(_mm256_load_ps(k + i + 8 * c), _mm256_loadu_ps(q + i + 8 * c), acc[c]);
        __m256 low = _mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6]));
        __m256 high = _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7]));
        return _mm256_add_ps(high, low);
}

/* Four rows k, k + n, ... (n a multiple of 16) against q, narrow: element i to lane i % 16 by
 * fused multiply-adds from +0; out[p] = row p's lanes e + (e + 8) for e < 8, the first step
 * of lanes_sum16(). The four positions' chains interleave to hide their latency, and the
 * query is loaded once for the four. */
ATTN_ATTRS void attn_key_lanes4(const float *k, const float *q, size_t n, __m256 out[4]) {
        __m256 acc[4][2];
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)
                acc[p][0] = acc[p][1] = _mm256_setzero_ps();
        for (size_t i = 0; i < n; i += 16) {
                __m256 q0 = _mm256_loadu_ps(q + i), q1 = _mm256_loadu_ps(q + i + 8);
                _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
                        acc[p][0] = _mm256_fmadd_ps(_mm256_load_ps(k + p * n + i), q0, acc[p][0]);
                        acc[p][1] = _mm256_fmadd_ps(_mm256_load_ps(k + p * n + i + 8), q1, acc[p][1]);
                }
        }
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++)
                out[p] = _mm256_add_ps(acc[p][1], acc[p][0]);
}

/* n a multiple of 64; inlined with n constant for the common head sizes. */
ATTN_ATTRS void attn_scores_runs(const struct f16_rows *keys, unsigned n_pos, const float *q, size_t q_stride, unsigned n_q,
                                 size_t n, bool wide, float scale, float *scores, size_t scores_stride) {
        /* no remainder, so the wide product's double sum is the float one */
        const __m256 scale_v = _mm256_set1_ps(scale);
        float converted[8 * DOT_F16_MAX_DIM] __attribute__((aligned(32)));
        struct f16_walk walk = f16_walk_start(keys, 0, 1), ahead = f16_walk_start(keys, F16_WALK_PREFETCH_POSITIONS, 1);
        enum f16_fetch keys_how = f16_keys_fetch(wide, n_pos);
        for (unsigned j0 = 0; j0 < n_pos; j0 += 8) {
                unsigned m = n_pos - j0 < 8 ? n_pos - j0 : 8;
                for (unsigned p = 0; p < m; p++, f16_walk_next(&walk)) {
                        f16_walk_prefetch_ahead(&ahead, j0 + p, n_pos, n, keys_how);
                        f16_walk_fetch_beside(&walk, n, keys_how);
                        const f16_bits *row = f16_walk_row(&walk);
                        for (size_t i = 0; i < n; i += 8)
                                _mm256_store_ps(converted + p * n + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (row + i))));
                }
                /* a short last run: zero keys, whose sums are computed and dropped */
                if (m < 8)
                        memset(converted + m * n, 0, (8 - m) * n * sizeof(float));
                for (unsigned g = 0; g < n_q; g++) {
                        const float *qg = q + g * q_stride;
                        __m256 a[8];
                        if (wide)
                                _Pragma("GCC unroll 8") for (unsigned p = 0; p < 8; p++)
                                        a[p] = attn_key_lanes_wide(converted + p * n, qg, n);
                        else {
                                attn_key_lanes4(converted, qg, n, a);
                                attn_key_lanes4(converted + 4 * n, qg, n, a + 4);
                        }
                        __m256 dots = _mm256_mul_ps(attn_sum8_each(a), scale_v);
                        float *out = scores + g * scores_stride + j0;
                        if (m == 8)
                                _mm256_storeu_ps(out, dots);
                        else {
                                float tail[8];
                                _mm256_storeu_ps(tail, dots);
                                memcpy(out, tail, m * sizeof(float));
                        }
                }
        }
}

/* Lane l's sums (positions j = l, l + 16, ... below n_pos) for n_q (<= 4) queries and the
 * sixteen columns from i0, each value row converted once. */
ATTN_ATTRS void attn_values_lane(const struct f16_rows *values, unsigned l, unsigned n_pos, const float *w, size_t w_stride,
                                 unsigned n_q, size_t i0, size_t n, float *lanes, size_t lanes_stride) {
        __m256 acc[4][2];
        _Pragma("GCC unroll 4") for (unsigned g = 0; g < 4; g++)
                acc[g][0] = acc[g][1] = _mm256_setzero_ps();
        struct f16_walk walk = f16_walk_start(values, l, 16);
        for (unsigned j = l; j < n_pos; j += 16, f16_walk_next(&walk)) {
                const f16_bits *v = f16_walk_row(&walk) + i0;
                __m256 vf[2] = { _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) v)),
                                 _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (v + 8))) };
                _Pragma("GCC unroll 4") for (unsigned g = 0; g < n_q; g++) {
                        __m256 wg = _mm256_set1_ps(w[g * w_stride + j]);
                        acc[g][0] = _mm256_fmadd_ps(vf[0], wg, acc[g][0]);
                        acc[g][1] = _mm256_fmadd_ps(vf[1], wg, acc[g][1]);
                }
        }
        _Pragma("GCC unroll 4") for (unsigned g = 0; g < n_q; g++) {
                float *out = lanes + g * lanes_stride + (size_t) l * n + i0;
                _mm256_storeu_ps(out, acc[g][0]);
                _mm256_storeu_ps(out + 8, acc[g][1]);
        }
}

/* One lane of the 64 (positions j = lane, lane + 64, ...) for n_q (<= 4) queries and the
 * eight columns from i. */
ATTN_ATTRS void attn_values_lane64(const struct f16_rows *values, unsigned lane, unsigned n_pos, const float *w,
                                   size_t w_stride, unsigned n_q, size_t i, __m256 acc[4]) {
        _Pragma("GCC unroll 4") for (unsigned g = 0; g < 4; g++)
                acc[g] = _mm256_setzero_ps();
        struct f16_walk walk = f16_walk_start(values, lane, 64);
        for (unsigned j = lane; j < n_pos; j += 64, f16_walk_next(&walk)) {
                __m256 vf = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (f16_walk_row(&walk) + i)));
                _Pragma("GCC unroll 4") for (unsigned g = 0; g < n_q; g++)
                        acc[g] = _mm256_fmadd_ps(vf, _mm256_set1_ps(w[g * w_stride + j]), acc[g]);
        }
}

/* Row e of the 64-lane fold (dot.h), (lane e + lane 32 + e) + (lane 16 + e + lane 48 + e),
 * for n_q (<= 4) queries and the eight columns from i. The pair 0 and 2 is added before
 * lanes 1 and 3 are made, so that no more than three sets of sums are ever held. */
ATTN_ATTRS void attn_values_fold(const struct f16_rows *values, unsigned e, unsigned n_pos, const float *w, size_t w_stride,
                                 unsigned n_q, size_t i, size_t n, float *lanes, size_t lanes_stride) {
        __m256 first[4], second[4], even[4];
        attn_values_lane64(values, e, n_pos, w, w_stride, n_q, i, first);
        attn_values_lane64(values, e + 32, n_pos, w, w_stride, n_q, i, second);
        _Pragma("GCC unroll 4") for (unsigned g = 0; g < n_q; g++)
                even[g] = _mm256_add_ps(first[g], second[g]);
        attn_values_lane64(values, e + 16, n_pos, w, w_stride, n_q, i, first);
        attn_values_lane64(values, e + 48, n_pos, w, w_stride, n_q, i, second);
        _Pragma("GCC unroll 4") for (unsigned g = 0; g < n_q; g++)
                _mm256_storeu_ps(lanes + g * lanes_stride + (size_t) e * n + i,
                                 _mm256_add_ps(even[g], _mm256_add_ps(first[g], second[g])));
}

/* Row (or lane) e's part for queries g0.. (n_q_part of them, <= 4) from column i: folded
 * (64 lanes, eight columns) or one lane (16 lanes, sixteen columns). */
ATTN_ATTRS void attn_values_part(const struct f16_rows *values, unsigned e, unsigned n_pos, const float *w, size_t w_stride,
                                 const unsigned n_q_part, size_t i, size_t n, float *lanes, size_t lanes_stride, bool fold) {
        if (fold)
                attn_values_fold(values, e, n_pos, w, w_stride, n_q_part, i, n, lanes, lanes_stride);
        else
                attn_values_lane(values, e, n_pos, w, w_stride, n_q_part, i, n, lanes, lanes_stride);
}

#define ATTN_FOLD_COLUMNS 8
#define ATTN_LANE_COLUMNS 16
#include "attention-entries.h"
