/* SPDX-License-Identifier: MIT */
#pragma once

/* Split rules: the regular expressions of the pre-tokenizers (pretokenizer.h), each written
 * as a hand-made matcher that finds what llama.cpp's regex split finds. Private to
 * tokenizer/.
 *
 * A rule finds the leftmost match in a span of text; the pre-tokenizer cuts the span into
 * its matches and the stretches between them. Two kinds:
 *   - scanning patterns (split-scan.c: GPT-2, Llama 3, Qwen2) tile the text: every position
 *     starts a match, a character no alternative takes being a match of one character;
 *   - isolating patterns (split-isolate.c) match here and there, as a regex search does.
 * A span is a whole text as far as a rule can tell: look-ahead and "$" stop at its end.
 *
 * Character classes follow llama.cpp's: \s is the White_Space property (what its std::regex
 * sees after it maps non-ASCII white space to U+000B), \p{L} \p{N} \p{P} \p{S} \p{M} the
 * general categories (unicode.h), and a class of explicit code points leaves out non-ASCII
 * white space for the same reason. A byte that starts no well-formed UTF-8 sequence belongs
 * to no class, negated ones included. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "unicode.h"

/* Finds the leftmost match within s[pos..end): true with *ret_start >= pos and *ret_end >
 * *ret_start, false when there is none. */
typedef bool (*split_rule_fn)(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end);

/* What a rule sees at a position: the Unicode class (unicode.h) or one of these. */
#define SCAN_INVALID 0x40 /* a byte that starts no well-formed UTF-8 sequence */
#define SCAN_END 0x41     /* past the end of the span */

struct scan_char {
        uint32_t cp; /* UINT32_MAX for SCAN_INVALID and SCAN_END */
        unsigned cls; /* enum unicode_class, SCAN_INVALID or SCAN_END */
        size_t len;   /* bytes; 0 at the end */
};

static inline struct scan_char scan_peek(const uint8_t *s, size_t pos, size_t end) {
        struct scan_char c = { .cp = UINT32_MAX, .cls = SCAN_END };
        size_t n;

        if (pos >= end)
                return c;
        if (utf8_next(s + pos, end - pos, &c.cp, &n) != UTF8_VALID) {
                c.cp = UINT32_MAX;
                c.cls = SCAN_INVALID;
                c.len = 1;
                return c;
        }
        c.cls = unicode_classify(c.cp);
        c.len = n;
        return c;
}

/* [^\s\p{L}\p{N}] */
static inline bool scan_is_other(struct scan_char c) {
        return c.cls == UNICODE_OTHER || c.cls == UNICODE_PUNCT || c.cls == UNICODE_SYMBOL || c.cls == UNICODE_MARK;
}

/* split-scan.c */

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
bool split_gpt2(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end);
/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 * \s*[\r\n]+|\s+(?!\S)|\s+ */
bool split_llama3(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end);
/* Llama 3's with \p{N} for \p{N}{1,3} */
bool split_qwen2(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end);

/* split-isolate.c */

/* \p{N} */
bool split_number(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end);
/* \p{N}+ */
bool split_numbers(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end);
/* [0-9][0-9][0-9] */
bool split_three_digits(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end);
/* [\p{P}\$\+<=>\^~\|]+ (llama.cpp's default pre-tokenizer) */
bool split_punct_symbols(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end);
/* [\p{P}\$\+<=>\^~\|`]+ (Falcon's: the backtick too) */
bool split_punct_symbols_backtick(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end);
/* [\r\n] */
bool split_newline(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end);
/* \s?\p{L}+ */
bool split_space_letters(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end);
/* \s?\p{P}+ */
bool split_space_punct(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end);
/* \s+$ */
bool split_trailing_space(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end);
/* [一-龥ࠀ-一가-퟿]+: U+0800..U+9FA5 and U+AC00..U+D7FF (DeepSeek's CJK and more) */
bool split_deepseek_cjk(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end);
/* \s?[A-Za-zµÀ-ÖØ-öø-ƺ...]+: DeepSeek LLM's cased letters of Latin, Greek, Cyrillic and more */
bool split_deepseek_letters(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end);
/* \s?[!-/:-~！-／：-～‘-‟　-。]+: DeepSeek LLM's ASCII, full-width and CJK punctuation (ASCII
 * letters included: they are in :-~) */
bool split_deepseek_punct(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end);
