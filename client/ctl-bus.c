/* SPDX-License-Identifier: MIT */
/* D-Bus: one method per socket op, the op's JSON fields turned into the method's
 * arguments, and its reply turned back into the op's JSON result. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bus-json.h"
#include "ctl-bus.h"

#define BUS_SERVICE "org.asyncllm.Engine1"
#define BUS_PATH "/org/asyncllm/Engine1"
#define BUS_INTERFACE "org.asyncllm.Engine1"
#define BUS_ERROR_PREFIX "org.asyncllm.Engine1.Error."

/* Methods that wait for the engine to act (a draining pause waits for every request). */
#define WAIT_FOR_ENGINE_USEC UINT64_MAX
/* Zero: sd-bus's default for methods that answer at once. */
#define ANSWER_AT_ONCE_USEC 0

static const char *bus_name(const struct ctl *ctl) {
        return ctl->bus == CTL_BUS_SYSTEM ? "system" : "user";
}

static int bus_connect(struct ctl *ctl) {
        int r;
        if (ctl->sd_bus)
                return CTL_EXIT_OK;
        r = ctl->bus == CTL_BUS_SYSTEM ? sd_bus_open_system(&ctl->sd_bus) : sd_bus_open_user(&ctl->sd_bus);
        if (r < 0)
                return ctl_fail(ctl, CTL_EXIT_CONNECT, "cannot connect to the %s bus: %s%s", bus_name(ctl), strerror(-r),
                                ctl->bus == CTL_BUS_USER ? " (is $DBUS_SESSION_BUS_ADDRESS or $XDG_RUNTIME_DIR set?)" : "");
        return CTL_EXIT_OK;
}

/* The exit status for a failed call, printed with what to do about it. */
static int bus_failure(struct ctl *ctl, const char *method, const sd_bus_error *error, int r) {
        if (!sd_bus_error_is_set(error))
                return ctl_fail(ctl, CTL_EXIT_CONNECT, "%s over the %s bus failed: %s", method, bus_name(ctl), strerror(-r));
        const char *name = error->name, *message = error->message ? error->message : name;
        if (sd_bus_error_has_names(error, SD_BUS_ERROR_SERVICE_UNKNOWN, SD_BUS_ERROR_NAME_HAS_NO_OWNER))
                return ctl_fail(ctl, CTL_EXIT_CONNECT, "asyncllmd is not on the %s bus (nobody owns %s). Start it with %s",
                                bus_name(ctl), BUS_SERVICE,
                                ctl->bus == CTL_BUS_SYSTEM ? "`systemctl start asyncllmd`" : "`asyncllmd --bus user`");
        if (sd_bus_error_has_names(error, SD_BUS_ERROR_UNKNOWN_METHOD, SD_BUS_ERROR_UNKNOWN_OBJECT,
                                   SD_BUS_ERROR_UNKNOWN_INTERFACE, SD_BUS_ERROR_UNKNOWN_PROPERTY))
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "the daemon has no %s: it is older than this asyncllmctl (%s)",
                                method, message);
        if (sd_bus_error_has_name(error, SD_BUS_ERROR_ACCESS_DENIED))
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "%s (the D-Bus policy lets root and the groups asyncllm and "
                                "asyncllm-admin call asyncllmd)", message);
        if (sd_bus_error_has_names(error, SD_BUS_ERROR_NO_REPLY, SD_BUS_ERROR_TIMEOUT, SD_BUS_ERROR_DISCONNECTED))
                return ctl_fail(ctl, CTL_EXIT_CONNECT, "asyncllmd did not answer %s: %s", method, message);
        if (strcmp(name, BUS_ERROR_PREFIX "EngineDead") == 0)
                return ctl_fail(ctl, CTL_EXIT_ENGINE_DEAD, "%s", message);
        if (strcmp(name, BUS_ERROR_PREFIX "Overloaded") == 0) /* the message carries the retry hint */
                return ctl_fail(ctl, CTL_EXIT_TEMPFAIL, "%s", message);
        if (strcmp(name, BUS_ERROR_PREFIX "TimedOut") == 0)
                return ctl_fail(ctl, CTL_EXIT_TIMEOUT, "%s", message);
        if (strcmp(name, BUS_ERROR_PREFIX "PermissionDenied") == 0)
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "%s (control commands need root or the asyncllm-admin group)",
                                message);
        return ctl_fail(ctl, CTL_EXIT_REQUEST, "%s", message);
}

/* ---- JSON into a{sv} ---- */

/* The D-Bus signature a JSON value goes as: integers as x (t above INT64_MAX), arrays of
 * integers as ai (token ids), of strings as as, of objects as aa{ss} (chat messages),
 * objects as a{sd} (logit_bias). -EINVAL for anything else. */
static int json_signature(struct json_object *v, const char **ret) {
        switch (json_object_get_type(v)) {
        case json_type_boolean: *ret = "b"; return 0;
        case json_type_double: *ret = "d"; return 0;
        case json_type_string: *ret = "s"; return 0;
        case json_type_int:
                *ret = json_object_get_int64(v) == INT64_MAX && json_object_get_uint64(v) > INT64_MAX ? "t" : "x";
                return 0;
        case json_type_object: *ret = "a{sd}"; return 0;
        case json_type_array: {
                struct json_object *first = json_object_array_get_idx(v, 0);
                enum json_type t = first ? json_object_get_type(first) : json_type_int;
                for (size_t i = 1; i < json_object_array_length(v); i++)
                        if (json_object_get_type(json_object_array_get_idx(v, i)) != t)
                                return -EINVAL;
                *ret = t == json_type_int ? "ai" : t == json_type_string ? "as" : t == json_type_object ? "aa{ss}" : NULL;
                return *ret ? 0 : -EINVAL;
        }
        default:
                return -EINVAL;
        }
}

static int append_json_value(sd_bus_message *m, struct json_object *v, const char *sig) {
        int r;
        switch (sig[0]) {
        case 'b': return sd_bus_message_append(m, "b", (int) json_object_get_boolean(v));
        case 'd': return sd_bus_message_append(m, "d", json_object_get_double(v));
        case 's': return sd_bus_message_append(m, "s", json_object_get_string(v));
        case 'x': return sd_bus_message_append(m, "x", json_object_get_int64(v));
        case 't': return sd_bus_message_append(m, "t", json_object_get_uint64(v));
        case 'i': return sd_bus_message_append(m, "i", (int32_t) json_object_get_int64(v));
        default:
                break;
        }
        if (strcmp(sig, "a{sd}") == 0 || strcmp(sig, "a{ss}") == 0) {
                bool strings = sig[3] == 's';
                if ((r = sd_bus_message_open_container(m, 'a', sig + 1)) < 0)
                        return r;
                json_object_object_foreach(v, key, value) {
                        if (strings)
                                r = sd_bus_message_append(m, "{ss}", key, json_object_get_string(value));
                        else
                                r = sd_bus_message_append(m, "{sd}", key, json_object_get_double(value));
                        if (r < 0)
                                return r;
                }
                return sd_bus_message_close_container(m);
        }
        /* arrays: ai, as, aa{ss} */
        if ((r = sd_bus_message_open_container(m, 'a', sig + 1)) < 0)
                return r;
        for (size_t i = 0; i < json_object_array_length(v); i++)
                if ((r = append_json_value(m, json_object_array_get_idx(v, i), sig + 1)) < 0)
                        return r;
        return sd_bus_message_close_container(m);
}

/* One {sv} entry; null values are left out (the daemon's default). */
static int append_entry(sd_bus_message *m, const char *key, struct json_object *v) {
        const char *sig;
        int r;
        if (!v)
                return 0;
        if ((r = json_signature(v, &sig)) < 0)
                return r;
        if ((r = sd_bus_message_open_container(m, 'e', "sv")) < 0 || (r = sd_bus_message_append(m, "s", key)) < 0 ||
            (r = sd_bus_message_open_container(m, 'v', sig)) < 0 || (r = append_json_value(m, v, sig)) < 0 ||
            (r = sd_bus_message_close_container(m)) < 0)
                return r;
        return sd_bus_message_close_container(m);
}

static int dictionary_to_json(sd_bus_message *m, struct json_object **ret);

static int append_generation(sd_bus_message *m, const struct ctl_generation *g) {
        int r;
        if ((r = sd_bus_message_append(m, "s", g->prompt ? g->prompt : "")) < 0 ||
            (r = sd_bus_message_open_container(m, 'a', "{sv}")) < 0)
                return r;
        json_object_object_foreach(g->params, key, value)
                if ((r = append_entry(m, key, value)) < 0)
                        return r;
        json_object_object_foreach(g->request_fields, field, field_value)
                if ((r = append_entry(m, field, field_value)) < 0)
                        return r;
        if ((r = append_entry(m, "prompt_token_ids", g->prompt_token_ids)) < 0 ||
            (r = append_entry(m, "messages", g->messages)) < 0)
                return r;
        if (g->encode &&
            ((g->pooling_type && (r = sd_bus_message_append(m, "{sv}", "pooling_type", "s", g->pooling_type)) < 0) ||
             (r = sd_bus_message_append(m, "{sv}", "normalize", "b", (int) g->normalize)) < 0 ||
             (g->dimensions && (r = sd_bus_message_append(m, "{sv}", "dimensions", "u", g->dimensions)) < 0)))
                return r;
        return sd_bus_message_close_container(m);
}

int ctl_bus_encode(struct ctl *ctl, const struct ctl_generation *g, struct json_object **ret_result) {
        sd_bus_message *m = NULL, *reply = NULL;
        sd_bus_error error = SD_BUS_ERROR_NULL;
        const double *vector;
        size_t size;
        uint32_t n_prompt = 0;
        int r, status = bus_connect(ctl);

        if (status != CTL_EXIT_OK)
                return status;
        if ((r = sd_bus_message_new_method_call(ctl->sd_bus, &m, BUS_SERVICE, BUS_PATH, BUS_INTERFACE, "Encode")) < 0 ||
            (r = append_generation(m, g)) < 0) {
                sd_bus_message_unref(m);
                return ctl_fail(ctl, r == -EINVAL ? CTL_EXIT_USAGE : CTL_EXIT_REQUEST,
                                "cannot express the request in D-Bus types: %s", strerror(-r));
        }
        r = sd_bus_call(ctl->sd_bus, m, WAIT_FOR_ENGINE_USEC, &error, &reply);
        sd_bus_message_unref(m);
        if (r < 0) {
                status = bus_failure(ctl, "Encode", &error, r);
                sd_bus_error_free(&error);
                return status;
        }
        if ((r = sd_bus_message_read_array(reply, 'd', (const void **) &vector, &size)) < 0) {
                sd_bus_message_unref(reply);
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "Encode answered with other types than (ad, a{sv}): %s", strerror(-r));
        }
        struct json_object *usage = NULL, *data = json_object_new_array_ext((int) (size / sizeof(double)));
        for (size_t i = 0; data && i < size / sizeof(double); i++)
                json_object_array_add(data, json_object_new_double(vector[i]));
        if (dictionary_to_json(reply, &usage) >= 0)
                n_prompt = (uint32_t) json_object_get_int64(json_object_object_get(usage, "prompt_tokens"));
        json_object_put(usage);
        sd_bus_message_unref(reply);
        *ret_result = json_object_new_object();
        json_object_object_add(*ret_result, "data", data);
        json_object_object_add(*ret_result, "prompt_tokens", json_object_new_int64(n_prompt));
        return CTL_EXIT_OK;
}

int ctl_bus_generate(struct ctl *ctl, const struct ctl_generation *g, char **ret_request_id, char **ret_stream_id,
                     int *ret_fd) {
        sd_bus_message *m = NULL, *reply = NULL;
        sd_bus_error error = SD_BUS_ERROR_NULL;
        const char *request_id;
        int fd, r, status = bus_connect(ctl);

        if (status != CTL_EXIT_OK)
                return status;
        if ((r = sd_bus_message_new_method_call(ctl->sd_bus, &m, BUS_SERVICE, BUS_PATH, BUS_INTERFACE, "Generate")) < 0 ||
            (r = append_generation(m, g)) < 0) {
                sd_bus_message_unref(m);
                return ctl_fail(ctl, r == -EINVAL ? CTL_EXIT_USAGE : CTL_EXIT_REQUEST,
                                "cannot express the request in D-Bus types: %s", strerror(-r));
        }
        r = sd_bus_call(ctl->sd_bus, m, ANSWER_AT_ONCE_USEC, &error, &reply);
        sd_bus_message_unref(m);
        if (r < 0) {
                status = bus_failure(ctl, "Generate", &error, r);
                sd_bus_error_free(&error);
                return status;
        }
        if ((r = sd_bus_message_read(reply, "sh", &request_id, &fd)) < 0) {
                sd_bus_message_unref(reply);
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "Generate answered with other types than (s, h): %s", strerror(-r));
        }
        /* The reply owns its descriptor: ours is a duplicate. */
        int stream_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (stream_fd < 0) {
                status = ctl_fail(ctl, CTL_EXIT_REQUEST, "cannot keep the stream of request %s: %s", request_id,
                                  strerror(errno));
                sd_bus_message_unref(reply);
                return status;
        }
        /* The stream's lines carry the last part of the daemon-wide id ("7/bus7" -> "bus7"). */
        const char *slash = strrchr(request_id, '/');
        *ret_request_id = strdup(request_id);
        *ret_stream_id = strdup(slash ? slash + 1 : request_id);
        sd_bus_message_unref(reply);
        if (!*ret_request_id || !*ret_stream_id) {
                free(*ret_request_id);
                free(*ret_stream_id);
                close(stream_fd);
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "out of memory");
        }
        *ret_fd = stream_fd;
        return CTL_EXIT_OK;
}

/* ---- Replies into the socket's JSON results ---- */

/* a{sv} of basic values (GetStats of daemons that answer with one) as a JSON object. */
static int dictionary_to_json(sd_bus_message *m, struct json_object **ret) {
        struct json_object *o = json_object_new_object();
        const char *key, *contents;
        int r;
        if (!o)
                return -ENOMEM;
        if ((r = sd_bus_message_enter_container(m, 'a', "{sv}")) < 0)
                goto fail;
        while ((r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
                if ((r = sd_bus_message_read(m, "s", &key)) < 0 || (r = sd_bus_message_peek_type(m, NULL, &contents)) < 0)
                        goto fail;
                if (strlen(contents) == 1 && strchr("ybnqiuxtds", contents[0])) {
                        if ((r = sd_bus_message_enter_container(m, 'v', contents)) < 0)
                                goto fail;
                        struct json_object *v = bus_basic_to_json(m, contents[0], &r);
                        if (r < 0)
                                goto fail;
                        json_object_object_add(o, key, v);
                        r = sd_bus_message_exit_container(m);
                } else
                        r = sd_bus_message_skip(m, "v");
                if (r < 0 || (r = sd_bus_message_exit_container(m)) < 0)
                        goto fail;
        }
        if (r < 0 || (r = sd_bus_message_exit_container(m)) < 0)
                goto fail;
        *ret = o;
        return 0;
fail:
        json_object_put(o);
        return r;
}

static struct json_object *parse_json_text(const char *text) {
        struct json_object *v = json_tokener_parse(text);
        return v ? v : json_object_new_string(text);
}

/* The reply of each method as the socket's result. */
static int reply_to_result(const char *op, sd_bus_message *reply, struct json_object **ret) {
        const char *text, *status, *message;
        int flag, r;

        if (strcmp(op, "abort") == 0) {
                if ((r = sd_bus_message_read(reply, "b", &flag)) < 0)
                        return r;
                *ret = json_object_new_object();
                json_object_object_add(*ret, "aborted", json_object_new_boolean(flag));
        } else if (strcmp(op, "pause") == 0) {
                *ret = json_object_new_object();
                json_object_object_add(*ret, "paused", json_object_new_boolean(true));
        } else if (strcmp(op, "collective_rpc") == 0) {
                if ((r = sd_bus_message_read(reply, "s", &text)) < 0)
                        return r;
                *ret = parse_json_text(text);
        } else if (strcmp(op, "health") == 0) {
                if ((r = sd_bus_message_read(reply, "bss", &flag, &status, &message)) < 0)
                        return r;
                *ret = json_object_new_object();
                json_object_object_add(*ret, "healthy", json_object_new_boolean(flag));
                json_object_object_add(*ret, "status", json_object_new_string(status));
                if (*message)
                        json_object_object_add(*ret, "message", json_object_new_string(message));
        } else if (strcmp(op, "stats") == 0) {
                /* JSON text, as the socket's stats; or a dictionary from older daemons */
                if (strcmp(sd_bus_message_get_signature(reply, true), "s") == 0) {
                        if ((r = sd_bus_message_read(reply, "s", &text)) < 0)
                                return r;
                        *ret = parse_json_text(text);
                } else if ((r = dictionary_to_json(reply, ret)) < 0)
                        return r;
        } else if (strcmp(op, "list") == 0) {
                char **ids = NULL;
                if ((r = sd_bus_message_read_strv(reply, &ids)) < 0)
                        return r;
                struct json_object *array = json_object_new_array();
                for (char **id = ids; id && *id; id++) {
                        json_object_array_add(array, json_object_new_string(*id));
                        free(*id);
                }
                free(ids);
                *ret = json_object_new_object();
                json_object_object_add(*ret, "requests", array);
        } else if (strcmp(op, "tokenize") == 0) {
                const int32_t *ids;
                size_t size;
                if ((r = sd_bus_message_read_array(reply, 'i', (const void **) &ids, &size)) < 0)
                        return r;
                struct json_object *tokens = json_object_new_array();
                for (size_t i = 0; i < size / sizeof(*ids); i++)
                        json_object_array_add(tokens, json_object_new_int(ids[i]));
                *ret = json_object_new_object();
                json_object_object_add(*ret, "count", json_object_new_int64((int64_t) (size / sizeof(*ids))));
                json_object_object_add(*ret, "tokens", tokens);
        } else if (strcmp(op, "stop_profile") == 0) {
                uint64_t spans;
                if ((r = sd_bus_message_read(reply, "stb", &text, &spans, &flag)) < 0)
                        return r;
                *ret = json_object_new_object();
                json_object_object_add(*ret, "path", json_object_new_string(text));
                json_object_object_add(*ret, "spans", json_object_new_int64((int64_t) spans));
                json_object_object_add(*ret, "truncated", json_object_new_boolean(flag));
        } else if (strcmp(op, "detokenize") == 0) {
                if ((r = sd_bus_message_read(reply, "s", &text)) < 0)
                        return r;
                *ret = json_object_new_object();
                json_object_object_add(*ret, "prompt", json_object_new_string(text));
        } else if (strcmp(op, "metrics") == 0) {
                if ((r = sd_bus_message_read(reply, "s", &text)) < 0)
                        return r;
                *ret = json_object_new_object();
                json_object_object_add(*ret, "text", json_object_new_string(text));
        } else
                *ret = json_object_new_object(); /* resume, sleep, wake_up, reset_prefix_cache */
        return *ret ? 0 : -ENOMEM;
}

/* ---- Ops as methods ---- */

static struct json_object *member(struct json_object *args, const char *key) {
        struct json_object *v = NULL;
        return args && json_object_object_get_ex(args, key, &v) ? v : NULL;
}

static int append_strv(sd_bus_message *m, struct json_object *array) {
        int r = sd_bus_message_open_container(m, 'a', "s");
        for (size_t i = 0; r >= 0 && array && i < json_object_array_length(array); i++)
                r = sd_bus_message_append(m, "s", json_object_get_string(json_object_array_get_idx(array, i)));
        return r < 0 ? r : sd_bus_message_close_container(m);
}

/* The method's arguments from the op's fields. */
static int append_arguments(const char *op, sd_bus_message *m, struct json_object *args) {
        struct json_object *v;
        if (strcmp(op, "abort") == 0)
                return sd_bus_message_append(m, "s", json_object_get_string(member(args, "request")));
        if (strcmp(op, "pause") == 0) {
                v = member(args, "mode");
                return sd_bus_message_append(m, "sb", v ? json_object_get_string(v) : "abort",
                                             (int) json_object_get_boolean(member(args, "clear_cache")));
        }
        if (strcmp(op, "sleep") == 0) {
                v = member(args, "level");
                return sd_bus_message_append(m, "i", v ? (int32_t) json_object_get_int(v) : 1);
        }
        if (strcmp(op, "wake_up") == 0) /* empty: everything */
                return append_strv(m, member(args, "tags"));
        if (strcmp(op, "reset_prefix_cache") == 0)
                return sd_bus_message_append(m, "b", (int) json_object_get_boolean(member(args, "preempt")));
        if (strcmp(op, "tokenize") == 0)
                return sd_bus_message_append(m, "s", json_object_get_string(member(args, "prompt")));
        if (strcmp(op, "detokenize") == 0) {
                struct json_object *tokens = member(args, "tokens");
                int r = sd_bus_message_open_container(m, 'a', "i");
                for (size_t i = 0; r >= 0 && i < json_object_array_length(tokens); i++)
                        r = sd_bus_message_append(m, "i", json_object_get_int(json_object_array_get_idx(tokens, i)));
                return r < 0 ? r : sd_bus_message_close_container(m);
        }
        if (strcmp(op, "wait_for_requests_to_drain") == 0)
                return sd_bus_message_append(m, "d", json_object_get_double(member(args, "timeout")));
        if (strcmp(op, "collective_rpc") == 0) {
                v = member(args, "args");
                return sd_bus_message_append(m, "ss", json_object_get_string(member(args, "method")),
                                             v ? json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN) : "");
        }
        return 0;
}

static const struct {
        const char *op, *method;
        uint64_t timeout;
} methods[] = {
        { "abort", "Abort", ANSWER_AT_ONCE_USEC },
        { "pause", "Pause", WAIT_FOR_ENGINE_USEC },
        { "resume", "Resume", WAIT_FOR_ENGINE_USEC },
        { "sleep", "Sleep", WAIT_FOR_ENGINE_USEC },
        { "wake_up", "WakeUp", WAIT_FOR_ENGINE_USEC },
        { "reset_prefix_cache", "ResetPrefixCache", WAIT_FOR_ENGINE_USEC },
        { "collective_rpc", "CollectiveRpc", WAIT_FOR_ENGINE_USEC },
        { "health", "CheckHealth", ANSWER_AT_ONCE_USEC },
        { "stats", "GetStats", ANSWER_AT_ONCE_USEC },
        { "list", "ListRequests", ANSWER_AT_ONCE_USEC },
        { "metrics", "GetMetrics", ANSWER_AT_ONCE_USEC },
        { "tokenize", "Tokenize", ANSWER_AT_ONCE_USEC },
        { "start_profile", "StartProfile", ANSWER_AT_ONCE_USEC },
        { "stop_profile", "StopProfile", ANSWER_AT_ONCE_USEC },
        { "detokenize", "Detokenize", ANSWER_AT_ONCE_USEC },
        /* its own timeout ends it with TimedOut */
        { "wait_for_requests_to_drain", "WaitForRequestsToDrain", WAIT_FOR_ENGINE_USEC },
};

int ctl_bus_call(struct ctl *ctl, const char *op, struct json_object *args, struct json_object **ret_result) {
        sd_bus_message *m = NULL, *reply = NULL;
        sd_bus_error error = SD_BUS_ERROR_NULL;
        int r, status = bus_connect(ctl);

        if (status != CTL_EXIT_OK)
                return status;
        if (strcmp(op, "model") == 0) { /* a property: {"name"} as the socket's model op has it */
                char *name = NULL;
                r = sd_bus_get_property_string(ctl->sd_bus, BUS_SERVICE, BUS_PATH, BUS_INTERFACE, "Model", &error, &name);
                if (r < 0) {
                        status = bus_failure(ctl, "Model", &error, r);
                        sd_bus_error_free(&error);
                        return status;
                }
                *ret_result = json_object_new_object();
                json_object_object_add(*ret_result, "name", json_object_new_string(name));
                free(name);
                return CTL_EXIT_OK;
        }
        size_t i = 0;
        while (i < sizeof(methods) / sizeof(*methods) && strcmp(methods[i].op, op) != 0)
                i++;
        if (i == sizeof(methods) / sizeof(*methods))
                return ctl_fail(ctl, CTL_EXIT_USAGE, "%s has no D-Bus method; use the socket", op);
        if ((r = sd_bus_message_new_method_call(ctl->sd_bus, &m, BUS_SERVICE, BUS_PATH, BUS_INTERFACE,
                                                methods[i].method)) < 0 ||
            (r = append_arguments(op, m, args)) < 0) {
                sd_bus_message_unref(m);
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "cannot build the %s call: %s", methods[i].method, strerror(-r));
        }
        r = sd_bus_call(ctl->sd_bus, m, methods[i].timeout, &error, &reply);
        sd_bus_message_unref(m);
        if (r < 0) {
                status = bus_failure(ctl, methods[i].method, &error, r);
                sd_bus_error_free(&error);
                return status;
        }
        r = reply_to_result(op, reply, ret_result);
        sd_bus_message_unref(reply);
        if (r < 0)
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "%s answered with unexpected types (%s)", methods[i].method,
                                strerror(-r));
        return CTL_EXIT_OK;
}
