/* SPDX-License-Identifier: MIT */
/* The vocabulary's spelling -> id hash table (open addressing), shared by the BPE and
 * SentencePiece tokenizers. */
#include "config.h"

#include <string.h>

#include "tokenizer-internal.h"

static uint64_t hash_bytes(const char *s, size_t len) {
        /* FNV-1a */
        uint64_t h = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < len; i++) {
                h ^= (uint8_t) s[i];
                h *= 0x100000001b3ull;
        }
        return h;
}

int32_t tokenizer_find(const struct tokenizer *tk, const char *text, size_t len) {
        for (size_t i = hash_bytes(text, len) & tk->vocab_mask;; i = (i + 1) & tk->vocab_mask) {
                int32_t id = tk->vocab_slots[i];
                if (id < 0)
                        return -1;
                if (tk->tokens[id].text_len == len && memcmp(token_text(tk, id), text, len) == 0)
                        return id;
        }
}

void vocab_index_insert(struct tokenizer *tk, int32_t id) {
        const struct token *t = &tk->tokens[id];
        const char *text = token_text(tk, id);

        for (size_t i = hash_bytes(text, t->text_len) & tk->vocab_mask;; i = (i + 1) & tk->vocab_mask) {
                int32_t other = tk->vocab_slots[i];
                if (other < 0 || (tk->tokens[other].text_len == t->text_len &&
                                  memcmp(token_text(tk, other), text, t->text_len) == 0)) {
                        /* A duplicate spelling maps to its last id, as in llama.cpp. */
                        tk->vocab_slots[i] = id;
                        return;
                }
        }
}

