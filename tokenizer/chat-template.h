/* SPDX-License-Identifier: MIT */
#pragma once

/* Chat prompt rendering without a Jinja engine: the template is inspected, not executed,
 * and recognised as one of two formats.
 *
 * Which format: the model's tokenizer.chat_template when it has one, or the template that
 * replaced it (tokenizer_replace_chat_template(): the daemon's --chat-template) (a template holding
 * "<|im_start|>" is ChatML, one holding "<start_of_turn>" is Gemma's, as llama.cpp's
 * template detection says; any other is refused with -EOPNOTSUPP). A file without a
 * template is chatted in its architecture's own format where one is known (gemma, gemma2,
 * gemma3: Gemma's), else refused with -EOPNOTSUPP.
 *
 * ChatML: if the template holds a string literal that starts "<|im_start|>system\n" and
 * runs plain (no quote, brace or "+" concatenation) up to "<|im_end|>", the text between is
 * the default system message, emitted first when the first message is not a system message
 * (SmolLM2's "You are a helpful AI assistant named SmolLM, trained by Hugging Face"). A
 * ChatML template without such a literal has no default system message. Output: [default
 * system message] then each message as "<|im_start|>ROLE\nCONTENT<|im_end|>\n", then
 * "<|im_start|>assistant\n" when add_generation_prompt. Content is copied verbatim.
 *
 * Gemma: byte for byte llama.cpp's built-in "gemma" template. Contents are trimmed of
 * leading and trailing ASCII white space; system messages are not turns: their trimmed
 * contents are concatenated and put, followed by "\n\n", at the start of the next user
 * message (dropped when none follows); the assistant role is "model". Each turn is
 * "<start_of_turn>ROLE\nCONTENT<end_of_turn>\n", then "<start_of_turn>model\n" when
 * add_generation_prompt. */

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

/* What the model is chatted with, for the log (a static string): e.g. "ChatML, from the
 * file's tokenizer.chat_template" or "Gemma turns, built in for the file's architecture (it
 * has no tokenizer.chat_template)"; NULL when the model cannot be chatted with. */
const char *chat_template_describe(const struct tokenizer *tk);

/* Renders msgs[0..n) into a malloc'ed NUL-terminated string. -EINVAL for a role other than
 * system/user/assistant or a NULL role or content (the message names the index),
 * -EOPNOTSUPP when the model has no usable format (see above). */
int chat_render(const struct tokenizer *tk, const struct chat_message *msgs, size_t n, bool add_generation_prompt,
                char **ret, struct error *err);
