/* SPDX-License-Identifier: MIT */
/* The isolating patterns (split-rules.h): a regex search for the leftmost match, with the
 * alternatives tried in order as ECMAScript does. Every pattern here is a run of one class,
 * possibly after one white space character, so a match is found by trying each position in
 * turn. */
#include "split-rules.h"

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))

/* A run of code points in a set, as struct unicode_range (whose class goes unused). */
#define SET(first, last) { first, last, UNICODE_OTHER }

/* A class of explicit code points never holds non-ASCII white space: llama.cpp's regex sees
 * U+000B there. */
static bool in_explicit_class(const struct unicode_range *ranges, size_t n, struct scan_char c) {
        if (c.cls == SCAN_INVALID || c.cls == SCAN_END || (c.cp >= 0x80 && c.cls == UNICODE_SPACE))
                return false;
        return unicode_find_range(ranges, n, c.cp) != NULL;
}

typedef bool (*class_fn)(struct scan_char c);

/* The leftmost match of `\s?C+` (space_prefix) or `C+`; at most max_run characters of C
 * (0: no limit). */
static bool search_run(const uint8_t *s, size_t pos, size_t end, class_fn in_class, bool space_prefix,
                       size_t max_run, size_t *ret_start, size_t *ret_end) {
        for (size_t p = pos; p < end;) {
                struct scan_char c = scan_peek(s, p, end);
                size_t q = p;

                if (space_prefix && c.cls == UNICODE_SPACE && in_class(scan_peek(s, p + c.len, end)))
                        q = p + c.len;
                struct scan_char k = scan_peek(s, q, end);
                if (in_class(k)) {
                        size_t n = 0;
                        while (in_class(k) && (max_run == 0 || n < max_run)) {
                                q += k.len;
                                n++;
                                k = scan_peek(s, q, end);
                        }
                        *ret_start = p;
                        *ret_end = q;
                        return true;
                }
                p += c.len;
        }
        return false;
}

static bool is_number(struct scan_char c) {
        return c.cls == UNICODE_NUMBER;
}

static bool is_letter(struct scan_char c) {
        return c.cls == UNICODE_LETTER;
}

static bool is_punct(struct scan_char c) {
        return c.cls == UNICODE_PUNCT;
}

static bool is_cr_or_lf(struct scan_char c) {
        return c.cp == '\r' || c.cp == '\n';
}

/* \p{P} and the ASCII symbols $ + < = > ^ ~ | (all of them but the backtick). */
static bool is_punct_or_ascii_symbol(struct scan_char c) {
        return c.cls == UNICODE_PUNCT || (c.cp < 0x80 && c.cls == UNICODE_SYMBOL && c.cp != '`');
}

static bool is_punct_or_ascii_symbol_backtick(struct scan_char c) {
        return c.cls == UNICODE_PUNCT || (c.cp < 0x80 && c.cls == UNICODE_SYMBOL);
}

static bool is_deepseek_cjk(struct scan_char c) {
        static const struct unicode_range ranges[] = { SET(0x0800, 0x9FA5), SET(0xAC00, 0xD7FF) };
        return in_explicit_class(ranges, ELEMENTSOF(ranges), c);
}

static bool is_deepseek_punct(struct scan_char c) {
        static const struct unicode_range ranges[] = {
                SET(0x0021, 0x002F), SET(0x003A, 0x007E), SET(0x2018, 0x201F),
                SET(0x3000, 0x3002), SET(0xFF01, 0xFF0F), SET(0xFF1A, 0xFF5E),
        };
        return in_explicit_class(ranges, ELEMENTSOF(ranges), c);
}

static bool is_deepseek_letter(struct scan_char c) {
        static const struct unicode_range ranges[] = {
                SET(0x0041, 0x005A),   SET(0x0061, 0x007A),   SET(0x00B5, 0x00B5),   SET(0x00C0, 0x00D6),
                SET(0x00D8, 0x00F6),   SET(0x00F8, 0x01BA),   SET(0x01BC, 0x01BF),   SET(0x01C4, 0x0293),
                SET(0x0295, 0x02AF),   SET(0x0370, 0x0373),   SET(0x0376, 0x0377),   SET(0x037B, 0x037D),
                SET(0x037F, 0x037F),   SET(0x0386, 0x0386),   SET(0x0388, 0x038A),   SET(0x038C, 0x038C),
                SET(0x038E, 0x03A1),   SET(0x03A3, 0x03F5),   SET(0x03F7, 0x0481),   SET(0x048A, 0x052F),
                SET(0x0531, 0x0556),   SET(0x10A0, 0x10C5),   SET(0x13A0, 0x13F5),   SET(0x13F8, 0x13FD),
                SET(0x1C90, 0x1CBA),   SET(0x1CBD, 0x1CBF),   SET(0x1D00, 0x1D2B),   SET(0x1D6B, 0x1D77),
                SET(0x1D79, 0x1D9A),   SET(0x1E00, 0x1F15),   SET(0x1F18, 0x1F1D),   SET(0x1F20, 0x1F45),
                SET(0x1F48, 0x1F4D),   SET(0x1F50, 0x1F57),   SET(0x1F59, 0x1F59),   SET(0x1F5B, 0x1F5B),
                SET(0x1F5D, 0x1F5D),   SET(0x1F5F, 0x1F7D),   SET(0x1F80, 0x1FB4),   SET(0x1FB6, 0x1FBC),
                SET(0x1FBE, 0x1FBE),   SET(0x1FC2, 0x1FC4),   SET(0x1FC6, 0x1FCC),   SET(0x1FD0, 0x1FD3),
                SET(0x1FD6, 0x1FDB),   SET(0x1FE0, 0x1FEC),   SET(0x1FF2, 0x1FF4),   SET(0x1FF6, 0x1FFC),
                SET(0x2102, 0x2102),   SET(0x2107, 0x2107),   SET(0x210A, 0x2113),   SET(0x2115, 0x2115),
                SET(0x2119, 0x211D),   SET(0x2124, 0x2124),   SET(0x2126, 0x2126),   SET(0x2128, 0x2128),
                SET(0x212A, 0x212D),   SET(0x212F, 0x2134),   SET(0x2139, 0x2139),   SET(0x213C, 0x213F),
                SET(0x2145, 0x2149),   SET(0x214E, 0x214E),   SET(0x2183, 0x2184),   SET(0x2C00, 0x2C7B),
                SET(0x2C7E, 0x2CE4),   SET(0x2CEB, 0x2CEE),   SET(0x2CF2, 0x2CF3),   SET(0xA640, 0xA66D),
                SET(0xA680, 0xA69B),   SET(0xA722, 0xA76F),   SET(0xA771, 0xA787),   SET(0xA78B, 0xA78E),
                SET(0xAB70, 0xABBF),   SET(0xFB00, 0xFB06),   SET(0xFB13, 0xFB17),   SET(0xFF21, 0xFF3A),
                SET(0xFF41, 0xFF5A),   SET(0x10400, 0x1044F), SET(0x104B0, 0x104D3), SET(0x104D8, 0x104FB),
                SET(0x10C80, 0x10CB2), SET(0x10CC0, 0x10CF2), SET(0x118A0, 0x118DF), SET(0x1E900, 0x1E943),
        };
        return in_explicit_class(ranges, ELEMENTSOF(ranges), c);
}

bool split_number(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end) {
        return search_run(s, pos, end, is_number, false, 1, ret_start, ret_end);
}

bool split_numbers(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end) {
        return search_run(s, pos, end, is_number, false, 0, ret_start, ret_end);
}

bool split_three_digits(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end) {
        /* Digits are single bytes, and no byte of a longer character looks like one. */
        for (size_t p = pos; p + 3 <= end; p++)
                if (s[p] >= '0' && s[p] <= '9' && s[p + 1] >= '0' && s[p + 1] <= '9' && s[p + 2] >= '0' &&
                    s[p + 2] <= '9') {
                        *ret_start = p;
                        *ret_end = p + 3;
                        return true;
                }
        return false;
}

bool split_punct_symbols(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end) {
        return search_run(s, pos, end, is_punct_or_ascii_symbol, false, 0, ret_start, ret_end);
}

bool split_punct_symbols_backtick(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end) {
        return search_run(s, pos, end, is_punct_or_ascii_symbol_backtick, false, 0, ret_start, ret_end);
}

bool split_newline(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end) {
        return search_run(s, pos, end, is_cr_or_lf, false, 1, ret_start, ret_end);
}

bool split_space_letters(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end) {
        return search_run(s, pos, end, is_letter, true, 0, ret_start, ret_end);
}

bool split_space_punct(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end) {
        return search_run(s, pos, end, is_punct, true, 0, ret_start, ret_end);
}

bool split_trailing_space(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end) {
        size_t run_start = end;

        /* The white space run that reaches the end, if any: one pass, remembering where the
         * current run began. */
        for (size_t p = pos; p < end;) {
                struct scan_char c = scan_peek(s, p, end);
                if (c.cls != UNICODE_SPACE)
                        run_start = end;
                else if (run_start == end)
                        run_start = p;
                p += c.len;
        }
        if (run_start == end)
                return false;
        *ret_start = run_start;
        *ret_end = end;
        return true;
}

bool split_deepseek_cjk(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end) {
        return search_run(s, pos, end, is_deepseek_cjk, false, 0, ret_start, ret_end);
}

bool split_deepseek_letters(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end) {
        return search_run(s, pos, end, is_deepseek_letter, true, 0, ret_start, ret_end);
}

bool split_deepseek_punct(const uint8_t *s, size_t pos, size_t end, size_t *ret_start, size_t *ret_end) {
        return search_run(s, pos, end, is_deepseek_punct, true, 0, ret_start, ret_end);
}
