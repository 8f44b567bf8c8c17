/* SPDX-License-Identifier: MIT */
/* What llama.cpp decides about tokens from their text rather than from the file, applied
 * here too so that the same text gives the same ids:
 *
 *   - a token spelled like an end of generation or turn ("<|im_end|>", "</s>", ...) is a
 *     control token, whatever its type says; so is one spelled like a fill-in-the-middle
 *     marker ("<|fim_prefix|>", "<｜fim▁begin｜>", ...) when the file names no token for
 *     that role (tokenizer.ggml.fim_*_token_id). (llama.cpp promotes only the first such
 *     token of a role, in its hash map's order; vocabularies with one spelling per role,
 *     all of those here, see no difference.)
 *   - in a Phi-3 model (general.name holds "phi-3" or "phi3", any case) every special
 *     token but <unk>, <s> and <|endoftext|> swallows the white space after it (rstrip in
 *     its tokenizer.json, which GGUF does not carry).
 *   - generation ends at (tokenizer_is_eog()): the FIM pad, repo and file-separator tokens
 *     (named by their keys or found by spelling), every token spelled like an end of
 *     generation, EOS, and the tokens tokenizer.ggml.eot_token_id and eom_token_id name;
 *     but not "<|end|>" where "<|return|>"/"<|call|>" (o200k_harmony) or "<|calls|>"/"<|flush|>"
 *     (solar-open) show it is a message separator, nor "</s>" beside "<|tool_response>" or
 *     "<|plamo:eos|>" (Gemma 4, PLaMo: an ordinary token there). */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer-internal.h"

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))

static const char *const end_of_generation[] = {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
        "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
        "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", /* <｜end▁of▁sentence｜> */
        "[e~[",
};

#define FIM_MAX_SPELLINGS 8

static const struct {
        const char *key;
        const char *spellings[FIM_MAX_SPELLINGS]; /* NULL after the last */
} fill_in_the_middle[] = {
        { "tokenizer.ggml.fim_pre_token_id",
          { "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
            "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>" } },
        { "tokenizer.ggml.fim_suf_token_id",
          { "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>",
            "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>" } },
        { "tokenizer.ggml.fim_mid_token_id",
          { "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
            "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>" } },
        { "tokenizer.ggml.fim_pad_token_id", { "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]" } },
        { "tokenizer.ggml.fim_rep_token_id",
          { "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>" } },
        { "tokenizer.ggml.fim_sep_token_id", { "<|file_sep|>" } },
};

static bool spelled(const char *text, size_t len, const char *spelling) {
        return strlen(spelling) == len && memcmp(text, spelling, len) == 0;
}

void control_lookalikes_init(struct control_lookalikes *c, const struct gguf_file *f) {
        static_assert(ELEMENTSOF(fill_in_the_middle) <= ELEMENTSOF(c->fim_role_open), "one flag per role");
        for (size_t r = 0; r < ELEMENTSOF(fill_in_the_middle); r++)
                c->fim_role_open[r] = !gguf_find_kv(f, fill_in_the_middle[r].key);
}

bool control_lookalike(const struct control_lookalikes *c, const char *text, size_t len) {
        /* Every spelling is 4 to 27 bytes and starts with '<', '[', '_' or U+2581. */
        if (len < 4 || len > 27 || (text[0] != '<' && text[0] != '[' && text[0] != '_' && text[0] != '\xe2'))
                return false;
        for (size_t i = 0; i < ELEMENTSOF(end_of_generation); i++)
                if (spelled(text, len, end_of_generation[i]))
                        return true;
        for (size_t r = 0; r < ELEMENTSOF(fill_in_the_middle); r++)
                for (size_t i = 0; c->fim_role_open[r] && i < FIM_MAX_SPELLINGS && fill_in_the_middle[r].spellings[i]; i++)
                        if (spelled(text, len, fill_in_the_middle[r].spellings[i]))
                                return true;
        return false;
}

bool phi3_strips_after_specials(const struct gguf_file *f) {
        struct gguf_string name;
        struct error ignored = {};
        char lower[256];

        if (!gguf_find_kv(f, "general.name") || gguf_get_string(f, "general.name", &name, &ignored) < 0)
                return false;
        size_t n = name.len < sizeof(lower) - 1 ? name.len : sizeof(lower) - 1;
        for (size_t i = 0; i < n; i++)
                lower[i] = (char) (name.data[i] >= 'A' && name.data[i] <= 'Z' ? name.data[i] + 'a' - 'A' : name.data[i]);
        lower[n] = '\0';
        return strstr(lower, "phi-3") || strstr(lower, "phi3");
}

bool phi3_keeps_space_after(const char *text, size_t len) {
        return spelled(text, len, "<unk>") || spelled(text, len, "<s>") || spelled(text, len, "<|endoftext|>");
}

struct id_set {
        int32_t *ids;
        size_t n;
};

static bool id_set_add(struct id_set *s, int32_t id) {
        if (id < 0)
                return true;
        for (size_t i = 0; i < s->n; i++)
                if (s->ids[i] == id)
                        return true;
        int32_t *p = realloc(s->ids, (s->n + 1) * sizeof(*p));
        if (!p)
                return false;
        s->ids = p;
        s->ids[s->n++] = id;
        return true;
}

/* The member spelled text, or -1. */
static int32_t id_set_spelled(const struct tokenizer *tk, const struct id_set *s, const char *text) {
        for (size_t i = 0; i < s->n; i++)
                if (spelled(token_text(tk, s->ids[i]), tk->tokens[s->ids[i]].text_len, text))
                        return s->ids[i];
        return -1;
}

static void id_set_remove(struct id_set *s, int32_t id) {
        for (size_t i = 0; i < s->n; i++)
                if (s->ids[i] == id) {
                        s->ids[i] = s->ids[--s->n];
                        return;
                }
}

static int id_order(const void *a, const void *b) {
        int32_t x = *(const int32_t *) a, y = *(const int32_t *) b;
        return x < y ? -1 : x > y;
}

/* The role's token: the file's, else the first of its spellings the vocabulary has. */
static int32_t fim_role_token(const struct tokenizer *tk, size_t role, int32_t named) {
        const char *const *spellings = fill_in_the_middle[role].spellings;

        for (size_t i = 0; named < 0 && i < FIM_MAX_SPELLINGS && spellings[i]; i++)
                named = tokenizer_find(tk, spellings[i], strlen(spellings[i]));
        return named;
}

int end_of_generation_init(struct tokenizer *tk, const struct named_end_ids *named, struct error *err) {
        /* fill_in_the_middle's roles 3 to 5: pad, repo, file separator */
        const int32_t ids[] = { fim_role_token(tk, 3, named->fim_pad), fim_role_token(tk, 4, named->fim_rep),
                                fim_role_token(tk, 5, named->fim_sep), tk->eos, named->eot, named->eom };
        struct id_set s = {};
        bool ok = true;

        for (size_t i = 0; i < ELEMENTSOF(ids); i++)
                ok = ok && id_set_add(&s, ids[i]);
        for (size_t i = 0; i < ELEMENTSOF(end_of_generation); i++)
                ok = ok && id_set_add(&s, tokenizer_find(tk, end_of_generation[i], strlen(end_of_generation[i])));
        if (!ok) {
                free(s.ids);
                return error_set(err, ENOMEM, "out of memory listing the end-of-generation tokens");
        }

        int32_t end = id_set_spelled(tk, &s, "<|end|>");
        bool call = id_set_spelled(tk, &s, "<|call|>") >= 0 || id_set_spelled(tk, &s, "<|calls|>") >= 0;
        if (end >= 0 && call &&
            (id_set_spelled(tk, &s, "<|return|>") >= 0 || id_set_spelled(tk, &s, "<|flush|>") >= 0))
                id_set_remove(&s, end);
        int32_t close = id_set_spelled(tk, &s, "</s>");
        if (close >= 0 &&
            (id_set_spelled(tk, &s, "<|tool_response>") >= 0 || id_set_spelled(tk, &s, "<|plamo:eos|>") >= 0))
                id_set_remove(&s, close);

        if (s.n > 1) /* a vocabulary without any end token leaves ids NULL */
                qsort(s.ids, s.n, sizeof(*s.ids), id_order);
        tk->eog_ids = s.ids;
        tk->n_eog = s.n;
        return 0;
}
