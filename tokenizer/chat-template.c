/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "chat-template.h"

#define IM_START "<|im_start|>"
#define IM_END "<|im_end|>"
#define SYSTEM_HEAD IM_START "system"

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

int chat_render(const struct tokenizer *tk, const struct chat_message *msgs, size_t n, bool add_generation_prompt,
                char **ret, struct error *err) {
        const char *template = tokenizer_chat_template(tk);
        static const size_t turn_overhead = sizeof(IM_START "\n" IM_END "\n") - 1;
        char *default_system = NULL, *buf, *o;
        size_t size = 1;
        int r;

        if (!template)
                return error_set(err, EOPNOTSUPP, "the model has no chat template (tokenizer.chat_template)");

        for (size_t i = 0; i < n; i++) {
                if (!msgs[i].role || !msgs[i].content)
                        return error_set(err, EINVAL, "message %zu has no %s", i, msgs[i].role ? "content" : "role");
                if (!valid_role(msgs[i].role))
                        return error_set(err, EINVAL,
                                         "message %zu has role \"%.64s\"; expected \"system\", \"user\" or \"assistant\"",
                                         i, msgs[i].role);
                size += turn_overhead + strlen(msgs[i].role) + strlen(msgs[i].content);
        }

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
