/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat-template.h"
#include "commands.h"
#include "log.h"
#include "profiling.h"
#include "protocol.h"
#include "server.h"

static void send_line(struct connection *c, char *line, size_t len) {
        if (line)
                connection_send(c, line, len);
        free(line);
}

/* retry_after: the hint that goes with the overloaded code; the others have none. */
static void send_error(struct connection *c, const char *id, const char *code, const char *message, double retry_after) {
        snprintf(c->last_error_code, sizeof(c->last_error_code), "%s", code);
        snprintf(c->last_error_message, sizeof(c->last_error_message), "%s", message ? message : "");
        char *line = NULL;
        size_t len;
        if ((strcmp(code, PROTOCOL_OVERLOADED) == 0 ? protocol_overloaded_line(id, message, retry_after, &line, &len)
                                                    : protocol_error_line(id, code, message, &line, &len)) == 0)
                send_line(c, line, len);
        else /* out of memory even for the error: the hang-up tells the client instead */
                connection_close_later(c);
}

void commands_send_error(struct connection *c, const char *id, const char *code, const char *message) {
        send_error(c, id, code, message, 0);
}

/* Takes over result (which may be NULL). */
static void send_result(struct connection *c, const char *id, struct json_object *result) {
        char *line = NULL;
        size_t len;
        if (protocol_result_line(id, result, &line, &len) == 0)
                send_line(c, line, len);
        else
                commands_send_error(c, id, PROTOCOL_INTERNAL_ERROR, "out of memory");
        json_object_put(result);
}

int commands_send_hello(struct connection *c) {
        char *line = NULL;
        size_t len;
        int r = protocol_hello_line(PACKAGE_VERSION, c->server->model.name, &line, &len);
        if (r == 0)
                send_line(c, line, len);
        return r;
}

/* ---- requests ---- */

static struct uid_count *uid_count(struct server *s, uid_t uid, bool create) {
        char key[16];
        snprintf(key, sizeof(key), "%u", (unsigned) uid);
        struct uid_count *u = id_map_get(&s->uid_counts, key);
        if (u || !create)
                return u;
        u = calloc(1, sizeof(*u));
        if (!u || !(u->key = strdup(key)) || id_map_put(&s->uid_counts, u) < 0) {
                if (u)
                        free(u->key);
                free(u);
                return NULL;
        }
        return u;
}

void commands_request_done(struct daemon_request *r) {
        struct connection *c = r->conn;
        struct server *s = c->server;
        struct uid_count *u = uid_count(s, c->uid, false);
        if (u && --u->n == 0) {
                id_map_remove(&s->uid_counts, u);
                free(u->key);
                free(u);
        }
        if (!r->finished) { /* ended by its client leaving, or by the daemon stopping */
                const struct request_metrics never = { 0 };
                daemon_metrics_observe_finished(&s->metrics, &never, FINISH_ABORT, r->n_prompt, r->n_generated);
        }
        id_map_remove(&c->requests, r);
        id_map_remove(&s->requests, r);
        if (r->prev)
                r->prev->next = r->next;
        else
                c->first_request = r->next;
        if (r->next)
                r->next->prev = r->prev;
        async_stream_release(r->stream);
        log_request(LOG_DEBUG, r->daemon_id, "request done");
        free(r->client_id);
        free(r->daemon_id);
        free(r);
        if (c->closing && !c->first_request && !c->pending_replies)
                connection_close_later(c);
        server_request_ended(s);
}

int commands_send_output(struct daemon_request *r, const struct request_output *o) {
        struct server *s = r->conn->server;
        /* a delta output holds only new tokens; the other kinds repeat the earlier ones */
        uint64_t total = r->delta ? r->n_generated + protocol_output_tokens(o) : protocol_output_tokens(o);
        uint64_t n = total > r->n_generated ? total - r->n_generated : 0;
        if (n && o->metrics.last_token_time > 0) {
                double since = r->last_token_time > 0 ? r->last_token_time : o->metrics.first_token_time;
                /* the first token's latency is TTFT, not an inter-token gap */
                uint64_t gaps = r->last_token_time > 0 ? n : n - 1;
                if (gaps)
                        daemon_metrics_observe_tokens(&s->metrics, o->metrics.last_token_time - since, (uint32_t) gaps);
                r->last_token_time = o->metrics.last_token_time;
        }
        r->n_generated = (uint32_t) total;
        struct output_line_options opts = {
                .realtime_offset = s->realtime_offset,
                .prompt_tokens = r->n_prompt,
                .completion_tokens = r->n_generated,
                .logprobs = r->logprobs,
                .prompt_logprobs = r->prompt_logprobs,
                .encode = r->encode,
        };
        char *line = NULL;
        size_t len;
        if (protocol_output_line(r->client_id, o, &opts, &line, &len) < 0) {
                commands_send_error(r->conn, r->client_id, PROTOCOL_INTERNAL_ERROR,
                                    "out of memory encoding an output; the request ends");
                return -ENOMEM;
        }
        send_line(r->conn, line, len);
        if (o->finished) {
                r->finished = true;
                enum finish_reason reason = FINISH_NONE;
                for (uint32_t i = 0; i < o->n_outputs; i++)
                        if (o->outputs[i].finish_reason > reason)
                                reason = o->outputs[i].finish_reason;
                daemon_metrics_observe_finished(&s->metrics, &o->metrics, reason, r->n_prompt, r->n_generated);
                if (o->error && o->error_code == -EAGAIN) /* the slo policy's refusal: not now */
                        send_error(r->conn, r->client_id, PROTOCOL_OVERLOADED, o->error, o->retry_after);
                else if (o->error)
                        commands_send_error(r->conn, r->client_id,
                                            strncmp(o->error, "engine_dead", 11) == 0 ? PROTOCOL_ENGINE_DEAD : PROTOCOL_INTERNAL_ERROR,
                                            o->error);
        }
        return 0;
}

static void on_stream(struct async_stream *stream, void *userdata) {
        (void) stream;
        connection_pump_request(userdata);
}

static const char *error_code_for(int r) {
        switch (r) {
        case -EINVAL: return PROTOCOL_INVALID_PARAMS;
        case -EEXIST: return PROTOCOL_DUPLICATE_ID;
        case -ESHUTDOWN: return PROTOCOL_ENGINE_DEAD;
        case -EOPNOTSUPP: return PROTOCOL_INVALID_PARAMS;
        default: return PROTOCOL_INTERNAL_ERROR;
        }
}

static void do_generate(struct connection *c, struct client_message *m) {
        struct server *s = c->server;
        const struct daemon_settings *st = s->settings;
        struct generate_message *g = &m->generate;
        struct error err = { 0 };
        char *rendered = NULL;
        int r;

        if (s->shutting_down)
                return commands_send_error(c, m->id, PROTOCOL_SHUTTING_DOWN, "the daemon is stopping and takes no new requests");
        if (id_map_get(&c->requests, m->id))
                return commands_send_error(c, m->id, PROTOCOL_DUPLICATE_ID, "a request with this id is in flight on this connection");
        if (c->requests.n >= st->max_requests_per_connection) {
                char msg[128];
                snprintf(msg, sizeof(msg), "this connection has %u requests in flight (max-requests-per-connection)", c->requests.n);
                return commands_send_error(c, m->id, PROTOCOL_TOO_MANY_REQUESTS, msg);
        }
        struct uid_count *u = uid_count(s, c->uid, true);
        if (!u)
                return commands_send_error(c, m->id, PROTOCOL_INTERNAL_ERROR, "out of memory");
        if (u->n >= st->max_requests_per_uid) {
                char msg[128];
                snprintf(msg, sizeof(msg), "uid %u has %u requests in flight (max-requests-per-uid)", (unsigned) c->uid, u->n);
                if (u->n == 0) {
                        id_map_remove(&s->uid_counts, u);
                        free(u->key);
                        free(u);
                }
                return commands_send_error(c, m->id, PROTOCOL_TOO_MANY_REQUESTS, msg);
        }
        if (g->prompt_kind == PROMPT_MESSAGES &&
            chat_render(s->model.tk, g->messages, g->n_messages, true, &rendered, &err) < 0) {
                if (u->n == 0) {
                        id_map_remove(&s->uid_counts, u);
                        free(u->key);
                        free(u);
                }
                return commands_send_error(c, m->id, PROTOCOL_INVALID_PARAMS, err.message);
        }

        struct daemon_request *req = calloc(1, sizeof(*req));
        char daemon_id[PROTOCOL_ID_MAX + 32];
        snprintf(daemon_id, sizeof(daemon_id), "%" PRIu64 "/%s", c->serial, m->id);
        if (!req || !(req->client_id = strdup(m->id)) || !(req->daemon_id = strdup(daemon_id))) {
                r = -ENOMEM;
                error_set(&err, ENOMEM, "out of memory");
                goto fail;
        }
        req->conn = c;
        req->logprobs = g->params.logprobs;
        req->delta = g->params.output_kind == OUTPUT_DELTA;
        req->prompt_logprobs = g->params.prompt_logprobs;
        req->encode = g->encode;
        struct request_spec spec;
        generate_message_to_spec(g, req->daemon_id, rendered, &spec);
        /* linked first: the stream may notify (and finish) from inside generate */
        req->next = c->first_request;
        if (c->first_request)
                c->first_request->prev = req;
        c->first_request = req;
        if ((r = id_map_put(&c->requests, req)) < 0 || (r = id_map_put(&s->requests, req)) < 0) {
                error_set(&err, ENOMEM, "out of memory");
                goto unlink;
        }
        u->n++;
        r = async_llm_generate(s->model.llm, &spec, on_stream, req, &req->stream, &err);
        if (r < 0) {
                u->n--;
                goto unlink;
        }
        req->n_prompt = async_stream_prompt_tokens(req->stream);
        log_request(LOG_DEBUG, req->daemon_id, "generate: %u prompt tokens", req->n_prompt);
        free(rendered);
        return;
unlink:
        id_map_remove(&c->requests, req);
        id_map_remove(&s->requests, req);
        c->first_request = req->next;
        if (req->next)
                req->next->prev = NULL;
fail:
        if (u->n == 0) {
                id_map_remove(&s->uid_counts, u);
                free(u->key);
                free(u);
        }
        if (req) {
                free(req->client_id);
                free(req->daemon_id);
                free(req);
        }
        free(rendered);
        commands_send_error(c, m->id, error_code_for(r), err.message);
}

static bool abort_one(struct connection *c, const char *id) {
        struct server *s = c->server;
        struct daemon_request *r = id_map_get(&c->requests, id);
        if (r)
                return async_llm_abort(s->model.llm, r->daemon_id);
        /* admins may name any request as list shows it: the engine's id, whichever front;
         * others their own uid's requests of other connections (and D-Bus) */
        if (c->is_admin)
                return async_llm_abort(s->model.llm, id);
        r = id_map_get(&s->requests, id);
        return r && r->conn->uid == c->uid && async_llm_abort(s->model.llm, id);
}

/* {"aborted": bool} for one id; {"aborted": [bool, ...]} in the list's order for a list. */
static void do_abort(struct connection *c, struct client_message *m) {
        struct json_object *o = json_object_new_object(), *each = m->abort.list ? json_object_new_array() : NULL;
        for (size_t i = 0; i < m->abort.n; i++) {
                bool aborted = abort_one(c, m->abort.requests[i]);
                if (each)
                        json_object_array_add(each, json_object_new_boolean(aborted));
                else
                        json_object_object_add(o, "aborted", json_object_new_boolean(aborted));
        }
        if (each)
                json_object_object_add(o, "aborted", each);
        send_result(c, m->id, o);
}

/* ---- control ops answered by the engine thread ---- */

struct pending_reply {
        struct connection *conn;
        char *id;
        enum client_op op;
        double timeout;         /* collective_rpc's: seconds, 0 for none */
        sd_event_source *timer; /* while the timeout runs */
        bool answered;          /* the timeout answered for the engine, whose reply is dropped */
};

static void pending_free(struct pending_reply *p) {
        sd_event_source_disable_unref(p->timer);
        connection_unref(p->conn);
        free(p->id);
        free(p);
}

/* The answer is out: a half-closed client that waited for it is let go. */
static void pending_answered(struct pending_reply *p) {
        struct connection *c = p->conn;
        c->pending_replies--;
        if (c->closing && !c->first_request && !c->pending_replies)
                connection_close_later(c);
}

/* The engine's refusals of a control op: a bad argument, or a state that does not allow it
 * now (blocks held, a pause already draining, a drain cancelled by resume). */
static const char *control_error_code(int rc) {
        switch (rc) {
        case -ENOENT: return PROTOCOL_NOT_FOUND; /* an unknown collective_rpc method */
        case -EINVAL: return PROTOCOL_INVALID_PARAMS;
        case -EBUSY:
        case -EALREADY:
        case -ECANCELED: return PROTOCOL_INVALID_REQUEST;
        default: return PROTOCOL_INTERNAL_ERROR;
        }
}

static void on_reply(int rc, const char *message, struct json_object *result, void *userdata) {
        struct pending_reply *p = userdata;
        struct connection *c = p->conn;
        if (p->answered) {
                log_info("%s (requested by uid %u): answered after its timeout: %s", client_op_name(p->op),
                         (unsigned) c->uid, rc < 0 ? message : "done");
                return pending_free(p);
        }
        if (!c->closed) {
                if (rc < 0)
                        commands_send_error(c, p->id, control_error_code(rc), message && *message ? message : strerror(-rc));
                else {
                        struct json_object *o = result ? json_object_get(result) : json_object_new_object();
                        if (!result && p->op == CLIENT_OP_PAUSE)
                                json_object_object_add(o, "paused", json_object_new_boolean(true));
                        send_result(c, p->id, o);
                }
        }
        log_info("%s (requested by uid %u): %s", client_op_name(p->op), (unsigned) c->uid, rc < 0 ? message : "done");
        pending_answered(p);
        pending_free(p);
}

/* The workers did not answer in time: the client hears so now, and the reply, if it ever
 * comes, is dropped. */
static int on_control_timeout(sd_event_source *source, uint64_t usec, void *userdata) {
        struct pending_reply *p = userdata;
        struct connection *c = p->conn;
        char message[160];
        (void) source, (void) usec;
        p->timer = sd_event_source_disable_unref(p->timer);
        p->answered = true;
        snprintf(message, sizeof(message), "%s: no answer from the engine's workers within %g s (timeout)",
                 client_op_name(p->op), p->timeout);
        log_warning("%s (requested by uid %u)", message, (unsigned) c->uid);
        if (!c->closed)
                commands_send_error(c, p->id, PROTOCOL_TIMED_OUT, message);
        pending_answered(p);
        return 0;
}

static struct pending_reply *pending_new(struct connection *c, const struct client_message *m) {
        struct pending_reply *p = calloc(1, sizeof(*p));
        if (!p || !(p->id = strdup(m->id))) {
                free(p);
                return NULL;
        }
        p->conn = c;
        p->op = m->op;
        c->refs++;
        c->pending_replies++;
        return p;
}

int commands_control(struct server *s, const struct client_message *m, async_llm_reply_fn fn, void *userdata) {
        struct async_llm *llm = s->model.llm;
        switch (m->op) {
        case CLIENT_OP_PAUSE:
                return async_llm_pause(llm, m->pause.mode, m->pause.clear_cache, fn, userdata);
        case CLIENT_OP_RESUME:
                return async_llm_resume(llm, fn, userdata);
        case CLIENT_OP_SLEEP:
                return async_llm_sleep(llm, m->sleep.level, fn, userdata);
        case CLIENT_OP_WAKE_UP:
                return async_llm_wake_up(llm, m->wake_up.tags, fn, userdata);
        case CLIENT_OP_RESET_PREFIX_CACHE:
                return async_llm_reset_prefix_cache(llm, m->reset_prefix_cache.preempt, fn, userdata);
        case CLIENT_OP_COLLECTIVE_RPC:
                return async_llm_collective_rpc(llm, m->collective_rpc.method,
                                                m->collective_rpc.args ? json_object_get(m->collective_rpc.args) : NULL,
                                                fn, userdata);
        default:
                return -EOPNOTSUPP; /* not a control op */
        }
}

static void do_control(struct connection *c, struct client_message *m) {
        struct pending_reply *p = pending_new(c, m);
        if (!p)
                return commands_send_error(c, m->id, PROTOCOL_INTERNAL_ERROR, "out of memory");
        int r = 0;
        if (m->op == CLIENT_OP_COLLECTIVE_RPC && m->collective_rpc.timeout > 0) {
                p->timeout = m->collective_rpc.timeout;
                r = sd_event_add_time_relative(c->server->event, &p->timer, CLOCK_MONOTONIC,
                                               (uint64_t) (p->timeout * 1e6), 0, on_control_timeout, p);
        }
        if (r >= 0)
                r = commands_control(c->server, m, on_reply, p);
        if (r < 0) {
                c->pending_replies--;
                commands_send_error(c, m->id, error_code_for(r), strerror(-r));
                pending_free(p);
        }
}

/* ---- read-only ops ---- */

static struct json_object *health_json(struct server *s) {
        struct error err = { 0 };
        int r = async_llm_check_health(s->model.llm, s->settings->health_stall_timeout, &err);
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "healthy", json_object_new_boolean(r == 0));
        json_object_object_add(o, "status", json_object_new_string(r == 0 ? "ok" : r == -ESHUTDOWN ? "dead" : "stalled"));
        if (r < 0)
                json_object_object_add(o, "message", json_object_new_string(err.message));
        return o;
}

const char *commands_engine_state(const struct async_llm_stats *st) {
        return st->engine.dead ? "dead" : st->engine.released ? "sleeping" : st->engine.paused ? "paused" : "running";
}

size_t commands_stats(struct server *s, struct stats_entry ret[static COMMANDS_STATS_MAX]) {
        struct async_llm_stats st;
        size_t n = 0;

        async_llm_stats(s->model.llm, &st);
        const struct engine_stats *e = &st.engine.stats;
        ret[n++] = (struct stats_entry) { "state", 's', .s = commands_engine_state(&st) };
        ret[n++] = (struct stats_entry) { "num_requests_running", 'u', .u = e->n_running };
        ret[n++] = (struct stats_entry) { "num_requests_waiting", 'u', .u = e->n_waiting + st.engine.n_deferred };
        ret[n++] = (struct stats_entry) {
                "kv_cache_usage", 'd', .d = e->kv_blocks_total ? (double) e->kv_blocks_used / e->kv_blocks_total : 0,
        };
        ret[n++] = (struct stats_entry) { "kv_blocks_used", 'u', .u = e->kv_blocks_used };
        ret[n++] = (struct stats_entry) { "kv_blocks_total", 'u', .u = e->kv_blocks_total };
        ret[n++] = (struct stats_entry) { "prefix_cache_queries", 't', .t = e->prefix_query_tokens };
        ret[n++] = (struct stats_entry) { "prefix_cache_hits", 't', .t = e->prefix_hit_tokens };
        ret[n++] = (struct stats_entry) { "prompt_tokens", 't', .t = e->prompt_tokens };
        ret[n++] = (struct stats_entry) { "generation_tokens", 't', .t = e->generation_tokens };
        ret[n++] = (struct stats_entry) { "preemptions", 't', .t = e->preemptions };
        ret[n++] = (struct stats_entry) { "steps", 't', .t = e->steps };
        ret[n++] = (struct stats_entry) {
                "tokens_per_step", 'd', .d = e->steps ? (double) e->scheduled_tokens / e->steps : 0,
        };
        ret[n++] = (struct stats_entry) { "connections", 'u', .u = s->n_connections };
        ret[n++] = (struct stats_entry) { "requests_in_flight", 'u', .u = server_in_flight(s) };
        ret[n++] = (struct stats_entry) {
                "scheduling_policy", 's', .s = scheduling_policy_names[s->model.config.scheduling_policy],
        };
        ret[n++] = (struct stats_entry) { "slo_rejected", 't', .t = e->slo_rejected };
        ret[n++] = (struct stats_entry) { "slo_demoted", 't', .t = e->slo_demoted };
        ret[n++] = (struct stats_entry) { "step_model_samples", 't', .t = e->step_model_samples };
        ret[n++] = (struct stats_entry) { "step_model_error_p50", 'd', .d = e->step_model_error_p50 };
        ret[n++] = (struct stats_entry) { "step_model_error_p99", 'd', .d = e->step_model_error_p99 };
        const struct backend_memory_usage *mem = &st.engine.memory;
        ret[n++] = (struct stats_entry) { "memory_weights_bytes", 't', .t = mem->weights_bytes };
        ret[n++] = (struct stats_entry) { "memory_kv_cache_bytes", 't', .t = mem->kv_cache_bytes };
        ret[n++] = (struct stats_entry) { "device_memory_free_bytes", 't', .t = mem->device_free_bytes };
        ret[n++] = (struct stats_entry) { "device_memory_total_bytes", 't', .t = mem->device_total_bytes };
        return n;
}

static struct json_object *stats_json(struct server *s) {
        struct stats_entry entries[COMMANDS_STATS_MAX];
        size_t n = commands_stats(s, entries);
        struct json_object *o = json_object_new_object();
        for (size_t i = 0; i < n; i++) {
                const struct stats_entry *e = &entries[i];
                json_object_object_add(o, e->name, e->type == 's' ? json_object_new_string(e->s)
                                                   : e->type == 'u' ? json_object_new_int64(e->u)
                                                   : e->type == 't' ? json_object_new_uint64(e->t)
                                                                    : json_object_new_double(e->d));
        }
        return o;
}

/* The tokenizer's side of the model: its special tokens and whether it has a chat template. */
static struct json_object *tokenizer_json(const struct tokenizer *tk) {
        struct json_object *o = json_object_new_object(), *eog = json_object_new_array();
        size_t n_eog;
        const int32_t *eog_ids = tokenizer_eog_ids(tk, &n_eog);
        json_object_object_add(o, "vocab_size", json_object_new_int64(tokenizer_vocab_size(tk)));
        const struct {
                const char *name;
                int32_t id;
        } specials[] = {
                { "bos_token", tokenizer_bos(tk) },
                { "eos_token", tokenizer_eos(tk) },
                { "unk_token", tokenizer_unk(tk) },
                { "pad_token", tokenizer_pad(tk) },
        };
        for (size_t i = 0; i < sizeof(specials) / sizeof(*specials); i++) {
                char key[32];
                size_t len;
                const char *text = tokenizer_valid_id(tk, specials[i].id) ? tokenizer_token_text(tk, specials[i].id, &len)
                                                                          : NULL;
                snprintf(key, sizeof(key), "%s_id", specials[i].name);
                json_object_object_add(o, key, text ? json_object_new_int(specials[i].id) : NULL);
                json_object_object_add(o, specials[i].name, text ? protocol_json_text(text, len) : NULL);
        }
        for (size_t i = 0; i < n_eog; i++)
                json_object_array_add(eog, json_object_new_int(eog_ids[i]));
        json_object_object_add(o, "eog_token_ids", eog);
        json_object_object_add(o, "add_bos_token", json_object_new_boolean(tokenizer_add_bos(tk)));
        const char *template = tokenizer_chat_template(tk);
        json_object_object_add(o, "chat_template", template ? json_object_new_string(template) : NULL);
        json_object_object_add(o, "chat_template_replaced", json_object_new_boolean(tokenizer_chat_template_replaced(tk)));
        return o;
}

static struct json_object *model_json(struct server *s) {
        const struct model *md = s->model.model;
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "name", json_object_new_string(s->model.name));
        json_object_object_add(o, "architecture", json_object_new_string(md->architecture ? md->architecture : ""));
        json_object_object_add(o, "path", json_object_new_string(s->settings->model));
        json_object_object_add(o, "context_length", json_object_new_int64(md->hp.n_ctx_max));
        json_object_object_add(o, "max_model_len", json_object_new_int64(s->model.config.max_model_len));
        json_object_object_add(o, "vocab_size", json_object_new_int64(md->hp.n_vocab));
        json_object_object_add(o, "device", json_object_new_string(s->settings->device));
        json_object_object_add(o, "tokenizer", tokenizer_json(s->model.tk));
        return o;
}

struct json_object *commands_tokenize_json(struct server *s, const int32_t *ids, size_t n) {
        struct json_object *o = json_object_new_object(), *tokens = json_object_new_array();
        for (size_t i = 0; i < n; i++)
                json_object_array_add(tokens, json_object_new_int(ids[i]));
        json_object_object_add(o, "count", json_object_new_int64((int64_t) n));
        json_object_object_add(o, "max_model_len", json_object_new_int64(s->model.config.max_model_len));
        json_object_object_add(o, "tokens", tokens);
        return o;
}

static void do_tokenize(struct connection *c, const struct client_message *m) {
        const struct generate_message *g = &m->generate;
        struct error err = { 0 };
        int32_t *ids;
        size_t n;
        int r = served_model_tokenize(&c->server->model, g->prompt_kind == PROMPT_TEXT ? g->prompt : NULL, g->messages,
                                      g->n_messages, g->add_generation_prompt, &ids, &n, &err);
        if (r < 0)
                return commands_send_error(c, m->id, error_code_for(r), err.message);
        struct json_object *o = commands_tokenize_json(c->server, ids, n);
        free(ids);
        send_result(c, m->id, o);
}

static void do_detokenize(struct connection *c, const struct client_message *m) {
        struct error err = { 0 };
        char *text;
        size_t len;
        int r = tokenizer_decode_text(c->server->model.tk, m->detokenize.tokens, m->detokenize.n, false, &text, &len, &err);
        if (r < 0)
                return commands_send_error(c, m->id, error_code_for(r), err.message);
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "prompt", protocol_json_text(text, len));
        free(text);
        send_result(c, m->id, o);
}

/* What the served model can do, as vLLM's get_supported_tasks names it. */
static struct json_object *supported_tasks_json(const struct server *s) {
        struct json_object *o = json_object_new_object(), *tasks = json_object_new_array();
        json_object_array_add(tasks, json_object_new_string("generate"));
        if (async_llm_can_encode(s->model.llm))
                json_object_array_add(tasks, json_object_new_string("encode"));
        json_object_object_add(o, "tasks", tasks);
        return o;
}

/* vLLM's reset_mm_cache and reset_encoder_cache, for its clients' sake: a text-only model
 * has neither cache, so there is nothing to reset. */
static struct json_object *no_cache_json(const char *which) {
        char message[96];
        struct json_object *o = json_object_new_object();
        snprintf(message, sizeof(message), "the model has no %s cache: nothing to reset", which);
        json_object_object_add(o, "reset", json_object_new_boolean(false));
        json_object_object_add(o, "message", json_object_new_string(message));
        return o;
}

static void do_profile(struct connection *c, const struct client_message *m) {
        struct error err = { 0 };
        struct json_object *o = NULL;
        int r = m->op == CLIENT_OP_START_PROFILE ? profiling_start(c->server, &err) : profiling_stop(c->server, &o, &err);
        if (r < 0)
                return commands_send_error(c, m->id, profiling_refused(r) ? PROTOCOL_INVALID_REQUEST : PROTOCOL_INTERNAL_ERROR,
                                           err.message);
        send_result(c, m->id, o ? o : json_object_new_object());
}

static void on_drained(int result, void *userdata) {
        struct pending_reply *p = userdata;
        struct connection *c = p->conn;
        if (result != -ESHUTDOWN && !c->closed) {
                if (result == 0) {
                        struct json_object *o = json_object_new_object();
                        json_object_object_add(o, "drained", json_object_new_boolean(true));
                        send_result(c, p->id, o);
                } else {
                        char message[160];
                        uint32_t n = server_in_flight(c->server);
                        snprintf(message, sizeof(message), "%u request%s still in flight after %g s (timeout)", n,
                                 n == 1 ? "" : "s", p->timeout);
                        commands_send_error(c, p->id, PROTOCOL_TIMED_OUT, message);
                }
        }
        pending_answered(p);
        pending_free(p);
}

static void do_drain(struct connection *c, const struct client_message *m) {
        struct pending_reply *p = pending_new(c, m);
        if (!p)
                return commands_send_error(c, m->id, PROTOCOL_INTERNAL_ERROR, "out of memory");
        p->timeout = m->drain.timeout;
        if (drain_wait(c->server, p->timeout, on_drained, p) < 0) {
                c->pending_replies--;
                commands_send_error(c, m->id, PROTOCOL_INTERNAL_ERROR, "out of memory");
                pending_free(p);
        }
}

struct listing {
        struct connection *conn;
        struct json_object *ids;
};

/* This connection's requests under its ids, the others under the engine's. */
static void list_one(const char *request_id, void *userdata) {
        struct listing *l = userdata;
        struct daemon_request *r = id_map_get(&l->conn->server->requests, request_id);
        json_object_array_add(l->ids, json_object_new_string(r && r->conn == l->conn ? r->client_id : request_id));
}

/* Admins see every request, whichever front sent it; others only their own uid's, so that
 * nothing of another user's work shows. */
static struct json_object *list_json(struct connection *c) {
        struct json_object *a = json_object_new_array();
        struct listing l = { c, a };
        if (c->is_admin)
                async_llm_for_each_request(c->server->model.llm, list_one, &l);
        else
                for (struct connection *other = c->server->connections; other; other = other->next)
                        for (struct daemon_request *r = other->first_request; r; r = r->next)
                                if (other->uid == c->uid)
                                        list_one(r->daemon_id, &l);
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "requests", a);
        return o;
}

char *commands_metrics_text(struct server *s) {
        struct async_llm_stats st;
        async_llm_stats(s->model.llm, &st);
        daemon_metrics_observe_steps(&s->metrics, &st.engine.stats); /* the steps no engine event brought yet */
        /* labelled with the name clients use, as vLLM's are */
        return daemon_metrics_render(&s->metrics, &st,
                                     s->settings->served_model_name ? s->settings->served_model_name : s->model.name);
}

static void do_metrics(struct connection *c, const struct client_message *m) {
        char *text = commands_metrics_text(c->server);
        if (!text)
                return commands_send_error(c, m->id, PROTOCOL_INTERNAL_ERROR, "out of memory");
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "content_type", json_object_new_string("text/plain; version=0.0.4"));
        json_object_object_add(o, "text", json_object_new_string(text));
        free(text);
        send_result(c, m->id, o);
}

static void do_hello(struct connection *c, const struct client_message *m) {
        int32_t v;
        if (protocol_negotiate(m, &v) < 0)
                return commands_send_error(c, m->id, PROTOCOL_UNSUPPORTED_PROTOCOL, "this daemon speaks protocol version 1 only");
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "protocol", json_object_new_int(v));
        send_result(c, m->id, o);
}

void commands_handle_line(struct connection *c, const char *line, size_t len) {
        struct client_message m;
        struct protocol_error perr = { 0 };
        if (protocol_parse(line, len, &m, &perr) < 0) {
                char *out = NULL;
                size_t n;
                snprintf(c->last_error_code, sizeof(c->last_error_code), "%s", perr.code);
                snprintf(c->last_error_message, sizeof(c->last_error_message), "%s", perr.message);
                if (protocol_parse_error_line(&perr, &out, &n) == 0)
                        send_line(c, out, n);
                return;
        }
        if (m.op != CLIENT_OP_HELLO && !c->may_generate)
                commands_send_error(c, m.id, PROTOCOL_PERMISSION_DENIED,
                                    "only root and members of the service group may use this daemon");
        else if (client_op_is_admin(m.op) && !c->is_admin)
                commands_send_error(c, m.id, PROTOCOL_PERMISSION_DENIED,
                                    "only root and members of the admin group may control the engine");
        else
                switch (m.op) {
                case CLIENT_OP_GENERATE:
                case CLIENT_OP_ENCODE: do_generate(c, &m); break;
                case CLIENT_OP_ABORT: do_abort(c, &m); break;
                case CLIENT_OP_PAUSE:
                case CLIENT_OP_RESUME:
                case CLIENT_OP_SLEEP:
                case CLIENT_OP_WAKE_UP:
                case CLIENT_OP_RESET_PREFIX_CACHE:
                case CLIENT_OP_COLLECTIVE_RPC: do_control(c, &m); break;
                case CLIENT_OP_IS_PAUSED: {
                        struct json_object *o = json_object_new_object();
                        json_object_object_add(o, "paused", json_object_new_boolean(async_llm_is_paused(c->server->model.llm)));
                        send_result(c, m.id, o);
                        break;
                }
                case CLIENT_OP_IS_SLEEPING: {
                        struct json_object *o = json_object_new_object();
                        json_object_object_add(o, "sleeping", json_object_new_boolean(async_llm_is_sleeping(c->server->model.llm)));
                        send_result(c, m.id, o);
                        break;
                }
                case CLIENT_OP_HEALTH: send_result(c, m.id, health_json(c->server)); break;
                case CLIENT_OP_STATS: send_result(c, m.id, stats_json(c->server)); break;
                case CLIENT_OP_MODEL: send_result(c, m.id, model_json(c->server)); break;
                case CLIENT_OP_LIST: send_result(c, m.id, list_json(c)); break;
                case CLIENT_OP_METRICS: do_metrics(c, &m); break;
                case CLIENT_OP_TOKENIZE: do_tokenize(c, &m); break;
                case CLIENT_OP_DETOKENIZE: do_detokenize(c, &m); break;
                case CLIENT_OP_GET_SUPPORTED_TASKS: send_result(c, m.id, supported_tasks_json(c->server)); break;
                case CLIENT_OP_WAIT_FOR_REQUESTS_TO_DRAIN: do_drain(c, &m); break;
                case CLIENT_OP_RESET_MM_CACHE: send_result(c, m.id, no_cache_json("multimodal")); break;
                case CLIENT_OP_RESET_ENCODER_CACHE: send_result(c, m.id, no_cache_json("encoder")); break;
                case CLIENT_OP_START_PROFILE:
                case CLIENT_OP_STOP_PROFILE: do_profile(c, &m); break;
                case CLIENT_OP_HELLO: do_hello(c, &m); break;
                case _CLIENT_OP_MAX: break;
                }
        client_message_free(&m);
}

const struct connection_protocol commands_protocol = {
        .send_hello = commands_send_hello,
        .handle_line = commands_handle_line,
        .send_error = commands_send_error,
        .send_output = commands_send_output,
        .request_done = commands_request_done,
};
