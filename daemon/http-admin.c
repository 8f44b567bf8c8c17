/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "commands.h"
#include "http-admin.h"
#include "log.h"
#include "profiling.h"
#include "protocol.h"
#include "server.h"

/* An admin op the engine answers later, kept apart from its exchange, which may be gone by
 * then (its timeout passed, the daemon stopped). */
struct control_call {
        struct http_exchange *ex; /* NULL once nobody waits for the answer */
        enum client_op op;
        char from[INET6_ADDRSTRLEN + 8]; /* the client's address, for the log */
};

/* The answer once the engine's reply came, or the wait for it. */
enum MHD_Result http_admin_answer(struct http_exchange *ex) {
        if (ex->call) {
                ex->suspended = true;
                MHD_suspend_connection(ex->conn);
                return MHD_YES;
        }
        if (ex->failure.status)
                return http_queue_error(ex, &ex->failure, 0);
        struct json_object *o = ex->reply ? ex->reply : json_object_new_object();
        ex->reply = NULL;
        return http_queue_json(ex, MHD_HTTP_OK, o);
}

/* Nobody waits for the op's answer any more: ex answers this error instead. */
void http_admin_abandon(struct http_exchange *ex, int status, const char *type, const char *message) {
        ex->call->ex = NULL;
        ex->call = NULL;
        openai_error_set(&ex->failure, status, type, NULL, "%s", message);
        http_exchange_wake(ex);
}

/* vLLM's bodies: a status for pause and resume, {"success"} for the cache (false, not an
 * error, when running requests hold blocks: the caller may retry), {"results"} for an RPC;
 * the socket's result for the others. */
static struct json_object *control_answer(enum client_op op, int rc, const char *message, struct json_object *result) {
        struct json_object *o = json_object_new_object();
        switch (op) {
        case CLIENT_OP_PAUSE:
        case CLIENT_OP_RESUME:
                json_object_object_add(o, "status", json_object_new_string(op == CLIENT_OP_PAUSE ? "paused" : "resumed"));
                break;
        case CLIENT_OP_RESET_PREFIX_CACHE:
                json_object_object_add(o, "success", json_object_new_boolean(rc == 0));
                if (rc < 0)
                        json_object_object_add(o, "message", json_object_new_string(message));
                break;
        case CLIENT_OP_COLLECTIVE_RPC:
                json_object_object_add(o, "results", json_object_get(result));
                break;
        default:
                if (result) {
                        json_object_put(o);
                        o = json_object_get(result);
                }
                break;
        }
        return o;
}

/* The HTTP status of an op the engine refused, as the socket's control_error_code says it. */
static void control_failure(struct openai_error *e, int rc, const char *message) {
        switch (rc) {
        case -EINVAL:
                openai_error_set(e, 400, "invalid_request_error", NULL, "%s", message);
                break;
        case -ENOENT: /* a collective_rpc method the workers do not have */
                openai_error_set(e, 400, "invalid_request_error", "method", "%s", message);
                break;
        case -EBUSY:
        case -EALREADY:
        case -ECANCELED: /* the engine's state does not allow it now */
                openai_error_set(e, 409, "invalid_request_error", NULL, "%s", message);
                break;
        case -ESHUTDOWN:
                openai_error_set(e, 503, "engine_dead", NULL, "%s", message);
                break;
        default:
                openai_error_set(e, 500, "internal_error", NULL, "%s", message);
                break;
        }
}

static void on_control_reply(int rc, const char *message, struct json_object *result, void *userdata) {
        struct control_call *call = userdata;
        struct http_exchange *ex = call->ex;
        if (rc < 0 && (!message || !*message))
                message = strerror(-rc);
        log_info("%s (requested over HTTP from %s): %s", client_op_name(call->op), call->from, rc < 0 ? message : "done");
        if (ex) {
                ex->call = NULL;
                if (rc < 0 && !(call->op == CLIENT_OP_RESET_PREFIX_CACHE && rc == -EBUSY))
                        control_failure(&ex->failure, rc, message);
                else
                        ex->reply = control_answer(call->op, rc, message, result);
                http_exchange_wake(ex);
        }
        free(call);
}

static int on_control_deadline(sd_event_source *source, uint64_t usec, void *userdata) {
        struct http_exchange *ex = userdata;
        (void) source;
        (void) usec;
        if (ex->call)
                http_admin_abandon(ex, 504, "timeout", "the workers did not answer within the request's timeout");
        return 0;
}

static void peer_address(struct MHD_Connection *conn, char *buf, size_t size) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        snprintf(buf, size, "?");
        if (ci && ci->client_addr)
                getnameinfo(ci->client_addr,
                            ci->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in),
                            buf, (socklen_t) size, NULL, 0, NI_NUMERICHOST);
}

/* Runs op with msg's fields (taken over) through the socket's parser; timeout (seconds, 0:
 * none) bounds the wait for the engine's answer. */
static enum MHD_Result start_control(struct http_exchange *ex, enum client_op op, struct json_object *msg,
                                     double timeout) {
        struct server *s = ex->front->server;
        struct client_message m;
        struct protocol_error perr = { 0 };
        struct openai_error e;

        json_object_object_add(msg, "op", json_object_new_string(client_op_name(op)));
        json_object_object_add(msg, "id", json_object_new_string("http"));
        const char *line = json_object_to_json_string_ext(msg, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
        int r = line ? protocol_parse(line, strlen(line), &m, &perr) : -ENOMEM;
        json_object_put(msg);
        if (r == -EINVAL) {
                openai_refused(perr.message, &e);
                return http_queue_error(ex, &e, 0);
        }
        if (r < 0)
                return http_reply_error(ex, 500, "internal_error", NULL, "out of memory");
        struct control_call *call = calloc(1, sizeof(*call));
        if (!call) {
                client_message_free(&m);
                return http_reply_error(ex, 500, "internal_error", NULL, "out of memory");
        }
        call->ex = ex;
        call->op = op;
        peer_address(ex->conn, call->from, sizeof(call->from));
        r = commands_control(s, &m, on_control_reply, call);
        client_message_free(&m);
        if (r < 0) {
                free(call);
                control_failure(&e, r, strerror(-r));
                return http_queue_error(ex, &e, 0);
        }
        ex->call = call;
        ex->controlling = true;
        if (timeout > 0 && sd_event_add_time_relative(s->event, &ex->deadline, CLOCK_MONOTONIC, (uint64_t) (timeout * 1e6),
                                                      1000, on_control_deadline, ex) < 0)
                ex->deadline = NULL; /* then it waits as long as the engine takes */
        return http_admin_answer(ex);
}

/* The query parameter name as a boolean, spelled as FastAPI takes it: *ret 1 or 0, or -1
 * when absent. 0, or -EINVAL with the 400 in e. */
static int query_bool(struct http_exchange *ex, const char *name, int *ret, struct openai_error *e) {
        static const char *const yes[] = { "true", "1", "yes", "on" }, *const no[] = { "false", "0", "no", "off" };
        const char *v = MHD_lookup_connection_value(ex->conn, MHD_GET_ARGUMENT_KIND, name);
        *ret = -1;
        if (!v)
                return 0;
        for (size_t i = 0; i < 4; i++)
                if (strcasecmp(v, yes[i]) == 0 || strcasecmp(v, no[i]) == 0) {
                        *ret = strcasecmp(v, yes[i]) == 0;
                        return 0;
                }
        return openai_error_set(e, 400, "invalid_request_error", name, "%s must be true or false, got '%.64s'", name, v);
}

/* POST /pause?mode=abort|wait|keep&wait_for_inflight_requests=BOOL&clear_cache=BOOL: the
 * socket's modes; wait_for_inflight_requests=true, vLLM's older spelling, is mode=wait. */
enum MHD_Result http_admin_pause(struct http_exchange *ex) {
        const char *mode = MHD_lookup_connection_value(ex->conn, MHD_GET_ARGUMENT_KIND, "mode");
        struct openai_error e;
        int clear_cache, wait_for_inflight;
        if (query_bool(ex, "clear_cache", &clear_cache, &e) < 0 ||
            query_bool(ex, "wait_for_inflight_requests", &wait_for_inflight, &e) < 0)
                return http_queue_error(ex, &e, 0);
        struct json_object *msg = json_object_new_object();
        if (clear_cache >= 0)
                json_object_object_add(msg, "clear_cache", json_object_new_boolean(clear_cache));
        if (wait_for_inflight == 1)
                mode = "wait";
        if (mode)
                json_object_object_add(msg, "mode", json_object_new_string(mode));
        return start_control(ex, CLIENT_OP_PAUSE, msg, 0);
}

enum MHD_Result http_admin_resume(struct http_exchange *ex) {
        return start_control(ex, CLIENT_OP_RESUME, json_object_new_object(), 0);
}

/* POST /sleep?level=1|2 (1 when absent). */
enum MHD_Result http_admin_sleep(struct http_exchange *ex) {
        const char *level = MHD_lookup_connection_value(ex->conn, MHD_GET_ARGUMENT_KIND, "level");
        struct json_object *msg = json_object_new_object();
        if (level) {
                char *end;
                errno = 0;
                long n = strtol(level, &end, 10);
                if (!*level || *end || errno || n < INT32_MIN || n > INT32_MAX) {
                        json_object_put(msg);
                        return http_reply_error(ex, 400, "invalid_request_error", "level",
                                           "level must be 1 (free the KV cache) or 2 (and the weights)");
                }
                json_object_object_add(msg, "level", json_object_new_int((int32_t) n));
        }
        return start_control(ex, CLIENT_OP_SLEEP, msg, 0);
}

static enum MHD_Result add_tag(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
        (void) kind;
        if (strcmp(key, "tags") == 0)
                json_object_array_add(cls, json_object_new_string(value ? value : ""));
        return MHD_YES;
}

/* POST /wake_up[?tags=weights&tags=kv_cache]: everything when no tag is given. */
enum MHD_Result http_admin_wake_up(struct http_exchange *ex) {
        struct json_object *msg = json_object_new_object(), *tags = json_object_new_array();
        MHD_get_connection_values(ex->conn, MHD_GET_ARGUMENT_KIND, add_tag, tags);
        if (json_object_array_length(tags) > 0)
                json_object_object_add(msg, "tags", tags);
        else
                json_object_put(tags);
        return start_control(ex, CLIENT_OP_WAKE_UP, msg, 0);
}

/* POST /reset_prefix_cache[?reset_running_requests=BOOL]: the socket's preempt. */
enum MHD_Result http_admin_reset_prefix_cache(struct http_exchange *ex) {
        struct openai_error e;
        int preempt;
        if (query_bool(ex, "reset_running_requests", &preempt, &e) < 0)
                return http_queue_error(ex, &e, 0);
        struct json_object *msg = json_object_new_object();
        if (preempt >= 0)
                json_object_object_add(msg, "preempt", json_object_new_boolean(preempt));
        return start_control(ex, CLIENT_OP_RESET_PREFIX_CACHE, msg, 0);
}

/* Whether o is given and not an empty list or object, which vLLM's clients send for none. */
static bool has_content(struct json_object *o) {
        return o && !(json_object_is_type(o, json_type_array) && json_object_array_length(o) == 0) &&
               !(json_object_is_type(o, json_type_object) && json_object_object_length(o) == 0);
}

/* The socket op's fields of a /collective_rpc body {"method", "args", "kwargs", "timeout"},
 * or NULL with the 400 in e. A worker method takes one argument, the socket's args: kwargs
 * (an object) when given, else args (vLLM's list, or any JSON as the socket takes it).
 * *ret_timeout: the seconds to wait for the answer, 0 for as long as it takes. */
static struct json_object *rpc_message(const char *body, size_t len, double *ret_timeout, struct openai_error *e) {
        struct json_tokener *tok = json_tokener_new();
        struct json_object *root = tok ? json_tokener_parse_ex(tok, body, (int) len) : NULL;
        struct json_object *method, *args = NULL, *kwargs = NULL, *timeout = NULL, *msg = NULL;
        if (tok && (json_tokener_get_error(tok) != json_tokener_success || json_tokener_get_parse_end(tok) != len)) {
                json_object_put(root);
                root = NULL;
        }
        json_tokener_free(tok);
        json_object_object_get_ex(root, "args", &args);
        json_object_object_get_ex(root, "kwargs", &kwargs);
        json_object_object_get_ex(root, "timeout", &timeout);
        double seconds = json_object_get_double(timeout);
        if (!json_object_is_type(root, json_type_object))
                openai_error_set(e, 400, "invalid_request_error", NULL,
                                 "the body must be a JSON object: {\"method\", \"args\", \"kwargs\", \"timeout\"}");
        else if (!json_object_object_get_ex(root, "method", &method))
                openai_error_set(e, 400, "invalid_request_error", "method", "method is required");
        else if (kwargs && !json_object_is_type(kwargs, json_type_object))
                openai_error_set(e, 400, "invalid_request_error", "kwargs", "kwargs must be an object");
        else if (has_content(args) && has_content(kwargs))
                openai_error_set(e, 400, "invalid_request_error", "kwargs",
                                 "give args or kwargs, not both: a worker method takes one argument");
        else if (timeout && (!(json_object_is_type(timeout, json_type_double) || json_object_is_type(timeout, json_type_int)) ||
                             !(seconds > 0 && seconds <= 86400)))
                openai_error_set(e, 400, "invalid_request_error", "timeout",
                                 "timeout must be null or seconds, more than 0 and at most 86400");
        else if ((msg = json_object_new_object())) {
                json_object_object_add(msg, "method", json_object_get(method));
                if (has_content(kwargs) || has_content(args))
                        json_object_object_add(msg, "args", json_object_get(has_content(kwargs) ? kwargs : args));
                *ret_timeout = timeout ? seconds : 0;
        } else
                openai_error_set(e, 500, "internal_error", NULL, "out of memory");
        json_object_put(root);
        return msg;
}

enum MHD_Result http_admin_collective_rpc(struct http_exchange *ex) {
        struct openai_error e;
        double timeout = 0;
        struct json_object *msg = rpc_message(ex->body ? ex->body : "", ex->body_len, &timeout, &e);
        if (!msg)
                return http_queue_error(ex, &e, 0);
        return start_control(ex, CLIENT_OP_COLLECTIVE_RPC, msg, timeout);
}

enum MHD_Result http_admin_is_paused(struct http_exchange *ex) {
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "is_paused", json_object_new_boolean(async_llm_is_paused(ex->front->server->model.llm)));
        return http_queue_json(ex, MHD_HTTP_OK, o);
}

enum MHD_Result http_admin_is_sleeping(struct http_exchange *ex) {
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "is_sleeping",
                               json_object_new_boolean(async_llm_is_sleeping(ex->front->server->model.llm)));
        return http_queue_json(ex, MHD_HTTP_OK, o);
}

/* vLLM's /reset_mm_cache: a text-only model has no multimodal cache; 200 so that its
 * clients go on, and the socket's result saying so. */
enum MHD_Result http_admin_reset_mm_cache(struct http_exchange *ex) {
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "reset", json_object_new_boolean(false));
        json_object_object_add(o, "message", json_object_new_string("the model has no multimodal cache: nothing to reset"));
        return http_queue_json(ex, MHD_HTTP_OK, o);
}

/* vLLM's /start_profile and /stop_profile; the latter answers where the trace went. */
static enum MHD_Result profile_answer(struct http_exchange *ex, int r, struct json_object *o, const struct error *err) {
        if (r < 0)
                return http_reply_error(ex, profiling_refused(r) ? 409 : 500,
                                        profiling_refused(r) ? "invalid_request_error" : "internal_error", NULL, err->message);
        return http_queue_json(ex, MHD_HTTP_OK, o ? o : json_object_new_object());
}

enum MHD_Result http_admin_start_profile(struct http_exchange *ex) {
        struct error err = { 0 };
        return profile_answer(ex, profiling_start(ex->front->server, &err), NULL, &err);
}

enum MHD_Result http_admin_stop_profile(struct http_exchange *ex) {
        struct error err = { 0 };
        struct json_object *o = NULL;
        int r = profiling_stop(ex->front->server, &o, &err);
        return profile_answer(ex, r, o, &err);
}

void http_admin_exchange_done(struct http_exchange *ex) {
        sd_event_source_disable_unref(ex->deadline);
        if (ex->call)
                ex->call->ex = NULL; /* the engine's answer, when it comes, is dropped */
        json_object_put(ex->reply);
}
