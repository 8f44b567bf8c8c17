/* SPDX-License-Identifier: MIT */
#pragma once

/* Decides each step which requests run and how many of their tokens: running requests
 * first (decodes and unfinished prefills, in admission order), then waiting ones in policy
 * order, within the token budget, the seats (max_num_seqs) and the free KV blocks. Long
 * prompts are split into chunks across steps. When blocks run out, a running request is
 * preempted (its blocks freed, to be recomputed later): under fcfs the latest admitted,
 * under priority the worst (priority, arrival). */

#include <stdint.h>

#include "engine-config.h"
#include "kv-blocks.h"
#include "request.h"
#include "step-time-model.h"

struct scheduled_chunk {
        struct request *req;
        uint32_t n_tokens; /* computed this step, from req->num_computed_tokens */
};

struct scheduler {
        const struct engine_config *config;
        struct kv_blocks *kv;
        struct request **waiting; /* policy order: the next to admit first */
        uint32_t n_waiting, cap_waiting;
        struct request **running; /* admission order; at most max_num_seqs */
        uint32_t n_running;
        struct request **candidates; /* (cap_waiting) the slo policy's scratch */
        struct scheduled_chunk *plan; /* the current step */
        uint32_t n_plan;
        uint64_t n_preemptions;
        uint32_t mixed_steps_in_a_row; /* steps with decodes and prompt work since a decode-only one */
        struct step_shape plan_shape;  /* of the current plan: for the step-time model */
        /* The slo policy (engine/slo-policy.c); the model learns under every policy. */
        struct step_time_model model;
        uint32_t reserve_blocks;    /* free blocks best-effort work may not take */
        double last_best_effort_run; /* when a best-effort chunk was last planned (or none waited) */
        double floor_probe_time;     /* when the slo policy last took a request only its floor refused */
        uint64_t slo_rejected, slo_demoted;
};

int scheduler_init(struct scheduler *s, const struct engine_config *config, struct kv_blocks *kv, struct error *err);
void scheduler_done(struct scheduler *s);

/* Queues a new request. -ENOMEM. */
int scheduler_add(struct scheduler *s, struct request *r);

/* Takes a request out of whichever queue holds it and frees its blocks. */
void scheduler_remove(struct scheduler *s, struct request *r);

/* Builds s->plan for one step at time now (monotonic seconds). -ENOMEM. */
int scheduler_schedule(struct scheduler *s, double now);

/* Learns from the step just planned, which took seconds. */
void scheduler_record_step(struct scheduler *s, double seconds);

/* The slo policy's admission control for a latency-sensitive request (the defaults of its
 * slo and ttft_slo resolved): 0 to take it, as it is or demoted to best-effort (the
 * policy's setting); -EAGAIN when its SLO cannot be met even with every best-effort
 * request held back, *retry_after (may be NULL) set to when a retry may succeed. One
 * that only the shortest step ever run would refuse is taken now and then, to measure the
 * machine afresh (the floor probe, slo-policy.c). */
int slo_policy_admit(struct scheduler *s, struct request *r, double now, double *retry_after, struct error *err);

/* Sends every running request back to waiting, its blocks freed. */
void scheduler_preempt_all(struct scheduler *s);

static inline bool scheduler_has_work(const struct scheduler *s) {
        return s->n_waiting + s->n_running > 0;
}
