/* SPDX-License-Identifier: MIT */
#pragma once

/* Chat prompt rendering for ChatML-family templates, without a Jinja engine.
 *
 * The model's tokenizer.chat_template is inspected, not executed: it must contain
 * "<|im_start|>" (ChatML), otherwise rendering fails with -EOPNOTSUPP. If the template
 * holds a string literal that starts "<|im_start|>system\n" and runs plain (no quote,
 * brace or "+" concatenation) up to "<|im_end|>", the text between is the default system
 * message, emitted first when the first message is not a system message (SmolLM2's "You
 * are a helpful AI assistant named SmolLM, trained by Hugging Face"). A ChatML template
 * without such a literal has no default system message.
 *
 * Output: [default system message] then each message as
 * "<|im_start|>ROLE\nCONTENT<|im_end|>\n", then "<|im_start|>assistant\n" when
 * add_generation_prompt. Content is copied verbatim. */

#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "tokenizer.h"

struct chat_message {
        const char *role; /* "system", "user" or "assistant" */
        const char *content;
};

/* The default system message of a ChatML template, as described above: 0 and a malloc'ed
 * string (NULL when the template has none), -EOPNOTSUPP when the template is not ChatML. */
int chat_template_default_system(const char *template, char **ret, struct error *err);

/* Renders msgs[0..n) into a malloc'ed NUL-terminated string. -EINVAL for a role other than
 * system/user/assistant or a NULL role or content (the message names the index),
 * -EOPNOTSUPP when the model has no chat template or one that is not ChatML. */
int chat_render(const struct tokenizer *tk, const struct chat_message *msgs, size_t n, bool add_generation_prompt,
                char **ret, struct error *err);
