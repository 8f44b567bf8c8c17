/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler-internal.h"

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
                for (at = s->n_waiting; at > 0 && request_priority_before(r, s->waiting[at - 1]); at--)
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

/* Takes r's chunk out of the current step's plan; the tokens it was planned for, 0 if none. */
static uint32_t unplan(struct scheduler *s, const struct request *r) {
        for (uint32_t i = 0; i < s->n_plan; i++)
                if (s->plan[i].req == r) {
                        uint32_t n = s->plan[i].n_tokens;
                        memmove(&s->plan[i], &s->plan[i + 1], (s->n_plan - i - 1) * sizeof(*s->plan));
                        s->n_plan--;
                        return n;
                }
        return 0;
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
        unplan(s, r);
        kv_blocks_release(s->kv, &r->blocks);
}

void scheduler_preempt(struct scheduler *s, uint32_t index, uint32_t *budget) {
        struct request *r = s->running[index];
        remove_at(s->running, &s->n_running, index);
        *budget += unplan(s, r);
        kv_blocks_release(s->kv, &r->blocks);
        r->num_computed_tokens = 0;
        r->n_preemptions++;
        s->n_preemptions++;
        waiting_insert(s, r, true);
}

/* The blocks' KV is written by this step's forward pass, before any attention of the same
 * layer reads it, so a request admitted later in the same step (an n > 1 sibling) may
 * already share them. */
void scheduler_commit_chunk(struct scheduler *s, const struct scheduled_chunk *c) {
        struct request *req = c->req;
        if (req->params.prompt_logprobs < 0)
                kv_blocks_commit(s->kv, &req->blocks, req->tokens, req->num_computed_tokens + c->n_tokens);
}

int scheduler_match_prefix(struct scheduler *s, struct request *req) {
        /* a request that wants prompt logprobs needs every prompt position's logits, and one
         * that pools its states over the prompt (mean, cls) every state it pools */
        bool every_position = req->params.prompt_logprobs >= 0 || (req->encode && req->pooling.type != POOLING_LAST);
        if (req->num_computed_tokens == 0 && req->blocks.n == 0 && !every_position) {
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
