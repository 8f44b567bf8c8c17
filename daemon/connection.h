/* SPDX-License-Identifier: MIT */
#pragma once

/* One client on the socket: NDJSON lines in, each answered or streamed back; its requests
 * in flight; its credentials; its output queue. A client that stops reading has its
 * requests' outputs merged in their mailboxes (nothing more is queued while the queue is
 * above its high-water mark) and is disconnected after client-timeout seconds without
 * progress. Closing the connection aborts its requests. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "async-llm.h"
#include "error.h"
#include "id-map.h"

struct server;
struct connection;
struct daemon_request;
struct request_output;

/* The protocol spoken over a connection (commands.c's commands_protocol, which drives the
 * connections): the transport calls up through this table, so that it never calls into the
 * layer above it. */
struct connection_protocol {
        /* 0, or -ENOMEM when the line could not be made: the connection is then closed */
        int (*send_hello)(struct connection *c);
        void (*handle_line)(struct connection *c, const char *line, size_t len);
        /* id NULL for a line whose id is unknown */
        void (*send_error)(struct connection *c, const char *id, const char *code, const char *message);
        /* 0, or -ENOMEM when it could not: it sent the request's error instead, and the request
         * must end */
        int (*send_output)(struct daemon_request *r, const struct request_output *o);
        /* the request is over, or its connection is */
        void (*request_done)(struct daemon_request *r);
};

/* One generate request of a connection. */
struct daemon_request {
        struct connection *conn;
        char *client_id;      /* the client's id, unique on its connection */
        char *daemon_id;      /* "<connection serial>/<client id>": unique in the daemon, the engine's request id */
        struct async_stream *stream;
        uint32_t n_prompt;
        uint32_t n_generated;   /* summed over the completions, for usage */
        int32_t logprobs, prompt_logprobs; /* as asked: how many top entries to write */
        bool delta;             /* output kind delta: each output holds only new tokens */
        bool encode;            /* its output is a pooled vector */
        bool finished;          /* its last output went out */
        double last_token_time; /* for the inter-token latency metric */
        struct daemon_request *prev, *next;
};

/* In-flight requests of one client uid, for the per-uid limit. */
struct uid_count {
        char *key; /* the uid in decimal */
        uint32_t n;
};

struct connection {
        struct server *server;
        uint64_t serial;
        int fd;
        sd_event_source *io;
        sd_event_source *stall_timer;
        uid_t uid;
        pid_t pid;
        bool may_generate;
        bool is_admin;

        struct ndjson_reader *reader;
        char *out;         /* queued output bytes [out_sent, out_len) */
        size_t out_len, out_cap, out_sent;
        bool closing;      /* finish the requests, flush, then close */
        bool read_done;    /* the client shut its sending side */
        sd_event_source *close_later;
        unsigned refs;     /* the open connection, plus one per control reply still due */
        unsigned pending_replies;
        bool closed;

        /* A connection without a socket (D-Bus Complete): what it would send collects in out,
         * and sink_closed reads it when the connection closes. */
        void (*sink_closed)(struct connection *c, void *userdata);
        void *sink_userdata;

        struct id_map requests; /* by client id */
        char last_error_code[32]; /* of the last error line sent, for D-Bus callers */
        char last_error_message[ERROR_MESSAGE_MAX];
        struct daemon_request *first_request;
        struct connection *prev, *next;
};

int connection_new(struct server *s, int fd, struct error *err);
/* A connection that only carries output (a stream handed out over D-Bus), with the
 * credentials of creds (uid, pid, permissions); it closes once its requests are done. */
int connection_new_stream(struct server *s, int fd, const struct connection *creds, struct connection **ret,
                          struct error *err);

/* A connection with no socket, with the credentials of creds: its output collects in c->out
 * and closed(c, userdata) gets it when it closes, once its requests are done (or aborted). */
int connection_new_sink(struct server *s, const struct connection *creds,
                        void (*closed)(struct connection *c, void *userdata), void *userdata, struct connection **ret,
                        struct error *err);

struct daemon_settings;
/* Root and the daemon's own user may do everything; otherwise the admin group may control
 * the engine and generate, the service group may generate and read. */
void permissions_for(const struct daemon_settings *st, uid_t uid, gid_t gid, const gid_t *groups, int n,
                     bool *ret_may_generate, bool *ret_is_admin);
/* Aborts the connection's requests and closes it; freed when the last reference goes. */
void connection_close(struct connection *c);
void connection_close_later(struct connection *c);
/* Sends a request's pending outputs while the output queue has room. */
void connection_pump_request(struct daemon_request *r);
/* Sends one error line to a connection the daemon will not serve, and closes it. */
void connection_refuse(int fd, const char *code, const char *message);

/* Queues a line (ending in "\n") for the client. */
int connection_send(struct connection *c, const char *line, size_t len);
void connection_unref(struct connection *c);

void connections_abort_all_requests(struct server *s);
/* Sends every client a final error line and closes the connections once flushed. */
void connections_flush_and_close_all(struct server *s, const char *code, const char *message);
void connections_free_all(struct server *s);
