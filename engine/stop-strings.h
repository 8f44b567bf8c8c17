/* SPDX-License-Identifier: MIT */
#pragma once

/* Stop strings in generated text, as vLLM finds them: after each new piece of text, look
 * for every stop string (in the order given) among the positions where it would end inside
 * the new piece; and while the text ends in a part of a stop string that may still
 * complete, hold that part back from the stream. Text may contain NUL bytes. */

#include <stddef.h>

/* The first stop string, in list order, with an occurrence that ends after old_len bytes of
 * text[0..len); its index, its offset in *ret_at; -1 when none. */
int stop_strings_find(const char *const *stops, size_t n_stops, const char *text, size_t len, size_t old_len,
                      size_t *ret_at);

/* How many bytes at the end of text[0..len) are a proper prefix of some stop string: the
 * part that must not be streamed yet. */
size_t stop_strings_partial(const char *const *stops, size_t n_stops, const char *text, size_t len);
