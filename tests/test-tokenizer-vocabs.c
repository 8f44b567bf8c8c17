/* SPDX-License-Identifier: MIT */
/* The tokenizers of the popular model families against llama.cpp's own tokenizer tests:
 * its vocabulary-only GGUFs (ggml-vocab-NAME.gguf, metadata and no tensors) with their cases
 * (NAME.gguf.inp: texts separated by a line "__ggml_vocab_test__"; NAME.gguf.out: the ids
 * llama.cpp gives each, one line per text), as its test-tokenizer-0 reads them. Each file is
 * loaded through the GGUF reader and tokenizer_load(), as a model's would be.
 *
 * The files come from the pinned llama-cpp-python sdist: $ASYNCLLM_VOCABS names the folder
 * tests/extract-vocab-fixtures filled (tests/test-tokenizer-vocabs.sh runs it first). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "test-helpers.h"
#include "tokenizer.h"
#include "unicode.h"

/* bos: whether llama.cpp starts a prompt with BOS (llama-tokenize without --no-bos): by the
 * file's tokenizer.ggml.add_bos_token, else by default (SentencePiece, llama-bpe). */
static const struct {
        const char *name;
        bool bos;
} vocabs[] = {
        { "llama-bpe", true },  { "qwen2", false },  { "deepseek-llm", true }, { "deepseek-coder", true },
        { "gpt-2", false },     { "starcoder", false }, { "falcon", false },    { "command-r", true },
        { "refact", false },    { "mpt", false },    { "llama-spm", true },    { "phi-3", true },
};

/* The detokenizer round trip of llama.cpp's test-tokenizer-1-spm, which it runs on
 * llama-spm; phi-3 is SentencePiece too. */
static const char *const round_trip_vocabs[] = { "llama-spm", "phi-3" };

#define CASE_SEPARATOR "\n__ggml_vocab_test__\n"

static char *vocab_path(const char *name, const char *suffix) {
        const char *dir = getenv("ASYNCLLM_VOCABS");
        char file[128];

        ck_assert_msg(dir && *dir, "ASYNCLLM_VOCABS must name the folder tests/extract-vocab-fixtures fills");
        snprintf(file, sizeof(file), "ggml-vocab-%s.gguf%s", name, suffix);
        return test_path_join(dir, file);
}

static char *read_text(const char *path, size_t *ret_len) {
        uint8_t *buf;
        int r = test_read_file(path, &buf, ret_len);
        ck_assert_msg(r == 0, "cannot read %s (%s): run tests/extract-vocab-fixtures --download DIR and set ASYNCLLM_VOCABS",
                      path, strerror(-r));
        char *text = realloc(buf, *ret_len + 1);
        ck_assert_ptr_nonnull(text);
        text[*ret_len] = '\0';
        return text;
}

static struct tokenizer *load_file(const char *path) {
        struct tokenizer *tk;
        struct gguf_file *f;
        struct error err = {};

        ck_assert_msg(gguf_open(path, &f, &err) == 0, "gguf_open(%s): %s", path, err.message);
        ck_assert_msg(tokenizer_load(f, &tk, &err) == 0, "tokenizer_load(%s): %s", path, err.message);
        gguf_close(f);
        return tk;
}

static struct tokenizer *load_vocab(const char *name) {
        char *path = vocab_path(name, "");
        struct tokenizer *tk = load_file(path);

        free(path);
        return tk;
}

/* One line of the .out file: ids separated by spaces, white space around them ignored. */
static int32_t *parse_ids(const char *line, size_t len, size_t *ret_n) {
        int32_t *ids = malloc((len / 2 + 1) * sizeof(*ids));
        size_t n = 0;

        ck_assert_ptr_nonnull(ids);
        for (size_t i = 0; i < len;) {
                if (line[i] == ' ' || line[i] == '\t' || line[i] == '\r') {
                        i++;
                        continue;
                }
                char *endp;
                long v = strtol(line + i, &endp, 10);
                ck_assert_msg(endp > line + i && endp <= line + len, "bad id in \"%.*s\"", (int) len, line);
                ids[n++] = (int32_t) v;
                i = (size_t) (endp - line);
        }
        *ret_n = n;
        return ids;
}

static void print_ids(const char *label, const int32_t *ids, size_t n) {
        fprintf(stderr, "  %s [", label);
        for (size_t i = 0; i < n && i < 40; i++)
                fprintf(stderr, "%s%d", i ? ", " : "", ids[i]);
        fprintf(stderr, "%s]\n", n > 40 ? ", ..." : "");
}

/* What llama.cpp's detokenize gives for ids (control tokens as their text): the bytes, less
 * the leading space SentencePiece's encoder added. malloc'ed. */
static char *detokenize(const struct tokenizer *tk, const int32_t *ids, size_t n, size_t *ret_len) {
        struct error err = {};
        char *text;

        ck_assert_msg(tokenizer_decode(tk, ids, n, false, &text, ret_len, &err) == 0, "%s", err.message);
        if (tokenizer_add_space_prefix(tk) && *ret_len > 0 && text[0] == ' ')
                memmove(text, text + 1, (*ret_len)--);
        return text;
}

START_TEST(test_vocab_cases) {
        const char *name = vocabs[_i].name;
        struct tokenizer *tk = load_vocab(name);
        char *inp_path = vocab_path(name, ".inp"), *out_path = vocab_path(name, ".out");
        size_t inp_len, out_len, n_cases = 0, n_fail = 0, n_round_trip_fail = 0;
        char *inp = read_text(inp_path, &inp_len), *out = read_text(out_path, &out_len);
        const char *text = inp, *line = out;
        struct error err = {};

        /* As llama.cpp reads them: a separator at the very end opens no case. */
        while (text < inp + inp_len) {
                const char *sep = strstr(text, CASE_SEPARATOR);
                size_t len = sep ? (size_t) (sep - text) : (size_t) (inp + inp_len - text);
                const char *line_end = memchr(line, '\n', (size_t) (out + out_len - line));
                ck_assert_msg(line < out + out_len, "%s has fewer lines than %s has cases", out_path, inp_path);
                size_t line_len = line_end ? (size_t) (line_end - line) : (size_t) (out + out_len - line);

                size_t n_want, n;
                int32_t *want = parse_ids(line, line_len, &n_want), *ids;
                ck_assert_msg(tokenizer_encode(tk, text, len, false, &ids, &n, &err) == 0, "%s", err.message);
                if (n != n_want || (n > 0 && memcmp(ids, want, n * sizeof(*ids)) != 0)) {
                        if (n_fail++ < 5) {
                                fprintf(stderr, "%s case %zu \"%.*s\":\n", name, n_cases, (int) (len < 80 ? len : 80),
                                        text);
                                print_ids("got     ", ids, n);
                                print_ids("expected", want, n_want);
                        }
                } else {
                        /* Every byte has a token in these vocabularies, so the text comes back. */
                        size_t back_len;
                        char *back = detokenize(tk, ids, n, &back_len);
                        if (back_len != len || memcmp(back, text, len) != 0)
                                if (n_round_trip_fail++ < 5)
                                        fprintf(stderr, "%s case %zu \"%.*s\" decodes to \"%s\"\n", name, n_cases,
                                                (int) len, text, back);
                        free(back);
                }
                free(ids);
                free(want);
                n_cases++;
                line = line_end ? line_end + 1 : out + out_len;
                text = sep ? sep + strlen(CASE_SEPARATOR) : inp + inp_len;
        }
        ck_assert_msg(line >= out + out_len, "%s has more lines than %s has cases", out_path, inp_path);

        fprintf(stderr, "test-tokenizer-vocabs: %s: %zu/%zu cases match llama.cpp\n", name, n_cases - n_fail, n_cases);
        ck_assert_msg(n_fail == 0, "%s: %zu of %zu cases differ from llama.cpp (see stderr)", name, n_fail, n_cases);
        ck_assert_msg(n_round_trip_fail == 0, "%s: %zu cases do not decode back to their text (see stderr)", name,
                      n_round_trip_fail);
        free(inp);
        free(out);
        free(inp_path);
        free(out_path);
        tokenizer_free(tk);
}
END_TEST

/* test-tokenizer-1-spm: every token's text encodes (special tokens parsed) to ids that
 * decode to that text again; so does every code point but U+2581, which stands for a space. */
START_TEST(test_round_trip) {
        const char *name = round_trip_vocabs[_i];
        struct tokenizer *tk = load_vocab(name);
        struct error err = {};
        size_t n_fail = 0;

        for (int32_t id = 0; id < tokenizer_vocab_size(tk); id++) {
                size_t len, n, back_len;
                int32_t *ids;
                char *text = detokenize(tk, &id, 1, &len);
                ck_assert_msg(tokenizer_encode(tk, text, len, true, &ids, &n, &err) == 0, "%s", err.message);
                char *back = detokenize(tk, ids, n, &back_len);
                if ((back_len != len || memcmp(back, text, len) != 0) && n_fail++ < 5)
                        fprintf(stderr, "%s: token %d \"%s\" comes back as \"%s\"\n", name, id, text, back);
                free(back);
                free(ids);
                free(text);
        }
        for (uint32_t cp = 0; cp <= UNICODE_MAX; cp++) {
                char text[4];
                size_t len, n, back_len;
                int32_t *ids;

                if ((cp >= 0xD800 && cp <= 0xDFFF) || (cp >= 0x40000 && cp <= 0xE0000) || cp == 0x2581)
                        continue; /* surrogates; unassigned planes, as llama.cpp's test skips them */
                len = utf8_encode(cp, text);
                ck_assert_msg(tokenizer_encode(tk, text, len, false, &ids, &n, &err) == 0, "%s", err.message);
                char *back = detokenize(tk, ids, n, &back_len);
                if ((back_len != len || memcmp(back, text, len) != 0) && n_fail++ < 5)
                        fprintf(stderr, "%s: U+%04X comes back as \"%s\"\n", name, cp, back);
                free(back);
                free(ids);
        }
        ck_assert_msg(n_fail == 0, "%s: %zu tokens or code points do not come back (see stderr)", name, n_fail);
        tokenizer_free(tk);
}
END_TEST

static void encode(const struct tokenizer *tk, const char *text, bool parse_special, int32_t **ret_ids, size_t *ret_n) {
        struct error err = {};
        ck_assert_msg(tokenizer_encode(tk, text, strlen(text), parse_special, ret_ids, ret_n, &err) == 0, "%s",
                      err.message);
}

static bool same_encoding(const struct tokenizer *tk, const char *a, const char *b, bool parse_special) {
        int32_t *ia, *ib;
        size_t na, nb;
        encode(tk, a, parse_special, &ia, &na);
        encode(tk, b, parse_special, &ib, &nb);
        bool same = na == nb && (na == 0 || memcmp(ia, ib, na * sizeof(*ia)) == 0);
        free(ia);
        free(ib);
        return same;
}

/* The single token text encodes to, or -1 when it is not one token. */
static int32_t single_token(const struct tokenizer *tk, const char *text, bool parse_special) {
        int32_t *ids, id;
        size_t n;
        encode(tk, text, parse_special, &ids, &n);
        id = n == 1 ? ids[0] : -1;
        free(ids);
        return id;
}

/* Phi-3 (general.name "Phi3"): its special tokens swallow the white space after them, but
 * for <s>, <unk> and <|endoftext|>; "</s>", user-defined in the file, is control by its text. */
START_TEST(test_phi3_specials) {
        struct tokenizer *tk = load_vocab("phi-3");
        ck_assert(same_encoding(tk, "<|user|>\n Hi there<|end|>\n<|assistant|>\n",
                                "<|user|>Hi there<|end|><|assistant|>", true));
        ck_assert(!same_encoding(tk, "<s>\nHi", "<s>Hi", true));
        ck_assert(!same_encoding(tk, "<|endoftext|> Hi", "<|endoftext|>Hi", true));
        /* Without parse_special the text stays text, its white space with it. */
        ck_assert(!same_encoding(tk, "<|end|>\nHi", "<|end|>Hi", false));
        ck_assert_int_eq(tokenizer_token_type(tk, 2), TOKEN_TYPE_CONTROL);
        ck_assert_int_eq(single_token(tk, "</s>", true), 2);
        ck_assert_int_eq(single_token(tk, "</s>", false), -1);
        tokenizer_free(tk);
}
END_TEST

/* Tokens spelled like an end of turn or a fill-in-the-middle marker are control tokens,
 * whatever type the file gives them (Qwen's "</s>" is normal there, DeepSeek Coder's FIM
 * markers user-defined). */
START_TEST(test_control_lookalikes) {
        struct tokenizer *qwen = load_vocab("qwen2"), *coder = load_vocab("deepseek-coder");
        int32_t begin = tokenizer_find(coder, "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", 19);

        ck_assert_int_eq(single_token(qwen, "</s>", true), 128247);
        ck_assert_int_eq(single_token(qwen, "</s>", false), -1);
        ck_assert(tokenizer_is_control(qwen, 128247));
        ck_assert_int_ge(begin, 0);
        ck_assert(tokenizer_is_control(coder, begin));
        ck_assert_int_eq(single_token(coder, "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", true), begin);
        ck_assert_int_eq(single_token(coder, "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", false), -1);
        tokenizer_free(qwen);
        tokenizer_free(coder);
}
END_TEST

/* The end-of-generation sets are llama.cpp's, as tests/make-eog-fixtures recorded them
 * (a vocabulary of tests/extract-vocab-fixtures, or models/FILE). */
START_TEST(test_eog_sets) {
        const char *src = getenv("ASYNCLLM_SRCDIR");
        ck_assert_msg(src && *src, "ASYNCLLM_SRCDIR must name the source tree");
        char *fixture = test_path_join(src, "tests/fixtures/eog-tokens.txt");
        size_t len, checked = 0;
        char *text = read_text(fixture, &len);

        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
                if (line[0] == '#')
                        continue;
                size_t name_len = strcspn(line, " ");
                char name[128], *path;
                ck_assert_uint_lt(name_len, sizeof(name));
                snprintf(name, sizeof(name), "%.*s", (int) name_len, line);
                if (strchr(name, '/')) { /* models/FILE */
                        path = test_path_join(src, name);
                        if (access(path, R_OK) < 0) {
                                printf("SKIP: %s is missing (scripts/fetch-model fetches it)\n", path);
                                free(path);
                                continue;
                        }
                } else
                        path = vocab_path(name, "");

                size_t n_want, n_got;
                int32_t *want = parse_ids(line + name_len, strlen(line + name_len), &n_want);
                struct tokenizer *tk = load_file(path);
                const int32_t *got = tokenizer_eog_ids(tk, &n_got);
                if (n_got != n_want || memcmp(got, want, n_want * sizeof(*want)) != 0) {
                        fprintf(stderr, "%s: end-of-generation ids differ from llama.cpp's\n", name);
                        print_ids("llama.cpp", want, n_want);
                        print_ids("ours", got, n_got);
                        ck_abort_msg("%s: end-of-generation ids differ", name);
                }
                for (size_t i = 0; i < n_want; i++)
                        ck_assert(tokenizer_is_eog(tk, want[i]));
                ck_assert(!tokenizer_is_eog(tk, -1));
                tokenizer_free(tk);
                free(want);
                free(path);
                checked++;
        }
        ck_assert_uint_ge(checked, 6);
        free(text);
        free(fixture);
}
END_TEST

/* A prompt: BOS first where llama.cpp puts it, then the text's ids; never EOS. */
START_TEST(test_vocab_prompt) {
        struct tokenizer *tk = load_vocab(vocabs[_i].name);
        struct error err = {};
        int32_t *ids, *prompt;
        size_t n, n_prompt;

        encode(tk, "Hi", false, &ids, &n);
        ck_assert_msg(tokenizer_encode_prompt(tk, "Hi", 2, false, &prompt, &n_prompt, &err) == 0, "%s", err.message);
        ck_assert_int_eq(tokenizer_add_bos(tk), vocabs[_i].bos);
        size_t skip = vocabs[_i].bos ? 1 : 0;
        ck_assert_uint_eq(n_prompt, n + skip);
        if (vocabs[_i].bos)
                ck_assert_int_eq(prompt[0], tokenizer_bos(tk));
        ck_assert_mem_eq(prompt + skip, ids, n * sizeof(*ids));
        free(ids);
        free(prompt);
        tokenizer_free(tk);
}
END_TEST

static Suite *vocabs_suite(void) {
        Suite *s = suite_create("tokenizer-vocabs");
        TCase *tc = tcase_create("cases");
        tcase_add_loop_test(tc, test_vocab_cases, 0, (int) (sizeof(vocabs) / sizeof(vocabs[0])));
        tcase_add_loop_test(tc, test_vocab_prompt, 0, (int) (sizeof(vocabs) / sizeof(vocabs[0])));
        tcase_set_timeout(tc, 60);
        suite_add_tcase(s, tc);
        tc = tcase_create("round-trip");
        tcase_add_loop_test(tc, test_round_trip, 0, (int) (sizeof(round_trip_vocabs) / sizeof(round_trip_vocabs[0])));
        tcase_set_timeout(tc, 120);
        suite_add_tcase(s, tc);
        tc = tcase_create("special-tokens");
        tcase_add_test(tc, test_phi3_specials);
        tcase_add_test(tc, test_control_lookalikes);
        tcase_add_test(tc, test_eog_sets);
        tcase_set_timeout(tc, 60);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(vocabs_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
