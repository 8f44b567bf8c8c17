/* SPDX-License-Identifier: MIT */
#pragma once

/* CORS for the HTTP front, off unless --allowed-origins: answers to an allowed Origin say
 * so, a preflight from one is answered (without the API key, which browsers do not send
 * with it), and any other origin gets no CORS header, so the browser keeps the answer from
 * the page. */

#include <stdbool.h>

#include "http-exchange.h"

/* The request's Origin when CORS is on and that origin may read the answer, else NULL. */
const char *http_cors_allowed_origin(struct http_exchange *ex);
/* Adds the headers an answer to an allowed origin carries; none for the others. */
void http_cors_add_headers(struct http_exchange *ex, struct MHD_Response *resp);
/* Whether the request is a preflight (OPTIONS asking for a method) from an allowed origin. */
bool http_cors_is_preflight(struct http_exchange *ex, const char *method);
/* The answer to a preflight (204, to queue with http_queue_response()), or NULL. */
struct MHD_Response *http_cors_preflight_response(struct http_exchange *ex);
