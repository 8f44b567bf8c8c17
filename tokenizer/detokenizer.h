/* SPDX-License-Identifier: MIT */
#pragma once

/* Incremental detokenization of one sequence: push generated ids one at a time and get
 * back the text each completes, always valid UTF-8.
 *
 * A token may end inside a UTF-8 character (byte tokens do, and BPE merges can), so bytes
 * that form an incomplete but still acceptable prefix of a character are held back until
 * a later token completes it or shows it to be ill-formed. Ill-formed bytes become U+FFFD,
 * one per maximal subpart (see utf8_next() in unicode.h: the rule Python's
 * errors="replace" follows), and detokenizer_finish() turns a prefix still held at the
 * end into one U+FFFD. Every decision depends only on bytes already seen, so the pieces
 * concatenate exactly to tokenizer_decode_text() of all the ids, however they were
 * split into tokens. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "tokenizer.h"

struct detokenizer;

/* skip_special: leave out tokenizer_is_special() tokens, as tokenizer_decode() does.
 * tk must outlive the detokenizer. */
int detokenizer_new(const struct tokenizer *tk, bool skip_special, struct detokenizer **ret, struct error *err);
void detokenizer_free(struct detokenizer *d);

/* Feeds one token. *ret_text is the newly completed text (NUL-terminated, possibly empty),
 * valid until the next call on d; *ret_len its length (it may hold NUL characters).
 * -EINVAL naming the id when it is out of range (d is unchanged), -ENOMEM. */
int detokenizer_push(struct detokenizer *d, int32_t id, const char **ret_text, size_t *ret_len,
                     struct error *err);

/* Ends the sequence: returns the held bytes' replacement, if any ("" or U+FFFD), and
 * leaves d ready for a new sequence. */
int detokenizer_finish(struct detokenizer *d, const char **ret_text, size_t *ret_len, struct error *err);

/* Forgets held bytes without emitting them. */
void detokenizer_reset(struct detokenizer *d);
