/* SPDX-License-Identifier: MIT */
/* How threads divide a matmul's groups of rows (cpu/matmul-shares.h): each thread's run is
 * taken in order from its front, a thread with nothing left takes from the back of another's,
 * and with real threads taking at once every group is taken exactly once. */
#include "config.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "matmul-shares.h"

#define MAX_THREADS 4

START_TEST(test_runs_split_the_groups) {
        struct matmul_share shares[3];
        matmul_shares_reset(shares, 3, 37);
        uint64_t first, expect = 12; /* thread 1's run: [12, 24) */
        uint32_t n;
        ck_assert_uint_eq(matmul_share_begin(37, 1, 3), 12);
        while (expect < 24) {
                ck_assert(matmul_shares_take(shares, 1, 3, 5, &first, &n));
                ck_assert_uint_eq(first, expect); /* in order from the front, five at a time */
                ck_assert_uint_eq(n, expect + 5 <= 24 ? 5 : 24 - expect);
                expect += n;
        }
        /* its own run done, thread 1 takes the back of thread 2's [24, 37): half of 13 is 6, at most 5 */
        ck_assert(matmul_shares_take(shares, 1, 3, 5, &first, &n));
        ck_assert_uint_eq(first, 32);
        ck_assert_uint_eq(n, 5);
        /* thread 2 still starts at its front */
        ck_assert(matmul_shares_take(shares, 2, 3, 5, &first, &n));
        ck_assert_uint_eq(first, 24);
        ck_assert_uint_eq(n, 5);
        /* thread 0 takes its whole run at once when it may */
        ck_assert(matmul_shares_take(shares, 0, 3, 100, &first, &n));
        ck_assert_uint_eq(first, 0);
        ck_assert_uint_eq(n, 12);
}
END_TEST

START_TEST(test_one_thread_takes_everything) {
        /* the others never come (preempted): one thread takes their runs from the back */
        struct matmul_share shares[4];
        bool seen[50] = { false };
        matmul_shares_reset(shares, 4, 50);
        uint64_t first, total = 0;
        uint32_t n;
        while (matmul_shares_take(shares, 2, 4, 3, &first, &n)) {
                ck_assert_uint_ge(n, 1);
                ck_assert_uint_le(n, 3);
                for (uint64_t g = first; g < first + n; g++) {
                        ck_assert_uint_lt(g, 50);
                        ck_assert_msg(!seen[g], "group %llu taken twice", (unsigned long long) g);
                        seen[g] = true;
                }
                total += n;
        }
        ck_assert_uint_eq(total, 50);
        ck_assert(!matmul_shares_take(shares, 0, 4, 3, &first, &n)); /* nothing left for the others */
}
END_TEST

START_TEST(test_fewer_groups_than_threads) {
        struct matmul_share shares[4];
        matmul_shares_reset(shares, 4, 2);
        uint64_t first, total = 0;
        uint32_t n;
        for (unsigned t = 0; t < 4; t++)
                while (matmul_shares_take(shares, t, 4, 8, &first, &n))
                        total += n;
        ck_assert_uint_eq(total, 2);
}
END_TEST

#define RACE_GROUPS 200000

struct racer {
        struct matmul_share *shares;
        _Atomic unsigned char *taken;
        unsigned ith, nth;
        uint32_t max_own;
        uint64_t n_groups;
};

static void *race(void *p) {
        struct racer *r = p;
        uint64_t first, own_next = matmul_share_begin(r->n_groups, r->ith, r->nth);
        uint64_t own_end = matmul_share_begin(r->n_groups, r->ith + 1, r->nth);
        uint32_t n;
        while (matmul_shares_take(r->shares, r->ith, r->nth, r->max_own, &first, &n)) {
                if (first >= own_next && first < own_end) {
                        ck_assert_uint_eq(first, own_next); /* its own groups in order */
                        own_next = first + n;
                }
                for (uint64_t g = first; g < first + n; g++)
                        atomic_fetch_add(&r->taken[g], 1);
        }
        return NULL;
}

START_TEST(test_threads_take_each_group_once) {
        unsigned nth = 2 + (unsigned) _i % (MAX_THREADS - 1);
        struct matmul_share shares[MAX_THREADS];
        _Atomic unsigned char *taken = calloc(RACE_GROUPS, sizeof(*taken));
        pthread_t threads[MAX_THREADS];
        struct racer racers[MAX_THREADS];
        ck_assert_ptr_nonnull(taken);
        matmul_shares_reset(shares, nth, RACE_GROUPS);
        for (unsigned t = 0; t < nth; t++) {
                /* one thread takes many at a time, so that the others run out and take from its back */
                racers[t] = (struct racer) { shares, taken, t, nth, t == 0 ? 4096 : 3, RACE_GROUPS };
                ck_assert_int_eq(pthread_create(&threads[t], NULL, race, &racers[t]), 0);
        }
        for (unsigned t = 0; t < nth; t++)
                pthread_join(threads[t], NULL);
        for (uint64_t g = 0; g < RACE_GROUPS; g++)
                ck_assert_msg(taken[g] == 1, "group %llu taken %u times", (unsigned long long) g, (unsigned) taken[g]);
        free(taken);
}
END_TEST

/* Many short matmuls: threads run out at about the same time, so that owners and takers
 * meet at the ends of runs, where a take can find its run emptied under it. */
START_TEST(test_short_races) {
        enum { N_GROUPS = 24, ROUNDS = 3000 };
        struct matmul_share shares[MAX_THREADS];
        _Atomic unsigned char taken[N_GROUPS];
        pthread_t threads[MAX_THREADS];
        struct racer racers[MAX_THREADS];
        for (int round = 0; round < ROUNDS; round++) {
                for (int g = 0; g < N_GROUPS; g++)
                        atomic_init(&taken[g], 0);
                matmul_shares_reset(shares, MAX_THREADS, N_GROUPS);
                for (unsigned t = 0; t < MAX_THREADS; t++) {
                        racers[t] = (struct racer) { shares, taken, t, MAX_THREADS, 1 + t % 2, N_GROUPS };
                        ck_assert_int_eq(pthread_create(&threads[t], NULL, race, &racers[t]), 0);
                }
                for (unsigned t = 0; t < MAX_THREADS; t++)
                        pthread_join(threads[t], NULL);
                for (int g = 0; g < N_GROUPS; g++)
                        ck_assert_msg(taken[g] == 1, "round %d: group %d taken %u times", round, g, (unsigned) taken[g]);
        }
}
END_TEST

int main(void) {
        Suite *s = suite_create("matmul-shares");
        TCase *tc = tcase_create("matmul-shares");
        tcase_add_test(tc, test_runs_split_the_groups);
        tcase_add_test(tc, test_one_thread_takes_everything);
        tcase_add_test(tc, test_fewer_groups_than_threads);
        tcase_add_loop_test(tc, test_threads_take_each_group_once, 0, 6);
        tcase_add_test(tc, test_short_races);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
