/* SPDX-License-Identifier: MIT */
/* The NDJSON line reader: the same lines whatever the reads look like, "\r\n" and empty
 * lines, the line limit (reported once, never buffered), invalid UTF-8, the last line
 * without a newline, and the zero-copy interface. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ndjson-reader.h"

#define MAX_EVENTS 64

/* What the reader gave: lines (kind 1) and errors, in order, as text for easy comparison. */
struct events {
        int kind[MAX_EVENTS];
        char *text[MAX_EVENTS];
        size_t n;
};

static void events_clear(struct events *e) {
        for (size_t i = 0; i < e->n; i++)
                free(e->text[i]);
        e->n = 0;
}

static void drain(struct ndjson_reader *r, struct events *e) {
        struct ndjson_line line;
        int q;
        while ((q = ndjson_reader_next(r, &line)) != 0) {
                ck_assert_uint_lt(e->n, MAX_EVENTS);
                e->kind[e->n] = q;
                e->text[e->n] = q == -EMSGSIZE ? strdup("") : strndup(line.data, line.len);
                ck_assert_ptr_nonnull(e->text[e->n]);
                if (q != -EMSGSIZE) {
                        ck_assert_uint_le(line.len, ndjson_reader_max_line(r));
                        ck_assert_int_eq(line.data[line.len], 0);
                }
                e->n++;
        }
}

/* Feeds s[0..len) cut at the given points (ascending), draining after each piece. */
static void feed_cut(size_t max_line, const char *s, size_t len, const size_t *cuts, size_t n_cuts, struct events *e) {
        struct ndjson_reader *r = NULL;
        ck_assert_int_eq(ndjson_reader_new(max_line, &r), 0);
        size_t at = 0;
        for (size_t i = 0; i <= n_cuts; i++) {
                size_t to = i < n_cuts ? cuts[i] : len;
                while (at < to) {
                        ssize_t n = ndjson_reader_feed(r, s + at, to - at);
                        ck_assert_int_gt(n, 0);
                        at += (size_t) n;
                        drain(r, e);
                }
                drain(r, e);
        }
        ndjson_reader_end(r);
        drain(r, e);
        ck_assert_uint_eq(ndjson_reader_pending(r), 0);
        ndjson_reader_free(r);
}

static void assert_events(const struct events *e, const int *kinds, const char *const *texts, size_t n) {
        ck_assert_uint_eq(e->n, n);
        for (size_t i = 0; i < n; i++) {
                ck_assert_int_eq(e->kind[i], kinds[i]);
                ck_assert_str_eq(e->text[i], texts[i]);
        }
}

static const char stream[] = "{\"hello\": {\"protocol\": 1}}\n"
                             "\n"
                             "{\"id\": \"c1\", \"text\": \"caf\xc3\xa9 \xf0\x9f\x98\x80\"}\r\n"
                             "\r\n"
                             "{\"id\": \"c2\"}\n"
                             "last line, no newline";
static const int stream_kinds[] = { 1, 1, 1, 1 };
static const char *const stream_lines[] = {
        "{\"hello\": {\"protocol\": 1}}",
        "{\"id\": \"c1\", \"text\": \"caf\xc3\xa9 \xf0\x9f\x98\x80\"}",
        "{\"id\": \"c2\"}",
        "last line, no newline",
};

START_TEST(test_every_split_point) {
        size_t len = sizeof(stream) - 1;
        struct events e = { 0 };
        for (size_t i = 0; i <= len; i++) {
                feed_cut(1024, stream, len, &i, 1, &e);
                assert_events(&e, stream_kinds, stream_lines, 4);
                events_clear(&e);
        }
        /* every pair of cuts: three reads, lines split across all of them */
        for (size_t i = 0; i <= len; i++)
                for (size_t j = i; j <= len; j++) {
                        size_t cuts[2] = { i, j };
                        feed_cut(1024, stream, len, cuts, 2, &e);
                        assert_events(&e, stream_kinds, stream_lines, 4);
                        events_clear(&e);
                }
        /* one byte at a time */
        size_t cuts[sizeof(stream)];
        for (size_t i = 0; i < len; i++)
                cuts[i] = i + 1;
        feed_cut(1024, stream, len, cuts, len, &e);
        assert_events(&e, stream_kinds, stream_lines, 4);
        events_clear(&e);
}
END_TEST

START_TEST(test_line_limit) {
        /* limit 10: 10 bytes pass, 11 do not; the "\r" before "\n" counts */
        static const char s[] = "0123456789\n"
                                "0123456789A\n"
                                "ok\n"
                                "012345678\r\n"
                                "0123456789\r\n"
                                "a much longer line than the limit, in several reads\n"
                                "after";
        static const int kinds[] = { 1, -EMSGSIZE, 1, 1, -EMSGSIZE, -EMSGSIZE, 1 };
        static const char *const texts[] = { "0123456789", "", "ok", "012345678", "", "", "after" };
        size_t len = sizeof(s) - 1;
        struct events e = { 0 };
        for (size_t i = 0; i <= len; i++) {
                feed_cut(10, s, len, &i, 1, &e);
                assert_events(&e, kinds, texts, 7);
                events_clear(&e);
        }
        size_t cuts[sizeof(s)];
        for (size_t i = 0; i < len; i++)
                cuts[i] = i + 1;
        feed_cut(10, s, len, cuts, len, &e);
        assert_events(&e, kinds, texts, 7);
        events_clear(&e);
}
END_TEST

START_TEST(test_long_line_not_buffered) {
        /* 8 MiB without a newline against a 1 KiB limit: reported once, as soon as the limit
         * is passed, and the reader never offers more room than limit + "\n" + a read. */
        const size_t limit = 1024, total = 8u << 20;
        struct ndjson_reader *r = NULL;
        struct ndjson_line line;
        ck_assert_int_eq(ndjson_reader_new(limit, &r), 0);
        size_t fed = 0, errors = 0;
        while (fed < total) {
                void *buf;
                size_t room;
                ck_assert_int_eq(ndjson_reader_space(r, &buf, &room), 0);
                ck_assert_uint_ge(room, 1);
                ck_assert_uint_le(room, limit + 1 + NDJSON_READ_CHUNK);
                if (room > total - fed)
                        room = total - fed;
                memset(buf, 'x', room);
                ndjson_reader_commit(r, room);
                fed += room;
                int q;
                while ((q = ndjson_reader_next(r, &line)) != 0) {
                        ck_assert_int_eq(q, -EMSGSIZE);
                        errors++;
                        ck_assert_uint_le(fed, limit + 1 + NDJSON_READ_CHUNK);
                }
                ck_assert_uint_le(ndjson_reader_pending(r), limit);
        }
        ck_assert_uint_eq(errors, 1);
        ck_assert(ndjson_reader_skipping(r));
        /* the newline ends it; the next line comes through */
        ck_assert_int_eq(ndjson_reader_feed(r, "xx\n{}\n", 6), 6);
        ck_assert_int_eq(ndjson_reader_next(r, &line), 1);
        ck_assert_str_eq(line.data, "{}");
        ck_assert_int_eq(ndjson_reader_next(r, &line), 0);
        ck_assert(!ndjson_reader_skipping(r));
        ndjson_reader_free(r);
}
END_TEST

START_TEST(test_invalid_utf8) {
        static const char *const bad[] = {
                "\x80",             /* a continuation byte alone */
                "\xc0\xaf",         /* overlong "/" */
                "\xc1\xbf",         /* overlong */
                "\xe0\x80\xaf",     /* overlong, 3 bytes */
                "\xf0\x80\x80\xaf", /* overlong, 4 bytes */
                "\xed\xa0\x80",     /* surrogate U+D800 */
                "\xed\xbf\xbf",     /* surrogate U+DFFF */
                "\xf4\x90\x80\x80", /* U+110000 */
                "\xf5\x80\x80\x80", /* no such lead byte */
                "\xff",
                "\xe2\x82",         /* cut short */
                "ok \xe2\x82 then",
                "\xf0\x9f\x98",     /* cut short at the end of the line */
        };
        static const char *const good[] = {
                "\x7f",
                "\xc2\x80",
                "\xdf\xbf",
                "\xe0\xa0\x80",
                "\xed\x9f\xbf", /* U+D7FF */
                "\xee\x80\x80", /* U+E000 */
                "\xef\xbf\xbf",
                "\xf0\x90\x80\x80",
                "\xf4\x8f\xbf\xbf", /* U+10FFFF */
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                ck_assert_msg(!ndjson_utf8_valid(bad[i], strlen(bad[i])), "bad[%zu] passed", i);
                struct ndjson_reader *r = NULL;
                struct ndjson_line line;
                ck_assert_int_eq(ndjson_reader_new(64, &r), 0);
                ck_assert_int_gt(ndjson_reader_feed(r, bad[i], strlen(bad[i])), 0);
                ck_assert_int_eq(ndjson_reader_feed(r, "\n{}\n", 4), 4);
                ck_assert_int_eq(ndjson_reader_next(r, &line), -EILSEQ);
                ck_assert_uint_eq(line.len, strlen(bad[i]));
                ck_assert_int_eq(ndjson_reader_next(r, &line), 1);
                ck_assert_str_eq(line.data, "{}");
                ck_assert_int_eq(ndjson_reader_next(r, &line), 0);
                ndjson_reader_free(r);
        }
        for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
                ck_assert_msg(ndjson_utf8_valid(good[i], strlen(good[i])), "good[%zu] failed", i);
        /* NUL is a character: the line keeps it, its length says where it ends */
        ck_assert(ndjson_utf8_valid("a\0b", 3));
        struct ndjson_reader *r = NULL;
        struct ndjson_line line;
        ck_assert_int_eq(ndjson_reader_new(64, &r), 0);
        ck_assert_int_eq(ndjson_reader_feed(r, "a\0b\n", 4), 4);
        ck_assert_int_eq(ndjson_reader_next(r, &line), 1);
        ck_assert_uint_eq(line.len, 3);
        ck_assert_int_eq(memcmp(line.data, "a\0b", 4), 0);
        ndjson_reader_free(r);
}
END_TEST

START_TEST(test_end_of_input) {
        struct ndjson_reader *r = NULL;
        struct ndjson_line line;
        void *buf;
        size_t room;

        /* a last line without "\n" waits for more input, then comes at the end */
        ck_assert_int_eq(ndjson_reader_new(16, &r), 0);
        ck_assert_int_eq(ndjson_reader_feed(r, "a\nbc", 4), 4);
        ck_assert_int_eq(ndjson_reader_next(r, &line), 1);
        ck_assert_str_eq(line.data, "a");
        ck_assert_int_eq(ndjson_reader_next(r, &line), 0);
        ck_assert_uint_eq(ndjson_reader_pending(r), 2);
        ndjson_reader_end(r);
        ck_assert_int_eq(ndjson_reader_next(r, &line), 1);
        ck_assert_str_eq(line.data, "bc");
        ck_assert_int_eq(ndjson_reader_next(r, &line), 0);
        ck_assert_int_eq(ndjson_reader_next(r, &line), 0);
        ck_assert_int_eq(ndjson_reader_space(r, &buf, &room), -EPIPE);
        ck_assert_int_eq(ndjson_reader_feed(r, "x", 1), -EPIPE);
        ndjson_reader_free(r);

        /* "\r" alone at the end is an empty line; a newline at the end leaves nothing */
        ck_assert_int_eq(ndjson_reader_new(16, &r), 0);
        ck_assert_int_eq(ndjson_reader_feed(r, "a\r\n\r", 4), 4);
        ndjson_reader_end(r);
        ck_assert_int_eq(ndjson_reader_next(r, &line), 1);
        ck_assert_str_eq(line.data, "a");
        ck_assert_int_eq(ndjson_reader_next(r, &line), 0);
        ndjson_reader_free(r);

        /* a last line over the limit is an error */
        ck_assert_int_eq(ndjson_reader_new(4, &r), 0);
        ck_assert_int_eq(ndjson_reader_feed(r, "ok\nabcd", 7), 7);
        ck_assert_int_eq(ndjson_reader_next(r, &line), 1);
        ck_assert_int_eq(ndjson_reader_next(r, &line), 0);
        ck_assert_int_eq(ndjson_reader_feed(r, "e", 1), 1);
        ndjson_reader_end(r);
        ck_assert_int_eq(ndjson_reader_next(r, &line), -EMSGSIZE);
        ck_assert_int_eq(ndjson_reader_next(r, &line), 0);
        ndjson_reader_free(r);

        /* nothing at all */
        ck_assert_int_eq(ndjson_reader_new(4, &r), 0);
        ndjson_reader_end(r);
        ck_assert_int_eq(ndjson_reader_next(r, &line), 0);
        ndjson_reader_free(r);
}
END_TEST

START_TEST(test_zero_copy_and_backpressure) {
        struct ndjson_reader *r = NULL;
        struct ndjson_line line;
        void *buf;
        size_t room;

        ck_assert_int_eq(ndjson_reader_new(8, &r), 0);
        /* fill it without taking lines: it holds at most limit + "\n" + a read's room */
        size_t held = 0;
        int q;
        while ((q = ndjson_reader_space(r, &buf, &room)) == 0) {
                memset(buf, '\n', room);
                if (held == 0)
                        memcpy(buf, "one\ntwo\n", 8);
                ndjson_reader_commit(r, room);
                held += room;
        }
        ck_assert_int_eq(q, -ENOBUFS);
        ck_assert_uint_eq(held, 8 + 1 + NDJSON_READ_CHUNK);
        /* full of lines not taken yet: feed takes nothing */
        ck_assert_int_eq(ndjson_reader_feed(r, "x", 1), 0);
        ck_assert_int_eq(ndjson_reader_next(r, &line), 1);
        ck_assert_str_eq(line.data, "one");
        ck_assert_int_eq(ndjson_reader_next(r, &line), 1);
        ck_assert_str_eq(line.data, "two");
        ck_assert_int_eq(ndjson_reader_next(r, &line), 0); /* the empty lines are skipped */
        ck_assert_int_eq(ndjson_reader_space(r, &buf, &room), 0);
        ck_assert_uint_eq(ndjson_reader_pending(r), 0);
        ndjson_reader_free(r);

        ck_assert_int_eq(ndjson_reader_new(0, &r), -EINVAL);
        ck_assert_ptr_null(ndjson_reader_free(NULL));
}
END_TEST

START_TEST(test_memory_comes_back) {
        /* a long (allowed) line grows the buffer; it shrinks once the line is taken */
        const size_t limit = 1u << 20;
        struct ndjson_reader *r = NULL;
        struct ndjson_line line;
        void *buf;
        size_t room;
        char *big = malloc(limit + 1);
        ck_assert_ptr_nonnull(big);
        memset(big, 'y', limit);
        big[limit] = '\n';
        ck_assert_int_eq(ndjson_reader_new(limit, &r), 0);
        size_t fed = 0;
        while (fed < limit + 1) {
                ssize_t n = ndjson_reader_feed(r, big + fed, limit + 1 - fed);
                ck_assert_int_gt(n, 0);
                fed += (size_t) n;
        }
        ck_assert_int_eq(ndjson_reader_next(r, &line), 1);
        ck_assert_uint_eq(line.len, limit);
        ck_assert_int_eq(ndjson_reader_next(r, &line), 0);
        ck_assert_int_eq(ndjson_reader_space(r, &buf, &room), 0);
        ck_assert_uint_le(room, 2 * NDJSON_READ_CHUNK);
        ndjson_reader_free(r);
        free(big);
}
END_TEST

int main(void) {
        Suite *s = suite_create("ndjson-reader");
        TCase *tc = tcase_create("core");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_every_split_point);
        tcase_add_test(tc, test_line_limit);
        tcase_add_test(tc, test_long_line_not_buffered);
        tcase_add_test(tc, test_invalid_utf8);
        tcase_add_test(tc, test_end_of_input);
        tcase_add_test(tc, test_zero_copy_and_backpressure);
        tcase_add_test(tc, test_memory_comes_back);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
