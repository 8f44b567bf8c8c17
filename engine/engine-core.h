/* SPDX-License-Identifier: MIT */
#pragma once

/* The engine core (vLLM's EngineCore): requests in, one step at a time: schedule, run the
 * batch on the backend, sample, update, report. Single-threaded: the engine thread owns it.
 * Outputs of a step stay valid, with their requests, until engine_core_clear_outputs(). */

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "engine-config.h"
#include "request.h"
#include "step-time-model.h"

struct engine_core;

struct engine_output {
        struct request *req;
        bool new_token; /* the request's last output token was produced by this step */
        bool finished;  /* the request's last output; req->finish_reason says why */
};

struct engine_stats {
        uint32_t n_running;
        uint32_t n_waiting;
        uint32_t kv_blocks_total;
        uint32_t kv_blocks_used;
        uint32_t kv_blocks_cached; /* holding a cached prefix, used or free */
        uint64_t prefix_query_tokens;
        uint64_t prefix_hit_tokens;
        uint64_t prompt_tokens;     /* prompt tokens computed (prefix-cache hits excluded) */
        uint64_t generation_tokens; /* tokens sampled */
        uint64_t preemptions;
        uint64_t steps;
        uint64_t scheduled_tokens;  /* summed over steps: tokens per step = scheduled_tokens / steps */
        uint64_t finished[FINISH_ERROR + 1]; /* by finish reason */
        /* slo policy: admission control, and the step-time model's relative error
         * |predicted - measured| / measured over its recent steps (0 before any). */
        uint64_t slo_rejected;
        uint64_t slo_demoted;
        uint64_t step_model_samples;
        double step_model_error_p50;
        double step_model_error_p99;
        struct decode_calibration decode_calibration; /* timed at start (slo policy); n = 0 otherwise */
};

/* Called after the batch ran and before its results are recorded: the place to apply
 * aborts that arrived during the step, so those requests end "abort". */
typedef void (*engine_core_hook)(struct engine_core *ec, void *userdata);

/* eog_ids (n_eog_ids, copied) are the model's end-of-generation tokens (tokenizer_eog_ids()):
 * a request stops at any of them, finish_reason "stop" with no stop_reason, unless
 * ignore_eos; min_tokens masks them. -EINVAL for an id outside the vocabulary. */
int engine_core_new(const struct engine_config *config, const struct backend *backend, uint32_t n_vocab,
                    const int32_t *eog_ids, size_t n_eog_ids, struct engine_core **ret, struct error *err);
void engine_core_free(struct engine_core *ec);

void engine_core_set_hook(struct engine_core *ec, engine_core_hook hook, void *userdata);

/* Queues a request. The spec has passed request_spec_validate() and owns its arrays
 * (request_spec_own()); it is taken over, even on failure (*spec is left empty). -EEXIST
 * for an id in flight, -ENOMEM, -ESHUTDOWN once dead; -EAGAIN when the slo policy refuses
 * a latency-sensitive request whose SLO it cannot meet now, with *retry_after (may be NULL)
 * set to the seconds after which a retry may succeed. */
int engine_core_add_request(struct engine_core *ec, struct request_spec *spec, double *retry_after,
                            struct error *err);

/* Finishes the request with "abort" and frees its blocks now. Unknown or finished ids are
 * ignored (false). */
bool engine_core_abort(struct engine_core *ec, const char *id);

/* Aborts every unfinished request. */
void engine_core_abort_all(struct engine_core *ec);

bool engine_core_has_work(const struct engine_core *ec);

/* One step. A backend failure kills the engine: every request ends "error", the call
 * returns the failure, and later calls return -ESHUTDOWN. */
int engine_core_step(struct engine_core *ec, struct error *err);

uint32_t engine_core_block_size(const struct engine_core *ec);

bool engine_core_is_dead(const struct engine_core *ec);

/* The outputs gathered since the last clear (steps and aborts), in order. */
const struct engine_output *engine_core_outputs(const struct engine_core *ec, uint32_t *n);

/* Drops the gathered outputs and frees the finished requests among them. */
void engine_core_clear_outputs(struct engine_core *ec);

void engine_core_stats(const struct engine_core *ec, struct engine_stats *ret);

/* Forgets every cached prefix: -EBUSY while a request holds blocks, unless
 * preempt_running first sends every running request back to waiting (to be recomputed). */
int engine_core_reset_prefix_cache(struct engine_core *ec, bool preempt_running);

/* Sends every running request back to waiting with its blocks freed: the requests resume
 * by recomputation, with exactly the output they would have had. */
void engine_core_preempt_all(struct engine_core *ec);
