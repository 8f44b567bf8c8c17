/* SPDX-License-Identifier: MIT */
/* The asynchronous engine on the real model, as vLLM's async-engine tests exercise AsyncLLM:
 * many concurrent streams with exact token counts in every output kind, aborts, pause modes,
 * priorities, stop strings, n > 1, sleep/wake_up, collective_rpc, health, engine death,
 * validation, and an idle engine that uses no CPU. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "async-llm.h"
#include "backend-open.h"
#include "bad-words.h"
#include "clock.h"
#include "model.h"
#include "test-helpers.h"
#include "tokenizer.h"

#define MAX_COMPLETIONS 4
#define MAX_TEXT 8192
#define MAX_TOKENS 1024

static struct model *model;
static struct tokenizer *tk;

static void load_model(void) {
        struct error err;
        ck_assert_msg(model_load(test_model_path(), &model, &err) == 0, "%s", err.message);
        ck_assert_msg(tokenizer_load(model->file, &tk, &err) == 0, "%s", err.message);
}

static void unload_model(void) {
        tokenizer_free(tk);
        model_free(model);
}

/* A backend around the CPU backend that can fail its N-th forward or hold each forward. */
struct injecting_backend {
        struct backend inner;
        atomic_int fail_at;
        atomic_int calls;
        atomic_bool hold; /* each forward waits while it is set: a step that hangs until released */
};

static int injecting_forward(void *impl, const struct batch *b, float **logits, struct error *err) {
        struct injecting_backend *f = impl;
        int call = atomic_fetch_add(&f->calls, 1) + 1;
        if (call == atomic_load(&f->fail_at))
                return error_set(err, EIO, "injected failure in forward %d", call);
        while (atomic_load(&f->hold))
                usleep(1000);
        return f->inner.forward(f->inner.impl, b, logits, err);
}

static int injecting_release(void *impl, unsigned what, struct error *err) {
        struct injecting_backend *f = impl;
        return f->inner.release_memory(f->inner.impl, what, err);
}

static int injecting_restore(void *impl, unsigned what, struct error *err) {
        struct injecting_backend *f = impl;
        return f->inner.restore_memory(f->inner.impl, what, err);
}

static void injecting_usage(void *impl, unsigned worker, struct backend_memory_usage *ret) {
        struct injecting_backend *f = impl;
        f->inner.memory_usage(f->inner.impl, worker, ret);
}

struct engine {
        struct injecting_backend inject;
        struct backend backend;
        struct async_llm *llm;
};

static void engine_config_small(struct engine_config *c) {
        engine_config_init_default(c);
        c->max_model_len = 1024;
        c->kv_cache_space = 64ull << 20;
}

static void engine_start(struct engine *e, struct engine_config *c) {
        struct error err;
        ck_assert_msg(engine_config_finalize(c, model->hp.n_ctx_train, &err) == 0, "%s", err.message);
        struct backend_options options = backend_options_for_engine(c, 2);
        ck_assert_msg(backend_open(test_device(), &options, model, &e->inject.inner, &err) == 0, "%s", err.message);
        e->backend = (struct backend) {
                .name = e->inject.inner.name, .impl = &e->inject, .forward = injecting_forward,
                .release_memory = injecting_release, .restore_memory = injecting_restore, .n_workers = 1,
                .memory_usage = injecting_usage, .kv = e->inject.inner.kv, .n_embd = e->inject.inner.n_embd,
                .weights_on_device = e->inject.inner.weights_on_device,
        };
        ck_assert_msg(async_llm_new(c, &e->backend, tk, &e->llm, &err) == 0, "%s",
                      err.message);
}

static void engine_start_small(struct engine *e) {
        struct engine_config c;
        engine_config_small(&c);
        engine_start(e, &c);
}

static void engine_stop(struct engine *e) {
        async_llm_free(e->llm);
        backend_free(&e->inject.inner);
}

/* Dispatches what the engine reported, waiting at most timeout_ms for it. */
static void pump(struct async_llm *llm, int timeout_ms) {
        struct pollfd p = { .fd = async_llm_fd(llm), .events = POLLIN };
        if (poll(&p, 1, timeout_ms) > 0)
                async_llm_dispatch(llm);
}

/* ---- a consumer that records everything a stream yields ---- */

struct collector {
        struct async_stream *stream;
        enum output_kind kind;
        bool take; /* false: a slow reader that never takes until told */
        uint32_t n_outputs;
        bool done;
        bool output_after_finish; /* a violation */
        bool text_not_growing;    /* cumulative text that did not extend the previous */
        char text[MAX_COMPLETIONS][MAX_TEXT];
        size_t text_len[MAX_COMPLETIONS];
        int32_t tokens[MAX_COMPLETIONS][MAX_TOKENS];
        float logprobs[MAX_COMPLETIONS][MAX_TOKENS];
        uint32_t n_tokens[MAX_COMPLETIONS];
        enum finish_reason reason[MAX_COMPLETIONS];
        char stop_reason[MAX_COMPLETIONS][64];
        int32_t stop_token[MAX_COMPLETIONS];
        uint32_t num_cached_tokens;
        char error[512];
        struct request_output *first; /* kept for prompt logprobs */
        uint64_t done_order;
};

static uint64_t done_counter;

static void collect_output(struct collector *c, struct request_output *o) {
        if (c->done)
                c->output_after_finish = true;
        c->n_outputs++;
        c->num_cached_tokens = o->num_cached_tokens;
        for (uint32_t i = 0; i < o->n_outputs; i++) {
                const struct completion_output *co = &o->outputs[i];
                uint32_t k = co->index;
                ck_assert_uint_lt(k, MAX_COMPLETIONS);
                if (c->kind != OUTPUT_DELTA) {
                        if (co->text_len < c->text_len[k] || memcmp(co->text, c->text[k], c->text_len[k]) != 0)
                                c->text_not_growing = true;
                        c->text_len[k] = 0;
                        c->n_tokens[k] = 0;
                }
                ck_assert_uint_lt(c->text_len[k] + co->text_len, MAX_TEXT);
                ck_assert_uint_le(c->n_tokens[k] + co->n_token_ids, MAX_TOKENS);
                memcpy(c->text[k] + c->text_len[k], co->text, co->text_len);
                c->text_len[k] += co->text_len;
                c->text[k][c->text_len[k]] = 0;
                for (uint32_t t = 0; t < co->n_token_ids; t++) {
                        c->logprobs[k][c->n_tokens[k]] = co->logprobs ? co->logprobs[t].logprob : NAN;
                        c->tokens[k][c->n_tokens[k]++] = co->token_ids[t];
                }
                c->reason[k] = co->finish_reason;
                c->stop_token[k] = co->stop_reason_token;
                snprintf(c->stop_reason[k], sizeof(c->stop_reason[k]), "%s", co->stop_reason_text ? co->stop_reason_text : "");
        }
        if (o->error)
                snprintf(c->error, sizeof(c->error), "%s", o->error);
        if (o->finished) {
                c->done = true;
                c->done_order = ++done_counter;
        }
        if (!c->first)
                c->first = o;
        else
                request_output_free(o);
}

static void collector_drain(struct collector *c) {
        struct request_output *o;
        while ((o = async_stream_take(c->stream)))
                collect_output(c, o);
}

static void on_notify(struct async_stream *s, void *userdata) {
        struct collector *c = userdata;
        (void) s;
        if (c->take)
                collector_drain(c);
}

static void collector_free(struct collector *c) {
        if (c->stream)
                async_stream_release(c->stream);
        request_output_free(c->first);
}

static void collectors_free(struct collector *c, size_t n) {
        for (size_t i = 0; i < n; i++)
                collector_free(&c[i]);
        free(c);
}

static struct collector *collectors_new(size_t n) {
        struct collector *c = calloc(n, sizeof(*c));
        ck_assert_ptr_nonnull(c);
        return c;
}

static int submit(struct async_llm *llm, struct collector *c, const char *id, const int32_t *prompt, uint32_t n_prompt,
                  const struct sampling_params *p, int32_t priority) {
        struct request_spec req = {
                .id = id, .prompt = prompt, .n_prompt = n_prompt, .params = *p, .class.priority = priority,
        };
        struct error err = { 0 };
        c->kind = p->output_kind;
        c->take = true;
        for (int i = 0; i < MAX_COMPLETIONS; i++)
                c->stop_token[i] = -1;
        int r = async_llm_generate(llm, &req, on_notify, c, &c->stream, &err);
        ck_assert_msg(r == 0, "generate %s: %s", id, err.message);
        return r;
}

static bool all_done(const struct collector *c, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (!c[i].done)
                        return false;
        return true;
}

static void wait_all(struct async_llm *llm, const struct collector *c, size_t n, double timeout) {
        double end = test_deadline(timeout);
        while (!all_done(c, n)) {
                ck_assert_msg(monotonic_seconds() < end, "requests did not finish within %.0f s", timeout);
                pump(llm, 100);
        }
}

static void wait_outputs(struct async_llm *llm, const struct collector *c, size_t n, uint32_t min_outputs) {
        double end = test_deadline(60);
        for (size_t i = 0; i < n; i++)
                while (c[i].n_outputs < min_outputs) {
                        ck_assert_msg(monotonic_seconds() < end, "no output within 60 s");
                        pump(llm, 100);
                }
}

/* Pumps for ms milliseconds. */
static void pump_for(struct async_llm *llm, int ms) {
        double end = monotonic_seconds() + ms / 1000.0;
        while (monotonic_seconds() < end)
                pump(llm, 20);
}

/* Waits until the engine holds no request and no block. */
static void wait_engine_empty(struct async_llm *llm) {
        struct async_llm_stats st;
        double end = test_deadline(30);
        for (;;) {
                pump(llm, 20);
                async_llm_stats(llm, &st);
                if (st.engine.stats.n_running + st.engine.stats.n_waiting == 0 && st.engine.stats.kv_blocks_used == 0 &&
                    st.n_streams == 0)
                        return;
                ck_assert_msg(monotonic_seconds() < end, "engine still holds %u running, %u waiting, %u blocks",
                              st.engine.stats.n_running, st.engine.stats.n_waiting, st.engine.stats.kv_blocks_used);
        }
}

/* ---- control replies ---- */

struct reply_box {
        bool done;
        int rc;
        char message[512];
        struct json_object *result;
        uint32_t collectors_done_at_reply; /* how many of watch[] had finished when the reply came */
        const struct collector *watch;
        size_t n_watch;
};

static void on_reply(int rc, const char *message, struct json_object *result, void *userdata) {
        struct reply_box *b = userdata;
        b->done = true;
        b->rc = rc;
        snprintf(b->message, sizeof(b->message), "%s", message ? message : "");
        b->result = result ? json_object_get(result) : NULL;
        for (size_t i = 0; i < b->n_watch; i++)
                b->collectors_done_at_reply += b->watch[i].done;
}

static void wait_reply(struct async_llm *llm, struct reply_box *b) {
        double end = test_deadline(60);
        while (!b->done) {
                ck_assert_msg(monotonic_seconds() < end, "no reply within 60 s");
                pump(llm, 100);
        }
}

static void reply_clear(struct reply_box *b) {
        json_object_put(b->result);
        *b = (struct reply_box) { 0 };
}

/* ---- prompts ---- */

static void make_prompt(uint32_t seed, uint32_t n, int32_t *out) {
        uint32_t x = seed * 2654435761u + 12345;
        for (uint32_t i = 0; i < n; i++) {
                x = x * 1103515245u + 12345;
                out[i] = (int32_t) (100 + (x >> 8) % 40000);
        }
}

static void greedy_params(struct sampling_params *p, int32_t max_tokens, enum output_kind kind) {
        sampling_params_init_default(p);
        p->temperature = 0;
        p->max_tokens = max_tokens;
        p->ignore_eos = true;
        p->output_kind = kind;
}

/* ---- tests ---- */

/* vLLM's test_load: 100 concurrent requests, exact token counts, finished only on the last
 * output; delta and final outputs of the same prompt agree. */
START_TEST(test_concurrent_exact_counts) {
        struct engine e = { 0 };
        engine_start_small(&e);
        enum { N = 100 };
        struct collector *c = collectors_new(N);
        int32_t prompt[32];
        for (uint32_t i = 0; i < N; i++) {
                struct sampling_params p;
                uint32_t pair = i / 2;
                greedy_params(&p, (int32_t) (1 + pair % 8), i % 2 ? OUTPUT_FINAL_ONLY : OUTPUT_DELTA);
                make_prompt(pair, 4 + pair % 13, prompt);
                char id[16];
                snprintf(id, sizeof(id), "req-%u", i);
                submit(e.llm, &c[i], id, prompt, 4 + pair % 13, &p, 0);
        }
        wait_all(e.llm, c, N, 300);
        for (uint32_t i = 0; i < N; i++) {
                uint32_t want = 1 + (i / 2) % 8;
                ck_assert_msg(!c[i].output_after_finish, "request %u produced an output after its finished one", i);
                ck_assert_uint_eq(c[i].n_tokens[0], want);
                ck_assert_int_eq(c[i].reason[0], FINISH_LENGTH);
                if (i % 2) {
                        ck_assert_uint_eq(c[i].n_outputs, 1); /* final only */
                        ck_assert_uint_eq(c[i].n_tokens[0], c[i - 1].n_tokens[0]);
                        ck_assert_mem_eq(c[i].tokens[0], c[i - 1].tokens[0], want * sizeof(int32_t));
                        ck_assert_str_eq(c[i].text[0], c[i - 1].text[0]);
                } else
                        ck_assert_uint_ge(c[i].n_outputs, 1);
        }
        for (uint32_t i = 0; i < N; i++)
                collector_free(&c[i]);
        wait_engine_empty(e.llm);
        free(c);
        engine_stop(&e);
}
END_TEST

/* Cumulative outputs extend each other and end where the delta stream of the same request
 * ends; a reader that never takes gets everything merged into one output. */
START_TEST(test_cumulative_and_slow_reader) {
        struct engine e = { 0 };
        engine_start_small(&e);
        struct collector *c = collectors_new(3);
        int32_t prompt[12];
        make_prompt(7, 12, prompt);
        struct sampling_params p;
        greedy_params(&p, 24, OUTPUT_CUMULATIVE);
        submit(e.llm, &c[0], "cumulative", prompt, 12, &p, 0);
        p.output_kind = OUTPUT_DELTA;
        submit(e.llm, &c[1], "delta", prompt, 12, &p, 0);
        submit(e.llm, &c[2], "slow", prompt, 12, &p, 0);
        c[2].take = false;
        wait_all(e.llm, c, 2, 120);
        wait_engine_empty(e.llm);
        ck_assert(async_stream_has_output(c[2].stream));
        collector_drain(&c[2]);
        ck_assert_uint_eq(c[2].n_outputs, 1); /* 24 tokens merged into one output */
        ck_assert(c[2].done);
        ck_assert_uint_gt(c[0].n_outputs, 1);
        ck_assert(!c[0].text_not_growing);
        for (int i = 0; i < 3; i++) {
                ck_assert_uint_eq(c[i].n_tokens[0], 24);
                ck_assert_mem_eq(c[i].tokens[0], c[1].tokens[0], 24 * sizeof(int32_t));
                ck_assert_str_eq(c[i].text[0], c[1].text[0]);
        }
        ck_assert_ptr_null(async_stream_take(c[2].stream));
        ck_assert(async_stream_done(c[2].stream));
        for (int i = 0; i < 3; i++)
                collector_free(&c[i]);
        free(c);
        engine_stop(&e);
}
END_TEST

/* Aborts: a final "abort" output, idempotent, unknown ids ignored, the id reusable at once,
 * every block back. */
START_TEST(test_abort) {
        struct engine e = { 0 };
        engine_start_small(&e);
        enum { N = 8 };
        struct collector *c = collectors_new(N + 1);
        int32_t prompt[20];
        struct sampling_params p;
        greedy_params(&p, 400, OUTPUT_DELTA);
        for (uint32_t i = 0; i < N; i++) {
                char id[16];
                snprintf(id, sizeof(id), "a%u", i);
                make_prompt(100 + i, 20, prompt);
                submit(e.llm, &c[i], id, prompt, 20, &p, 0);
        }
        wait_outputs(e.llm, c, N, 2);
        for (uint32_t i = 0; i < N / 2; i++) {
                char id[16];
                snprintf(id, sizeof(id), "a%u", i);
                ck_assert(async_llm_abort(e.llm, id));
                ck_assert(!async_llm_abort(e.llm, id)); /* idempotent */
                ck_assert(c[i].done);                   /* the final output came at once */
                ck_assert_int_eq(c[i].reason[0], FINISH_ABORT);
                ck_assert_uint_lt(c[i].n_tokens[0], 400);
        }
        ck_assert(!async_llm_abort(e.llm, "no-such-request"));
        /* the id of an aborted request can be used again at once */
        make_prompt(999, 20, prompt);
        greedy_params(&p, 3, OUTPUT_DELTA);
        submit(e.llm, &c[N], "a0", prompt, 20, &p, 0);
        wait_all(e.llm, &c[N], 1, 60);
        ck_assert_uint_eq(c[N].n_tokens[0], 3);
        ck_assert_int_eq(c[N].reason[0], FINISH_LENGTH);
        for (uint32_t i = N / 2; i < N; i++) {
                char id[16];
                snprintf(id, sizeof(id), "a%u", i);
                ck_assert(async_llm_abort(e.llm, id));
        }
        ck_assert(all_done(c, N + 1));
        for (uint32_t i = 0; i < N + 1; i++) {
                ck_assert(!c[i].output_after_finish);
                collector_free(&c[i]);
        }
        wait_engine_empty(e.llm);
        /* released while running: aborted, nothing leaks */
        struct collector *d = collectors_new(1);
        greedy_params(&p, 400, OUTPUT_DELTA);
        submit(e.llm, d, "dropped", prompt, 20, &p, 0);
        wait_outputs(e.llm, d, 1, 1);
        collector_free(d);
        wait_engine_empty(e.llm);
        free(d);
        free(c);
        engine_stop(&e);
}
END_TEST

static void tokens_now(const struct collector *c, size_t n, uint32_t *out) {
        for (size_t i = 0; i < n; i++)
                out[i] = c[i].n_tokens[0];
}

START_TEST(test_pause_keep) {
        struct engine e = { 0 };
        engine_start_small(&e);
        enum { N = 4 };
        struct collector *c = collectors_new(N + 1);
        int32_t prompt[16];
        struct sampling_params p;
        greedy_params(&p, 40, OUTPUT_DELTA);
        for (uint32_t i = 0; i < N; i++) {
                char id[16];
                snprintf(id, sizeof(id), "k%u", i);
                make_prompt(200 + i, 16, prompt);
                submit(e.llm, &c[i], id, prompt, 16, &p, 0);
        }
        wait_outputs(e.llm, c, N, 1);
        struct reply_box b = { 0 };
        ck_assert_int_eq(async_llm_pause(e.llm, PAUSE_KEEP, false, on_reply, &b), 0);
        wait_reply(e.llm, &b);
        ck_assert_int_eq(b.rc, 0);
        ck_assert(async_llm_is_paused(e.llm));
        pump_for(e.llm, 100);
        uint32_t before[N], after[N];
        tokens_now(c, N, before);
        /* a request sent while paused is accepted and waits */
        make_prompt(299, 16, prompt);
        submit(e.llm, &c[N], "k-late", prompt, 16, &p, 0);
        pump_for(e.llm, 400);
        tokens_now(c, N, after);
        ck_assert_mem_eq(before, after, sizeof(before));
        ck_assert_uint_eq(c[N].n_outputs, 0);
        for (uint32_t i = 0; i < N; i++)
                ck_assert(!c[i].done);
        struct error err;
        ck_assert_int_eq(async_llm_check_health(e.llm, 0.2, &err), 0); /* paused is not stalled */
        reply_clear(&b);
        ck_assert_int_eq(async_llm_resume(e.llm, on_reply, &b), 0);
        wait_reply(e.llm, &b);
        ck_assert(!async_llm_is_paused(e.llm));
        wait_all(e.llm, c, N + 1, 120);
        for (uint32_t i = 0; i <= N; i++) {
                ck_assert_uint_eq(c[i].n_tokens[0], 40);
                ck_assert_int_eq(c[i].reason[0], FINISH_LENGTH);
                collector_free(&c[i]);
        }
        reply_clear(&b);
        free(c);
        engine_stop(&e);
}
END_TEST

START_TEST(test_pause_wait) {
        struct engine e = { 0 };
        engine_start_small(&e);
        enum { N = 4 };
        struct collector *c = collectors_new(N + 1);
        int32_t prompt[16];
        struct sampling_params p;
        greedy_params(&p, 20, OUTPUT_DELTA);
        for (uint32_t i = 0; i < N; i++) {
                char id[16];
                snprintf(id, sizeof(id), "w%u", i);
                make_prompt(300 + i, 16, prompt);
                submit(e.llm, &c[i], id, prompt, 16, &p, 0);
        }
        wait_outputs(e.llm, c, N, 1);
        struct reply_box b = { .watch = c, .n_watch = N };
        ck_assert_int_eq(async_llm_pause(e.llm, PAUSE_WAIT, true, on_reply, &b), 0);
        make_prompt(399, 16, prompt);
        submit(e.llm, &c[N], "w-late", prompt, 16, &p, 0);
        wait_reply(e.llm, &b);
        ck_assert_int_eq(b.rc, 0);
        /* the reply comes once every request in flight finished, and after their outputs */
        ck_assert_uint_eq(b.collectors_done_at_reply, N);
        for (uint32_t i = 0; i < N; i++) {
                ck_assert_uint_eq(c[i].n_tokens[0], 20);
                ck_assert_int_eq(c[i].reason[0], FINISH_LENGTH);
        }
        ck_assert(async_llm_is_paused(e.llm));
        struct async_llm_stats st;
        async_llm_stats(e.llm, &st);
        ck_assert_uint_eq(st.engine.stats.kv_blocks_cached, 0); /* clear_cache */
        pump_for(e.llm, 300);
        ck_assert_uint_eq(c[N].n_outputs, 0); /* sent during the drain: waits for resume */
        reply_clear(&b);
        ck_assert_int_eq(async_llm_resume(e.llm, on_reply, &b), 0);
        wait_all(e.llm, c, N + 1, 60);
        ck_assert_uint_eq(c[N].n_tokens[0], 20);
        for (uint32_t i = 0; i <= N; i++)
                collector_free(&c[i]);
        wait_reply(e.llm, &b);
        reply_clear(&b);
        free(c);
        engine_stop(&e);
}
END_TEST

START_TEST(test_pause_abort) {
        struct engine e = { 0 };
        engine_start_small(&e);
        enum { N = 4 };
        struct collector *c = collectors_new(N + 1);
        int32_t prompt[16];
        struct sampling_params p;
        greedy_params(&p, 400, OUTPUT_DELTA);
        for (uint32_t i = 0; i < N; i++) {
                char id[16];
                snprintf(id, sizeof(id), "x%u", i);
                make_prompt(400 + i, 16, prompt);
                submit(e.llm, &c[i], id, prompt, 16, &p, 0);
        }
        wait_outputs(e.llm, c, N, 1);
        struct reply_box b = { .watch = c, .n_watch = N };
        ck_assert_int_eq(async_llm_pause(e.llm, PAUSE_ABORT, false, on_reply, &b), 0);
        wait_reply(e.llm, &b);
        ck_assert_int_eq(b.rc, 0);
        ck_assert_uint_eq(b.collectors_done_at_reply, N);
        for (uint32_t i = 0; i < N; i++)
                ck_assert_int_eq(c[i].reason[0], FINISH_ABORT);
        ck_assert(async_llm_is_paused(e.llm));
        reply_clear(&b);
        ck_assert_int_eq(async_llm_resume(e.llm, on_reply, &b), 0);
        greedy_params(&p, 5, OUTPUT_DELTA);
        submit(e.llm, &c[N], "x0", prompt, 16, &p, 0);
        wait_all(e.llm, c, N + 1, 60);
        ck_assert_uint_eq(c[N].n_tokens[0], 5);
        for (uint32_t i = 0; i <= N; i++)
                collector_free(&c[i]);
        wait_engine_empty(e.llm);
        reply_clear(&b);
        free(c);
        engine_stop(&e);
}
END_TEST

/* vLLM's priority test: priorities [2, 0, 1] with one seat are served as 1, 2, 0. */
START_TEST(test_priorities) {
        struct engine e = { 0 };
        struct engine_config cfg;
        engine_config_small(&cfg);
        cfg.scheduling_policy = SCHEDULING_PRIORITY;
        cfg.max_num_seqs = 1;
        engine_start(&e, &cfg);
        struct collector *c = collectors_new(3);
        struct reply_box b = { 0 };
        ck_assert_int_eq(async_llm_pause(e.llm, PAUSE_KEEP, false, on_reply, &b), 0);
        wait_reply(e.llm, &b);
        reply_clear(&b);
        int32_t prompt[8];
        struct sampling_params p;
        greedy_params(&p, 4, OUTPUT_DELTA);
        const int32_t priority[3] = { 2, 0, 1 };
        for (uint32_t i = 0; i < 3; i++) {
                char id[16];
                snprintf(id, sizeof(id), "p%u", i);
                make_prompt(500 + i, 8, prompt);
                submit(e.llm, &c[i], id, prompt, 8, &p, priority[i]);
        }
        ck_assert_int_eq(async_llm_resume(e.llm, on_reply, &b), 0);
        wait_all(e.llm, c, 3, 60);
        ck_assert_uint_lt(c[1].done_order, c[2].done_order);
        ck_assert_uint_lt(c[2].done_order, c[0].done_order);
        for (uint32_t i = 0; i < 3; i++)
                collector_free(&c[i]);
        reply_clear(&b);
        free(c);
        engine_stop(&e);
}
END_TEST

static void run_one(struct async_llm *llm, struct collector *c, const char *id, const int32_t *prompt, uint32_t n,
                    const struct sampling_params *p) {
        submit(llm, c, id, prompt, n, p, 0);
        wait_all(llm, c, 1, 120);
}

/* Stop strings: cut before the match (or after it), stop_reason the string, the streamed
 * pieces never run ahead of the final text; stop token ids likewise. */
START_TEST(test_stop_strings_and_tokens) {
        struct engine e = { 0 };
        engine_start_small(&e);
        struct collector *c = collectors_new(6);
        int32_t *prompt;
        size_t n_prompt;
        struct error err;
        const char *text = "Once upon a time, in a small village by the sea, there lived";
        ck_assert_int_eq(tokenizer_encode(tk, text, strlen(text), false, &prompt, &n_prompt, &err), 0);
        struct sampling_params p;
        greedy_params(&p, 32, OUTPUT_DELTA);
        run_one(e.llm, &c[0], "ref", prompt, (uint32_t) n_prompt, &p);
        const char *ref = c[0].text[0];
        ck_assert_uint_gt(strlen(ref), 40);
        /* a stop string from the middle of the reference, where it first occurs */
        size_t at = strlen(ref) / 2, len = 5;
        char stop[8];
        memcpy(stop, ref + at, len);
        stop[len] = 0;
        at = (size_t) (strstr(ref, stop) - ref);
        const char *stops[] = { "\x01never", stop };
        p.stop = stops;
        p.n_stop = 2;
        run_one(e.llm, &c[1], "cut", prompt, (uint32_t) n_prompt, &p);
        ck_assert_int_eq(c[1].reason[0], FINISH_STOP);
        ck_assert_str_eq(c[1].stop_reason[0], stop);
        ck_assert_uint_eq(c[1].text_len[0], at);
        ck_assert_mem_eq(c[1].text[0], ref, at);
        ck_assert_uint_lt(c[1].n_tokens[0], 32);
        p.include_stop_str_in_output = true;
        p.output_kind = OUTPUT_CUMULATIVE;
        run_one(e.llm, &c[2], "cut-incl", prompt, (uint32_t) n_prompt, &p);
        ck_assert_uint_eq(c[2].text_len[0], at + len);
        ck_assert_mem_eq(c[2].text[0], ref, at + len);
        ck_assert(!c[2].text_not_growing);

        /* a stop token id: counted in token_ids, left out of the text */
        int32_t stop_id = c[0].tokens[0][5];
        uint32_t first = 0;
        while (c[0].tokens[0][first] != stop_id)
                first++;
        sampling_params_init_default(&p);
        p.temperature = 0;
        p.max_tokens = 32;
        p.ignore_eos = true;
        p.output_kind = OUTPUT_DELTA;
        p.stop_token_ids = &stop_id;
        p.n_stop_token_ids = 1;
        run_one(e.llm, &c[3], "stop-id", prompt, (uint32_t) n_prompt, &p);
        ck_assert_int_eq(c[3].reason[0], FINISH_STOP);
        ck_assert_int_eq(c[3].stop_token[0], stop_id);
        ck_assert_uint_eq(c[3].n_tokens[0], first + 1);
        ck_assert_str_eq(c[3].stop_reason[0], "");
        char *decoded;
        ck_assert_int_eq(tokenizer_decode_text(tk, c[0].tokens[0], first, true, &decoded, NULL, &err), 0);
        ck_assert_str_eq(c[3].text[0], decoded);
        free(decoded);
        /* min_tokens masks the stop id until reached */
        p.min_tokens = (int32_t) first + 2;
        run_one(e.llm, &c[4], "stop-id-min", prompt, (uint32_t) n_prompt, &p);
        ck_assert_uint_ge(c[4].n_tokens[0], first + 2);

        /* a stop string spanning several tokens is found across their boundary */
        sampling_params_init_default(&p);
        p.temperature = 0;
        p.max_tokens = 32;
        p.ignore_eos = true;
        p.output_kind = OUTPUT_DELTA;
        char long_stop[32];
        size_t from = strlen(ref) / 3;
        memcpy(long_stop, ref + from, 12);
        long_stop[12] = 0;
        const char *one[] = { long_stop };
        p.stop = one;
        p.n_stop = 1;
        run_one(e.llm, &c[5], "spanning", prompt, (uint32_t) n_prompt, &p);
        ck_assert_int_eq(c[5].reason[0], FINISH_STOP);
        ck_assert_uint_eq(c[5].text_len[0], (size_t) (strstr(ref, long_stop) - ref));
        collectors_free(c, 6);
        free(prompt);
        engine_stop(&e);
}
END_TEST

/* The end of the first place in tokens[0..n) where a sequence ends, or n when none does. */
static uint32_t first_bad_word(const int32_t *tokens, uint32_t n, const struct bad_word_sequences *bw) {
        for (uint32_t end = 1; end <= n; end++)
                for (size_t i = 0, start = 0; i < bw->n; start = bw->ends[i++]) {
                        uint32_t len = bw->ends[i] - (uint32_t) start;
                        if (len <= end && memcmp(tokens + end - len, bw->token_ids + start, len * sizeof(int32_t)) == 0)
                                return end;
                }
        return n;
}

/* bad_words: tokenized as vLLM does (the word, then after a space), and the output follows
 * the reference up to where the reference spells one, then never spells it.
 * truncate_prompt_tokens: the prompt's last tokens, as if they had been the prompt. */
START_TEST(test_bad_words_and_truncation) {
        struct engine e = { 0 };
        engine_start_small(&e);
        struct collector *c = collectors_new(6);
        struct error err;
        int32_t *prompt, *ids;
        size_t n_prompt, n_ids;
        const char *text = "The capital of France is Paris. The capital of Italy is";
        ck_assert_int_eq(tokenizer_encode(tk, text, strlen(text), false, &prompt, &n_prompt, &err), 0);
        struct sampling_params p;
        greedy_params(&p, 24, OUTPUT_DELTA);
        run_one(e.llm, &c[0], "ref", prompt, (uint32_t) n_prompt, &p);

        /* the word of the reference's second token, with the leading whitespace vLLM strips */
        const char *piece = tokenizer_token_bytes(tk, c[0].tokens[0][1], NULL);
        char word[64];
        snprintf(word, sizeof(word), "  %s", piece + strspn(piece, " "));
        const char *words[] = { word, "Rome", word };
        struct bad_word_sequences bw;
        ck_assert_int_eq(bad_words_tokenize(tk, words, 3, &bw, &err), 0);
        ck_assert_uint_ge(bw.n, 2);
        ck_assert_uint_le(bw.n, 4); /* the repeated word counts once */
        ck_assert_int_eq(tokenizer_encode(tk, word + 2, strlen(word + 2), true, &ids, &n_ids, &err), 0);
        ck_assert_uint_eq(bw.ends[0], n_ids);
        ck_assert_mem_eq(bw.token_ids, ids, n_ids * sizeof(int32_t));
        free(ids);

        p.bad_words = words;
        p.n_bad_words = 3;
        run_one(e.llm, &c[1], "banned", prompt, (uint32_t) n_prompt, &p);
        uint32_t at = first_bad_word(c[0].tokens[0], c[0].n_tokens[0], &bw);
        ck_assert_uint_lt(at, c[0].n_tokens[0]); /* the reference does spell one */
        ck_assert_uint_eq(first_bad_word(c[1].tokens[0], c[1].n_tokens[0], &bw), c[1].n_tokens[0]);
        ck_assert_uint_eq(c[1].n_tokens[0], 24);
        ck_assert_mem_eq(c[1].tokens[0], c[0].tokens[0], (at - 1) * sizeof(int32_t));
        ck_assert_int_ne(c[1].tokens[0][at - 1], c[0].tokens[0][at - 1]);
        bad_word_sequences_done(&bw);

        const char *blank[] = { " \t" };
        ck_assert_int_eq(bad_words_tokenize(tk, blank, 1, &bw, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "at least one token"));

        /* the prompt's last 5 tokens, and the longest prompt the context allows (-1) */
        greedy_params(&p, 8, OUTPUT_DELTA);
        p.truncate_prompt_tokens = 5;
        run_one(e.llm, &c[2], "truncated", prompt, (uint32_t) n_prompt, &p);
        p.truncate_prompt_tokens = SAMPLING_TRUNCATE_NONE;
        run_one(e.llm, &c[3], "tail", prompt + n_prompt - 5, 5, &p);
        ck_assert_uint_eq(c[2].n_tokens[0], 8);
        ck_assert_mem_eq(c[2].tokens[0], c[3].tokens[0], 8 * sizeof(int32_t));

        int32_t long_prompt[1100];
        make_prompt(7, 1100, long_prompt);
        p.max_tokens = 1;
        p.truncate_prompt_tokens = SAMPLING_TRUNCATE_TO_CONTEXT;
        run_one(e.llm, &c[4], "to-context", long_prompt, 1100, &p);
        p.truncate_prompt_tokens = SAMPLING_TRUNCATE_NONE;
        run_one(e.llm, &c[5], "context-tail", long_prompt + 1100 - 1023, 1023, &p);
        ck_assert_str_eq(c[4].error, "");
        ck_assert_uint_eq(c[4].n_tokens[0], 1);
        ck_assert_int_eq(c[4].tokens[0][0], c[5].tokens[0][0]);

        collectors_free(c, 6);
        free(prompt);
        engine_stop(&e);
}
END_TEST

/* n > 1: children are seeded seed + index, give what n = 1 requests with those seeds give,
 * share the prompt's blocks, and end together on abort. */
START_TEST(test_n_children) {
        struct engine e = { 0 };
        engine_start_small(&e);
        struct collector *c = collectors_new(5);
        int32_t prompt[40];
        make_prompt(600, 40, prompt);
        struct sampling_params p;
        sampling_params_init_default(&p);
        p.temperature = 0.9;
        p.has_seed = true;
        p.seed = 42;
        p.max_tokens = 10;
        p.ignore_eos = true;
        p.n = 3;
        p.output_kind = OUTPUT_DELTA;
        run_one(e.llm, &c[0], "fan", prompt, 40, &p);
        ck_assert_uint_ge(c[0].num_cached_tokens, 32); /* siblings share two full blocks */
        p.n = 1;
        for (uint32_t i = 0; i < 3; i++) {
                char id[16];
                snprintf(id, sizeof(id), "solo%u", i);
                p.seed = 42 + i;
                run_one(e.llm, &c[1 + i], id, prompt, 40, &p);
                ck_assert_uint_eq(c[0].n_tokens[i], 10);
                ck_assert_int_eq(c[0].reason[i], FINISH_LENGTH);
                ck_assert_mem_eq(c[0].tokens[i], c[1 + i].tokens[0], 10 * sizeof(int32_t));
                ck_assert_str_eq(c[0].text[i], c[1 + i].text[0]);
        }
        p.n = 3;
        p.max_tokens = 400;
        submit(e.llm, &c[4], "fan-abort", prompt, 40, &p, 0);
        wait_outputs(e.llm, &c[4], 1, 2);
        ck_assert(async_llm_abort(e.llm, "fan-abort"));
        ck_assert(c[4].done);
        for (uint32_t i = 0; i < 3; i++)
                ck_assert_int_eq(c[4].reason[i], FINISH_ABORT);
        for (int i = 0; i < 5; i++)
                collector_free(&c[i]);
        wait_engine_empty(e.llm);
        free(c);
        engine_stop(&e);
}
END_TEST

/* Logprobs of prompt tokens: the first generated token's logprob, rated again as part of a
 * longer prompt, is the same; so is each later one, against a request whose prompt ends just
 * before it. (Rating a generated token as a prompt token sums attention in prompt order, as
 * llama.cpp does, so it may differ from the logprob it had when it was generated: here by
 * 0.1 at the third token, in llama.cpp exactly as here.) */
START_TEST(test_prompt_logprobs) {
        struct engine e = { 0 };
        engine_start_small(&e);
        struct collector *c = collectors_new(5);
        int32_t prompt[60];
        make_prompt(700, 20, prompt);
        struct sampling_params p;
        greedy_params(&p, 12, OUTPUT_DELTA);
        p.logprobs = 0;
        run_one(e.llm, &c[0], "gen", prompt, 20, &p);
        memcpy(prompt + 20, c[0].tokens[0], 12 * sizeof(int32_t));
        greedy_params(&p, 1, OUTPUT_DELTA);
        p.prompt_logprobs = 2;
        run_one(e.llm, &c[1], "rate", prompt, 32, &p);
        const struct request_output *o = c[1].first;
        ck_assert_ptr_nonnull(o->prompt_logprobs);
        ck_assert_uint_eq(o->n_prompt, 32);
        ck_assert_int_eq(o->prompt_logprobs[0].token, -1);
        for (uint32_t i = 1; i < 32; i++) {
                ck_assert_int_eq(o->prompt_logprobs[i].token, prompt[i]);
                ck_assert(o->prompt_logprobs[i].n_top == 2 || o->prompt_logprobs[i].n_top == 3);
                ck_assert_int_ge(o->prompt_logprobs[i].rank, 1);
                ck_assert(o->prompt_logprobs[i].logprob <= 0);
        }
        ck_assert(o->prompt_logprobs[20].logprob == c[0].logprobs[0][0]);
        const uint32_t at[] = { 1, 5, 11 };
        for (uint32_t k = 0; k < 3; k++) {
                char id[16];
                snprintf(id, sizeof(id), "upto%u", at[k]);
                greedy_params(&p, 1, OUTPUT_DELTA);
                p.logprobs = 0;
                p.has_allowed_token_ids = true; /* force the token; its logprob comes from the raw logits */
                p.allowed_token_ids = &prompt[20 + at[k]];
                p.n_allowed_token_ids = 1;
                run_one(e.llm, &c[2 + k], id, prompt, 20 + at[k], &p);
                ck_assert_int_eq(c[2 + k].tokens[0][0], prompt[20 + at[k]]);
                float rated = o->prompt_logprobs[20 + at[k]].logprob, sampled = c[2 + k].logprobs[0][0];
                ck_assert_msg(rated == sampled, "token %u: rated %.9g, sampled %.9g", at[k], rated, sampled);
        }
        for (int i = 0; i < 5; i++)
                collector_free(&c[i]);
        free(c);
        engine_stop(&e);
}
END_TEST

static uint64_t rss_bytes(void) {
        unsigned long size, resident;
        FILE *f = fopen("/proc/self/statm", "re");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(fscanf(f, "%lu %lu", &size, &resident), 2);
        fclose(f);
        return (uint64_t) resident * (uint64_t) sysconf(_SC_PAGESIZE);
}

static uint64_t usage_field(struct json_object *result, const char *key) {
        struct json_object *o = json_object_array_get_idx(result, 0), *v;
        ck_assert(json_object_object_get_ex(o, key, &v));
        return json_object_get_uint64(v);
}

/* What the backend holds in memory now: the device's used memory where memory_usage reports
 * a device (a GPU backend), else the process's RSS. */
static uint64_t held_bytes(struct async_llm *llm) {
        struct reply_box b = { 0 };
        struct json_object *o, *v;
        ck_assert_int_eq(async_llm_collective_rpc(llm, "memory_usage", NULL, on_reply, &b), 0);
        wait_reply(llm, &b);
        o = json_object_array_get_idx(b.result, 0);
        uint64_t held = rss_bytes();
        if (json_object_object_get_ex(o, "device_free_bytes", &v)) {
                uint64_t free_bytes = json_object_get_uint64(v);
                ck_assert(json_object_object_get_ex(o, "device_total_bytes", &v));
                held = json_object_get_uint64(v) - free_bytes;
        }
        reply_clear(&b);
        return held;
}

/* sleep level 2 gives back the KV pool and the weights (the memory held drops by both),
 * requests sent meanwhile wait, and after wake_up the outputs are the same as before. */
START_TEST(test_sleep_wake_up) {
        struct engine e = { 0 };
        engine_start_small(&e);
        struct collector *c = collectors_new(3);
        int32_t prompt[24];
        make_prompt(800, 24, prompt);
        struct sampling_params p;
        greedy_params(&p, 16, OUTPUT_DELTA);
        run_one(e.llm, &c[0], "before", prompt, 24, &p);

        struct reply_box b = { 0 };
        ck_assert_int_eq(async_llm_collective_rpc(e.llm, "memory_usage", NULL, on_reply, &b), 0);
        wait_reply(e.llm, &b);
        uint64_t weights = usage_field(b.result, "weights_bytes"), kv = usage_field(b.result, "kv_cache_bytes");
        ck_assert_uint_gt(weights, 50u << 20);
        ck_assert_uint_gt(kv, 50u << 20);
        reply_clear(&b);

        uint64_t awake = held_bytes(e.llm);
        ck_assert_int_eq(async_llm_sleep(e.llm, 2, on_reply, &b), 0);
        wait_reply(e.llm, &b);
        ck_assert_msg(b.rc == 0, "%s", b.message);
        ck_assert(async_llm_is_sleeping(e.llm));
        uint64_t asleep = held_bytes(e.llm);
        ck_assert_msg(awake > asleep && awake - asleep >= (weights + kv) * 8 / 10,
                      "%llu bytes held awake, %llu asleep; expected a drop of about %llu",
                      (unsigned long long) awake, (unsigned long long) asleep, (unsigned long long) (weights + kv));
        reply_clear(&b);
        ck_assert_int_eq(async_llm_collective_rpc(e.llm, "memory_usage", NULL, on_reply, &b), 0);
        wait_reply(e.llm, &b);
        ck_assert_uint_eq(usage_field(b.result, "weights_bytes"), 0);
        ck_assert_uint_eq(usage_field(b.result, "kv_cache_bytes"), 0);
        reply_clear(&b);

        submit(e.llm, &c[1], "asleep", prompt, 24, &p, 0);
        pump_for(e.llm, 300);
        ck_assert_uint_eq(c[1].n_outputs, 0);
        struct error err;
        ck_assert_int_eq(async_llm_check_health(e.llm, 0.1, &err), 0); /* asleep is not stalled */

        ck_assert_int_eq(async_llm_wake_up(e.llm, BACKEND_MEMORY_WEIGHTS, on_reply, &b), 0);
        wait_reply(e.llm, &b);
        ck_assert_int_eq(b.rc, 0);
        ck_assert(async_llm_is_sleeping(e.llm)); /* the KV cache is still released */
        pump_for(e.llm, 200);
        ck_assert_uint_eq(c[1].n_outputs, 0);
        reply_clear(&b);
        ck_assert_int_eq(async_llm_wake_up(e.llm, 0, on_reply, &b), 0);
        wait_reply(e.llm, &b);
        ck_assert(!async_llm_is_sleeping(e.llm));
        wait_all(e.llm, &c[1], 1, 60);
        ck_assert_mem_eq(c[1].tokens[0], c[0].tokens[0], 16 * sizeof(int32_t));
        ck_assert_mem_eq(c[1].logprobs[0], c[0].logprobs[0], 16 * sizeof(float));
        reply_clear(&b);

        /* level 1: the KV cache only */
        ck_assert_int_eq(async_llm_sleep(e.llm, 1, on_reply, &b), 0);
        wait_reply(e.llm, &b);
        reply_clear(&b);
        ck_assert_int_eq(async_llm_collective_rpc(e.llm, "memory_usage", NULL, on_reply, &b), 0);
        wait_reply(e.llm, &b);
        /* a backend whose weights live in device memory moves them off the device (vLLM's level 1) */
        ck_assert_uint_eq(usage_field(b.result, "weights_bytes"), e.backend.weights_on_device ? 0 : weights);
        ck_assert_uint_eq(usage_field(b.result, "kv_cache_bytes"), 0);
        reply_clear(&b);
        ck_assert_int_eq(async_llm_wake_up(e.llm, BACKEND_MEMORY_KV_CACHE, on_reply, &b), 0);
        wait_reply(e.llm, &b);
        reply_clear(&b);
        ck_assert(async_llm_is_sleeping(e.llm) == e.backend.weights_on_device);
        if (e.backend.weights_on_device) {
                ck_assert_int_eq(async_llm_wake_up(e.llm, BACKEND_MEMORY_WEIGHTS, on_reply, &b), 0);
                wait_reply(e.llm, &b);
                ck_assert_int_eq(b.rc, 0);
                reply_clear(&b);
        }
        run_one(e.llm, &c[2], "after", prompt, 24, &p);
        ck_assert_mem_eq(c[2].tokens[0], c[0].tokens[0], 16 * sizeof(int32_t));
        for (int i = 0; i < 3; i++)
                collector_free(&c[i]);
        free(c);
        engine_stop(&e);
}
END_TEST

START_TEST(test_collective_rpc) {
        struct engine e = { 0 };
        engine_start_small(&e);
        struct reply_box b = { 0 };
        ck_assert_int_eq(async_llm_collective_rpc(e.llm, "ping", NULL, on_reply, &b), 0);
        wait_reply(e.llm, &b);
        ck_assert_int_eq(b.rc, 0);
        ck_assert_str_eq(json_object_to_json_string(b.result), "[ \"pong\" ]");
        reply_clear(&b);

        ck_assert_int_eq(async_llm_collective_rpc(e.llm, "kv_cache_info", NULL, on_reply, &b), 0);
        wait_reply(e.llm, &b);
        struct json_object *info = json_object_array_get_idx(b.result, 0), *v;
        ck_assert(json_object_object_get_ex(info, "num_blocks", &v));
        ck_assert_int_gt(json_object_get_int(v), 100);
        ck_assert(json_object_object_get_ex(info, "block_size", &v));
        ck_assert_int_eq(json_object_get_int(v), 16);
        reply_clear(&b);

        ck_assert_int_eq(async_llm_collective_rpc(e.llm, "reset_prefix_cache", NULL, on_reply, &b), 0);
        wait_reply(e.llm, &b);
        ck_assert_int_eq(b.rc, 0);
        reply_clear(&b);

        ck_assert_int_eq(async_llm_collective_rpc(e.llm, "reset_prefix_cache", json_tokener_parse("[1]"), on_reply, &b), 0);
        wait_reply(e.llm, &b);
        ck_assert_int_eq(b.rc, -EINVAL);
        reply_clear(&b);

        ck_assert_int_eq(async_llm_collective_rpc(e.llm, "no_such_method", NULL, on_reply, &b), 0);
        wait_reply(e.llm, &b);
        ck_assert_int_eq(b.rc, -ENOENT);
        ck_assert_msg(strstr(b.message, "no_such_method") && strstr(b.message, "ping"), "%s", b.message);
        reply_clear(&b);

        /* reset while a request holds blocks: refused, or done by preempting it */
        struct collector *c = collectors_new(2);
        int32_t prompt[40];
        make_prompt(900, 40, prompt);
        struct sampling_params p;
        greedy_params(&p, 30, OUTPUT_DELTA);
        run_one(e.llm, &c[0], "ref", prompt, 40, &p);
        submit(e.llm, &c[1], "held", prompt, 40, &p, 0);
        wait_outputs(e.llm, &c[1], 1, 1);
        ck_assert_int_eq(async_llm_reset_prefix_cache(e.llm, false, on_reply, &b), 0);
        wait_reply(e.llm, &b);
        if (!c[1].done) /* the request may have ended meanwhile; then the reset is allowed */
                ck_assert_int_eq(b.rc, -EBUSY);
        reply_clear(&b);
        ck_assert_int_eq(async_llm_reset_prefix_cache(e.llm, true, on_reply, &b), 0);
        wait_reply(e.llm, &b);
        ck_assert_int_eq(b.rc, 0);
        wait_all(e.llm, &c[1], 1, 60);
        ck_assert_mem_eq(c[1].tokens[0], c[0].tokens[0], 30 * sizeof(int32_t)); /* recomputed, same output */
        reply_clear(&b);
        for (int i = 0; i < 2; i++)
                collector_free(&c[i]);
        free(c);
        engine_stop(&e);
}
END_TEST

/* Waits until the injecting backend's forward has been called (and holds, if hold is set). */
static void wait_forward_called(struct engine *e) {
        double end = test_deadline(10);
        while (atomic_load(&e->inject.calls) == 0) {
                ck_assert_msg(monotonic_seconds() < end, "no step started");
                usleep(1000);
        }
}

/* Health: a step that hangs turns it red after the stall timeout, and green again after. The
 * step hangs until the test releases it, so no sleep has to outlast it. */
START_TEST(test_health_stall) {
        struct engine e = { 0 };
        engine_start_small(&e);
        struct error err;
        ck_assert_int_eq(async_llm_check_health(e.llm, 0.5, &err), 0);
        struct collector *c = collectors_new(1);
        int32_t prompt[8];
        make_prompt(1000, 8, prompt);
        struct sampling_params p;
        greedy_params(&p, 2, OUTPUT_DELTA);
        atomic_store(&e.inject.hold, true);
        submit(e.llm, c, "stuck", prompt, 8, &p, 0);
        wait_forward_called(&e);
        /* a hanging step is not a stall until it outlasts the timeout */
        ck_assert_int_eq(async_llm_check_health(e.llm, 3600, &err), 0);
        double end = test_deadline(10);
        int rc;
        while ((rc = async_llm_check_health(e.llm, 0.5, &err)) == 0) {
                ck_assert_msg(monotonic_seconds() < end, "health stayed green while a step hung");
                usleep(20 * 1000);
        }
        ck_assert_int_eq(rc, -ETIMEDOUT);
        ck_assert_msg(strstr(err.message, "no progress"), "%s", err.message);
        atomic_store(&e.inject.hold, false);
        wait_all(e.llm, c, 1, 60);
        ck_assert_int_eq(async_llm_check_health(e.llm, 0.5, &err), 0);
        collector_free(c);
        free(c);
        engine_stop(&e);
}
END_TEST

/* An abort that arrives while the step that would finish the request runs wins: the request
 * ends "abort", not "length", and its blocks are back by the end of that step. */
START_TEST(test_abort_during_step) {
        struct engine e = { 0 };
        engine_start_small(&e);
        struct collector *c = collectors_new(1);
        int32_t prompt[24];
        make_prompt(1050, 24, prompt);
        struct sampling_params p;
        greedy_params(&p, 1, OUTPUT_FINAL_ONLY);
        atomic_store(&e.inject.hold, true);
        submit(e.llm, c, "mid-step", prompt, 24, &p, 0);
        wait_forward_called(&e); /* the step is under way, and holds until released */
        ck_assert(async_llm_abort(e.llm, "mid-step"));
        atomic_store(&e.inject.hold, false);
        wait_all(e.llm, c, 1, 30);
        ck_assert_int_eq(c->reason[0], FINISH_ABORT);
        wait_engine_empty(e.llm);
        struct async_llm_stats st;
        async_llm_stats(e.llm, &st);
        ck_assert_uint_eq(st.engine.stats.finished[FINISH_ABORT], 1);
        ck_assert_uint_eq(st.engine.stats.finished[FINISH_LENGTH], 0);
        ck_assert_uint_eq(st.engine.stats.generation_tokens, 0);
        collector_free(c);
        free(c);
        engine_stop(&e);
}
END_TEST

/* The counters the metrics will print: requests, tokens, prefix-cache hits, steps. */
START_TEST(test_stats) {
        struct engine e = { 0 };
        engine_start_small(&e);
        struct collector *c = collectors_new(4);
        int32_t prompt[40];
        make_prompt(1400, 40, prompt);
        struct sampling_params p;
        greedy_params(&p, 6, OUTPUT_DELTA);
        struct reply_box b = { 0 };
        ck_assert_int_eq(async_llm_pause(e.llm, PAUSE_KEEP, false, on_reply, &b), 0); /* one batch for all three */
        wait_reply(e.llm, &b);
        reply_clear(&b);
        submit(e.llm, &c[0], "s0", prompt, 40, &p, 0);
        submit(e.llm, &c[1], "s1", prompt + 10, 30, &p, 0);
        submit(e.llm, &c[2], "s2", prompt + 20, 20, &p, 0);
        ck_assert_int_eq(async_llm_resume(e.llm, on_reply, &b), 0);
        wait_all(e.llm, c, 3, 60);
        wait_reply(e.llm, &b);
        reply_clear(&b);
        struct async_llm_stats st;
        async_llm_stats(e.llm, &st);
        ck_assert_uint_eq(st.engine.stats.prompt_tokens, 90);
        ck_assert_uint_eq(st.engine.stats.generation_tokens, 18);
        ck_assert_uint_eq(st.engine.stats.finished[FINISH_LENGTH], 3);
        ck_assert_uint_eq(st.engine.stats.preemptions, 0);
        ck_assert_uint_eq(st.engine.stats.prefix_query_tokens, 90);
        ck_assert_uint_eq(st.engine.stats.prefix_hit_tokens, 0);
        ck_assert_uint_eq(st.engine.stats.steps, 6); /* one prefill step with the first token, five decodes */
        ck_assert_uint_eq(st.engine.stats.scheduled_tokens, 90 + 3 * 5);
        /* the same 40-token prompt again: two full blocks come from the cache */
        submit(e.llm, &c[3], "s3", prompt, 40, &p, 0);
        wait_all(e.llm, &c[3], 1, 60);
        ck_assert_uint_eq(c[3].num_cached_tokens, 32);
        ck_assert_mem_eq(c[3].tokens[0], c[0].tokens[0], 6 * sizeof(int32_t));
        async_llm_stats(e.llm, &st);
        ck_assert_uint_eq(st.engine.stats.prefix_query_tokens, 130);
        ck_assert_uint_eq(st.engine.stats.prefix_hit_tokens, 32);
        ck_assert_uint_eq(st.engine.stats.prompt_tokens, 98);
        ck_assert_uint_eq(st.engine.stats.n_running + st.engine.stats.n_waiting, 0);
        ck_assert_uint_gt(st.engine.stats.kv_blocks_total, 100);
        ck_assert_uint_eq(st.engine.stats.kv_blocks_used, 0);
        ck_assert_uint_ge(st.engine.stats.kv_blocks_cached, 2);
        for (int i = 0; i < 4; i++)
                collector_free(&c[i]);
        free(c);
        engine_stop(&e);
}
END_TEST

/* Requests that reach an idle engine a moment apart start in one step: four added 0.2 ms
 * apart (longer than the engine takes to wake, shorter than the 1 ms it waits for the next
 * one), each wanting one token, finish in a single step. A wave counts if any of five does
 * so, since a test thread descheduled for over 1 ms between two adds splits that wave;
 * without the gathering none does. */
START_TEST(test_wave_starts_in_one_step) {
        struct engine e = { 0 };
        engine_start_small(&e);
        int32_t prompt[40];
        make_prompt(1500, 40, prompt);
        struct sampling_params p;
        greedy_params(&p, 1, OUTPUT_DELTA);
        static const char *const ids[] = { "w0", "w1", "w2", "w3" };
        uint64_t fewest_steps = UINT64_MAX;
        for (int wave = 0; wave < 5 && fewest_steps > 1; wave++) {
                struct collector *c = collectors_new(4);
                struct async_llm_stats before, after;
                async_llm_stats(e.llm, &before);
                for (int i = 0; i < 4; i++) {
                        submit(e.llm, &c[i], ids[i], prompt + 5 * i, 20, &p, 0);
                        nanosleep(&(struct timespec) { .tv_nsec = 200000 }, NULL);
                }
                wait_all(e.llm, c, 4, 60);
                async_llm_stats(e.llm, &after);
                ck_assert_uint_eq(after.engine.stats.finished[FINISH_LENGTH] - before.engine.stats.finished[FINISH_LENGTH], 4);
                uint64_t steps = after.engine.stats.steps - before.engine.stats.steps;
                if (steps < fewest_steps)
                        fewest_steps = steps;
                for (int i = 0; i < 4; i++)
                        collector_free(&c[i]);
                free(c);
                wait_engine_empty(e.llm);
        }
        ck_assert_uint_eq(fewest_steps, 1);
        engine_stop(&e);
}
END_TEST

/* A failing step kills the engine: every request ends with an error naming it, new ones are
 * refused, health is red. */
START_TEST(test_engine_death) {
        struct engine e = { 0 };
        engine_start_small(&e);
        atomic_store(&e.inject.fail_at, 4);
        enum { N = 4 };
        struct collector *c = collectors_new(N);
        int32_t prompt[16];
        struct sampling_params p;
        greedy_params(&p, 50, OUTPUT_DELTA);
        for (uint32_t i = 0; i < N; i++) {
                char id[16];
                snprintf(id, sizeof(id), "d%u", i);
                make_prompt(1100 + i, 16, prompt);
                submit(e.llm, &c[i], id, prompt, 16, &p, 0);
        }
        wait_all(e.llm, c, N, 60);
        for (uint32_t i = 0; i < N; i++) {
                ck_assert_int_eq(c[i].reason[0], FINISH_ERROR);
                ck_assert_msg(strstr(c[i].error, "engine_dead") && strstr(c[i].error, "injected failure"), "%s",
                              c[i].error);
        }
        struct error err;
        ck_assert_int_eq(async_llm_check_health(e.llm, 10, &err), -ESHUTDOWN);
        ck_assert_msg(strstr(err.message, "engine_dead"), "%s", err.message);
        struct async_stream *s;
        struct request_spec req = { .id = "late", .prompt = prompt, .n_prompt = 16, .params = p };
        ck_assert_int_eq(async_llm_generate(e.llm, &req, NULL, NULL, &s, &err), -ESHUTDOWN);
        for (uint32_t i = 0; i < N; i++)
                collector_free(&c[i]);
        free(c);
        engine_stop(&e);
}
END_TEST

static void expect_invalid(struct async_llm *llm, const struct request_spec *req, int code, const char *needle) {
        struct async_stream *s = NULL;
        struct error err = { 0 };
        int r = async_llm_generate(llm, req, NULL, NULL, &s, &err);
        ck_assert_msg(r == code, "expected %d, got %d (%s)", code, r, err.message);
        ck_assert_msg(strstr(err.message, needle), "message '%s' does not name '%s'", err.message, needle);
}

START_TEST(test_validation) {
        struct engine e = { 0 };
        engine_start_small(&e);
        int32_t prompt[1100];
        make_prompt(1200, 1100, prompt);
        struct sampling_params p;
        struct request_spec req = { .id = "v", .prompt = prompt, .n_prompt = 8 };
        const char *empty_stop[] = { "" };
        struct logit_bias bad_bias = { 60000, 1.0f };
        static const char *const needles[] = {
                "prompt is empty", "max_model_len", "vocabulary", "max_tokens", "min_tokens", "temperature", "top_p",
                "top_p", "logprobs", "n must be", "stop[0] is empty", "logit_bias[0]", "output_kind",
        };
        static const int32_t foreign[] = { 5, 49152, 7 };
        for (size_t i = 0; i < sizeof(needles) / sizeof(*needles); i++) {
                struct request_spec r = req;
                sampling_params_init_default(&r.params);
                switch (i) {
                case 0: r.n_prompt = 0; break;
                case 1: r.n_prompt = 1024; break;
                case 2: r.prompt = foreign; r.n_prompt = 3; break;
                case 3: r.params.max_tokens = 0; break;
                case 4: r.params.min_tokens = 20; r.params.max_tokens = 10; break;
                case 5: r.params.temperature = -0.5; break;
                case 6: r.params.top_p = 0; break;
                case 7: r.params.top_p = 1.5; break;
                case 8: r.params.logprobs = 21; break;
                case 9: r.params.n = 0; break;
                case 10: r.params.stop = empty_stop; r.params.n_stop = 1; break;
                case 11: r.params.logit_bias = &bad_bias; r.params.n_logit_bias = 1; break;
                case 12: r.params.output_kind = (enum output_kind) 7; break;
                }
                expect_invalid(e.llm, &r, -EINVAL, needles[i]);
        }
        /* a duplicate id in flight */
        struct collector *c = collectors_new(1);
        greedy_params(&p, 300, OUTPUT_DELTA);
        submit(e.llm, c, "dup", prompt, 8, &p, 0);
        req.params = p;
        req.id = "dup";
        expect_invalid(e.llm, &req, -EEXIST, "dup");
        req.id = "";
        expect_invalid(e.llm, &req, -EINVAL, "request_id");
        collector_free(c);
        wait_engine_empty(e.llm);
        free(c);
        engine_stop(&e);
}
END_TEST

/* An idle engine sleeps: no CPU time goes by while nothing is asked of it. */
START_TEST(test_idle_uses_no_cpu) {
        struct engine e = { 0 };
        engine_start_small(&e);
        struct collector *c = collectors_new(1);
        int32_t prompt[8];
        make_prompt(1300, 8, prompt);
        struct sampling_params p;
        greedy_params(&p, 4, OUTPUT_DELTA);
        run_one(e.llm, c, "warm", prompt, 8, &p);
        pump_for(e.llm, (int) (test_scaled(0.1) * 1000)); /* let the thread pool's spinning run out */
        struct timespec a, b;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
        usleep(500 * 1000); /* the window watched: one spinning thread would use all of it */
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
        double used = (double) (b.tv_sec - a.tv_sec) + (double) (b.tv_nsec - a.tv_nsec) * 1e-9;
        /* what waking up now and then costs, stretched like every margin; still far below 0.5 s */
        double allowed = fmin(test_scaled(0.01), 0.1);
        ck_assert_msg(used < allowed, "the idle engine used %.3f s of CPU in 0.5 s (allowed %.3f s)", used, allowed);
        collector_free(c);
        free(c);
        engine_stop(&e);
}
END_TEST

static Suite *suite(void) {
        Suite *s = suite_create("async-llm");
        TCase *tc = tcase_create("real-model");
        tcase_add_unchecked_fixture(tc, load_model, unload_model);
        tcase_set_timeout(tc, 600);
        tcase_add_test(tc, test_concurrent_exact_counts);
        tcase_add_test(tc, test_cumulative_and_slow_reader);
        tcase_add_test(tc, test_abort);
        tcase_add_test(tc, test_pause_keep);
        tcase_add_test(tc, test_pause_wait);
        tcase_add_test(tc, test_pause_abort);
        tcase_add_test(tc, test_priorities);
        tcase_add_test(tc, test_stop_strings_and_tokens);
        tcase_add_test(tc, test_bad_words_and_truncation);
        tcase_add_test(tc, test_n_children);
        tcase_add_test(tc, test_prompt_logprobs);
        tcase_add_test(tc, test_sleep_wake_up);
        tcase_add_test(tc, test_collective_rpc);
        tcase_add_test(tc, test_health_stall);
        tcase_add_test(tc, test_abort_during_step);
        tcase_add_test(tc, test_stats);
        tcase_add_test(tc, test_wave_starts_in_one_step);
        tcase_add_test(tc, test_engine_death);
        tcase_add_test(tc, test_validation);
        tcase_add_test(tc, test_idle_uses_no_cpu);
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
