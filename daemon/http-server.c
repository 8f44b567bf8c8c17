/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "commands.h"
#include "http-admin.h"
#include "http-embeddings.h"
#include "http-cors.h"
#include "http-exchange.h"
#include "http-server.h"
#include "log.h"
#include "openai.h"
#include "server.h"

#define DEFAULT_HOST "127.0.0.1"
#define DEFAULT_PORT 8000
/* What one connection may hold of request line and headers (a larger head is refused). */
#define HEAD_MEMORY_LIMIT (64 * 1024)

static void run_mhd(struct http_front *h);

static struct http_peer *peer_of(struct MHD_Connection *conn) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        return ci ? ci->socket_context : NULL;
}

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

static void exchange_free(struct http_exchange *ex) {
        struct http_front *h = ex->front;
        if (ex->submitted && !ex->finished) { /* ended by its client leaving, or by the daemon stopping */
                const struct request_metrics never = { 0 };
                daemon_metrics_observe_finished(&h->server->metrics, &never, FINISH_ABORT, ex->answer.n_prompt,
                                                ex->n_generated);
        }
        bool was_in_flight = ex->submitted;
        sd_event_source_disable_unref(ex->hangup);
        http_admin_exchange_done(ex);
        http_embeddings_exchange_done(ex);
        if (ex->stream)
                async_stream_release(ex->stream); /* aborts it if it still runs */
        if (ex->prev)
                ex->prev->next = ex->next;
        else
                h->first = ex->next;
        if (ex->next)
                ex->next->prev = ex->prev;
        openai_request_free(&ex->req);
        openai_choices_free(ex->choices, ex->req.n ? ex->req.n : 1);
        free(ex->body);
        free(ex->prompt);
        free(ex->events);
        free(ex);
        if (was_in_flight) {
                h->server->http_in_flight--;
                server_request_ended(h->server);
        }
}

/* The metrics of an output (delta: its tokens are new), as the socket's requests feed them. */
static void observe(struct http_exchange *ex, const struct request_output *o) {
        struct daemon_metrics *m = &ex->front->server->metrics;
        uint32_t n = 0;
        for (uint32_t i = 0; i < o->n_outputs; i++)
                n += o->outputs[i].n_token_ids;
        if (n && o->metrics.last_token_time > 0) {
                double since = ex->last_token_time > 0 ? ex->last_token_time : o->metrics.first_token_time;
                uint32_t gaps = ex->last_token_time > 0 ? n : n - 1; /* the first token's latency is TTFT */
                if (gaps)
                        daemon_metrics_observe_tokens(m, o->metrics.last_token_time - since, gaps);
                ex->last_token_time = o->metrics.last_token_time;
        }
        ex->n_generated += n;
        if (o->finished) {
                enum finish_reason reason = FINISH_NONE;
                for (uint32_t i = 0; i < o->n_outputs; i++)
                        if (o->outputs[i].finish_reason > reason)
                                reason = o->outputs[i].finish_reason;
                daemon_metrics_observe_finished(m, &o->metrics, reason, ex->answer.n_prompt, ex->n_generated);
        }
}

static void on_stream(struct async_stream *stream, void *userdata) {
        struct http_exchange *ex = userdata;
        const struct tokenizer *tk = ex->front->server->model.tk;
        struct request_output *o;
        (void) stream;
        while ((o = async_stream_take(ex->stream))) {
                int r = 0;
                if (o->error)
                        http_output_failure(o, &ex->failure, &ex->retry_after);
                observe(ex, o);
                if (ex->req.stream && o->error && !ex->responded && !ex->events_len) {
                        /* refused before its first token: the answer is an error status */
                } else if (ex->req.stream) {
                        if (o->error)
                                r = openai_stream_error(&ex->failure, &ex->events, &ex->events_len, &ex->events_cap);
                        else
                                r = openai_stream_events(&ex->req, &ex->answer, tk, o, ex->first_event, &ex->events,
                                                         &ex->events_len, &ex->events_cap);
                        ex->first_event = false;
                        if (r == 0 && o->finished)
                                r = openai_stream_end(&ex->req, &ex->answer, ex->n_generated, &ex->events, &ex->events_len,
                                                      &ex->events_cap);
                } else if (!o->error)
                        r = openai_collect(&ex->req, tk, o, ex->choices, ex->req.n);
                if (r < 0 && !ex->failure.status)
                        openai_error_set(&ex->failure, 500, "internal_error", NULL, "out of memory");
                if (o->finished)
                        ex->finished = true;
                request_output_free(o);
        }
        /* a stream sends what came; a whole answer waits for the last output */
        if (ex->req.stream || ex->finished)
                http_exchange_wake(ex);
}

/* A stream's bytes as they come; the connection waits, suspended, while there are none. */
static ssize_t read_events(void *cls, uint64_t pos, char *buf, size_t max) {
        struct http_exchange *ex = cls;
        (void) pos;
        if (ex->events_sent < ex->events_len) {
                size_t n = ex->events_len - ex->events_sent;
                if (n > max)
                        n = max;
                memcpy(buf, ex->events + ex->events_sent, n);
                ex->events_sent += n;
                if (ex->events_sent == ex->events_len)
                        ex->events_sent = ex->events_len = 0;
                return (ssize_t) n;
        }
        if (ex->finished)
                return MHD_CONTENT_READER_END_OF_STREAM;
        ex->suspended = true;
        MHD_suspend_connection(ex->conn);
        return 0;
}

static enum MHD_Result answer_models(struct http_exchange *ex) {
        struct server *s = ex->front->server;
        struct json_object *o = json_object_new_object(), *list = json_object_new_array(), *m = json_object_new_object();
        json_object_object_add(o, "object", json_object_new_string("list"));
        json_object_object_add(m, "id", json_object_new_string(server_served_name(s)));
        json_object_object_add(m, "object", json_object_new_string("model"));
        json_object_object_add(m, "created", json_object_new_int64((int64_t) time(NULL)));
        json_object_object_add(m, "owned_by", json_object_new_string("asyncllmd"));
        json_object_object_add(m, "root", json_object_new_string(s->model.name));
        json_object_object_add(m, "max_model_len", json_object_new_int64(s->model.config.max_model_len));
        json_object_array_add(list, m);
        json_object_object_add(o, "data", list);
        return http_queue_json(ex, MHD_HTTP_OK, o);
}

/* GET /v1/models/{id}: the model, or 404 for another name. */
static enum MHD_Result answer_model(struct http_exchange *ex, const char *id) {
        struct server *s = ex->front->server;
        if (strcmp(id, server_served_name(s)) != 0) {
                struct openai_error e;
                openai_error_set(&e, 404, "NotFoundError", "model", "The model `%.200s` does not exist.", id);
                return http_queue_error(ex, &e, 0);
        }
        struct json_object *m = json_object_new_object();
        json_object_object_add(m, "id", json_object_new_string(server_served_name(s)));
        json_object_object_add(m, "object", json_object_new_string("model"));
        json_object_object_add(m, "created", json_object_new_int64((int64_t) time(NULL)));
        json_object_object_add(m, "owned_by", json_object_new_string("asyncllmd"));
        return http_queue_json(ex, MHD_HTTP_OK, m);
}

static enum MHD_Result answer_health(struct http_exchange *ex) {
        struct server *s = ex->front->server;
        struct error err = { 0 };
        if (s->shutting_down)
                return http_reply_error(ex, 503, "shutting_down", NULL, "the daemon is stopping");
        if (async_llm_check_health(s->model.llm, s->settings->health_stall_timeout, &err) < 0)
                return http_reply_error(ex, 503, "engine_dead", NULL, err.message);
        return http_queue_body(ex, MHD_HTTP_OK, strdup(""), "text/plain", 0);
}

static enum MHD_Result answer_version(struct http_exchange *ex) {
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "version", json_object_new_string(PACKAGE_VERSION));
        return http_queue_json(ex, MHD_HTTP_OK, o);
}

static enum MHD_Result answer_metrics(struct http_exchange *ex) {
        return http_queue_body(ex, MHD_HTTP_OK, commands_metrics_text(ex->front->server), "text/plain; version=0.0.4", 0);
}

/* vLLM's /tokenize: {"prompt"} or {"messages", "add_generation_prompt"} (true unless false),
 * tokenized as a generate request's prompt is. */
static enum MHD_Result answer_tokenize(struct http_exchange *ex) {
        struct server *s = ex->front->server;
        struct json_object *root = json_tokener_parse(ex->body ? ex->body : ""), *v;
        bool chat = root && json_object_object_get_ex(root, "messages", NULL);
        bool generation_prompt = !(root && json_object_object_get_ex(root, "add_generation_prompt", &v) &&
                                   json_object_is_type(v, json_type_boolean) && !json_object_get_boolean(v));
        json_object_put(root);
        struct openai_error e;
        struct openai_request req;
        if (openai_parse(ex->body ? ex->body : "", ex->body_len, chat ? OPENAI_CHAT_COMPLETIONS : OPENAI_COMPLETIONS, &req,
                         &e) < 0)
                return http_queue_error(ex, &e, 0);
        const struct generate_message *g = &req.msg.generate;
        struct error err = { 0 };
        int32_t *ids = NULL;
        size_t n = 0;
        int r = 0;
        if (g->prompt_kind == PROMPT_TOKEN_IDS) {
                n = g->n_prompt_token_ids;
                ids = malloc((n ? n : 1) * sizeof(*ids));
                if (ids)
                        memcpy(ids, g->prompt_token_ids, n * sizeof(*ids));
                else
                        r = error_set(&err, ENOMEM, "out of memory");
        } else
                r = served_model_tokenize(&s->model, g->prompt_kind == PROMPT_TEXT ? g->prompt : NULL, g->messages,
                                          g->n_messages, generation_prompt, &ids, &n, &err);
        openai_request_free(&req);
        if (r < 0) {
                free(ids);
                return http_reply_error(ex, r == -ENOMEM ? 500 : 400, "invalid_request_error", NULL, err.message);
        }
        struct json_object *o = commands_tokenize_json(s, ids, n);
        free(ids);
        json_object_object_add(o, "token_strs", NULL);
        return http_queue_json(ex, MHD_HTTP_OK, o);
}

/* vLLM's /detokenize: {"tokens": [...]} to {"prompt": text}. */
static enum MHD_Result answer_detokenize(struct http_exchange *ex) {
        struct server *s = ex->front->server;
        struct json_object *root = json_tokener_parse(ex->body ? ex->body : ""), *tokens;
        if (!root || !json_object_is_type(root, json_type_object) || !json_object_object_get_ex(root, "tokens", &tokens) ||
            !json_object_is_type(tokens, json_type_array)) {
                json_object_put(root);
                return http_reply_error(ex, 400, "invalid_request_error", "tokens",
                                   "the body must be a JSON object with \"tokens\", a list of token ids");
        }
        size_t n = json_object_array_length(tokens);
        int32_t *ids = malloc((n ? n : 1) * sizeof(*ids));
        struct error err = { 0 };
        int r = ids ? 0 : error_set(&err, ENOMEM, "out of memory");
        for (size_t i = 0; r == 0 && i < n; i++) {
                struct json_object *t = json_object_array_get_idx(tokens, i);
                int64_t id = json_object_get_int64(t);
                if (!json_object_is_type(t, json_type_int) || id < 0 || id > INT32_MAX)
                        r = error_set(&err, EINVAL, "tokens[%zu] must be a token id", i);
                else
                        ids[i] = (int32_t) id;
        }
        json_object_put(root);
        char *text = NULL;
        size_t len = 0;
        if (r == 0)
                r = tokenizer_decode_text(s->model.tk, ids, n, false, &text, &len, &err);
        free(ids);
        if (r < 0)
                return http_reply_error(ex, r == -ENOMEM ? 500 : 400, "invalid_request_error", "tokens", err.message);
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "prompt", protocol_json_text(text, len));
        free(text);
        return http_queue_json(ex, MHD_HTTP_OK, o);
}

/* The client closed its socket (or half-closed it: an HTTP client that will read no more of
 * a request it sent): the request ends now, in the engine's current step, not at its next
 * output, which a suspended connection would wait for. */
static int on_hangup(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        struct http_exchange *ex = userdata;
        (void) fd;
        (void) revents;
        sd_event_source_set_enabled(source, SD_EVENT_OFF);
        if (!ex->finished) {
                log_request(LOG_DEBUG, ex->request_id, "HTTP client went away: request aborted");
                async_llm_abort(ex->front->server->model.llm, ex->request_id);
        }
        return 0;
}

static enum MHD_Result finish_generate(struct http_exchange *ex);

/* A submitted request's answer as far as its outputs go: a stream starts with its first
 * output (so that a request refused before any token, as overloaded for one, gets its error
 * status rather than a 200 and an error event); a whole answer with its last. Until then
 * the connection waits, suspended. */
static enum MHD_Result answer_submitted(struct http_exchange *ex) {
        if (ex->req.stream) {
                if (ex->responded)
                        return MHD_YES;
                if (ex->failure.status && !ex->events_len) {
                        ex->responded = true;
                        return http_queue_error(ex, &ex->failure, ex->retry_after);
                }
                if (ex->events_len || ex->finished) {
                        ex->responded = true;
                        struct MHD_Response *resp =
                                MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, read_events, ex, NULL);
                        if (!resp)
                                return MHD_NO;
                        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
                        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
                        enum MHD_Result q = http_queue_response(ex, MHD_HTTP_OK, resp);
                        MHD_destroy_response(resp);
                        return q;
                }
        } else if (ex->finished)
                return finish_generate(ex);
        ex->suspended = true;
        MHD_suspend_connection(ex->conn);
        return MHD_YES;
}

static enum MHD_Result start_generate(struct http_exchange *ex, enum openai_route route) {
        struct http_front *h = ex->front;
        struct server *s = h->server;
        struct openai_error e;
        struct error err = { 0 };
        char *rendered = NULL;

        if (s->shutting_down)
                return http_reply_error(ex, 503, "shutting_down", NULL, "the daemon is stopping and takes no new requests");
        if (openai_parse(ex->body ? ex->body : "", ex->body_len, route, &ex->req, &e) < 0)
                return http_queue_error(ex, &e, 0);
        if (ex->req.model && strcmp(ex->req.model, server_served_name(s)) != 0) {
                openai_error_set(&e, 404, "NotFoundError", "model", "The model `%s` does not exist.", ex->req.model);
                return http_queue_error(ex, &e, 0);
        }
        struct generate_message *g = &ex->req.msg.generate;
        if (g->prompt_kind == PROMPT_MESSAGES && chat_render(s->model.tk, g->messages, g->n_messages, true, &rendered, &err) < 0)
                return http_reply_error(ex, 400, "invalid_request_error", "messages", err.message);
        if (ex->req.echo && g->prompt_kind == PROMPT_TEXT && !(ex->prompt = strdup(g->prompt))) {
                free(rendered);
                return MHD_NO;
        }
        ex->choices = calloc(ex->req.n, sizeof(*ex->choices));
        if (!ex->choices) {
                free(rendered);
                return MHD_NO;
        }
        uint64_t serial = ++h->serial;
        snprintf(ex->request_id, sizeof(ex->request_id), "http/%" PRIu64, serial);
        snprintf(ex->answer_id, sizeof(ex->answer_id), "%s-%016" PRIx64 "%08x",
                 route == OPENAI_CHAT_COMPLETIONS ? "chatcmpl" : "cmpl", serial, (unsigned) getpid());
        ex->answer = (struct openai_answer) { ex->answer_id, server_served_name(s), (int64_t) time(NULL), 0, ex->prompt };
        ex->first_event = true;
        struct request_spec spec;
        generate_message_to_spec(g, ex->request_id, rendered, &spec);
        int r = async_llm_generate(s->model.llm, &spec, on_stream, ex, &ex->stream, &err);
        free(rendered);
        if (r == -EINVAL || r == -EOPNOTSUPP) {
                openai_refused(err.message, &e);
                return http_queue_error(ex, &e, 0);
        }
        if (r < 0)
                return http_reply_error(ex, r == -ESHUTDOWN ? 503 : 500, r == -ESHUTDOWN ? "engine_dead" : "internal_error",
                                   NULL, err.message);
        ex->submitted = true;
        ex->front->server->http_in_flight++;
        ex->answer.n_prompt = async_stream_prompt_tokens(ex->stream);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(ex->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci && sd_event_add_io(s->event, &ex->hangup, ci->connect_fd, EPOLLRDHUP, on_hangup, ex) < 0)
                ex->hangup = NULL; /* then the next output finds it gone */
        log_request(LOG_DEBUG, ex->request_id, "HTTP generate: %u prompt tokens", ex->answer.n_prompt);
        return answer_submitted(ex);
}

/* A non-streamed request's answer, once its last output came. */
static enum MHD_Result finish_generate(struct http_exchange *ex) {
        if (ex->failure.status)
                return http_queue_error(ex, &ex->failure, ex->retry_after);
        return http_queue_body(ex, MHD_HTTP_OK, openai_answer_body(&ex->req, &ex->answer, ex->choices, ex->req.n),
                          "application/json", 0);
}

/* Whether the request carries key (or key is NULL), compared in time that does not depend on
 * where the keys differ. */
static bool key_matches(struct http_exchange *ex, const char *key) {
        if (!key)
                return true;
        const char *auth = MHD_lookup_connection_value(ex->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        if (!auth || strncasecmp(auth, "Bearer ", 7) != 0)
                return false;
        const char *given = auth + 7;
        size_t n = strlen(key), m = strlen(given);
        unsigned char diff = n != m;
        for (size_t i = 0; i < n; i++)
                diff |= (unsigned char) key[i] ^ (unsigned char) (i < m ? given[i] : 0);
        return diff == 0;
}

enum route_access {
        ROUTE_OPEN,  /* as vLLM's /health, /version and /metrics */
        ROUTE_KEYED, /* the API key, when there is one: vLLM's /v1 routes and the tokenizer's */
        ROUTE_ADMIN, /* the admin key; absent (404) without --enable-admin-http */
};

static enum MHD_Result route(struct http_exchange *ex, const char *url, const char *method) {
        static const struct {
                const char *path, *method;
                int route; /* a generate route, or -1 */
                enum MHD_Result (*answer)(struct http_exchange *ex);
                enum route_access access;
        } routes[] = {
                { "/v1/completions", "POST", OPENAI_COMPLETIONS, NULL, ROUTE_KEYED },
                { "/v1/chat/completions", "POST", OPENAI_CHAT_COMPLETIONS, NULL, ROUTE_KEYED },
                { "/v1/embeddings", "POST", -1, http_embeddings_start, ROUTE_KEYED },
                { "/v1/models", "GET", -1, answer_models, ROUTE_KEYED },
                { "/tokenize", "POST", -1, answer_tokenize, ROUTE_KEYED },
                { "/detokenize", "POST", -1, answer_detokenize, ROUTE_KEYED },
                { "/health", "GET", -1, answer_health, ROUTE_OPEN },
                { "/version", "GET", -1, answer_version, ROUTE_OPEN },
                { "/metrics", "GET", -1, answer_metrics, ROUTE_OPEN },
                { "/pause", "POST", -1, http_admin_pause, ROUTE_ADMIN },
                { "/resume", "POST", -1, http_admin_resume, ROUTE_ADMIN },
                { "/is_paused", "GET", -1, http_admin_is_paused, ROUTE_ADMIN },
                { "/sleep", "POST", -1, http_admin_sleep, ROUTE_ADMIN },
                { "/wake_up", "POST", -1, http_admin_wake_up, ROUTE_ADMIN },
                { "/is_sleeping", "GET", -1, http_admin_is_sleeping, ROUTE_ADMIN },
                { "/reset_prefix_cache", "POST", -1, http_admin_reset_prefix_cache, ROUTE_ADMIN },
                { "/collective_rpc", "POST", -1, http_admin_collective_rpc, ROUTE_ADMIN },
                { "/reset_mm_cache", "POST", -1, http_admin_reset_mm_cache, ROUTE_ADMIN },
                { "/start_profile", "POST", -1, http_admin_start_profile, ROUTE_ADMIN },
                { "/stop_profile", "POST", -1, http_admin_stop_profile, ROUTE_ADMIN },
        };
        struct http_front *h = ex->front;
        if (http_cors_is_preflight(ex, method)) {
                struct MHD_Response *resp = http_cors_preflight_response(ex);
                if (!resp)
                        return MHD_NO;
                enum MHD_Result r = http_queue_response(ex, MHD_HTTP_NO_CONTENT, resp);
                MHD_destroy_response(resp);
                return r;
        }
        for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
                if (strcmp(url, routes[i].path) != 0 || (routes[i].access == ROUTE_ADMIN && !h->admin_key))
                        continue;
                if (routes[i].access == ROUTE_KEYED && !key_matches(ex, h->api_key))
                        return http_reply_error(ex, 401, "invalid_request_error", NULL,
                                           "a valid API key is required: send 'Authorization: Bearer KEY'");
                if (routes[i].access == ROUTE_ADMIN && !key_matches(ex, h->admin_key))
                        return http_reply_error(ex, 401, "invalid_request_error", NULL,
                                           "the admin routes want the admin key: send 'Authorization: Bearer ADMIN_KEY'");
                if (strcmp(method, routes[i].method) != 0) {
                        char msg[96];
                        snprintf(msg, sizeof(msg), "%s takes %s, not %s", url, routes[i].method, method);
                        return http_reply_error(ex, 405, "invalid_request_error", NULL, msg);
                }
                if (routes[i].route >= 0)
                        return start_generate(ex, (enum openai_route) routes[i].route);
                return routes[i].answer(ex);
        }
        if (strncmp(url, "/v1/models/", 11) == 0 && strcmp(method, "GET") == 0) {
                if (!key_matches(ex, h->api_key))
                        return http_reply_error(ex, 401, "invalid_request_error", NULL,
                                           "a valid API key is required: send 'Authorization: Bearer KEY'");
                return answer_model(ex, url + 11);
        }
        char msg[256];
        snprintf(msg, sizeof(msg), "no route %.100s; the routes are /v1/completions, /v1/chat/completions, /v1/embeddings, /v1/models, "
                 "/tokenize, /detokenize, /health, /version and /metrics", url);
        return http_reply_error(ex, 404, "NotFoundError", NULL, msg);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls) {
        struct http_front *h = cls;
        struct http_exchange *ex = *con_cls;
        (void) version;
        if (!ex) {
                if (!(ex = calloc(1, sizeof(*ex))))
                        return MHD_NO;
                ex->front = h;
                ex->conn = conn;
                ex->next = h->first;
                if (h->first)
                        h->first->prev = ex;
                h->first = ex;
                *con_cls = ex;
                return MHD_YES;
        }
        if (*upload_data_size) {
                size_t n = *upload_data_size;
                *upload_data_size = 0;
                if (ex->body_too_large || ex->body_len + n > h->server->settings->max_line_bytes) {
                        ex->body_too_large = true;
                        return MHD_YES;
                }
                if (ex->body_len + n + 1 > ex->body_cap) {
                        size_t cap = (ex->body_len + n + 1) * 2;
                        char *grown = realloc(ex->body, cap);
                        if (!grown)
                                return MHD_NO;
                        ex->body = grown;
                        ex->body_cap = cap;
                }
                memcpy(ex->body + ex->body_len, upload_data, n);
                ex->body_len += n;
                ex->body[ex->body_len] = '\0';
                return MHD_YES;
        }
        struct http_peer *peer = peer_of(conn);
        if (peer)
                peer->answering = true;
        if (ex->submitted)
                return answer_submitted(ex);
        if (ex->controlling)
                return http_admin_answer(ex);
        if (ex->embeddings)
                return http_embeddings_answer(ex);
        if (ex->body_too_large) {
                char msg[128];
                snprintf(msg, sizeof(msg), "the body is over %" PRIu64 " bytes (max-line-bytes)",
                         h->server->settings->max_line_bytes);
                return http_reply_error(ex, 413, "invalid_request_error", NULL, msg);
        }
        return route(ex, url, method);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
        struct http_front *h = cls;
        struct http_peer *p = *socket_context;
        if (code == MHD_CONNECTION_NOTIFY_STARTED) {
                if (!(p = calloc(1, sizeof(*p))))
                        return; /* not swept: libmicrohttpd's idle timeout still holds */
                p->conn = conn;
                p->since_usec = now_usec();
                p->next = h->peers;
                if (h->peers)
                        h->peers->prev = p;
                h->peers = p;
                *socket_context = p;
                return;
        }
        h->peer_closed = true;
        if (!p)
                return;
        if (p->prev)
                p->prev->next = p->next;
        else
                h->peers = p->next;
        if (p->next)
                p->next->prev = p->prev;
        free(p);
        *socket_context = NULL;
}

static int on_sweep(sd_event_source *source, uint64_t usec, void *userdata) {
        struct http_front *h = userdata;
        uint64_t limit = (uint64_t) (h->server->settings->client_timeout * 1e6), now = now_usec();
        bool cut = false;
        for (struct http_peer *p = h->peers; p; p = p->next) {
                if (p->answering || p->cut || now - p->since_usec < limit)
                        continue;
                const union MHD_ConnectionInfo *ci = MHD_get_connection_info(p->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
                if (ci) {
                        shutdown(ci->connect_fd, SHUT_RDWR); /* libmicrohttpd sees it end and closes it */
                        p->cut = cut = true;
                }
        }
        if (cut)
                sd_event_source_set_enabled(h->kick, SD_EVENT_ONESHOT);
        sd_event_source_set_time(source, usec + 1000000);
        return 0;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
        struct http_exchange *ex = *con_cls;
        struct http_peer *p = peer_of(conn);
        (void) cls;
        (void) toe;
        if (p) { /* a kept-alive connection's next request starts its clock now */
                p->answering = false;
                p->since_usec = now_usec();
        }
        if (!ex)
                return;
        exchange_free(ex);
        *con_cls = NULL;
}

/* libmicrohttpd's next run: at once (a defer source: a timer would wait for its accuracy,
 * 250 ms by default) when it has work in hand, else at its timeout, else on its epoll fd. */
static void rearm_timer(struct http_front *h) {
        MHD_UNSIGNED_LONG_LONG ms;
        if (MHD_get_timeout(h->mhd, &ms) != MHD_YES) {
                sd_event_source_set_enabled(h->timer, SD_EVENT_OFF);
                return;
        }
        if (ms == 0) {
                sd_event_source_set_enabled(h->kick, SD_EVENT_ONESHOT);
                return;
        }
        sd_event_source_set_time_relative(h->timer, ms * 1000);
        sd_event_source_set_enabled(h->timer, SD_EVENT_ONESHOT);
}

static void run_mhd(struct http_front *h) {
        h->peer_closed = false;
        MHD_run(h->mhd);
        rearm_timer(h);
        /* At max-connections libmicrohttpd takes its listening socket out of its epoll set and
         * puts it back only at the start of a run, which nothing would bring: new clients
         * would wait in the backlog for ever. One more run once a connection closed. */
        if (h->peer_closed)
                sd_event_source_set_enabled(h->kick, SD_EVENT_ONESHOT);
}

static int on_io(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        (void) source;
        (void) fd;
        (void) revents;
        run_mhd(userdata);
        return 0;
}

static int on_kick(sd_event_source *source, void *userdata) {
        (void) source;
        run_mhd(userdata);
        return 0;
}

static int on_timer(sd_event_source *source, uint64_t usec, void *userdata) {
        (void) source;
        (void) usec;
        run_mhd(userdata);
        return 0;
}

static bool is_loopback(const struct sockaddr *a) {
        if (a->sa_family == AF_INET)
                return (ntohl(((const struct sockaddr_in *) a)->sin_addr.s_addr) >> 24) == 127;
        if (a->sa_family == AF_INET6) {
                const struct in6_addr *in = &((const struct sockaddr_in6 *) a)->sin6_addr;
                return IN6_IS_ADDR_LOOPBACK(in) ||
                       (IN6_IS_ADDR_V4MAPPED(in) && in->s6_addr[12] == 127);
        }
        return false;
}

static int open_listener(const char *host, uint32_t port, bool any_address, int *ret, struct error *err) {
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
        struct addrinfo *list;
        char service[16];
        snprintf(service, sizeof(service), "%u", port);
        int r = getaddrinfo(host, service, &hints, &list);
        if (r != 0)
                return error_set(err, EINVAL, "--host %s: %s", host, gai_strerror(r));
        int fd = -1, e = 0;
        for (struct addrinfo *a = list; a; a = a->ai_next) {
                if (!any_address && !is_loopback(a->ai_addr)) {
                        e = EPERM;
                        continue;
                }
                fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                if (fd < 0) {
                        e = errno;
                        continue;
                }
                int one = 1;
                setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
                if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0)
                        break;
                e = errno;
                close(fd);
                fd = -1;
        }
        freeaddrinfo(list);
        if (fd < 0 && e == EPERM)
                return error_set(err, EPERM,
                                 "--host %s is not a loopback address: without an API key the HTTP front serves "
                                 "loopback only; set --api-key-file (or --api-key), or use 127.0.0.1 or ::1",
                                 host);
        /* what RestrictAddressFamilies=AF_UNIX answers: the unit passes the socket instead */
        if (fd < 0 && e == EAFNOSUPPORT)
                return error_set(err, e,
                                 "cannot listen on %s port %u: this sandbox allows no network socket of the "
                                 "daemon's own (asyncllmd.service: RestrictAddressFamilies=AF_UNIX); leave host and "
                                 "port unset and enable asyncllmd-http.socket (its ListenStream= sets the address)",
                                 host, port);
        if (fd < 0)
                return error_set(err, e, "cannot listen on %s port %u: %s", host, port, strerror(e));
        *ret = fd;
        return 0;
}

static void free_key(char *key) {
        if (key)
                explicit_bzero(key, strlen(key));
        free(key);
}

/* --NAME KEY, or the first line of --NAME-file FILE (not both); NULL when neither is set. */
static int load_key(const char *name, const char *key, const char *file, char **ret, struct error *err) {
        *ret = NULL;
        if (key && file)
                return error_set(err, EINVAL, "give --%s or --%s-file, not both", name, name);
        if (key) {
                if (!*key)
                        return error_set(err, EINVAL, "--%s is empty", name);
                return (*ret = strdup(key)) ? 0 : error_set(err, ENOMEM, "out of memory");
        }
        if (!file)
                return 0;
        FILE *f = fopen(file, "re");
        if (!f)
                return error_set(err, errno, "--%s-file %s: %s", name, file, strerror(errno));
        char *line = NULL;
        size_t cap = 0;
        ssize_t n = getline(&line, &cap, f);
        fclose(f);
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
                line[--n] = '\0';
        if (n <= 0) {
                free(line);
                return error_set(err, EINVAL, "--%s-file %s: its first line is empty", name, file);
        }
        *ret = line;
        return 0;
}

/* The admin routes' key: none without --enable-admin-http; with it, one that is set and is
 * not the API key, so that holding the key to generate never gives control of the engine. */
static int load_admin_key(const struct daemon_settings *st, const char *api_key, char **ret, struct error *err) {
        char *key;
        int r = load_key("admin-api-key", st->admin_api_key, st->admin_api_key_file, &key, err);
        *ret = NULL;
        if (r < 0)
                return r;
        if (!st->enable_admin_http) {
                if (key)
                        log_warning("an admin key is set, but the admin routes stay off without --enable-admin-http");
                free_key(key);
                return 0;
        }
        if (!key)
                return error_set(err, EINVAL, "--enable-admin-http needs an admin key: set --admin-api-key-file FILE "
                                              "(or --admin-api-key KEY) to a key other than the API key");
        if (api_key && strcmp(key, api_key) == 0) {
                free_key(key);
                return error_set(err, EINVAL, "the admin key is the API key, so that every client could control the "
                                              "engine: give --admin-api-key-file (or --admin-api-key) a key of its own");
        }
        *ret = key;
        return 0;
}

/* Whether the socket systemd passed listens on loopback only. */
static bool passed_is_loopback(int fd) {
        struct sockaddr_storage a;
        socklen_t len = sizeof(a);
        return getsockname(fd, (struct sockaddr *) &a, &len) == 0 && is_loopback((const struct sockaddr *) &a);
}

int http_front_start(struct server *s, struct http_front **ret, struct error *err) {
        const struct daemon_settings *st = s->settings;
        bool activated = s->http_listen_fd >= 0;
        *ret = NULL;
        if (!st->host && !st->port && !activated)
                return 0;
        const char *host = st->host ? st->host : DEFAULT_HOST;
        uint32_t port = st->port ? st->port : DEFAULT_PORT;
        struct http_front *h = calloc(1, sizeof(*h));
        if (!h)
                return error_set(err, ENOMEM, "out of memory");
        h->server = s;
        h->listen_fd = -1;
        int r = load_key("api-key", st->api_key, st->api_key_file, &h->api_key, err);
        if (r == 0)
                r = load_admin_key(st, h->api_key, &h->admin_key, err);
        if (r == 0 && activated) {
                /* the socket unit's address, whatever --host and --port say */
                if (!h->api_key && !passed_is_loopback(s->http_listen_fd))
                        r = error_set(err, EPERM, "the HTTP socket systemd passed is not on a loopback address: without "
                                                  "an API key the HTTP front serves loopback only; set --api-key-file");
                else
                        h->listen_fd = s->http_listen_fd;
        } else if (r == 0)
                r = open_listener(host, port, h->api_key != NULL, &h->listen_fd, err);
        if (r < 0) {
                free_key(h->api_key);
                free_key(h->admin_key);
                free(h);
                return r;
        }
        h->mhd = MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME, 0, NULL, NULL, on_request, h,
                                  MHD_OPTION_LISTEN_SOCKET, h->listen_fd,
                                  MHD_OPTION_CONNECTION_LIMIT, (unsigned) st->max_connections,
                                  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned) (st->client_timeout + 0.999),
                                  MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t) HEAD_MEMORY_LIMIT,
                                  MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                                  MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                                  MHD_OPTION_END);
        if (!h->mhd) {
                close(h->listen_fd);
                free_key(h->api_key);
                free_key(h->admin_key);
                free(h);
                return error_set(err, EIO, "cannot start the HTTP front on %s port %u (libmicrohttpd)", host, port);
        }
        const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_EPOLL_FD);
        if (!info || (r = sd_event_add_io(s->event, &h->io, info->epoll_fd, EPOLLIN, on_io, h)) < 0 ||
            (r = sd_event_add_time_relative(s->event, &h->timer, CLOCK_MONOTONIC, 0, 1000, on_timer, h)) < 0 ||
            (r = sd_event_add_defer(s->event, &h->kick, on_kick, h)) < 0 ||
            (r = sd_event_add_time_relative(s->event, &h->sweep, CLOCK_MONOTONIC, 1000000, 100000, on_sweep, h)) < 0 ||
            (r = sd_event_source_set_enabled(h->sweep, SD_EVENT_ON)) < 0 ||
            (r = sd_event_source_set_enabled(h->kick, SD_EVENT_OFF)) < 0) {
                http_front_free(h);
                return error_set(err, r < 0 ? -r : EIO, "cannot watch the HTTP front's events");
        }
        rearm_timer(h);
        if (activated)
                log_info("HTTP front on the socket systemd passed");
        else
                log_info("HTTP front on %s port %u", host, port);
        *ret = h;
        return 0;
}

void http_front_abort_all(struct http_front *h) {
        for (struct http_exchange *ex = h ? h->first : NULL; ex; ex = ex->next)
                if (ex->submitted && !ex->finished)
                        async_llm_abort(h->server->model.llm, ex->request_id);
}

void http_front_free(struct http_front *h) {
        if (!h)
                return;
        /* the suspended ones are resumed, and a few runs give the answers that are due (an
         * engine's death: its error) their chance to go out before the connections close;
         * an admin op still running answers that the daemon stops */
        for (struct http_exchange *ex = h->first; ex; ex = ex->next) {
                if (ex->call)
                        http_admin_abandon(ex, 503, "shutting_down", "the daemon is stopping");
                http_exchange_wake(ex);
        }
        for (int i = 0; h->mhd && i < 4; i++)
                MHD_run(h->mhd);
        if (h->mhd) {
                MHD_quiesce_daemon(h->mhd); /* the listening socket stays ours, to close */
                MHD_stop_daemon(h->mhd);    /* completes every connection: on_completed frees its exchange */
        }
        while (h->first)
                exchange_free(h->first);
        /* only now: waking an exchange above enables the kick */
        sd_event_source_disable_unref(h->io);
        sd_event_source_disable_unref(h->timer);
        sd_event_source_disable_unref(h->kick);
        sd_event_source_disable_unref(h->sweep);
        if (h->listen_fd >= 0)
                close(h->listen_fd);
        free_key(h->api_key);
        free_key(h->admin_key);
        free(h);
}
