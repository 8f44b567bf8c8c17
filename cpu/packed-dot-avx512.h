/* SPDX-License-Identifier: MIT */
/* The packed product (dot.h, dot_packed_fn) for AVX-512 VNNI: one 512-bit vector is the
 * sixteen rows of a packed group, and one vpdpbusd with four activation bytes broadcast to
 * every lane gives all sixteen rows' exact int32 for one of the block's eight lanes. Each
 * lane then has its own float accumulator per row, as in llama.cpp's x86 block product: per
 * block, lane and token one conversion and one fused multiply-add by d_w * d_a, which is the
 * operation the single product and the tiles do in that lane, so every row gets their bits.
 * At the end the eight lane vectors are added in lanes_sum8()'s tree, vector by vector: the
 * horizontal sum of the single product, sixteen rows at a time. Included by dot-avx512vnni.c
 * before dot-x86-template.h, which puts these in the set's table. */

#include <immintrin.h>
#include <string.h>

/* Tokens per pass over a group's blocks: each token holds eight accumulators (nine for
 * Q4_1 and Q5_1) of the 32 registers, so two tokens leave room for the weights and scales while a
 * third would spill. The group's weights stay in L1 from one pass to the next. */
#ifndef PACKED_PASS_TOKENS
#define PACKED_PASS_TOKENS 2
#endif

/* How far ahead one pass over a group for all its tokens (decode of one or two sequences,
 * bound by the memory) fetches its stream: bench-core tg128 Q4_1, ABBA rounds against 4 KiB
 * on the Zen 4 machine: 8 KiB 1.06x and 1.11x (9 of 10 pairs), 16 KiB 1.07x, 2 KiB 1.00x.
 * Batches with more passes keep PACKED_PREFETCH: 8 KiB there took B=8 S_TG 0.97x and S_PP
 * 0.93x. */
#ifndef PACKED_DECODE_PREFETCH
#define PACKED_DECODE_PREFETCH 8192
#endif

#define PACKED_ATTRS __attribute__((target(DOT_TARGET), always_inline)) static inline

/* Four activation bytes in every lane (the compiler folds this into vpdpbusd's broadcast). */
PACKED_ATTRS __m512i packed_broadcast4(const int8_t *p) {
        int32_t v;
        memcpy(&v, p, sizeof(v));
        return _mm512_set1_epi32(v);
}

/* The kinds of packed weights, a constant in every kernel once inlined: 0 Q4_0, 1 Q4_1,
 * 2 Q8_0, 3 Q5_0, 4 Q5_1. */
PACKED_ATTRS size_t packed_quant_bytes_512(const int kind) {
        return kind == 2 ? PACKED_ROWS * QUANT_BLOCK : kind >= 3 ? PACKED_ROWS * (QUANT_BLOCK / 2 + 4) : PACKED_ROWS * QUANT_BLOCK / 2;
}

PACKED_ATTRS bool packed_has_m_512(const int kind) {
        return kind == 1 || kind == 4;
}

/* Lane l of a 4- or 5-bit block record (sixteen rows' elements 4l..4l+3) as unsigned bytes:
 * the low nibbles of vector l for lanes 0-3, the high nibbles of vector l - 4 for lanes 4-7;
 * for 5-bit kinds bit l of each byte of the fifth vector brought to 16. */
PACKED_ATTRS __m512i packed_lane_512(const uint8_t *rec, unsigned l, const int kind) {
        __m512i v = _mm512_load_si512(rec + 64 * (l % 4));
        __m512i u = _mm512_and_si512(l < 4 ? v : _mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0f));
        if (kind < 3)
                return u;
        __m512i h = _mm512_load_si512(rec + 64 * 4);
        h = l < 4 ? _mm512_slli_epi32(h, 4 - l) : l > 4 ? _mm512_srli_epi32(h, l - 4) : h;
        return _mm512_or_si512(u, _mm512_and_si512(h, _mm512_set1_epi8(0x10)));
}

/* A 4- or 5-bit block of a group as the passes use it: the eight lane vectors of unsigned
 * bytes and the rows' d and m as floats. With more tokens than one pass takes, a group's
 * blocks are unpacked once into these and every pass loads them, so that the passes spend
 * their vector operations on the products: a prompt's matmuls ran ~18% faster than when every
 * pass unpacked the nibbles itself. */
struct packed_unpacked_block {
        __m512i lanes[PACKED_LANES];
        __m512 d, m;
};

/* Group g's blocks into unpacked[0..n_blocks), prefetching the stream ahead. Any kind but 2. */
PACKED_ATTRS void packed_unpack_group_512(const struct packed_weights *w, uint64_t g, struct packed_unpacked_block *unpacked,
                                          const int kind) {
        const size_t quant_bytes = packed_quant_bytes_512(kind), scale_bytes = packed_has_m_512(kind) ? 64 : 32;
        const uint64_t n_blocks = w->n_blocks;
        const uint8_t *quants = w->data + g * w->group_bytes, *scales = quants + n_blocks * quant_bytes;
        for (uint64_t b = 0; b < n_blocks; b++) {
                const uint8_t *rec = quants + b * quant_bytes;
                packed_prefetch_block(w, quants, b, quant_bytes + scale_bytes);
                _Pragma("GCC unroll 8") for (unsigned l = 0; l < PACKED_LANES; l++)
                        _mm512_store_si512(&unpacked[b].lanes[l], packed_lane_512(rec, l, kind));
                unpacked[b].d = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *) (scales + b * scale_bytes)));
                if (packed_has_m_512(kind))
                        unpacked[b].m = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *) (scales + b * scale_bytes + 32)));
        }
}

/* Group g's rows against tokens t0..t0+T-1 (kind and T constants after inlining). The
 * weights come from unpacked when given, else from the group's packed stream, whose first
 * pass prefetches prefetch_distance bytes ahead of it (0: none). */
PACKED_ATTRS void packed_pass_512(const struct packed_weights *w, uint64_t g, const struct packed_activations *a,
                                  unsigned t0, const unsigned T, float *out, size_t out_stride, bool accumulate,
                                  size_t prefetch_distance, const struct packed_unpacked_block *unpacked, struct packed_fetch fetch,
                                  const int kind) {
        const size_t quant_bytes = packed_quant_bytes_512(kind), scale_bytes = packed_has_m_512(kind) ? 64 : 32;
        const unsigned correction = packed_correction_offset(kind == 2 ? TENSOR_Q8_0 : kind == 3 ? TENSOR_Q5_0 : TENSOR_Q4_0);
        const uint64_t n_blocks = w->n_blocks;
        const uint8_t *quants = w->data + g * w->group_bytes, *scales = quants + n_blocks * quant_bytes;
        __m512 acc[PACKED_PASS_TOKENS][PACKED_LANES], off[PACKED_PASS_TOKENS];

        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                _Pragma("GCC unroll 8") for (unsigned l = 0; l < PACKED_LANES; l++)
                        acc[t][l] = _mm512_setzero_ps();
                off[t] = _mm512_setzero_ps();
        }
        for (uint64_t b = 0; b < n_blocks; b++) {
                const uint8_t *rec = quants + b * quant_bytes;
                if (prefetch_distance)
                        packed_prefetch_block_at(w, quants, b, quant_bytes + scale_bytes, prefetch_distance);
                packed_fetch_step(&fetch);
                __m512 dw = unpacked ? unpacked[b].d : _mm512_cvtph_ps(_mm256_load_si256((const __m256i *) (scales + b * scale_bytes)));
                __m512 scale[PACKED_PASS_TOKENS];
                _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                        size_t ab = (t0 + t) * a->stride + b;
                        scale[t] = _mm512_mul_ps(dw, _mm512_set1_ps(a->ds[2 * ab]));
                        if (packed_has_m_512(kind)) {
                                __m512 mw = unpacked ? unpacked[b].m
                                                     : _mm512_cvtph_ps(_mm256_load_si256((const __m256i *) (scales + b * scale_bytes + 32)));
                                off[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(a->ds[2 * ab + 1]), off[t]);
                        }
                }
                _Pragma("GCC unroll 8") for (unsigned l = 0; l < PACKED_LANES; l++) {
                        /* the sixteen rows' elements 4l..4l+3 as unsigned bytes */
                        __m512i u;
                        if (kind == 2)
                                u = _mm512_load_si512(rec + 64 * l);
                        else if (unpacked)
                                u = _mm512_load_si512(&unpacked[b].lanes[l]);
                        else
                                u = packed_lane_512(rec, l, kind);
                        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                                size_t ab = (t0 + t) * a->stride + b;
                                __m512i start = packed_has_m_512(kind) ? _mm512_setzero_si512()
                                                          : _mm512_set1_epi32(a->corrections[ab * PACKED_CORRECTIONS + correction + l]);
                                __m512i isum = _mm512_dpbusd_epi32(start, u, packed_broadcast4(a->xq[ab].qs + 4 * l));
                                acc[t][l] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale[t], acc[t][l]);
                        }
                }
        }

        uint64_t row0 = g * PACKED_ROWS;
        uint64_t n_valid = w->n_rows - row0 < PACKED_ROWS ? w->n_rows - row0 : PACKED_ROWS;
        __mmask16 mask = (__mmask16) ((1u << n_valid) - 1);
        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                const __m512 *l = acc[t];
                __m512 v = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(l[0], l[4]), _mm512_add_ps(l[2], l[6])),
                                         _mm512_add_ps(_mm512_add_ps(l[1], l[5]), _mm512_add_ps(l[3], l[7])));
                if (packed_has_m_512(kind))
                        v = _mm512_add_ps(v, off[t]);
                float *o = out + (t0 + t) * out_stride + row0;
                if (accumulate)
                        v = _mm512_add_ps(_mm512_maskz_loadu_ps(mask, o), v);
                _mm512_mask_storeu_ps(o, mask, v);
        }
}

/* Every pass of tokens over group g; a constant unpacked (NULL or not) after inlining. */
PACKED_ATTRS void packed_passes_512(const struct packed_weights *w, uint64_t g, const struct packed_activations *a,
                                    unsigned n_tokens, float *out, size_t out_stride, bool accumulate,
                                    const struct packed_unpacked_block *unpacked, const uint8_t *fetch_group, const int kind) {
        unsigned n_passes = (n_tokens + PACKED_PASS_TOKENS - 1) / PACKED_PASS_TOKENS;
        for (unsigned t0 = 0, pass = 0; t0 < n_tokens; t0 += PACKED_PASS_TOKENS, pass++) {
                size_t prefetch = t0 > 0 || unpacked ? 0 : n_tokens <= PACKED_PASS_TOKENS ? PACKED_DECODE_PREFETCH : PACKED_PREFETCH;
                struct packed_fetch fetch = packed_fetch_share(fetch_group, w->group_bytes, pass, n_passes, w->n_blocks);
                switch (n_tokens - t0) {
                case 1: packed_pass_512(w, g, a, t0, 1, out, out_stride, accumulate, prefetch, unpacked, fetch, kind); break;
#if PACKED_PASS_TOKENS > 2
                case 2: packed_pass_512(w, g, a, t0, 2, out, out_stride, accumulate, prefetch, unpacked, fetch, kind); break;
#endif
                default:
                        packed_pass_512(w, g, a, t0, PACKED_PASS_TOKENS, out, out_stride, accumulate, prefetch, unpacked, fetch,
                                        kind);
                        break;
                }
        }
}

/* Groups group_begin..group_end-1 against the tokens. A group of 4- or 5-bit blocks met by more
 * than unpack_above tokens (a constant after inlining, at least a pass's) is unpacked once
 * and every pass loads the bytes; otherwise every pass takes the nibbles apart itself from
 * the group's bytes, which stay in L1 from one pass to the next. Either way the passes fetch
 * the group after next. */
PACKED_ATTRS void packed_groups_512(const struct packed_weights *w, uint64_t group_begin, uint64_t group_end,
                                    const struct packed_activations *a, unsigned n_tokens, float *out, size_t out_stride,
                                    bool accumulate, const int kind, const unsigned unpack_above) {
        bool unpack = kind != 2 && n_tokens > unpack_above && w->n_blocks <= PACKED_UNPACK_MAX_BLOCKS;
        struct packed_unpacked_block unpacked[PACKED_UNPACK_MAX_BLOCKS];
        for (uint64_t g = group_begin; g < group_end; g++) {
                /* the caller's next groups usually follow (matmul-shares.h) */
                const uint8_t *fetch = n_tokens > PACKED_PASS_TOKENS && g + 2 < w->n_groups ? w->data + (g + 2) * w->group_bytes
                                                                                            : NULL;
                if (unpack) {
                        packed_unpack_group_512(w, g, unpacked, kind);
                        packed_passes_512(w, g, a, n_tokens, out, out_stride, accumulate, unpacked, fetch, kind);
                } else
                        packed_passes_512(w, g, a, n_tokens, out, out_stride, accumulate, NULL, fetch, kind);
        }
}

/* Tokens per pass of the single-accumulator product: each holds one accumulator, and four
 * share every weight vector loaded (the kernel is bound by its loads: on Zen 4 a 512-bit load
 * a cycle, two broadcasts). bench-packed-dot --logits batch-cold there, ns per row block and
 * token: 2 tokens 0.32-0.34, 4 0.26-0.27, 8 0.33-0.38. The first pass over a group streams it
 * in; the later ones, from L1, fetch the next group (packed_fetch_share), or the memory would
 * idle through them: 6 tokens 0.54 -> 0.44, 8 0.54 -> 0.37, 16 0.36 -> 0.27, 32 0.31 ->
 * 0.24 (bench-batched B=8 S_TG +1%, B=32 +3%). */
#define PACKED_SINGLE_PASS_TOKENS 4
/* How far ahead the single-accumulator product's first pass fetches its stream: the Q8_0
 * logits' blocks go by about twice as fast as the 4-bit lanes', and a decode token's 30 MB of
 * output rows went faster with a longer lead (bench-core tg128 Q4_1, 2 threads, interleaved
 * ABBA rounds against 4 KiB: 8 KiB 1.04x, 16 KiB 1.02x and 1.07x, 32 KiB 1.04x). */
#define PACKED_SINGLE_PREFETCH 16384

/* The single-accumulator product (dot.h) of group g's rows against tokens t0..t0+T-1, kind 0
 * (Q4_0) or 2 (Q8_0): per block and token the exact int32 of all 32 products, in four chains
 * of two vpdpbusd so that their latencies overlap (one token would wait on one chain of
 * eight; the first chain starts from the block's correction for the stored bias, -bias times
 * its activation sum), then one conversion and one fma by d_w * d_a. */
PACKED_ATTRS void packed_single_pass_512(const struct packed_weights *w, uint64_t g, const struct packed_activations *a,
                                         unsigned t0, const unsigned T, float *out, size_t out_stride, bool accumulate,
                                         bool prefetch, struct packed_fetch fetch, const int kind) {
        const size_t quant_bytes = packed_quant_bytes_512(kind), scale_bytes = 32;
        const int32_t bias = kind == 2 ? packed_quant_bias(TENSOR_Q8_0) : packed_quant_bias(TENSOR_Q4_0);
        const uint64_t n_blocks = w->n_blocks;
        const uint8_t *quants = w->data + g * w->group_bytes, *scales = quants + n_blocks * quant_bytes;
        __m512 acc[PACKED_SINGLE_PASS_TOKENS];

        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++)
                acc[t] = _mm512_setzero_ps();
        for (uint64_t b = 0; b < n_blocks; b++) {
                const uint8_t *rec = quants + b * quant_bytes;
                if (prefetch)
                        packed_prefetch_block_at(w, quants, b, quant_bytes + scale_bytes, PACKED_SINGLE_PREFETCH);
                packed_fetch_step(&fetch);
                __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *) (scales + b * scale_bytes)));
                __m512i u[PACKED_LANES];
                _Pragma("GCC unroll 8") for (unsigned l = 0; l < PACKED_LANES; l++)
                        u[l] = kind == 2 ? _mm512_load_si512(rec + 64 * l) : packed_lane_512(rec, l, kind);
                _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                        size_t ab = (t0 + t) * a->stride + b;
                        const int8_t *q = a->xq[ab].qs;
                        __m512i c[4] = { _mm512_set1_epi32(-bias * a->block_sums[ab]), _mm512_setzero_si512(),
                                         _mm512_setzero_si512(), _mm512_setzero_si512() };
                        _Pragma("GCC unroll 8") for (unsigned l = 0; l < PACKED_LANES; l++)
                                c[l % 4] = _mm512_dpbusd_epi32(c[l % 4], u[l], packed_broadcast4(q + 4 * l));
                        __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(a->ds[2 * ab]));
                        __m512i isum = _mm512_add_epi32(_mm512_add_epi32(c[0], c[1]), _mm512_add_epi32(c[2], c[3]));
                        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc[t]);
                }
        }

        uint64_t row0 = g * PACKED_ROWS;
        uint64_t n_valid = w->n_rows - row0 < PACKED_ROWS ? w->n_rows - row0 : PACKED_ROWS;
        __mmask16 mask = (__mmask16) ((1u << n_valid) - 1);
        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                float *o = out + (t0 + t) * out_stride + row0;
                __m512 v = accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(mask, o), acc[t]) : acc[t];
                _mm512_mask_storeu_ps(o, mask, v);
        }
}

/* Group g's passes of PACKED_SINGLE_PASS_TOKENS tokens for one kind: the first pass streams
 * the group in; the later ones, from L1, fetch the next. */
PACKED_ATTRS void packed_single_group_512(const struct packed_weights *w, uint64_t g, const struct packed_activations *a,
                                          unsigned n_tokens, float *out, size_t out_stride, bool accumulate, const int kind) {
        unsigned n_passes = (n_tokens + PACKED_SINGLE_PASS_TOKENS - 1) / PACKED_SINGLE_PASS_TOKENS;
        const uint8_t *next = g + 1 < w->n_groups ? w->data + (g + 1) * w->group_bytes : NULL;
        for (unsigned t0 = 0, pass = 0; t0 < n_tokens; t0 += PACKED_SINGLE_PASS_TOKENS, pass++) {
                bool prefetch = t0 == 0;
                struct packed_fetch fetch = pass > 0 ? packed_fetch_share(next, w->group_bytes, pass - 1, n_passes - 1, w->n_blocks)
                                                     : (struct packed_fetch) { NULL, NULL, 0 };
                switch (n_tokens - t0) {
                case 1: packed_single_pass_512(w, g, a, t0, 1, out, out_stride, accumulate, prefetch, fetch, kind); break;
                case 2: packed_single_pass_512(w, g, a, t0, 2, out, out_stride, accumulate, prefetch, fetch, kind); break;
                case 3: packed_single_pass_512(w, g, a, t0, 3, out, out_stride, accumulate, prefetch, fetch, kind); break;
                default:
                        packed_single_pass_512(w, g, a, t0, PACKED_SINGLE_PASS_TOKENS, out, out_stride, accumulate, prefetch,
                                               fetch, kind);
                        break;
                }
        }
}

__attribute__((target(DOT_TARGET))) static void packed_single_accumulator_512(const struct packed_weights *w, uint64_t group_begin,
                                                                             uint64_t group_end, const struct packed_activations *a,
                                                                             unsigned n_tokens, float *out, size_t out_stride,
                                                                             bool accumulate) {
        for (uint64_t g = group_begin; g < group_end; g++) {
                if (w->type == TENSOR_Q4_0)
                        packed_single_group_512(w, g, a, n_tokens, out, out_stride, accumulate, 0);
                else
                        packed_single_group_512(w, g, a, n_tokens, out, out_stride, accumulate, 2);
        }
}

/* Tokens per pass of the packed Q4_K product: each keeps two integer chains per chunk of 64
 * elements and its float accumulators, four fill the registers beside the weights. */
#define PACKED_K_PASS_TOKENS 4

/* Super-block b's record of a packed K-quant group (quants at quants, quant_bytes each),
 * fetching the stream ahead on the group's first pass and a share of a later group's on the
 * others. */
PACKED_ATTRS const uint8_t *packed_k_record_512(const struct packed_weights *w, const uint8_t *quants, uint64_t b,
                                                size_t quant_bytes, bool prefetch, struct packed_fetch *fetch) {
        if (prefetch)
                packed_prefetch_block(w, quants, b, quant_bytes + w->scale_bytes);
        packed_fetch_step(fetch);
        return quants + b * quant_bytes;
}

/* Super-block b's d (which 0) or dmin (which 1) of the group's sixteen rows. */
PACKED_ATTRS __m512 packed_k_d_512(const struct packed_weights *w, const uint8_t *scales, uint64_t b, unsigned which) {
        return _mm512_cvtph_ps(_mm256_load_si256((const __m256i *) (scales + b * w->scale_bytes + 32 * which)));
}

/* The packed Q4_K product (dot.h) of group g's rows against tokens t0..t0+T-1, all in one
 * order (single: each super-block's integers summed whole, one fma pair per super-block; else
 * one fma pair per chunk of 64 elements): per chunk and token, two chains of eight vpdpbusd
 * give the sixteen rows' exact sums of sub-blocks 2c and 2c + 1, times their scales
 * (vpmulld), the mins against the activation sums by one vpmaddwd of (min, min) pairs. */
PACKED_ATTRS void packed_q4_K_pass_512(const struct packed_weights *w, uint64_t g, const struct block_q8_K *act,
                                       size_t act_stride, unsigned t0, const unsigned T, const bool single, float *out,
                                       size_t out_stride, bool accumulate, bool prefetch, struct packed_fetch fetch) {
        const uint64_t n_super = w->n_blocks;
        const uint8_t *quants = w->data + g * w->group_bytes, *scales = quants + n_super * PACKED_Q4_K_QUANT_BYTES;
        const __m512i low4 = _mm512_set1_epi8(15);
        __m512 acc[PACKED_K_PASS_TOKENS], accm[PACKED_K_PASS_TOKENS];

        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++)
                acc[t] = accm[t] = _mm512_setzero_ps();
        for (uint64_t b = 0; b < n_super; b++) {
                const uint8_t *rec = packed_k_record_512(w, quants, b, PACKED_Q4_K_QUANT_BYTES, prefetch, &fetch);
                __m512 dw = packed_k_d_512(w, scales, b, 0);
                __m512 dmw = packed_k_d_512(w, scales, b, 1);
                __m512i isum[PACKED_K_PASS_TOKENS], imin[PACKED_K_PASS_TOKENS];
                _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++)
                        isum[t] = imin[t] = _mm512_setzero_si512();
                _Pragma("GCC unroll 4") for (unsigned c = 0; c < 4; c++) {
                        __m512i s_lo[PACKED_K_PASS_TOKENS], s_hi[PACKED_K_PASS_TOKENS];
                        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++)
                                s_lo[t] = s_hi[t] = _mm512_setzero_si512();
                        _Pragma("GCC unroll 8") for (unsigned j = 0; j < 8; j++) {
                                __m512i v = _mm512_load_si512(rec + 64 * (8 * c + j));
                                __m512i lo = _mm512_and_si512(v, low4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
                                _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                                        const int8_t *q = act[(t0 + t) * act_stride + b].qs + 64 * c + 4 * j;
                                        s_lo[t] = _mm512_dpbusd_epi32(s_lo[t], lo, packed_broadcast4(q));
                                        s_hi[t] = _mm512_dpbusd_epi32(s_hi[t], hi, packed_broadcast4(q + 32));
                                }
                        }
                        __m512i sc_lo = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *) (rec + PACKED_Q4_K_SCALES + 2 * c * PACKED_ROWS)));
                        __m512i sc_hi = _mm512_cvtepu8_epi32(
                                _mm_load_si128((const __m128i *) (rec + PACKED_Q4_K_SCALES + (2 * c + 1) * PACKED_ROWS)));
                        __m512i mins = _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *) (rec + PACKED_Q4_K_MINS + 2 * c * PACKED_ROWS)));
                        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                                const struct block_q8_K *a = &act[(t0 + t) * act_stride + b];
                                __m512i ic = _mm512_add_epi32(_mm512_mullo_epi32(s_lo[t], sc_lo), _mm512_mullo_epi32(s_hi[t], sc_hi));
                                uint32_t pair = (uint16_t) (a->bsums[4 * c] + a->bsums[4 * c + 1]) |
                                                (uint32_t) (uint16_t) (a->bsums[4 * c + 2] + a->bsums[4 * c + 3]) << 16;
                                __m512i im = _mm512_madd_epi16(mins, _mm512_set1_epi32((int32_t) pair));
                                if (single) {
                                        isum[t] = _mm512_add_epi32(isum[t], ic);
                                        imin[t] = _mm512_add_epi32(imin[t], im);
                                } else {
                                        __m512 da = _mm512_set1_ps(a->d);
                                        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ic), _mm512_mul_ps(dw, da), acc[t]);
                                        accm[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(im), _mm512_mul_ps(dmw, da), accm[t]);
                                }
                        }
                }
                if (single)
                        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                                __m512 da = _mm512_set1_ps(act[(t0 + t) * act_stride + b].d);
                                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dw, da), acc[t]);
                                accm[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin[t]), _mm512_mul_ps(dmw, da), accm[t]);
                        }
        }

        uint64_t row0 = g * PACKED_ROWS;
        uint64_t n_valid = w->n_rows - row0 < PACKED_ROWS ? w->n_rows - row0 : PACKED_ROWS;
        __mmask16 mask = (__mmask16) ((1u << n_valid) - 1);
        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                float *o = out + (t0 + t) * out_stride + row0;
                __m512 r = _mm512_sub_ps(acc[t], accm[t]);
                _mm512_mask_storeu_ps(o, mask, accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(mask, o), r) : r);
        }
}

/* Tokens t0..t0+T-1's results of group g's rows into out, the padding rows left out. */
PACKED_ATTRS void packed_k_store_512(const struct packed_weights *w, uint64_t g, float *out, unsigned t0, unsigned T,
                                     size_t out_stride, bool accumulate, const __m512 *result) {
        uint64_t row0 = g * PACKED_ROWS;
        uint64_t n_valid = w->n_rows - row0 < PACKED_ROWS ? w->n_rows - row0 : PACKED_ROWS;
        __mmask16 mask = (__mmask16) ((1u << n_valid) - 1);
        for (unsigned t = 0; t < T; t++) {
                float *o = out + (t0 + t) * out_stride + row0;
                _mm512_mask_storeu_ps(o, mask, accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(mask, o), result[t]) : result[t]);
        }
}

/* lanes_sum8()'s tree on sixteen rows' eight lane accumulators. */
PACKED_ATTRS __m512 packed_lanes_sum8_512(const __m512 lanes[PACKED_LANES]) {
        return _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(lanes[0], lanes[4]), _mm512_add_ps(lanes[2], lanes[6])),
                             _mm512_add_ps(_mm512_add_ps(lanes[1], lanes[5]), _mm512_add_ps(lanes[3], lanes[7])));
}

/* Sub-blocks 2c and 2c + 1's elements 4k .. 4k + 3 of a packed Q5_K record's sixteen rows as
 * 5-bit bytes: the nibbles of quant vector 8c + k, the fifth bits from bit 2c (2c + 1) of fifth-bit
 * vector k brought to bit 4. */
PACKED_ATTRS void packed_q5_K_lanes2_512(const uint8_t *rec, unsigned c, unsigned k, __m512i *lo, __m512i *hi) {
        const __m512i low4 = _mm512_set1_epi8(15), bit4 = _mm512_set1_epi8(0x10);
        __m512i v = _mm512_load_si512(rec + 64 * (8 * c + k)), h = _mm512_load_si512(rec + PACKED_Q5_K_HIGH + 64 * k);
        unsigned s = 2 * c; /* bit s to bit 4, then bit s + 1 */
        __m512i h_lo = s < 4 ? _mm512_slli_epi16(h, 4 - s) : s == 4 ? h : _mm512_srli_epi16(h, s - 4);
        __m512i h_hi = s + 1 < 4 ? _mm512_slli_epi16(h, 3 - s) : s + 1 == 4 ? h : _mm512_srli_epi16(h, s - 3);
        *lo = _mm512_ternarylogic_epi32(_mm512_and_si512(v, low4), h_lo, bit4, 0xf8);
        *hi = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(v, 4), low4), h_hi, bit4, 0xf8);
}

/* A packed Q4_K or Q5_K record's mins of chunk c (sub-blocks 2c, 2c + 1) against a token's
 * activation sums: one vpmaddwd of (min, min) pairs. */
PACKED_ATTRS __m512i packed_k_mins_512(const uint8_t *rec, unsigned c, const struct block_q8_K *a) {
        __m512i mins = _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *) (rec + PACKED_Q4_K_MINS + 2 * c * PACKED_ROWS)));
        uint32_t pair = (uint16_t) (a->bsums[4 * c] + a->bsums[4 * c + 1]) |
                        (uint32_t) (uint16_t) (a->bsums[4 * c + 2] + a->bsums[4 * c + 3]) << 16;
        return _mm512_madd_epi16(mins, _mm512_set1_epi32((int32_t) pair));
}

/* Sub-block s's scales of a packed Q4_K or Q5_K record as int32. */
PACKED_ATTRS __m512i packed_k_scales_512(const uint8_t *rec, unsigned s) {
        return _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *) (rec + PACKED_Q4_K_SCALES + s * PACKED_ROWS)));
}

/* The packed Q5_K product's batched order (the tiled one) for group g's rows against tokens
 * t0..t0+T-1: per chunk and token, two chains of eight vpdpbusd give sub-blocks 2c and 2c + 1's
 * exact sums, times their scales; the mins by vpmaddwd; per super-block r = isum * d_w, then
 * r = fma(-dmin_w, imin, r) and acc = fma(r, d_a, acc). */
PACKED_ATTRS void packed_q5_K_pass_512(const struct packed_weights *w, uint64_t g, const struct block_q8_K *act,
                                       size_t act_stride, unsigned t0, const unsigned T, float *out, size_t out_stride,
                                       bool accumulate, bool prefetch, struct packed_fetch fetch) {
        const uint64_t n_super = w->n_blocks;
        const uint8_t *quants = w->data + g * w->group_bytes, *scales = quants + n_super * PACKED_Q5_K_QUANT_BYTES;
        __m512 acc[PACKED_K_PASS_TOKENS];

        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++)
                acc[t] = _mm512_setzero_ps();
        for (uint64_t b = 0; b < n_super; b++) {
                const uint8_t *rec = packed_k_record_512(w, quants, b, PACKED_Q5_K_QUANT_BYTES, prefetch, &fetch);
                __m512 dw = packed_k_d_512(w, scales, b, 0);
                __m512 neg_dmw = _mm512_sub_ps(_mm512_setzero_ps(), packed_k_d_512(w, scales, b, 1));
                __m512i isum[PACKED_K_PASS_TOKENS], imin[PACKED_K_PASS_TOKENS];
                _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++)
                        isum[t] = imin[t] = _mm512_setzero_si512();
                _Pragma("GCC unroll 4") for (unsigned c = 0; c < 4; c++) {
                        __m512i s_lo[PACKED_K_PASS_TOKENS], s_hi[PACKED_K_PASS_TOKENS];
                        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++)
                                s_lo[t] = s_hi[t] = _mm512_setzero_si512();
                        _Pragma("GCC unroll 8") for (unsigned k = 0; k < 8; k++) {
                                __m512i lo, hi;
                                packed_q5_K_lanes2_512(rec, c, k, &lo, &hi);
                                _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                                        const int8_t *q = act[(t0 + t) * act_stride + b].qs + 64 * c + 4 * k;
                                        s_lo[t] = _mm512_dpbusd_epi32(s_lo[t], lo, packed_broadcast4(q));
                                        s_hi[t] = _mm512_dpbusd_epi32(s_hi[t], hi, packed_broadcast4(q + 32));
                                }
                        }
                        __m512i sc_lo = packed_k_scales_512(rec, 2 * c), sc_hi = packed_k_scales_512(rec, 2 * c + 1);
                        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                                isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(s_lo[t], sc_lo),
                                                                                     _mm512_mullo_epi32(s_hi[t], sc_hi)));
                                imin[t] = _mm512_add_epi32(imin[t], packed_k_mins_512(rec, c, &act[(t0 + t) * act_stride + b]));
                        }
                }
                _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                        __m512 r = _mm512_mul_ps(_mm512_cvtepi32_ps(isum[t]), dw);
                        r = _mm512_fmadd_ps(neg_dmw, _mm512_cvtepi32_ps(imin[t]), r);
                        acc[t] = _mm512_fmadd_ps(r, _mm512_set1_ps(act[(t0 + t) * act_stride + b].d), acc[t]);
                }
        }
        packed_k_store_512(w, g, out, t0, T, out_stride, accumulate, acc);
}

/* The packed Q5_K product's single order (the vector product) for group g's rows and token t:
 * per half of the eight lanes, each sub-block's scale as int32 held in registers, lane k's four
 * elements of sub-block s by one vpdpbusd times s's scale; one fma per lane and super-block,
 * the mins apart (summs = fma(-d_a * dmin_w, imin, summs)); lanes_sum8()'s tree plus summs. */
PACKED_ATTRS void packed_q5_K_single_512(const struct packed_weights *w, uint64_t g, const struct block_q8_K *act,
                                         size_t act_stride, unsigned t, float *out, size_t out_stride, bool accumulate,
                                         bool prefetch, struct packed_fetch fetch) {
        const uint64_t n_super = w->n_blocks;
        const uint8_t *quants = w->data + g * w->group_bytes, *scales = quants + n_super * PACKED_Q5_K_QUANT_BYTES;
        __m512 lane_acc[PACKED_LANES], summs = _mm512_setzero_ps();

        _Pragma("GCC unroll 8") for (unsigned k = 0; k < PACKED_LANES; k++)
                lane_acc[k] = _mm512_setzero_ps();
        for (uint64_t b = 0; b < n_super; b++) {
                const uint8_t *rec = packed_k_record_512(w, quants, b, PACKED_Q5_K_QUANT_BYTES, prefetch, &fetch);
                const struct block_q8_K *a = &act[t * act_stride + b];
                __m512 dw = packed_k_d_512(w, scales, b, 0);
                __m512 dmw = packed_k_d_512(w, scales, b, 1);
                __m512 d = _mm512_mul_ps(_mm512_set1_ps(a->d), dw);
                __m512i sc[8], imin = _mm512_setzero_si512();
                _Pragma("GCC unroll 8") for (unsigned s = 0; s < 8; s++)
                        sc[s] = packed_k_scales_512(rec, s);
                _Pragma("GCC unroll 2") for (unsigned h = 0; h < 2; h++) {
                        __m512i ilane[4];
                        _Pragma("GCC unroll 4") for (unsigned kk = 0; kk < 4; kk++)
                                ilane[kk] = _mm512_setzero_si512();
                        _Pragma("GCC unroll 4") for (unsigned c = 0; c < 4; c++)
                                _Pragma("GCC unroll 4") for (unsigned kk = 0; kk < 4; kk++) {
                                        unsigned k = 4 * h + kk;
                                        __m512i lo, hi;
                                        packed_q5_K_lanes2_512(rec, c, k, &lo, &hi);
                                        const int8_t *q = a->qs + 64 * c + 4 * k;
                                        __m512i d_lo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, packed_broadcast4(q));
                                        __m512i d_hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi, packed_broadcast4(q + 32));
                                        ilane[kk] = _mm512_add_epi32(ilane[kk], _mm512_add_epi32(_mm512_mullo_epi32(d_lo, sc[2 * c]),
                                                                                                 _mm512_mullo_epi32(d_hi, sc[2 * c + 1])));
                                }
                        _Pragma("GCC unroll 4") for (unsigned kk = 0; kk < 4; kk++)
                                lane_acc[4 * h + kk] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ilane[kk]), d, lane_acc[4 * h + kk]);
                }
                _Pragma("GCC unroll 4") for (unsigned c = 0; c < 4; c++)
                        imin = _mm512_add_epi32(imin, packed_k_mins_512(rec, c, a));
                summs = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(-a->d), dmw), _mm512_cvtepi32_ps(imin), summs);
        }
        __m512 sum = _mm512_add_ps(packed_lanes_sum8_512(lane_acc), summs);
        packed_k_store_512(w, g, out, t, 1, out_stride, accumulate, &sum);
}

/* Q2_K, Q3_K and Q6_K, whose scales are per sub-block of 16, share their unpacking; Q3_K and
 * Q6_K, whose quants carry a bias (4 and 32: stored unsigned as q + bias), their kernels: */
PACKED_ATTRS size_t packed_k16_quant_bytes(const enum tensor_type type) {
        return type == TENSOR_Q2_K ? PACKED_Q2_K_QUANT_BYTES : type == TENSOR_Q3_K ? PACKED_Q3_K_QUANT_BYTES : PACKED_Q6_K_QUANT_BYTES;
}

PACKED_ATTRS const uint8_t *packed_k16_scale_pair(const uint8_t *rec, unsigned p, const enum tensor_type type) {
        return rec + (type == TENSOR_Q2_K ? PACKED_Q2_K_SCALES : type == TENSOR_Q3_K ? PACKED_Q3_K_SCALES : PACKED_Q6_K_SCALES) + 32 * p;
}

/* log2 of the bias */
PACKED_ATTRS int packed_k16_bias_shift(const enum tensor_type type) {
        return type == TENSOR_Q3_K ? 2 : 5;
}

/* Runs 4n .. 4n + 3's elements 4k .. 4k + 3 of a packed record's sixteen rows as unsigned bytes
 * (q + bias). Q2_K: two bits of the qs vector. Q6_K: the low nibbles from the ql vectors, the top two bits from the qh vector
 * brought to bits 4 and 5. Q3_K: two bits of the qs vector, the third from the hmask vector
 * brought to bit 2. */
PACKED_ATTRS void packed_k16_lanes4_512(const uint8_t *rec, unsigned n, unsigned k, __m512i v[4], const enum tensor_type type) {
        if (type == TENSOR_Q2_K) {
                __m512i q = _mm512_load_si512(rec + 64 * (8 * n + k));
                _Pragma("GCC unroll 4") for (unsigned j = 0; j < 4; j++)
                        v[j] = _mm512_and_si512(_mm512_srli_epi16(q, 2 * j), _mm512_set1_epi8(0x03));
                return;
        }
        if (type == TENSOR_Q3_K) {
                const __m512i low2 = _mm512_set1_epi8(0x03), bit2 = _mm512_set1_epi8(0x04);
                __m512i q = _mm512_load_si512(rec + 64 * (8 * n + k)), h = _mm512_load_si512(rec + PACKED_Q3_K_HIGH + 64 * k);
                _Pragma("GCC unroll 4") for (unsigned j = 0; j < 4; j++) {
                        unsigned s = 4 * n + j; /* hmask bit s to bit 2 */
                        __m512i hb = s < 2 ? _mm512_slli_epi16(h, 2 - s) : s == 2 ? h : _mm512_srli_epi16(h, s - 2);
                        v[j] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(q, 2 * j), low2), hb, bit2, 0xf8);
                }
                return;
        }
        const __m512i low4 = _mm512_set1_epi8(0x0f), top2 = _mm512_set1_epi8(0x30);
        __m512i l0 = _mm512_load_si512(rec + 64 * (8 * (2 * n) + k)), l1 = _mm512_load_si512(rec + 64 * (8 * (2 * n + 1) + k));
        __m512i h = _mm512_load_si512(rec + PACKED_Q6_K_HIGH + 64 * (8 * n + k));
        /* (low & 0x0f) | (high & 0x30) */
        v[0] = _mm512_ternarylogic_epi32(_mm512_and_si512(l0, low4), _mm512_slli_epi16(h, 4), top2, 0xf8);
        v[1] = _mm512_ternarylogic_epi32(_mm512_and_si512(l1, low4), _mm512_slli_epi16(h, 2), top2, 0xf8);
        v[2] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l0, 4), low4), h, top2, 0xf8);
        v[3] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(l1, 4), low4), _mm512_srli_epi16(h, 2), top2, 0xf8);
}

/* Run s's elements 4k .. 4k + 3 alone. */
PACKED_ATTRS __m512i packed_k16_lane_512(const uint8_t *rec, unsigned s, unsigned k, const enum tensor_type type) {
        __m512i v[4];
        packed_k16_lanes4_512(rec, s / 4, k, v, type);
        return v[s % 4];
}

/* Rows of more super-blocks than this unpack their quants in every pass. */
#define PACKED_K16_UNPACK_MAX 16

/* Per token, run s's exact sums of sub-blocks 2s (c_lo) and 2s + 1 (c_hi) for the group's
 * sixteen rows: two chains of four vpdpbusd over the run's unsigned quants. */
PACKED_ATTRS void packed_k16_run_sums_512(const uint8_t *rec, const __m512i *unpacked, uint64_t b, unsigned s,
                                          const struct block_q8_K *act, size_t act_stride, unsigned t0, const unsigned T,
                                          __m512i *c_lo, __m512i *c_hi, const enum tensor_type type) {
        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++)
                c_lo[t] = c_hi[t] = _mm512_setzero_si512();
        _Pragma("GCC unroll 8") for (unsigned k = 0; k < PACKED_LANES; k++) {
                __m512i v = unpacked ? unpacked[64 * b + 8 * s + k] : packed_k16_lane_512(rec, s, k, type);
                _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                        __m512i a4 = packed_broadcast4(act[(t0 + t) * act_stride + b].qs + 32 * s + 4 * k);
                        if (k < 4)
                                c_lo[t] = _mm512_dpbusd_epi32(c_lo[t], v, a4);
                        else
                                c_hi[t] = _mm512_dpbusd_epi32(c_hi[t], v, a4);
                }
        }
}

/* The single order (the vector product) of the packed Q3_K or Q6_K product for group g's rows
 * and token t: per half h of the eight lanes, the eight runs' scales for that half as int32;
 * lane k's four elements of each run by one vpdpbusd, times the run's scale; the bias taken
 * off (Q3_K: each lane's own, -4 x its four activations, inside the product; Q6_K: llama.cpp's
 * vector product takes 32 x the scaled activation sums of sub-blocks 2k and 2k + 1 off lane k);
 * then one fma per lane and super-block, the lanes summed in lanes_sum8()'s tree. */
PACKED_ATTRS void packed_k16_single_512(const struct packed_weights *w, uint64_t g, const struct block_q8_K *act,
                                        size_t act_stride, unsigned t, float *out, size_t out_stride, bool accumulate,
                                        bool prefetch, struct packed_fetch fetch, const __m512i *unpacked,
                                        const enum tensor_type type) {
        const uint64_t n_super = w->n_blocks;
        const size_t quant_bytes = packed_k16_quant_bytes(type);
        const uint8_t *quants = w->data + g * w->group_bytes, *scales = quants + n_super * quant_bytes;
        __m512 lane_acc[PACKED_LANES];

        _Pragma("GCC unroll 8") for (unsigned k = 0; k < PACKED_LANES; k++)
                lane_acc[k] = _mm512_setzero_ps();
        for (uint64_t b = 0; b < n_super; b++) {
                const uint8_t *rec = packed_k_record_512(w, quants, b, quant_bytes, prefetch, &fetch);
                const struct block_q8_K *a = &act[t * act_stride + b];
                __m512 d = _mm512_mul_ps(_mm512_set1_ps(a->d), packed_k_d_512(w, scales, b, 0));
                _Pragma("GCC unroll 2") for (unsigned h = 0; h < 2; h++) {
                        __m512i sc[QK_K / 32], ilane[4];
                        _Pragma("GCC unroll 8") for (unsigned s = 0; s < QK_K / 32; s++) {
                                __m512i pair = _mm512_cvtepi8_epi16(_mm256_load_si256((const __m256i *) packed_k16_scale_pair(rec, s, type)));
                                sc[s] = _mm512_srai_epi32(h ? pair : _mm512_slli_epi32(pair, 16), 16);
                        }
                        _Pragma("GCC unroll 4") for (unsigned kk = 0; kk < 4; kk++)
                                ilane[kk] = _mm512_setzero_si512();
                        _Pragma("GCC unroll 2") for (unsigned n = 0; n < 2; n++)
                                _Pragma("GCC unroll 4") for (unsigned kk = 0; kk < 4; kk++) {
                                        unsigned k = 4 * h + kk;
                                        __m512i v[4];
                                        if (unpacked)
                                                _Pragma("GCC unroll 4") for (unsigned j = 0; j < 4; j++)
                                                        v[j] = unpacked[64 * b + 8 * (4 * n + j) + k];
                                        else
                                                packed_k16_lanes4_512(rec, n, k, v, type);
                                        _Pragma("GCC unroll 4") for (unsigned j = 0; j < 4; j++) {
                                                unsigned s = 4 * n + j;
                                                const int8_t *q = a->qs + 32 * s + 4 * k;
                                                __m512i start = _mm512_setzero_si512();
                                                if (type == TENSOR_Q3_K)
                                                        start = _mm512_set1_epi32(-4 * (q[0] + q[1] + q[2] + q[3]));
                                                __m512i d4 = _mm512_dpbusd_epi32(start, v[j], packed_broadcast4(q));
                                                ilane[kk] = _mm512_add_epi32(ilane[kk], _mm512_mullo_epi32(d4, sc[s]));
                                        }
                                }
                        _Pragma("GCC unroll 4") for (unsigned kk = 0; kk < 4; kk++) {
                                unsigned k = 4 * h + kk;
                                if (type == TENSOR_Q6_K) {
                                        __m512i pair = _mm512_cvtepi8_epi16(_mm256_load_si256((const __m256i *) packed_k16_scale_pair(rec, k, type)));
                                        uint32_t sums = (uint16_t) a->bsums[2 * k] | (uint32_t) (uint16_t) a->bsums[2 * k + 1] << 16;
                                        __m512i bias = _mm512_slli_epi32(_mm512_madd_epi16(pair, _mm512_set1_epi32((int32_t) sums)), 5);
                                        ilane[kk] = _mm512_sub_epi32(ilane[kk], bias);
                                }
                                lane_acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ilane[kk]), d, lane_acc[k]);
                        }
                }
        }
        __m512 sum = packed_lanes_sum8_512(lane_acc);
        packed_k_store_512(w, g, out, t, 1, out_stride, accumulate, &sum);
}

/* The batched order (the tiled one) of the packed Q3_K or Q6_K product for group g's rows
 * against tokens t0..t0+T-1: per sub-block pair s and token, two chains of four vpdpbusd give
 * the rows' exact sums of sub-blocks 2s and 2s + 1, times their scales, less bias x the scaled
 * activation sums (one vpmaddwd of the pair's scales), one sum per super-block, then
 * r = isum * d_w and acc = fma(r, d_a, acc). */
PACKED_ATTRS void packed_k16_pass_512(const struct packed_weights *w, uint64_t g, const struct block_q8_K *act,
                                      size_t act_stride, unsigned t0, const unsigned T, float *out, size_t out_stride,
                                      bool accumulate, bool prefetch, struct packed_fetch fetch, const __m512i *unpacked,
                                      const enum tensor_type type) {
        const uint64_t n_super = w->n_blocks;
        const size_t quant_bytes = packed_k16_quant_bytes(type);
        const uint8_t *quants = w->data + g * w->group_bytes, *scales = quants + n_super * quant_bytes;
        __m512 acc[PACKED_K_PASS_TOKENS];

        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++)
                acc[t] = _mm512_setzero_ps();
        for (uint64_t b = 0; b < n_super; b++) {
                const uint8_t *rec = packed_k_record_512(w, quants, b, quant_bytes, prefetch, &fetch);
                __m512 dw = packed_k_d_512(w, scales, b, 0);
                __m512i isum[PACKED_K_PASS_TOKENS];
                _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++)
                        isum[t] = _mm512_setzero_si512();
                _Pragma("GCC unroll 8") for (unsigned s = 0; s < QK_K / 32; s++) {
                        /* pair s's scales as int16 pairs, and each of the two as int32 */
                        __m512i pair = _mm512_cvtepi8_epi16(_mm256_load_si256((const __m256i *) packed_k16_scale_pair(rec, s, type)));
                        __m512i sc_lo = _mm512_srai_epi32(_mm512_slli_epi32(pair, 16), 16), sc_hi = _mm512_srai_epi32(pair, 16);
                        __m512i c_lo[PACKED_K_PASS_TOKENS], c_hi[PACKED_K_PASS_TOKENS];
                        packed_k16_run_sums_512(rec, unpacked, b, s, act, act_stride, t0, T, c_lo, c_hi, type);
                        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                                const int16_t *bs = act[(t0 + t) * act_stride + b].bsums + 2 * s;
                                uint32_t sums = (uint16_t) bs[0] | (uint32_t) (uint16_t) bs[1] << 16;
                                __m512i bias = _mm512_slli_epi32(_mm512_madd_epi16(pair, _mm512_set1_epi32((int32_t) sums)),
                                                                 packed_k16_bias_shift(type));
                                __m512i scaled = _mm512_add_epi32(_mm512_mullo_epi32(c_lo[t], sc_lo), _mm512_mullo_epi32(c_hi[t], sc_hi));
                                isum[t] = _mm512_add_epi32(isum[t], _mm512_sub_epi32(scaled, bias));
                        }
                }
                _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                        __m512 r = _mm512_mul_ps(_mm512_cvtepi32_ps(isum[t]), dw);
                        acc[t] = _mm512_fmadd_ps(r, _mm512_set1_ps(act[(t0 + t) * act_stride + b].d), acc[t]);
                }
        }

        packed_k_store_512(w, g, out, t0, T, out_stride, accumulate, acc);
}

/* The packed Q2_K product (its repacked orders, as Q4_K's) for group g's rows against tokens
 * t0..t0+T-1 in one order: per run of 32 and token, two chains of four vpdpbusd give the rows'
 * exact sums of sub-blocks 2s and 2s + 1, times their scales (vpmulld), the mins by one
 * vpmaddwd of (min, min) pairs against the activation sums; one fma pair per 128 elements
 * (batched) or per super-block (single). */
PACKED_ATTRS void packed_q2_K_pass_512(const struct packed_weights *w, uint64_t g, const struct block_q8_K *act,
                                       size_t act_stride, unsigned t0, const unsigned T, const bool single, float *out,
                                       size_t out_stride, bool accumulate, bool prefetch, struct packed_fetch fetch,
                                       const __m512i *unpacked) {
        const uint64_t n_super = w->n_blocks;
        const uint8_t *quants = w->data + g * w->group_bytes, *scales = quants + n_super * PACKED_Q2_K_QUANT_BYTES;
        __m512 acc[PACKED_K_PASS_TOKENS], accm[PACKED_K_PASS_TOKENS];

        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++)
                acc[t] = accm[t] = _mm512_setzero_ps();
        for (uint64_t b = 0; b < n_super; b++) {
                const uint8_t *rec = packed_k_record_512(w, quants, b, PACKED_Q2_K_QUANT_BYTES, prefetch, &fetch);
                __m512 dw = packed_k_d_512(w, scales, b, 0), dmw = packed_k_d_512(w, scales, b, 1);
                __m512i isum[PACKED_K_PASS_TOKENS], imin[PACKED_K_PASS_TOKENS];
                _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++)
                        isum[t] = imin[t] = _mm512_setzero_si512();
                _Pragma("GCC unroll 8") for (unsigned s = 0; s < QK_K / 32; s++) {
                        __m512i pair = _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *) packed_k16_scale_pair(rec, s, TENSOR_Q2_K)));
                        __m512i mins = _mm512_cvtepu8_epi16(_mm256_load_si256((const __m256i *) (rec + PACKED_Q2_K_MINS + 32 * s)));
                        __m512i sc_lo = _mm512_and_si512(pair, _mm512_set1_epi32(0xffff)), sc_hi = _mm512_srli_epi32(pair, 16);
                        __m512i c_lo[PACKED_K_PASS_TOKENS], c_hi[PACKED_K_PASS_TOKENS];
                        packed_k16_run_sums_512(rec, unpacked, b, s, act, act_stride, t0, T, c_lo, c_hi, TENSOR_Q2_K);
                        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                                const struct block_q8_K *a = &act[(t0 + t) * act_stride + b];
                                uint32_t sums = (uint16_t) a->bsums[2 * s] | (uint32_t) (uint16_t) a->bsums[2 * s + 1] << 16;
                                isum[t] = _mm512_add_epi32(isum[t], _mm512_add_epi32(_mm512_mullo_epi32(c_lo[t], sc_lo),
                                                                                     _mm512_mullo_epi32(c_hi[t], sc_hi)));
                                imin[t] = _mm512_add_epi32(imin[t], _mm512_madd_epi16(mins, _mm512_set1_epi32((int32_t) sums)));
                                /* the batched order's fma pair per 128 elements; the single order's per super-block */
                                if (single ? s != QK_K / 32 - 1 : s % 4 != 3)
                                        continue;
                                __m512 da = _mm512_set1_ps(a->d);
                                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), _mm512_mul_ps(dw, da), acc[t]);
                                accm[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(imin[t]), _mm512_mul_ps(dmw, da), accm[t]);
                                isum[t] = imin[t] = _mm512_setzero_si512();
                        }
                }
        }
        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++)
                acc[t] = _mm512_sub_ps(acc[t], accm[t]);
        packed_k_store_512(w, g, out, t0, T, out_stride, accumulate, acc);
}

/* The tokens from t0 that a pass takes: up to PACKED_K_PASS_TOKENS of the same order, one for
 * the vector products' single order (its eight lanes per token fill the registers). */
static inline unsigned packed_k_pass_tokens(const bool *batched, unsigned t0, unsigned n_tokens, enum tensor_type type) {
        unsigned max = type != TENSOR_Q4_K && type != TENSOR_Q2_K && !batched[t0] ? 1 : PACKED_K_PASS_TOKENS, n = 1;
        while (n < max && t0 + n < n_tokens && batched[t0 + n] == batched[t0])
                n++;
        return n;
}

PACKED_ATTRS void packed_k_groups_512(const struct packed_weights *w, uint64_t group_begin, uint64_t group_end,
                                      const struct block_q8_K *act, size_t act_stride, const bool *batched,
                                      unsigned n_tokens, float *out, size_t out_stride, bool accumulate,
                                      const enum tensor_type type, __m512i *group_lanes) {
        unsigned n_passes = 0;
        for (unsigned t0 = 0; t0 < n_tokens; t0 += packed_k_pass_tokens(batched, t0, n_tokens, type))
                n_passes++;
        /* Q2_K's, Q3_K's and Q6_K's quants unpacked once into group_lanes for all of a group's passes when there are several */
        const __m512i *unpacked = group_lanes && n_passes > 1 && w->n_blocks <= PACKED_K16_UNPACK_MAX ? group_lanes : NULL;
        for (uint64_t g = group_begin; g < group_end; g++) {
                /* the first pass streams the group in; the later ones, from L1 and L2, fetch the next */
                const uint8_t *next = g + 1 < w->n_groups ? w->data + (g + 1) * w->group_bytes : NULL;
                unsigned pass = 0;
                if (unpacked) {
                        const uint8_t *quants = w->data + g * w->group_bytes;
                        for (uint64_t b = 0; b < w->n_blocks; b++) {
                                const uint8_t *rec = quants + b * w->quant_bytes;
                                packed_prefetch_block(w, quants, b, w->quant_bytes + w->scale_bytes);
                                for (unsigned n = 0; n < 2; n++)
                                        for (unsigned k = 0; k < PACKED_LANES; k++) {
                                                __m512i v[4];
                                                packed_k16_lanes4_512(rec, n, k, v, type);
                                                for (unsigned j = 0; j < 4; j++)
                                                        group_lanes[64 * b + 8 * (4 * n + j) + k] = v[j];
                                        }
                        }
                }
                for (unsigned t0 = 0, n; t0 < n_tokens; t0 += n, pass++) {
                        n = packed_k_pass_tokens(batched, t0, n_tokens, type);
                        bool prefetch = t0 == 0, single = !batched[t0];
                        struct packed_fetch fetch = pass > 0 ? packed_fetch_share(next, w->group_bytes, pass - 1, n_passes - 1, w->n_blocks)
                                                             : (struct packed_fetch) { NULL, NULL, 0 };
#define PACKED_K_PASS(T, SINGLE)                                                                                      \
        (type == TENSOR_Q4_K   ? packed_q4_K_pass_512(w, g, act, act_stride, t0, T, SINGLE, out, out_stride, accumulate, \
                                                      prefetch, fetch)                                                 \
         : type == TENSOR_Q2_K ? packed_q2_K_pass_512(w, g, act, act_stride, t0, T, SINGLE, out, out_stride, accumulate, \
                                                      prefetch, fetch, unpacked)                                       \
         : type == TENSOR_Q5_K ? (SINGLE ? packed_q5_K_single_512(w, g, act, act_stride, t0, out, out_stride, accumulate, \
                                                                  prefetch, fetch)                                     \
                                         : packed_q5_K_pass_512(w, g, act, act_stride, t0, T, out, out_stride, accumulate, \
                                                                prefetch, fetch))                                      \
                     : SINGLE ? packed_k16_single_512(w, g, act, act_stride, t0, out, out_stride, accumulate, prefetch,   \
                                                      fetch, unpacked, type)                                           \
                             : packed_k16_pass_512(w, g, act, act_stride, t0, T, out, out_stride, accumulate, prefetch,  \
                                                   fetch, unpacked, type))
                        switch (n * 2 + single) {
                        case 2: PACKED_K_PASS(1, false); break;
                        case 3: PACKED_K_PASS(1, true); break;
                        case 4: PACKED_K_PASS(2, false); break;
                        case 5: PACKED_K_PASS(2, true); break;
                        case 6: PACKED_K_PASS(3, false); break;
                        case 7: PACKED_K_PASS(3, true); break;
                        case 8: PACKED_K_PASS(4, false); break;
                        default: PACKED_K_PASS(4, true); break;
                        }
#undef PACKED_K_PASS
                }
        }
}

__attribute__((target(DOT_TARGET))) static void packed_q4_K_512(const struct packed_weights *w, uint64_t group_begin,
                                                               uint64_t group_end, const struct block_q8_K *act,
                                                               size_t act_stride, const bool *batched, unsigned n_tokens,
                                                               float *out, size_t out_stride, bool accumulate) {
        packed_k_groups_512(w, group_begin, group_end, act, act_stride, batched, n_tokens, out, out_stride, accumulate,
                            TENSOR_Q4_K, NULL);
}

__attribute__((target(DOT_TARGET))) static void packed_q5_K_512(const struct packed_weights *w, uint64_t group_begin,
                                                               uint64_t group_end, const struct block_q8_K *act,
                                                               size_t act_stride, const bool *batched, unsigned n_tokens,
                                                               float *out, size_t out_stride, bool accumulate) {
        packed_k_groups_512(w, group_begin, group_end, act, act_stride, batched, n_tokens, out, out_stride, accumulate,
                            TENSOR_Q5_K, NULL);
}

__attribute__((target(DOT_TARGET))) static void packed_q6_K_512(const struct packed_weights *w, uint64_t group_begin,
                                                               uint64_t group_end, const struct block_q8_K *act,
                                                               size_t act_stride, const bool *batched, unsigned n_tokens,
                                                               float *out, size_t out_stride, bool accumulate) {
        __m512i group_lanes[64 * PACKED_K16_UNPACK_MAX];
        packed_k_groups_512(w, group_begin, group_end, act, act_stride, batched, n_tokens, out, out_stride, accumulate,
                            TENSOR_Q6_K, group_lanes);
}

__attribute__((target(DOT_TARGET))) static void packed_q2_K_512(const struct packed_weights *w, uint64_t group_begin,
                                                               uint64_t group_end, const struct block_q8_K *act,
                                                               size_t act_stride, const bool *batched, unsigned n_tokens,
                                                               float *out, size_t out_stride, bool accumulate) {
        __m512i group_lanes[64 * PACKED_K16_UNPACK_MAX];
        packed_k_groups_512(w, group_begin, group_end, act, act_stride, batched, n_tokens, out, out_stride, accumulate,
                            TENSOR_Q2_K, group_lanes);
}

__attribute__((target(DOT_TARGET))) static void packed_q3_K_512(const struct packed_weights *w, uint64_t group_begin,
                                                               uint64_t group_end, const struct block_q8_K *act,
                                                               size_t act_stride, const bool *batched, unsigned n_tokens,
                                                               float *out, size_t out_stride, bool accumulate) {
        __m512i group_lanes[64 * PACKED_K16_UNPACK_MAX];
        packed_k_groups_512(w, group_begin, group_end, act, act_stride, batched, n_tokens, out, out_stride, accumulate,
                            TENSOR_Q3_K, group_lanes);
}

#define DOT_PACKED_Q2_K packed_q2_K_512
#define DOT_PACKED_Q3_K packed_q3_K_512
#define DOT_PACKED_Q5_K packed_q5_K_512
#define DOT_PACKED_Q6_K packed_q6_K_512
#define DOT_PACKED_Q4_K packed_q4_K_512

#define PACKED_ENTRY_512(name, kind, unpack_above)                                                                      \
        __attribute__((target(DOT_TARGET))) static void packed_##name##_512(                                            \
                const struct packed_weights *w, uint64_t group_begin, uint64_t group_end,                                \
                const struct packed_activations *a, unsigned n_tokens, float *out, size_t out_stride, bool accumulate) {   \
                packed_groups_512(w, group_begin, group_end, a, n_tokens, out, out_stride, accumulate, kind, unpack_above); \
        }

PACKED_ENTRY_512(q4_0, 0, PACKED_PASS_TOKENS)
PACKED_ENTRY_512(q4_1, 1, PACKED_PASS_TOKENS)
PACKED_ENTRY_512(q8_0, 2, PACKED_PASS_TOKENS)
PACKED_ENTRY_512(q5_0, 3, PACKED_PASS_TOKENS)
PACKED_ENTRY_512(q5_1, 4, PACKED_PASS_TOKENS)
/* The set's variant for AMD cores (dot-select.c) unpacks only for more tokens than a decode
 * batch has. On Zen 4 the nibble masks and shifts run beside the multiplies, which take the
 * two 512-bit pipes, while an unpacked group's ten 512-bit stores per block held up the
 * passes: bench-packed-dot from memory, cycles per 16-row block and token, 4 tokens
 * 29-41 -> 23-26, 8 tokens 23-26 -> 20-21, 16 tokens 21-23 -> 20, 32 the same; bench-batched
 * S_TG B=4 +20%, B=8 +10%, B=16 +2%, B=32 the same (medians of 8-10 interleaved pairs).
 * Prompts (S_PP) still gained a little from the unpacking, as on the Intel machine where it
 * was made (pp512 +15%, B=32 decode +10% there). */
#define PACKED_AMD_UNPACK_ABOVE 32
PACKED_ENTRY_512(q4_0_streamed, 0, PACKED_AMD_UNPACK_ABOVE)
PACKED_ENTRY_512(q4_1_streamed, 1, PACKED_AMD_UNPACK_ABOVE)
PACKED_ENTRY_512(q5_0_streamed, 3, PACKED_AMD_UNPACK_ABOVE)
PACKED_ENTRY_512(q5_1_streamed, 4, PACKED_AMD_UNPACK_ABOVE)

#define DOT_PACKED_FN(name) packed_##name##_512
#define DOT_AMD_PACKED_FN(name) packed_##name##_streamed_512
