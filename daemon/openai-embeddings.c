/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "openai-embeddings.h"

/* Body fields each input's encode message takes under the same name. */
static const char *const shared_fields[] = {
        "dimensions", "normalize", "pooling_type", "truncate_prompt_tokens", "priority",
        "latency_sensitive", "is_latency_sensitive", "slo", "ttft_slo",
};

static bool is_token_list(struct json_object *v) {
        if (!json_object_is_type(v, json_type_array) || json_object_array_length(v) == 0)
                return false;
        for (size_t i = 0; i < json_object_array_length(v); i++)
                if (!json_object_is_type(json_object_array_get_idx(v, i), json_type_int))
                        return false;
        return true;
}

/* The body's inputs as a list of prompts: each a string or a list of token ids. */
static int input_prompts(struct json_object *input, struct json_object **ret, struct openai_error *e) {
        if (json_object_is_type(input, json_type_string) || is_token_list(input)) {
                *ret = json_object_new_array();
                if (!*ret)
                        return openai_error_set(e, 500, "internal_error", NULL, "out of memory");
                json_object_array_add(*ret, json_object_get(input));
                return 0;
        }
        if (!json_object_is_type(input, json_type_array) || json_object_array_length(input) == 0)
                return openai_error_set(e, 400, "invalid_request_error", "input",
                                        "input must be a string, a list of strings, a list of token ids or a list of "
                                        "such lists, and not empty");
        size_t n = json_object_array_length(input);
        if (n > OPENAI_EMBEDDING_INPUTS_MAX)
                return openai_error_set(e, 400, "invalid_request_error", "input",
                                        "input holds %zu prompts; the most one request takes is %d", n,
                                        OPENAI_EMBEDDING_INPUTS_MAX);
        for (size_t i = 0; i < n; i++) {
                struct json_object *p = json_object_array_get_idx(input, i);
                if (!json_object_is_type(p, json_type_string) && !is_token_list(p))
                        return openai_error_set(e, 400, "invalid_request_error", "input",
                                                "input[%zu] must be a string or a non-empty list of token ids", i);
        }
        *ret = json_object_get(input);
        return 0;
}

/* One input's encode message: its prompt and the shared fields, through the socket's parser.
 * A refusal names the input when the body has several. */
static int parse_one(struct json_object *root, struct json_object *prompt, struct json_object *messages, size_t index,
                     size_t n, struct client_message *ret, struct openai_error *e) {
        struct json_object *line = json_object_new_object(), *v;
        if (!line)
                return openai_error_set(e, 500, "internal_error", NULL, "out of memory");
        json_object_object_add(line, "op", json_object_new_string("encode"));
        json_object_object_add(line, "id", json_object_new_string("http"));
        int r = 0;
        if (messages)
                r = openai_copy_messages(messages, line, e);
        else
                json_object_object_add(line, json_object_is_type(prompt, json_type_string) ? "prompt" : "prompt_token_ids",
                                       json_object_get(prompt));
        for (size_t i = 0; r == 0 && i < sizeof(shared_fields) / sizeof(*shared_fields); i++)
                if (json_object_object_get_ex(root, shared_fields[i], &v) && !json_object_is_type(v, json_type_null))
                        json_object_object_add(line, shared_fields[i], json_object_get(v));
        if (r == 0) {
                const char *text = json_object_to_json_string_ext(line, JSON_C_TO_STRING_PLAIN);
                struct protocol_error pe = { 0 };
                if (!text)
                        r = openai_error_set(e, 500, "internal_error", NULL, "out of memory");
                else if (protocol_parse(text, strlen(text), ret, &pe) < 0) {
                        r = openai_refused(pe.message, e);
                        if (n > 1 && strncmp(pe.message, "prompt", 6) == 0)
                                openai_error_name_input(e, index);
                }
        }
        json_object_put(line);
        return r;
}

void openai_error_name_input(struct openai_error *e, size_t index) {
        char message[sizeof(e->message)];
        snprintf(message, sizeof(message), "input[%zu]: %.*s", index, (int) sizeof(message) - 32, e->message);
        snprintf(e->message, sizeof(e->message), "%s", message);
        snprintf(e->param, sizeof(e->param), "input");
}

int openai_embeddings_parse(const char *body, size_t len, struct openai_embeddings_request *ret,
                            struct openai_error *err) {
        struct json_object *root, *v, *input = NULL, *messages = NULL, *prompts = NULL;
        int r;
        *ret = (struct openai_embeddings_request) { 0 };
        if ((r = openai_body_object(body, len, &root, err)) < 0)
                return r;
        if (json_object_object_get_ex(root, "model", &v) && !json_object_is_type(v, json_type_null)) {
                if (!json_object_is_type(v, json_type_string))
                        r = openai_error_set(err, 400, "invalid_request_error", "model", "model must be a string");
                else if (!(ret->model = strdup(json_object_get_string(v))))
                        r = openai_error_set(err, 500, "internal_error", NULL, "out of memory");
        }
        if (r == 0 && json_object_object_get_ex(root, "encoding_format", &v) && !json_object_is_type(v, json_type_null)) {
                const char *f = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";
                if (strcmp(f, "base64") == 0)
                        ret->base64 = true;
                else if (strcmp(f, "float") != 0)
                        r = openai_error_set(err, 400, "invalid_request_error", "encoding_format",
                                             "encoding_format must be \"float\" or \"base64\"");
        }
        json_object_object_get_ex(root, "input", &input);
        json_object_object_get_ex(root, "messages", &messages);
        if (r == 0 && !input == !messages)
                r = openai_error_set(err, 400, "invalid_request_error", input ? "messages" : "input",
                                     input ? "give input or messages, not both" : "input is required");
        if (r == 0 && input)
                r = input_prompts(input, &prompts, err);
        size_t n = prompts ? json_object_array_length(prompts) : 1;
        if (r == 0 && !(ret->inputs = calloc(n, sizeof(*ret->inputs))))
                r = openai_error_set(err, 500, "internal_error", NULL, "out of memory");
        for (size_t i = 0; r == 0 && i < n; i++) {
                r = parse_one(root, prompts ? json_object_array_get_idx(prompts, i) : NULL, messages, i, n,
                              &ret->inputs[i], err);
                if (r == 0)
                        ret->n_inputs = i + 1;
        }
        json_object_put(prompts);
        json_object_put(root);
        if (r < 0)
                openai_embeddings_request_free(ret);
        return r;
}

void openai_embeddings_request_free(struct openai_embeddings_request *r) {
        for (size_t i = 0; i < r->n_inputs; i++)
                client_message_free(&r->inputs[i]);
        free(r->inputs);
        free(r->model);
        *r = (struct openai_embeddings_request) { 0 };
}

/* The vector's float32 bytes, little-endian as x86 keeps them, in base64 (RFC 4648). */
static struct json_object *base64_vector(const float *vector, uint32_t n) {
        static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        const unsigned char *bytes = (const unsigned char *) vector;
        size_t len = (size_t) n * sizeof(float), out_len = (len + 2) / 3 * 4;
        char *out = malloc(out_len + 1), *o = out;
        if (!out)
                return NULL;
        for (size_t i = 0; i < len; i += 3) {
                uint32_t chunk = (uint32_t) bytes[i] << 16 | (i + 1 < len ? (uint32_t) bytes[i + 1] << 8 : 0) |
                                 (i + 2 < len ? bytes[i + 2] : 0);
                *o++ = alphabet[chunk >> 18 & 63];
                *o++ = alphabet[chunk >> 12 & 63];
                *o++ = i + 1 < len ? alphabet[chunk >> 6 & 63] : '=';
                *o++ = i + 2 < len ? alphabet[chunk & 63] : '=';
        }
        *o = '\0';
        struct json_object *s = json_object_new_string_len(out, (int) out_len);
        free(out);
        return s;
}

char *openai_embeddings_body(const struct openai_embeddings_request *req, const char *id, const char *model,
                             int64_t created, const struct openai_embedding *embeddings) {
        struct json_object *o = json_object_new_object(), *data = json_object_new_array(), *usage = json_object_new_object();
        uint64_t n_prompt = 0;
        bool ok = o && data && usage;
        for (size_t i = 0; ok && i < req->n_inputs; i++) {
                const struct openai_embedding *e = &embeddings[i];
                struct json_object *item = json_object_new_object(), *vector =
                        req->base64 ? base64_vector(e->vector, e->n) : protocol_json_float_array(e->vector, e->n);
                ok = item && vector;
                if (ok) {
                        json_object_object_add(item, "index", json_object_new_int64((int64_t) i));
                        json_object_object_add(item, "object", json_object_new_string("embedding"));
                        json_object_object_add(item, "embedding", vector);
                        ok = json_object_array_add(data, item) == 0;
                } else {
                        json_object_put(item);
                        json_object_put(vector);
                }
                n_prompt += e->n_prompt;
        }
        char *body = NULL;
        if (ok) {
                json_object_object_add(o, "id", json_object_new_string(id));
                json_object_object_add(o, "object", json_object_new_string("list"));
                json_object_object_add(o, "created", json_object_new_int64(created));
                json_object_object_add(o, "model", json_object_new_string(model));
                json_object_object_add(o, "data", json_object_get(data));
                json_object_object_add(usage, "prompt_tokens", json_object_new_int64((int64_t) n_prompt));
                json_object_object_add(usage, "total_tokens", json_object_new_int64((int64_t) n_prompt));
                json_object_object_add(usage, "completion_tokens", json_object_new_int(0));
                json_object_object_add(usage, "prompt_tokens_details", NULL);
                json_object_object_add(o, "usage", json_object_get(usage));
                const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
                body = s ? strdup(s) : NULL;
        }
        json_object_put(usage);
        json_object_put(data);
        json_object_put(o);
        return body;
}
