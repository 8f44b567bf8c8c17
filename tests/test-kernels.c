/* SPDX-License-Identifier: MIT */
/* Every SIMD kernel against the scalar reference, and the scalar reference against plain
 * float arithmetic on the dequantized values. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-features.h"
#include "dot.h"
#include "exp-poly.h"
#include "float16.h"
#include "quantize.h"
#include "tensor-types.h"
#include "thread-pool.h"
#include "test-random.h"

#define N_BLOCKS 48
#define N (N_BLOCKS * QUANT_BLOCK)


static void random_weights(enum tensor_type type, void *out) {
        uint8_t *p = out;
        size_t n_bytes = tensor_row_bytes(type, N);
        for (size_t i = 0; i < n_bytes; i++)
                p[i] = (uint8_t) next_u32();
        /* keep the scales finite and moderate: overwrite each block's f16 fields */
        size_t block_bytes = tensor_type_info(type)->block_bytes;
        for (size_t b = 0; b < N_BLOCKS; b++) {
                f16_bits d = f32_to_f16(next_float(0.05f)), m = f32_to_f16(next_float(0.1f));
                memcpy(p + b * block_bytes, &d, 2);
                if (type == TENSOR_Q4_1 || type == TENSOR_Q5_1)
                        memcpy(p + b * block_bytes + 2, &m, 2);
        }
}

START_TEST(test_f16_round_trip) {
        for (uint32_t h = 0; h < 65536; h++) {
                float f = f16_to_f32((uint16_t) h);
                if (isnan(f)) {
                        ck_assert(isnan(f16_to_f32(f32_to_f16(f))));
                        continue;
                }
                ck_assert_msg(f32_to_f16(f) == h, "f16 %#x -> %g -> %#x", h, f, f32_to_f16(f));
        }
}
END_TEST

#if HAVE_X86_64_KERNELS
#include <immintrin.h>
__attribute__((target("f16c"))) static uint16_t hardware_f32_to_f16(float f) {
        return (uint16_t) _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
#endif

START_TEST(test_f16_rounding_matches_hardware) {
#if HAVE_X86_64_KERNELS
        if (!cpu_features_get()->avx2) {
                fprintf(stderr, "SKIP part: no F16C on this CPU, hardware comparison not run\n");
                return;
        }
        for (int i = 0; i < 2000000; i++) {
                uint32_t bits = next_u32() ^ (next_u32() << 16);
                float f = f32_from_bits(bits);
                if (isnan(f))
                        continue;
                uint16_t hw = hardware_f32_to_f16(f);
                ck_assert_msg(f32_to_f16(f) == hw, "%a: ours %#x, hardware %#x", f, f32_to_f16(f), hw);
        }
#endif
}
END_TEST

START_TEST(test_quantize_q8_1) {
        float x[N], back[N];
        struct block_q8_1 q[N_BLOCKS];
        for (int i = 0; i < N; i++)
                x[i] = next_float(i < QUANT_BLOCK ? 0.0f : 3.0f); /* first block all zero */
        quantize_row_q8_1(x, q, N);
        tensor_row_to_float(TENSOR_Q8_1, q, back, N);
        for (int b = 0; b < N_BLOCKS; b++) {
                float d = f16_to_f32(q[b].d);
                int sum = 0;
                for (int j = 0; j < QUANT_BLOCK; j++) {
                        ck_assert_int_le(abs(q[b].qs[j]), 127);
                        sum += q[b].qs[j];
                        ck_assert_msg(fabsf(back[b * QUANT_BLOCK + j] - x[b * QUANT_BLOCK + j]) <= d * (0.5f + 127.0f / 2048.0f) + 1e-6f, /* d itself is rounded to f16 */
                                      "block %d element %d", b, j);
                }
                /* s is d * sum(q) with the unrounded d, then rounded to f16 */
                float s_expect = (float) sum * f16_to_f32(q[b].d);
                ck_assert(fabsf(f16_to_f32(q[b].s) - s_expect) <= fabsf(s_expect) * 2e-3f + 1e-6f);
        }
        ck_assert_uint_eq(q[0].d, 0);
}
END_TEST

/* The scalar kernel equals float arithmetic on the decoded values, up to float rounding. */
START_TEST(test_scalar_matches_float) {
        static const enum tensor_type types[] = { TENSOR_Q4_0, TENSOR_Q4_1, TENSOR_Q5_0, TENSOR_Q5_1, TENSOR_Q8_0 };
        uint8_t w[N * 2];
        float wf[N], x[N], xf[N];
        struct block_q8_1 xq[N_BLOCKS];
        for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++)
                for (int rep = 0; rep < 50; rep++) {
                        random_weights(types[ti], w);
                        for (int i = 0; i < N; i++)
                                x[i] = next_float(2.0f);
                        quantize_row_q8_1(x, xq, N);
                        tensor_row_to_float(types[ti], w, wf, N);
                        tensor_row_to_float(TENSOR_Q8_1, xq, xf, N);
                        double expect = 0.0, magnitude = 0.0;
                        for (int i = 0; i < N; i++) {
                                expect += (double) wf[i] * xf[i];
                                magnitude += fabs((double) wf[i] * xf[i]);
                        }
                        float got = dot_kernel_for(&dot_kernels_scalar, types[ti])(w, xq, N_BLOCKS);
                        /* the offset types use s = d * sum(q) rounded to f16: allow its rounding */
                        bool offset = types[ti] == TENSOR_Q4_1 || types[ti] == TENSOR_Q5_1;
                        double tol = 1e-5 * magnitude + (offset ? 2e-3 * magnitude : 0.0) + 1e-6;
                        ck_assert_msg(fabs(got - expect) <= tol, "%s: %g vs %g", tensor_type_info(types[ti])->name,
                                      got, expect);
                }
}
END_TEST

/* The single products against the scalar set's: the 5-bit types' scalar products are in the
 * x86 sets' order, so theirs must have the same bits; the older types' scalar products sum
 * in another order, hence a tolerance. */
static void compare_sets(const struct dot_kernels *k) {
        static const enum tensor_type types[] = { TENSOR_Q4_0, TENSOR_Q4_1, TENSOR_Q5_0, TENSOR_Q5_1, TENSOR_Q8_0 };
        uint8_t w[N * 2];
        float x[N];
        struct block_q8_1 xq[N_BLOCKS];
        for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++)
                for (int rep = 0; rep < 200; rep++) {
                        size_t n_blocks = 1 + (size_t) rep % N_BLOCKS;
                        random_weights(types[ti], w);
                        for (int i = 0; i < N; i++)
                                x[i] = next_float(4.0f);
                        quantize_row_q8_1(x, xq, N);
                        float ref = dot_kernel_for(&dot_kernels_scalar, types[ti])(w, xq, n_blocks);
                        float got = dot_kernel_for(k, types[ti])(w, xq, n_blocks);
                        if (types[ti] == TENSOR_Q5_0 || types[ti] == TENSOR_Q5_1)
                                ck_assert_msg(memcmp(&got, &ref, sizeof(got)) == 0, "%s %s n_blocks %zu: %a vs %a", k->name,
                                              tensor_type_info(types[ti])->name, n_blocks, got, ref);
                        ck_assert_msg(fabsf(got - ref) <= 1e-4f * (1.0f + fabsf(ref)), "%s %s n_blocks %zu: %g vs %g",
                                      k->name, tensor_type_info(types[ti])->name, n_blocks, got, ref);
                }
}

/* Attention over a paged cache (blocks in a shuffled order, odd block sizes, head sizes that
 * do and do not fit the wide vectors, partial runs of sixteen positions): scores and value
 * lanes with the reference's bits, for every query of the group, and nothing written past the
 * rows the definition names (for values: past the last query's 64 rows, the rest scratch). */
static void compare_attention(const struct dot_kernels *k) {
        /* rows: the blocks that hold MAX_POS positions at the largest block size */
        enum { MAX_POS = 200, MAX_DIM = 130, MAX_Q = DOT_GROUP_MAX, MAX_ROWS = MAX_POS + 32, MAX_STRIDE = MAX_DIM + 3 };
        static const size_t dims[] = { 64, 128, 1, 17, 63, 96, 130 };
        static const uint32_t block_sizes[] = { 16, 5, 32, 1 };
        static f16_bits cache_k[MAX_ROWS * MAX_STRIDE + 2], cache_v[MAX_ROWS * MAX_STRIDE + 2];
        static float q[MAX_Q * MAX_DIM], w[MAX_Q * (MAX_POS + 16)];
        static float want[MAX_Q * 64 * MAX_DIM + 1], got[MAX_Q * 64 * MAX_DIM + 1], other[MAX_Q * 64 * MAX_DIM + 1];
        int32_t table[MAX_POS];
        for (size_t i = 0; i < sizeof(cache_k) / sizeof(cache_k[0]); i++) {
                cache_k[i] = f32_to_f16(next_float(3.0f));
                cache_v[i] = f32_to_f16(next_float(3.0f));
        }
        for (int rep = 0; rep < 120; rep++) {
                size_t n = dims[rep % 7];
                uint32_t bs = block_sizes[rep / 7 % 4];
                unsigned n_pos = 1 + (unsigned) (next_u32() % MAX_POS), n_q = 1 + (unsigned) rep % MAX_Q;
                unsigned n_lanes = rep % 2 ? 64 : 16, n_blocks = (MAX_POS + bs - 1) / bs;
                bool wide = rep % 3 == 0;
                for (unsigned b = 0; b < n_blocks; b++) /* a permutation: every block once */
                        table[b] = (int32_t) ((b * 7 + 3) % n_blocks);
                if (n_blocks % 7 == 0)
                        for (unsigned b = 0; b < n_blocks; b++)
                                table[b] = (int32_t) (n_blocks - 1 - b);
                size_t head = (size_t) rep % 3;
                size_t row_stride = MAX_DIM + 1 + (size_t) rep % 3;
                /* the scores fetch the values beside the keys every other repetition */
                struct f16_rows keys = { cache_k + head, table, bs, row_stride, bs * row_stride, rep % 2 ? cache_v + head : NULL };
                struct f16_rows values = { cache_v + head, table, bs, row_stride, bs * row_stride, NULL };
                for (size_t i = 0; i < n_q * n; i++)
                        q[i] = f16_to_f32(f32_to_f16(next_float(2.0f)));
                for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++)
                        w[i] = next_float(1.0f);
                float scale = 1.0f / sqrtf((float) n);

                size_t scores_stride = MAX_POS + 16;
                memset(want, 0x5a, sizeof(want));
                memset(got, 0x5a, sizeof(got));
                dot_kernels_scalar.attn_scores(&keys, n_pos, q, n, n_q, n, wide, scale, want, scores_stride);
                k->attn_scores(&keys, n_pos, q, n, n_q, n, wide, scale, got, scores_stride);
                ck_assert_msg(memcmp(want, got, sizeof(want)) == 0, "%s attn_scores n %zu, %u positions, %u queries, %s",
                              k->name, n, n_pos, n_q, wide ? "wide" : "16 lanes");

                size_t lanes_stride = 64 * n;
                memset(want, 0x5a, sizeof(want));
                memset(got, 0x5a, sizeof(got));
                dot_kernels_scalar.attn_values(&values, n_pos, w, MAX_POS + 16, n_q, n, n_lanes, 0, 16, want, lanes_stride);
                k->attn_values(&values, n_pos, w, MAX_POS + 16, n_q, n, n_lanes, 0, 16, got, lanes_stride);
                /* the 16 rows per query that the definition names; the rest is scratch */
                for (unsigned g = 0; g < n_q; g++)
                        ck_assert_msg(memcmp(want + g * lanes_stride, got + g * lanes_stride,
                                             (n_pos < 16 ? n_pos : 16) * n * sizeof(float)) == 0,
                                      "%s attn_values n %zu, %u positions, %u queries, %u lanes: query %u", k->name, n, n_pos,
                                      n_q, n_lanes, g);
                static float untouched;
                memset(&untouched, 0x5a, sizeof(untouched));
                for (size_t i = n_q * lanes_stride; i < sizeof(got) / sizeof(got[0]); i++)
                        ck_assert_msg(memcmp(&got[i], &untouched, sizeof(float)) == 0,
                                      "%s attn_values wrote past query %u's rows (element %zu)", k->name, n_q - 1, i);

                /* The rows made in two parts, as two threads make them: each part leaves the
                 * other's rows and their scratch lanes alone, and together they are the rows
                 * made at once. */
                unsigned split = 1 + (n_pos + n_q) % 15;
                const unsigned parts[2][2] = { { 0, split }, { split, 16 - split } };
                memset(got, 0x5a, sizeof(got));
                for (int part = 0; part < 2; part++) {
                        memset(other, 0x5a, sizeof(other));
                        unsigned first = parts[part][0], count = parts[part][1];
                        k->attn_values(&values, n_pos, w, MAX_POS + 16, n_q, n, n_lanes, first, count, other, lanes_stride);
                        for (unsigned g = 0; g < n_q; g++)
                                for (unsigned row = 0; row < 64; row++) {
                                        float *o = other + g * lanes_stride + row * n;
                                        if (row % 16 >= first && row % 16 < first + count) {
                                                memcpy(got + g * lanes_stride + row * n, o, n * sizeof(float));
                                                continue;
                                        }
                                        for (size_t i = 0; i < n; i++)
                                                ck_assert_msg(memcmp(&o[i], &untouched, sizeof(float)) == 0,
                                                              "%s attn_values rows %u..%u wrote row %u of query %u",
                                                              k->name, first, first + count - 1, row, g);
                                }
                }
                for (unsigned g = 0; g < n_q; g++)
                        ck_assert_msg(memcmp(want + g * lanes_stride, got + g * lanes_stride,
                                             (n_pos < 16 ? n_pos : 16) * n * sizeof(float)) == 0,
                                      "%s attn_values in two parts (rows from %u) n %zu, %u positions, %u queries, %u "
                                      "lanes: query %u", k->name, split, n, n_pos, n_q, n_lanes, g);
        }
}

/* The scalar reference's scores are the plain dot product, and its value lanes add up to the
 * plain weighted sum, up to float rounding. */
START_TEST(test_attention_reference_matches_float) {
        enum { POS = 70, DIM = 64 };
        static f16_bits cache_k[POS * DIM], cache_v[POS * DIM];
        static float q[DIM], w[POS], scores[POS + 16], lanes[64 * DIM], out[DIM];
        int32_t table[POS];
        for (unsigned j = 0; j < POS; j++)
                table[j] = (int32_t) j;
        for (size_t i = 0; i < POS * DIM; i++) {
                cache_k[i] = f32_to_f16(next_float(2.0f));
                cache_v[i] = f32_to_f16(next_float(2.0f));
        }
        for (size_t i = 0; i < DIM; i++)
                q[i] = next_float(2.0f);
        for (unsigned j = 0; j < POS; j++)
                w[j] = next_float(1.0f);
        struct f16_rows keys = { cache_k, table, 1, DIM, DIM, NULL }, values = { cache_v, table, 1, DIM, DIM, NULL };
        for (int wide = 0; wide < 2; wide++) {
                dot_kernels_scalar.attn_scores(&keys, POS, q, DIM, 1, DIM, wide, 0.5f, scores, POS + 16);
                for (unsigned j = 0; j < POS; j++) {
                        double expect = 0.0, magnitude = 0.0;
                        for (size_t i = 0; i < DIM; i++) {
                                expect += 0.5 * f16_to_f32(cache_k[j * DIM + i]) * q[i];
                                magnitude += fabs(0.5 * f16_to_f32(cache_k[j * DIM + i]) * q[i]);
                        }
                        ck_assert_msg(fabs(scores[j] - expect) <= 1e-5 * magnitude + 1e-7, "score %u: %g vs %g", j,
                                      scores[j], expect);
                }
        }
        for (unsigned n_lanes = 16; n_lanes <= 64; n_lanes *= 4) {
                dot_kernels_scalar.attn_values(&values, POS, w, POS, 1, DIM, n_lanes, 0, 16, lanes, DIM * 64);
                dot_kernels_scalar.sum_lanes(lanes, DIM, 16, DIM, out);
                for (size_t i = 0; i < DIM; i++) {
                        double expect = 0.0, magnitude = 0.0;
                        for (unsigned j = 0; j < POS; j++) {
                                expect += (double) f16_to_f32(cache_v[j * DIM + i]) * w[j];
                                magnitude += fabs((double) f16_to_f32(cache_v[j * DIM + i]) * w[j]);
                        }
                        ck_assert_msg(fabs(out[i] - expect) <= 1e-5 * magnitude + 1e-7, "value %zu (%u lanes): %g vs %g", i,
                                      n_lanes, out[i], expect);
                }
        }
}
END_TEST

static void compare_quantize(const struct dot_kernels *k) {
        float x[N];
        struct block_q8_1 want[N_BLOCKS], got[N_BLOCKS];
        for (int rep = 0; rep < 300; rep++) {
                for (int i = 0; i < N; i++)
                        x[i] = next_float(rep % 3 == 0 ? 100.0f : 2.0f);
                for (int i = 0; i < QUANT_BLOCK; i++)
                        x[i] = 0.0f;
                /* amax 127: x * 127 / amax = x, so these sit exactly on rounding boundaries */
                x[QUANT_BLOCK] = 127.0f;
                for (int i = 1; i < QUANT_BLOCK; i++)
                        x[QUANT_BLOCK + i] = (float) (i % 7) - 3.5f;
                /* whole rows, and rows whose last blocks do not make a set's group of blocks */
                static const int lengths[] = { N_BLOCKS, 1, 6, 7, 18, N_BLOCKS - 1 };
                int n_blocks = lengths[rep % (sizeof(lengths) / sizeof(lengths[0]))];
                static float ds[N_BLOCKS * 2];
                memset(got, 0, sizeof(got));
                quantize_row_q8_1(x, want, (size_t) n_blocks * QUANT_BLOCK);
                k->quantize_q8_1(x, got, ds, (size_t) n_blocks * QUANT_BLOCK);
                ck_assert_msg(memcmp(want, got, sizeof(want[0]) * (size_t) n_blocks) == 0,
                              "%s quantize_q8_1 of %d blocks differs from the reference (rep %d)", k->name, n_blocks, rep);
                for (int b = 0; b < n_blocks; b++)
                        ck_assert(ds[2 * b] == f16_to_f32(want[b].d) && ds[2 * b + 1] == f16_to_f32(want[b].s));
        }
}

/* RoPE of random rows by random angles, adjacent pairs and halves, every set against the
 * scalar one bit for bit. */
static void compare_rope(const struct dot_kernels *k) {
        enum { HEADS = 3, HEAD_DIM = 64, HALF = 32 };
        float want[HEADS * HEAD_DIM], got[HEADS * HEAD_DIM], c[HALF], s[HALF];
        for (int rep = 0; rep < 100; rep++) {
                for (int i = 0; i < HEADS * HEAD_DIM; i++)
                        want[i] = got[i] = next_float(rep % 2 ? 50.0f : 1.0f);
                for (int i = 0; i < HALF; i++) {
                        float angle = next_float(1000.0f);
                        c[i] = cosf(angle);
                        s[i] = sinf(angle);
                }
                dot_kernels_scalar.rope(want, HEADS, HEAD_DIM, HALF, rep % 4 >= 2, c, s);
                k->rope(got, HEADS, HEAD_DIM, HALF, rep % 4 >= 2, c, s);
                ck_assert_msg(memcmp(want, got, sizeof(want)) == 0, "%s rope differs from the scalar set (rep %d)",
                              k->name, rep);
        }
}

/* The lanes' corrections of random blocks, the extreme quants -128 and 127 included. */
static void compare_activation_corrections(const struct dot_kernels *k) {
        struct block_q8_1 xq[N_BLOCKS];
        int32_t want[N_BLOCKS * PACKED_CORRECTIONS], got[N_BLOCKS * PACKED_CORRECTIONS];
        for (int rep = 0; rep < 100; rep++) {
                for (int b = 0; b < N_BLOCKS; b++)
                        for (int i = 0; i < QUANT_BLOCK; i++)
                                xq[b].qs[i] = rep == 0 ? -128 : rep == 1 ? 127 : (int8_t) (uint8_t) (rand() >> 7);
                packed_activation_corrections(xq, N_BLOCKS, want);
                memset(got, 0x55, sizeof(got));
                k->activation_corrections(xq, N_BLOCKS, got);
                ck_assert_msg(memcmp(want, got, sizeof(want)) == 0,
                              "%s activation_corrections differs from the reference (rep %d)", k->name, rep);
        }
}

/* f16 rounding and the lane trees give the reference's bits, zero rows included. */
static void compare_attention_helpers(const struct dot_kernels *k) {
        static float lanes[64 * 70], want[70], got[70], x[300], y[300];
        for (int rep = 0; rep < 100; rep++) {
                size_t n = 1 + (size_t) rep % 70;
                unsigned n_valid = 1 + (unsigned) rep % 16;
                for (size_t i = 0; i < 64 * 70; i++)
                        lanes[i] = next_float(rep % 3 ? 2.0f : 1e-6f);
                dot_kernels_scalar.sum_lanes(lanes, 70, n_valid, n, want);
                k->sum_lanes(lanes, 70, n_valid, n, got);
                ck_assert_msg(memcmp(want, got, n * sizeof(float)) == 0, "%s sum_lanes %u of 16 n %zu", k->name, n_valid, n);
                size_t m = 1 + (size_t) rep * 3 % 300;
                for (size_t i = 0; i < m; i++) /* normals, subnormals of f16, overflow */
                        x[i] = y[i] = next_float(rep % 4 == 0 ? 1e-5f : rep % 4 == 1 ? 70000.0f : 3.0f);
                dot_kernels_scalar.round_f16(x, m);
                k->round_f16(y, m);
                ck_assert_msg(memcmp(x, y, m * sizeof(float)) == 0, "%s round_f16 n %zu", k->name, m);
        }
}

/* The softmax, swiglu and geglu against the reference, bit for bit: scores whose exps reach
 * both ends of exp_poly's range (underflow to 0 and the scalar path of the vector exp),
 * scores close together (every run counts in the sum), rows of signed zeros, and a NaN;
 * gates on both sides of geglu's cut-offs at -10 and 10, and exactly on them. */
static void compare_exp(const struct dot_kernels *k) {
        float x[603], ref[603], g[603], u[603], h_ref[603], h[603];
        for (int rep = 0; rep < 2000; rep++) {
                size_t n = 1 + (size_t) (rep < 100 ? rep : rep * 7 % 603);
                for (size_t i = 0; i < n; i++) {
                        x[i] = ref[i] = rep % 5 == 4 ? (rep % 2 ? 0.0f : -0.0f) * (float) (i % 2 ? 1 : -1)
                                                     : next_float(rep % 5 == 0 ? 30.0f : rep % 5 == 1 ? 120.0f : 2.0f);
                        g[i] = next_float(20.0f);
                        u[i] = next_float(3.0f);
                }
                if (rep % 7 == 6)
                        x[n / 2] = ref[n / 2] = NAN;
                dot_kernels_scalar.softmax_f16(ref, n);
                k->softmax_f16(x, n);
                ck_assert_msg(memcmp(x, ref, n * sizeof(float)) == 0, "%s softmax_f16 n %zu", k->name, n);
                dot_kernels_scalar.swiglu(h_ref, g, u, n);
                k->swiglu(h, g, u, n);
                ck_assert_msg(memcmp(h, h_ref, n * sizeof(float)) == 0, "%s swiglu n %zu", k->name, n);
                if (rep % 3 == 0)
                        g[n / 3] = rep % 2 ? 10.0f : -10.0f;
                dot_kernels_scalar.geglu(h_ref, g, u, n);
                k->geglu(h, g, u, n);
                ck_assert_msg(memcmp(h, h_ref, n * sizeof(float)) == 0, "%s geglu n %zu", k->name, n);
        }
}

/* The polynomial exp against libm: within 2 ulp over the range that matters, 0 below it. */
START_TEST(test_exp_poly_accuracy) {
        for (float x = -103.0f; x < 88.0f; x += 0.00731f) {
                float got = exp_poly(x), want = expf(x);
                float ulp = nextafterf(want, INFINITY) - want;
                ck_assert_msg(fabsf(got - want) <= 2.0f * ulp || (want < 1e-37f && fabsf(got - want) < 1e-38f),
                              "exp(%a): %a, libm %a", x, got, want);
        }
        ck_assert(exp_poly(-INFINITY) == 0.0f && exp_poly(-200.0f) == 0.0f && exp_poly(0.0f) == 1.0f && exp_poly(-0.0f) == 1.0f);
}
END_TEST

START_TEST(test_simd_sets_match_scalar) {
        static const char *const names[] = DOT_X86_SET_NAMES;
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
                const struct dot_kernels *k = dot_kernels_by_name(names[i]);
                if (!k) {
                        fprintf(stderr, "SKIP part: this CPU lacks %s; that kernel set was not compared\n", names[i]);
                        continue;
                }
                compare_sets(k);
                compare_exp(k);
                compare_quantize(k);
                compare_activation_corrections(k);
                compare_rope(k);
                compare_attention_helpers(k);
                compare_attention(k);
        }
}
END_TEST

/* ASYNCLLM_CPU_KERNELS: a set this CPU runs is taken; any other name is an error that names
 * it and lists the sets there are, never a silent fallback. */
START_TEST(test_forced_set) {
        const char *was = getenv("ASYNCLLM_CPU_KERNELS");
        char *saved = was ? strdup(was) : NULL;
        const struct dot_kernels *k = NULL;
        struct error err;
        ck_assert_int_eq(unsetenv("ASYNCLLM_CPU_KERNELS"), 0);
        ck_assert_int_eq(dot_kernels_select(&k, &err), 0);
        ck_assert_ptr_nonnull(k);
        ck_assert_int_eq(setenv("ASYNCLLM_CPU_KERNELS", "scalar", 1), 0);
        ck_assert_int_eq(dot_kernels_select(&k, &err), 0);
        ck_assert_ptr_eq(k, &dot_kernels_scalar);
        ck_assert_int_eq(setenv("ASYNCLLM_CPU_KERNELS", "avx9000", 1), 0);
        ck_assert_int_eq(dot_kernels_select(&k, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "ASYNCLLM_CPU_KERNELS=avx9000"));
        ck_assert_ptr_nonnull(strstr(err.message, "name one of scalar"));
        if (saved)
                ck_assert_int_eq(setenv("ASYNCLLM_CPU_KERNELS", saved, 1), 0);
        else
                ck_assert_int_eq(unsetenv("ASYNCLLM_CPU_KERNELS"), 0);
        free(saved);
}
END_TEST

/* A tile gives, for every row and token, the bits of the set's own single product. */
static void compare_tiles(const struct dot_kernels *k) {
        static const enum tensor_type types[] = { TENSOR_Q4_0, TENSOR_Q4_1, TENSOR_Q5_0, TENSOR_Q5_1, TENSOR_Q8_0 };
        static uint8_t w[DOT_TILE_ROWS][N * 2];
        static struct block_q8_1 xq[DOT_TILE_TOKENS + 1][N_BLOCKS];
        static float ds[DOT_TILE_TOKENS + 1][N_BLOCKS * 2];
        float x[N];
        for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++)
                for (int rep = 0; rep < 100; rep++) {
                        size_t n_blocks = 1 + (size_t) rep % N_BLOCKS, row_bytes = sizeof(w[0]);
                        unsigned n_tokens = 1 + (unsigned) rep % DOT_TILE_TOKENS;
                        for (int r = 0; r < DOT_TILE_ROWS; r++)
                                random_weights(types[ti], w[r]);
                        for (unsigned t = 0; t <= DOT_TILE_TOKENS; t++) {
                                for (int i = 0; i < N; i++)
                                        x[i] = next_float(4.0f);
                                k->quantize_q8_1(x, xq[t], ds[t], N);
                        }
                        float out[DOT_TILE_TOKENS * DOT_TILE_ROWS];
                        /* tokens two rows apart: the stride is honoured */
                        dot_tile_kernel_for(k, types[ti])(w, row_bytes, xq[0], ds[0], 2 * N_BLOCKS, (n_tokens + 1) / 2, n_blocks, out);
                        for (unsigned t = 0; t < (n_tokens + 1) / 2; t++)
                                for (int r = 0; r < DOT_TILE_ROWS; r++) {
                                        float want = dot_kernel_for(k, types[ti])(w[r], xq[2 * t], n_blocks);
                                        float got = out[t * DOT_TILE_ROWS + (unsigned) r];
                                        ck_assert_msg(memcmp(&got, &want, sizeof(got)) == 0, "%s %s tile row %d token %u: %a vs %a",
                                                      k->name, tensor_type_info(types[ti])->name, r, t, got, want);
                                }
                        dot_tile_kernel_for(k, types[ti])(w, row_bytes, xq[0], ds[0], N_BLOCKS, n_tokens, n_blocks, out);
                        for (unsigned t = 0; t < n_tokens; t++)
                                for (int r = 0; r < DOT_TILE_ROWS; r++) {
                                        float want = dot_kernel_for(k, types[ti])(w[r], xq[t], n_blocks);
                                        float got = out[t * DOT_TILE_ROWS + (unsigned) r];
                                        ck_assert_msg(memcmp(&got, &want, sizeof(got)) == 0, "%s %s tile row %d token %u: %a vs %a",
                                                      k->name, tensor_type_info(types[ti])->name, r, t, got, want);
                                }
                }
}

START_TEST(test_tiles_match_single_products) {
        compare_tiles(&dot_kernels_scalar);
        static const char *const names[] = DOT_X86_SET_NAMES;
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
                const struct dot_kernels *k = dot_kernels_by_name(names[i]);
                if (k)
                        compare_tiles(k);
                else
                        fprintf(stderr, "SKIP part: this CPU lacks %s; its tiles were not compared\n", names[i]);
        }
}
END_TEST

struct pool_check {
        struct thread_pool *pool;
        _Atomic unsigned phase_count[8];
        _Atomic unsigned errors;
};

static void pool_phases(void *ctx, unsigned ith, unsigned nth) {
        struct pool_check *c = ctx;
        for (unsigned phase = 0; phase < 8; phase++) {
                atomic_fetch_add(&c->phase_count[phase], 1);
                thread_pool_barrier(c->pool);
                /* after the barrier everyone has arrived at this phase */
                if (atomic_load(&c->phase_count[phase]) != nth)
                        atomic_fetch_add(&c->errors, 1);
                /* the fetching barrier holds the threads the same way, whatever it fetches */
                static const uint8_t fetched[65536];
                thread_pool_barrier_fetch(c->pool, phase % 2 ? fetched : NULL, phase % 2 ? sizeof(fetched) : 0);
        }
        (void) ith;
}

START_TEST(test_thread_pool_barriers) {
        for (unsigned n = 1; n <= 4; n++) {
                struct pool_check c = { 0 };
                struct error err;
                ck_assert_int_eq(thread_pool_new(n, &c.pool, &err), 0);
                for (int run = 0; run < 200; run++) {
                        for (int p = 0; p < 8; p++)
                                atomic_store(&c.phase_count[p], 0);
                        thread_pool_run(c.pool, pool_phases, &c);
                        for (int p = 0; p < 8; p++)
                                ck_assert_uint_eq(atomic_load(&c.phase_count[p]), n);
                }
                ck_assert_uint_eq(atomic_load(&c.errors), 0);
                thread_pool_free(c.pool);
        }
        struct thread_pool *pool;
        struct error err;
        ck_assert_int_eq(thread_pool_new(0, &pool, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "thread count"));
}
END_TEST

int main(void) {
        Suite *s = suite_create("kernels");
        TCase *tc = tcase_create("kernels");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_f16_round_trip);
        tcase_add_test(tc, test_f16_rounding_matches_hardware);
        tcase_add_test(tc, test_quantize_q8_1);
        tcase_add_test(tc, test_scalar_matches_float);
        tcase_add_test(tc, test_simd_sets_match_scalar);
        tcase_add_test(tc, test_forced_set);
        tcase_add_test(tc, test_attention_reference_matches_float);
        tcase_add_test(tc, test_tiles_match_single_products);
        tcase_add_test(tc, test_exp_poly_accuracy);
        tcase_add_test(tc, test_thread_pool_barriers);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
