/* SPDX-License-Identifier: MIT */
#pragma once

/* The daemon's Prometheus metrics, with vLLM's names (asyncllm: for the slo policy's, which vLLM
 * lacks): gauges and counters read from the
 * engine's state when rendered, histograms of request latencies and sizes observed by the
 * frontend from each request's timings (engine timestamps, so a slow reader does not skew
 * them). */

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
        struct histogram ttft, itl, e2e, queue, prompt_tokens, generation_tokens;
        uint64_t success[FINISH_ERROR + 1]; /* finished requests by reason */
};

void daemon_metrics_init(struct daemon_metrics *m);

/* n_tokens arrived gap seconds after the request's previous token. */
void daemon_metrics_observe_tokens(struct daemon_metrics *m, double gap, uint32_t n_tokens);

/* A request ended; times are monotonic seconds (0 = never happened). */
void daemon_metrics_observe_finished(struct daemon_metrics *m, const struct request_metrics *t,
                                     enum finish_reason reason, uint32_t n_prompt, uint32_t n_generated);

/* The Prometheus text exposition (version 0.0.4) of everything, malloc'ed; NULL when out of
 * memory. */
char *daemon_metrics_render(const struct daemon_metrics *m, const struct async_llm_stats *st, const char *model_name);
