/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <string.h>

#include "stop-strings.h"

int stop_strings_find(const char *const *stops, size_t n_stops, const char *text, size_t len, size_t old_len,
                      size_t *ret_at) {
        for (size_t i = 0; i < n_stops; i++) {
                size_t n = strlen(stops[i]);
                if (n == 0 || n > len)
                        continue;
                /* a match must end beyond old_len, so it starts at old_len - n + 1 or later */
                size_t from = old_len + 1 > n ? old_len + 1 - n : 0;
                const char *hit = memmem(text + from, len - from, stops[i], n);
                if (hit) {
                        *ret_at = (size_t) (hit - text);
                        return (int) i;
                }
        }
        return -1;
}

size_t stop_strings_partial(const char *const *stops, size_t n_stops, const char *text, size_t len) {
        size_t best = 0;
        for (size_t i = 0; i < n_stops; i++) {
                size_t n = strlen(stops[i]);
                if (n == 0)
                        continue;
                for (size_t k = n - 1 < len ? n - 1 : len; k > best; k--)
                        if (memcmp(text + len - k, stops[i], k) == 0) {
                                best = k;
                                break;
                        }
        }
        return best;
}
