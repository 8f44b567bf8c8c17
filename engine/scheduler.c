/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler.h"

int scheduler_init(struct scheduler *s, const struct engine_config *config, struct kv_blocks *kv, struct error *err) {
        *s = (struct scheduler) { .config = config, .kv = kv };
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
        free(s->running);
        free(s->plan);
        *s = (struct scheduler) { 0 };
}

/* True when a should be served before b under the priority policy. */
static bool priority_before(const struct request *a, const struct request *b) {
        if (a->priority != b->priority)
                return a->priority < b->priority;
        return a->arrival_order < b->arrival_order;
}

static int waiting_insert(struct scheduler *s, struct request *r, bool front) {
        if (s->n_waiting == s->cap_waiting) {
                uint32_t cap = s->cap_waiting ? s->cap_waiting * 2 : 64;
                struct request **w = realloc(s->waiting, cap * sizeof(*w));
                if (!w)
                        return -ENOMEM;
                s->waiting = w;
                s->cap_waiting = cap;
        }
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
        return 0;
}

int scheduler_add(struct scheduler *s, struct request *r) {
        return waiting_insert(s, r, false);
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

/* Sends a running request back to waiting, its KV to be recomputed; tokens it was already
 * planned for this step go back to the budget. */
static int preempt(struct scheduler *s, uint32_t index, uint32_t *budget) {
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
        return waiting_insert(s, r, true);
}

static uint32_t chunk_size(const struct scheduler *s, const struct request *r, uint32_t budget) {
        uint32_t n = r->n_tokens - r->num_computed_tokens;
        uint32_t cap = s->config->long_prefill_token_threshold;
        if (cap && n > cap)
                n = cap;
        return n < budget ? n : budget;
}

int scheduler_schedule(struct scheduler *s) {
        uint32_t budget = s->config->max_num_batched_tokens;
        bool preempted = false;
        int r;

        s->n_plan = 0;
        for (uint32_t i = 0; i < s->n_running && budget > 0;) {
                struct request *req = s->running[i];
                uint32_t n = chunk_size(s, req, budget);
                bool fits = true;
                while (kv_blocks_allocate(s->kv, &req->blocks, req->num_computed_tokens + n) == -ENOSPC) {
                        uint32_t victim = pick_victim(s);
                        preempted = true;
                        if ((r = preempt(s, victim, &budget)) < 0)
                                return r;
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

        /* Admit waiting requests only when nothing had to be preempted this step. */
        while (!preempted && s->n_waiting > 0 && budget > 0) {
                struct request *req = s->waiting[0];
                if (s->n_running == s->config->max_num_seqs) {
                        /* a better priority may take the seat of the worst running request */
                        if (s->config->scheduling_policy != SCHEDULING_PRIORITY)
                                break;
                        uint32_t victim = pick_victim(s);
                        if (!priority_before(req, s->running[victim]))
                                break;
                        if ((r = preempt(s, victim, &budget)) < 0)
                                return r;
                        continue; /* the victim may now be first in line; look again */
                }
                if (req->num_computed_tokens == 0 && req->blocks.n == 0) {
                        int hit = kv_blocks_match_prefix(s->kv, &req->blocks, req->tokens, req->n_tokens);
                        if (hit < 0)
                                return hit;
                        req->num_computed_tokens = (uint32_t) hit;
                        if (!req->admitted_once)
                                req->num_cached_tokens = (uint32_t) hit;
                }
                uint32_t n = chunk_size(s, req, budget);
                if (!s->config->enable_chunked_prefill && n < req->n_tokens - req->num_computed_tokens)
                        break; /* the whole prompt must fit in this step */
                if (kv_blocks_allocate(s->kv, &req->blocks, req->num_computed_tokens + n) < 0) {
                        kv_blocks_release(s->kv, &req->blocks);
                        req->num_computed_tokens = 0;
                        break;
                }
                remove_at(s->waiting, &s->n_waiting, 0);
                req->state = REQUEST_RUNNING;
                req->admitted_once = true;
                s->running[s->n_running++] = req;
                s->plan[s->n_plan++] = (struct scheduled_chunk) { req, n };
                budget -= n;
        }
        return 0;
}
