/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "async-llm.h"
#include "chat-template.h"
#include "http-embeddings.h"
#include "log.h"
#include "metrics.h"
#include "openai-embeddings.h"
#include "server.h"

struct embedding_item {
        struct embedding_batch *batch;
        struct async_stream *stream; /* NULL once released */
        char request_id[64];         /* "http/SERIAL/INDEX": list and abort show it */
        bool finished;
        float *vector;               /* its final output's, once it came */
        uint32_t n, n_prompt;
};

struct embedding_batch {
        struct http_exchange *ex;
        struct openai_embeddings_request req;
        struct embedding_item *items; /* (req.n_inputs) */
        size_t n_submitted, n_finished;
        bool in_flight;               /* counted in the server's http_in_flight */
        struct openai_error failure;  /* status 0: none */
        double retry_after;
        sd_event_source *hangup;
        char answer_id[64];
};

static struct server *server_of(const struct embedding_batch *b) {
        return b->ex->front->server;
}

static void abort_running(struct embedding_batch *b) {
        for (size_t i = 0; i < b->n_submitted; i++)
                if (!b->items[i].finished)
                        async_llm_abort(server_of(b)->model.llm, b->items[i].request_id);
}

/* The first failure is the answer's. */
static void fail(struct embedding_batch *b, const struct request_output *o, size_t index) {
        if (b->failure.status)
                return;
        if (o->error)
                http_output_failure(o, &b->failure, &b->retry_after);
        else
                openai_error_set(&b->failure, 503, "aborted", NULL,
                                 "input[%zu] was aborted (by an abort, a pause in abort mode, or the daemon stopping)",
                                 index);
}

static void on_item_stream(struct async_stream *stream, void *userdata) {
        struct embedding_item *item = userdata;
        struct embedding_batch *b = item->batch;
        struct request_output *o;
        while ((o = async_stream_take(stream))) {
                if (o->error || (o->finished && !o->embedding))
                        fail(b, o, (size_t) (item - b->items));
                if (o->finished && !item->finished) {
                        item->finished = true;
                        b->n_finished++;
                        item->vector = o->embedding;
                        item->n = o->n_embedding;
                        o->embedding = NULL;
                        item->n_prompt = async_stream_prompt_tokens(stream);
                        daemon_metrics_observe_finished(&server_of(b)->metrics, &o->metrics,
                                                        o->n_outputs ? o->outputs[0].finish_reason : FINISH_STOP,
                                                        item->n_prompt, 0);
                }
                request_output_free(o);
        }
        if (b->failure.status)
                abort_running(b);
        if (b->failure.status || b->n_finished == b->req.n_inputs)
                http_exchange_wake(b->ex);
}

/* The client went away: its requests end now, not at their next output. */
static int on_hangup(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        struct embedding_batch *b = userdata;
        (void) fd;
        (void) revents;
        sd_event_source_set_enabled(source, SD_EVENT_OFF);
        log_request(LOG_DEBUG, b->answer_id, "HTTP client went away: %zu embedding requests aborted",
                    b->n_submitted - b->n_finished);
        abort_running(b);
        return 0;
}

/* A submission's refusal as the answer. */
static enum MHD_Result refused(struct http_exchange *ex, int r, size_t index, size_t n, const char *message) {
        struct openai_error e;
        if (r == -EINVAL || r == -EOPNOTSUPP) {
                openai_refused(message, &e);
                if (n > 1)
                        openai_error_name_input(&e, index);
                return http_queue_error(ex, &e, 0);
        }
        return http_reply_error(ex, r == -ESHUTDOWN ? 503 : 500, r == -ESHUTDOWN ? "engine_dead" : "internal_error", NULL,
                                message);
}

/* Submits input i; 0, or the refusal queued as the answer (*answered). */
static int submit(struct embedding_batch *b, size_t i, uint64_t serial, enum MHD_Result *answered) {
        struct server *s = server_of(b);
        struct embedding_item *item = &b->items[i];
        struct generate_message *g = &b->req.inputs[i].generate;
        struct error err = { 0 };
        char *rendered = NULL;
        item->batch = b;
        if (b->req.n_inputs == 1)
                snprintf(item->request_id, sizeof(item->request_id), "http/%" PRIu64, serial);
        else
                snprintf(item->request_id, sizeof(item->request_id), "http/%" PRIu64 "/%zu", serial, i);
        if (g->prompt_kind == PROMPT_MESSAGES && chat_render(s->model.tk, g->messages, g->n_messages, true, &rendered, &err) < 0) {
                *answered = http_reply_error(b->ex, 400, "invalid_request_error", "messages", err.message);
                return -EINVAL;
        }
        struct request_spec spec;
        generate_message_to_spec(g, item->request_id, rendered, &spec);
        b->n_submitted = i + 1; /* its outputs may come from inside the call */
        int r = async_llm_generate(s->model.llm, &spec, on_item_stream, item, &item->stream, &err);
        free(rendered);
        if (r < 0) {
                b->n_submitted = i;
                *answered = refused(b->ex, r, i, b->req.n_inputs, err.message);
        }
        return r;
}

enum MHD_Result http_embeddings_start(struct http_exchange *ex) {
        struct http_front *h = ex->front;
        struct server *s = h->server;
        struct openai_error e;
        enum MHD_Result answered = MHD_NO;

        if (s->shutting_down)
                return http_reply_error(ex, 503, "shutting_down", NULL, "the daemon is stopping and takes no new requests");
        if (!async_llm_can_encode(s->model.llm))
                return http_reply_error(ex, 400, "invalid_request_error", NULL,
                                        "this backend gives no hidden states to pool: embeddings run on the cpu");
        struct embedding_batch *b = calloc(1, sizeof(*b));
        if (!b)
                return MHD_NO;
        b->ex = ex;
        ex->embeddings = b;
        if (openai_embeddings_parse(ex->body ? ex->body : "", ex->body_len, &b->req, &e) < 0)
                return http_queue_error(ex, &e, 0);
        if (b->req.model && strcmp(b->req.model, server_served_name(s)) != 0) {
                openai_error_set(&e, 404, "NotFoundError", "model", "The model `%s` does not exist.", b->req.model);
                return http_queue_error(ex, &e, 0);
        }
        if (!(b->items = calloc(b->req.n_inputs, sizeof(*b->items))))
                return MHD_NO;
        uint64_t serial = ++h->serial;
        snprintf(b->answer_id, sizeof(b->answer_id), "embd-%016" PRIx64 "%08x", serial, (unsigned) getpid());
        for (size_t i = 0; i < b->req.n_inputs; i++)
                if (submit(b, i, serial, &answered) < 0) {
                        abort_running(b); /* the answer is the refusal: the others need not run */
                        return answered;
                }
        b->in_flight = true;
        s->http_in_flight++;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(ex->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci && sd_event_add_io(s->event, &b->hangup, ci->connect_fd, EPOLLRDHUP, on_hangup, b) < 0)
                b->hangup = NULL; /* then the requests run to their end */
        log_request(LOG_DEBUG, b->answer_id, "HTTP embeddings: %zu inputs", b->req.n_inputs);
        return http_embeddings_answer(ex);
}

enum MHD_Result http_embeddings_answer(struct http_exchange *ex) {
        struct embedding_batch *b = ex->embeddings;
        if (b->failure.status)
                return http_queue_error(ex, &b->failure, b->retry_after);
        if (b->n_finished < b->req.n_inputs) {
                ex->suspended = true;
                MHD_suspend_connection(ex->conn);
                return MHD_YES;
        }
        struct openai_embedding *list = calloc(b->req.n_inputs, sizeof(*list));
        if (!list)
                return MHD_NO;
        for (size_t i = 0; i < b->req.n_inputs; i++)
                list[i] = (struct openai_embedding) { b->items[i].vector, b->items[i].n, b->items[i].n_prompt };
        char *body = openai_embeddings_body(&b->req, b->answer_id, server_served_name(ex->front->server),
                                            (int64_t) time(NULL), list);
        free(list);
        return http_queue_body(ex, MHD_HTTP_OK, body, "application/json", 0);
}

void http_embeddings_exchange_done(struct http_exchange *ex) {
        struct embedding_batch *b = ex->embeddings;
        if (!b)
                return;
        struct server *s = server_of(b);
        sd_event_source_disable_unref(b->hangup);
        for (size_t i = 0; i < b->n_submitted; i++) {
                struct embedding_item *item = &b->items[i];
                if (!item->finished) { /* ended by its client leaving, a failure, or the daemon stopping */
                        const struct request_metrics never = { 0 };
                        daemon_metrics_observe_finished(&s->metrics, &never, FINISH_ABORT, 0, 0);
                }
                if (item->stream)
                        async_stream_release(item->stream); /* aborts it if it still runs */
                free(item->vector);
        }
        free(b->items);
        openai_embeddings_request_free(&b->req);
        bool was_in_flight = b->in_flight;
        free(b);
        ex->embeddings = NULL;
        if (was_in_flight) {
                s->http_in_flight--;
                server_request_ended(s);
        }
}
