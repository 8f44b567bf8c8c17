/* SPDX-License-Identifier: MIT */
#pragma once

/* The asynchronous engine as its host sees it (vLLM's AsyncLLM with its output processor):
 * requests go in as token ids or text; each comes back as a stream whose outputs carry text
 * (incrementally detokenized, cut at stop strings), token ids and logprobs, in the output
 * kind the request asked for. n > 1 fans out into child requests that share the prompt's
 * KV blocks.
 *
 * Everything here runs on the host's thread (the daemon's event loop), never blocks, and is
 * not thread-safe; the engine runs on its own thread behind it. The host polls
 * async_llm_fd() and calls async_llm_dispatch() when it is readable.
 *
 * Each stream has one mailbox. When outputs arrive faster than the consumer takes them they
 * merge: a delta stream's next output holds everything since the previous take, a
 * cumulative one the latest state. So memory stays bounded by the requests themselves,
 * however slow the reader. */

#include <stdbool.h>
#include <stdint.h>

#include <json-c/json.h>

#include "backend.h"
#include "engine-config.h"
#include "engine-thread.h"
#include "error.h"
#include "request-output.h"
#include "sampling-params.h"
#include "tokenizer.h"

struct async_llm;
struct async_stream;

/* The stream's mailbox went from empty to non-empty. May be called from async_llm_dispatch()
 * and from async_llm_abort(); the callee may take, release or abort. */
typedef void (*async_stream_notify)(struct async_stream *s, void *userdata);

/* Control commands answer through this; see engine_reply_fn. */
typedef engine_reply_fn async_llm_reply_fn;

/* config must be finalized (engine_config_finalize); tk and backend outlive the engine, whose
 * block tables index the backend's KV pool as it laid it out (backend->kv). */
int async_llm_new(const struct engine_config *config, const struct backend *backend, const struct tokenizer *tk,
                  struct async_llm **ret, struct error *err);
/* Stops the engine thread and frees everything, streams not yet released included. */
void async_llm_free(struct async_llm *llm);

int async_llm_fd(const struct async_llm *llm);
/* Applies what the engine reported: updates streams, notifies them, runs control replies. */
void async_llm_dispatch(struct async_llm *llm);

/* Whether encode requests can run: the backend gives the final hidden states they pool. */
bool async_llm_can_encode(const struct async_llm *llm);

/* Validates and submits a request. req borrows its arrays (copied here); its id is unique
 * among the requests in flight; arrival_time and owner are set here. A bad request fails
 * here alone, with a message naming the parameter and its allowed range (-EINVAL), or an
 * encode on a backend without hidden states (-EOPNOTSUPP); -EEXIST for an id in flight; -ESHUTDOWN once the engine is dead. On success *ret is the
 * stream, which the caller releases. */
int async_llm_generate(struct async_llm *llm, const struct request_spec *req, async_stream_notify notify,
                       void *userdata, struct async_stream **ret, struct error *err);

/* Ends the request: its final output says "abort" (each completion not already finished),
 * its id is free for reuse at once, and its KV blocks come back in the engine's current
 * step. Unknown or finished ids are ignored: returns false. */
bool async_llm_abort(struct async_llm *llm, const char *request_id);
/* Calls fn with the id of every request in flight, whichever front sent it. */
void async_llm_for_each_request(struct async_llm *llm, void (*fn)(const char *request_id, void *userdata),
                                void *userdata);

/* The merged pending output, or NULL when the mailbox is empty. Free it with
 * request_output_free(). Its finished is true only on the last output of the request. */
struct request_output *async_stream_take(struct async_stream *s);
bool async_stream_has_output(const struct async_stream *s);
/* True once the last output has been taken. */
bool async_stream_done(const struct async_stream *s);
/* The prompt's length in tokens (after tokenization of a text prompt). */
uint32_t async_stream_prompt_tokens(const struct async_stream *s);
/* The consumer is done with it: a request still running is aborted. */
void async_stream_release(struct async_stream *s);

/* Control plane; each answers through fn (which may be NULL). -ENOMEM, -EINVAL. */
int async_llm_pause(struct async_llm *llm, enum pause_mode mode, bool clear_cache, async_llm_reply_fn fn,
                    void *userdata);
int async_llm_resume(struct async_llm *llm, async_llm_reply_fn fn, void *userdata);
int async_llm_sleep(struct async_llm *llm, int level, async_llm_reply_fn fn, void *userdata);
/* tags: enum backend_memory bits; 0 = everything. */
int async_llm_wake_up(struct async_llm *llm, unsigned tags, async_llm_reply_fn fn, void *userdata);
int async_llm_reset_prefix_cache(struct async_llm *llm, bool preempt, async_llm_reply_fn fn, void *userdata);
/* args (may be NULL) is taken over; the result is an array with one entry per worker. */
int async_llm_collective_rpc(struct async_llm *llm, const char *method, struct json_object *args,
                             async_llm_reply_fn fn, void *userdata);

bool async_llm_is_paused(struct async_llm *llm);
bool async_llm_is_sleeping(struct async_llm *llm);

/* 0 when healthy; -ESHUTDOWN when the engine is dead; -ETIMEDOUT when work is pending and
 * no step has completed for stall_timeout seconds. err says which and why. */
int async_llm_check_health(struct async_llm *llm, double stall_timeout, struct error *err);

struct async_llm_stats {
        struct engine_thread_state engine;
        uint32_t n_streams;  /* requests in flight as the frontend sees them */
};

void async_llm_stats(struct async_llm *llm, struct async_llm_stats *ret);
