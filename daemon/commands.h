/* SPDX-License-Identifier: MIT */
#pragma once

/* What the daemon does with each client line: parse it, check who may, and run the op
 * (generate, abort, the control plane, health, stats, model, list, metrics, hello); and how
 * a request's outputs go back to its client. */

#include <stddef.h>

#include "connection.h"
#include "request-output.h"

void commands_handle_line(struct connection *c, const char *line, size_t len);

void commands_send_hello(struct connection *c);
/* An error line; id NULL for a line whose id is unknown. */
void commands_send_error(struct connection *c, const char *id, const char *code, const char *message);
/* One output of a request, with the metrics it carries. */
void commands_send_output(struct daemon_request *r, const struct request_output *o);
/* The request is over (or its connection is): its stream released (aborted if still
 * running), the request forgotten. */
void commands_request_done(struct daemon_request *r);
