/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gguf.h"
#include "pretokenizer.h"
#include "test-fixtures.h"
#include "test-random.h"
#include "tokenizer-test-util.h"
#include "tokenizer.h"
#include "unicode.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Helpers */

static void encode(const struct tokenizer *tk, const char *text, size_t len, bool special, int32_t **ids,
                   size_t *n) {
        struct error err = {};
        int r = tokenizer_encode(tk, text, len, special, ids, n, &err);
        ck_assert_msg(r == 0, "tokenizer_encode: %s", err.message);
}

static char *format_ids(const int32_t *ids, size_t n) {
        size_t size = 16 + 12 * n;
        char *s = malloc(size), *o = s;
        ck_assert_ptr_nonnull(s);
        o += sprintf(o, "[");
        for (size_t i = 0; i < n; i++)
                o += sprintf(o, "%s%d", i ? ", " : "", ids[i]);
        sprintf(o, "]");
        return s;
}

static void check_ids(const struct tokenizer *tk, const char *text, size_t len, bool special, const int32_t *want,
                      size_t n_want) {
        int32_t *ids;
        size_t n;

        encode(tk, text, len, special, &ids, &n);
        if (n != n_want || (n > 0 && memcmp(ids, want, n * sizeof(*ids)) != 0)) {
                char *got = format_ids(ids, n), *exp = format_ids(want, n_want);
                ck_abort_msg("encode(\"%.*s\", special=%d) = %s, expected %s", (int) len, text, special, got, exp);
        }
        free(ids);
}

static void check_round_trip(const struct tokenizer *tk, const char *text, size_t len, bool special) {
        struct error err = {};
        int32_t *ids;
        size_t n, out_len;
        char *out;

        encode(tk, text, len, special, &ids, &n);
        ck_assert_int_eq(tokenizer_decode(tk, ids, n, false, &out, &out_len, &err), 0);
        ck_assert_msg(out_len == len && memcmp(out, text, len) == 0, "decode(encode(\"%.*s\")) = \"%s\"", (int) len,
                      text, out);
        free(out);
        free(ids);
}

static int32_t byte_token(const struct tokenizer *tk, uint8_t b) {
        int32_t *ids;
        size_t n;
        int32_t id = -1;

        encode(tk, (const char *) &b, 1, false, &ids, &n);
        ck_assert_uint_le(n, 1);
        if (n == 1)
                id = ids[0];
        free(ids);
        return id;
}

/* Pre-tokenizer */

struct pieces {
        char text[1024];
        size_t len;
};

static int collect_piece(const char *piece, size_t len, void *userdata) {
        struct pieces *p = userdata;
        ck_assert_uint_lt(p->len + len + 1, sizeof(p->text));
        memcpy(p->text + p->len, piece, len);
        p->len += len;
        p->text[p->len++] = '|';
        p->text[p->len] = '\0';
        return 0;
}

/* The pieces joined by '|', a '|' after each. */
static void check_split(const char *name, const char *text, const char *want) {
        const struct pretokenizer *pre = pretokenizer_find(name, strlen(name));
        struct pieces p = {};
        ck_assert_ptr_nonnull(pre);
        ck_assert_int_eq(pretokenize(pre, text, strlen(text), collect_piece, &p), 0);
        ck_assert_msg(strcmp(p.text, want) == 0, "split(\"%s\") = \"%s\", expected \"%s\"", text, p.text, want);
}

START_TEST(test_split_gpt2) {
        const char *g = "gpt-2";
        check_split(g, "", "");
        check_split(g, "Hello world", "Hello| world|");
        check_split(g, "Hello world! 123", "Hello| world|!| 123|");
        /* The last space of a run goes with the next word; a final run stays whole. */
        check_split(g, "a   b", "a|  | b|");
        check_split(g, "a  ", "a|  |");
        check_split(g, "  a", " | a|");
        check_split(g, "x\n\ny", "x|\n|\n|y|"); /* only a space joins the word after */
        check_split(g, "x \n y", "x| \n| y|");
        check_split(g, "\ta", "\t|a|");
        check_split(g, "\t\ta", "\t|\t|a|");
        check_split(g, "   !", "  | !|");
        /* Contractions are lowercase only. */
        check_split(g, "don't", "don|'t|");
        check_split(g, "DON'T", "DON|'|T|");
        check_split(g, "we're they've I'll he'd I'm it's", "we|'re| they|'ve| I|'ll| he|'d| I|'m| it|'s|");
        check_split(g, "'ll'LL", "'ll|'|LL|");
        check_split(g, "''s", "''|s|");
        check_split(g, "x'", "x|'|");
        /* Punctuation runs take one leading space; digits and letters don't mix. */
        check_split(g, "f(x) += 1;", "f|(|x|)| +=| 1|;|");
        check_split(g, "abc123def", "abc|123|def|");
        check_split(g, "3.14", "3|.|14|");
        /* Unicode classes: letters, marks (not letters), numbers, spaces. */
        check_split(g, "caf\xc3\xa9 na\xc3\xafve", "caf\xc3\xa9| na\xc3\xafve|");
        check_split(g, "e\xcc\x81t\xc3\xa9", "e|\xcc\x81|t\xc3\xa9|");
        check_split(g, "\xe6\x9d\xb1\xe4\xba\xac \xd9\xa3\xd9\xa4", "\xe6\x9d\xb1\xe4\xba\xac| \xd9\xa3\xd9\xa4|");
        check_split(g, "x\xc2\xa0\xc2\xa0y", "x|\xc2\xa0|\xc2\xa0|y|"); /* NBSP is not " " */
        check_split(g, "a\xe3\x80\x80" "b", "a|\xe3\x80\x80|b|");
        check_split(g, "\xf0\x9f\x98\x80!", "\xf0\x9f\x98\x80!|");
        /* U+001C..U+001F are not \s (Python's isspace() says they are). */
        check_split(g, "a\x1c b", "a|\x1c| b|");
}
END_TEST

START_TEST(test_split_smollm) {
        const char *s = "smollm";
        check_split(s, "Hello world! 123", "Hello| world|!| |1|2|3|");
        check_split(s, "abc123def", "abc|1|2|3|def|");
        check_split(s, "a 1", "a| |1|");
        check_split(s, "a  1", "a|  |1|");
        check_split(s, "x  1  y", "x|  |1| | y|");
        check_split(s, "3.14", "3|.|1|4|");
        /* Every \p{N}, not only ASCII digits. */
        check_split(s, "\xd9\xa3\xd9\xa4\xc2\xbd\xe2\x85\xab", "\xd9\xa3|\xd9\xa4|\xc2\xbd|\xe2\x85\xab|");
        check_split(s, "x\xc2\xb2", "x|\xc2\xb2|");
}
END_TEST

/* The other families' pre-tokenizers, a few telling cases each. */
START_TEST(test_split_families) {
        static const struct {
                const char *pre, *text, *want;
        } cases[] = {
                /* Contractions in any case; a letter run takes one non-letter, non-digit before it. */
                { "llama-bpe", "DON'T we'Re", "DON|'T| we|'Re|" },
                { "llama-bpe", "(hello) $x", "(hello|)| $|x|" },
                /* Digits three at a time (Qwen2: one). */
                { "llama-bpe", "1234567", "123|456|7|" },
                { "qwen2", "1234567", "1|2|3|4|5|6|7|" },
                /* Punctuation takes the newlines after it; white space ends at its last newline. */
                { "llama-bpe", "x.\n\ny", "x|.\n\n|y|" },
                { "llama-bpe", "x  \n  y", "x|  \n| | y|" },
                { "llama-bpe", "a   b", "a|  | b|" },
                /* Each rule cuts what the one before made: newlines, letters with one space
                 * before, ASCII and CJK punctuation (ASCII letters too), trailing space, CJK,
                 * numbers. */
                { "deepseek-llm", "Hi, \xe4\xbd\xa0\xe5\xa5\xbd 42  ", "Hi|,| |\xe4\xbd\xa0\xe5\xa5\xbd| |42|  |" },
                { "deepseek-llm", "a\nb", "a|\n|b|" },
                { "deepseek-coder", "x = 12;", "x| = |1|2|;|" }, /* '=' is a symbol (Sm), not punctuation */
                /* Punctuation and ASCII symbol runs alone, then GPT-2, then three digits. */
                { "falcon", "a+=b 12345", "a|+=|b| |123|45|" },
                { "default", "a+=b 12345`", "a|+=|b| |123|45|`|" },
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
                check_split(cases[i].pre, cases[i].text, cases[i].want);
}
END_TEST

/* Checks that pieces tile the text and that an invalid byte is always a piece alone. */
struct tiling {
        const char *text;
        size_t len, at;
};

static int check_piece(const char *piece, size_t len, void *userdata) {
        struct tiling *t = userdata;
        ck_assert_ptr_eq(piece, t->text + t->at);
        ck_assert_uint_gt(len, 0);
        for (size_t i = 0; i < len;) {
                size_t n;
                if (utf8_next((const uint8_t *) piece + i, len - i, NULL, &n) != UTF8_VALID)
                        ck_assert_msg(len == 1, "an invalid byte shares a piece of %zu bytes", len);
                i += n;
        }
        t->at += len;
        return 0;
}

/* Every pre-tokenizer, on random bytes and on random well-formed text. */
START_TEST(test_split_tiles) {
        static const uint32_t alphabet[] = { 'a', 'Z', '7', ' ', '\n', '\r', '\t', '\'', '.', '$', '`', 0xA0, 0xE9,
                                             0x3000, 0x4F60, 0xAC00, 0xFF01, 0x2018, 0x0301, 0x0663, 0x1F600 };
        char names[512], text[512];

        pretokenizer_names(names, sizeof(names));
        for (char *name = strtok(names, ", "); name; name = strtok(NULL, ", ")) {
                const struct pretokenizer *pre = pretokenizer_find(name, strlen(name));
                ck_assert_msg(pre, "\"%s\" is listed but not found", name);
                for (int round = 0; round < 400; round++) {
                        size_t len = 0, want = (size_t) (round % 97);
                        while (len + 4 <= want) {
                                uint32_t r = next_u32();
                                if (round % 2)
                                        text[len++] = (char) r;
                                else
                                        len += utf8_encode(alphabet[r % (sizeof(alphabet) / sizeof(alphabet[0]))], text + len);
                        }
                        struct tiling t = { .text = text, .len = len };
                        ck_assert_int_eq(pretokenize(pre, text, len, check_piece, &t), 0);
                        ck_assert_uint_eq(t.at, len);
                }
        }
}
END_TEST

START_TEST(test_split_invalid_utf8) {
        const char *s = "smollm";
        /* Each byte that starts no well-formed sequence stands alone. */
        check_split(s, "a\xff" "b", "a|\xff|b|");
        check_split(s, "!\x80!", "!|\x80|!|");
        check_split(s, "\xe2\x82" "x", "\xe2|\x82|x|");
        check_split(s, " \x80", " |\x80|");
        check_split(s, "  \x80", " | |\x80|");
        check_split(s, "\xc0\xaf", "\xc0|\xaf|");             /* overlong '/' */
        check_split(s, "\xed\xa0\x80", "\xed|\xa0|\x80|");     /* a surrogate */
        check_split(s, "\xf4\x90\x80\x80", "\xf4|\x90|\x80|\x80|"); /* above U+10FFFF */
        check_split(s, "ab\xe2\x82\xac" "cd", "ab|\xe2\x82\xac|cd|");
}
END_TEST

START_TEST(test_pretokenizer_names) {
        char names[256];
        ck_assert_ptr_nonnull(pretokenizer_find("smollm", 6));
        ck_assert_ptr_nonnull(pretokenizer_find("llama-bpe", 9));
        ck_assert(pretokenizer_find("llama-bpe", 9)->ignore_merges);
        ck_assert_ptr_null(pretokenizer_find("gpt2", 4)); /* llama.cpp says "gpt-2" */
        ck_assert_ptr_null(pretokenizer_find("smollm2", 7));
        ck_assert_ptr_null(pretokenizer_find("smoll", 5));
        pretokenizer_names(names, sizeof(names));
        ck_assert_ptr_nonnull(strstr(names, "default, gpt-2, "));
        ck_assert_ptr_nonnull(strstr(names, ", deepseek-coder"));
        pretokenizer_names(names, 12);
        ck_assert_str_eq(names, "default");
}
END_TEST

/* Unicode */

START_TEST(test_unicode_classes) {
        ck_assert_int_eq(unicode_classify('a'), UNICODE_LETTER);
        ck_assert_int_eq(unicode_classify('7'), UNICODE_NUMBER);
        ck_assert_int_eq(unicode_classify(' '), UNICODE_SPACE);
        ck_assert_int_eq(unicode_classify('\n'), UNICODE_SPACE);
        ck_assert_int_eq(unicode_classify(0x1C), UNICODE_OTHER);
        ck_assert_int_eq(unicode_classify('_'), UNICODE_PUNCT);  /* Pc */
        ck_assert_int_eq(unicode_classify('$'), UNICODE_SYMBOL); /* Sc */
        ck_assert_int_eq(unicode_classify('`'), UNICODE_SYMBOL); /* Sk */
        ck_assert_int_eq(unicode_classify(0x85), UNICODE_SPACE);
        ck_assert_int_eq(unicode_classify(0xA0), UNICODE_SPACE);
        ck_assert_int_eq(unicode_classify(0xAA), UNICODE_LETTER);  /* ª Lo */
        ck_assert_int_eq(unicode_classify(0xB2), UNICODE_NUMBER);  /* ² No */
        ck_assert_int_eq(unicode_classify(0x301), UNICODE_MARK);   /* combining acute, Mn */
        ck_assert_int_eq(unicode_classify(0x3001), UNICODE_PUNCT); /* ideographic comma, Po */
        ck_assert_int_eq(unicode_classify(0x1680), UNICODE_SPACE);
        ck_assert_int_eq(unicode_classify(0x180E), UNICODE_OTHER); /* no longer a space */
        ck_assert_int_eq(unicode_classify(0x2028), UNICODE_SPACE);
        ck_assert_int_eq(unicode_classify(0x200B), UNICODE_OTHER); /* zero width space, Cf */
        ck_assert_int_eq(unicode_classify(0x216B), UNICODE_NUMBER); /* Ⅻ Nl */
        ck_assert_int_eq(unicode_classify(0x3000), UNICODE_SPACE);
        ck_assert_int_eq(unicode_classify(0x4E00), UNICODE_LETTER);
        ck_assert_int_eq(unicode_classify(0xAC00), UNICODE_LETTER);
        ck_assert_int_eq(unicode_classify(0x1F600), UNICODE_SYMBOL); /* So */
        ck_assert_int_eq(unicode_classify(0xE000), UNICODE_OTHER);   /* private use, Co */
        ck_assert_int_eq(unicode_classify(0x0378), UNICODE_OTHER);   /* unassigned */
        ck_assert_int_eq(unicode_classify(0x1D7CE), UNICODE_NUMBER); /* mathematical bold digit zero */
        ck_assert_int_eq(unicode_classify(0x20000), UNICODE_LETTER);
        ck_assert_int_eq(unicode_classify(0x10FFFF), UNICODE_OTHER);
        ck_assert_int_eq(unicode_classify(0x110000), UNICODE_OTHER);
}
END_TEST

START_TEST(test_unicode_tables_sorted) {
        for (size_t i = 0; i < unicode_ranges_count; i++) {
                ck_assert_uint_le(unicode_ranges[i].first, unicode_ranges[i].last);
                if (i > 0)
                        ck_assert_uint_gt(unicode_ranges[i].first, unicode_ranges[i - 1].last);
        }
        for (uint32_t cp = 0; cp < 256; cp++) {
                /* The Latin-1 shortcut agrees with the ranges. */
                enum unicode_class c = UNICODE_OTHER;
                for (size_t i = 0; i < unicode_ranges_count && unicode_ranges[i].first <= cp; i++)
                        if (cp <= unicode_ranges[i].last)
                                c = (enum unicode_class) unicode_ranges[i].cls;
                ck_assert_int_eq(unicode_latin1_class[cp], c);
        }
}
END_TEST

START_TEST(test_utf8_next) {
        static const struct {
                const char *s;
                size_t len;
                enum utf8_status status;
                size_t n;
                uint32_t cp;
        } cases[] = {
                { "A", 1, UTF8_VALID, 1, 'A' },
                { "\xc3\xa9", 2, UTF8_VALID, 2, 0xE9 },
                { "\xe2\x82\xac", 3, UTF8_VALID, 3, 0x20AC },
                { "\xf0\x9f\x98\x80", 4, UTF8_VALID, 4, 0x1F600 },
                { "\xf4\x8f\xbf\xbf", 4, UTF8_VALID, 4, 0x10FFFF },
                { "\xed\x9f\xbf", 3, UTF8_VALID, 3, 0xD7FF },
                { "\x80", 1, UTF8_INVALID, 1, 0 },
                { "\xc0\xaf", 2, UTF8_INVALID, 1, 0 },
                { "\xc1\xbf", 2, UTF8_INVALID, 1, 0 },
                { "\xf5\x80\x80\x80", 4, UTF8_INVALID, 1, 0 },
                { "\xff", 1, UTF8_INVALID, 1, 0 },
                { "\xe0\x80\x80", 3, UTF8_INVALID, 1, 0 },     /* overlong */
                { "\xed\xa0\x80", 3, UTF8_INVALID, 1, 0 },     /* surrogate */
                { "\xf0\x80\x80\x80", 4, UTF8_INVALID, 1, 0 }, /* overlong */
                { "\xf4\x90\x80\x80", 4, UTF8_INVALID, 1, 0 }, /* too big */
                { "\xe2\x82x", 3, UTF8_INVALID, 2, 0 },
                { "\xf0\x9f\x98x", 4, UTF8_INVALID, 3, 0 },
                { "\xc3x", 2, UTF8_INVALID, 1, 0 },
                { "\xe2\x82", 2, UTF8_INCOMPLETE, 2, 0 },
                { "\xf0\x9f\x98", 3, UTF8_INCOMPLETE, 3, 0 },
                { "\xf0", 1, UTF8_INCOMPLETE, 1, 0 },
                { "\xed", 1, UTF8_INCOMPLETE, 1, 0 },
        };

        for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
                uint32_t cp = 0;
                size_t n = 0;
                enum utf8_status st = utf8_next((const uint8_t *) cases[i].s, cases[i].len, &cp, &n);
                ck_assert_msg(st == cases[i].status && n == cases[i].n, "case %zu: status %d n %zu", i, st, n);
                if (st == UTF8_VALID)
                        ck_assert_uint_eq(cp, cases[i].cp);
        }

        char buf[UTF8_MAX_LEN];
        ck_assert_uint_eq(utf8_encode(0xD800, buf), 0);
        ck_assert_uint_eq(utf8_encode(0x110000, buf), 0);
        /* Every scalar value round-trips (plain checks: a Check assertion each would be slow). */
        for (uint32_t cp = 0; cp <= UNICODE_MAX; cp++) {
                size_t len = utf8_encode(cp, buf), n = 0;
                uint32_t back = UINT32_MAX;
                if (cp >= 0xD800 && cp <= 0xDFFF)
                        continue;
                bool ok = len > 0 && utf8_next((const uint8_t *) buf, len, &back, &n) == UTF8_VALID && n == len &&
                          back == cp;
                if (!ok)
                        ck_abort_msg("U+%04X does not round-trip: len %zu n %zu back %X", cp, len, n, back);
        }
}
END_TEST

/* The model's tokenizer */

START_TEST(test_load) {
        const struct tokenizer *tk = require_tokenizer();
        size_t len;

        ck_assert_int_eq(tokenizer_vocab_size(tk), 49152);
        ck_assert_int_eq(tokenizer_bos(tk), 1);
        ck_assert_int_eq(tokenizer_eos(tk), 2);
        ck_assert_int_eq(tokenizer_unk(tk), 0);
        ck_assert_int_eq(tokenizer_pad(tk), 2);
        ck_assert(!tokenizer_add_bos(tk));
        ck_assert_str_eq(tokenizer_token_text(tk, 1, NULL), "<|im_start|>");
        ck_assert_str_eq(tokenizer_token_text(tk, 2, &len), "<|im_end|>");
        ck_assert_uint_eq(len, 10);
        ck_assert(tokenizer_is_control(tk, 0));
        ck_assert(tokenizer_is_control(tk, 16));
        ck_assert(!tokenizer_is_control(tk, 17));
        ck_assert(tokenizer_is_special(tk, 2));
        ck_assert_int_eq(tokenizer_token_type(tk, 504), TOKEN_TYPE_NORMAL);
        ck_assert_str_eq(tokenizer_token_text(tk, 216, NULL), "\xc4\xa0"); /* "Ġ" */
        ck_assert_str_eq(tokenizer_token_bytes(tk, 216, &len), " ");
        ck_assert_uint_eq(len, 1);
        ck_assert_str_eq(tokenizer_token_bytes(tk, 198, NULL), "\n");
        ck_assert_str_eq(tokenizer_token_bytes(tk, 1, NULL), "<|im_start|>");
        ck_assert_int_eq(tokenizer_find(tk, "\xc4\xa0the", 5), 260);
        ck_assert_str_eq(tokenizer_token_bytes(tk, 260, NULL), " the");
        ck_assert_int_eq(tokenizer_find(tk, "no such token!", 14), -1);
        ck_assert_ptr_null(tokenizer_token_text(tk, 49152, NULL));
        ck_assert_ptr_null(tokenizer_token_text(tk, -1, NULL));
        ck_assert_ptr_nonnull(tokenizer_chat_template(tk));
        ck_assert_ptr_nonnull(strstr(tokenizer_chat_template(tk), "<|im_start|>"));
}
END_TEST

START_TEST(test_encode_known) {
        const struct tokenizer *tk = require_tokenizer();
        static const int32_t capital[] = { 504, 3575, 282, 4649, 314 };
        static const int32_t hello[] = { 19556, 905, 17, 216, 33, 34, 35 };

        check_ids(tk, "The capital of France is", 24, false, capital, ARRAY_SIZE(capital));
        check_ids(tk, "Hello world! 123", 16, false, hello, ARRAY_SIZE(hello));
        check_ids(tk, "Hello world! 123", 16, true, hello, ARRAY_SIZE(hello));
        check_ids(tk, "", 0, false, NULL, 0);

        /* Runs of spaces: the last one joins the word after; a final run stays whole. */
        int32_t a = tokenizer_find(tk, "a", 1), two = tokenizer_find(tk, "\xc4\xa0\xc4\xa0", 4),
                sb = tokenizer_find(tk, "\xc4\xa0" "b", 3);
        ck_assert(a >= 0 && two >= 0 && sb >= 0);
        check_ids(tk, "a   b", 5, false, (int32_t[]) { a, two, sb }, 3);
        check_ids(tk, "a  ", 3, false, (int32_t[]) { a, two }, 2);
}
END_TEST

START_TEST(test_special_tokens) {
        const struct tokenizer *tk = require_tokenizer();
        const char *text = "<|im_start|>user\nHi<|im_end|>\n";
        int32_t *ids;
        size_t n;

        encode(tk, text, strlen(text), true, &ids, &n);
        ck_assert_uint_ge(n, 4);
        ck_assert_int_eq(ids[0], 1);
        ck_assert_int_eq(ids[n - 2], 2);
        ck_assert_int_eq(ids[n - 1], 198);
        free(ids);

        /* Without parse_special they are plain text. */
        encode(tk, text, strlen(text), false, &ids, &n);
        for (size_t i = 0; i < n; i++)
                ck_assert_msg(!tokenizer_is_special(tk, ids[i]), "special id %d at %zu", ids[i], i);
        free(ids);
        check_round_trip(tk, text, strlen(text), false);
        check_round_trip(tk, text, strlen(text), true);

        /* Adjacent, repeated, and near misses. */
        check_ids(tk, "<|im_end|><|im_end|><|endoftext|>", 33, true, (int32_t[]) { 2, 2, 0 }, 3);
        encode(tk, "<|im_start", 10, true, &ids, &n);
        for (size_t i = 0; i < n; i++)
                ck_assert_int_ne(ids[i], 1);
        free(ids);
        check_ids(tk, "<reponame><repo_name>", 21, true, (int32_t[]) { 4, 3 }, 2);

        /* Text around a special token is split as if the token were the text's edge. */
        int32_t *a, *b, *c;
        size_t na, nb, nc;
        encode(tk, "x  <|im_end|>  y", 16, true, &a, &na);
        encode(tk, "x  ", 3, false, &b, &nb);
        encode(tk, "  y", 3, false, &c, &nc);
        ck_assert_uint_eq(na, nb + 1 + nc);
        ck_assert_mem_eq(a, b, nb * sizeof(*b));
        ck_assert_int_eq(a[nb], 2);
        ck_assert_mem_eq(a + nb + 1, c, nc * sizeof(*c));
        free(a);
        free(b);
        free(c);
}
END_TEST

START_TEST(test_invalid_utf8) {
        const struct tokenizer *tk = require_tokenizer();
        static const char *const texts[] = {
                "\x80", "a\x80" "b", "\xe2\x82" "x", "\xe2\x82\xac", "caf\xc3", " \xc3\xa9\xc3",
                "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xf0\x9f\x98", "\xf0\x9f\x98\x80\xf0\x9f", "!!\xa0!!",
        };

        for (size_t i = 0; i < ARRAY_SIZE(texts); i++)
                check_round_trip(tk, texts[i], strlen(texts[i]), false);

        /* Each invalid byte is its own byte token, a space before it too. */
        int32_t e2 = byte_token(tk, 0xE2), x82 = byte_token(tk, 0x82), x80 = byte_token(tk, 0x80);
        ck_assert_int_ge(e2, 0);
        ck_assert_int_ge(x82, 0);
        ck_assert_int_ge(x80, 0);
        check_ids(tk, "\xe2\x82" "x", 3, false, (int32_t[]) { e2, x82, tokenizer_find(tk, "x", 1) }, 3);
        check_ids(tk, " \x80", 2, false, (int32_t[]) { 216, x80 }, 2);

        /* Bytes the vocabulary lacks (0xFF, 0xC0, 0x04 here) encode to nothing. */
        ck_assert_int_eq(byte_token(tk, 0xFF), -1);
        ck_assert_int_eq(byte_token(tk, 0xC0), -1);
        ck_assert_int_eq(byte_token(tk, 0x04), -1);
        int32_t *a, *b, *c;
        size_t na, nb, nc;
        encode(tk, "ab\xff" "cd", 5, false, &a, &na);
        encode(tk, "ab", 2, false, &b, &nb);
        encode(tk, "cd", 2, false, &c, &nc);
        ck_assert_uint_eq(na, nb + nc);
        ck_assert_mem_eq(a, b, nb * sizeof(*b));
        ck_assert_mem_eq(a + nb, c, nc * sizeof(*c));
        free(a);
        free(b);
        free(c);
        /* ... and no merge spans them (llama.cpp's rule; HF would give "$>)" one token). */
        encode(tk, "$>\x1d)", 4, false, &a, &na);
        encode(tk, "$>", 2, false, &b, &nb);
        encode(tk, ")", 1, false, &c, &nc);
        ck_assert_uint_eq(na, nb + nc);
        ck_assert_mem_eq(a, b, nb * sizeof(*b));
        ck_assert_mem_eq(a + nb, c, nc * sizeof(*c));
        free(a);
        free(b);
        free(c);

        /* NUL is an ordinary byte. */
        check_round_trip(tk, "a\0b", 3, false);

        /* All 256 bytes that have tokens survive, alone and in a stream. */
        char all[256];
        size_t n_all = 0;
        for (unsigned v = 0; v < 256; v++)
                if (byte_token(tk, (uint8_t) v) >= 0)
                        all[n_all++] = (char) v;
        ck_assert_uint_eq(n_all, 256 - 21);
        check_round_trip(tk, all, n_all, false);
}
END_TEST

START_TEST(test_decode) {
        const struct tokenizer *tk = require_tokenizer();
        struct error err = {};
        char *out;
        size_t len;
        int32_t ids[] = { 1, 504, 3575, 2 };

        ck_assert_int_eq(tokenizer_decode(tk, ids, 4, false, &out, &len, &err), 0);
        ck_assert_str_eq(out, "<|im_start|>The capital<|im_end|>");
        ck_assert_uint_eq(len, strlen(out));
        free(out);
        ck_assert_int_eq(tokenizer_decode(tk, ids, 4, true, &out, &len, &err), 0);
        ck_assert_str_eq(out, "The capital");
        free(out);
        ck_assert_int_eq(tokenizer_decode(tk, ids, 0, false, &out, &len, &err), 0);
        ck_assert_str_eq(out, "");
        ck_assert_uint_eq(len, 0);
        free(out);

        int32_t bad[] = { 504, 49152 };
        ck_assert_int_eq(tokenizer_decode(tk, bad, 2, false, &out, &len, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "49152"));
        bad[1] = -5;
        ck_assert_int_eq(tokenizer_decode_text(tk, bad, 2, false, &out, &len, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "-5"));
}
END_TEST

/* Fixtures: tests/fixtures/tokenizer.json, ids from llama.cpp for the same model (made by
 * tests/make-fixtures). */

START_TEST(test_fixtures) {
        const struct tokenizer *tk = require_tokenizer();
        struct json_object *root, *cases;
        size_t n_pass = 0, n_cases, n_round = 0;
        int n_fail = 0;

        root = test_load_fixture("tokenizer.json");
        ck_assert_msg(json_object_object_get_ex(root, "cases", &cases) && json_object_is_type(cases, json_type_array),
                      "tokenizer.json: no \"cases\" array");
        n_cases = json_object_array_length(cases);
        ck_assert_uint_gt(n_cases, 0);

        for (size_t i = 0; i < n_cases; i++) {
                struct json_object *c = json_object_array_get_idx(cases, i), *jtext, *jspecial, *jids;
                ck_assert_msg(json_object_object_get_ex(c, "text", &jtext) &&
                                      json_object_object_get_ex(c, "ids", &jids),
                              "tokenizer.json: case %zu lacks text or ids", i);
                bool special = json_object_object_get_ex(c, "special", &jspecial) && json_object_get_boolean(jspecial);
                const char *text = json_object_get_string(jtext);
                size_t len = (size_t) json_object_get_string_len(jtext);
                size_t n_want = json_object_array_length(jids);
                int32_t *ids, *want = calloc(n_want + 1, sizeof(*want));
                size_t n;

                ck_assert_ptr_nonnull(want);
                for (size_t k = 0; k < n_want; k++)
                        want[k] = json_object_get_int(json_object_array_get_idx(jids, k));
                encode(tk, text, len, special, &ids, &n);
                if (n == n_want && (n == 0 || memcmp(ids, want, n * sizeof(*ids)) == 0))
                        n_pass++;
                else if (n_fail++ < 10) {
                        char *got = format_ids(ids, n), *exp = format_ids(want, n_want);
                        fprintf(stderr, "fixture case %zu (special=%d) \"%.*s\":\n  got      %s\n  expected %s\n", i,
                                special, (int) len, text, got, exp);
                        free(got);
                        free(exp);
                }
                free(ids);
                free(want);

                /* Round trip, except through bytes the vocabulary lacks. */
                bool lossy = false;
                for (size_t k = 0; k < len && !lossy; k++)
                        lossy = byte_token(tk, (uint8_t) text[k]) < 0;
                if (!lossy) {
                        check_round_trip(tk, text, len, special);
                        n_round++;
                }
        }
        json_object_put(root);
        fprintf(stderr, "test-tokenizer: %zu/%zu fixture cases match, %zu round trips\n", n_pass, n_cases, n_round);
        ck_assert_msg(n_fail == 0, "%d of %zu fixture cases differ (see stderr)", n_fail, n_cases);
}
END_TEST

/* Speed: a long text, well under a millisecond per 100 tokens. */

START_TEST(test_speed) {
        const struct tokenizer *tk = require_tokenizer();
        static const char *const parts[] = {
                "The quick brown fox jumps over the lazy dog. ",
                "In 2024, researchers measured 3.14159 radians and 42 widgets; ",
                "def tokenize(text):\n    return [t for t in text.split()]\n",
                "Caf\xc3\xa9 cr\xc3\xa8me br\xc3\xbbl\303\251e co\xc3\xbbte 7,50\xe2\x82\xac. ", /* octal: no run-on */
                "\xe6\x9d\xb1\xe4\xba\xac\xe3\x81\xaf\xe6\x97\xa5\xe6\x9c\xac\xe3\x81\xae\xe9\xa6\x96\xe9\x83\xbd\xe3\x81\xa7\xe3\x81\x99\xe3\x80\x82 ",
                "Supercalifragilisticexpialidocious antidisestablishmentarianism!!! ",
        };
        char text[16384];
        size_t len = 0;
        for (size_t i = 0; len + 200 < sizeof(text); i++) {
                const char *p = parts[(i * 7) % ARRAY_SIZE(parts)];
                memcpy(text + len, p, strlen(p));
                len += strlen(p);
        }

        int32_t *ids;
        size_t n = 0, total = 0;
        struct timespec t0, t1;
        int rounds = 20;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < rounds; i++) {
                encode(tk, text, len, true, &ids, &n);
                total += n;
                free(ids);
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (double) (t1.tv_sec - t0.tv_sec) * 1e3 + (double) (t1.tv_nsec - t0.tv_nsec) / 1e6;
        double per100 = ms / (double) total * 100.0;
        fprintf(stderr, "test-tokenizer: encoded %zu bytes into %zu tokens in %.3f ms (%.4f ms per 100 tokens)\n", len,
                n, ms / rounds, per100);
        /* Loose, so that sanitizers and valgrind pass: it catches quadratic behaviour. */
        ck_assert_msg(per100 < 50.0, "encoding takes %.3f ms per 100 tokens", per100);
}
END_TEST

/* A synthetic byte-level vocabulary, built as a GGUF image in memory, for BPE rules and
 * load errors. */

struct image {
        uint8_t *data;
        size_t len, cap;
        uint64_t n_kv;
};

static void put(struct image *im, const void *p, size_t n) {
        if (im->len + n > im->cap) {
                im->cap = (im->len + n) * 2;
                im->data = realloc(im->data, im->cap);
                ck_assert_ptr_nonnull(im->data);
        }
        memcpy(im->data + im->len, p, n);
        im->len += n;
}

static void put_u32(struct image *im, uint32_t v) {
        put(im, &v, 4);
}

static void put_u64(struct image *im, uint64_t v) {
        put(im, &v, 8);
}

static void put_str(struct image *im, const char *s, size_t len) {
        put_u64(im, len);
        put(im, s, len);
}

static void kv_string(struct image *im, const char *key, const char *value) {
        put_str(im, key, strlen(key));
        put_u32(im, GGUF_VALUE_STRING);
        put_str(im, value, strlen(value));
        im->n_kv++;
}

static void kv_u32(struct image *im, const char *key, uint32_t value) {
        put_str(im, key, strlen(key));
        put_u32(im, GGUF_VALUE_U32);
        put_u32(im, value);
        im->n_kv++;
}

static void kv_strings(struct image *im, const char *key, const char *const *values, size_t n) {
        put_str(im, key, strlen(key));
        put_u32(im, GGUF_VALUE_ARRAY);
        put_u32(im, GGUF_VALUE_STRING);
        put_u64(im, n);
        for (size_t i = 0; i < n; i++)
                put_str(im, values[i], strlen(values[i]));
        im->n_kv++;
}

/* The 256 byte tokens (GPT-2 byte-to-unicode spellings) with id = byte, then extra tokens. */
static char **synthetic_vocab(const char *const *extra, size_t n_extra, size_t *ret_n) {
        char **v = calloc(256 + n_extra, sizeof(*v));
        uint32_t next = 256;
        ck_assert_ptr_nonnull(v);
        for (uint32_t b = 0; b < 256; b++) {
                bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
                char buf[UTF8_MAX_LEN + 1] = {};
                utf8_encode(printable ? b : next++, buf);
                v[b] = strdup(buf);
        }
        for (size_t i = 0; i < n_extra; i++)
                v[256 + i] = strdup(extra[i]);
        *ret_n = 256 + n_extra;
        return v;
}

struct synthetic {
        const char *model, *pre;
        const char *const *extra;
        size_t n_extra;
        const char *const *merges;
        size_t n_merges;
        int64_t bos; /* -1: absent */
};

static int load_synthetic(const struct synthetic *s, struct tokenizer **ret, struct error *err) {
        struct image kvs = {}, im = {};
        struct gguf_file *f;
        size_t n_vocab;
        char **vocab = synthetic_vocab(s->extra, s->n_extra, &n_vocab);
        int r;

        if (s->model)
                kv_string(&kvs, "tokenizer.ggml.model", s->model);
        if (s->pre)
                kv_string(&kvs, "tokenizer.ggml.pre", s->pre);
        kv_strings(&kvs, "tokenizer.ggml.tokens", (const char *const *) vocab, n_vocab);
        kv_strings(&kvs, "tokenizer.ggml.merges", s->merges, s->n_merges);
        if (s->bos >= 0)
                kv_u32(&kvs, "tokenizer.ggml.bos_token_id", (uint32_t) s->bos);

        put(&im, "GGUF", 4);
        put_u32(&im, 3);
        put_u64(&im, 0);
        put_u64(&im, kvs.n_kv);
        put(&im, kvs.data, kvs.len);
        static const uint8_t zeros[32];
        put(&im, zeros, 32 - im.len % 32);

        r = gguf_parse(im.data, im.len, "synthetic.gguf", &f, err);
        ck_assert_msg(r == 0, "gguf_parse: %s", err->message);
        r = tokenizer_load(f, ret, err);
        gguf_close(f);
        free(im.data);
        free(kvs.data);
        for (size_t i = 0; i < n_vocab; i++)
                free(vocab[i]);
        free(vocab);
        return r;
}

START_TEST(test_bpe_rules) {
        /* ids: 256 "aa", 257 "aaa", 258 "ab", 259 "aab" */
        static const char *const extra[] = { "aa", "aaa", "ab", "aab" };
        static const char *const merges[] = { "a a", "a b", "aa a", "a ab" };
        struct synthetic s = { .model = "gpt2", .pre = "gpt-2", .extra = extra, .n_extra = 4, .merges = merges,
                               .n_merges = 4, .bos = -1 };
        struct tokenizer *tk;
        struct error err = {};

        ck_assert_msg(load_synthetic(&s, &tk, &err) == 0, "%s", err.message);
        ck_assert_int_eq(tokenizer_vocab_size(tk), 260);
        ck_assert_int_eq(tokenizer_bos(tk), -1);
        ck_assert_ptr_null(tokenizer_chat_template(tk));

        /* Lowest rank first, leftmost on a tie: "aaaa" -> aa aa (then "aa a" cannot apply). */
        check_ids(tk, "aaaa", 4, false, (int32_t[]) { 256, 256 }, 2);
        /* "aaa" -> (aa) a -> aaa */
        check_ids(tk, "aaa", 3, false, (int32_t[]) { 257 }, 1);
        /* "aab": "a a" (rank 0) beats "a b" (rank 1), so "a ab" never gets a chance. */
        check_ids(tk, "aab", 3, false, (int32_t[]) { 256, 'b' }, 2);
        /* "aaab": aa, a, b -> "aa a" (rank 2) vs "a b" (rank 1): ab first, then aa ab: none. */
        check_ids(tk, "aaab", 4, false, (int32_t[]) { 256, 258 }, 2);
        tokenizer_free(tk);
}
END_TEST

START_TEST(test_load_errors) {
        static const char *const merges[] = { "a b" };
        static const char *const extra[] = { "ab" };
        struct synthetic s = { .model = "bert", .pre = "gpt-2", .extra = extra, .n_extra = 1, .merges = merges,
                               .n_merges = 1, .bos = -1 };
        struct tokenizer *tk = NULL;
        struct error err = {};

        ck_assert_int_eq(load_synthetic(&s, &tk, &err), -EOPNOTSUPP);
        ck_assert_ptr_nonnull(strstr(err.message, "tokenizer.ggml.model"));
        ck_assert_ptr_nonnull(strstr(err.message, "\"bert\""));
        ck_assert_ptr_nonnull(strstr(err.message, "\"llama\" (SentencePiece)"));

        s.model = NULL;
        ck_assert_int_eq(load_synthetic(&s, &tk, &err), -ENOENT);
        ck_assert_ptr_nonnull(strstr(err.message, "tokenizer.ggml.model"));

        s.model = "gpt2";
        s.pre = "qwen9";
        ck_assert_int_eq(load_synthetic(&s, &tk, &err), -EOPNOTSUPP);
        ck_assert_ptr_nonnull(strstr(err.message, "tokenizer.ggml.pre"));
        ck_assert_ptr_nonnull(strstr(err.message, "\"qwen9\""));
        ck_assert_ptr_nonnull(strstr(err.message, "supported: default, gpt-2, "));

        s.pre = "smollm";
        s.bos = 257;
        ck_assert_int_eq(load_synthetic(&s, &tk, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "tokenizer.ggml.bos_token_id"));
        ck_assert_ptr_nonnull(strstr(err.message, "257"));

        s.bos = 256;
        static const char *const bad_merges[] = { "a b", "a c" };
        s.merges = bad_merges;
        s.n_merges = 2;
        ck_assert_int_eq(load_synthetic(&s, &tk, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "tokenizer.ggml.merges[1]"));
        ck_assert_ptr_nonnull(strstr(err.message, "\"ac\""));

        static const char *const malformed[] = { "ab" };
        s.merges = malformed;
        s.n_merges = 1;
        ck_assert_int_eq(load_synthetic(&s, &tk, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "tokenizer.ggml.merges[0]"));

        s.merges = merges;
        ck_assert_int_eq(load_synthetic(&s, &tk, &err), 0);
        ck_assert_int_eq(tokenizer_bos(tk), 256);
        tokenizer_free(tk);
}
END_TEST

static Suite *tokenizer_suite(void) {
        Suite *s = suite_create("tokenizer");
        TCase *tc;

        tc = tcase_create("unicode");
        tcase_add_test(tc, test_unicode_classes);
        tcase_add_test(tc, test_unicode_tables_sorted);
        tcase_add_test(tc, test_utf8_next);
        tcase_set_timeout(tc, 60);
        suite_add_tcase(s, tc);

        tc = tcase_create("pretokenizer");
        tcase_add_test(tc, test_split_gpt2);
        tcase_add_test(tc, test_split_smollm);
        tcase_add_test(tc, test_split_families);
        tcase_add_test(tc, test_split_tiles);
        tcase_add_test(tc, test_split_invalid_utf8);
        tcase_add_test(tc, test_pretokenizer_names);
        suite_add_tcase(s, tc);

        tc = tcase_create("synthetic");
        tcase_add_test(tc, test_bpe_rules);
        tcase_add_test(tc, test_load_errors);
        suite_add_tcase(s, tc);

        tc = tcase_create("model");
        tcase_add_test(tc, test_load);
        tcase_add_test(tc, test_encode_known);
        tcase_add_test(tc, test_special_tokens);
        tcase_add_test(tc, test_invalid_utf8);
        tcase_add_test(tc, test_decode);
        tcase_add_test(tc, test_fixtures);
        tcase_add_test(tc, test_speed);
        tcase_set_timeout(tc, 300);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        load_model_tokenizer();
        return run_suite(tokenizer_suite());
}
