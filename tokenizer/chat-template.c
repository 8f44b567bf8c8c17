/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "chat-template.h"
#include "jinja.h"

#define START_OF_TURN "<start_of_turn>"
#define END_OF_TURN "<end_of_turn>"

/* The families whose files come without a template but whose turn format is known. */
static bool gemma_architecture(const char *arch) {
        return arch && (strcmp(arch, "gemma") == 0 || strcmp(arch, "gemma2") == 0 || strcmp(arch, "gemma3") == 0);
}

static bool builtin_gemma(const struct tokenizer *tk) {
        return !tokenizer_chat_template(tk) && gemma_architecture(tokenizer_architecture(tk));
}

const char *chat_template_describe(const struct tokenizer *tk) {
        if (builtin_gemma(tk))
                return "Gemma turns, built in for the file's architecture (it has no tokenizer.chat_template)";
        if (chat_template_check(tk, NULL) < 0)
                return NULL;
        return tokenizer_chat_template_replaced(tk) ? "Jinja, from the template given in place of the file's"
                                                    : "Jinja, from the file's tokenizer.chat_template";
}

static int no_format(const struct tokenizer *tk, struct error *err) {
        return error_set(err, EOPNOTSUPP,
                         "the model has no chat template (tokenizer.chat_template) and its architecture (%s) has no "
                         "built-in chat format; give one with --chat-template FILE",
                         tokenizer_architecture(tk) ? tokenizer_architecture(tk) : "not named");
}


static bool valid_role(const char *role) {
        return strcmp(role, "system") == 0 || strcmp(role, "user") == 0 || strcmp(role, "assistant") == 0;
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

/* llama.cpp's probe: does the template read a leading system message's content? */
static bool knows_system_role(const struct jinja_template *t, time_t now) {
        static const char system_text[] = "System message";
        const struct chat_message probe[] = { { "system", system_text }, { "user", "User message" } };
        const struct jinja_chat chat = {
                .messages = probe, .n_messages = 2, .bos_token = "", .eos_token = "", .add_generation_prompt = true,
                .enable_thinking = true, .tools_empty_list = true, .now = now,
        };
        bool read = false;
        char *out = NULL;
        if (jinja_render(t, &chat, system_text, &read, &out, NULL) == 0)
                free(out);
        return read;
}

int chat_render_template(const char *template, const struct chat_vocabulary *vocabulary,
                         const struct chat_message *msgs, size_t n, bool add_generation_prompt, time_t now, char **ret,
                         struct error *err) {
        struct jinja_template *t;
        int r = jinja_parse(template, &t, err);
        if (r < 0)
                return r;

        /* a system message the template ignores is joined to the next message, as llama.cpp */
        struct chat_message *joined = NULL;
        char *system_and_next = NULL;
        if (n > 0 && strcmp(msgs[0].role, "system") == 0 && !knows_system_role(t, now)) {
                if (n > 1) {
                        joined = malloc((n - 1) * sizeof(*joined));
                        size_t len = strlen(msgs[0].content) + 1 + strlen(msgs[1].content);
                        system_and_next = malloc(len + 1);
                        if (!joined || !system_and_next) {
                                r = error_set(err, ENOMEM, "out of memory rendering %zu chat messages", n);
                                goto finish;
                        }
                        strcpy(stpcpy(stpcpy(system_and_next, msgs[0].content), "\n"), msgs[1].content);
                        joined[0] = (struct chat_message) { msgs[1].role, system_and_next };
                        memcpy(joined + 1, msgs + 2, (n - 2) * sizeof(*joined));
                        msgs = joined;
                        n--;
                } else {
                        msgs++;
                        n--;
                }
        }

        const struct jinja_chat chat = {
                .messages = msgs, .n_messages = n, .bos_token = vocabulary->bos_token,
                .eos_token = vocabulary->eos_token, .add_generation_prompt = add_generation_prompt,
                .enable_thinking = true, .now = now,
        };
        char *out;
        r = jinja_render(t, &chat, NULL, NULL, &out, err);
        if (r == 0) {
                size_t bos_len = strlen(vocabulary->bos_token);
                if (vocabulary->add_bos && bos_len > 0 && strncmp(out, vocabulary->bos_token, bos_len) == 0)
                        memmove(out, out + bos_len, strlen(out + bos_len) + 1);
                *ret = out;
        }
finish:
        free(joined);
        free(system_and_next);
        jinja_free(t);
        return r;
}

static const char *special_text(const struct tokenizer *tk, int32_t id) {
        size_t len;
        const char *text = id >= 0 ? tokenizer_token_bytes(tk, id, &len) : NULL;
        return text && memchr(text, '\0', len) == NULL ? text : "";
}

static struct chat_vocabulary model_vocabulary(const struct tokenizer *tk) {
        return (struct chat_vocabulary) {
                .bos_token = special_text(tk, tokenizer_bos(tk)),
                .eos_token = special_text(tk, tokenizer_eos(tk)),
                .add_bos = tokenizer_add_bos(tk),
        };
}

/* A template that parses but cannot run a one-message chat (an unsupported filter, say)
 * would fail every request: it is reported here, at startup. */
int chat_template_check(const struct tokenizer *tk, struct error *err) {
        if (builtin_gemma(tk))
                return 0;
        if (!tokenizer_chat_template(tk))
                return no_format(tk, err);
        const struct chat_message hello = { "user", "Hello" };
        const struct chat_vocabulary vocabulary = model_vocabulary(tk);
        char *out;
        int r = chat_render_template(tokenizer_chat_template(tk), &vocabulary, &hello, 1, true, time(NULL), &out, err);
        if (r == 0)
                free(out);
        return r;
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
        if (builtin_gemma(tk))
                return render_gemma(msgs, n, add_generation_prompt, ret, err);
        if (!tokenizer_chat_template(tk))
                return no_format(tk, err);
        const struct chat_vocabulary vocabulary = model_vocabulary(tk);
        return chat_render_template(tokenizer_chat_template(tk), &vocabulary, msgs, n, add_generation_prompt, time(NULL),
                                    ret, err);
}
