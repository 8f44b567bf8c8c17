/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "openai.h"
#include "tokenizer.h"

#define MAX_BODY_DEPTH 32

int openai_error_set(struct openai_error *e, int status, const char *type, const char *param, const char *fmt, ...) {
        va_list ap;
        e->status = status;
        e->type = type;
        snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
        va_start(ap, fmt);
        vsnprintf(e->message, sizeof(e->message), fmt, ap);
        va_end(ap);
        return status >= 500 ? -ENOMEM : -EINVAL;
}

static int bad_field(struct openai_error *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad_field(struct openai_error *e, const char *param, const char *fmt, ...) {
        va_list ap;
        e->status = 400;
        e->type = "invalid_request_error";
        snprintf(e->param, sizeof(e->param), "%s", param);
        va_start(ap, fmt);
        vsnprintf(e->message, sizeof(e->message), fmt, ap);
        va_end(ap);
        return -EINVAL;
}

/* A chat message's content: a string, or OpenAI's list of parts, whose text parts are
 * joined. */
static int message_content(struct json_object *content, size_t i, struct json_object **ret, struct openai_error *e) {
        if (json_object_is_type(content, json_type_string)) {
                *ret = json_object_get(content);
                return 0;
        }
        if (!json_object_is_type(content, json_type_array))
                return bad_field(e, "messages", "messages[%zu].content must be a string or a list of text parts", i);
        size_t n = json_object_array_length(content), len = 0;
        char *text = calloc(1, 1);
        for (size_t k = 0; text && k < n; k++) {
                struct json_object *part = json_object_array_get_idx(content, k), *type, *t;
                if (!json_object_object_get_ex(part, "type", &type) || strcmp(json_object_get_string(type), "text") != 0 ||
                    !json_object_object_get_ex(part, "text", &t) || !json_object_is_type(t, json_type_string)) {
                        free(text);
                        return bad_field(e, "messages",
                                         "messages[%zu].content[%zu] must be {\"type\": \"text\", \"text\": ...}: only text is served",
                                         i, k);
                }
                size_t add = (size_t) json_object_get_string_len(t);
                char *grown = realloc(text, len + add + 1);
                if (!grown) {
                        free(text);
                        text = NULL;
                        break;
                }
                text = grown;
                memcpy(text + len, json_object_get_string(t), add);
                len += add;
                text[len] = '\0';
        }
        if (!text || !(*ret = json_object_new_string_len(text, (int) len))) {
                free(text);
                return openai_error_set(e, 500, "internal_error", NULL, "out of memory");
        }
        free(text);
        return 0;
}

int openai_copy_messages(struct json_object *v, struct json_object *line, struct openai_error *e) {
        if (!json_object_is_type(v, json_type_array))
                return bad_field(e, "messages", "messages must be a list of {\"role\", \"content\"} objects");
        size_t n = json_object_array_length(v);
        struct json_object *out = json_object_new_array();
        json_object_object_add(line, "messages", out);
        for (size_t i = 0; i < n; i++) {
                struct json_object *m = json_object_array_get_idx(v, i), *role, *content, *c, *item;
                if (!json_object_is_type(m, json_type_object) || !json_object_object_get_ex(m, "role", &role) ||
                    !json_object_object_get_ex(m, "content", &content))
                        return bad_field(e, "messages", "messages[%zu] must be an object with \"role\" and \"content\"", i);
                int r = message_content(content, i, &c, e);
                if (r < 0)
                        return r;
                item = json_object_new_object();
                json_object_object_add(item, "role", json_object_get(role));
                json_object_object_add(item, "content", c);
                json_object_array_add(out, item);
        }
        return 0;
}

/* Fields that go into the socket message's params under the same name. */
static const char *const param_names[] = {
        "n", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
        "seed", "stop", "stop_token_ids", "include_stop_str_in_output", "ignore_eos", "max_tokens", "min_tokens",
        "logit_bias", "allowed_token_ids", "skip_special_tokens", "prompt_logprobs", "bad_words",
        "truncate_prompt_tokens", "best_of",
};
/* Top-level fields of the socket message under the same name. */
static const char *const class_names[] = { "priority", "latency_sensitive", "is_latency_sensitive", "slo", "ttft_slo" };

static bool among(const char *key, const char *const *names, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (strcmp(key, names[i]) == 0)
                        return true;
        return false;
}

static int get_bool(struct json_object *v, const char *key, bool *ret, struct openai_error *e) {
        if (!json_object_is_type(v, json_type_boolean))
                return bad_field(e, key, "%s must be true or false", key);
        *ret = json_object_get_boolean(v);
        return 0;
}

/* Sorts a body's field into the socket message (line, params) or the request. */
static int body_field(struct openai_request *req, const char *key, struct json_object *v, struct json_object *line,
                      struct json_object *params, struct openai_error *e) {
        bool chat = req->route == OPENAI_CHAT_COMPLETIONS;
        if (strcmp(key, "model") == 0) {
                if (!json_object_is_type(v, json_type_string))
                        return bad_field(e, key, "model must be a string");
                if (!(req->model = strdup(json_object_get_string(v))))
                        return openai_error_set(e, 500, "internal_error", NULL, "out of memory");
                return 0;
        }
        if (!chat && strcmp(key, "prompt") == 0) {
                if (json_object_is_type(v, json_type_string)) {
                        json_object_object_add(line, "prompt", json_object_get(v));
                        return 0;
                }
                if (json_object_is_type(v, json_type_array) && json_object_array_length(v) == 1 &&
                    json_object_is_type(json_object_array_get_idx(v, 0), json_type_string)) {
                        json_object_object_add(line, "prompt", json_object_get(json_object_array_get_idx(v, 0)));
                        return 0;
                }
                if (json_object_is_type(v, json_type_array) &&
                    (json_object_array_length(v) == 0 || json_object_is_type(json_object_array_get_idx(v, 0), json_type_int))) {
                        json_object_object_add(line, "prompt_token_ids", json_object_get(v));
                        return 0;
                }
                return bad_field(e, key, "prompt must be a string, a list of one string or a list of token ids (one prompt "
                                         "a request)");
        }
        if (chat && strcmp(key, "messages") == 0)
                return openai_copy_messages(v, line, e);
        if (strcmp(key, "stream") == 0)
                return get_bool(v, key, &req->stream, e);
        if (strcmp(key, "stream_options") == 0) {
                struct json_object *u;
                if (json_object_is_type(v, json_type_null))
                        return 0;
                if (!json_object_is_type(v, json_type_object))
                        return bad_field(e, key, "stream_options must be an object");
                if (json_object_object_get_ex(v, "include_usage", &u))
                        return get_bool(u, "stream_options.include_usage", &req->include_usage, e);
                return 0;
        }
        if (!chat && strcmp(key, "echo") == 0)
                return get_bool(v, key, &req->echo, e);
        if (strcmp(key, "max_completion_tokens") == 0) {
                json_object_object_add(params, "max_tokens", json_object_get(v));
                return 0;
        }
        if (strcmp(key, "logprobs") == 0) {
                if (json_object_is_type(v, json_type_null))
                        return 0;
                if (!chat) { /* completions: how many top entries */
                        req->logprobs = true;
                        json_object_object_add(params, "logprobs", json_object_get(v));
                        return 0;
                }
                int r = get_bool(v, key, &req->logprobs, e);
                if (r == 0 && req->logprobs && !json_object_object_get_ex(params, "logprobs", NULL))
                        json_object_object_add(params, "logprobs", json_object_new_int(0));
                return r;
        }
        if (chat && strcmp(key, "top_logprobs") == 0) {
                if (!json_object_is_type(v, json_type_null))
                        json_object_object_add(params, "logprobs", json_object_get(v));
                return 0;
        }
        if (among(key, param_names, sizeof(param_names) / sizeof(param_names[0]))) {
                if (!json_object_is_type(v, json_type_null) || strcmp(key, "max_tokens") == 0)
                        json_object_object_add(params, key, json_object_get(v));
                return 0;
        }
        if (among(key, class_names, sizeof(class_names) / sizeof(class_names[0]))) {
                if (!json_object_is_type(v, json_type_null))
                        json_object_object_add(line, key, json_object_get(v));
                return 0;
        }
        /* everything else (user, length_penalty without beam search, ...) is accepted and
         * does nothing, as vLLM's server does */
        return 0;
}

int openai_refused(const char *message, struct openai_error *e) {
        const char *m = message;
        if (strncmp(m, "params.", 7) == 0)
                m += 7;
        char param[64] = "";
        size_t i = 0;
        while (m[i] && m[i] != ' ' && m[i] != '[' && m[i] != '.' && m[i] != ':' && i + 1 < sizeof(param)) {
                param[i] = m[i];
                i++;
        }
        return bad_field(e, m[i] == ' ' || m[i] == '[' || m[i] == '.' ? param : "", "%s", m);
}

int openai_body_object(const char *body, size_t len, struct json_object **ret, struct openai_error *err) {
        struct json_tokener *tok = json_tokener_new_ex(MAX_BODY_DEPTH);
        if (!tok)
                return openai_error_set(err, 500, "internal_error", NULL, "out of memory");
        struct json_object *root = json_tokener_parse_ex(tok, body, (int) len);
        enum json_tokener_error jerr = json_tokener_get_error(tok);
        size_t used = json_tokener_get_parse_end(tok);
        json_tokener_free(tok);
        if (!root || jerr != json_tokener_success || used != len) {
                json_object_put(root);
                return bad_field(err, "", "the body is not one JSON object: %s",
                                 jerr == json_tokener_continue ? "it ends early"
                                 : jerr != json_tokener_success ? json_tokener_error_desc(jerr) : "text follows it");
        }
        if (!json_object_is_type(root, json_type_object)) {
                json_object_put(root);
                return bad_field(err, "", "the body must be a JSON object");
        }
        *ret = root;
        return 0;
}

int openai_parse(const char *body, size_t len, enum openai_route route, struct openai_request *ret,
                 struct openai_error *err) {
        *ret = (struct openai_request) { .route = route, .n = 1 };
        struct json_object *root;
        if (openai_body_object(body, len, &root, err) < 0)
                return -EINVAL;
        struct json_object *line = json_object_new_object(), *params = json_object_new_object();
        int r = line && params ? 0 : openai_error_set(err, 500, "internal_error", NULL, "out of memory");
        if (r == 0) {
                json_object_object_add(line, "op", json_object_new_string("generate"));
                json_object_object_add(line, "id", json_object_new_string("http"));
                json_object_object_foreach(root, key, value) {
                        if ((r = body_field(ret, key, value, line, params, err)) < 0)
                                break;
                }
        }
        if (r == 0 && route == OPENAI_CHAT_COMPLETIONS && !json_object_object_get_ex(line, "messages", NULL))
                r = bad_field(err, "messages", "messages is required");
        if (r == 0 && route == OPENAI_COMPLETIONS && !json_object_object_get_ex(line, "prompt", NULL) &&
            !json_object_object_get_ex(line, "prompt_token_ids", NULL))
                r = bad_field(err, "prompt", "prompt is required");
        if (r == 0) {
                json_object_object_add(line, "params", json_object_get(params));
                const char *text = json_object_to_json_string_ext(line, JSON_C_TO_STRING_PLAIN);
                struct protocol_error pe = { 0 };
                if (protocol_parse(text, strlen(text), &ret->msg, &pe) < 0)
                        r = openai_refused(pe.message, err);
                else {
                        ret->msg.generate.params.output_kind = OUTPUT_DELTA;
                        ret->n = ret->msg.generate.params.n;
                }
        }
        json_object_put(params);
        json_object_put(line);
        json_object_put(root);
        if (r < 0)
                openai_request_free(ret);
        return r;
}

void openai_request_free(struct openai_request *r) {
        client_message_free(&r->msg);
        free(r->model);
        r->model = NULL;
}

char *openai_error_body(const struct openai_error *e) {
        struct json_object *o = json_object_new_object(), *inner = json_object_new_object();
        char *ret = NULL;
        if (o && inner) {
                json_object_object_add(inner, "message", protocol_json_text(e->message, strlen(e->message)));
                json_object_object_add(inner, "type", json_object_new_string(e->type));
                json_object_object_add(inner, "param", e->param[0] ? json_object_new_string(e->param) : NULL);
                json_object_object_add(inner, "code", json_object_new_int(e->status));
                json_object_object_add(o, "error", json_object_get(inner));
                const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
                ret = s ? strdup(s) : NULL;
        }
        json_object_put(inner);
        json_object_put(o);
        return ret;
}

const char *openai_finish_reason(enum finish_reason r) {
        switch (r) {
        case FINISH_STOP: return "stop";
        case FINISH_LENGTH: return "length";
        case FINISH_ABORT: return "abort";
        case FINISH_ERROR: return "error";
        default: return NULL;
        }
}

static struct json_object *token_text(const struct tokenizer *tk, int32_t id) {
        size_t len = 0;
        const char *s = tokenizer_token_bytes(tk, id, &len);
        return protocol_json_text(s, s ? len : 0);
}

static struct json_object *token_bytes(const struct tokenizer *tk, int32_t id) {
        size_t len = 0;
        const char *s = tokenizer_token_bytes(tk, id, &len);
        struct json_object *a = json_object_new_array();
        for (size_t i = 0; a && s && i < len; i++)
                json_object_array_add(a, json_object_new_int((uint8_t) s[i]));
        return a;
}

/* A completion's logprobs for its tokens: the chat route's {"content": [...]} entries or the
 * completions route's parallel lists, appended to *lp (made on first use). */
static void add_logprobs(const struct openai_request *req, const struct tokenizer *tk, const struct completion_output *c,
                         struct json_object **lp) {
        bool chat = req->route == OPENAI_CHAT_COMPLETIONS;
        if (!*lp) {
                *lp = json_object_new_object();
                if (chat)
                        json_object_object_add(*lp, "content", json_object_new_array());
                else {
                        json_object_object_add(*lp, "tokens", json_object_new_array());
                        json_object_object_add(*lp, "token_logprobs", json_object_new_array());
                        json_object_object_add(*lp, "top_logprobs", json_object_new_array());
                }
        }
        for (uint32_t i = 0; c->logprobs && i < c->n_token_ids; i++) {
                const struct sample_result *s = &c->logprobs[i];
                if (chat) {
                        struct json_object *entry = json_object_new_object(), *top = json_object_new_array(), *content;
                        json_object_object_add(entry, "token", token_text(tk, s->token));
                        json_object_object_add(entry, "logprob", json_object_new_double(s->logprob));
                        json_object_object_add(entry, "bytes", token_bytes(tk, s->token));
                        for (size_t k = 0; k < s->n_top; k++) {
                                if (k == s->n_top - 1 && s->n_top > (size_t) req->msg.generate.params.logprobs)
                                        break; /* the chosen token, appended beyond the top N */
                                struct json_object *t = json_object_new_object();
                                json_object_object_add(t, "token", token_text(tk, s->top[k].token));
                                json_object_object_add(t, "logprob", json_object_new_double(s->top[k].logprob));
                                json_object_object_add(t, "bytes", token_bytes(tk, s->top[k].token));
                                json_object_array_add(top, t);
                        }
                        json_object_object_add(entry, "top_logprobs", top);
                        json_object_object_get_ex(*lp, "content", &content);
                        json_object_array_add(content, entry);
                } else {
                        struct json_object *tokens, *lps, *tops, *top = json_object_new_object();
                        json_object_object_get_ex(*lp, "tokens", &tokens);
                        json_object_object_get_ex(*lp, "token_logprobs", &lps);
                        json_object_object_get_ex(*lp, "top_logprobs", &tops);
                        json_object_array_add(tokens, token_text(tk, s->token));
                        json_object_array_add(lps, json_object_new_double(s->logprob));
                        for (size_t k = 0; k < s->n_top; k++) {
                                size_t len = 0;
                                const char *name = tokenizer_token_bytes(tk, s->top[k].token, &len);
                                char *key = strndup(name ? name : "", len);
                                if (key)
                                        json_object_object_add(top, key, json_object_new_double(s->top[k].logprob));
                                free(key);
                        }
                        json_object_array_add(tops, top);
                }
        }
}

int openai_collect(const struct openai_request *req, const struct tokenizer *tk, const struct request_output *o,
                   struct openai_choice *choices, uint32_t n) {
        for (uint32_t i = 0; i < o->n_outputs; i++) {
                const struct completion_output *c = &o->outputs[i];
                if (c->index >= n)
                        continue;
                struct openai_choice *ch = &choices[c->index];
                if (ch->len + c->text_len + 1 > ch->cap) {
                        size_t cap = (ch->len + c->text_len + 1) * 2;
                        char *grown = realloc(ch->text, cap);
                        if (!grown)
                                return -ENOMEM;
                        ch->text = grown;
                        ch->cap = cap;
                }
                memcpy(ch->text + ch->len, c->text, c->text_len);
                ch->len += c->text_len;
                ch->text[ch->len] = '\0';
                ch->n_tokens += c->n_token_ids;
                if (c->finish_reason != FINISH_NONE)
                        ch->finish_reason = c->finish_reason;
                if (req->logprobs)
                        add_logprobs(req, tk, c, &ch->logprobs);
        }
        return 0;
}

void openai_choices_free(struct openai_choice *choices, uint32_t n) {
        for (uint32_t i = 0; choices && i < n; i++) {
                free(choices[i].text);
                json_object_put(choices[i].logprobs);
        }
        free(choices);
}

static struct json_object *usage(uint32_t n_prompt, uint32_t n_generated) {
        struct json_object *u = json_object_new_object();
        json_object_object_add(u, "prompt_tokens", json_object_new_int64(n_prompt));
        json_object_object_add(u, "completion_tokens", json_object_new_int64(n_generated));
        json_object_object_add(u, "total_tokens", json_object_new_int64((int64_t) n_prompt + n_generated));
        return u;
}

static struct json_object *answer_head(const struct openai_request *req, const struct openai_answer *a, bool chunk) {
        struct json_object *o = json_object_new_object();
        bool chat = req->route == OPENAI_CHAT_COMPLETIONS;
        json_object_object_add(o, "id", json_object_new_string(a->id));
        json_object_object_add(o, "object", json_object_new_string(chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                                         : "text_completion"));
        json_object_object_add(o, "created", json_object_new_int64(a->created));
        json_object_object_add(o, "model", json_object_new_string(a->model));
        return o;
}

static char *to_text(struct json_object *o) {
        const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
        char *ret = s ? strdup(s) : NULL;
        json_object_put(o);
        return ret;
}

/* The completion's text, after the prompt when echo asks for it. */
static struct json_object *choice_text(const struct openai_request *req, const struct openai_answer *a, const char *text,
                                       size_t len) {
        if (!req->echo || !a->prompt)
                return protocol_json_text(text, len);
        size_t plen = strlen(a->prompt);
        char *both = malloc(plen + len + 1);
        if (!both)
                return NULL;
        memcpy(both, a->prompt, plen);
        memcpy(both + plen, text, len);
        struct json_object *v = protocol_json_text(both, plen + len);
        free(both);
        return v;
}

char *openai_answer_body(const struct openai_request *req, const struct openai_answer *a,
                         const struct openai_choice *choices, uint32_t n) {
        bool chat = req->route == OPENAI_CHAT_COMPLETIONS;
        struct json_object *o = answer_head(req, a, false), *list = json_object_new_array();
        uint32_t generated = 0;
        for (uint32_t i = 0; i < n; i++) {
                const struct openai_choice *c = &choices[i];
                struct json_object *ch = json_object_new_object();
                json_object_object_add(ch, "index", json_object_new_int((int) i));
                if (chat) {
                        struct json_object *m = json_object_new_object();
                        json_object_object_add(m, "role", json_object_new_string("assistant"));
                        json_object_object_add(m, "content", protocol_json_text(c->text, c->len));
                        json_object_object_add(ch, "message", m);
                } else
                        json_object_object_add(ch, "text", choice_text(req, a, c->text, c->len));
                json_object_object_add(ch, "logprobs", json_object_get(c->logprobs));
                const char *why = openai_finish_reason(c->finish_reason);
                json_object_object_add(ch, "finish_reason", why ? json_object_new_string(why) : NULL);
                json_object_array_add(list, ch);
                generated += c->n_tokens;
        }
        json_object_object_add(o, "choices", list);
        json_object_object_add(o, "usage", usage(a->n_prompt, generated));
        return to_text(o);
}

static int append_event(char **buf, size_t *len, size_t *cap, const char *data) {
        if (!data)
                return -ENOMEM;
        size_t need = strlen(data) + 8;
        if (*len + need + 1 > *cap) {
                size_t c = (*len + need + 1) * 2;
                char *grown = realloc(*buf, c);
                if (!grown)
                        return -ENOMEM;
                *buf = grown;
                *cap = c;
        }
        *len += (size_t) sprintf(*buf + *len, "data: %s\n\n", data);
        return 0;
}

int openai_stream_events(const struct openai_request *req, const struct openai_answer *a, const struct tokenizer *tk,
                         const struct request_output *o, bool first, char **buf, size_t *len, size_t *cap) {
        bool chat = req->route == OPENAI_CHAT_COMPLETIONS;
        int r = 0;
        for (uint32_t i = 0; r == 0 && i < o->n_outputs; i++) {
                const struct completion_output *c = &o->outputs[i];
                if (c->text_len == 0 && c->finish_reason == FINISH_NONE && !first)
                        continue;
                struct json_object *ev = answer_head(req, a, true), *list = json_object_new_array();
                struct json_object *ch = json_object_new_object(), *lp = NULL;
                json_object_object_add(ch, "index", json_object_new_int((int) c->index));
                if (chat) {
                        struct json_object *delta = json_object_new_object();
                        if (first)
                                json_object_object_add(delta, "role", json_object_new_string("assistant"));
                        json_object_object_add(delta, "content", protocol_json_text(c->text, c->text_len));
                        json_object_object_add(ch, "delta", delta);
                } else
                        json_object_object_add(ch, "text", first ? choice_text(req, a, c->text, c->text_len)
                                                                 : protocol_json_text(c->text, c->text_len));
                if (req->logprobs)
                        add_logprobs(req, tk, c, &lp);
                json_object_object_add(ch, "logprobs", lp);
                const char *why = openai_finish_reason(c->finish_reason);
                json_object_object_add(ch, "finish_reason", why ? json_object_new_string(why) : NULL);
                json_object_array_add(list, ch);
                json_object_object_add(ev, "choices", list);
                char *text = to_text(ev);
                r = append_event(buf, len, cap, text);
                free(text);
        }
        return r;
}

int openai_stream_error(const struct openai_error *e, char **buf, size_t *len, size_t *cap) {
        char *body = openai_error_body(e);
        int r = append_event(buf, len, cap, body);
        free(body);
        return r;
}

int openai_stream_end(const struct openai_request *req, const struct openai_answer *a, uint32_t n_generated, char **buf,
                      size_t *len, size_t *cap) {
        if (req->include_usage) {
                struct json_object *ev = answer_head(req, a, true);
                json_object_object_add(ev, "choices", json_object_new_array());
                json_object_object_add(ev, "usage", usage(a->n_prompt, n_generated));
                char *text = to_text(ev);
                int r = append_event(buf, len, cap, text);
                free(text);
                if (r < 0)
                        return r;
        }
        return append_event(buf, len, cap, "[DONE]");
}
