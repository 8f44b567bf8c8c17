/* SPDX-License-Identifier: MIT */
#pragma once

/* libasyncllm-client's insides, shared by its files: the client (asyncllm-client.c), the
 * request builder (client-request.c), the output view (client-output.c) and the error
 * table (client-errors.c). Nothing here is exported (libasyncllm-client.sym). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "asyncllm-client.h"
#include "id-map.h"

/* An id: 1 to this many bytes. */
#define CLIENT_ID_MAX 256
/* Lines the client accepts from the daemon: results and outputs with prompt logprobs of
 * long prompts are big. asyncllm_client_set_max_line() changes it. */
#define CLIENT_DEFAULT_MAX_LINE ((size_t) 64 * 1024 * 1024)
/* JSON nesting accepted from the daemon (collective_rpc results are any JSON). */
#define CLIENT_JSON_MAX_DEPTH 128
#define CLIENT_ERROR_MAX 1024
#define CLIENT_CODE_MAX 64

enum client_state {
        CLIENT_UNCONNECTED,
        CLIENT_HANDSHAKE,   /* waiting for the daemon's hello */
        CLIENT_NEGOTIATING, /* sent our hello, waiting for its answer */
        CLIENT_READY,
        CLIENT_DEAD,        /* the connection failed: callbacks owed, then nothing */
};

enum pending_kind {
        PENDING_GENERATE,
        PENDING_CALL,
};

/* A request or control op in flight. */
struct pending {
        char *id;
        enum pending_kind kind;
        asyncllm_output_fn output_cb; /* PENDING_GENERATE */
        asyncllm_reply_fn reply_cb;   /* PENDING_CALL; may be NULL */
        void *userdata;
        bool abandoned;      /* given up: whatever comes for it is dropped */
        struct pending *prev, *next;
};

struct asyncllm_client {
        enum client_state state;
        int fd;
        size_t max_line;
        uint64_t timeout_usec;
        uint64_t last_activity; /* CLOCK_MONOTONIC usec of the last line from the daemon */

        struct ndjson_reader *reader;
        struct json_tokener *tokener;

        char *out;              /* queued bytes [out_sent, out_len) */
        size_t out_len, out_sent, out_cap;
        size_t max_send_line;   /* the daemon's line limit from its hello; 0 = not said */
        bool write_closed;      /* the daemon stopped reading (EPIPE): nothing more goes out */

        struct id_map by_id;
        struct pending *first, *last;
        size_t n_pending;       /* not abandoned */
        uint64_t next_id;

        unsigned in_callback;   /* callbacks running */
        int dead_error;         /* CLIENT_DEAD: why */
        char dead_message[CLIENT_ERROR_MAX];
        char dead_code[CLIENT_CODE_MAX];
        bool dead_has_code;
        bool dead_reported;     /* the callbacks ran and process() returned the error */

        char *hello_json;
        char *model;
        int protocol;

        char error[CLIENT_ERROR_MAX];
        char error_code[CLIENT_CODE_MAX];
        bool has_error_code;
};

/* A view of one completion. Strings point into the message. */
struct completion_view {
        uint32_t index;
        const char *text;
        size_t text_len;
        int32_t *token_ids; /* (n_token_ids), owned */
        size_t n_token_ids;
        const char *finish_reason;
        const char *stop_reason;
        int64_t stop_token_id;
};

struct asyncllm_output {
        const char *id;
        bool done;
        bool finished;
        bool any_error_finish; /* a completion finished with "error" */
        int error;
        const char *error_code;
        const char *error_message;
        double retry_after;   /* the overloaded error's hint, else -1 */
        const char *json;     /* the line; NULL for a local failure */
        struct completion_view *completions; /* (n_completions), owned */
        size_t n_completions;
        float *embedding; /* an encode request's vector (n_embedding), owned */
        size_t n_embedding;
        int64_t prompt_tokens, completion_tokens;
};

/* asyncllm-client.c */
/* Records the failure (error < 0) as the client's error and returns it. code: the daemon's,
 * or NULL. */
int client_set_error(asyncllm_client *c, int error, const char *code, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
/* Runs the client's loop until done(c, data), or fails after the client's timeout without a
 * word from the daemon, or with the connection's error. */
int client_run_until(asyncllm_client *c, bool (*done)(const asyncllm_client *c, void *data), void *data);
/* A blocking call stopped waiting before its request was done: the request is given up (and
 * a generate request aborted), so that its callback, whose data is on that call's stack,
 * never runs. */
void client_give_up(asyncllm_client *c, const char *id);
int client_submit_generate(asyncllm_client *c, const asyncllm_request *r, asyncllm_output_fn cb, void *userdata,
                           char **ret_id);
int client_submit_call(asyncllm_client *c, const char *op, const char *args_json, asyncllm_reply_fn cb,
                       void *userdata, char **ret_id);
/* {"request": id} as JSON text in *ret (malloc()ed). */
int client_abort_args(asyncllm_client *c, const char *request_id, char **ret);

/* client-output.c */
/* Fills o from an output message ({"id", "outputs": [...], "finished", ...}). Strings stay
 * in msg and line. -EPROTO when "outputs" is not an array of objects, -ENOMEM. */
int output_view_parse(struct asyncllm_output *o, const char *id, struct json_object *msg, const char *line);
/* A failure view: error < 0, code may be NULL; no retry_after. */
void output_view_failure(struct asyncllm_output *o, const char *id, int error, const char *code, const char *message,
                         const char *line);
void output_view_done(struct asyncllm_output *o);

/* client-request.c */
/* The generate message with the id: {"op": "generate", "id": id, ...}, as JSON text in
 * *ret (malloc()ed). -EINVAL without a prompt, -ENOMEM. */
int request_serialize(const asyncllm_request *r, const char *id, char **ret, size_t *ret_len);
/* The id the request carries, or NULL. */
const char *request_id(const asyncllm_request *r);
/* Whether s is a usable id: 1 to CLIENT_ID_MAX bytes of UTF-8. */
bool client_id_valid(const char *s);

/* client-json.c */
/* o's member key when it has that type, else NULL. */
struct json_object *client_json_member(struct json_object *o, const char *key, enum json_type type);
/* A double as JSON: the shortest form that reads back the same. NULL when out of memory. */
struct json_object *client_json_double(double d);
/* JSON text of a value, without pretty-printing or escaping "/", malloc()ed. */
int client_json_serialize(struct json_object *o, char **ret, size_t *ret_len);
/* One JSON value as UTF-8 text, whitespace around it allowed, into *ret (NULL for "null").
 * -EINVAL when it is anything else, -ENOMEM. */
int client_json_parse(const char *json, struct json_object **ret);

/* client-errors.c */
/* The negative errno for a daemon error code (docs/protocol.md); -EPROTO for unknown ones. */
int client_errno_from_code(const char *code);
