/* SPDX-License-Identifier: MIT */
/* The scanning patterns (split-rules.h): GPT-2's and the Llama 3 / Qwen2 one. Each returns
 * the match at pos; what no alternative takes is a match of one character. */
#include "split-rules.h"

static uint8_t ascii_lower(uint8_t c) {
        return c >= 'A' && c <= 'Z' ? (uint8_t) (c + 'a' - 'A') : c;
}

/* 's 't 'm 'd, then 're 've 'll, at pos; ignore_case as Llama 3's (?i:...). The letters are
 * ASCII, and no other code point lowercases to one of them, so bytes will do. */
static size_t contraction_length(const uint8_t *s, size_t pos, size_t end, bool ignore_case) {
        if (s[pos] != '\'' || pos + 1 >= end)
                return 0;
        uint8_t a = ignore_case ? ascii_lower(s[pos + 1]) : s[pos + 1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd')
                return 2;
        if (pos + 2 >= end)
                return 0;
        uint8_t b = ignore_case ? ascii_lower(s[pos + 2]) : s[pos + 2];
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
                return 3;
        return 0;
}

static bool is_cr_or_lf(struct scan_char c) {
        return c.cp == '\r' || c.cp == '\n';
}

/* \s+(?!\S)|\s+ over the white space at pos (the caller knows there is some): a run of two
 * or more followed by something gives its last character to what follows. */
static size_t space_run_end(const uint8_t *s, size_t pos, size_t end) {
        size_t n_space = 0, last_start = pos, q = pos;
        struct scan_char k;

        for (k = scan_peek(s, q, end); k.cls == UNICODE_SPACE; k = scan_peek(s, q, end)) {
                last_start = q;
                q += k.len;
                n_space++;
        }
        if (n_space > 1 && k.cls != SCAN_END)
                return last_start;
        return q;
}

static size_t gpt2_match_end(const uint8_t *s, size_t pos, size_t end) {
        struct scan_char c = scan_peek(s, pos, end);
        size_t n = contraction_length(s, pos, end, false);

        if (n > 0)
                return pos + n;

        /* " ?X+" for letters, numbers and the rest: an optional leading space, then a run. */
        struct scan_char k = c;
        size_t q = pos;
        if (c.cp == ' ') {
                q = pos + c.len;
                k = scan_peek(s, q, end);
        }
        if (k.cls == UNICODE_LETTER || k.cls == UNICODE_NUMBER) {
                unsigned run = k.cls;
                while (k.cls == run) {
                        q += k.len;
                        k = scan_peek(s, q, end);
                }
                return q;
        }
        if (scan_is_other(k)) {
                while (scan_is_other(k)) {
                        q += k.len;
                        k = scan_peek(s, q, end);
                }
                return q;
        }

        if (c.cls == UNICODE_SPACE)
                return space_run_end(s, pos, end);
        /* Only an invalid byte gets here: it stands alone. */
        return pos + c.len;
}

bool split_gpt2(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end) {
        if (pos >= end)
                return false;
        *ret_start = pos;
        *ret_end = gpt2_match_end(s, pos, end);
        return true;
}

/* Llama 3's pattern, with digit runs cut max_digits at a time (3; Qwen2's 1). */
static size_t llama3_match_end(const uint8_t *s, size_t pos, size_t end, size_t max_digits) {
        struct scan_char c = scan_peek(s, pos, end), k;
        size_t n = contraction_length(s, pos, end, true), q;

        if (n > 0)
                return pos + n;

        /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        if (!is_cr_or_lf(c) && c.cls != UNICODE_NUMBER && c.cls != SCAN_INVALID) {
                q = pos + c.len;
                k = scan_peek(s, q, end);
                if (c.cls == UNICODE_LETTER || k.cls == UNICODE_LETTER) {
                        while (k.cls == UNICODE_LETTER) {
                                q += k.len;
                                k = scan_peek(s, q, end);
                        }
                        return q;
                }
        }

        /* \p{N}{1,max_digits} */
        if (c.cls == UNICODE_NUMBER) {
                q = pos;
                for (k = c, n = 0; k.cls == UNICODE_NUMBER && n < max_digits; k = scan_peek(s, q, end), n++)
                        q += k.len;
                return q;
        }

        /* ` ?[^\s\p{L}\p{N}]+[\r\n]*` */
        k = c;
        q = pos;
        if (c.cp == ' ') {
                q = pos + c.len;
                k = scan_peek(s, q, end);
        }
        if (scan_is_other(k)) {
                while (scan_is_other(k)) {
                        q += k.len;
                        k = scan_peek(s, q, end);
                }
                while (is_cr_or_lf(k)) {
                        q += k.len;
                        k = scan_peek(s, q, end);
                }
                return q;
        }

        if (c.cls == UNICODE_SPACE) {
                /* \s*[\r\n]+: the run up to its last CR or LF, if it has one. */
                size_t after_newline = 0;
                q = pos;
                for (k = c; k.cls == UNICODE_SPACE; k = scan_peek(s, q, end)) {
                        q += k.len;
                        if (is_cr_or_lf(k))
                                after_newline = q;
                }
                if (after_newline > 0)
                        return after_newline;
                return space_run_end(s, pos, end);
        }
        return pos + c.len;
}

bool split_llama3(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end) {
        if (pos >= end)
                return false;
        *ret_start = pos;
        *ret_end = llama3_match_end(s, pos, end, 3);
        return true;
}

bool split_qwen2(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end) {
        if (pos >= end)
                return false;
        *ret_start = pos;
        *ret_end = llama3_match_end(s, pos, end, 1);
        return true;
}
