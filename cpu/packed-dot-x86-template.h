/* SPDX-License-Identifier: MIT */
/* The exact-sum product on packed weights (dot.h, dot_packed_fn) with 256-bit vectors: a
 * packed group of sixteen rows is two halves of eight lanes, each half done as the 512-bit
 * kernel (packed-dot-avx512.h) does the whole group. dot_u8_s8() gives each lane its four
 * products' sum (vpmaddubsw and vpmaddwd without VNNI: exact here, as two nibble products
 * fit int16); Q8_0's biased bytes go back to signed and take the sign trick instead, since
 * (w + 128) * a pairs would saturate vpmaddubsw. Included by dot-x86-template.h for a set
 * without a wider kernel of its own; DOT_TARGET, DOT_FN and dot_u8_s8 come from there. */

#define PACKED_ATTRS_256 __attribute__((target(DOT_TARGET), always_inline)) static inline

/* Tokens per pass over a half group: sixteen registers hold T sums (2T for Q4_1) and the
 * eight unpacked weight vectors. */
#define PACKED_TOKENS_256 4

PACKED_ATTRS_256 __m256i DOT_FN(packed_broadcast4)(const int8_t *p) {
        int32_t v;
        memcpy(&v, p, sizeof(v));
        return _mm256_set1_epi32(v);
}

/* Rows 8h..8h+7 of group g against T tokens; kind 0: Q4_0, 1: Q4_1, 2: Q8_0. */
PACKED_ATTRS_256 void DOT_FN(packed_half)(const struct packed_weights *w, uint64_t g, unsigned h,
                                          const struct packed_activations *a, const unsigned T, float *out,
                                          size_t out_stride, bool accumulate, const int kind) {
        const size_t quant_bytes = kind == 2 ? PACKED_ROWS * QUANT_BLOCK : PACKED_ROWS * QUANT_BLOCK / 2;
        const size_t scale_bytes = kind == 1 ? 64 : 32;
        const int32_t bias = kind == 0 ? 8 : 0; /* Q8_0 is made signed again below */
        const uint64_t n_blocks = w->n_blocks;
        const uint8_t *quants = w->data + g * w->group_bytes + 32 * h;
        const uint8_t *scales = w->data + g * w->group_bytes + n_blocks * quant_bytes + 16 * h;
        __m256 acc[PACKED_TOKENS_256], off[PACKED_TOKENS_256];

        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                acc[t] = _mm256_setzero_ps();
                off[t] = _mm256_setzero_ps();
        }
        for (uint64_t b = 0; b < n_blocks; b++) {
                __m256i u[8]; /* elements 4k..4k+3 of the eight rows; for Q8_0 signed */
                const uint8_t *rec = quants + b * quant_bytes;
                if (kind == 2) {
                        _Pragma("GCC unroll 8") for (unsigned k = 0; k < 8; k++)
                                u[k] = _mm256_xor_si256(_mm256_load_si256((const __m256i *) (rec + 64 * k)),
                                                        _mm256_set1_epi8((char) 0x80));
                } else {
                        const __m256i low4 = _mm256_set1_epi8(0x0f);
                        _Pragma("GCC unroll 4") for (unsigned q = 0; q < 4; q++) {
                                __m256i v = _mm256_load_si256((const __m256i *) (rec + 64 * q));
                                u[q] = _mm256_and_si256(v, low4);
                                u[4 + q] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
                        }
                }
                __m256 dw = _mm256_cvtph_ps(_mm_load_si128((const __m128i *) (scales + b * scale_bytes)));
                __m256 mw = kind == 1 ? _mm256_cvtph_ps(_mm_load_si128((const __m128i *) (scales + b * scale_bytes + 32)))
                                      : _mm256_setzero_ps();
                _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                        size_t ab = t * a->stride + b;
                        const int8_t *qs = a->xq[ab].qs;
                        __m256i isum = kind == 0 ? _mm256_set1_epi32(-bias * a->sums[ab]) : _mm256_setzero_si256();
                        _Pragma("GCC unroll 8") for (unsigned k = 0; k < 8; k++) {
                                __m256i act = DOT_FN(packed_broadcast4)(qs + 4 * k);
                                __m256i p = kind == 2 ? dot_u8_s8(_mm256_sign_epi8(u[k], u[k]), _mm256_sign_epi8(act, u[k]))
                                                      : dot_u8_s8(u[k], act);
                                isum = _mm256_add_epi32(isum, p);
                        }
                        __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(a->ds[2 * ab]));
                        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc[t]);
                        if (kind == 1)
                                off[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(a->ds[2 * ab + 1]), off[t]);
                }
        }

        uint64_t row0 = g * PACKED_ROWS + 8 * h;
        if (row0 >= w->n_rows)
                return;
        unsigned n_valid = w->n_rows - row0 < 8 ? (unsigned) (w->n_rows - row0) : 8;
        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                float v[8];
                _mm256_storeu_ps(v, kind == 1 ? _mm256_add_ps(acc[t], off[t]) : acc[t]);
                float *o = out + t * out_stride + row0;
                for (unsigned r = 0; r < n_valid; r++)
                        o[r] = accumulate ? o[r] + v[r] : v[r];
        }
}

PACKED_ATTRS_256 void DOT_FN(packed_groups)(const struct packed_weights *w, uint64_t group_begin, uint64_t group_end,
                                            const struct packed_activations *a, const unsigned T, float *out,
                                            size_t out_stride, bool accumulate, const int kind) {
        for (uint64_t g = group_begin; g < group_end; g++)
                for (unsigned h = 0; h < 2; h++)
                        DOT_FN(packed_half)(w, g, h, a, T, out, out_stride, accumulate, kind);
}

#define PACKED_ENTRY_256(name, kind)                                                                                   \
        __attribute__((target(DOT_TARGET))) static void DOT_FN(packed_##name)(                                        \
                const struct packed_weights *w, uint64_t group_begin, uint64_t group_end,                              \
                const struct packed_activations *a, unsigned n_tokens, float *out, size_t out_stride, bool accumulate) { \
                struct packed_activations part = *a;                                                                   \
                for (unsigned t0 = 0; t0 < n_tokens; t0 += PACKED_TOKENS_256) {                                        \
                        part.xq = a->xq + t0 * a->stride;                                                              \
                        part.ds = a->ds + 2 * t0 * a->stride;                                                          \
                        part.sums = a->sums ? a->sums + t0 * a->stride : NULL;                                         \
                        float *o = out + t0 * out_stride;                                                              \
                        switch (n_tokens - t0) {                                                                       \
                        case 1: DOT_FN(packed_groups)(w, group_begin, group_end, &part, 1, o, out_stride, accumulate, kind); break; \
                        case 2: DOT_FN(packed_groups)(w, group_begin, group_end, &part, 2, o, out_stride, accumulate, kind); break; \
                        case 3: DOT_FN(packed_groups)(w, group_begin, group_end, &part, 3, o, out_stride, accumulate, kind); break; \
                        default: DOT_FN(packed_groups)(w, group_begin, group_end, &part, 4, o, out_stride, accumulate, kind); break; \
                        }                                                                                              \
                }                                                                                                      \
        }

PACKED_ENTRY_256(q4_0, 0)
PACKED_ENTRY_256(q4_1, 1)
PACKED_ENTRY_256(q8_0, 2)

#define DOT_PACKED_FN(name) DOT_FN(packed_##name)
