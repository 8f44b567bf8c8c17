/* SPDX-License-Identifier: MIT */
#pragma once

/* Pre-tokenizers: split raw text into the pieces that byte-level BPE then encodes one by
 * one, so that no token ever spans two pieces. Internal to the tokenizer; exposed for tests.
 *
 * Every pre-tokenizer here ends with the GPT-2 pattern
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * implemented as a hand-written scanner. The contractions are case-sensitive and use the
 * ASCII apostrophe only; in a run of two or more white space characters followed by
 * something else, the last one is left to start the next piece (so " world" keeps its
 * space).
 *
 * Invalid UTF-8: each byte that does not start a well-formed sequence (see utf8_next()) is
 * a piece of its own, matched by none of the pattern's classes; a space before it is a
 * piece of its own too. Byte-level BPE turns such a piece into that byte's token, so the
 * text's bytes survive encoding. */

#include <stddef.h>

enum pretokenizer {
        /* The GPT-2 pattern alone ("gpt2"; "default" too, as HF's ByteLevel does). */
        PRETOKENIZER_GPT2,
        /* Every \p{N} code point a piece of its own, then the GPT-2 pattern within each
         * remaining run ("smollm", "starcoder"). */
        PRETOKENIZER_SMOLLM,
};

/* Maps tokenizer.ggml.pre to a pre-tokenizer: 0, or -EOPNOTSUPP for a name we lack. */
int pretokenizer_from_name(const char *name, size_t len, enum pretokenizer *ret);

/* Called once per piece, in order; the pieces tile the text exactly. A negative return
 * stops the split and is returned by pretokenize(). */
typedef int (*pretokenizer_piece_fn)(const char *piece, size_t len, void *userdata);

int pretokenize(enum pretokenizer kind, const char *text, size_t len, pretokenizer_piece_fn fn,
                void *userdata);
