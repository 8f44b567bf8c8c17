/* SPDX-License-Identifier: MIT */
/* The engine core on a synthetic model: invariance under batching, chunking and the prefix
 * cache; preemption; aborts at every moment without leaks; exact token counts; priorities;
 * request validation; engine death; the slo policy's decode calibration; the step trace. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend-open.h"
#include "clock.h"
#include "engine-core.h"
#include "model.h"
#include "step-trace.h"
#include "synthetic-llama.h"
#include "test-helpers.h"

#define MAX_MODEL_LEN 160
#define BLOCK_SIZE 8
#define MAX_OUT 48

static struct model *model;

static const struct synthetic_llama_config shape = {
        .n_layer = 2, .n_embd = 64, .n_ff = 128, .n_head = 4, .n_head_kv = 2, .n_vocab = 300, .n_ctx = 256,
        .weight_type = TENSOR_Q4_1, .embd_type = TENSOR_Q8_0, .tied_output = true, .seed = 77,
};

static void load_model(void) {
        char *dir = test_tmpdir();
        char *path = test_path_join(dir, "model.gguf");
        struct error err;
        ck_assert_int_eq(synthetic_llama_write(path, &shape), 0);
        ck_assert_msg(model_load(path, &model, &err) == 0, "%s", err.message);
        free(path);
        test_tmpdir_remove(dir);
}

static void unload_model(void) {
        model_free(model);
        model = NULL;
}

/* A backend that fails its N-th forward, for engine-death tests, and may be slowed to a
 * time per token, for the slo policy's admission. */
struct failing_backend {
        struct backend inner;
        int fail_at;
        int calls;
        useconds_t delay_per_token;
};

static int failing_forward(void *impl, const struct batch *b, float **logits, struct error *err) {
        struct failing_backend *f = impl;
        if (++f->calls == f->fail_at)
                return error_set(err, EIO, "injected failure in forward %d", f->calls);
        if (f->delay_per_token)
                usleep(f->delay_per_token * b->n_tokens);
        return f->inner.forward(f->inner.impl, b, logits, err);
}

struct harness {
        struct failing_backend failing;
        struct engine_core *ec;
};

/* The CPU backend for config with n_kv_blocks blocks. */
static struct backend open_backend(const struct engine_config *config, unsigned n_threads, uint32_t n_kv_blocks) {
        struct backend_options options = backend_options_for_engine(config, n_threads);
        struct backend b;
        struct error err;
        options.n_kv_blocks = n_kv_blocks;
        ck_assert_msg(backend_open(test_device(), &options, model, &b, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(b.kv.n_blocks, n_kv_blocks);
        return b;
}

/* The model's end-of-generation tokens: EOS alone unless a test says otherwise. */
static const int32_t eos_only[] = { 2 };

static void harness_new_ending(struct harness *h, struct engine_config *config, uint32_t n_kv_blocks, int fail_at,
                               useconds_t delay_per_token, const int32_t *eog_ids, size_t n_eog_ids) {
        struct error err;
        ck_assert_msg(engine_config_finalize(config, model->hp.n_ctx_train, &err) == 0, "%s", err.message);
        h->failing = (struct failing_backend) { open_backend(config, 2, n_kv_blocks), fail_at, 0, delay_per_token };
        struct backend b = { .impl = &h->failing, .forward = failing_forward, .n_workers = 1, .kv = h->failing.inner.kv };
        ck_assert_msg(engine_core_new(config, &b, model->hp.n_vocab, eog_ids, n_eog_ids, &h->ec, &err) == 0, "%s",
                      err.message);
}

static void harness_new_slowed(struct harness *h, struct engine_config *config, uint32_t n_kv_blocks, int fail_at,
                               useconds_t delay_per_token) {
        harness_new_ending(h, config, n_kv_blocks, fail_at, delay_per_token, eos_only, 1);
}

static void harness_new(struct harness *h, struct engine_config *config, uint32_t n_kv_blocks, int fail_at) {
        harness_new_slowed(h, config, n_kv_blocks, fail_at, 0);
}

static void harness_free(struct harness *h) {
        engine_core_free(h->ec);
        backend_free(&h->failing.inner);
}

static struct engine_config base_config(uint32_t budget) {
        struct engine_config c;
        engine_config_init_default(&c);
        c.max_model_len = MAX_MODEL_LEN;
        c.block_size = BLOCK_SIZE;
        c.max_num_batched_tokens = budget;
        c.max_num_seqs = budget < 64 ? budget : 64;
        return c;
}

/* What one request produced. */
struct result {
        int32_t tokens[MAX_OUT + 1];
        float logprobs[MAX_OUT + 1];
        uint32_t n;
        enum finish_reason reason;
        int32_t stop_token; /* the request's when it finished */
        uint32_t n_outputs; /* outputs reported */
        uint32_t n_finished; /* outputs flagged finished */
        uint32_t cached;
        uint32_t first_step; /* step of the first token */
};

static int index_of(const char *id) {
        return atoi(id + 1); /* ids are "r<index>" */
}

/* One step, its outputs collected into results[index]. */
static void step_collect(struct engine_core *ec, struct result *results, uint32_t step) {
        struct error err;
        ck_assert_msg(engine_core_step(ec, &err) == 0, "%s", err.message);
        uint32_t n;
        const struct engine_output *out = engine_core_outputs(ec, &n);
        for (uint32_t i = 0; i < n; i++) {
                struct request *r = out[i].req;
                struct result *res = &results[index_of(r->id)];
                ck_assert_msg(res->n_finished == 0, "%s: output after the finished one", r->id);
                res->n_outputs++;
                if (out[i].new_token) {
                        uint32_t k = request_num_output(r) - 1;
                        ck_assert_uint_eq(k, res->n);
                        if (res->n == 0)
                                res->first_step = step;
                        res->tokens[res->n] = r->tokens[r->n_tokens - 1];
                        res->logprobs[res->n] = r->samples[k].logprob;
                        res->n++;
                }
                if (out[i].finished) {
                        res->n_finished++;
                        res->reason = r->finish_reason;
                        res->stop_token = r->stop_token;
                        res->cached = r->num_cached_tokens;
                }
        }
        engine_core_clear_outputs(ec);
}

/* Runs the engine until idle, collecting every output into results[index]. */
static void drain(struct engine_core *ec, struct result *results, uint32_t *steps) {
        uint32_t step = steps ? *steps : 0;
        while (engine_core_has_work(ec))
                step_collect(ec, results, ++step);
        if (steps)
                *steps = step;
}

static void make_prompt(int32_t *p, uint32_t n, uint32_t salt) {
        for (uint32_t i = 0; i < n; i++)
                p[i] = (int32_t) (3 + (i * 37 + salt * 101 + (i * i) % 13) % 290);
}

/* Adds a request as AsyncLLM does: the spec, which borrows its arrays, becomes one that
 * owns copies of them, and that one is handed over. */
static int add_spec(struct engine_core *ec, const struct request_spec *spec, struct error *err) {
        struct request_spec owned = *spec;
        ck_assert_int_eq(request_spec_own(&owned), 0);
        return engine_core_add_request(ec, &owned, NULL, err);
}

static void add(struct engine_core *ec, uint32_t index, const int32_t *prompt, uint32_t n_prompt,
                const struct sampling_params *p, int32_t priority) {
        char id[32];
        struct error err;
        snprintf(id, sizeof(id), "r%u", index);
        struct request_spec spec = {
                .id = id, .prompt = prompt, .n_prompt = n_prompt, .params = *p, .class.priority = priority,
        };
        ck_assert_msg(add_spec(ec, &spec, &err) == 0, "%s", err.message);
}

static struct sampling_params greedy_params(int32_t max_tokens) {
        struct sampling_params p;
        sampling_params_init_default(&p);
        p.temperature = 0;
        p.max_tokens = max_tokens;
        p.logprobs = 0;
        p.ignore_eos = true;
        return p;
}

#define N_REQ 64

static uint32_t prompt_len(uint32_t i) {
        return 1 + (i * 29) % 100;
}

static void expect_solo_outputs(const struct result *got, const struct result *solo, uint32_t n, const char *what) {
        for (uint32_t i = 0; i < n; i++) {
                ck_assert_msg(got[i].n == solo[i].n, "%s: request %u has %u tokens, alone %u", what, i, got[i].n, solo[i].n);
                ck_assert_msg(memcmp(got[i].tokens, solo[i].tokens, got[i].n * sizeof(int32_t)) == 0,
                              "%s: request %u tokens differ from its solo run", what, i);
                ck_assert_msg(memcmp(got[i].logprobs, solo[i].logprobs, got[i].n * sizeof(float)) == 0,
                              "%s: request %u logprobs differ from its solo run", what, i);
                ck_assert_int_eq(got[i].reason, FINISH_LENGTH);
                ck_assert_uint_eq(got[i].n_finished, 1);
        }
}

static struct result solo[N_REQ];
static int32_t prompts[N_REQ][100];

static void solo_runs(void) {
        memset(solo, 0, sizeof(solo)); /* tests may share the process (CK_FORK=no) */
        for (uint32_t i = 0; i < N_REQ; i++) {
                struct harness h;
                struct engine_config c = base_config(64);
                c.enable_prefix_caching = false;
                harness_new(&h, &c, 64, 0);
                make_prompt(prompts[i], prompt_len(i), i);
                struct sampling_params p = greedy_params(8 + (int32_t) (i % 24));
                add(h.ec, i, prompts[i], prompt_len(i), &p, 0);
                drain(h.ec, solo, NULL);
                harness_free(&h);
        }
}

START_TEST(test_invariance_batched_chunked_cached) {
        static const uint32_t budgets[] = { 16, 64, 512 };
        solo_runs();
        for (size_t bi = 0; bi < 3; bi++)
                for (int caching = 0; caching < 2; caching++) {
                        struct result got[N_REQ] = { 0 };
                        struct harness h;
                        struct engine_config c = base_config(budgets[bi]);
                        c.enable_prefix_caching = caching;
                        /* a pool that holds a whole round: a cyclic scan larger than an LRU
                         * cache would evict every prefix before its reuse */
                        harness_new(&h, &c, 2048, 0);
                        /* with caching, run everything twice: the second round hits the cache */
                        for (int round = 0; round <= caching; round++) {
                                memset(got, 0, sizeof(got));
                                for (uint32_t i = 0; i < N_REQ; i++) {
                                        struct sampling_params p = greedy_params(8 + (int32_t) (i % 24));
                                        add(h.ec, i, prompts[i], prompt_len(i), &p, 0);
                                }
                                drain(h.ec, got, NULL);
                                char what[64];
                                snprintf(what, sizeof(what), "budget %u, caching %d, round %d", budgets[bi], caching, round);
                                expect_solo_outputs(got, solo, N_REQ, what);
                        }
                        struct engine_stats st;
                        engine_core_stats(h.ec, &st);
                        ck_assert_uint_eq(st.kv_blocks_used, 0);
                        if (caching) {
                                ck_assert_uint_gt(st.prefix_hit_tokens, 0);
                                uint32_t cached_requests = 0;
                                for (uint32_t i = 0; i < N_REQ; i++)
                                        cached_requests += got[i].cached > 0;
                                ck_assert_uint_gt(cached_requests, N_REQ / 2);
                        }
                        harness_free(&h);
                }
}
END_TEST

START_TEST(test_preemption_keeps_outputs) {
        solo_runs();
        struct result got[N_REQ] = { 0 };
        struct harness h;
        struct engine_config c = base_config(64);
        c.enable_prefix_caching = false;
        harness_new(&h, &c, MAX_MODEL_LEN / BLOCK_SIZE + 4, 0); /* room for little more than one long sequence */
        for (uint32_t i = 0; i < N_REQ; i++) {
                struct sampling_params p = greedy_params(8 + (int32_t) (i % 24));
                add(h.ec, i, prompts[i], prompt_len(i), &p, 0);
        }
        drain(h.ec, got, NULL);
        expect_solo_outputs(got, solo, N_REQ, "small pool");
        struct engine_stats st;
        engine_core_stats(h.ec, &st);
        ck_assert_uint_gt(st.preemptions, 0);
        ck_assert_uint_eq(st.kv_blocks_used, 0);
        printf("small pool: %llu preemptions over %llu steps\n", (unsigned long long) st.preemptions,
               (unsigned long long) st.steps);
        harness_free(&h);
}
END_TEST

START_TEST(test_random_aborts_leave_nothing) {
        struct harness h;
        struct engine_config c = base_config(32);
        harness_new(&h, &c, 64, 0);
        uint64_t state = 99;
        uint32_t added = 0, next = 0;
        struct error err;
        char id[32];
        int32_t prompt[100];
        while (added < 1000 || engine_core_has_work(h.ec)) {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                uint32_t roll = (uint32_t) (state >> 33);
                if (added < 1000 && roll % 3 == 0) {
                        uint32_t n = 1 + roll % 60;
                        make_prompt(prompt, n, added);
                        struct sampling_params p = greedy_params(1 + (int32_t) (roll % 20));
                        snprintf(id, sizeof(id), "a%u", added++);
                        struct request_spec spec = { .id = id, .prompt = prompt, .n_prompt = n, .params = p };
                        ck_assert_int_eq(add_spec(h.ec, &spec, &err), 0);
                }
                /* abort a recent id: waiting, mid-prefill, decoding, finished or not yet added */
                if (roll % 2 == 0) {
                        snprintf(id, sizeof(id), "a%u", added + 2 - (uint32_t) ((state >> 12) % 12));
                        engine_core_abort(h.ec, id);
                }
                if (roll % 5 != 0)
                        ck_assert_int_eq(engine_core_step(h.ec, &err), 0);
                engine_core_clear_outputs(h.ec);
                next++;
        }
        struct engine_stats st;
        engine_core_stats(h.ec, &st);
        ck_assert_uint_eq(st.kv_blocks_used, 0);
        ck_assert_uint_eq(st.n_running + st.n_waiting, 0);
        ck_assert_uint_eq(st.finished[FINISH_ABORT] + st.finished[FINISH_LENGTH], 1000);
        ck_assert_uint_gt(st.finished[FINISH_ABORT], 100);
        printf("1000 requests: %llu aborted, %llu finished by length, %u loop turns\n",
               (unsigned long long) st.finished[FINISH_ABORT], (unsigned long long) st.finished[FINISH_LENGTH], next);
        harness_free(&h);
}
END_TEST

struct abort_during_step {
        const char *id;
        bool done;
};

static void abort_hook(struct engine_core *ec, void *userdata) {
        struct abort_during_step *a = userdata;
        if (!a->done)
                a->done = engine_core_abort(ec, a->id);
}

START_TEST(test_abort_during_last_step) {
        struct harness h;
        struct engine_config c = base_config(64);
        harness_new(&h, &c, 64, 0);
        int32_t prompt[10];
        make_prompt(prompt, 10, 1);
        struct sampling_params p = greedy_params(1); /* its first step is its last */
        add(h.ec, 0, prompt, 10, &p, 0);
        struct abort_during_step a = { "r0", false };
        engine_core_set_hook(h.ec, abort_hook, &a);
        struct result got[1] = { 0 };
        drain(h.ec, got, NULL);
        ck_assert(a.done);
        ck_assert_int_eq(got[0].reason, FINISH_ABORT);
        ck_assert_uint_eq(got[0].n, 0);
        ck_assert_uint_eq(got[0].n_finished, 1);
        /* the id is free again at once, and aborting it twice is a no-op */
        ck_assert(!engine_core_abort(h.ec, "r0"));
        engine_core_set_hook(h.ec, NULL, NULL);
        add(h.ec, 0, prompt, 10, &p, 0);
        memset(got, 0, sizeof(got));
        drain(h.ec, got, NULL);
        ck_assert_int_eq(got[0].reason, FINISH_LENGTH);
        ck_assert_uint_eq(got[0].n, 1);
        harness_free(&h);
}
END_TEST

START_TEST(test_exact_counts_and_final_flag) {
        struct harness h;
        struct engine_config c = base_config(128);
        harness_new(&h, &c, 512, 0);
        static struct result got[100];
        memset(got, 0, sizeof(got));
        for (uint32_t i = 0; i < 100; i++) {
                int32_t prompt[20];
                make_prompt(prompt, 20, i);
                struct sampling_params p = greedy_params(1 + (int32_t) (i % MAX_OUT));
                add(h.ec, i, prompt, 20, &p, 0);
        }
        drain(h.ec, got, NULL);
        for (uint32_t i = 0; i < 100; i++) {
                ck_assert_uint_eq(got[i].n, 1 + i % MAX_OUT);
                ck_assert_uint_eq(got[i].n_outputs, got[i].n); /* one output per token, the last one finished */
                ck_assert_uint_eq(got[i].n_finished, 1);
        }
        harness_free(&h);
}
END_TEST

START_TEST(test_priorities) {
        struct harness h;
        struct engine_config c = base_config(64);
        c.max_num_seqs = 1;
        c.scheduling_policy = SCHEDULING_PRIORITY;
        harness_new(&h, &c, 64, 0);
        static const int32_t priorities[] = { 2, 0, 1 };
        int32_t prompt[6];
        make_prompt(prompt, 6, 3);
        for (uint32_t i = 0; i < 3; i++) {
                struct sampling_params p = greedy_params(3);
                add(h.ec, i, prompt, 6, &p, priorities[i]);
        }
        struct result got[3] = { 0 };
        drain(h.ec, got, NULL);
        /* served as 1, 2, 0 */
        ck_assert_uint_lt(got[1].first_step, got[2].first_step);
        ck_assert_uint_lt(got[2].first_step, got[0].first_step);

        /* a better priority takes the seat of a running request */
        struct sampling_params longp = greedy_params(40), shortp = greedy_params(2);
        memset(got, 0, sizeof(got));
        add(h.ec, 0, prompt, 6, &longp, 5);
        uint32_t steps = 2;
        step_collect(h.ec, got, 1);
        step_collect(h.ec, got, 2);
        add(h.ec, 1, prompt, 6, &shortp, 0);
        drain(h.ec, got, &steps);
        ck_assert_uint_eq(got[0].n, 40);
        ck_assert_uint_eq(got[1].first_step, 3); /* seated at once, ahead of the running request */
        ck_assert_uint_gt(got[0].first_step, 0);
        struct engine_stats st;
        engine_core_stats(h.ec, &st);
        ck_assert_uint_ge(st.preemptions, 1);
        harness_free(&h);
}
END_TEST

START_TEST(test_validation) {
        struct harness h;
        struct engine_config c = base_config(64);
        harness_new(&h, &c, 64, 0);
        int32_t prompt[MAX_MODEL_LEN];
        make_prompt(prompt, MAX_MODEL_LEN, 0);
        struct error err;
        int32_t n_vocab = (int32_t) model->hp.n_vocab;
        struct request_spec spec = { .id = "v", .prompt = prompt, .n_prompt = 0, .params = greedy_params(4) };
        ck_assert_int_eq(request_spec_validate(&spec, &c, n_vocab, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "prompt is empty"));
        spec.n_prompt = MAX_MODEL_LEN;
        ck_assert_int_eq(request_spec_validate(&spec, &c, n_vocab, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "max_model_len"));
        spec.n_prompt = 5;
        prompt[2] = 300;
        ck_assert_int_eq(request_spec_validate(&spec, &c, n_vocab, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "vocabulary"));
        prompt[2] = 7;
        spec.params.top_p = 2;
        ck_assert_int_eq(request_spec_validate(&spec, &c, n_vocab, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "top_p"));
        spec.params.top_p = 1;
        spec.params.max_tokens = 0;
        ck_assert_int_eq(request_spec_validate(&spec, &c, n_vocab, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "max_tokens"));
        spec.params.max_tokens = 4;
        spec.params.logprobs = 21;
        ck_assert_int_eq(request_spec_validate(&spec, &c, n_vocab, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "logprobs"));
        spec.params.logprobs = 0;
        spec.class.slo = 3601;
        ck_assert_int_eq(request_spec_validate(&spec, &c, n_vocab, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "slo must be"));
        spec.class.slo = 0;
        spec.class.ttft_slo = -1;
        ck_assert_int_eq(request_spec_validate(&spec, &c, n_vocab, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "ttft_slo must be"));
        spec.class.ttft_slo = 0;
        ck_assert_int_eq(request_spec_validate(&spec, &c, n_vocab, &err), 0);
        ck_assert_int_eq(add_spec(h.ec, &spec, &err), 0);
        ck_assert_int_eq(add_spec(h.ec, &spec, &err), -EEXIST);
        ck_assert_ptr_nonnull(strstr(err.message, "already in flight"));
        spec.id = "";
        ck_assert_int_eq(request_spec_validate(&spec, &c, n_vocab, &err), -EINVAL);
        harness_free(&h); /* frees the unfinished request too */
}
END_TEST

static void run_one(const int32_t *eog_ids, size_t n_eog_ids, const int32_t *prompt, uint32_t n_prompt,
                    const struct sampling_params *p, struct result *res) {
        struct harness h;
        struct engine_config c = base_config(64);
        harness_new_ending(&h, &c, 64, 0, 0, eog_ids, n_eog_ids);
        memset(res, 0, sizeof(*res));
        add(h.ec, 0, prompt, n_prompt, p, 0);
        drain(h.ec, res, NULL);
        harness_free(&h);
}

/* Any end-of-generation token ends a request as EOS does: finish_reason stop, no stop
 * token, the token kept; ignore_eos runs past it; min_tokens masks it. The second token is
 * one the model picks greedily, so that it comes up. */
START_TEST(test_end_of_generation_tokens) {
        int32_t prompt[40];
        struct result free_run, got;
        make_prompt(prompt, 40, 7);
        struct sampling_params p = greedy_params(MAX_OUT);
        run_one(eos_only, 1, prompt, 40, &p, &free_run);
        ck_assert_uint_eq(free_run.n, MAX_OUT);

        uint32_t k = 0; /* the first output that is not EOS and repeats no earlier one */
        for (bool repeats = true; repeats && k < free_run.n; k += repeats) {
                repeats = free_run.tokens[k] == 2;
                for (uint32_t j = 0; j < k; j++)
                        repeats = repeats || free_run.tokens[j] == free_run.tokens[k];
        }
        ck_assert_uint_lt(k, free_run.n);
        const int32_t eog[] = { 2, free_run.tokens[k] };

        p.ignore_eos = false;
        run_one(eog, 2, prompt, 40, &p, &got);
        ck_assert_int_eq(got.reason, FINISH_STOP);
        ck_assert_int_eq(got.stop_token, -1);
        ck_assert_uint_eq(got.n, k + 1);
        ck_assert_mem_eq(got.tokens, free_run.tokens, (k + 1) * sizeof(int32_t));

        p.ignore_eos = true;
        run_one(eog, 2, prompt, 40, &p, &got);
        ck_assert_int_eq(got.reason, FINISH_LENGTH);
        ck_assert_mem_eq(got.tokens, free_run.tokens, MAX_OUT * sizeof(int32_t));

        p.ignore_eos = false;
        p.min_tokens = (int32_t) k + 2;
        run_one(eog, 2, prompt, 40, &p, &got);
        ck_assert_uint_ge(got.n, k + 2);
        ck_assert_mem_eq(got.tokens, free_run.tokens, k * sizeof(int32_t));
        for (uint32_t j = 0; j < k + 2; j++)
                ck_assert_msg(got.tokens[j] != eog[0] && got.tokens[j] != eog[1],
                              "output %u is end-of-generation token %d before min_tokens", j, got.tokens[j]);

        struct engine_config c = base_config(64);
        struct error err;
        struct engine_core *ec = NULL;
        ck_assert_msg(engine_config_finalize(&c, model->hp.n_ctx_train, &err) == 0, "%s", err.message);
        struct backend any = { .name = "test", .kv = { .block_size = c.block_size, .n_blocks = 64 } };
        const int32_t outside[] = { 2, (int32_t) model->hp.n_vocab };
        ck_assert_int_eq(engine_core_new(&c, &any, model->hp.n_vocab, outside, 2, &ec, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "outside the vocabulary"));
        ck_assert_ptr_null(ec);
}
END_TEST

/* The engine takes its KV pool's layout from the backend: blocks of another size than its
 * block_size, or too few for one sequence of max_model_len, are refused by name. */
START_TEST(test_kv_geometry_from_backend) {
        struct engine_config c = base_config(64);
        struct error err;
        ck_assert_msg(engine_config_finalize(&c, model->hp.n_ctx_train, &err) == 0, "%s", err.message);
        struct engine_core *ec = NULL;
        struct backend other = { .name = "test", .kv = { .block_size = c.block_size * 2, .n_blocks = 64 } };
        ck_assert_int_eq(engine_core_new(&c, &other, model->hp.n_vocab, eos_only, 1, &ec, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "test backend's KV blocks hold"), "%s", err.message);
        ck_assert_ptr_null(ec);
        uint32_t per_seq = (c.max_model_len + c.block_size - 1) / c.block_size;
        struct backend small = { .name = "test", .kv = { .block_size = c.block_size, .n_blocks = per_seq - 1 } };
        ck_assert_int_eq(engine_core_new(&c, &small, model->hp.n_vocab, eos_only, 1, &ec, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "fewer than one sequence of max_model_len"), "%s", err.message);
        ck_assert_ptr_null(ec);
}
END_TEST

START_TEST(test_engine_death) {
        struct harness h;
        struct engine_config c = base_config(16);
        harness_new(&h, &c, 64, 5);
        int32_t prompt[40];
        make_prompt(prompt, 40, 9);
        for (uint32_t i = 0; i < 4; i++) {
                struct sampling_params p = greedy_params(30);
                add(h.ec, i, prompt, 40, &p, 0);
        }
        struct error err;
        int rc = 0;
        for (int s = 0; s < 10 && rc == 0; s++) {
                rc = engine_core_step(h.ec, &err);
                if (rc == 0)
                        engine_core_clear_outputs(h.ec);
        }
        ck_assert_int_eq(rc, -EIO);
        ck_assert_ptr_nonnull(strstr(err.message, "injected failure"));
        ck_assert(engine_core_is_dead(h.ec));
        uint32_t n;
        const struct engine_output *out = engine_core_outputs(h.ec, &n);
        ck_assert_uint_eq(n, 4);
        for (uint32_t i = 0; i < n; i++) {
                ck_assert(out[i].finished);
                ck_assert_int_eq(out[i].req->finish_reason, FINISH_ERROR);
        }
        engine_core_clear_outputs(h.ec);
        struct sampling_params p = greedy_params(3);
        struct request_spec spec = { .id = "late", .prompt = prompt, .n_prompt = 4, .params = p };
        ck_assert_int_eq(add_spec(h.ec, &spec, &err), -ESHUTDOWN);
        ck_assert_int_eq(engine_core_step(h.ec, &err), -ESHUTDOWN);
        struct engine_stats st;
        engine_core_stats(h.ec, &st);
        ck_assert_uint_eq(st.kv_blocks_used, 0);
        harness_free(&h);
}
END_TEST

/* An engine (the step trace is opened as it starts) with one best-effort request of 40 prompt
 * tokens and 24 to generate. */
static void start_traced_request(struct harness *h, uint32_t salt) {
        struct engine_config c = base_config(16);
        harness_new(h, &c, 64, 0);
        int32_t prompt[40];
        make_prompt(prompt, 40, salt);
        struct sampling_params p = greedy_params(24);
        add(h->ec, 0, prompt, 40, &p, 0);
}

/* The slo policy times steps of 1..8 short decodes alone at creation (decode-calibration.h):
 * on the real runner each count took its time, at a context of the token budget (under
 * 128) in whole blocks; the blocks it borrowed are free again and nothing of its prompt is
 * left in the prefix cache; requests then produce what they produce alone under fcfs; with
 * one seat it times one decode. A backend that fails during it fails the creation with the
 * backend's message. */
START_TEST(test_slo_calibrates_decodes) {
        solo_runs();
        struct harness h;
        struct engine_config c = base_config(60);
        c.scheduling_policy = SCHEDULING_SLO;
        c.enable_prefix_caching = true;
        harness_new(&h, &c, 256, 0);
        ck_assert_int_eq(h.failing.calls, 1 + 1 + 3 * 8); /* prompt, first decodes, three rounds */
        struct engine_stats st;
        engine_core_stats(h.ec, &st);
        ck_assert_uint_eq(st.decode_calibration.n, 8);
        ck_assert_uint_eq(st.decode_calibration.context, 56 + 1);
        for (uint32_t k = 0; k < 8; k++)
                ck_assert_double_gt(st.decode_calibration.seconds[k], 0);
        ck_assert_uint_eq(st.kv_blocks_used, 0);
        ck_assert_uint_eq(st.kv_blocks_cached, 0);
        ck_assert_uint_eq(st.steps, 0);

        struct result got[N_REQ] = { 0 };
        for (uint32_t i = 0; i < 12; i++) {
                struct sampling_params p = greedy_params(8 + (int32_t) (i % 24));
                add(h.ec, i, prompts[i], prompt_len(i), &p, 0);
        }
        drain(h.ec, got, NULL);
        expect_solo_outputs(got, solo, 12, "slo policy after the calibration");
        harness_free(&h);

        /* one seat: one count timed, which prices nothing (a batch needs two) */
        struct engine_config single = c;
        single.max_num_seqs = 1;
        harness_new(&h, &single, 256, 0);
        ck_assert_int_eq(h.failing.calls, 1 + 1 + 3);
        engine_core_stats(h.ec, &st);
        ck_assert_uint_eq(st.decode_calibration.n, 1);
        ck_assert_uint_eq(st.kv_blocks_used, 0);
        harness_free(&h);

        struct error err;
        h.failing = (struct failing_backend) { open_backend(&c, 1, 256), 3, 0, 0 };
        struct backend b = { .impl = &h.failing, .forward = failing_forward, .n_workers = 1, .kv = h.failing.inner.kv };
        h.ec = NULL;
        ck_assert_int_eq(engine_core_new(&c, &b, model->hp.n_vocab, eos_only, 1, &h.ec, &err), -EIO);
        ck_assert_str_eq(err.message, "injected failure in forward 3");
        ck_assert_ptr_null(h.ec);
        backend_free(&h.failing.inner);
}
END_TEST

/* The calibration's step of one decode counts among the steps the engine has run: on a
 * backend slowed to 10 ms a token, behind best-effort prompts that made every step so far
 * (16 tokens, >= 160 ms), the first latency-sensitive request, paced at 1.5 times the
 * calibration's step of one decode, is taken. Judged by those steps alone it was refused,
 * as was every later one, since only admitted requests make steps of decodes alone. */
START_TEST(test_slo_admits_behind_best_effort_from_the_start) {
        struct harness h;
        struct engine_config c = base_config(16);
        c.scheduling_policy = SCHEDULING_SLO;
        harness_new_slowed(&h, &c, 256, 0, 10000);
        struct engine_stats st;
        engine_core_stats(h.ec, &st);
        double slo = 1.5 * st.decode_calibration.seconds[0];
        struct sampling_params p = greedy_params(8);
        int32_t prompt[9][40];
        for (uint32_t i = 0; i < 9; i++)
                make_prompt(prompt[i], 40, 100 + i);
        for (uint32_t i = 0; i < 8; i++)
                add(h.ec, i, prompt[i], 40, &p, 0);
        struct error err;
        for (uint32_t step = 0; step < 17; step++) { /* the model judges after 16 */
                double started = monotonic_seconds();
                ck_assert_msg(engine_core_step(h.ec, &err) == 0, "%s", err.message);
                ck_assert_double_gt(monotonic_seconds() - started, slo);
                uint32_t n;
                engine_core_outputs(h.ec, &n);
        }
        struct request_spec spec = { .id = "ls", .prompt = prompt[8], .n_prompt = 40, .params = p,
                                     .class = { .latency_sensitive = true, .slo = slo, .ttft_slo = 1.0 } };
        ck_assert_msg(add_spec(h.ec, &spec, &err) == 0, "%s", err.message);
        harness_free(&h);
}
END_TEST

/* An engine's creation with ASYNCLLM_STEP_TRACE=path fails with -error and a message that
 * names the variable, the file and what went wrong; the variable is unset afterwards. */
static void assert_trace_refused(const char *path, int error, const char *says) {
        ck_assert_int_eq(setenv(STEP_TRACE_ENV, path, 1), 0);
        struct engine_config c = base_config(16);
        struct backend unused = { .kv = { .block_size = c.block_size, .n_blocks = 64 } };
        struct engine_core *ec = NULL;
        struct error err;
        ck_assert_int_eq(engine_core_new(&c, &unused, model->hp.n_vocab, eos_only, 1, &ec, &err), -error);
        char expected[512];
        snprintf(expected, sizeof(expected), "%s=%s: %s: %s", STEP_TRACE_ENV, path, says, strerror(error));
        ck_assert_msg(strstr(err.message, expected), "\"%s\" lacks \"%s\"", err.message, expected);
        ck_assert_ptr_null(ec);
        ck_assert_int_eq(unsetenv(STEP_TRACE_ENV), 0);
}

/* ASYNCLLM_STEP_TRACE: its columns, then a line per step in order, predictions from the end
 * of the model's warm-up; a file that cannot be opened fails the engine's creation with a
 * message naming the variable. */
START_TEST(test_step_trace) {
        char *dir = test_tmpdir();
        char *path = test_path_join(dir, "steps.trace");
        ck_assert_int_eq(setenv(STEP_TRACE_ENV, path, 1), 0);
        struct harness h;
        start_traced_request(&h, 1);
        static struct result got[1];
        memset(got, 0, sizeof(got));
        uint32_t steps = 0;
        drain(h.ec, got, &steps);
        harness_free(&h); /* closes the trace */

        FILE *f = fopen(path, "r");
        ck_assert_ptr_nonnull(f);
        char line[512];
        ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
        ck_assert_str_eq(line, STEP_TRACE_HEADER);
        uint32_t n = 0, prompt_tokens = 0, decodes = 0;
        double last_started = 0;
        while (fgets(line, sizeof(line), f)) {
                double started, predicted, seconds;
                unsigned n_prompt, n_decode, n_best_effort;
                unsigned long long prompt_context, decode_context;
                ck_assert_int_eq(sscanf(line, "%lf %u %u %llu %llu %u %lf %lf", &started, &n_prompt, &n_decode,
                                        &prompt_context, &decode_context, &n_best_effort, &predicted, &seconds),
                                 8);
                ck_assert(started >= last_started);
                last_started = started;
                ck_assert(seconds > 0);
                ck_assert_msg(n < STEP_MODEL_WARMUP ? isnan(predicted) : predicted >= 0, "step %u predicted %g", n,
                              predicted);
                ck_assert_uint_eq(n_best_effort, 1); /* every request is best-effort by default */
                prompt_tokens += n_prompt;
                decodes += n_decode;
                n++;
        }
        fclose(f);
        ck_assert_uint_eq(n, steps);
        ck_assert_uint_eq(prompt_tokens, 40);
        ck_assert_uint_eq(decodes, 23); /* the first token comes with the prompt's last chunk */

        char *missing = test_path_join(dir, "no-such-dir/steps.trace");
        assert_trace_refused(missing, ENOENT, "cannot open the step trace");
        free(missing);
        free(path);
        test_tmpdir_remove(dir);
}
END_TEST

/* A trace that meets a full disk stops at its last whole line, says so on stderr once, and
 * the engine serves on: RLIMIT_FSIZE stands in for the disk (EFBIG, SIGXFSZ ignored), and
 * /dev/full fails the header at creation. */
START_TEST(test_step_trace_full_disk) {
        char *dir = test_tmpdir();
        char *path = test_path_join(dir, "steps.trace"), *log_path = test_path_join(dir, "stderr");
        ck_assert_int_eq(setenv(STEP_TRACE_ENV, path, 1), 0);
        uint32_t steps = 0;
        /* A process of its own: the limit would also stop Check's own reports. */
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                struct harness h;
                start_traced_request(&h, 2);
                int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                struct rlimit small;
                if (log_fd < 0 || dup2(log_fd, STDERR_FILENO) < 0 || getrlimit(RLIMIT_FSIZE, &small) < 0)
                        _exit(2);
                small.rlim_cur = 400; /* the header and a few steps */
                signal(SIGXFSZ, SIG_IGN);
                if (setrlimit(RLIMIT_FSIZE, &small) < 0)
                        _exit(3);
                /* no Check call from here on: its reports go to a file the limit would cut */
                uint32_t tokens = 0, finished = 0;
                struct error err;
                while (engine_core_has_work(h.ec)) {
                        if (engine_core_step(h.ec, &err) < 0)
                                _exit(4);
                        steps++;
                        uint32_t n;
                        const struct engine_output *out = engine_core_outputs(h.ec, &n);
                        for (uint32_t i = 0; i < n; i++) {
                                tokens += out[i].new_token;
                                finished += out[i].finished;
                        }
                        engine_core_clear_outputs(h.ec);
                }
                harness_free(&h);
                /* served whole; the step count for the parent, in the exit status */
                _exit(tokens == 24 && finished == 1 ? 100 + (int) steps : 1);
        }
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) > 100, "the engine's process ended with %#x", status);
        steps = (uint32_t) WEXITSTATUS(status) - 100;

        FILE *f = fopen(path, "r");
        ck_assert_ptr_nonnull(f);
        char line[512];
        uint32_t n = 0;
        long length = 0;
        while (fgets(line, sizeof(line), f)) {
                ck_assert_msg(line[strlen(line) - 1] == '\n', "a line cut short: \"%s\"", line);
                length += (long) strlen(line);
                n++;
        }
        fclose(f);
        ck_assert(length <= 400);
        ck_assert_uint_ge(n, 2);    /* the header and at least one step */
        ck_assert_uint_lt(n, steps); /* and not all of them */

        f = fopen(log_path, "r");
        ck_assert_ptr_nonnull(f);
        char said[1024] = "";
        size_t got_bytes = fread(said, 1, sizeof(said) - 1, f);
        said[got_bytes] = '\0';
        fclose(f);
        ck_assert_msg(strstr(said, STEP_TRACE_ENV "=") && strstr(said, strerror(EFBIG)) &&
                              strstr(said, "tracing stopped"),
                      "stderr: %s", said);
        ck_assert_ptr_eq(strstr(strstr(said, "tracing stopped") + 1, "tracing stopped"), NULL); /* once */

        assert_trace_refused("/dev/full", ENOSPC, "cannot write the step trace");
        free(log_path);
        free(path);
        test_tmpdir_remove(dir);
}
END_TEST

int main(void) {
        Suite *s = suite_create("engine-core");
        TCase *tc = tcase_create("engine-core");
        tcase_set_timeout(tc, 600);
        tcase_add_unchecked_fixture(tc, load_model, unload_model);
        tcase_add_test(tc, test_invariance_batched_chunked_cached);
        tcase_add_test(tc, test_preemption_keeps_outputs);
        tcase_add_test(tc, test_random_aborts_leave_nothing);
        tcase_add_test(tc, test_abort_during_last_step);
        tcase_add_test(tc, test_exact_counts_and_final_flag);
        tcase_add_test(tc, test_priorities);
        tcase_add_test(tc, test_validation);
        tcase_add_test(tc, test_end_of_generation_tokens);
        tcase_add_test(tc, test_kv_geometry_from_backend);
        tcase_add_test(tc, test_engine_death);
        tcase_add_test(tc, test_slo_calibrates_decodes);
        tcase_add_test(tc, test_step_trace);
        tcase_add_test(tc, test_step_trace_full_disk);
        suite_add_tcase(s, tc);
        /* Rests on how long steps take against each other, which memcheck's slowdown (~65 ms a
         * step, varying with the machine's phase) can reverse: tests/valgrind-run leaves out
         * the "timing" tag. */
        TCase *timing = tcase_create("engine-core-timing");
        tcase_set_tags(timing, "timing");
        tcase_set_timeout(timing, 600);
        tcase_add_unchecked_fixture(timing, load_model, unload_model);
        tcase_add_test(timing, test_slo_admits_behind_best_effort_from_the_start);
        suite_add_tcase(s, timing);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
