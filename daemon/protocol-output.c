/* SPDX-License-Identifier: MIT */
/* Daemon lines: request outputs, command results, errors and the hello, each built as a
 * json-c tree and written as one line.
 *
 * json-c's null is a NULL pointer, so a NULL from a constructor cannot tell "out of memory"
 * from "null". Hence the builders below: set() and push() take a value that must not be
 * NULL, set_null() and push_null() write null, and the first failure sticks in *r (later
 * calls do nothing but drop their value), so that a tree is built in straight lines and
 * checked once. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol.h"
#include "unicode.h"

#define LINE_FLAGS (JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE)

/* key: a string literal, which outlives the object; each key is set once. */
static void set_value(int *r, struct json_object *o, const char *key, struct json_object *v) {
        if (*r < 0 || json_object_object_add_ex(o, key, v, JSON_C_OBJECT_ADD_KEY_IS_NEW | JSON_C_OBJECT_KEY_IS_CONSTANT) < 0) {
                json_object_put(v);
                *r = -ENOMEM;
        }
}

static void set(int *r, struct json_object *o, const char *key, struct json_object *v) {
        if (!v)
                *r = -ENOMEM;
        set_value(r, o, key, v);
}

static void set_null(int *r, struct json_object *o, const char *key) {
        set_value(r, o, key, NULL);
}

static void push_value(int *r, struct json_object *a, struct json_object *v) {
        if (*r < 0 || json_object_array_add(a, v) < 0) {
                json_object_put(v);
                *r = -ENOMEM;
        }
}

static void push(int *r, struct json_object *a, struct json_object *v) {
        if (!v)
                *r = -ENOMEM;
        push_value(r, a, v);
}

static void push_null(int *r, struct json_object *a) {
        push_value(r, a, NULL);
}

/* An array with room for n entries to begin with (json-c grows it as needed). */
static struct json_object *new_array(size_t n) {
        return json_object_new_array_ext((int) (n < 1 ? 1 : n > 1024 ? 1024 : n));
}

/* s[0..len) as a JSON string; the bytes may hold NULs (escaped by json-c), and an
 * ill-formed UTF-8 part becomes U+FFFD, so that every line is valid UTF-8. NULL when out
 * of memory. */
struct json_object *protocol_json_text(const char *s, size_t len) {
        struct json_object *v;
        size_t i, n;

        if (!s)
                s = "";
        if (len > INT_MAX / 3)
                return NULL; /* json-c counts in int */
        for (i = 0; i < len; i += n)
                if (utf8_next((const uint8_t *) s + i, len - i, NULL, &n) != UTF8_VALID)
                        break;
        if (i == len)
                return json_object_new_string_len(s, (int) len);
        char *clean = malloc(3 * len + 1);
        if (!clean)
                return NULL;
        v = json_object_new_string_len(clean, (int) utf8_sanitize((const uint8_t *) s, len, clean));
        free(clean);
        return v;
}

static struct json_object *new_string(const char *s) {
        return protocol_json_text(s, s ? strlen(s) : 0);
}

/* A finite number in the fewest digits that read back to the same double (or float, for
 * values that are floats), always with a "." or an exponent so that it reads back as a
 * number with a fraction. Not finite: null. */
static void set_number_json(int *r, struct json_object **ret, double d, bool is_float) {
        char buf[40];

        *ret = NULL;
        if (*r < 0 || !isfinite(d))
                return;
        for (int digits = is_float ? 6 : 15; digits <= (is_float ? 9 : 17); digits++) {
                snprintf(buf, sizeof(buf), "%.*g", digits, d);
                double back = strtod(buf, NULL);
                if (is_float ? (float) back == (float) d : back == d)
                        break;
        }
        if (!strpbrk(buf, ".e"))
                strcat(buf, ".0");
        if (!(*ret = json_object_new_double_s(d, buf)))
                *r = -ENOMEM;
}

static void set_number(int *r, struct json_object *o, const char *key, double d, bool is_float) {
        struct json_object *v;
        set_number_json(r, &v, d, is_float);
        set_value(r, o, key, v);
}

/* Monotonic seconds as Unix seconds; 0 (never happened) is null. */
static void set_time(int *r, struct json_object *o, const char *key, double monotonic, double offset) {
        if (monotonic > 0)
                set_number(r, o, key, monotonic + offset, false);
        else
                set_null(r, o, key);
}

static struct json_object *new_entry(int *r, int32_t token, float logprob) {
        struct json_object *e = json_object_new_object();
        if (!e) {
                *r = -ENOMEM;
                return NULL;
        }
        set(r, e, "token_id", json_object_new_int(token));
        set_number(r, e, "logprob", logprob, true);
        return e;
}

/* [{"token_id", "logprob", "rank"} of the chosen token, then {"token_id", "logprob"} of the
 * top n_top (all the sampler gave when negative)]. */
static struct json_object *new_sample(int *r, const struct sample_result *s, int32_t n_top) {
        struct json_object *a = new_array(s->n_top + 1);
        size_t n = s->n_top;

        if (!a) {
                *r = -ENOMEM;
                return NULL;
        }
        struct json_object *chosen = new_entry(r, s->token, s->logprob);
        if (chosen)
                set(r, chosen, "rank", json_object_new_int(s->rank));
        push(r, a, chosen);
        /* the sampler appends the chosen token when it is not among the top n_top: it is
         * first already */
        if (n_top >= 0 && (size_t) n_top < n)
                n = (size_t) n_top;
        for (size_t i = 0; i < n && *r >= 0; i++)
                push(r, a, new_entry(r, s->top[i].token, s->top[i].logprob));
        return a;
}

static struct json_object *new_completion(int *r, const struct completion_output *c,
                                          const struct output_line_options *opts) {
        struct json_object *o = json_object_new_object(), *ids = new_array(c->n_token_ids);

        if (!o || !ids) {
                json_object_put(o);
                json_object_put(ids);
                *r = -ENOMEM;
                return NULL;
        }
        set(r, o, "index", json_object_new_int64(c->index));
        set(r, o, "text", protocol_json_text(c->text, c->text_len));
        for (uint32_t i = 0; i < c->n_token_ids && *r >= 0; i++)
                push(r, ids, json_object_new_int(c->token_ids[i]));
        set(r, o, "token_ids", ids);
        set_number(r, o, "cumulative_logprob", c->cumulative_logprob, false);
        if (c->logprobs) {
                struct json_object *lp = new_array(c->n_token_ids);
                if (lp)
                        for (uint32_t i = 0; i < c->n_token_ids && *r >= 0; i++)
                                push(r, lp, new_sample(r, &c->logprobs[i], opts->logprobs));
                set(r, o, "logprobs", lp);
        } else
                set_null(r, o, "logprobs");
        if (finish_reason_name(c->finish_reason))
                set(r, o, "finish_reason", json_object_new_string(finish_reason_name(c->finish_reason)));
        else
                set_null(r, o, "finish_reason");
        if (c->stop_reason_text)
                set(r, o, "stop_reason", new_string(c->stop_reason_text));
        else if (c->stop_reason_token >= 0)
                set(r, o, "stop_reason", json_object_new_int(c->stop_reason_token));
        else
                set_null(r, o, "stop_reason");
        return o;
}

uint64_t protocol_output_tokens(const struct request_output *o) {
        uint64_t n = 0;
        for (uint32_t i = 0; i < o->n_outputs; i++)
                n += o->outputs[i].n_token_ids;
        return n;
}

/* vLLM's PoolingOutput: {"data": [the pooled vector]}, null while there is none (a failed
 * or aborted request), with the request's finish_reason beside it. */
/* The vector an array object writes when serialized; its own elements are never made. */
struct float_array {
        uint32_t n;
        float values[];
};

static int write_float_array(struct json_object *o, struct printbuf *pb, int level, int flags) {
        const struct float_array *a = json_object_get_userdata(o);
        char text[32];
        (void) level, (void) flags;
        printbuf_strappend(pb, "[");
        for (uint32_t i = 0; i < a->n; i++) {
                int len = isfinite(a->values[i]) ? snprintf(text, sizeof(text), "%s%.9g", i ? "," : "", a->values[i])
                                                 : snprintf(text, sizeof(text), "%snull", i ? "," : "");
                printbuf_memappend(pb, text, len);
        }
        printbuf_strappend(pb, "]");
        return 0;
}

static void free_float_array(struct json_object *o, void *userdata) {
        (void) o;
        free(userdata);
}

struct json_object *protocol_json_float_array(const float *values, uint32_t n) {
        struct json_object *o = json_object_new_array();
        struct float_array *a = o ? malloc(sizeof(*a) + (size_t) n * sizeof(float)) : NULL;
        if (!a) {
                json_object_put(o);
                return NULL;
        }
        a->n = n;
        memcpy(a->values, values, (size_t) n * sizeof(float));
        json_object_set_serializer(o, write_float_array, a, free_float_array);
        return o;
}

static struct json_object *new_pooling_output(int *r, const struct request_output *o) {
        struct json_object *p = json_object_new_object();
        struct json_object *data = o->embedding ? protocol_json_float_array(o->embedding, o->n_embedding) : NULL;
        enum finish_reason reason = o->n_outputs ? o->outputs[0].finish_reason : FINISH_NONE;
        if (o->embedding && !data)
                *r = -ENOMEM;
        if (!p) {
                json_object_put(data);
                return NULL;
        }
        if (o->embedding)
                set(r, p, "data", data);
        else
                set_null(r, p, "data");
        if (finish_reason_name(reason))
                set(r, p, "finish_reason", json_object_new_string(finish_reason_name(reason)));
        else
                set_null(r, p, "finish_reason");
        return p;
}

struct json_object *protocol_output_json(const char *id, const struct request_output *o,
                                         const struct output_line_options *opts) {
        struct json_object *obj = json_object_new_object(), *outputs = new_array(o->n_outputs);
        int r = 0;

        if (!obj || !outputs) {
                json_object_put(obj);
                json_object_put(outputs);
                return NULL;
        }
        set(&r, obj, "id", new_string(id));
        if (opts->encode) {
                json_object_put(outputs);
                set(&r, obj, "outputs", new_pooling_output(&r, o));
        } else {
                for (uint32_t i = 0; i < o->n_outputs && r >= 0; i++)
                        push(&r, outputs, new_completion(&r, &o->outputs[i], opts));
                set(&r, obj, "outputs", outputs);
        }
        set(&r, obj, "finished", json_object_new_boolean(o->finished));
        set(&r, obj, "num_cached_tokens", json_object_new_int64(o->num_cached_tokens));

        if (o->prompt_logprobs) {
                struct json_object *pl = new_array(o->n_prompt);
                for (uint32_t i = 0; pl && i < o->n_prompt && r >= 0; i++) {
                        if (i == 0 || o->prompt_logprobs[i].token < 0)
                                push_null(&r, pl); /* the first token has nothing before it */
                        else
                                push(&r, pl, new_sample(&r, &o->prompt_logprobs[i], opts->prompt_logprobs));
                }
                set(&r, obj, "prompt_logprobs", pl);
        }

        if (o->finished) {
                const struct request_metrics *t = &o->metrics;
                struct json_object *m = json_object_new_object(), *u = json_object_new_object();
                if (m) {
                        set_time(&r, m, "arrival_time", t->arrival_time, opts->realtime_offset);
                        set_time(&r, m, "first_scheduled_time", t->scheduled_time, opts->realtime_offset);
                        set_time(&r, m, "first_token_time", t->first_token_time, opts->realtime_offset);
                        set_time(&r, m, "last_token_time", t->last_token_time, opts->realtime_offset);
                        set_time(&r, m, "finished_time", t->finished_time, opts->realtime_offset);
                }
                set(&r, obj, "metrics", m);
                if (u) {
                        set(&r, u, "prompt_tokens", json_object_new_int64(opts->prompt_tokens));
                        set(&r, u, "completion_tokens",
                            json_object_new_int64(opts->completion_tokens > INT64_MAX ? INT64_MAX :
                                                  (int64_t) opts->completion_tokens));
                }
                set(&r, obj, "usage", u);
        }

        if (r < 0) {
                json_object_put(obj);
                return NULL;
        }
        return obj;
}

int protocol_json_line(struct json_object *obj, char **ret, size_t *ret_len) {
        size_t len;
        const char *s = json_object_to_json_string_length(obj, LINE_FLAGS, &len);
        char *line;

        if (!s || !(line = malloc(len + 2)))
                return -ENOMEM;
        memcpy(line, s, len);
        line[len] = '\n';
        line[len + 1] = 0;
        *ret = line;
        if (ret_len)
                *ret_len = len + 1;
        return 0;
}

/* Writes obj as a line when r says it was built, and drops it. */
static int finish_line(struct json_object *obj, int r, char **ret, size_t *ret_len) {
        if (!obj)
                r = -ENOMEM;
        if (r >= 0)
                r = protocol_json_line(obj, ret, ret_len);
        json_object_put(obj);
        return r;
}

int protocol_output_line(const char *id, const struct request_output *o, const struct output_line_options *opts,
                         char **ret, size_t *ret_len) {
        return finish_line(protocol_output_json(id, o, opts), 0, ret, ret_len);
}

int protocol_result_line(const char *id, struct json_object *result, char **ret, size_t *ret_len) {
        struct json_object *obj = json_object_new_object();
        int r = 0;

        if (obj) {
                set(&r, obj, "id", new_string(id));
                set_value(&r, obj, "result", json_object_get(result));
        }
        return finish_line(obj, r, ret, ret_len);
}

/* retry_after < 0: the error carries none. */
static int error_line(const char *id, const char *code, const char *message, double retry_after, char **ret,
                      size_t *ret_len) {
        struct json_object *obj = json_object_new_object(), *e = json_object_new_object();
        int r = 0;

        if (obj) {
                if (id)
                        set(&r, obj, "id", new_string(id));
                else
                        set_null(&r, obj, "id");
                if (e) {
                        set(&r, e, "code", new_string(code ? code : PROTOCOL_INTERNAL_ERROR));
                        set(&r, e, "message", new_string(message));
                        if (retry_after >= 0)
                                set_number(&r, e, "retry_after", retry_after, false);
                }
                set(&r, obj, "error", e);
        } else
                json_object_put(e);
        return finish_line(obj, r, ret, ret_len);
}

int protocol_error_line(const char *id, const char *code, const char *message, char **ret, size_t *ret_len) {
        return error_line(id, code, message, -1, ret, ret_len);
}

int protocol_overloaded_line(const char *id, const char *message, double retry_after, char **ret, size_t *ret_len) {
        /* a hint the engine could not work out is no reason to withhold the code */
        return error_line(id, PROTOCOL_OVERLOADED, message, retry_after >= 0 ? retry_after : 0, ret, ret_len);
}

int protocol_parse_error_line(const struct protocol_error *e, char **ret, size_t *ret_len) {
        return protocol_error_line(e->has_id ? e->id : NULL, e->code, e->message, ret, ret_len);
}

int protocol_hello_line(const char *version, const char *model, char **ret, size_t *ret_len) {
        struct json_object *obj = json_object_new_object(), *h = json_object_new_object();
        int r = 0;

        if (obj) {
                if (h) {
                        set(&r, h, "protocol", json_object_new_int(PROTOCOL_VERSION));
                        set(&r, h, "server", json_object_new_string(PROTOCOL_SERVER_NAME));
                        set(&r, h, "version", new_string(version));
                        if (model)
                                set(&r, h, "model", new_string(model));
                        else
                                set_null(&r, h, "model");
                }
                set(&r, obj, "hello", h);
        } else
                json_object_put(h);
        return finish_line(obj, r, ret, ret_len);
}
