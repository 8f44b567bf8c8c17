/* SPDX-License-Identifier: MIT */
#pragma once

/* What the HTTP front's files share: the front, its connections and its exchanges (one HTTP
 * request and its answer), and how an answer is queued (http-exchange.c). Internal to
 * daemon/http-*.c. */

#include <stdbool.h>
#include <stdint.h>

#include <json-c/json.h>
#include <microhttpd.h>
#include <systemd/sd-event.h>

#include "openai.h"

struct server;
struct control_call;
struct embedding_batch;

struct http_front {
        struct server *server;
        char *api_key;   /* NULL: none (then loopback only) */
        char *admin_key; /* NULL: no admin routes (they answer 404) */
        struct MHD_Daemon *mhd;
        int listen_fd;
        sd_event_source *io, *timer;
        /* runs libmicrohttpd once the loop is back: a resumed connection waits for its next
         * run, which nothing else may bring soon */
        sd_event_source *kick;
        uint64_t serial;
        struct http_exchange *first; /* every request being answered */
        struct http_peer *peers;     /* every open connection */
        sd_event_source *sweep;      /* closes peers too slow to send a request */
        bool peer_closed;            /* in this run of libmicrohttpd */
};

/* One connection: how long it has been sending its current request. libmicrohttpd's own
 * timeout is for idle time, so a client that sends a byte a second would hold a connection
 * for ever; this cuts a request that is not all in after client-timeout seconds. */
struct http_peer {
        struct MHD_Connection *conn;
        uint64_t since_usec; /* the connection's start, or its last answer's end */
        bool answering;      /* its request is all in: the wait is the daemon's */
        bool cut;
        struct http_peer *prev, *next;
};

/* One HTTP request and its answer. */
struct http_exchange {
        struct http_front *front;
        struct MHD_Connection *conn;
        char *body;
        size_t body_len, body_cap;
        bool body_too_large;
        bool submitted, suspended, finished;
        bool responded; /* a stream's status and headers are queued */

        struct openai_request req;
        struct async_stream *stream;
        sd_event_source *hangup; /* the client's socket, watched for its going away */
        char request_id[48];
        char answer_id[64];
        char *prompt; /* echo's text */
        struct openai_answer answer;
        struct openai_choice *choices; /* non-streamed: what the completions collected */
        uint32_t n_generated;
        double last_token_time; /* for the inter-token latency metric */
        bool first_event;
        struct openai_error failure; /* status 0: none */
        double retry_after;

        char *events; /* a stream's bytes not yet sent: [sent, len) */
        size_t events_len, events_cap, events_sent;

        /* an admin route's op: its answer is the engine's reply */
        bool controlling;
        struct control_call *call;  /* the op, until the engine answers it */
        sd_event_source *deadline;  /* collective_rpc's timeout */
        struct json_object *reply;  /* the answer's body, once the engine answered */

        /* /v1/embeddings: its inputs' requests (http-embeddings.c) */
        struct embedding_batch *embeddings;
        struct http_exchange *prev, *next;
};

/* Queues the answer, with the CORS headers an allowed origin gets: every answer goes out
 * here. */
enum MHD_Result http_queue_response(struct http_exchange *ex, unsigned status, struct MHD_Response *resp);
/* Queues body (taken over; NULL: out of memory) as the answer, of Content-Type type, with
 * Retry-After when retry_after > 0. */
enum MHD_Result http_queue_body(struct http_exchange *ex, unsigned status, char *body, const char *type,
                                double retry_after);
/* Queues o (taken over) as a JSON body. */
enum MHD_Result http_queue_json(struct http_exchange *ex, unsigned status, struct json_object *o);
/* Queues OpenAI's error object for e, with Retry-After when retry_after > 0. */
enum MHD_Result http_queue_error(struct http_exchange *ex, const struct openai_error *e, double retry_after);
enum MHD_Result http_reply_error(struct http_exchange *ex, int status, const char *type, const char *param,
                                 const char *message);
/* A failed output's error (o->error): the status and OpenAI's type for it; *retry_after
 * gets the overloaded error's hint. */
void http_output_failure(const struct request_output *o, struct openai_error *e, double *retry_after);
/* Resumes a suspended exchange, whose answer is then due. */
void http_exchange_wake(struct http_exchange *ex);
