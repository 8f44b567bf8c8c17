/* SPDX-License-Identifier: MIT */
#pragma once

/* What tokenizer.c (loading, byte-level BPE, decoding) shares with tokenizer-spm.c
 * (SentencePiece): the loaded vocabulary. Private to tokenizer/. */

#include <errno.h>
#include <stdlib.h>

#include "pretokenizer.h"
#include "special-tokens.h"
#include "tokenizer.h"

enum tokenizer_kind {
        TOKENIZER_BPE, /* tokenizer.ggml.model "gpt2" */
        TOKENIZER_SPM, /* tokenizer.ggml.model "llama" */
};

struct token {
        uint32_t text_off; /* into text_arena: the vocabulary spelling, NUL-terminated */
        uint32_t text_len;
        uint32_t bytes_off; /* into bytes_arena: what it decodes to, NUL-terminated */
        uint32_t bytes_len;
        uint8_t type; /* enum token_type */
};

/* Open addressing, linear probing; a key of UINT64_MAX marks a free slot. */
struct merge_slot {
        uint64_t key; /* left id << 32 | right id */
        uint32_t rank;
        int32_t result;
};

struct tokenizer {
        enum tokenizer_kind kind;
        const struct pretokenizer *pre; /* BPE only */
        int32_t n_vocab;
        struct token *tokens; /* (n_vocab) */
        char *text_arena;
        char *bytes_arena;
        uint32_t max_text_len; /* the longest spelling */

        int32_t *vocab_slots; /* (vocab_mask + 1) token ids by spelling, -1 free */
        size_t vocab_mask;
        struct merge_slot *merge_slots; /* (merge_mask + 1), BPE only */
        size_t merge_mask;
        float *scores; /* (n_vocab) tokenizer.ggml.scores, SPM only */
        bool add_space_prefix; /* SPM only */

        int32_t byte_token[256]; /* the token of each single byte, or -1 */
        uint32_t byte_cp[256];    /* BPE: the code point that spells each byte (GPT-2's byte map) */
        struct special_matcher *specials;

        int32_t bos, eos, unk, pad;
        int32_t *eog_ids; /* (n_eog) ascending: where generation ends (token-attributes.c) */
        size_t n_eog;
        bool add_bos, add_eos;
        char *chat_template;
        bool chat_template_replaced; /* chat_template is not the file's */
        char *architecture; /* general.architecture */
};

/* A growing array of token ids. */
struct id_list {
        int32_t *ids;
        size_t n, cap;
};

static inline int id_list_push(struct id_list *l, int32_t id, struct error *err) {
        if (l->n == l->cap) {
                size_t cap = l->cap ? 2 * l->cap : 64;
                int32_t *p = realloc(l->ids, cap * sizeof(*p));
                if (!p)
                        return error_set(err, ENOMEM, "out of memory encoding text");
                l->ids = p;
                l->cap = cap;
        }
        l->ids[l->n++] = id;
        return 0;
}

/* tokenizer-spm.c */

/* What an SPM piece decodes to, as llama.cpp's token_to_piece renders it: normal pieces
 * with U+2581 as a space, byte pieces "<0xXX>" as the byte, control, unknown and
 * user-defined pieces as spelled, unused and undefined ones as nothing. out has room for
 * len bytes: nothing grows. */
size_t spm_spelling_to_bytes(const char *text, size_t len, uint8_t type, char *out);

/* The SPM keys beyond the vocabulary: scores, add_space_prefix; and the byte tokens. */
int spm_load(struct tokenizer *tk, const struct gguf_file *f, struct error *err);

/* Scratch space reused across the raw stretches of one text. */
struct spm_scratch {
        char *text;
        size_t text_cap;
        struct spm_symbol *symbols;
        struct merge_candidate *heap;
        size_t symbols_cap;
};

void spm_scratch_free(struct spm_scratch *s);

/* Appends the ids of one raw stretch of text; prefix_space: llama.cpp's
 * add_space_prefix for a stretch at the start or after a special token. */
int spm_encode(const struct tokenizer *tk, const char *text, size_t len, bool prefix_space, struct spm_scratch *s,
               struct id_list *out, struct error *err);

/* token-attributes.c: what llama.cpp decides from a token's text. */

/* Which fill-in-the-middle roles the file leaves to be found by spelling. */
struct control_lookalikes {
        bool fim_role_open[8];
};

void control_lookalikes_init(struct control_lookalikes *c, const struct gguf_file *f);
/* Whether a token spelled text[0..len) is a control token whatever its type. */
bool control_lookalike(const struct control_lookalikes *c, const char *text, size_t len);
/* Whether f's special tokens swallow the white space after them (Phi-3), and the ones that
 * do not even there. */
bool phi3_strips_after_specials(const struct gguf_file *f);
bool phi3_keeps_space_after(const char *text, size_t len);
/* The ids the file names (tokenizer.ggml.fim_pad_token_id, ...), -1 where it names none. */
struct named_end_ids {
        int32_t fim_pad, fim_rep, fim_sep, eot, eom;
};
/* Computes tk->eog_ids from the loaded tokens, EOS and those: 0, or -ENOMEM. */
int end_of_generation_init(struct tokenizer *tk, const struct named_end_ids *named, struct error *err);

/* Token id's spelling in the text arena (tokens[id].text_len bytes). */
static inline const char *token_text(const struct tokenizer *tk, int32_t id) {
        return tk->text_arena + tk->tokens[id].text_off;
}

/* Enters token id under its spelling in the vocabulary index (vocab-index.c); a duplicate
 * spelling maps to its last id, as in llama.cpp. tokenizer_find() (tokenizer.h) reads it. */
void vocab_index_insert(struct tokenizer *tk, int32_t id);
