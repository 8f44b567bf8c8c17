/* SPDX-License-Identifier: MIT */
#pragma once

/* The scheduler's building blocks, shared by its policies (scheduler.c: fcfs and priority;
 * slo-policy.c: slo). The queue moves live in scheduler-queues.c, apart from scheduler.c, so
 * that the slo policy uses them without calling back into the file that dispatches to it.
 * Only scheduler files include this. */

#include "scheduler.h"

/* A decode computes the one token sampled last; anything more is prompt work (a prompt, or
 * a preempted request's recomputation). */
static inline bool request_is_decode(const struct request *r) {
        return r->n_tokens - r->num_computed_tokens == 1 && r->num_computed_tokens >= r->n_prompt;
}

/* True when a should be served before b under the priority policy. */
static inline bool request_priority_before(const struct request *a, const struct request *b) {
        if (a->class.priority != b->class.priority)
                return a->class.priority < b->class.priority;
        return a->arrival_order < b->arrival_order;
}

/* Sends running[index] back to waiting, its KV to be recomputed; tokens it was already
 * planned for this step go back to *budget. */
void scheduler_preempt(struct scheduler *s, uint32_t index, uint32_t *budget);

/* Offers to the prefix cache the blocks a planned chunk fills; only once the chunk can no
 * longer be preempted in this step. */
void scheduler_commit_chunk(struct scheduler *s, const struct scheduled_chunk *c);

/* Before a waiting request's first chunk: shares what the prefix cache holds of it.
 * -ENOMEM. */
int scheduler_match_prefix(struct scheduler *s, struct request *req);

/* Moves waiting[index] to running and plans its first chunk of n tokens. */
void scheduler_admit(struct scheduler *s, uint32_t index, uint32_t n);

/* Adds a chunk of n tokens of r to a step's shape. */
static inline void step_shape_add_chunk(struct step_shape *shape, const struct request *r, uint32_t n) {
        uint64_t reads = step_shape_context(r->num_computed_tokens, n);
        shape->n_best_effort += !r->class.latency_sensitive;
        if (request_is_decode(r)) {
                shape->n_decode++;
                shape->decode_context += reads;
        } else {
                shape->n_prompt += n;
                shape->prompt_context += reads;
        }
}

/* The shape of the plan as it stands. */
struct step_shape scheduler_plan_shape(const struct scheduler *s);

/* The slo policy's step (slo-policy.c). */
int slo_policy_schedule(struct scheduler *s, double now);
