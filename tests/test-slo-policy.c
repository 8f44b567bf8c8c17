/* SPDX-License-Identifier: MIT */
/* The slo policy on a synthetic clock and a step-time model taught a known cost: the
 * model's fit, margin and error, and its stability over a daemon's step trace; the order
 * a step is filled in (latency-sensitive decodes, their prompts by deadline, then
 * best-effort work sized to the time left); slack; the KV reserve and eviction; admission
 * control (reject, demote, the retry hint); the starvation guard. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler-internal.h"

#define BLOCK 16
#define VOCAB 1000

/* The cost the synthetic engine's steps follow. */
#define BASE 0.010
#define PER_PROMPT 0.0005
#define PER_DECODE 0.002

static double true_cost(const struct step_shape *s) {
        return BASE + PER_PROMPT * s->n_prompt + PER_DECODE * s->n_decode;
}

struct harness {
        struct engine_config config;
        struct kv_blocks *kv;
        struct scheduler s;
        struct request *requests[32];
        uint32_t n_requests;
        uint64_t next_order;
};

static void setup(struct harness *h, uint32_t n_blocks, double reserve) {
        struct error err;
        memset(h, 0, sizeof(*h));
        engine_config_init_default(&h->config);
        h->config.scheduling_policy = SCHEDULING_SLO;
        h->config.max_model_len = 8192;
        h->config.block_size = BLOCK;
        h->config.slo_kv_reserve = reserve;
        h->config.slo_aim_factor = 0; /* deadlines alone; the aim has tests of its own */
        ck_assert_int_eq(kv_blocks_new(n_blocks, BLOCK, true, &h->kv, &err), 0);
        ck_assert_int_eq(scheduler_init(&h->s, &h->config, h->kv, &err), 0);
}

static void teardown(struct harness *h) {
        for (uint32_t i = 0; i < h->n_requests; i++) {
                scheduler_remove(&h->s, h->requests[i]);
                request_free(h->requests[i]);
        }
        scheduler_done(&h->s);
        kv_blocks_free(h->kv);
}

/* Teaches the model the true cost with steps of varied shapes, a quarter of them decodes
 * alone. */
static void warm(struct scheduler *s) {
        srand(7);
        for (int i = 0; i < 200; i++) {
                struct step_shape shape = { .n_prompt = i % 4 ? (uint32_t) (rand() % 300) : 0,
                                            .n_decode = (uint32_t) (1 + rand() % 20) };
                step_time_model_record(&s->model, &shape, true_cost(&shape));
        }
}

/* A request with distinct tokens (no prefix-cache sharing between requests). */
static struct request *make(struct harness *h, bool latency_sensitive, uint32_t n_prompt, double slo, double ttft_slo,
                            double arrival) {
        struct sampling_params params;
        struct error err;
        int32_t *prompt = malloc(n_prompt * sizeof(*prompt));
        for (uint32_t i = 0; i < n_prompt; i++)
                prompt[i] = (int32_t) ((h->next_order * 97 + i) % VOCAB);
        sampling_params_init_default(&params);
        params.max_tokens = 100;
        struct request_spec spec = {
                .id = "r", .prompt = prompt, .n_prompt = n_prompt, .params = params,
                .class = { .latency_sensitive = latency_sensitive, .slo = slo, .ttft_slo = ttft_slo },
                .arrival_time = arrival,
        };
        struct request *r;
        ck_assert_int_eq(request_spec_own(&spec), 0);
        ck_assert_int_eq(request_new(&spec, h->next_order++, VOCAB, 1, &r, &err), 0);
        free(prompt);
        h->requests[h->n_requests++] = r;
        return r;
}

static struct request *add(struct harness *h, bool latency_sensitive, uint32_t n_prompt, double slo, double ttft_slo,
                           double arrival) {
        struct request *r = make(h, latency_sensitive, n_prompt, slo, ttft_slo, arrival);
        ck_assert_int_eq(scheduler_add(&h->s, r), 0);
        return r;
}

/* Runs the plan as the engine would: tokens computed, a token sampled at each prompt's end. */
static void run_plan(struct harness *h, double now) {
        for (uint32_t i = 0; i < h->s.n_plan; i++) {
                struct request *r = h->s.plan[i].req;
                r->num_computed_tokens += h->s.plan[i].n_tokens;
                if (r->num_computed_tokens == r->n_tokens) {
                        struct sample_result sample = { .token = 1 };
                        ck_assert_int_eq(request_append(r, &sample), 0);
                        if (!r->first_token_time)
                                r->first_token_time = now;
                        r->last_token_time = now;
                }
        }
}

/* A running request that has produced n_out tokens, the first at first_token_time, and now
 * decodes. */
static struct request *add_decoding(struct harness *h, bool latency_sensitive, uint32_t n_prompt, double slo,
                                    double first_token_time, uint32_t n_out) {
        struct request *r = add(h, latency_sensitive, n_prompt, slo, 1.0, first_token_time - 0.1);
        ck_assert_ptr_eq(h->s.waiting[h->s.n_waiting - 1], r);
        scheduler_admit(&h->s, h->s.n_waiting - 1, 0);
        h->s.n_plan = 0;
        ck_assert_int_eq(kv_blocks_allocate(h->kv, &r->blocks, n_prompt + n_out), 0);
        for (uint32_t i = 0; i < n_out; i++) {
                struct sample_result sample = { .token = 2 };
                ck_assert_int_eq(request_append(r, &sample), 0);
        }
        r->num_computed_tokens = r->n_tokens - 1;
        r->first_token_time = first_token_time;
        return r;
}

static uint32_t planned(const struct scheduler *s, const struct request *r) {
        for (uint32_t i = 0; i < s->n_plan; i++)
                if (s->plan[i].req == r)
                        return s->plan[i].n_tokens;
        return 0;
}

static uint32_t position(const struct scheduler *s, const struct request *r) {
        for (uint32_t i = 0; i < s->n_plan; i++)
                if (s->plan[i].req == r)
                        return i;
        return UINT32_MAX;
}

/* Teaches m the true cost with +-5% noise on steps of varied shapes. */
static void record_noisy(struct step_time_model *m, int n_steps, double slowdown) {
        for (int i = 0; i < n_steps; i++) {
                struct step_shape s = { .n_prompt = (uint32_t) (rand() % 512), .n_decode = (uint32_t) (rand() % 32) };
                double noise = 1 + 0.1 * ((double) rand() / RAND_MAX - 0.5);
                step_time_model_record(m, &s, true_cost(&s) * noise * slowdown);
        }
}

START_TEST(test_model_fits_and_reports_error) {
        struct step_time_model m;
        step_time_model_init(&m);
        struct step_shape probe = { .n_prompt = 100, .n_decode = 4 };
        ck_assert(!step_time_model_ready(&m));
        ck_assert_double_eq(step_time_model_error(&m, 0.99), 0);
        ck_assert_double_eq(step_time_model_margin(&m), 1.25); /* nothing known: careful */
        ck_assert(isnan(step_time_model_decodes_alone_factor(&m, 1))); /* none of them known */
        srand(3);
        for (int i = 0; i < 300; i++) {
                struct step_shape s = { .n_prompt = (uint32_t) (rand() % 512), .n_decode = (uint32_t) (rand() % 32),
                                        .prompt_context = (uint64_t) (rand() % 100000),
                                        .decode_context = (uint64_t) (rand() % 20000) };
                /* a decode's read costs more than a prompt chunk's: the model prices them apart */
                double t = true_cost(&s) + 1e-8 * (double) s.prompt_context + 5e-8 * (double) s.decode_context;
                step_time_model_record(&m, &s, t);
        }
        ck_assert(step_time_model_ready(&m));
        double predicted = step_time_model_predict(&m, &probe), truth = true_cost(&probe);
        ck_assert_msg(fabs(predicted - truth) < 0.01 * truth, "predicted %g for %g", predicted, truth);
        ck_assert_double_lt(step_time_model_error(&m, 0.99), 0.01);
        ck_assert_double_lt(step_time_model_margin(&m), 1.01);

        /* noisy steps: the margin covers the under-predictions */
        record_noisy(&m, 300, 1);
        double margin = step_time_model_margin(&m);
        ck_assert_msg(margin > 1.02 && margin < 1.1, "margin %g", margin);
        ck_assert_double_lt(step_time_model_error(&m, 0.99), 0.08);
        ck_assert_double_gt(step_time_model_error(&m, 0.99), step_time_model_error(&m, 0.5));

        /* steps of latency-sensitive decodes alone 30% faster than best-effort decode steps
         * of the same shapes (the fit cannot tell them apart): they are predicted and priced
         * that much lower (their kind's speed and their factor), and the general margin
         * stays at 1 */
        for (int i = 0; i < 200; i++) {
                struct step_shape s = { .n_decode = 1 + (uint32_t) (rand() % 8) };
                bool alone = i % 4 == 0;
                s.n_best_effort = alone ? 0 : s.n_decode;
                step_time_model_record(&m, &s, true_cost(&s) * (alone ? 0.7 : 1));
        }
        struct step_shape one = { .n_decode = 1 };
        double one_predicted = step_time_model_predict(&m, &one);
        ck_assert_msg(one_predicted < 0.8 * true_cost(&one), "one decode alone predicted at %g for %g", one_predicted,
                      0.7 * true_cost(&one));
        double priced = one_predicted * step_time_model_decodes_alone_factor(&m, 1);
        ck_assert_msg(fabs(priced - 0.7 * true_cost(&one)) < 0.07 * true_cost(&one), "priced at %g for %g", priced,
                      0.7 * true_cost(&one));
        ck_assert_double_ge(step_time_model_margin(&m), 1.0);

        /* a step that took no time or an impossible time teaches nothing */
        uint64_t n = m.n_samples;
        step_time_model_record(&m, &probe, 0);
        step_time_model_record(&m, &probe, NAN);
        ck_assert_uint_eq(m.n_samples, n);
}
END_TEST

/* Each kind of step keeps a speed of its own, learned from its latest steps: when decode
 * steps slow down (as the machine drifts, or their reads meet other traffic), their
 * predictions follow within a few steps, while those of prompt chunks stay where they were. */
START_TEST(test_model_follows_each_kinds_speed) {
        struct step_time_model m;
        step_time_model_init(&m);
        srand(41);
        record_noisy(&m, 300, 1);
        struct step_shape decodes = { .n_decode = 6, .n_best_effort = 6 }, chunk = { .n_prompt = 300, .n_decode = 6 };
        for (int i = 0; i < 100; i++) {
                struct step_shape s = decodes;
                if (i % 2)
                        s = chunk;
                step_time_model_record(&m, &s, true_cost(&s));
        }
        double fitted = step_time_model_fit(&m, &decodes);
        for (int i = 0; i < 10; i++)
                step_time_model_record(&m, &decodes, true_cost(&decodes) * 1.4);
        double predicted = step_time_model_predict(&m, &decodes);
        ck_assert_msg(fabs(predicted - 1.4 * true_cost(&decodes)) < 0.05 * true_cost(&decodes), "decodes predicted at %g for %g",
                      predicted, 1.4 * true_cost(&decodes));
        /* the fit itself has moved far less: the speed did the following */
        ck_assert_double_lt(step_time_model_fit(&m, &decodes), fitted * 1.2);
        predicted = step_time_model_predict(&m, &chunk);
        ck_assert_msg(fabs(predicted - true_cost(&chunk)) < 0.03 * true_cost(&chunk), "chunk predicted at %g for %g",
                      predicted, true_cost(&chunk));
}
END_TEST

/* A fit that has swung to nothing for some shapes (seen in a daemon after thousands of
 * one-decode steps) neither prices a whole prompt at nothing, which would let the planner
 * run it in one step, nor teaches its kind a speed of hundreds. */
START_TEST(test_model_floor_and_speed_bound) {
        struct step_time_model m;
        step_time_model_init(&m);
        srand(43);
        record_noisy(&m, 300, 1);
        struct step_shape chunk = { .n_prompt = 1000, .n_decode = 4 }, one = { .n_decode = 1 };
        double shortest = step_time_model_shortest_step(&m);
        memset(m.theta, 0, sizeof(m.theta)); /* the fit collapsed */
        double predicted = step_time_model_predict(&m, &chunk);
        /* at least half of what its tokens cost at the cheapest rate seen (~0.52 ms a token
         * in 511-token steps) */
        ck_assert_msg(predicted > 0.25 && predicted < true_cost(&chunk), "a 1000-token chunk predicted at %g", predicted);
        ck_assert_double_eq(step_time_model_predict(&m, &one), shortest);
        m.theta[0] = 1e-6; /* a fit that prices every step at a microsecond */
        for (int i = 0; i < 8; i++) /* outliers at first, then learned from */
                step_time_model_record(&m, &one, true_cost(&one));
        ck_assert_msg(m.log_speed[0] <= log(3.0) + 1e-9, "its kind's speed went to %g", exp(m.log_speed[0]));
        ck_assert_double_gt(m.log_speed[0], 0); /* it did learn that the steps are slower */
}
END_TEST

START_TEST(test_model_outliers) {
        struct step_time_model m;
        step_time_model_init(&m);
        struct step_shape probe = { .n_prompt = 100, .n_decode = 4 };
        srand(5);
        record_noisy(&m, 300, 1);
        double clean_margin = step_time_model_margin(&m);
        ck_assert_double_lt(clean_margin, 1.1);

        /* one step in five descheduled to 4x its time, in bursts of up to three: more than
         * the margin's 90th percentile can leave out, so counted, they would push the
         * margin to its cap (2) and drag the fit up */
        for (int i = 0; i < 300; i++) {
                struct step_shape s = { .n_prompt = (uint32_t) (rand() % 512), .n_decode = (uint32_t) (rand() % 32) };
                double noise = 1 + 0.1 * ((double) rand() / RAND_MAX - 0.5);
                bool descheduled = i % 20 < 3 || i % 20 == 10;
                step_time_model_record(&m, &s, true_cost(&s) * noise * (descheduled ? 4 : 1));
        }
        double margin = step_time_model_margin(&m);
        ck_assert_msg(margin < 1.1, "margin %g", margin);
        double predicted = step_time_model_predict(&m, &probe), truth = true_cost(&probe);
        ck_assert_msg(fabs(predicted - truth) < 0.03 * truth, "predicted %g for %g", predicted, truth);
        /* the reported error still counts every step: a fifth of them are 75% off */
        ck_assert_double_gt(step_time_model_error(&m, 0.99), 0.7);
        ck_assert_double_lt(step_time_model_error(&m, 0.5), 0.05);

        /* a machine that has become 4x slower for good: after a few steps they are not
         * outliers any more, and the model learns from them: each kind's speed within a few
         * steps of its own, up to its bound (3x the fit), and the fit the rest, more slowly;
         * the margin covers what is left and is not at its cap */
        uint64_t learned = m.n_samples;
        record_noisy(&m, 100, 4);
        ck_assert_uint_ge(m.n_samples - learned, 95);
        predicted = step_time_model_predict(&m, &probe);
        ck_assert_msg(predicted > 3 * truth && predicted < 4.4 * truth, "predicted %g for %g", predicted, 4 * truth);
        margin = step_time_model_margin(&m);
        ck_assert_msg(margin < 1.5, "margin %g", margin);
}
END_TEST

START_TEST(test_fill_order_and_deadlines) {
        struct harness h;
        setup(&h, 512, 0);
        double now = 100.0;
        /* two latency-sensitive decodes (slo 50 ms): one right on time, due 29 ms from now
         * (30 less the policy's 2% lead on its slo),
         * one ahead of schedule; a best-effort decode; a latency-sensitive prompt; a
         * best-effort prompt */
        struct request *tight = add_decoding(&h, true, 32, 0.050, now - 0.020, 1);
        struct request *ahead = add_decoding(&h, true, 32, 0.050, now + 1.0, 1);
        struct request *be_decode = add_decoding(&h, false, 32, 0, now - 1, 1);
        warm(&h.s);
        struct request *be_prompt = add(&h, false, 1000, 0, 0, now - 5);
        struct request *ls_prompt = add(&h, true, 64, 0.050, 1.0, now);
        h.s.last_best_effort_run = now; /* best-effort work ran just now: no nudge due */

        ck_assert_int_eq(scheduler_schedule(&h.s, now), 0);
        /* 29 ms: 10 ms + 2 x 2 ms of decodes leave 15 ms, 30 prompt tokens of the
         * latency-sensitive prompt; nothing best-effort fits */
        ck_assert_uint_eq(planned(&h.s, tight), 1);
        ck_assert_uint_eq(planned(&h.s, ahead), 1);
        ck_assert_uint_ge(planned(&h.s, ls_prompt), 29); /* 30 exactly on the boundary: rounding */
        ck_assert_uint_le(planned(&h.s, ls_prompt), 30);
        ck_assert_uint_eq(planned(&h.s, be_decode), 0);
        ck_assert_uint_eq(planned(&h.s, be_prompt), 0);
        ck_assert_uint_lt(position(&h.s, tight), position(&h.s, ls_prompt));
        ck_assert_int_eq(be_prompt->state, REQUEST_WAITING);
        ck_assert_uint_eq(be_decode->blocks.n, 3); /* waits with its blocks */
        ck_assert_uint_eq(h.s.plan_shape.n_decode, 2);
        ck_assert_uint_eq(h.s.plan_shape.n_prompt, planned(&h.s, ls_prompt));
        teardown(&h);
}
END_TEST

START_TEST(test_slack_lets_best_effort_in) {
        struct harness h;
        setup(&h, 512, 0);
        double now = 100.0;
        /* the first token came 2 s ago and 1 token is out: token 1 is due at -1.95 s + ...
         * i.e. this request is far ahead: its next deadline is 198 ms away (100 + 98, the
         * slo less the policy's 2% lead) */
        struct request *ls = add_decoding(&h, true, 32, 0.100, now + 0.100, 1);
        struct request *be_decode = add_decoding(&h, false, 32, 0, now - 1, 1);
        warm(&h.s);
        struct request *be_prompt = add(&h, false, 1000, 0, 0, now - 5);

        ck_assert_int_eq(scheduler_schedule(&h.s, now), 0);
        /* the limit is min(198 ms of slack, 250 ms = ttft_slo / 4): 10 + 2 + 2 ms of decodes
         * leave 184 ms, 368 prompt tokens */
        ck_assert_uint_eq(planned(&h.s, ls), 1);
        ck_assert_uint_eq(planned(&h.s, be_decode), 1);
        uint32_t chunk = planned(&h.s, be_prompt);
        ck_assert_msg(chunk >= 366 && chunk <= 368, "chunk %u", chunk);
        ck_assert_uint_lt(position(&h.s, ls), position(&h.s, be_decode));
        ck_assert_uint_lt(position(&h.s, be_decode), position(&h.s, be_prompt));
        /* the step's shape counts its best-effort requests (their errors set the general
         * margin, not that of latency-sensitive decodes alone) */
        ck_assert_uint_eq(h.s.plan_shape.n_best_effort, 2);
        ck_assert_uint_eq(h.s.plan_shape.n_decode, 2);

        /* with nothing latency-sensitive, best-effort steps still end within a quarter of the
         * default ttft_slo, so that an arrival waits little */
        scheduler_remove(&h.s, ls);
        run_plan(&h, now);
        ck_assert_int_eq(scheduler_schedule(&h.s, now + 0.2), 0);
        double predicted = step_time_model_predict(&h.s.model, &h.s.plan_shape);
        ck_assert_double_le(predicted, h.config.default_ttft_slo / 4 + 1e-9);
        ck_assert_double_ge(predicted, h.config.default_ttft_slo / 4 - 0.002);
        teardown(&h);
}
END_TEST

START_TEST(test_prompts_by_earliest_deadline) {
        struct harness h;
        setup(&h, 512, 0);
        double now = 50.0;
        struct request *decode = add_decoding(&h, true, 16, 0.050, now - 0.020, 1); /* due in 29 ms */
        warm(&h.s);
        struct request *late = add(&h, true, 64, 0.050, 2.0, now);   /* first token due in 2 s */
        struct request *early = add(&h, true, 64, 0.050, 0.5, now); /* in 0.5 s, arrived after */
        ck_assert_int_eq(scheduler_schedule(&h.s, now), 0);
        ck_assert_uint_eq(planned(&h.s, decode), 1);
        ck_assert_uint_ge(planned(&h.s, early), 33); /* 29 - 12 ms = 17 ms = 34 tokens */
        ck_assert_uint_le(planned(&h.s, early), 34);
        /* the later one gets no time, only its share of its prompt per step until its own
         * deadline: 64 tokens over the ~60 steps of 29 ms in 2 s */
        ck_assert_uint_le(planned(&h.s, late), 2);
        ck_assert_uint_lt(position(&h.s, early), position(&h.s, late));
        teardown(&h);
}
END_TEST

START_TEST(test_prompt_paced_to_its_deadline) {
        struct harness h;
        setup(&h, 512, 0);
        double now = 50.0;
        struct request *decode = add_decoding(&h, true, 16, 0.050, now - 0.037, 1); /* due in 12 ms */
        warm(&h.s);
        h.s.last_best_effort_run = now;
        /* due in 0.1 s with 64 tokens: no room beside the decode (its 12 ms), but only
         * about 8 steps of 12 ms left, so it takes an eighth of its prompt now */
        struct request *due = add(&h, true, 64, 0.050, 0.1, now);
        ck_assert_int_eq(scheduler_schedule(&h.s, now), 0);
        ck_assert_uint_eq(planned(&h.s, decode), 1);
        uint32_t n = planned(&h.s, due);
        ck_assert_msg(n >= 7 && n <= 10, "chunk %u", n);
        teardown(&h);
}
END_TEST

/* When the test's copy of the policy's deadline rule says r's next token is due. */
static double due(const struct request *r) {
        uint32_t n_out = request_num_output(r);
        return n_out == 0 ? r->arrival_time + r->class.ttft_slo : r->first_token_time + n_out * r->class.slo;
}

/* Runs the plan of one step that takes its true cost from now; checks that every
 * latency-sensitive token it brings is on time. Returns the step's end. */
static double run_step_on_time(struct harness *h, double now) {
        double end = now + true_cost(&h->s.plan_shape);
        for (uint32_t i = 0; i < h->s.n_plan; i++) {
                const struct request *r = h->s.plan[i].req;
                if (r->class.latency_sensitive && r->num_computed_tokens + h->s.plan[i].n_tokens == r->n_tokens)
                        ck_assert_msg(end <= due(r) + 1e-6, "a token due at %.4f came at %.4f", due(r), end);
        }
        run_plan(h, end);
        return end;
}

START_TEST(test_best_effort_chunks_in_gaps) {
        struct harness h;
        setup(&h, 512, 0);
        double now = 40.0;
        /* two latency-sensitive decodes at 20 ms a token (planned at 19.6) and a best-effort
         * one: a step of the three costs 16 ms, so each step beside them had room for 3.6 ms
         * (7 tokens) of a best-effort prompt */
        add_decoding(&h, true, 32, 0.020, now, 1);
        add_decoding(&h, true, 48, 0.020, now, 1);
        add_decoding(&h, false, 40, 0, now - 1, 1);
        warm(&h.s);
        struct request *be = add(&h, false, 2000, 0, 0, now - 1);
        h.s.last_best_effort_run = now;
        uint32_t be_tokens = 0, n_chunks = 0;
        bool arrived = false;
        for (double start = now; now < start + 1.0;) {
                if (!arrived && now >= start + 0.5) { /* a latency-sensitive prompt arrives */
                        add(&h, true, 64, 0.020, 0.3, now);
                        arrived = true;
                }
                ck_assert_int_eq(scheduler_schedule(&h.s, now), 0);
                uint32_t chunk = planned(&h.s, be);
                /* a chunk comes only once the decodes have banked the slack for a big one */
                ck_assert_msg(chunk == 0 || chunk >= 32, "a best-effort chunk of %u tokens at %.3f", chunk,
                              now - start);
                be_tokens += chunk;
                n_chunks += chunk > 0;
                now = run_step_on_time(&h, now);
        }
        ck_assert(arrived);
        /* about as far as the dribble got (286 tokens in 46 chunks with 4 ms a step, before
         * the 2% lead; this policy gets 246 with 3.6 ms): the latency-sensitive decodes need
         * a step per token period either way, so in this linear cost model bigger chunks
         * neither gain nor lose (they lose a little to rounding); what they save is what
         * small chunks cost beyond the model on the machine */
        ck_assert_msg(be_tokens >= 225, "%u best-effort prompt tokens in 1 s", be_tokens);
        ck_assert_msg(n_chunks >= 6 && n_chunks <= 12, "%u chunks", n_chunks);
        teardown(&h);
}
END_TEST

/* One latency-sensitive decode with a loose slo (1 s a token) beside a best-effort decode
 * and prompt for a second, with the aim off (0) or at factor; returns its time per output
 * token and sets *be_tokens to the best-effort prompt tokens planned, *be_decodes to the
 * best-effort decodes. */
static double run_loose_slo(double factor, uint32_t *be_tokens, uint32_t *be_decodes) {
        struct harness h;
        setup(&h, 512, 0);
        h.config.slo_aim_factor = factor;
        double now = 30.0;
        struct request *ls = add_decoding(&h, true, 32, 1.0, now, 1);
        struct request *be_decoding = add_decoding(&h, false, 40, 0, now - 1, 1);
        warm(&h.s);
        struct request *be = add(&h, false, 4000, 0, 0, now - 1);
        h.s.last_best_effort_run = now;
        *be_tokens = 0;
        *be_decodes = 0;
        for (double start = now; now < start + 1.0;) {
                ck_assert_int_eq(scheduler_schedule(&h.s, now), 0);
                ck_assert_uint_eq(planned(&h.s, ls), 1);
                *be_tokens += planned(&h.s, be);
                *be_decodes += planned(&h.s, be_decoding);
                now = run_step_on_time(&h, now);
        }
        double tpot = (ls->last_token_time - ls->first_token_time) / (request_num_output(ls) - 1);
        teardown(&h);
        return tpot;
}

START_TEST(test_aim_paces_a_loose_slo) {
        uint32_t at_slo, aimed, decodes;
        /* by its deadlines alone a step may run to the cap (250 ms): a token per ~250 ms */
        double tpot = run_loose_slo(0, &at_slo, &decodes);
        ck_assert_msg(tpot > 0.2, "TPOT %.4f s with the aim off", tpot);
        /* aimed at 2 x its own step (10 + 2 ms): a token every 24 ms, each step pair being a
         * decode step (with the best-effort decode: 14 ms) and one with 40 prompt tokens in
         * the 20 ms the first left, 833 tokens a second; 1890 without the aim */
        tpot = run_loose_slo(2, &aimed, &decodes);
        ck_assert_msg(tpot <= 0.024 + 1e-6, "TPOT %.4f s aimed at 24 ms", tpot);
        ck_assert_msg(aimed >= 780 && aimed <= 860, "%u best-effort prompt tokens aimed", aimed);
        ck_assert_msg(at_slo >= 1800, "%u best-effort prompt tokens at the slo", at_slo);
}
END_TEST

/* The default aim holds a latency-sensitive request to within 1.05x its step alone (the
 * issue asks 1.1x of its time per token served alone), and best-effort work still moves:
 * its decode rides along whenever the 0.6 ms banked a step cover the 2 ms it adds (every
 * third or fourth step: 24 in the second, beside 79 latency-sensitive tokens). */
START_TEST(test_default_aim_stays_near_alone) {
        struct engine_config defaults;
        engine_config_init_default(&defaults);
        ck_assert_double_eq(defaults.slo_aim_factor, 1.05);
        uint32_t prompt_tokens, decodes;
        double tpot = run_loose_slo(defaults.slo_aim_factor, &prompt_tokens, &decodes);
        ck_assert_msg(tpot <= 1.05 * 0.012 + 1e-6, "TPOT %.4f s where a step alone takes 12 ms", tpot);
        ck_assert_msg(decodes >= 20 && decodes <= 28, "%u best-effort decodes in 1 s", decodes);
}
END_TEST

/* The best-effort prompt chunk planned beside n latency-sensitive decodes (at slo, the
 * first token just out) aimed at factor 3. */
static uint32_t chunk_beside_aimed(uint32_t n, double slo) {
        struct harness h;
        setup(&h, 512, 0);
        h.config.slo_aim_factor = 3;
        double now = 20.0;
        for (uint32_t i = 0; i < n; i++)
                add_decoding(&h, true, 32, slo, now, 1);
        warm(&h.s);
        struct request *be = add(&h, false, 1000, 0, 0, now - 1);
        h.s.last_best_effort_run = now;
        ck_assert_int_eq(scheduler_schedule(&h.s, now), 0);
        ck_assert_uint_eq(h.s.plan_shape.n_decode, n);
        uint32_t chunk = planned(&h.s, be);
        teardown(&h);
        return chunk;
}

START_TEST(test_aim_grows_with_the_decodes) {
        /* one with a loose slo: a step of it alone costs 12 ms, so its next token is aimed
         * 36 ms from now, which leaves 24 ms (48 tokens) for a best-effort prompt */
        uint32_t chunk = chunk_beside_aimed(1, 1.0);
        ck_assert_msg(chunk >= 47 && chunk <= 48, "chunk %u", chunk);
        /* four: their step alone costs 18 ms, and best-effort work still gets 2 x the 12 ms
         * of one decode's step, not 2 x their 18 */
        chunk = chunk_beside_aimed(4, 1.0);
        ck_assert_msg(chunk >= 47 && chunk <= 48, "chunk %u", chunk);
        /* four again, but their slo (30 ms, planned at 29.4) is sooner than the aim (42):
         * 11.4 ms left, no chunk */
        ck_assert_uint_eq(chunk_beside_aimed(4, 0.030), 0);
}
END_TEST

START_TEST(test_aim_debt_is_bounded) {
        struct harness h;
        setup(&h, 512, 0);
        h.config.slo_aim_factor = 2;
        double now = 10.0;
        /* three tokens out, the first a second ago: aimed 24 ms apart, the third was aimed
         * at 0.95 s ago. Only four aims (96 ms) of that are caught up: the next token is
         * aimed 72 ms ago, and each step of the latency-sensitive decode alone (12 ms)
         * gains 12 ms on an aim (24), so the ninth step is the first that may last the
         * 14 ms both decodes take (-72 + 8 x 12 = 24 ms left) */
        struct request *ls = add_decoding(&h, true, 32, 1.0, now - 1.0, 3);
        ls->last_token_time = now;
        struct request *be = add_decoding(&h, false, 40, 0, now - 1, 1);
        warm(&h.s);
        h.s.last_best_effort_run = now;
        uint32_t alone = 0;
        for (;;) {
                ck_assert_int_eq(scheduler_schedule(&h.s, now), 0);
                ck_assert_uint_eq(planned(&h.s, ls), 1);
                if (planned(&h.s, be))
                        break;
                alone++;
                h.s.last_best_effort_run = now; /* keep the starvation guard out of it */
                now = run_step_on_time(&h, now);
                ck_assert_uint_lt(alone, 80);
        }
        ck_assert_uint_eq(alone, 8);
        teardown(&h);
}
END_TEST

START_TEST(test_best_effort_prompt_end_runs_beside_decodes) {
        struct harness h;
        setup(&h, 512, 0);
        double now = 70.0;
        struct request *ls = add_decoding(&h, true, 32, 0.020, now, 1); /* due in 20 ms */
        warm(&h.s);
        /* 8 tokens end the prompt: no bigger chunk is to be had by waiting (12 + 4 ms) */
        struct request *be = add(&h, false, 8, 0, 0, now - 1);
        ck_assert_int_eq(scheduler_schedule(&h.s, now), 0);
        ck_assert_uint_eq(planned(&h.s, ls), 1);
        ck_assert_uint_eq(planned(&h.s, be), 8);
        teardown(&h);
}
END_TEST

START_TEST(test_prompt_end_bounds_the_step) {
        struct harness h;
        setup(&h, 512, 0);
        double now = 60.0;
        warm(&h.s);
        struct request *be = add(&h, false, 1000, 0, 0, now - 5);
        /* no decodes to protect, but the whole prompt runs now and its first token is due
         * in 100 ms, planned for 90 (TTFT_PACE): best-effort work fills the step up to that,
         * not up to the cap (250 ms) */
        struct request *ls = add(&h, true, 64, 0.050, 0.1, now);
        ck_assert_int_eq(scheduler_schedule(&h.s, now), 0);
        ck_assert_uint_eq(planned(&h.s, ls), 64);
        uint32_t chunk = planned(&h.s, be); /* 90 - 10 - 32 ms: 96 tokens */
        ck_assert_msg(chunk >= 94 && chunk <= 96, "chunk %u", chunk);
        double predicted = step_time_model_predict(&h.s.model, &h.s.plan_shape);
        ck_assert_double_le(predicted * step_time_model_margin(&h.s.model), 0.09 + 1e-9);
        teardown(&h);
}
END_TEST

START_TEST(test_reserve_and_eviction) {
        struct harness h;
        setup(&h, 20, 0.25); /* 5 blocks kept for latency-sensitive work */
        ck_assert_uint_eq(h.s.reserve_blocks, 5);
        double now = 10.0;
        warm(&h.s);
        /* best-effort prompts: 10 blocks, then 6 more would leave 4 free: it waits */
        struct request *be1 = add(&h, false, 160, 0, 0, now - 2);
        struct request *be2 = add(&h, false, 96, 0, 0, now - 1);
        ck_assert_int_eq(scheduler_schedule(&h.s, now), 0);
        ck_assert_uint_eq(planned(&h.s, be1), 160);
        ck_assert_uint_eq(planned(&h.s, be2), 0);
        ck_assert_int_eq(be2->state, REQUEST_WAITING);
        ck_assert_uint_eq(kv_blocks_n_free(h.kv), 10);
        run_plan(&h, now);

        /* a latency-sensitive prompt of 12 blocks: the reserve is not enough, so the
         * best-effort request is evicted (to recompute later) */
        struct request *ls = add(&h, true, 192, 0.5, 5.0, now);
        ck_assert_int_eq(scheduler_schedule(&h.s, now + 0.1), 0);
        ck_assert_uint_eq(planned(&h.s, ls), 192);
        ck_assert_int_eq(be1->state, REQUEST_WAITING);
        ck_assert_uint_eq(be1->num_computed_tokens, 0);
        ck_assert_uint_eq(be1->n_preemptions, 1);
        teardown(&h);
}
END_TEST

START_TEST(test_best_effort_alone_may_use_the_reserve) {
        struct harness h;
        setup(&h, 10, 0.5);
        warm(&h.s);
        /* 6 blocks of prompt, then growth into the reserve: nothing latency-sensitive is
         * there and nothing younger could make room, so it is not stuck */
        struct request *be = add_decoding(&h, false, 96, 0, 1.0, 1);
        ck_assert_uint_eq(kv_blocks_n_free(h.kv), 3);
        for (int i = 0; i < 40 && be->n_tokens < 130; i++) {
                ck_assert_int_eq(scheduler_schedule(&h.s, 2.0 + i), 0);
                ck_assert_uint_eq(planned(&h.s, be), 1);
                run_plan(&h, 2.0 + i);
        }
        ck_assert_uint_ge(be->blocks.n, 8);
        teardown(&h);
}
END_TEST

START_TEST(test_admission) {
        struct harness h;
        struct error err;
        double retry = -1;
        setup(&h, 512, 0);
        double now = 20.0;

        /* nothing to judge by yet: everything is taken */
        struct request *r = make(&h, true, 32, 0.001, 0.001, now);
        ck_assert_int_eq(slo_policy_admit(&h.s, r, now, &retry, &err), 0);
        ck_assert(r->class.latency_sensitive);

        warm(&h.s);
        /* one decode step costs 12 ms (x the margin): an slo of 5 ms cannot be met */
        r = make(&h, true, 32, 0.005, 1.0, now);
        ck_assert_int_eq(slo_policy_admit(&h.s, r, now, &retry, &err), -EAGAIN);
        ck_assert_msg(strstr(err.message, "overloaded") && strstr(err.message, "slo"), "%s", err.message);
        ck_assert_double_ge(retry, 0.1);
        ck_assert_double_le(retry, 60);
        ck_assert_uint_eq(h.s.slo_rejected, 1);

        /* judged at the planned pace, 98% of the slo: a step that fits the slo itself but
         * not the pace is refused, one that fits the pace taken */
        struct step_shape one = { .n_decode = 1, .decode_context = 33 };
        double step = step_time_model_predict(&h.s.model, &one) * step_time_model_decodes_alone_factor(&h.s.model, 1);
        r = make(&h, true, 32, step / 0.99, 1.0, now);
        ck_assert_int_eq(slo_policy_admit(&h.s, r, now, &retry, &err), -EAGAIN);
        ck_assert_uint_eq(h.s.slo_rejected, 2);
        r = make(&h, true, 32, step / 0.97, 1.0, now);
        ck_assert_int_eq(slo_policy_admit(&h.s, r, now, &retry, &err), 0);

        /* 4000 prompt tokens take about 2 s: ttft_slo 0.5 s cannot be met, and the time left
         * of it is counted from now (it arrived 0.1 s ago) */
        r = make(&h, true, 4000, 0.050, 0.5, now - 0.1);
        ck_assert_int_eq(slo_policy_admit(&h.s, r, now, &retry, &err), -EAGAIN);
        ck_assert_msg(strstr(err.message, "above the 0.40 s left of ttft_slo 0.50 s"), "%s", err.message);
        ck_assert_uint_eq(h.s.slo_rejected, 3);

        /* the same with a ttft_slo it can meet, and a feasible slo */
        r = make(&h, true, 4000, 0.050, 5.0, now);
        ck_assert_int_eq(slo_policy_admit(&h.s, r, now, &retry, &err), 0);
        ck_assert(r->class.latency_sensitive);

        /* every latency-sensitive request decoding at once must fit in the tightest slo:
         * 10 running at 30 ms each make 10 + 11 x 2 = 32 ms per step: an eleventh with slo 30
         * ms is refused, and the hint is when the first of them is expected to end */
        for (int i = 0; i < 10; i++)
                add_decoding(&h, true, 16, 0.030, now, 1);
        r = make(&h, true, 16, 0.030, 1.0, now);
        ck_assert_int_eq(slo_policy_admit(&h.s, r, now, &retry, &err), -EAGAIN);
        ck_assert_double_eq_tol(retry, 99 * 0.030, 1e-9); /* 99 tokens left at 30 ms */
        /* and a best-effort one is never judged: only the class asks for a guarantee */

        /* demotion instead of refusal */
        h.config.slo_admission = SLO_ADMISSION_DEMOTE;
        ck_assert_int_eq(slo_policy_admit(&h.s, r, now, &retry, &err), 0);
        ck_assert(!r->class.latency_sensitive);
        ck_assert_uint_eq(h.s.slo_demoted, 1);
        ck_assert_uint_eq(h.s.slo_rejected, 4);
        teardown(&h);
}
END_TEST

/* 256 steps: best-effort ones (prompt chunks beside decodes, decodes) +-30% around the true
 * cost, steps of latency-sensitive decodes alone at it. */
static void record_mixed(struct step_time_model *m) {
        srand(11);
        for (int i = 0; i < STEP_MODEL_HISTORY; i++) {
                uint32_t n_decode = 1 + (uint32_t) (rand() % 8);
                struct step_shape shape = { .n_decode = n_decode };
                double noise = 1 + 0.6 * ((double) rand() / RAND_MAX - 0.5);
                if (i % 3 == 0)
                        shape.n_prompt = 32 + (uint32_t) (rand() % 256), shape.n_best_effort = 1;
                else if (i % 3 == 1)
                        shape.n_best_effort = n_decode;
                else
                        noise = 1;
                step_time_model_record(m, &shape, true_cost(&shape) * noise);
        }
}

/* Best-effort steps (prompt chunks, decodes) predicted to within +-30%, steps of latency-
 * sensitive decodes alone exactly: a request whose step of decodes fits its slo by 15% is
 * judged by the latter's factor and taken; once those run over their predictions too, it
 * is refused. */
START_TEST(test_admission_judges_decodes_by_their_own_factor) {
        struct harness h;
        setup(&h, 512, 0);
        record_mixed(&h.s.model);
        struct error err;
        double now = 20.0;
        double margin = step_time_model_margin(&h.s.model);
        double alone = step_time_model_decodes_alone_factor(&h.s.model, 1);
        ck_assert_msg(margin > 1.2 && alone < 1.1, "margin %g, decodes alone %g", margin, alone);

        struct step_shape one = { .n_decode = 1, .decode_context = 33 };
        double slo = step_time_model_predict(&h.s.model, &one) * 1.15 / 0.98; /* the pace steps are planned at */
        struct request *r = make(&h, true, 32, slo, 1.0, now);
        ck_assert_int_eq(slo_policy_admit(&h.s, r, now, NULL, &err), 0);

        for (int i = 0; i < 128; i++) { /* every other step of decodes alone now 40% over */
                struct step_shape shape = { .n_decode = 1 + (uint32_t) (rand() % 8) };
                step_time_model_record(&h.s.model, &shape, true_cost(&shape) * (i % 2 ? 1 : 1.4));
        }
        ck_assert_double_gt(step_time_model_predict(&h.s.model, &one) * step_time_model_decodes_alone_factor(&h.s.model, 1),
                            slo * 0.98);
        r = make(&h, true, 32, slo, 1.0, now);
        ck_assert_int_eq(slo_policy_admit(&h.s, r, now, NULL, &err), -EAGAIN);
        ck_assert_msg(strstr(err.message, "per step"), "%s", err.message);
        teardown(&h);
}
END_TEST

/* Best-effort steps, +-30% around the true cost. */
static void record_best_effort(struct step_time_model *m, int n_steps) {
        for (int i = 0; i < n_steps; i++) {
                struct step_shape shape = { .n_decode = 1 + (uint32_t) (rand() % 8), .n_best_effort = 1 };
                if (i % 2 == 0)
                        shape.n_prompt = 32 + (uint32_t) (rand() % 256);
                step_time_model_record(m, &shape, true_cost(&shape) * (1 + 0.6 * ((double) rand() / RAND_MAX - 0.5)));
        }
}

/* Whether a latency-sensitive request whose one decode alone fits the pace by 15% is taken. */
static bool takes_one_with_room(struct harness *h, double now) {
        struct error err;
        struct step_shape one = { .n_decode = 1, .decode_context = 33 };
        double slo = step_time_model_predict(&h->s.model, &one) * 1.15 / 0.98;
        struct request *r = make(h, true, 32, slo, 1.0, now);
        return slo_policy_admit(&h->s, r, now, NULL, &err) == 0;
}

/* Only admitted latency-sensitive requests make steps of their decodes alone, so the step
 * rule judges by recent ones only: before any, and once 5 s of steps have run since the
 * newest, a request is taken whatever the fit says (judged by its extrapolation from best-effort
 * work, or by old steps, every request could be refused, so that none came to renew them),
 * unless its slo is below the shortest step ever run. */
START_TEST(test_step_rule_judges_by_recent_decodes_alone) {
        struct harness h;
        struct error err;
        setup(&h, 512, 0);
        double now = 20.0;
        srand(13);
        record_best_effort(&h.s.model, STEP_MODEL_HISTORY);
        ck_assert(isnan(step_time_model_decodes_alone_factor(&h.s.model, 1)));
        /* 10 ms: above the shortest step (one decode beside nothing took >= 8.4 ms), below
         * what one takes (12 ms) */
        ck_assert_msg(step_time_model_shortest_step(&h.s.model) < 0.0098, "shortest %g",
                      step_time_model_shortest_step(&h.s.model));
        struct request *r = make(&h, true, 32, 0.010, 1.0, now);
        ck_assert_msg(slo_policy_admit(&h.s, r, now, NULL, &err) == 0, "%s", err.message);
        r = make(&h, true, 32, 0.001, 1.0, now); /* 1 ms: no step has been that short */
        ck_assert_int_eq(slo_policy_admit(&h.s, r, now, NULL, &err), -EAGAIN);
        ck_assert_msg(strstr(err.message, "no step has taken less than"), "%s", err.message);

        for (int i = 0; i < 64; i++) { /* latency-sensitive decodes alone, as predicted */
                struct step_shape shape = { .n_decode = 1 + (uint32_t) (rand() % 4) };
                step_time_model_record(&h.s.model, &shape, true_cost(&shape));
        }
        double margin = step_time_model_margin(&h.s.model), alone = step_time_model_decodes_alone_factor(&h.s.model, 1);
        ck_assert_msg(margin > 1.2 && fabs(alone - 1) < 0.1, "margin %g, decodes alone %g", margin, alone);
        ck_assert(takes_one_with_room(&h, now));
        r = make(&h, true, 32, 0.010, 1.0, now);
        ck_assert_int_eq(slo_policy_admit(&h.s, r, now, NULL, &err), -EAGAIN);
        ck_assert_msg(strstr(err.message, "per step"), "%s", err.message);

        struct step_shape prompt_step = { .n_prompt = 160, .n_decode = 4, .n_best_effort = 4 };
        for (double since = 0; since < STEP_MODEL_ALONE_HORIZON; since += true_cost(&prompt_step)) {
                ck_assert(!isnan(step_time_model_decodes_alone_factor(&h.s.model, 1)));
                step_time_model_record(&h.s.model, &prompt_step, true_cost(&prompt_step));
        }
        ck_assert(isnan(step_time_model_decodes_alone_factor(&h.s.model, 1)));
        r = make(&h, true, 32, 0.010, 1.0, now);
        ck_assert_msg(slo_policy_admit(&h.s, r, now, NULL, &err) == 0, "%s", err.message);
        r = make(&h, true, 32, 0.001, 1.0, now);
        ck_assert_int_eq(slo_policy_admit(&h.s, r, now, NULL, &err), -EAGAIN);
        teardown(&h);
}
END_TEST

/* 64 steps of best-effort prompt chunks (64-124 tokens, 0-3 decodes beside them), none
 * under 52 ms, and no step of decodes alone. */
static void record_prompt_chunks(struct step_time_model *m) {
        for (int i = 0; i < 64; i++) {
                struct step_shape chunk = { .n_prompt = 64 + 4 * (uint32_t) (i % 16), .n_decode = (uint32_t) i % 4,
                                            .n_best_effort = 1 + (uint32_t) i % 4 };
                chunk.prompt_context = step_shape_context(0, chunk.n_prompt);
                step_time_model_record(m, &chunk, 0.020 + chunk.n_prompt * 0.0005);
        }
}

/* The calibration's step of one decode is a step the engine ran: where best-effort prompt
 * chunks made every step so far (none under 20 ms) and no step of decodes alone is known, a
 * request paced at 10 ms is refused without it and taken with it (3 ms); a shorter step
 * recorded before it stays the shortest. */
START_TEST(test_calibration_bounds_the_shortest_step) {
        for (int calibrated = 0; calibrated < 2; calibrated++) {
                struct harness h;
                struct error err;
                setup(&h, 512, 0);
                double now = 20.0;
                if (calibrated)
                        step_time_model_set_calibration(&h.s.model, &(struct decode_calibration) {
                                .seconds = { 0.003, 0.004 }, .n = 2, .context = 129 });
                record_prompt_chunks(&h.s.model);
                ck_assert(isnan(step_time_model_decodes_alone_factor(&h.s.model, 1)));
                ck_assert_double_eq_tol(step_time_model_shortest_step(&h.s.model), (calibrated ? 0.003 : 0.052), 1e-12);
                struct request *r = make(&h, true, 32, 0.010, 1.0, now);
                int rc = slo_policy_admit(&h.s, r, now, NULL, &err);
                if (calibrated)
                        ck_assert_msg(rc == 0, "%s", err.message);
                else {
                        ck_assert_int_eq(rc, -EAGAIN);
                        ck_assert_str_eq(err.message, "overloaded: no step has taken less than 52.0 ms, above the 9.8 ms "
                                                      "the tightest slo of 10.000 ms per token leaves; retry in 1.0 s or "
                                                      "send it best-effort");
                }
                teardown(&h);
        }
        struct step_time_model m;
        step_time_model_init(&m);
        struct step_shape one = { .n_decode = 1, .decode_context = 40 };
        step_time_model_record(&m, &one, 0.002);
        step_time_model_set_calibration(&m, &(struct decode_calibration) { .seconds = { 0.003 }, .n = 1, .context = 129 });
        ck_assert_double_eq(step_time_model_shortest_step(&m), 0.002);
        ck_assert_uint_eq(m.calibration.n, 1);
}
END_TEST

/* Two latency-sensitive decodes are priced by the kept steps of two alone (four of them
 * suffice) rather than by those of one: best-effort decodes (at long contexts) hold the
 * fit's slope in decodes at three times the true one, so that the factor of steps of one
 * would price two above their cost. */
START_TEST(test_two_decodes_priced_by_steps_of_two) {
        struct harness h;
        struct error err;
        setup(&h, 512, 0);
        double now = 20.0;
        srand(19);
        for (int i = 0; i < STEP_MODEL_HISTORY; i++) {
                struct step_shape shape = { .n_decode = 1 };
                double seconds;
                if (i % 16 == 2)
                        shape.n_decode = 2, seconds = true_cost(&shape);
                else if (i % 4 == 0)
                        seconds = true_cost(&shape);
                else {
                        shape.n_decode = 4 + (uint32_t) (rand() % 5), shape.n_best_effort = shape.n_decode;
                        seconds = BASE + 3 * PER_DECODE * shape.n_decode;
                }
                step_time_model_record(&h.s.model, &shape, seconds);
        }
        double one = step_time_model_decodes_alone_factor(&h.s.model, 1),
               two = step_time_model_decodes_alone_factor(&h.s.model, 2);
        ck_assert_msg(one - two > 0.1, "factors: one %g, two %g", one, two);

        struct step_shape pair = { .n_decode = 2 };
        double fit = step_time_model_predict(&h.s.model, &pair);
        ck_assert_double_eq_tol(fit * two, true_cost(&pair), 0.05 * true_cost(&pair));
        add_decoding(&h, true, 16, 1.0, now, 1);
        /* a pace a quarter of the way from their own steps' price to that of steps of one */
        double slo = fit * (two + 0.25 * (one - two)) / 0.98;
        struct request *r = make(&h, true, 16, slo, 1.0, now);
        ck_assert_msg(slo_policy_admit(&h.s, r, now, NULL, &err) == 0, "%s", err.message);
        teardown(&h);
}
END_TEST

/* Three latency-sensitive decodes, never seen alone, are priced by the steps of one and of
 * two alone that were: the price of two plus what the second added. The fit's slope in
 * decodes, swung high, priced them at twice their cost, and no step of best-effort work
 * carried three decodes to bound them. */
START_TEST(test_three_decodes_extrapolated_from_steps_of_fewer) {
        struct harness h;
        struct error err;
        setup(&h, 512, 0);
        double now = 20.0;
        for (int i = 0; i < STEP_MODEL_HISTORY; i++) {
                struct step_shape shape = { .n_decode = i % 4 == 0 ? 2 : 1 };
                if (i % 4 == 1)
                        shape.n_prompt = 64, shape.n_best_effort = 1; /* what teaches the fit its constant */
                step_time_model_record(&h.s.model, &shape, true_cost(&shape));
        }
        struct step_shape one = { .n_decode = 1 }, three = { .n_decode = 3 };
        double lift = 0.008; /* a decode dearer by that, the constant cheaper: one decode priced the same */
        h.s.model.theta[0] -= lift;
        h.s.model.theta[2] += lift * 8; /* features count decodes in eights */
        ck_assert_double_eq_tol(step_time_model_predict(&h.s.model, &one), true_cost(&one), 1e-9);
        ck_assert(!isnan(step_time_model_decodes_alone_own_factor(&h.s.model, 2)));
        ck_assert(isnan(step_time_model_decodes_alone_own_factor(&h.s.model, 3)));
        double swung = step_time_model_predict(&h.s.model, &three) * step_time_model_decodes_alone_factor(&h.s.model, 3);
        ck_assert_double_gt(swung, 1.5 * true_cost(&three));

        add_decoding(&h, true, 16, 1.0, now, 1);
        add_decoding(&h, true, 16, 1.0, now, 1);
        double slo = true_cost(&three) * 1.05 / 0.98;
        struct request *r = make(&h, true, 16, slo, 1.0, now);
        ck_assert_msg(slo_policy_admit(&h.s, r, now, NULL, &err) == 0, "%s", err.message);
        teardown(&h);
}
END_TEST

/* However far the fit's slope in decodes swings (it sees them mostly as best-effort ones at
 * long contexts, their count and reads moving together), a few latency-sensitive decodes
 * are priced at most as many steps of one, whose price the frequent steps of one pin.
 * (Every best-effort step here carries a prompt chunk, so the fit has no bound on one more
 * decode to offer.) */
START_TEST(test_decodes_priced_at_most_one_at_a_time) {
        struct harness h;
        struct error err;
        setup(&h, 512, 0);
        double now = 20.0;
        srand(23);
        for (int i = 0; i < STEP_MODEL_HISTORY; i++) {
                struct step_shape one = { .n_decode = 1 };
                if (i % 4 == 0)
                        step_time_model_record(&h.s.model, &one, true_cost(&one));
                else
                        record_best_effort(&h.s.model, 1);
        }
        ck_assert(isnan(step_time_model_extra_decode_bound(&h.s.model, 17)));
        struct step_shape one = { .n_decode = 1 }, pair = { .n_decode = 2 };
        double one_step = step_time_model_predict(&h.s.model, &one);
        /* a swing that keeps the price of one and triples that of two */
        double lift = 2 * true_cost(&pair);
        h.s.model.theta[0] -= lift;
        h.s.model.theta[2] += lift * 8; /* features count decodes in eights */
        ck_assert_double_eq_tol(step_time_model_predict(&h.s.model, &one), one_step, 1e-12);
        ck_assert_double_gt(step_time_model_predict(&h.s.model, &pair), 2.5 * one_step);

        add_decoding(&h, true, 16, 1.0, now, 1);
        double slo = 2.2 * one_step / 0.98;
        struct request *r = make(&h, true, 16, slo, 1.0, now);
        ck_assert_msg(slo_policy_admit(&h.s, r, now, NULL, &err) == 0, "%s", err.message);
        r = make(&h, true, 16, 1.8 * one_step / 0.98, 1.0, now); /* two steps of one do not fit */
        ck_assert_int_eq(slo_policy_admit(&h.s, r, now, NULL, &err), -EAGAIN);
        teardown(&h);
}
END_TEST

/* Best-effort decodes at long contexts pin what one more decode along their line costs
 * (their count and reads together), not how the fit splits it between the two: a swing
 * of that split that prices two short latency-sensitive decodes 1.9x one leaves their
 * price at one step of one plus what one more best-effort decode adds. */
START_TEST(test_extra_decode_bounded_by_best_effort_ones) {
        const double per_position = 2e-6, be_context = 1100, ls_context = 150;
        struct harness h;
        struct error err;
        setup(&h, 512, 0);
        double now = 20.0;
        srand(29);
        for (int i = 0; i < STEP_MODEL_HISTORY; i++) {
                struct step_shape shape = { .n_decode = 1, .decode_context = (uint64_t) ls_context };
                if (i % 4)
                        shape.n_decode = 4 + (uint32_t) (rand() % 5), shape.n_best_effort = shape.n_decode,
                        shape.decode_context = (uint64_t) (be_context * shape.n_decode);
                step_time_model_record(&h.s.model, &shape, true_cost(&shape) + per_position * shape.decode_context);
        }
        double extra = PER_DECODE + per_position * be_context;
        ck_assert_double_eq_tol(step_time_model_extra_decode_bound(&h.s.model, 2 * (uint64_t) ls_context), extra,
                                0.02 * extra);
        ck_assert(isnan(step_time_model_extra_decode_bound(&h.s.model, 2 * (uint64_t) be_context)));

        struct step_shape one = { .n_decode = 1, .decode_context = (uint64_t) ls_context },
                          pair = { .n_decode = 2, .decode_context = 2 * (uint64_t) ls_context };
        double one_step = step_time_model_predict(&h.s.model, &one);
        /* the swing: more per decode, less per position, the same along the best-effort
         * line and for one short decode */
        double lift = 0.8 * one_step, per_decode_lift = lift * (1 - ls_context / be_context);
        h.s.model.theta[2] += lift * 8;                                       /* features count decodes in eights */
        h.s.model.theta[4] -= lift * 4096 / be_context;                       /* and positions in 4096s */
        h.s.model.theta[0] -= per_decode_lift;
        ck_assert_double_eq_tol(step_time_model_predict(&h.s.model, &one), one_step, 1e-9);
        double swung = step_time_model_predict(&h.s.model, &pair);
        ck_assert_double_gt(swung, 1.8 * one_step);

        add_decoding(&h, true, (uint32_t) ls_context - 2, 1.0, now, 1);
        double slo = (one_step + extra) * 1.05 / 0.98;
        ck_assert_double_lt(slo * 0.98, swung);
        struct request *r = make(&h, true, (uint32_t) ls_context - 1, slo, 1.0, now);
        ck_assert_msg(slo_policy_admit(&h.s, r, now, NULL, &err) == 0, "%s", err.message);
        teardown(&h);
}
END_TEST

/* Decode-only steps with best-effort work that carry more decodes and read more bound a
 * step of fewer: those of the fewest decodes that 4 kept steps have, recent ones only. */
START_TEST(test_dominating_steps) {
        struct step_time_model m;
        step_time_model_init(&m);
        struct step_shape warm_shape = { .n_prompt = 64 };
        for (int i = 0; i < STEP_MODEL_WARMUP; i++)
                step_time_model_record(&m, &warm_shape, true_cost(&warm_shape));
        struct step_shape pair = { .n_decode = 2, .decode_context = 300 };
        ck_assert(isnan(step_time_model_dominating_step(&m, &pair)));
        struct step_shape two = { .n_decode = 2, .decode_context = 2200, .n_best_effort = 1 },
                          three = { .n_decode = 3, .decode_context = 3300, .n_best_effort = 2 },
                          short_two = { .n_decode = 2, .decode_context = 200, .n_best_effort = 1 };
        for (int i = 0; i < 3; i++) {
                step_time_model_record(&m, &two, 0.0184);
                step_time_model_record(&m, &short_two, 0.013); /* reads less: bounds nothing here */
        }
        for (int i = 0; i < 6; i++)
                step_time_model_record(&m, &three, 0.021);
        /* three steps of two are too few: the steps of three bound it */
        ck_assert_double_eq_tol(step_time_model_dominating_step(&m, &pair), 0.021, 1e-12);
        step_time_model_record(&m, &two, 0.0184);
        ck_assert_double_eq_tol(step_time_model_dominating_step(&m, &pair), 0.0184, 1e-12);
        struct step_shape four = { .n_decode = 4, .decode_context = 600 };
        ck_assert(isnan(step_time_model_dominating_step(&m, &four)));
        /* after STEP_MODEL_ALONE_HORIZON seconds of other steps, they bound nothing */
        struct step_shape prompt = { .n_prompt = 256, .n_best_effort = 1 };
        for (double t = 0; t <= STEP_MODEL_ALONE_HORIZON; t += true_cost(&prompt))
                step_time_model_record(&m, &prompt, true_cost(&prompt));
        ck_assert(isnan(step_time_model_dominating_step(&m, &pair)));
}
END_TEST

/* The fit swung so that one more short decode is priced far over what it costs, along the
 * best-effort line too (its constant too low: a bench/coserve point priced two short
 * decodes at 12 ms and bounded them at 10.7, beside steps of one short and one long decode
 * that took 8.5): decode-only steps with best-effort work that carry as many decodes and
 * read more bound the price, and admit a request the fit would refuse. */
START_TEST(test_decodes_priced_by_dominating_steps) {
        const double per_position = 2e-6, ls_context = 150, be_step_context = 2200;
        struct harness h;
        struct error err;
        setup(&h, 512, 0);
        double now = 20.0;
        for (int i = 0; i < STEP_MODEL_HISTORY; i++) {
                struct step_shape shape = { .n_decode = 1, .decode_context = (uint64_t) ls_context };
                if (i % 4)
                        shape.n_decode = 2, shape.n_best_effort = 1, shape.decode_context = (uint64_t) be_step_context;
                step_time_model_record(&h.s.model, &shape, true_cost(&shape) + per_position * shape.decode_context);
        }
        struct step_shape one = { .n_decode = 1, .decode_context = (uint64_t) ls_context },
                          be_step = { .n_decode = 2, .decode_context = (uint64_t) be_step_context },
                          pair = { .n_decode = 2, .decode_context = 2 * (uint64_t) ls_context };
        double one_step = step_time_model_predict(&h.s.model, &one), be_seconds = true_cost(&be_step) + per_position * be_step_context;
        double be_predicted = step_time_model_predict(&h.s.model, &be_step);
        /* the swing: the constant lower by lift, each decode dearer and each position cheaper,
         * so that one short decode and the best-effort steps are priced as before */
        double lift = 0.8 * one_step, per_position_drop = lift / (be_step_context - 2 * ls_context);
        h.s.model.theta[0] -= lift;
        h.s.model.theta[2] += (lift + ls_context * per_position_drop) * 8; /* features count decodes in eights */
        h.s.model.theta[4] -= per_position_drop * 4096;                     /* and positions in 4096s */
        ck_assert_double_eq_tol(step_time_model_predict(&h.s.model, &one), one_step, 1e-9);
        ck_assert_double_eq_tol(step_time_model_predict(&h.s.model, &be_step), be_predicted, 1e-9);
        double extra = step_time_model_extra_decode_bound(&h.s.model, (uint64_t) ls_context);
        ck_assert_double_gt(one_step + extra, 1.1 * be_seconds);
        ck_assert_double_gt(step_time_model_predict(&h.s.model, &pair), 1.1 * be_seconds);

        add_decoding(&h, true, (uint32_t) ls_context - 2, 1.0, now, 1);
        double slo = be_seconds * 1.05 / 0.98;
        struct request *r = make(&h, true, (uint32_t) ls_context - 1, slo, 1.0, now);
        ck_assert_msg(slo_policy_admit(&h.s, r, now, NULL, &err) == 0, "%s", err.message);
        teardown(&h);
}
END_TEST

/* The calibration's price of n decodes alone: at its own speed and context, the steps it
 * timed; scaled to a slower machine; at a longer context each decode costs a step of one,
 * less what the batch shares (which does not grow with the context); beyond the counts
 * timed, each decode more shares what one did in the largest batch; never below a step of
 * one. Not calibrated, or for one decode: NAN. */
START_TEST(test_calibrated_decodes_price) {
        struct step_time_model m;
        step_time_model_init(&m);
        ck_assert(isnan(step_time_model_calibrated_decodes(&m, 2, 0.002, 0.002)));
        step_time_model_set_calibration(
                &m, &(struct decode_calibration) { .seconds = { 0.0022, 0.0034, 0.0049 }, .n = 3, .context = 129 });
        ck_assert(isnan(step_time_model_calibrated_decodes(&m, 1, 0.0022, 0.0022)));
        ck_assert_double_eq_tol(step_time_model_calibrated_decodes(&m, 2, 0.0022, 0.0022), 0.0034, 1e-12);
        ck_assert_double_eq_tol(step_time_model_calibrated_decodes(&m, 3, 0.0022, 0.0022), 0.0049, 1e-12);
        ck_assert_double_eq_tol(step_time_model_calibrated_decodes(&m, 2, 0.0033, 0.0033), 0.0051, 1e-12);
        ck_assert_double_eq_tol(step_time_model_calibrated_decodes(&m, 2, 0.004, 0.0022), 2 * 0.004 - 0.001, 1e-12);
        double shared_by_three = (3 * 0.0022 - 0.0049) / 2;
        ck_assert_double_eq_tol(step_time_model_calibrated_decodes(&m, 5, 0.0022, 0.0022), 5 * 0.0022 - 4 * shared_by_three,
                                1e-12);
        ck_assert_double_eq_tol(step_time_model_calibrated_decodes(&m, 8, 0.0005, 0.0022), 0.0005, 1e-12);
}
END_TEST

/* Before a step of two latency-sensitive decodes alone has run, a fit that prices two far
 * over what they cost (the swing of its slope in decodes) refuses the second request; the
 * calibration at start, scaled by what a step of one takes now, admits it. */
START_TEST(test_admission_prices_unseen_counts_by_calibration) {
        for (int calibrated = 0; calibrated < 2; calibrated++) {
                struct harness h;
                struct error err;
                setup(&h, 512, 0);
                double now = 20.0;
                for (int i = 0; i < 32; i++) {
                        struct step_shape prompt = { .n_prompt = 64 + 8 * (uint32_t) i };
                        prompt.prompt_context = step_shape_context(0, prompt.n_prompt);
                        step_time_model_record(&h.s.model, &prompt, true_cost(&prompt));
                }
                struct step_shape one = { .n_decode = 1, .decode_context = 150 },
                                  two = { .n_decode = 2, .decode_context = 300 };
                for (int i = 0; i < STEP_MODEL_ALONE_HISTORY; i++)
                        step_time_model_record(&h.s.model, &one, true_cost(&one));
                double one_step = step_time_model_predict(&h.s.model, &one);
                ck_assert_double_eq_tol(one_step, true_cost(&one), 1e-4);
                /* the swing: one decode priced as before, each further one 4 ms dearer */
                h.s.model.theta[0] -= 0.004;
                h.s.model.theta[2] += 0.004 * 8; /* features count decodes in eights */
                ck_assert_double_eq_tol(step_time_model_predict(&h.s.model, &one), one_step, 1e-9);
                ck_assert_double_gt(step_time_model_predict(&h.s.model, &two), true_cost(&two) + 0.0035);
                if (calibrated)
                        step_time_model_set_calibration(&h.s.model, &(struct decode_calibration) {
                                .seconds = { true_cost(&one), true_cost(&two) }, .n = 2, .context = 129 });
                add_decoding(&h, true, 148, 1.0, now, 1);
                double slo = (true_cost(&two) + 0.002) / 0.98;
                struct request *r = make(&h, true, 149, slo, 1.0, now);
                int rc = slo_policy_admit(&h.s, r, now, NULL, &err);
                if (calibrated)
                        ck_assert_msg(rc == 0, "%s", err.message);
                else {
                        ck_assert_int_eq(rc, -EAGAIN);
                        ck_assert_msg(strstr(err.message, "2 latency-sensitive requests would need about 18.0 ms per step"),
                                      "%s", err.message);
                }
                teardown(&h);
        }
}
END_TEST

/* The model is not chaotic: a daemon's step trace (tests/traces/coserve-slo-3x.trace),
 * replayed twice, the second time with every step's time moved by at most three
 * millionths (the trace's own precision), gives predictions within 1% of each other at
 * every step. With forgetting 0.99 the two replays came apart after ~2300 steps (284 of
 * 2580 over 5% apart), as a daemon's fit did from the replay of its own trace. */
START_TEST(test_model_replay_is_stable) {
        const char *dir = getenv("ASYNCLLM_STEP_TRACES");
        ck_assert_msg(dir, "ASYNCLLM_STEP_TRACES is not set (make check sets it)");
        char path[4096];
        snprintf(path, sizeof(path), "%s/coserve-slo-3x.trace", dir);
        FILE *f = fopen(path, "r");
        ck_assert_msg(f, "%s: %s", path, strerror(errno));
        struct step_time_model m, moved;
        step_time_model_init(&m);
        step_time_model_init(&moved);
        char line[512];
        uint32_t steps = 0, apart = 0;
        while (fgets(line, sizeof(line), f)) {
                double started, predicted, seconds;
                unsigned long long prompt_context, decode_context;
                struct step_shape s = { 0 };
                if (line[0] == '#')
                        continue;
                ck_assert_int_eq(sscanf(line, "%lf %u %u %llu %llu %u %lf %lf", &started, &s.n_prompt, &s.n_decode,
                                        &prompt_context, &decode_context, &s.n_best_effort, &predicted, &seconds),
                                 8);
                s.prompt_context = prompt_context;
                s.decode_context = decode_context;
                double a = step_time_model_predict(&m, &s), b = step_time_model_predict(&moved, &s);
                apart += step_time_model_ready(&m) && fabs(a - b) > 0.01 * a;
                step_time_model_record(&m, &s, seconds);
                step_time_model_record(&moved, &s, seconds * (1 + 1e-6 * (double) ((int) (steps % 7) - 3)));
                steps++;
        }
        fclose(f);
        ck_assert_uint_gt(steps, 2500);
        ck_assert_msg(apart == 0, "%u of %u steps predicted over 1%% apart", apart, steps);
}
END_TEST

/* A calibration timed in a slow moment is the floor while nothing latency-sensitive runs
 * (the best-effort steps are all longer): a request paced just under it, alone, is taken to
 * show what such steps take now, once per 30 s; not beside another latency-sensitive
 * request, nor when paced under half the floor. Once a shorter step has run, the floor is
 * that, and no probe is spent. */
START_TEST(test_floor_probe_takes_one_alone) {
        struct harness h;
        struct error err;
        setup(&h, 512, 0);
        step_time_model_set_calibration(&h.s.model, &(struct decode_calibration) { .seconds = { 0.0063 }, .n = 1,
                                                                                   .context = 129 });
        record_prompt_chunks(&h.s.model);
        ck_assert(isnan(step_time_model_decodes_alone_factor(&h.s.model, 1)));
        ck_assert_double_eq_tol(step_time_model_shortest_step(&h.s.model), 0.0063, 1e-12);

        struct request *r = make(&h, true, 32, 0.0061, 1.0, 20.0);
        ck_assert_msg(slo_policy_admit(&h.s, r, 20.0, NULL, &err) == 0, "%s", err.message);
        r = make(&h, true, 32, 0.0061, 1.0, 49.0); /* within 30 s of the probe */
        ck_assert_int_eq(slo_policy_admit(&h.s, r, 49.0, NULL, &err), -EAGAIN);
        ck_assert_str_eq(err.message, "overloaded: no step has taken less than 6.3 ms, above the 6.0 ms the tightest "
                                      "slo of 6.100 ms per token leaves; retry in 1.0 s or send it best-effort");
        struct request *other = add(&h, true, 32, 0.050, 1.0, 50.0);
        r = make(&h, true, 32, 0.0061, 1.0, 50.0); /* beside another latency-sensitive request */
        ck_assert_int_eq(slo_policy_admit(&h.s, r, 50.0, NULL, &err), -EAGAIN);
        scheduler_remove(&h.s, other);
        r = make(&h, true, 32, 0.003, 1.0, 50.0); /* 2.9 ms: under half the floor */
        ck_assert_int_eq(slo_policy_admit(&h.s, r, 50.0, NULL, &err), -EAGAIN);
        r = make(&h, true, 32, 0.0061, 1.0, 50.0);
        ck_assert_msg(slo_policy_admit(&h.s, r, 50.0, NULL, &err) == 0, "%s", err.message);
        ck_assert_double_eq(h.s.floor_probe_time, 50.0);
        ck_assert_uint_eq(h.s.slo_rejected, 3);

        struct step_shape one = { .n_decode = 1, .decode_context = 40 };
        step_time_model_record(&h.s.model, &one, 0.0035);
        r = make(&h, true, 32, 0.0061, 1.0, 51.0);
        ck_assert_msg(slo_policy_admit(&h.s, r, 51.0, NULL, &err) == 0, "%s", err.message);
        ck_assert_double_eq(h.s.floor_probe_time, 50.0);
        teardown(&h);
}
END_TEST

/* A stall (a run of steps far over their prediction, past the run the fit leaves out)
 * leaves the factor of steps of decodes alone as it was: the fit follows a slower machine,
 * but those steps, kept, priced one decode at 2.2x what it took in a bench/coserve point,
 * and every request after them was refused, so that none came to renew them. */
START_TEST(test_stall_leaves_decodes_alone_factor) {
        struct step_time_model m;
        step_time_model_init(&m);
        srand(31);
        struct step_shape one = { .n_decode = 1 };
        for (int i = 0; i < STEP_MODEL_HISTORY; i++) {
                struct step_shape shape = { .n_decode = 1 + (uint32_t) (rand() % 8), .n_best_effort = 8 };
                if (i % 3 == 0)
                        shape = one;
                step_time_model_record(&m, &shape, true_cost(&shape));
        }
        ck_assert_double_eq_tol(step_time_model_decodes_alone_factor(&m, 1), 1, 0.01);
        for (int i = 0; i < 12; i++)
                step_time_model_record(&m, &one, true_cost(&one) * 8);
        double price = step_time_model_predict(&m, &one) * step_time_model_decodes_alone_factor(&m, 1);
        ck_assert_msg(price < 1.1 * true_cost(&one), "one decode priced at %g after the stall for %g", price,
                      true_cost(&one));
}
END_TEST

/* The steps of latency-sensitive decodes alone are set against the fit as it is when asked:
 * when best-effort work pulls the fit away from them, their factor moves by as much, so
 * that their steps are still priced at what they took. */
START_TEST(test_decodes_alone_factor_follows_the_fit) {
        struct step_time_model m;
        step_time_model_init(&m);
        srand(17);
        for (int i = 0; i < 400; i++) { /* every kind of step at its true cost; one decode alone */
                struct step_shape shape = { .n_decode = 1 };
                if (i % 2)
                        shape.n_prompt = (uint32_t) (rand() % 300), shape.n_decode = 8, shape.n_best_effort = 8;
                else if (i % 4 == 2)
                        shape.n_decode = 2 + (uint32_t) (rand() % 3), shape.n_best_effort = 1;
                step_time_model_record(&m, &shape, true_cost(&shape));
        }
        struct step_shape one = { .n_decode = 1 };
        double alone = step_time_model_decodes_alone_factor(&m, 1);
        ck_assert_msg(fabs(alone - 1) < 0.01, "decodes alone %g", alone);
        for (int i = 0; i < 64; i++) { /* best-effort decodes alone, 4 to 8 of them, now take 3x as long (4 s) */
                struct step_shape shape = { .n_decode = 4 + (uint32_t) (rand() % 5), .n_best_effort = 8 };
                step_time_model_record(&m, &shape, true_cost(&shape) * 3);
        }
        double fitted = step_time_model_fit(&m, &one),
               priced = step_time_model_predict(&m, &one) * step_time_model_decodes_alone_factor(&m, 1);
        ck_assert_msg(fabs(fitted - true_cost(&one)) > 0.06 * true_cost(&one), "the fit predicts %g for %g", fitted,
                      true_cost(&one));
        ck_assert_msg(fabs(priced - true_cost(&one)) < 0.015 * true_cost(&one), "priced at %g for %g", priced,
                      true_cost(&one));
}
END_TEST

/* The prompt rule prices the running decodes' part of each step with their own margin and
 * the prompt's with the general one: beside one latency-sensitive decode whose steps fill
 * most of the pace, a 128-token prompt still gets the rest of each step and is taken (with
 * the general margin on the whole step, nothing was left for it: "after about inf s"); a
 * prompt that the rest cannot compute by its ttft_slo is refused. */
START_TEST(test_admission_prices_a_prompt_beside_decodes) {
        struct harness h;
        setup(&h, 512, 0);
        record_mixed(&h.s.model);
        double margin = step_time_model_margin(&h.s.model), alone = step_time_model_decodes_alone_factor(&h.s.model, 1);
        /* paced between a step of two decodes alone (~14 ms) and one decode's times the
         * general margin (~12 ms x 1.25): a step of both fits, but with that margin on one
         * decode no prompt token would */
        struct step_shape one = { .n_decode = 1, .decode_context = 17 }, two = { .n_decode = 2, .decode_context = 35 };
        double low = step_time_model_predict(&h.s.model, &two) * alone, high = step_time_model_predict(&h.s.model, &one) * margin;
        ck_assert_msg(low < high, "two decodes %g, one decode with the margin %g", low, high);
        double slo = (low + high) / 2 / 0.98, now = 20.0;
        add_decoding(&h, true, 16, slo, now - 0.1, 1);
        struct error err;
        struct request *r = make(&h, true, 128, slo, 1.0, now);
        ck_assert_msg(slo_policy_admit(&h.s, r, now, NULL, &err) == 0, "%s", err.message);
        /* a tenth or so of every step: 128 tokens at 0.5 ms x the margin take ~0.6 s, 1024
         * ~5 s */
        r = make(&h, true, 1024, slo, 1.0, now);
        ck_assert_int_eq(slo_policy_admit(&h.s, r, now, NULL, &err), -EAGAIN);
        ck_assert_msg(strstr(err.message, "ttft_slo"), "%s", err.message);
        r = make(&h, true, 1024, slo, 20.0, now);
        ck_assert_msg(slo_policy_admit(&h.s, r, now, NULL, &err) == 0, "%s", err.message);
        teardown(&h);
}
END_TEST

START_TEST(test_starvation_guard) {
        struct harness h;
        setup(&h, 512, 0);
        double now = 30.0;
        /* a latency-sensitive decode already late: the limit leaves no room for anything */
        struct request *ls = add_decoding(&h, true, 16, 0.010, now - 1.0, 1);
        struct request *be = add_decoding(&h, false, 16, 0, now - 1.0, 1);
        warm(&h.s);
        h.s.last_best_effort_run = now;
        ck_assert_int_eq(scheduler_schedule(&h.s, now), 0);
        ck_assert_uint_eq(planned(&h.s, ls), 1);
        ck_assert_uint_eq(planned(&h.s, be), 0);
        /* once best-effort work has waited a whole default ttft_slo, it runs a token */
        ck_assert_int_eq(scheduler_schedule(&h.s, now + 1.5), 0);
        ck_assert_uint_eq(planned(&h.s, ls), 1);
        ck_assert_uint_eq(planned(&h.s, be), 1);
        ck_assert_double_eq(h.s.last_best_effort_run, now + 1.5);
        teardown(&h);
}
END_TEST

START_TEST(test_never_an_empty_step) {
        struct harness h;
        setup(&h, 512, 0);
        warm(&h.s);
        h.s.model.theta[0] = 1.0; /* a moment so slow that not one token fits in 250 ms */
        struct request *be = add(&h, false, 100, 0, 0, 5.0);
        h.s.last_best_effort_run = 6.0;
        ck_assert_int_eq(scheduler_schedule(&h.s, 6.0), 0);
        ck_assert_uint_eq(planned(&h.s, be), BLOCK); /* one block of its prompt */
        teardown(&h);
}
END_TEST

static Suite *suite(void) {
        Suite *s = suite_create("slo-policy");
        TCase *tc = tcase_create("core");
        tcase_add_test(tc, test_model_fits_and_reports_error);
        tcase_add_test(tc, test_model_follows_each_kinds_speed);
        tcase_add_test(tc, test_model_floor_and_speed_bound);
        tcase_add_test(tc, test_model_outliers);
        tcase_add_test(tc, test_model_replay_is_stable);
        tcase_add_test(tc, test_fill_order_and_deadlines);
        tcase_add_test(tc, test_slack_lets_best_effort_in);
        tcase_add_test(tc, test_prompts_by_earliest_deadline);
        tcase_add_test(tc, test_prompt_paced_to_its_deadline);
        tcase_add_test(tc, test_best_effort_chunks_in_gaps);
        tcase_add_test(tc, test_aim_paces_a_loose_slo);
        tcase_add_test(tc, test_default_aim_stays_near_alone);
        tcase_add_test(tc, test_aim_grows_with_the_decodes);
        tcase_add_test(tc, test_aim_debt_is_bounded);
        tcase_add_test(tc, test_best_effort_prompt_end_runs_beside_decodes);
        tcase_add_test(tc, test_prompt_end_bounds_the_step);
        tcase_add_test(tc, test_reserve_and_eviction);
        tcase_add_test(tc, test_best_effort_alone_may_use_the_reserve);
        tcase_add_test(tc, test_admission);
        tcase_add_test(tc, test_admission_judges_decodes_by_their_own_factor);
        tcase_add_test(tc, test_admission_prices_a_prompt_beside_decodes);
        tcase_add_test(tc, test_step_rule_judges_by_recent_decodes_alone);
        tcase_add_test(tc, test_decodes_alone_factor_follows_the_fit);
        tcase_add_test(tc, test_two_decodes_priced_by_steps_of_two);
        tcase_add_test(tc, test_decodes_priced_at_most_one_at_a_time);
        tcase_add_test(tc, test_extra_decode_bounded_by_best_effort_ones);
        tcase_add_test(tc, test_dominating_steps);
        tcase_add_test(tc, test_three_decodes_extrapolated_from_steps_of_fewer);
        tcase_add_test(tc, test_decodes_priced_by_dominating_steps);
        tcase_add_test(tc, test_calibrated_decodes_price);
        tcase_add_test(tc, test_admission_prices_unseen_counts_by_calibration);
        tcase_add_test(tc, test_calibration_bounds_the_shortest_step);
        tcase_add_test(tc, test_floor_probe_takes_one_alone);
        tcase_add_test(tc, test_stall_leaves_decodes_alone_factor);
        tcase_add_test(tc, test_starvation_guard);
        tcase_add_test(tc, test_never_an_empty_step);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
