/* SPDX-License-Identifier: MIT */
#pragma once

/* Pre-tokenizers: split raw text into the pieces that byte-level BPE then encodes one by
 * one, so that no token ever spans two pieces. Internal to the tokenizer; exposed for tests.
 *
 * A pre-tokenizer is named by the GGUF key tokenizer.ggml.pre and described by one row of
 * the table in pretokenizer.c: its split rules (split-rules.h), the regular expressions of
 * llama.cpp's pre-tokenizer of that name, and the two settings that go with them. The
 * rules apply in order, each to every piece the one before it made: a rule cuts a piece
 * into its matches and the stretches between them.
 *
 * Invalid UTF-8: a byte that does not start a well-formed sequence (see utf8_next())
 * belongs to no character class, and the last cut makes it a piece of its own. Byte-level
 * BPE turns such a piece into that byte's token, so the text's bytes survive encoding.
 * (llama.cpp replaces such bytes by U+FFFD first.) */

#include <stdbool.h>
#include <stddef.h>

#include "split-rules.h"

#define PRETOKENIZER_MAX_RULES 6

struct pretokenizer {
        const char *name; /* tokenizer.ggml.pre */
        split_rule_fn rules[PRETOKENIZER_MAX_RULES]; /* in order; NULL after the last */
        /* A piece that is itself a token becomes that token, whatever the merges would
         * make of it (llama.cpp's ignore_merges). */
        bool ignore_merges;
        /* tokenizer.ggml.add_bos_token when the file does not say. */
        bool add_bos;
};

/* The pre-tokenizer named name[0..len), or NULL for one we lack. */
const struct pretokenizer *pretokenizer_find(const char *name, size_t len);

/* The names pretokenizer_find() knows, ", "-separated, into buf (NUL-terminated; as many
 * whole names as fit in size bytes), for error messages. */
void pretokenizer_names(char *buf, size_t size);

/* Called once per piece, in order; the pieces tile the text exactly. A negative return
 * stops the split and is returned by pretokenize(). */
typedef int (*pretokenizer_piece_fn)(const char *piece, size_t len, void *userdata);

int pretokenize(const struct pretokenizer *pre, const char *text, size_t len, pretokenizer_piece_fn fn,
                void *userdata);
