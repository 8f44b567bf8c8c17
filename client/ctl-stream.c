/* SPDX-License-Identifier: MIT */
/* One generation request in a poll loop over the connection and the signal descriptor. The
 * request goes out on the daemon's socket (the client's connection) or through D-Bus
 * Generate, whose stream is read with a client of its own. */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl-bus.h"
#include "ctl-signals.h"
#include "ctl-socket.h"
#include "ctl-stream.h"

/* How long an interrupted run waits for the aborted request's final output. */
#define ABORT_WAIT_MSEC 10000

struct run {
        asyncllm_output_fn cb;
        void *userdata;
        bool done;
        bool aborted; /* a completion ended with "abort" */
        int error;    /* the request's failure */
        char code[64];
        bool has_code;
        char message[1024];
        double retry_after; /* with the overloaded code */
};

static int on_output(asyncllm_client *c, const asyncllm_output *o, void *userdata) {
        struct run *run = userdata;
        int r = run->cb ? run->cb(c, o, run->userdata) : 0;
        if (asyncllm_output_error(o) < 0) {
                const char *code = asyncllm_output_error_code(o);
                run->error = asyncllm_output_error(o);
                run->has_code = code != NULL;
                snprintf(run->code, sizeof(run->code), "%s", code ? code : "");
                snprintf(run->message, sizeof(run->message), "%s", asyncllm_output_error_message(o));
                run->retry_after = asyncllm_output_retry_after(o);
        }
        for (size_t i = 0; i < asyncllm_output_n_completions(o); i++) {
                const char *reason = asyncllm_output_finish_reason(o, i);
                if (reason && strcmp(reason, "abort") == 0)
                        run->aborted = true;
        }
        if (asyncllm_output_done(o) || r < 0)
                run->done = true; /* a callback that gives up gets no more outputs */
        return r;
}

/* The request as libasyncllm-client builds it for the socket. */
static int build_request(const struct ctl_generation *g, asyncllm_request **ret) {
        asyncllm_request *r = NULL;
        int q = asyncllm_request_new(&r);
        if (q < 0)
                return q;
        if (g->prompt_token_ids) {
                size_t n = json_object_array_length(g->prompt_token_ids);
                int32_t *ids = calloc(n ? n : 1, sizeof(*ids));
                if (!ids)
                        q = -ENOMEM;
                for (size_t i = 0; ids && i < n; i++)
                        ids[i] = json_object_get_int(json_object_array_get_idx(g->prompt_token_ids, i));
                if (ids)
                        q = asyncllm_request_set_prompt_token_ids(r, ids, n);
                free(ids);
        } else if (g->messages) {
                for (size_t i = 0; q >= 0 && i < json_object_array_length(g->messages); i++) {
                        struct json_object *m = json_object_array_get_idx(g->messages, i), *role, *content;
                        json_object_object_get_ex(m, "role", &role);
                        json_object_object_get_ex(m, "content", &content);
                        q = asyncllm_request_add_message(r, json_object_get_string(role), json_object_get_string(content));
                }
        } else
                q = asyncllm_request_set_prompt(r, g->prompt ? g->prompt : "");
        if (q >= 0 && g->id)
                q = asyncllm_request_set_id(r, g->id);
        if (q >= 0 && g->encode)
                q = asyncllm_request_set_encode(r, g->pooling_type, g->normalize, g->dimensions);
        json_object_object_foreach(g->params, key, value)
                if (q >= 0)
                        q = asyncllm_request_set_param_json(r, key, json_object_to_json_string_ext(value, JSON_C_TO_STRING_PLAIN));
        json_object_object_foreach(g->request_fields, field, field_value)
                if (q >= 0)
                        q = asyncllm_request_set_field_json(r, field,
                                                            json_object_to_json_string_ext(field_value, JSON_C_TO_STRING_PLAIN));
        if (q < 0) {
                asyncllm_request_free(r);
                return q;
        }
        *ret = r;
        return 0;
}

static int submit_on_socket(struct ctl *ctl, const struct ctl_generation *g, struct run *run, char **ret_id) {
        asyncllm_request *request = NULL;
        int status = ctl_socket_connect(ctl);
        if (status != CTL_EXIT_OK)
                return status;
        int r = build_request(g, &request);
        if (r == -EILSEQ)
                return ctl_fail(ctl, CTL_EXIT_USAGE, "the prompt is not UTF-8 text");
        if (r < 0)
                return ctl_fail(ctl, r == -EINVAL ? CTL_EXIT_USAGE : CTL_EXIT_REQUEST, "cannot build the request: %s",
                                strerror(-r));
        r = asyncllm_client_submit_generate(ctl->client, request, on_output, run, ret_id);
        asyncllm_request_free(request);
        if (r == -EINVAL || r == -EEXIST)
                return ctl_fail(ctl, CTL_EXIT_USAGE, "%s", asyncllm_client_error(ctl->client));
        return r < 0 ? ctl_socket_failure(ctl, r) : CTL_EXIT_OK;
}

/* Generate over D-Bus, and a client of its own that reads the request's stream. */
static int submit_on_bus(struct ctl *ctl, const struct ctl_generation *g, struct run *run, asyncllm_client **ret_stream,
                         char **ret_request_id) {
        char *stream_id = NULL;
        asyncllm_client *stream = NULL;
        int fd, r;
        int status = ctl_bus_generate(ctl, g, ret_request_id, &stream_id, &fd);
        if (status != CTL_EXIT_OK)
                return status;
        if ((r = asyncllm_client_new(&stream)) < 0 || (r = asyncllm_client_attach_generate(stream, stream_id, on_output, run)) < 0) {
                free(stream_id);
                asyncllm_client_free(stream);
                close(fd);
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "cannot follow request %s: %s", *ret_request_id, strerror(-r));
        }
        free(stream_id);
        if ((r = asyncllm_client_connect_fd(stream, fd)) < 0) {
                status = ctl_fail(ctl, CTL_EXIT_CONNECT, "cannot read the stream of request %s: %s", *ret_request_id,
                                  asyncllm_client_error(stream));
                asyncllm_client_free(stream);
                return status;
        }
        *ret_stream = stream;
        return CTL_EXIT_OK;
}

static int64_t now_msec(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Asks the daemon to abort the request; its final output then ends the loop. */
static void send_abort(struct ctl *ctl, asyncllm_client *client, const char *socket_id, const char *bus_id) {
        if (bus_id) {
                struct json_object *args = json_object_new_object(), *result = NULL;
                json_object_object_add(args, "request", json_object_new_string(bus_id));
                (void) ctl_bus_call(ctl, "abort", args, &result);
                json_object_put(result);
                json_object_put(args);
        } else
                (void) asyncllm_client_submit_abort(client, socket_id, NULL, NULL, NULL);
}

static int run_status(struct ctl *ctl, const struct run *run, int signo) {
        if (signo)
                return ctl_signals_exit_status(signo);
        if (!run->done)
                return ctl_fail(ctl, CTL_EXIT_CONNECT, "lost the connection to asyncllmd before the request ended");
        if (run->error < 0 && !run->has_code)
                return ctl_fail(ctl, CTL_EXIT_CONNECT, "lost the connection to asyncllmd: %s", run->message);
        if (run->error < 0 && strcmp(run->code, "overloaded") == 0)
                return ctl_fail(ctl, ctl_exit_for_code(run->code), "%s (retry after %g seconds)",
                                run->message, run->retry_after >= 0 ? run->retry_after : 0);
        if (run->error < 0)
                return ctl_fail(ctl, ctl_exit_for_code(run->code), "%s%s", run->message,
                                strcmp(run->code, "engine_dead") == 0 ? " (the daemon's engine has failed; restart asyncllmd)"
                                                                      : "");
        if (run->aborted)
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "the request was aborted in the daemon (by `asyncllmctl abort`, "
                                "a pause in abort mode, or the daemon stopping)");
        return CTL_EXIT_OK;
}

int ctl_generate_run(struct ctl *ctl, const struct ctl_generation *g, asyncllm_output_fn cb, void *userdata) {
        struct run run = { .cb = cb, .userdata = userdata };
        asyncllm_client *stream = NULL;
        char *socket_id = NULL, *bus_id = NULL;
        int status, signo = 0;
        int64_t deadline = -1;

        status = ctl->bus != CTL_BUS_NONE ? submit_on_bus(ctl, g, &run, &stream, &bus_id)
                                          : submit_on_socket(ctl, g, &run, &socket_id);
        if (status != CTL_EXIT_OK)
                return status;
        asyncllm_client *client = stream ? stream : ctl->client;
        while (!run.done) {
                int timeout = -1;
                if (deadline >= 0) {
                        int64_t left = deadline - now_msec();
                        if (left <= 0)
                                break; /* the abort's final output is late: stop waiting */
                        timeout = (int) left;
                }
                struct pollfd p[2] = {
                        { .fd = asyncllm_client_fd(client), .events = (short) asyncllm_client_events(client) },
                        { .fd = ctl->signal_fd, .events = POLLIN },
                };
                int n = poll(p, 2, timeout);
                if (n < 0 && errno != EINTR) {
                        status = ctl_fail(ctl, CTL_EXIT_CONNECT, "cannot wait for asyncllmd: %s", strerror(errno));
                        break;
                }
                if (n > 0 && (p[1].revents & POLLIN)) {
                        int s = ctl_signals_read(ctl->signal_fd);
                        if (s && signo)
                                break; /* a second one: do not wait any longer */
                        if (s) {
                                signo = s;
                                send_abort(ctl, client, socket_id, bus_id);
                                deadline = now_msec() + ABORT_WAIT_MSEC;
                        }
                }
                /* Also after a hang-up or error on the socket: process() reports it. */
                if (n > 0 && p[0].revents && asyncllm_client_process(client) < 0 && !run.done)
                        break;
        }
        if (status == CTL_EXIT_OK)
                status = run_status(ctl, &run, signo);
        /* A request that did not end would call back into this stack frame later: drop its
         * connection (which aborts it in the daemon); the next run connects again. */
        if (!run.done && !stream)
                ctl->client = asyncllm_client_free(ctl->client);
        asyncllm_client_free(stream); /* closing the stream aborts what still runs */
        free(socket_id);
        free(bus_id);
        return status;
}
