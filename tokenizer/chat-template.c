/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "chat-template.h"

#define IM_START "<|im_start|>"
#define IM_END "<|im_end|>"
#define SYSTEM_HEAD IM_START "system"
#define START_OF_TURN "<start_of_turn>"
#define END_OF_TURN "<end_of_turn>"

enum chat_format {
        CHAT_FORMAT_NONE,
        CHAT_FORMAT_CHATML,
        CHAT_FORMAT_GEMMA,
};

/* Whether the literal at p (just after SYSTEM_HEAD, inside a string quoted by quote) is a
 * plain "\nTEXT<|im_end|>": 1 with a copy of TEXT in *ret, 0 if not, -ENOMEM. "\n" may be a
 * real newline or the two-character escape. */
static int plain_system_text(const char *p, char quote, char **ret) {
        const char *end;
        char *text, *o;

        if (p[0] == '\n')
                p++;
        else if (p[0] == '\\' && p[1] == 'n')
                p += 2;
        else
                return 0;

        end = strstr(p, IM_END);
        if (!end)
                return 0;
        for (const char *c = p; c < end; c++) {
                if (*c == quote || *c == '{' || *c == '}')
                        return 0;
                if (*c == '\\' && c[1] != 'n')
                        return 0;
                if (*c == '\\')
                        c++;
        }

        text = malloc((size_t) (end - p) + 1);
        if (!text)
                return -ENOMEM;
        o = text;
        for (const char *c = p; c < end; c++) {
                if (*c == '\\') {
                        *o++ = '\n';
                        c++;
                } else
                        *o++ = *c;
        }
        *o = '\0';
        *ret = text;
        return 1;
}

int chat_template_default_system(const char *template, char **ret, struct error *err) {
        if (!strstr(template, IM_START))
                return error_set(err, EOPNOTSUPP,
                                 "the model's chat template is not ChatML (it has no \"" IM_START
                                 "\"); only ChatML templates are supported");

        /* The first plain literal wins: a template may also build a system turn from the
         * caller's message, as '<|im_start|>system\n' + content, which is no default. */
        for (const char *p = strstr(template, SYSTEM_HEAD); p; p = strstr(p + 1, SYSTEM_HEAD)) {
                if (p == template || (p[-1] != '\'' && p[-1] != '"'))
                        continue;
                int r = plain_system_text(p + strlen(SYSTEM_HEAD), p[-1], ret);
                if (r < 0)
                        return error_set(err, -r, "out of memory reading the chat template");
                if (r > 0)
                        return 0;
        }
        *ret = NULL;
        return 0;
}

/* The families whose files come without a template but whose turn format is known. */
static bool gemma_architecture(const char *arch) {
        return arch && (strcmp(arch, "gemma") == 0 || strcmp(arch, "gemma2") == 0 || strcmp(arch, "gemma3") == 0);
}

static enum chat_format format_of(const struct tokenizer *tk) {
        const char *template = tokenizer_chat_template(tk);
        if (!template)
                return gemma_architecture(tokenizer_architecture(tk)) ? CHAT_FORMAT_GEMMA : CHAT_FORMAT_NONE;
        if (strstr(template, IM_START))
                return CHAT_FORMAT_CHATML;
        if (strstr(template, START_OF_TURN))
                return CHAT_FORMAT_GEMMA;
        return CHAT_FORMAT_NONE;
}

const char *chat_template_describe(const struct tokenizer *tk) {
        bool own = tokenizer_chat_template(tk) != NULL, replaced = tokenizer_chat_template_replaced(tk);
        switch (format_of(tk)) {
        case CHAT_FORMAT_CHATML:
                return replaced ? "ChatML, from the template given in place of the file's"
                                : "ChatML, from the file's tokenizer.chat_template";
        case CHAT_FORMAT_GEMMA:
                return replaced ? "Gemma turns, from the template given in place of the file's"
                       : own    ? "Gemma turns, from the file's tokenizer.chat_template"
                                : "Gemma turns, built in for the file's architecture (it has no tokenizer.chat_template)";
        case CHAT_FORMAT_NONE:
                break;
        }
        return NULL;
}

static bool valid_role(const char *role) {
        return strcmp(role, "system") == 0 || strcmp(role, "user") == 0 || strcmp(role, "assistant") == 0;
}

static char *append_turn(char *o, const char *role, const char *content) {
        o = stpcpy(o, IM_START);
        o = stpcpy(o, role);
        o = stpcpy(o, "\n");
        o = stpcpy(o, content);
        return stpcpy(o, IM_END "\n");
}

static int render_chatml(const char *template, const struct chat_message *msgs, size_t n,
                         bool add_generation_prompt, char **ret, struct error *err) {
        static const size_t turn_overhead = sizeof(IM_START "\n" IM_END "\n") - 1;
        char *default_system = NULL, *buf, *o;
        size_t size = 1;
        int r;

        for (size_t i = 0; i < n; i++)
                size += turn_overhead + strlen(msgs[i].role) + strlen(msgs[i].content);

        r = chat_template_default_system(template, &default_system, err);
        if (r < 0)
                return r;
        /* As the template says: the default comes first, inside the loop, so only when
         * there is a first message and it is not a system message. */
        if (default_system && (n == 0 || strcmp(msgs[0].role, "system") == 0)) {
                free(default_system);
                default_system = NULL;
        }
        if (default_system)
                size += turn_overhead + strlen("system") + strlen(default_system);
        if (add_generation_prompt)
                size += strlen(IM_START "assistant\n");

        buf = malloc(size);
        if (!buf) {
                free(default_system);
                return error_set(err, ENOMEM, "out of memory rendering %zu chat messages", n);
        }
        o = buf;
        *o = '\0';
        if (default_system)
                o = append_turn(o, "system", default_system);
        for (size_t i = 0; i < n; i++)
                o = append_turn(o, msgs[i].role, msgs[i].content);
        if (add_generation_prompt)
                o = stpcpy(o, IM_START "assistant\n");

        free(default_system);
        *ret = buf;
        return 0;
}

/* llama.cpp's trim(): C isspace() in the "C" locale. */
static bool ascii_space(char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static const char *trimmed(const char *s, size_t *ret_len) {
        size_t len = strlen(s);
        while (len > 0 && ascii_space(*s)) {
                s++;
                len--;
        }
        while (len > 0 && ascii_space(s[len - 1]))
                len--;
        *ret_len = len;
        return s;
}

static char *append(char *o, const char *s, size_t len) {
        memcpy(o, s, len);
        return o + len;
}

static int render_gemma(const struct chat_message *msgs, size_t n, bool add_generation_prompt, char **ret,
                        struct error *err) {
        static const char turn_overhead[] = START_OF_TURN "assistant\n\n\n" END_OF_TURN "\n";
        size_t size = sizeof(START_OF_TURN "model\n");
        char *buf, *o;

        /* Every content appears at most once, trimmed: its length bounds its share. */
        for (size_t i = 0; i < n; i++)
                size += sizeof(turn_overhead) + strlen(msgs[i].content);
        buf = malloc(size);
        if (!buf)
                return error_set(err, ENOMEM, "out of memory rendering %zu chat messages", n);

        /* The pending system text: the system messages since the last user turn, in order. */
        size_t first_system = n, last_system = 0;
        o = buf;
        for (size_t i = 0; i < n; i++) {
                const char *role = msgs[i].role;
                if (strcmp(role, "system") == 0) {
                        if (first_system == n)
                                first_system = i;
                        last_system = i;
                        continue;
                }
                bool model = strcmp(role, "assistant") == 0;
                o = stpcpy(o, START_OF_TURN);
                o = stpcpy(o, model ? "model" : role);
                o = stpcpy(o, "\n");
                if (!model && first_system < n) {
                        size_t before = (size_t) (o - buf);
                        for (size_t k = first_system; k <= last_system; k++) {
                                size_t len;
                                const char *text = trimmed(msgs[k].content, &len);
                                if (strcmp(msgs[k].role, "system") == 0)
                                        o = append(o, text, len);
                        }
                        /* llama.cpp keeps an empty system text pending. */
                        if ((size_t) (o - buf) > before) {
                                o = stpcpy(o, "\n\n");
                                first_system = n;
                        }
                }
                size_t len;
                const char *text = trimmed(msgs[i].content, &len);
                o = append(o, text, len);
                o = stpcpy(o, END_OF_TURN "\n");
        }
        if (add_generation_prompt)
                o = stpcpy(o, START_OF_TURN "model\n");
        *o = '\0';
        *ret = buf;
        return 0;
}

int chat_render(const struct tokenizer *tk, const struct chat_message *msgs, size_t n, bool add_generation_prompt,
                char **ret, struct error *err) {
        for (size_t i = 0; i < n; i++) {
                if (!msgs[i].role || !msgs[i].content)
                        return error_set(err, EINVAL, "message %zu has no %s", i, msgs[i].role ? "content" : "role");
                if (!valid_role(msgs[i].role))
                        return error_set(err, EINVAL,
                                         "message %zu has role \"%.64s\"; expected \"system\", \"user\" or \"assistant\"",
                                         i, msgs[i].role);
        }

        switch (format_of(tk)) {
        case CHAT_FORMAT_CHATML:
                return render_chatml(tokenizer_chat_template(tk), msgs, n, add_generation_prompt, ret, err);
        case CHAT_FORMAT_GEMMA:
                return render_gemma(msgs, n, add_generation_prompt, ret, err);
        case CHAT_FORMAT_NONE:
                break;
        }
        if (!tokenizer_chat_template(tk))
                return error_set(err, EOPNOTSUPP,
                                 "the model has no chat template (tokenizer.chat_template) and its architecture (%s) "
                                 "has no built-in chat format",
                                 tokenizer_architecture(tk) ? tokenizer_architecture(tk) : "not named");
        return error_set(err, EOPNOTSUPP,
                         "the model's chat template is neither ChatML (it has no \"" IM_START "\") nor Gemma's (no \""
                         START_OF_TURN "\"); only these are supported");
}
