/* SPDX-License-Identifier: MIT */
#pragma once

/* vLLM's OpenAI-compatible bodies, as the HTTP front speaks them: a /v1/completions or
 * /v1/chat/completions body turned into the socket protocol's generate message (so that
 * every field is checked, and named when refused, by the same parser), and the engine's
 * outputs written as OpenAI's completion objects, stream chunks and error objects. Pure
 * functions: no I/O, no engine calls. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "protocol.h"
#include "request-output.h"

enum openai_route {
        OPENAI_COMPLETIONS,      /* POST /v1/completions */
        OPENAI_CHAT_COMPLETIONS, /* POST /v1/chat/completions */
};

/* A parsed body: the generate message and what the HTTP front does beyond it. */
struct openai_request {
        enum openai_route route;
        struct client_message msg; /* op generate, output kind delta */
        char *model;               /* as the body names it; NULL when it names none */
        bool stream;
        bool include_usage;        /* stream_options.include_usage */
        bool echo;                 /* completions: the prompt before each completion's text */
        bool logprobs;             /* the choices carry logprobs */
        uint32_t n;
};

/* Why a body was refused: the HTTP status and OpenAI's error fields. */
struct openai_error {
        int status;
        const char *type;  /* "invalid_request_error", ... */
        char param[64];    /* the field, or "" */
        char message[PROTOCOL_ERROR_MESSAGE_MAX];
};

int openai_error_set(struct openai_error *e, int status, const char *type, const char *param, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));

/* len bytes of body as one JSON object (nested at most 32 deep) in *ret, or -EINVAL
 * (-ENOMEM) with *err naming what is wrong. */
int openai_body_object(const char *body, size_t len, struct json_object **ret, struct openai_error *err);
/* OpenAI's chat messages (content a string or a list of text parts) copied into line's
 * "messages" as the socket protocol takes them. -EINVAL with *err naming the message. */
int openai_copy_messages(struct json_object *v, struct json_object *line, struct openai_error *err);

/* Parses len bytes of body for route. 0 and *ret (free with openai_request_free()), or a
 * negative errno with *err (400 naming the field; 500 when out of memory). */
int openai_parse(const char *body, size_t len, enum openai_route route, struct openai_request *ret,
                 struct openai_error *err);
void openai_request_free(struct openai_request *r);

/* A 400 for a message of the socket parser or the engine's check ("params.top_k must be ...",
 * "temperature must be ..."): the field it begins with is the param. Returns -EINVAL. */
int openai_refused(const char *message, struct openai_error *err);

/* {"error": {"message", "type", "param", "code"}}, malloc()ed. */
char *openai_error_body(const struct openai_error *e);

/* What the answers name and count. */
struct openai_answer {
        const char *id;       /* "cmpl-..." or "chatcmpl-..." */
        const char *model;    /* the served name */
        int64_t created;      /* Unix seconds */
        uint32_t n_prompt;
        const char *prompt;   /* echo: the prompt's text */
};

/* One completion, as a choice collects it across outputs (non-streamed answers). */
struct openai_choice {
        char *text;
        size_t len, cap;
        uint32_t n_tokens;
        enum finish_reason finish_reason;
        struct json_object *logprobs; /* the route's logprobs object, NULL without */
};

/* Appends an output's completions (delta) to choices (n of them). -ENOMEM. */
int openai_collect(const struct openai_request *req, const struct tokenizer *tk, const struct request_output *o,
                   struct openai_choice *choices, uint32_t n);
void openai_choices_free(struct openai_choice *choices, uint32_t n);

/* The whole answer of a non-streamed request, malloc()ed. */
char *openai_answer_body(const struct openai_request *req, const struct openai_answer *a,
                         const struct openai_choice *choices, uint32_t n);

/* A stream's "data: {...}\n\n" events for one output (the first of a chat stream announces the
 * assistant's role), appended to *buf (size *len, capacity *cap). -ENOMEM. */
int openai_stream_events(const struct openai_request *req, const struct openai_answer *a, const struct tokenizer *tk,
                         const struct request_output *o, bool first, char **buf, size_t *len, size_t *cap);
/* An error event (the error object) in a stream already under way. */
int openai_stream_error(const struct openai_error *e, char **buf, size_t *len, size_t *cap);
/* The stream's end: the usage chunk when asked for, then "data: [DONE]\n\n". */
int openai_stream_end(const struct openai_request *req, const struct openai_answer *a, uint32_t n_generated, char **buf,
                      size_t *len, size_t *cap);

/* OpenAI's name of a finish reason: "stop", "length", "abort" (vLLM's), or NULL while running. */
const char *openai_finish_reason(enum finish_reason r);
