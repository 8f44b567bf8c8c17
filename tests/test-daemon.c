/* SPDX-License-Identifier: MIT */
/* The real daemon (asyncllmd) on a real socket with the real model: streaming, 64 clients at
 * once, abusive lines, vanished clients, SIGTERM under load, engine death and a hung engine
 * (with the watchdog), the tokenizer and drain ops, socket activation, and who may do what. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <json-c/json.h>
#include <math.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <systemd/sd-bus.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "test-helpers.h"

struct daemon {
        pid_t pid;
        char *dir;
        char *socket;
        int notify_fd;
        int watchdog_pings;
        bool keep_notify; /* go on receiving notifications after READY=1 */
};

static int notify_socket(const char *path) {
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        ck_assert_int_ge(fd, 0);
        snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
        ck_assert_int_eq(bind(fd, (struct sockaddr *) &a, sizeof(a)), 0);
        return fd;
}

/* Reads notifications until end (monotonic seconds), counting the watchdog pings; true as soon
 * as one contains want (NULL: read until end). */
static bool read_notify_until(struct daemon *d, const char *want, double end) {
        char buf[4096];
        while (monotonic_seconds() < end) {
                struct pollfd p = { d->notify_fd, POLLIN, 0 };
                if (poll(&p, 1, 100) <= 0)
                        continue;
                ssize_t n = recv(d->notify_fd, buf, sizeof(buf) - 1, 0);
                if (n <= 0)
                        continue;
                buf[n] = 0;
                if (strstr(buf, "WATCHDOG=1"))
                        d->watchdog_pings++;
                if (want && strstr(buf, want))
                        return true;
        }
        return false;
}

/* Reads notifications for up to timeout seconds (stretched by test_slowdown()); true once one
 * contains want. */
static bool wait_notify(struct daemon *d, const char *want, double timeout) {
        return read_notify_until(d, want, test_deadline(timeout));
}

/* Starts asyncllmd with extra arguments (NULL-terminated) and environment assignments. */
static void daemon_start_with(struct daemon *d, const char *const *extra, const char *const *env, bool activate) {
        const char *bin = getenv("ASYNCLLMD");
        ck_assert_msg(bin, "ASYNCLLMD must name the daemon binary");
        d->dir = test_tmpdir();
        d->socket = test_path_join(d->dir, "asyncllmd.sock");
        char *notify = test_path_join(d->dir, "notify");
        char *conf = test_path_join(d->dir, "asyncllmd.conf");
        ck_assert_int_eq(test_write_file(conf, "", 0), 0);
        d->notify_fd = notify_socket(notify);
        d->pid = fork();
        ck_assert_int_ge(d->pid, 0);
        if (d->pid == 0) {
                const char *argv[48];
                int n = 0;
                char fdname[64];
                if (activate) {
                        snprintf(fdname, sizeof(fdname), "--fdname=asyncllmd");
                        argv[n++] = "systemd-socket-activate";
                        argv[n++] = "-l";
                        argv[n++] = d->socket;
                        argv[n++] = fdname;
                        argv[n++] = "-E";
                        argv[n++] = "NOTIFY_SOCKET";
                }
                argv[n++] = bin;
                argv[n++] = "--config";
                argv[n++] = conf;
                argv[n++] = "--model";
                argv[n++] = test_model_path();
                argv[n++] = "--threads";
                argv[n++] = "2";
                argv[n++] = "--max-model-len";
                argv[n++] = "2048";
                argv[n++] = "--kv-cache-space";
                argv[n++] = "128MiB";
                if (!activate) {
                        argv[n++] = "--socket";
                        argv[n++] = d->socket;
                }
                for (int i = 0; extra && extra[i]; i++)
                        argv[n++] = extra[i];
                argv[n] = NULL;
                char *log = test_path_join(d->dir, "stderr.log");
                int lfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
                if (lfd >= 0)
                        dup2(lfd, STDERR_FILENO);
                setenv("NOTIFY_SOCKET", notify, 1);
                for (int i = 0; env && env[i]; i++)
                        putenv((char *) env[i]);
                if (env && getenv("WATCHDOG_USEC")) {
                        char pid[32];
                        snprintf(pid, sizeof(pid), "%d", (int) getpid());
                        setenv("WATCHDOG_PID", pid, 1);
                }
                execvp(argv[0], (char **) argv);
                _exit(127);
        }
        if (!activate)
                ck_assert_msg(wait_notify(d, "READY=1", 60), "the daemon did not send READY=1 in time");
        /* A socket nobody reads fills up (a few datagrams), and sd_notify() then blocks the
         * daemon's loop; closed, the daemon's later STATUS= lines are refused at once. */
        if (!d->keep_notify) {
                close(d->notify_fd);
                d->notify_fd = -1;
        }
        free(notify);
        free(conf);
}

static void daemon_start(struct daemon *d, const char *const *extra) {
        daemon_start_with(d, extra, NULL, false);
}

/* Waits for the daemon to exit; returns its exit status, or -1 when it does not within timeout
 * seconds (stretched by test_slowdown()). */
static int daemon_wait(struct daemon *d, double timeout) {
        double end = test_deadline(timeout);
        int status;
        while (monotonic_seconds() < end) {
                pid_t r = waitpid(d->pid, &status, WNOHANG);
                if (r == d->pid) {
                        d->pid = 0;
                        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                }
                usleep(20000);
        }
        return -1;
}

static void daemon_stop(struct daemon *d) {
        if (d->pid > 0) {
                kill(d->pid, SIGTERM);
                if (daemon_wait(d, 30) < 0) {
                        kill(d->pid, SIGKILL);
                        daemon_wait(d, 5);
                }
        }
        if (d->notify_fd >= 0)
                close(d->notify_fd);
        test_tmpdir_remove(d->dir);
        free(d->socket);
}

/* ---- a line client ---- */

struct client {
        int fd;
        char buf[1 << 16];
        size_t len;
};

static void client_connect(struct client *c, const char *path) {
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        c->len = 0;
        ck_assert_int_ge(c->fd, 0);
        double end = test_deadline(30);
        while (connect(c->fd, (struct sockaddr *) &a, sizeof(a)) < 0) {
                ck_assert_msg(monotonic_seconds() < end, "cannot connect to %s: %s", path, strerror(errno));
                usleep(50000);
        }
}

static void client_send(struct client *c, const char *line) {
        size_t n = strlen(line);
        ck_assert_int_eq(write(c->fd, line, n), (ssize_t) n);
}

/* The next line as JSON (NULL at end of stream or after timeout seconds, stretched by
 * test_slowdown()). */
static struct json_object *client_read(struct client *c, double timeout) {
        double end = test_deadline(timeout);
        for (;;) {
                char *nl = memchr(c->buf, '\n', c->len);
                if (nl) {
                        *nl = 0;
                        struct json_object *o = json_tokener_parse(c->buf);
                        ck_assert_msg(o, "the daemon sent a line that is not JSON: %s", c->buf);
                        size_t used = (size_t) (nl - c->buf) + 1;
                        memmove(c->buf, c->buf + used, c->len - used);
                        c->len -= used;
                        return o;
                }
                double left = end - monotonic_seconds();
                struct pollfd p = { c->fd, POLLIN, 0 };
                if (left <= 0 || poll(&p, 1, (int) (left * 1000) + 1) <= 0)
                        return NULL;
                ck_assert_uint_lt(c->len, sizeof(c->buf));
                ssize_t n = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);
                if (n <= 0)
                        return NULL;
                c->len += (size_t) n;
        }
}

static const char *str_at(struct json_object *o, const char *path) {
        struct json_object *v = o;
        char key[64];
        while (*path && v) {
                size_t n = strcspn(path, ".");
                snprintf(key, sizeof(key), "%.*s", (int) n, path);
                if (json_object_is_type(v, json_type_array))
                        v = json_object_array_get_idx(v, (size_t) atoi(key));
                else if (!json_object_object_get_ex(v, key, &v))
                        v = NULL;
                path += n + (path[n] == '.');
        }
        return v ? json_object_get_string(v) : NULL;
}

static struct json_object *at(struct json_object *o, const char *key) {
        struct json_object *v = NULL;
        json_object_object_get_ex(o, key, &v);
        return v;
}

static void client_hello(struct client *c, const char *path) {
        client_connect(c, path);
        struct json_object *h = client_read(c, 30);
        ck_assert_ptr_nonnull(h);
        ck_assert_str_eq(str_at(h, "hello.protocol"), "1");
        json_object_put(h);
}

/* Sends a command and returns its result object (asserting success). */
static struct json_object *call(struct client *c, const char *line, const char *id) {
        client_send(c, line);
        for (;;) {
                struct json_object *o = client_read(c, 60);
                ck_assert_msg(o, "no answer to %s", line);
                const char *oid = str_at(o, "id");
                if (oid && strcmp(oid, id) == 0) {
                        ck_assert_msg(at(o, "result"), "%s failed: %s", line, json_object_to_json_string(o));
                        return o;
                }
                json_object_put(o);
        }
}

static long stat_value(struct client *c, const char *key) {
        struct json_object *o = call(c, "{\"op\":\"stats\",\"id\":\"st\"}\n", "st");
        long v = atol(str_at(o, key));
        json_object_put(o);
        return v;
}

/* Generation results of one request, assembled from its lines. */
struct gen {
        char text[8192];
        int tokens;
        int outputs;
        int outputs_before_final;
        bool finished;
        char finish_reason[32];
        char error_code[64];
        long usage_completion;
};

static void gen_take(struct gen *g, struct json_object *o) {
        struct json_object *outs = at(o, "outputs"), *err = at(o, "error");
        if (err) {
                snprintf(g->error_code, sizeof(g->error_code), "%s", str_at(err, "code"));
                return;
        }
        g->outputs++;
        for (size_t i = 0; outs && i < json_object_array_length(outs); i++) {
                struct json_object *co = json_object_array_get_idx(outs, i);
                strncat(g->text, json_object_get_string(at(co, "text")), sizeof(g->text) - strlen(g->text) - 1);
                g->tokens += (int) json_object_array_length(at(co, "token_ids"));
                const char *fr = json_object_get_string(at(co, "finish_reason"));
                if (fr)
                        snprintf(g->finish_reason, sizeof(g->finish_reason), "%s", fr);
        }
        if (json_object_get_boolean(at(o, "finished"))) {
                g->finished = true;
                g->usage_completion = atol(str_at(o, "usage.completion_tokens"));
        } else
                g->outputs_before_final++;
}

/* Reads one request's lines until it finishes (and its error line, if any). */
static void gen_run(struct client *c, const char *id, struct gen *g) {
        memset(g, 0, sizeof(*g));
        while (!g->finished || (strcmp(g->finish_reason, "error") == 0 && !g->error_code[0])) {
                struct json_object *o = client_read(c, 120);
                ck_assert_msg(o, "request %s did not finish", id);
                const char *oid = str_at(o, "id");
                if (oid && strcmp(oid, id) == 0)
                        gen_take(g, o);
                json_object_put(o);
                if (g->error_code[0] && !g->finished)
                        break;
        }
}

START_TEST(test_streaming) {
        struct daemon d = { 0 };
        daemon_start(&d, NULL);
        struct client c;
        client_hello(&c, d.socket);
        struct gen delta, final;
        client_send(&c, "{\"op\":\"generate\",\"id\":\"d\",\"prompt\":\"The capital of France is\","
                        "\"params\":{\"max_tokens\":24,\"temperature\":0,\"ignore_eos\":true}}\n");
        gen_run(&c, "d", &delta);
        client_send(&c, "{\"op\":\"generate\",\"id\":\"f\",\"prompt\":\"The capital of France is\","
                        "\"params\":{\"max_tokens\":24,\"temperature\":0,\"ignore_eos\":true,\"output_kind\":\"final\"}}\n");
        gen_run(&c, "f", &final);
        ck_assert_int_eq(delta.tokens, 24);
        ck_assert_int_eq(final.tokens, 24);
        ck_assert_str_eq(delta.finish_reason, "length");
        ck_assert_int_eq(delta.usage_completion, 24);
        /* streamed: outputs came before the last token was computed */
        ck_assert_int_gt(delta.outputs_before_final, 1);
        ck_assert_int_eq(final.outputs, 1);
        ck_assert_str_eq(delta.text, final.text);
        /* chat messages work too */
        client_send(&c, "{\"op\":\"generate\",\"id\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"Say hi.\"}],"
                        "\"params\":{\"max_tokens\":8,\"temperature\":0}}\n");
        struct gen chat;
        gen_run(&c, "m", &chat);
        ck_assert(chat.tokens >= 1 && chat.tokens <= 8);
        /* cumulative outputs repeat earlier tokens: usage still counts each once */
        client_send(&c, "{\"op\":\"generate\",\"id\":\"cu\",\"prompt\":\"Hi\","
                        "\"params\":{\"max_tokens\":5,\"ignore_eos\":true,\"output_kind\":\"cumulative\"}}\n");
        struct gen cumulative;
        gen_run(&c, "cu", &cumulative);
        ck_assert_int_eq(cumulative.usage_completion, 5);
        close(c.fd);
        /* a client that shuts its sending side still gets its answers */
        client_hello(&c, d.socket);
        client_send(&c, "{\"op\":\"resume\",\"id\":\"r\"}\n");
        shutdown(c.fd, SHUT_WR);
        struct json_object *o = client_read(&c, 30);
        ck_assert_msg(o && at(o, "result"), "no answer after a half-close");
        json_object_put(o);
        close(c.fd);
        daemon_stop(&d);
}
END_TEST

/* 64 clients with 4 requests each, all at once: every one ends with its exact count. */
START_TEST(test_many_clients) {
        enum { CLIENTS = 64, EACH = 4 };
        struct daemon d = { 0 };
        daemon_start(&d, NULL);
        struct client *c = calloc(CLIENTS, sizeof(*c));
        int tokens[CLIENTS][EACH] = { { 0 } }, done = 0;
        bool finished[CLIENTS][EACH] = { { false } };
        for (int i = 0; i < CLIENTS; i++) {
                client_hello(&c[i], d.socket);
                for (int k = 0; k < EACH; k++) {
                        char line[256];
                        snprintf(line, sizeof(line), "{\"op\":\"generate\",\"id\":\"r%d\",\"prompt_token_ids\":[%d,%d,%d,%d],"
                                 "\"params\":{\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true}}\n",
                                 k, 100 + i, 200 + k, 300 + i, 400 + k, 2 + (i + k) % 4);
                        client_send(&c[i], line);
                }
        }
        double end = test_deadline(300);
        while (done < CLIENTS * EACH) {
                ck_assert_msg(monotonic_seconds() < end, "only %d of %d requests finished", done, CLIENTS * EACH);
                struct pollfd p[CLIENTS];
                for (int i = 0; i < CLIENTS; i++)
                        p[i] = (struct pollfd) { c[i].fd, POLLIN, 0 };
                poll(p, CLIENTS, 1000);
                for (int i = 0; i < CLIENTS; i++) {
                        if (!(p[i].revents & POLLIN))
                                continue;
                        struct json_object *o;
                        while ((o = client_read(&c[i], 0.001))) {
                                int k = atoi(str_at(o, "id") + 1);
                                ck_assert_msg(!at(o, "error"), "%s", json_object_to_json_string(o));
                                ck_assert(!finished[i][k]);
                                struct json_object *outs = at(o, "outputs");
                                for (size_t j = 0; j < json_object_array_length(outs); j++)
                                        tokens[i][k] += (int) json_object_array_length(
                                                at(json_object_array_get_idx(outs, j), "token_ids"));
                                if (json_object_get_boolean(at(o, "finished"))) {
                                        finished[i][k] = true;
                                        done++;
                                }
                                json_object_put(o);
                        }
                }
        }
        for (int i = 0; i < CLIENTS; i++)
                for (int k = 0; k < EACH; k++)
                        ck_assert_int_eq(tokens[i][k], 2 + (i + k) % 4);
        ck_assert_int_eq(stat_value(&c[0], "result.requests_in_flight"), 0);
        for (int i = 0; i < CLIENTS; i++)
                close(c[i].fd);
        free(c);
        daemon_stop(&d);
}
END_TEST

static void expect_error(struct client *c, const char *line, const char *code, const char *needle) {
        client_send(c, line);
        struct json_object *o = client_read(c, 30);
        ck_assert_msg(o, "no answer to %s", line);
        const char *got = str_at(o, "error.code"), *msg = str_at(o, "error.message");
        ck_assert_msg(got && strcmp(got, code) == 0, "%s: expected %s, got %s", line, code, json_object_to_json_string(o));
        if (needle)
                ck_assert_msg(msg && strstr(msg, needle), "%s: message '%s' does not name '%s'", line, msg, needle);
        json_object_put(o);
}

/* Each bad line gets its error and the connection stays usable. */
START_TEST(test_abuse) {
        struct daemon d = { 0 };
        const char *const extra[] = { "--max-line-bytes", "1KiB", NULL };
        daemon_start(&d, extra);
        struct client c;
        client_hello(&c, d.socket);
        expect_error(&c, "not json\n", "invalid_json", NULL);
        expect_error(&c, "[1,2]\n", "invalid_request", NULL);
        expect_error(&c, "{\"op\":\"generate\"}\n", "invalid_request", "id");
        expect_error(&c, "{\"op\":\"launch\",\"id\":\"a\"}\n", "unknown_op", "launch");
        expect_error(&c, "{\"op\":\"generate\",\"id\":\"b\",\"prompt\":5}\n", "invalid_params", "prompt");
        expect_error(&c, "{\"op\":\"generate\",\"id\":\"c\",\"prompt\":\"x\",\"params\":{\"top_p\":2}}\n", "invalid_params", "top_p");
        expect_error(&c, "{\"op\":\"generate\",\"id\":\"e\",\"prompt\":\"x\",\"params\":{\"tempature\":1}}\n", "invalid_params",
                     "tempature");
        expect_error(&c, "{\"op\":\"generate\",\"id\":\"f\",\"prompt_token_ids\":[1,99999999]}\n", "invalid_params", "vocabulary");
        expect_error(&c, "{\"op\":\"stats\",\"id\":\"\xff\xfe\"}\n", "invalid_utf8", NULL);
        expect_error(&c, "{\"op\":\"generate\",\"id\":\"s\",\"prompt\":\"x\",\"params\":{\"seed\":18446744073709551616}}\n",
                     "invalid_params", "64 bits");
        expect_error(&c, "{\"op\":\"collective_rpc\",\"id\":\"r\",\"method\":\"launch\"}\n", "not_found", "launch");
        char big[3000];
        memset(big, 'a', sizeof(big));
        memcpy(big, "{\"op\":\"generate\",\"id\":\"g\",\"prompt\":\"", 36);
        memcpy(big + sizeof(big) - 4, "\"}\n", 3);
        big[sizeof(big) - 1] = 0;
        expect_error(&c, big, "line_too_long", NULL);
        /* a duplicate id while the first is in flight */
        client_send(&c, "{\"op\":\"generate\",\"id\":\"dup\",\"prompt\":\"Hello\",\"params\":{\"max_tokens\":200,\"ignore_eos\":true}}\n");
        client_send(&c, "{\"op\":\"generate\",\"id\":\"dup\",\"prompt\":\"Hello\"}\n");
        bool refused = false;
        for (int i = 0; i < 400 && !refused; i++) {
                struct json_object *o = client_read(&c, 30);
                ck_assert_ptr_nonnull(o);
                const char *code = str_at(o, "error.code");
                refused = code && strcmp(code, "duplicate_id") == 0;
                json_object_put(o);
        }
        ck_assert(refused);
        /* a list, as AsyncLLM.abort takes: one answer per id, in order */
        struct json_object *r = call(&c, "{\"op\":\"abort\",\"id\":\"ab\",\"request\":[\"nobody\",\"dup\"]}\n", "ab");
        struct json_object *each = NULL;
        ck_assert(json_object_object_get_ex(r, "result", &each) && json_object_object_get_ex(each, "aborted", &each));
        ck_assert_str_eq(json_object_to_json_string_ext(each, JSON_C_TO_STRING_PLAIN), "[false,true]");
        json_object_put(r);
        /* still serving */
        struct gen g;
        client_send(&c, "{\"op\":\"generate\",\"id\":\"ok\",\"prompt\":\"Hello\",\"params\":{\"max_tokens\":3,\"ignore_eos\":true}}\n");
        gen_run(&c, "ok", &g);
        ck_assert_int_eq(g.tokens, 3);
        close(c.fd);
        daemon_stop(&d);
}
END_TEST

/* True once the daemon's log holds needle (waits up to timeout seconds, stretched by
 * test_slowdown()). */
static bool log_has(struct daemon *d, const char *needle, double timeout) {
        char *path = test_path_join(d->dir, "stderr.log");
        double end = test_deadline(timeout);
        bool found = false;
        while (!found && monotonic_seconds() < end) {
                uint8_t *buf;
                size_t len;
                if (test_read_file(path, &buf, &len) == 0) {
                        found = memmem(buf, len, needle, strlen(needle)) != NULL;
                        free(buf);
                }
                if (!found)
                        usleep(50000);
        }
        free(path);
        return found;
}

/* SIGHUP: the file is read again; reloadable keys apply, the others are named as needing a
 * restart; a broken file keeps the settings. Limits apply per connection. */
START_TEST(test_reload_and_limits) {
        struct daemon d = { 0 };
        const char *const extra[] = { "--max-requests-per-connection", "2", NULL };
        daemon_start(&d, extra);
        struct client c;
        client_hello(&c, d.socket);
        client_send(&c, "{\"op\":\"generate\",\"id\":\"a\",\"prompt\":\"Hi\",\"params\":{\"max_tokens\":300,\"ignore_eos\":true}}\n");
        client_send(&c, "{\"op\":\"generate\",\"id\":\"b\",\"prompt\":\"Hi\",\"params\":{\"max_tokens\":300,\"ignore_eos\":true}}\n");
        client_send(&c, "{\"op\":\"generate\",\"id\":\"c\",\"prompt\":\"Hi\"}\n");
        bool limited = false;
        for (int i = 0; i < 1000 && !limited; i++) {
                struct json_object *o = client_read(&c, 30);
                ck_assert_ptr_nonnull(o);
                const char *code = str_at(o, "error.code");
                limited = code && strcmp(code, "too_many_requests") == 0 && strcmp(str_at(o, "id"), "c") == 0;
                json_object_put(o);
        }
        ck_assert(limited);
        close(c.fd);

        char *conf = test_path_join(d.dir, "asyncllmd.conf");
        const char *text = "client-timeout = 5\nmax-num-seqs = 8\n";
        ck_assert_int_eq(test_write_file(conf, text, strlen(text)), 0);
        kill(d.pid, SIGHUP);
        ck_assert(log_has(&d, "reload: client-timeout changed and applies now", 10));
        ck_assert(log_has(&d, "reload: max-num-seqs changed but needs a restart", 10));
        ck_assert_int_eq(test_write_file(conf, "bogus-key = 1\n", 14), 0);
        kill(d.pid, SIGHUP);
        ck_assert(log_has(&d, "reload failed, keeping the current settings", 10));
        client_hello(&c, d.socket); /* still serving */
        struct json_object *o = call(&c, "{\"op\":\"health\",\"id\":\"h\"}\n", "h");
        ck_assert_str_eq(str_at(o, "result.status"), "ok");
        json_object_put(o);
        close(c.fd);
        free(conf);
        daemon_stop(&d);
}
END_TEST

/* The error line a refused line gets, by id (other lines skipped). */
static void expect_refusal(struct client *c, const char *id, const char *code, const char *needle) {
        for (int i = 0; i < 2000; i++) {
                struct json_object *o = client_read(c, 60);
                ck_assert_msg(o, "no refusal for %s", id);
                const char *oid = str_at(o, "id"), *got = str_at(o, "error.code"), *msg = str_at(o, "error.message");
                if (oid && strcmp(oid, id) == 0) {
                        ck_assert_msg(got && strcmp(got, code) == 0, "%s: expected %s, got %s", id, code, json_object_to_json_string(o));
                        ck_assert_msg(msg && strstr(msg, needle), "%s: '%s' does not name '%s'", id, msg, needle);
                        json_object_put(o);
                        return;
                }
                json_object_put(o);
        }
        ck_abort_msg("no refusal for %s", id);
}

/* Until requests_in_flight and connections reach these (and, with no request left, the KV
 * blocks are all free). */
static void wait_for(struct client *watcher, long in_flight, long connections) {
        double end = test_deadline(60);
        while (stat_value(watcher, "result.requests_in_flight") != in_flight ||
               stat_value(watcher, "result.connections") != connections ||
               (in_flight == 0 && stat_value(watcher, "result.kv_blocks_used") != 0)) {
                ck_assert_msg(monotonic_seconds() < end, "requests, KV blocks or connections still held");
                usleep(100000);
        }
}

static void wait_idle(struct client *watcher, long connections) {
        wait_for(watcher, 0, connections);
}

/* max-connections refuses the next client with a reason; max-requests-per-uid counts a
 * uid's requests over all its connections. */
START_TEST(test_connection_and_uid_limits) {
        struct daemon d = { 0 };
        const char *const extra[] = { "--max-connections", "3", "--max-requests-per-uid", "3", NULL };
        daemon_start(&d, extra);
        struct client a, b, watcher, one_too_many;
        client_hello(&a, d.socket);
        client_hello(&b, d.socket);
        client_hello(&watcher, d.socket);
        client_connect(&one_too_many, d.socket);
        struct json_object *o = client_read(&one_too_many, 30);
        ck_assert_ptr_nonnull(o);
        ck_assert_str_eq(str_at(o, "error.code"), "too_many_requests");
        ck_assert_msg(strstr(str_at(o, "error.message"), "max-connections"), "%s", str_at(o, "error.message"));
        json_object_put(o);
        ck_assert_ptr_null(client_read(&one_too_many, 10)); /* and closed */
        close(one_too_many.fd);

        const char *long_request = "\",\"prompt\":\"Tell me a story\",\"params\":{\"max_tokens\":400,\"ignore_eos\":true}}\n";
        char line[256];
        const char *ids[] = { "a1", "a2", "b1" };
        for (int i = 0; i < 3; i++) {
                snprintf(line, sizeof(line), "{\"op\":\"generate\",\"id\":\"%s%s", ids[i], long_request);
                client_send(i < 2 ? &a : &b, line);
        }
        snprintf(line, sizeof(line), "{\"op\":\"generate\",\"id\":\"b2%s", long_request);
        client_send(&b, line);
        expect_refusal(&b, "b2", "too_many_requests", "max-requests-per-uid");
        ck_assert_int_eq(stat_value(&watcher, "result.requests_in_flight"), 3);
        /* the uid's count goes down as its requests end: a's two, b1 still runs */
        close(a.fd);
        wait_for(&watcher, 1, 2);
        client_send(&b, line);
        struct json_object *first = NULL;
        while (!first) {
                struct json_object *x = client_read(&b, 60);
                ck_assert_ptr_nonnull(x);
                const char *oid = str_at(x, "id");
                if (oid && strcmp(oid, "b2") == 0)
                        first = x;
                else
                        json_object_put(x);
        }
        ck_assert_msg(at(first, "outputs"), "b2 refused again: %s", json_object_to_json_string(first));
        json_object_put(first);
        close(b.fd);
        wait_idle(&watcher, 1);
        close(watcher.fd);
        daemon_stop(&d);
}
END_TEST

/* A client that stops reading: its outputs wait (bounded), and after client-timeout without
 * progress it is disconnected and its requests aborted, while others are served. */
START_TEST(test_slow_client) {
        struct daemon d = { 0 };
        const char *const extra[] = { "--client-timeout", "1", NULL };
        daemon_start(&d, extra);
        struct client slow, watcher;
        client_hello(&slow, d.socket);
        client_hello(&watcher, d.socket);
        /* prompt logprobs make big first lines: 4 x ~400 KB, far more than a socket buffer */
        char *line = malloc(16384);
        ck_assert_ptr_nonnull(line);
        for (int i = 0; i < 4; i++) {
                int n = snprintf(line, 16384, "{\"op\":\"generate\",\"id\":\"s%d\",\"prompt\":\"", i);
                for (int k = 0; k < 60; k++)
                        n += snprintf(line + n, 16384 - (size_t) n, "The quick brown fox %d jumps over the lazy dog. ", k * 7 + i);
                snprintf(line + n, 16384 - (size_t) n,
                         "\",\"params\":{\"max_tokens\":32,\"ignore_eos\":true,\"prompt_logprobs\":20}}\n");
                client_send(&slow, line);
        }
        free(line);
        ck_assert(log_has(&d, "read nothing for", 60));
        /* the watcher was never held up, and nothing is left of the slow client */
        struct json_object *o = call(&watcher, "{\"op\":\"health\",\"id\":\"h\"}\n", "h");
        ck_assert_str_eq(str_at(o, "result.status"), "ok");
        json_object_put(o);
        wait_idle(&watcher, 1);
        /* what the slow client finds: what was queued, then the end of the stream */
        size_t bytes = 0;
        for (;;) {
                struct pollfd p = { slow.fd, POLLIN, 0 };
                ck_assert_int_eq(poll(&p, 1, (int) (test_scaled(10) * 1000)), 1);
                ssize_t n = read(slow.fd, slow.buf, sizeof(slow.buf));
                if (n <= 0)
                        break;
                bytes += (size_t) n;
        }
        ck_assert_uint_gt(bytes, 0);
        close(slow.fd);
        close(watcher.fd);
        daemon_stop(&d);
}
END_TEST

/* Clients that vanish mid-stream leave nothing behind. */
START_TEST(test_vanished_clients) {
        struct daemon d = { 0 };
        daemon_start(&d, NULL);
        struct client c[8], watcher;
        for (int i = 0; i < 8; i++) {
                client_hello(&c[i], d.socket);
                client_send(&c[i], "{\"op\":\"generate\",\"id\":\"long\",\"prompt\":\"Tell me a story\","
                                   "\"params\":{\"max_tokens\":500,\"ignore_eos\":true}}\n");
                struct json_object *o = client_read(&c[i], 60);
                ck_assert_ptr_nonnull(o);
                json_object_put(o);
        }
        for (int i = 0; i < 8; i++)
                close(c[i].fd);
        client_hello(&watcher, d.socket);
        double end = test_deadline(20);
        while (stat_value(&watcher, "result.requests_in_flight") != 0 || stat_value(&watcher, "result.kv_blocks_used") != 0) {
                ck_assert_msg(monotonic_seconds() < end, "requests or KV blocks still held after their clients left");
                usleep(100000);
        }
        ck_assert_int_eq(stat_value(&watcher, "result.num_requests_running"), 0);
        close(watcher.fd);
        daemon_stop(&d);
}
END_TEST

/* SIGTERM under load: requests get their final output, every client a final message, and
 * the daemon exits 0 within the shutdown timeout. */
START_TEST(test_sigterm_under_load) {
        struct daemon d = { 0 };
        const char *const extra[] = { "--shutdown-timeout", "2", NULL };
        daemon_start(&d, extra);
        struct client c[4];
        for (int i = 0; i < 4; i++) {
                client_hello(&c[i], d.socket);
                client_send(&c[i], "{\"op\":\"generate\",\"id\":\"g\",\"prompt\":\"Once upon a time\","
                                   "\"params\":{\"max_tokens\":1000,\"ignore_eos\":true}}\n");
        }
        for (int i = 0; i < 4; i++) {
                struct json_object *o = client_read(&c[i], 60);
                ck_assert_ptr_nonnull(o);
                json_object_put(o);
        }
        double t0 = monotonic_seconds();
        kill(d.pid, SIGTERM);
        /* Every client is read as the daemon writes: a client left unread through the drain
         * fills its socket, and what the exiting daemon cannot write is lost (a slow
         * reader's end). Read one after another, client 1 lost its last lines once in CI,
         * decode having become fast enough to fill its socket within the 2 s drain. */
        bool final[4] = { false }, goodbye[4] = { false }, open[4] = { true, true, true, true };
        double end = test_deadline(30);
        for (int n_open = 4; n_open > 0;) {
                ck_assert_msg(monotonic_seconds() < end, "%d clients still open 30 s after SIGTERM", n_open);
                struct pollfd p[4];
                for (int i = 0; i < 4; i++)
                        p[i] = (struct pollfd) { open[i] ? c[i].fd : -1, POLLIN, 0 };
                if (poll(p, 4, 1000) <= 0)
                        continue;
                for (int i = 0; i < 4; i++) {
                        if (!open[i] || !p[i].revents)
                                continue;
                        ck_assert_uint_lt(c[i].len, sizeof(c[i].buf));
                        ssize_t n = read(c[i].fd, c[i].buf + c[i].len, sizeof(c[i].buf) - c[i].len);
                        if (n <= 0) {
                                open[i] = false;
                                n_open--;
                                continue;
                        }
                        c[i].len += (size_t) n;
                        struct json_object *o;
                        while ((o = client_read(&c[i], 0))) { /* the whole lines read so far */
                                if (json_object_get_boolean(at(o, "finished"))) {
                                        final[i] = true;
                                        ck_assert_str_eq(str_at(o, "outputs.0.finish_reason"), "abort");
                                }
                                const char *code = str_at(o, "error.code");
                                if (code && strcmp(code, "shutting_down") == 0)
                                        goodbye[i] = true;
                                json_object_put(o);
                        }
                }
        }
        for (int i = 0; i < 4; i++) {
                ck_assert_msg(final[i] && goodbye[i], "client %d: final output %d, shutdown message %d", i, final[i],
                              goodbye[i]);
                close(c[i].fd);
        }
        ck_assert_int_eq(daemon_wait(&d, 30), 0);
        ck_assert_msg(monotonic_seconds() - t0 < test_scaled(10), "the daemon took %.1f s to stop", monotonic_seconds() - t0);
        daemon_stop(&d);
}
END_TEST

/* The engine-death hook: every client gets engine_dead, health fails, exit status 3. */
START_TEST(test_engine_death) {
        struct daemon d = { 0 };
        const char *const env[] = { "ASYNCLLMD_FAULT_FAIL_STEP=6", NULL };
        daemon_start_with(&d, NULL, env, false);
        struct client c[3];
        for (int i = 0; i < 3; i++) {
                client_hello(&c[i], d.socket);
                client_send(&c[i], "{\"op\":\"generate\",\"id\":\"g\",\"prompt\":\"Hello there\","
                                   "\"params\":{\"max_tokens\":100,\"ignore_eos\":true}}\n");
        }
        for (int i = 0; i < 3; i++) {
                struct gen g;
                gen_run(&c[i], "g", &g);
                ck_assert_str_eq(g.finish_reason, "error");
                ck_assert_str_eq(g.error_code, "engine_dead");
                close(c[i].fd);
        }
        ck_assert_int_eq(daemon_wait(&d, 30), 3);
        daemon_stop(&d);
}
END_TEST

/* Counts the watchdog pings over exactly seconds (an observation window, not stretched), after
 * leaving out those already queued. */
static int pings_during(struct daemon *d, double seconds) {
        char buf[4096];
        while (recv(d->notify_fd, buf, sizeof(buf), 0) > 0)
                ;
        int before = d->watchdog_pings;
        read_notify_until(d, NULL, monotonic_seconds() + seconds);
        return d->watchdog_pings - before;
}

/* The health op's status. */
static char *health_status(struct client *c) {
        struct json_object *o = call(c, "{\"op\":\"health\",\"id\":\"h\"}\n", "h");
        char *status = strdup(str_at(o, "result.status"));
        json_object_put(o);
        ck_assert_ptr_nonnull(status);
        return status;
}

/* A hung engine: health turns red and the watchdog pings stop, then both recover. The first
 * step hangs for a stretched 3 s; the test waits on what it watches (the health op, the pings)
 * instead of sleeping, and only the window with no pings (longer than the 0.5 s between two)
 * is fixed. */
START_TEST(test_hung_engine) {
        struct daemon d = { .keep_notify = true };
        char *stall = NULL;
        char env_file[600], env_stall[64];
        const char *const extra[] = { "--health-stall-timeout", "1", NULL };
        char *dir = test_tmpdir();
        stall = test_path_join(dir, "stall");
        snprintf(env_file, sizeof(env_file), "ASYNCLLMD_FAULT_STALL_FILE=%s", stall);
        snprintf(env_stall, sizeof(env_stall), "ASYNCLLMD_FAULT_STALL_MS=%.0f", test_scaled(3) * 1000);
        const char *const env[] = { env_stall, env_file, "WATCHDOG_USEC=1000000", NULL };
        daemon_start_with(&d, extra, env, false);
        ck_assert_msg(wait_notify(&d, "WATCHDOG=1", 1.5), "idle: no watchdog ping");
        struct client c;
        client_hello(&c, d.socket);
        ck_assert_int_eq(test_write_file(stall, "", 0), 0);
        client_send(&c, "{\"op\":\"generate\",\"id\":\"g\",\"prompt\":\"Hi\",\"params\":{\"max_tokens\":2,\"ignore_eos\":true}}\n");
        struct client h;
        client_hello(&h, d.socket);
        double end = test_deadline(2.5); /* the stall timeout is 1 s */
        char *status;
        while (strcmp(status = health_status(&h), "stalled") != 0) {
                ck_assert_msg(monotonic_seconds() < end, "health still says %s while the first step hangs", status);
                free(status);
                usleep(50000);
        }
        free(status);
        ck_assert_int_eq(pings_during(&d, 0.6), 0);
        unlink(stall);
        struct gen g;
        gen_run(&c, "g", &g);
        ck_assert_int_eq(g.tokens, 2);
        status = health_status(&h);
        ck_assert_str_eq(status, "ok");
        free(status);
        ck_assert_msg(wait_notify(&d, "WATCHDOG=1", 1.2), "the watchdog pings did not resume");
        close(c.fd);
        close(h.fd);
        daemon_stop(&d);
        free(stall);
        test_tmpdir_remove(dir);
}
END_TEST

/* The ops around generation: tokenize as generate counts the prompt, detokenize back, the
 * tokenizer in model, the tasks, and the waits that end by their timeouts while a step hangs
 * (wait_for_requests_to_drain, collective_rpc) with the late answer dropped. */
START_TEST(test_engine_ops) {
        struct daemon d = { 0 };
        char env_file[600], env_stall[64];
        char *dir = test_tmpdir(), *stall = test_path_join(dir, "stall"), *traces = test_path_join(dir, "traces");
        snprintf(env_file, sizeof(env_file), "ASYNCLLMD_FAULT_STALL_FILE=%s", stall);
        snprintf(env_stall, sizeof(env_stall), "ASYNCLLMD_FAULT_STALL_MS=%.0f", test_scaled(2) * 1000);
        const char *const env[] = { env_stall, env_file, NULL };
        ck_assert_int_eq(mkdir(traces, 0700), 0);
        const char *const extra[] = { "--profile-dir", traces, NULL };
        daemon_start_with(&d, extra, env, false);
        struct client c, h;
        client_hello(&c, d.socket);
        client_hello(&h, d.socket);

        /* the profiler: a generate's steps, by layer and phase, and its detokenization */
        expect_error(&h, "{\"op\":\"stop_profile\",\"id\":\"p0\"}\n", "invalid_request", "not running");
        struct json_object *o = call(&h, "{\"op\":\"start_profile\",\"id\":\"p1\"}\n", "p1");
        json_object_put(o);
        expect_error(&h, "{\"op\":\"start_profile\",\"id\":\"p2\"}\n", "invalid_request", "running already");
        client_send(&c, "{\"op\":\"generate\",\"id\":\"gp\",\"prompt\":\"Hello\",\"params\":{\"max_tokens\":3,"
                        "\"ignore_eos\":true,\"output_kind\":\"final\"}}\n");
        o = client_read(&c, 60);
        ck_assert_ptr_nonnull(o);
        json_object_put(o);
        o = call(&h, "{\"op\":\"stop_profile\",\"id\":\"p3\"}\n", "p3");
        const char *trace_path = str_at(o, "result.path");
        ck_assert_ptr_nonnull(trace_path);
        ck_assert_msg(strncmp(trace_path, traces, strlen(traces)) == 0, "the trace %s is not in profile-dir", trace_path);
        ck_assert_str_eq(str_at(o, "result.truncated"), "false");
        long spans = atol(str_at(o, "result.spans"));
        struct json_object *trace = json_object_from_file(trace_path);
        ck_assert_msg(trace, "the trace %s is not JSON", trace_path);
        struct json_object *events = at(trace, "traceEvents");
        long complete = 0;
        bool seen[6] = { false };
        static const char *const wanted_spans[] = { "step", "forward", "qkv", "attention", "ffn_down", "detokenize" };
        for (size_t i = 0; i < json_object_array_length(events); i++) {
                struct json_object *e = json_object_array_get_idx(events, i);
                if (strcmp(str_at(e, "ph"), "X") != 0)
                        continue;
                complete++;
                ck_assert_msg(atof(str_at(e, "dur")) >= 0, "a span of negative duration");
                for (size_t k = 0; k < 6; k++)
                        seen[k] |= strcmp(str_at(e, "name"), wanted_spans[k]) == 0;
        }
        ck_assert_int_eq(complete, spans);
        for (size_t k = 0; k < 6; k++)
                ck_assert_msg(seen[k], "the trace has no %s span", wanted_spans[k]);
        json_object_put(trace);
        unlink(trace_path);
        json_object_put(o);
        /* profile-dir gone while recording: the daemon's failure, named, not the caller's */
        o = call(&h, "{\"op\":\"start_profile\",\"id\":\"p4\"}\n", "p4");
        json_object_put(o);
        ck_assert_int_eq(rmdir(traces), 0);
        expect_error(&h, "{\"op\":\"stop_profile\",\"id\":\"p5\"}\n", "internal_error", "cannot write the trace");
        expect_error(&h, "{\"op\":\"stop_profile\",\"id\":\"p6\"}\n", "invalid_request", "not running");

        o = call(&h, "{\"op\":\"tokenize\",\"id\":\"t\",\"prompt\":\"The cat sat on the mat.\"}\n", "t");
        long count = atol(str_at(o, "result.count"));
        struct json_object *tokens = at(at(o, "result"), "tokens");
        ck_assert_int_eq(json_object_array_length(tokens), count);
        ck_assert_int_gt(count, 3);
        char line[1024];
        snprintf(line, sizeof(line), "{\"op\":\"detokenize\",\"id\":\"dt\",\"tokens\":%s}\n",
                 json_object_to_json_string_ext(tokens, JSON_C_TO_STRING_PLAIN));
        json_object_put(o);
        o = call(&h, line, "dt");
        ck_assert_str_eq(str_at(o, "result.prompt"), "The cat sat on the mat.");
        json_object_put(o);
        /* generate counts the same prompt tokens */
        client_send(&c, "{\"op\":\"generate\",\"id\":\"g0\",\"prompt\":\"The cat sat on the mat.\",\"params\":{\"max_tokens\":1,"
                        "\"output_kind\":\"final\"}}\n");
        o = client_read(&c, 60);
        ck_assert_ptr_nonnull(o);
        ck_assert_int_eq(atol(str_at(o, "usage.prompt_tokens")), count);
        json_object_put(o);
        /* messages: the opened assistant turn adds tokens */
        o = call(&h, "{\"op\":\"tokenize\",\"id\":\"m1\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}\n", "m1");
        long with = atol(str_at(o, "result.count"));
        json_object_put(o);
        o = call(&h, "{\"op\":\"tokenize\",\"id\":\"m2\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                     "\"add_generation_prompt\":false}\n", "m2");
        ck_assert_int_gt(with, atol(str_at(o, "result.count")));
        json_object_put(o);
        expect_error(&h, "{\"op\":\"detokenize\",\"id\":\"bad\",\"tokens\":[1,99999999]}\n", "invalid_params", "99999999");
        expect_error(&h, "{\"op\":\"tokenize\",\"id\":\"bad\"}\n", "invalid_params", "prompt or messages");
        expect_error(&h, "{\"op\":\"tokenize\",\"id\":\"bad\",\"prompt\":\"a\",\"params\":{}}\n", "invalid_params", "params");

        o = call(&h, "{\"op\":\"model\",\"id\":\"md\"}\n", "md");
        long eos = atol(str_at(o, "result.tokenizer.eos_token_id"));
        ck_assert_int_eq(atol(str_at(o, "result.tokenizer.vocab_size")), atol(str_at(o, "result.vocab_size")));
        bool eos_ends = false;
        struct json_object *eog = at(at(at(o, "result"), "tokenizer"), "eog_token_ids");
        for (size_t i = 0; eog && i < json_object_array_length(eog); i++)
                eos_ends |= json_object_get_int(json_object_array_get_idx(eog, i)) == eos;
        ck_assert_msg(eos_ends, "eos_token_id %ld is not among eog_token_ids", eos);
        ck_assert_ptr_nonnull(str_at(o, "result.tokenizer.chat_template"));
        json_object_put(o);
        o = call(&h, "{\"op\":\"get_supported_tasks\",\"id\":\"k\"}\n", "k");
        ck_assert_str_eq(json_object_to_json_string_ext(at(at(o, "result"), "tasks"), JSON_C_TO_STRING_PLAIN),
                         "[\"generate\",\"encode\"]");
        json_object_put(o);
        /* sleep empties the prefix cache first, as AsyncLLM.sleep does */
        static const char *const cached_prompt =
                "{\"op\":\"generate\",\"id\":\"%s\",\"prompt\":\"The old lighthouse keeper climbed the stairs every evening, "
                "counted the ships on the horizon and wrote their names in a book that nobody read.\","
                "\"params\":{\"max_tokens\":1,\"output_kind\":\"final\"}}\n";
        long cached[3];
        for (int i = 0; i < 3; i++) {
                char id[8];
                snprintf(id, sizeof(id), "pc%d", i);
                snprintf(line, sizeof(line), cached_prompt, id);
                if (i == 2) {
                        json_object_put(call(&h, "{\"op\":\"sleep\",\"id\":\"sl\",\"level\":1}\n", "sl"));
                        json_object_put(call(&h, "{\"op\":\"wake_up\",\"id\":\"wu\"}\n", "wu"));
                }
                client_send(&c, line);
                o = client_read(&c, 60);
                ck_assert_ptr_nonnull(o);
                cached[i] = atol(str_at(o, "num_cached_tokens"));
                json_object_put(o);
        }
        ck_assert_msg(cached[0] == 0 && cached[1] >= 16 && cached[2] == 0,
                      "cached prompt tokens %ld, %ld, then %ld after sleep (want 0, at least a block, 0)", cached[0],
                      cached[1], cached[2]);
        o = call(&h, "{\"op\":\"reset_mm_cache\",\"id\":\"mm\"}\n", "mm");
        ck_assert_str_eq(str_at(o, "result.reset"), "false");
        json_object_put(o);
        o = call(&h, "{\"op\":\"wait_for_requests_to_drain\",\"id\":\"w0\"}\n", "w0");
        ck_assert_str_eq(str_at(o, "result.drained"), "true");
        json_object_put(o);

        /* a step that hangs: the waits end by their timeouts */
        ck_assert_int_eq(test_write_file(stall, "", 0), 0);
        client_send(&c, "{\"op\":\"generate\",\"id\":\"g\",\"prompt\":\"Hi\",\"params\":{\"max_tokens\":2,\"ignore_eos\":true}}\n");
        while (stat_value(&h, "result.requests_in_flight") == 0)
                usleep(10000);
        double t0 = monotonic_seconds();
        expect_error(&h, "{\"op\":\"wait_for_requests_to_drain\",\"id\":\"w1\",\"timeout\":0.3}\n", "timed_out",
                     "1 request still in flight");
        expect_error(&h, "{\"op\":\"collective_rpc\",\"id\":\"r1\",\"method\":\"ping\",\"timeout\":0.3}\n", "timed_out",
                     "0.3 s");
        ck_assert_msg(monotonic_seconds() - t0 < test_scaled(1.9), "the timeouts waited for the hung step");
        /* a drain that outlives the stall is answered when the request ends */
        client_send(&h, "{\"op\":\"wait_for_requests_to_drain\",\"id\":\"w2\",\"timeout\":600}\n");
        unlink(stall);
        struct gen g;
        gen_run(&c, "g", &g);
        ck_assert_int_eq(g.tokens, 2);
        o = client_read(&h, 60);
        ck_assert_ptr_nonnull(o);
        ck_assert_str_eq(str_at(o, "id"), "w2");
        ck_assert_str_eq(str_at(o, "result.drained"), "true");
        json_object_put(o);
        /* the rpc's late answer was dropped: the next line is the next op's */
        o = client_read(&h, 0.5);
        ck_assert_msg(!o, "a line after the timeout's answer: %s", o ? json_object_to_json_string(o) : "");
        o = call(&h, "{\"op\":\"collective_rpc\",\"id\":\"r2\",\"method\":\"reset_prefix_cache\",\"kwargs\":{\"preempt\":true},"
                     "\"timeout\":60}\n", "r2");
        ck_assert_str_eq(json_object_to_json_string_ext(at(o, "result"), JSON_C_TO_STRING_PLAIN), "[true]");
        json_object_put(o);
        close(c.fd);
        close(h.fd);
        daemon_stop(&d);
        free(stall);
        free(traces);
        test_tmpdir_remove(dir);
}
END_TEST

/* Socket activation: systemd-socket-activate passes the listening socket. */
START_TEST(test_socket_activation) {
        if (access("/usr/bin/systemd-socket-activate", X_OK) != 0 && access("/bin/systemd-socket-activate", X_OK) != 0) {
                printf("test_socket_activation: systemd-socket-activate is not installed; not run\n");
                return;
        }
        struct daemon d = { 0 };
        daemon_start_with(&d, NULL, NULL, true);
        struct client c;
        client_hello(&c, d.socket);
        struct gen g;
        client_send(&c, "{\"op\":\"generate\",\"id\":\"g\",\"prompt\":\"Hi\",\"params\":{\"max_tokens\":3,\"ignore_eos\":true}}\n");
        gen_run(&c, "g", &g);
        ck_assert_int_eq(g.tokens, 3);
        close(c.fd);
        daemon_stop(&d);
}
END_TEST

/* Who may do what: a uid that is neither root nor in the groups is refused. */
START_TEST(test_permissions) {
        struct daemon d = { 0 };
        daemon_start(&d, NULL);
        struct passwd *nobody = getpwnam("nobody");
        ck_assert_ptr_nonnull(nobody);
        ck_assert_int_eq(chmod(d.socket, 0666), 0);
        ck_assert_int_eq(chmod(d.dir, 0755), 0);
        pid_t pid = fork();
        if (pid == 0) {
                if (setgroups(0, NULL) < 0 || setgid(nobody->pw_gid) < 0 || setuid(nobody->pw_uid) < 0)
                        _exit(10);
                struct client c;
                client_hello(&c, d.socket);
                client_send(&c, "{\"op\":\"pause\",\"id\":\"p\"}\n");
                struct json_object *o = client_read(&c, 30);
                const char *code = o ? str_at(o, "error.code") : NULL;
                _exit(code && strcmp(code, "permission_denied") == 0 ? 0 : 11);
        }
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "nobody was not refused pause (status %d)", status);
        /* root may */
        struct client c;
        client_hello(&c, d.socket);
        struct json_object *o = call(&c, "{\"op\":\"pause\",\"id\":\"p\",\"mode\":\"keep\"}\n", "p");
        json_object_put(o);
        o = call(&c, "{\"op\":\"resume\",\"id\":\"r\"}\n", "r");
        json_object_put(o);
        close(c.fd);
        daemon_stop(&d);
}
END_TEST

/* ---- D-Bus, through a private dbus-daemon ---- */

struct private_bus {
        pid_t pid;
        char *dir;
        char address[512];
};

static void private_bus_start(struct private_bus *b) {
        b->dir = test_tmpdir();
        char *conf = test_path_join(b->dir, "bus.conf");
        char text[2048];
        snprintf(text, sizeof(text),
                 "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN\"\n"
                 " \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n"
                 "<busconfig><type>session</type><listen>unix:path=%s/bus</listen><auth>EXTERNAL</auth>\n"
                 "<policy context=\"default\"><allow user=\"*\"/><allow own=\"*\"/><allow send_destination=\"*\"/><allow receive_sender=\"*\"/>"
                 "</policy></busconfig>\n", b->dir);
        ck_assert_int_eq(test_write_file(conf, text, strlen(text)), 0);
        snprintf(b->address, sizeof(b->address), "unix:path=%s/bus", b->dir);
        b->pid = fork();
        ck_assert_int_ge(b->pid, 0);
        if (b->pid == 0) {
                execlp("dbus-daemon", "dbus-daemon", "--nofork", "--config-file", conf, (char *) NULL);
                _exit(127);
        }
        char *sock = test_path_join(b->dir, "bus");
        double end = test_deadline(10);
        while (access(sock, F_OK) != 0) {
                ck_assert_msg(monotonic_seconds() < end, "the private dbus-daemon did not start");
                usleep(20000);
        }
        chmod(b->dir, 0755);
        free(sock);
        free(conf);
}

static void private_bus_stop(struct private_bus *b) {
        kill(b->pid, SIGTERM);
        waitpid(b->pid, NULL, 0);
        test_tmpdir_remove(b->dir);
}

static sd_bus *bus_connect(const char *address) {
        sd_bus *bus = NULL;
        ck_assert_int_ge(sd_bus_new(&bus), 0);
        ck_assert_int_ge(sd_bus_set_address(bus, address), 0);
        ck_assert_int_ge(sd_bus_set_bus_client(bus, 1), 0);
        ck_assert_int_ge(sd_bus_start(bus), 0);
        return bus;
}

#define ENGINE "org.asyncllm.Engine1", "/org/asyncllm/Engine1", "org.asyncllm.Engine1"

static uint32_t bus_stat(sd_bus *bus, const char *key) {
        sd_bus_message *reply = NULL;
        sd_bus_error error = SD_BUS_ERROR_NULL;
        uint32_t v = UINT32_MAX;
        ck_assert_msg(sd_bus_call_method(bus, ENGINE, "GetStats", &error, &reply, "") >= 0, "%s", error.message);
        ck_assert_int_ge(sd_bus_message_enter_container(reply, 'a', "{sv}"), 0);
        while (sd_bus_message_enter_container(reply, 'e', "sv") > 0) {
                const char *k, *type;
                ck_assert_int_ge(sd_bus_message_read(reply, "s", &k), 0);
                ck_assert_int_ge(sd_bus_message_peek_type(reply, NULL, &type), 0);
                if (strcmp(k, key) == 0 && strcmp(type, "u") == 0)
                        ck_assert_int_ge(sd_bus_message_read(reply, "v", "u", &v), 0);
                else
                        ck_assert_int_ge(sd_bus_message_skip(reply, "v"), 0);
                ck_assert_int_ge(sd_bus_message_exit_container(reply), 0);
        }
        sd_bus_message_unref(reply);
        return v;
}

struct state_watch {
        char last[32];
        int changes;
};

static int on_properties_changed(sd_bus_message *m, void *userdata, sd_bus_error *error) {
        struct state_watch *w = userdata;
        const char *iface, *name, *value;
        (void) error;
        if (sd_bus_message_read(m, "s", &iface) < 0 || sd_bus_message_enter_container(m, 'a', "{sv}") < 0)
                return 0;
        while (sd_bus_message_enter_container(m, 'e', "sv") > 0) {
                if (sd_bus_message_read(m, "s", &name) >= 0 && strcmp(name, "State") == 0 &&
                    sd_bus_message_read(m, "v", "s", &value) >= 0) {
                        snprintf(w->last, sizeof(w->last), "%s", value);
                        w->changes++;
                } else
                        sd_bus_message_skip(m, "v");
                sd_bus_message_exit_container(m);
        }
        return 0;
}

static void wait_state(sd_bus *bus, struct state_watch *w, const char *want) {
        double end = test_deadline(20);
        while (strcmp(w->last, want) != 0) {
                ck_assert_msg(monotonic_seconds() < end, "State never became %s (last %s)", want, w->last);
                if (sd_bus_process(bus, NULL) == 0)
                        sd_bus_wait(bus, 100000);
        }
}

static void bus_call_ok(sd_bus *bus, const char *member, const char *types, ...) {
        sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *m = NULL, *reply = NULL;
        va_list ap;
        ck_assert_int_ge(sd_bus_message_new_method_call(bus, &m, ENGINE, member), 0);
        va_start(ap, types);
        ck_assert_int_ge(sd_bus_message_appendv(m, types, ap), 0);
        va_end(ap);
        ck_assert_msg(sd_bus_call(bus, m, 60 * 1000000ULL, &error, &reply) >= 0, "%s: %s", member, error.message);
        sd_bus_message_unref(reply);
        sd_bus_message_unref(m);
}

/* busctl calling a method in the background, its output in out_path. */
static pid_t busctl_spawn(const char *address, const char *call_args, const char *out_path) {
        char cmd[2048];
        snprintf(cmd, sizeof(cmd), "exec busctl --address=%s --timeout=600 call org.asyncllm.Engine1 /org/asyncllm/Engine1 "
                 "org.asyncllm.Engine1 %s >%s 2>&1", address, call_args, out_path);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                execl("/bin/sh", "sh", "-c", cmd, (char *) NULL);
                _exit(127);
        }
        return pid;
}

/* busctl's exit status and what it printed. */
static int busctl_wait(pid_t pid, const char *out_path, char *out, size_t size) {
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        uint8_t *buf;
        size_t len;
        out[0] = 0;
        if (test_read_file(out_path, &buf, &len) == 0) {
                snprintf(out, size, "%.*s", (int) len, (const char *) buf);
                free(buf);
        }
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void wait_in_flight(sd_bus *bus, uint32_t want) {
        double end = test_deadline(60);
        while (bus_stat(bus, "requests_in_flight") != want) {
                ck_assert_msg(monotonic_seconds() < end, "requests_in_flight never became %u", want);
                usleep(50000);
        }
}

static char **list_requests(sd_bus *bus) {
        sd_bus_message *reply = NULL;
        sd_bus_error error = SD_BUS_ERROR_NULL;
        char **ids = NULL;
        ck_assert_msg(sd_bus_call_method(bus, ENGINE, "ListRequests", &error, &reply, "") >= 0, "%s", error.message);
        ck_assert_int_ge(sd_bus_message_read_strv(reply, &ids), 0);
        sd_bus_message_unref(reply);
        return ids;
}

static void strv_free(char **v) {
        for (char **p = v; p && *p; p++)
                free(*p);
        free(v);
}

static void expect_bus_error(int r, sd_bus_error *error, const char *name, const char *needle) {
        ck_assert_int_lt(r, 0);
        ck_assert_msg(sd_bus_error_has_name(error, name), "expected %s, got %s: %s", name, error->name, error->message);
        ck_assert_msg(strstr(error->message, needle), "'%s' does not name '%s'", error->message, needle);
        sd_bus_error_free(error);
}

/* Complete is a request like any other: counted, listed, limited per uid, aborted by Abort
 * or by its caller leaving the bus. Prompts as token ids or chat messages; metrics. */
static void test_dbus_complete(sd_bus *bus, struct private_bus *b) {
        char *out1 = test_path_join(b->dir, "c1.out"), *out2 = test_path_join(b->dir, "c2.out"), out[4096];
        const char *long_call = "Complete 'sa{sv}' 'Tell me a story' 2 max_tokens i 3000 ignore_eos b true";
        pid_t c1 = busctl_spawn(b->address, long_call, out1), c2 = busctl_spawn(b->address, long_call, out2);
        wait_in_flight(bus, 2);
        char **ids = list_requests(bus);
        ck_assert_msg(ids && ids[0] && ids[1] && !ids[2], "ListRequests did not list the two requests");
        ck_assert_msg(strstr(ids[0], "/complete") && strstr(ids[1], "/complete"), "%s %s", ids[0], ids[1]);
        sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        int r = sd_bus_call_method(bus, ENGINE, "Complete", &error, NULL, "sa{sv}", "x", 1, "max_tokens", "i", 1);
        expect_bus_error(r, &error, "org.asyncllm.Engine1.Error.TooManyRequests", "max-requests-per-uid");
        /* the first caller leaves the bus: its request is aborted */
        kill(c1, SIGKILL);
        busctl_wait(c1, out1, out, sizeof(out));
        wait_in_flight(bus, 1);
        /* Abort answers the second with what it had */
        char **left = list_requests(bus);
        ck_assert_msg(left && left[0] && !left[1], "one request should be left");
        bus_call_ok(bus, "Abort", "s", left[0]);
        ck_assert_msg(busctl_wait(c2, out2, out, sizeof(out)) == 0, "busctl: %s", out);
        ck_assert_msg(strstr(out, "\"abort\""), "busctl printed: %s", out);
        wait_in_flight(bus, 0);
        strv_free(ids);
        strv_free(left);

        /* an empty prompt with prompt_token_ids, or with chat messages */
        ck_assert_msg(sd_bus_call_method(bus, ENGINE, "Complete", &error, &reply, "sa{sv}", "", 3, "max_tokens", "i", 4,
                                         "ignore_eos", "b", 1, "prompt_token_ids", "ai", 3, 504, 3458, 314) >= 0,
                      "%s", error.message);
        const char *text, *reason;
        uint32_t prompt_tokens = 0, completion_tokens = 0;
        ck_assert_int_ge(sd_bus_message_read(reply, "ss", &text, &reason), 0);
        ck_assert_str_eq(reason, "length");
        const char *k1, *k2;
        ck_assert_int_ge(sd_bus_message_read(reply, "a{sv}", 2, &k1, "u", &prompt_tokens, &k2, "u", &completion_tokens), 0);
        ck_assert_str_eq(k1, "prompt_tokens");
        ck_assert_str_eq(k2, "completion_tokens");
        ck_assert_uint_eq(prompt_tokens, 3);
        ck_assert_uint_eq(completion_tokens, 4);
        reply = sd_bus_message_unref(reply);
        ck_assert_msg(sd_bus_call_method(bus, ENGINE, "Complete", &error, &reply, "sa{sv}", "", 3, "max_tokens", "i", 16,
                                         "temperature", "d", 0.0, "messages", "aa{ss}", 1, 2, "role", "user", "content",
                                         "What is the capital of France?") >= 0, "%s", error.message);
        ck_assert_int_ge(sd_bus_message_read(reply, "ss", &text, &reason), 0);
        ck_assert_int_ge(sd_bus_message_read(reply, "a{sv}", 2, &k1, "u", &prompt_tokens, &k2, "u", &completion_tokens), 0);
        ck_assert_msg(*text && completion_tokens > 0, "no chat answer");
        /* rendered by the chat template: its role markers and default system prompt */
        ck_assert_msg(prompt_tokens > 20, "the messages were not rendered as a chat: %u prompt tokens", prompt_tokens);
        reply = sd_bus_message_unref(reply);
        r = sd_bus_call_method(bus, ENGINE, "Complete", &error, NULL, "sa{sv}", "x", 1, "max_tokens", "h", 0);
        expect_bus_error(r, &error, SD_BUS_ERROR_INVALID_ARGS, "params");
        r = sd_bus_call_method(bus, ENGINE, "Complete", &error, NULL, "sa{sv}", "x", 1, "temperature", "d", NAN);
        expect_bus_error(r, &error, SD_BUS_ERROR_INVALID_ARGS, "NaN or infinite");
        r = sd_bus_call_method(bus, ENGINE, "Complete", &error, NULL, "sa{sv}", "x", 1, "n", "i", 2);
        expect_bus_error(r, &error, "org.asyncllm.Engine1.Error.InvalidParams", "n must be 1");
        /* dictionaries nest as objects: logit_bias as a{sd}, its keys as text */
        ck_assert_msg(sd_bus_call_method(bus, ENGINE, "Complete", &error, &reply, "sa{sv}", "Hi", 2, "max_tokens", "i", 1,
                                         "logit_bias", "a{sd}", 1, "42", -1.5) >= 0,
                      "%s", error.message);
        reply = sd_bus_message_unref(reply);
        /* the request's class goes beside the prompt, as b or as the strings clients send */
        ck_assert_msg(sd_bus_call_method(bus, ENGINE, "Complete", &error, &reply, "sa{sv}", "Hi", 4, "max_tokens", "i", 1,
                                         "is_latency_sensitive", "s", "True", "slo", "d", 0.5, "ttft_slo", "d", 2.0) >= 0,
                      "%s", error.message);
        reply = sd_bus_message_unref(reply);
        r = sd_bus_call_method(bus, ENGINE, "Complete", &error, NULL, "sa{sv}", "x", 2, "latency_sensitive", "b", 1,
                               "is_latency_sensitive", "b", 1);
        expect_bus_error(r, &error, "org.asyncllm.Engine1.Error.InvalidParams",
                         "latency_sensitive and is_latency_sensitive are the same field");
        r = sd_bus_call_method(bus, ENGINE, "Complete", &error, NULL, "sa{sv}", "x", 1, "ttft_slo", "d", 0.0);
        expect_bus_error(r, &error, "org.asyncllm.Engine1.Error.InvalidParams", "ttft_slo must be a number of seconds");
        r = sd_bus_call_method(bus, ENGINE, "CollectiveRpc", &error, NULL, "ss", "launch", "");
        expect_bus_error(r, &error, "org.asyncllm.Engine1.Error.NotFound", "launch");

        const char *metrics;
        ck_assert_msg(sd_bus_call_method(bus, ENGINE, "GetMetrics", &error, &reply, "") >= 0, "%s", error.message);
        ck_assert_int_ge(sd_bus_message_read(reply, "s", &metrics), 0);
        ck_assert_msg(strstr(metrics, "vllm:request_success_total{") && strstr(metrics, "finished_reason=\"abort\"} 3"),
                      "metrics: %s", metrics);
        sd_bus_message_unref(reply);
        free(out1);
        free(out2);
}

START_TEST(test_dbus) {
        struct private_bus b = { 0 };
        private_bus_start(&b);
        char env_address[600];
        snprintf(env_address, sizeof(env_address), "DBUS_SESSION_BUS_ADDRESS=%s", b.address);
        const char *const env[] = { env_address, NULL };
        const char *const extra[] = { "--bus", "user", "--max-requests-per-uid", "2", "--shutdown-timeout", "60", NULL };
        struct daemon d = { 0 };
        daemon_start_with(&d, extra, env, false);

        /* Complete with busctl, as a shell script would */
        char cmd[1024], out[4096] = "";
        snprintf(cmd, sizeof(cmd), "busctl --address=%s call org.asyncllm.Engine1 /org/asyncllm/Engine1 "
                 "org.asyncllm.Engine1 Complete 'sa{sv}' 'The capital of France is' 3 max_tokens i 6 temperature d 0 "
                 "ignore_eos b true", b.address);
        FILE *p = popen(cmd, "r");
        ck_assert_ptr_nonnull(p);
        size_t n = fread(out, 1, sizeof(out) - 1, p);
        out[n] = 0;
        ck_assert_int_eq(pclose(p), 0);
        ck_assert_msg(strstr(out, " Paris") && strstr(out, "\"length\"") && strstr(out, "\"completion_tokens\" u 6"),
                      "busctl printed: %s", out);

        sd_bus *bus = bus_connect(b.address);
        struct state_watch w = { "running", 0 };
        ck_assert_int_ge(sd_bus_match_signal(bus, NULL, "org.asyncllm.Engine1", "/org/asyncllm/Engine1",
                                             "org.freedesktop.DBus.Properties", "PropertiesChanged", on_properties_changed, &w), 0);

        /* Generate: the fd carries the NDJSON stream; closing it aborts the request */
        sd_bus_error error = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        ck_assert_msg(sd_bus_call_method(bus, ENGINE, "Generate", &error, &reply, "sa{sv}", "Tell me a story", 2,
                                         "max_tokens", "i", 500, "ignore_eos", "b", 1) >= 0, "%s", error.message);
        const char *request_id;
        int fd;
        ck_assert_int_ge(sd_bus_message_read(reply, "sh", &request_id, &fd), 0);
        struct client stream = { .fd = fcntl(fd, F_DUPFD_CLOEXEC, 3) };
        sd_bus_message_unref(reply);
        struct json_object *hello = client_read(&stream, 60); /* the same stream as the socket's */
        ck_assert_ptr_nonnull(hello);
        ck_assert_str_eq(str_at(hello, "hello.protocol"), "1");
        json_object_put(hello);
        for (int i = 0; i < 3; i++) {
                struct json_object *o = client_read(&stream, 60);
                ck_assert_ptr_nonnull(o);
                ck_assert_ptr_nonnull(at(o, "outputs"));
                json_object_put(o);
        }
        ck_assert_uint_eq(bus_stat(bus, "requests_in_flight"), 1);
        close(stream.fd);
        double end = test_deadline(20);
        while (bus_stat(bus, "requests_in_flight") != 0 || bus_stat(bus, "kv_blocks_used") != 0) {
                ck_assert_msg(monotonic_seconds() < end, "closing the stream did not abort the request");
                usleep(100000);
        }
        /* a refused request is a named D-Bus error */
        int r = sd_bus_call_method(bus, ENGINE, "Generate", &error, NULL, "sa{sv}", "x", 1, "top_p", "d", 2.0);
        ck_assert_int_lt(r, 0);
        ck_assert_str_eq(error.name, "org.asyncllm.Engine1.Error.InvalidParams");
        ck_assert_msg(strstr(error.message, "top_p"), "%s", error.message);
        sd_bus_error_free(&error);

        test_dbus_complete(bus, &b);

        /* properties change on pause and sleep */
        bus_call_ok(bus, "Pause", "sb", "keep", 0);
        wait_state(bus, &w, "paused");
        bus_call_ok(bus, "Sleep", "i", 1);
        wait_state(bus, &w, "sleeping");
        bus_call_ok(bus, "WakeUp", "as", 0);
        wait_state(bus, &w, "paused");
        bus_call_ok(bus, "Resume", "");
        wait_state(bus, &w, "running");

        /* the tokenizer's methods, the tasks, the absent caches and the drain, as busctl calls them */
        static const struct {
                const char *call, *want;
        } calls[] = {
                { "Tokenize s 'Hello world'", "ai 2 19556 905" },
                { "Detokenize ai 2 19556 905", "s \"Hello world\"" },
                { "GetSupportedTasks", "as 2 \"generate\" \"encode\"" },
                { "ResetMmCache", "b false" },
                { "ResetEncoderCache", "b false" },
                { "WaitForRequestsToDrain d 5", "" },
        };
        r = sd_bus_call_method(bus, ENGINE, "StartProfile", &error, NULL, "");
        ck_assert_msg(r < 0 && strstr(error.message, "profile-dir"), "StartProfile without profile-dir: %s",
                      error.message ? error.message : "no error");
        sd_bus_error_free(&error);
        for (size_t i = 0; i < sizeof(calls) / sizeof(*calls); i++) {
                char *call_out = test_path_join(b.dir, "call.out");
                pid_t pid = busctl_spawn(b.address, calls[i].call, call_out);
                ck_assert_msg(busctl_wait(pid, call_out, out, sizeof(out)) == 0, "busctl %s: %s", calls[i].call, out);
                out[strcspn(out, "\n")] = 0;
                ck_assert_msg(strcmp(out, calls[i].want) == 0, "busctl %s printed '%s', not '%s'", calls[i].call, out,
                              calls[i].want);
                free(call_out);
        }
        r = sd_bus_call_method(bus, ENGINE, "Detokenize", &error, NULL, "ai", 1, 99999999);
        ck_assert_msg(r < 0 && sd_bus_error_has_name(&error, "org.asyncllm.Engine1.Error.InvalidParams") &&
                      strstr(error.message, "99999999"), "Detokenize of an id out of range: %s", error.message);
        sd_bus_error_free(&error);
        char *busy_out = test_path_join(b.dir, "busy.out");
        pid_t busy = busctl_spawn(b.address, "Complete 'sa{sv}' 'Tell me a story' 2 max_tokens i 48 ignore_eos b true", busy_out);
        wait_in_flight(bus, 1);
        r = sd_bus_call_method(bus, ENGINE, "WaitForRequestsToDrain", &error, NULL, "d", 0.01);
        ck_assert_msg(r < 0 && sd_bus_error_has_name(&error, "org.asyncllm.Engine1.Error.TimedOut"),
                      "WaitForRequestsToDrain with a request in flight: %s", error.message ? error.message : "no error");
        sd_bus_error_free(&error);
        bus_call_ok(bus, "WaitForRequestsToDrain", "d", 600.0);
        ck_assert_uint_eq(bus_stat(bus, "requests_in_flight"), 0);
        ck_assert_msg(busctl_wait(busy, busy_out, out, sizeof(out)) == 0, "busctl: %s", out);
        free(busy_out);

        /* nobody is refused the admin methods */
        if (geteuid() == 0) {
                struct passwd *nobody = getpwnam("nobody");
                ck_assert_ptr_nonnull(nobody);
                pid_t pid = fork();
                if (pid == 0) {
                        if (setgroups(0, NULL) < 0 || setgid(nobody->pw_gid) < 0 || setuid(nobody->pw_uid) < 0)
                                _exit(10);
                        sd_bus *nb = NULL;
                        sd_bus_error e = SD_BUS_ERROR_NULL;
                        if (sd_bus_new(&nb) < 0 || sd_bus_set_address(nb, b.address) < 0 || sd_bus_set_bus_client(nb, 1) < 0 ||
                            sd_bus_start(nb) < 0)
                                _exit(12);
                        int rr = sd_bus_call_method(nb, ENGINE, "Pause", &e, NULL, "sb", "keep", 0);
                        _exit(rr < 0 && sd_bus_error_has_name(&e, "org.asyncllm.Engine1.Error.PermissionDenied") ? 0 : 11);
                }
                int status;
                ck_assert_int_eq(waitpid(pid, &status, 0), pid);
                ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "nobody was not refused Pause (status %d)", status);
        } else
                printf("test_dbus: the refusal of a non-admin uid needs root to switch to nobody; not run\n");
        /* SIGTERM lets a Complete in flight finish and answers it */
        char *out_path = test_path_join(b.dir, "drain.out");
        pid_t drained = busctl_spawn(b.address, "Complete 'sa{sv}' 'Tell me a story' 2 max_tokens i 48 ignore_eos b true", out_path);
        wait_in_flight(bus, 1);
        kill(d.pid, SIGTERM);
        ck_assert_int_eq(daemon_wait(&d, 60), 0);
        ck_assert_msg(busctl_wait(drained, out_path, out, sizeof(out)) == 0, "busctl: %s", out);
        ck_assert_msg(strstr(out, "\"length\"") && strstr(out, "\"completion_tokens\" u 48"), "busctl printed: %s", out);
        free(out_path);
        sd_bus_flush_close_unref(bus);
        daemon_stop(&d);
        private_bus_stop(&b);
}
END_TEST

/* ASYNCLLM_TEST_ONLY=name[,name...] runs only those tests (while working on one). */
/* The slo policy end to end on the real model. Once the step-time model has learned from
 * a warm-up request, a latency-sensitive request with a loose SLO runs beside best-effort
 * work; one whose SLO no engine could meet is refused as overloaded with a retry hint
 * (judged by the shortest step run until latency-sensitive decodes alone are timed), or
 * with slo-admission=demote served as best-effort; counters and the model's error reach
 * stats. The log says what the decode calibration at start measured. */
START_TEST(test_slo_policy) {
        for (int demote = 0; demote <= 1; demote++) {
                const char *const args[] = { "--scheduling-policy", "slo", "--slo-admission", demote ? "demote" : "reject",
                                             NULL };
                struct daemon d = { 0 };
                struct client c, other;
                struct gen g;
                daemon_start(&d, args);
                ck_assert_msg(log_has(&d, "slo: steps of 1..8 decodes alone at 129 positions took ", 5),
                              "no decode calibration in the log");
                client_hello(&c, d.socket);
                client_hello(&other, d.socket);

                client_send(&c, "{\"op\":\"generate\",\"id\":\"warm\",\"prompt\":\"Hello\","
                                "\"params\":{\"max_tokens\":24,\"ignore_eos\":true}}\n");
                gen_run(&c, "warm", &g);
                ck_assert_str_eq(g.finish_reason, "length");
                ck_assert_int_ge(stat_value(&c, "result.step_model_samples"), 16);

                client_send(&other, "{\"op\":\"generate\",\"id\":\"be\",\"prompt\":\"Once upon a time\","
                                    "\"params\":{\"max_tokens\":32,\"ignore_eos\":true}}\n");
                client_send(&c, "{\"op\":\"generate\",\"id\":\"ls\",\"prompt\":\"Hi\",\"latency_sensitive\":\"True\","
                                "\"slo\":30,\"ttft_slo\":600,\"params\":{\"max_tokens\":8,\"ignore_eos\":true}}\n");
                gen_run(&c, "ls", &g);
                ck_assert_str_eq(g.finish_reason, "length");
                ck_assert_int_eq(g.tokens, 8);
                gen_run(&other, "be", &g);
                ck_assert_str_eq(g.finish_reason, "length");
                ck_assert_int_eq(g.tokens, 32);

                /* a microsecond per token: no step is that short */
                client_send(&c, "{\"op\":\"generate\",\"id\":\"fast\",\"prompt\":\"Hi\",\"is_latency_sensitive\":true,"
                                "\"slo\":0.000001,\"params\":{\"max_tokens\":4,\"ignore_eos\":true}}\n");
                if (demote) {
                        gen_run(&c, "fast", &g);
                        ck_assert_str_eq(g.finish_reason, "length");
                        ck_assert_int_eq(stat_value(&c, "result.slo_demoted"), 1);
                        ck_assert_int_eq(stat_value(&c, "result.slo_rejected"), 0);
                } else {
                        struct json_object *o;
                        while ((o = client_read(&c, 60)) && !at(o, "error"))
                                json_object_put(o);
                        ck_assert_msg(o, "no error line for the impossible SLO");
                        ck_assert_str_eq(str_at(o, "id"), "fast");
                        ck_assert_str_eq(str_at(o, "error.code"), "overloaded");
                        ck_assert_msg(strstr(str_at(o, "error.message"), "slo"), "%s", str_at(o, "error.message"));
                        double retry = json_object_get_double(at(at(o, "error"), "retry_after"));
                        ck_assert_msg(retry >= 0.1 && retry <= 60, "retry_after %g", retry);
                        json_object_put(o);
                        ck_assert_int_eq(stat_value(&c, "result.slo_rejected"), 1);
                        ck_assert_int_eq(stat_value(&c, "result.slo_demoted"), 0);
                }
                struct json_object *stats = call(&c, "{\"op\":\"stats\",\"id\":\"st\"}\n", "st");
                ck_assert_str_eq(str_at(stats, "result.scheduling_policy"), "slo");
                double p99 = json_object_get_double(at(at(stats, "result"), "step_model_error_p99"));
                ck_assert_msg(p99 > 0 && isfinite(p99), "step_model_error_p99 %g", p99);
                json_object_put(stats);
                close(c.fd);
                close(other.fd);
                daemon_stop(&d);
        }
}
END_TEST

static bool wanted(const char *name) {
        const char *only = getenv("ASYNCLLM_TEST_ONLY");
        if (!only || !*only)
                return true;
        size_t n = strlen(name);
        for (const char *p = only; (p = strstr(p, name)); p += n)
                if ((p == only || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
                        return true;
        return false;
}
#define add_test(tc, t) \
        do { \
                if (wanted(#t)) \
                        tcase_add_test(tc, t); \
        } while (0)

int main(void) {
        Suite *s = suite_create("daemon");
        TCase *tc = tcase_create("real-daemon");
        tcase_set_timeout(tc, 900); /* stretched by CK_TIMEOUT_MULTIPLIER (Makefile.am) */
        add_test(tc, test_streaming);
        add_test(tc, test_many_clients);
        add_test(tc, test_abuse);
        add_test(tc, test_vanished_clients);
        add_test(tc, test_reload_and_limits);
        add_test(tc, test_connection_and_uid_limits);
        add_test(tc, test_slow_client);
        add_test(tc, test_sigterm_under_load);
        add_test(tc, test_engine_death);
        add_test(tc, test_hung_engine);
        add_test(tc, test_engine_ops);
        add_test(tc, test_socket_activation);
        add_test(tc, test_dbus);
        add_test(tc, test_slo_policy);
        if (geteuid() == 0)
                add_test(tc, test_permissions);
        else
                printf("test_permissions needs root (it connects as nobody); not run\n");
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
