/* SPDX-License-Identifier: MIT */
#pragma once

/* The daemon's Prometheus metrics, with vLLM's names (asyncllm_ for the slo policy's, which vLLM
 * lacks: an underscore, as Prometheus keeps colons for recording rules): gauges and counters
 * read from the engine's state when rendered, histograms of request latencies and sizes
 * observed by the frontend from each request's timings (engine timestamps, so a slow reader
 * does not skew them), and of the tokens per engine step from the engine's step counters. */

#include <stdint.h>

#include "async-llm.h"
#include "request-output.h"

struct histogram {
        const double *bounds; /* upper bounds, rising */
        uint32_t n_bounds;
        uint64_t counts[32];  /* per bucket, not cumulative; the last is +Inf */
        uint64_t count;
        double sum;
};

struct daemon_metrics {
        struct histogram ttft, itl, e2e, queue, prompt_tokens, generation_tokens, iteration_tokens;
        uint64_t success[FINISH_ERROR + 1]; /* finished requests by reason */
        uint64_t steps_seen, step_tokens_seen; /* the engine's step counters when last observed */
};

void daemon_metrics_init(struct daemon_metrics *m);

/* n_tokens arrived gap seconds after the request's previous token. */
void daemon_metrics_observe_tokens(struct daemon_metrics *m, double gap, uint32_t n_tokens);

/* The engine's steps since the last call, from its counters: each step on its own when called
 * after every step, else each counted at their mean size (the sum and count stay exact). */
void daemon_metrics_observe_steps(struct daemon_metrics *m, const struct engine_stats *e);

/* A request ended; times are monotonic seconds (0 = never happened). */
void daemon_metrics_observe_finished(struct daemon_metrics *m, const struct request_metrics *t,
                                     enum finish_reason reason, uint32_t n_prompt, uint32_t n_generated);

/* The Prometheus text exposition (version 0.0.4) of everything, malloc'ed; NULL when out of
 * memory. */
char *daemon_metrics_render(const struct daemon_metrics *m, const struct async_llm_stats *st, const char *model_name);
