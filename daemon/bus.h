/* SPDX-License-Identifier: MIT */
#pragma once

/* The daemon on D-Bus: the name org.asyncllm.Engine1 on the system or user bus, one object
 * /org/asyncllm/Engine1 with the interface org.asyncllm.Engine1: Generate (a file
 * descriptor carrying the request's NDJSON stream; closing it aborts), Complete (the whole
 * text, answered when done), the control plane, CheckHealth and GetStats; properties Model,
 * State, NumRunning, NumWaiting and KvCacheUsage. Permissions come from the sender's
 * credentials, by the same rule as the socket. */

#include "error.h"

struct server;

int bus_start(struct server *s, struct error *err);
/* Emits PropertiesChanged when State changed since the last call. */
void bus_check_state(struct server *s);
void bus_stop(struct server *s);
