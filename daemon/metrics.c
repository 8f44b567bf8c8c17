/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

/* Bucket bounds as vLLM exports them, so that dashboards built for vLLM read these. */
static const double ttft_bounds[] = { 0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                                      2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0 };
static const double itl_bounds[] = { 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
                                     2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0 };
static const double latency_bounds[] = { 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                                         40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0 };
static const double token_bounds[] = { 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000 };
static const double step_token_bounds[] = { 1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384 };

#define BOUNDS(b) b, sizeof(b) / sizeof(*b)

static void histogram_init(struct histogram *h, const double *bounds, uint32_t n) {
        *h = (struct histogram) { .bounds = bounds, .n_bounds = n };
}

/* times observations of total / times each; the sum takes total itself, so that it stays exact. */
static void histogram_observe_many(struct histogram *h, double total, uint64_t times) {
        double v = total / (double) times;
        uint32_t i = 0;
        while (i < h->n_bounds && v > h->bounds[i])
                i++;
        h->counts[i] += times;
        h->count += times;
        h->sum += total;
}

static void histogram_observe(struct histogram *h, double v) {
        histogram_observe_many(h, v, 1);
}

void daemon_metrics_init(struct daemon_metrics *m) {
        memset(m, 0, sizeof(*m));
        histogram_init(&m->ttft, BOUNDS(ttft_bounds));
        histogram_init(&m->itl, BOUNDS(itl_bounds));
        histogram_init(&m->e2e, BOUNDS(latency_bounds));
        histogram_init(&m->queue, BOUNDS(latency_bounds));
        histogram_init(&m->prompt_tokens, BOUNDS(token_bounds));
        histogram_init(&m->generation_tokens, BOUNDS(token_bounds));
        histogram_init(&m->iteration_tokens, BOUNDS(step_token_bounds));
}

void daemon_metrics_observe_tokens(struct daemon_metrics *m, double gap, uint32_t n_tokens) {
        if (n_tokens > 0 && gap >= 0)
                histogram_observe_many(&m->itl, gap, n_tokens);
}

void daemon_metrics_observe_steps(struct daemon_metrics *m, const struct engine_stats *e) {
        if (e->steps <= m->steps_seen)
                return;
        histogram_observe_many(&m->iteration_tokens, (double) (e->scheduled_tokens - m->step_tokens_seen),
                               e->steps - m->steps_seen);
        m->steps_seen = e->steps;
        m->step_tokens_seen = e->scheduled_tokens;
}

void daemon_metrics_observe_finished(struct daemon_metrics *m, const struct request_metrics *t,
                                     enum finish_reason reason, uint32_t n_prompt, uint32_t n_generated) {
        if (reason >= FINISH_STOP && reason <= FINISH_ERROR)
                m->success[reason]++;
        if (t->first_token_time > 0)
                histogram_observe(&m->ttft, t->first_token_time - t->arrival_time);
        if (t->scheduled_time > 0)
                histogram_observe(&m->queue, t->scheduled_time - t->arrival_time);
        if (t->finished_time > 0)
                histogram_observe(&m->e2e, t->finished_time - t->arrival_time);
        histogram_observe(&m->prompt_tokens, n_prompt);
        histogram_observe(&m->generation_tokens, n_generated);
}

static void header(FILE *f, const char *name, const char *type, const char *help) {
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample(FILE *f, const char *name, const char *type, const char *help, const char *labels, double v) {
        header(f, name, type, help);
        fprintf(f, "%s{%s} %.17g\n", name, labels, v);
}

/* A bucket's bound as Python's prometheus_client writes it, as vLLM's are: the shortest text
 * that reads back the same, integers with ".0" ("0.005", "1.0", not "0.0050000000000000001" or
 * "1"), so that a query naming one of vLLM's buckets finds ours. */
static void format_bound(char *out, size_t size, double v) {
        if (v < 1e15 && v == (double) (int64_t) v) {
                snprintf(out, size, "%.1f", v);
                return;
        }
        for (int precision = 1; precision <= 17; precision++) {
                snprintf(out, size, "%.*g", precision, v);
                if (strtod(out, NULL) == v)
                        return;
        }
}

static void histogram_render(FILE *f, const struct histogram *h, const char *name, const char *help,
                             const char *labels) {
        uint64_t cumulative = 0;
        char bound[32];
        header(f, name, "histogram", help);
        for (uint32_t i = 0; i < h->n_bounds; i++) {
                cumulative += h->counts[i];
                format_bound(bound, sizeof(bound), h->bounds[i]);
                fprintf(f, "%s_bucket{%s,le=\"%s\"} %llu\n", name, labels, bound, (unsigned long long) cumulative);
        }
        fprintf(f, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels, (unsigned long long) h->count);
        fprintf(f, "%s_sum{%s} %.17g\n", name, labels, h->sum);
        fprintf(f, "%s_count{%s} %llu\n", name, labels, (unsigned long long) h->count);
}

/* Label values escape backslash, quote and newline. */
static void escape_label(char *out, size_t size, const char *in) {
        size_t n = 0;
        for (; *in && n + 3 < size; in++) {
                if (*in == '\\' || *in == '"' || *in == '\n') {
                        out[n++] = '\\';
                        out[n++] = *in == '\n' ? 'n' : *in;
                } else
                        out[n++] = *in;
        }
        out[n] = 0;
}

char *daemon_metrics_render(const struct daemon_metrics *m, const struct async_llm_stats *st, const char *model_name) {
        const struct engine_stats *e = &st->engine.stats;
        char *text = NULL, name[256], labels[300];
        size_t size = 0;
        FILE *f = open_memstream(&text, &size);
        if (!f)
                return NULL;
        escape_label(name, sizeof(name), model_name);
        snprintf(labels, sizeof(labels), "model_name=\"%s\"", name);

        sample(f, "vllm:num_requests_running", "gauge", "Requests the engine is running now.", labels, e->n_running);
        sample(f, "vllm:num_requests_waiting", "gauge", "Requests queued and not yet running.", labels,
               e->n_waiting + st->engine.n_deferred);
        sample(f, "vllm:kv_cache_usage_perc", "gauge", "Fraction of KV-cache blocks in use (0 to 1).", labels,
               e->kv_blocks_total ? (double) e->kv_blocks_used / e->kv_blocks_total : 0.0);
        sample(f, "vllm:prompt_tokens_total", "counter", "Prompt tokens computed (prefix-cache hits excluded).", labels, (double) e->prompt_tokens);
        sample(f, "vllm:generation_tokens_total", "counter", "Tokens sampled.", labels,
               (double) e->generation_tokens);
        sample(f, "vllm:num_preemptions_total", "counter", "Running requests sent back to waiting for lack of KV blocks or seats.", labels,
               (double) e->preemptions);
        sample(f, "vllm:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
               labels, (double) e->prefix_query_tokens);
        sample(f, "vllm:prefix_cache_hits_total", "counter", "Prompt tokens served from the prefix cache.",
               labels, (double) e->prefix_hit_tokens);

        sample(f, "asyncllm_slo_rejected_total", "counter",
               "Latency-sensitive requests the slo policy refused as overloaded (slo-admission reject).", labels,
               (double) e->slo_rejected);
        sample(f, "asyncllm_slo_demoted_total", "counter",
               "Latency-sensitive requests the slo policy served as best-effort (slo-admission demote).", labels,
               (double) e->slo_demoted);
        /* a summary: quantiles over a window of recent observations are what that type means */
        header(f, "asyncllm_step_model_error", "summary",
               "Relative error of the slo policy's step-time model over its recent steps, by quantile (0 before any).");
        fprintf(f, "asyncllm_step_model_error{%s,quantile=\"0.5\"} %.17g\n", labels, e->step_model_error_p50);
        fprintf(f, "asyncllm_step_model_error{%s,quantile=\"0.99\"} %.17g\n", labels, e->step_model_error_p99);

        header(f, "vllm:request_success_total", "counter", "Finished requests, by how they finished.");
        for (int r = FINISH_STOP; r <= FINISH_ERROR; r++)
                fprintf(f, "vllm:request_success_total{%s,finished_reason=\"%s\"} %llu\n", labels,
                        finish_reason_name((enum finish_reason) r), (unsigned long long) m->success[r]);

        histogram_render(f, &m->ttft, "vllm:time_to_first_token_seconds", "Seconds from arrival to the first token.", labels);
        histogram_render(f, &m->itl, "vllm:inter_token_latency_seconds", "Seconds between consecutive tokens of a request.", labels);
        histogram_render(f, &m->e2e, "vllm:e2e_request_latency_seconds", "Seconds from arrival to the end of a request.",
                         labels);
        histogram_render(f, &m->queue, "vllm:request_queue_time_seconds",
                         "Seconds from arrival to first being scheduled.", labels);
        histogram_render(f, &m->prompt_tokens, "vllm:request_prompt_tokens", "Prompt length of finished requests, in tokens.", labels);
        histogram_render(f, &m->generation_tokens, "vllm:request_generation_tokens",
                         "Output length of finished requests, in tokens.", labels);
        histogram_render(f, &m->iteration_tokens, "vllm:iteration_tokens_total", "Tokens scheduled per engine step.",
                         labels);
        if (fclose(f) != 0) {
                free(text);
                return NULL;
        }
        return text;
}
