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
 *     its tokenizer.json, which GGUF does not carry). */
#include <assert.h>
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
