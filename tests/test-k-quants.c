/* SPDX-License-Identifier: MIT */
/* The K-quant tensor types on the CPU: the Q8_K activation quantizer, each type's products
 * against float arithmetic on the dequantized values, every kernel set against the
 * reference's bits, and the rule that picks llama.cpp's single or batched order. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dot.h"
#include "float16.h"
#include "k-quantize.h"
#include "tensor-types.h"
#include "test-random.h"

#define N_SUPER 3
#define N (N_SUPER * QK_K)

static const enum tensor_type k_types[] = { TENSOR_Q2_K, TENSOR_Q3_K, TENSOR_Q4_K, TENSOR_Q5_K, TENSOR_Q6_K };

/* Random blocks of type: random quants and scales, with d (and dmin) small positive f16s so
 * that products stay in a range where float rounding is measurable. */
static void random_row(enum tensor_type type, uint8_t *row) {
        size_t bytes = tensor_type_info(type)->block_bytes;
        for (size_t i = 0; i < N_SUPER * bytes; i++)
                row[i] = (uint8_t) next_u32();
        for (int b = 0; b < N_SUPER; b++) {
                uint8_t *block = row + b * bytes;
                f16_bits d = f32_to_f16(0.001f + (float) (next_u32() % 1000) / 20000.0f);
                f16_bits dmin = f32_to_f16(0.001f + (float) (next_u32() % 1000) / 20000.0f);
                switch (type) {
                case TENSOR_Q2_K: ((struct block_q2_K *) block)->d = d, ((struct block_q2_K *) block)->dmin = dmin; break;
                case TENSOR_Q3_K: ((struct block_q3_K *) block)->d = d; break;
                case TENSOR_Q4_K: ((struct block_q4_K *) block)->d = d, ((struct block_q4_K *) block)->dmin = dmin; break;
                case TENSOR_Q5_K: ((struct block_q5_K *) block)->d = d, ((struct block_q5_K *) block)->dmin = dmin; break;
                default: ((struct block_q6_K *) block)->d = d; break;
                }
        }
}

static void random_activations(float *x) {
        for (int i = 0; i < N; i++)
                x[i] = next_float(2.0f) * (next_u32() % 64 == 0 ? 20.0f : 1.0f); /* with outliers */
}

START_TEST(test_quantize_q8_K) {
        float x[N], back[N];
        struct block_q8_K q[N_SUPER];
        random_activations(x);
        memset(x, 0, QK_K * sizeof(float)); /* a zero super-block */
        x[QK_K + 7] = -50.0f;               /* the largest magnitude, negative */
        x[2 * QK_K + 3] = 40.0f;            /* the largest magnitude, positive */
        quantize_row_q8_K(x, q, N);
        tensor_row_to_float(TENSOR_Q8_K, q, back, N);
        ck_assert(q[0].d == 0.0f);
        /* the element of largest magnitude is -127 times d (d takes its sign) */
        ck_assert_int_eq(q[1].qs[7], -127);
        ck_assert_int_eq(q[2].qs[3], -127);
        ck_assert(q[1].d > 0.0f && q[2].d < 0.0f);
        for (int b = 0; b < N_SUPER; b++)
                for (int s = 0; s < QK_K / 16; s++) {
                        int sum = 0;
                        for (int j = 16 * s; j < 16 * s + 16; j++) {
                                ck_assert_int_le(abs(q[b].qs[j]), 127);
                                sum += q[b].qs[j];
                                float err = fabsf(back[b * QK_K + j] - x[b * QK_K + j]);
                                ck_assert_msg(err <= fabsf(q[b].d) * 0.5001f, "super-block %d element %d off by %g", b, j, err);
                        }
                        ck_assert_int_eq(q[b].bsums[s], sum);
                }
        /* a product that rounds to exactly half goes to the even integer, as llama.cpp's does */
        float tie[QK_K] = { 0 };
        tie[0] = -127.0f; /* iscale = 1 */
        tie[1] = 0.5f;
        tie[2] = 1.5f;
        tie[3] = -2.5f;
        quantize_row_q8_K(tie, q, QK_K);
        ck_assert_int_eq(q[0].qs[1], 0);
        ck_assert_int_eq(q[0].qs[2], 2);
        ck_assert_int_eq(q[0].qs[3], -2);
}
END_TEST

/* Every product, in both orders, equals double arithmetic on the dequantized weights and
 * activations up to float rounding: the element order and the scales are the layouts'. */
START_TEST(test_products_match_dequantized) {
        for (size_t k = 0; k < sizeof(k_types) / sizeof(k_types[0]); k++) {
                enum tensor_type type = k_types[k];
                dot_k_fn dot = dot_k_kernel_for(&dot_kernels_scalar, type);
                ck_assert_ptr_nonnull(dot);
                for (int trial = 0; trial < 50; trial++) {
                        uint8_t row[N_SUPER * sizeof(struct block_q6_K)];
                        float x[N], w[N], a[N];
                        struct block_q8_K q[N_SUPER];
                        random_row(type, row);
                        random_activations(x);
                        quantize_row_q8_K(x, q, N);
                        tensor_row_to_float(type, row, w, N);
                        tensor_row_to_float(TENSOR_Q8_K, q, a, N);
                        double expect = 0.0, magnitude = 0.0;
                        for (int i = 0; i < N; i++) {
                                expect += (double) w[i] * a[i];
                                magnitude += fabs((double) w[i] * a[i]);
                        }
                        for (int batched = 0; batched <= 1; batched++) {
                                float got = dot(row, q, N_SUPER, batched);
                                ck_assert_msg(fabs(got - expect) <= magnitude * 1e-5 + 1e-6,
                                              "%s batched=%d trial %d: %.9g, dequantized %.9g",
                                              tensor_type_name(type), batched, trial, got, expect);
                        }
                }
        }
}
END_TEST

/* Every kernel set this CPU runs gives the reference's bits, in both orders. */
START_TEST(test_sets_match_reference) {
        static const char *const names[] = DOT_X86_SET_NAMES;
        for (size_t s = 0; s < sizeof(names) / sizeof(names[0]); s++) {
                const struct dot_kernels *set = dot_kernels_by_name(names[s]);
                if (!set)
                        continue;
                for (size_t k = 0; k < sizeof(k_types) / sizeof(k_types[0]); k++) {
                        dot_k_fn ref = dot_k_kernel_for(&dot_kernels_scalar, k_types[k]), fn = dot_k_kernel_for(set, k_types[k]);
                        for (int trial = 0; trial < 20; trial++) {
                                uint8_t row[N_SUPER * sizeof(struct block_q6_K)];
                                float x[N];
                                struct block_q8_K q[N_SUPER], q_set[N_SUPER];
                                random_row(k_types[k], row);
                                random_activations(x);
                                quantize_row_q8_K(x, q, N);
                                set->quantize_q8_K(x, q_set, N);
                                ck_assert_msg(memcmp(q, q_set, sizeof(q)) == 0, "%s: Q8_K quantization differs", names[s]);
                                for (int batched = 0; batched <= 1; batched++) {
                                        float want = ref(row, q, N_SUPER, batched), got = fn(row, q, N_SUPER, batched);
                                        ck_assert_msg(memcmp(&want, &got, sizeof(got)) == 0, "%s %s batched=%d: %.9g, reference %.9g",
                                                      names[s], tensor_type_name(k_types[k]), batched, got, want);
                                }
                        }
                }
        }
}
END_TEST

#define TILE_ROWS_MAX 17
#define OUT_STRIDE (TILE_ROWS_MAX + 2)

/* Every set's tiles (the scalar one's included) against the reference, bit for bit: odd row
 * counts, 1..DOT_K_TILE_TOKENS tokens, the orders mixed within a call, set and accumulate;
 * nothing outside the tile's rows and tokens is written. */
START_TEST(test_tiles_match_reference) {
        static const char *const x86[] = DOT_X86_SET_NAMES;
        const char *names[1 + sizeof(x86) / sizeof(x86[0])] = { "scalar" };
        memcpy(names + 1, x86, sizeof(x86));
        static const unsigned row_counts[] = { 1, 3, 4, 7, TILE_ROWS_MAX };
        static uint8_t rows[TILE_ROWS_MAX][N_SUPER * sizeof(struct block_q6_K)];
        static struct block_q8_K q[DOT_K_TILE_TOKENS][N_SUPER];
        for (size_t s = 0; s < sizeof(names) / sizeof(names[0]); s++) {
                const struct dot_kernels *set = dot_kernels_by_name(names[s]);
                if (!set)
                        continue;
                for (size_t k = 0; k < sizeof(k_types) / sizeof(k_types[0]); k++) {
                        dot_k_fn ref = dot_k_kernel_for(&dot_kernels_scalar, k_types[k]);
                        dot_k_tile_fn tile = dot_k_tile_kernel_for(set, k_types[k]);
                        ck_assert_ptr_nonnull(tile);
                        size_t row_bytes = N_SUPER * tensor_type_info(k_types[k])->block_bytes;
                        for (unsigned n_tokens = 1; n_tokens <= DOT_K_TILE_TOKENS; n_tokens++)
                                for (size_t rc = 0; rc < sizeof(row_counts) / sizeof(row_counts[0]); rc++) {
                                        unsigned n_rows = row_counts[rc];
                                        bool batched[DOT_K_TILE_TOKENS], accumulate = next_u32() % 2;
                                        float x[N], out[DOT_K_TILE_TOKENS * OUT_STRIDE], before[sizeof(out) / sizeof(float)];
                                        for (unsigned r = 0; r < n_rows; r++)
                                                random_row(k_types[k], rows[r]);
                                        for (unsigned t = 0; t < n_tokens; t++) {
                                                random_activations(x);
                                                quantize_row_q8_K(x, q[t], N);
                                                batched[t] = next_u32() % 2;
                                        }
                                        for (size_t i = 0; i < sizeof(out) / sizeof(float); i++)
                                                before[i] = out[i] = next_float(1.0f);
                                        /* the rows packed row_bytes apart, as a tensor's are */
                                        uint8_t packed[TILE_ROWS_MAX * sizeof(rows[0])];
                                        for (unsigned r = 0; r < n_rows; r++)
                                                memcpy(packed + r * row_bytes, rows[r], row_bytes);
                                        tile(packed, row_bytes, n_rows, q[0], N_SUPER, batched, n_tokens, N_SUPER, out, OUT_STRIDE,
                                             accumulate);
                                        for (unsigned t = 0; t < DOT_K_TILE_TOKENS; t++)
                                                for (unsigned r = 0; r < OUT_STRIDE; r++) {
                                                        size_t i = t * OUT_STRIDE + r;
                                                        if (t >= n_tokens || r >= n_rows) {
                                                                ck_assert_msg(memcmp(&out[i], &before[i], sizeof(float)) == 0,
                                                                              "%s %s: wrote outside the tile", names[s],
                                                                              tensor_type_name(k_types[k]));
                                                                continue;
                                                        }
                                                        float v = ref(rows[r], q[t], N_SUPER, batched[t]);
                                                        float want = accumulate ? before[i] + v : v;
                                                        ck_assert_msg(memcmp(&want, &out[i], sizeof(float)) == 0,
                                                                      "%s %s %u rows %u tokens, row %u token %u batched=%d: %.9g, reference %.9g",
                                                                      names[s], tensor_type_name(k_types[k]), n_rows, n_tokens, r, t,
                                                                      batched[t], out[i], want);
                                                }
                                }
                }
        }
}
END_TEST

/* The packed K-quant products (every set that has one) against the reference, bit for bit:
 * row counts around the group of sixteen, 1..PACKED_K_TOKENS tokens whose orders change
 * within a call, strided tokens, a sub-range of the groups, set and accumulate; nothing
 * outside the groups' rows and the tokens is written. The repacked rows read back as they
 * were (packed_weights_row()), with or without a kernel. */
#define PACKED_K_ROWS 35
#define PACKED_K_TOKENS 11
START_TEST(test_packed_match_reference) {
        static const char *const x86[] = DOT_X86_SET_NAMES;
        const char *names[1 + sizeof(x86) / sizeof(x86[0])] = { "scalar" };
        memcpy(names + 1, x86, sizeof(x86));
        static const unsigned row_counts[] = { 1, 7, 16, 17, PACKED_K_ROWS };
        static uint8_t rows[PACKED_K_ROWS * N_SUPER * sizeof(struct block_q6_K)], back[N_SUPER * sizeof(struct block_q6_K)];
        static struct block_q8_K q[2 * PACKED_K_TOKENS * N_SUPER];
        static float out[PACKED_K_TOKENS * (PACKED_K_ROWS + 5)], before[sizeof(out) / sizeof(float)];
        unsigned n_compared = 0;
        for (size_t k = 0; k < sizeof(k_types) / sizeof(k_types[0]); k++) {
                enum tensor_type type = k_types[k];
                if (!packed_type_supported(type))
                        continue;
                dot_k_fn ref = dot_k_kernel_for(&dot_kernels_scalar, type);
                for (size_t rc = 0; rc < sizeof(row_counts) / sizeof(row_counts[0]); rc++)
                        for (size_t n_super = 1; n_super <= N_SUPER; n_super += N_SUPER - 1) {
                                unsigned n_rows = row_counts[rc];
                                size_t row_bytes = n_super * tensor_type_info(type)->block_bytes;
                                for (unsigned r = 0; r < n_rows; r++)
                                        random_row(type, rows + r * row_bytes);
                                struct packed_weights p;
                                ck_assert_int_eq(packed_weights_build(type, rows, row_bytes, n_rows, n_super * QK_K, &p), 0);
                                for (unsigned r = 0; r < n_rows; r++) {
                                        packed_weights_row(&p, r, back);
                                        ck_assert_mem_eq(back, rows + r * row_bytes, row_bytes);
                                }
                                for (size_t s = 0; s < sizeof(names) / sizeof(names[0]); s++) {
                                        const struct dot_kernels *set = dot_kernels_by_name(names[s]);
                                        dot_packed_k_fn fn = set ? dot_packed_k_kernel_for(set, type) : NULL;
                                        if (!fn)
                                                continue;
                                        unsigned n_tokens = 1 + next_u32() % PACKED_K_TOKENS;
                                        size_t stride = n_super * (1 + next_u32() % 2), out_stride = n_rows + next_u32() % 5;
                                        bool batched[PACKED_K_TOKENS], accumulate = next_u32() % 2;
                                        float x[N];
                                        for (unsigned t = 0; t < n_tokens; t++) {
                                                random_activations(x);
                                                quantize_row_q8_K(x, &q[t * stride], n_super * QK_K);
                                                batched[t] = t < 2 ? t == 1 : next_u32() % 3 != 0;
                                        }
                                        uint64_t g0 = next_u32() % p.n_groups, g1 = g0 + 1 + next_u32() % (p.n_groups - g0);
                                        for (size_t i = 0; i < n_tokens * out_stride; i++)
                                                before[i] = out[i] = next_float(1.0f);
                                        p.keep_cached = next_u32() % 2; /* either prefetch, which must not change a bit */
                                        fn(&p, g0, g1, q, stride, batched, n_tokens, out, out_stride, accumulate);
                                        for (unsigned t = 0; t < n_tokens; t++)
                                                for (unsigned r = 0; r < out_stride; r++) {
                                                        size_t i = t * out_stride + r;
                                                        if (r >= n_rows || r < g0 * PACKED_ROWS || r >= g1 * PACKED_ROWS) {
                                                                ck_assert_msg(memcmp(&out[i], &before[i], sizeof(float)) == 0,
                                                                              "%s packed %s: wrote row %u outside groups [%lu, %lu)",
                                                                              names[s], tensor_type_name(type), r,
                                                                              (unsigned long) g0, (unsigned long) g1);
                                                                continue;
                                                        }
                                                        float v = ref(rows + r * row_bytes, &q[t * stride], n_super, batched[t]);
                                                        float want = accumulate ? before[i] + v : v;
                                                        ck_assert_msg(memcmp(&want, &out[i], sizeof(float)) == 0,
                                                                      "%s packed %s %u rows %zu super-blocks %u tokens, row %u token %u batched=%d: %.9g, reference %.9g",
                                                                      names[s], tensor_type_name(type), n_rows, n_super, n_tokens, r, t,
                                                                      batched[t], out[i], want);
                                                        n_compared++;
                                                }
                                }
                                packed_weights_free(&p);
                        }
        }
        if (n_compared == 0)
                fprintf(stderr, "SKIP part: no kernel set here has a packed K-quant product; only the repacking was checked\n");
        else
                fprintf(stderr, "packed K-quant products: %u values bit for bit against the reference\n", n_compared);
}
END_TEST

/* llama.cpp's prompt pass: micro-batches of 512; the tiled product for those of 8 tokens or
 * more, the repacked product's batched order for whole groups of four. */
START_TEST(test_batched_order_rule) {
        /* a short prompt: all single */
        for (uint32_t p = 0; p < 7; p++) {
                ck_assert(!k_quant_batched_order(TENSOR_Q6_K, p, 7));
                ck_assert_int_eq(k_quant_batched_order(TENSOR_Q4_K, p, 7), p < 4);
        }
        /* 15 tokens: tiled for all, groups of four for the first 12 */
        for (uint32_t p = 0; p < 15; p++) {
                ck_assert(k_quant_batched_order(TENSOR_Q5_K, p, 15));
                ck_assert_int_eq(k_quant_batched_order(TENSOR_Q2_K, p, 15), p < 12);
        }
        /* generated tokens are single */
        ck_assert(!k_quant_batched_order(TENSOR_Q6_K, 15, 15));
        ck_assert(!k_quant_batched_order(TENSOR_Q4_K, 40, 15));
        /* 515 tokens: the last micro-batch has 3, too few for either batched product */
        ck_assert(k_quant_batched_order(TENSOR_Q3_K, 511, 515));
        ck_assert(!k_quant_batched_order(TENSOR_Q3_K, 512, 515));
        ck_assert(k_quant_batched_order(TENSOR_Q4_K, 511, 515));
        ck_assert(!k_quant_batched_order(TENSOR_Q4_K, 514, 515));
        /* 522 tokens: the last micro-batch has 10: tiled, and 8 of them in groups of four */
        ck_assert(k_quant_batched_order(TENSOR_Q6_K, 521, 522));
        ck_assert(k_quant_batched_order(TENSOR_Q4_K, 519, 522));
        ck_assert(!k_quant_batched_order(TENSOR_Q4_K, 520, 522));
}
END_TEST

/* The synthetic models' quantizer writes each layout as tensor_row_to_float() reads it: the
 * round trip stays within a few of each type's steps. */
START_TEST(test_synthetic_quantizer_round_trip) {
        static const double worst_allowed[] = { 0.4, 0.2, 0.09, 0.045, 0.025 }; /* Q2_K .. Q6_K, inputs in [-1, 1] */
        for (size_t k = 0; k < sizeof(k_types) / sizeof(k_types[0]); k++) {
                uint8_t row[N_SUPER * sizeof(struct block_q6_K)];
                float x[N], back[N];
                for (int i = 0; i < N; i++)
                        x[i] = next_float(1.0f);
                k_quantize_row(k_types[k], x, row, N);
                tensor_row_to_float(k_types[k], row, back, N);
                double worst = 0.0;
                for (int i = 0; i < N; i++)
                        worst = fmax(worst, fabs(back[i] - x[i]));
                printf("%s round trip worst %g\n", tensor_type_name(k_types[k]), worst);
                ck_assert_msg(worst <= worst_allowed[k], "%s: worst error %g", tensor_type_name(k_types[k]), worst);
        }
}
END_TEST

int main(void) {
        Suite *s = suite_create("k-quants");
        TCase *tc = tcase_create("k-quants");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_quantize_q8_K);
        tcase_add_test(tc, test_products_match_dequantized);
        tcase_add_test(tc, test_sets_match_reference);
        tcase_add_test(tc, test_tiles_match_reference);
        tcase_add_test(tc, test_packed_match_reference);
        tcase_add_test(tc, test_batched_order_rule);
        tcase_add_test(tc, test_synthetic_quantizer_round_trip);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
