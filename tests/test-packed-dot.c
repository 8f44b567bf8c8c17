/* SPDX-License-Identifier: MIT */
/* The packed product on packed weights (cpu/packed-weights.h, dot.h dot_packed_fn): the
 * repacked layout holds every quant where it should, the per-lane corrections are the
 * activation's lane sums times the bias, the test's own statement of llama.cpp's x86 order
 * (eight lanes, lanes_sum8) gives the bits of the AVX2 and AVX-512 single products (whose
 * tiles test-kernels holds to those bits), the scalar reference gives the formula's bits and
 * stays within rounding of the exact value, and every set, the scalar one included, gives
 * the single products' bits on odd shapes; the same for the single-accumulator product against its
 * reference. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dot.h"
#include "float16.h"
#include "packed-weights.h"
#include "tensor-types.h"
#include "test-random.h"

/* Rows mostly up to 50 blocks; some wider than the kernels unpack once per group. */
#define USUAL_BLOCKS 50
#define MAX_BLOCKS (PACKED_UNPACK_MAX_BLOCKS + 3)
#define MAX_ROWS 72
#define MAX_TOKENS 12

static const enum tensor_type types[] = { TENSOR_Q4_0, TENSOR_Q4_1, TENSOR_Q5_0, TENSOR_Q5_1, TENSOR_Q8_0 };
#define N_TYPES (sizeof(types) / sizeof(types[0]))


static bool has_m(enum tensor_type type) {
        return type == TENSOR_Q4_1 || type == TENSOR_Q5_1;
}

/* n_rows random rows of n_blocks blocks, row_bytes apart; extreme makes every quant the
 * largest magnitude its type has (15 - 8, 15, -16, 31, or -128 for Q8_0) to catch saturation. */
static void random_rows(enum tensor_type type, uint8_t *rows, size_t row_bytes, size_t n_rows, size_t n_blocks,
                        bool extreme) {
        size_t block_bytes = tensor_type_info(type)->block_bytes;
        for (size_t r = 0; r < n_rows; r++)
                for (size_t b = 0; b < n_blocks; b++) {
                        uint8_t *p = rows + r * row_bytes + b * block_bytes;
                        for (size_t i = 0; i < block_bytes; i++)
                                p[i] = extreme ? (type == TENSOR_Q8_0 ? 0x80 : type == TENSOR_Q5_0 ? 0x00 : 0xff) : (uint8_t) next_u32();
                        f16_bits d = f32_to_f16(next_float(0.05f)), m = f32_to_f16(next_float(0.1f));
                        memcpy(p, &d, 2);
                        if (has_m(type))
                                memcpy(p + 2, &m, 2);
                }
}

/* Activations as the runner makes them: q8_1 blocks, their d and s as floats, their lanes'
 * corrections. */
struct acts {
        struct block_q8_1 xq[MAX_TOKENS * 2 * MAX_BLOCKS];
        float ds[MAX_TOKENS * 2 * MAX_BLOCKS * 2];
        int32_t corrections[MAX_TOKENS * 2 * MAX_BLOCKS * PACKED_CORRECTIONS];
        int32_t block_sums[MAX_TOKENS * 2 * MAX_BLOCKS];
};

static void random_acts(struct acts *a, size_t n_blocks_total, bool extreme) {
        float x[QUANT_BLOCK];
        for (size_t b = 0; b < n_blocks_total; b++) {
                float scale = (float) (1 + next_u32() % 8);
                for (int i = 0; i < QUANT_BLOCK; i++)
                        x[i] = extreme ? (i % 3 ? scale : -scale) : next_float(scale);
                dot_kernels_scalar.quantize_q8_1(x, &a->xq[b], &a->ds[2 * b], QUANT_BLOCK);
        }
        packed_activation_corrections(a->xq, n_blocks_total, a->corrections);
        packed_block_sums(a->xq, n_blocks_total, a->block_sums);
}

/* The element-wise quants of a row's block as integers (weights as their type defines them). */
static void row_block_quants(enum tensor_type type, const uint8_t *block, int q[QUANT_BLOCK], float *d, float *m) {
        if (type == TENSOR_Q8_0) {
                const struct block_q8_0 *w = (const void *) block;
                for (int j = 0; j < QUANT_BLOCK; j++)
                        q[j] = w->qs[j];
                *d = f16_to_f32(w->d);
                *m = 0.0f;
                return;
        }
        if (type == TENSOR_Q5_0 || type == TENSOR_Q5_1) {
                const struct block_q5_0 *w0 = (const void *) block;
                const struct block_q5_1 *w1 = (const void *) block;
                for (unsigned j = 0; j < QUANT_BLOCK; j++)
                        q[j] = type == TENSOR_Q5_0 ? (int) q5_element(w0->qs, w0->qh, j) - 16 : (int) q5_element(w1->qs, w1->qh, j);
        } else {
                const uint8_t *qs = type == TENSOR_Q4_1 ? ((const struct block_q4_1 *) (const void *) block)->qs
                                                        : ((const struct block_q4_0 *) (const void *) block)->qs;
                int offset = type == TENSOR_Q4_0 ? 8 : 0;
                for (int j = 0; j < QUANT_BLOCK / 2; j++) {
                        q[j] = (qs[j] & 15) - offset;
                        q[j + 16] = (qs[j] >> 4) - offset;
                }
        }
        f16_bits dh, mh = 0;
        memcpy(&dh, block, 2);
        if (has_m(type))
                memcpy(&mh, block + 2, 2);
        *d = f16_to_f32(dh);
        *m = f16_to_f32(mh);
}

/* dot.h's formula straight from a GGUF row: eight lanes of four elements, one float
 * accumulator each, summed by lanes_sum8(); and the exact value in double (with the bound
 * its float rounding can reach). */
static float formula_from_row(enum tensor_type type, const uint8_t *row, const struct block_q8_1 *act, size_t n_blocks,
                              double *exact, double *bound) {
        size_t block_bytes = tensor_type_info(type)->block_bytes;
        float lanes[PACKED_LANES] = { 0 }, off = 0.0f;
        double e = 0.0, magnitude = 0.0;
        for (size_t b = 0; b < n_blocks; b++) {
                int q[QUANT_BLOCK];
                float d, m;
                row_block_quants(type, row + b * block_bytes, q, &d, &m);
                float da = f16_to_f32(act[b].d), sa = f16_to_f32(act[b].s);
                for (int l = 0; l < PACKED_LANES; l++) {
                        int32_t isum = 0;
                        for (int j = 4 * l; j < 4 * l + 4; j++)
                                isum += q[j] * act[b].qs[j];
                        lanes[l] = fmaf((float) isum, d * da, lanes[l]);
                        e += (double) isum * d * da;
                        magnitude += fabs((double) isum * d * da);
                }
                if (has_m(type)) {
                        off = fmaf(m, sa, off);
                        e += (double) m * sa;
                        magnitude += fabs((double) m * sa);
                }
        }
        *exact = e;
        /* per block: the scale product's rounding and the lane's sum's, each at most 2^-24
         * relative; then the lanes' tree and the offset */
        *bound = magnitude * ldexp(2.0 * (double) n_blocks + 8.0, -24);
        return has_m(type) ? lanes_sum8(lanes) + off : lanes_sum8(lanes);
}

/* The x86 set whose single products every packed set must match: AVX-512 VNNI, the set the
 * fidelity test runs on, where the CPU has it; else AVX2; NULL elsewhere. */
static const struct dot_kernels *x86_single_products(void) {
        const struct dot_kernels *k = dot_kernels_by_name("avx512vnni");
        return k ? k : dot_kernels_by_name("avx2");
}

static uint8_t rows_buf[MAX_ROWS * (MAX_BLOCKS * 34 + 8)];
static struct acts acts;

START_TEST(test_repacked_layout) {
        for (size_t ti = 0; ti < N_TYPES; ti++) {
                enum tensor_type type = types[ti];
                size_t n_rows = 37, n_blocks = 5, row_bytes = tensor_row_bytes(type, n_blocks * QUANT_BLOCK) + 6;
                random_rows(type, rows_buf, row_bytes, n_rows, n_blocks, false);
                struct packed_weights p;
                ck_assert_int_eq(packed_weights_build(type, rows_buf, row_bytes, n_rows, n_blocks * QUANT_BLOCK, &p), 0);
                ck_assert_uint_eq(p.n_groups, 3);
                ck_assert_uint_eq((uintptr_t) p.data % PACKED_ALIGN, 0);
                ck_assert_uint_eq(p.group_bytes % PACKED_ALIGN, 0);
                for (size_t r = 0; r < p.n_groups * PACKED_ROWS; r++)
                        for (size_t b = 0; b < n_blocks; b++) {
                                int want[QUANT_BLOCK] = { 0 };
                                float d = 0.0f, m = 0.0f;
                                if (r < n_rows)
                                        row_block_quants(type, rows_buf + r * row_bytes + b * tensor_type_info(type)->block_bytes, want, &d,
                                                         &m);
                                const uint8_t *rec = p.data + r / PACKED_ROWS * p.group_bytes + b * p.quant_bytes;
                                const f16_bits *s = (const f16_bits *) (p.data + r / PACKED_ROWS * p.group_bytes +
                                                                        n_blocks * p.quant_bytes + b * p.scale_bytes);
                                unsigned lane = r % PACKED_ROWS;
                                for (int j = 0; j < QUANT_BLOCK; j++) {
                                        int got;
                                        if (type == TENSOR_Q8_0)
                                                got = rec[j / 4 * 64 + 4 * lane + j % 4] - 128;
                                        else {
                                                int k = j % 16;
                                                uint8_t byte = rec[k / 4 * 64 + 4 * lane + k % 4];
                                                got = j < 16 ? byte & 15 : byte >> 4;
                                                if (type == TENSOR_Q5_0 || type == TENSOR_Q5_1) /* bit j / 4 of byte j % 4 */
                                                        got |= (rec[4 * 64 + 4 * lane + j % 4] >> (j / 4) & 1) << 4;
                                                got -= packed_quant_bias(type);
                                        }
                                        if (r >= n_rows) /* padding rows are zero bytes */
                                                want[j] = -packed_quant_bias(type);
                                        ck_assert_msg(got == want[j], "%s row %zu block %zu element %d: %d vs %d",
                                                      tensor_type_info(type)->name, r, b, j, got, want[j]);
                                }
                                ck_assert(f16_to_f32(s[lane]) == d || (r >= n_rows && s[lane] == 0));
                                if (has_m(type))
                                        ck_assert(f16_to_f32(s[PACKED_ROWS + lane]) == m || (r >= n_rows && s[PACKED_ROWS + lane] == 0));
                        }
                /* and each row comes back as the bytes it was made from */
                size_t gguf_row_bytes = tensor_row_bytes(type, n_blocks * QUANT_BLOCK);
                for (size_t r = 0; r < n_rows; r++) {
                        uint8_t back[5 * sizeof(struct block_q8_0)];
                        memset(back, 0xa5, sizeof(back));
                        packed_weights_row(&p, r, back);
                        ck_assert_msg(memcmp(back, rows_buf + r * row_bytes, gguf_row_bytes) == 0, "%s row %zu",
                                      tensor_type_info(type)->name, r);
                }
                packed_weights_free(&p);
                ck_assert_ptr_null(p.data);
        }
        struct packed_weights p;
        ck_assert_int_lt(packed_weights_build(TENSOR_F32, rows_buf, 128, 4, 32, &p), 0);
        ck_assert_int_lt(packed_weights_build(TENSOR_Q4_1, rows_buf, 20, 4, 48, &p), 0);
}
END_TEST

/* The single-accumulator product's reference for a Q4_0 or Q8_0 row. */
static float single_reference(enum tensor_type type, const uint8_t *row, const struct block_q8_1 *act, size_t n_blocks) {
        return type == TENSOR_Q4_0 ? dot_single_q4_0_reference(row, act, n_blocks) : dot_single_q8_0_reference(row, act, n_blocks);
}

static bool single_type(enum tensor_type type) {
        return type == TENSOR_Q4_0 || type == TENSOR_Q8_0;
}

/* The scalar reference: the formula's bits, and the exact value to within its rounding; with
 * single, the scalar set's single-accumulator product on Q4_0 and Q8_0, reading the packed
 * bytes, has the bits of dot_single_*_reference(), which is as close to the exact value. */
static void check_scalar_reference(bool single) {
        for (size_t ti = 0; ti < N_TYPES; ti++)
                for (int rep = 0; rep < 40; rep++) {
                        enum tensor_type type = types[ti];
                        if (single && !single_type(type))
                                break;
                        bool extreme = rep % 10 == 9;
                        size_t n_rows = 1 + next_u32() % MAX_ROWS, n_blocks = 1 + next_u32() % USUAL_BLOCKS;
                        size_t row_bytes = tensor_row_bytes(type, n_blocks * QUANT_BLOCK);
                        unsigned n_tokens = 1 + next_u32() % MAX_TOKENS;
                        random_rows(type, rows_buf, row_bytes, n_rows, n_blocks, extreme);
                        random_acts(&acts, n_tokens * n_blocks, extreme);
                        struct packed_weights p;
                        ck_assert_int_eq(packed_weights_build(type, rows_buf, row_bytes, n_rows, n_blocks * QUANT_BLOCK, &p), 0);
                        static float out[MAX_TOKENS * MAX_ROWS];
                        struct packed_activations a = { acts.xq, acts.ds, acts.corrections, n_blocks, acts.block_sums };
                        (single ? dot_kernels_scalar.packed_single_accumulator : dot_packed_kernel_for(&dot_kernels_scalar, type))(
                                &p, 0, p.n_groups, &a, n_tokens, out, n_rows, false);
                        for (unsigned t = 0; t < n_tokens; t++)
                                for (size_t r = 0; r < n_rows; r++) {
                                        const uint8_t *row = rows_buf + r * row_bytes;
                                        double exact, bound;
                                        float want = formula_from_row(type, row, acts.xq + t * n_blocks, n_blocks, &exact, &bound);
                                        if (single)
                                                want = single_reference(type, row, acts.xq + t * n_blocks, n_blocks);
                                        float got = out[t * n_rows + r];
                                        ck_assert_msg(memcmp(&got, &want, sizeof(got)) == 0, "%s%s row %zu token %u: %a vs %a",
                                                      single ? "single " : "", tensor_type_info(type)->name, r, t, got, want);
                                        ck_assert_msg(fabs((double) got - exact) <= bound,
                                                      "%s%s row %zu token %u: %.9g vs exact %.17g (bound %g)", single ? "single " : "",
                                                      tensor_type_info(type)->name, r, t, got, exact, bound);
                                }
                        packed_weights_free(&p);
                }
}

START_TEST(test_reference_matches_formula) {
        check_scalar_reference(false);
}
END_TEST

START_TEST(test_single_accumulator_reference) {
        check_scalar_reference(true);
}
END_TEST

/* The formula is llama.cpp's x86 order as our x86 single products (and so their tiles)
 * compute it: bit for bit against every x86 set this CPU has, on random and extreme data. */
START_TEST(test_formula_matches_x86_single_products) {
        static const char *const names[] = DOT_X86_SET_NAMES;
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
                const struct dot_kernels *k = dot_kernels_by_name(names[i]);
                if (!k) {
                        fprintf(stderr, "SKIP part: this CPU lacks %s; the formula was not compared with it\n", names[i]);
                        continue;
                }
                for (size_t ti = 0; ti < N_TYPES; ti++)
                        for (int rep = 0; rep < 200; rep++) {
                                enum tensor_type type = types[ti];
                                bool extreme = rep % 10 == 9;
                                size_t n_blocks = 1 + next_u32() % USUAL_BLOCKS;
                                size_t row_bytes = tensor_row_bytes(type, n_blocks * QUANT_BLOCK);
                                random_rows(type, rows_buf, row_bytes, 1, n_blocks, extreme);
                                random_acts(&acts, n_blocks, extreme);
                                double exact, bound;
                                float want = formula_from_row(type, rows_buf, acts.xq, n_blocks, &exact, &bound);
                                float got = dot_kernel_for(k, type)(rows_buf, acts.xq, n_blocks);
                                ck_assert_msg(memcmp(&got, &want, sizeof(got)) == 0, "%s %s blocks %zu: %a vs formula %a", k->name,
                                              tensor_type_info(type)->name, n_blocks, got, want);
                        }
        }
}
END_TEST

/* One packed set against the single products: random shapes (rows not a multiple of
 * sixteen), rows wider than the kernels unpack once, group sub-ranges, 1..MAX_TOKENS
 * tokens, strided tokens, output strides wider than the rows, accumulation; rows outside the range stay untouched. The expected
 * bits are those of x86_single_products() where the CPU has one, else the formula's; with
 * single_acc, the set's single-accumulator product on Q4_0 and Q8_0 against
 * dot_single_*_reference(). */
static void compare_set(const struct dot_kernels *k, bool single_acc) {
        static float want[MAX_TOKENS * (MAX_ROWS + 9)], got[MAX_TOKENS * (MAX_ROWS + 9)];
        const struct dot_kernels *single = x86_single_products();
        for (size_t ti = 0; ti < N_TYPES; ti++)
                for (int rep = 0; rep < 300; rep++) {
                        enum tensor_type type = types[ti];
                        if (single_acc && !single_type(type))
                                continue;
                        bool extreme = rep % 25 == 24;
                        size_t n_rows = rep < 8 * 9 ? (size_t) (rep / 8) * 8 + 1 + (size_t) (rep % 3) : 1 + next_u32() % MAX_ROWS;
                        size_t n_blocks = rep % 10 == 5 ? PACKED_UNPACK_MAX_BLOCKS + 1 + next_u32() % 3
                                                        : 1 + next_u32() % USUAL_BLOCKS;
                        size_t row_bytes = tensor_row_bytes(type, n_blocks * QUANT_BLOCK) + 2 * (next_u32() % 3);
                        unsigned n_tokens = 1 + (unsigned) rep % MAX_TOKENS;
                        size_t stride = n_blocks * (1 + rep % 2); /* every other token's blocks skipped */
                        size_t out_stride = n_rows + next_u32() % 9;
                        bool accumulate = rep % 3 == 1;
                        random_rows(type, rows_buf, row_bytes, n_rows, n_blocks, extreme);
                        random_acts(&acts, n_tokens * stride, extreme);
                        struct packed_weights p;
                        ck_assert_int_eq(packed_weights_build(type, rows_buf, row_bytes, n_rows, n_blocks * QUANT_BLOCK, &p), 0);
                        p.keep_cached = rep % 4 < 2; /* both kinds of prefetch, which must not change a bit */
                        uint64_t g0 = next_u32() % p.n_groups, g1 = g0 + 1 + next_u32() % (p.n_groups - g0);
                        for (size_t i = 0; i < n_tokens * out_stride; i++)
                                want[i] = got[i] = next_float(1.0f);
                        for (unsigned t = 0; t < n_tokens; t++)
                                for (size_t r = g0 * PACKED_ROWS; r < g1 * PACKED_ROWS && r < n_rows; r++) {
                                        const uint8_t *row = rows_buf + r * row_bytes;
                                        const struct block_q8_1 *act = acts.xq + t * stride;
                                        double exact, bound;
                                        float v = single_acc ? single_reference(type, row, act, n_blocks)
                                                  : single   ? dot_kernel_for(single, type)(row, act, n_blocks)
                                                             : formula_from_row(type, row, act, n_blocks, &exact, &bound);
                                        float *o = &want[t * out_stride + r];
                                        *o = accumulate ? *o + v : v;
                                }
                        struct packed_activations a = { acts.xq, acts.ds, acts.corrections, stride, acts.block_sums };
                        (single_acc ? k->packed_single_accumulator : dot_packed_kernel_for(k, type))(&p, g0, g1, &a, n_tokens, got,
                                                                                                     out_stride, accumulate);
                        for (unsigned t = 0; t < n_tokens; t++)
                                for (size_t r = 0; r < out_stride; r++) {
                                        size_t i = t * out_stride + r;
                                        ck_assert_msg(memcmp(&got[i], &want[i], sizeof(float)) == 0,
                                                      "%s %s%s rows %zu blocks %zu tokens %u groups [%lu, %lu) row %zu token %u: %a vs %s %a",
                                                      k->name, single_acc ? "single " : "", tensor_type_info(type)->name, n_rows,
                                                      n_blocks, n_tokens, (unsigned long) g0, (unsigned long) g1, r, t, got[i],
                                                      single_acc ? "reference" : single ? single->name : "formula", want[i]);
                                }
                        packed_weights_free(&p);
                }
}

/* compare_set() for the scalar set and every x86 set this CPU has. */
static void compare_every_set(bool single_acc) {
        compare_set(&dot_kernels_scalar, single_acc);
        static const char *const names[] = DOT_X86_SET_NAMES;
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
                const struct dot_kernels *k = dot_kernels_by_name(names[i]);
                if (!k) {
                        fprintf(stderr, "SKIP part: this CPU lacks %s; its %s product was not compared\n", names[i],
                                single_acc ? "single-accumulator" : "packed");
                        continue;
                }
                compare_set(k, single_acc);
        }
}

START_TEST(test_sets_match_single_products) {
        if (!x86_single_products())
                fprintf(stderr, "SKIP part: no x86 single products here; the sets were compared with the formula\n");
        compare_every_set(false);
        const struct dot_kernels *selected;
        ck_assert_int_eq(dot_kernels_select(&selected, NULL), 0);
        compare_set(selected, false);
}
END_TEST

START_TEST(test_sets_match_single_accumulator_reference) {
        compare_every_set(true);
}
END_TEST

START_TEST(test_activation_corrections) {
        random_acts(&acts, 3 * MAX_BLOCKS, true);
        random_acts(&acts, 3 * MAX_BLOCKS, false);
        for (size_t b = 0; b < 3 * MAX_BLOCKS; b++)
                for (int l = 0; l < PACKED_LANES; l++) {
                        int32_t s = 0;
                        for (int j = 4 * l; j < 4 * l + 4; j++)
                                s += acts.xq[b].qs[j];
                        const int32_t *c = acts.corrections + b * PACKED_CORRECTIONS;
                        ck_assert_int_eq(c[packed_correction_offset(TENSOR_Q4_0) + l], -8 * s);
                        ck_assert_int_eq(c[packed_correction_offset(TENSOR_Q8_0) + l], -128 * s);
                        ck_assert_int_eq(c[packed_correction_offset(TENSOR_Q5_0) + l], -16 * s);
                }
        for (size_t b = 0; b < 3 * MAX_BLOCKS; b++) {
                int32_t s = 0;
                for (int j = 0; j < QUANT_BLOCK; j++)
                        s += acts.xq[b].qs[j];
                ck_assert_int_eq(acts.block_sums[b], s);
        }
}
END_TEST

int main(void) {
        Suite *s = suite_create("packed-dot");
        TCase *tc = tcase_create("packed-dot");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_repacked_layout);
        tcase_add_test(tc, test_activation_corrections);
        tcase_add_test(tc, test_formula_matches_x86_single_products);
        tcase_add_test(tc, test_reference_matches_formula);
        tcase_add_test(tc, test_sets_match_single_products);
        tcase_add_test(tc, test_single_accumulator_reference);
        tcase_add_test(tc, test_sets_match_single_accumulator_reference);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
