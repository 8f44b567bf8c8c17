/* SPDX-License-Identifier: MIT */
#pragma once

/* The tokenizer of a GGUF file: byte-level BPE (tokenizer.ggml.model "gpt2") or
 * SentencePiece (tokenizer.ggml.model "llama"), each giving the ids llama.cpp gives.
 *
 * Special tokens come first, in both: types control (3) and unknown (2) are recognised in
 * the text only when parse_special is true; user-defined tokens (4) always are, as
 * llama.cpp and HF tokenizers do. A token spelled like an end of turn or a fill-in-the-middle
 * marker counts as control whatever its type, and Phi-3's special tokens swallow the white
 * space after them, as llama.cpp decides from the text (token-attributes.c). Longer tokens
 * take precedence: they are cut out first, in order of decreasing length (special-tokens.h).
 * What remains is raw text:
 *
 * BPE: each stretch of raw text is split into pieces by the model's pre-tokenizer
 * (tokenizer.ggml.pre, "default" when absent; pretokenizer.h lists them); each piece's
 * bytes start as single-byte tokens, and the merge with the lowest rank (leftmost on a tie)
 * is applied until none applies. With the pre-tokenizer's ignore_merges (llama-bpe), a
 * piece that is itself a token is that token.
 *
 * SentencePiece: spaces become U+2581 (after a leading space when
 * tokenizer.ggml.add_space_prefix, default true, holds and the stretch opens the text or
 * follows a special token), characters are joined by the highest piece score, and what
 * forms no piece falls back to byte pieces "<0xXX>" (tokenizer-spm.c). Nothing is
 * validated or replaced, and well-formed text round-trips; as in llama.cpp, a UTF-8 lead
 * byte cut short takes the bytes after it into its character, so "\xF0 x" decodes with
 * the space's U+2581 bytes in place of the space.
 *
 * Invalid UTF-8 in BPE text: every byte that does not start a well-formed
 * sequence (Unicode table 3-7: no overlong forms, surrogates or values above U+10FFFF)
 * becomes a piece of its own and so its own byte token. Nothing is replaced, so
 * tokenizer_decode(tokenizer_encode(s)) == s byte for byte. (llama.cpp instead replaces
 * such bytes by U+FFFD before encoding.) The one exception: a byte that has no token in
 * the vocabulary encodes to nothing. SmolLM2 lacks 21: the controls 0x04 0x06 0x13 0x14
 * 0x16 0x1D, 0xF1 0xF2 (which lead only U+40000..U+BFFFF, unassigned), and 0xC0 0xC1
 * 0xF5-0xFF (never in well-formed UTF-8). As in llama.cpp, such a byte still separates its
 * neighbours during BPE (no merge spans it); HF tokenizers drops it first and may merge
 * across it.
 *
 * The tokenizer copies what it needs: the GGUF file may be closed after tokenizer_load().
 * A loaded tokenizer is immutable, so any number of threads may use it at once. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "gguf.h"

/* tokenizer.ggml.token_type values. */
enum token_type {
        TOKEN_TYPE_UNDEFINED = 0,
        TOKEN_TYPE_NORMAL = 1,
        TOKEN_TYPE_UNKNOWN = 2,
        TOKEN_TYPE_CONTROL = 3,
        TOKEN_TYPE_USER_DEFINED = 4,
        TOKEN_TYPE_UNUSED = 5,
        TOKEN_TYPE_BYTE = 6,
};

struct tokenizer;

/* Reads the tokenizer.* keys of f: metadata only, so a vocabulary-only file (no tensors)
 * will do. Errors name the key and what is wrong with it: -EOPNOTSUPP for a
 * tokenizer.ggml.model other than "gpt2" or "llama", or a tokenizer.ggml.pre of a "gpt2"
 * one that pretokenizer.h lacks (the message lists those it has), -ENOENT for a missing
 * required key, -EINVAL for a malformed one, -ENOMEM. */
int tokenizer_load(const struct gguf_file *f, struct tokenizer **ret, struct error *err);
void tokenizer_free(struct tokenizer *tk);

int32_t tokenizer_vocab_size(const struct tokenizer *tk);
/* The special ids, or -1 where the file names none. */
int32_t tokenizer_bos(const struct tokenizer *tk);
int32_t tokenizer_eos(const struct tokenizer *tk);
int32_t tokenizer_unk(const struct tokenizer *tk);
int32_t tokenizer_pad(const struct tokenizer *tk);
/* Whether generation ends at id, as llama.cpp's end-of-generation set decides: EOS and the
 * end-of-turn tokens of the chat families (<|eot_id|>, <|im_end|>, <end_of_turn>, <|end|>,
 * ...), computed once at load (token-attributes.c has the rule). */
bool tokenizer_is_eog(const struct tokenizer *tk, int32_t id);
/* That set, ascending (*ret_n ids; empty only for a vocabulary with none). */
const int32_t *tokenizer_eog_ids(const struct tokenizer *tk, size_t *ret_n);
/* tokenizer.ggml.add_bos_token; when absent, true for SentencePiece and as the
 * pre-tokenizer says for BPE (llama-bpe: true), as in llama.cpp. tokenizer_encode() never
 * adds it; tokenizer_encode_prompt() does. */
bool tokenizer_add_bos(const struct tokenizer *tk);
/* SentencePiece's tokenizer.ggml.add_space_prefix (default true): tokenizer_encode() puts a
 * space before text that opens the input or follows a special token. tokenizer_decode()
 * keeps it, as a stream of generated pieces must; a caller that wants the encoded text back
 * takes one leading space off, as llama.cpp's detokenize does. False for BPE. */
bool tokenizer_add_space_prefix(const struct tokenizer *tk);
/* tokenizer.chat_template, NUL-terminated, or NULL when absent; the replacement after
 * tokenizer_replace_chat_template(). */
const char *tokenizer_chat_template(const struct tokenizer *tk);
/* Puts a copy of template in place of the file's own (a template file given to the daemon):
 * 0, or -ENOMEM. */
int tokenizer_replace_chat_template(struct tokenizer *tk, const char *template, struct error *err);
/* Whether tokenizer_replace_chat_template() was called. */
bool tokenizer_chat_template_replaced(const struct tokenizer *tk);
/* The file's general.architecture, or NULL when absent: what a model without a chat
 * template is chatted with (chat-template.h). */
const char *tokenizer_architecture(const struct tokenizer *tk);

bool tokenizer_valid_id(const struct tokenizer *tk, int32_t id);
/* The token as the vocabulary spells it (BPE's byte-level form "Ġthe", SentencePiece's "▁the"); NUL-terminated;
 * NULL for an invalid id. ret_len may be NULL. */
const char *tokenizer_token_text(const struct tokenizer *tk, int32_t id, size_t *ret_len);
/* The bytes the token decodes to (" the"); may hold NUL bytes or partial UTF-8 characters;
 * NULL for an invalid id. */
const char *tokenizer_token_bytes(const struct tokenizer *tk, int32_t id, size_t *ret_len);
enum token_type tokenizer_token_type(const struct tokenizer *tk, int32_t id);
/* Type control (3). */
bool tokenizer_is_control(const struct tokenizer *tk, int32_t id);
/* What skip_special leaves out: types control (3) and unknown (2). */
bool tokenizer_is_special(const struct tokenizer *tk, int32_t id);
/* The id of the token spelled text (vocabulary form), or -1. */
int32_t tokenizer_find(const struct tokenizer *tk, const char *text, size_t len);

/* Encodes text[0..len) into a malloc'ed array of ids (*ret_ids is NULL when *ret_n is 0).
 * No BOS is added. -ENOMEM, or -EINVAL for a text too long for 32-bit positions. */
int tokenizer_encode(const struct tokenizer *tk, const char *text, size_t len, bool parse_special,
                     int32_t **ret_ids, size_t *ret_n, struct error *err);

/* A prompt as llama.cpp's add_special tokenizes it: tokenizer_encode() after the BOS
 * token when tokenizer_add_bos(), and before the EOS token when
 * tokenizer.ggml.add_eos_token (default false) says so. */
int tokenizer_encode_prompt(const struct tokenizer *tk, const char *text, size_t len, bool parse_special,
                            int32_t **ret_ids, size_t *ret_n, struct error *err);

/* The exact bytes of ids, in a malloc'ed NUL-terminated buffer (the bytes may themselves
 * hold NULs, hence ret_len, which may be NULL). Special tokens (tokenizer_is_special()) are
 * their literal text, or nothing with skip_special. -EINVAL naming the first id out of
 * range. */
int tokenizer_decode(const struct tokenizer *tk, const int32_t *ids, size_t n, bool skip_special,
                     char **ret, size_t *ret_len, struct error *err);

/* As tokenizer_decode(), but valid UTF-8: every ill-formed part of the bytes becomes
 * U+FFFD, one per maximal subpart (see utf8_next()), and a sequence cut short at the end
 * becomes one U+FFFD. The streaming detokenizer (detokenizer.h) follows the same rule, so
 * its pieces always concatenate to this. */
int tokenizer_decode_text(const struct tokenizer *tk, const int32_t *ids, size_t n, bool skip_special,
                          char **ret, size_t *ret_len, struct error *err);
