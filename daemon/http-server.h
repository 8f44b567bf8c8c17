/* SPDX-License-Identifier: MIT */
#pragma once

/* The HTTP front: vLLM's OpenAI-compatible routes (/v1/completions, /v1/chat/completions,
 * /v1/models, /tokenize, /detokenize, /health, /version, /metrics) on a TCP socket, served
 * by libmicrohttpd from the daemon's sd-event loop (its epoll fd is one of the loop's
 * sources; no thread of its own). A request runs as a socket client's does, through the
 * same AsyncLLM; a stream is Server-Sent Events. A client that goes away has its request
 * aborted at once. With --enable-admin-http, vLLM's dev-mode admin routes (/pause, /sleep,
 * ...) run the socket's admin ops for holders of the admin key; with --allowed-origins,
 * answers carry CORS headers for those origins. */

#include "error.h"

struct server;
struct http_front;

/* Listens on settings' host and port (none when neither is set: *ret NULL). */
int http_front_start(struct server *s, struct http_front **ret, struct error *err);
/* Ends every request in flight (the daemon's stop ran out of time): each answers "abort". */
void http_front_abort_all(struct http_front *h);
/* Stops listening; requests in flight are aborted and their connections closed. */
void http_front_free(struct http_front *h);
