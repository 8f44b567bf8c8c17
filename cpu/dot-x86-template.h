/* SPDX-License-Identifier: MIT */
/* The x86 dot kernels, written once and instantiated per instruction set. The including file
 * defines DOT_TARGET (a target attribute string), DOT_SET (the set's name as an identifier)
 * and dot_u8_s8(), which turns 32 unsigned-by-signed byte products into 8 int32 partial
 * sums; only that step differs between AVX2 and AVX-512 VNNI. No include guard: this file is
 * meant to be included once per instruction set. */

#include <immintrin.h>
#include <string.h>

#include "attention-by-position.h"
#include "exp-poly.h"
#include "float16.h"
#include "gelu-table.h"
#include "rope.h"

#define DOT_CONCAT_(a, b) a##_##b
#define DOT_CONCAT(a, b) DOT_CONCAT_(a, b)
#define DOT_FN(name) DOT_CONCAT(name, DOT_SET)

__attribute__((target(DOT_TARGET))) static inline float DOT_FN(hsum)(__m256 v) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
}

__attribute__((target(DOT_TARGET))) static inline float DOT_FN(half)(uint16_t h) {
        return _cvtsh_ss(h);
}

/* The 32 nibbles of a 4-bit block as bytes in element order: the low nibbles are elements
 * 0..15 and the high nibbles 16..31. */
__attribute__((target(DOT_TARGET))) static inline __m256i DOT_FN(unpack_nibbles)(const uint8_t *qs) {
        __m128i packed = _mm_loadu_si128((const __m128i *) qs);
        __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
        return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

/* The 32 quants of a 5-bit block as bytes 0..31 in element order: the nibbles, and bit j of
 * qh as 16 in byte j (dot_q5_high_bits(), which the including file defines). */
__attribute__((target(DOT_TARGET))) static inline __m256i DOT_FN(unpack_q5)(const uint8_t *qs, const uint8_t *qh) {
        return _mm256_or_si256(DOT_FN(unpack_nibbles)(qs), dot_q5_high_bits(qh));
}

/* Signed by signed through the unsigned-by-signed instruction: |w| * (a with w's sign). */
__attribute__((target(DOT_TARGET))) static inline __m256i DOT_FN(dot_s8_s8)(__m256i w, __m256i a) {
        return dot_u8_s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
}

__attribute__((target(DOT_TARGET))) static float DOT_FN(dot_q4_0)(const void *weight_row, const struct block_q8_1 *act,
                                                                  size_t n_blocks) {
        const struct block_q4_0 *w = weight_row;
        __m256 acc = _mm256_setzero_ps();
        for (size_t b = 0; b < n_blocks; b++) {
                __m256i wq = _mm256_sub_epi8(DOT_FN(unpack_nibbles)(w[b].qs), _mm256_set1_epi8(8));
                __m256i aq = _mm256_loadu_si256((const __m256i *) act[b].qs);
                __m256 scale = _mm256_set1_ps(DOT_FN(half)(w[b].d) * DOT_FN(half)(act[b].d));
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(DOT_FN(dot_s8_s8)(wq, aq)), scale, acc);
        }
        return DOT_FN(hsum)(acc);
}

__attribute__((target(DOT_TARGET))) static float DOT_FN(dot_q4_1)(const void *weight_row, const struct block_q8_1 *act,
                                                                  size_t n_blocks) {
        const struct block_q4_1 *w = weight_row;
        __m256 acc = _mm256_setzero_ps();
        float offset = 0.0f;
        for (size_t b = 0; b < n_blocks; b++) {
                __m256i wq = DOT_FN(unpack_nibbles)(w[b].qs);
                __m256i aq = _mm256_loadu_si256((const __m256i *) act[b].qs);
                __m256 scale = _mm256_set1_ps(DOT_FN(half)(w[b].d) * DOT_FN(half)(act[b].d));
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8_s8(wq, aq)), scale, acc);
                offset = fmaf(DOT_FN(half)(w[b].m), DOT_FN(half)(act[b].s), offset); /* as the tile's lanes do */
        }
        return DOT_FN(hsum)(acc) + offset;
}

__attribute__((target(DOT_TARGET))) static float DOT_FN(dot_q5_0)(const void *weight_row, const struct block_q8_1 *act,
                                                                  size_t n_blocks) {
        const struct block_q5_0 *w = weight_row;
        __m256 acc = _mm256_setzero_ps();
        for (size_t b = 0; b < n_blocks; b++) {
                __m256i wq = _mm256_sub_epi8(DOT_FN(unpack_q5)(w[b].qs, w[b].qh), _mm256_set1_epi8(16));
                __m256i aq = _mm256_loadu_si256((const __m256i *) act[b].qs);
                __m256 scale = _mm256_set1_ps(DOT_FN(half)(w[b].d) * DOT_FN(half)(act[b].d));
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(DOT_FN(dot_s8_s8)(wq, aq)), scale, acc);
        }
        return DOT_FN(hsum)(acc);
}

__attribute__((target(DOT_TARGET))) static float DOT_FN(dot_q5_1)(const void *weight_row, const struct block_q8_1 *act,
                                                                  size_t n_blocks) {
        const struct block_q5_1 *w = weight_row;
        __m256 acc = _mm256_setzero_ps();
        float offset = 0.0f;
        for (size_t b = 0; b < n_blocks; b++) {
                __m256i wq = DOT_FN(unpack_q5)(w[b].qs, w[b].qh);
                __m256i aq = _mm256_loadu_si256((const __m256i *) act[b].qs);
                __m256 scale = _mm256_set1_ps(DOT_FN(half)(w[b].d) * DOT_FN(half)(act[b].d));
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8_s8(wq, aq)), scale, acc);
                offset = fmaf(DOT_FN(half)(w[b].m), DOT_FN(half)(act[b].s), offset);
        }
        return DOT_FN(hsum)(acc) + offset;
}

__attribute__((target(DOT_TARGET))) static float DOT_FN(dot_q8_0)(const void *weight_row, const struct block_q8_1 *act,
                                                                  size_t n_blocks) {
        const struct block_q8_0 *w = weight_row;
        __m256 acc = _mm256_setzero_ps();
        for (size_t b = 0; b < n_blocks; b++) {
                __m256i wq = _mm256_loadu_si256((const __m256i *) w[b].qs);
                __m256i aq = _mm256_loadu_si256((const __m256i *) act[b].qs);
                __m256 scale = _mm256_set1_ps(DOT_FN(half)(w[b].d) * DOT_FN(half)(act[b].d));
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(DOT_FN(dot_s8_s8)(wq, aq)), scale, acc);
        }
        return DOT_FN(hsum)(acc);
}

/* The tiles: the single kernels' operations, per row and token in the same order, with the
 * weight block unpacked once. T is a constant after inlining, so the accumulators stay in
 * registers. */
#define TILE_ATTRS __attribute__((target(DOT_TARGET), always_inline)) static inline

/* The two halves at p, as floats in lanes 0 and 1. */
TILE_ATTRS __m128 DOT_FN(half_pair)(const void *p) {
        int32_t bits;
        memcpy(&bits, p, sizeof(bits));
        return _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
}

/* The signed types: the weight block of row r as signed bytes for dot_s8_s8, and its scale. */
TILE_ATTRS __m256i DOT_FN(tile_weights_q4_0)(const void *block, float *d) {
        const struct block_q4_0 *w = block;
        *d = DOT_FN(half)(w->d);
        return _mm256_sub_epi8(DOT_FN(unpack_nibbles)(w->qs), _mm256_set1_epi8(8));
}

TILE_ATTRS __m256i DOT_FN(tile_weights_q5_0)(const void *block, float *d) {
        const struct block_q5_0 *w = block;
        *d = DOT_FN(half)(w->d);
        return _mm256_sub_epi8(DOT_FN(unpack_q5)(w->qs, w->qh), _mm256_set1_epi8(16));
}

TILE_ATTRS __m256i DOT_FN(tile_weights_q8_0)(const void *block, float *d) {
        const struct block_q8_0 *w = block;
        *d = DOT_FN(half)(w->d);
        return _mm256_loadu_si256((const __m256i *) w->qs);
}

#define DOT_TILE_SIGNED(name, block_type)                                                                              \
        TILE_ATTRS void DOT_FN(tile_##name##_n)(const uint8_t *rows, size_t row_bytes, const struct block_q8_1 *act,  \
                                                const float *ds, size_t act_stride, const unsigned T, size_t n_blocks, \
                                                float *out) {                                                          \
                __m256 acc[DOT_TILE_ROWS][DOT_TILE_TOKENS];                                                            \
                _Pragma("GCC unroll 16") for (unsigned i = 0; i < DOT_TILE_ROWS * DOT_TILE_TOKENS; i++)                \
                        acc[i / DOT_TILE_TOKENS][i % DOT_TILE_TOKENS] = _mm256_setzero_ps();                            \
                for (size_t b = 0; b < n_blocks; b++) {                                                                \
                        __m256i aq[DOT_TILE_TOKENS];                                                                   \
                        float ad[DOT_TILE_TOKENS];                                                                     \
                        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {                                     \
                                aq[t] = _mm256_loadu_si256((const __m256i *) act[t * act_stride + b].qs);               \
                                ad[t] = ds[2 * (t * act_stride + b)];                                                  \
                        }                                                                                              \
                        _Pragma("GCC unroll 4") for (unsigned r = 0; r < DOT_TILE_ROWS; r++) {                         \
                                float wd;                                                                              \
                                __m256i wq = DOT_FN(tile_weights_##name)(                                              \
                                        (const block_type *) (rows + r * row_bytes) + b, &wd);                         \
                                __m256i wabs = _mm256_sign_epi8(wq, wq);                                               \
                                _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {                             \
                                        __m256i p = dot_u8_s8(wabs, _mm256_sign_epi8(aq[t], wq));                      \
                                        acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(wd * ad[t]), \
                                                                    acc[r][t]);                                        \
                                }                                                                                      \
                        }                                                                                              \
                }                                                                                                      \
                _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++)                                               \
                        _Pragma("GCC unroll 4") for (unsigned r = 0; r < DOT_TILE_ROWS; r++)                           \
                                out[t * DOT_TILE_ROWS + r] = DOT_FN(hsum)(acc[r][t]);                                  \
        }

DOT_TILE_SIGNED(q4_0, struct block_q4_0)
DOT_TILE_SIGNED(q5_0, struct block_q5_0)
DOT_TILE_SIGNED(q8_0, struct block_q8_0)

/* The types with an offset, Q4_1 and Q5_1 (type, a constant after inlining): row r's weight
 * block as unsigned quants, its d and m (adjacent, first in the block) in lanes 0 and 1. */
TILE_ATTRS __m256i DOT_FN(tile_weights_offset)(const uint8_t *block, __m128 *dm, const enum tensor_type type) {
        *dm = DOT_FN(half_pair)(block);
        if (type == TENSOR_Q5_1) {
                const struct block_q5_1 *w = (const void *) block;
                return DOT_FN(unpack_q5)(w->qs, w->qh);
        }
        return DOT_FN(unpack_nibbles)(((const struct block_q4_1 *) (const void *) block)->qs);
}

TILE_ATTRS void DOT_FN(tile_offset_n)(const uint8_t *rows, size_t row_bytes, const struct block_q8_1 *act, const float *ds,
                                      size_t act_stride, const unsigned T, size_t n_blocks, float *out,
                                      const enum tensor_type type) {
        const size_t block_bytes = type == TENSOR_Q5_1 ? sizeof(struct block_q5_1) : sizeof(struct block_q4_1);
        __m256 acc[DOT_TILE_ROWS][DOT_TILE_TOKENS];
        __m128 offset[DOT_TILE_ROWS]; /* lane t: the offset sum of token t, by fused multiply-adds */
        _Pragma("GCC unroll 4") for (unsigned r = 0; r < DOT_TILE_ROWS; r++) {
                offset[r] = _mm_setzero_ps();
                _Pragma("GCC unroll 4") for (unsigned t = 0; t < DOT_TILE_TOKENS; t++)
                        acc[r][t] = _mm256_setzero_ps();
        }
        for (size_t b = 0; b < n_blocks; b++) {
                __m256i aq[DOT_TILE_TOKENS];
                float ad[DOT_TILE_TOKENS], as[DOT_TILE_TOKENS] = { 0 };
                _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                        aq[t] = _mm256_loadu_si256((const __m256i *) act[t * act_stride + b].qs);
                        ad[t] = ds[2 * (t * act_stride + b)];
                        as[t] = ds[2 * (t * act_stride + b) + 1];
                }
                /* in registers, not through memory: four narrow stores do not forward to one wide load */
                __m128 as4 = _mm_setr_ps(as[0], as[1], as[2], as[3]);
                _Pragma("GCC unroll 4") for (unsigned r = 0; r < DOT_TILE_ROWS; r++) {
                        __m128 dm;
                        __m256i wq = DOT_FN(tile_weights_offset)(rows + r * row_bytes + b * block_bytes, &dm, type);
                        float wd = _mm_cvtss_f32(dm);
                        offset[r] = _mm_fmadd_ps(_mm_permute_ps(dm, 0x55), as4, offset[r]);
                        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++)
                                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8_s8(wq, aq[t])), _mm256_set1_ps(wd * ad[t]),
                                                            acc[r][t]);
                }
        }
        _Pragma("GCC unroll 4") for (unsigned r = 0; r < DOT_TILE_ROWS; r++) {
                float offsets[DOT_TILE_TOKENS];
                _mm_storeu_ps(offsets, offset[r]);
                _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++)
                        out[t * DOT_TILE_ROWS + r] = DOT_FN(hsum)(acc[r][t]) + offsets[t];
        }
}

#define DOT_TILE_OFFSET(name, type)                                                                                    \
        TILE_ATTRS void DOT_FN(tile_##name##_n)(const uint8_t *rows, size_t row_bytes, const struct block_q8_1 *act,  \
                                                const float *ds, size_t act_stride, const unsigned T, size_t n_blocks, \
                                                float *out) {                                                          \
                DOT_FN(tile_offset_n)(rows, row_bytes, act, ds, act_stride, T, n_blocks, out, type);                   \
        }

DOT_TILE_OFFSET(q4_1, TENSOR_Q4_1)
DOT_TILE_OFFSET(q5_1, TENSOR_Q5_1)

__attribute__((target(DOT_TARGET))) static void DOT_FN(rope)(float *x, uint32_t n_heads, uint32_t head_dim, uint32_t half,
                                                             bool halves,
                                                             const float *cos, const float *sin) {
        rope_rows(x, n_heads, head_dim, half, halves, cos, sin);
}

/* packed_activation_corrections() a block at a time: its eight lanes' sums of four quants
 * come from one multiply-add of bytes by ones and one of the pairs by ones; each type's
 * corrections are one vector. The scalar loop spent most of its time storing them one by
 * one (a tenth of a Q4_0 prompt's time on the Zen 4 machine, perf, in its slow mode). */
__attribute__((target(DOT_TARGET))) static void DOT_FN(activation_corrections)(const struct block_q8_1 *xq, size_t n_blocks,
                                                                               int32_t *corrections) {
        const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
        const __m256i neg_bias_q4_0 = _mm256_set1_epi32(-packed_quant_bias(TENSOR_Q4_0));
        const __m256i neg_bias_q8_0 = _mm256_set1_epi32(-packed_quant_bias(TENSOR_Q8_0));
        const __m256i neg_bias_q5_0 = _mm256_set1_epi32(-packed_quant_bias(TENSOR_Q5_0));
        for (size_t b = 0; b < n_blocks; b++) {
                __m256i q = _mm256_loadu_si256((const __m256i *) xq[b].qs);
                __m256i lane_sums = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
                int32_t *c = corrections + b * PACKED_CORRECTIONS;
                _mm256_storeu_si256((__m256i *) (c + packed_correction_offset(TENSOR_Q4_0)),
                                    _mm256_mullo_epi32(lane_sums, neg_bias_q4_0));
                _mm256_storeu_si256((__m256i *) (c + packed_correction_offset(TENSOR_Q8_0)),
                                    _mm256_mullo_epi32(lane_sums, neg_bias_q8_0));
                _mm256_storeu_si256((__m256i *) (c + packed_correction_offset(TENSOR_Q5_0)),
                                    _mm256_mullo_epi32(lane_sums, neg_bias_q5_0));
        }
}

/* quantize_row_q8_1() eight lanes at a time: the maximum is exact, the scale is computed
 * by the same scalar operations, rounding is to nearest even as nearbyintf() does in the
 * default mode, and the sum is of integers: the same bits. */
__attribute__((target(DOT_TARGET))) static void DOT_FN(quantize_q8_1)(const float *x, struct block_q8_1 *out, float *ds,
                                                                      size_t n) {
        const __m256 sign = _mm256_set1_ps(-0.0f);
        for (size_t b = 0; b < n / QUANT_BLOCK; b++, x += QUANT_BLOCK) {
                __m256 v[4], m = _mm256_setzero_ps();
                for (int i = 0; i < 4; i++) {
                        v[i] = _mm256_loadu_ps(x + 8 * i);
                        m = _mm256_max_ps(_mm256_andnot_ps(sign, v[i]), m); /* a NaN input is skipped, as by fmaxf */
                }
                __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
                h = _mm_max_ps(h, _mm_movehl_ps(h, h));
                h = _mm_max_ss(h, _mm_movehdup_ps(h));
                float amax = _mm_cvtss_f32(h);
                float d = amax / 127.0f;
                __m256 inv_d = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
                __m256i q[4], sum = _mm256_setzero_si256();
                for (int i = 0; i < 4; i++) {
                        q[i] = _mm256_cvtps_epi32(
                                _mm256_round_ps(_mm256_mul_ps(v[i], inv_d), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
                        sum = _mm256_add_epi32(sum, q[i]);
                }
                /* int32 to int8 in element order: the packs interleave 128-bit lanes, the permute undoes it */
                __m256i q16a = _mm256_packs_epi32(q[0], q[1]), q16b = _mm256_packs_epi32(q[2], q[3]);
                __m256i q8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16a, q16b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
                _mm256_storeu_si256((__m256i *) out[b].qs, q8);
                __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
                s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
                s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
                /* F16C rounds to nearest even like f32_to_f16(); d and s are finite */
                __m128 ds_f32 = _mm_setr_ps(d, (float) _mm_cvtsi128_si32(s) * d, 0.0f, 0.0f);
                __m128i ds_f16 = _mm_cvtps_ph(ds_f32, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                uint32_t ds_bits = (uint32_t) _mm_cvtsi128_si32(ds_f16);
                out[b].d = (uint16_t) ds_bits;
                out[b].s = (uint16_t) (ds_bits >> 16);
                if (ds)
                        _mm_storel_pi((__m64 *) (ds + 2 * b), _mm_cvtph_ps(ds_f16));
        }
}

/* One entry per weight type, dispatching to a tile specialised for the token count. */
#define DOT_TILE_ENTRY(name)                                                                                           \
        __attribute__((target(DOT_TARGET))) static void DOT_FN(name)(                                                 \
                const void *weight_rows, size_t row_bytes, const struct block_q8_1 *act, const float *ds,              \
                size_t act_stride, unsigned n_tokens, size_t n_blocks, float out[DOT_TILE_TOKENS * DOT_TILE_ROWS]) {   \
                const uint8_t *rows = weight_rows;                                                                     \
                switch (n_tokens) {                                                                                    \
                case 1: DOT_FN(name##_n)(rows, row_bytes, act, ds, act_stride, 1, n_blocks, out); break;               \
                case 2: DOT_FN(name##_n)(rows, row_bytes, act, ds, act_stride, 2, n_blocks, out); break;               \
                case 3: DOT_FN(name##_n)(rows, row_bytes, act, ds, act_stride, 3, n_blocks, out); break;               \
                default: DOT_FN(name##_n)(rows, row_bytes, act, ds, act_stride, 4, n_blocks, out); break;              \
                }                                                                                                      \
        }

/* A set with wider tiles of its own (dot-avx512-tiles.h) defines DOT_TILE_FN first. */
#ifndef DOT_TILE_FN
DOT_TILE_ENTRY(tile_q4_0)
DOT_TILE_ENTRY(tile_q4_1)
DOT_TILE_ENTRY(tile_q5_0)
DOT_TILE_ENTRY(tile_q5_1)
DOT_TILE_ENTRY(tile_q8_0)
#define DOT_TILE_FN(name) DOT_FN(name)
#endif

/* A set with a wider packed product of its own (packed-dot-avx512.h) defines DOT_PACKED_FN first. */
#ifndef DOT_PACKED_FN
#include "packed-dot-x86-template.h"
#endif

/* The key or value in floats, converted once for the whole group (the conversion is exact,
 * so the products below are those of the f16 values). */
__attribute__((target(DOT_TARGET))) static inline void DOT_FN(f16_to_floats)(const f16_bits *k, size_t n, float *out) {
        size_t i = 0;
        for (; i + 8 <= n; i += 8)
                _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (k + i))));
        for (; i < n; i++)
                out[i] = DOT_FN(half)(k[i]);
}

/* 16 lanes as two 8-wide halves: lanes 0-7 and 8-15, fused multiply-add, then the tree of
 * lanes_sum16(). */
__attribute__((target(DOT_TARGET))) static void DOT_FN(dot_f16)(const f16_bits *k, const float *q, size_t q_stride,
                                                                unsigned n_q, size_t n, float *out) {
        float kf[DOT_F16_MAX_DIM];
        DOT_FN(f16_to_floats)(k, n, kf);
        for (unsigned g = 0; g < n_q; g++) {
                const float *qg = q + g * q_stride;
                __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
                size_t i = 0;
                for (; i + 16 <= n; i += 16) {
                        lo = _mm256_fmadd_ps(_mm256_loadu_ps(kf + i), _mm256_loadu_ps(qg + i), lo);
                        hi = _mm256_fmadd_ps(_mm256_loadu_ps(kf + i + 8), _mm256_loadu_ps(qg + i + 8), hi);
                }
                if (i < n) {
                        float lanes[16];
                        _mm256_storeu_ps(lanes, lo);
                        _mm256_storeu_ps(lanes + 8, hi);
                        for (; i < n; i++)
                                lanes[i % 16] = fmaf(kf[i], qg[i], lanes[i % 16]);
                        lo = _mm256_loadu_ps(lanes);
                        hi = _mm256_loadu_ps(lanes + 8);
                }
                /* (hi + lo), then + 4 apart, + 2 apart, + 1 apart: lanes_sum16() in registers */
                __m256 a = _mm256_add_ps(hi, lo);
                __m128 b = _mm_add_ps(_mm256_extractf128_ps(a, 1), _mm256_castps256_ps128(a));
                __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
                out[g] = _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
        }
}

__attribute__((target(DOT_TARGET))) static void DOT_FN(dot_f16_wide)(const f16_bits *k, const float *q, size_t q_stride,
                                                                     unsigned n_q, size_t n, float *out) {
        float kf[DOT_F16_MAX_DIM];
        DOT_FN(f16_to_floats)(k, n, kf);
        size_t whole = n / 64 * 64;
        for (unsigned g = 0; g < n_q; g++) {
                const float *qg = q + g * q_stride;
                __m256 acc[8];
                for (int a = 0; a < 8; a++)
                        acc[a] = _mm256_setzero_ps();
                for (size_t i = 0; i < whole; i += 64)
                        for (int a = 0; a < 8; a++)
                                acc[a] = _mm256_fmadd_ps(_mm256_loadu_ps(kf + i + 8 * a), _mm256_loadu_ps(qg + i + 8 * a), acc[a]);
                float lanes[64];
                for (int a = 0; a < 8; a++)
                        _mm256_storeu_ps(lanes + 8 * a, acc[a]);
                double sum = lanes_sum64(lanes, 1);
                for (size_t i = whole; i < n; i++)
                        sum += (double) (kf[i] * qg[i]);
                out[g] = (float) sum;
        }
}

__attribute__((target(DOT_TARGET))) static void DOT_FN(axpy_f16)(float *acc, size_t acc_stride, const f16_bits *v,
                                                                 const float *w, unsigned n_q, size_t n) {
        float vf[DOT_F16_MAX_DIM];
        DOT_FN(f16_to_floats)(v, n, vf);
        for (unsigned g = 0; g < n_q; g++) {
                float *ag = acc + g * acc_stride;
                __m256 wv = _mm256_set1_ps(w[g]);
                size_t i = 0;
                for (; i + 8 <= n; i += 8)
                        _mm256_storeu_ps(ag + i, _mm256_fmadd_ps(_mm256_loadu_ps(vf + i), wv, _mm256_loadu_ps(ag + i)));
                for (; i < n; i++)
                        ag[i] = fmaf(vf[i], w[g], ag[i]);
        }
}

/* A set with attention kernels that take several positions at once names their header in
 * DOT_ATTENTION (attention-avx2.h, attention-avx512.h); without one, one position at a time. */
#ifdef DOT_ATTENTION
#include DOT_ATTENTION
#else
__attribute__((target(DOT_TARGET))) static void DOT_FN(attn_scores)(const struct f16_rows *keys, unsigned n_pos, const float *q,
                                                                    size_t q_stride, unsigned n_q, size_t n, bool wide,
                                                                    float scale, float *scores, size_t scores_stride) {
        attn_scores_by_position(wide ? DOT_FN(dot_f16_wide) : DOT_FN(dot_f16), keys, n_pos, q, q_stride, n_q, n, scale, scores,
                                scores_stride);
}

__attribute__((target(DOT_TARGET))) static void DOT_FN(attn_values)(const struct f16_rows *values, unsigned n_pos,
                                                                    const float *w, size_t w_stride, unsigned n_q, size_t n,
                                                                    unsigned n_lanes, unsigned first_row, unsigned n_rows,
                                                                    float *lanes, size_t lanes_stride) {
        attn_values_by_position(DOT_FN(axpy_f16), values, n_pos, w, w_stride, n_q, n, n_lanes, first_row, n_rows, lanes,
                                lanes_stride);
}
#endif

__attribute__((target(DOT_TARGET))) static void DOT_FN(round_f16)(float *x, size_t n) {
        size_t i = 0;
        for (; i + 8 <= n; i += 8)
                _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
        for (; i < n; i++)
                x[i] = f16_to_f32(f32_to_f16(x[i]));
}

/* lanes_sum16() down the rows, eight columns at a time. */
__attribute__((target(DOT_TARGET))) static void DOT_FN(sum_lanes)(const float *lanes, size_t stride, unsigned n_valid,
                                                                  size_t n, float *out) {
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
                __m256 l[16];
                for (unsigned e = 0; e < 16; e++)
                        l[e] = e < n_valid ? _mm256_loadu_ps(lanes + e * stride + i) : _mm256_setzero_ps();
                __m256 a[8], b[4];
                for (int e = 0; e < 8; e++)
                        a[e] = _mm256_add_ps(l[e + 8], l[e]);
                for (int e = 0; e < 4; e++)
                        b[e] = _mm256_add_ps(a[e + 4], a[e]);
                _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_add_ps(b[0], b[2]), _mm256_add_ps(b[1], b[3])));
        }
        for (; i < n; i++) {
                float l[16];
                for (unsigned e = 0; e < 16; e++)
                        l[e] = e < n_valid ? lanes[e * stride + i] : 0.0f;
                out[i] = lanes_sum16(l);
        }
}

/* exp_poly() eight at a time, the same operations in the same order. */
__attribute__((target(DOT_TARGET))) static inline __m256 DOT_FN(exp8)(__m256 x) {
        const __m256 shift = _mm256_set1_ps(EXP_POLY_SHIFT);
        __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(EXP_POLY_LOG2E), shift);
        __m256 n = _mm256_sub_ps(z, shift);
        __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_POLY_LN2_LO),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_POLY_LN2_HI), x));
        __m256 u = _mm256_mul_ps(b, b);
        __m256 p = _mm256_fmadd_ps(
                _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(EXP_POLY_C5), b, _mm256_set1_ps(EXP_POLY_C4)), u,
                                _mm256_fmadd_ps(_mm256_set1_ps(EXP_POLY_C3), b, _mm256_set1_ps(EXP_POLY_C2))),
                u, _mm256_fmadd_ps(_mm256_set1_ps(EXP_POLY_C1), b, _mm256_set1_ps(1.0f)));
        /* 2^n for normal results; anything smaller or out of range takes the scalar path */
        __m256 in_range = _mm256_and_ps(_mm256_cmp_ps(n, _mm256_set1_ps(-126.0f), _CMP_GE_OQ),
                                        _mm256_cmp_ps(n, _mm256_set1_ps(127.0f), _CMP_LE_OQ));
        if (_mm256_movemask_ps(in_range) != 0xff) {
                float xs[8], out[8];
                _mm256_storeu_ps(xs, x);
                for (int i = 0; i < 8; i++)
                        out[i] = exp_poly(xs[i]);
                return _mm256_loadu_ps(out);
        }
        __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
        return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* The scalar reference's steps eight at a time. The largest score is the same in any order
 * (a NaN is passed over as the reference's comparison passes it; only the sign of a zero
 * maximum can differ, and x - (+0) and x - (-0) are the same for every x but -0, whose exp
 * is 1 either way); the runs' trees are lanes_sum16()'s adds. */
__attribute__((target(DOT_TARGET))) static void DOT_FN(softmax_f16)(float *x, size_t n) {
        /* four running maxima, so that the compares do not wait on each other; max_ps returns
         * its second operand when the first is a NaN */
        __m256 max4[4];
        for (int k = 0; k < 4; k++)
                max4[k] = _mm256_set1_ps(-INFINITY);
        size_t i = 0;
        for (; i + 32 <= n; i += 32)
                for (int k = 0; k < 4; k++)
                        max4[k] = _mm256_max_ps(_mm256_loadu_ps(x + i + 8 * k), max4[k]);
        __m256 max8 = _mm256_max_ps(_mm256_max_ps(max4[0], max4[1]), _mm256_max_ps(max4[2], max4[3]));
        for (; i + 8 <= n; i += 8)
                max8 = _mm256_max_ps(_mm256_loadu_ps(x + i), max8);
        __m128 max_half = _mm_max_ps(_mm256_extractf128_ps(max8, 1), _mm256_castps256_ps128(max8));
        max_half = _mm_max_ps(max_half, _mm_movehl_ps(max_half, max_half));
        float max = _mm_cvtss_f32(_mm_max_ss(max_half, _mm_shuffle_ps(max_half, max_half, 1)));
        for (; i < n; i++)
                max = x[i] > max ? x[i] : max;

        for (i = 0; i + 8 <= n; i += 8)
                _mm256_storeu_ps(x + i, DOT_FN(exp8)(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(max))));
        for (; i < n; i++)
                x[i] = exp_poly(x[i] - max);

        double sum = 0.0;
        for (size_t j = 0; j < n; j += 16) {
                float run[16] = { 0 };
                const float *r = x + j;
                if (n - j < 16) {
                        memcpy(run, x + j, (n - j) * sizeof(float));
                        r = run;
                }
                __m256 a = _mm256_add_ps(_mm256_loadu_ps(r + 8), _mm256_loadu_ps(r));
                __m128 b = _mm_add_ps(_mm256_extractf128_ps(a, 1), _mm256_castps256_ps128(a));
                __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b)); /* b0 + b2, b1 + b3 */
                sum += _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
        }

        float inv = (float) (1.0 / sum);
        const __m256 inv8 = _mm256_set1_ps(inv);
        for (i = 0; i + 8 <= n; i += 8)
                _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(x + i), inv8),
                                                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
        for (; i < n; i++)
                x[i] = f16_to_f32(f32_to_f16(x[i] * inv));
}

__attribute__((target(DOT_TARGET))) static void DOT_FN(swiglu)(float *h, const float *g, const float *u, size_t n) {
        const __m256 one = _mm256_set1_ps(1.0f);
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
                __m256 gv = _mm256_loadu_ps(g + i);
                __m256 e = DOT_FN(exp8)(_mm256_sub_ps(_mm256_setzero_ps(), gv));
                _mm256_storeu_ps(h + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
        }
        for (; i < n; i++)
                h[i] = g[i] / (1.0f + exp_poly(0.0f - g[i])) * u[i];
}

/* geglu_scalar()'s steps eight at a time: the f16 conversion rounds to nearest even as
 * f32_to_f16() does, and the table is gathered by those bits. */
__attribute__((target(DOT_TARGET))) static void DOT_FN(geglu)(float *h, const float *g, const float *u, size_t n) {
        const float *gelu = gelu_table();
        const __m256 low = _mm256_set1_ps(-10.0f), high = _mm256_set1_ps(10.0f);
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
                __m256 gv = _mm256_loadu_ps(g + i), uv = _mm256_loadu_ps(u + i);
                __m256i bits = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(gv, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
                __m256 y = _mm256_i32gather_ps(gelu, bits, 4);
                y = _mm256_blendv_ps(y, gv, _mm256_cmp_ps(gv, high, _CMP_GE_OQ));
                y = _mm256_mul_ps(y, uv);
                _mm256_storeu_ps(h + i, _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(gv, low, _CMP_LE_OQ)));
        }
        for (; i < n; i++)
                h[i] = g[i] <= -10.0f ? 0.0f : g[i] >= 10.0f ? g[i] * u[i] : gelu[f32_to_f16(g[i])] * u[i];
}

#include "dot-k-quants-x86.h"

/* A set without packed K-quant products keeps the tiles for them. */
#ifndef DOT_PACKED_Q4_K
#define DOT_PACKED_Q2_K NULL
#define DOT_PACKED_Q3_K NULL
#define DOT_PACKED_Q4_K NULL
#define DOT_PACKED_Q5_K NULL
#define DOT_PACKED_Q6_K NULL
#endif

/* The set's table; a set whose packed product has a variant for AMD cores (DOT_AMD_PACKED_FN)
 * gets a second table, "<set>-amd", that differs only in its 4- and 5-bit packed products. */
#define DOT_TABLE(table, set_name, packed_4bit)                                                                        \
        const struct dot_kernels table = {                                                                             \
                .name = set_name,                                                                                      \
                .q4_0 = DOT_FN(dot_q4_0),                                                                              \
                .q4_1 = DOT_FN(dot_q4_1),                                                                              \
                .q5_0 = DOT_FN(dot_q5_0),                                                                              \
                .q5_1 = DOT_FN(dot_q5_1),                                                                              \
                .q8_0 = DOT_FN(dot_q8_0),                                                                              \
                .tile_q4_0 = DOT_TILE_FN(tile_q4_0),                                                                   \
                .tile_q4_1 = DOT_TILE_FN(tile_q4_1),                                                                   \
                .tile_q5_0 = DOT_TILE_FN(tile_q5_0),                                                                   \
                .tile_q5_1 = DOT_TILE_FN(tile_q5_1),                                                                   \
                .tile_q8_0 = DOT_TILE_FN(tile_q8_0),                                                                   \
                .packed_q4_0 = packed_4bit(q4_0),                                                                      \
                .packed_q4_1 = packed_4bit(q4_1),                                                                      \
                .packed_q5_0 = packed_4bit(q5_0),                                                                      \
                .packed_q5_1 = packed_4bit(q5_1),                                                                      \
                .packed_q8_0 = DOT_PACKED_FN(q8_0),                                                                    \
                .packed_single_accumulator = DOT_PACKED_FN(single_accumulator),                                        \
                .packed_q2_K = DOT_PACKED_Q2_K,                                                                        \
                .packed_q3_K = DOT_PACKED_Q3_K,                                                                        \
                .packed_q4_K = DOT_PACKED_Q4_K,                                                                        \
                .packed_q5_K = DOT_PACKED_Q5_K,                                                                        \
                .packed_q6_K = DOT_PACKED_Q6_K,                                                                        \
                .attn_scores = DOT_FN(attn_scores),                                                                    \
                .attn_values = DOT_FN(attn_values),                                                                    \
                .round_f16 = DOT_FN(round_f16),                                                                        \
                .sum_lanes = DOT_FN(sum_lanes),                                                                        \
                .softmax_f16 = DOT_FN(softmax_f16),                                                                    \
                .quantize_q8_1 = DOT_FN(quantize_q8_1),                                                                \
                .rope = DOT_FN(rope),                                                                                  \
                .activation_corrections = DOT_FN(activation_corrections),                                              \
                .swiglu = DOT_FN(swiglu),                                                                              \
                .q2_K = DOT_FN(dot_q2_K), .q3_K = DOT_FN(dot_q3_K), .q4_K = DOT_FN(dot_q4_K),                          \
                .q5_K = DOT_FN(dot_q5_K), .q6_K = DOT_FN(dot_q6_K), .quantize_q8_K = DOT_FN(quantize_q8_K),            \
                .tile_q2_K = DOT_FN(tile_q2_K), .tile_q3_K = DOT_FN(tile_q3_K), .tile_q4_K = DOT_FN(tile_q4_K),        \
                .tile_q5_K = DOT_FN(tile_q5_K), .tile_q6_K = DOT_FN(tile_q6_K),                                        \
                .geglu = DOT_FN(geglu),                                                                                \
        };

DOT_TABLE(DOT_CONCAT(dot_kernels, DOT_SET), DOT_SET_NAME, DOT_PACKED_FN)
#ifdef DOT_AMD_PACKED_FN
DOT_TABLE(DOT_CONCAT(DOT_CONCAT(dot_kernels, DOT_SET), amd), DOT_SET_NAME "-amd", DOT_AMD_PACKED_FN)
#endif
