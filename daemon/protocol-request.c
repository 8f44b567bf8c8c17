/* SPDX-License-Identifier: MIT */
/* Client lines into messages. The line is parsed by json-c in strict mode (no trailing
 * characters after the object) with its UTF-8 validated and its depth bounded; then the
 * tree is walked once for numbers JSON cannot hold, and each field of the op is typed in
 * the order it appears, so that the first bad field is the one reported. Strings are not
 * copied: they stay in the tree, which the message keeps. */
#include "config.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "name-table.h"
#include "protocol.h"
#include "unicode.h"

/* The most bytes of a client's string quoted in an error message. */
#define QUOTE_MAX 64
/* Room for any field path this file builds: literal names plus an array index. */
#define PATH_MAX_LEN (QUOTE_MAX + 64)

static const char *const op_names[_CLIENT_OP_MAX] = {
        [CLIENT_OP_GENERATE] = "generate",
        [CLIENT_OP_ENCODE] = "encode",
        [CLIENT_OP_ABORT] = "abort",
        [CLIENT_OP_PAUSE] = "pause",
        [CLIENT_OP_RESUME] = "resume",
        [CLIENT_OP_IS_PAUSED] = "is_paused",
        [CLIENT_OP_SLEEP] = "sleep",
        [CLIENT_OP_WAKE_UP] = "wake_up",
        [CLIENT_OP_IS_SLEEPING] = "is_sleeping",
        [CLIENT_OP_RESET_PREFIX_CACHE] = "reset_prefix_cache",
        [CLIENT_OP_COLLECTIVE_RPC] = "collective_rpc",
        [CLIENT_OP_HEALTH] = "health",
        [CLIENT_OP_STATS] = "stats",
        [CLIENT_OP_MODEL] = "model",
        [CLIENT_OP_LIST] = "list",
        [CLIENT_OP_METRICS] = "metrics",
        [CLIENT_OP_TOKENIZE] = "tokenize",
        [CLIENT_OP_DETOKENIZE] = "detokenize",
        [CLIENT_OP_GET_SUPPORTED_TASKS] = "get_supported_tasks",
        [CLIENT_OP_WAIT_FOR_REQUESTS_TO_DRAIN] = "wait_for_requests_to_drain",
        [CLIENT_OP_RESET_MM_CACHE] = "reset_mm_cache",
        [CLIENT_OP_RESET_ENCODER_CACHE] = "reset_encoder_cache",
        [CLIENT_OP_START_PROFILE] = "start_profile",
        [CLIENT_OP_STOP_PROFILE] = "stop_profile",
        [CLIENT_OP_HELLO] = "hello",
};

const char *client_op_name(enum client_op op) {
        return name_table_name(op_names, NAME_TABLE_SIZE(op_names), op);
}

int client_op_from_string(const char *s, enum client_op *ret) {
        int op = name_table_find(op_names, NAME_TABLE_SIZE(op_names), s);
        if (op < 0)
                return op;
        *ret = (enum client_op) op;
        return 0;
}

bool client_op_is_admin(enum client_op op) {
        switch (op) {
        case CLIENT_OP_PAUSE:
        case CLIENT_OP_RESUME:
        case CLIENT_OP_SLEEP:
        case CLIENT_OP_WAKE_UP:
        case CLIENT_OP_COLLECTIVE_RPC:
        case CLIENT_OP_RESET_PREFIX_CACHE:
        case CLIENT_OP_RESET_MM_CACHE:
        case CLIENT_OP_RESET_ENCODER_CACHE:
        case CLIENT_OP_START_PROFILE:
        case CLIENT_OP_STOP_PROFILE:
                return true;
        default:
                return false;
        }
}

/* Cuts s (NUL-terminated) back to the last whole UTF-8 character, so that a truncated
 * message stays valid UTF-8. */
static void cut_partial_character(char *s) {
        size_t len = strlen(s), start = len;
        if (len == 0)
                return;
        while (start > 0 && ((uint8_t) s[start - 1] & 0xC0) == 0x80 && len - start < 3)
                start--;
        if (start > 0)
                start--; /* the lead byte, or the last byte when it is ASCII */
        size_t n;
        if (utf8_next((const uint8_t *) s + start, len - start, NULL, &n) == UTF8_INCOMPLETE)
                s[start] = 0;
}

static int error_setv(struct protocol_error *e, const char *code, const char *fmt, va_list ap)
        __attribute__((format(printf, 3, 0)));
static int error_setv(struct protocol_error *e, const char *code, const char *fmt, va_list ap) {
        if (!e)
                return -EINVAL;
        int n = vsnprintf(e->message, sizeof(e->message), fmt, ap);
        if (n < 0)
                e->message[0] = 0;
        else if ((size_t) n >= sizeof(e->message))
                cut_partial_character(e->message);
        e->code = code;
        return -EINVAL;
}

int protocol_error_set(struct protocol_error *e, const char *code, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int r = error_setv(e, code, fmt, ap);
        va_end(ap);
        return r;
}

/* A client's string for an error message: at most QUOTE_MAX bytes, cut at a character
 * boundary (json-c hands out valid UTF-8 only), "..." when cut. */
static const char *quote(const char *s, char buf[static QUOTE_MAX + 4]) {
        size_t len = strlen(s);
        if (len <= QUOTE_MAX)
                return s;
        len = QUOTE_MAX;
        while (len > 0 && ((uint8_t) s[len] & 0xC0) == 0x80)
                len--;
        memcpy(buf, s, len);
        memcpy(buf + len, "...", 4);
        return buf;
}

/* Field paths ("params.stop[3]") are short names plus an index or a token id; one that
 * does not fit is cut at a character boundary. */
static const char *path_printf(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static const char *path_printf(char *buf, size_t size, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        int n = vsnprintf(buf, size, fmt, ap);
        va_end(ap);
        if (n < 0)
                buf[0] = 0;
        else if ((size_t) n >= size)
                cut_partial_character(buf);
        return buf;
}

static const char *type_label(struct json_object *v) {
        switch (json_object_get_type(v)) {
        case json_type_null: return "null";
        case json_type_boolean: return "boolean";
        case json_type_int: return "integer";
        case json_type_double: return "number";
        case json_type_string: return "string";
        case json_type_array: return "array";
        case json_type_object: return "object";
        }
        return "unknown";
}

struct parser {
        struct client_message *m;
        struct protocol_error *err;
        unsigned prompts; /* generate: bit (1 << enum prompt_kind) per prompt field given */
        bool has_latency_sensitive; /* generate: under either of its names */
        bool has_request; /* abort */
        bool has_method;  /* collective_rpc */
        struct json_object *args, *kwargs; /* collective_rpc, as given */
        bool has_tokens;  /* detokenize */
};

static int invalid_params(struct parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int invalid_params(struct parser *p, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        int r = error_setv(p->err, PROTOCOL_INVALID_PARAMS, fmt, ap);
        va_end(ap);
        return r;
}

static int out_of_memory(struct parser *p) {
        protocol_error_set(p->err, PROTOCOL_INTERNAL_ERROR, "out of memory");
        return -ENOMEM;
}

static int want(struct parser *p, const char *path, struct json_object *v, const char *what) {
        return invalid_params(p, "%s must be %s, got %s", path, what, type_label(v));
}

static int unknown_field(struct parser *p, const char *prefix, const char *key) {
        char q[QUOTE_MAX + 4];
        return invalid_params(p, "unknown field \"%s%s\"", prefix, quote(key, q));
}

static int get_bool(struct parser *p, const char *path, struct json_object *v, bool *ret) {
        if (!json_object_is_type(v, json_type_boolean))
                return want(p, path, v, "a boolean");
        *ret = json_object_get_boolean(v);
        return 0;
}

/* JSON integers are numbers too. Non-finite values never get here (check_numbers()). */
static int get_number(struct parser *p, const char *path, struct json_object *v, double *ret) {
        if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
                return want(p, path, v, "a number");
        *ret = json_object_get_double(v);
        return 0;
}

/* Literals beyond 64 bits never get here (check_integer_literals()); json-c keeps those
 * above INT64_MAX as unsigned, which get_int64 reads as INT64_MAX. */
static int get_integer(struct parser *p, const char *path, struct json_object *v, int64_t min, int64_t max,
                       int64_t *ret) {
        if (!json_object_is_type(v, json_type_int))
                return want(p, path, v, "an integer");
        int64_t x = json_object_get_int64(v);
        if (x < min || x > max) {
                char value[32];
                if (x == INT64_MAX)
                        path_printf(value, sizeof(value), "%" PRIu64, json_object_get_uint64(v));
                else
                        path_printf(value, sizeof(value), "%" PRId64, x);
                return invalid_params(p, "%s must be an integer in [%" PRId64 ", %" PRId64 "], got %s", path, min, max,
                                      value);
        }
        *ret = x;
        return 0;
}

static int get_int32(struct parser *p, const char *path, struct json_object *v, int32_t *ret) {
        int64_t x;
        int r = get_integer(p, path, v, INT32_MIN, INT32_MAX, &x);
        if (r == 0)
                *ret = (int32_t) x;
        return r;
}

/* A string the engine will read as a C string: no NUL inside. */
static int get_string(struct parser *p, const char *path, struct json_object *v, const char **ret) {
        if (!json_object_is_type(v, json_type_string))
                return want(p, path, v, "a string");
        const char *s = json_object_get_string(v);
        if (memchr(s, 0, (size_t) json_object_get_string_len(v)))
                return invalid_params(p, "%s must not contain NUL characters", path);
        *ret = s;
        return 0;
}

/* *ret is NULL for an empty array. */
static int get_int32_array(struct parser *p, const char *path, struct json_object *v, int32_t **ret, size_t *ret_n) {
        char elem[PATH_MAX_LEN];
        int r;

        if (!json_object_is_type(v, json_type_array))
                return want(p, path, v, "an array of integers");
        size_t n = json_object_array_length(v);
        int32_t *a = NULL;
        if (n > 0 && !(a = malloc(n * sizeof(*a))))
                return out_of_memory(p);
        for (size_t i = 0; i < n; i++) {
                path_printf(elem, sizeof(elem), "%s[%zu]", path, i);
                if ((r = get_int32(p, elem, json_object_array_get_idx(v, i), &a[i])) < 0) {
                        free(a);
                        return r;
                }
        }
        *ret = a;
        *ret_n = n;
        return 0;
}

/* A logit_bias key: a token id in decimal, as vLLM reads it with int(). */
static bool parse_token_id(const char *s, int32_t *ret) {
        bool negative = *s == '-';
        int64_t x = 0;

        if (negative)
                s++;
        if (!*s)
                return false;
        for (; *s; s++) {
                if (*s < '0' || *s > '9')
                        return false;
                x = x * 10 + (*s - '0');
                if (x > (int64_t) INT32_MAX + 1)
                        return false;
        }
        x = negative ? -x : x;
        if (x > INT32_MAX)
                return false;
        *ret = (int32_t) x;
        return true;
}

/* JSON has no NaN or Infinity, but json-c reads them, and reads numbers beyond the range of
 * a double as infinities: refuse both wherever they are. Finite numbers get json-c's copy
 * of their text dropped, so that one echoed back (collective_rpc args) is written in
 * standard form ("1." would be written as it came). key: the nearest field, for the
 * message. */
static int check_numbers(struct parser *p, struct json_object *v, const char *key) {
        char q[QUOTE_MAX + 4], q2[QUOTE_MAX + 4];
        int r;

        switch (json_object_get_type(v)) {
        case json_type_double: {
                double d = json_object_get_double(v);
                if (isfinite(d)) {
                        json_object_set_double(v, d);
                        return 0;
                }
                const char *text = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
                if (text && (text[0] == '-' ? text[1] : text[0]) >= '0' && (text[0] == '-' ? text[1] : text[0]) <= '9')
                        return invalid_params(p, "%s: %s is beyond the range of a double",
                                              key ? quote(key, q) : "number", quote(text, q2));
                return protocol_error_set(p->err, PROTOCOL_INVALID_JSON, "%s: NaN and Infinity are not JSON numbers",
                                          key ? quote(key, q) : "number");
        }
        case json_type_array:
                for (size_t i = 0, n = json_object_array_length(v); i < n; i++)
                        if ((r = check_numbers(p, json_object_array_get_idx(v, i), key)) < 0)
                                return r;
                return 0;
        case json_type_object: {
                json_object_object_foreach(v, k, child)
                        if ((r = check_numbers(p, child, k)) < 0)
                                return r;
                return 0;
        }
        default:
                return 0;
        }
}

/* generate */

enum param_type {
        PARAM_NUMBER,
        PARAM_INT32,
        PARAM_UINT32,
        PARAM_INT32_OR_NULL, /* null stores null_value */
        PARAM_BOOL,
        PARAM_SEED,
        PARAM_STOP,
        PARAM_STOP_TOKEN_IDS,
        PARAM_LOGIT_BIAS,
        PARAM_ALLOWED_TOKEN_IDS,
        PARAM_OUTPUT_KIND,
        PARAM_BAD_WORDS,
        PARAM_TRUNCATE_PROMPT_TOKENS,
        PARAM_BEST_OF,
        PARAM_WITHOUT_EFFECT, /* a number vLLM takes that does nothing without beam search */
};

struct param_field {
        const char *name; /* the wire name, which is the struct sampling_params field's */
        enum param_type type;
        size_t offset;
        int32_t null_value;
};

#define PARAM(field, type) { #field, type, offsetof(struct sampling_params, field), 0 }
#define PARAM_OR_NULL(field, none) { #field, PARAM_INT32_OR_NULL, offsetof(struct sampling_params, field), none }

static const struct param_field param_fields[] = {
        PARAM(n, PARAM_UINT32),
        PARAM(temperature, PARAM_NUMBER),
        PARAM(top_p, PARAM_NUMBER),
        PARAM(top_k, PARAM_INT32),
        PARAM(min_p, PARAM_NUMBER),
        PARAM(presence_penalty, PARAM_NUMBER),
        PARAM(frequency_penalty, PARAM_NUMBER),
        PARAM(repetition_penalty, PARAM_NUMBER),
        PARAM(seed, PARAM_SEED),
        PARAM(stop, PARAM_STOP),
        PARAM(stop_token_ids, PARAM_STOP_TOKEN_IDS),
        PARAM(include_stop_str_in_output, PARAM_BOOL),
        PARAM(ignore_eos, PARAM_BOOL),
        PARAM_OR_NULL(max_tokens, SAMPLING_MAX_TOKENS_NONE),
        PARAM(min_tokens, PARAM_INT32),
        PARAM_OR_NULL(logprobs, SAMPLING_LOGPROBS_NONE),
        PARAM_OR_NULL(prompt_logprobs, SAMPLING_LOGPROBS_NONE),
        PARAM(logit_bias, PARAM_LOGIT_BIAS),
        PARAM(allowed_token_ids, PARAM_ALLOWED_TOKEN_IDS),
        PARAM(skip_special_tokens, PARAM_BOOL),
        PARAM(output_kind, PARAM_OUTPUT_KIND),
        PARAM(bad_words, PARAM_BAD_WORDS),
        PARAM(truncate_prompt_tokens, PARAM_TRUNCATE_PROMPT_TOKENS),
        PARAM(best_of, PARAM_BEST_OF),
        { "length_penalty", PARAM_WITHOUT_EFFECT, 0, 0 },
};

/* An array of strings into a new array of pointers into the JSON (*ret NULL when empty). */
static int get_string_array(struct parser *p, const char *path, struct json_object *v, const char ***ret,
                            size_t *ret_n) {
        char elem[PATH_MAX_LEN];
        int r;

        if (!json_object_is_type(v, json_type_array))
                return want(p, path, v, "an array of strings");
        size_t n = json_object_array_length(v);
        if (n > 0 && !(*ret = malloc(n * sizeof(**ret))))
                return out_of_memory(p);
        for (size_t i = 0; i < n; i++) {
                path_printf(elem, sizeof(elem), "%s[%zu]", path, i);
                if ((r = get_string(p, elem, json_object_array_get_idx(v, i), &(*ret)[i])) < 0)
                        return r;
        }
        *ret_n = n;
        return 0;
}

static int parse_stop(struct parser *p, const char *path, struct json_object *v) {
        struct generate_message *g = &p->m->generate;
        int r;

        if (!v)
                return 0; /* null: none, vLLM's default */
        if (json_object_is_type(v, json_type_string)) {
                if (!(g->stop_storage = malloc(sizeof(*g->stop_storage))))
                        return out_of_memory(p);
                if ((r = get_string(p, path, v, &g->stop_storage[0])) < 0)
                        return r;
                g->params.stop = g->stop_storage;
                g->params.n_stop = 1;
                return 0;
        }
        if (!json_object_is_type(v, json_type_array))
                return want(p, path, v, "a string or an array of strings");
        if ((r = get_string_array(p, path, v, &g->stop_storage, &g->params.n_stop)) < 0)
                return r;
        g->params.stop = g->stop_storage;
        return 0;
}

static int parse_logit_bias(struct parser *p, const char *path, struct json_object *v) {
        struct generate_message *g = &p->m->generate;
        char q[QUOTE_MAX + 4], elem[PATH_MAX_LEN + QUOTE_MAX];
        size_t i = 0;
        int r;

        if (!v)
                return 0;
        if (!json_object_is_type(v, json_type_object))
                return want(p, path, v, "an object of token ids (decimal strings) to numbers");
        size_t n = (size_t) json_object_object_length(v);
        if (n > 0 && !(g->logit_bias_storage = malloc(n * sizeof(*g->logit_bias_storage))))
                return out_of_memory(p);
        json_object_object_foreach(v, key, bias) {
                struct logit_bias *b = &g->logit_bias_storage[i];
                double x;

                if (!parse_token_id(key, &b->token))
                        return invalid_params(p, "%s: key \"%s\" is not a token id (a decimal integer)", path,
                                              quote(key, q));
                path_printf(elem, sizeof(elem), "%s[\"%s\"]", path, key);
                if ((r = get_number(p, elem, bias, &x)) < 0)
                        return r;
                /* the engine clamps to [-100, 100]: beyond float's range is as good as FLT_MAX
                 * (and a conversion out of range would be undefined) */
                b->bias = (float) (x > FLT_MAX ? FLT_MAX : x < -FLT_MAX ? -FLT_MAX : x);
                i++;
        }
        g->params.logit_bias = g->logit_bias_storage;
        g->params.n_logit_bias = n;
        return 0;
}

static int parse_param(struct parser *p, const struct param_field *f, struct json_object *v) {
        struct generate_message *g = &p->m->generate;
        struct sampling_params *sp = &g->params;
        void *at = (char *) sp + f->offset;
        char path[PATH_MAX_LEN], q[QUOTE_MAX + 4];
        size_t n;
        int64_t x;
        int r;

        /* encode takes its one sampling field beside the prompt, not in params */
        if (p->m->op == CLIENT_OP_ENCODE)
                path_printf(path, sizeof(path), "%s", f->name);
        else
                path_printf(path, sizeof(path), "params.%s", f->name);
        switch (f->type) {
        case PARAM_NUMBER:
                return get_number(p, path, v, at);
        case PARAM_WITHOUT_EFFECT: {
                double ignored;
                return get_number(p, path, v, &ignored);
        }
        case PARAM_INT32:
                return get_int32(p, path, v, at);
        case PARAM_UINT32:
                if ((r = get_integer(p, path, v, 0, UINT32_MAX, &x)) < 0)
                        return r;
                *(uint32_t *) at = (uint32_t) x;
                return 0;
        case PARAM_INT32_OR_NULL:
                if (!v) {
                        *(int32_t *) at = f->null_value;
                        return 0;
                }
                if (!json_object_is_type(v, json_type_int))
                        return want(p, path, v, "null or an integer");
                return get_int32(p, path, v, at);
        case PARAM_BOOL:
                return get_bool(p, path, v, at);
        case PARAM_SEED:
                if (!v) {
                        sp->has_seed = false;
                        return 0;
                }
                if (!json_object_is_type(v, json_type_int))
                        return want(p, path, v, "null or an integer >= 0");
                if (json_object_get_int64(v) < 0)
                        return invalid_params(p, "%s must be null or an integer in [0, %" PRIu64 "], got %" PRId64,
                                              path, UINT64_MAX, json_object_get_int64(v));
                sp->has_seed = true;
                sp->seed = json_object_get_uint64(v);
                return 0;
        case PARAM_STOP:
                return parse_stop(p, path, v);
        case PARAM_STOP_TOKEN_IDS:
                if (!v)
                        return 0;
                if ((r = get_int32_array(p, path, v, &g->stop_token_ids_storage, &n)) < 0)
                        return r;
                sp->stop_token_ids = g->stop_token_ids_storage;
                sp->n_stop_token_ids = n;
                return 0;
        case PARAM_LOGIT_BIAS:
                return parse_logit_bias(p, path, v);
        case PARAM_ALLOWED_TOKEN_IDS:
                if (!v)
                        return 0;
                if ((r = get_int32_array(p, path, v, &g->allowed_token_ids_storage, &n)) < 0)
                        return r;
                sp->has_allowed_token_ids = true; /* even empty: validation says it must not be */
                sp->allowed_token_ids = g->allowed_token_ids_storage;
                sp->n_allowed_token_ids = n;
                return 0;
        case PARAM_BAD_WORDS:
                if (!v)
                        return 0;
                if ((r = get_string_array(p, path, v, &g->bad_words_storage, &sp->n_bad_words)) < 0)
                        return r;
                sp->bad_words = g->bad_words_storage;
                return 0;
        case PARAM_TRUNCATE_PROMPT_TOKENS:
                /* 0 is the engine's "none", so the wire's 0 is refused here, as vLLM refuses it */
                if (!v) {
                        sp->truncate_prompt_tokens = SAMPLING_TRUNCATE_NONE;
                        return 0;
                }
                if ((r = get_integer(p, path, v, INT32_MIN, INT32_MAX, &x)) < 0)
                        return r;
                if (x == 0 || x < SAMPLING_TRUNCATE_TO_CONTEXT)
                        return invalid_params(p, "%s must be null, -1 (the longest prompt the context allows) or "
                                              "an integer >= 1, got %" PRId64, path, x);
                sp->truncate_prompt_tokens = (int32_t) x;
                return 0;
        case PARAM_BEST_OF:
                if (!v) {
                        sp->best_of = 0;
                        return 0;
                }
                if ((r = get_integer(p, path, v, INT32_MIN, INT32_MAX, &x)) < 0)
                        return r;
                if (x < 1)
                        return invalid_params(p, "%s must be null or greater than or equal to n, got %" PRId64,
                                              path, x);
                sp->best_of = (uint32_t) x;
                return 0;
        case PARAM_OUTPUT_KIND: {
                const char *s;
                if ((r = get_string(p, path, v, &s)) < 0)
                        return r;
                if (output_kind_from_string(s, &sp->output_kind) < 0)
                        return invalid_params(p, "%s must be \"cumulative\", \"delta\" or \"final\", got \"%s\"", path,
                                              quote(s, q));
                return 0;
        }
        }
        return 0;
}

static int parse_params(struct parser *p, struct json_object *v) {
        int r;

        if (!v)
                return 0; /* null: the defaults */
        if (!json_object_is_type(v, json_type_object))
                return want(p, "params", v, "an object");
        json_object_object_foreach(v, key, value) {
                const struct param_field *f = NULL;
                for (size_t i = 0; i < sizeof(param_fields) / sizeof(*param_fields) && !f; i++)
                        if (strcmp(key, param_fields[i].name) == 0)
                                f = &param_fields[i];
                if (!f)
                        return unknown_field(p, "params.", key);
                if ((r = parse_param(p, f, value)) < 0)
                        return r;
        }
        return 0;
}

static int parse_messages(struct parser *p, struct json_object *v) {
        struct generate_message *g = &p->m->generate;
        char path[PATH_MAX_LEN], field[PATH_MAX_LEN];
        int r;

        if (!json_object_is_type(v, json_type_array))
                return want(p, "messages", v, "an array of {\"role\", \"content\"} objects");
        size_t n = json_object_array_length(v);
        if (n > 0 && !(g->messages = calloc(n, sizeof(*g->messages))))
                return out_of_memory(p);
        for (size_t i = 0; i < n; i++) {
                struct json_object *item = json_object_array_get_idx(v, i);
                struct chat_message *cm = &g->messages[i];

                path_printf(path, sizeof(path), "messages[%zu]", i);
                if (!json_object_is_type(item, json_type_object))
                        return want(p, path, item, "an object with \"role\" and \"content\"");
                json_object_object_foreach(item, key, value) {
                        const char **at = strcmp(key, "role") == 0 ? &cm->role :
                                          strcmp(key, "content") == 0 ? &cm->content : NULL;
                        path_printf(field, sizeof(field), "%s.", path);
                        if (!at)
                                return unknown_field(p, field, key);
                        path_printf(field, sizeof(field), "%s.%s", path, key);
                        if ((r = get_string(p, field, value, at)) < 0)
                                return r;
                }
                if (!cm->role || !cm->content)
                        return invalid_params(p, "%s.%s is missing", path, cm->role ? "content" : "role");
        }
        g->n_messages = n;
        return 0;
}

/* latency_sensitive, or its alias is_latency_sensitive: a boolean, or one as the string
 * that clients built on Python's str(bool) send. */
static int parse_latency_sensitive(struct parser *p, const char *key, struct json_object *v) {
        static const char *const allowed = "true or false (the strings \"true\", \"True\", \"false\" and \"False\" "
                                           "are accepted too)";
        struct generate_message *g = &p->m->generate;
        char q[QUOTE_MAX + 4];

        if (p->has_latency_sensitive)
                return invalid_params(p, "latency_sensitive and is_latency_sensitive are the same field: give only one");
        p->has_latency_sensitive = true;
        if (json_object_is_type(v, json_type_boolean)) {
                g->class.latency_sensitive = json_object_get_boolean(v);
                return 0;
        }
        if (!json_object_is_type(v, json_type_string))
                return want(p, key, v, allowed);
        const char *s = json_object_get_string(v);
        if (strcmp(s, "true") == 0 || strcmp(s, "True") == 0)
                g->class.latency_sensitive = true;
        else if (strcmp(s, "false") == 0 || strcmp(s, "False") == 0)
                g->class.latency_sensitive = false;
        else
                return invalid_params(p, "%s must be %s, got \"%s\"", key, allowed, quote(s, q));
        return 0;
}

/* slo and ttft_slo: seconds; null is the engine's default. The engine checks the range
 * too, but its message would not name the client's field. */
static int parse_slo(struct parser *p, const char *key, const char *per, struct json_object *v, double *ret) {
        char what[96];
        double x;

        if (!v) {
                *ret = 0;
                return 0;
        }
        path_printf(what, sizeof(what), "a number of seconds%s", per);
        if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
                return want(p, key, v, what);
        x = json_object_get_double(v);
        if (!(x > 0 && x <= PROTOCOL_SLO_MAX))
                return invalid_params(p, "%s must be %s, more than 0 and at most %d, got %g", key, what,
                                      PROTOCOL_SLO_MAX, x);
        *ret = x;
        return 0;
}

static int generate_field(struct parser *p, const char *key, struct json_object *v) {
        struct generate_message *g = &p->m->generate;
        size_t n;
        int r;

        if (strcmp(key, "prompt") == 0) {
                p->prompts |= 1u << PROMPT_TEXT;
                return get_string(p, key, v, &g->prompt);
        }
        if (strcmp(key, "prompt_token_ids") == 0) {
                p->prompts |= 1u << PROMPT_TOKEN_IDS;
                if ((r = get_int32_array(p, key, v, &g->prompt_token_ids, &n)) < 0)
                        return r;
                if (n > UINT32_MAX)
                        return invalid_params(p, "prompt_token_ids has too many entries");
                g->n_prompt_token_ids = (uint32_t) n;
                return 0;
        }
        if (strcmp(key, "messages") == 0) {
                p->prompts |= 1u << PROMPT_MESSAGES;
                return parse_messages(p, v);
        }
        if (strcmp(key, "params") == 0)
                return parse_params(p, v);
        if (strcmp(key, "priority") == 0)
                return get_int32(p, key, v, &g->class.priority);
        if (strcmp(key, "latency_sensitive") == 0 || strcmp(key, "is_latency_sensitive") == 0)
                return parse_latency_sensitive(p, key, v);
        if (strcmp(key, "slo") == 0)
                return parse_slo(p, key, " per output token", v, &g->class.slo);
        if (strcmp(key, "ttft_slo") == 0)
                return parse_slo(p, key, " to the first token", v, &g->class.ttft_slo);
        return -ENOENT;
}

static int generate_finish(struct parser *p) {
        static const char *const names[] = {
                [PROMPT_TEXT] = "prompt", [PROMPT_TOKEN_IDS] = "prompt_token_ids", [PROMPT_MESSAGES] = "messages",
        };
        struct generate_message *g = &p->m->generate;

        switch (p->prompts) {
        case 1u << PROMPT_TEXT:
                g->prompt_kind = PROMPT_TEXT;
                return 0;
        case 1u << PROMPT_TOKEN_IDS:
                g->prompt_kind = PROMPT_TOKEN_IDS;
                return 0;
        case 1u << PROMPT_MESSAGES:
                g->prompt_kind = PROMPT_MESSAGES;
                return 0;
        case 0:
                return invalid_params(p, "one of prompt, prompt_token_ids or messages is required");
        default: {
                const char *given[3] = { NULL, NULL, NULL };
                size_t n = 0;
                for (unsigned k = 0; k < 3; k++)
                        if (p->prompts & (1u << k))
                                given[n++] = names[k];
                return invalid_params(p, "give only one of prompt, prompt_token_ids or messages; got %s%s%s%s%s",
                                      given[0], n == 3 ? ", " : " and ", given[1], n == 3 ? " and " : "",
                                      n == 3 ? given[2] : "");
        }
        }
}

/* Control ops */

static int abort_field(struct parser *p, const char *key, struct json_object *v) {
        char path[PATH_MAX_LEN];
        int r;

        if (strcmp(key, "request") != 0)
                return -ENOENT;
        p->has_request = true;
        bool list = json_object_is_type(v, json_type_array);
        size_t n = list ? json_object_array_length(v) : 1;
        if (list && n == 0)
                return invalid_params(p, "request must be an id or a non-empty list of ids");
        if (!(p->m->abort.requests = calloc(n, sizeof(*p->m->abort.requests))))
                return out_of_memory(p);
        p->m->abort.n = n;
        p->m->abort.list = list;
        if (!list)
                return get_string(p, key, v, &p->m->abort.requests[0]);
        for (size_t i = 0; i < n; i++) {
                path_printf(path, sizeof(path), "request[%zu]", i);
                if ((r = get_string(p, path, json_object_array_get_idx(v, i), &p->m->abort.requests[i])) < 0)
                        return r;
        }
        return 0;
}

static int abort_finish(struct parser *p) {
        if (!p->has_request)
                return invalid_params(p, "request is required: the id of the request to abort");
        return 0;
}

static int pause_field(struct parser *p, const char *key, struct json_object *v) {
        char q[QUOTE_MAX + 4];
        const char *s;
        int r;

        if (strcmp(key, "clear_cache") == 0)
                return get_bool(p, key, v, &p->m->pause.clear_cache);
        if (strcmp(key, "mode") != 0)
                return -ENOENT;
        if ((r = get_string(p, key, v, &s)) < 0)
                return r;
        if (pause_mode_from_string(s, &p->m->pause.mode) < 0)
                return invalid_params(p, "mode must be \"abort\", \"wait\" or \"keep\", got \"%s\"", quote(s, q));
        return 0;
}

static int sleep_field(struct parser *p, const char *key, struct json_object *v) {
        int32_t level = 0;
        int r;

        if (strcmp(key, "level") != 0)
                return -ENOENT;
        if ((r = get_int32(p, key, v, &level)) < 0)
                return r;
        /* the engine refuses other levels with no message */
        if (level != 1 && level != 2)
                return invalid_params(p, "level must be 1 (free the KV cache) or 2 (and the weights), got %" PRId32, level);
        p->m->sleep.level = level;
        return 0;
}

static int wake_up_field(struct parser *p, const char *key, struct json_object *v) {
        char path[PATH_MAX_LEN], q[QUOTE_MAX + 4];
        const char *s;
        int r;

        if (strcmp(key, "tags") != 0)
                return -ENOENT;
        if (!v)
                return 0; /* everything */
        if (!json_object_is_type(v, json_type_array))
                return want(p, key, v, "an array of \"weights\" and \"kv_cache\"");
        size_t n = json_object_array_length(v);
        /* 0 means everything to the engine: an empty list must not turn into that */
        if (n == 0)
                return invalid_params(p, "tags must name \"weights\" or \"kv_cache\"; leave it out to wake everything");
        for (size_t i = 0; i < n; i++) {
                path_printf(path, sizeof(path), "tags[%zu]", i);
                if ((r = get_string(p, path, json_object_array_get_idx(v, i), &s)) < 0)
                        return r;
                if (strcmp(s, "weights") == 0)
                        p->m->wake_up.tags |= BACKEND_MEMORY_WEIGHTS;
                else if (strcmp(s, "kv_cache") == 0)
                        p->m->wake_up.tags |= BACKEND_MEMORY_KV_CACHE;
                else
                        return invalid_params(p, "%s must be \"weights\" or \"kv_cache\", got \"%s\"", path, quote(s, q));
        }
        return 0;
}

/* preempt, or vLLM's name for it, reset_running_requests */
static int reset_prefix_cache_field(struct parser *p, const char *key, struct json_object *v) {
        if (strcmp(key, "preempt") != 0 && strcmp(key, "reset_running_requests") != 0)
                return -ENOENT;
        bool preempt = false;
        int r = get_bool(p, key, v, &preempt);
        if (r == 0)
                p->m->reset_prefix_cache.preempt |= preempt;
        return r;
}

/* A timeout in seconds: more than 0 and at most a day; null for the default. */
static int get_timeout(struct parser *p, const char *key, struct json_object *v, double none, double *ret) {
        double x;
        int r;

        if (!v) {
                *ret = none;
                return 0;
        }
        if ((r = get_number(p, key, v, &x)) < 0)
                return r;
        if (!(x > 0 && x <= PROTOCOL_TIMEOUT_MAX))
                return invalid_params(p, "%s must be seconds, more than 0 and at most %d, got %g", key,
                                      PROTOCOL_TIMEOUT_MAX, x);
        *ret = x;
        return 0;
}

static int collective_rpc_field(struct parser *p, const char *key, struct json_object *v) {
        if (strcmp(key, "args") == 0) {
                p->args = v;
                return 0;
        }
        if (strcmp(key, "kwargs") == 0) {
                if (v && !json_object_is_type(v, json_type_object))
                        return want(p, key, v, "an object of named arguments");
                p->kwargs = v;
                return 0;
        }
        if (strcmp(key, "timeout") == 0)
                return get_timeout(p, key, v, 0, &p->m->collective_rpc.timeout);
        if (strcmp(key, "method") != 0)
                return -ENOENT;
        p->has_method = true;
        return get_string(p, key, v, &p->m->collective_rpc.method);
}

/* Whether a collective_rpc argument says something: vLLM's clients send [] and {} for none. */
static bool rpc_argument_given(struct json_object *v) {
        return v && !(json_object_is_type(v, json_type_array) && json_object_array_length(v) == 0) &&
               !(json_object_is_type(v, json_type_object) && json_object_object_length(v) == 0);
}

/* A worker method takes one argument: kwargs when given, else args. */
static int collective_rpc_finish(struct parser *p) {
        if (!p->has_method)
                return invalid_params(p, "method is required");
        if (rpc_argument_given(p->args) && rpc_argument_given(p->kwargs))
                return invalid_params(p, "give args or kwargs, not both: a worker method takes one argument");
        p->m->collective_rpc.args = rpc_argument_given(p->kwargs) ? p->kwargs : p->args;
        return 0;
}

/* encode: generate's prompt and class fields, and the pooling's instead of params. */
static int encode_field(struct parser *p, const char *key, struct json_object *v) {
        struct pooling_params *pp = &p->m->generate.pooling;
        char q[QUOTE_MAX + 4];
        const char *s;
        int32_t dimensions = 0;
        int r;

        if (strcmp(key, "pooling_type") == 0) {
                if ((r = get_string(p, key, v, &s)) < 0)
                        return r;
                if (pooling_type_from_string(s, &pp->type) < 0)
                        return invalid_params(p, "pooling_type must be \"last\", \"mean\" or \"cls\", got \"%s\"", quote(s, q));
                return 0;
        }
        if (strcmp(key, "normalize") == 0)
                return get_bool(p, key, v, &pp->normalize);
        if (strcmp(key, "dimensions") == 0) {
                if (!v) {
                        pp->dimensions = 0;
                        return 0;
                }
                if ((r = get_int32(p, key, v, &dimensions)) < 0)
                        return r;
                if (dimensions < 1)
                        return invalid_params(p, "dimensions must be at least 1, got %" PRId32, dimensions);
                pp->dimensions = (uint32_t) dimensions;
                return 0;
        }
        if (strcmp(key, "truncate_prompt_tokens") == 0) {
                for (size_t i = 0; i < sizeof(param_fields) / sizeof(param_fields[0]); i++)
                        if (strcmp(param_fields[i].name, key) == 0)
                                return parse_param(p, &param_fields[i], v);
        }
        if (strcmp(key, "params") == 0)
                return invalid_params(p, "encode takes no params: its fields are pooling_type, normalize, dimensions and "
                                      "truncate_prompt_tokens");
        return generate_field(p, key, v);
}

/* tokenize: a prompt or messages, as generate takes them, and add_generation_prompt. */
static int tokenize_field(struct parser *p, const char *key, struct json_object *v) {
        if (strcmp(key, "add_generation_prompt") == 0)
                return get_bool(p, key, v, &p->m->generate.add_generation_prompt);
        if (strcmp(key, "prompt") == 0) {
                p->prompts |= 1u << PROMPT_TEXT;
                return get_string(p, key, v, &p->m->generate.prompt);
        }
        if (strcmp(key, "messages") == 0) {
                p->prompts |= 1u << PROMPT_MESSAGES;
                return parse_messages(p, v);
        }
        return -ENOENT;
}

static int tokenize_finish(struct parser *p) {
        switch (p->prompts) {
        case 1u << PROMPT_TEXT:
                p->m->generate.prompt_kind = PROMPT_TEXT;
                return 0;
        case 1u << PROMPT_MESSAGES:
                p->m->generate.prompt_kind = PROMPT_MESSAGES;
                return 0;
        case 0:
                return invalid_params(p, "prompt or messages is required");
        default:
                return invalid_params(p, "give only one of prompt and messages");
        }
}

static int detokenize_field(struct parser *p, const char *key, struct json_object *v) {
        if (strcmp(key, "tokens") != 0)
                return -ENOENT;
        p->has_tokens = true;
        return get_int32_array(p, key, v, &p->m->detokenize.tokens, &p->m->detokenize.n);
}

static int detokenize_finish(struct parser *p) {
        if (!p->has_tokens)
                return invalid_params(p, "tokens is required: an array of token ids");
        return 0;
}

static int drain_field(struct parser *p, const char *key, struct json_object *v) {
        if (strcmp(key, "timeout") != 0)
                return -ENOENT;
        return get_timeout(p, key, v, PROTOCOL_DRAIN_TIMEOUT_DEFAULT, &p->m->drain.timeout);
}

static int hello_field(struct parser *p, const char *key, struct json_object *v) {
        int r;

        if (strcmp(key, "protocol") != 0)
                return -ENOENT;
        if ((r = get_int32_array(p, key, v, &p->m->hello.versions, &p->m->hello.n_versions)) < 0)
                return r;
        p->m->hello.has_versions = true;
        return 0;
}

struct op_parser {
        /* One field other than op and id: 0, a negative errno, or -ENOENT for an unknown
         * field. NULL: the op takes no fields. */
        int (*field)(struct parser *p, const char *key, struct json_object *v);
        /* After the fields: required ones present. May be NULL. */
        int (*finish)(struct parser *p);
};

static const struct op_parser op_parsers[_CLIENT_OP_MAX] = {
        [CLIENT_OP_GENERATE] = { generate_field, generate_finish },
        [CLIENT_OP_ENCODE] = { encode_field, generate_finish },
        [CLIENT_OP_ABORT] = { abort_field, abort_finish },
        [CLIENT_OP_PAUSE] = { pause_field, NULL },
        [CLIENT_OP_SLEEP] = { sleep_field, NULL },
        [CLIENT_OP_WAKE_UP] = { wake_up_field, NULL },
        [CLIENT_OP_RESET_PREFIX_CACHE] = { reset_prefix_cache_field, NULL },
        [CLIENT_OP_COLLECTIVE_RPC] = { collective_rpc_field, collective_rpc_finish },
        [CLIENT_OP_TOKENIZE] = { tokenize_field, tokenize_finish },
        [CLIENT_OP_DETOKENIZE] = { detokenize_field, detokenize_finish },
        [CLIENT_OP_WAIT_FOR_REQUESTS_TO_DRAIN] = { drain_field, NULL },
        [CLIENT_OP_HELLO] = { hello_field, NULL },
};

static void init_defaults(struct client_message *m) {
        switch (m->op) {
        case CLIENT_OP_GENERATE:
                sampling_params_init_default(&m->generate.params);
                m->generate.params.output_kind = OUTPUT_DELTA; /* a stream wants what is new */
                m->generate.add_generation_prompt = true;
                break;
        case CLIENT_OP_ENCODE:
                sampling_params_init_default(&m->generate.params);
                m->generate.params.output_kind = OUTPUT_FINAL_ONLY;
                m->generate.add_generation_prompt = true;
                m->generate.encode = true;
                m->generate.pooling = (struct pooling_params) { .type = POOLING_MODEL_DEFAULT, .normalize = true };
                break;
        case CLIENT_OP_TOKENIZE:
                m->generate.add_generation_prompt = true; /* vLLM's /tokenize default */
                break;
        case CLIENT_OP_WAIT_FOR_REQUESTS_TO_DRAIN:
                m->drain.timeout = PROTOCOL_DRAIN_TIMEOUT_DEFAULT;
                break;
        case CLIENT_OP_PAUSE:
                m->pause.mode = PAUSE_ABORT; /* vLLM's defaults, as pause_generation has them */
                m->pause.clear_cache = true;
                break;
        case CLIENT_OP_SLEEP:
                m->sleep.level = 1; /* vLLM's default */
                break;
        default:
                break;
        }
}

/* Whether the line is the literal null, between whitespace. */
static bool is_null_literal(const char *line, size_t len) {
        while (len > 0 && line[len - 1] && strchr(" \t\r\n", line[len - 1]))
                len--;
        while (len > 0 && line[0] && strchr(" \t\r\n", line[0])) {
                line++;
                len--;
        }
        return len == 4 && memcmp(line, "null", 4) == 0;
}

/* The line into a tree: json-c in strict mode, depth bounded. *ret is NULL for a line that
 * is just "null". */
static int parse_json(const char *line, size_t len, struct json_object **ret, struct protocol_error *err) {
        struct json_tokener *tok;
        struct json_object *root;
        enum json_tokener_error e;
        size_t end, n;
        uint32_t cp;

        if (len > INT_MAX)
                return protocol_error_set(err, PROTOCOL_LINE_TOO_LONG, "the line is %zu bytes long", len);
        /* The UTF-8 again, by the standard's rules: json-c's own check (VALIDATE_UTF8) admits
         * overlong forms and surrogates, and every string handed out here may be echoed to
         * the client. With it, the strings json-c builds are valid UTF-8 too (it writes a
         * lone escaped surrogate as U+FFFD). NUL is no JSON anywhere (in a string it must be
         * written \u0000), and json-c would stop at it. */
        for (size_t i = 0; i < len; i += n) {
                if (utf8_next((const uint8_t *) line + i, len - i, &cp, &n) != UTF8_VALID)
                        return protocol_error_set(err, PROTOCOL_INVALID_UTF8, "invalid UTF-8 at offset %zu", i);
                if (cp == 0)
                        return protocol_error_set(err, PROTOCOL_INVALID_JSON, "NUL byte at offset %zu", i);
        }
        if (!(tok = json_tokener_new_ex(PROTOCOL_MAX_DEPTH))) {
                protocol_error_set(err, PROTOCOL_INTERNAL_ERROR, "out of memory");
                return -ENOMEM;
        }
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
        root = json_tokener_parse_ex(tok, line, (int) len);
        e = json_tokener_get_error(tok);
        end = json_tokener_get_parse_end(tok);
        if (e == json_tokener_continue) {
                /* The end of the line ends a value that could go on (a bare number). */
                root = json_tokener_parse_ex(tok, "", 1);
                e = json_tokener_get_error(tok);
                end = len;
        }
        json_tokener_free(tok);

        switch (e) {
        case json_tokener_success:
                /* json-c reports success without a tree when it cannot allocate one */
                if (!root && !is_null_literal(line, len))
                        return protocol_error_set(err, PROTOCOL_INTERNAL_ERROR, "out of memory reading the line");
                break;
        case json_tokener_error_depth:
                return protocol_error_set(err, PROTOCOL_INVALID_JSON, "nested deeper than %d levels at offset %zu",
                                          PROTOCOL_MAX_DEPTH, end);
        default:
                return protocol_error_set(err, PROTOCOL_INVALID_JSON, "%s at offset %zu", json_tokener_error_desc(e), end);
        }
        /* Strict mode refuses trailing characters; whitespace may remain. */
        for (size_t i = end; i < len; i++)
                if (!strchr(" \t\r\n", line[i])) {
                        json_object_put(root);
                        return protocol_error_set(err, PROTOCOL_INVALID_JSON,
                                                  "unexpected characters after the object at offset %zu", i);
                }
        *ret = root;
        return 0;
}

/* json-c saturates integer literals beyond 64 bits without saying so (a seed of 2^64 would
 * read as 2^64 - 1): find them in the text. Integers only: a literal with a fraction or an
 * exponent is a double, checked by check_numbers(). */
static int check_integer_literals(struct parser *p, const char *line, size_t len) {
        static const char max_positive[] = "18446744073709551615", max_negative[] = "9223372036854775808";
        bool in_string = false;
        for (size_t i = 0; i < len; i++) {
                char ch = line[i];
                if (in_string) {
                        if (ch == '\\')
                                i++;
                        else if (ch == '"')
                                in_string = false;
                        continue;
                }
                if (ch == '"') {
                        in_string = true;
                        continue;
                }
                if (ch != '-' && (ch < '0' || ch > '9'))
                        continue;
                size_t start = i, digits = ch == '-' ? i + 1 : i, end = digits;
                while (end < len && line[end] >= '0' && line[end] <= '9')
                        end++;
                i = end;
                if (end < len && strchr(".eE", line[end])) {
                        while (i + 1 < len && strchr("0123456789+-eE", line[i + 1]))
                                i++;
                        continue;
                }
                const char *max = ch == '-' ? max_negative : max_positive;
                size_t n = end - digits, n_max = strlen(max);
                if (n > n_max || (n == n_max && memcmp(line + digits, max, n) > 0))
                        return invalid_params(p, "the integer %.*s%s does not fit in 64 bits (at offset %zu)",
                                              (int) (end - start > 40 ? 40 : end - start), line + start,
                                              end - start > 40 ? "..." : "", start);
        }
        return 0;
}

/* The id first, so that every later error can carry it. */
static int parse_id(struct parser *p) {
        struct json_object *v;
        const char *id;
        size_t len, n;

        if (!json_object_object_get_ex(p->m->root, "id", &v))
                return protocol_error_set(p->err, PROTOCOL_INVALID_REQUEST, "id is missing");
        if (!json_object_is_type(v, json_type_string))
                return protocol_error_set(p->err, PROTOCOL_INVALID_REQUEST, "id must be a string, got %s", type_label(v));
        id = json_object_get_string(v);
        len = (size_t) json_object_get_string_len(v);
        if (len == 0)
                return protocol_error_set(p->err, PROTOCOL_INVALID_REQUEST, "id must not be empty");
        if (len > PROTOCOL_ID_MAX)
                return protocol_error_set(p->err, PROTOCOL_INVALID_REQUEST, "id is %zu bytes long; at most %d allowed",
                                          len, PROTOCOL_ID_MAX);
        if (memchr(id, 0, len))
                return protocol_error_set(p->err, PROTOCOL_INVALID_REQUEST, "id must not contain NUL characters");
        /* json-c validated the raw bytes and writes escapes as UTF-8 (lone surrogates as
         * U+FFFD), so this holds; the id is echoed on every line, so make sure. */
        for (size_t i = 0; i < len; i += n)
                if (utf8_next((const uint8_t *) id + i, len - i, NULL, &n) != UTF8_VALID)
                        return protocol_error_set(p->err, PROTOCOL_INVALID_REQUEST, "id is not valid UTF-8");
        p->m->id = id;
        memcpy(p->err->id, id, len + 1);
        p->err->has_id = true;
        return 0;
}

static int parse_op(struct parser *p) {
        char q[QUOTE_MAX + 4];
        struct json_object *v;
        const char *s;

        if (!json_object_object_get_ex(p->m->root, "op", &v))
                return protocol_error_set(p->err, PROTOCOL_INVALID_REQUEST, "op is missing");
        if (!json_object_is_type(v, json_type_string))
                return protocol_error_set(p->err, PROTOCOL_INVALID_REQUEST, "op must be a string, got %s", type_label(v));
        s = json_object_get_string(v);
        if (memchr(s, 0, (size_t) json_object_get_string_len(v)))
                return protocol_error_set(p->err, PROTOCOL_INVALID_REQUEST, "op must not contain NUL characters");
        if (client_op_from_string(s, &p->m->op) < 0)
                return protocol_error_set(p->err, PROTOCOL_UNKNOWN_OP, "unknown op \"%s\"", quote(s, q));
        return 0;
}

int protocol_parse(const char *line, size_t len, struct client_message *ret, struct protocol_error *err) {
        struct client_message m = { 0 };
        struct parser p = { .m = &m, .err = err };
        int r;

        *ret = (struct client_message) { 0 };
        err->code = NULL;
        err->message[0] = 0;
        err->has_id = false;
        err->id[0] = 0;

        if ((r = parse_json(line, len, &m.root, err)) < 0)
                return r;
        if (!json_object_is_type(m.root, json_type_object)) {
                r = protocol_error_set(err, PROTOCOL_INVALID_REQUEST, "a message must be a JSON object, got %s",
                                       type_label(m.root));
                goto fail;
        }
        if ((r = parse_id(&p)) < 0 || (r = check_integer_literals(&p, line, len)) < 0 ||
            (r = check_numbers(&p, m.root, NULL)) < 0 || (r = parse_op(&p)) < 0)
                goto fail;

        const struct op_parser *op = &op_parsers[m.op];
        init_defaults(&m);
        json_object_object_foreach(m.root, key, value) {
                if (strcmp(key, "op") == 0 || strcmp(key, "id") == 0)
                        continue;
                r = op->field ? op->field(&p, key, value) : -ENOENT;
                if (r == -ENOENT) {
                        char q[QUOTE_MAX + 4];
                        r = protocol_error_set(err, PROTOCOL_INVALID_PARAMS, "unknown field \"%s\" for op %s",
                                               quote(key, q), op_names[m.op]);
                }
                if (r < 0)
                        goto fail;
        }
        if (op->finish && (r = op->finish(&p)) < 0)
                goto fail;

        *ret = m;
        return 0;
fail:
        client_message_free(&m);
        return r;
}

void client_message_free(struct client_message *m) {
        if (!m)
                return;
        switch (m->op) {
        case CLIENT_OP_DETOKENIZE:
                free(m->detokenize.tokens);
                break;
        case CLIENT_OP_TOKENIZE: /* its prompt fields only: the others stay NULL */
        case CLIENT_OP_ENCODE:
        case CLIENT_OP_GENERATE:
                free(m->generate.prompt_token_ids);
                free(m->generate.messages);
                free(m->generate.stop_storage);
                free(m->generate.bad_words_storage);
                free(m->generate.stop_token_ids_storage);
                free(m->generate.logit_bias_storage);
                free(m->generate.allowed_token_ids_storage);
                break;
        case CLIENT_OP_HELLO:
                free(m->hello.versions);
                break;
        case CLIENT_OP_ABORT:
                free(m->abort.requests);
                break;
        default:
                break;
        }
        json_object_put(m->root);
        *m = (struct client_message) { 0 };
}

int protocol_negotiate(const struct client_message *hello, int32_t *ret) {
        if (hello->op != CLIENT_OP_HELLO || !hello->hello.has_versions) {
                *ret = PROTOCOL_VERSION; /* a client that says nothing speaks version 1 */
                return 0;
        }
        for (size_t i = 0; i < hello->hello.n_versions; i++)
                if (hello->hello.versions[i] == PROTOCOL_VERSION) {
                        *ret = PROTOCOL_VERSION;
                        return 0;
                }
        return -EPROTONOSUPPORT;
}

void generate_message_to_spec(const struct generate_message *g, const char *request_id, const char *prompt_text,
                              struct request_spec *ret) {
        *ret = (struct request_spec) { .id = request_id, .params = g->params, .class = g->class, .encode = g->encode,
                                       .pooling = g->pooling };
        switch (g->prompt_kind) {
        case PROMPT_TEXT:
                ret->prompt_text = g->prompt;
                break;
        case PROMPT_TOKEN_IDS:
                ret->prompt = g->prompt_token_ids;
                ret->n_prompt = g->n_prompt_token_ids;
                break;
        case PROMPT_MESSAGES:
                ret->prompt_text = prompt_text;
                break;
        }
}
