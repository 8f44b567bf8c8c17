/* SPDX-License-Identifier: MIT */
/* Stop strings: found only where they end inside the new text, in list order; partial
 * matches at the end held back; NUL bytes in the text are ordinary bytes. */
#include "config.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "stop-strings.h"

START_TEST(test_find_in_new_text_only) {
        const char *stops[] = { "world" };
        const char *text = "hello world, hello world";
        size_t at = 0;
        /* the first "world" ends at 11: found when the new text starts at or before byte 10 */
        ck_assert_int_eq(stop_strings_find(stops, 1, text, 11, 10, &at), 0);
        ck_assert_uint_eq(at, 6);
        ck_assert_int_eq(stop_strings_find(stops, 1, text, 11, 0, &at), 0);
        /* all of it seen before: not found again, the second one is */
        ck_assert_int_eq(stop_strings_find(stops, 1, text, 13, 11, &at), -1);
        ck_assert_int_eq(stop_strings_find(stops, 1, text, strlen(text), 11, &at), 0);
        ck_assert_uint_eq(at, 19);
}
END_TEST

START_TEST(test_across_pieces) {
        const char *stops[] = { "abc" };
        /* "a" and "b" came before, "c" is new: the match spans the boundary */
        size_t at = 0;
        ck_assert_int_eq(stop_strings_find(stops, 1, "xxabc", 5, 4, &at), 0);
        ck_assert_uint_eq(at, 2);
}
END_TEST

START_TEST(test_list_order_wins) {
        const char *stops[] = { "later", "early" };
        size_t at = 0;
        ck_assert_int_eq(stop_strings_find(stops, 2, "early later", 11, 0, &at), 0);
        ck_assert_uint_eq(at, 6);
}
END_TEST

START_TEST(test_partial_hold_back) {
        const char *stops[] = { "STOP", "xyz" };
        ck_assert_uint_eq(stop_strings_partial(stops, 2, "abcST", 5), 2);
        ck_assert_uint_eq(stop_strings_partial(stops, 2, "abcSTO", 6), 3);
        ck_assert_uint_eq(stop_strings_partial(stops, 2, "abcx", 4), 1);
        ck_assert_uint_eq(stop_strings_partial(stops, 2, "abc", 3), 0);
        /* a whole stop string is not "partial": find reports it */
        ck_assert_uint_eq(stop_strings_partial(stops, 2, "STOP", 4), 0);
        /* shorter text than the prefix */
        ck_assert_uint_eq(stop_strings_partial(stops, 2, "S", 1), 1);
        ck_assert_uint_eq(stop_strings_partial(stops, 2, "", 0), 0);
}
END_TEST

START_TEST(test_nul_bytes) {
        const char *stops[] = { "end" };
        const char text[] = { 'a', 0, 'e', 'n', 'd' };
        size_t at = 0;
        ck_assert_int_eq(stop_strings_find(stops, 1, text, 5, 2, &at), 0);
        ck_assert_uint_eq(at, 2);
        ck_assert_uint_eq(stop_strings_partial(stops, 1, text, 4), 2);
}
END_TEST

START_TEST(test_longer_than_text) {
        const char *stops[] = { "a much longer stop string" };
        size_t at = 0;
        ck_assert_int_eq(stop_strings_find(stops, 1, "a much", 6, 0, &at), -1);
        ck_assert_uint_eq(stop_strings_partial(stops, 1, "a much", 6), 6);
}
END_TEST

int main(void) {
        Suite *s = suite_create("stop-strings");
        TCase *tc = tcase_create("core");
        tcase_add_test(tc, test_find_in_new_text_only);
        tcase_add_test(tc, test_across_pieces);
        tcase_add_test(tc, test_list_order_wins);
        tcase_add_test(tc, test_partial_hold_back);
        tcase_add_test(tc, test_nul_bytes);
        tcase_add_test(tc, test_longer_than_text);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
