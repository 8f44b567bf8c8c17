/* SPDX-License-Identifier: MIT */
#pragma once

/* What a generating command asks for, in the protocol's terms (asyncllmd-protocol(7)), and
 * the sampling options that fill it in, shared by generate and chat. */

#include <getopt.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "ctl.h"

struct ctl_generation {
        const char *prompt;                   /* a text prompt, or NULL */
        struct json_object *prompt_token_ids; /* array of ints, or NULL */
        struct json_object *messages;         /* array of {"role", "content"}, or NULL */
        struct json_object *params;           /* the message's "params" object */
        struct json_object *request_fields;   /* priority, latency_sensitive, slo, ttft_slo */
        const char *id;                       /* the request's id, or NULL for the library's */
        /* encode instead of generate: one pooled vector (params stay empty) */
        bool encode;
        const char *pooling_type; /* NULL: the daemon's default */
        bool normalize;
        uint32_t dimensions;      /* 0: all */
};

/* Returns 0 or -ENOMEM. */
int ctl_generation_init(struct ctl_generation *g);
void ctl_generation_done(struct ctl_generation *g);
/* Appends a chat message ({"role", "content"}) to g->messages, made when NULL. -ENOMEM. */
int ctl_generation_add_message(struct ctl_generation *g, const char *role, const char *content);

/* The prompt the command line gives after its options (argv[optind..]), into g: the
 * --prompt-token-ids already there, one PROMPT argument, or standard input (with -, or with
 * none given when it is not a terminal; *ret_stdin_prompt gets that text, to free); with chat,
 * as a user message after the system one (system may be NULL). Returns an exit status, the
 * failure printed. */
int ctl_generation_take_prompt(struct ctl *ctl, struct ctl_generation *g, int argc, char **argv, bool chat,
                               const char *system, char **ret_stdin_prompt);

/* The command's own long options followed by the sampling options, NULL-terminated, to
 * pass to getopt_long(); free() it. NULL when out of memory. */
struct option *ctl_sampling_options_with(const struct option *own, size_t n_own);
/* Whether getopt_long() returned a sampling option. */
bool ctl_sampling_is_option(int opt);
/* Puts a sampling option's value into g; a value of the wrong type is a usage error that
 * names the option and what it takes. Returns an exit status. */
int ctl_sampling_parse(const struct ctl *ctl, struct ctl_generation *g, int opt, const char *arg);
/* The sampling options' lines of --help. */
void ctl_sampling_help(FILE *f);

/* A comma-separated list of integers as a JSON array appended to *array (made when NULL).
 * Returns an exit status. */
int ctl_parse_int_list(const struct ctl *ctl, const char *option, const char *text, struct json_object **array);
/* One integer (up to 2^64 - 1) as JSON. Returns an exit status. */
int ctl_parse_integer(const struct ctl *ctl, const char *option, const char *text, struct json_object **ret);
