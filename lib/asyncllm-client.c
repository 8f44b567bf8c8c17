/* SPDX-License-Identifier: MIT */
/* The client: one connection, its requests in flight by id, a queue of bytes to send, and
 * the dispatch of the daemon's lines to callbacks. The blocking calls are the non-blocking
 * ones plus a poll loop that waits for their own completion. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client-internal.h"
#include "ndjson-reader.h"

#define SYSTEM_SOCKET "/run/asyncllm/asyncllmd.sock"
#define USER_SOCKET "asyncllm/asyncllmd.sock" /* under $XDG_RUNTIME_DIR */
#define HELLO_ID "hello"

static uint64_t now_usec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

/* A string cut to fit its buffer (or by a precision, "%.60s" at its end) may end inside a
 * character: drop that part, so that what the client hands out stays UTF-8. */
static void trim_partial_utf8(char *s) {
        size_t len = strlen(s), lead = len;
        while (lead > 0 && len - lead < 3 && ((unsigned char) s[lead - 1] & 0xC0) == 0x80)
                lead--;
        if (lead > 0 && !ndjson_utf8_valid(s + lead - 1, len - lead + 1))
                s[lead - 1] = 0;
}

int client_set_error(asyncllm_client *c, int error, const char *code, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->error, sizeof(c->error), fmt, ap);
        va_end(ap);
        trim_partial_utf8(c->error);
        c->has_error_code = code != NULL;
        snprintf(c->error_code, sizeof(c->error_code), "%s", code ? code : "");
        trim_partial_utf8(c->error_code);
        return error;
}

/* The code and message of an "error" member; false when there is none. */
static bool error_member(struct json_object *msg, const char **ret_code, const char **ret_message) {
        struct json_object *e = NULL, *v;
        if (!json_object_object_get_ex(msg, "error", &e))
                return false;
        *ret_code = NULL;
        *ret_message = "(no message)";
        if (json_object_is_type(e, json_type_string))
                *ret_message = json_object_get_string(e);
        if ((v = client_json_member(e, "code", json_type_string)))
                *ret_code = json_object_get_string(v);
        if ((v = client_json_member(e, "message", json_type_string)))
                *ret_message = json_object_get_string(v);
        /* A failure always has a message, even when the daemon's is empty. */
        if (!**ret_message)
                *ret_message = "(no message)";
        return true;
}

/* The error's retry_after (overloaded) in seconds, or -1 without one. */
static double error_retry_after(struct json_object *msg) {
        struct json_object *e = NULL, *v;
        json_object_object_get_ex(msg, "error", &e);
        if ((v = client_json_member(e, "retry_after", json_type_double)) ||
            (v = client_json_member(e, "retry_after", json_type_int))) {
                /* 1e999 parses as infinity: no number of seconds */
                double seconds = json_object_get_double(v);
                return isfinite(seconds) && seconds >= 0 ? seconds : -1;
        }
        return -1;
}

/* ---- Requests in flight ---------------------------------------------------------------- */

static struct pending *pending_add(asyncllm_client *c, enum pending_kind kind, const char *id) {
        struct pending *p = calloc(1, sizeof(*p));
        if (!p || !(p->id = strdup(id))) {
                free(p);
                return NULL;
        }
        p->kind = kind;
        if (id_map_put(&c->by_id, p) < 0) {
                free(p->id);
                free(p);
                return NULL;
        }
        p->prev = c->last;
        if (c->last)
                c->last->next = p;
        else
                c->first = p;
        c->last = p;
        c->n_pending++;
        return p;
}

/* Takes p out of the table and the list; the caller frees it with pending_free(). */
static void pending_detach(asyncllm_client *c, struct pending *p) {
        id_map_remove(&c->by_id, p);
        if (p->prev)
                p->prev->next = p->next;
        else
                c->first = p->next;
        if (p->next)
                p->next->prev = p->prev;
        else
                c->last = p->prev;
        p->prev = p->next = NULL;
        if (!p->abandoned)
                c->n_pending--;
}

static void pending_free(struct pending *p) {
        free(p->id);
        free(p);
}

static void free_all_pending(asyncllm_client *c) {
        struct pending *p;
        while ((p = c->first)) {
                pending_detach(c, p);
                pending_free(p);
        }
}

/* A free id: "c1", "c2", ..., skipping any the caller chose that are in flight. */
static void make_id(asyncllm_client *c, char buf[static 32]) {
        do
                snprintf(buf, 32, "c%" PRIu64, ++c->next_id);
        while (id_map_get(&c->by_id, buf));
}

/* ---- Sending ------------------------------------------------------------------------- */

/* The connection failed: remember why, stop all I/O; callbacks come from report_death(). */
static int die(asyncllm_client *c, int error, const char *code, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static int die(asyncllm_client *c, int error, const char *code, const char *fmt, ...) {
        if (c->state == CLIENT_DEAD)
                return c->dead_error;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->dead_message, sizeof(c->dead_message), fmt, ap);
        va_end(ap);
        trim_partial_utf8(c->dead_message);
        snprintf(c->dead_code, sizeof(c->dead_code), "%s", code ? code : "");
        trim_partial_utf8(c->dead_code);
        c->dead_has_code = code != NULL;
        c->state = CLIENT_DEAD;
        c->dead_error = error;
        c->out_len = c->out_sent = 0;
        /* The descriptor stays open (a caller's event loop may still watch it) but dead:
         * poll reports it readable at once, and the daemon sees the end. */
        if (c->fd >= 0)
                (void) shutdown(c->fd, SHUT_RDWR);
        return client_set_error(c, error, code, "%s", c->dead_message);
}

static int flush(asyncllm_client *c) {
        while (c->out_sent < c->out_len && !c->write_closed) {
                ssize_t n = send(c->fd, c->out + c->out_sent, c->out_len - c->out_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN || errno == EWOULDBLOCK)
                                return 0;
                        /* The daemon went away; what it sent before may still wait to be
                         * read (final outputs): process() reads it, then reports. */
                        if (errno == EPIPE || errno == ECONNRESET) {
                                c->write_closed = true;
                                break;
                        }
                        return die(c, -errno, NULL, "cannot send to the daemon: %s", strerror(errno));
                }
                c->out_sent += (size_t) n;
        }
        c->out_sent = c->out_len = 0;
        return 0;
}

/* Queues text and its "\n". */
static int queue_line(asyncllm_client *c, const char *text, size_t len) {
        if (c->max_send_line > 0 && len > c->max_send_line)
                return client_set_error(c, -EMSGSIZE, NULL, "the message is %zu bytes, the daemon accepts at most %zu",
                                        len, c->max_send_line);
        if (c->out_sent > 0) {
                memmove(c->out, c->out + c->out_sent, c->out_len - c->out_sent);
                c->out_len -= c->out_sent;
                c->out_sent = 0;
        }
        if (c->out_cap - c->out_len < len + 1) {
                size_t cap = c->out_cap ? c->out_cap : 4096;
                while (cap - c->out_len < len + 1)
                        cap *= 2;
                char *out = realloc(c->out, cap);
                if (!out)
                        return client_set_error(c, -ENOMEM, NULL, "out of memory");
                c->out = out;
                c->out_cap = cap;
        }
        memcpy(c->out + c->out_len, text, len);
        c->out[c->out_len + len] = '\n';
        c->out_len += len + 1;
        return 0;
}

static int check_ready(asyncllm_client *c) {
        switch (c->state) {
        case CLIENT_READY:
                return 0;
        case CLIENT_DEAD:
                return client_set_error(c, -ENOTCONN, NULL, "the connection is gone: %s", c->dead_message);
        default:
                return client_set_error(c, -ENOTCONN, NULL, "not connected");
        }
}

/* Writes a message with the id given as JSON text. */
typedef int (*serialize_fn)(void *data, const char *id, char **ret, size_t *ret_len);

/* msg: a JSON object without "id". */
static int serialize_object(void *data, const char *id, char **ret, size_t *ret_len) {
        struct json_object *msg = data, *idv = json_object_new_string(id);
        if (!idv || json_object_object_add(msg, "id", idv) < 0) {
                json_object_put(idv);
                return -ENOMEM;
        }
        int q = client_json_serialize(msg, ret, ret_len);
        json_object_object_del(msg, "id");
        return q;
}

static int serialize_request(void *data, const char *id, char **ret, size_t *ret_len) {
        return request_serialize(data, id, ret, ret_len);
}

/* Sends a message with the id given or a fresh one, registered as a request of this kind. */
static int submit(asyncllm_client *c, enum pending_kind kind, serialize_fn serialize, void *data, const char *id,
                  struct pending **ret, char **ret_id) {
        char buf[32], *text = NULL, *id_copy = NULL;
        size_t len;
        int q;

        if ((q = check_ready(c)) < 0)
                return q;
        if (id) {
                if (id_map_get(&c->by_id, id))
                        return client_set_error(c, -EEXIST, NULL, "a request with id \"%s\" is in flight already", id);
        } else {
                make_id(c, buf);
                id = buf;
        }
        if ((q = serialize(data, id, &text, &len)) < 0)
                return client_set_error(c, q, NULL, "%s", q == -EINVAL ? "the request has no prompt" : "out of memory");
        if (ret_id && !(id_copy = strdup(id))) {
                free(text);
                return client_set_error(c, -ENOMEM, NULL, "out of memory");
        }
        struct pending *p = pending_add(c, kind, id);
        if (!p) {
                free(text);
                free(id_copy);
                return client_set_error(c, -ENOMEM, NULL, "out of memory");
        }
        if ((q = queue_line(c, text, len)) < 0) {
                free(text);
                free(id_copy);
                pending_detach(c, p);
                pending_free(p);
                return q;
        }
        free(text);
        /* A failure to send shows as the connection's death, reported by the next
         * process(): the request is in flight and will get its callback. */
        (void) flush(c);
        *ret = p;
        if (ret_id)
                *ret_id = id_copy;
        return 0;
}

/* Gives p up: nothing more reaches its callback, and a generate request is aborted. */
static void abandon(asyncllm_client *c, struct pending *p) {
        if (p->abandoned)
                return;
        p->abandoned = true;
        c->n_pending--;
        if (p->kind != PENDING_GENERATE || c->state != CLIENT_READY)
                return;
        /* Out of memory, a member becomes null: the daemon refuses the abort, to nobody. */
        struct json_object *msg = json_object_new_object();
        struct pending *a;
        if (msg && json_object_object_add(msg, "op", json_object_new_string("abort")) == 0 &&
            json_object_object_add(msg, "request", json_object_new_string(p->id)) == 0 &&
            submit(c, PENDING_CALL, serialize_object, msg, NULL, &a, NULL) == 0)
                abandon(c, a); /* its reply is of no interest */
        json_object_put(msg);
}

/* ---- Receiving ----------------------------------------------------------------------- */

static int call_output(asyncllm_client *c, struct pending *p, const asyncllm_output *o) {
        if (!p->output_cb)
                return 0;
        c->in_callback++;
        int r = p->output_cb(c, o, p->userdata);
        c->in_callback--;
        return r;
}

static void call_reply(asyncllm_client *c, struct pending *p, int error, const char *result) {
        if (!p->reply_cb)
                return;
        c->in_callback++;
        p->reply_cb(c, error, result, p->userdata);
        c->in_callback--;
}

/* Every request in flight gets its final callback with the connection's error. */
static void report_death(asyncllm_client *c) {
        struct pending *p;

        if (c->dead_reported)
                return;
        c->dead_reported = true;
        while ((p = c->first)) {
                pending_detach(c, p);
                if (!p->abandoned) {
                        const char *code = c->dead_has_code ? c->dead_code : NULL;
                        client_set_error(c, c->dead_error, code, "%s", c->dead_message);
                        if (p->kind == PENDING_GENERATE) {
                                asyncllm_output o;
                                output_view_failure(&o, p->id, c->dead_error, code, c->dead_message, NULL);
                                (void) call_output(c, p, &o);
                        } else
                                call_reply(c, p, c->dead_error, NULL);
                }
                pending_free(p);
        }
        client_set_error(c, c->dead_error, c->dead_has_code ? c->dead_code : NULL, "%s", c->dead_message);
}

static int on_hello(asyncllm_client *c, struct json_object *msg) {
        const char *code, *message;
        struct json_object *hello, *v;
        char *text = NULL;

        if (error_member(msg, &code, &message))
                return die(c, client_errno_from_code(code), code, "the daemon refused the connection: %s", message);
        if (!(hello = client_json_member(msg, "hello", json_type_object)))
                return die(c, -EPROTO, NULL, "the daemon did not start with a hello");
        if (client_json_serialize(hello, &text, NULL) < 0)
                return die(c, -ENOMEM, NULL, "out of memory");
        free(c->hello_json);
        c->hello_json = text;
        free(c->model);
        c->model = NULL;
        v = client_json_member(hello, "model", json_type_string);
        if (v && !(c->model = strdup(json_object_get_string(v))))
                return die(c, -ENOMEM, NULL, "out of memory");
        if ((v = client_json_member(hello, "max_line_bytes", json_type_int)) && json_object_get_int64(v) > 0)
                c->max_send_line = (size_t) json_object_get_int64(v);

        if (!(v = client_json_member(hello, "protocol", json_type_int)))
                return die(c, -EPROTO, NULL, "the daemon's hello has no protocol version");
        int64_t version = json_object_get_int64(v);
        if (version == ASYNCLLM_PROTOCOL_VERSION) {
                c->protocol = ASYNCLLM_PROTOCOL_VERSION;
                c->state = CLIENT_READY;
                return 0;
        }

        /* Another default: ask for ours (a daemon that speaks it says so). */
        const char *line = "{\"op\":\"hello\",\"id\":\"" HELLO_ID "\",\"protocol\":[1]}";
        int q = queue_line(c, line, strlen(line));
        if (q < 0)
                return die(c, q, NULL, "%s", c->error);
        c->state = CLIENT_NEGOTIATING;
        c->protocol = (int) (version > 0 && version < INT32_MAX ? version : 0);
        return flush(c);
}

static int on_negotiation(asyncllm_client *c, struct json_object *msg) {
        const char *code, *message;
        struct json_object *id = NULL, *result, *v;

        json_object_object_get_ex(msg, "id", &id);
        bool ours = json_object_is_type(id, json_type_string) && strcmp(json_object_get_string(id), HELLO_ID) == 0;
        if (error_member(msg, &code, &message) && (ours || !id || json_object_is_type(id, json_type_null)))
                return die(c, client_errno_from_code(code), code,
                           "the daemon speaks protocol version %d, this library version %d: %s", c->protocol,
                           ASYNCLLM_PROTOCOL_VERSION, message);
        if (!ours)
                return 0;
        result = client_json_member(msg, "result", json_type_object);
        v = client_json_member(result, "protocol", json_type_int);
        if (!v || json_object_get_int64(v) != ASYNCLLM_PROTOCOL_VERSION)
                return die(c, -EPROTONOSUPPORT, NULL,
                           "the daemon speaks protocol version %d, this library version %d", c->protocol,
                           ASYNCLLM_PROTOCOL_VERSION);
        c->protocol = ASYNCLLM_PROTOCOL_VERSION;
        c->state = CLIENT_READY;
        return 0;
}

static int on_output(asyncllm_client *c, struct pending *p, struct json_object *msg, const char *line) {
        asyncllm_output o;
        int q = output_view_parse(&o, p->id, msg, line);
        if (q == -ENOMEM)
                return die(c, q, NULL, "out of memory");
        if (q < 0)
                return die(c, q, NULL, "the daemon sent an output for %s without an array of outputs", p->id);
        if (o.done)
                pending_detach(c, p); /* the callback may reuse the id */
        if (!p->abandoned) {
                q = call_output(c, p, &o);
                if (q < 0 && !o.done)
                        abandon(c, p);
        }
        if (o.done)
                pending_free(p);
        output_view_done(&o);
        return 0;
}

static int on_message(asyncllm_client *c, struct json_object *msg, const char *line) {
        const char *code, *message;
        struct json_object *idv = NULL, *v;
        struct pending *p;

        json_object_object_get_ex(msg, "id", &idv);
        if (!json_object_is_type(idv, json_type_string)) {
                /* Not about a request: about the connection (the daemon shuts down, or could
                 * not read a line of ours), which is over. Anything else is news to ignore. */
                if (error_member(msg, &code, &message))
                        return die(c, client_errno_from_code(code), code, "%s", message);
                return 0;
        }
        /* an id with a NUL inside is none of ours (they hold none): as a C string it would
         * match the one it starts with */
        const char *id = json_object_get_string(idv);
        if (strlen(id) != (size_t) json_object_get_string_len(idv) || !(p = id_map_get(&c->by_id, id)))
                return 0; /* for a request given up and gone, or not ours */

        if (error_member(msg, &code, &message)) {
                int error = client_errno_from_code(code);
                pending_detach(c, p);
                if (!p->abandoned) {
                        client_set_error(c, error, code, "%s", message);
                        if (p->kind == PENDING_GENERATE) {
                                asyncllm_output o;
                                output_view_failure(&o, p->id, error, code, message, line);
                                /* only the overloaded error has one (asyncllm_output_retry_after()) */
                                if (error == -EAGAIN)
                                        o.retry_after = error_retry_after(msg);
                                (void) call_output(c, p, &o);
                        } else
                                call_reply(c, p, error, NULL);
                }
                pending_free(p);
                return 0;
        }
        if (p->kind == PENDING_CALL && json_object_object_get_ex(msg, "result", &v)) {
                char *text = NULL;
                pending_detach(c, p);
                if (!p->abandoned) {
                        if (client_json_serialize(v, &text, NULL) < 0) {
                                pending_free(p);
                                return die(c, -ENOMEM, NULL, "out of memory");
                        }
                        call_reply(c, p, 0, text);
                        free(text);
                }
                pending_free(p);
                return 0;
        }
        if (p->kind == PENDING_GENERATE && json_object_object_get_ex(msg, "outputs", NULL))
                return on_output(c, p, msg, line);
        return 0;
}

static int dispatch_line(asyncllm_client *c, const char *line, size_t len) {
        if (memchr(line, 0, len))
                return die(c, -EPROTO, NULL, "the daemon sent a line with a NUL byte");
        json_tokener_reset(c->tokener);
        /* The NUL after the line ends a number or literal at its end (json-c waits for more
         * without it). */
        struct json_object *msg = json_tokener_parse_ex(c->tokener, line, (int) len + 1);
        enum json_tokener_error e = json_tokener_get_error(c->tokener);
        size_t end = json_tokener_get_parse_end(c->tokener);
        if (e != json_tokener_success) {
                json_object_put(msg);
                return die(c, -EPROTO, NULL, "the daemon sent a line that is not JSON (%s): %.60s",
                           json_tokener_error_desc(e), line);
        }
        while (end < len && strchr(" \t\r", line[end]))
                end++;
        if (end < len || !json_object_is_type(msg, json_type_object)) {
                json_object_put(msg);
                return die(c, -EPROTO, NULL, "the daemon sent a line that is not one JSON object: %.60s", line);
        }

        int q;
        switch (c->state) {
        case CLIENT_HANDSHAKE:
                q = on_hello(c, msg);
                break;
        case CLIENT_NEGOTIATING:
                q = on_negotiation(c, msg);
                break;
        case CLIENT_READY:
                q = on_message(c, msg, line);
                break;
        default:
                q = 0;
        }
        json_object_put(msg);
        return q;
}

/* Reads until the socket is empty, dispatching each complete line. */
static int read_all(asyncllm_client *c) {
        for (;;) {
                void *buf;
                size_t size;
                int q = ndjson_reader_space(c->reader, &buf, &size);
                if (q < 0)
                        return die(c, q, NULL, "cannot buffer the daemon's line: %s", strerror(-q));
                ssize_t n = recv(c->fd, buf, size, MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN || errno == EWOULDBLOCK)
                                return 0;
                        return die(c, -errno, NULL, "cannot read from the daemon: %s", strerror(errno));
                }
                if (n == 0)
                        return die(c, -ECONNRESET, NULL, "%s",
                                   ndjson_reader_pending(c->reader) > 0 ?
                                   "the daemon closed the connection in the middle of a line" :
                                   "the daemon closed the connection");
                ndjson_reader_commit(c->reader, (size_t) n);
                c->last_activity = now_usec();

                struct ndjson_line line;
                while ((q = ndjson_reader_next(c->reader, &line)) != 0) {
                        if (q == -EMSGSIZE)
                                return die(c, -EMSGSIZE, NULL, "the daemon sent a line longer than %zu bytes",
                                           c->max_line);
                        if (q < 0)
                                return die(c, -EPROTO, NULL, "the daemon sent a line that is not UTF-8");
                        if ((q = dispatch_line(c, line.data, line.len)) < 0 || c->state == CLIENT_DEAD)
                                return q;
                }
        }
}

static int process(asyncllm_client *c) {
        switch (c->state) {
        case CLIENT_UNCONNECTED:
                return client_set_error(c, -ENOTCONN, NULL, "not connected");
        case CLIENT_DEAD:
                if (!c->dead_reported) {
                        report_death(c);
                        return c->dead_error;
                }
                return check_ready(c);
        default:
                break;
        }
        (void) flush(c);
        if (c->state != CLIENT_DEAD)
                (void) read_all(c);
        if (c->state != CLIENT_DEAD)
                (void) flush(c); /* what the callbacks queued */
        if (c->state != CLIENT_DEAD && c->write_closed)
                die(c, -ECONNRESET, NULL, "the daemon closed the connection");
        if (c->state == CLIENT_DEAD) {
                report_death(c);
                return c->dead_error;
        }
        return 0;
}

static int wait_once(asyncllm_client *c, uint64_t timeout_usec) {
        if (c->state == CLIENT_UNCONNECTED)
                return client_set_error(c, -ENOTCONN, NULL, "not connected");
        if (c->state == CLIENT_DEAD)
                return process(c);

        struct pollfd pfd = { .fd = c->fd, .events = (short) asyncllm_client_events(c) };
        struct timespec ts = {
                .tv_sec = (time_t) (timeout_usec / 1000000),
                .tv_nsec = (long) (timeout_usec % 1000000) * 1000,
        };
        int r = ppoll(&pfd, 1, timeout_usec == UINT64_MAX ? NULL : &ts, NULL);
        if (r < 0) {
                if (errno == EINTR)
                        return 0;
                return client_set_error(c, -errno, NULL, "cannot wait for the daemon: %s", strerror(errno));
        }
        if (r == 0)
                return 0;
        int q = process(c);
        return q < 0 ? q : 1;
}

/* Processes until done(c, data), failing after the timeout without a word from the daemon. */
int client_run_until(asyncllm_client *c, bool (*done)(const asyncllm_client *c, void *data), void *data) {
        c->last_activity = now_usec();
        while (!done(c, data)) {
                uint64_t timeout = UINT64_MAX;
                if (c->timeout_usec > 0) {
                        uint64_t now = now_usec(), deadline = c->last_activity + c->timeout_usec;
                        if (now >= deadline)
                                return client_set_error(c, -ETIMEDOUT, NULL, "the daemon did not answer within %.3f s",
                                                        (double) c->timeout_usec / 1e6);
                        timeout = deadline - now;
                }
                int q = wait_once(c, timeout);
                if (done(c, data))
                        break;
                if (q < 0)
                        return q;
        }
        return 0;
}

/* After a blocking call stopped waiting early: its callback data is on the stack. */
void client_give_up(asyncllm_client *c, const char *id) {
        struct pending *p = id_map_get(&c->by_id, id);
        if (p) {
                abandon(c, p);
                if (c->state == CLIENT_READY)
                        (void) flush(c);
        }
}

/* ---- Connection ---------------------------------------------------------------------- */

int asyncllm_client_new(asyncllm_client **ret) {
        asyncllm_client *c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->fd = -1;
        c->max_line = CLIENT_DEFAULT_MAX_LINE;
        id_map_init(&c->by_id, offsetof(struct pending, id));
        *ret = c;
        return 0;
}

/* Back to a client never connected, keeping the settings. */
static void disconnect(asyncllm_client *c) {
        free_all_pending(c);
        id_map_done(&c->by_id);
        if (c->fd >= 0)
                close(c->fd);
        c->fd = -1;
        c->reader = ndjson_reader_free(c->reader);
        if (c->tokener)
                json_tokener_free(c->tokener);
        c->tokener = NULL;
        free(c->out);
        c->out = NULL;
        c->out_len = c->out_sent = c->out_cap = 0;
        free(c->hello_json);
        c->hello_json = NULL;
        free(c->model);
        c->model = NULL;
        c->protocol = 0;
        c->max_send_line = 0;
        c->dead_error = 0;
        c->dead_reported = false;
        c->write_closed = false;
        c->state = CLIENT_UNCONNECTED;
}

asyncllm_client *asyncllm_client_free(asyncllm_client *c) {
        if (c) {
                disconnect(c);
                free(c);
        }
        return NULL;
}

int asyncllm_default_socket_path(char **ret) {
        const char *env = secure_getenv("ASYNCLLM_SOCKET");
        char *path = NULL;
        struct stat st;

        if (env && *env)
                path = strdup(env);
        else if (geteuid() != 0 && (env = secure_getenv("XDG_RUNTIME_DIR")) && env[0] == '/') {
                if (asprintf(&path, "%s/%s", env, USER_SOCKET) < 0)
                        return -ENOMEM;
                if (stat(path, &st) < 0 || !S_ISSOCK(st.st_mode)) {
                        free(path);
                        path = strdup(SYSTEM_SOCKET);
                }
        } else
                path = strdup(SYSTEM_SOCKET);
        if (!path)
                return -ENOMEM;
        *ret = path;
        return 0;
}

static bool handshake_over(const asyncllm_client *c, void *data) {
        return c->state == CLIENT_READY || c->state == CLIENT_DEAD;
}

int asyncllm_client_connect_fd(asyncllm_client *c, int fd) {
        int q, flags;

        if (c->state != CLIENT_UNCONNECTED) {
                close(fd);
                return client_set_error(c, -EISCONN, NULL, "already connected");
        }
        if (c->in_callback) {
                close(fd);
                return client_set_error(c, -EBUSY, NULL, "cannot connect from inside a callback");
        }
        c->fd = fd;
        if ((flags = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
                q = client_set_error(c, -errno, NULL, "cannot make the socket non-blocking: %s", strerror(errno));
                disconnect(c);
                return q;
        }
        if ((q = ndjson_reader_new(c->max_line, &c->reader)) < 0 ||
            (q = (c->tokener = json_tokener_new_ex(CLIENT_JSON_MAX_DEPTH)) ? 0 : -ENOMEM) < 0) {
                disconnect(c);
                return client_set_error(c, q, NULL, "out of memory");
        }
        json_tokener_set_flags(c->tokener, JSON_TOKENER_STRICT);
        c->dead_message[0] = 0;
        c->state = CLIENT_HANDSHAKE;

        q = client_run_until(c, handshake_over, NULL);
        if (q == 0 && c->state == CLIENT_READY)
                return 0;
        /* The handshake went through and the connection ended behind it (a short stream of
         * an attached request, read whole): connected, and process() reports the end after
         * the outputs that came. */
        if (q == 0 && c->state == CLIENT_DEAD && c->protocol == ASYNCLLM_PROTOCOL_VERSION)
                return 0;
        if (q == 0)
                q = c->dead_error;
        disconnect(c);
        return q;
}

int asyncllm_client_connect(asyncllm_client *c, const char *path) {
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        char *path_default = NULL;
        int q;

        if (c->state != CLIENT_UNCONNECTED)
                return client_set_error(c, -EISCONN, NULL, "already connected");
        if (!path) {
                if ((q = asyncllm_default_socket_path(&path_default)) < 0)
                        return client_set_error(c, q, NULL, "out of memory");
                path = path_default;
        }
        if (strlen(path) >= sizeof(addr.sun_path)) {
                q = client_set_error(c, -ENAMETOOLONG, NULL, "socket path %s is longer than %zu bytes", path,
                                     sizeof(addr.sun_path) - 1);
                free(path_default);
                return q;
        }
        memcpy(addr.sun_path, path, strlen(path) + 1);

        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                q = client_set_error(c, -errno, NULL, "cannot create a socket: %s", strerror(errno));
                free(path_default);
                return q;
        }
        /* Blocking: a full backlog makes us wait rather than fail. */
        while ((q = connect(fd, (const struct sockaddr *) &addr, sizeof(addr))) < 0 && errno == EINTR)
                ;
        if (q < 0) {
                q = client_set_error(c, -errno, NULL, "cannot connect to %s: %s", path, strerror(errno));
                close(fd);
                free(path_default);
                return q;
        }
        free(path_default);
        return asyncllm_client_connect_fd(c, fd);
}

void asyncllm_client_set_timeout(asyncllm_client *c, uint64_t usec) {
        c->timeout_usec = usec;
}

int asyncllm_client_set_max_line(asyncllm_client *c, size_t bytes) {
        /* json-c takes lengths as int. */
        if (bytes == 0 || bytes >= INT32_MAX)
                return client_set_error(c, -EINVAL, NULL, "a line limit must be 1 to %d bytes", INT32_MAX - 1);
        if (c->state != CLIENT_UNCONNECTED)
                return client_set_error(c, -EISCONN, NULL, "the line limit is set before connecting");
        c->max_line = bytes;
        return 0;
}

const char *asyncllm_client_hello(const asyncllm_client *c) {
        return c->hello_json;
}

const char *asyncllm_client_model(const asyncllm_client *c) {
        return c->model;
}

int asyncllm_client_protocol(const asyncllm_client *c) {
        return c->state == CLIENT_READY || c->state == CLIENT_DEAD ? c->protocol : 0;
}

const char *asyncllm_client_error(const asyncllm_client *c) {
        return c->error;
}

const char *asyncllm_client_error_code(const asyncllm_client *c) {
        return c->has_error_code ? c->error_code : NULL;
}

/* ---- Non-blocking API ---------------------------------------------------------------- */

int asyncllm_client_fd(const asyncllm_client *c) {
        return c->state == CLIENT_UNCONNECTED ? -ENOTCONN : c->fd;
}

int asyncllm_client_events(const asyncllm_client *c) {
        switch (c->state) {
        case CLIENT_UNCONNECTED:
                return 0;
        case CLIENT_DEAD:
                /* Readable at once (shut down): the loop calls process(), which reports. */
                return c->dead_reported ? 0 : POLLIN;
        default:
                return POLLIN | (c->out_sent < c->out_len && !c->write_closed ? POLLOUT : 0);
        }
}

int asyncllm_client_process(asyncllm_client *c) {
        if (c->in_callback)
                return client_set_error(c, -EBUSY, NULL, "asyncllm_client_process() called from inside a callback");
        return process(c);
}

int asyncllm_client_wait(asyncllm_client *c, uint64_t timeout_usec) {
        if (c->in_callback)
                return client_set_error(c, -EBUSY, NULL, "asyncllm_client_wait() called from inside a callback");
        return wait_once(c, timeout_usec);
}

size_t asyncllm_client_pending(const asyncllm_client *c) {
        return c->n_pending;
}

int client_submit_generate(asyncllm_client *c, const asyncllm_request *r, asyncllm_output_fn cb, void *userdata,
                           char **ret_id) {
        struct pending *p;

        if (!r)
                return client_set_error(c, -EINVAL, NULL, "no request");
        /* The builder is not changed: serialize_request() only reads it. */
        int q = submit(c, PENDING_GENERATE, serialize_request, (void *) r, request_id(r), &p, ret_id);
        if (q < 0)
                return q;
        p->output_cb = cb;
        p->userdata = userdata;
        return 0;
}

int asyncllm_client_submit_generate(asyncllm_client *c, const asyncllm_request *r, asyncllm_output_fn cb,
                                    void *userdata, char **ret_id) {
        return client_submit_generate(c, r, cb, userdata, ret_id);
}

int asyncllm_client_attach_generate(asyncllm_client *c, const char *request_id, asyncllm_output_fn cb,
                                    void *userdata) {
        struct pending *p;

        if (!client_id_valid(request_id))
                return client_set_error(c, -EINVAL, NULL, "not a request id");
        if (c->state == CLIENT_DEAD)
                return check_ready(c);
        if (id_map_get(&c->by_id, request_id))
                return client_set_error(c, -EEXIST, NULL, "a request with id \"%s\" is in flight already", request_id);
        if (!(p = pending_add(c, PENDING_GENERATE, request_id)))
                return client_set_error(c, -ENOMEM, NULL, "out of memory");
        p->output_cb = cb;
        p->userdata = userdata;
        return 0;
}

/* {"op": op, ...args}, args a JSON object as text or NULL. */
static int call_message(asyncllm_client *c, const char *op, const char *args_json, struct json_object **ret) {
        struct json_object *msg = NULL, *v;

        if (!op || !*op || !ndjson_utf8_valid(op, strlen(op)))
                return client_set_error(c, -EINVAL, NULL, "an op is a non-empty UTF-8 string");
        if (args_json) {
                int q = client_json_parse(args_json, &msg);
                if (q == -ENOMEM)
                        return client_set_error(c, q, NULL, "out of memory");
                if (q < 0 || !json_object_is_type(msg, json_type_object)) {
                        json_object_put(msg);
                        return client_set_error(c, -EINVAL, NULL, "the arguments of %s are not a JSON object", op);
                }
                if (json_object_object_get_ex(msg, "op", NULL) || json_object_object_get_ex(msg, "id", NULL)) {
                        json_object_put(msg);
                        return client_set_error(c, -EINVAL, NULL, "the arguments of %s may not set \"op\" or \"id\"",
                                                op);
                }
        } else if (!(msg = json_object_new_object()))
                return client_set_error(c, -ENOMEM, NULL, "out of memory");
        if (!(v = json_object_new_string(op)) || json_object_object_add(msg, "op", v) < 0) {
                json_object_put(v);
                json_object_put(msg);
                return client_set_error(c, -ENOMEM, NULL, "out of memory");
        }
        *ret = msg;
        return 0;
}

int client_submit_call(asyncllm_client *c, const char *op, const char *args_json, asyncllm_reply_fn cb, void *userdata,
                       char **ret_id) {
        struct json_object *msg = NULL;
        struct pending *p;
        int q = call_message(c, op, args_json, &msg);
        if (q < 0)
                return q;
        q = submit(c, PENDING_CALL, serialize_object, msg, NULL, &p, ret_id);
        json_object_put(msg);
        if (q < 0)
                return q;
        p->reply_cb = cb;
        p->userdata = userdata;
        return 0;
}

int asyncllm_client_submit_call(asyncllm_client *c, const char *op, const char *args_json, asyncllm_reply_fn cb,
                                void *userdata, char **ret_id) {
        return client_submit_call(c, op, args_json, cb, userdata, ret_id);
}

/* {"request": id} as JSON text. */
int client_abort_args(asyncllm_client *c, const char *request_id, char **ret) {
        if (!client_id_valid(request_id))
                return client_set_error(c, -EINVAL, NULL, "not a request id");
        struct json_object *args = json_object_new_object(), *v = json_object_new_string(request_id);
        if (!args || !v || json_object_object_add(args, "request", v) < 0) {
                json_object_put(v);
                json_object_put(args);
                return client_set_error(c, -ENOMEM, NULL, "out of memory");
        }
        int q = client_json_serialize(args, ret, NULL);
        json_object_put(args);
        return q < 0 ? client_set_error(c, q, NULL, "out of memory") : 0;
}

int asyncllm_client_submit_abort(asyncllm_client *c, const char *request_id, asyncllm_reply_fn cb, void *userdata,
                                 char **ret_id) {
        char *args;
        int q = client_abort_args(c, request_id, &args);
        if (q < 0)
                return q;
        q = client_submit_call(c, "abort", args, cb, userdata, ret_id);
        free(args);
        return q;
}
