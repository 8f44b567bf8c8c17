/* SPDX-License-Identifier: MIT */
#pragma once

/* Cutting a vocabulary's special tokens (control, unknown, user-defined) out of text
 * before the tokenizer proper sees it, as llama.cpp's tokenizer_st_partition does.
 *
 * The rule: tokens are taken in priority order (longest text first, lower id among equals);
 * each takes every occurrence, left to right and without overlap, that lies wholly within
 * text no earlier token took. A token marked rstrip also takes, and drops, the white space
 * (C's isspace()) that follows an occurrence, up to text some token took. What remains
 * between taken stretches is raw text.
 *
 * A vocabulary may have thousands of such tokens (Gemma's 6,249 control tokens, mostly
 * "<unusedN>"), so the text is walked once through a trie of their spellings to learn which
 * occur at all; only those are then placed, each in one pass. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct special_token {
        const char *text; /* must outlive the matcher */
        uint32_t len;     /* > 0 */
        int32_t id;
        bool always; /* recognised even without parse_special (user-defined tokens) */
        bool rstrip; /* swallows the white space after it */
};

struct special_matcher;

/* tokens[0..n) in priority order. -ENOMEM. */
int special_matcher_new(const struct special_token *tokens, size_t n, struct special_matcher **ret);
void special_matcher_free(struct special_matcher *m);

/* A stretch of the text: raw text (id -1) or a special token. */
struct fragment {
        size_t start, len;
        int32_t id;
};

/* Splits text[0..len) into fragments, in order, none empty; a malloc'ed array in *ret
 * (NULL when *ret_n is 0). m may be NULL (no special tokens). -ENOMEM. */
int special_partition(const struct special_matcher *m, const char *text, size_t len, bool parse_special,
                      struct fragment **ret, size_t *ret_n);
