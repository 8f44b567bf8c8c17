/* SPDX-License-Identifier: MIT */
#pragma once

/* A small Jinja interpreter for chat templates, with llama.cpp's Jinja engine as the
 * reference (its whitespace rules, its lenient undefined values, byte lengths).
 *
 * Language: text, {{ expr }}, {# comments #}, whitespace control ({%- -%} {{- -}}) with
 * trim_blocks and lstrip_blocks on; statements if/elif/else, for (over lists, strings,
 * dict items; "if" filter; else; loop.index/index0/revindex/revindex0/first/last/length/
 * previtem/nextitem), set (names and namespace attributes), break, continue,
 * generation (no-op); expressions with literals, lists, dicts, tuples, attribute and index
 * access, slices, calls, filters, tests, not/and/or, comparisons, in, + - ~ * / // %, and
 * a if b else c. Built-ins: raise_exception, namespace, range, strftime_now, dict; the
 * string, list and dict methods and the filters and tests chat templates use (see
 * jinja-render.c). Anything else (macros, call blocks, include, ...) is refused at parse
 * time with the line and column.
 *
 * Limits, so that a hostile template cannot take the daemon down: expression and block
 * nesting 128, a million loop iterations and calls in all, output JINJA_OUTPUT_MAX, and
 * at most JINJA_MEMORY_MAX bytes of values per render; each is an error, never a crash. */

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "chat-template.h"
#include "error.h"

#define JINJA_OUTPUT_MAX (64u << 20)
#define JINJA_MEMORY_MAX (256u << 20)

struct jinja_template;

/* Parses source (NUL-terminated): 0, or -EINVAL naming the line, column and problem, or
 * -ENOMEM. */
int jinja_parse(const char *source, struct jinja_template **ret, struct error *err);
void jinja_free(struct jinja_template *t);

/* The variables a chat template sees, as llama.cpp passes them. */
struct jinja_chat {
        const struct chat_message *messages; /* "messages": a list of {"role", "content"} */
        size_t n_messages;
        const char *bos_token, *eos_token;   /* "" when the vocabulary has none */
        bool add_generation_prompt;          /* defined only when true, as llama.cpp */
        bool enable_thinking;
        bool tools_empty_list;               /* "tools" = [] (llama.cpp's capability probes), else undefined */
        time_t now;                          /* strftime_now(), date_string ("%d %b %Y"), local time */
};

/* Renders t into a malloc'ed NUL-terminated string. watch: NULL, or a string among
 * chat->messages' contents; *ret_watched (may be NULL) then says whether the template
 * read that content (llama.cpp's test of whether a template knows the system role), set
 * even when rendering fails. -EINVAL with the template's own message for raise_exception()
 * or a type error, -E2BIG past a limit, -ENOMEM. */
int jinja_render(const struct jinja_template *t, const struct jinja_chat *chat, const char *watch, bool *ret_watched,
                 char **ret, struct error *err);
