/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "merge-heap.h"
#include "tokenizer-internal.h"
#include "unicode.h"

/* The GPT-2 byte-to-unicode map sends every byte to a printable code point: bytes that are
 * printable Latin-1 keep their value, the other 68 take 256, 257, ... in byte order. So the
 * largest code point used is 256 + 67. */
#define BYTE_CP_LIMIT (256 + 68)

static void byte_map(uint32_t byte_to_cp[static 256], int16_t cp_to_byte[static BYTE_CP_LIMIT]) {
        uint32_t next = 256;

        for (size_t i = 0; i < BYTE_CP_LIMIT; i++)
                cp_to_byte[i] = -1;
        for (uint32_t b = 0; b < 256; b++) {
                bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
                byte_to_cp[b] = printable ? b : next++;
                cp_to_byte[byte_to_cp[b]] = (int16_t) b;
        }
}

static uint64_t hash_u64(uint64_t x) {
        /* splitmix64's finaliser: ids are small and sequential, so mix them well */
        x ^= x >> 30;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 27;
        x *= 0x94d049bb133111ebull;
        x ^= x >> 31;
        return x;
}

static size_t table_size_for(size_t n) {
        size_t size = 16;
        while (size < 2 * n)
                size *= 2;
        return size;
}

static const struct merge_slot *find_merge(const struct tokenizer *tk, int32_t left, int32_t right) {
        uint64_t key = (uint64_t) (uint32_t) left << 32 | (uint32_t) right;

        for (size_t i = hash_u64(key) & tk->merge_mask;; i = (i + 1) & tk->merge_mask) {
                const struct merge_slot *m = &tk->merge_slots[i];
                if (m->key == key)
                        return m;
                if (m->key == UINT64_MAX)
                        return NULL;
        }
}

static void merge_insert(struct tokenizer *tk, int32_t left, int32_t right, uint32_t rank, int32_t result) {
        uint64_t key = (uint64_t) (uint32_t) left << 32 | (uint32_t) right;

        for (size_t i = hash_u64(key) & tk->merge_mask;; i = (i + 1) & tk->merge_mask) {
                struct merge_slot *m = &tk->merge_slots[i];
                if (m->key == key)
                        return; /* listed twice: the first, lower rank wins */
                if (m->key == UINT64_MAX) {
                        *m = (struct merge_slot) { .key = key, .rank = rank, .result = result };
                        return;
                }
        }
}

static bool type_is_literal(uint8_t type) {
        /* Their text is what they stand for, not byte-level encoded. */
        return type == TOKEN_TYPE_CONTROL || type == TOKEN_TYPE_USER_DEFINED || type == TOKEN_TYPE_UNKNOWN;
}

/* Decodes a vocabulary spelling to bytes through the inverse byte map; characters outside
 * the map (possible only in a vocabulary that was not made byte-level) and ill-formed
 * UTF-8 are kept as they are. out has room for len bytes: no character grows. */
static size_t spelling_to_bytes(const char *text, size_t len, const int16_t cp_to_byte[static BYTE_CP_LIMIT],
                                char *out) {
        size_t o = 0;

        for (size_t i = 0; i < len;) {
                uint32_t cp;
                size_t n;
                if (utf8_next((const uint8_t *) text + i, len - i, &cp, &n) == UTF8_VALID && cp < BYTE_CP_LIMIT &&
                    cp_to_byte[cp] >= 0)
                        out[o++] = (char) cp_to_byte[cp];
                else {
                        memcpy(out + o, text + i, n);
                        o += n;
                }
                i += n;
        }
        return o;
}

static int load_tokens(struct tokenizer *tk, const struct gguf_file *f, struct error *err) {
        const struct gguf_value *tokens, *types = NULL;
        int16_t cp_to_byte[BYTE_CP_LIMIT];
        struct control_lookalikes lookalikes;
        size_t text_size = 0;
        int r;

        control_lookalikes_init(&lookalikes, f);

        r = gguf_get_array(f, "tokenizer.ggml.tokens", GGUF_VALUE_STRING, &tokens, err);
        if (r < 0)
                return r;
        if (tokens->array.count == 0 || tokens->array.count > INT32_MAX)
                return error_set(err, EINVAL, "%s: tokenizer.ggml.tokens has %llu entries, expected 1 to %d",
                                 f->path, (unsigned long long) tokens->array.count, INT32_MAX);
        tk->n_vocab = (int32_t) tokens->array.count;

        if (gguf_find_kv(f, "tokenizer.ggml.token_type")) {
                r = gguf_get_array(f, "tokenizer.ggml.token_type", GGUF_VALUE_I32, &types, err);
                if (r < 0)
                        return r;
                if (types->array.count != tokens->array.count)
                        return error_set(err, EINVAL,
                                         "%s: tokenizer.ggml.token_type has %llu entries but tokenizer.ggml.tokens has %llu",
                                         f->path, (unsigned long long) types->array.count,
                                         (unsigned long long) tokens->array.count);
        }

        for (int32_t id = 0; id < tk->n_vocab; id++) {
                text_size += tokens->array.strings[id].len + 1;
                if (text_size > UINT32_MAX)
                        return error_set(err, EINVAL, "%s: tokenizer.ggml.tokens holds more than 4 GiB of text",
                                         f->path);
        }

        tk->tokens = calloc((size_t) tk->n_vocab, sizeof(*tk->tokens));
        tk->text_arena = malloc(text_size);
        tk->bytes_arena = malloc(text_size);
        if (!tk->tokens || !tk->text_arena || !tk->bytes_arena)
                return error_set(err, ENOMEM, "out of memory loading %d tokens", tk->n_vocab);

        byte_map(tk->byte_cp, cp_to_byte);
        uint32_t off = 0, bytes_off = 0;
        for (int32_t id = 0; id < tk->n_vocab; id++) {
                struct gguf_string s = tokens->array.strings[id];
                struct token *t = &tk->tokens[id];
                int64_t type = TOKEN_TYPE_NORMAL;

                if (types) {
                        type = gguf_array_int(types, (uint64_t) id);
                        if (type < TOKEN_TYPE_UNDEFINED || type > TOKEN_TYPE_BYTE)
                                return error_set(err, EINVAL, "%s: tokenizer.ggml.token_type[%d] is %lld, not a token type (0-6)",
                                                 f->path, id, (long long) type);
                }
                if (control_lookalike(&lookalikes, s.data, s.len))
                        type = TOKEN_TYPE_CONTROL;
                t->type = (uint8_t) type;

                t->text_off = off;
                t->text_len = (uint32_t) s.len;
                memcpy(tk->text_arena + off, s.data, s.len);
                tk->text_arena[off + s.len] = '\0';
                off += (uint32_t) s.len + 1;

                if (t->text_len > tk->max_text_len)
                        tk->max_text_len = t->text_len;

                t->bytes_off = bytes_off;
                if (tk->kind == TOKENIZER_SPM)
                        t->bytes_len = (uint32_t) spm_spelling_to_bytes(s.data, s.len, t->type,
                                                                        tk->bytes_arena + bytes_off);
                else if (type_is_literal(t->type)) {
                        memcpy(tk->bytes_arena + bytes_off, s.data, s.len);
                        t->bytes_len = (uint32_t) s.len;
                } else
                        t->bytes_len = (uint32_t) spelling_to_bytes(s.data, s.len, cp_to_byte,
                                                                    tk->bytes_arena + bytes_off);
                tk->bytes_arena[bytes_off + t->bytes_len] = '\0';
                bytes_off += t->bytes_len + 1;
        }

        tk->vocab_mask = table_size_for((size_t) tk->n_vocab) - 1;
        tk->vocab_slots = malloc((tk->vocab_mask + 1) * sizeof(*tk->vocab_slots));
        if (!tk->vocab_slots)
                return error_set(err, ENOMEM, "out of memory loading %d tokens", tk->n_vocab);
        memset(tk->vocab_slots, 0xff, (tk->vocab_mask + 1) * sizeof(*tk->vocab_slots));
        for (int32_t id = 0; id < tk->n_vocab; id++)
                vocab_index_insert(tk, id);

        if (tk->kind == TOKENIZER_SPM)
                return 0; /* spm_load() finds its byte pieces */
        /* Where BPE starts. A vocabulary may lack some bytes (SmolLM2's lacks 21 never seen
         * in training): those stay -1 and encode to nothing, as in llama.cpp and HF. */
        for (uint32_t b = 0; b < 256; b++) {
                char spelling[UTF8_MAX_LEN];
                size_t n = utf8_encode(tk->byte_cp[b], spelling);
                tk->byte_token[b] = tokenizer_find(tk, spelling, n);
        }
        return 0;
}

static int load_merges(struct tokenizer *tk, const struct gguf_file *f, struct error *err) {
        const struct gguf_value *merges;
        char *joined = NULL;
        size_t joined_cap = 0;
        int r;

        r = gguf_get_array(f, "tokenizer.ggml.merges", GGUF_VALUE_STRING, &merges, err);
        if (r < 0)
                return r;
        if (merges->array.count > UINT32_MAX)
                return error_set(err, EINVAL, "%s: tokenizer.ggml.merges has %llu entries, too many", f->path,
                                 (unsigned long long) merges->array.count);

        tk->merge_mask = table_size_for(merges->array.count) - 1;
        tk->merge_slots = malloc((tk->merge_mask + 1) * sizeof(*tk->merge_slots));
        if (!tk->merge_slots)
                return error_set(err, ENOMEM, "out of memory loading %llu merges",
                                 (unsigned long long) merges->array.count);
        for (size_t i = 0; i <= tk->merge_mask; i++)
                tk->merge_slots[i].key = UINT64_MAX;

        for (uint64_t rank = 0; rank < merges->array.count; rank++) {
                struct gguf_string m = merges->array.strings[rank];
                const char *space = m.len > 1 ? memchr(m.data + 1, ' ', m.len - 1) : NULL;
                int32_t ids[3];

                /* "left right"; the search starts at 1 so that a left part may be a space. */
                if (!space || space + 1 == m.data + m.len) {
                        r = error_set(err, EINVAL, "%s: tokenizer.ggml.merges[%llu] \"%.*s\" is not \"LEFT RIGHT\"",
                                      f->path, (unsigned long long) rank, (int) m.len, m.data);
                        goto finish;
                }
                size_t left_len = (size_t) (space - m.data), right_len = m.len - left_len - 1;
                if (left_len + right_len > joined_cap) {
                        char *p = realloc(joined, left_len + right_len);
                        if (!p) {
                                r = error_set(err, ENOMEM, "out of memory loading merges");
                                goto finish;
                        }
                        joined = p;
                        joined_cap = left_len + right_len;
                }
                memcpy(joined, m.data, left_len);
                memcpy(joined + left_len, space + 1, right_len);

                ids[0] = tokenizer_find(tk, m.data, left_len);
                ids[1] = tokenizer_find(tk, space + 1, right_len);
                ids[2] = tokenizer_find(tk, joined, left_len + right_len);
                for (int k = 0; k < 3; k++)
                        if (ids[k] < 0) {
                                const char *part = k == 0 ? m.data : k == 1 ? space + 1 : joined;
                                size_t part_len = k == 0 ? left_len : k == 1 ? right_len : left_len + right_len;
                                r = error_set(err, EINVAL,
                                              "%s: tokenizer.ggml.merges[%llu] \"%.*s\": \"%.*s\" is not in tokenizer.ggml.tokens",
                                              f->path, (unsigned long long) rank, (int) m.len, m.data, (int) part_len,
                                              part);
                                goto finish;
                        }
                merge_insert(tk, ids[0], ids[1], (uint32_t) rank, ids[2]);
        }
        r = 0;
finish:
        free(joined);
        return r;
}

static int load_special_id(const struct gguf_file *f, const char *key, int32_t n_vocab, int32_t *ret,
                           struct error *err) {
        uint32_t v;

        *ret = -1;
        if (!gguf_find_kv(f, key))
                return 0;
        int r = gguf_get_u32(f, key, &v, err);
        if (r < 0)
                return r;
        if (v >= (uint32_t) n_vocab)
                return error_set(err, EINVAL, "%s: %s is %u, beyond the vocabulary of %d tokens", f->path, key, v,
                                 n_vocab);
        *ret = (int32_t) v;
        return 0;
}

/* Longer text first; among equals, the lower id. */
static int special_order(const void *a, const void *b) {
        const struct special_token *x = a, *y = b;
        if (x->len != y->len)
                return x->len > y->len ? -1 : 1;
        return x->id < y->id ? -1 : x->id > y->id;
}

static int load_specials(struct tokenizer *tk, bool phi3, struct error *err) {
        struct special_token *list;
        size_t n = 0;
        int r;

        for (int32_t id = 0; id < tk->n_vocab; id++)
                if (type_is_literal(tk->tokens[id].type) && tk->tokens[id].text_len > 0)
                        n++;
        if (n == 0)
                return 0;
        list = malloc(n * sizeof(*list));
        if (!list)
                return error_set(err, ENOMEM, "out of memory loading special tokens");
        n = 0;
        for (int32_t id = 0; id < tk->n_vocab; id++) {
                const struct token *t = &tk->tokens[id];
                if (type_is_literal(t->type) && t->text_len > 0)
                        list[n++] = (struct special_token) {
                                .text = token_text(tk, id),
                                .len = t->text_len,
                                .id = id,
                                .always = t->type == TOKEN_TYPE_USER_DEFINED,
                                .rstrip = phi3 && !phi3_keeps_space_after(token_text(tk, id), t->text_len),
                        };
        }
        qsort(list, n, sizeof(*list), special_order);
        r = special_matcher_new(list, n, &tk->specials);
        free(list);
        if (r < 0)
                return error_set(err, -r, "out of memory loading special tokens");
        return 0;
}

/* A string key into a malloc'ed copy, left NULL when the key is absent. */
static int load_optional_string(const struct gguf_file *f, const char *key, char **ret, struct error *err) {
        struct gguf_string s;
        int r;

        if (!gguf_find_kv(f, key))
                return 0;
        r = gguf_get_string(f, key, &s, err);
        if (r < 0)
                return r;
        if (memchr(s.data, '\0', s.len))
                return error_set(err, EINVAL, "%s: %s contains a NUL byte", f->path, key);
        *ret = strndup(s.data, s.len);
        if (!*ret)
                return error_set(err, ENOMEM, "out of memory loading %s", key);
        return 0;
}

/* Whether prompts get the token id (key, else fallback); the token must exist then. */
static int load_add_special(const struct gguf_file *f, const char *key, bool fallback, int32_t id, const char *id_key,
                            bool *ret, struct error *err) {
        *ret = fallback;
        if (gguf_find_kv(f, key)) {
                int r = gguf_get_bool(f, key, ret, err);
                if (r < 0)
                        return r;
        }
        if (*ret && id < 0)
                return error_set(err, EINVAL, "%s: %s is true but no %s", f->path, key, id_key);
        return 0;
}

int tokenizer_load(const struct gguf_file *f, struct tokenizer **ret, struct error *err) {
        struct tokenizer *tk;
        struct gguf_string s;
        int r;

        r = gguf_get_string(f, "tokenizer.ggml.model", &s, err);
        if (r < 0)
                return r;
        if (!gguf_string_equals(s, "gpt2") && !gguf_string_equals(s, "llama"))
                return error_set(err, EOPNOTSUPP,
                                 "%s: tokenizer.ggml.model is \"%.*s\"; supported: \"gpt2\" (byte-level BPE), "
                                 "\"llama\" (SentencePiece)",
                                 f->path, (int) s.len, s.data);

        tk = calloc(1, sizeof(*tk));
        if (!tk)
                return error_set(err, ENOMEM, "out of memory loading the tokenizer");
        tk->kind = gguf_string_equals(s, "llama") ? TOKENIZER_SPM : TOKENIZER_BPE;

        /* SentencePiece has no pre-tokenizer: llama.cpp ignores the key there, and so does
         * this. A BPE file without the key predates it: llama.cpp's "default" then. */
        if (tk->kind == TOKENIZER_BPE) {
                s = (struct gguf_string) { .data = "default", .len = strlen("default") };
                if (gguf_find_kv(f, "tokenizer.ggml.pre")) {
                        r = gguf_get_string(f, "tokenizer.ggml.pre", &s, err);
                        if (r < 0)
                                goto fail;
                }
                tk->pre = pretokenizer_find(s.data, s.len);
                if (!tk->pre) {
                        char names[320];
                        pretokenizer_names(names, sizeof(names));
                        r = error_set(err, EOPNOTSUPP, "%s: tokenizer.ggml.pre is \"%.*s\", a pre-tokenizer this tokenizer lacks; supported: %s",
                                      f->path, (int) s.len, s.data, names);
                        goto fail;
                }
        }

        r = load_tokens(tk, f, err);
        if (r < 0)
                goto fail;
        r = tk->kind == TOKENIZER_SPM ? spm_load(tk, f, err) : load_merges(tk, f, err);
        if (r < 0)
                goto fail;
        r = load_specials(tk, phi3_strips_after_specials(f), err);
        if (r < 0)
                goto fail;

        struct named_end_ids named;
        const struct {
                const char *key;
                int32_t *id;
        } ids[] = {
                { "tokenizer.ggml.bos_token_id", &tk->bos },
                { "tokenizer.ggml.eos_token_id", &tk->eos },
                { "tokenizer.ggml.unknown_token_id", &tk->unk },
                { "tokenizer.ggml.padding_token_id", &tk->pad },
                { "tokenizer.ggml.fim_pad_token_id", &named.fim_pad },
                { "tokenizer.ggml.fim_rep_token_id", &named.fim_rep },
                { "tokenizer.ggml.fim_sep_token_id", &named.fim_sep },
                { "tokenizer.ggml.eot_token_id", &named.eot },
                { "tokenizer.ggml.eom_token_id", &named.eom },
        };
        for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
                r = load_special_id(f, ids[i].key, tk->n_vocab, ids[i].id, err);
                if (r < 0)
                        goto fail;
        }
        r = end_of_generation_init(tk, &named, err);
        if (r < 0)
                goto fail;

        /* llama.cpp's defaults: SentencePiece vocabularies add BOS, BPE ones as their
         * pre-tokenizer says; neither adds EOS. The keys override them. */
        r = load_add_special(f, "tokenizer.ggml.add_bos_token", tk->kind == TOKENIZER_SPM || tk->pre->add_bos,
                             tk->bos, "tokenizer.ggml.bos_token_id", &tk->add_bos, err);
        if (r < 0)
                goto fail;
        r = load_add_special(f, "tokenizer.ggml.add_eos_token", false, tk->eos, "tokenizer.ggml.eos_token_id",
                             &tk->add_eos, err);
        if (r < 0)
                goto fail;

        r = load_optional_string(f, "tokenizer.chat_template", &tk->chat_template, err);
        if (r < 0)
                goto fail;
        r = load_optional_string(f, "general.architecture", &tk->architecture, err);
        if (r < 0)
                goto fail;

        *ret = tk;
        return 0;
fail:
        tokenizer_free(tk);
        return r;
}

void tokenizer_free(struct tokenizer *tk) {
        if (!tk)
                return;
        free(tk->tokens);
        free(tk->text_arena);
        free(tk->bytes_arena);
        free(tk->vocab_slots);
        free(tk->merge_slots);
        free(tk->scores);
        free(tk->eog_ids);
        special_matcher_free(tk->specials);
        free(tk->chat_template);
        free(tk->architecture);
        free(tk);
}

int32_t tokenizer_vocab_size(const struct tokenizer *tk) {
        return tk->n_vocab;
}

int32_t tokenizer_bos(const struct tokenizer *tk) {
        return tk->bos;
}

int32_t tokenizer_eos(const struct tokenizer *tk) {
        return tk->eos;
}

bool tokenizer_is_eog(const struct tokenizer *tk, int32_t id) {
        for (size_t i = 0; i < tk->n_eog; i++)
                if (tk->eog_ids[i] == id)
                        return true;
        return false;
}

const int32_t *tokenizer_eog_ids(const struct tokenizer *tk, size_t *ret_n) {
        *ret_n = tk->n_eog;
        return tk->eog_ids;
}

int32_t tokenizer_unk(const struct tokenizer *tk) {
        return tk->unk;
}

int32_t tokenizer_pad(const struct tokenizer *tk) {
        return tk->pad;
}

bool tokenizer_add_bos(const struct tokenizer *tk) {
        return tk->add_bos;
}

bool tokenizer_add_space_prefix(const struct tokenizer *tk) {
        return tk->add_space_prefix;
}

const char *tokenizer_chat_template(const struct tokenizer *tk) {
        return tk->chat_template;
}

int tokenizer_replace_chat_template(struct tokenizer *tk, const char *template, struct error *err) {
        char *copy = strdup(template);
        if (!copy)
                return error_set(err, ENOMEM, "out of memory");
        free(tk->chat_template);
        tk->chat_template = copy;
        tk->chat_template_replaced = true;
        return 0;
}

bool tokenizer_chat_template_replaced(const struct tokenizer *tk) {
        return tk->chat_template_replaced;
}

const char *tokenizer_architecture(const struct tokenizer *tk) {
        return tk->architecture;
}

bool tokenizer_valid_id(const struct tokenizer *tk, int32_t id) {
        return id >= 0 && id < tk->n_vocab;
}

const char *tokenizer_token_text(const struct tokenizer *tk, int32_t id, size_t *ret_len) {
        if (!tokenizer_valid_id(tk, id))
                return NULL;
        if (ret_len)
                *ret_len = tk->tokens[id].text_len;
        return token_text(tk, id);
}

const char *tokenizer_token_bytes(const struct tokenizer *tk, int32_t id, size_t *ret_len) {
        if (!tokenizer_valid_id(tk, id))
                return NULL;
        if (ret_len)
                *ret_len = tk->tokens[id].bytes_len;
        return tk->bytes_arena + tk->tokens[id].bytes_off;
}

enum token_type tokenizer_token_type(const struct tokenizer *tk, int32_t id) {
        if (!tokenizer_valid_id(tk, id))
                return TOKEN_TYPE_UNDEFINED;
        return (enum token_type) tk->tokens[id].type;
}

bool tokenizer_is_control(const struct tokenizer *tk, int32_t id) {
        return tokenizer_token_type(tk, id) == TOKEN_TYPE_CONTROL;
}

bool tokenizer_is_special(const struct tokenizer *tk, int32_t id) {
        enum token_type t = tokenizer_token_type(tk, id);
        return t == TOKEN_TYPE_CONTROL || t == TOKEN_TYPE_UNKNOWN;
}

/* Encoding */

/* Symbol ids besides real tokens. */
#define NO_TOKEN (-1) /* a byte the vocabulary lacks: it takes part in no merge, emits nothing */
#define MERGED (-2)   /* merged into its left neighbour and unlinked */

struct bpe_symbol {
        int32_t id;
        int32_t prev, next;
};

/* A candidate merge (struct merge_candidate: a, b the left and right ids) goes stale when
 * either side changes; the ids recorded tell (a symbol's id only ever grows longer, so it
 * never returns to an earlier value). */
struct encoder {
        const struct tokenizer *tk;
        struct id_list out;
        struct bpe_symbol *symbols;    /* (work_cap) */
        struct merge_candidate *heap; /* (3 * work_cap): n - 1 pairs at first, at most 2 more per merge */
        size_t work_cap;
        char *spelling; /* (spelling_cap) a piece in the vocabulary's byte-level spelling */
        size_t spelling_cap;
        struct spm_scratch spm;
        struct error *err;
};

static void push_candidate(const struct tokenizer *tk, const struct bpe_symbol *symbols,
                           struct merge_candidate *heap, size_t *n, int32_t left) {
        if (left < 0 || symbols[left].next < 0)
                return;
        int32_t right = symbols[left].next;
        if (symbols[left].id == NO_TOKEN || symbols[right].id == NO_TOKEN)
                return;
        const struct merge_slot *m = find_merge(tk, symbols[left].id, symbols[right].id);
        if (m)
                merge_heap_push(heap, n, (struct merge_candidate) {
                        .order = merge_order(m->rank, left), .left = left, .a = symbols[left].id, .b = symbols[right].id });
}

/* The token spelled as the whole piece is, or -1, in *ret_id (the pre-tokenizer's ignore_merges). */
static int whole_piece_token(struct encoder *e, const uint8_t *s, size_t len, int32_t *ret_id) {
        const struct tokenizer *tk = e->tk;
        size_t n = 0;

        *ret_id = -1;
        if (len > tk->max_text_len) /* every byte is spelled by one or two */
                return 0;
        if (2 * len > e->spelling_cap) {
                char *p = realloc(e->spelling, 2 * len);
                if (!p)
                        return error_set(e->err, ENOMEM, "out of memory encoding text");
                e->spelling = p;
                e->spelling_cap = 2 * len;
        }
        for (size_t i = 0; i < len; i++)
                n += utf8_encode(tk->byte_cp[s[i]], e->spelling + n);
        *ret_id = tokenizer_find(tk, e->spelling, n);
        return 0;
}

static int encode_piece(const char *piece, size_t len, void *userdata) {
        struct encoder *e = userdata;
        const struct tokenizer *tk = e->tk;
        const uint8_t *s = (const uint8_t *) piece;
        size_t n_heap = 0;

        if (len == 1)
                return tk->byte_token[s[0]] >= 0 ? id_list_push(&e->out, tk->byte_token[s[0]], e->err) : 0;
        if (tk->pre->ignore_merges) {
                int32_t id;
                int r = whole_piece_token(e, s, len, &id);
                if (r < 0)
                        return r;
                if (id >= 0)
                        return id_list_push(&e->out, id, e->err);
        }

        if (len > e->work_cap) {
                struct bpe_symbol *symbols = realloc(e->symbols, len * sizeof(*symbols));
                if (!symbols)
                        return error_set(e->err, ENOMEM, "out of memory encoding text");
                e->symbols = symbols;
                struct merge_candidate *heap = realloc(e->heap, 3 * len * sizeof(*heap));
                if (!heap)
                        return error_set(e->err, ENOMEM, "out of memory encoding text");
                e->heap = heap;
                e->work_cap = len;
        }

        struct bpe_symbol *symbols = e->symbols;
        for (size_t i = 0; i < len; i++)
                symbols[i] = (struct bpe_symbol) {
                        .id = tk->byte_token[s[i]],
                        .prev = (int32_t) i - 1,
                        .next = i + 1 < len ? (int32_t) i + 1 : -1,
                };
        for (size_t i = 0; i + 1 < len; i++)
                push_candidate(tk, symbols, e->heap, &n_heap, (int32_t) i);

        while (n_heap > 0) {
                struct merge_candidate p = merge_heap_pop(e->heap, &n_heap);
                struct bpe_symbol *l = &symbols[p.left];
                if (l->id != p.a || l->next < 0 || symbols[l->next].id != p.b)
                        continue;

                const struct merge_slot *m = find_merge(tk, p.a, p.b);
                struct bpe_symbol *r = &symbols[l->next];
                l->id = m->result;
                l->next = r->next;
                if (r->next >= 0)
                        symbols[r->next].prev = p.left;
                r->id = MERGED;

                push_candidate(tk, symbols, e->heap, &n_heap, l->prev);
                push_candidate(tk, symbols, e->heap, &n_heap, p.left);
        }

        for (int32_t i = 0; i >= 0; i = symbols[i].next) {
                if (symbols[i].id == NO_TOKEN)
                        continue;
                int r = id_list_push(&e->out, symbols[i].id, e->err);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int encode(const struct tokenizer *tk, const char *text, size_t len, bool parse_special, struct id_list *out,
                  struct error *err) {
        struct encoder e = { .tk = tk, .out = *out, .err = err };
        struct fragment *frags = NULL;
        size_t n_frags = 0;
        bool after_special = true; /* the text's start counts as one, for add_space_prefix */
        int r;

        if (len > INT32_MAX)
                return error_set(err, EINVAL, "text of %zu bytes is too long to encode", len);

        r = special_partition(tk->specials, text, len, parse_special, &frags, &n_frags);
        if (r < 0) {
                error_set(err, -r, "out of memory encoding text");
                goto finish;
        }

        for (size_t i = 0; i < n_frags && r == 0; i++) {
                const struct fragment *fr = &frags[i];
                if (fr->id >= 0)
                        r = id_list_push(&e.out, fr->id, err);
                else if (tk->kind == TOKENIZER_SPM)
                        r = spm_encode(tk, text + fr->start, fr->len, tk->add_space_prefix && after_special, &e.spm,
                                       &e.out, err);
                else
                        r = pretokenize(tk->pre, text + fr->start, fr->len, encode_piece, &e);
                after_special = fr->id >= 0;
        }

finish:
        *out = e.out;
        free(frags);
        free(e.symbols);
        free(e.heap);
        free(e.spelling);
        spm_scratch_free(&e.spm);
        return r;
}

int tokenizer_encode(const struct tokenizer *tk, const char *text, size_t len, bool parse_special,
                     int32_t **ret_ids, size_t *ret_n, struct error *err) {
        struct id_list out = {};
        int r = encode(tk, text, len, parse_special, &out, err);
        if (r < 0) {
                free(out.ids);
                return r;
        }
        *ret_ids = out.ids;
        *ret_n = out.n;
        return 0;
}

int tokenizer_encode_prompt(const struct tokenizer *tk, const char *text, size_t len, bool parse_special,
                            int32_t **ret_ids, size_t *ret_n, struct error *err) {
        struct id_list out = {};
        int r = 0;

        if (tk->add_bos)
                r = id_list_push(&out, tk->bos, err);
        if (r == 0)
                r = encode(tk, text, len, parse_special, &out, err);
        if (r == 0 && tk->add_eos)
                r = id_list_push(&out, tk->eos, err);
        if (r < 0) {
                free(out.ids);
                return r;
        }
        *ret_ids = out.ids;
        *ret_n = out.n;
        return 0;
}

/* Decoding */

int tokenizer_decode(const struct tokenizer *tk, const int32_t *ids, size_t n, bool skip_special, char **ret,
                     size_t *ret_len, struct error *err) {
        size_t total = 0;
        char *buf;

        for (size_t i = 0; i < n; i++) {
                if (!tokenizer_valid_id(tk, ids[i]))
                        return error_set(err, EINVAL, "token id %" PRId32 " at position %zu is out of range (vocabulary of %d)",
                                         ids[i], i, tk->n_vocab);
                if (!(skip_special && tokenizer_is_special(tk, ids[i])))
                        total += tk->tokens[ids[i]].bytes_len;
        }

        buf = malloc(total + 1);
        if (!buf)
                return error_set(err, ENOMEM, "out of memory decoding %zu tokens", n);
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
                const struct token *t = &tk->tokens[ids[i]];
                if (skip_special && tokenizer_is_special(tk, ids[i]))
                        continue;
                memcpy(buf + o, tk->bytes_arena + t->bytes_off, t->bytes_len);
                o += t->bytes_len;
        }
        buf[o] = '\0';

        *ret = buf;
        if (ret_len)
                *ret_len = o;
        return 0;
}

int tokenizer_decode_text(const struct tokenizer *tk, const int32_t *ids, size_t n, bool skip_special, char **ret,
                          size_t *ret_len, struct error *err) {
        char *raw, *text;
        size_t raw_len, len;
        int r;

        r = tokenizer_decode(tk, ids, n, skip_special, &raw, &raw_len, err);
        if (r < 0)
                return r;
        text = malloc(3 * raw_len + 1);
        if (!text) {
                free(raw);
                return error_set(err, ENOMEM, "out of memory decoding %zu tokens", n);
        }
        len = utf8_sanitize((const uint8_t *) raw, raw_len, text);
        text[len] = '\0';
        free(raw);

        *ret = text;
        if (ret_len)
                *ret_len = len;
        return 0;
}
