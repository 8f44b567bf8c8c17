/* SPDX-License-Identifier: MIT */
/* The slo policy: latency-sensitive requests get their tokens by their deadlines, and
 * best-effort work fills whatever time those deadlines leave in each step.
 *
 * Token k of a latency-sensitive request is due at its first token's time + k x slo (the
 * first at arrival + ttft_slo), planned a little ahead of that (SLO_PACE, TTFT_PACE), and sooner still
 * where the aim asks: each token aimed at the time a step of the latency-sensitive decodes
 * alone takes after the one before, plus slo_aim_factor - 1 times a one-decode step for
 * best-effort work, so that they come about as fast as they would alone however loose
 * their slo. A step may take as long as the earliest deadline among the latency-sensitive
 * decodes it carries allows, so slack earned by fast tokens can absorb one longer step;
 * never longer than a quarter of the default ttft_slo, so that a new arrival waits little
 * for the step in progress. Within that time, predicted by the step-time model with its
 * safety margin, a step takes: latency-sensitive decodes;
 * latency-sensitive prompt chunks, earliest deadline first (one that ends its prompt
 * bounds the step by its first token's deadline); best-effort decodes; best-effort prompt
 * chunks sized to the time left, none of a few tokens beside latency-sensitive work (the
 * decodes bank slack for a bigger one instead). Best-effort requests that do not fit
 * wait with their KV blocks (with nothing latency-sensitive in the engine, only their
 * prompt chunks are cut to the time). They may not take the last reserve_blocks free blocks, which
 * are kept for latency-sensitive arrivals; a latency-sensitive request that finds no block
 * evicts best-effort requests (they recompute later). Best-effort requests age, and one
 * that has waited a whole default ttft_slo runs a chunk whatever the deadlines say. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "scheduler-internal.h"

/* Best-effort requests gain one priority level per this many seconds of waiting. */
#define AGING_SECONDS 10.0

/* Tokens after the first are planned at this share of their slo. A request's TPOT misses
 * by its last token's lateness over its token count, and the step that brings that token
 * overruns its prediction about one time in ten (the margin is a 90th percentile): paced
 * right at the slo, a few requests in a hundred missed by a hair. The lead grows with each
 * token, so a long output banks more than one step's overrun. */
#define SLO_PACE 0.98

/* The first token is planned at this share of its ttft_slo. A prompt takes at least its
 * share of what is left per step until then, so that best-effort work keeps the rest, and
 * so it ends close to that time, in a step as long as up to a quarter of ttft_slo: planned
 * at ttft_slo itself, that step's overrun made some first tokens late. */
#define TTFT_PACE 0.9

static double best_effort_key(const struct request *r, double now) {
        return r->class.priority - (now - r->arrival_time) / AGING_SECONDS;
}

static int compare_sort_key(const void *a, const void *b) {
        const struct request *x = *(struct request *const *) a, *y = *(struct request *const *) b;
        if (x->sort_key != y->sort_key)
                return x->sort_key < y->sort_key ? -1 : 1;
        return (x->arrival_order > y->arrival_order) - (x->arrival_order < y->arrival_order);
}

struct step_plan {
        struct scheduler *s;
        double now;
        double aim;     /* seconds from one aimed latency-sensitive token to the next; INFINITY: none */
        double limit;   /* seconds the step may take; meaningful when timed */
        double margin;  /* predictions are multiplied by it */
        bool timed;     /* the step-time model is warm */
        uint32_t budget;
        bool latency_sensitive_present;
        bool protects_decodes; /* latency-sensitive decodes are planned */
        bool latency_sensitive_planned; /* the step runs for latency-sensitive work anyway */
        struct step_shape shape;
};

/* When r's next token is planned for: its deadline (its slo's pace), or its aim if sooner. */
static double next_deadline(const struct step_plan *p, const struct request *r) {
        uint32_t n_out = request_num_output(r);
        if (n_out == 0 || !r->first_token_time)
                return r->arrival_time + r->class.ttft_slo * TTFT_PACE;
        double deadline = r->first_token_time + n_out * r->class.slo * SLO_PACE;
        if (isfinite(p->aim) && r->aimed_n_out == n_out && r->aimed_token_time + p->aim < deadline)
                return r->aimed_token_time + p->aim;
        return deadline;
}

/* The aim of this step: the predicted time of a step of the running latency-sensitive
 * decodes alone, plus slo_aim_factor - 1 times that of a step of one of them (at their mean
 * context), which best-effort work may have. The share is a single decode's, not all of
 * theirs: three requests decoding together had their tokens aimed ~1.4x as far apart as
 * served alone when it was a multiple of their whole step. The slo takes over where the aim
 * would be later than it. */
static double step_aim(const struct step_plan *p) {
        const struct scheduler *s = p->s;
        struct step_shape alone = { 0 };
        if (!p->timed || s->config->slo_aim_factor == 0)
                return INFINITY;
        for (uint32_t i = 0; i < s->n_running; i++)
                if (s->running[i]->class.latency_sensitive && request_is_decode(s->running[i]))
                        step_shape_add_chunk(&alone, s->running[i], 1);
        if (alone.n_decode == 0)
                return INFINITY;
        struct step_shape one = { .n_decode = 1, .decode_context = alone.decode_context / alone.n_decode };
        return step_time_model_predict(&s->model, &alone) +
               (s->config->slo_aim_factor - 1) * step_time_model_predict(&s->model, &one);
}

/* A latency-sensitive request behind its aim catches up (steps of its decodes alone) by at
 * most this many aims: a step that overruns its prediction makes a token late by about an
 * aim, which is caught up; a machine stall of a second is mostly forgiven, or best-effort
 * work would get nothing for about as long while the requests caught up. */
#define AIM_DEBT 4

/* Moves each latency-sensitive request's aim on to its latest token: one aim after the
 * token aimed before, but never more than AIM_DEBT aims before the token's real time. */
static void advance_aims(struct step_plan *p) {
        const struct scheduler *s = p->s;
        if (!isfinite(p->aim))
                return;
        for (uint32_t i = 0; i < s->n_running + s->n_waiting; i++) {
                struct request *r = i < s->n_running ? s->running[i] : s->waiting[i - s->n_running];
                uint32_t n_out = request_num_output(r);
                if (!r->class.latency_sensitive || n_out == 0 || !r->first_token_time)
                        continue;
                if (r->aimed_n_out == 0) {
                        r->aimed_token_time = r->first_token_time;
                        r->aimed_n_out = 1;
                }
                r->aimed_token_time += p->aim * (n_out - r->aimed_n_out);
                r->aimed_n_out = n_out;
                if (r->aimed_token_time < r->last_token_time - AIM_DEBT * p->aim)
                        r->aimed_token_time = r->last_token_time - AIM_DEBT * p->aim;
        }
}

static bool in_plan(const struct scheduler *s, const struct request *r) {
        for (uint32_t i = 0; i < s->n_plan; i++)
                if (s->plan[i].req == r)
                        return true;
        return false;
}

static void preempt_request(struct step_plan *p, const struct request *r) {
        for (uint32_t i = 0; i < p->s->n_running; i++)
                if (p->s->running[i] == r) {
                        scheduler_preempt(p->s, i, &p->budget);
                        p->shape = scheduler_plan_shape(p->s);
                        return;
                }
}

/* The latest admitted running best-effort request other than keep and not planned, if any;
 * with younger_than, only one admitted after it. */
static struct request *best_effort_victim(const struct scheduler *s, const struct request *keep,
                                          const struct request *younger_than) {
        struct request *victim = NULL;
        for (uint32_t i = 0; i < s->n_running; i++) {
                struct request *r = s->running[i];
                if (r == keep || r->class.latency_sensitive || in_plan(s, r) ||
                    (younger_than && r->arrival_order < younger_than->arrival_order))
                        continue;
                if (!victim || r->arrival_order > victim->arrival_order)
                        victim = r;
        }
        return victim;
}

/* The latency-sensitive request with the latest deadline, keep included: the last resort. */
static struct request *latency_sensitive_victim(const struct step_plan *p) {
        const struct scheduler *s = p->s;
        struct request *victim = NULL;
        for (uint32_t i = 0; i < s->n_running; i++) {
                struct request *r = s->running[i];
                if (r->class.latency_sensitive && (!victim || next_deadline(p, r) > next_deadline(p, victim)))
                        victim = r;
        }
        return victim;
}

/* Blocks for a latency-sensitive request's next n tokens, evicting best-effort requests
 * and, failing that, the latency-sensitive one due last (perhaps r itself: false). */
static bool grow_latency_sensitive(struct step_plan *p, struct request *r, uint32_t n) {
        for (;;) {
                if (kv_blocks_allocate(p->s->kv, &r->blocks, r->num_computed_tokens + n) == 0)
                        return true;
                struct request *victim = best_effort_victim(p->s, r, NULL);
                if (!victim)
                        victim = latency_sensitive_victim(p);
                if (!victim)
                        return false;
                bool self = victim == r;
                preempt_request(p, victim);
                if (self)
                        return false;
        }
}

/* Blocks for a best-effort request's next n tokens without taking the reserve; a younger
 * unplanned best-effort request is evicted to make room (vLLM's rule among equals). The
 * reserve is given up only when no latency-sensitive request is there and nothing younger
 * can make room, so that best-effort work alone never stalls. */
static bool grow_best_effort(struct step_plan *p, struct request *r, uint32_t n, bool may_evict) {
        struct scheduler *s = p->s;
        for (;;) {
                uint32_t needed = kv_blocks_needed(s->kv, &r->blocks, r->num_computed_tokens + n);
                uint32_t n_free = kv_blocks_n_free(s->kv);
                if (needed <= n_free && n_free - needed >= s->reserve_blocks)
                        return kv_blocks_allocate(s->kv, &r->blocks, r->num_computed_tokens + n) == 0;
                struct request *victim = may_evict ? best_effort_victim(s, r, r) : NULL;
                if (!victim)
                        return !p->latency_sensitive_present && may_evict &&
                               kv_blocks_allocate(s->kv, &r->blocks, r->num_computed_tokens + n) == 0;
                preempt_request(p, victim);
        }
}

static bool fits(const struct step_plan *p, const struct request *r, uint32_t n) {
        struct step_shape shape = p->shape;
        step_shape_add_chunk(&shape, r, n);
        return step_time_model_predict(&p->s->model, &shape) * p->margin <= p->limit;
}

/* Before the model has learned, prompt chunks stay this small: an untimed 512-token step
 * takes over a second here, and a cold engine under load would start with a run of them. */
#define UNTIMED_CHUNK 32

/* A best-effort prompt chunk smaller than this is not planned beside latency-sensitive
 * work (unless it ends the prompt). Sized by the time left alone, best-effort prompts
 * advanced a few tokens a step, and such chunks cost more per token than big ones (the
 * step's fixed part). Left out, the step is a short one, its latency-sensitive tokens come
 * early, and the slack they bank lets a chunk at least this big in a step or two later. */
#define MIN_BEST_EFFORT_CHUNK 32

/* The most prompt tokens of r (at most cap) the step's time still allows. */
static uint32_t fitting_chunk(const struct step_plan *p, const struct request *r, uint32_t cap) {
        if (!p->timed)
                return cap < UNTIMED_CHUNK ? cap : UNTIMED_CHUNK;
        return step_time_model_fitting_chunk(&p->s->model, &p->shape, r->num_computed_tokens, cap, p->limit / p->margin);
}

static uint32_t prompt_cap(const struct step_plan *p, const struct request *r) {
        uint32_t n = r->n_tokens - r->num_computed_tokens;
        uint32_t threshold = p->s->config->long_prefill_token_threshold;
        if (threshold && n > threshold)
                n = threshold;
        if (n > p->budget)
                n = p->s->config->enable_chunked_prefill ? p->budget : 0;
        return n;
}

static void plan_chunk(struct step_plan *p, struct request *r, uint32_t n) {
        step_shape_add_chunk(&p->shape, r, n);
        p->s->plan[p->s->n_plan++] = (struct scheduled_chunk) { r, n };
        p->budget -= n;
}

static uint32_t waiting_index(const struct scheduler *s, const struct request *r) {
        for (uint32_t i = 0; i < s->n_waiting; i++)
                if (s->waiting[i] == r)
                        return i;
        return UINT32_MAX;
}

/* Gives back what a waiting request took while it was being fitted. */
static void unadmit(struct scheduler *s, struct request *r) {
        kv_blocks_release(s->kv, &r->blocks);
        r->num_computed_tokens = 0;
}

enum chunk_rule {
        CHUNK_FIT,       /* what the step's time still allows */
        CHUNK_WHOLE,     /* as much as the budget allows */
        CHUNK_ONE_BLOCK, /* one block's worth: the starvation guard's nudge */
};

/* Plans a prompt chunk of r, admitting r when it waits; returns its size (0: nothing). */
static int plan_prompt(struct step_plan *p, struct request *r, enum chunk_rule rule) {
        struct scheduler *s = p->s;
        bool waiting = r->state == REQUEST_WAITING;
        int rc;
        if (waiting && (rc = scheduler_match_prefix(s, r)) < 0)
                return rc;
        uint32_t cap = prompt_cap(p, r);
        uint32_t n = rule == CHUNK_FIT ? fitting_chunk(p, r, cap) : cap;
        if (rule == CHUNK_FIT && !r->class.latency_sensitive && p->latency_sensitive_planned && n < cap &&
            n < MIN_BEST_EFFORT_CHUNK)
                n = 0;
        if (rule == CHUNK_FIT && r->class.latency_sensitive && p->timed) {
                /* its own first token is due too: at least its share of the prompt per step
                 * from now to that deadline, even if the step runs past the decodes' slack */
                struct step_shape with = p->shape;
                step_shape_add_chunk(&with, r, n);
                double step = step_time_model_predict(&s->model, &with) * p->margin;
                double steps_left = step > 0 ? floor((next_deadline(p, r) - p->now) / step) : 1;
                uint32_t left = r->n_tokens - r->num_computed_tokens;
                uint32_t share = steps_left >= 1 ? (uint32_t) ceil(left / steps_left) : left;
                if (share > n)
                        n = share < cap ? share : cap;
        }
        if (rule == CHUNK_ONE_BLOCK && n > s->config->block_size && s->config->enable_chunked_prefill)
                n = s->config->block_size;
        if (n > 0 && waiting && s->n_running >= s->config->max_num_seqs) {
                /* a latency-sensitive arrival takes a best-effort request's seat */
                struct request *victim = r->class.latency_sensitive ? best_effort_victim(s, NULL, NULL) : NULL;
                if (victim)
                        preempt_request(p, victim);
                else
                        n = 0;
        }
        if (n == 0 || !(r->class.latency_sensitive ? grow_latency_sensitive(p, r, n) : grow_best_effort(p, r, n, !waiting))) {
                if (waiting && r->state == REQUEST_WAITING)
                        unadmit(s, r);
                return 0;
        }
        if (waiting) {
                scheduler_admit(s, waiting_index(s, r), n);
                step_shape_add_chunk(&p->shape, r, n);
                p->budget -= n;
        } else
                plan_chunk(p, r, n);
        return (int) n;
}

enum pick {
        PICK_DECODES, /* running requests that decode */
        PICK_PROMPTS, /* running ones with prompt work, and waiting ones */
};

/* The requests of one class and kind, in the order to serve them. */
static uint32_t collect(const struct step_plan *p, bool latency_sensitive, enum pick pick) {
        struct scheduler *s = p->s;
        uint32_t n = 0;
        for (uint32_t i = 0; i < s->n_running; i++) {
                struct request *r = s->running[i];
                if (r->class.latency_sensitive == latency_sensitive && request_is_decode(r) == (pick == PICK_DECODES) &&
                    !in_plan(s, r))
                        s->candidates[n++] = r;
        }
        if (pick == PICK_PROMPTS)
                for (uint32_t i = 0; i < s->n_waiting; i++)
                        if (s->waiting[i]->class.latency_sensitive == latency_sensitive)
                                s->candidates[n++] = s->waiting[i];
        for (uint32_t i = 0; i < n; i++)
                s->candidates[i]->sort_key = latency_sensitive ? next_deadline(p, s->candidates[i])
                                                               : best_effort_key(s->candidates[i], p->now);
        qsort(s->candidates, n, sizeof(*s->candidates), compare_sort_key);
        return n;
}

/* Candidates change under preemption: each is checked for being still where it was. */
static bool still_eligible(const struct request *r, enum pick pick) {
        return pick == PICK_DECODES ? r->state == REQUEST_RUNNING && request_is_decode(r) : true;
}

/* A latency-sensitive token of r comes at the end of the step: the step must end by its
 * deadline. */
static void limit_to_deadline(struct step_plan *p, const struct request *r) {
        double left = next_deadline(p, r) - p->now;
        if (left < p->limit)
                p->limit = left;
}

static int plan_latency_sensitive(struct step_plan *p) {
        struct scheduler *s = p->s;
        uint32_t n = collect(p, true, PICK_DECODES);
        for (uint32_t i = 0; i < n && p->budget > 0; i++) {
                struct request *r = s->candidates[i];
                if (!still_eligible(r, PICK_DECODES) || in_plan(s, r) || !grow_latency_sensitive(p, r, 1))
                        continue;
                plan_chunk(p, r, 1);
                limit_to_deadline(p, r);
                p->protects_decodes = p->latency_sensitive_planned = true;
        }
        n = collect(p, true, PICK_PROMPTS);
        for (uint32_t i = 0; i < n && p->budget > 0; i++) {
                struct request *r = s->candidates[i];
                /* with no decode to protect a prompt takes a whole chunk: its own first
                 * token is what is due */
                int rc = plan_prompt(p, r, p->protects_decodes ? CHUNK_FIT : CHUNK_WHOLE);
                if (rc < 0)
                        return rc;
                if (rc == 0)
                        continue;
                p->latency_sensitive_planned = true;
                /* a chunk that ends the prompt brings a token due by its deadline: best-effort
                 * work filling the step up to the decodes' slack (or the cap when there
                 * are none) would make it late */
                if (r->num_computed_tokens + (uint32_t) rc == r->n_tokens)
                        limit_to_deadline(p, r);
        }
        return 0;
}

static int plan_best_effort(struct step_plan *p, bool *planned) {
        struct scheduler *s = p->s;
        uint32_t n = collect(p, false, PICK_DECODES);
        for (uint32_t i = 0; i < n && p->budget > 0; i++) {
                struct request *r = s->candidates[i];
                /* with nothing latency-sensitive to protect, every decode runs: only
                 * prompt chunks are cut to the time */
                if (p->timed && p->latency_sensitive_present && !fits(p, r, 1))
                        break;
                if (!still_eligible(r, PICK_DECODES) || in_plan(s, r) || !grow_best_effort(p, r, 1, true))
                        continue;
                plan_chunk(p, r, 1);
                *planned = true;
        }
        n = collect(p, false, PICK_PROMPTS);
        for (uint32_t i = 0; i < n && p->budget > 0; i++) {
                int rc = plan_prompt(p, s->candidates[i], CHUNK_FIT);
                if (rc < 0)
                        return rc;
                if (rc == 0)
                        break; /* no time, seat or block left: the ones after it need the same */
                *planned = true;
        }
        return 0;
}

/* The starvation guard: the first best-effort request runs one chunk (a decode, or a
 * block of its prompt) whatever the time limit. */
static int force_best_effort(struct step_plan *p, bool *planned) {
        struct scheduler *s = p->s;
        for (enum pick pick = PICK_DECODES; pick <= PICK_PROMPTS; pick++) {
                uint32_t n = collect(p, false, pick);
                for (uint32_t i = 0; i < n && p->budget > 0; i++) {
                        struct request *r = s->candidates[i];
                        int rc;
                        if (pick == PICK_DECODES) {
                                if (!still_eligible(r, pick) || !grow_best_effort(p, r, 1, true))
                                        continue;
                                plan_chunk(p, r, 1);
                                rc = 1;
                        } else if ((rc = plan_prompt(p, r, CHUNK_ONE_BLOCK)) < 0)
                                return rc;
                        if (rc > 0) {
                                *planned = true;
                                return 0;
                        }
                }
        }
        return 0;
}

int slo_policy_schedule(struct scheduler *s, double now) {
        const struct engine_config *config = s->config;
        struct step_plan p = {
                .s = s,
                .now = now,
                .limit = config->default_ttft_slo / 4,
                .margin = step_time_model_margin(&s->model),
                .timed = step_time_model_ready(&s->model),
                .budget = config->max_num_batched_tokens,
        };
        p.aim = step_aim(&p);
        advance_aims(&p);
        bool best_effort_present = false, best_effort_planned = false;
        int rc;

        s->n_plan = 0;
        for (uint32_t i = 0; i < s->n_running + s->n_waiting; i++) {
                const struct request *r = i < s->n_running ? s->running[i] : s->waiting[i - s->n_running];
                if (r->class.latency_sensitive)
                        p.latency_sensitive_present = true;
                else
                        best_effort_present = true;
        }
        if ((rc = plan_latency_sensitive(&p)) < 0 || (rc = plan_best_effort(&p, &best_effort_planned)) < 0)
                return rc;
        /* A step with nothing in it would leave the engine spinning: the first best-effort
         * request runs a chunk whatever the time (a slow moment can make the margin refuse
         * everything). */
        if (best_effort_present && !best_effort_planned &&
            (s->n_plan == 0 || now - s->last_best_effort_run > config->default_ttft_slo) &&
            (rc = force_best_effort(&p, &best_effort_planned)) < 0)
                return rc;
        if (best_effort_planned || !best_effort_present)
                s->last_best_effort_run = now;

        /* every preemption is behind us: the planned chunks will run */
        for (uint32_t i = 0; i < s->n_plan; i++)
                scheduler_commit_chunk(s, &s->plan[i]);
        return 0;
}

/* Admission control */

static uint32_t output_left(const struct scheduler *s, const struct request *r) {
        uint32_t by_length = s->config->max_model_len - r->n_tokens;
        if (r->params.max_tokens == SAMPLING_MAX_TOKENS_NONE)
                return by_length;
        uint32_t by_max = (uint32_t) r->params.max_tokens - request_num_output(r);
        return by_max < by_length ? by_max : by_length;
}

/* A step of n latency-sensitive decodes alone (at this context each), from the steps of
 * the two largest counts below n that ran alone often enough to have factors of their own:
 * the larger count's price plus, for each decode more, what its last decode added. A step
 * of decodes reads the weights once and each decode adds its own products and reads, so
 * the cost is linear in their count; the fit's slope in decodes, taught by best-effort
 * decodes at long contexts, is not (it can price three short decodes at several times one).
 * NAN without them, or when the larger count's steps cost no more. */
static double extrapolated_step(const struct step_time_model *m, uint32_t n, uint64_t context) {
        double factor = step_time_model_decodes_alone_own_factor(m, n - 1);
        for (uint32_t k = n - 1; k >= 2; k--) {
                double below_factor = step_time_model_decodes_alone_own_factor(m, k - 1);
                if (!isnan(factor) && !isnan(below_factor)) {
                        struct step_shape larger = { .n_decode = k, .decode_context = k * context },
                                          smaller = { .n_decode = k - 1, .decode_context = (k - 1) * context };
                        double at_k = step_time_model_predict(m, &larger) * factor;
                        double below = step_time_model_predict(m, &smaller) * below_factor;
                        return at_k > below ? at_k + (n - k) * (at_k - below) : NAN;
                }
                factor = below_factor;
        }
        return NAN;
}

/* The price of a step of these latency-sensitive decodes alone: the fit's prediction times
 * their factor, but never more than a step of one of them (at their mean context) plus,
 * for each other, as much again or the fit's bound on one more decode, nor more than the
 * recent decode-only steps with best-effort work that carried more took, nor more than
 * steps of fewer decodes alone extrapolate to (extrapolated_step()), nor, until steps of
 * that many alone have run, more than the calibration at start makes of a step of one
 * (step_time_model_calibrated_decodes()). The fit's slope
 * in decodes swings for a few of them (best-effort decodes at long contexts teach it),
 * where one decode's price is pinned by the frequent steps of one; a batch costs at most
 * its sequences stepped one at a time, or a step that carries more. NAN when steps of
 * decodes alone are not known. */
static double decodes_alone_step(const struct step_time_model *m, const struct step_shape *decodes) {
        double price = step_time_model_predict(m, decodes) * step_time_model_decodes_alone_factor(m, decodes->n_decode);
        if (decodes->n_decode > 1) {
                uint64_t context = decodes->decode_context / decodes->n_decode;
                struct step_shape one = { .n_decode = 1, .decode_context = context };
                double one_factor = step_time_model_decodes_alone_factor(m, 1);
                double one_step = step_time_model_predict(m, &one) * one_factor;
                double extra = step_time_model_extra_decode_bound(m, context);
                if (isnan(extra) || extra > one_step)
                        extra = one_step;
                double bound = one_step + (decodes->n_decode - 1) * extra;
                if (bound < price)
                        price = bound;
                double extrapolated = extrapolated_step(m, decodes->n_decode, context);
                if (extrapolated < price)
                        price = extrapolated;
                if (isnan(step_time_model_decodes_alone_own_factor(m, decodes->n_decode))) {
                        struct step_shape at_calibration = { .n_decode = 1, .decode_context = m->calibration.context };
                        double calibrated = step_time_model_calibrated_decodes(
                                m, decodes->n_decode, one_step, step_time_model_predict(m, &at_calibration) * one_factor);
                        if (calibrated < price)
                                price = calibrated;
                }
        }
        double dominating = step_time_model_dominating_step(m, decodes);
        return dominating < price ? dominating : price;
}

/* Seconds for the prompt tokens ahead of (and including) a new request's, while the
 * latency-sensitive decodes keep their pace of one step per pace seconds. Each such step
 * costs the decodes' part (decodes_alone_step(), the fit's prediction while that is not
 * known), and the prompt gets what is left of it, priced with the general margin (its
 * steps carry prompt chunks); over T seconds the decodes take T / pace steps, so T =
 * prompt cost / (1 - decodes' step / pace), INFINITY when the decodes alone fill every
 * step. (Fitted step by step with the general margin on the whole step, a prompt beside
 * one decode paced at 1.5x its unloaded time was judged to get no token at all, "inf s",
 * where such steps left it a third of their time.) */
static double time_to_first_token(const struct scheduler *s, uint32_t n_prompt, const struct step_shape *decodes,
                                  double pace, double margin) {
        const struct step_time_model *m = &s->model;
        if (decodes->n_decode >= s->config->max_num_batched_tokens)
                return INFINITY;
        uint32_t per_step = s->config->max_num_batched_tokens - decodes->n_decode;
        if (decodes->n_decode > 0) {
                double decode_step = decodes_alone_step(m, decodes);
                if (isnan(decode_step))
                        decode_step = step_time_model_predict(m, decodes);
                if (decode_step >= pace)
                        return INFINITY;
                struct step_shape with = *decodes;
                with.n_prompt += n_prompt;
                with.prompt_context += step_shape_context(0, n_prompt);
                double prompt_cost = step_time_model_predict_added(m, decodes, &with) * margin;
                double seconds = prompt_cost / (1 - decode_step / pace);
                double by_budget = ceil((double) n_prompt / per_step) * pace; /* the token budget's steps */
                return seconds > by_budget ? seconds : by_budget;
        }
        double seconds = 0;
        for (uint32_t done = 0; done < n_prompt; done += per_step) {
                uint32_t chunk = n_prompt - done < per_step ? n_prompt - done : per_step;
                struct step_shape shape = { .n_prompt = chunk, .prompt_context = step_shape_context(done, chunk) };
                seconds += step_time_model_predict(m, &shape) * margin;
        }
        return seconds;
}

/* The shortest step ever run may be a calibration timed in a slow moment (a machine runs
 * slower for a while after heavy compute), and with nothing latency-sensitive admitted no
 * shorter step would ever run, so every request paced below it would be refused for the
 * daemon's life. So a request that only this floor refuses, with nothing else
 * latency-sensitive in the engine, is taken once per FLOOR_PROBE_INTERVAL seconds: its steps
 * of its decode alone show what the machine does now, and hurt no other request's. Not
 * below FLOOR_PROBE_RATIO of the floor, which no slow moment explains: such a pace is
 * refused at once. */
#define FLOOR_PROBE_INTERVAL 30.0
#define FLOOR_PROBE_RATIO 0.5

int slo_policy_admit(struct scheduler *s, struct request *r, double now, double *retry_after, struct error *err) {
        if (!step_time_model_ready(&s->model))
                return 0; /* nothing to judge by yet */
        double margin = step_time_model_margin(&s->model);
        double deadline = r->arrival_time + r->class.ttft_slo;

        /* every latency-sensitive request decoding at once, this one included */
        struct step_shape all = { .n_decode = 1, .decode_context = r->n_tokens + 1 };
        struct step_shape decoding = { 0 };
        double tightest = r->class.slo, soonest_end = INFINITY;
        uint32_t prompt_ahead = r->n_tokens, n_latency_sensitive = 1;
        for (uint32_t i = 0; i < s->n_running + s->n_waiting; i++) {
                const struct request *q = i < s->n_running ? s->running[i] : s->waiting[i - s->n_running];
                if (!q->class.latency_sensitive)
                        continue;
                n_latency_sensitive++;
                all.n_decode++;
                all.decode_context += q->n_tokens + 1;
                if (q->class.slo < tightest)
                        tightest = q->class.slo;
                if (q->state == REQUEST_RUNNING && request_is_decode(q)) {
                        decoding.n_decode++;
                        decoding.decode_context += q->n_tokens;
                        double end = output_left(s, q) * q->class.slo;
                        if (end < soonest_end)
                                soonest_end = end;
                } else if (q->arrival_time + q->class.ttft_slo <= deadline)
                        prompt_ahead += q->n_tokens - q->num_computed_tokens;
        }
        /* Judged at the pace the steps are planned at, so that an admitted request's deadlines
         * can all be planned for, with what such steps have taken against the fit (the
         * general margin, set by best-effort work, refused requests whose steps came well
         * within their slo). Without recent ones the request is taken: its steps show
         * what they cost, unless its pace is below the shortest step ever run. */
        double pace = tightest * SLO_PACE, step = decodes_alone_step(&s->model, &all);
        bool step_known = !isnan(step);
        if (!step_known)
                step = step_time_model_shortest_step(&s->model);
        double ttft = time_to_first_token(s, prompt_ahead, &decoding, pace, margin);
        bool ttft_fits = ttft <= deadline - now;
        if (step <= pace && ttft_fits)
                return 0;
        /* here with its first token in time only when the step is over the pace */
        if (!step_known && ttft_fits && step * FLOOR_PROBE_RATIO <= pace && n_latency_sensitive == 1 &&
            now - s->floor_probe_time >= FLOOR_PROBE_INTERVAL) {
                s->floor_probe_time = now;
                return 0;
        }

        if (s->config->slo_admission == SLO_ADMISSION_DEMOTE) {
                r->class.latency_sensitive = false;
                s->slo_demoted++;
                return 0;
        }
        s->slo_rejected++;
        double retry = isfinite(soonest_end) ? soonest_end : r->class.ttft_slo;
        retry = retry < 0.1 ? 0.1 : retry > 60 ? 60 : retry;
        if (retry_after)
                *retry_after = retry;
        if (step > pace && !step_known)
                return error_set(err, EAGAIN,
                                 "overloaded: no step has taken less than %.1f ms, above the %.1f ms the tightest slo "
                                 "of %.3f ms per token leaves; retry in %.1f s or send it best-effort",
                                 step * 1e3, pace * 1e3, tightest * 1e3, retry);
        if (step > pace)
                return error_set(err, EAGAIN,
                                 "overloaded: %u latency-sensitive requests would need about %.1f ms per step, above "
                                 "the %.1f ms the tightest slo of %.1f ms per token leaves; retry in %.1f s or send it "
                                 "best-effort",
                                 n_latency_sensitive, step * 1e3, pace * 1e3, tightest * 1e3, retry);
        /* judged from now, not from its arrival: it may have waited for the step in progress */
        return error_set(err, EAGAIN,
                         "overloaded: the first token would come after about %.2f s more, above the %.2f s left of "
                         "ttft_slo %.2f s (%u prompt tokens to compute first); retry in %.1f s, raise ttft_slo or send "
                         "it best-effort",
                         ttft, deadline - now, r->class.ttft_slo, prompt_ahead, retry);
}
