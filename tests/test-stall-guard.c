/* SPDX-License-Identifier: MIT */
/* The prefill allowance: unlimited with nothing to protect or nothing learnt, priced like a
 * decode at first, then from mixed steps' measured cost, never below one token. */
#include "config.h"

#include <check.h>
#include <stdlib.h>

#include "stall-guard.h"

START_TEST(test_nothing_to_protect) {
        struct stall_guard g;
        stall_guard_init(&g, 2.0);
        ck_assert_uint_eq(stall_guard_allowance(&g, 0, 256), 256); /* no decodes */
        ck_assert_uint_eq(stall_guard_allowance(&g, 16, 256), 256); /* nothing measured yet */
        stall_guard_init(&g, 0);
        stall_guard_record(&g, 16, 0, 0.080);
        ck_assert_uint_eq(stall_guard_allowance(&g, 16, 256), 256); /* off */
}
END_TEST

START_TEST(test_priced_like_decodes_first) {
        struct stall_guard g;
        stall_guard_init(&g, 2.0);
        stall_guard_record(&g, 16, 0, 0.080); /* 5 ms a decode */
        /* twice a decode-only step leaves room for as many prompt tokens as decodes */
        ck_assert_uint_eq(stall_guard_allowance(&g, 16, 256), 16);
        stall_guard_init(&g, 3.0);
        stall_guard_record(&g, 16, 0, 0.080);
        ck_assert_uint_eq(stall_guard_allowance(&g, 16, 256), 32);
        ck_assert_uint_eq(stall_guard_allowance(&g, 16, 20), 20); /* never above the budget */
}
END_TEST

START_TEST(test_learns_prompt_cost) {
        struct stall_guard g;
        stall_guard_init(&g, 2.0);
        stall_guard_record(&g, 16, 0, 0.080);
        /* 16 prompt tokens took 240 ms beyond the decodes: 15 ms each, so 80 ms buys 5 */
        stall_guard_record(&g, 16, 16, 0.320);
        ck_assert_uint_eq(stall_guard_allowance(&g, 16, 256), 5);
        /* deep in a long prompt a token costs 100 ms: still one token, so it progresses */
        for (int i = 0; i < 20; i++)
                stall_guard_record(&g, 16, 1, 0.180);
        ck_assert_uint_eq(stall_guard_allowance(&g, 16, 256), 1);
        /* cheap again: the estimate follows */
        for (int i = 0; i < 20; i++)
                stall_guard_record(&g, 16, 8, 0.120);
        uint32_t n = stall_guard_allowance(&g, 16, 256);
        ck_assert_msg(n == 15 || n == 16, "allowance %u, expected 16 (15 while the estimate settles)", n);
}
END_TEST

START_TEST(test_noise_does_not_break_it) {
        struct stall_guard g;
        stall_guard_init(&g, 2.0);
        stall_guard_record(&g, 16, 0, 0.080);
        stall_guard_record(&g, 16, 8, 0.050); /* faster than the decodes alone: free prompt tokens */
        ck_assert_uint_eq(stall_guard_allowance(&g, 16, 256), 16); /* priced like decodes again */
        stall_guard_record(&g, 16, 8, 0);     /* a clock that did not move is ignored */
        ck_assert_uint_eq(stall_guard_allowance(&g, 16, 256), 16);
}
END_TEST

int main(void) {
        Suite *s = suite_create("stall-guard");
        TCase *tc = tcase_create("core");
        tcase_add_test(tc, test_nothing_to_protect);
        tcase_add_test(tc, test_priced_like_decodes_first);
        tcase_add_test(tc, test_learns_prompt_cost);
        tcase_add_test(tc, test_noise_does_not_break_it);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
