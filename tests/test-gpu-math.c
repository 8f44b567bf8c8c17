/* SPDX-License-Identifier: MIT */
/* The CUDA kernels' arithmetic (gpu/gpu-math.h), run on the host as the device runs it
 * (tests/gpu-host-model.h), against the CPU backend's reference: the f16 conversions, the
 * q8_1 quantization, exp, SiLU, the RoPE pair and the quantized row products (eight lanes, the
 * CPU's order) give the CPU's bits, the dequantized weights its values, and float rows stay
 * within rounding of the exact product; the K-quants' re-layout gives the file's values and
 * their products (the device's own order) stay within rounding of the exact product and
 * within the activation quantizations' bound of the CPU's. Needs no GPU: it runs in every
 * build. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dot-k-quants.h"
#include "dot.h"
#include "exp-poly.h"
#include "float16.h"
#include "packed-weights.h"
#include "gpu-host-model.h"
#include "quantize.h"
#include "rope.h"
#include "tensor-types.h"
#include "test-random.h"

#define MAX_BLOCKS 100

START_TEST(test_f16_conversions) {
        for (uint32_t h = 0; h < 65536; h++)
                ck_assert_uint_eq(f32_to_bits(gpu_f16_to_f32(h)), f32_to_bits(f16_to_f32((uint16_t) h)));
        static const float edges[] = { 0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 6.1035156e-05f, 5.9604645e-08f,
                                       2.9802322e-08f, 1e-10f, INFINITY, -INFINITY, NAN };
        for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++)
                ck_assert_uint_eq(gpu_f32_to_f16(edges[i]), f32_to_f16(edges[i]));
        for (int i = 0; i < 1000000; i++) {
                float f = f32_from_bits(next_u32() ^ (next_u32() << 16));
                ck_assert_uint_eq(gpu_f32_to_f16(f), f32_to_f16(f));
        }
        for (uint32_t b = 0; b < 65536; b++)
                ck_assert_uint_eq(f32_to_bits(gpu_bf16_to_f32(b)), f32_to_bits(bf16_to_f32((uint16_t) b)));
}
END_TEST

/* A row of n floats: ordinary values, a zero block, an outlier, and values on the rounding
 * boundaries of their block's scale. */
static void random_activations(float *x, uint32_t n, int variant) {
        for (uint32_t i = 0; i < n; i++)
                x[i] = next_float(variant == 1 ? 30.0f : 1.0f);
        if (n >= 64)
                memset(x + 32, 0, 32 * sizeof(float));
        if (variant == 2) {
                x[0] = 127.0f;
                for (uint32_t i = 1; i < 32 && i < n; i++)
                        x[i] = (float) (i % 7) + 0.5f; /* halfway between quants at d = 1 */
        }
}

START_TEST(test_quantization_gives_the_cpu_bits) {
        static float x[MAX_BLOCKS * 32], ds[MAX_BLOCKS * 2];
        static int8_t q[MAX_BLOCKS * 32];
        static struct block_q8_1 ref[MAX_BLOCKS];
        for (int variant = 0; variant < 3; variant++)
                for (int rep = 0; rep < 50; rep++) {
                        uint32_t n = 32 * (1 + next_u32() % MAX_BLOCKS);
                        random_activations(x, n, variant);
                        host_quantize_row(x, n, q, ds);
                        quantize_row_q8_1(x, ref, n);
                        for (uint32_t b = 0; b < n / 32; b++) {
                                ck_assert_uint_eq(f32_to_bits(ds[2 * b]), f32_to_bits(f16_to_f32(ref[b].d)));
                                ck_assert_uint_eq(f32_to_bits(ds[2 * b + 1]), f32_to_bits(f16_to_f32(ref[b].s)));
                                ck_assert_mem_eq(q + 32 * b, ref[b].qs, 32);
                        }
                }
}
END_TEST

static void random_blocks(enum tensor_type type, uint8_t *row, uint32_t nb, bool extreme) {
        uint32_t block_bytes = tensor_type_info(type)->block_bytes;
        for (uint32_t b = 0; b < nb; b++) {
                uint8_t *p = row + (size_t) b * block_bytes;
                for (uint32_t i = 0; i < block_bytes; i++)
                        /* the quant of largest magnitude: -128, 15 - 8, 15, -16 and 31 */
                        p[i] = extreme ? (type == TENSOR_Q8_0 ? 0x80 : type == TENSOR_Q5_0 ? 0x00 : 0xff) : (uint8_t) next_u32();
                f16_bits d = f32_to_f16(next_float(0.05f)), m = f32_to_f16(next_float(0.1f));
                memcpy(p, &d, 2);
                if (type == TENSOR_Q4_1 || type == TENSOR_Q5_1)
                        memcpy(p + 2, &m, 2);
        }
}

static const enum tensor_type quant_types[] = { TENSOR_Q4_0, TENSOR_Q4_1, TENSOR_Q5_0, TENSOR_Q5_1, TENSOR_Q8_0 };
#define N_QUANT_TYPES (sizeof(quant_types) / sizeof(quant_types[0]))

/* The device's repacked rows (lane-major, padded to four blocks) hold every element: its
 * dequantized value is the CPU's. */
START_TEST(test_dequant_gives_the_cpu_values) {
        static uint8_t row[MAX_BLOCKS * 34], quants[(MAX_BLOCKS + 3) * 32];
        static uint32_t scales[MAX_BLOCKS + 3];
        static float ref[MAX_BLOCKS * 32];
        for (size_t t = 0; t < N_QUANT_TYPES; t++) {
                enum tensor_type type = quant_types[t];
                uint32_t nb = 1 + next_u32() % MAX_BLOCKS;
                random_blocks(type, row, nb, false);
                uint32_t n = nb * 32;
                gpu_repack_row(gpu_weight_kind_of(type), row, tensor_type_info(type)->block_bytes, nb, quants, scales);
                tensor_row_to_float(type, row, ref, n);
                for (uint32_t i = 0; i < n; i++)
                        ck_assert_uint_eq(f32_to_bits(gpu_dequant(gpu_weight_kind_of(type), quants, scales, gpu_padded_blocks(nb), i)),
                                          f32_to_bits(ref[i]));
                /* the padding is zero */
                for (uint32_t b = nb; b < gpu_padded_blocks(nb); b++)
                        ck_assert_uint_eq(scales[b], 0);
        }
}
END_TEST

static dot_packed_fn reference_product(enum tensor_type type, bool single) {
        if (single)
                return dot_kernels_scalar.packed_single_accumulator;
        return dot_packed_kernel_for(&dot_kernels_scalar, type);
}

static const enum tensor_type k_types[] = { TENSOR_Q2_K, TENSOR_Q3_K, TENSOR_Q4_K, TENSOR_Q5_K, TENSOR_Q6_K };
#define N_K_TYPES (sizeof(k_types) / sizeof(k_types[0]))
#define MAX_SUPER 12

/* n_super random K-quant super-blocks: random quants and scales with small positive d and
 * dmin; extreme: every quant, scale and min at its largest. */
static void random_k_blocks(enum tensor_type type, uint8_t *row, uint32_t n_super, bool extreme) {
        uint32_t block_bytes = tensor_type_info(type)->block_bytes;
        for (uint32_t i = 0; i < n_super * block_bytes; i++)
                row[i] = extreme ? 0xff : (uint8_t) next_u32();
        for (uint32_t b = 0; b < n_super; b++) {
                uint8_t *p = row + (size_t) b * block_bytes;
                f16_bits d = f32_to_f16(0.0005f + (float) (next_u32() % 1000) / 50000.0f);
                f16_bits dmin = f32_to_f16(0.0005f + (float) (next_u32() % 1000) / 50000.0f);
                switch (type) {
                case TENSOR_Q2_K: ((struct block_q2_K *) p)->d = d, ((struct block_q2_K *) p)->dmin = dmin; break;
                case TENSOR_Q3_K: ((struct block_q3_K *) p)->d = d; break;
                case TENSOR_Q4_K: ((struct block_q4_K *) p)->d = d, ((struct block_q4_K *) p)->dmin = dmin; break;
                case TENSOR_Q5_K: ((struct block_q5_K *) p)->d = d, ((struct block_q5_K *) p)->dmin = dmin; break;
                default:
                        ((struct block_q6_K *) p)->d = d;
                        if (extreme) /* the largest scale: 127 (0xff is -1) */
                                memset(((struct block_q6_K *) p)->scales, 127, QK_K / 16);
                        break;
                }
        }
}

/* The upload's re-layout of each K-quant (blocks of 32, nibbles or bytes, the integer scales
 * per half block): every element dequantized from the device's row is the file's value, bit
 * for bit, and the scale words past the row are zero. */
START_TEST(test_k_relayout_gives_the_file_values) {
        static uint8_t row[MAX_SUPER * sizeof(struct block_q6_K)], quants[MAX_SUPER * 8 * 32];
        static uint32_t scales[2 * MAX_SUPER * 8];
        static float ref[MAX_SUPER * QK_K];
        for (size_t t = 0; t < N_K_TYPES; t++)
                for (int rep = 0; rep < 40; rep++) {
                        enum tensor_type type = k_types[t];
                        enum gpu_weight_kind kind = gpu_weight_kind_of(type);
                        uint32_t n_super = 1 + next_u32() % MAX_SUPER, nb = 8 * n_super, nbp = gpu_padded_blocks(nb);
                        ck_assert(gpu_k_quant(kind));
                        random_k_blocks(type, row, n_super, rep == 0);
                        gpu_repack_row(kind, row, tensor_type_info(type)->block_bytes, nb, quants, scales);
                        tensor_row_to_float(type, row, ref, (uint64_t) n_super * QK_K);
                        for (uint32_t i = 0; i < n_super * QK_K; i++)
                                ck_assert_msg(f32_to_bits(gpu_dequant(kind, quants, scales, nbp, i)) == f32_to_bits(ref[i]),
                                              "%s element %u: %.9g on the device, %.9g in the file", tensor_type_info(type)->name, i,
                                              gpu_dequant(kind, quants, scales, nbp, i), ref[i]);
                }
}
END_TEST

/* The K-quants' products in the device's order: within float rounding of the exact product of
 * the file's weights and the q8_1 activations the device multiplies (each lane takes its own
 * half block's scale and min), and within what the two activation quantizations can move of
 * the CPU backend's product on Q8_K activations. */
START_TEST(test_k_products_match_exact) {
        static uint8_t row[MAX_SUPER * sizeof(struct block_q6_K)], quants[MAX_SUPER * 8 * 32];
        static uint32_t scales[2 * MAX_SUPER * 8];
        static float x[MAX_SUPER * QK_K], w[MAX_SUPER * QK_K], ds[MAX_SUPER * 16];
        static int8_t q[MAX_SUPER * QK_K];
        static struct block_q8_K act[MAX_SUPER];
        double worst_cpu = 0.0;
        for (size_t t = 0; t < N_K_TYPES; t++)
                for (int rep = 0; rep < 200; rep++) {
                        enum tensor_type type = k_types[t];
                        enum gpu_weight_kind kind = gpu_weight_kind_of(type);
                        uint32_t n_super = 1 + next_u32() % MAX_SUPER, nb = 8 * n_super, n = n_super * QK_K;
                        random_k_blocks(type, row, n_super, rep == 0);
                        random_activations(x, n, rep % 3);
                        if (rep == 0)
                                for (uint32_t i = 0; i < n; i++)
                                        x[i] = -1.0f; /* every quant -127 */
                        host_quantize_row(x, n, q, ds);
                        gpu_repack_row(kind, row, tensor_type_info(type)->block_bytes, nb, quants, scales);
                        tensor_row_to_float(type, row, w, n);
                        quantize_row_q8_K(x, act, n);
                        /* each side's activation is within 0.6 of its quantization step of x (half a
                         * step, and the q8_1 scale's f16 rounding): the bound on the two products' gap */
                        double exact = 0.0, magnitude = 0.0, bound = 0.0;
                        for (uint32_t i = 0; i < n; i++) {
                                double wa = (double) w[i] * q[i] * ds[2 * (i / 32)];
                                exact += wa;
                                magnitude += fabs(wa);
                                bound += 0.6 * fabs((double) w[i]) * (ds[2 * (i / 32)] + fabs(act[i / QK_K].d));
                        }
                        float got = host_row_dot(kind, quants, scales, nb, q, ds, false);
                        ck_assert_msg(fabs(got - exact) <= 1e-6 * magnitude + 1e-30, "%s, %u super-blocks: %.9g, exact %.9g",
                                      tensor_type_info(type)->name, n_super, got, exact);
                        float cpu = dot_k_kernel_for(&dot_kernels_scalar, type)(row, act, n_super, false);
                        double off = fabs((double) got - cpu);
                        worst_cpu = fmax(worst_cpu, off / bound);
                        ck_assert_msg(off <= bound + 1e-5 * magnitude, "%s, %u super-blocks: %.9g on the device, %.9g on the CPU",
                                      tensor_type_info(type)->name, n_super, got, cpu);
                }
        printf("K-quant products: the device's and the CPU's differ by at most %.3g of the quantization bound\n", worst_cpu);
}
END_TEST

/* The products: the host model of the device's order gives the CPU reference's bits (the
 * packed product, and the single-accumulator product for Q4_0 and Q8_0), on random rows, extreme quants and
 * widths from one block to a hundred. */
START_TEST(test_row_products_give_the_cpu_bits) {
        static uint8_t rows[4 * MAX_BLOCKS * 34], quants[(MAX_BLOCKS + 3) * 32];
        static uint32_t scales[MAX_BLOCKS + 3];
        static float x[MAX_BLOCKS * 32], ds[MAX_BLOCKS * 2], ref[4];
        static int8_t q[MAX_BLOCKS * 32];
        static struct block_q8_1 act[MAX_BLOCKS];
        static const uint32_t widths[] = { 1, 2, 5, 8, 17, 18, 48, 64, 100 };
        size_t n_checked = 0;
        for (size_t t = 0; t < N_QUANT_TYPES; t++)
                for (size_t wi = 0; wi < sizeof(widths) / sizeof(widths[0]); wi++)
                        for (int rep = 0; rep < 20; rep++)
                                for (int single = 0; single < (quant_types[t] == TENSOR_Q8_0 || quant_types[t] == TENSOR_Q4_0 ? 2 : 1);
                                     single++) {
                                        enum tensor_type type = quant_types[t];
                                        uint32_t nb = widths[wi], n = nb * 32, n_rows = 4;
                                        uint64_t row_bytes = tensor_row_bytes(type, n);
                                        for (uint32_t r = 0; r < n_rows; r++)
                                                random_blocks(type, rows + r * row_bytes, nb, rep == 0);
                                        random_activations(x, n, rep % 3);
                                        if (rep == 0)
                                                for (uint32_t i = 0; i < n; i++)
                                                        x[i] = -1.0f; /* every quant -127 */
                                        host_quantize_row(x, n, q, ds);
                                        quantize_row_q8_1(x, act, n);
                                        struct packed_weights packed;
                                        ck_assert_int_eq(packed_weights_build(type, rows, row_bytes, n_rows, n, &packed), 0);
                                        struct packed_activations pa = { act, ds, NULL, nb, NULL };
                                        reference_product(type, single)(&packed, 0, packed.n_groups, &pa, 1, ref, 1, false);
                                        packed_weights_free(&packed);
                                        for (uint32_t r = 0; r < n_rows; r++) {
                                                gpu_repack_row(gpu_weight_kind_of(type), rows + r * row_bytes,
                                                               tensor_type_info(type)->block_bytes, nb, quants, scales);
                                                float got = host_row_dot(gpu_weight_kind_of(type), quants, scales, nb, q, ds, single);
                                                ck_assert_msg(f32_to_bits(got) == f32_to_bits(ref[r]),
                                                              "%s%s, %u blocks, row %u: %.9g in the device's order, %.9g on the CPU",
                                                              tensor_type_info(type)->name, single ? " single-accumulator" : "", nb, r,
                                                              got, ref[r]);
                                                n_checked++;
                                        }
                                }
        ck_assert_uint_gt(n_checked, 1000);
}
END_TEST

START_TEST(test_float_rows_match_double) {
        static float x[4096], w32[4096];
        static uint16_t w16[4096];
        static const enum gpu_weight_kind kinds[] = { GPU_WEIGHT_F32, GPU_WEIGHT_F16, GPU_WEIGHT_BF16 };
        for (size_t k = 0; k < 3; k++)
                for (int rep = 0; rep < 30; rep++) {
                        uint32_t n = 1 + next_u32() % 4096;
                        double exact = 0, magnitude = 0;
                        for (uint32_t i = 0; i < n; i++) {
                                x[i] = next_float(2.0f);
                                w32[i] = next_float(0.1f);
                                w16[i] = kinds[k] == GPU_WEIGHT_F16 ? f32_to_f16(w32[i]) : (uint16_t) (f32_to_bits(w32[i]) >> 16);
                                float wi = kinds[k] == GPU_WEIGHT_F32 ? w32[i] : gpu_float_weight(kinds[k], w16, i);
                                exact += (double) wi * x[i];
                                magnitude += fabs((double) wi * x[i]);
                        }
                        const void *row = kinds[k] == GPU_WEIGHT_F32 ? (const void *) w32 : (const void *) w16;
                        float got = host_row_dot_float(kinds[k], row, n, x);
                        ck_assert_msg(fabs(got - exact) <= 1e-6 * magnitude + 1e-7, "kind %d, %u columns: %.9g, exact %.9g",
                                      (int) kinds[k], n, got, exact);
                }
}
END_TEST

/* exp, SiLU and the RoPE pair give the CPU's bits. */
START_TEST(test_exp_silu_rope_give_the_cpu_bits) {
        static const float edges[] = { 0.0f, -0.0f, 1.0f, -1.0f, 88.0f, 89.0f, -103.0f, -105.0f, -1000.0f, INFINITY, -INFINITY };
        for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++)
                ck_assert_uint_eq(f32_to_bits(gpu_exp(edges[i])), f32_to_bits(exp_poly(edges[i])));
        for (int i = 0; i < 1000000; i++) {
                float x = next_float(120.0f);
                ck_assert_uint_eq(f32_to_bits(gpu_exp(x)), f32_to_bits(exp_poly(x)));
        }
        for (int i = 0; i < 10000; i++) {
                float g = next_float(20.0f), u = next_float(5.0f), h;
                dot_kernels_scalar.swiglu(&h, &g, &u, 1);
                ck_assert_uint_eq(f32_to_bits(gpu_silu_mul(g, u)), f32_to_bits(h));
                float pair[2] = { next_float(3.0f), next_float(3.0f) }, c = next_float(1.0f), sn = next_float(1.0f);
                float x0 = pair[0], x1 = pair[1];
                rope_rows(pair, 1, 2, 1, false, &c, &sn);
                gpu_rope_pair(&x0, &x1, c, sn);
                ck_assert_uint_eq(f32_to_bits(x0), f32_to_bits(pair[0]));
                ck_assert_uint_eq(f32_to_bits(x1), f32_to_bits(pair[1]));
        }
}
END_TEST

/* Attention of one query head in the device's order gives the CPU reference's bits (scores,
 * softmax with f16 weights, value lanes and their sum), for prompt positions and generated
 * tokens, head sizes 32, 64 and 128 and contexts from 1 to 300 positions. */
START_TEST(test_attention_gives_the_cpu_bits) {
        enum { MAX_POS = 300, MAX_HD = 128 };
        static uint16_t k[MAX_POS * MAX_HD], v[MAX_POS * MAX_HD];
        static const uint16_t *krows[MAX_POS], *vrows[MAX_POS];
        static float q[MAX_HD], q16[MAX_HD], scores[MAX_POS + 16], host_scores[MAX_POS], lanes[64 * MAX_HD], want[MAX_HD],
                got[MAX_HD];
        static int32_t table[MAX_POS / 16 + 1];
        static const uint32_t head_sizes[] = { 32, 64, 128 };
        for (uint32_t b = 0; b <= MAX_POS / 16; b++)
                table[b] = (int32_t) b;
        for (size_t h = 0; h < 3; h++)
                for (int rep = 0; rep < 40; rep++) {
                        uint32_t hd = head_sizes[h], pos = rep < 20 ? (uint32_t) rep : next_u32() % MAX_POS;
                        bool generated = rep % 2;
                        float scale = 1.0f / sqrtf((float) hd);
                        for (uint32_t i = 0; i < (pos + 1) * hd; i++) {
                                k[i] = f32_to_f16(next_float(3.0f));
                                v[i] = f32_to_f16(next_float(2.0f));
                        }
                        for (uint32_t j = 0; j <= pos; j++) {
                                krows[j] = k + j * hd;
                                vrows[j] = v + j * hd;
                        }
                        for (uint32_t i = 0; i < hd; i++) {
                                q[i] = next_float(4.0f);
                                q16[i] = f16_to_f32(f32_to_f16(q[i]));
                        }
                        struct f16_rows keys = { k, table, 16, hd, 16 * (size_t) hd, NULL }, values = { v, table, 16, hd, 16 * (size_t) hd, NULL };
                        dot_kernels_scalar.attn_scores(&keys, pos + 1, q16, hd, 1, hd, generated, scale, scores, MAX_POS + 16);
                        dot_kernels_scalar.softmax_f16(scores, pos + 1);
                        dot_kernels_scalar.attn_values(&values, pos + 1, scores, MAX_POS + 16, 1, hd, generated ? 64 : 16, 0, 16,
                                                       lanes, 64 * (size_t) hd);
                        dot_kernels_scalar.sum_lanes(lanes, hd, pos + 1 < 16 ? pos + 1 : 16, hd, want);
                        host_attention(krows, vrows, pos, q, hd, generated, scale, host_scores, got);
                        for (uint32_t i = 0; i < hd; i++)
                                ck_assert_msg(f32_to_bits(got[i]) == f32_to_bits(want[i]),
                                              "head size %u, position %u, %s: element %u is %.9g in the device's order, %.9g on the CPU",
                                              hd, pos, generated ? "generated" : "prompt", i, got[i], want[i]);
                }
}
END_TEST

int main(void) {
        Suite *s = suite_create("gpu-math");
        TCase *tc = tcase_create("host model");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_f16_conversions);
        tcase_add_test(tc, test_quantization_gives_the_cpu_bits);
        tcase_add_test(tc, test_dequant_gives_the_cpu_values);
        tcase_add_test(tc, test_row_products_give_the_cpu_bits);
        tcase_add_test(tc, test_k_relayout_gives_the_file_values);
        tcase_add_test(tc, test_k_products_match_exact);
        tcase_add_test(tc, test_float_rows_match_double);
        tcase_add_test(tc, test_exp_silu_rope_give_the_cpu_bits);
        tcase_add_test(tc, test_attention_gives_the_cpu_bits);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
