/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detokenizer.h"
#include "test-fixtures.h"
#include "tokenizer-test-util.h"
#include "tokenizer.h"
#include "unicode.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static bool valid_utf8(const char *s, size_t len) {
        for (size_t i = 0; i < len;) {
                size_t n;
                if (utf8_next((const uint8_t *) s + i, len - i, NULL, &n) != UTF8_VALID)
                        return false;
                i += n;
        }
        return true;
}

/* Streams ids through a detokenizer and checks, piece by piece and in total, against
 * tokenizer_decode_text(). */
static void check_stream(const struct tokenizer *tk, const int32_t *ids, size_t n, bool skip_special) {
        struct detokenizer *d;
        struct error err = {};
        char *whole, *streamed;
        size_t whole_len, streamed_len = 0;
        const char *piece;
        size_t piece_len;

        ck_assert_int_eq(tokenizer_decode_text(tk, ids, n, skip_special, &whole, &whole_len, &err), 0);
        ck_assert(valid_utf8(whole, whole_len));
        ck_assert_int_eq(detokenizer_new(tk, skip_special, &d, &err), 0);
        streamed = malloc(whole_len + 1);
        ck_assert_ptr_nonnull(streamed);

        /* Plain checks in the loop: thousands of Check assertions are slow under valgrind. */
        for (size_t i = 0; i <= n; i++) {
                int r = i < n ? detokenizer_push(d, ids[i], &piece, &piece_len, &err)
                              : detokenizer_finish(d, &piece, &piece_len, &err);
                if (r < 0)
                        ck_abort_msg("piece %zu: %s", i, err.message);
                if (!valid_utf8(piece, piece_len) || piece[piece_len] != '\0')
                        ck_abort_msg("piece %zu is not valid NUL-terminated UTF-8", i);
                if (streamed_len + piece_len > whole_len)
                        ck_abort_msg("the stream outgrew the whole text at piece %zu", i);
                memcpy(streamed + streamed_len, piece, piece_len);
                streamed_len += piece_len;
        }
        ck_assert_msg(streamed_len == whole_len && memcmp(streamed, whole, whole_len) == 0,
                      "streamed \"%.*s\" != whole \"%s\"", (int) streamed_len, streamed, whole);

        free(streamed);
        free(whole);
        detokenizer_free(d);
}

/* The token made of the single byte b (the model has one for most bytes). */
static int32_t byte_id(const struct tokenizer *tk, uint8_t b) {
        for (int32_t id = 0; id < tokenizer_vocab_size(tk); id++) {
                size_t len;
                const char *bytes = tokenizer_token_bytes(tk, id, &len);
                if (len == 1 && (uint8_t) bytes[0] == b && tokenizer_token_type(tk, id) == TOKEN_TYPE_NORMAL)
                        return id;
        }
        return -1;
}

/* Feeds the bytes as byte tokens, one push each, and compares every piece. */
static void check_bytes(const struct tokenizer *tk, const char *bytes, size_t n, const char *const *want_pieces,
                        const char *want_final) {
        struct detokenizer *d;
        struct error err = {};
        const char *piece;
        size_t len;

        ck_assert_int_eq(detokenizer_new(tk, false, &d, &err), 0);
        for (size_t i = 0; i < n; i++) {
                int32_t id = byte_id(tk, (uint8_t) bytes[i]);
                ck_assert_int_ge(id, 0);
                ck_assert_int_eq(detokenizer_push(d, id, &piece, &len, &err), 0);
                ck_assert_msg(strcmp(piece, want_pieces[i]) == 0, "byte %zu: got \"%s\", expected \"%s\"", i, piece,
                              want_pieces[i]);
        }
        ck_assert_int_eq(detokenizer_finish(d, &piece, &len, &err), 0);
        ck_assert_str_eq(piece, want_final);
        detokenizer_free(d);
}

#define FFFD "\xef\xbf\xbd"

START_TEST(test_split_characters) {
        const struct tokenizer *tk = require_tokenizer();

        /* A character arrives whole only with its last byte. */
        check_bytes(tk, "\xe2\x82\xac", 3, (const char *const[]) { "", "", "\xe2\x82\xac" }, "");
        check_bytes(tk, "a\xf0\x9f\x98\x80" "b", 6, (const char *const[]) { "a", "", "", "", "\xf0\x9f\x98\x80", "b" },
                    "");
        /* An ill-formed prefix becomes one U+FFFD, once the next byte shows it. */
        check_bytes(tk, "\xe2\x82" "A", 3, (const char *const[]) { "", "", FFFD "A" }, "");
        /* A lead byte that cannot continue so is replaced at once, with the byte after. */
        check_bytes(tk, "\xf0\x80", 2, (const char *const[]) { "", FFFD FFFD }, "");
        check_bytes(tk, "\xed\xa0\x80", 3, (const char *const[]) { "", FFFD FFFD, FFFD }, "");
        check_bytes(tk, "\x80" "a", 2, (const char *const[]) { FFFD, "a" }, "");
        /* A prefix still held at the end is one U+FFFD. */
        check_bytes(tk, "ok\xe2\x82", 4, (const char *const[]) { "o", "k", "", "" }, FFFD);
        check_bytes(tk, "\xc3", 1, (const char *const[]) { "" }, FFFD);
        /* Two leads in a row: the first is a subpart of its own. */
        check_bytes(tk, "\xc3\xc3\xa9", 3, (const char *const[]) { "", FFFD, "\xc3\xa9" }, "");
}
END_TEST

START_TEST(test_sanitize_rule) {
        /* The expected strings are what Python's bytes.decode("utf-8", "replace") gives. */
        static const struct {
                const char *in;
                size_t len;
                const char *out;
        } cases[] = {
                { "plain", 5, "plain" },
                { "\xe2\x82" "A", 3, FFFD "A" },
                { "\xf0\x9f\x98", 3, FFFD },
                { "\xf0\x80\x80", 3, FFFD FFFD FFFD },
                { "\xc0\xaf", 2, FFFD FFFD },
                { "\xed\xa0\x80", 3, FFFD FFFD FFFD },
                { "\xf4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD },
                { "\xf1\x80\x80\xc3\xa9", 5, FFFD "\xc3\xa9" },
                { "\xff\xfe", 2, FFFD FFFD },
                { "a\0b", 3, "a" },
        };
        char out[64];

        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                size_t n = utf8_sanitize((const uint8_t *) cases[i].in, cases[i].len, out);
                out[n] = '\0';
                ck_assert_msg(strcmp(out, cases[i].out) == 0, "case %zu: \"%s\"", i, out);
        }
        ck_assert_uint_eq(utf8_sanitize((const uint8_t *) "a\0b", 3, out), 3);
}
END_TEST

START_TEST(test_special_and_errors) {
        const struct tokenizer *tk = require_tokenizer();
        struct detokenizer *d;
        struct error err = {};
        const char *piece;
        size_t len;

        ck_assert_int_eq(detokenizer_new(tk, false, &d, &err), 0);
        ck_assert_int_eq(detokenizer_push(d, 2, &piece, &len, &err), 0);
        ck_assert_str_eq(piece, "<|im_end|>");
        detokenizer_free(d);

        ck_assert_int_eq(detokenizer_new(tk, true, &d, &err), 0);
        ck_assert_int_eq(detokenizer_push(d, 2, &piece, &len, &err), 0);
        ck_assert_str_eq(piece, "");
        ck_assert_uint_eq(len, 0);

        /* A bad id changes nothing: the held byte is still held. */
        ck_assert_int_eq(detokenizer_push(d, byte_id(tk, 0xe2), &piece, &len, &err), 0);
        ck_assert_int_eq(detokenizer_push(d, 49152, &piece, &len, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "49152"));
        ck_assert_int_eq(detokenizer_push(d, -1, &piece, &len, &err), -EINVAL);
        ck_assert_int_eq(detokenizer_push(d, byte_id(tk, 0x82), &piece, &len, &err), 0);
        ck_assert_int_eq(detokenizer_push(d, byte_id(tk, 0xac), &piece, &len, &err), 0);
        ck_assert_str_eq(piece, "\xe2\x82\xac");

        /* Reset drops what is held. */
        ck_assert_int_eq(detokenizer_push(d, byte_id(tk, 0xe2), &piece, &len, &err), 0);
        detokenizer_reset(d);
        ck_assert_int_eq(detokenizer_finish(d, &piece, &len, &err), 0);
        ck_assert_str_eq(piece, "");
        detokenizer_free(d);
}
END_TEST

/* A small deterministic generator, so that a failure can be replayed. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rng_next(void) {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        return (uint32_t) (rng_state >> 16);
}

START_TEST(test_random_sequences) {
        const struct tokenizer *tk = require_tokenizer();
        int32_t n_vocab = tokenizer_vocab_size(tk);
        int32_t *partial = malloc((size_t) n_vocab * sizeof(*partial));
        size_t n_partial = 0;
        ck_assert_ptr_nonnull(partial);

        /* Tokens whose bytes are not whole characters: single bytes >= 0x80, and merged
         * tokens that start or end inside a character. */
        for (int32_t id = 0; id < n_vocab; id++) {
                size_t len;
                const char *b = tokenizer_token_bytes(tk, id, &len);
                if (!valid_utf8(b, len))
                        partial[n_partial++] = id;
        }
        ck_assert_uint_gt(n_partial, 100);

        for (int round = 0; round < 4000; round++) {
                int32_t ids[48];
                size_t n = 1 + rng_next() % ARRAY_SIZE(ids);
                for (size_t i = 0; i < n; i++) {
                        uint32_t r = rng_next() % 10;
                        if (r < 5)
                                ids[i] = partial[rng_next() % n_partial];
                        else if (r < 6)
                                ids[i] = (int32_t) (rng_next() % 17); /* special tokens */
                        else
                                ids[i] = (int32_t) (rng_next() % (uint32_t) n_vocab);
                }
                check_stream(tk, ids, n, false);
                check_stream(tk, ids, n, true);
        }
        free(partial);
}
END_TEST

START_TEST(test_encoded_texts) {
        const struct tokenizer *tk = require_tokenizer();
        static const char *const texts[] = {
                "The capital of France is Paris.",
                "Caf\xc3\xa9 \xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x92\xbb \xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7",
                "\xe0\xb8\xaa\xe0\xb8\xa7\xe0\xb8\xb1\xe0\xb8\xaa\xe0\xb8\x94\xe0\xb8\xb5 \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
                "broken \xe2\x82 and \xff\xfe bytes \xf0\x9f\x98",
                "<|im_start|>assistant\nHi!<|im_end|>",
        };

        for (size_t i = 0; i < ARRAY_SIZE(texts); i++) {
                int32_t *ids;
                size_t n;
                struct error err = {};
                ck_assert_int_eq(tokenizer_encode(tk, texts[i], strlen(texts[i]), true, &ids, &n, &err), 0);
                check_stream(tk, ids, n, false);
                check_stream(tk, ids, n, true);
                free(ids);
        }
}
END_TEST

/* Every fixture case, encoded with our tokenizer, streams to its whole decoding. */
START_TEST(test_fixture_texts) {
        const struct tokenizer *tk = require_tokenizer();
        struct json_object *root, *cases;

        root = test_load_fixture("tokenizer.json");
        ck_assert_msg(json_object_object_get_ex(root, "cases", &cases), "tokenizer.json: no \"cases\" array");
        size_t n_cases = json_object_array_length(cases);
        for (size_t i = 0; i < n_cases; i++) {
                struct json_object *c = json_object_array_get_idx(cases, i), *jtext, *jids;
                int32_t *ids;
                size_t n;
                struct error err = {};

                ck_assert(json_object_object_get_ex(c, "text", &jtext));
                const char *text = json_object_get_string(jtext);
                size_t len = (size_t) json_object_get_string_len(jtext);
                ck_assert_int_eq(tokenizer_encode(tk, text, len, true, &ids, &n, &err), 0);
                check_stream(tk, ids, n, false);
                free(ids);

                /* The fixture's own ids too, whatever produced them. */
                if (json_object_object_get_ex(c, "ids", &jids)) {
                        n = json_object_array_length(jids);
                        ids = calloc(n + 1, sizeof(*ids));
                        ck_assert_ptr_nonnull(ids);
                        for (size_t k = 0; k < n; k++)
                                ids[k] = json_object_get_int(json_object_array_get_idx(jids, k));
                        check_stream(tk, ids, n, false);
                        free(ids);
                }
        }
        json_object_put(root);
}
END_TEST

static Suite *detokenizer_suite(void) {
        Suite *s = suite_create("detokenizer");
        TCase *tc = tcase_create("detokenizer");

        tcase_add_test(tc, test_sanitize_rule);
        tcase_add_test(tc, test_split_characters);
        tcase_add_test(tc, test_special_and_errors);
        tcase_add_test(tc, test_random_sequences);
        tcase_add_test(tc, test_encoded_texts);
        tcase_add_test(tc, test_fixture_texts);
        tcase_set_timeout(tc, 300);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        load_model_tokenizer();
        return run_suite(detokenizer_suite());
}
