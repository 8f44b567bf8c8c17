/* SPDX-License-Identifier: MIT */
/* encode's pooling against a plain reference: which states each type reads, mean, last and
 * cls over states fed in chunks, dimensions, normalization, and restarts after preemption. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pooling.h"

#define N_EMBD 8
#define N_PROMPT 5

static float state(uint32_t position, uint32_t i) {
        return (float) sin(0.7 * position + 1.3 * i) * (float) (1 + position);
}

/* The reference: the pooled vector from every state at once, in double. */
static void reference(enum pooling_type t, const struct pooling_params *pp, double *out, uint32_t *ret_n) {
        uint32_t n = pp->dimensions ? pp->dimensions : N_EMBD, count = 0;
        for (uint32_t i = 0; i < n; i++)
                out[i] = 0;
        for (uint32_t pos = 0; pos < N_PROMPT; pos++) {
                bool read = t == POOLING_MEAN || (t == POOLING_LAST && pos == N_PROMPT - 1) || (t == POOLING_CLS && pos == 0);
                if (!read)
                        continue;
                count++;
                for (uint32_t i = 0; i < n; i++)
                        out[i] += state(pos, i);
        }
        double length = 0;
        for (uint32_t i = 0; i < n; i++) {
                out[i] /= count;
                length += out[i] * out[i];
        }
        for (uint32_t i = 0; pp->normalize && i < n; i++)
                out[i] /= sqrt(length);
        *ret_n = n;
}

START_TEST(test_matches_reference) {
        enum pooling_type t = (enum pooling_type) (_i % _POOLING_MAX);
        struct pooling_params pp = { t, _i / _POOLING_MAX % 2 == 1, _i / (2 * _POOLING_MAX) ? 3 : 0 };
        struct pooler p;
        struct error err;
        ck_assert_int_eq(pooler_init(&p, t, N_EMBD), 0);
        for (int round = 0; round < 2; round++) { /* the second after a preemption */
                if (round)
                        pooler_restart(&p);
                for (uint32_t pos = 0; pos < N_PROMPT; pos++)
                        if (pooling_reads(t, pos, N_PROMPT)) {
                                float row[N_EMBD];
                                for (uint32_t i = 0; i < N_EMBD; i++)
                                        row[i] = state(pos, i);
                                pooler_add(&p, row);
                        }
        }
        float *got;
        uint32_t n, want_n;
        double want[N_EMBD];
        ck_assert_int_eq(pooler_finish(&p, &pp, &got, &n, &err), 0);
        reference(t, &pp, want, &want_n);
        ck_assert_uint_eq(n, want_n);
        for (uint32_t i = 0; i < n; i++)
                ck_assert_msg(fabs(got[i] - want[i]) <= 1e-6 * (1 + fabs(want[i])), "%s, component %u: %g, want %g",
                              pooling_type_name(t), i, got[i], want[i]);
        free(got);
        pooler_done(&p);
}
END_TEST

START_TEST(test_reads_and_refusals) {
        ck_assert(pooling_reads(POOLING_LAST, 4, 5) && !pooling_reads(POOLING_LAST, 3, 5));
        ck_assert(pooling_reads(POOLING_CLS, 0, 5) && !pooling_reads(POOLING_CLS, 1, 5));
        ck_assert(pooling_reads(POOLING_MEAN, 0, 5) && pooling_reads(POOLING_MEAN, 4, 5) && !pooling_reads(POOLING_MEAN, 5, 5));
        enum pooling_type t;
        ck_assert_int_eq(pooling_type_from_string("MEAN", &t), 0);
        ck_assert_int_eq(t, POOLING_MEAN);
        ck_assert_int_eq(pooling_type_from_string("cls", &t), 0);
        ck_assert_int_eq(t, POOLING_CLS);
        ck_assert_int_lt(pooling_type_from_string("max", &t), 0);
        ck_assert_str_eq(pooling_type_name(POOLING_LAST), "last");

        struct pooler p;
        struct error err;
        float *v;
        uint32_t n;
        ck_assert_int_eq(pooler_init(&p, POOLING_MEAN, N_EMBD), 0);
        struct pooling_params pp = { POOLING_MEAN, true, 0 };
        ck_assert_int_lt(pooler_finish(&p, &pp, &v, &n, &err), 0); /* nothing pooled */
        float zero[N_EMBD] = { 0 };
        pooler_add(&p, zero);
        ck_assert_int_eq(pooler_finish(&p, &pp, &v, &n, &err), 0); /* a zero vector stays zero */
        for (uint32_t i = 0; i < n; i++)
                ck_assert(v[i] == 0.0f);
        free(v);
        pp.dimensions = N_EMBD + 1;
        ck_assert_int_lt(pooler_finish(&p, &pp, &v, &n, &err), 0);
        ck_assert_ptr_nonnull(strstr(err.message, "dimensions"));
        pooler_done(&p);
}
END_TEST

int main(void) {
        Suite *s = suite_create("pooling");
        TCase *tc = tcase_create("core");
        tcase_add_loop_test(tc, test_matches_reference, 0, 4 * _POOLING_MAX);
        tcase_add_test(tc, test_reads_and_refusals);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
