/* SPDX-License-Identifier: MIT */
/* When the repacked weights are kept in the caches rather than streamed (cpu/weight-residency.h):
 * the rule, the override and its errors, and the cache size read from this machine. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weight-residency.h"

#define MIB (1ull << 20)

START_TEST(test_kept_when_half_the_cache_holds_them) {
        ck_assert(weight_residency_fits(98 * MIB, 300 * MIB));  /* SmolLM2 Q4_1 on the Intel VM's L3 */
        ck_assert(!weight_residency_fits(98 * MIB, 32 * MIB));  /* and on Zen 4's */
        ck_assert(weight_residency_fits(150 * MIB, 300 * MIB)); /* exactly half */
        ck_assert(!weight_residency_fits(150 * MIB + 1, 300 * MIB));
        ck_assert(!weight_residency_fits(1, 0)); /* a cache of unknown size keeps nothing */
}
END_TEST

START_TEST(test_override) {
        struct error err = { { 0 } };
        bool keep = false;
        uint64_t huge = 1ull << 50; /* no cache holds this: only the override keeps it */
        ck_assert_int_eq(setenv("ASYNCLLM_CPU_WEIGHT_CACHE", "keep", 1), 0);
        ck_assert_int_eq(weight_residency_choose(huge, &keep, &err), 0);
        ck_assert(keep);
        ck_assert_int_eq(setenv("ASYNCLLM_CPU_WEIGHT_CACHE", "stream", 1), 0);
        ck_assert_int_eq(weight_residency_choose(1, &keep, &err), 0);
        ck_assert(!keep);
        ck_assert_int_eq(setenv("ASYNCLLM_CPU_WEIGHT_CACHE", "", 1), 0); /* empty: as unset */
        ck_assert_int_eq(weight_residency_choose(huge, &keep, &err), 0);
        ck_assert(!keep);
        ck_assert_int_eq(setenv("ASYNCLLM_CPU_WEIGHT_CACHE", "Keep", 1), 0);
        ck_assert_int_eq(weight_residency_choose(1, &keep, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "ASYNCLLM_CPU_WEIGHT_CACHE=Keep") && strstr(err.message, "say keep") &&
                              strstr(err.message, "or unset it"),
                      "%s", err.message);
        unsetenv("ASYNCLLM_CPU_WEIGHT_CACHE");
        ck_assert_int_eq(weight_residency_choose(1, &keep, &err), 0);
        ck_assert(keep == weight_residency_fits(1, last_level_cache_bytes()));
}
END_TEST

/* The last level is at least as large as the second: a size misread (its "K" or "M" dropped)
 * would come out far smaller. */
START_TEST(test_last_level_cache_size) {
        long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        uint64_t llc = last_level_cache_bytes();
        if (l2 <= 0 && llc == 0) {
                fprintf(stderr, "SKIP part: neither sysfs nor the C library gives this machine's cache sizes\n");
                return;
        }
        ck_assert_msg(llc >= (uint64_t) (l2 > 0 ? l2 : 1), "last level %llu bytes, L2 %ld", (unsigned long long) llc, l2);
}
END_TEST

int main(void) {
        Suite *s = suite_create("weight-residency");
        TCase *tc = tcase_create("weight-residency");
        tcase_add_test(tc, test_kept_when_half_the_cache_holds_them);
        tcase_add_test(tc, test_override);
        tcase_add_test(tc, test_last_level_cache_size);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
