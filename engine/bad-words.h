/* SPDX-License-Identifier: MIT */
#pragma once

/* vLLM's bad_words: each word becomes the token sequences that spell it at the start of a
 * text and after a space; the sampler then masks a sequence's last token whenever the
 * output so far ends with the rest of it. */

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "tokenizer.h"

struct bad_word_sequences {
        int32_t *token_ids; /* the sequences back to back */
        uint32_t *ends;     /* (n) one past the end of each sequence in token_ids */
        size_t n;
};

/* Tokenizes words as vLLM does: a word less its leading whitespace, then with one space in
 * front; the second is kept only when it is a different token sequence of the same length
 * (the word then has its own token after a space). Repeated words count once. -EINVAL
 * naming a word that gives no token or too many sequences; -ENOMEM. On error ret is empty. */
int bad_words_tokenize(const struct tokenizer *tk, const char *const *words, size_t n_words,
                       struct bad_word_sequences *ret, struct error *err);

void bad_word_sequences_done(struct bad_word_sequences *s);
