/* SPDX-License-Identifier: MIT */
/* Aggregate throughput of B sequences decoding together through the real AsyncLLM on a
 * backend (the CPU's, or --device cuda), the workload of llama.cpp's llama-batched-bench (-npp P -ntg G -npl B).
 *
 * Each repetition submits B greedy requests (ignore_eos) at once, each with its own prompt of
 * P random token ids (distinct from every other prompt of the run, so the prefix cache never
 * helps), and measures two phases on this thread, each bounded by two moments taken right
 * after async_llm_dispatch() has delivered everything the engine reported so far:
 *
 *   prompt phase: from the submission until every request has its first token;
 *                 S_PP = B * P / its time (decodes of the requests that finished their
 *                 prompts earlier run inside it, as they would in serving);
 *   decode phase: from there until every request has G more tokens; all B requests decode
 *                 in every step of it and nothing else runs, so it is G decode steps of
 *                 batch B: S_TG = (tokens received in it) / its time = B * G / T_TG,
 *                 llama-batched-bench's S_TG = pl * tg / t_tg.
 *
 * The requests may not stop before the decode phase ends: max_tokens is G plus a slack for
 * the tokens some of them decode while others still prefill. Once it ends they are aborted.
 * The engine's decode stall guard is off by default (--decode-stall-limit 0): it would feed
 * the prompts a few tokens per step once the first requests decode, where
 * llama-batched-bench prefills all prompts before decoding; S_TG does not depend on it.
 *
 * One JSON object per line: one per repetition, then a summary with median, min and max. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async-llm.h"
#include "bench-util.h"
#include "clock.h"
#include "backend-open.h"
#include "model.h"
#include "rng.h"
#include "tokenizer.h"

#define DEFAULT_MODEL_PATH "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define STALL_TIMEOUT 120.0 /* seconds without a step: give up */

struct seq {
        struct async_stream *stream;
        char id[32];
        uint32_t n_tokens;  /* received so far */
        uint32_t at_start;  /* n_tokens when the decode phase began */
        bool finished;
        char error[256];
};

struct rep_result {
        double t_pp, t_tg, s_pp, s_tg;
        uint64_t tg_tokens, steps, preemptions;
};

static void on_output(struct async_stream *s, void *userdata) {
        struct seq *q = userdata;
        struct request_output *o;

        while ((o = async_stream_take(s))) {
                for (uint32_t i = 0; i < o->n_outputs; i++)
                        q->n_tokens += o->outputs[i].n_token_ids;
                if (o->error && !q->error[0])
                        snprintf(q->error, sizeof(q->error), "%s", o->error);
                if (o->finished)
                        q->finished = true;
                request_output_free(o);
        }
}

/* The median of n values (the mean of the middle two when n is even); sorts v. */
static double median(double *v, unsigned n) {
        qsort(v, n, sizeof(double), bench_compare_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Token ids in [1000, 40000): ordinary BPE pieces, no special tokens. */
static int32_t random_token(struct rng *r) {
        return (int32_t) (1000 + rng_next(r) % (40000 - 1000));
}

/* Runs the engine until cond(seqs) holds; -1 with a message when it fails, or when a request
 * ends first and early_end_is_error. */
static int pump(struct async_llm *llm, struct seq *seqs, unsigned n, bool (*cond)(const struct seq *, unsigned),
                bool early_end_is_error) {
        struct pollfd pfd = { .fd = async_llm_fd(llm), .events = POLLIN };
        struct error err = {};

        while (!cond(seqs, n)) {
                int k = poll(&pfd, 1, 1000);
                if (k < 0 && errno != EINTR) {
                        fprintf(stderr, "bench-batched: poll: %s\n", strerror(errno));
                        return -1;
                }
                if (k > 0)
                        async_llm_dispatch(llm);
                if (async_llm_check_health(llm, STALL_TIMEOUT, &err) < 0) {
                        fprintf(stderr, "bench-batched: %s\n", err.message);
                        return -1;
                }
                if (cond(seqs, n) || !early_end_is_error)
                        continue;
                for (unsigned i = 0; i < n; i++)
                        if (seqs[i].finished) {
                                fprintf(stderr, "bench-batched: %s ended after %u tokens (%s)%s\n", seqs[i].id,
                                        seqs[i].n_tokens, seqs[i].error[0] ? seqs[i].error : "no error",
                                        seqs[i].error[0] ? "" : "; raise --slack");
                                return -1;
                        }
        }
        return 0;
}

static bool all_started(const struct seq *s, unsigned n) {
        for (unsigned i = 0; i < n; i++)
                if (s[i].n_tokens == 0)
                        return false;
        return true;
}

static unsigned decode_goal;

static bool all_decoded(const struct seq *s, unsigned n) {
        for (unsigned i = 0; i < n; i++)
                if (s[i].n_tokens < s[i].at_start + decode_goal)
                        return false;
        return true;
}

static bool all_finished(const struct seq *s, unsigned n) {
        for (unsigned i = 0; i < n; i++)
                if (!s[i].finished)
                        return false;
        return true;
}

static void usage(FILE *f) {
        fprintf(f,
                "Usage: bench-batched [OPTIONS]\n"
                "  --model PATH               GGUF model ($ASYNCLLM_MODEL, else " DEFAULT_MODEL_PATH ")\n"
                "  --device NAME              cpu or cuda (cpu)\n"
                "  -t, --threads N            CPU runner threads (2)\n"
                "  -B N                       sequences decoding together (32)\n"
                "  -p N                       prompt tokens per sequence (128)\n"
                "  -n N                       decode steps measured (128)\n"
                "  -r N                       repetitions (3)\n"
                "  --budget N                 max_num_batched_tokens (the engine's default, 1024)\n"
                "  --decode-stall-limit X     the engine's stall guard, 0 = off (0)\n"
                "  --slack N                  extra max_tokens for decodes during the prompt phase (auto)\n");
}

int main(int argc, char **argv) {
        enum { ARG_BUDGET = 0x100, ARG_STALL_LIMIT, ARG_SLACK, ARG_DEVICE };
        static const struct option options[] = {
                { "model", required_argument, NULL, 'm' },
                { "device", required_argument, NULL, ARG_DEVICE },
                { "threads", required_argument, NULL, 't' },
                { "budget", required_argument, NULL, ARG_BUDGET },
                { "decode-stall-limit", required_argument, NULL, ARG_STALL_LIMIT },
                { "slack", required_argument, NULL, ARG_SLACK },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        const char *model_path = getenv("ASYNCLLM_MODEL"), *device = "cpu";
        unsigned threads = 2, n_seq = 32, n_prompt = 128, n_gen = 128, reps = 3, budget = 0, slack = 0;
        bool slack_set = false;
        struct engine_config config;
        int c, r = 1;

        engine_config_init_default(&config);
        config.decode_stall_limit = 0;
        if (!model_path || !*model_path)
                model_path = DEFAULT_MODEL_PATH;
        while ((c = getopt_long(argc, argv, "m:t:B:p:n:r:h", options, NULL)) != -1) {
                unsigned *target = NULL;
                switch (c) {
                case 'm': model_path = optarg; break;
                case ARG_DEVICE: device = optarg; break;
                case 't': target = &threads; break;
                case 'B': target = &n_seq; break;
                case 'p': target = &n_prompt; break;
                case 'n': target = &n_gen; break;
                case 'r': target = &reps; break;
                case ARG_BUDGET: target = &budget; break;
                case ARG_SLACK: target = &slack; slack_set = true; break;
                case ARG_STALL_LIMIT:
                        if (bench_parse_double(optarg, &config.decode_stall_limit) < 0) {
                                fprintf(stderr, "bench-batched: invalid number '%s' for --decode-stall-limit\n", optarg);
                                return 2;
                        }
                        break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
                if (target && bench_parse_uint(optarg, target) < 0) {
                        fprintf(stderr, "bench-batched: invalid number '%s'\n", optarg);
                        return 2;
                }
        }
        if (optind < argc || threads < 1 || n_seq < 1 || n_prompt < 1 || n_gen < 1 || reps < 1) {
                usage(stderr);
                return 2;
        }
        if (budget)
                config.max_num_batched_tokens = budget;
        if (config.max_num_seqs < n_seq)
                config.max_num_seqs = n_seq;
        if (config.max_num_batched_tokens < config.max_num_seqs)
                config.max_num_batched_tokens = config.max_num_seqs;
        /* Without the guard the prompts take about B*P/budget steps, in which the first
         * requests decode a token each; with it, many more. */
        if (!slack_set) {
                slack = 2 * ((n_seq * n_prompt + config.max_num_batched_tokens - 1) / config.max_num_batched_tokens) + 16;
                if (config.decode_stall_limit > 0)
                        slack = n_seq * n_prompt;
        }
        decode_goal = n_gen;

        struct error err = {};
        struct model *model = NULL;
        struct tokenizer *tk = NULL;
        struct backend backend = { 0 };
        struct async_llm *llm = NULL;
        struct seq *seqs = NULL;
        int32_t *prompts = NULL;
        struct rep_result *res = NULL;
        double *v = NULL;

        if (model_load(model_path, &model, &err) < 0 || tokenizer_load(model->file, &tk, &err) < 0) {
                fprintf(stderr, "bench-batched: %s\n", err.message);
                goto out;
        }
        uint32_t max_tokens = n_gen + slack;
        config.max_model_len = n_prompt + max_tokens + 1;
        if (config.max_model_len > model->hp.n_ctx_train) {
                fprintf(stderr, "bench-batched: %u tokens do not fit in the model's context of %u\n",
                        config.max_model_len, model->hp.n_ctx_train);
                goto out;
        }
        /* every sequence fits at once, so nothing is preempted */
        uint32_t n_blocks = n_seq * ((config.max_model_len + config.block_size - 1) / config.block_size) + 16;
        if (engine_config_finalize(&config, model->hp.n_ctx_train, &err) < 0) {
                fprintf(stderr, "bench-batched: %s\n", err.message);
                goto out;
        }
        struct backend_options backend_config = backend_options_for_engine(&config, threads);
        backend_config.n_kv_blocks = n_blocks;
        if (backend_open(device, &backend_config, model, &backend, &err) < 0) {
                fprintf(stderr, "bench-batched: %s\n", err.message);
                goto out;
        }
        if (async_llm_new(&config, &backend, tk, &llm, &err) < 0) {
                fprintf(stderr, "bench-batched: %s\n", err.message);
                goto out;
        }

        seqs = calloc(n_seq, sizeof(*seqs));
        prompts = malloc(sizeof(int32_t) * n_seq * n_prompt);
        res = calloc(reps, sizeof(*res));
        v = malloc(sizeof(double) * reps);
        if (!seqs || !prompts || !res || !v) {
                fprintf(stderr, "bench-batched: out of memory\n");
                goto out;
        }

        struct sampling_params params;
        sampling_params_init_default(&params);
        params.temperature = 0;
        params.ignore_eos = true;
        params.output_kind = OUTPUT_DELTA;
        struct rng rng;
        rng_seed(&rng, 1234);

        /* rep -1 warms up: one short request touches the weights, as llama-batched-bench's
         * 16-token warm-up pass does */
        for (int rep = -1; rep < (int) reps; rep++) {
                unsigned n = rep < 0 ? 1 : n_seq, p = rep < 0 ? 16 : n_prompt;
                params.max_tokens = rep < 0 ? 2 : (int32_t) max_tokens;
                memset(seqs, 0, sizeof(*seqs) * n_seq);
                for (unsigned i = 0; i < n * p; i++)
                        prompts[i] = random_token(&rng);
                struct async_llm_stats st0, st1;
                async_llm_stats(llm, &st0);
                double t0 = monotonic_seconds();
                for (unsigned i = 0; i < n; i++) {
                        struct seq *q = &seqs[i];
                        snprintf(q->id, sizeof(q->id), "r%d-%u", rep, i);
                        struct request_spec req = {
                                .id = q->id, .prompt = &prompts[i * p], .n_prompt = p, .params = params,
                        };
                        if (async_llm_generate(llm, &req, on_output, q, &q->stream, &err) < 0) {
                                fprintf(stderr, "bench-batched: %s: %s\n", q->id, err.message);
                                goto out;
                        }
                }
                if (rep < 0) {
                        if (pump(llm, seqs, n, all_finished, false) < 0)
                                goto out;
                        async_stream_release(seqs[0].stream);
                        seqs[0].stream = NULL;
                        continue;
                }
                if (pump(llm, seqs, n, all_started, true) < 0)
                        goto out;
                double t1 = monotonic_seconds();
                for (unsigned i = 0; i < n; i++)
                        seqs[i].at_start = seqs[i].n_tokens;
                if (pump(llm, seqs, n, all_decoded, true) < 0)
                        goto out;
                double t2 = monotonic_seconds();
                async_llm_stats(llm, &st1);
                struct rep_result *x = &res[rep];
                for (unsigned i = 0; i < n; i++)
                        x->tg_tokens += seqs[i].n_tokens - seqs[i].at_start;
                x->t_pp = t1 - t0;
                x->t_tg = t2 - t1;
                x->s_pp = (double) n * p / x->t_pp;
                x->s_tg = (double) x->tg_tokens / x->t_tg;
                x->steps = st1.engine.stats.steps - st0.engine.stats.steps;
                x->preemptions = st1.engine.stats.preemptions - st0.engine.stats.preemptions;
                printf("{\"test\": \"batched_rep\", \"rep\": %d, \"B\": %u, \"pp\": %u, \"tg\": %u, \"t_pp\": %.4f, "
                       "\"s_pp\": %.2f, \"t_tg\": %.4f, \"tg_tokens\": %" PRIu64 ", \"s_tg\": %.2f, \"steps\": %" PRIu64
                       ", \"preemptions\": %" PRIu64 "}\n",
                       rep, n, p, n_gen, x->t_pp, x->s_pp, x->t_tg, x->tg_tokens, x->s_tg, x->steps, x->preemptions);
                fflush(stdout);

                /* end the requests and let the engine take back their blocks */
                for (unsigned i = 0; i < n; i++)
                        async_llm_abort(llm, seqs[i].id);
                if (pump(llm, seqs, n, all_finished, false) < 0)
                        goto out;
                for (unsigned i = 0; i < n; i++) {
                        async_stream_release(seqs[i].stream);
                        seqs[i].stream = NULL;
                }
        }

        printf("{\"test\": \"batched\", \"B\": %u, \"pp\": %u, \"tg\": %u, \"threads\": %u, \"kernels\": \"%s\", "
               "\"weights\": \"%s\", \"max_num_batched_tokens\": %u, \"decode_stall_limit\": %g",
               n_seq, n_prompt, n_gen, threads, backend.kernels, backend.weights, config.max_num_batched_tokens,
               config.decode_stall_limit);
        static const char *const names[] = { "s_pp", "s_tg" };
        for (unsigned k = 0; k < 2; k++) {
                for (unsigned i = 0; i < reps; i++)
                        v[i] = k == 0 ? res[i].s_pp : res[i].s_tg;
                double med = median(v, reps);
                printf(", \"median_%s\": %.2f, \"min_%s\": %.2f, \"max_%s\": %.2f, \"%s\": [", names[k], med, names[k],
                       v[0], names[k], v[reps - 1], names[k]);
                for (unsigned i = 0; i < reps; i++)
                        printf("%s%.2f", i ? ", " : "", k == 0 ? res[i].s_pp : res[i].s_tg);
                printf("]");
        }
        printf("}\n");
        fflush(stdout);
        r = 0;

out:
        if (seqs)
                for (unsigned i = 0; i < n_seq; i++)
                        async_stream_release(seqs[i].stream);
        async_llm_free(llm);
        backend_free(&backend);
        tokenizer_free(tk);
        model_free(model);
        free(v);
        free(res);
        free(prompts);
        free(seqs);
        return r;
}
