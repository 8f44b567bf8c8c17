/* SPDX-License-Identifier: MIT */
#include <stdint.h>
#include <string.h>

#include "pretokenizer.h"

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))

/* llama.cpp's pre-tokenizers of these names, rule for rule. Names it treats alike share a
 * row's contents, not a row: each name is what a file says. */
static const struct pretokenizer pretokenizers[] = {
        /* No key at all means this too (files older than the key). */
        { .name = "default", .rules = { split_punct_symbols, split_gpt2, split_numbers, split_three_digits } },
        { .name = "gpt-2", .rules = { split_gpt2 } },
        { .name = "mpt", .rules = { split_gpt2 } },
        { .name = "llama-bpe", .rules = { split_llama3 }, .ignore_merges = true, .add_bos = true },
        { .name = "llama3", .rules = { split_llama3 }, .ignore_merges = true, .add_bos = true },
        { .name = "llama-v3", .rules = { split_llama3 }, .ignore_merges = true, .add_bos = true },
        { .name = "qwen2", .rules = { split_qwen2 } },
        { .name = "deepseek-r1-qwen", .rules = { split_qwen2 } }, /* DeepSeek-R1's Qwen distillations */
        { .name = "starcoder", .rules = { split_number, split_gpt2 } },
        { .name = "refact", .rules = { split_number, split_gpt2 } },
        { .name = "command-r", .rules = { split_number, split_gpt2 } },
        { .name = "smollm", .rules = { split_number, split_gpt2 } },
        { .name = "falcon", .rules = { split_punct_symbols_backtick, split_gpt2, split_three_digits } },
        { .name = "deepseek-llm",
          .rules = { split_newline, split_deepseek_letters, split_deepseek_punct, split_trailing_space, split_deepseek_cjk,
            split_numbers } },
        { .name = "deepseek-coder",
          .rules = { split_newline, split_space_letters, split_space_punct, split_deepseek_cjk, split_number } },
};

const struct pretokenizer *pretokenizer_find(const char *name, size_t len) {
        for (size_t i = 0; i < ELEMENTSOF(pretokenizers); i++)
                if (strlen(pretokenizers[i].name) == len && memcmp(pretokenizers[i].name, name, len) == 0)
                        return &pretokenizers[i];
        return NULL;
}

void pretokenizer_names(char *buf, size_t size) {
        size_t o = 0;

        for (size_t i = 0; i < ELEMENTSOF(pretokenizers) && size > 0; i++) {
                size_t n = strlen(pretokenizers[i].name), sep = i > 0 ? 2 : 0;
                if (o + sep + n + 1 > size)
                        break;
                memcpy(buf + o, ", ", sep);
                memcpy(buf + o + sep, pretokenizers[i].name, n);
                o += sep + n;
        }
        if (size > 0)
                buf[o] = '\0';
}

/* The last cut: every invalid byte alone, the rest as it is. */
static int emit(const uint8_t *s, size_t start, size_t end, pretokenizer_piece_fn fn, void *userdata) {
        size_t from = start;
        int r;

        for (size_t p = start; p < end;) {
                struct scan_char c = scan_peek(s, p, end);
                if (c.cls == SCAN_INVALID) {
                        if (p > from && (r = fn((const char *) s + from, p - from, userdata)) < 0)
                                return r;
                        if ((r = fn((const char *) s + p, 1, userdata)) < 0)
                                return r;
                        from = p + 1;
                }
                p += c.len;
        }
        return end > from ? fn((const char *) s + from, end - from, userdata) : 0;
}

/* Rule k and those after it over s[start..end). */
static int split(const struct pretokenizer *pre, size_t k, const uint8_t *s, size_t start, size_t end,
                 pretokenizer_piece_fn fn, void *userdata) {
        size_t pos = start, match_start, match_end;
        int r;

        if (k == PRETOKENIZER_MAX_RULES || !pre->rules[k])
                return emit(s, start, end, fn, userdata);
        while (pos < end && pre->rules[k](s, pos, end, &match_start, &match_end)) {
                if (match_start > pos && (r = split(pre, k + 1, s, pos, match_start, fn, userdata)) < 0)
                        return r;
                if ((r = split(pre, k + 1, s, match_start, match_end, fn, userdata)) < 0)
                        return r;
                pos = match_end;
        }
        return pos < end ? split(pre, k + 1, s, pos, end, fn, userdata) : 0;
}

int pretokenize(const struct pretokenizer *pre, const char *text, size_t len, pretokenizer_piece_fn fn,
                void *userdata) {
        return split(pre, 0, (const uint8_t *) text, 0, len, fn, userdata);
}
