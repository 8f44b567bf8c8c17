/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler-internal.h"
#include "stall-guard.h"

int scheduler_init(struct scheduler *s, const struct engine_config *config, struct kv_blocks *kv, struct error *err) {
        *s = (struct scheduler) { .config = config, .kv = kv, .floor_probe_time = -INFINITY };
        step_time_model_init(&s->model);
        s->steps_since_burst = STALL_GUARD_BURST_EVERY; /* owed from the start */
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

/* True when a should be served before b under the priority policy. */
static bool priority_before(const struct request *a, const struct request *b) {
        if (a->class.priority != b->class.priority)
                return a->class.priority < b->class.priority;
        return a->arrival_order < b->arrival_order;
}

/* Keeps room for every request the scheduler holds, so that preemption never fails. */
static int waiting_reserve(struct scheduler *s, uint32_t n) {
        if (n <= s->cap_waiting)
                return 0;
        uint32_t cap = s->cap_waiting ? s->cap_waiting : 64;
        while (cap < n)
                cap *= 2;
        struct request **w = realloc(s->waiting, cap * sizeof(*w));
        if (!w)
                return -ENOMEM;
        s->waiting = w;
        struct request **c = realloc(s->candidates, cap * sizeof(*c));
        if (!c)
                return -ENOMEM;
        s->candidates = c;
        s->cap_waiting = cap;
        return 0;
}

static void waiting_insert(struct scheduler *s, struct request *r, bool front) {
        uint32_t at;
        if (s->config->scheduling_policy == SCHEDULING_PRIORITY)
                for (at = s->n_waiting; at > 0 && priority_before(r, s->waiting[at - 1]); at--)
                        ;
        else
                at = front ? 0 : s->n_waiting;
        memmove(&s->waiting[at + 1], &s->waiting[at], (s->n_waiting - at) * sizeof(*s->waiting));
        s->waiting[at] = r;
        s->n_waiting++;
        r->state = REQUEST_WAITING;
}

int scheduler_add(struct scheduler *s, struct request *r) {
        int rc = waiting_reserve(s, s->n_waiting + s->n_running + 1);
        if (rc < 0)
                return rc;
        waiting_insert(s, r, false);
        return 0;
}

static void remove_at(struct request **array, uint32_t *n, uint32_t i) {
        memmove(&array[i], &array[i + 1], (*n - i - 1) * sizeof(*array));
        (*n)--;
}

void scheduler_remove(struct scheduler *s, struct request *r) {
        for (uint32_t i = 0; i < s->n_running; i++)
                if (s->running[i] == r) {
                        remove_at(s->running, &s->n_running, i);
                        break;
                }
        for (uint32_t i = 0; i < s->n_waiting; i++)
                if (s->waiting[i] == r) {
                        remove_at(s->waiting, &s->n_waiting, i);
                        break;
                }
        for (uint32_t i = 0; i < s->n_plan; i++)
                if (s->plan[i].req == r) {
                        memmove(&s->plan[i], &s->plan[i + 1], (s->n_plan - i - 1) * sizeof(*s->plan));
                        s->n_plan--;
                        break;
                }
        kv_blocks_release(s->kv, &r->blocks);
}

/* The running request to give up first. */
static uint32_t pick_victim(const struct scheduler *s) {
        uint32_t victim = s->n_running - 1;
        if (s->config->scheduling_policy == SCHEDULING_PRIORITY)
                for (uint32_t i = 0; i < s->n_running; i++)
                        if (priority_before(s->running[victim], s->running[i]))
                                victim = i;
        return victim;
}

void scheduler_preempt(struct scheduler *s, uint32_t index, uint32_t *budget) {
        struct request *r = s->running[index];
        remove_at(s->running, &s->n_running, index);
        for (uint32_t i = 0; i < s->n_plan; i++)
                if (s->plan[i].req == r) {
                        *budget += s->plan[i].n_tokens;
                        memmove(&s->plan[i], &s->plan[i + 1], (s->n_plan - i - 1) * sizeof(*s->plan));
                        s->n_plan--;
                        break;
                }
        kv_blocks_release(s->kv, &r->blocks);
        r->num_computed_tokens = 0;
        r->n_preemptions++;
        s->n_preemptions++;
        waiting_insert(s, r, true);
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
                if (!priority_before(s->waiting[n_free], s->running[victim]))
                        return;
                uint32_t unused = 0;
                scheduler_preempt(s, victim, &unused);
        }
}

/* The blocks' KV is written by this step's forward pass, before any attention of the same
 * layer reads it, so a request admitted later in the same step (an n > 1 sibling) may
 * already share them. */
void scheduler_commit_chunk(struct scheduler *s, const struct scheduled_chunk *c) {
        struct request *req = c->req;
        if (req->params.prompt_logprobs < 0)
                kv_blocks_commit(s->kv, &req->blocks, req->tokens, req->num_computed_tokens + c->n_tokens);
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
        s->burst_planned = stall_guard_begin(&guard, s->config->enable_chunked_prefill ? s->config->decode_stall_limit : 0,
                                             &s->model, &decodes, s->mixed_steps_in_a_row, s->steps_since_burst);

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

int scheduler_match_prefix(struct scheduler *s, struct request *req) {
        /* a request that wants prompt logprobs needs every prompt position's logits */
        if (req->num_computed_tokens == 0 && req->blocks.n == 0 && req->params.prompt_logprobs < 0) {
                int hit = kv_blocks_match_prefix(s->kv, &req->blocks, req->tokens, req->n_tokens);
                if (hit < 0)
                        return hit;
                req->num_computed_tokens = (uint32_t) hit;
                if (!req->admitted_once)
                        req->num_cached_tokens = (uint32_t) hit;
        }
        return 0;
}

void scheduler_admit(struct scheduler *s, uint32_t index, uint32_t n) {
        struct request *req = s->waiting[index];
        remove_at(s->waiting, &s->n_waiting, index);
        req->state = REQUEST_RUNNING;
        req->admitted_once = true;
        s->running[s->n_running++] = req;
        s->plan[s->n_plan++] = (struct scheduled_chunk) { req, n };
}

struct step_shape scheduler_plan_shape(const struct scheduler *s) {
        struct step_shape shape = { 0 };
        for (uint32_t i = 0; i < s->n_plan; i++)
                step_shape_add_chunk(&shape, s->plan[i].req, s->plan[i].n_tokens);
        return shape;
}

void scheduler_record_step(struct scheduler *s, double seconds) {
        if (s->plan_shape.n_decode > 0) {
                s->mixed_steps_in_a_row = s->plan_shape.n_prompt > 0 ? s->mixed_steps_in_a_row + 1 : 0;
                /* a burst that found no prompt work to let through is still owed */
                s->steps_since_burst = s->burst_planned && s->plan_shape.n_prompt > 0 ? 0 : s->steps_since_burst + 1;
        }
        s->burst_planned = false;
        step_time_model_record(&s->model, &s->plan_shape, seconds);
}

void scheduler_preempt_all(struct scheduler *s) {
        uint32_t unused = 0;
        s->n_plan = 0;
        while (s->n_running > 0)
                scheduler_preempt(s, s->n_running - 1, &unused);
}
