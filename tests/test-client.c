/* SPDX-License-Identifier: MIT */
/* libasyncllm-client against a fake daemon: a thread that speaks protocol version 1 on the
 * other end of a socketpair (or of a Unix socket in a temporary directory). Handshake and
 * version negotiation, streaming in order, many requests on one connection, errors with
 * their code and message, a daemon that dies mid-stream or sends a line over the limit,
 * a daemon that reads slowly (the request goes out through POLLOUT), aborts, timeouts, and
 * the request builder's JSON. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "asyncllm-client.h"
#include "ndjson-reader.h"
#include "test-helpers.h"

#define HELLO_V1 "{\"hello\": {\"protocol\": 1, \"server\": \"asyncllmd\", \"version\": \"0.1.0\", \"model\": \"fake-model\"}}"
#define MAX_ACTIVE 64
/* How long a wait may last before the test calls it a hang (20 s, stretched on slow runs). */
#define HANG_MS ((int) (test_scaled(20) * 1000))

/* ---- The fake daemon ----------------------------------------------------------------- */

struct fake_opts {
        const char *hello;   /* the first line; NULL: HELLO_V1 */
        bool no_hello;       /* says nothing first */
        bool accept_v1;      /* {"op": "hello"} gets protocol 1, else unsupported_protocol */
        int close_after;     /* > 0: after this many outputs, half a line and close */
        size_t long_line;    /* > 0: the first generate gets a line of this many bytes */
        int bufsize;         /* > 0: small socket buffers, and reads slowly */
        unsigned start_after; /* streams nothing before this many generate requests came */
        bool nul_ids;        /* before each output, a finished one for the id with "\u0000x" after it */
};

/* A generate request that streams: " tok1", " tok2", ... up to total (-1: never a word). */
struct active {
        char id[300];
        int total;
        int sent;
};

struct fake_server {
        pthread_t thread;
        int fd;        /* the daemon's end */
        int listen_fd; /* >= 0: accept the connection on it first */
        struct fake_opts opts;
        struct active active[MAX_ACTIVE];
        size_t n_active;
        int outputs_sent;
        bool closed;
        /* What it saw; read after fake_stop(). */
        unsigned n_generates, n_aborts;
        size_t biggest_prompt;
        char *last_generate; /* the last generate line as received */
};

static void send_raw(struct fake_server *fs, const char *s, size_t len) {
        while (len > 0 && !fs->closed) {
                ssize_t n = send(fs->fd, s, len, MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        fs->closed = true; /* the client went away */
                        return;
                }
                s += n;
                len -= (size_t) n;
        }
}

static void send_line(struct fake_server *fs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void send_line(struct fake_server *fs, const char *fmt, ...) {
        char *s = NULL;
        va_list ap;
        va_start(ap, fmt);
        int n = vasprintf(&s, fmt, ap);
        va_end(ap);
        ck_assert_int_ge(n, 0);
        send_raw(fs, s, (size_t) n);
        send_raw(fs, "\n", 1);
        free(s);
}

static void send_json(struct fake_server *fs, struct json_object *o) {
        send_line(fs, "%s", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
}

static const char *string_member(struct json_object *o, const char *key) {
        struct json_object *v;
        if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
                return NULL;
        return json_object_get_string(v);
}

static void send_output(struct fake_server *fs, struct active *a) {
        a->sent++;
        bool last = a->sent == a->total;
        if (fs->opts.close_after > 0 && fs->outputs_sent == fs->opts.close_after) {
                send_raw(fs, "{\"id\": \"", 8);
                shutdown(fs->fd, SHUT_RDWR);
                fs->closed = true;
                return;
        }
        if (fs->opts.nul_ids)
                send_line(fs,
                          "{\"id\": \"%s\\u0000x\", \"outputs\": [{\"index\": 0, \"text\": \"bogus\", \"token_ids\": [7], "
                          "\"finish_reason\": \"stop\"}], \"finished\": true}",
                          a->id);
        send_line(fs,
                  "{\"id\": \"%s\", \"outputs\": [{\"index\": 0, \"text\": \" tok%d\", \"token_ids\": [%d], "
                  "\"cumulative_logprob\": null, \"logprobs\": null, \"finish_reason\": %s, \"stop_reason\": null}], "
                  "\"finished\": %s, \"num_cached_tokens\": 0%s}",
                  a->id, a->sent, a->sent, last ? "\"length\"" : "null", last ? "true" : "false",
                  last ? ", \"usage\": {\"prompt_tokens\": 2, \"completion_tokens\": 99}" : "");
        fs->outputs_sent++;
}

static struct active *find_active(struct fake_server *fs, const char *id) {
        for (size_t i = 0; i < fs->n_active; i++)
                if (strcmp(fs->active[i].id, id) == 0)
                        return &fs->active[i];
        return NULL;
}

static void remove_active(struct fake_server *fs, struct active *a) {
        *a = fs->active[--fs->n_active];
}

static void on_generate(struct fake_server *fs, struct json_object *m, const char *id, const char *line) {
        const char *prompt = string_member(m, "prompt");
        struct json_object *v;

        fs->n_generates++;
        free(fs->last_generate);
        fs->last_generate = strdup(line);
        if (fs->opts.long_line > 0 && fs->n_generates == 1) {
                char *text = malloc(fs->opts.long_line);
                ck_assert_ptr_nonnull(text);
                memset(text, 'x', fs->opts.long_line);
                send_line(fs, "{\"id\": \"%s\", \"outputs\": [{\"index\": 0, \"text\": \"%.*s\"}], \"finished\": false}", id,
                          (int) fs->opts.long_line, text);
                free(text);
                return;
        }
        if (prompt && strlen(prompt) > fs->biggest_prompt)
                fs->biggest_prompt = strlen(prompt);
        if (json_object_object_get_ex(m, "prompt_token_ids", &v)) {
                send_line(fs,
                          "{\"id\": \"%s\", \"outputs\": [{\"index\": 0, \"text\": \"\", \"token_ids\": %s, "
                          "\"finish_reason\": \"stop\", \"stop_reason\": 2}], \"finished\": true}",
                          id, json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
                return;
        }
        if (json_object_object_get_ex(m, "messages", &v)) {
                struct json_object *last = json_object_array_get_idx(v, json_object_array_length(v) - 1);
                struct json_object *out = json_object_new_object(), *outputs = json_object_new_array();
                struct json_object *c = json_object_new_object();
                json_object_object_add(c, "index", json_object_new_int(0));
                json_object_object_add(c, "text", json_object_get(json_object_object_get(last, "content")));
                json_object_object_add(c, "finish_reason", json_object_new_string("stop"));
                json_object_object_add(c, "stop_reason", json_object_new_string("END"));
                json_object_array_add(outputs, c);
                json_object_object_add(out, "id", json_object_new_string(id));
                json_object_object_add(out, "outputs", outputs);
                json_object_object_add(out, "finished", json_object_new_boolean(true));
                send_json(fs, out);
                json_object_put(out);
                return;
        }
        ck_assert_ptr_nonnull(prompt);
        int n;
        if (strcmp(prompt, "fail") == 0)
                send_line(fs, "{\"id\": \"%s\", \"error\": {\"code\": \"invalid_params\", "
                              "\"message\": \"top_p must be in (0, 1], got 2\"}}", id);
        else if (strcmp(prompt, "fail-late") == 0) {
                send_line(fs, "{\"id\": \"%s\", \"outputs\": [{\"index\": 0, \"text\": \" a\", \"token_ids\": [1], "
                              "\"finish_reason\": \"error\", \"stop_reason\": null}], \"finished\": true}", id);
                send_line(fs, "{\"id\": \"%s\", \"error\": {\"code\": \"engine_dead\", \"message\": \"kernel failed\"}}",
                          id);
        } else if (strcmp(prompt, "overloaded") == 0) {
                send_line(fs, "{\"id\": \"%s\", \"outputs\": [{\"index\": 0, \"text\": \"\", \"token_ids\": [], "
                              "\"finish_reason\": \"error\", \"stop_reason\": null}], \"finished\": true}", id);
                send_line(fs, "{\"id\": \"%s\", \"error\": {\"code\": \"overloaded\", \"message\": \"no room\", "
                              "\"retry_after\": 0.75}}", id);
        } else if (strcmp(prompt, "forever") == 0 || strcmp(prompt, "silent") == 0 ||
                   sscanf(prompt, "count %d", &n) == 1) {
                ck_assert_uint_lt(fs->n_active, MAX_ACTIVE);
                struct active *a = &fs->active[fs->n_active++];
                snprintf(a->id, sizeof(a->id), "%s", id);
                a->total = strcmp(prompt, "forever") == 0 ? 1 << 30 : strcmp(prompt, "silent") == 0 ? -1 : n;
                a->sent = 0;
        } else
                send_line(fs, "{\"id\": \"%s\", \"outputs\": [{\"index\": 0, \"text\": \"len=%zu\", \"token_ids\": [], "
                              "\"finish_reason\": \"length\", \"stop_reason\": null}], \"finished\": true}",
                          id, strlen(prompt));
}

/* encode: the vector [pooling_type's length, dimensions, 0.1] for "vector"; no vector and an
 * error after it for "fail-late"; no vector, aborted, for "aborted". The request's fields
 * are echoed so that the test sees what went out. */
static void on_encode(struct fake_server *fs, struct json_object *m, const char *id) {
        const char *prompt = string_member(m, "prompt"), *pooling = string_member(m, "pooling_type");
        struct json_object *v;
        ck_assert_ptr_nonnull(prompt);
        ck_assert(!json_object_object_get_ex(m, "params", NULL));
        int64_t dimensions = json_object_object_get_ex(m, "dimensions", &v) ? json_object_get_int64(v) : 0;
        bool normalize = json_object_object_get_ex(m, "normalize", &v) && json_object_get_boolean(v);
        if (strcmp(prompt, "fail-late") == 0) {
                send_line(fs, "{\"id\": \"%s\", \"outputs\": {\"data\": null, \"finish_reason\": \"error\"}, "
                              "\"finished\": true}", id);
                send_line(fs, "{\"id\": \"%s\", \"error\": {\"code\": \"engine_dead\", \"message\": \"kernel failed\"}}",
                          id);
        } else if (strcmp(prompt, "aborted") == 0)
                send_line(fs, "{\"id\": \"%s\", \"outputs\": {\"data\": null, \"finish_reason\": \"abort\"}, "
                              "\"finished\": true}", id);
        else
                send_line(fs, "{\"id\": \"%s\", \"outputs\": {\"data\": [%zu, %" PRId64 ", %d, 0.100000001], "
                              "\"finish_reason\": \"stop\"}, \"finished\": true, \"usage\": {\"prompt_tokens\": 5, "
                              "\"completion_tokens\": 0}}",
                          id, pooling ? strlen(pooling) : 0, dimensions, normalize);
}

static void on_line(struct fake_server *fs, const char *line, size_t len) {
        struct json_object *m = json_tokener_parse(line);
        ck_assert_msg(m != NULL, "the client sent a line that is not JSON: %.80s", line);
        const char *op = string_member(m, "op"), *id = string_member(m, "id");
        ck_assert_ptr_nonnull(op);
        ck_assert_ptr_nonnull(id);

        if (strcmp(op, "hello") == 0) {
                if (fs->opts.accept_v1)
                        send_line(fs, "{\"id\": \"%s\", \"result\": {\"protocol\": 1}}", id);
                else
                        send_line(fs, "{\"id\": \"%s\", \"error\": {\"code\": \"unsupported_protocol\", "
                                      "\"message\": \"this daemon speaks version 2 only\"}}", id);
        } else if (strcmp(op, "generate") == 0)
                on_generate(fs, m, id, line);
        else if (strcmp(op, "encode") == 0)
                on_encode(fs, m, id);
        else if (strcmp(op, "health") == 0)
                send_line(fs, "{\"id\": \"%s\", \"result\": {\"healthy\": true}}", id);
        else if (strcmp(op, "stats") == 0)
                send_line(fs, "{\"id\": \"%s\", \"result\": {\"num_running\": %zu}}", id, fs->n_active);
        else if (strcmp(op, "pause") == 0) {
                /* echoes its arguments */
                char *id_copy = strdup(id);
                ck_assert_ptr_nonnull(id_copy);
                json_object_object_del(m, "op");
                json_object_object_del(m, "id");
                send_line(fs, "{\"id\": \"%s\", \"result\": %s}", id_copy,
                          json_object_to_json_string_ext(m, JSON_C_TO_STRING_PLAIN));
                free(id_copy);
        } else if (strcmp(op, "abort") == 0) {
                const char *request = string_member(m, "request");
                struct active *a = request ? find_active(fs, request) : NULL;
                fs->n_aborts++;
                send_line(fs, "{\"id\": \"%s\", \"result\": {\"aborted\": %s}}", id, a ? "true" : "false");
                if (a) {
                        send_line(fs, "{\"id\": \"%s\", \"outputs\": [{\"index\": 0, \"text\": \"\", \"token_ids\": [], "
                                      "\"finish_reason\": \"abort\", \"stop_reason\": null}], \"finished\": true}",
                                  a->id);
                        remove_active(fs, a);
                }
        } else
                send_line(fs, "{\"id\": \"%s\", \"error\": {\"code\": \"unknown_op\", \"message\": \"unknown op \\\"%s\\\"\"}}",
                          id, op);
        json_object_put(m);
        (void) len;
}

static void *fake_serve(void *data) {
        struct fake_server *fs = data;
        struct ndjson_reader *reader = NULL;

        if (fs->listen_fd >= 0) {
                fs->fd = accept(fs->listen_fd, NULL, NULL);
                ck_assert_int_ge(fs->fd, 0);
        }
        if (fs->opts.bufsize > 0) {
                int size = fs->opts.bufsize;
                ck_assert_int_eq(setsockopt(fs->fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size)), 0);
                ck_assert_int_eq(setsockopt(fs->fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size)), 0);
        }
        if (!fs->opts.no_hello)
                send_line(fs, "%s", fs->opts.hello ? fs->opts.hello : HELLO_V1);
        ck_assert_int_eq(ndjson_reader_new(16u << 20, &reader), 0);

        while (!fs->closed) {
                bool streaming = false;
                for (size_t i = 0; i < fs->n_active; i++)
                        streaming |= fs->active[i].total >= 0;
                streaming &= fs->n_generates >= fs->opts.start_after;
                struct pollfd pfd = { .fd = fs->fd, .events = POLLIN };
                int r = poll(&pfd, 1, streaming ? 0 : HANG_MS);
                ck_assert_int_ge(r, 0);
                if (r == 0 && !streaming)
                        break; /* a test that forgot us */
                if (r > 0) {
                        void *buf;
                        size_t room;
                        ck_assert_int_eq(ndjson_reader_space(reader, &buf, &room), 0);
                        if (fs->opts.bufsize > 0 && room > 4096)
                                room = 4096;
                        ssize_t n = recv(fs->fd, buf, room, 0);
                        if (n <= 0)
                                break; /* the client closed */
                        ndjson_reader_commit(reader, (size_t) n);
                        struct ndjson_line line;
                        int q;
                        while ((q = ndjson_reader_next(reader, &line)) != 0) {
                                ck_assert_int_eq(q, 1);
                                on_line(fs, line.data, line.len);
                        }
                        if (fs->opts.bufsize > 0)
                                usleep(200);
                }
                /* One output for each streaming request per round: they interleave. */
                for (size_t i = 0; streaming && i < fs->n_active && !fs->closed;) {
                        struct active *a = &fs->active[i];
                        if (a->total < 0) {
                                i++;
                                continue;
                        }
                        send_output(fs, a);
                        if (a->sent == a->total)
                                remove_active(fs, a);
                        else
                                i++;
                }
        }
        ndjson_reader_free(reader);
        close(fs->fd);
        fs->fd = -1;
        return NULL;
}

/* Starts a fake daemon; *ret_fd is the client's end. */
static struct fake_server *fake_start(const struct fake_opts *opts, int *ret_fd) {
        struct fake_server *fs = calloc(1, sizeof(*fs));
        int sv[2];
        ck_assert_ptr_nonnull(fs);
        if (opts)
                fs->opts = *opts;
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        if (fs->opts.bufsize > 0) {
                int size = fs->opts.bufsize;
                ck_assert_int_eq(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &size, sizeof(size)), 0);
                ck_assert_int_eq(setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &size, sizeof(size)), 0);
        }
        fs->fd = sv[1];
        fs->listen_fd = -1;
        ck_assert_int_eq(pthread_create(&fs->thread, NULL, fake_serve, fs), 0);
        *ret_fd = sv[0];
        return fs;
}

/* Waits for the daemon to finish (the client must have closed); what it saw can be read
 * from then on. */
static void fake_join(struct fake_server *fs) {
        ck_assert_int_eq(pthread_join(fs->thread, NULL), 0);
}

static void fake_free(struct fake_server *fs) {
        free(fs->last_generate);
        free(fs);
}

static void fake_stop(struct fake_server *fs) {
        fake_join(fs);
        fake_free(fs);
}

static asyncllm_client *connect_to(struct fake_server **ret_fs, const struct fake_opts *opts) {
        asyncllm_client *c = NULL;
        int fd;
        *ret_fs = fake_start(opts, &fd);
        ck_assert_int_eq(asyncllm_client_new(&c), 0);
        asyncllm_client_set_timeout(c, HANG_MS * 1000ull); /* a hang fails instead of hanging */
        int q = asyncllm_client_connect_fd(c, fd);
        ck_assert_msg(q == 0, "connect: %s", asyncllm_client_error(c));
        return c;
}

static asyncllm_request *request_with_prompt(const char *prompt) {
        asyncllm_request *r = NULL;
        ck_assert_int_eq(asyncllm_request_new(&r), 0);
        ck_assert_int_eq(asyncllm_request_set_prompt(r, prompt), 0);
        return r;
}

/* ---- What the callbacks saw ---------------------------------------------------------- */

#define MAX_SEEN 256

struct seen {
        char texts[MAX_SEEN][64];
        int32_t token[MAX_SEEN];
        bool done[MAX_SEEN];
        int error[MAX_SEEN];
        char code[MAX_SEEN][32];
        char message[MAX_SEEN][128];
        char finish[MAX_SEEN][16];
        char id[MAX_SEEN][32];
        double retry_after[MAX_SEEN];
        int64_t completion_tokens;
        size_t n;
        int give_up_after; /* > 0: return -ECANCELED at this output */
        bool try_blocking; /* call a blocking function from inside the callback */
        int blocking_result;
        asyncllm_client *abort_from; /* != NULL: submit an abort at the third output */
};

/* Every output of every request, in arrival order (for interleaving). */
static char order[MAX_SEEN][32];
static size_t n_order;

static int record(asyncllm_client *c, const asyncllm_output *o, void *userdata) {
        struct seen *s = userdata;
        ck_assert_uint_lt(s->n, MAX_SEEN);
        size_t i = s->n++;
        snprintf(s->id[i], sizeof(s->id[i]), "%s", asyncllm_output_id(o));
        if (n_order < MAX_SEEN)
                snprintf(order[n_order++], sizeof(order[0]), "%s", asyncllm_output_id(o));
        s->done[i] = asyncllm_output_done(o);
        s->error[i] = asyncllm_output_error(o);
        s->retry_after[i] = asyncllm_output_retry_after(o);
        if (s->error[i] < 0) {
                ck_assert(s->done[i]);
                ck_assert_uint_eq(asyncllm_output_n_completions(o), 0);
                snprintf(s->code[i], sizeof(s->code[i]), "%s",
                         asyncllm_output_error_code(o) ? asyncllm_output_error_code(o) : "(local)");
                snprintf(s->message[i], sizeof(s->message[i]), "%s", asyncllm_output_error_message(o));
                return 0;
        }
        ck_assert_uint_eq(asyncllm_output_n_completions(o), 1);
        ck_assert_uint_eq(asyncllm_output_index(o, 0), 0);
        size_t len, n_ids;
        const char *text = asyncllm_output_text(o, 0, &len);
        ck_assert_uint_eq(strlen(text), len);
        snprintf(s->texts[i], sizeof(s->texts[i]), "%s", text);
        const int32_t *ids = asyncllm_output_token_ids(o, 0, &n_ids);
        s->token[i] = n_ids > 0 ? ids[0] : -1;
        const char *f = asyncllm_output_finish_reason(o, 0);
        snprintf(s->finish[i], sizeof(s->finish[i]), "%s", f ? f : "");
        ck_assert_ptr_nonnull(asyncllm_output_json(o));
        if (asyncllm_output_finished(o))
                s->completion_tokens = asyncllm_output_completion_tokens(o);
        if (s->try_blocking)
                s->blocking_result = asyncllm_client_health(c, NULL);
        if (s->abort_from && s->n == 3)
                ck_assert_int_eq(asyncllm_client_submit_abort(c, asyncllm_output_id(o), NULL, NULL, NULL), 0);
        if (s->give_up_after > 0 && (int) s->n == s->give_up_after)
                return -ECANCELED;
        return 0;
}

struct reply {
        bool called;
        int error;
        char result[256];
        char code[32];
};

static void on_reply(asyncllm_client *c, int error, const char *result_json, void *userdata) {
        struct reply *r = userdata;
        ck_assert(!r->called);
        r->called = true;
        r->error = error;
        snprintf(r->result, sizeof(r->result), "%s", result_json ? result_json : "");
        const char *code = asyncllm_client_error_code(c);
        snprintf(r->code, sizeof(r->code), "%s", error < 0 && code ? code : "");
}

/* Runs the client's loop with poll(2) until nothing is pending; true if POLLOUT was asked. */
static bool loop_until_idle(asyncllm_client *c) {
        bool wanted_pollout = false;
        while (asyncllm_client_pending(c) > 0) {
                struct pollfd pfd = { .fd = asyncllm_client_fd(c), .events = (short) asyncllm_client_events(c) };
                wanted_pollout |= (pfd.events & POLLOUT) != 0;
                ck_assert_int_ge(pfd.fd, 0);
                int r = poll(&pfd, 1, HANG_MS);
                ck_assert_int_gt(r, 0);
                int q = asyncllm_client_process(c);
                if (q < 0)
                        break;
        }
        return wanted_pollout;
}

/* ---- Tests --------------------------------------------------------------------------- */

START_TEST(test_handshake) {
        struct fake_server *fs;
        asyncllm_client *c = connect_to(&fs, NULL);
        char *result = NULL;

        ck_assert_int_eq(asyncllm_client_protocol(c), 1);
        ck_assert_str_eq(asyncllm_client_model(c), "fake-model");
        ck_assert_ptr_nonnull(strstr(asyncllm_client_hello(c), "\"server\":\"asyncllmd\""));
        ck_assert_int_ge(asyncllm_client_fd(c), 0);
        ck_assert_int_eq(asyncllm_client_events(c), POLLIN);
        ck_assert_int_eq(asyncllm_client_health(c, &result), 0);
        ck_assert_str_eq(result, "{\"healthy\":true}");
        free(result);
        ck_assert_int_eq(asyncllm_client_connect_fd(c, dup(0)), -EISCONN);
        asyncllm_client_free(c);
        fake_stop(fs);
}
END_TEST

START_TEST(test_connect_by_path) {
        char *dir = test_tmpdir(), *path = test_path_join(dir, "asyncllmd.sock"), *found = NULL;
        struct sockaddr_un addr = { .sun_family = AF_UNIX };
        struct fake_server *fs = calloc(1, sizeof(*fs));
        asyncllm_client *c = NULL;

        ck_assert_ptr_nonnull(fs);
        snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
        fs->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(fs->listen_fd, 0);
        ck_assert_int_eq(bind(fs->listen_fd, (struct sockaddr *) &addr, sizeof(addr)), 0);
        ck_assert_int_eq(listen(fs->listen_fd, 4), 0);
        ck_assert_int_eq(pthread_create(&fs->thread, NULL, fake_serve, fs), 0);

        /* $ASYNCLLM_SOCKET first */
        ck_assert_int_eq(setenv("ASYNCLLM_SOCKET", path, 1), 0);
        ck_assert_int_eq(asyncllm_default_socket_path(&found), 0);
        ck_assert_str_eq(found, path);
        free(found);
        ck_assert_int_eq(asyncllm_client_new(&c), 0);
        ck_assert_int_eq(asyncllm_client_fd(c), -ENOTCONN);
        ck_assert_int_eq(asyncllm_client_connect(c, NULL), 0);
        ck_assert_int_eq(asyncllm_client_protocol(c), 1);
        ck_assert_int_eq(asyncllm_client_connect(c, path), -EISCONN);
        asyncllm_client_free(c);
        int listen_fd = fs->listen_fd;
        fake_stop(fs);
        close(listen_fd);

        /* nobody there: the path is in the message */
        ck_assert_int_eq(asyncllm_client_new(&c), 0);
        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_eq(asyncllm_client_connect(c, path), -ENOENT);
        ck_assert_ptr_nonnull(strstr(asyncllm_client_error(c), path));
        ck_assert_ptr_null(asyncllm_client_error_code(c));
        asyncllm_client_free(c);

        /* without $ASYNCLLM_SOCKET: the system socket for root; for others the user's
         * daemon under $XDG_RUNTIME_DIR when it is there, else the system one */
        ck_assert_int_eq(unsetenv("ASYNCLLM_SOCKET"), 0);
        ck_assert_int_eq(setenv("XDG_RUNTIME_DIR", dir, 1), 0);
        ck_assert_int_eq(asyncllm_default_socket_path(&found), 0);
        ck_assert_str_eq(found, "/run/asyncllm/asyncllmd.sock");
        free(found);
        if (geteuid() != 0) {
                char *sub = test_path_join(dir, "asyncllm"), *user = test_path_join(sub, "asyncllmd.sock");
                ck_assert_int_eq(mkdir(sub, 0700), 0);
                snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", user);
                int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                ck_assert_int_eq(bind(fd, (struct sockaddr *) &addr, sizeof(addr)), 0);
                ck_assert_int_eq(asyncllm_default_socket_path(&found), 0);
                ck_assert_str_eq(found, user);
                free(found);
                close(fd);
                unlink(user);
                rmdir(sub);
                free(user);
                free(sub);
        }
        free(path);
        test_tmpdir_remove(dir);
}
END_TEST

/* A client, connected over a socketpair to a daemon with these options: the result. */
static int try_connect(const struct fake_opts *opts, asyncllm_client **ret, struct fake_server **ret_fs) {
        int fd;
        *ret_fs = fake_start(opts, &fd);
        ck_assert_int_eq(asyncllm_client_new(ret), 0);
        asyncllm_client_set_timeout(*ret, HANG_MS * 1000ull);
        return asyncllm_client_connect_fd(*ret, fd);
}

START_TEST(test_protocol_versions) {
        struct fake_server *fs, *fs2;
        asyncllm_client *c;
        int fd;

        /* a daemon at version 2 that does not speak 1: refused, and the client can try again */
        struct fake_opts v2 = { .hello = "{\"hello\": {\"protocol\": 2, \"server\": \"asyncllmd\"}}" };
        ck_assert_int_eq(try_connect(&v2, &c, &fs), -EPROTONOSUPPORT);
        ck_assert_str_eq(asyncllm_client_error_code(c), "unsupported_protocol");
        ck_assert_ptr_nonnull(strstr(asyncllm_client_error(c), "version 2 only"));
        ck_assert_int_eq(asyncllm_client_fd(c), -ENOTCONN);
        ck_assert_int_eq(asyncllm_client_protocol(c), 0);
        fake_stop(fs);
        fs2 = fake_start(NULL, &fd);
        ck_assert_int_eq(asyncllm_client_connect_fd(c, fd), 0);
        ck_assert_int_eq(asyncllm_client_protocol(c), 1);
        asyncllm_client_free(c);
        fake_stop(fs2);

        /* a daemon at version 2 that also speaks 1 */
        v2.accept_v1 = true;
        ck_assert_int_eq(try_connect(&v2, &c, &fs), 0);
        ck_assert_int_eq(asyncllm_client_protocol(c), 1);
        ck_assert_int_eq(asyncllm_client_health(c, NULL), 0);
        asyncllm_client_free(c);
        fake_stop(fs);

        /* not a hello */
        static const char *const bad[] = {
                "this is not JSON",
                "[1, 2, 3]",
                "{\"hello\": {\"server\": \"asyncllmd\"}}",
                "{\"hello\": {\"protocol\": \"1\"}}",
                "{\"id\": \"c1\", \"result\": {}}",
                "{\"hello\": {\"protocol\": 1}} trailing",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                struct fake_opts o = { .hello = bad[i] };
                ck_assert_int_eq(try_connect(&o, &c, &fs), -EPROTO);
                ck_assert_str_ne(asyncllm_client_error(c), "");
                asyncllm_client_free(c);
                fake_stop(fs);
        }

        /* refused with an error line instead of a hello */
        struct fake_opts busy = {
                .hello = "{\"id\": null, \"error\": {\"code\": \"too_many_requests\", \"message\": \"64 connections\"}}",
        };
        ck_assert_int_eq(try_connect(&busy, &c, &fs), -EBUSY);
        ck_assert_str_eq(asyncllm_client_error_code(c), "too_many_requests");
        ck_assert_ptr_nonnull(strstr(asyncllm_client_error(c), "64 connections"));
        asyncllm_client_free(c);
        fake_stop(fs);

        /* a daemon that says how long a line it takes: longer messages never leave */
        struct fake_opts small = {
                .hello = "{\"hello\": {\"protocol\": 1, \"server\": \"asyncllmd\", \"max_line_bytes\": 100}}",
        };
        ck_assert_int_eq(try_connect(&small, &c, &fs), 0);
        asyncllm_request *r = request_with_prompt("a prompt far too long for a daemon that takes 100 bytes a line, "
                                                  "once the envelope is around it");
        ck_assert_int_eq(asyncllm_client_generate(c, r, NULL, NULL), -EMSGSIZE);
        ck_assert_ptr_nonnull(strstr(asyncllm_client_error(c), "at most 100"));
        ck_assert_uint_eq(asyncllm_client_pending(c), 0);
        ck_assert_int_eq(asyncllm_request_set_prompt(r, "count 1"), 0);
        ck_assert_int_eq(asyncllm_client_generate(c, r, NULL, NULL), 0);
        asyncllm_request_free(r);
        asyncllm_client_free(c);
        fake_join(fs);
        ck_assert_uint_eq(fs->n_generates, 1);
        fake_free(fs);

        /* says nothing: the timeout */
        struct fake_opts mute = { .no_hello = true };
        fs = fake_start(&mute, &fd);
        ck_assert_int_eq(asyncllm_client_new(&c), 0);
        asyncllm_client_set_timeout(c, 200000);
        ck_assert_int_eq(asyncllm_client_connect_fd(c, fd), -ETIMEDOUT);
        asyncllm_client_free(c);
        fake_stop(fs);
}
END_TEST

START_TEST(test_streaming_in_order) {
        struct fake_server *fs;
        asyncllm_client *c = connect_to(&fs, NULL);
        asyncllm_request *r = request_with_prompt("count 5");
        struct seen s = { 0 };

        ck_assert_int_eq(asyncllm_request_set_id(r, "mine"), 0);
        ck_assert_int_eq(asyncllm_client_generate(c, r, record, &s), 0);
        ck_assert_uint_eq(s.n, 5);
        for (size_t i = 0; i < 5; i++) {
                char want[16];
                snprintf(want, sizeof(want), " tok%zu", i + 1);
                ck_assert_str_eq(s.texts[i], want);
                ck_assert_int_eq(s.token[i], (int32_t) i + 1);
                ck_assert_str_eq(s.id[i], "mine");
                ck_assert_int_eq(s.done[i], i == 4);
                ck_assert_str_eq(s.finish[i], i == 4 ? "length" : "");
        }
        ck_assert_int_eq(s.completion_tokens, 99);
        ck_assert_uint_eq(asyncllm_client_pending(c), 0);

        /* the same request again: the id is free once it finished; NULL callback */
        ck_assert_int_eq(asyncllm_client_generate(c, r, NULL, NULL), 0);

        /* token ids in, a stop token out; messages in, a stop string out */
        static const int32_t ids[] = { 1, 2, 3 };
        struct seen t = { 0 };
        ck_assert_int_eq(asyncllm_request_set_prompt_token_ids(r, ids, 3), 0);
        ck_assert_int_eq(asyncllm_client_generate(c, r, record, &t), 0);
        ck_assert_uint_eq(t.n, 1);
        ck_assert_int_eq(t.token[0], 1);
        ck_assert_str_eq(t.finish[0], "stop");
        ck_assert_int_eq(asyncllm_request_add_message(r, "system", "be brief"), 0);
        ck_assert_int_eq(asyncllm_request_add_message(r, "user", "caf\xc3\xa9?"), 0);
        memset(&t, 0, sizeof(t));
        ck_assert_int_eq(asyncllm_client_generate(c, r, record, &t), 0);
        ck_assert_uint_eq(t.n, 1);
        ck_assert_str_eq(t.texts[0], "caf\xc3\xa9?");
        asyncllm_request_free(r);
        asyncllm_client_free(c);
        fake_stop(fs);
}
END_TEST

/* A line whose id holds a NUL is nobody's: as a C string it would be the id it starts with. */
START_TEST(test_ids_with_nul) {
        struct fake_server *fs;
        struct fake_opts opts = { .nul_ids = true };
        asyncllm_client *c = connect_to(&fs, &opts);
        asyncllm_request *r = request_with_prompt("count 3");
        struct seen s = { 0 };
        ck_assert_int_eq(asyncllm_request_set_id(r, "mine"), 0);
        ck_assert_int_eq(asyncllm_client_generate(c, r, record, &s), 0);
        ck_assert_uint_eq(s.n, 3);
        for (size_t i = 0; i < 3; i++)
                ck_assert_str_ne(s.texts[i], "bogus");
        ck_assert_int_eq(s.done[2], 1);
        asyncllm_request_free(r);
        asyncllm_client_free(c);
        fake_stop(fs);
}
END_TEST

/* The view's stop reasons, read inside the callback. */
static int check_stop(asyncllm_client *c, const asyncllm_output *o, void *userdata) {
        int *calls = userdata;
        (*calls)++;
        if (asyncllm_output_stop_reason(o, 0)) {
                ck_assert_str_eq(asyncllm_output_stop_reason(o, 0), "END");
                ck_assert_int_eq(asyncllm_output_stop_token_id(o, 0), -1);
        } else
                ck_assert_int_eq(asyncllm_output_stop_token_id(o, 0), 2);
        /* out of range reads as nothing */
        size_t n = 9;
        ck_assert_str_eq(asyncllm_output_text(o, 1, &n), "");
        ck_assert_uint_eq(n, 0);
        ck_assert_ptr_null(asyncllm_output_token_ids(o, 5, &n));
        ck_assert_ptr_null(asyncllm_output_finish_reason(o, 1));
        ck_assert_int_eq(asyncllm_output_prompt_tokens(o), -1);
        return 0;
}

/* An encode request's final output: its vector, copied out of the view. */
struct embedding_seen {
        float vector[8];
        size_t n;
        size_t calls;
        int64_t prompt_tokens;
        size_t completions;
};

static int record_embedding(asyncllm_client *c, const asyncllm_output *o, void *userdata) {
        struct embedding_seen *e = userdata;
        size_t n = 99;
        const float *v = asyncllm_output_embedding(o, &n);
        (void) c;
        e->calls++;
        e->completions = asyncllm_output_n_completions(o);
        if (v) {
                ck_assert_uint_le(n, 8);
                memcpy(e->vector, v, n * sizeof(*v));
        } else
                ck_assert_uint_eq(n, 0);
        e->n = n;
        e->prompt_tokens = asyncllm_output_prompt_tokens(o);
        return 0;
}

START_TEST(test_encode) {
        struct fake_server *fs;
        asyncllm_client *c = connect_to(&fs, NULL);
        asyncllm_request *r = request_with_prompt("vector");
        struct embedding_seen e = { 0 };
        char *json;

        ck_assert_int_eq(asyncllm_request_set_encode(r, "mean", true, 3), 0);
        ck_assert_int_eq(asyncllm_request_to_json(r, &json), 0);
        ck_assert_ptr_nonnull(strstr(json, "\"op\":\"encode\""));
        free(json);
        ck_assert_int_eq(asyncllm_client_generate(c, r, record_embedding, &e), 0);
        ck_assert_uint_eq(e.calls, 1);
        ck_assert_uint_eq(e.completions, 0);
        ck_assert_uint_eq(e.n, 4);
        /* the fields went out as given; 0.100000001 reads back as the float 0.1f */
        ck_assert_float_eq(e.vector[0], 4.0f);
        ck_assert_float_eq(e.vector[1], 3.0f);
        ck_assert_float_eq(e.vector[2], 1.0f);
        ck_assert_float_eq(e.vector[3], 0.1f);
        ck_assert_int_eq(e.prompt_tokens, 5);

        /* the daemon's default pooling, no dimensions, not normalized: those fields are gone */
        ck_assert_int_eq(asyncllm_request_set_encode(r, NULL, false, 0), 0);
        ck_assert_int_eq(asyncllm_client_generate(c, r, record_embedding, &e), 0);
        ck_assert_float_eq(e.vector[0], 0.0f);
        ck_assert_float_eq(e.vector[1], 0.0f);
        ck_assert_float_eq(e.vector[2], 0.0f);

        /* a failed encode: its finished output has no vector, and the error follows */
        asyncllm_request *failing = request_with_prompt("fail-late");
        ck_assert_int_eq(asyncllm_request_set_encode(failing, NULL, true, 0), 0);
        e = (struct embedding_seen) { 0 };
        ck_assert_int_eq(asyncllm_client_generate(c, failing, record_embedding, &e), -EIO);
        ck_assert_uint_eq(e.calls, 2);
        ck_assert_str_eq(asyncllm_client_error_code(c), "engine_dead");

        /* an aborted one ends with its finished output, no vector */
        asyncllm_request *aborted = request_with_prompt("aborted");
        ck_assert_int_eq(asyncllm_request_set_encode(aborted, "last", true, 0), 0);
        e = (struct embedding_seen) { 0 };
        ck_assert_int_eq(asyncllm_client_generate(c, aborted, record_embedding, &e), 0);
        ck_assert_uint_eq(e.calls, 1);
        ck_assert_uint_eq(e.n, 0);

        ck_assert_int_eq(asyncllm_request_set_encode(r, "\xff", true, 0), -EINVAL);
        asyncllm_request_free(aborted);
        asyncllm_request_free(failing);
        asyncllm_request_free(r);
        asyncllm_client_free(c);
        fake_stop(fs);
}
END_TEST

START_TEST(test_stop_reasons) {
        struct fake_server *fs;
        asyncllm_client *c = connect_to(&fs, NULL);
        asyncllm_request *r = NULL;
        static const int32_t ids[] = { 7 };
        int calls = 0;

        ck_assert_int_eq(asyncllm_request_new(&r), 0);
        ck_assert_int_eq(asyncllm_request_set_prompt_token_ids(r, ids, 1), 0);
        ck_assert_int_eq(asyncllm_client_generate(c, r, check_stop, &calls), 0);
        ck_assert_int_eq(asyncllm_request_add_message(r, "user", "hi"), 0);
        ck_assert_int_eq(asyncllm_client_generate(c, r, check_stop, &calls), 0);
        ck_assert_int_eq(calls, 2);
        asyncllm_request_free(r);
        asyncllm_client_free(c);
        fake_stop(fs);
}
END_TEST

START_TEST(test_concurrent_requests) {
        struct fake_server *fs;
        struct fake_opts o = { .start_after = 3 }; /* all three in flight before any output */
        asyncllm_client *c = connect_to(&fs, &o);
        static const int counts[] = { 5, 3, 7 };
        struct seen s[3];
        memset(s, 0, sizeof(s));
        struct reply health = { 0 };
        char *ids[3];

        n_order = 0;
        for (size_t i = 0; i < 3; i++) {
                char prompt[32];
                snprintf(prompt, sizeof(prompt), "count %d", counts[i]);
                asyncllm_request *r = request_with_prompt(prompt);
                ck_assert_int_eq(asyncllm_client_submit_generate(c, r, record, &s[i], &ids[i]), 0);
                asyncllm_request_free(r);
        }
        ck_assert_str_eq(ids[0], "c1");
        ck_assert_str_eq(ids[1], "c2");
        ck_assert_str_eq(ids[2], "c3");
        ck_assert_int_eq(asyncllm_client_submit_call(c, "health", NULL, on_reply, &health, NULL), 0);
        ck_assert_uint_eq(asyncllm_client_pending(c), 4);

        /* an id in flight cannot be used again */
        asyncllm_request *dup_id = request_with_prompt("count 1");
        ck_assert_int_eq(asyncllm_request_set_id(dup_id, "c2"), 0);
        ck_assert_int_eq(asyncllm_client_submit_generate(c, dup_id, record, &s[0], NULL), -EEXIST);
        asyncllm_request_free(dup_id);

        loop_until_idle(c);
        ck_assert(health.called);
        ck_assert_int_eq(health.error, 0);
        ck_assert_str_eq(health.result, "{\"healthy\":true}");
        for (size_t i = 0; i < 3; i++) {
                ck_assert_uint_eq(s[i].n, (size_t) counts[i]);
                for (size_t j = 0; j < s[i].n; j++) {
                        ck_assert_str_eq(s[i].id[j], ids[i]);
                        ck_assert_int_eq(s[i].token[j], (int32_t) j + 1);
                        ck_assert_int_eq(s[i].done[j], j + 1 == s[i].n);
                }
                free(ids[i]);
        }
        /* multiplexed: c2 finished before c1 did */
        size_t last_c1 = 0, last_c2 = 0;
        for (size_t i = 0; i < n_order; i++) {
                if (strcmp(order[i], "c1") == 0)
                        last_c1 = i;
                if (strcmp(order[i], "c2") == 0)
                        last_c2 = i;
        }
        ck_assert_uint_lt(last_c2, last_c1);
        ck_assert_uint_eq(asyncllm_client_pending(c), 0);
        asyncllm_client_free(c);
        fake_stop(fs);
}
END_TEST

START_TEST(test_errors) {
        struct fake_server *fs;
        asyncllm_client *c = connect_to(&fs, NULL);
        asyncllm_request *r = request_with_prompt("fail");
        struct seen s = { 0 };
        struct reply rep = { 0 };

        /* a request refused: errno, code and message, and its callback told */
        ck_assert_int_eq(asyncllm_client_generate(c, r, record, &s), -EINVAL);
        ck_assert_str_eq(asyncllm_client_error_code(c), "invalid_params");
        ck_assert_str_eq(asyncllm_client_error(c), "top_p must be in (0, 1], got 2");
        ck_assert_uint_eq(s.n, 1);
        ck_assert_int_eq(s.error[0], -EINVAL);
        ck_assert_str_eq(s.code[0], "invalid_params");
        ck_assert_str_eq(s.message[0], "top_p must be in (0, 1], got 2");

        /* a request that fails after its final output: the error comes last */
        memset(&s, 0, sizeof(s));
        ck_assert_int_eq(asyncllm_request_set_prompt(r, "fail-late"), 0);
        ck_assert_int_eq(asyncllm_client_generate(c, r, record, &s), -EIO);
        ck_assert_str_eq(asyncllm_client_error_code(c), "engine_dead");
        ck_assert_uint_eq(s.n, 2);
        ck_assert_str_eq(s.finish[0], "error");
        ck_assert(!s.done[0]);
        ck_assert(s.done[1]);
        ck_assert_str_eq(s.message[1], "kernel failed");
        ck_assert_double_eq(s.retry_after[1], -1); /* only overloaded has one */

        /* refused for now by the slo policy: -EAGAIN, with the daemon's hint */
        memset(&s, 0, sizeof(s));
        ck_assert_int_eq(asyncllm_request_set_prompt(r, "overloaded"), 0);
        ck_assert_int_eq(asyncllm_client_generate(c, r, record, &s), -EAGAIN);
        ck_assert_str_eq(asyncllm_client_error_code(c), "overloaded");
        ck_assert_uint_eq(s.n, 2);
        ck_assert_double_eq(s.retry_after[0], -1);
        ck_assert_int_eq(s.error[1], -EAGAIN);
        ck_assert_str_eq(s.message[1], "no room");
        ck_assert_double_eq(s.retry_after[1], 0.75);

        /* control ops: blocking and not */
        ck_assert_int_eq(asyncllm_client_call(c, "frobnicate", NULL, NULL), -EOPNOTSUPP);
        ck_assert_str_eq(asyncllm_client_error_code(c), "unknown_op");
        ck_assert_str_eq(asyncllm_client_error(c), "unknown op \"frobnicate\"");
        ck_assert_int_eq(asyncllm_client_submit_call(c, "frobnicate", "{\"x\": 1}", on_reply, &rep, NULL), 0);
        loop_until_idle(c);
        ck_assert(rep.called);
        ck_assert_int_eq(rep.error, -EOPNOTSUPP);
        ck_assert_str_eq(rep.code, "unknown_op");

        /* refused locally, nothing sent */
        ck_assert_int_eq(asyncllm_client_call(c, "pause", "[1]", NULL), -EINVAL);
        ck_assert_int_eq(asyncllm_client_call(c, "pause", "{\"id\": \"x\"}", NULL), -EINVAL);
        ck_assert_int_eq(asyncllm_client_call(c, "pause", "{} {}", NULL), -EINVAL);
        ck_assert_int_eq(asyncllm_client_call(c, "", NULL, NULL), -EINVAL);
        ck_assert_ptr_null(asyncllm_client_error_code(c));
        asyncllm_request *empty = NULL;
        ck_assert_int_eq(asyncllm_request_new(&empty), 0);
        ck_assert_int_eq(asyncllm_client_generate(c, empty, NULL, NULL), -EINVAL);
        ck_assert_str_eq(asyncllm_client_error(c), "the request has no prompt");
        asyncllm_request_free(empty);

        /* the wrappers */
        char *result = NULL;
        bool aborted = true;
        ck_assert_int_eq(asyncllm_client_pause(c, "wait", true), 0);
        ck_assert_int_eq(asyncllm_client_call(c, "pause", "{\"mode\": \"keep\"}", &result), 0);
        ck_assert_str_eq(result, "{\"mode\":\"keep\"}");
        free(result);
        ck_assert_int_eq(asyncllm_client_stats(c, &result), 0);
        ck_assert_str_eq(result, "{\"num_running\":0}");
        free(result);
        ck_assert_int_eq(asyncllm_client_abort(c, "nothing-such", &aborted), 0);
        ck_assert(!aborted);
        ck_assert_int_eq(asyncllm_client_resume(c), -EOPNOTSUPP); /* the fake has no resume */
        ck_assert_uint_eq(asyncllm_client_pending(c), 0);

        asyncllm_request_free(r);
        asyncllm_client_free(c);
        fake_stop(fs);
}
END_TEST

START_TEST(test_daemon_closes_mid_stream) {
        struct fake_server *fs;
        struct fake_opts o = { .close_after = 2 };
        asyncllm_client *c = connect_to(&fs, &o);
        asyncllm_request *r = request_with_prompt("count 10");
        struct seen s = { 0 };

        /* blocking: two outputs, then the error; no hang */
        ck_assert_int_eq(asyncllm_client_generate(c, r, record, &s), -ECONNRESET);
        ck_assert_ptr_nonnull(strstr(asyncllm_client_error(c), "closed the connection"));
        ck_assert_uint_eq(s.n, 3);
        ck_assert_int_eq(s.error[2], -ECONNRESET);
        ck_assert(s.done[2]);
        ck_assert_str_eq(s.code[2], "(local)");
        /* dead from now on */
        ck_assert_int_eq(asyncllm_client_health(c, NULL), -ENOTCONN);
        ck_assert_int_eq(asyncllm_client_events(c), 0);
        ck_assert_int_eq(asyncllm_client_process(c), -ENOTCONN);
        asyncllm_client_free(c);
        fake_stop(fs);

        /* non-blocking: every request in flight hears of it, process() returns the error once */
        c = connect_to(&fs, &o);
        struct seen a = { 0 }, b = { 0 };
        struct reply rep = { 0 };
        ck_assert_int_eq(asyncllm_client_submit_generate(c, r, record, &a, NULL), 0);
        ck_assert_int_eq(asyncllm_request_set_prompt(r, "silent"), 0);
        ck_assert_int_eq(asyncllm_client_submit_generate(c, r, record, &b, NULL), 0);
        int q = 0;
        bool asked = false;
        while (q == 0) {
                struct pollfd pfd = { .fd = asyncllm_client_fd(c), .events = (short) asyncllm_client_events(c) };
                ck_assert_int_eq(poll(&pfd, 1, HANG_MS), 1);
                q = asyncllm_client_process(c);
                if (q == 0 && a.n == 2 && !asked) {
                        /* sent while the daemon is going away: it hears too */
                        ck_assert_int_eq(asyncllm_client_submit_call(c, "health", NULL, on_reply, &rep, NULL), 0);
                        asked = true;
                }
        }
        ck_assert(!asked || rep.called); /* answered, or told of the end */
        ck_assert_int_eq(q, -ECONNRESET);
        ck_assert_uint_eq(a.n, 3);
        ck_assert_int_eq(a.error[2], -ECONNRESET);
        ck_assert_uint_eq(b.n, 1);
        ck_assert_int_eq(b.error[0], -ECONNRESET);
        ck_assert_uint_eq(asyncllm_client_pending(c), 0);
        ck_assert_int_eq(asyncllm_client_process(c), -ENOTCONN);
        ck_assert_int_eq(asyncllm_client_submit_generate(c, r, record, &a, NULL), -ENOTCONN);
        asyncllm_request_free(r);
        asyncllm_client_free(c);
        fake_stop(fs);
}
END_TEST

START_TEST(test_line_over_limit) {
        struct fake_server *fs;
        struct fake_opts o = { .long_line = 5000 };
        asyncllm_client *c = NULL;
        int fd;

        fs = fake_start(&o, &fd);
        ck_assert_int_eq(asyncllm_client_new(&c), 0);
        ck_assert_int_eq(asyncllm_client_set_max_line(c, 0), -EINVAL);
        ck_assert_int_eq(asyncllm_client_set_max_line(c, 1024), 0);
        ck_assert_int_eq(asyncllm_client_connect_fd(c, fd), 0);
        ck_assert_int_eq(asyncllm_client_set_max_line(c, 4096), -EISCONN);
        asyncllm_request *r = request_with_prompt("count 1");
        struct seen s = { 0 };
        ck_assert_int_eq(asyncllm_client_generate(c, r, record, &s), -EMSGSIZE);
        ck_assert_ptr_nonnull(strstr(asyncllm_client_error(c), "longer than 1024 bytes"));
        ck_assert_uint_eq(s.n, 1);
        ck_assert_int_eq(s.error[0], -EMSGSIZE);
        asyncllm_request_free(r);
        asyncllm_client_free(c);
        fake_stop(fs);
}
END_TEST

START_TEST(test_slow_daemon_partial_writes) {
        /* 2 MiB of prompt through 4 KiB socket buffers to a daemon that reads 4 KiB at a
         * time, slowly: submit returns at once with the rest queued, the loop asks for
         * POLLOUT and sends it all, byte for byte. */
        const size_t size = 2u << 20;
        struct fake_server *fs;
        struct fake_opts o = { .bufsize = 4096 };
        asyncllm_client *c = connect_to(&fs, &o);
        char *prompt = malloc(size + 1), want[32];
        struct seen s = { 0 };

        ck_assert_ptr_nonnull(prompt);
        for (size_t i = 0; i < size; i++)
                prompt[i] = (char) ('a' + i % 26);
        prompt[size] = 0;
        asyncllm_request *r = request_with_prompt(prompt);
        ck_assert_int_eq(asyncllm_client_submit_generate(c, r, record, &s, NULL), 0);
        ck_assert_int_eq(asyncllm_client_events(c), POLLIN | POLLOUT);
        ck_assert(loop_until_idle(c));
        snprintf(want, sizeof(want), "len=%zu", size);
        ck_assert_uint_eq(s.n, 1);
        ck_assert_str_eq(s.texts[0], want);

        /* the blocking call does the same inside */
        memset(&s, 0, sizeof(s));
        ck_assert_int_eq(asyncllm_client_generate(c, r, record, &s), 0);
        ck_assert_str_eq(s.texts[0], want);
        asyncllm_request_free(r);
        asyncllm_client_free(c);
        fake_join(fs);
        ck_assert_uint_eq(fs->biggest_prompt, size);
        fake_free(fs);
        free(prompt);
}
END_TEST

START_TEST(test_abort_and_give_up) {
        struct fake_server *fs;
        asyncllm_client *c = connect_to(&fs, NULL);
        asyncllm_request *r = request_with_prompt("forever");
        struct seen s = { .abort_from = c, .try_blocking = true };

        /* an abort sent from inside the callback: the request ends with "abort"; a blocking
         * call from inside the callback is refused */
        ck_assert_int_eq(asyncllm_client_submit_generate(c, r, record, &s, NULL), 0);
        loop_until_idle(c);
        ck_assert_int_eq(s.blocking_result, -EBUSY);
        ck_assert_uint_ge(s.n, 4);
        ck_assert_str_eq(s.finish[s.n - 1], "abort");
        ck_assert(s.done[s.n - 1]);

        /* the callback gives up: the blocking call returns its error, the request is aborted,
         * the connection goes on */
        struct seen t = { .give_up_after = 2 };
        ck_assert_int_eq(asyncllm_client_generate(c, r, record, &t), -ECANCELED);
        ck_assert_uint_eq(t.n, 2);
        ck_assert_uint_eq(asyncllm_client_pending(c), 0);
        ck_assert_int_eq(asyncllm_client_health(c, NULL), 0);
        ck_assert_uint_eq(t.n, 2); /* nothing more reached it */

        /* a daemon that says nothing: the timeout, then an abort */
        ck_assert_int_eq(asyncllm_request_set_prompt(r, "silent"), 0);
        asyncllm_client_set_timeout(c, 100000);
        ck_assert_int_eq(asyncllm_client_generate(c, r, NULL, NULL), -ETIMEDOUT);
        asyncllm_client_set_timeout(c, 0);
        ck_assert_int_eq(asyncllm_client_health(c, NULL), 0);

        /* blocking abort of a request submitted without blocking */
        struct seen u = { 0 };
        char *id = NULL;
        bool aborted = false;
        ck_assert_int_eq(asyncllm_client_submit_generate(c, r, record, &u, &id), 0);
        ck_assert_int_eq(asyncllm_client_abort(c, id, &aborted), 0);
        ck_assert(aborted);
        loop_until_idle(c);
        ck_assert_uint_eq(u.n, 1);
        ck_assert_str_eq(u.finish[0], "abort");
        free(id);

        asyncllm_request_free(r);
        asyncllm_client_free(c);
        fake_join(fs);
        ck_assert_uint_eq(fs->n_aborts, 4);
        fake_free(fs);
}
END_TEST

START_TEST(test_blocking_and_nonblocking_mixed) {
        struct fake_server *fs;
        asyncllm_client *c = connect_to(&fs, NULL);
        asyncllm_request *slow = request_with_prompt("count 6"), *quick = request_with_prompt("count 2");
        struct seen a = { 0 }, b = { 0 };

        n_order = 0;
        ck_assert_int_eq(asyncllm_client_submit_generate(c, slow, record, &a, NULL), 0);
        ck_assert_int_eq(asyncllm_client_generate(c, quick, record, &b), 0);
        ck_assert_uint_eq(b.n, 2);
        ck_assert_uint_ge(a.n, 1); /* its outputs were dispatched meanwhile */
        loop_until_idle(c);
        ck_assert_uint_eq(a.n, 6);
        asyncllm_request_free(slow);
        asyncllm_request_free(quick);
        asyncllm_client_free(c);
        fake_stop(fs);
}
END_TEST

START_TEST(test_request_json) {
        asyncllm_request *r = NULL;
        char *json = NULL;

        ck_assert_int_eq(asyncllm_request_new(&r), 0);
        ck_assert_int_eq(asyncllm_request_to_json(r, &json), -EINVAL); /* no prompt */
        ck_assert_int_eq(asyncllm_request_set_prompt(r, "Hello \"world\"\n/"), 0);
        ck_assert_int_eq(asyncllm_request_set_param_int(r, "max_tokens", 32), 0);
        ck_assert_int_eq(asyncllm_request_set_param_double(r, "temperature", 0.7), 0);
        ck_assert_int_eq(asyncllm_request_set_param_double(r, "top_p", 1), 0);
        ck_assert_int_eq(asyncllm_request_set_param_bool(r, "ignore_eos", true), 0);
        ck_assert_int_eq(asyncllm_request_set_param_string(r, "output_kind", "delta"), 0);
        ck_assert_int_eq(asyncllm_request_set_param_json(r, "stop", "[\"\\n\", \"END\"]"), 0);
        ck_assert_int_eq(asyncllm_request_set_param_json(r, "logprobs", "null"), 0);
        ck_assert_int_eq(asyncllm_request_set_param_int(r, "max_tokens", 16), 0); /* the last value wins */
        ck_assert_int_eq(asyncllm_request_set_priority(r, -3), 0);
        ck_assert_int_eq(asyncllm_request_set_slo(r, 0.5, 0.05), 0);
        ck_assert_int_eq(asyncllm_request_to_json(r, &json), 0);
        ck_assert_str_eq(json, "{\"op\":\"generate\",\"prompt\":\"Hello \\\"world\\\"\\n/\",\"priority\":-3,"
                               "\"ttft_slo\":0.5,\"slo\":0.05,\"params\":{\"max_tokens\":16,"
                               "\"temperature\":0.7,\"top_p\":1.0,\"ignore_eos\":true,\"output_kind\":\"delta\","
                               "\"stop\":[\"\\n\",\"END\"],\"logprobs\":null}}");
        free(json);

        /* one prompt kind at a time */
        static const int32_t ids[] = { 1, -2, 2147483647 };
        ck_assert_int_eq(asyncllm_request_unset_param(r, "stop"), 0);
        ck_assert_int_eq(asyncllm_request_unset_param(r, "never-set"), 0);
        ck_assert_int_eq(asyncllm_request_set_prompt_token_ids(r, ids, 3), 0);
        ck_assert_int_eq(asyncllm_request_set_latency_sensitive(r, true), 0);
        ck_assert_int_eq(asyncllm_request_set_field_json(r, "future_field", "{\"a\": [1, 2]}"), 0);
        ck_assert_int_eq(asyncllm_request_to_json(r, &json), 0);
        ck_assert_str_eq(json, "{\"op\":\"generate\",\"priority\":-3,\"ttft_slo\":0.5,\"slo\":0.05,"
                               "\"prompt_token_ids\":[1,-2,2147483647],\"latency_sensitive\":true,"
                               "\"future_field\":{\"a\":[1,2]},\"params\":{\"max_tokens\":16,\"temperature\":0.7,"
                               "\"top_p\":1.0,\"ignore_eos\":true,\"output_kind\":\"delta\",\"logprobs\":null}}");
        free(json);
        /* 0 leaves an SLO to the daemon's default */
        ck_assert_int_eq(asyncllm_request_set_slo(r, 0, 0.1), 0);
        ck_assert_int_eq(asyncllm_request_to_json(r, &json), 0);
        ck_assert_ptr_null(strstr(json, "ttft_slo"));
        ck_assert_ptr_nonnull(strstr(json, "\"slo\":0.1,"));
        free(json);
        ck_assert_int_eq(asyncllm_request_add_message(r, "user", "hi"), 0);
        ck_assert_int_eq(asyncllm_request_add_message(r, "assistant", "hello"), 0);
        ck_assert_int_eq(asyncllm_request_to_json(r, &json), 0);
        ck_assert_ptr_null(strstr(json, "prompt_token_ids"));
        ck_assert_ptr_nonnull(strstr(json, "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
                                           "{\"role\":\"assistant\",\"content\":\"hello\"}]"));
        free(json);
        asyncllm_request_clear_messages(r);
        ck_assert_int_eq(asyncllm_request_to_json(r, &json), -EINVAL);

        /* refused */
        ck_assert_int_eq(asyncllm_request_set_prompt(r, "caf\xc3"), -EILSEQ);
        ck_assert_int_eq(asyncllm_request_set_prompt(r, NULL), -EINVAL);
        ck_assert_int_eq(asyncllm_request_add_message(r, "user", "\xff"), -EILSEQ);
        ck_assert_int_eq(asyncllm_request_set_param_double(r, "temperature", NAN), -EINVAL);
        ck_assert_int_eq(asyncllm_request_set_param_double(r, "temperature", INFINITY), -EINVAL);
        ck_assert_int_eq(asyncllm_request_set_param_json(r, "stop", "[1,"), -EINVAL);
        ck_assert_int_eq(asyncllm_request_set_param_json(r, "stop", "1 2"), -EINVAL);
        ck_assert_int_eq(asyncllm_request_set_param_int(r, "", 1), -EINVAL);
        ck_assert_int_eq(asyncllm_request_set_field_json(r, "op", "\"x\""), -EINVAL);
        ck_assert_int_eq(asyncllm_request_set_field_json(r, "id", "\"x\""), -EINVAL);
        ck_assert_int_eq(asyncllm_request_set_field_json(r, "params", "{}"), -EINVAL);
        ck_assert_int_eq(asyncllm_request_set_slo(r, -1, 1), -EINVAL);
        ck_assert_int_eq(asyncllm_request_set_slo(r, 1, -0.5), -EINVAL);
        ck_assert_int_eq(asyncllm_request_set_slo(r, NAN, 1), -EINVAL);
        ck_assert_int_eq(asyncllm_request_set_slo(r, 1, INFINITY), -EINVAL);
        ck_assert_int_eq(asyncllm_request_set_id(r, ""), -EINVAL);
        char long_id[300];
        memset(long_id, 'i', sizeof(long_id) - 1);
        long_id[sizeof(long_id) - 1] = 0;
        ck_assert_int_eq(asyncllm_request_set_id(r, long_id), -EINVAL);
        long_id[256] = 0;
        ck_assert_int_eq(asyncllm_request_set_id(r, long_id), 0);
        ck_assert_int_eq(asyncllm_request_set_id(r, NULL), 0);
        ck_assert_ptr_null(asyncllm_request_free(r));
}
END_TEST

START_TEST(test_request_on_the_wire) {
        /* what the daemon receives: the builder's message plus the id */
        struct fake_server *fs;
        asyncllm_client *c = connect_to(&fs, NULL);
        asyncllm_request *r = request_with_prompt("count 1");
        ck_assert_int_eq(asyncllm_request_set_param_int(r, "max_tokens", 4), 0);
        ck_assert_int_eq(asyncllm_request_set_id(r, "w1"), 0);
        ck_assert_int_eq(asyncllm_client_generate(c, r, NULL, NULL), 0);
        asyncllm_request_free(r);
        asyncllm_client_free(c);
        fake_join(fs);
        ck_assert_str_eq(fs->last_generate,
                         "{\"op\":\"generate\",\"id\":\"w1\",\"prompt\":\"count 1\",\"params\":{\"max_tokens\":4}}");
        fake_free(fs);
}
END_TEST

/* A request started elsewhere (the D-Bus Generate stream): its lines, right behind the hello,
 * reach the attached callback; lines for other ids are ignored. */
START_TEST(test_attach_generate) {
        asyncllm_client *c = NULL;
        struct seen s = { 0 };
        int fds[2];
        static const char lines[] =
                HELLO_V1 "\n"
                "{\"id\": \"other\", \"outputs\": [{\"index\": 0, \"text\": \"x\"}], \"finished\": false}\n"
                "{\"id\": \"bus7\", \"outputs\": [{\"index\": 0, \"text\": \" tok1\", \"token_ids\": [1], "
                "\"finish_reason\": null}], \"finished\": false}\n"
                "{\"id\": \"bus7\", \"outputs\": [{\"index\": 0, \"text\": \" tok2\", \"token_ids\": [2], "
                "\"finish_reason\": \"length\"}], \"finished\": true, "
                "\"usage\": {\"prompt_tokens\": 2, \"completion_tokens\": 2}}\n";

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
        ck_assert_int_eq(write(fds[1], lines, strlen(lines)), (ssize_t) strlen(lines));
        close(fds[1]); /* the daemon's end closes after the last output */
        ck_assert_int_eq(asyncllm_client_new(&c), 0);
        ck_assert_int_eq(asyncllm_client_attach_generate(c, "", record, &s), -EINVAL);
        ck_assert_int_eq(asyncllm_client_attach_generate(c, "bus7", record, &s), 0);
        ck_assert_int_eq(asyncllm_client_attach_generate(c, "bus7", record, &s), -EEXIST);
        ck_assert_uint_eq(asyncllm_client_pending(c), 1);
        ck_assert_int_eq(asyncllm_client_connect_fd(c, fds[0]), 0);
        while (asyncllm_client_pending(c) > 0)
                if (asyncllm_client_wait(c, 20 * 1000000ull) < 0)
                        break;
        ck_assert_uint_eq(s.n, 2);
        ck_assert_str_eq(s.id[0], "bus7");
        ck_assert_str_eq(s.texts[0], " tok1");
        ck_assert_str_eq(s.texts[1], " tok2");
        ck_assert(s.done[1]);
        ck_assert_str_eq(s.finish[1], "length");
        ck_assert_int_eq(s.completion_tokens, 2);
        /* the connection is over now: nothing more can be attached */
        (void) asyncllm_client_process(c);
        ck_assert_int_eq(asyncllm_client_attach_generate(c, "bus8", record, &s), -ENOTCONN);
        asyncllm_client_free(c);
}
END_TEST

int main(void) {
        Suite *s = suite_create("client");
        TCase *tc = tcase_create("core");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_handshake);
        tcase_add_test(tc, test_connect_by_path);
        tcase_add_test(tc, test_protocol_versions);
        tcase_add_test(tc, test_streaming_in_order);
        tcase_add_test(tc, test_stop_reasons);
        tcase_add_test(tc, test_ids_with_nul);
        tcase_add_test(tc, test_encode);
        tcase_add_test(tc, test_concurrent_requests);
        tcase_add_test(tc, test_errors);
        tcase_add_test(tc, test_daemon_closes_mid_stream);
        tcase_add_test(tc, test_line_over_limit);
        tcase_add_test(tc, test_slow_daemon_partial_writes);
        tcase_add_test(tc, test_abort_and_give_up);
        tcase_add_test(tc, test_blocking_and_nonblocking_mixed);
        tcase_add_test(tc, test_request_json);
        tcase_add_test(tc, test_request_on_the_wire);
        tcase_add_test(tc, test_attach_generate);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
