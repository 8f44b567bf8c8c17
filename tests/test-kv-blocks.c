/* SPDX-License-Identifier: MIT */
/* The block pool and prefix cache: reference counts, LRU reuse, chained hashes that match
 * only identical prefixes, the uncached last token, eviction, reset. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>

#include "kv-blocks.h"

#define BS 4

static struct kv_blocks *new_pool(uint32_t n_blocks, bool caching) {
        struct kv_blocks *kv;
        struct error err;
        ck_assert_int_eq(kv_blocks_new(n_blocks, BS, caching, &kv, &err), 0);
        return kv;
}

static void fill(int32_t *tokens, uint32_t n, int32_t base) {
        for (uint32_t i = 0; i < n; i++)
                tokens[i] = base + (int32_t) i;
}

START_TEST(test_allocate_and_release) {
        struct kv_blocks *kv = new_pool(8, false);
        struct kv_block_list a = { 0 }, b = { 0 };
        ck_assert_uint_eq(kv_blocks_needed(kv, &a, 9), 3);
        ck_assert_int_eq(kv_blocks_allocate(kv, &a, 9), 0);
        ck_assert_uint_eq(a.n, 3);
        ck_assert_uint_eq(kv_blocks_n_free(kv), 5);
        ck_assert_int_eq(kv_blocks_allocate(kv, &a, 12), 0); /* still 3 blocks */
        ck_assert_uint_eq(a.n, 3);
        ck_assert_int_eq(kv_blocks_allocate(kv, &b, 24), -ENOSPC); /* needs 6, 5 free */
        ck_assert_uint_eq(b.n, 0);
        ck_assert_uint_eq(kv_blocks_n_free(kv), 5);
        ck_assert_int_eq(kv_blocks_allocate(kv, &b, 20), 0);
        ck_assert_uint_eq(kv_blocks_n_free(kv), 0);
        for (uint32_t i = 0; i < a.n; i++)
                for (uint32_t j = 0; j < b.n; j++)
                        ck_assert_int_ne(a.ids[i], b.ids[j]);
        kv_blocks_release(kv, &a);
        kv_blocks_release(kv, &b);
        ck_assert_uint_eq(kv_blocks_n_free(kv), 8);
        kv_block_list_free(&a);
        kv_block_list_free(&b);
        kv_blocks_free(kv);
}
END_TEST

START_TEST(test_prefix_hits) {
        struct kv_blocks *kv = new_pool(16, true);
        struct kv_block_list a = { 0 }, b = { 0 }, c = { 0 };
        int32_t t[20], u[20];
        fill(t, 20, 100);
        fill(u, 20, 100);
        u[9] = 7; /* differs inside the third block */

        ck_assert_int_eq(kv_blocks_match_prefix(kv, &a, t, 18), 0);
        ck_assert_int_eq(kv_blocks_allocate(kv, &a, 18), 0);
        kv_blocks_commit(kv, &a, t, 18); /* 4 full blocks cached */

        /* the same prompt hits all four full blocks; the last token stays uncached */
        ck_assert_int_eq(kv_blocks_match_prefix(kv, &b, t, 18), 16);
        ck_assert_uint_eq(b.n, 4);
        for (uint32_t i = 0; i < 4; i++)
                ck_assert_int_eq(b.ids[i], a.ids[i]);
        /* exactly 16 tokens: at most 12 from the cache, one token must be computed */
        kv_blocks_release(kv, &b);
        ck_assert_int_eq(kv_blocks_match_prefix(kv, &b, t, 16), 12);
        kv_blocks_release(kv, &b);
        /* a different third block ends the match after two blocks */
        ck_assert_int_eq(kv_blocks_match_prefix(kv, &c, u, 18), 8);
        ck_assert_uint_eq(c.n, 2);

        struct kv_blocks_stats st;
        kv_blocks_stats(kv, &st);
        ck_assert_uint_eq(st.n_cached, 4);
        ck_assert_uint_eq(st.hit_tokens, 16 + 12 + 8);
        ck_assert_uint_eq(st.query_tokens, 18 + 18 + 16 + 18);

        ck_assert_int_eq(kv_blocks_reset_prefix_cache(kv), -EBUSY);
        kv_blocks_release(kv, &a);
        kv_blocks_release(kv, &c);
        ck_assert_uint_eq(kv_blocks_n_free(kv), 16);
        /* freed blocks keep their contents: still a hit */
        ck_assert_int_eq(kv_blocks_match_prefix(kv, &b, t, 18), 16);
        kv_blocks_release(kv, &b);
        ck_assert_int_eq(kv_blocks_reset_prefix_cache(kv), 0);
        ck_assert_int_eq(kv_blocks_match_prefix(kv, &b, t, 18), 0);
        kv_block_list_free(&a);
        kv_block_list_free(&b);
        kv_block_list_free(&c);
        kv_blocks_free(kv);
}
END_TEST

START_TEST(test_eviction_order) {
        struct kv_blocks *kv = new_pool(4, true);
        struct kv_block_list a = { 0 }, b = { 0 };
        int32_t t[9], u[9];
        fill(t, 9, 1);
        fill(u, 9, 50);
        ck_assert_int_eq(kv_blocks_allocate(kv, &a, 9), 0); /* 3 blocks */
        kv_blocks_commit(kv, &a, t, 9);
        kv_blocks_release(kv, &a); /* tail released first: evicted first */
        /* 3 new blocks: the free untouched block, then a's third and second block */
        ck_assert_int_eq(kv_blocks_allocate(kv, &b, 12), 0);
        kv_blocks_commit(kv, &b, u, 8);
        kv_blocks_release(kv, &b);
        /* a's first block survived: a one-block prefix still hits */
        ck_assert_int_eq(kv_blocks_match_prefix(kv, &a, t, 9), 4);
        kv_blocks_release(kv, &a);
        kv_block_list_free(&a);
        kv_block_list_free(&b);
        kv_blocks_free(kv);
}
END_TEST

/* Random traffic: reference counts never go wrong and everything comes back. */
START_TEST(test_random_traffic) {
        struct kv_blocks *kv = new_pool(64, true);
        struct kv_block_list lists[8] = { 0 };
        int32_t tokens[8][64];
        uint32_t len[8] = { 0 };
        uint64_t state = 42;
        for (int step = 0; step < 20000; step++) {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                uint32_t i = (uint32_t) (state >> 33) % 8, action = (uint32_t) (state >> 40) % 3;
                if (action == 0 || len[i] >= 60) {
                        kv_blocks_release(kv, &lists[i]);
                        len[i] = 0;
                        continue;
                }
                if (len[i] == 0) {
                        uint32_t n = 5 + (uint32_t) (state >> 20) % 30;
                        for (uint32_t j = 0; j < 64; j++)
                                tokens[i][j] = (int32_t) ((state >> 50) % 3 * 1000 + j); /* few distinct prefixes */
                        int hit = kv_blocks_match_prefix(kv, &lists[i], tokens[i], n);
                        ck_assert_int_ge(hit, 0);
                        ck_assert_int_lt(hit, (int) n);
                        if (kv_blocks_allocate(kv, &lists[i], n) < 0) {
                                kv_blocks_release(kv, &lists[i]);
                                continue;
                        }
                        len[i] = n;
                } else if (kv_blocks_allocate(kv, &lists[i], len[i] + 1) == 0)
                        len[i]++;
                kv_blocks_commit(kv, &lists[i], tokens[i], len[i]);
        }
        for (int i = 0; i < 8; i++) {
                kv_blocks_release(kv, &lists[i]);
                kv_block_list_free(&lists[i]);
        }
        ck_assert_uint_eq(kv_blocks_n_free(kv), 64);
        ck_assert_int_eq(kv_blocks_reset_prefix_cache(kv), 0);
        kv_blocks_free(kv);
}
END_TEST

int main(void) {
        Suite *s = suite_create("kv-blocks");
        TCase *tc = tcase_create("kv-blocks");
        tcase_add_test(tc, test_allocate_and_release);
        tcase_add_test(tc, test_prefix_hits);
        tcase_add_test(tc, test_eviction_order);
        tcase_add_test(tc, test_random_traffic);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
