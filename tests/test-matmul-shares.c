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

#define RACE_GROUPS 100000

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
 * meet at the ends of runs, where a take can find its run emptied under it. The same threads
 * race round after round, released together by a barrier (creating them anew each round
 * took longer than a test may under the sanitizers). */
#define SHORT_GROUPS 24
#define SHORT_ROUNDS 3000

struct short_races {
        struct matmul_share shares[MAX_THREADS];
        _Atomic unsigned char taken[SHORT_GROUPS];
        pthread_barrier_t start, done;
};

struct short_racer {
        struct short_races *races;
        unsigned ith;
};

static void *short_race(void *p) {
        struct short_racer *sr = p;
        struct racer r = { sr->races->shares, sr->races->taken, sr->ith, MAX_THREADS, 1 + sr->ith % 2, SHORT_GROUPS };
        for (int round = 0; round < SHORT_ROUNDS; round++) {
                pthread_barrier_wait(&sr->races->start);
                race(&r);
                pthread_barrier_wait(&sr->races->done);
        }
        return NULL;
}

START_TEST(test_short_races) {
        static struct short_races races;
        pthread_t threads[MAX_THREADS];
        struct short_racer racers[MAX_THREADS];
        ck_assert_int_eq(pthread_barrier_init(&races.start, NULL, MAX_THREADS + 1), 0);
        ck_assert_int_eq(pthread_barrier_init(&races.done, NULL, MAX_THREADS + 1), 0);
        for (unsigned t = 0; t < MAX_THREADS; t++) {
                racers[t] = (struct short_racer) { &races, t };
                ck_assert_int_eq(pthread_create(&threads[t], NULL, short_race, &racers[t]), 0);
        }
        for (int round = 0; round < SHORT_ROUNDS; round++) {
                for (int g = 0; g < SHORT_GROUPS; g++)
                        atomic_store(&races.taken[g], 0);
                matmul_shares_reset(races.shares, MAX_THREADS, SHORT_GROUPS);
                pthread_barrier_wait(&races.start);
                pthread_barrier_wait(&races.done);
                for (int g = 0; g < SHORT_GROUPS; g++)
                        ck_assert_msg(races.taken[g] == 1, "round %d: group %d taken %u times", round, g,
                                      (unsigned) races.taken[g]);
        }
        for (unsigned t = 0; t < MAX_THREADS; t++)
                pthread_join(threads[t], NULL);
        pthread_barrier_destroy(&races.start);
        pthread_barrier_destroy(&races.done);
}
END_TEST

int main(void) {
        Suite *s = suite_create("matmul-shares");
        TCase *tc = tcase_create("matmul-shares");
        tcase_set_timeout(tc, 60); /* thousands of thread handovers, slow under the sanitizers */
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
