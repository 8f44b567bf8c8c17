/* SPDX-License-Identifier: MIT */
#include "unicode.h"

const struct unicode_range *unicode_find_range(const struct unicode_range *ranges, size_t n, uint32_t cp) {
        size_t lo = 0, hi = n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (cp < ranges[mid].first)
                        hi = mid;
                else if (cp > ranges[mid].last)
                        lo = mid + 1;
                else
                        return &ranges[mid];
        }
        return NULL;
}

enum unicode_class unicode_classify(uint32_t cp) {
        if (cp < 256)
                return (enum unicode_class) unicode_latin1_class[cp];

        const struct unicode_range *r = unicode_find_range(unicode_ranges, unicode_ranges_count, cp);
        return r ? (enum unicode_class) r->cls : UNICODE_OTHER;
}

enum utf8_status utf8_next(const uint8_t *s, size_t len, uint32_t *ret_cp, size_t *ret_n) {
        uint8_t b = s[0];
        size_t need;
        uint32_t cp;
        /* The range the second byte must fall in; it is narrower than 80..BF exactly where
         * overlong forms, surrogates or values above U+10FFFF would otherwise slip through. */
        uint8_t lo = 0x80, hi = 0xBF;

        if (b < 0x80) {
                if (ret_cp)
                        *ret_cp = b;
                *ret_n = 1;
                return UTF8_VALID;
        }
        if (b < 0xC2 || b > 0xF4) {
                *ret_n = 1;
                return UTF8_INVALID;
        }
        if (b < 0xE0) {
                need = 1;
                cp = b & 0x1F;
        } else if (b < 0xF0) {
                need = 2;
                cp = b & 0x0F;
                if (b == 0xE0)
                        lo = 0xA0;
                else if (b == 0xED)
                        hi = 0x9F;
        } else {
                need = 3;
                cp = b & 0x07;
                if (b == 0xF0)
                        lo = 0x90;
                else if (b == 0xF4)
                        hi = 0x8F;
        }

        for (size_t i = 1; i <= need; i++) {
                if (i >= len) {
                        *ret_n = len;
                        return UTF8_INCOMPLETE;
                }
                uint8_t c = s[i];
                if (c < lo || c > hi) {
                        *ret_n = i;
                        return UTF8_INVALID;
                }
                cp = (cp << 6) | (c & 0x3F);
                lo = 0x80;
                hi = 0xBF;
        }

        if (ret_cp)
                *ret_cp = cp;
        *ret_n = need + 1;
        return UTF8_VALID;
}

size_t utf8_encode(uint32_t cp, char *out) {
        if (cp < 0x80) {
                out[0] = (char) cp;
                return 1;
        }
        if (cp < 0x800) {
                out[0] = (char) (0xC0 | (cp >> 6));
                out[1] = (char) (0x80 | (cp & 0x3F));
                return 2;
        }
        if (cp >= 0xD800 && cp <= 0xDFFF)
                return 0;
        if (cp < 0x10000) {
                out[0] = (char) (0xE0 | (cp >> 12));
                out[1] = (char) (0x80 | ((cp >> 6) & 0x3F));
                out[2] = (char) (0x80 | (cp & 0x3F));
                return 3;
        }
        if (cp <= UNICODE_MAX) {
                out[0] = (char) (0xF0 | (cp >> 18));
                out[1] = (char) (0x80 | ((cp >> 12) & 0x3F));
                out[2] = (char) (0x80 | ((cp >> 6) & 0x3F));
                out[3] = (char) (0x80 | (cp & 0x3F));
                return 4;
        }
        return 0;
}

size_t utf8_sanitize(const uint8_t *s, size_t len, char *out) {
        size_t o = 0;

        for (size_t i = 0; i < len;) {
                size_t n;
                if (utf8_next(s + i, len - i, NULL, &n) == UTF8_VALID) {
                        for (size_t k = 0; k < n; k++)
                                out[o++] = (char) s[i + k];
                } else
                        o += utf8_encode(UNICODE_REPLACEMENT, out + o);
                i += n;
        }
        return o;
}
