/* SPDX-License-Identifier: MIT */
#pragma once

/* The methods collective_rpc can run on the engine's workers (vLLM's worker methods, called
 * by name with JSON arguments). Runs on the engine thread, between steps. */

#include <json-c/json.h>

#include "backend.h"
#include "engine-core.h"
#include "error.h"

struct worker_rpc_context {
        struct engine_core *core;
        const struct backend *backend;
};

/* Runs method on every worker; *ret is a new JSON array with one result per worker.
 * -ENOENT naming the known methods for an unknown one; -EINVAL for bad arguments; a
 * method's own failure otherwise. */
int worker_rpc_call(const struct worker_rpc_context *ctx, const char *method, struct json_object *args,
                    struct json_object **ret, struct error *err);

/* The registered method names, comma-separated, for messages and introspection. */
const char *worker_rpc_methods(void);
