/* SPDX-License-Identifier: MIT */
/* The output view handed to generate callbacks: the fields every caller wants, read once
 * from the message; everything else through the raw line. Fields of the wrong type read as
 * absent, so that a newer daemon's additions never break an older client. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client-internal.h"

static int64_t member_int(struct json_object *o, const char *key) {
        struct json_object *v = client_json_member(o, key, json_type_int);
        return v ? json_object_get_int64(v) : -1;
}

static int completion_parse(struct completion_view *c, struct json_object *o) {
        struct json_object *v;

        *c = (struct completion_view) { .text = "", .stop_token_id = -1 };
        int64_t index = member_int(o, "index");
        c->index = index >= 0 && index <= UINT32_MAX ? (uint32_t) index : 0;
        if ((v = client_json_member(o, "text", json_type_string))) {
                c->text = json_object_get_string(v);
                c->text_len = (size_t) json_object_get_string_len(v);
        }
        if ((v = client_json_member(o, "token_ids", json_type_array))) {
                size_t n = json_object_array_length(v);
                if (n > 0) {
                        c->token_ids = malloc(n * sizeof(*c->token_ids));
                        if (!c->token_ids)
                                return -ENOMEM;
                        for (size_t i = 0; i < n; i++) {
                                struct json_object *t = json_object_array_get_idx(v, i);
                                int64_t id = json_object_is_type(t, json_type_int) ? json_object_get_int64(t) : -1;
                                c->token_ids[i] = id >= INT32_MIN && id <= INT32_MAX ? (int32_t) id : -1;
                        }
                        c->n_token_ids = n;
                }
        }
        /* "" is no reason: read as absent, as asyncllm_output_finish_reason() promises */
        if ((v = client_json_member(o, "finish_reason", json_type_string)) && json_object_get_string_len(v) > 0)
                c->finish_reason = json_object_get_string(v);
        if ((v = client_json_member(o, "stop_reason", json_type_string)))
                c->stop_reason = json_object_get_string(v);
        else if ((v = client_json_member(o, "stop_reason", json_type_int)))
                c->stop_token_id = json_object_get_int64(v);
        return 0;
}

/* An encode request's outputs: {"data": [numbers]}, or null data for a failed one. */
static int embedding_parse(struct asyncllm_output *o, struct json_object *pooling) {
        struct json_object *data = client_json_member(pooling, "data", json_type_array);
        size_t n = data ? json_object_array_length(data) : 0;
        if (n == 0)
                return 0;
        if (!(o->embedding = malloc(n * sizeof(*o->embedding))))
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                struct json_object *x = json_object_array_get_idx(data, i);
                if (!json_object_is_type(x, json_type_double) && !json_object_is_type(x, json_type_int)) {
                        free(o->embedding);
                        o->embedding = NULL;
                        return -EPROTO;
                }
                o->embedding[i] = (float) json_object_get_double(x);
        }
        o->n_embedding = n;
        return 0;
}

int output_view_parse(struct asyncllm_output *o, const char *id, struct json_object *msg, const char *line) {
        struct json_object *outputs = client_json_member(msg, "outputs", json_type_array), *v;
        struct json_object *pooling = outputs ? NULL : client_json_member(msg, "outputs", json_type_object);

        *o = (struct asyncllm_output) {
                .id = id, .json = line, .retry_after = -1, .prompt_tokens = -1, .completion_tokens = -1,
        };
        if (!outputs && !pooling)
                return -EPROTO;
        int q = pooling ? embedding_parse(o, pooling) : 0;
        if (q < 0)
                return q;
        if (pooling && (v = client_json_member(pooling, "finish_reason", json_type_string)) &&
            strcmp(json_object_get_string(v), "error") == 0)
                o->any_error_finish = true; /* the daemon's error follows */
        size_t n = outputs ? json_object_array_length(outputs) : 0;
        if (n > 0) {
                o->completions = calloc(n, sizeof(*o->completions));
                if (!o->completions)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                struct json_object *c = json_object_array_get_idx(outputs, i);
                if (!json_object_is_type(c, json_type_object)) {
                        output_view_done(o);
                        return -EPROTO;
                }
                o->n_completions = i + 1;
                q = completion_parse(&o->completions[i], c);
                if (q < 0) {
                        output_view_done(o);
                        return q;
                }
                const char *f = o->completions[i].finish_reason;
                if (f && strcmp(f, "error") == 0)
                        o->any_error_finish = true;
        }
        if ((v = client_json_member(msg, "finished", json_type_boolean)))
                o->finished = json_object_get_boolean(v);
        if ((v = client_json_member(msg, "usage", json_type_object))) {
                o->prompt_tokens = member_int(v, "prompt_tokens");
                o->completion_tokens = member_int(v, "completion_tokens");
        }
        o->done = o->finished && !o->any_error_finish;
        return 0;
}

void output_view_failure(struct asyncllm_output *o, const char *id, int error, const char *code, const char *message,
                         const char *line) {
        *o = (struct asyncllm_output) {
                .id = id,
                .done = true,
                .error = error,
                .error_code = code,
                .error_message = message ? message : "",
                .retry_after = -1,
                .json = line,
                .prompt_tokens = -1,
                .completion_tokens = -1,
        };
}

void output_view_done(struct asyncllm_output *o) {
        free(o->embedding);
        o->embedding = NULL;
        o->n_embedding = 0;
        for (size_t i = 0; i < o->n_completions; i++)
                free(o->completions[i].token_ids);
        free(o->completions);
        o->completions = NULL;
        o->n_completions = 0;
}

const char *asyncllm_output_id(const asyncllm_output *o) {
        return o->id;
}

bool asyncllm_output_done(const asyncllm_output *o) {
        return o->done;
}

bool asyncllm_output_finished(const asyncllm_output *o) {
        return o->finished;
}

int asyncllm_output_error(const asyncllm_output *o) {
        return o->error;
}

const char *asyncllm_output_error_code(const asyncllm_output *o) {
        return o->error_code;
}

const char *asyncllm_output_error_message(const asyncllm_output *o) {
        return o->error ? o->error_message : NULL;
}

double asyncllm_output_retry_after(const asyncllm_output *o) {
        return o->retry_after;
}

size_t asyncllm_output_n_completions(const asyncllm_output *o) {
        return o->n_completions;
}

static const struct completion_view *completion(const asyncllm_output *o, size_t i) {
        return i < o->n_completions ? &o->completions[i] : NULL;
}

uint32_t asyncllm_output_index(const asyncllm_output *o, size_t i) {
        const struct completion_view *c = completion(o, i);
        return c ? c->index : 0;
}

const char *asyncllm_output_text(const asyncllm_output *o, size_t i, size_t *ret_len) {
        const struct completion_view *c = completion(o, i);
        if (ret_len)
                *ret_len = c ? c->text_len : 0;
        return c ? c->text : "";
}

const int32_t *asyncllm_output_token_ids(const asyncllm_output *o, size_t i, size_t *ret_n) {
        const struct completion_view *c = completion(o, i);
        if (ret_n)
                *ret_n = c ? c->n_token_ids : 0;
        return c ? c->token_ids : NULL;
}

const char *asyncllm_output_finish_reason(const asyncllm_output *o, size_t i) {
        const struct completion_view *c = completion(o, i);
        return c ? c->finish_reason : NULL;
}

const char *asyncllm_output_stop_reason(const asyncllm_output *o, size_t i) {
        const struct completion_view *c = completion(o, i);
        return c ? c->stop_reason : NULL;
}

int64_t asyncllm_output_stop_token_id(const asyncllm_output *o, size_t i) {
        const struct completion_view *c = completion(o, i);
        return c ? c->stop_token_id : -1;
}

const float *asyncllm_output_embedding(const asyncllm_output *o, size_t *ret_n) {
        if (ret_n)
                *ret_n = o->n_embedding;
        return o->embedding;
}

int64_t asyncllm_output_prompt_tokens(const asyncllm_output *o) {
        return o->prompt_tokens;
}

int64_t asyncllm_output_completion_tokens(const asyncllm_output *o) {
        return o->completion_tokens;
}

const char *asyncllm_output_json(const asyncllm_output *o) {
        return o->json;
}
