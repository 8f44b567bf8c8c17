/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "decode-calibration.h"
#include "engine-core.h"
#include "kv-blocks.h"
#include "id-map.h"
#include "profiler.h"
#include "scheduler.h"
#include "step-trace.h"

struct engine_core {
        struct engine_config config;
        struct backend backend;
        uint32_t n_vocab;
        int32_t *eog_ids; /* (n_eog_ids) where generation ends */
        size_t n_eog_ids;
        struct kv_blocks *kv;
        struct scheduler sched;
        struct id_map requests; /* every unfinished request */
        uint64_t next_arrival;
        bool dead;
        engine_core_hook hook;
        void *hook_userdata;

        /* The batch handed to the backend; sized for max_num_batched_tokens tokens. */
        int32_t *batch_tokens, *batch_positions, *batch_seq_ids, *batch_outputs;
        struct batch_seq *batch_seqs; /* (max_num_seqs) */
        int32_t *logits_row;          /* (max_num_seqs) per plan entry, -1 without output */
        /* (max_num_seqs) per plan entry: the rows of prompt positions whose logits rate the
         * next prompt token (prompt_logprobs), and the first such position */
        uint32_t *prompt_rows_first, *prompt_rows_count, *prompt_rows_pos;
        struct scheduled_chunk *plan_copy; /* (max_num_seqs) the step's plan, kept across the hook */
        /* encode: the tokens whose final hidden states the step pools, and per plan entry the
         * first of its rows and how many; hidden holds them, allocated with the first encode */
        int32_t *batch_hidden;
        uint32_t *hidden_first, *hidden_count;
        float *hidden;
        float *logits;                /* the step's rows of n_vocab, the backend's (backend.h) */

        struct engine_output *outputs;
        uint32_t n_outputs, cap_outputs;

        uint64_t prompt_tokens, generation_tokens, steps, scheduled_tokens;
        uint64_t finished[FINISH_ERROR + 1];
        struct step_trace *step_trace; /* NULL unless ASYNCLLM_STEP_TRACE names a file */
};

/* Times steps of short decodes alone for the slo policy's admission (decode-calibration.h). */
static int calibrate_decodes(struct engine_core *ec, struct error *err) {
        struct decode_calibration calibration;
        int r = decode_calibration_run(&ec->backend, ec->kv, ec->config.max_num_seqs, ec->config.max_num_batched_tokens,
                                       ec->config.max_model_len, ec->n_vocab, &calibration, err);
        if (r < 0)
                return r;
        step_time_model_set_calibration(&ec->sched.model, &calibration);
        return 0;
}

int engine_core_new(const struct engine_config *config, const struct backend *backend, uint32_t n_vocab,
                    const int32_t *eog_ids, size_t n_eog_ids, struct engine_core **ret, struct error *err) {
        for (size_t i = 0; i < n_eog_ids; i++)
                if (eog_ids[i] < 0 || (uint32_t) eog_ids[i] >= n_vocab)
                        return error_set(err, EINVAL, "end-of-generation token %d is outside the vocabulary of %u tokens",
                                         eog_ids[i], n_vocab);
        uint32_t n_kv_blocks = backend->kv.n_blocks;
        if (backend->kv.block_size != config->block_size)
                return error_set(err, EINVAL, "the %s backend's KV blocks hold %u tokens, the engine's block_size is %u",
                                 backend->name ? backend->name : "", backend->kv.block_size, config->block_size);
        uint32_t blocks_per_seq = (config->max_model_len + config->block_size - 1) / config->block_size;
        if (n_kv_blocks < blocks_per_seq)
                return error_set(err, EINVAL,
                                 "the KV cache holds %u blocks of %u tokens, fewer than one sequence of max_model_len %u needs (%u); raise kv_cache_space or set max_model_len to at most %u",
                                 n_kv_blocks, config->block_size, config->max_model_len, blocks_per_seq,
                                 n_kv_blocks * config->block_size);
        struct engine_core *ec = calloc(1, sizeof(*ec));
        if (!ec)
                return error_set(err, ENOMEM, "out of memory");
        ec->config = *config;
        ec->backend = *backend;
        ec->n_vocab = n_vocab;
        ec->eog_ids = n_eog_ids ? malloc(n_eog_ids * sizeof(*eog_ids)) : NULL;
        if (n_eog_ids && !ec->eog_ids) {
                free(ec);
                return error_set(err, ENOMEM, "out of memory");
        }
        if (n_eog_ids)
                memcpy(ec->eog_ids, eog_ids, n_eog_ids * sizeof(*eog_ids));
        ec->n_eog_ids = n_eog_ids;
        id_map_init(&ec->requests, offsetof(struct request, id));
        int r;
        if ((r = kv_blocks_new(n_kv_blocks, config->block_size, config->enable_prefix_caching, &ec->kv, err)) < 0 ||
            (r = scheduler_init(&ec->sched, &ec->config, ec->kv, err)) < 0 ||
            (r = step_trace_open_from_env(&ec->step_trace, err)) < 0) {
                engine_core_free(ec);
                return r;
        }
        size_t T = config->max_num_batched_tokens, S = config->max_num_seqs;
        ec->batch_tokens = calloc(T, sizeof(int32_t));
        ec->batch_positions = calloc(T, sizeof(int32_t));
        ec->batch_seq_ids = calloc(T, sizeof(int32_t));
        ec->batch_outputs = calloc(T, sizeof(int32_t));
        ec->batch_seqs = calloc(S, sizeof(*ec->batch_seqs));
        ec->logits_row = calloc(S, sizeof(int32_t));
        ec->prompt_rows_first = calloc(S, sizeof(uint32_t));
        ec->prompt_rows_count = calloc(S, sizeof(uint32_t));
        ec->prompt_rows_pos = calloc(S, sizeof(uint32_t));
        ec->plan_copy = calloc(S, sizeof(*ec->plan_copy));
        ec->batch_hidden = calloc(T, sizeof(int32_t));
        ec->hidden_first = calloc(S, sizeof(uint32_t));
        ec->hidden_count = calloc(S, sizeof(uint32_t));
        if (!ec->batch_tokens || !ec->batch_positions || !ec->batch_seq_ids || !ec->batch_outputs || !ec->batch_seqs ||
            !ec->logits_row || !ec->prompt_rows_first || !ec->prompt_rows_count || !ec->prompt_rows_pos ||
            !ec->plan_copy || !ec->batch_hidden || !ec->hidden_first || !ec->hidden_count) {
                engine_core_free(ec);
                return error_set(err, ENOMEM, "out of memory for the step buffers");
        }
        if (config->scheduling_policy == SCHEDULING_SLO && (r = calibrate_decodes(ec, err)) < 0) {
                engine_core_free(ec);
                return r;
        }
        *ret = ec;
        return 0;
}

static void free_unfinished(struct engine_core *ec) {
        for (uint32_t i = 0; i < ec->requests.cap; i++) {
                struct request *r = ec->requests.slots ? ec->requests.slots[i] : NULL;
                if (r) {
                        kv_blocks_release(ec->kv, &r->blocks);
                        request_free(r);
                }
        }
}

void engine_core_free(struct engine_core *ec) {
        if (!ec)
                return;
        engine_core_clear_outputs(ec);
        free_unfinished(ec);
        id_map_done(&ec->requests);
        scheduler_done(&ec->sched);
        kv_blocks_free(ec->kv);
        free(ec->batch_tokens);
        free(ec->batch_positions);
        free(ec->batch_seq_ids);
        free(ec->batch_outputs);
        free(ec->batch_seqs);
        free(ec->logits_row);
        free(ec->prompt_rows_first);
        free(ec->prompt_rows_count);
        free(ec->prompt_rows_pos);
        free(ec->plan_copy);
        free(ec->batch_hidden);
        free(ec->hidden_first);
        free(ec->hidden_count);
        free(ec->hidden);
        free(ec->outputs);
        step_trace_close(ec->step_trace);
        free(ec->eog_ids);
        free(ec);
}

void engine_core_set_hook(struct engine_core *ec, engine_core_hook hook, void *userdata) {
        ec->hook = hook;
        ec->hook_userdata = userdata;
}

static int push_output(struct engine_core *ec, struct request *r, bool new_token, bool finished) {
        if (ec->n_outputs == ec->cap_outputs) {
                uint32_t cap = ec->cap_outputs ? ec->cap_outputs * 2 : 64;
                struct engine_output *o = realloc(ec->outputs, cap * sizeof(*o));
                if (!o)
                        return -ENOMEM;
                ec->outputs = o;
                ec->cap_outputs = cap;
        }
        ec->outputs[ec->n_outputs++] = (struct engine_output) { r, new_token, finished };
        return 0;
}

/* Ends a request: out of the scheduler and the id map (its id is free for reuse at once),
 * blocks freed; the request itself lives on in the outputs until they are cleared. */
static int finish(struct engine_core *ec, struct request *r, enum finish_reason reason, bool new_token) {
        scheduler_remove(&ec->sched, r);
        id_map_remove(&ec->requests, r);
        r->state = REQUEST_FINISHED;
        r->finish_reason = reason;
        ec->finished[reason]++;
        int rc = push_output(ec, r, new_token, true);
        if (rc < 0) /* the output cannot be reported: do not leak the request */
                request_free(r);
        return rc;
}

/* An encode request needs a backend that gives hidden states, dimensions it has, and room
 * for a step's states (allocated with the first such request: a server that only generates
 * never pays for it; written through at once, so that the memory is resident from then on
 * rather than growing with the first steps that pool many tokens). */
static int prepare_encode(struct engine_core *ec, const struct request_spec *spec, struct error *err) {
        uint32_t n_embd = ec->backend.n_embd;
        if (!n_embd)
                return error_set(err, EOPNOTSUPP, "the %s backend gives no hidden states: encode runs on the cpu",
                                 ec->backend.name ? ec->backend.name : "");
        if (spec->pooling.dimensions > n_embd)
                return error_set(err, EINVAL, "dimensions must be at most the model's hidden size, %u; got %u", n_embd,
                                 spec->pooling.dimensions);
        size_t bytes = (size_t) ec->config.max_num_batched_tokens * n_embd * sizeof(float);
        if (!ec->hidden) {
                if (!(ec->hidden = malloc(bytes)))
                        return error_set(err, ENOMEM, "out of memory for the hidden states");
                memset(ec->hidden, 0, bytes);
        }
        return 0;
}

int engine_core_add_request(struct engine_core *ec, struct request_spec *spec, double *retry_after,
                            struct error *err) {
        struct request *r;
        int rc = 0;
        if (ec->dead)
                rc = error_set(err, ESHUTDOWN, "the engine is dead");
        else if (id_map_get(&ec->requests, spec->id))
                rc = error_set(err, EEXIST, "request id '%s' is already in flight", spec->id);
        if (rc < 0) {
                request_spec_done(spec);
                return rc;
        }
        if (spec->encode && (rc = prepare_encode(ec, spec, err)) < 0) {
                request_spec_done(spec);
                return rc;
        }
        if (spec->encode && spec->pooling.type == POOLING_MODEL_DEFAULT)
                spec->pooling.type = ec->config.default_pooling;
        uint64_t order = ec->next_arrival++;
        if ((rc = request_new(spec, order, (int32_t) ec->n_vocab, ec->config.seed + order, &r, err)) < 0)
                return rc;
        if (r->encode && pooler_init(&r->pooler, r->pooling.type, ec->backend.n_embd) < 0) {
                request_free(r);
                return error_set(err, ENOMEM, "out of memory");
        }
        if (!r->class.slo)
                r->class.slo = ec->config.default_slo;
        if (!r->class.ttft_slo)
                r->class.ttft_slo = ec->config.default_ttft_slo;
        if (ec->config.scheduling_policy == SCHEDULING_SLO && r->class.latency_sensitive &&
            (rc = slo_policy_admit(&ec->sched, r, monotonic_seconds(), retry_after, err)) < 0) {
                request_free(r);
                return rc;
        }
        if ((rc = id_map_put(&ec->requests, r)) < 0 || (rc = scheduler_add(&ec->sched, r)) < 0) {
                id_map_remove(&ec->requests, r);
                request_free(r);
                return error_set(err, -rc, "out of memory");
        }
        return 0;
}

bool engine_core_abort(struct engine_core *ec, const char *id) {
        struct request *r = id_map_get(&ec->requests, id);
        if (!r)
                return false;
        finish(ec, r, FINISH_ABORT, false);
        return true;
}

bool engine_core_has_work(const struct engine_core *ec) {
        return !ec->dead && scheduler_has_work(&ec->sched);
}

uint32_t engine_core_block_size(const struct engine_core *ec) {
        return ec->config.block_size;
}

bool engine_core_is_dead(const struct engine_core *ec) {
        return ec->dead;
}

/* Lays the plan out as one flat batch. Each plan entry whose chunk reaches the end of its
 * tokens gets a logits row to sample from; a request that wants prompt logprobs also gets
 * one for every prompt position of the chunk whose next prompt token is still unrated.
 * Rows follow token order. */
static void build_batch(struct engine_core *ec, struct batch *b) {
        const struct scheduler *s = &ec->sched;
        uint32_t n = 0, n_out = 0, n_hidden = 0;
        for (uint32_t i = 0; i < s->n_plan; i++) {
                const struct scheduled_chunk *c = &s->plan[i];
                struct request *r = c->req;
                uint32_t start = r->num_computed_tokens, end = start + c->n_tokens;
                uint32_t rate_from = 0, rate_to = 0; /* positions [from, to) get prompt rows */
                if (r->prompt_logprobs) {
                        rate_from = r->n_prompt_logprobs - 1 > start ? r->n_prompt_logprobs - 1 : start;
                        rate_to = end < r->n_prompt - 1 ? end : r->n_prompt - 1;
                        if (rate_to < rate_from)
                                rate_to = rate_from;
                }
                ec->batch_seqs[i] = (struct batch_seq) { r->blocks.ids, r->blocks.n, r->n_prompt };
                ec->prompt_rows_first[i] = n_out;
                ec->prompt_rows_count[i] = rate_to - rate_from;
                ec->prompt_rows_pos[i] = rate_from;
                ec->hidden_first[i] = n_hidden;
                for (uint32_t pos = start; pos < end; pos++, n++) {
                        ec->batch_tokens[n] = r->tokens[pos];
                        ec->batch_positions[n] = (int32_t) pos;
                        ec->batch_seq_ids[n] = (int32_t) i;
                        if (pos >= rate_from && pos < rate_to)
                                ec->batch_outputs[n_out++] = (int32_t) n;
                        if (r->encode && pooling_reads(r->pooling.type, pos, r->n_prompt))
                                ec->batch_hidden[n_hidden++] = (int32_t) n;
                }
                ec->hidden_count[i] = n_hidden - ec->hidden_first[i];
                if (end == r->n_tokens && !r->encode) { /* encode samples nothing */
                        ec->logits_row[i] = (int32_t) n_out;
                        ec->batch_outputs[n_out++] = (int32_t) (n - 1);
                } else
                        ec->logits_row[i] = -1;
        }
        *b = (struct batch) {
                .n_tokens = n,
                .tokens = ec->batch_tokens,
                .positions = ec->batch_positions,
                .seq_ids = ec->batch_seq_ids,
                .n_seqs = s->n_plan,
                .seqs = ec->batch_seqs,
                .n_outputs = n_out,
                .output_tokens = ec->batch_outputs,
                .n_hidden = n_hidden,
                .hidden_tokens = ec->batch_hidden,
                .hidden = n_hidden ? ec->hidden : NULL,
        };
}

static bool ends_generation(const struct engine_core *ec, int32_t token) {
        for (size_t i = 0; i < ec->n_eog_ids; i++)
                if (token == ec->eog_ids[i])
                        return true;
        return false;
}

/* vLLM's order: length first, then EOS (every end-of-generation token, unless ignored),
 * then stop token ids; EOS and stop ids count only once min_tokens are out. */
static enum finish_reason check_stop(const struct engine_core *ec, struct request *r) {
        const struct sampling_params *p = &r->params;
        uint32_t n_out = request_num_output(r);
        int32_t last = r->tokens[r->n_tokens - 1];
        if (r->n_tokens >= ec->config.max_model_len ||
            (p->max_tokens != SAMPLING_MAX_TOKENS_NONE && n_out >= (uint32_t) p->max_tokens))
                return FINISH_LENGTH;
        if (n_out < (uint32_t) (p->min_tokens > 0 ? p->min_tokens : 0))
                return FINISH_NONE;
        if (!p->ignore_eos && ends_generation(ec, last))
                return FINISH_STOP;
        for (size_t i = 0; i < p->n_stop_token_ids; i++)
                if (last == p->stop_token_ids[i]) {
                        r->stop_token = last;
                        return FINISH_STOP;
                }
        return FINISH_NONE;
}

static void finish_all(struct engine_core *ec, enum finish_reason reason) {
        for (uint32_t i = 0; i < ec->requests.cap; i++) {
                struct request *r = ec->requests.slots ? ec->requests.slots[i] : NULL;
                if (r) {
                        finish(ec, r, reason, false);
                        i = (uint32_t) -1; /* the map changed under us: start over */
                }
        }
}

static void die(struct engine_core *ec) {
        ec->dead = true;
        finish_all(ec, FINISH_ERROR);
}

void engine_core_abort_all(struct engine_core *ec) {
        finish_all(ec, FINISH_ABORT);
}

static int rate_prompt(struct engine_core *ec, struct request *r, uint32_t first_row, uint32_t count, uint32_t pos) {
        for (uint32_t k = 0; k < count; k++) {
                const float *logits = ec->logits + (size_t) (first_row + k) * ec->n_vocab;
                int rc = sampler_token_logprobs(logits, (int32_t) ec->n_vocab, r->tokens[pos + k + 1],
                                                r->params.prompt_logprobs, &r->prompt_logprobs[pos + k + 1]);
                if (rc < 0)
                        return rc;
                r->n_prompt_logprobs++;
        }
        return 0;
}

/* An encode chunk's states into its pooler; the prompt complete, the pooled vector ends it.
 * A chunk from position 0 starts the pooling over: the request was preempted and its
 * prompt is computed again. */
static int record_encode(struct engine_core *ec, uint32_t i, uint32_t before, double now) {
        struct request *r = ec->plan_copy[i].req;
        struct error err;
        if (before == 0)
                pooler_restart(&r->pooler);
        for (uint32_t k = 0; k < ec->hidden_count[i]; k++)
                pooler_add(&r->pooler, ec->hidden + (size_t) (ec->hidden_first[i] + k) * ec->backend.n_embd);
        if (r->num_computed_tokens < r->n_prompt)
                return 0;
        r->first_token_time = r->last_token_time = now;
        if (pooler_finish(&r->pooler, &r->pooling, &r->embedding, &r->n_embedding, &err) < 0)
                return finish(ec, r, FINISH_ERROR, false) < 0 ? -ENOMEM : 0;
        return finish(ec, r, FINISH_STOP, false);
}

static int record(struct engine_core *ec, uint32_t i, double now) {
        const struct scheduled_chunk *c = &ec->plan_copy[i];
        int32_t row = ec->logits_row[i];
        struct request *r = c->req;
        int rc;
        uint32_t before = r->num_computed_tokens;
        r->num_computed_tokens += c->n_tokens;
        if (before < r->n_prompt) /* prompt tokens computed, recomputation included */
                ec->prompt_tokens += (r->num_computed_tokens < r->n_prompt ? r->num_computed_tokens : r->n_prompt) - before;
        if (r->encode)
                return record_encode(ec, i, before, now);
        if (ec->prompt_rows_count[i] &&
            rate_prompt(ec, r, ec->prompt_rows_first[i], ec->prompt_rows_count[i], ec->prompt_rows_pos[i]) < 0)
                return finish(ec, r, FINISH_ERROR, false) < 0 ? -ENOMEM : 0;
        if (row < 0)
                return 0; /* a prefill chunk short of the end: nothing to sample yet */

        struct sample_result sample;
        float *logits = ec->logits + (size_t) row * ec->n_vocab;
        size_t n_eog = r->params.ignore_eos ? 0 : ec->n_eog_ids;
        if ((rc = sampler_sample(&r->params, &r->sampler, logits, (int32_t) ec->n_vocab, ec->eog_ids, n_eog, &sample)) <
            0)
                return finish(ec, r, FINISH_ERROR, false) < 0 ? -ENOMEM : 0;
        if ((rc = request_append(r, &sample)) < 0) {
                sample_result_clear(&sample);
                return finish(ec, r, FINISH_ERROR, false) < 0 ? -ENOMEM : 0;
        }
        ec->generation_tokens++;
        if (!r->first_token_time)
                r->first_token_time = now;
        r->last_token_time = now;
        enum finish_reason reason = check_stop(ec, r);
        if (reason != FINISH_NONE)
                return finish(ec, r, reason, true);
        return push_output(ec, r, true, false);
}

int engine_core_step(struct engine_core *ec, struct error *err) {
        struct batch b;
        int rc;
        if (ec->dead)
                return error_set(err, ESHUTDOWN, "the engine is dead");
        if (!scheduler_has_work(&ec->sched))
                return 0;
        double step_start = monotonic_seconds();
        if ((rc = scheduler_schedule(&ec->sched, step_start)) < 0)
                return error_set(err, -rc, "out of memory while scheduling");
        if (ec->sched.n_plan == 0)
                return 0;
        double now = monotonic_seconds();
        profiler_span(PROFILE_TRACK_ENGINE, "engine", "schedule", step_start, now, "requests", ec->sched.n_plan);
        for (uint32_t i = 0; i < ec->sched.n_plan; i++)
                if (!ec->sched.plan[i].req->scheduled_time)
                        ec->sched.plan[i].req->scheduled_time = now;

        build_batch(ec, &b);
        const struct step_time_model *model = &ec->sched.model;
        double predicted = ec->step_trace && step_time_model_ready(model) ? step_time_model_predict(model, &ec->sched.plan_shape)
                                                                          : NAN;
        double started = monotonic_seconds();
        if ((rc = ec->backend.forward(ec->backend.impl, &b, &ec->logits, err)) < 0) {
                die(ec);
                return rc;
        }
        double seconds = monotonic_seconds() - started;
        profiler_span(PROFILE_TRACK_ENGINE, "backend", "forward", started, started + seconds, "tokens", b.n_tokens);
        if (ec->step_trace)
                step_trace_write(ec->step_trace, started, &ec->sched.plan_shape, predicted, seconds);
        scheduler_record_step(&ec->sched, seconds);
        ec->steps++;
        ec->scheduled_tokens += b.n_tokens;

        /* Keep the plan: aborts applied by the hook take requests out of the scheduler's. A
         * request finished by the hook stays allocated until the outputs are cleared, so
         * its pointer here remains valid. */
        uint32_t n_plan = ec->sched.n_plan;
        memcpy(ec->plan_copy, ec->sched.plan, n_plan * sizeof(*ec->plan_copy));
        if (ec->hook)
                ec->hook(ec, ec->hook_userdata);

        now = monotonic_seconds();
        for (uint32_t i = 0; i < n_plan; i++) {
                if (ec->plan_copy[i].req->state == REQUEST_FINISHED)
                        continue;
                if ((rc = record(ec, i, now)) < 0)
                        return error_set(err, -rc, "out of memory while recording outputs");
        }
        if (profiler_active()) {
                double end = monotonic_seconds();
                profiler_span(PROFILE_TRACK_ENGINE, "engine", "sample", now, end, "requests", n_plan);
                profiler_span(PROFILE_TRACK_ENGINE, "engine", "step", step_start, end, "tokens", b.n_tokens);
        }
        return 0;
}

const struct engine_output *engine_core_outputs(const struct engine_core *ec, uint32_t *n) {
        *n = ec->n_outputs;
        return ec->outputs;
}

void engine_core_clear_outputs(struct engine_core *ec) {
        for (uint32_t i = 0; i < ec->n_outputs; i++)
                if (ec->outputs[i].finished)
                        request_free(ec->outputs[i].req);
        ec->n_outputs = 0;
}

void engine_core_stats(const struct engine_core *ec, struct engine_stats *ret) {
        struct kv_blocks_stats kv;
        kv_blocks_stats(ec->kv, &kv);
        *ret = (struct engine_stats) {
                .n_running = ec->sched.n_running,
                .n_waiting = ec->sched.n_waiting,
                .kv_blocks_total = kv.n_blocks,
                .kv_blocks_used = kv.n_blocks - kv.n_free,
                .kv_blocks_cached = kv.n_cached,
                .prefix_query_tokens = kv.query_tokens,
                .prefix_hit_tokens = kv.hit_tokens,
                .prompt_tokens = ec->prompt_tokens,
                .generation_tokens = ec->generation_tokens,
                .preemptions = ec->sched.n_preemptions,
                .steps = ec->steps,
                .scheduled_tokens = ec->scheduled_tokens,
                .slo_rejected = ec->sched.slo_rejected,
                .slo_demoted = ec->sched.slo_demoted,
                .step_model_samples = ec->sched.model.n_samples,
                .step_model_error_p50 = step_time_model_error(&ec->sched.model, 0.5),
                .step_model_error_p99 = step_time_model_error(&ec->sched.model, 0.99),
                .decode_calibration = ec->sched.model.calibration,
        };
        memcpy(ret->finished, ec->finished, sizeof(ret->finished));
}

int engine_core_reset_prefix_cache(struct engine_core *ec, bool preempt_running) {
        if (preempt_running)
                engine_core_preempt_all(ec);
        return kv_blocks_reset_prefix_cache(ec->kv);
}

void engine_core_preempt_all(struct engine_core *ec) {
        scheduler_preempt_all(&ec->sched);
}
