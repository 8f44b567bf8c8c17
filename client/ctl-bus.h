/* SPDX-License-Identifier: MIT */
#pragma once

/* The same commands over D-Bus (--bus): the service org.asyncllm.Engine1. Results come back
 * in the socket protocol's JSON shapes, and errors with its exit statuses, so that the
 * commands do not care which way they went. */

#include <json-c/json.h>

#include "ctl-generation.h"
#include "ctl.h"

/* Runs a socket protocol op (pause, stats, list, ...) as the matching method; args: the
 * op's fields, or NULL. *ret_result gets the result as the socket gives it. Returns an exit
 * status, the failure printed. */
int ctl_bus_call(struct ctl *ctl, const char *op, struct json_object *args, struct json_object **ret_result);

/* Starts a generation with Generate: *ret_request_id gets the daemon-wide id (for Abort),
 * *ret_stream_id the id its stream's lines carry, *ret_fd the stream. Returns an exit
 * status, the failure printed. */
int ctl_bus_generate(struct ctl *ctl, const struct ctl_generation *g, char **ret_request_id, char **ret_stream_id,
                     int *ret_fd);

/* Runs an encode request (g->encode) with Encode: *ret_result gets {"data": [...],
 * "prompt_tokens": N}. Returns an exit status, the failure printed. */
int ctl_bus_encode(struct ctl *ctl, const struct ctl_generation *g, struct json_object **ret_result);
