/* SPDX-License-Identifier: MIT */
/* Tiles for AVX-512 VNNI: two (row, token) products per 512-bit register, rows r and r + 1
 * meeting the same token in the two 256-bit halves. Lane for lane these are the operations
 * of the 256-bit kernels of the same set (dot-x86-template.h), so the results keep their
 * bits; only the instruction count halves. Signed weights skip the sign trick: the integer
 * sum of each lane is exact either way, so (w + c) . a - c * sum(a) gives the same int32 as
 * w . a, with the correction computed once per token and block and shared by all rows.
 * Included by dot-avx512vnni.c before dot-x86-template.h, which fills the table. */

#include <immintrin.h>
#include <string.h>

#define WIDE_ATTRS __attribute__((target(DOT_TARGET), always_inline)) static inline

WIDE_ATTRS float wide_half(uint16_t h) {
        return _cvtsh_ss(h);
}

/* The two halves at p (a block's d and m), as floats in lanes 0 and 1. */
WIDE_ATTRS __m128 wide_half_pair(const void *p) {
        int32_t bits;
        memcpy(&bits, p, sizeof(bits));
        return _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
}

WIDE_ATTRS float wide_hsum(__m256 v) {
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        return _mm_cvtss_f32(s);
}

/* Both halves of a pair: the low half row r's sum, the high half row r + 1's. */
WIDE_ATTRS void wide_store(__m512 acc, float *lo, float *hi) {
        *lo = wide_hsum(_mm512_castps512_ps256(acc));
        *hi = wide_hsum(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
}

/* 16 bytes of nibbles from each of two rows: [row r low, row r high, row r+1 low, row r+1 high]. */
WIDE_ATTRS __m512i wide_nibbles(const uint8_t *qs_r, const uint8_t *qs_r1) {
        __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *) qs_r)),
                                               _mm_loadu_si128((const __m128i *) qs_r1), 1);
        const __m256i low4 = _mm256_set1_epi8(0x0f);
        __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(both, low4)),
                                       _mm256_and_si256(_mm256_srli_epi16(both, 4), low4), 1);
        /* [lo r, lo r+1, hi r, hi r+1] to [lo r, hi r, lo r+1, hi r+1] */
        return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
}

/* Two rows' 5-bit blocks as bytes 0..31 in element order: their nibbles as wide_nibbles()
 * lays them out, and bit j of each qh as 16 in that row's byte j (the two qh words are the
 * byte mask). */
WIDE_ATTRS __m512i wide_q5(const uint8_t *qs_r, const uint8_t *qh_r, const uint8_t *qs_r1, const uint8_t *qh_r1) {
        uint32_t h0, h1;
        memcpy(&h0, qh_r, sizeof(h0));
        memcpy(&h1, qh_r1, sizeof(h1));
        __m512i high = _mm512_maskz_mov_epi8((__mmask64) h0 | (__mmask64) h1 << 32, _mm512_set1_epi8(16));
        return _mm512_or_si512(wide_nibbles(qs_r, qs_r1), high);
}

WIDE_ATTRS __m512 wide_pair_ps(float lo, float hi) {
        return _mm512_mask_broadcastss_ps(_mm512_set1_ps(lo), 0xff00, _mm_set_ss(hi));
}

/* kind 0: q4_0 (nibbles, offset 8), 1: q4_1 (nibbles, plus m * s), 2: q8_0 (bytes, offset 128),
 * 3: q5_0 (5-bit quants, offset 16), 4: q5_1 (5-bit quants, plus m * s). */
WIDE_ATTRS void wide_tile(const uint8_t *rows, size_t row_bytes, const struct block_q8_1 *act, const float *ds,
                          size_t act_stride, const unsigned T, size_t n_blocks, float *out, const int kind) {
        const size_t block_bytes = kind == 0 ? sizeof(struct block_q4_0)
                                 : kind == 1 ? sizeof(struct block_q4_1)
                                 : kind == 2 ? sizeof(struct block_q8_0)
                                 : kind == 3 ? sizeof(struct block_q5_0)
                                             : sizeof(struct block_q5_1);
        const bool has_offset = kind == 1 || kind == 4;
        const char bias = kind == 0 ? 8 : kind == 3 ? 16 : (char) 128;
        __m512 acc[DOT_TILE_ROWS / 2][DOT_TILE_TOKENS];
        __m128 offset[DOT_TILE_ROWS];
        _Pragma("GCC unroll 4") for (unsigned p = 0; p < DOT_TILE_ROWS / 2; p++)
                _Pragma("GCC unroll 4") for (unsigned t = 0; t < DOT_TILE_TOKENS; t++)
                        acc[p][t] = _mm512_setzero_ps();
        _Pragma("GCC unroll 4") for (unsigned r = 0; r < DOT_TILE_ROWS; r++)
                offset[r] = _mm_setzero_ps();

        for (size_t b = 0; b < n_blocks; b++) {
                __m512i aq[DOT_TILE_TOKENS], correction[DOT_TILE_TOKENS];
                __m512 ad[DOT_TILE_TOKENS];
                float as[DOT_TILE_TOKENS] = { 0 };
                _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                        const struct block_q8_1 *a = act + t * act_stride + b;
                        aq[t] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *) a->qs));
                        ad[t] = _mm512_set1_ps(ds[2 * (t * act_stride + b)]);
                        if (has_offset)
                                as[t] = ds[2 * (t * act_stride + b) + 1];
                        else /* -c * (sum of each lane's four activations) */
                                correction[t] = _mm512_sub_epi32(
                                        _mm512_setzero_si512(),
                                        _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(bias), aq[t]));
                }
                /* in registers, not through memory: four narrow stores do not forward to one wide load */
                __m128 as4 = _mm_setr_ps(as[0], as[1], as[2], as[3]);
                _Pragma("GCC unroll 2") for (unsigned p = 0; p < DOT_TILE_ROWS / 2; p++) {
                        const uint8_t *b0 = rows + 2 * p * row_bytes + b * block_bytes, *b1 = b0 + row_bytes;
                        __m512i w;
                        float d0, d1;
                        if (kind == 2) {
                                const struct block_q8_0 *w0 = (const void *) b0, *w1 = (const void *) b1;
                                __m512i s = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *) w0->qs)),
                                                               _mm256_loadu_si256((const __m256i *) w1->qs), 1);
                                w = _mm512_xor_si512(s, _mm512_set1_epi8((char) 0x80)); /* w + 128 as unsigned */
                                d0 = wide_half(w0->d);
                                d1 = wide_half(w1->d);
                        } else if (has_offset) {
                                __m128 dm0 = wide_half_pair(b0), dm1 = wide_half_pair(b1); /* d and m, adjacent */
                                if (kind == 4) {
                                        const struct block_q5_1 *w0 = (const void *) b0, *w1 = (const void *) b1;
                                        w = wide_q5(w0->qs, w0->qh, w1->qs, w1->qh);
                                } else {
                                        const struct block_q4_1 *w0 = (const void *) b0, *w1 = (const void *) b1;
                                        w = wide_nibbles(w0->qs, w1->qs);
                                }
                                d0 = _mm_cvtss_f32(dm0);
                                d1 = _mm_cvtss_f32(dm1);
                                offset[2 * p] = _mm_fmadd_ps(_mm_permute_ps(dm0, 0x55), as4, offset[2 * p]);
                                offset[2 * p + 1] = _mm_fmadd_ps(_mm_permute_ps(dm1, 0x55), as4, offset[2 * p + 1]);
                        } else if (kind == 3) {
                                const struct block_q5_0 *w0 = (const void *) b0, *w1 = (const void *) b1;
                                w = wide_q5(w0->qs, w0->qh, w1->qs, w1->qh);
                                d0 = wide_half(w0->d);
                                d1 = wide_half(w1->d);
                        } else {
                                const struct block_q4_0 *w0 = (const void *) b0, *w1 = (const void *) b1;
                                w = wide_nibbles(w0->qs, w1->qs);
                                d0 = wide_half(w0->d);
                                d1 = wide_half(w1->d);
                        }
                        __m512 wd = wide_pair_ps(d0, d1);
                        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                                __m512i sum = _mm512_dpbusd_epi32(has_offset ? _mm512_setzero_si512() : correction[t], w, aq[t]);
                                acc[p][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(wd, ad[t]), acc[p][t]);
                        }
                }
        }
        _Pragma("GCC unroll 2") for (unsigned p = 0; p < DOT_TILE_ROWS / 2; p++) {
                float off_lo[DOT_TILE_TOKENS], off_hi[DOT_TILE_TOKENS];
                _mm_storeu_ps(off_lo, offset[2 * p]);
                _mm_storeu_ps(off_hi, offset[2 * p + 1]);
                _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                        float *o = out + t * DOT_TILE_ROWS + 2 * p;
                        wide_store(acc[p][t], o, o + 1);
                        if (has_offset) {
                                o[0] += off_lo[t];
                                o[1] += off_hi[t];
                        }
                }
        }
}

#define WIDE_TILE_ENTRY(name, kind)                                                                                    \
        __attribute__((target(DOT_TARGET))) static void wide_##name(                                                  \
                const void *weight_rows, size_t row_bytes, const struct block_q8_1 *act, const float *ds,              \
                size_t act_stride, unsigned n_tokens, size_t n_blocks, float out[DOT_TILE_TOKENS * DOT_TILE_ROWS]) {   \
                const uint8_t *rows = weight_rows;                                                                     \
                switch (n_tokens) {                                                                                    \
                case 1: wide_tile(rows, row_bytes, act, ds, act_stride, 1, n_blocks, out, kind); break;                \
                case 2: wide_tile(rows, row_bytes, act, ds, act_stride, 2, n_blocks, out, kind); break;                \
                case 3: wide_tile(rows, row_bytes, act, ds, act_stride, 3, n_blocks, out, kind); break;                \
                default: wide_tile(rows, row_bytes, act, ds, act_stride, 4, n_blocks, out, kind); break;               \
                }                                                                                                      \
        }

WIDE_TILE_ENTRY(tile_q4_0, 0)
WIDE_TILE_ENTRY(tile_q4_1, 1)
WIDE_TILE_ENTRY(tile_q8_0, 2)
WIDE_TILE_ENTRY(tile_q5_0, 3)
WIDE_TILE_ENTRY(tile_q5_1, 4)

#define DOT_TILE_FN(name) wide_##name
