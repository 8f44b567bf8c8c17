/* SPDX-License-Identifier: MIT */
/* SentencePiece (tokenizer.ggml.model "llama") encoding, as llama.cpp's SPM tokenizer does
 * it, so that the ids are the same:
 *
 *   - a raw stretch of text (special tokens are cut out first) gets a leading space when
 *     add_space_prefix holds and it opens the text or follows a special token, and every
 *     space becomes U+2581;
 *   - it starts as one symbol per character, a character being the lead byte's length as
 *     UTF-8 says it (cut short by the end of the text; nothing is validated);
 *   - repeatedly, of all adjacent pairs whose joined spelling is a piece of the vocabulary
 *     (any type), the one whose piece has the highest score is joined, the leftmost among
 *     equal scores;
 *   - each final symbol is its piece, or when it is none (a character the vocabulary lacks),
 *     one byte piece "<0xXX>" per byte. A byte with no piece at all is the unknown token,
 *     or nothing when the vocabulary names none (llama.cpp stops with an error there).
 *
 * The candidate pairs live in a binary heap: a join makes at most two new candidates and a
 * stale one is recognised when popped (a symbol only ever grows, so a pair whose joined
 * length no longer matches is stale), so a stretch of n characters costs O(n log n). */
#include <string.h>

#include "merge-heap.h"
#include "tokenizer-internal.h"

#define SPACE_MARK "\xe2\x96\x81" /* U+2581 LOWER ONE EIGHTH BLOCK */
#define SPACE_MARK_LEN 3

struct spm_symbol {
        uint32_t start, len; /* into the escaped text; len 0 once joined into its left neighbour */
        int32_t prev, next;
};

static int hex_digit(char c) {
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        return -1;
}

size_t spm_spelling_to_bytes(const char *text, size_t len, uint8_t type, char *out) {
        size_t o = 0;

        switch (type) {
        case TOKEN_TYPE_CONTROL:
        case TOKEN_TYPE_UNKNOWN:
        case TOKEN_TYPE_USER_DEFINED:
                memcpy(out, text, len);
                return len;
        case TOKEN_TYPE_NORMAL:
                for (size_t i = 0; i < len;) {
                        if (len - i >= SPACE_MARK_LEN && memcmp(text + i, SPACE_MARK, SPACE_MARK_LEN) == 0) {
                                out[o++] = ' ';
                                i += SPACE_MARK_LEN;
                        } else
                                out[o++] = text[i++];
                }
                return o;
        case TOKEN_TYPE_BYTE:
                /* "<0xXX>"; llama.cpp reads the two characters after "<0x" as hex. */
                if (len >= 5 && hex_digit(text[3]) >= 0 && hex_digit(text[4]) >= 0) {
                        out[0] = (char) (hex_digit(text[3]) << 4 | hex_digit(text[4]));
                        return 1;
                }
                return 0;
        default:
                return 0;
        }
}

static int read_scores(struct tokenizer *tk, const struct gguf_file *f, struct error *err) {
        const struct gguf_kv *kv = gguf_find_kv(f, "tokenizer.ggml.scores");

        tk->scores = calloc((size_t) tk->n_vocab, sizeof(*tk->scores));
        if (!tk->scores)
                return error_set(err, ENOMEM, "out of memory loading %d token scores", tk->n_vocab);
        if (!kv) /* as in llama.cpp: every score 0, so joins go leftmost first */
                return 0;
        const struct gguf_value *v = &kv->value;
        if (v->type != GGUF_VALUE_ARRAY || (v->array.type != GGUF_VALUE_F32 && v->array.type != GGUF_VALUE_I32))
                return error_set(err, EINVAL, "%s: tokenizer.ggml.scores is not an array of f32 or i32", f->path);
        if (v->array.count < (uint64_t) tk->n_vocab)
                return error_set(err, EINVAL, "%s: tokenizer.ggml.scores has %llu entries for %d tokens", f->path,
                                 (unsigned long long) v->array.count, tk->n_vocab);
        for (int32_t id = 0; id < tk->n_vocab; id++) {
                if (v->array.type == GGUF_VALUE_I32) {
                        tk->scores[id] = (float) gguf_array_int(v, (uint64_t) id);
                        continue;
                }
                const uint8_t *p = v->array.raw + 4 * (size_t) id;
                uint32_t bits = (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
                memcpy(&tk->scores[id], &bits, sizeof(bits));
        }
        return 0;
}

int spm_load(struct tokenizer *tk, const struct gguf_file *f, struct error *err) {
        static const char hex[] = "0123456789ABCDEF";
        int r;

        r = read_scores(tk, f, err);
        if (r < 0)
                return r;

        /* llama.cpp's default for SentencePiece vocabularies, which the key overrides. */
        tk->add_space_prefix = true;
        if (gguf_find_kv(f, "tokenizer.ggml.add_space_prefix")) {
                r = gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &tk->add_space_prefix, err);
                if (r < 0)
                        return r;
        }

        /* The byte fallback: "<0xXX>", else the byte itself as a piece. */
        for (unsigned b = 0; b < 256; b++) {
                char spelling[6] = { '<', '0', 'x', hex[b >> 4], hex[b & 15], '>' };
                char c = (char) b;
                tk->byte_token[b] = tokenizer_find(tk, spelling, sizeof(spelling));
                if (tk->byte_token[b] < 0)
                        tk->byte_token[b] = tokenizer_find(tk, &c, 1);
        }
        return 0;
}

void spm_scratch_free(struct spm_scratch *s) {
        free(s->text);
        free(s->symbols);
        free(s->heap);
}

static int reserve(struct spm_scratch *s, size_t text_len, struct error *err) {
        if (text_len > s->text_cap) {
                char *p = realloc(s->text, text_len);
                if (!p)
                        return error_set(err, ENOMEM, "out of memory encoding text");
                s->text = p;
                s->text_cap = text_len;
        }
        /* One symbol per character at most; the heap holds the first n - 1 pairs and at
         * most two more per join, of which there are at most n - 1. */
        if (text_len > s->symbols_cap) {
                struct spm_symbol *symbols = realloc(s->symbols, text_len * sizeof(*symbols));
                if (!symbols)
                        return error_set(err, ENOMEM, "out of memory encoding text");
                s->symbols = symbols;
                struct merge_candidate *heap = realloc(s->heap, 3 * text_len * sizeof(*heap));
                if (!heap)
                        return error_set(err, ENOMEM, "out of memory encoding text");
                s->heap = heap;
                s->symbols_cap = text_len;
        }
        return 0;
}

/* A candidate (struct merge_candidate) records in a the right symbol and in b the joined
 * length, by which it is recognised as stale. */
static void try_bigram(const struct tokenizer *tk, const char *text, const struct spm_symbol *symbols,
                       struct merge_candidate *heap, size_t *n_heap, int32_t left, int32_t right) {
        if (left < 0 || right < 0)
                return;
        uint32_t len = symbols[left].len + symbols[right].len;
        if (len > tk->max_text_len)
                return;
        int32_t id = tokenizer_find(tk, text + symbols[left].start, len);
        if (id < 0)
                return;
        merge_heap_push(heap, n_heap, (struct merge_candidate) {
                .order = merge_order(merge_order_from_score(tk->scores[id]), left), .left = left, .a = right,
                .b = (int32_t) len });
}

static size_t escape_spaces(const char *text, size_t len, bool prefix_space, char *out) {
        size_t o = 0;

        if (prefix_space) {
                memcpy(out, SPACE_MARK, SPACE_MARK_LEN);
                o = SPACE_MARK_LEN;
        }
        for (size_t i = 0; i < len; i++) {
                if (text[i] == ' ') {
                        memcpy(out + o, SPACE_MARK, SPACE_MARK_LEN);
                        o += SPACE_MARK_LEN;
                } else
                        out[o++] = text[i];
        }
        return o;
}

/* The byte length of the character led by b, as llama.cpp's unicode_len_utf8 reads it. */
static size_t lead_length(uint8_t b) {
        static const uint8_t by_high_nibble[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };
        return by_high_nibble[b >> 4];
}

int spm_encode(const struct tokenizer *tk, const char *text, size_t len, bool prefix_space, struct spm_scratch *s,
               struct id_list *out, struct error *err) {
        size_t escaped_len, n_symbols = 0, n_heap = 0;
        int r;

        /* Each space grows to three bytes; positions are 32-bit. */
        if (len > (UINT32_MAX - SPACE_MARK_LEN) / SPACE_MARK_LEN)
                return error_set(err, EINVAL, "text of %zu bytes is too long to encode", len);
        r = reserve(s, SPACE_MARK_LEN * len + SPACE_MARK_LEN, err);
        if (r < 0)
                return r;
        escaped_len = escape_spaces(text, len, prefix_space, s->text);
        if (escaped_len == 0)
                return 0;

        struct spm_symbol *symbols = s->symbols;
        for (size_t at = 0; at < escaped_len; n_symbols++) {
                size_t n = lead_length((uint8_t) s->text[at]);
                if (n > escaped_len - at)
                        n = escaped_len - at;
                symbols[n_symbols] = (struct spm_symbol) {
                        .start = (uint32_t) at,
                        .len = (uint32_t) n,
                        .prev = (int32_t) n_symbols - 1,
                        .next = at + n < escaped_len ? (int32_t) n_symbols + 1 : -1,
                };
                at += n;
        }
        for (size_t i = 1; i < n_symbols; i++)
                try_bigram(tk, s->text, symbols, s->heap, &n_heap, (int32_t) i - 1, (int32_t) i);

        while (n_heap > 0) {
                struct merge_candidate b = merge_heap_pop(s->heap, &n_heap);
                struct spm_symbol *l = &symbols[b.left], *rs = &symbols[b.a];
                if (l->len == 0 || rs->len == 0 || l->len + rs->len != (uint32_t) b.b)
                        continue;
                l->len += rs->len;
                rs->len = 0;
                l->next = rs->next;
                if (rs->next >= 0)
                        symbols[rs->next].prev = b.left;
                try_bigram(tk, s->text, symbols, s->heap, &n_heap, l->prev, b.left);
                try_bigram(tk, s->text, symbols, s->heap, &n_heap, b.left, l->next);
        }

        for (int32_t i = 0; i >= 0; i = symbols[i].next) {
                const char *piece = s->text + symbols[i].start;
                int32_t id = tokenizer_find(tk, piece, symbols[i].len);
                if (id >= 0) {
                        r = id_list_push(out, id, err);
                        if (r < 0)
                                return r;
                        continue;
                }
                for (uint32_t k = 0; k < symbols[i].len; k++) {
                        id = tk->byte_token[(uint8_t) piece[k]];
                        if (id < 0)
                                id = tk->unk;
                        if (id >= 0 && (r = id_list_push(out, id, err)) < 0)
                                return r;
                }
        }
        return 0;
}
