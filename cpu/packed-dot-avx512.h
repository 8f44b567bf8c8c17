/* SPDX-License-Identifier: MIT */
/* The exact-sum product on packed weights (dot.h, dot_packed_fn) for AVX-512 VNNI: one
 * 512-bit vector is the sixteen rows of a packed group, and eight vpdpbusd, each with four
 * activation bytes broadcast to every lane, leave the exact block sums of all sixteen rows.
 * Then per block and token: one conversion, one scale product and one fused multiply-add
 * (and for Q4_1 one more for m * s). Every lane does the scalar reference's operations in
 * its order, so the bits are the reference's. Included by dot-avx512vnni.c before
 * dot-x86-template.h, which puts these in the set's table. */

#include <immintrin.h>
#include <string.h>

#ifndef PACKED_PREFETCH
#define PACKED_PREFETCH 2048
#endif

#define PACKED_ATTRS __attribute__((target(DOT_TARGET), always_inline)) static inline

/* Four activation bytes in every lane (the compiler folds this into vpdpbusd's broadcast). */
PACKED_ATTRS __m512i packed_broadcast4(const int8_t *p) {
        int32_t v;
        memcpy(&v, p, sizeof(v));
        return _mm512_set1_epi32(v);
}

/* One group of rows against T tokens. kind 0: Q4_0, 1: Q4_1, 2: Q8_0 (constants after
 * inlining, as T is). */
PACKED_ATTRS void packed_group_512(const struct packed_weights *w, uint64_t g, const struct packed_activations *a,
                                   const unsigned T, float *out, size_t out_stride, bool accumulate, const int kind) {
        /* Independent integer chains for few tokens: vpdpbusd's latency would otherwise bound them. */
        const unsigned chains = T == 1 ? 4 : T == 2 ? 2 : 1;
        const size_t quant_bytes = kind == 2 ? PACKED_ROWS * QUANT_BLOCK : PACKED_ROWS * QUANT_BLOCK / 2;
        const size_t scale_bytes = kind == 1 ? 64 : 32;
        const int32_t bias = kind == 0 ? 8 : 128;
        const uint64_t n_blocks = w->n_blocks;
        const uint8_t *quants = w->data + g * w->group_bytes, *scales = quants + n_blocks * quant_bytes;
        __m512 acc[PACKED_TOKENS_MAX], off[PACKED_TOKENS_MAX];

        _Pragma("GCC unroll 8") for (unsigned t = 0; t < T; t++) {
                acc[t] = _mm512_setzero_ps();
                off[t] = _mm512_setzero_ps();
        }
        for (uint64_t b = 0; b < n_blocks; b++) {
                /* u[k]: the rows' elements 4k..4k+3 as unsigned bytes, lane by lane */
                __m512i u[8];
                const uint8_t *rec = quants + b * quant_bytes;
                /* The group's bytes, and the next groups', are one stream: fetch it PACKED_PREFETCH
                 * bytes ahead at the pace it is consumed. The hardware prefetcher alone left
                 * decode at half the bandwidth a plain read gets. */
                const uint8_t *ahead = quants + b * (quant_bytes + scale_bytes) + PACKED_PREFETCH;
                _Pragma("GCC unroll 10") for (size_t line = 0; line < quant_bytes + scale_bytes; line += 64)
                        _mm_prefetch((const char *) ahead + line, _MM_HINT_T0);
                if (kind == 2) {
                        _Pragma("GCC unroll 8") for (unsigned k = 0; k < 8; k++)
                                u[k] = _mm512_load_si512(rec + 64 * k);
                } else {
                        const __m512i low4 = _mm512_set1_epi8(0x0f);
                        _Pragma("GCC unroll 4") for (unsigned q = 0; q < 4; q++) {
                                __m512i v = _mm512_load_si512(rec + 64 * q);
                                u[q] = _mm512_and_si512(v, low4);
                                u[4 + q] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
                        }
                }
                __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *) (scales + b * scale_bytes)));
                __m512 mw = kind == 1 ? _mm512_cvtph_ps(_mm256_load_si256((const __m256i *) (scales + b * scale_bytes + 32)))
                                      : _mm512_setzero_ps();
                _Pragma("GCC unroll 8") for (unsigned t = 0; t < T; t++) {
                        size_t ab = t * a->stride + b;
                        const int8_t *qs = a->xq[ab].qs;
                        __m512i isum[4];
                        isum[0] = kind == 1 ? _mm512_setzero_si512() : _mm512_set1_epi32(-bias * a->sums[ab]);
                        _Pragma("GCC unroll 4") for (unsigned c = 1; c < chains; c++)
                                isum[c] = _mm512_setzero_si512();
                        _Pragma("GCC unroll 8") for (unsigned k = 0; k < 8; k++)
                                isum[k % chains] = _mm512_dpbusd_epi32(isum[k % chains], u[k], packed_broadcast4(qs + 4 * k));
                        if (chains == 4)
                                isum[0] = _mm512_add_epi32(_mm512_add_epi32(isum[0], isum[1]), _mm512_add_epi32(isum[2], isum[3]));
                        else if (chains == 2)
                                isum[0] = _mm512_add_epi32(isum[0], isum[1]);
                        __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(a->ds[2 * ab]));
                        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[0]), scale, acc[t]);
                        if (kind == 1)
                                off[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(a->ds[2 * ab + 1]), off[t]);
                }
        }

        uint64_t row0 = g * PACKED_ROWS;
        uint64_t n_valid = w->n_rows - row0 < PACKED_ROWS ? w->n_rows - row0 : PACKED_ROWS;
        __mmask16 mask = (__mmask16) ((1u << n_valid) - 1);
        _Pragma("GCC unroll 8") for (unsigned t = 0; t < T; t++) {
                __m512 v = kind == 1 ? _mm512_add_ps(acc[t], off[t]) : acc[t];
                float *o = out + t * out_stride + row0;
                if (accumulate)
                        v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, o), v);
                _mm512_mask_storeu_ps(o, mask, v);
        }
}

PACKED_ATTRS void packed_groups_512(const struct packed_weights *w, uint64_t group_begin, uint64_t group_end,
                                    const struct packed_activations *a, const unsigned T, float *out, size_t out_stride,
                                    bool accumulate, const int kind) {
        for (uint64_t g = group_begin; g < group_end; g++)
                packed_group_512(w, g, a, T, out, out_stride, accumulate, kind);
}

#define PACKED_ENTRY_512(name, kind)                                                                                   \
        __attribute__((target(DOT_TARGET))) static void packed_##name##_512(                                          \
                const struct packed_weights *w, uint64_t group_begin, uint64_t group_end,                              \
                const struct packed_activations *a, unsigned n_tokens, float *out, size_t out_stride, bool accumulate) { \
                switch (n_tokens) {                                                                                    \
                case 1: packed_groups_512(w, group_begin, group_end, a, 1, out, out_stride, accumulate, kind); break;  \
                case 2: packed_groups_512(w, group_begin, group_end, a, 2, out, out_stride, accumulate, kind); break;  \
                case 3: packed_groups_512(w, group_begin, group_end, a, 3, out, out_stride, accumulate, kind); break;  \
                case 4: packed_groups_512(w, group_begin, group_end, a, 4, out, out_stride, accumulate, kind); break;  \
                case 5: packed_groups_512(w, group_begin, group_end, a, 5, out, out_stride, accumulate, kind); break;  \
                case 6: packed_groups_512(w, group_begin, group_end, a, 6, out, out_stride, accumulate, kind); break;  \
                case 7: packed_groups_512(w, group_begin, group_end, a, 7, out, out_stride, accumulate, kind); break;  \
                default: packed_groups_512(w, group_begin, group_end, a, 8, out, out_stride, accumulate, kind); break; \
                }                                                                                                      \
        }

PACKED_ENTRY_512(q4_0, 0)
PACKED_ENTRY_512(q4_1, 1)
PACKED_ENTRY_512(q8_0, 2)

#define DOT_PACKED_FN(name) packed_##name##_512
