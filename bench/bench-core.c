/* SPDX-License-Identifier: MIT */
/* Single-sequence throughput of the CPU backend, measured the way llama-bench measures it:
 * pp = one batched pass over a prompt of random tokens, tg = tokens decoded one at a time
 * from an empty context. Prints one JSON object per line per test, with every repetition. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend-open.h"
#include "bench-util.h"
#include "model.h"
#include "clock.h"
#include "sequence.h"

/* The q-quantile (nearest rank) of n sorted values. */
static double sorted_quantile(const double *sorted, unsigned n, double q) {
        return sorted[(unsigned) (q * (n - 1) + 0.5)];
}

/* One JSON line; token_seconds (n_token_times of them, or NULL): every token's own time,
 * whose spread is the machine's: the same step, repeated, is what a step-time model can at
 * best predict. */
static void report(const char *test, unsigned n_tokens, unsigned threads, const struct backend *backend, double *rates,
                   unsigned reps, double *token_seconds, unsigned n_token_times) {
        qsort(rates, reps, sizeof(double), bench_compare_double);
        printf("{\"test\": \"%s%u\", \"threads\": %u, \"kernels\": \"%s\", \"weights\": \"%s\", \"median_tps\": %.2f, "
               "\"min_tps\": %.2f, \"max_tps\": %.2f, \"reps\": [",
               test, n_tokens, threads, backend->kernels, backend->weights,
               rates[reps / 2], rates[0], rates[reps - 1]);
        for (unsigned i = 0; i < reps; i++)
                printf("%s%.2f", i ? ", " : "", rates[i]);
        printf("]");
        if (token_seconds) {
                qsort(token_seconds, n_token_times, sizeof(double), bench_compare_double);
                printf(", \"token_ms\": {\"p10\": %.3f, \"p50\": %.3f, \"p90\": %.3f, \"p99\": %.3f}",
                       1e3 * sorted_quantile(token_seconds, n_token_times, 0.10),
                       1e3 * sorted_quantile(token_seconds, n_token_times, 0.50),
                       1e3 * sorted_quantile(token_seconds, n_token_times, 0.90),
                       1e3 * sorted_quantile(token_seconds, n_token_times, 0.99));
        }
        printf("}\n");
        fflush(stdout);
}

static void usage(FILE *f) {
        fprintf(f, "Usage: bench-core [--model PATH] [--threads N] [-p PROMPT_TOKENS] [-n GEN_TOKENS] [-r REPS]\n");
}

int main(int argc, char **argv) {
        const char *model_path = getenv("ASYNCLLM_MODEL");
        unsigned threads = 2, n_prompt = 512, n_gen = 128, reps = 5;
        static const struct option options[] = {
                { "model", required_argument, NULL, 'm' }, { "threads", required_argument, NULL, 't' },
                { "help", no_argument, NULL, 'h' },        { NULL, 0, NULL, 0 },
        };
        int c;
        while ((c = getopt_long(argc, argv, "m:t:p:n:r:h", options, NULL)) != -1) {
                unsigned *target = NULL;
                switch (c) {
                case 'm': model_path = optarg; break;
                case 't': target = &threads; break;
                case 'p': target = &n_prompt; break;
                case 'n': target = &n_gen; break;
                case 'r': target = &reps; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
                if (target && bench_parse_uint(optarg, target) < 0) {
                        fprintf(stderr, "bench-core: invalid number '%s'\n", optarg);
                        return 2;
                }
        }
        if (!model_path) {
                fprintf(stderr, "bench-core: no model: give --model or set ASYNCLLM_MODEL\n");
                return 2;
        }
        if (optind < argc || threads < 1 || n_prompt < 1 || n_gen < 1 || reps < 1) {
                usage(stderr);
                return 2;
        }

        struct error err;
        struct model *model;
        struct backend backend;
        struct sequence *seq;
        if (model_load(model_path, &model, &err) < 0) {
                fprintf(stderr, "bench-core: %s\n", err.message);
                return 1;
        }
        unsigned max_len = n_prompt > n_gen ? n_prompt : n_gen;
        struct backend_options backend_config = {
                .n_threads = threads, .max_batch_tokens = n_prompt, .max_model_len = max_len,
                .block_size = 16, .n_kv_blocks = (max_len + 15) / 16,
        };
        if (backend_open("cpu", &backend_config, model, &backend, &err) < 0 ||
            sequence_new(&backend, &backend_config, model->hp.n_vocab, &seq, &err) < 0) {
                fprintf(stderr, "bench-core: %s\n", err.message);
                return 1;
        }
        int32_t *tokens = malloc(sizeof(int32_t) * max_len);
        float *logits = malloc(sizeof(float) * model->hp.n_vocab);
        double *rates = malloc(sizeof(double) * reps);
        double *token_seconds = malloc(sizeof(double) * n_gen * reps);
        if (!tokens || !logits || !rates || !token_seconds)
                return 1;
        srand(1234);
        for (unsigned i = 0; i < max_len; i++)
                tokens[i] = rand() % (int) model->hp.n_vocab;

        /* one warm-up pass touches the weights and the KV pool */
        if (sequence_feed(seq, tokens, n_prompt, false, logits, &err) < 0) {
                fprintf(stderr, "bench-core: %s\n", err.message);
                return 1;
        }
        for (unsigned r = 0; r < reps; r++) {
                sequence_reset(seq);
                double t0 = monotonic_seconds();
                sequence_feed(seq, tokens, n_prompt, false, logits, &err);
                rates[r] = n_prompt / (monotonic_seconds() - t0);
        }
        report("pp", n_prompt, threads, &backend, rates, reps, NULL, 0);
        for (unsigned r = 0; r < reps; r++) {
                sequence_reset(seq);
                double t0 = monotonic_seconds();
                for (unsigned i = 0; i < n_gen; i++) {
                        double started = monotonic_seconds();
                        sequence_feed(seq, &tokens[i], 1, false, logits, &err);
                        token_seconds[r * n_gen + i] = monotonic_seconds() - started;
                }
                rates[r] = n_gen / (monotonic_seconds() - t0);
        }
        report("tg", n_gen, threads, &backend, rates, reps, token_seconds, n_gen * reps);

        free(token_seconds);
        free(rates);
        free(logits);
        free(tokens);
        sequence_free(seq);
        backend_free(&backend);
        model_free(model);
        return 0;
}
