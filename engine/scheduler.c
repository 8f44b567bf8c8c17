/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "scheduler-internal.h"
#include "stall-guard.h"

int scheduler_init(struct scheduler *s, const struct engine_config *config, struct kv_blocks *kv, struct error *err) {
        *s = (struct scheduler) { .config = config, .kv = kv, .floor_probe_time = -INFINITY };
        step_time_model_init(&s->model);
        struct kv_blocks_stats kv_stats;
        kv_blocks_stats(kv, &kv_stats);
        s->reserve_blocks = (uint32_t) (config->slo_kv_reserve * kv_stats.n_blocks);
        s->running = calloc(config->max_num_seqs, sizeof(*s->running));
        s->plan = calloc(config->max_num_seqs, sizeof(*s->plan));
        if (!s->running || !s->plan) {
                scheduler_done(s);
                return error_set(err, ENOMEM, "out of memory");
        }
        return 0;
}

void scheduler_done(struct scheduler *s) {
        free(s->waiting);
        free(s->candidates);
        free(s->running);
        free(s->plan);
        *s = (struct scheduler) { 0 };
}

/* The running request to give up first. */
static uint32_t pick_victim(const struct scheduler *s) {
        uint32_t victim = s->n_running - 1;
        if (s->config->scheduling_policy == SCHEDULING_PRIORITY)
                for (uint32_t i = 0; i < s->n_running; i++)
                        if (request_priority_before(s->running[victim], s->running[i]))
                                victim = i;
        return victim;
}

/* Tokens of r this step may compute: 0 when the stall guard keeps its prompt waiting. */
static uint32_t chunk_size(const struct scheduler *s, struct stall_guard *guard, const struct request *r, uint32_t budget) {
        uint32_t n = r->n_tokens - r->num_computed_tokens;
        uint32_t cap = s->config->long_prefill_token_threshold;
        if (n > 1 && cap && n > cap)
                n = cap;
        if (n > budget)
                n = budget;
        return request_is_decode(r) ? n : stall_guard_grant(guard, r->num_computed_tokens, n);
}

/* Under priority, a waiting request that would find no seat takes the seat of a worse
 * running one. Done before planning so that a victim never has a planned chunk. */
static void take_seats(struct scheduler *s) {
        while (s->n_running > 0) {
                uint32_t n_free = s->config->max_num_seqs - s->n_running;
                if (s->n_waiting <= n_free)
                        return;
                uint32_t victim = pick_victim(s);
                if (!request_priority_before(s->waiting[n_free], s->running[victim]))
                        return;
                uint32_t unused = 0;
                scheduler_preempt(s, victim, &unused);
        }
}

/* fcfs and priority: vLLM's order. */
static int schedule_in_order(struct scheduler *s) {
        uint32_t budget = s->config->max_num_batched_tokens;
        bool preempted = false;

        s->n_plan = 0;
        if (s->config->scheduling_policy == SCHEDULING_PRIORITY)
                take_seats(s);

        struct step_shape decodes = { 0 };
        for (uint32_t i = 0; i < s->n_running; i++)
                if (request_is_decode(s->running[i]))
                        step_shape_add_chunk(&decodes, s->running[i], 1);
        /* without chunked prefill a prompt runs whole: nothing to limit */
        struct stall_guard guard;
        stall_guard_begin(&guard, s->config->enable_chunked_prefill ? s->config->decode_stall_limit : 0, &s->model,
                          &decodes, s->mixed_steps_in_a_row);

        for (uint32_t i = 0; i < s->n_running && budget > 0;) {
                struct request *req = s->running[i];
                uint32_t n = chunk_size(s, &guard, req, budget);
                if (n == 0) {
                        i++;
                        continue;
                }
                bool fits = true;
                while (kv_blocks_allocate(s->kv, &req->blocks, req->num_computed_tokens + n) == -ENOSPC) {
                        uint32_t victim = pick_victim(s);
                        preempted = true;
                        scheduler_preempt(s, victim, &budget);
                        if (victim == i) {
                                fits = false;
                                break;
                        }
                        if (victim < i)
                                i--;
                }
                if (!fits)
                        continue; /* running[i] now holds the next request */
                s->plan[s->n_plan++] = (struct scheduled_chunk) { req, n };
                budget -= n;
                i++;
        }
        for (uint32_t i = 0; i < s->n_plan; i++)
                scheduler_commit_chunk(s, &s->plan[i]);

        /* Admit waiting requests only when nothing had to be preempted this step; admission
         * never preempts, so every chunk committed above is computed. */
        while (!preempted && s->n_waiting > 0 && budget > 0 && s->n_running < s->config->max_num_seqs) {
                struct request *req = s->waiting[0];
                int rc = scheduler_match_prefix(s, req);
                if (rc < 0)
                        return rc;
                uint32_t n = chunk_size(s, &guard, req, budget);
                if (n == 0 || (!s->config->enable_chunked_prefill && n < req->n_tokens - req->num_computed_tokens) ||
                    kv_blocks_allocate(s->kv, &req->blocks, req->num_computed_tokens + n) < 0) {
                        kv_blocks_release(s->kv, &req->blocks);
                        req->num_computed_tokens = 0;
                        break;
                }
                scheduler_admit(s, 0, n);
                scheduler_commit_chunk(s, &s->plan[s->n_plan - 1]);
                budget -= n;
        }
        return 0;
}

int scheduler_schedule(struct scheduler *s, double now) {
        int rc = s->config->scheduling_policy == SCHEDULING_SLO ? slo_policy_schedule(s, now) : schedule_in_order(s);
        if (rc >= 0)
                s->plan_shape = scheduler_plan_shape(s);
        return rc;
}

void scheduler_record_step(struct scheduler *s, double seconds) {
        if (s->plan_shape.n_decode > 0)
                s->mixed_steps_in_a_row = s->plan_shape.n_prompt > 0 ? s->mixed_steps_in_a_row + 1 : 0;
        step_time_model_record(&s->model, &s->plan_shape, seconds);
}

void scheduler_preempt_all(struct scheduler *s) {
        uint32_t unused = 0;
        s->n_plan = 0;
        while (s->n_running > 0)
                scheduler_preempt(s, s->n_running - 1, &unused);
}
