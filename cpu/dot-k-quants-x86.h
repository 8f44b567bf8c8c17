/* SPDX-License-Identifier: MIT */
/* The K-quant products (dot-k-quants.h) and their activations' quantizer for x86, written
 * once and instantiated per instruction set by dot-x86-template.h. A super-block of weights
 * is unpacked once into bytes in element order and 16-bit scales per pair of elements; each
 * token then takes per run of 32 elements one multiply-add of bytes into 16-bit pairs and one
 * of the pairs by their scales, which gives the eight int32 lanes (elements 4l..4l+3 of the
 * run) of the reference's vector product exactly. Every integer sum the orders need is exact
 * whatever the order of its terms, so only the float steps follow the reference, step for
 * step, per token in the order its flag names. No include guard: included once per set. */

#define K_ATTRS __attribute__((target(DOT_TARGET), always_inline)) static inline

/* One super-block of one row, unpacked. */
struct DOT_FN(k_block) {
        __m256i q[8];     /* run r's quants as bytes in element order: unsigned, Q3_K's signed */
        __m256i scale[8]; /* run r's scales, one per pair of elements (16 int16) */
        __m256i sub;      /* the 16 sub-blocks' scales as int16 (Q6_K's bias against bsums) */
        __m256i min;      /* per 16 elements the min that meets their bsums, as int16 */
        float d, dmin;
};

/* Run r's 16 scales by pairs: elements 0..15 take sub-block s0's, 16..31 s1's. */
K_ATTRS __m256i DOT_FN(k_run_scales)(int16_t s0, int16_t s1) {
        return _mm256_setr_m128i(_mm_set1_epi16(s0), _mm_set1_epi16(s1));
}

/* The bytes of v shifted right by n bits, each keeping its low bits under mask. */
K_ATTRS __m256i DOT_FN(k_bits)(__m256i v, int n, char mask) {
        return _mm256_and_si256(_mm256_srli_epi16(v, n), _mm256_set1_epi8(mask));
}

/* Q4_K and Q5_K: eight sub-blocks of 32 (one per run) with 6-bit scales and mins. */
K_ATTRS void DOT_FN(k_scales_mins)(struct DOT_FN(k_block) *k, const uint8_t packed[12]) {
        uint8_t sc[8], m[8];
        _Pragma("GCC unroll 8") for (unsigned sb = 0; sb < 8; sb++) {
                k_quant_scale_min(packed, sb, &sc[sb], &m[sb]);
                k->scale[sb] = _mm256_set1_epi16(sc[sb]);
        }
        k->min = _mm256_setr_epi16(m[0], m[0], m[1], m[1], m[2], m[2], m[3], m[3], m[4], m[4], m[5], m[5], m[6], m[6], m[7], m[7]);
}

K_ATTRS void DOT_FN(k_unpack)(struct DOT_FN(k_block) *k, const void *block, const enum tensor_type type) {
        if (type == TENSOR_Q4_K || type == TENSOR_Q5_K) {
                /* both start with d, dmin and the 12 scale bytes; Q5_K's qh comes before its qs */
                const struct block_q4_K *b4 = block;
                const struct block_q5_K *b5 = block;
                const uint8_t *qs = type == TENSOR_Q4_K ? b4->qs : b5->qs;
                k->d = DOT_FN(half)(b4->d);
                k->dmin = DOT_FN(half)(b4->dmin);
                DOT_FN(k_scales_mins)(k, b4->scales);
                __m256i qh = type == TENSOR_Q5_K ? _mm256_loadu_si256((const __m256i *) b5->qh) : _mm256_setzero_si256();
                _Pragma("GCC unroll 8") for (int c = 0; c < 4; c++) {
                        __m256i v = _mm256_loadu_si256((const __m256i *) (qs + 32 * c));
                        k->q[2 * c] = _mm256_and_si256(v, _mm256_set1_epi8(15));
                        k->q[2 * c + 1] = DOT_FN(k_bits)(v, 4, 15);
                        if (type == TENSOR_Q5_K)
                                _Pragma("GCC unroll 8") for (int h = 0; h < 2; h++)
                                        k->q[2 * c + h] = _mm256_or_si256(
                                                k->q[2 * c + h], _mm256_slli_epi16(DOT_FN(k_bits)(qh, 2 * c + h, 1), 4));
                }
        } else if (type == TENSOR_Q6_K) {
                const struct block_q6_K *b = block;
                k->d = DOT_FN(half)(b->d);
                k->sub = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *) b->scales));
                _Pragma("GCC unroll 8") for (int n = 0; n < 2; n++) {
                        __m256i l0 = _mm256_loadu_si256((const __m256i *) (b->ql + 64 * n));
                        __m256i l1 = _mm256_loadu_si256((const __m256i *) (b->ql + 64 * n + 32));
                        __m256i h = _mm256_loadu_si256((const __m256i *) (b->qh + 32 * n));
                        _Pragma("GCC unroll 8") for (int j = 0; j < 4; j++) {
                                __m256i low = DOT_FN(k_bits)(j & 1 ? l1 : l0, 4 * (j >> 1), 15);
                                k->q[4 * n + j] = _mm256_or_si256(low, _mm256_slli_epi16(DOT_FN(k_bits)(h, 2 * j, 3), 4));
                        }
                }
                _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++)
                        k->scale[r] = DOT_FN(k_run_scales)(b->scales[2 * r], b->scales[2 * r + 1]);
        } else if (type == TENSOR_Q3_K) {
                const struct block_q3_K *b = block;
                k->d = DOT_FN(half)(b->d);
                __m256i hmask = _mm256_loadu_si256((const __m256i *) b->hmask);
                _Pragma("GCC unroll 8") for (int n = 0; n < 2; n++) {
                        __m256i v = _mm256_loadu_si256((const __m256i *) (b->qs + 32 * n));
                        _Pragma("GCC unroll 8") for (int j = 0; j < 4; j++) {
                                /* a clear high bit means -4 */
                                __m256i clear = _mm256_xor_si256(DOT_FN(k_bits)(hmask, 4 * n + j, 1), _mm256_set1_epi8(1));
                                k->q[4 * n + j] = _mm256_sub_epi8(DOT_FN(k_bits)(v, 2 * j, 3), _mm256_slli_epi16(clear, 2));
                        }
                }
                _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++)
                        k->scale[r] = DOT_FN(k_run_scales)((int16_t) (k_quant_q3_scale(b->scales, 2 * r) - 32),
                                                           (int16_t) (k_quant_q3_scale(b->scales, 2 * r + 1) - 32));
        } else { /* Q2_K */
                const struct block_q2_K *b = block;
                k->d = DOT_FN(half)(b->d);
                k->dmin = DOT_FN(half)(b->dmin);
                __m128i scales = _mm_loadu_si128((const __m128i *) b->scales);
                k->min = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(scales, 4), _mm_set1_epi8(15)));
                _Pragma("GCC unroll 8") for (int n = 0; n < 2; n++) {
                        __m256i v = _mm256_loadu_si256((const __m256i *) (b->qs + 32 * n));
                        _Pragma("GCC unroll 8") for (int j = 0; j < 4; j++)
                                k->q[4 * n + j] = DOT_FN(k_bits)(v, 2 * j, 3);
                }
                _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++)
                        k->scale[r] = DOT_FN(k_run_scales)(b->scales[2 * r] & 15, b->scales[2 * r + 1] & 15);
        }
}

K_ATTRS int32_t DOT_FN(k_hsum_epi32)(__m256i v) {
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
        s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
        return _mm_cvtsi128_si32(s);
}

/* The sums of the four vectors' lanes, in that order. */
K_ATTRS __m128i DOT_FN(k_hsum4_epi32)(__m256i a, __m256i b, __m256i c, __m256i d) {
        __m256i s = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
        return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}

/* A product's float accumulators (dot-k-quants.c's k_accumulators). */
struct DOT_FN(k_acc) {
        __m256 lanes;
        float acc, accm;
};

/* One token's super-block against one row's: the exact integers, then the reference's float
 * steps for the type in the token's order. */
K_ATTRS void DOT_FN(k_step)(struct DOT_FN(k_acc) *acc, const struct DOT_FN(k_block) *k, const struct block_q8_K *a,
                            bool batched, const enum tensor_type type) {
        __m256i run[8];
        _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) {
                __m256i aq = _mm256_loadu_si256((const __m256i *) (a->qs + 32 * r));
                __m256i pairs = type == TENSOR_Q3_K
                                        ? _mm256_maddubs_epi16(_mm256_sign_epi8(k->q[r], k->q[r]), _mm256_sign_epi8(aq, k->q[r]))
                                        : _mm256_maddubs_epi16(k->q[r], aq);
                run[r] = _mm256_madd_epi16(pairs, k->scale[r]);
        }
        __m256i bsums = _mm256_loadu_si256((const __m256i *) a->bsums);
        float d_a = a->d;
        if (type == TENSOR_Q4_K || type == TENSOR_Q2_K) {
                /* min x bsums per run of 32 (lane r) */
                __m256i mins = _mm256_madd_epi16(bsums, k->min);
                float dd = k->d * d_a, dm = k->dmin * d_a;
                __m256i r01 = _mm256_add_epi32(run[0], run[1]), r23 = _mm256_add_epi32(run[2], run[3]);
                __m256i r45 = _mm256_add_epi32(run[4], run[5]), r67 = _mm256_add_epi32(run[6], run[7]);
                if (!batched) {
                        __m256i all = _mm256_add_epi32(_mm256_add_epi32(r01, r23), _mm256_add_epi32(r45, r67));
                        acc->acc = fmaf((float) DOT_FN(k_hsum_epi32)(all), dd, acc->acc);
                        acc->accm = fmaf((float) DOT_FN(k_hsum_epi32)(mins), dm, acc->accm);
                        return;
                }
                /* per 64 elements (Q4_K: runs 2s and 2s + 1) or 128 (Q2_K: runs 4s..4s + 3), as
                 * floats in lane s */
                __m128 isum, imin;
                __m256i pairs = _mm256_hadd_epi32(mins, _mm256_setzero_si256()); /* m01 m23 0 0 | m45 m67 0 0 */
                __m128i min4 = _mm_unpacklo_epi64(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
                if (type == TENSOR_Q4_K) {
                        isum = _mm_cvtepi32_ps(DOT_FN(k_hsum4_epi32)(r01, r23, r45, r67));
                        imin = _mm_cvtepi32_ps(min4);
                } else {
                        __m128i sums = DOT_FN(k_hsum4_epi32)(_mm256_add_epi32(r01, r23), _mm256_add_epi32(r45, r67),
                                                             _mm256_setzero_si256(), _mm256_setzero_si256());
                        isum = _mm_cvtepi32_ps(sums);
                        imin = _mm_cvtepi32_ps(_mm_hadd_epi32(min4, _mm_setzero_si128()));
                }
                const int n_runs = type == TENSOR_Q4_K ? 4 : 2;
                _Pragma("GCC unroll 4") for (int s = 0; s < n_runs; s++) {
                        acc->acc = fmaf(_mm_cvtss_f32(isum), dd, acc->acc);
                        acc->accm = fmaf(_mm_cvtss_f32(imin), dm, acc->accm);
                        isum = _mm_permute_ps(isum, _MM_SHUFFLE(0, 3, 2, 1));
                        imin = _mm_permute_ps(imin, _MM_SHUFFLE(0, 3, 2, 1));
                }
                return;
        }
        __m256i lanes = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(run[0], run[1]), _mm256_add_epi32(run[2], run[3])),
                                         _mm256_add_epi32(_mm256_add_epi32(run[4], run[5]), _mm256_add_epi32(run[6], run[7])));
        if (type == TENSOR_Q6_K) /* lane l less 32 x the scaled bsums of sub-blocks 2l and 2l + 1 */
                lanes = _mm256_sub_epi32(lanes, _mm256_slli_epi32(_mm256_madd_epi16(bsums, k->sub), 5));
        int32_t imin = type == TENSOR_Q5_K ? DOT_FN(k_hsum_epi32)(_mm256_madd_epi16(bsums, k->min)) : 0;
        if (batched) {
                float r = (float) DOT_FN(k_hsum_epi32)(lanes) * k->d;
                if (type == TENSOR_Q5_K)
                        r = fmaf(-k->dmin, (float) imin, r);
                acc->acc = fmaf(r, d_a, acc->acc);
                return;
        }
        acc->lanes = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_set1_ps(d_a * k->d), acc->lanes);
        if (type == TENSOR_Q5_K)
                acc->accm = fmaf(-d_a * k->dmin, (float) imin, acc->accm);
}

K_ATTRS float DOT_FN(k_result)(const struct DOT_FN(k_acc) *acc, bool batched, const enum tensor_type type) {
        if (type == TENSOR_Q4_K || type == TENSOR_Q2_K)
                return acc->acc - acc->accm;
        if (batched)
                return acc->acc;
        float sum = DOT_FN(hsum)(acc->lanes);
        return type == TENSOR_Q5_K ? sum + acc->accm : sum;
}

/* The tile (dot_k_tile_fn): each super-block of a row unpacked once for all the tokens. */
K_ATTRS void DOT_FN(k_tile)(const uint8_t *rows, size_t row_bytes, unsigned n_rows, const struct block_q8_K *act,
                            size_t act_stride, const bool *batched, unsigned n_tokens, size_t n_super, float *out,
                            size_t out_stride, bool accumulate, const enum tensor_type type, const size_t block_bytes) {
        for (unsigned row = 0; row < n_rows; row++) {
                struct DOT_FN(k_acc) acc[DOT_K_TILE_TOKENS];
                for (unsigned t = 0; t < n_tokens; t++)
                        acc[t] = (struct DOT_FN(k_acc)) { _mm256_setzero_ps(), 0.0f, 0.0f };
                for (size_t b = 0; b < n_super; b++) {
                        struct DOT_FN(k_block) k;
                        DOT_FN(k_unpack)(&k, rows + row * row_bytes + b * block_bytes, type);
                        for (unsigned t = 0; t < n_tokens; t++)
                                DOT_FN(k_step)(&acc[t], &k, &act[t * act_stride + b], batched[t], type);
                }
                for (unsigned t = 0; t < n_tokens; t++) {
                        float v = DOT_FN(k_result)(&acc[t], batched[t], type), *o = &out[t * out_stride + row];
                        *o = accumulate ? *o + v : v;
                }
        }
}

#define DOT_K_ENTRIES(name, type, block)                                                                               \
        __attribute__((target(DOT_TARGET))) static void DOT_FN(tile_##name)(                                          \
                const void *weight_rows, size_t row_bytes, unsigned n_rows, const struct block_q8_K *act,              \
                size_t act_stride, const bool *batched, unsigned n_tokens, size_t n_super, float *out,                 \
                size_t out_stride, bool accumulate) {                                                                  \
                DOT_FN(k_tile)(weight_rows, row_bytes, n_rows, act, act_stride, batched, n_tokens, n_super, out,      \
                               out_stride, accumulate, type, sizeof(block));                                           \
        }                                                                                                              \
        __attribute__((target(DOT_TARGET))) static float DOT_FN(dot_##name)(                                          \
                const void *weight_row, const struct block_q8_K *act, size_t n_super, bool batched) {                  \
                float v;                                                                                               \
                DOT_FN(k_tile)(weight_row, 0, 1, act, 0, &batched, 1, n_super, &v, 0, false, type, sizeof(block));    \
                return v;                                                                                              \
        }

DOT_K_ENTRIES(q2_K, TENSOR_Q2_K, struct block_q2_K)
DOT_K_ENTRIES(q3_K, TENSOR_Q3_K, struct block_q3_K)
DOT_K_ENTRIES(q4_K, TENSOR_Q4_K, struct block_q4_K)
DOT_K_ENTRIES(q5_K, TENSOR_Q5_K, struct block_q5_K)
DOT_K_ENTRIES(q6_K, TENSOR_Q6_K, struct block_q6_K)

/* quantize_row_q8_K() eight lanes at a time: the largest magnitude is exact in any order and
 * its first element is found by comparing; the scale comes from the same scalar operations;
 * the product is rounded to float, then to the nearest integer, half to even, as
 * nearbyintf() does in the default mode; the sums are of integers. The same bits. */
__attribute__((target(DOT_TARGET))) static void DOT_FN(quantize_q8_K)(const float *x, struct block_q8_K *out, size_t n) {
        const __m256 sign = _mm256_set1_ps(-0.0f);
        for (size_t b = 0; b < n / QK_K; b++, x += QK_K) {
                __m256 m = _mm256_setzero_ps();
                for (int i = 0; i < QK_K; i += 8) /* a NaN is passed over, as by the reference's comparison */
                        m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), m);
                __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
                h = _mm_max_ps(h, _mm_movehl_ps(h, h));
                h = _mm_max_ss(h, _mm_movehdup_ps(h));
                float amax = _mm_cvtss_f32(h);
                memset(&out[b], 0, sizeof(out[b]));
                if (amax == 0.0f)
                        continue;
                const __m256 amax8 = _mm256_set1_ps(amax);
                int first = 0;
                for (int i = 0; i < QK_K; i += 8) {
                        int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), amax8, _CMP_EQ_OQ));
                        if (hit) {
                                first = i + __builtin_ctz((unsigned) hit);
                                break;
                        }
                }
                float iscale = -127.0f / x[first];
                const __m256 iscale8 = _mm256_set1_ps(iscale);
                const __m256i max_q = _mm256_set1_epi32(127);
                for (int i = 0; i < QK_K; i += 32) {
                        __m256i q[4];
                        for (int j = 0; j < 4; j++)
                                q[j] = _mm256_min_epi32(
                                        _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(iscale8, _mm256_loadu_ps(x + i + 8 * j)),
                                                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
                                        max_q);
                        /* int32 to int8 in element order: the packs interleave 128-bit lanes, the permute undoes it */
                        __m256i q16a = _mm256_packs_epi32(q[0], q[1]), q16b = _mm256_packs_epi32(q[2], q[3]);
                        __m256i q8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16a, q16b),
                                                                 _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
                        _mm256_storeu_si256((__m256i *) (out[b].qs + i), q8);
                        /* the two runs of 16: sums of four, then of the lanes of each half */
                        int32_t fours[8];
                        _mm256_storeu_si256((__m256i *) fours,
                                            _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q8), _mm256_set1_epi16(1)));
                        out[b].bsums[i / 16] = (int16_t) (fours[0] + fours[1] + fours[2] + fours[3]);
                        out[b].bsums[i / 16 + 1] = (int16_t) (fours[4] + fours[5] + fours[6] + fours[7]);
                }
                out[b].d = 1.0f / iscale;
        }
}
