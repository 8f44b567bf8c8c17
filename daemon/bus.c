/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <systemd/sd-bus.h>
#include <unistd.h>

#include "bus.h"
#include "bus-json.h"
#include "commands.h"
#include "connection.h"
#include "log.h"
#include "profiling.h"
#include "protocol.h"
#include "server.h"

#define BUS_NAME "org.asyncllm.Engine1"
#define BUS_PATH "/org/asyncllm/Engine1"
#define BUS_INTERFACE "org.asyncllm.Engine1"
#define BUS_ERROR(name) "org.asyncllm.Engine1.Error." name

struct bus_state {
        sd_bus *bus;
        sd_bus_slot *slot;
        char state[16];
        uint64_t next_complete;
};

static const char *engine_state(struct server *s) {
        struct async_llm_stats st;
        async_llm_stats(s->model.llm, &st);
        return commands_engine_state(&st);
}

/* The protocol's error codes as D-Bus error names. */
static const char *error_name(const char *code) {
        static const struct {
                const char *code, *name;
        } map[] = {
                { PROTOCOL_INVALID_PARAMS, BUS_ERROR("InvalidParams") },
                { PROTOCOL_INVALID_REQUEST, BUS_ERROR("InvalidParams") },
                { PROTOCOL_INVALID_JSON, BUS_ERROR("InvalidParams") },
                { PROTOCOL_DUPLICATE_ID, BUS_ERROR("DuplicateId") },
                { PROTOCOL_TOO_MANY_REQUESTS, BUS_ERROR("TooManyRequests") },
                { PROTOCOL_PERMISSION_DENIED, BUS_ERROR("PermissionDenied") },
                { PROTOCOL_ENGINE_DEAD, BUS_ERROR("EngineDead") },
                { PROTOCOL_SHUTTING_DOWN, BUS_ERROR("ShuttingDown") },
                { PROTOCOL_NOT_FOUND, BUS_ERROR("NotFound") },
                { PROTOCOL_OVERLOADED, BUS_ERROR("Overloaded") },
        };
        for (size_t i = 0; i < sizeof(map) / sizeof(*map); i++)
                if (code && strcmp(code, map[i].code) == 0)
                        return map[i].name;
        return BUS_ERROR("Internal");
}

/* The caller's rights, by the socket's rule. */
static int sender_rights(sd_bus_message *m, struct server *s, struct connection *ret, sd_bus_error *error) {
        sd_bus_creds *creds = NULL;
        uid_t uid;
        gid_t gid = (gid_t) -1;
        const gid_t *gids = NULL;
        pid_t pid = 0;
        int r = sd_bus_query_sender_creds(m, SD_BUS_CREDS_EUID | SD_BUS_CREDS_EGID | SD_BUS_CREDS_SUPPLEMENTARY_GIDS |
                                                     SD_BUS_CREDS_PID | SD_BUS_CREDS_AUGMENT, &creds);
        if (r < 0 || sd_bus_creds_get_euid(creds, &uid) < 0) {
                sd_bus_creds_unref(creds);
                return sd_bus_error_set(error, BUS_ERROR("PermissionDenied"), "cannot read the caller's credentials");
        }
        sd_bus_creds_get_egid(creds, &gid);
        sd_bus_creds_get_pid(creds, &pid);
        int n = sd_bus_creds_get_supplementary_gids(creds, &gids);
        *ret = (struct connection) { .uid = uid, .pid = pid };
        permissions_for(s->settings, uid, gid, gids, n > 0 ? n : 0, &ret->may_generate, &ret->is_admin);
        sd_bus_creds_unref(creds);
        return 0;
}

static int require(sd_bus_message *m, struct server *s, bool admin, struct connection *creds, sd_bus_error *error) {
        int r = sender_rights(m, s, creds, error);
        if (r < 0)
                return r;
        if (admin ? !creds->is_admin : !creds->may_generate)
                return sd_bus_error_set(error, BUS_ERROR("PermissionDenied"),
                                        admin ? "only root and members of the admin group may control the engine"
                                              : "only root and members of the service group may use this daemon");
        return 0;
}

/* Which line a call becomes: Generate's stream, Complete's one answer, Encode's vector. */
enum bus_request_kind {
        BUS_GENERATE,
        BUS_COMPLETE,
        BUS_ENCODE,
};

/* Builds the socket protocol's line from (prompt, a{sv}). generate: the request-level keys
 * (priority, the scheduling class's, and prompt_token_ids or messages in place of an empty
 * prompt) go beside the prompt, the rest into params; Complete forces the final-only output
 * kind (it answers once). encode: every key beside the prompt (encode has no params). */
static int request_line(sd_bus_message *m, const char *id, enum bus_request_kind kind, char **ret, sd_bus_error *error) {
        const char *prompt;
        int r = sd_bus_message_read(m, "s", &prompt);
        if (r < 0)
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS, "expected (s prompt, a{sv} params)");
        struct json_object *params = bus_value_to_json(m, "a{sv}", &r);
        if (!params && r == -ENOMEM)
                return sd_bus_error_set_errno(error, r);
        if (!params)
                return sd_bus_error_set(error, SD_BUS_ERROR_INVALID_ARGS,
                                        r == -EDOM ? "params: a double is NaN or infinite, which JSON cannot carry"
                                                   : "params must be a{sv} of basic values, arrays and dictionaries");

        struct json_object *line = json_object_new_object();
        json_object_object_add(line, "op", json_object_new_string(kind == BUS_ENCODE ? "encode" : "generate"));
        json_object_object_add(line, "id", json_object_new_string(id));
        /* an empty prompt with prompt_token_ids or messages is no prompt: the parser refuses two */
        if (*prompt || !(json_object_object_get_ex(params, "prompt_token_ids", NULL) ||
                         json_object_object_get_ex(params, "messages", NULL)))
                json_object_object_add(line, "prompt", json_object_new_string(prompt));
        if (kind == BUS_ENCODE) {
                json_object_object_foreach(params, key, value) json_object_object_add(line, key, json_object_get(value));
                json_object_put(params);
                goto done;
        }
        if (kind == BUS_COMPLETE) {
                struct json_object *n;
                if (json_object_object_get_ex(params, "n", &n) && json_object_get_int64(n) != 1) {
                        json_object_put(params);
                        json_object_put(line);
                        return sd_bus_error_set(error, BUS_ERROR("InvalidParams"),
                                                "Complete answers with one text: n must be 1 (Generate streams n > 1)");
                }
                json_object_object_add(params, "output_kind", json_object_new_string("final"));
        }
        static const char *const top[] = {
                "priority", "latency_sensitive", "is_latency_sensitive", "slo", "ttft_slo", "prompt_token_ids", "messages",
        };
        for (size_t i = 0; i < sizeof(top) / sizeof(*top); i++) {
                struct json_object *v;
                if (json_object_object_get_ex(params, top[i], &v)) {
                        json_object_object_add(line, top[i], json_object_get(v));
                        json_object_object_del(params, top[i]);
                }
        }
        json_object_object_add(line, "params", params);
done:
        *ret = strdup(json_object_to_json_string_ext(line, JSON_C_TO_STRING_PLAIN));
        json_object_put(line);
        return *ret ? 0 : -ENOMEM;
}

/* ---- methods ---- */

static int method_generate(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct server *s = userdata;
        struct connection creds, *c;
        struct error err;
        char *line = NULL, id[32];
        int fds[2], r;
        if ((r = require(m, s, false, &creds, error)) < 0)
                return r;
        snprintf(id, sizeof(id), "bus%" PRIu64, s->next_connection + 1);
        if ((r = request_line(m, id, BUS_GENERATE, &line, error)) < 0)
                return r;
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, fds) < 0) {
                free(line);
                return sd_bus_error_set_errno(error, errno);
        }
        if ((r = connection_new_stream(s, fds[0], &creds, &c, &err)) < 0) {
                free(line);
                close(fds[1]);
                return sd_bus_error_set(error, BUS_ERROR("Internal"), err.message);
        }
        c->refs++;
        commands_handle_line(c, line, strlen(line));
        free(line);
        struct daemon_request *req = id_map_get(&c->requests, id);
        if (!req) { /* refused: the reason is the error line it just queued */
                r = sd_bus_error_set(error, error_name(c->last_error_code), c->last_error_message);
                connection_close(c);
                connection_unref(c);
                close(fds[1]);
                return r;
        }
        r = sd_bus_reply_method_return(m, "sh", req->daemon_id, fds[1]);
        connection_unref(c);
        close(fds[1]); /* the reply holds its own duplicate */
        return r;
}

/* Complete and Encode: the request runs on a connection without a socket, like any socket
 * request (limits, list, Abort, metrics, the SIGTERM drain); its final-only output collects
 * there and becomes the reply when the request ends. The caller leaving the bus aborts it. */
#define COMPLETE_ID "complete"

struct completion {
        sd_bus_message *call;
        sd_bus_track *caller;
        struct connection *conn;
        enum bus_request_kind kind;
};

static struct json_object *error_of(struct json_object *line) {
        struct json_object *e;
        return json_object_object_get_ex(line, "error", &e) && json_object_is_type(e, json_type_object) ? e : NULL;
}

static const char *string_at(struct json_object *o, const char *key) {
        struct json_object *v;
        return o && json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string) ? json_object_get_string(v)
                                                                                                       : NULL;
}

static int64_t int_at(struct json_object *o, const char *key) {
        struct json_object *v;
        return o && json_object_object_get_ex(o, key, &v) ? json_object_get_int64(v) : 0;
}

/* Encode's reply: the vector and the usage; an error for a request that ended without one
 * (aborted: a failure's own error line is answered before this). */
static void reply_embedding(sd_bus_message *call, struct json_object *final) {
        struct json_object *data = json_object_object_get(json_object_object_get(final, "outputs"), "data");
        if (!json_object_is_type(data, json_type_array)) {
                sd_bus_reply_method_errorf(call, BUS_ERROR("Aborted"),
                                           "the request was aborted (by Abort, a pause in abort mode, or the daemon "
                                           "stopping)");
                return;
        }
        size_t n = json_object_array_length(data);
        double *vector = malloc((n ? n : 1) * sizeof(double));
        sd_bus_message *reply = NULL;
        if (!vector) {
                sd_bus_reply_method_errno(call, ENOMEM, NULL);
                return;
        }
        for (size_t i = 0; i < n; i++)
                vector[i] = json_object_get_double(json_object_array_get_idx(data, i));
        uint32_t n_prompt = (uint32_t) int_at(json_object_object_get(final, "usage"), "prompt_tokens");
        if (sd_bus_message_new_method_return(call, &reply) < 0 ||
            sd_bus_message_append_array(reply, 'd', vector, n * sizeof(double)) < 0 ||
            sd_bus_message_append(reply, "a{sv}", 1, "prompt_tokens", "u", n_prompt) < 0 || sd_bus_send(NULL, reply, NULL) < 0)
                log_warning("cannot send an Encode reply");
        sd_bus_message_unref(reply);
        free(vector);
}

/* Replies from the lines the request left: its error if it has one, else its final output,
 * else the connection's last word (shutting_down, engine_dead). */
static void reply_completion(sd_bus_message *call, enum bus_request_kind kind, const char *out, size_t len) {
        struct json_object *final = NULL, *request_error = NULL, *other_error = NULL;
        for (const char *p = out, *end = out + len; p < end;) {
                const char *nl = memchr(p, '\n', (size_t) (end - p));
                size_t n = nl ? (size_t) (nl - p) : (size_t) (end - p);
                struct json_tokener *tok = json_tokener_new();
                struct json_object *line = tok ? json_tokener_parse_ex(tok, p, (int) n) : NULL;
                json_tokener_free(tok);
                p += n + 1;
                if (!line)
                        continue;
                struct json_object *e = error_of(line);
                const char *id = string_at(line, "id");
                struct json_object **slot = e ? (id ? &request_error : &other_error) : &final;
                if (*slot || (!e && !json_object_get_boolean(json_object_object_get(line, "finished"))))
                        json_object_put(line);
                else
                        *slot = line;
        }
        struct json_object *e = error_of(request_error ? request_error : final ? NULL : other_error), *retry_after;
        if (e) {
                const char *message = string_at(e, "message") ? string_at(e, "message") : "";
                char text[ERROR_MESSAGE_MAX + 64];
                /* a D-Bus error has a name and a message only: the hint goes into the message */
                if (json_object_object_get_ex(e, "retry_after", &retry_after))
                        snprintf(text, sizeof(text), "%s (retry after %g seconds)", message,
                                 json_object_get_double(retry_after));
                else
                        snprintf(text, sizeof(text), "%s", message);
                sd_bus_reply_method_error(call, &SD_BUS_ERROR_MAKE_CONST(error_name(string_at(e, "code")), text));
        } else if (final && kind == BUS_ENCODE)
                reply_embedding(call, final);
        else if (final) {
                struct json_object *outputs = json_object_object_get(final, "outputs");
                struct json_object *first = json_object_array_length(outputs) ? json_object_array_get_idx(outputs, 0) : NULL;
                struct json_object *usage = json_object_object_get(final, "usage");
                const char *reason = string_at(first, "finish_reason");
                sd_bus_reply_method_return(call, "ssa{sv}", string_at(first, "text") ? string_at(first, "text") : "",
                                           reason ? reason : "", 2, "prompt_tokens", "u", (uint32_t) int_at(usage, "prompt_tokens"),
                                           "completion_tokens", "u", (uint32_t) int_at(usage, "completion_tokens"));
        } else
                sd_bus_reply_method_errorf(call, BUS_ERROR("Internal"), "the request ended without an answer");
        json_object_put(final);
        json_object_put(request_error);
        json_object_put(other_error);
}

static void on_completion_closed(struct connection *c, void *userdata) {
        struct completion *cp = userdata;
        reply_completion(cp->call, cp->kind, c->out + c->out_sent, c->out_len - c->out_sent);
        sd_bus_message_unref(cp->call);
        sd_bus_track_unref(cp->caller);
        free(cp);
}

static int on_caller_gone(sd_bus_track *track, void *userdata) {
        struct completion *cp = userdata;
        (void) track;
        log_debug("a D-Bus caller left before its answer: aborting the request");
        connection_close_later(cp->conn);
        return 0;
}

static int answer_once(sd_bus_message *m, struct server *s, enum bus_request_kind kind, sd_bus_error *error) {
        struct connection creds, *c;
        struct completion *cp;
        struct error err;
        char *line = NULL;
        int r;
        if ((r = require(m, s, false, &creds, error)) < 0)
                return r;
        if ((r = request_line(m, COMPLETE_ID, kind, &line, error)) < 0)
                return r;
        if (!(cp = calloc(1, sizeof(*cp)))) {
                free(line);
                return -ENOMEM;
        }
        if ((r = connection_new_sink(s, &creds, on_completion_closed, cp, &c, &err)) < 0) {
                free(line);
                free(cp);
                return sd_bus_error_set(error, BUS_ERROR("Internal"), err.message);
        }
        cp->conn = c;
        cp->kind = kind;
        cp->call = sd_bus_message_ref(m);
        c->refs++;
        commands_handle_line(c, line, strlen(line));
        free(line);
        if (!id_map_get(&c->requests, COMPLETE_ID)) {
                /* refused: reply_completion answers with the error line it queued */
                connection_close(c);
                connection_unref(c);
                return 1;
        }
        if (sd_bus_track_new(sd_bus_message_get_bus(m), &cp->caller, on_caller_gone, cp) < 0 ||
            sd_bus_track_add_sender(cp->caller, m) < 0)
                log_warning("cannot watch a D-Bus caller: its request runs on if it leaves");
        connection_unref(c);
        return 1; /* answered when the request ends */
}

static int method_complete(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return answer_once(m, userdata, BUS_COMPLETE, error);
}

static int method_encode(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        return answer_once(m, userdata, BUS_ENCODE, error);
}

static int method_abort(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct server *s = userdata;
        struct connection creds;
        const char *id;
        int r;
        if ((r = require(m, s, false, &creds, error)) < 0 || (r = sd_bus_message_read(m, "s", &id)) < 0)
                return r;
        struct daemon_request *req = id_map_get(&s->requests, id);
        /* another user's request answers as one that does not exist: nothing tells a
         * non-admin which ids others have in flight */
        if (req && !creds.is_admin && req->conn->uid != creds.uid)
                req = NULL;
        /* an admin may name any request ListRequests shows, an HTTP client's too */
        return sd_bus_reply_method_return(m, "b", (req || creds.is_admin) && async_llm_abort(s->model.llm, id));
}

/* Control methods answer when the engine thread has acted. */
static void on_control_reply(int rc, const char *message, struct json_object *result, void *userdata) {
        sd_bus_message *call = userdata;
        if (rc < 0)
                sd_bus_reply_method_errorf(call, rc == -ENOENT ? BUS_ERROR("NotFound") : rc == -EINVAL ? BUS_ERROR("InvalidParams")
                                                 : rc == -EBUSY || rc == -EALREADY || rc == -ECANCELED ? BUS_ERROR("Busy")
                                                                                                     : BUS_ERROR("Internal"),
                                           "%s", message && *message ? message : strerror(-rc));
        else if (strcmp(sd_bus_message_get_member(call), "CollectiveRpc") == 0)
                sd_bus_reply_method_return(call, "s", result ? json_object_to_json_string_ext(result, JSON_C_TO_STRING_PLAIN) : "null");
        else
                sd_bus_reply_method_return(call, "");
        sd_bus_message_unref(call);
}

static int method_control(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct server *s = userdata;
        struct async_llm *llm = s->model.llm;
        struct connection creds;
        const char *member = sd_bus_message_get_member(m);
        int r;
        if ((r = require(m, s, true, &creds, error)) < 0)
                return r;
        sd_bus_message_ref(m);
        if (strcmp(member, "Pause") == 0) {
                const char *mode;
                int clear;
                enum pause_mode pm;
                if ((r = sd_bus_message_read(m, "sb", &mode, &clear)) >= 0 && pause_mode_from_string(mode, &pm) < 0)
                        r = sd_bus_error_set(error, BUS_ERROR("InvalidParams"), "mode must be abort, wait or keep");
                if (r >= 0)
                        r = async_llm_pause(llm, pm, clear, on_control_reply, m);
        } else if (strcmp(member, "Resume") == 0)
                r = async_llm_resume(llm, on_control_reply, m);
        else if (strcmp(member, "Sleep") == 0) {
                int32_t level;
                if ((r = sd_bus_message_read(m, "i", &level)) >= 0 && level != 1 && level != 2)
                        r = sd_bus_error_set(error, BUS_ERROR("InvalidParams"), "level must be 1 or 2");
                if (r >= 0)
                        r = async_llm_sleep(llm, level, on_control_reply, m);
        } else if (strcmp(member, "WakeUp") == 0) {
                char **tags = NULL;
                unsigned bits = 0;
                if ((r = sd_bus_message_read_strv(m, &tags)) >= 0)
                        for (char **t = tags; t && *t && r >= 0; t++) {
                                if (strcmp(*t, "weights") == 0)
                                        bits |= BACKEND_MEMORY_WEIGHTS;
                                else if (strcmp(*t, "kv_cache") == 0)
                                        bits |= BACKEND_MEMORY_KV_CACHE;
                                else
                                        r = sd_bus_error_setf(error, BUS_ERROR("InvalidParams"),
                                                              "unknown tag '%s'; known: weights, kv_cache", *t);
                        }
                for (char **t = tags; t && *t; t++)
                        free(*t);
                free(tags);
                if (r >= 0)
                        r = async_llm_wake_up(llm, bits, on_control_reply, m);
        } else if (strcmp(member, "ResetPrefixCache") == 0) {
                int preempt;
                if ((r = sd_bus_message_read(m, "b", &preempt)) >= 0)
                        r = async_llm_reset_prefix_cache(llm, preempt, on_control_reply, m);
        } else { /* CollectiveRpc */
                const char *method, *args;
                if ((r = sd_bus_message_read(m, "ss", &method, &args)) >= 0) {
                        struct json_object *a = *args ? json_tokener_parse(args) : NULL;
                        if (*args && !a && strcmp(args, "null") != 0)
                                r = sd_bus_error_set(error, BUS_ERROR("InvalidParams"), "args must be JSON text (or empty)");
                        else
                                r = async_llm_collective_rpc(llm, method, a, on_control_reply, m);
                }
        }
        if (r < 0) {
                sd_bus_message_unref(m);
                return r;
        }
        log_info("%s requested over D-Bus by uid %u", member, (unsigned) creds.uid);
        return 1;
}

static int method_check_health(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct server *s = userdata;
        struct connection creds;
        struct error err = { 0 };
        int r;
        if ((r = require(m, s, false, &creds, error)) < 0)
                return r;
        r = async_llm_check_health(s->model.llm, s->settings->health_stall_timeout, &err);
        return sd_bus_reply_method_return(m, "bss", r == 0, r == 0 ? "ok" : r == -ESHUTDOWN ? "dead" : "stalled",
                                          r == 0 ? "" : err.message);
}

static int method_get_stats(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct server *s = userdata;
        struct connection creds;
        struct stats_entry entries[COMMANDS_STATS_MAX];
        sd_bus_message *reply = NULL;
        int r;
        if ((r = require(m, s, false, &creds, error)) < 0)
                return r;
        size_t n = commands_stats(s, entries);
        if ((r = sd_bus_message_new_method_return(m, &reply)) < 0 || (r = sd_bus_message_open_container(reply, 'a', "{sv}")) < 0)
                goto out;
        for (size_t i = 0; i < n && r >= 0; i++) {
                const struct stats_entry *e = &entries[i];
                switch (e->type) {
                case 's': r = sd_bus_message_append(reply, "{sv}", e->name, "s", e->s); break;
                case 'u': r = sd_bus_message_append(reply, "{sv}", e->name, "u", e->u); break;
                case 't': r = sd_bus_message_append(reply, "{sv}", e->name, "t", e->t); break;
                default: r = sd_bus_message_append(reply, "{sv}", e->name, "d", e->d); break;
                }
        }
        if (r >= 0 && (r = sd_bus_message_close_container(reply)) >= 0)
                r = sd_bus_send(NULL, reply, NULL);
out:
        sd_bus_message_unref(reply);
        return r;
}

struct id_listing {
        sd_bus_message *reply;
        int *r; /* the first failure stops the appending */
};

static void append_request_id(const char *request_id, void *userdata) {
        struct id_listing *l = userdata;
        if (*l->r >= 0)
                *l->r = sd_bus_message_append(l->reply, "s", request_id);
}

static int method_list_requests(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct server *s = userdata;
        struct connection creds;
        sd_bus_message *reply = NULL;
        int r;
        if ((r = require(m, s, false, &creds, error)) < 0)
                return r;
        if ((r = sd_bus_message_new_method_return(m, &reply)) < 0 || (r = sd_bus_message_open_container(reply, 'a', "s")) < 0)
                goto out;
        /* admins see every request, whichever front sent it; others their own uid's */
        if (creds.is_admin)
                async_llm_for_each_request(s->model.llm, append_request_id, &(struct id_listing) { reply, &r });
        else
                for (struct connection *c = s->connections; c && r >= 0; c = c->next)
                        for (struct daemon_request *q = c->first_request; q && r >= 0; q = q->next)
                                if (c->uid == creds.uid)
                                        r = sd_bus_message_append(reply, "s", q->daemon_id);
        if (r >= 0 && (r = sd_bus_message_close_container(reply)) >= 0)
                r = sd_bus_send(NULL, reply, NULL);
out:
        sd_bus_message_unref(reply);
        return r;
}

static int method_get_metrics(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct server *s = userdata;
        struct connection creds;
        int r;
        if ((r = require(m, s, false, &creds, error)) < 0)
                return r;
        char *text = commands_metrics_text(s);
        if (!text)
                return -ENOMEM;
        r = sd_bus_reply_method_return(m, "s", text);
        free(text);
        return r;
}

/* Tokenize(s prompt) -> (ai tokens): the ids a Generate of this prompt starts from. */
static int method_tokenize(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct server *s = userdata;
        struct connection creds;
        struct error err = { 0 };
        sd_bus_message *reply = NULL;
        const char *prompt;
        int32_t *ids = NULL;
        size_t n;
        int r;
        if ((r = require(m, s, false, &creds, error)) < 0 || (r = sd_bus_message_read(m, "s", &prompt)) < 0)
                return r;
        if ((r = served_model_tokenize(&s->model, prompt, NULL, 0, true, &ids, &n, &err)) < 0)
                return sd_bus_error_set(error, r == -ENOMEM ? BUS_ERROR("Internal") : BUS_ERROR("InvalidParams"), err.message);
        if ((r = sd_bus_message_new_method_return(m, &reply)) >= 0 &&
            (r = sd_bus_message_append_array(reply, 'i', ids, n * sizeof(*ids))) >= 0)
                r = sd_bus_send(NULL, reply, NULL);
        sd_bus_message_unref(reply);
        free(ids);
        return r;
}

/* Detokenize(ai tokens) -> (s text): valid UTF-8, as D-Bus strings must be (ill-formed bytes
 * become U+FFFD), up to a NUL byte, which no D-Bus string holds. */
static int method_detokenize(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct server *s = userdata;
        struct connection creds;
        struct error err = { 0 };
        const void *ids;
        size_t size, len;
        char *text;
        int r;
        if ((r = require(m, s, false, &creds, error)) < 0 || (r = sd_bus_message_read_array(m, 'i', &ids, &size)) < 0)
                return r;
        if ((r = tokenizer_decode_text(s->model.tk, ids, size / sizeof(int32_t), false, &text, &len, &err)) < 0)
                return sd_bus_error_set(error, r == -ENOMEM ? BUS_ERROR("Internal") : BUS_ERROR("InvalidParams"), err.message);
        struct json_object *valid = protocol_json_text(text, len);
        free(text);
        if (!valid)
                return -ENOMEM;
        r = sd_bus_reply_method_return(m, "s", json_object_get_string(valid));
        json_object_put(valid);
        return r;
}

static int method_get_supported_tasks(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct connection creds;
        int r;
        if ((r = require(m, userdata, false, &creds, error)) < 0)
                return r;
        struct server *s = userdata;
        return async_llm_can_encode(s->model.llm) ? sd_bus_reply_method_return(m, "as", 2, "generate", "encode")
                                                  : sd_bus_reply_method_return(m, "as", 1, "generate");
}

static void on_drained(int result, void *userdata) {
        sd_bus_message *call = userdata;
        if (result == 0)
                sd_bus_reply_method_return(call, "");
        else if (result == -ETIMEDOUT)
                sd_bus_reply_method_errorf(call, BUS_ERROR("TimedOut"), "requests still in flight at the timeout");
        else
                sd_bus_reply_method_errorf(call, BUS_ERROR("ShuttingDown"), "the daemon is stopping");
        sd_bus_message_unref(call);
}

/* WaitForRequestsToDrain(d timeout): answers once no request is in flight on any front. */
static int method_wait_for_requests_to_drain(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct server *s = userdata;
        struct connection creds;
        double timeout;
        int r;
        if ((r = require(m, s, false, &creds, error)) < 0 || (r = sd_bus_message_read(m, "d", &timeout)) < 0)
                return r;
        if (!(timeout > 0 && timeout <= PROTOCOL_TIMEOUT_MAX))
                return sd_bus_error_setf(error, BUS_ERROR("InvalidParams"),
                                         "timeout must be seconds, more than 0 and at most %d, got %g", PROTOCOL_TIMEOUT_MAX,
                                         timeout);
        sd_bus_message_ref(m);
        if ((r = drain_wait(s, timeout, on_drained, m)) < 0)
                sd_bus_message_unref(m);
        return r < 0 ? r : 1;
}

/* ResetMmCache() and ResetEncoderCache() -> (b reset): false, a text-only model has
 * neither cache; there for vLLM's clients. */
static int method_reset_absent_cache(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct connection creds;
        int r;
        if ((r = require(m, userdata, true, &creds, error)) < 0)
                return r;
        return sd_bus_reply_method_return(m, "b", 0);
}

/* StartProfile() and StopProfile() -> (s path, t spans, b truncated). */
static int method_profile(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct server *s = userdata;
        struct connection creds;
        struct error err = { 0 };
        struct json_object *o = NULL;
        int r;
        if ((r = require(m, s, true, &creds, error)) < 0)
                return r;
        bool start = strcmp(sd_bus_message_get_member(m), "StartProfile") == 0;
        r = start ? profiling_start(s, &err) : profiling_stop(s, &o, &err);
        if (r < 0)
                return sd_bus_error_set(error, profiling_refused(r) ? BUS_ERROR("Busy") : BUS_ERROR("Internal"),
                                        err.message);
        if (start)
                return sd_bus_reply_method_return(m, "");
        r = sd_bus_reply_method_return(m, "stb", json_object_get_string(json_object_object_get(o, "path")),
                                       (uint64_t) json_object_get_int64(json_object_object_get(o, "spans")),
                                       (int) json_object_get_boolean(json_object_object_get(o, "truncated")));
        json_object_put(o);
        return r;
}

static int property_get(sd_bus *bus, const char *path, const char *interface, const char *property,
                        sd_bus_message *reply, void *userdata, sd_bus_error *error) {
        struct server *s = userdata;
        struct async_llm_stats st;
        (void) bus, (void) path, (void) interface, (void) error;
        async_llm_stats(s->model.llm, &st);
        if (strcmp(property, "Model") == 0)
                return sd_bus_message_append(reply, "s", s->model.name);
        if (strcmp(property, "State") == 0)
                return sd_bus_message_append(reply, "s", engine_state(s));
        if (strcmp(property, "NumRunning") == 0)
                return sd_bus_message_append(reply, "u", st.engine.stats.n_running);
        if (strcmp(property, "NumWaiting") == 0)
                return sd_bus_message_append(reply, "u", st.engine.stats.n_waiting + st.engine.n_deferred);
        return sd_bus_message_append(reply, "d", st.engine.stats.kv_blocks_total
                                                         ? (double) st.engine.stats.kv_blocks_used / st.engine.stats.kv_blocks_total
                                                         : 0.0);
}

static const sd_bus_vtable vtable[] = {
        SD_BUS_VTABLE_START(0),
        SD_BUS_METHOD_WITH_ARGS("Generate", SD_BUS_ARGS("s", prompt, "a{sv}", params),
                                SD_BUS_RESULT("s", request_id, "h", stream), method_generate, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Complete", SD_BUS_ARGS("s", prompt, "a{sv}", params),
                                SD_BUS_RESULT("s", text, "s", finish_reason, "a{sv}", usage), method_complete,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Encode", SD_BUS_ARGS("s", prompt, "a{sv}", params),
                                SD_BUS_RESULT("ad", embedding, "a{sv}", usage), method_encode, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Abort", SD_BUS_ARGS("s", request_id), SD_BUS_RESULT("b", aborted), method_abort,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Pause", SD_BUS_ARGS("s", mode, "b", clear_cache), SD_BUS_NO_RESULT, method_control,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Resume", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, method_control, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Sleep", SD_BUS_ARGS("i", level), SD_BUS_NO_RESULT, method_control, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("WakeUp", SD_BUS_ARGS("as", tags), SD_BUS_NO_RESULT, method_control, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("CollectiveRpc", SD_BUS_ARGS("s", method, "s", args_json), SD_BUS_RESULT("s", results_json),
                                method_control, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ResetPrefixCache", SD_BUS_ARGS("b", preempt), SD_BUS_NO_RESULT, method_control,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("CheckHealth", SD_BUS_NO_ARGS, SD_BUS_RESULT("b", healthy, "s", status, "s", message),
                                method_check_health, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetStats", SD_BUS_NO_ARGS, SD_BUS_RESULT("a{sv}", stats), method_get_stats,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ListRequests", SD_BUS_NO_ARGS, SD_BUS_RESULT("as", request_ids), method_list_requests,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetMetrics", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", text), method_get_metrics,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Tokenize", SD_BUS_ARGS("s", prompt), SD_BUS_RESULT("ai", tokens), method_tokenize,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("Detokenize", SD_BUS_ARGS("ai", tokens), SD_BUS_RESULT("s", text), method_detokenize,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("GetSupportedTasks", SD_BUS_NO_ARGS, SD_BUS_RESULT("as", tasks), method_get_supported_tasks,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("WaitForRequestsToDrain", SD_BUS_ARGS("d", timeout), SD_BUS_NO_RESULT,
                                method_wait_for_requests_to_drain, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ResetMmCache", SD_BUS_NO_ARGS, SD_BUS_RESULT("b", reset), method_reset_absent_cache,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("ResetEncoderCache", SD_BUS_NO_ARGS, SD_BUS_RESULT("b", reset), method_reset_absent_cache,
                                SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("StartProfile", SD_BUS_NO_ARGS, SD_BUS_NO_RESULT, method_profile, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_METHOD_WITH_ARGS("StopProfile", SD_BUS_NO_ARGS, SD_BUS_RESULT("s", path, "t", spans, "b", truncated),
                                method_profile, SD_BUS_VTABLE_UNPRIVILEGED),
        SD_BUS_PROPERTY("Model", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_CONST),
        SD_BUS_PROPERTY("State", "s", property_get, 0, SD_BUS_VTABLE_PROPERTY_EMITS_CHANGE),
        SD_BUS_PROPERTY("NumRunning", "u", property_get, 0, 0),
        SD_BUS_PROPERTY("NumWaiting", "u", property_get, 0, 0),
        SD_BUS_PROPERTY("KvCacheUsage", "d", property_get, 0, 0),
        SD_BUS_VTABLE_END,
};

int bus_start(struct server *s, struct error *err) {
        struct bus_state *b;
        int r;
        if (s->settings->bus == DAEMON_BUS_NONE)
                return 0;
        b = calloc(1, sizeof(*b));
        if (!b)
                return error_set(err, ENOMEM, "out of memory");
        s->bus = b;
        r = s->settings->bus == DAEMON_BUS_SYSTEM ? sd_bus_open_system(&b->bus) : sd_bus_open_user(&b->bus);
        if (r < 0)
                return error_set(err, -r, "cannot connect to the %s bus: %s", daemon_bus_to_string(s->settings->bus), strerror(-r));
        if ((r = sd_bus_add_object_vtable(b->bus, &b->slot, BUS_PATH, BUS_INTERFACE, vtable, s)) < 0 ||
            (r = sd_bus_attach_event(b->bus, s->event, SD_EVENT_PRIORITY_NORMAL)) < 0)
                return error_set(err, -r, "cannot publish the D-Bus object: %s", strerror(-r));
        if ((r = sd_bus_request_name(b->bus, BUS_NAME, 0)) < 0)
                return error_set(err, -r, "cannot own the name %s on the %s bus: %s (is the D-Bus policy installed?)", BUS_NAME,
                                 daemon_bus_to_string(s->settings->bus), strerror(-r));
        snprintf(b->state, sizeof(b->state), "%s", engine_state(s));
        log_info("on the %s bus as %s", daemon_bus_to_string(s->settings->bus), BUS_NAME);
        return 0;
}

void bus_check_state(struct server *s) {
        struct bus_state *b = s->bus;
        if (!b || !b->bus)
                return;
        const char *now = engine_state(s);
        if (strcmp(now, b->state) == 0)
                return;
        snprintf(b->state, sizeof(b->state), "%s", now);
        sd_bus_emit_properties_changed(b->bus, BUS_PATH, BUS_INTERFACE, "State", NULL);
}

void bus_stop(struct server *s) {
        struct bus_state *b = s->bus;
        if (!b)
                return;
        sd_bus_slot_unref(b->slot);
        sd_bus_flush_close_unref(b->bus);
        free(b);
        s->bus = NULL;
}
