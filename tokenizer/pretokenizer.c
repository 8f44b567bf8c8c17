/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "pretokenizer.h"
#include "unicode.h"

/* What the scanner sees at a position: the Unicode classes plus two of its own. */
enum scan_class {
        SCAN_OTHER = UNICODE_OTHER,
        SCAN_LETTER = UNICODE_LETTER,
        SCAN_NUMBER = UNICODE_NUMBER,
        SCAN_SPACE = UNICODE_SPACE,
        SCAN_INVALID, /* a byte that starts no well-formed UTF-8 sequence */
        SCAN_END,     /* past the end of the span being split */
};

struct scan_char {
        uint32_t cp;
        enum scan_class cls;
        size_t len; /* bytes */
};

static struct scan_char peek(const uint8_t *s, size_t pos, size_t end) {
        struct scan_char c = { .cls = SCAN_END };
        size_t n;

        if (pos >= end)
                return c;
        if (utf8_next(s + pos, end - pos, &c.cp, &n) != UTF8_VALID) {
                c.cls = SCAN_INVALID;
                c.cp = UINT32_MAX;
                c.len = 1;
                return c;
        }
        c.cls = (enum scan_class) unicode_classify(c.cp);
        c.len = n;
        return c;
}

static bool is_contraction(const uint8_t *s, size_t pos, size_t end, size_t *ret_len) {
        /* 's 't 'm 'd, then 're 've 'll; the characters are ASCII, so bytes will do. */
        if (s[pos] != '\'' || pos + 1 >= end)
                return false;
        uint8_t a = s[pos + 1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd') {
                *ret_len = 2;
                return true;
        }
        if (pos + 2 >= end)
                return false;
        uint8_t b = s[pos + 2];
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
                *ret_len = 3;
                return true;
        }
        return false;
}

/* Where the GPT-2 pattern's match at pos ends, within s[pos..end). */
static size_t gpt2_match_end(const uint8_t *s, size_t pos, size_t end) {
        struct scan_char c = peek(s, pos, end);
        size_t n;

        if (is_contraction(s, pos, end, &n))
                return pos + n;

        /* " ?X+" for the three classes: an optional leading space, then a run. */
        struct scan_char k = c;
        size_t q = pos;
        if (c.cp == ' ') {
                q = pos + c.len;
                k = peek(s, q, end);
        }
        if (k.cls == SCAN_LETTER || k.cls == SCAN_NUMBER || k.cls == SCAN_OTHER) {
                enum scan_class run = k.cls;
                while (k.cls == run) {
                        q += k.len;
                        k = peek(s, q, end);
                }
                return q;
        }

        /* White space: \s+(?!\S) gives back the last character of a run of two or more
         * when something follows, so that it leads the next piece; otherwise \s+. */
        size_t n_space = 0, last_start = pos;
        q = pos;
        for (k = c; k.cls == SCAN_SPACE; k = peek(s, q, end)) {
                last_start = q;
                q += k.len;
                n_space++;
        }
        if (n_space > 1 && k.cls != SCAN_END)
                return last_start;
        if (n_space > 0)
                return q;

        /* Only an invalid byte gets here: it stands alone. */
        return pos + c.len;
}

/* The GPT-2 pattern over s[start..end). The span ends where its caller's piece ends, so
 * the look-ahead of \s+(?!\S) sees the end of the span, not what follows it. */
static int split_gpt2(const uint8_t *s, size_t start, size_t end, pretokenizer_piece_fn fn,
                      void *userdata) {
        for (size_t pos = start; pos < end;) {
                size_t piece_end = gpt2_match_end(s, pos, end);
                int r = fn((const char *) s + pos, piece_end - pos, userdata);
                if (r < 0)
                        return r;
                pos = piece_end;
        }
        return 0;
}

/* Each \p{N} code point alone, and the GPT-2 pattern within the runs between them. */
static int split_smollm(const uint8_t *s, size_t len, pretokenizer_piece_fn fn, void *userdata) {
        size_t run_start = 0, pos = 0;

        while (pos < len) {
                struct scan_char c = peek(s, pos, len);
                if (c.cls != SCAN_NUMBER) {
                        pos += c.len;
                        continue;
                }
                int r = split_gpt2(s, run_start, pos, fn, userdata);
                if (r < 0)
                        return r;
                r = fn((const char *) s + pos, c.len, userdata);
                if (r < 0)
                        return r;
                pos += c.len;
                run_start = pos;
        }
        return split_gpt2(s, run_start, len, fn, userdata);
}

int pretokenizer_from_name(const char *name, size_t len, enum pretokenizer *ret) {
        static const struct {
                const char *name;
                enum pretokenizer kind;
        } names[] = {
                { "gpt2", PRETOKENIZER_GPT2 },
                { "default", PRETOKENIZER_GPT2 },
                { "smollm", PRETOKENIZER_SMOLLM },
                { "starcoder", PRETOKENIZER_SMOLLM },
        };

        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
                if (strlen(names[i].name) == len && memcmp(names[i].name, name, len) == 0) {
                        *ret = names[i].kind;
                        return 0;
                }
        return -EOPNOTSUPP;
}

int pretokenize(enum pretokenizer kind, const char *text, size_t len, pretokenizer_piece_fn fn,
                void *userdata) {
        const uint8_t *s = (const uint8_t *) text;

        switch (kind) {
        case PRETOKENIZER_GPT2:
                return split_gpt2(s, 0, len, fn, userdata);
        case PRETOKENIZER_SMOLLM:
                return split_smollm(s, len, fn, userdata);
        }
        return -EINVAL;
}
