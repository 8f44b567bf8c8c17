/* SPDX-License-Identifier: MIT */
/* The packed product on packed weights (dot.h, dot_packed_fn) with 256-bit vectors: a packed
 * group of sixteen rows is two halves of eight lanes, each half done as the 512-bit kernel
 * (packed-dot-avx512.h) does the whole group, one token at a time (two for a prompt, in
 * passes of four lanes): eight accumulators per
 * token fill half of the sixteen registers. dot_u8_s8() gives each lane its four products'
 * sum (vpmaddubsw and vpmaddwd without VNNI: exact here, as pairs of nibble products fit
 * int16); Q8_0's biased bytes go back to signed and take the sign trick instead, since
 * (w + 128) * a pairs would saturate vpmaddubsw. Either way the lane's int32 is the exact
 * sum of its four products, so the bits are those of the single product. Included by
 * dot-x86-template.h for a set without a wider kernel of its own; DOT_TARGET, DOT_FN and
 * dot_u8_s8 come from there. */

#define PACKED_ATTRS_256 __attribute__((target(DOT_TARGET), always_inline)) static inline

PACKED_ATTRS_256 __m256i DOT_FN(packed_broadcast4)(const int8_t *p) {
        int32_t v;
        memcpy(&v, p, sizeof(v));
        return _mm256_set1_epi32(v);
}

/* The kinds of packed weights, a constant in every kernel once inlined: 0 Q4_0, 1 Q4_1,
 * 2 Q8_0, 3 Q5_0, 4 Q5_1. */
PACKED_ATTRS_256 bool DOT_FN(packed_has_m)(const int kind) {
        return kind == 1 || kind == 4;
}

/* Rows 8h..8h+7 of group g in the packed layout (packed-weights.h): the group's stream, the
 * half's quants and scales, and their bytes per block for kind (constants once inlined). */
struct packed_half_layout {
        const uint8_t *group, *quants, *scales;
        size_t quant_bytes, scale_bytes;
};

PACKED_ATTRS_256 struct packed_half_layout DOT_FN(packed_half_layout)(const struct packed_weights *w, uint64_t g, unsigned h,
                                                                     const int kind) {
        struct packed_half_layout lay;
        lay.quant_bytes = kind == 2 ? PACKED_ROWS * QUANT_BLOCK
                        : kind >= 3 ? PACKED_ROWS * (QUANT_BLOCK / 2 + 4)
                                    : PACKED_ROWS * QUANT_BLOCK / 2;
        lay.scale_bytes = DOT_FN(packed_has_m)(kind) ? 64 : 32;
        lay.group = w->data + g * w->group_bytes;
        lay.quants = lay.group + 32 * h;
        lay.scales = lay.group + w->n_blocks * lay.quant_bytes + 16 * h;
        return lay;
}

/* A token's rows 8h..8h+7 of group g from the lanes' sums: lanes_sum8()'s tree, the offset
 * (Q4_1, Q5_1), then into out (one token's row of outputs), the padding rows left out. */
PACKED_ATTRS_256 void DOT_FN(packed_half_store)(const struct packed_weights *w, uint64_t g, unsigned h,
                                                const __m256 acc[PACKED_LANES], __m256 off, float *out, bool accumulate,
                                                const int kind) {
        uint64_t row0 = g * PACKED_ROWS + 8 * h;
        if (row0 >= w->n_rows)
                return;
        unsigned n_valid = w->n_rows - row0 < 8 ? (unsigned) (w->n_rows - row0) : 8;
        __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6])),
                                   _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7])));
        if (DOT_FN(packed_has_m)(kind))
                sum = _mm256_add_ps(sum, off);
        float v[8];
        _mm256_storeu_ps(v, sum);
        float *o = out + row0;
        for (unsigned r = 0; r < n_valid; r++)
                o[r] = accumulate ? o[r] + v[r] : v[r];
}

/* Lane l of a half group's block record: Q8_0's bytes as signed again, or the 4- and 5-bit
 * quants as unsigned bytes (bit l of each byte of the fifth vector brought to 16). */
PACKED_ATTRS_256 __m256i DOT_FN(packed_lane_weights)(const uint8_t *rec, unsigned l, const int kind) {
        if (kind == 2)
                return _mm256_xor_si256(_mm256_load_si256((const __m256i *) (rec + 64 * l)), _mm256_set1_epi8((char) 0x80));
        __m256i v = _mm256_load_si256((const __m256i *) (rec + 64 * (l % 4)));
        __m256i u = _mm256_and_si256(l < 4 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
        if (kind < 3)
                return u;
        __m256i h = _mm256_load_si256((const __m256i *) (rec + 64 * 4));
        h = l < 4 ? _mm256_slli_epi32(h, 4 - l) : l > 4 ? _mm256_srli_epi32(h, l - 4) : h;
        return _mm256_or_si256(u, _mm256_and_si256(h, _mm256_set1_epi8(0x10)));
}

/* A 4- or 5-bit block of a half group as the passes use it: the eight lanes' weight bytes and
 * the rows' d and m as floats. With more tokens than one pass takes, a half group's blocks are
 * unpacked once into these for all the passes, as the 512-bit kernel does
 * (packed-dot-avx512.h): prefill ~7% faster per block on an Intel core. Q8_0's bytes need
 * only an xor, which was not worth the copy. */
struct DOT_FN(packed_unpacked_half) {
        __m256i lanes[PACKED_LANES];
        __m256 d, m;
};

/* Half h of group g into unpacked[0..n_blocks), prefetching the stream ahead (half 0). Any
 * kind but 2. */
PACKED_ATTRS_256 void DOT_FN(packed_unpack_half)(const struct packed_weights *w, uint64_t g, unsigned h,
                                                 struct DOT_FN(packed_unpacked_half) *unpacked, const int kind) {
        const struct packed_half_layout lay = DOT_FN(packed_half_layout)(w, g, h, kind);
        for (uint64_t b = 0; b < w->n_blocks; b++) {
                const uint8_t *rec = lay.quants + b * lay.quant_bytes;
                if (h == 0)
                        packed_prefetch_block(w, lay.group, b, lay.quant_bytes + lay.scale_bytes);
                _Pragma("GCC unroll 8") for (unsigned l = 0; l < PACKED_LANES; l++)
                        _mm256_store_si256(&unpacked[b].lanes[l], DOT_FN(packed_lane_weights)(rec, l, kind));
                unpacked[b].d = _mm256_cvtph_ps(_mm_load_si128((const __m128i *) (lay.scales + b * lay.scale_bytes)));
                if (DOT_FN(packed_has_m)(kind))
                        unpacked[b].m = _mm256_cvtph_ps(_mm_load_si128((const __m128i *) (lay.scales + b * lay.scale_bytes + 32)));
        }
}

/* The eight rows' exact int32 for lane l of activation block ab: Q8_0 by the sign trick,
 * Q4_0 and Q5_0 with the lane's correction for their stored bias. */
PACKED_ATTRS_256 __m256i DOT_FN(packed_lane_isum)(__m256i u, const struct packed_activations *a, size_t ab, unsigned l,
                                                  const int kind) {
        __m256i act = DOT_FN(packed_broadcast4)(a->xq[ab].qs + 4 * l);
        if (kind == 2)
                return dot_u8_s8(_mm256_sign_epi8(u, u), _mm256_sign_epi8(act, u));
        __m256i isum = dot_u8_s8(u, act);
        if (kind == 0 || kind == 3)
                isum = _mm256_add_epi32(isum, _mm256_set1_epi32(a->corrections[ab * PACKED_CORRECTIONS +
                                                                               packed_correction_offset(kind == 3 ? TENSOR_Q5_0 : TENSOR_Q4_0) + l]));
        return isum;
}

/* Rows 8h..8h+7 of group g against token t. */
PACKED_ATTRS_256 void DOT_FN(packed_half)(const struct packed_weights *w, uint64_t g, unsigned h,
                                          const struct packed_activations *a, unsigned t, float *out,
                                          size_t out_stride, bool accumulate, bool prefetch,
                                          const struct DOT_FN(packed_unpacked_half) *unpacked, struct packed_fetch fetch,
                                          const int kind) {
        const struct packed_half_layout lay = DOT_FN(packed_half_layout)(w, g, h, kind);
        const size_t quant_bytes = lay.quant_bytes, scale_bytes = lay.scale_bytes;
        const uint8_t *quants = lay.quants, *scales = lay.scales;
        const uint64_t n_blocks = w->n_blocks;
        __m256 acc[PACKED_LANES], off = _mm256_setzero_ps();

        _Pragma("GCC unroll 8") for (unsigned l = 0; l < PACKED_LANES; l++)
                acc[l] = _mm256_setzero_ps();
        for (uint64_t b = 0; b < n_blocks; b++) {
                const uint8_t *rec = quants + b * quant_bytes;
                if (prefetch)
                        packed_prefetch_block(w, lay.group, b, quant_bytes + scale_bytes);
                packed_fetch_step(&fetch);
                size_t ab = t * a->stride + b;
                __m256 dw = unpacked ? unpacked[b].d : _mm256_cvtph_ps(_mm_load_si128((const __m128i *) (scales + b * scale_bytes)));
                __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(a->ds[2 * ab]));
                if (DOT_FN(packed_has_m)(kind)) {
                        __m256 mw = unpacked ? unpacked[b].m
                                             : _mm256_cvtph_ps(_mm_load_si128((const __m128i *) (scales + b * scale_bytes + 32)));
                        off = _mm256_fmadd_ps(mw, _mm256_set1_ps(a->ds[2 * ab + 1]), off);
                }
                _Pragma("GCC unroll 8") for (unsigned l = 0; l < PACKED_LANES; l++) {
                        __m256i u = unpacked ? _mm256_load_si256(&unpacked[b].lanes[l]) : DOT_FN(packed_lane_weights)(rec, l, kind);
                        __m256i isum = DOT_FN(packed_lane_isum)(u, a, ab, l, kind);
                        acc[l] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc[l]);
                }
        }

        DOT_FN(packed_half_store)(w, g, h, acc, off, out + t * out_stride, accumulate, kind);
}

/* Rows 8h..8h+7 of group g against tokens t and t + 1, for a prompt: two tokens share each
 * unpacked weight vector. Their sixteen accumulators would not fit beside the weights in
 * sixteen registers, so the block's lanes go in two passes (0-3, then 4-7 from L1) and
 * the offset (Q4_1, Q5_1) in a third over the scales; each lane still sums its blocks in
 * order, so the bits are those of packed_half(). */
PACKED_ATTRS_256 void DOT_FN(packed_half_pair)(const struct packed_weights *w, uint64_t g, unsigned h,
                                               const struct packed_activations *a, unsigned t, float *out,
                                               size_t out_stride, bool accumulate, bool prefetch,
                                               const struct DOT_FN(packed_unpacked_half) *unpacked, struct packed_fetch fetch,
                                               const int kind) {
        const struct packed_half_layout lay = DOT_FN(packed_half_layout)(w, g, h, kind);
        const size_t quant_bytes = lay.quant_bytes, scale_bytes = lay.scale_bytes;
        const uint8_t *quants = lay.quants, *scales = lay.scales;
        const uint64_t n_blocks = w->n_blocks;
        __m256 lanes[2][PACKED_LANES], off[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };

        _Pragma("GCC unroll 2") for (unsigned first = 0; first < PACKED_LANES; first += PACKED_LANES / 2) {
                __m256 acc[2][PACKED_LANES / 2];
                _Pragma("GCC unroll 2") for (unsigned k = 0; k < 2; k++)
                        _Pragma("GCC unroll 4") for (unsigned l = 0; l < PACKED_LANES / 2; l++)
                                acc[k][l] = _mm256_setzero_ps();
                for (uint64_t b = 0; b < n_blocks; b++) {
                        const uint8_t *rec = quants + b * quant_bytes;
                        if (prefetch && first == 0)
                                packed_prefetch_block(w, lay.group, b, quant_bytes + scale_bytes);
                        if (first == 0)
                                packed_fetch_step(&fetch);
                        __m256 dw = unpacked ? unpacked[b].d
                                             : _mm256_cvtph_ps(_mm_load_si128((const __m128i *) (scales + b * scale_bytes)));
                        __m256 scale[2];
                        _Pragma("GCC unroll 2") for (unsigned k = 0; k < 2; k++)
                                scale[k] = _mm256_mul_ps(dw, _mm256_set1_ps(a->ds[2 * ((t + k) * a->stride + b)]));
                        _Pragma("GCC unroll 4") for (unsigned l = first; l < first + PACKED_LANES / 2; l++) {
                                __m256i u = unpacked ? _mm256_load_si256(&unpacked[b].lanes[l])
                                                     : DOT_FN(packed_lane_weights)(rec, l, kind);
                                _Pragma("GCC unroll 2") for (unsigned k = 0; k < 2; k++) {
                                        __m256i isum = DOT_FN(packed_lane_isum)(u, a, (t + k) * a->stride + b, l, kind);
                                        acc[k][l - first] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale[k], acc[k][l - first]);
                                }
                        }
                }
                _Pragma("GCC unroll 2") for (unsigned k = 0; k < 2; k++)
                        _Pragma("GCC unroll 4") for (unsigned l = 0; l < PACKED_LANES / 2; l++)
                                lanes[k][first + l] = acc[k][l];
        }
        if (DOT_FN(packed_has_m)(kind))
                for (uint64_t b = 0; b < n_blocks; b++) {
                        __m256 mw = unpacked ? unpacked[b].m
                                             : _mm256_cvtph_ps(_mm_load_si128((const __m128i *) (scales + b * scale_bytes + 32)));
                        _Pragma("GCC unroll 2") for (unsigned k = 0; k < 2; k++)
                                off[k] = _mm256_fmadd_ps(mw, _mm256_set1_ps(a->ds[2 * ((t + k) * a->stride + b) + 1]), off[k]);
                }

        _Pragma("GCC unroll 2") for (unsigned k = 0; k < 2; k++)
                DOT_FN(packed_half_store)(w, g, h, lanes[k], off[k], out + (t + k) * out_stride, accumulate, kind);
}

/* Two tokens at a time over a half group (one for the last of an odd count), its weights
 * staying in L1 after the first pass; a constant unpacked (NULL or not) after inlining. */
PACKED_ATTRS_256 void DOT_FN(packed_half_passes)(const struct packed_weights *w, uint64_t g, unsigned h,
                                                 const struct packed_activations *a, unsigned n_tokens, float *out,
                                                 size_t out_stride, bool accumulate,
                                                 const struct DOT_FN(packed_unpacked_half) *unpacked, const uint8_t *fetch_group,
                                                 const int kind) {
        /* the group after next is fetched over both halves' passes */
        unsigned n_passes = (n_tokens + 1) / 2;
        for (unsigned t = 0, pass = 0; t < n_tokens; t += 2, pass++) {
                bool prefetch = h == 0 && t == 0 && !unpacked;
                struct packed_fetch fetch = packed_fetch_share(fetch_group, w->group_bytes, h * n_passes + pass, 2 * n_passes, w->n_blocks);
                if (n_tokens - t == 1)
                        DOT_FN(packed_half)(w, g, h, a, t, out, out_stride, accumulate, prefetch, unpacked, fetch, kind);
                else
                        DOT_FN(packed_half_pair)(w, g, h, a, t, out, out_stride, accumulate, prefetch, unpacked, fetch, kind);
        }
}

PACKED_ATTRS_256 void DOT_FN(packed_groups)(const struct packed_weights *w, uint64_t group_begin, uint64_t group_end,
                                            const struct packed_activations *a, unsigned n_tokens, float *out,
                                            size_t out_stride, bool accumulate, const int kind) {
        if (kind != 2 && n_tokens > 2 && w->n_blocks <= PACKED_UNPACK_MAX_BLOCKS) {
                struct DOT_FN(packed_unpacked_half) unpacked[PACKED_UNPACK_MAX_BLOCKS];
                for (uint64_t g = group_begin; g < group_end; g++) {
                        /* the caller's next groups usually follow (matmul-shares.h) */
                        const uint8_t *fetch = g + 2 < w->n_groups ? w->data + (g + 2) * w->group_bytes : NULL;
                        for (unsigned h = 0; h < 2; h++) {
                                DOT_FN(packed_unpack_half)(w, g, h, unpacked, kind);
                                DOT_FN(packed_half_passes)(w, g, h, a, n_tokens, out, out_stride, accumulate, unpacked, fetch,
                                                           kind);
                        }
                }
        } else
                for (uint64_t g = group_begin; g < group_end; g++)
                        for (unsigned h = 0; h < 2; h++)
                                DOT_FN(packed_half_passes)(w, g, h, a, n_tokens, out, out_stride, accumulate, NULL, NULL, kind);
}

/* Tokens per pass of the single-accumulator product: the half group's eight lane vectors stay
 * in registers while each token of the pass takes its one accumulator from them. */
#define PACKED_SINGLE_HALF_TOKENS 4

/* The single-accumulator product (dot.h) of rows 8h..8h+7 of group g against tokens
 * t0..t0+T-1, kind 0 (Q4_0) or 2 (Q8_0): per block and token the eight lanes' exact int32
 * added into one (Q4_0's stored bias taken off once, by the block's activation sum), then one
 * conversion and one fma. */
PACKED_ATTRS_256 void DOT_FN(packed_single_half)(const struct packed_weights *w, uint64_t g, unsigned h,
                                                 const struct packed_activations *a, unsigned t0, const unsigned T,
                                                 float *out, size_t out_stride, bool accumulate, bool prefetch,
                                                 const int kind) {
        const struct packed_half_layout lay = DOT_FN(packed_half_layout)(w, g, h, kind);
        __m256 acc[PACKED_SINGLE_HALF_TOKENS];
        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++)
                acc[t] = _mm256_setzero_ps();
        for (uint64_t b = 0; b < w->n_blocks; b++) {
                const uint8_t *rec = lay.quants + b * lay.quant_bytes;
                if (prefetch)
                        packed_prefetch_block(w, lay.group, b, lay.quant_bytes + lay.scale_bytes);
                __m256i u[PACKED_LANES];
                _Pragma("GCC unroll 8") for (unsigned l = 0; l < PACKED_LANES; l++)
                        u[l] = DOT_FN(packed_lane_weights)(rec, l, kind);
                __m256 dw = _mm256_cvtph_ps(_mm_load_si128((const __m128i *) (lay.scales + b * lay.scale_bytes)));
                _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                        size_t ab = (t0 + t) * a->stride + b;
                        __m256i isum = kind == 2 ? _mm256_setzero_si256()
                                                 : _mm256_set1_epi32(-packed_quant_bias(TENSOR_Q4_0) * a->block_sums[ab]);
                        _Pragma("GCC unroll 8") for (unsigned l = 0; l < PACKED_LANES; l++)
                                isum = _mm256_add_epi32(isum, kind == 2 ? DOT_FN(packed_lane_isum)(u[l], a, ab, l, 2)
                                                                        : dot_u8_s8(u[l], DOT_FN(packed_broadcast4)(a->xq[ab].qs + 4 * l)));
                        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(a->ds[2 * ab])), acc[t]);
                }
        }
        uint64_t row0 = g * PACKED_ROWS + 8 * h;
        if (row0 >= w->n_rows)
                return;
        unsigned n_valid = w->n_rows - row0 < 8 ? (unsigned) (w->n_rows - row0) : 8;
        _Pragma("GCC unroll 4") for (unsigned t = 0; t < T; t++) {
                float v[8];
                _mm256_storeu_ps(v, acc[t]);
                float *o = out + (t0 + t) * out_stride + row0;
                for (unsigned r = 0; r < n_valid; r++)
                        o[r] = accumulate ? o[r] + v[r] : v[r];
        }
}

/* Half h of group g for every token, in passes of PACKED_SINGLE_HALF_TOKENS; the first pass of
 * half 0 prefetches the group's stream. */
PACKED_ATTRS_256 void DOT_FN(packed_single_half_passes)(const struct packed_weights *w, uint64_t g, unsigned h,
                                                        const struct packed_activations *a, unsigned n_tokens, float *out,
                                                        size_t out_stride, bool accumulate, const int kind) {
        for (unsigned t0 = 0; t0 < n_tokens; t0 += PACKED_SINGLE_HALF_TOKENS) {
                bool prefetch = h == 0 && t0 == 0;
                switch (n_tokens - t0) {
                case 1: DOT_FN(packed_single_half)(w, g, h, a, t0, 1, out, out_stride, accumulate, prefetch, kind); break;
                case 2: DOT_FN(packed_single_half)(w, g, h, a, t0, 2, out, out_stride, accumulate, prefetch, kind); break;
                case 3: DOT_FN(packed_single_half)(w, g, h, a, t0, 3, out, out_stride, accumulate, prefetch, kind); break;
                default:
                        DOT_FN(packed_single_half)(w, g, h, a, t0, PACKED_SINGLE_HALF_TOKENS, out, out_stride, accumulate,
                                                   prefetch, kind);
                        break;
                }
        }
}

__attribute__((target(DOT_TARGET))) static void DOT_FN(packed_single_accumulator)(const struct packed_weights *w, uint64_t group_begin,
                                                                                 uint64_t group_end, const struct packed_activations *a,
                                                                                 unsigned n_tokens, float *out, size_t out_stride,
                                                                                 bool accumulate) {
        for (uint64_t g = group_begin; g < group_end; g++)
                for (unsigned h = 0; h < 2; h++) {
                        if (w->type == TENSOR_Q4_0)
                                DOT_FN(packed_single_half_passes)(w, g, h, a, n_tokens, out, out_stride, accumulate, 0);
                        else
                                DOT_FN(packed_single_half_passes)(w, g, h, a, n_tokens, out, out_stride, accumulate, 2);
                }
}

#define PACKED_ENTRY_256(name, kind)                                                                                   \
        __attribute__((target(DOT_TARGET))) static void DOT_FN(packed_##name)(                                        \
                const struct packed_weights *w, uint64_t group_begin, uint64_t group_end,                              \
                const struct packed_activations *a, unsigned n_tokens, float *out, size_t out_stride, bool accumulate) { \
                DOT_FN(packed_groups)(w, group_begin, group_end, a, n_tokens, out, out_stride, accumulate, kind);      \
        }

PACKED_ENTRY_256(q4_0, 0)
PACKED_ENTRY_256(q4_1, 1)
PACKED_ENTRY_256(q8_0, 2)
PACKED_ENTRY_256(q5_0, 3)
PACKED_ENTRY_256(q5_1, 4)

#define DOT_PACKED_FN(name) DOT_FN(packed_##name)
