/* SPDX-License-Identifier: MIT */
/* The SentencePiece tokenizer, its detokenization and Gemma's chat format, on the Gemma 3
 * file, against llama.cpp's fixtures (tests/make-spm-fixtures). Skipped (exit 77) when the
 * file is missing: scripts/fetch-model gemma3-270m fetches it. */
#include <check.h>
#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chat-template.h"
#include "detokenizer.h"
#include "gguf.h"
#include "test-fixtures.h"
#include "tokenizer.h"

#define GEMMA_MODEL "models/gemma-3-270m-q4_k_m.gguf"

static struct tokenizer *gemma;

static const char *gemma_path(void) {
        const char *p = getenv("ASYNCLLM_GEMMA_MODEL");
        return p && *p ? p : GEMMA_MODEL;
}

static struct json_object *fixture_cases(struct json_object *root, const char *key) {
        struct json_object *cases;
        ck_assert_msg(json_object_object_get_ex(root, key, &cases) && json_object_is_type(cases, json_type_array),
                      "fixture: no \"%s\" array", key);
        return cases;
}

/* A case's text: "text", or "hex" for bytes that are not UTF-8. malloc'ed. */
static char *case_text(struct json_object *c, size_t *ret_len) {
        struct json_object *j;
        if (json_object_object_get_ex(c, "text", &j)) {
                *ret_len = (size_t) json_object_get_string_len(j);
                char *s = malloc(*ret_len + 1);
                ck_assert_ptr_nonnull(s);
                memcpy(s, json_object_get_string(j), *ret_len + 1);
                return s;
        }
        ck_assert(json_object_object_get_ex(c, "hex", &j));
        const char *hex = json_object_get_string(j);
        *ret_len = strlen(hex) / 2;
        char *s = malloc(*ret_len + 1);
        ck_assert_ptr_nonnull(s);
        for (size_t i = 0; i < *ret_len; i++) {
                unsigned b;
                ck_assert_int_eq(sscanf(hex + 2 * i, "%2x", &b), 1);
                s[i] = (char) b;
        }
        s[*ret_len] = '\0';
        return s;
}

static bool same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
        return na == nb && (na == 0 || memcmp(a, b, na * sizeof(*a)) == 0);
}

static void print_ids(const char *label, const int32_t *ids, size_t n) {
        fprintf(stderr, "  %s [", label);
        for (size_t i = 0; i < n && i < 40; i++)
                fprintf(stderr, "%s%d", i ? ", " : "", ids[i]);
        fprintf(stderr, "%s]\n", n > 40 ? ", ..." : "");
}

START_TEST(test_load) {
        ck_assert_int_eq(tokenizer_vocab_size(gemma), 262144);
        ck_assert_int_eq(tokenizer_bos(gemma), 2);
        ck_assert_int_eq(tokenizer_eos(gemma), 1);
        ck_assert(tokenizer_add_bos(gemma));
        ck_assert_ptr_null(tokenizer_chat_template(gemma));
        ck_assert_str_eq(tokenizer_architecture(gemma), "gemma3");
        ck_assert(tokenizer_is_control(gemma, 105)); /* <start_of_turn> */
        ck_assert_int_eq(tokenizer_token_type(gemma, 107), TOKEN_TYPE_USER_DEFINED); /* "\n" */
        ck_assert_int_eq(tokenizer_find(gemma, "<0x41>", 6), 238 + 0x41);
}
END_TEST

START_TEST(test_fixture_ids) {
        struct json_object *root = test_load_fixture("tokenizer-gemma.json"), *cases = fixture_cases(root, "cases");
        size_t n_cases = json_object_array_length(cases), n_fail = 0;
        struct error err = {};

        ck_assert_uint_gt(n_cases, 500);
        for (size_t i = 0; i < n_cases; i++) {
                struct json_object *c = json_object_array_get_idx(cases, i), *j;
                size_t len, n_want, n;
                char *text = case_text(c, &len);
                bool special = json_object_object_get_ex(c, "special", &j) && json_object_get_boolean(j);
                ck_assert(json_object_object_get_ex(c, "ids", &j));
                int32_t *want = test_json_ids(j, &n_want), *ids;

                ck_assert_msg(tokenizer_encode(gemma, text, len, special, &ids, &n, &err) == 0, "%s", err.message);
                if (!same_ids(ids, n, want, n_want) && n_fail++ < 10) {
                        fprintf(stderr, "case %zu (special=%d) \"%.*s\":\n", i, special, (int) (len < 80 ? len : 80),
                                text);
                        print_ids("got     ", ids, n);
                        print_ids("expected", want, n_want);
                }
                free(ids);
                free(want);
                free(text);
        }
        json_object_put(root);
        fprintf(stderr, "test-tokenizer-spm: %zu/%zu fixture cases match\n", n_cases - n_fail, n_cases);
        ck_assert_msg(n_fail == 0, "%zu of %zu cases differ from llama.cpp (see stderr)", n_fail, n_cases);
}
END_TEST

START_TEST(test_fixture_prompts) {
        struct json_object *root = test_load_fixture("tokenizer-gemma.json"), *cases = fixture_cases(root, "prompts");
        struct error err = {};

        ck_assert_uint_gt(json_object_array_length(cases), 0);
        for (size_t i = 0; i < json_object_array_length(cases); i++) {
                struct json_object *c = json_object_array_get_idx(cases, i), *j;
                size_t len, n_want, n;
                char *text = case_text(c, &len);
                ck_assert(json_object_object_get_ex(c, "ids", &j));
                int32_t *want = test_json_ids(j, &n_want), *ids;
                ck_assert_int_eq(tokenizer_encode_prompt(gemma, text, len, true, &ids, &n, &err), 0);
                ck_assert_msg(same_ids(ids, n, want, n_want), "prompt %zu \"%s\" differs", i, text);
                free(ids);
                free(want);
                free(text);
        }
        json_object_put(root);
}
END_TEST

/* Streams ids through a detokenizer and returns the concatenated pieces (malloc'ed). */
static char *stream(const int32_t *ids, size_t n, bool skip_special, size_t *ret_len) {
        struct detokenizer *d;
        struct error err = {};
        const char *piece;
        size_t len, cap = 64, total = 0;
        char *out = malloc(cap);

        ck_assert_ptr_nonnull(out);
        ck_assert_int_eq(detokenizer_new(gemma, skip_special, &d, &err), 0);
        for (size_t i = 0; i <= n; i++) {
                if (i < n)
                        ck_assert_int_eq(detokenizer_push(d, ids[i], &piece, &len, &err), 0);
                else
                        ck_assert_int_eq(detokenizer_finish(d, &piece, &len, &err), 0);
                while (total + len + 1 > cap) {
                        cap *= 2;
                        out = realloc(out, cap);
                        ck_assert_ptr_nonnull(out);
                }
                memcpy(out + total, piece, len);
                total += len;
        }
        out[total] = '\0';
        detokenizer_free(d);
        *ret_len = total;
        return out;
}

/* llama.cpp's /detokenize (every piece, special ones as spelled) against tokenizer_decode()
 * and the streaming detokenizer; for bytes that are not UTF-8, the stream against
 * tokenizer_decode_text(). */
START_TEST(test_fixture_detokenize) {
        struct json_object *root = test_load_fixture("tokenizer-gemma.json"), *cases = fixture_cases(root, "cases");
        size_t n_cases = json_object_array_length(cases), n_fail = 0;
        struct error err = {};

        for (size_t i = 0; i < n_cases; i++) {
                struct json_object *c = json_object_array_get_idx(cases, i), *j;
                size_t len, n_ids, out_len, streamed_len;
                char *text = case_text(c, &len), *out, *streamed;
                ck_assert(json_object_object_get_ex(c, "ids", &j));
                int32_t *ids = test_json_ids(j, &n_ids);

                ck_assert_int_eq(tokenizer_decode(gemma, ids, n_ids, false, &out, &out_len, &err), 0);
                streamed = stream(ids, n_ids, false, &streamed_len);
                if (json_object_object_get_ex(c, "detokenized", &j)) {
                        size_t want_len = (size_t) json_object_get_string_len(j);
                        const char *want = json_object_get_string(j);
                        bool ok = out_len == want_len && memcmp(out, want, want_len) == 0 &&
                                  streamed_len == want_len && memcmp(streamed, want, want_len) == 0;
                        if (!ok && n_fail++ < 10)
                                fprintf(stderr, "case %zu: decode \"%s\" / stream \"%s\", llama.cpp \"%s\"\n", i, out,
                                        streamed, want);
                } else {
                        /* No round trip to hold it to: a character cut short swallows the
                         * bytes after it, U+2581 of an escaped space included, as in llama.cpp. */
                        char *valid;
                        size_t valid_len;
                        ck_assert_int_eq(tokenizer_decode_text(gemma, ids, n_ids, false, &valid, &valid_len, &err), 0);
                        ck_assert_msg(valid_len == streamed_len && memcmp(valid, streamed, valid_len) == 0,
                                      "case %zu: the stream differs from tokenizer_decode_text()", i);
                        free(valid);
                }
                free(out);
                free(streamed);
                free(ids);
                free(text);
        }
        json_object_put(root);
        ck_assert_msg(n_fail == 0, "%zu cases detokenize differently (see stderr)", n_fail);
}
END_TEST

/* Byte-fallback pieces make a character together: nothing is emitted until it is whole. */
START_TEST(test_stream_byte_fallback) {
        struct error err = {};
        struct detokenizer *d;
        const char *piece;
        size_t len;
        const uint8_t robot[] = { 0xF0, 0x9F, 0xA4, 0x96 };

        ck_assert_int_eq(detokenizer_new(gemma, true, &d, &err), 0);
        for (size_t i = 0; i < sizeof(robot); i++) {
                char spelling[8];
                snprintf(spelling, sizeof(spelling), "<0x%02X>", robot[i]);
                int32_t id = tokenizer_find(gemma, spelling, 6);
                ck_assert_int_ge(id, 0);
                ck_assert_int_eq(detokenizer_push(d, id, &piece, &len, &err), 0);
                if (i + 1 < sizeof(robot))
                        ck_assert_uint_eq(len, 0);
                else
                        ck_assert_str_eq(piece, "\xF0\x9F\xA4\x96");
        }
        /* Skipped specials vanish; "\n" is user-defined, so it stays. */
        ck_assert_int_eq(detokenizer_push(d, 105, &piece, &len, &err), 0);
        ck_assert_uint_eq(len, 0);
        ck_assert_int_eq(detokenizer_push(d, 107, &piece, &len, &err), 0);
        ck_assert_str_eq(piece, "\n");
        detokenizer_free(d);
}
END_TEST

START_TEST(test_fixture_chat) {
        struct json_object *root = test_load_fixture("chat-gemma.json"), *cases = fixture_cases(root, "cases");
        struct error err = {};

        ck_assert_str_eq(chat_template_describe(gemma),
                         "Gemma turns, built in for the file's architecture (it has no tokenizer.chat_template)");
        ck_assert_uint_gt(json_object_array_length(cases), 0);
        for (size_t i = 0; i < json_object_array_length(cases); i++) {
                struct json_object *c = json_object_array_get_idx(cases, i), *jmsgs, *jgen, *jprompt;
                ck_assert(json_object_object_get_ex(c, "messages", &jmsgs) &&
                          json_object_object_get_ex(c, "add_generation_prompt", &jgen) &&
                          json_object_object_get_ex(c, "prompt", &jprompt));
                size_t n = json_object_array_length(jmsgs);
                struct chat_message msgs[16];
                ck_assert_uint_le(n, 16);
                for (size_t k = 0; k < n; k++) {
                        struct json_object *m = json_object_array_get_idx(jmsgs, k), *r, *t;
                        ck_assert(json_object_object_get_ex(m, "role", &r) && json_object_object_get_ex(m, "content", &t));
                        msgs[k] = (struct chat_message) { json_object_get_string(r), json_object_get_string(t) };
                }
                char *out;
                ck_assert_msg(chat_render(gemma, msgs, n, json_object_get_boolean(jgen), &out, &err) == 0, "%s",
                              err.message);
                ck_assert_msg(strcmp(out, json_object_get_string(jprompt)) == 0, "chat case %zu:\n%s\nexpected\n%s", i,
                              out, json_object_get_string(jprompt));
                free(out);
        }
        json_object_put(root);
}
END_TEST

static double seconds_to_encode(const char *text, size_t len, bool special, size_t *ret_n) {
        struct timespec t0, t1;
        struct error err = {};
        int32_t *ids;

        clock_gettime(CLOCK_MONOTONIC, &t0);
        ck_assert_int_eq(tokenizer_encode(gemma, text, len, special, &ids, ret_n, &err), 0);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        free(ids);
        return (double) (t1.tv_sec - t0.tv_sec) + (double) (t1.tv_nsec - t0.tv_nsec) / 1e9;
}

/* Long prompts cost O(n log n): a megabyte of prose, one unbroken word and one run of
 * newlines each encode well within a second. */
START_TEST(test_speed) {
        static const char *const parts[] = {
                "The quick brown fox jumps over the lazy dog. ",
                "In 2024, researchers measured 3.14159 radians and 42 widgets;\n",
                "def tokenize(text):\n    return [t for t in text.split()]\n\n",
                "<start_of_turn>user\nCaf\xc3\xa9 cr\xc3\xa8me <b>br\xc3\xbbl\xc3\xa9""e</b><end_of_turn>\n",
                "\xe6\x9d\xb1\xe4\xba\xac\xe3\x81\xaf\xe6\x97\xa5\xe6\x9c\xac\xe3\x81\xae\xe9\xa6\x96\xe9\x83\xbd\xe3\x81\xa7\xe3\x81\x99\xe3\x80\x82 ",
        };
        size_t size = 1 << 20, len = 0, n;
        char *text = malloc(size);
        ck_assert_ptr_nonnull(text);
        for (size_t i = 0; len + 200 < size; i++) {
                const char *p = parts[(i * 7) % (sizeof(parts) / sizeof(parts[0]))];
                memcpy(text + len, p, strlen(p));
                len += strlen(p);
        }
        double prose = seconds_to_encode(text, len, true, &n);
        fprintf(stderr, "test-tokenizer-spm: %zu bytes of prose into %zu tokens in %.3f s\n", len, n, prose);
        ck_assert_double_lt(prose, 2.0);

        memset(text, 'a', size);
        double word = seconds_to_encode(text, size, false, &n);
        fprintf(stderr, "test-tokenizer-spm: %zu-byte word into %zu tokens in %.3f s\n", size, n, word);
        ck_assert_double_lt(word, 2.0);

        memset(text, '\n', size);
        double newlines = seconds_to_encode(text, size, false, &n);
        fprintf(stderr, "test-tokenizer-spm: %zu newlines into %zu tokens in %.3f s\n", size, n, newlines);
        ck_assert_double_lt(newlines, 2.0);
        free(text);
}
END_TEST

int main(void) {
        struct error err = {};
        struct gguf_file *f;

        if (access(gemma_path(), R_OK) != 0) {
                printf("SKIP: %s is missing (scripts/fetch-model gemma3-270m fetches it; ASYNCLLM_GEMMA_MODEL names "
                       "another path)\n",
                       gemma_path());
                return 77;
        }
        if (gguf_open(gemma_path(), &f, &err) < 0 || tokenizer_load(f, &gemma, &err) < 0) {
                fprintf(stderr, "cannot load the tokenizer of %s: %s\n", gemma_path(), err.message);
                return EXIT_FAILURE;
        }
        gguf_close(f);

        Suite *s = suite_create("tokenizer-spm");
        TCase *tc = tcase_create("gemma");
        tcase_add_test(tc, test_load);
        tcase_add_test(tc, test_fixture_ids);
        tcase_add_test(tc, test_fixture_prompts);
        tcase_add_test(tc, test_fixture_detokenize);
        tcase_add_test(tc, test_stream_byte_fallback);
        tcase_add_test(tc, test_fixture_chat);
        tcase_add_test(tc, test_speed);
        tcase_set_timeout(tc, 120);
        suite_add_tcase(s, tc);

        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        tokenizer_free(gemma);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
