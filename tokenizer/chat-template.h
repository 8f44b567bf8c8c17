/* SPDX-License-Identifier: MIT */
#pragma once

/* Chat prompt rendering as llama.cpp's llama-server does it with --jinja (POST
 * /apply-template), byte for byte: the model's tokenizer.chat_template (or the template
 * that replaced it: tokenizer_replace_chat_template(), the daemon's --chat-template) is run
 * by the Jinja interpreter of jinja.h with the variables llama.cpp passes:
 *   messages               [{"role", "content"}, ...]
 *   bos_token, eos_token   the vocabulary's BOS and EOS as spelled ("" when absent)
 *   add_generation_prompt  true, or undefined when not wanted (llama.cpp leaves it out)
 *   enable_thinking        true (llama.cpp's default where a template reads it)
 *   date_string, datetime  today, "%d %b %Y" and "%b %d %Y", local time; strftime_now()
 *                          formats the same clock
 * and llama.cpp's two adjustments around it: a template that never reads a leading system
 * message's content when given one (its probe: [system, user]) does not know the system
 * role, so that message is joined to the next one as "SYSTEM\nNEXT" (dropped when alone);
 * and when the vocabulary adds BOS itself (tokenizer_add_bos()), a BOS the template wrote
 * at the very start is removed, since tokenization will add it.
 *
 * A file without a template is chatted in its architecture's own format where one is known
 * (gemma, gemma2, gemma3: llama.cpp's built-in "gemma" template, rendered by hand: contents
 * trimmed, system text put before the next user turn, assistant is "model") and refused
 * otherwise. */

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "error.h"
#include "tokenizer.h"

struct chat_message {
        const char *role; /* "system", "user" or "assistant" */
        const char *content;
};

/* The vocabulary's part in a rendering. */
struct chat_vocabulary {
        const char *bos_token, *eos_token; /* "" when absent */
        bool add_bos;
};

/* What the model is chatted with, for the log (a static string): e.g. "Jinja, from the
 * file's tokenizer.chat_template" or "Gemma turns, built in for the file's architecture (it
 * has no tokenizer.chat_template)"; NULL when the model cannot be chatted with. */
const char *chat_template_describe(const struct tokenizer *tk);

/* Whether the model's template parses and renders a one-message chat: 0, -EINVAL naming
 * the line, column and problem, -EOPNOTSUPP when the model has neither a template nor a
 * built-in format. */
int chat_template_check(const struct tokenizer *tk, struct error *err);

/* Renders msgs[0..n) into a malloc'ed NUL-terminated string, at the current time.
 * -EINVAL for a role other than system/user/assistant, a NULL role or content (the message
 * names the index), a template that does not parse or refuses the conversation
 * (raise_exception(), with its message); -E2BIG past the interpreter's limits;
 * -EOPNOTSUPP when the model has no usable format. */
int chat_render(const struct tokenizer *tk, const struct chat_message *msgs, size_t n, bool add_generation_prompt,
                char **ret, struct error *err);

/* The same for a given template text and vocabulary at time now (the tests' entry). */
int chat_render_template(const char *template, const struct chat_vocabulary *vocabulary,
                         const struct chat_message *msgs, size_t n, bool add_generation_prompt, time_t now, char **ret,
                         struct error *err);
