/* SPDX-License-Identifier: MIT */
#pragma once

/* POST /v1/embeddings: each input of the body an encode request of its own, all submitted
 * at once so that the engine batches them, and one answer once the last has its vector.
 * The first failure fails the whole answer and aborts the rest; the client going away
 * aborts them all. */

#include <microhttpd.h>

#include "http-exchange.h"

/* The route: parses the body, submits the inputs and waits for them (suspended). */
enum MHD_Result http_embeddings_start(struct http_exchange *ex);
/* The answer of an exchange that started: the list, an error, or another wait. */
enum MHD_Result http_embeddings_answer(struct http_exchange *ex);
/* The exchange ends: requests still running are aborted. */
void http_embeddings_exchange_done(struct http_exchange *ex);
