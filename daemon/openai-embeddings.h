/* SPDX-License-Identifier: MIT */
#pragma once

/* OpenAI's /v1/embeddings as vLLM serves it: a body's inputs turned into the socket
 * protocol's encode messages (one per input, each checked by the same parser), and the
 * vectors written as OpenAI's list of embedding objects. Pure functions: no I/O, no engine
 * calls. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "openai.h"
#include "protocol.h"

/* The most inputs one body may carry (OpenAI's limit). */
#define OPENAI_EMBEDDING_INPUTS_MAX 2048

struct openai_embeddings_request {
        struct client_message *inputs; /* op encode, one per input, in the body's order */
        size_t n_inputs;
        char *model;                   /* as the body names it; NULL when it names none */
        bool base64;                   /* encoding_format "base64": little-endian float32 bytes */
};

/* Parses len bytes of body: "input" (a string, a list of strings, a list of token ids, or a
 * list of such lists) or vLLM's "messages", with "model", "encoding_format", "dimensions",
 * and vLLM's "normalize", "truncate_prompt_tokens" and "priority" ("pooling_type" too, as
 * the socket takes it). 0 and *ret (free with openai_embeddings_request_free()), or a
 * negative errno with *err (400 naming the field; 500 when out of memory). */
int openai_embeddings_parse(const char *body, size_t len, struct openai_embeddings_request *ret,
                            struct openai_error *err);
void openai_embeddings_request_free(struct openai_embeddings_request *r);

/* The error is one input's of several: its message begins "input[index]: ", its param is
 * input. */
void openai_error_name_input(struct openai_error *e, size_t index);

/* One input's answer. */
struct openai_embedding {
        const float *vector;
        uint32_t n;
        uint32_t n_prompt; /* its prompt's tokens, for usage */
};

/* {"id", "object": "list", "created", "model", "data": [{"index", "object": "embedding",
 * "embedding"}], "usage"}, malloc()ed; NULL when out of memory. */
char *openai_embeddings_body(const struct openai_embeddings_request *req, const char *id, const char *model,
                             int64_t created, const struct openai_embedding *embeddings);
