/* SPDX-License-Identifier: MIT */
#pragma once

/* What the daemon does with each client line: parse it, check who may, and run the op
 * (generate, abort, the control plane, health, stats, model, list, metrics, the tokenizer,
 * the drain, hello); and how
 * a request's outputs go back to its client. */

#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "async-llm.h"
#include "connection.h"
#include "request-output.h"

struct client_message;

/* The connections' protocol: these functions, for the transport to call. */
extern const struct connection_protocol commands_protocol;

void commands_handle_line(struct connection *c, const char *line, size_t len);

int commands_send_hello(struct connection *c);
/* An error line; id NULL for a line whose id is unknown. */
void commands_send_error(struct connection *c, const char *id, const char *code, const char *message);
/* One output of a request, with the metrics it carries. */
int commands_send_output(struct daemon_request *r, const struct request_output *o);
/* The request is over (or its connection is): its stream released (aborted if still
 * running), the request forgotten. */
void commands_request_done(struct daemon_request *r);

/* Starts an engine control op (pause, resume, sleep, wake_up, reset_prefix_cache or
 * collective_rpc): the socket's admin ops and HTTP's are this one call. fn answers it on the
 * loop's thread once the engine has, never from inside this call; when this fails (a
 * negative errno: -ENOMEM, -EINVAL, -ESHUTDOWN) fn is not called. */
int commands_control(struct server *s, const struct client_message *m, async_llm_reply_fn fn, void *userdata);

/* The stats op's result, which D-Bus GetStats sends as well: one list of typed entries, so
 * that both APIs give the same names and values. */
struct stats_entry {
        const char *name;
        char type; /* as D-Bus types it: 's', 'u' (uint32_t), 't' (uint64_t) or 'd' */
        union {
                const char *s; /* static */
                uint32_t u;
                uint64_t t;
                double d;
        };
};
#define COMMANDS_STATS_MAX 32
/* Fills ret and returns the number of entries. */
size_t commands_stats(struct server *s, struct stats_entry ret[static COMMANDS_STATS_MAX]);
/* The engine's state as the stats and D-Bus's State say it: running, paused, sleeping or dead. */
const char *commands_engine_state(const struct async_llm_stats *st);
/* The tokenize op's result (HTTP /tokenize's too): {"count", "max_model_len", "tokens"}. */
struct json_object *commands_tokenize_json(struct server *s, const int32_t *ids, size_t n);
/* The metrics op's text (GetMetrics's too), malloc()ed; NULL when out of memory. */
char *commands_metrics_text(struct server *s);
