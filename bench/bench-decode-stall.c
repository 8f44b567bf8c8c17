/* SPDX-License-Identifier: MIT */
/* Do decodes stall when a long prompt arrives? `decoders` greedy streams decode through the
 * real AsyncLLM on the CPU runner; their inter-token gaps are measured first alone
 * (unloaded "pre"), then while one prompt of prompt_len tokens is prefilled in chunks beside
 * them (loaded: from its submission until its first token, which finishes it), then alone
 * again (unloaded "post", as many gaps as "pre").
 *
 * The decoders' own steps get slower as their contexts grow (attention), and a slow prefill
 * lets them grow by thousands of tokens, so the loaded gaps are not compared with the "pre"
 * gap alone: each loaded gap is divided by the unloaded gap at that moment, interpolated
 * linearly in time between the pre median (at the pre phase's middle) and the post median
 * (at the post phase's middle). The check: the median and p90 of those ratios are within 2x.
 * Ratios against the pre median alone (the former check, unfair to long loaded phases) and
 * against the post median alone (conservative for early gaps) are reported too.
 *
 * A gap is the time between two consecutive outputs of a stream that carry new tokens,
 * divided by the number of tokens when several merged into one output (one sample per
 * token). "host" gaps are taken on this thread when the output is taken (what a client
 * sees); "engine" gaps come from the outputs' last_token_time (when the engine recorded the
 * token), free of the host's wake-up latency. */
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
#include <sys/resource.h>

#include <json-c/json.h>

#include "async-llm.h"
#include "bench-util.h"
#include "clock.h"
#include "backend-open.h"
#include "model.h"
#include "rng.h"
#include "tokenizer.h"

#define DECODER_PROMPT_MAX 16
#define DEFAULT_MODEL_PATH "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define STALL_TIMEOUT 120.0 /* seconds without a step: give up */

enum phase {
        PHASE_WARMUP,
        PHASE_PRE,    /* unloaded, before the long prompt */
        PHASE_LOADED,
        PHASE_POST,   /* unloaded, after it */
        PHASE_DONE,
        _PHASE_RECORDED = PHASE_DONE,
};

static const char *const phase_names[_PHASE_RECORDED] = { "warmup", "pre", "loaded", "post" };

struct samples {
        double *v;
        size_t n, cap;
};

struct bench;

struct decoder {
        struct bench *b;
        struct async_stream *stream;
        char id[32];
        int32_t prompt[DECODER_PROMPT_MAX];
        uint32_t n_prompt;
        uint32_t n_tokens;          /* received so far */
        uint32_t n_gaps[_PHASE_RECORDED];
        double last_time;           /* host time of the previous output with tokens; 0 = none */
        double last_engine_time;    /* its last_token_time */
        bool finished;
        char error[256];
};

struct bench {
        enum phase phase;
        struct decoder *dec;
        unsigned n_dec;
        struct samples gaps[_PHASE_RECORDED];        /* host side */
        struct samples engine_gaps[_PHASE_RECORDED]; /* engine side */
        /* host time at the middle of each loaded gap, in the order of gaps[PHASE_LOADED] and
         * engine_gaps[PHASE_LOADED] */
        struct samples times, engine_times;
        struct samples timeline;    /* decoder 0's engine gaps in the loaded phase, in order */
        bool oom;

        struct async_stream *long_stream;
        double long_submit;         /* host time of async_llm_generate() */
        double long_first;          /* host time its first token was taken; 0 = not yet */
        double long_engine_ttft;    /* first_token_time - arrival_time */
        double long_engine_prefill; /* first_token_time - scheduled_time */
        bool long_finished;
        char long_error[256];
};

/* ---- statistics ---- */

static int samples_push(struct samples *s, double v, unsigned count) {
        if (s->n + count > s->cap) {
                size_t cap = s->cap ? s->cap : 256;
                while (cap < s->n + count)
                        cap *= 2;
                double *n = realloc(s->v, cap * sizeof(double));
                if (!n)
                        return -ENOMEM;
                s->v = n;
                s->cap = cap;
        }
        for (unsigned i = 0; i < count; i++)
                s->v[s->n++] = v;
        return 0;
}

struct summary {
        size_t n;
        double median, p90, max, mean;
};

/* Nearest-rank percentiles over the sorted samples; NAN when there are none. */
static double percentile(const double *sorted, size_t n, double p) {
        if (n == 0)
                return NAN;
        size_t rank = (size_t) ceil(p * (double) n);
        if (rank < 1)
                rank = 1;
        return sorted[rank - 1];
}

/* Leaves the samples in their order (the loaded ones pair with their times); *oom on failure. */
static struct summary summarize(const struct samples *s, bool *oom) {
        struct summary r = { .n = s->n, .median = NAN, .p90 = NAN, .max = NAN, .mean = NAN };
        if (s->n == 0)
                return r;
        double *v = malloc(s->n * sizeof(double));
        if (!v) {
                *oom = true;
                return r;
        }
        memcpy(v, s->v, s->n * sizeof(double));
        qsort(v, s->n, sizeof(double), bench_compare_double);
        double sum = 0;
        for (size_t i = 0; i < s->n; i++)
                sum += v[i];
        r.median = s->n % 2 ? v[s->n / 2] : (v[s->n / 2 - 1] + v[s->n / 2]) / 2;
        r.p90 = percentile(v, s->n, 0.9);
        r.max = v[s->n - 1];
        r.mean = sum / (double) s->n;
        free(v);
        return r;
}

/* The unloaded gap at time t: linear between (t0, g0) and (t1, g1), held flat outside. */
static double baseline_at(double t, double t0, double g0, double t1, double g1) {
        if (!(t1 > t0))
                return g1;
        double f = (t - t0) / (t1 - t0);
        if (f < 0)
                f = 0;
        if (f > 1)
                f = 1;
        return g0 + f * (g1 - g0);
}

/* Each gap divided by the baseline at its time: interpolated between pre and post (t1 > t0),
 * or one constant (t0 == t1, g0 == g1). */
static struct summary ratio_summary(const struct samples *gaps, const struct samples *times, double t0, double g0,
                                    double t1, double g1, bool *oom) {
        struct samples r = {};
        struct summary s;
        if (gaps->n && !(r.v = malloc(gaps->n * sizeof(double)))) {
                *oom = true;
                return (struct summary) { .median = NAN, .p90 = NAN, .max = NAN, .mean = NAN };
        }
        for (size_t i = 0; i < gaps->n; i++)
                r.v[i] = gaps->v[i] / baseline_at(times->v[i], t0, g0, t1, g1);
        r.n = r.cap = gaps->n;
        s = summarize(&r, oom);
        free(r.v);
        return s;
}

/* ---- streams ---- */

static void on_decoder(struct async_stream *s, void *userdata) {
        struct decoder *d = userdata;
        struct bench *b = d->b;
        struct request_output *o;

        while ((o = async_stream_take(s))) {
                uint32_t n_new = 0;
                for (uint32_t i = 0; i < o->n_outputs; i++)
                        n_new += o->outputs[i].n_token_ids;
                if (n_new > 0) {
                        double now = monotonic_seconds();
                        double engine_now = o->metrics.last_token_time;
                        if (b->phase != PHASE_WARMUP && b->phase != PHASE_DONE && d->last_time > 0) {
                                double gap = (now - d->last_time) / n_new;
                                double engine_gap = (engine_now - d->last_engine_time) / n_new;
                                double mid = (now + d->last_time) / 2;
                                bool has_engine = d->last_engine_time > 0 && engine_now > 0;
                                bool loaded = b->phase == PHASE_LOADED;
                                if (samples_push(&b->gaps[b->phase], gap, n_new) < 0 ||
                                    (loaded && samples_push(&b->times, mid, n_new) < 0) ||
                                    (has_engine && samples_push(&b->engine_gaps[b->phase], engine_gap, n_new) < 0) ||
                                    (has_engine && loaded && samples_push(&b->engine_times, mid, n_new) < 0) ||
                                    (has_engine && loaded && d == &b->dec[0] &&
                                     samples_push(&b->timeline, engine_gap, n_new) < 0))
                                        b->oom = true;
                                d->n_gaps[b->phase] += n_new;
                        }
                        d->last_time = now;
                        d->last_engine_time = engine_now;
                        d->n_tokens += n_new;
                }
                if (o->error && !d->error[0])
                        snprintf(d->error, sizeof(d->error), "%s", o->error);
                if (o->finished)
                        d->finished = true;
                request_output_free(o);
        }
}

static void on_long(struct async_stream *s, void *userdata) {
        struct bench *b = userdata;
        struct request_output *o;

        while ((o = async_stream_take(s))) {
                uint32_t n_new = 0;
                for (uint32_t i = 0; i < o->n_outputs; i++)
                        n_new += o->outputs[i].n_token_ids;
                if (n_new > 0 && b->long_first == 0) {
                        b->long_first = monotonic_seconds();
                        b->long_engine_ttft = o->metrics.first_token_time - o->metrics.arrival_time;
                        b->long_engine_prefill = o->metrics.first_token_time - o->metrics.scheduled_time;
                }
                if (o->error && !b->long_error[0])
                        snprintf(b->long_error, sizeof(b->long_error), "%s", o->error);
                if (o->finished)
                        b->long_finished = true;
                request_output_free(o);
        }
}

/* Token ids in [100, 40000), the same on every run (base/rng.h). */
static int32_t random_token(struct rng *r) {
        return (int32_t) (100 + rng_next(r) % (40000 - 100));
}

/* ---- reporting ---- */

static struct json_object *json_double(double v) {
        return isfinite(v) ? json_object_new_double(v) : json_object_new_null();
}

static struct json_object *json_summary(const struct summary *s) {
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "samples", json_object_new_int64((int64_t) s->n));
        json_object_object_add(o, "median_ms", json_double(s->median * 1e3));
        json_object_object_add(o, "p90_ms", json_double(s->p90 * 1e3));
        json_object_object_add(o, "max_ms", json_double(s->max * 1e3));
        json_object_object_add(o, "mean_ms", json_double(s->mean * 1e3));
        return o;
}

struct phase_stats {
        double start, end;
        double cpu_start, cpu_end;   /* this process's CPU seconds, all threads */
        double load_start, load_end; /* the machine's 1-minute load average */
        struct engine_stats begin, finish;
};

/* 1-minute load average: with the runner's threads busy it reads about their number; more
 * means other work competed for the cores. */
static double load_average(void) {
        double l[1];
        return getloadavg(l, 1) == 1 ? l[0] : NAN;
}

/* CPU seconds used by the process so far: compared with the wall time of a phase it shows
 * whether the runner's threads had their cores (another load on the machine lowers it). */
static double process_cpu_seconds(void) {
        struct rusage ru;
        if (getrusage(RUSAGE_SELF, &ru) < 0)
                return NAN;
        return (double) ru.ru_utime.tv_sec + (double) ru.ru_utime.tv_usec * 1e-6 + (double) ru.ru_stime.tv_sec +
               (double) ru.ru_stime.tv_usec * 1e-6;
}

static struct json_object *json_phase(const struct phase_stats *p, const struct summary *host,
                                      const struct summary *engine) {
        struct json_object *o = json_object_new_object();
        uint64_t steps = p->finish.steps - p->begin.steps;
        uint64_t tokens = p->finish.scheduled_tokens - p->begin.scheduled_tokens;
        double seconds = p->end - p->start;
        json_object_object_add(o, "seconds", json_double(seconds));
        json_object_object_add(o, "steps", json_object_new_int64((int64_t) steps));
        json_object_object_add(o, "mean_step_ms", json_double(steps ? seconds / (double) steps * 1e3 : NAN));
        json_object_object_add(o, "scheduled_tokens", json_object_new_int64((int64_t) tokens));
        json_object_object_add(o, "tokens_per_step", json_double(steps ? (double) tokens / (double) steps : NAN));
        json_object_object_add(o, "preemptions",
                               json_object_new_int64((int64_t) (p->finish.preemptions - p->begin.preemptions)));
        json_object_object_add(o, "cpu_cores_used", json_double((p->cpu_end - p->cpu_start) / seconds));
        json_object_object_add(o, "loadavg_1min_start", json_double(p->load_start));
        json_object_object_add(o, "loadavg_1min_end", json_double(p->load_end));
        json_object_object_add(o, "host_gaps", json_summary(host));
        json_object_object_add(o, "engine_gaps", json_summary(engine));
        return o;
}

static void print_phase(const char *name, const struct phase_stats *p, const struct summary *host,
                        const struct summary *engine) {
        uint64_t steps = p->finish.steps - p->begin.steps;
        uint64_t tokens = p->finish.scheduled_tokens - p->begin.scheduled_tokens;
        double seconds = p->end - p->start;
        printf("%-9s %6.2f s, %4" PRIu64 " steps (%.1f ms/step, %.1f tokens/step, %" PRIu64
               " preemptions, %.2f cores busy, load average %.2f -> %.2f)\n",
               name, seconds, steps, steps ? seconds / (double) steps * 1e3 : NAN,
               steps ? (double) tokens / (double) steps : NAN, p->finish.preemptions - p->begin.preemptions,
               (p->cpu_end - p->cpu_start) / seconds, p->load_start, p->load_end);
        printf("          host gap   median %7.2f ms  p90 %7.2f ms  max %7.2f ms  mean %7.2f ms  (%zu samples)\n",
               host->median * 1e3, host->p90 * 1e3, host->max * 1e3, host->mean * 1e3, host->n);
        printf("          engine gap median %7.2f ms  p90 %7.2f ms  max %7.2f ms  mean %7.2f ms  (%zu samples)\n",
               engine->median * 1e3, engine->p90 * 1e3, engine->max * 1e3, engine->mean * 1e3, engine->n);
        fflush(stdout);
}

static void print_ratios(const char *name, const struct summary *host, const struct summary *engine) {
        printf("  %-30s median %5.2fx  p90 %5.2fx  max %5.2fx  (engine-side: %.2fx, %.2fx, %.2fx)\n", name,
               host->median, host->p90, host->max, engine->median, engine->p90, engine->max);
}

static struct json_object *json_ratios(const struct summary *host, const struct summary *engine) {
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "median", json_double(host->median));
        json_object_object_add(o, "p90", json_double(host->p90));
        json_object_object_add(o, "max", json_double(host->max));
        json_object_object_add(o, "engine_median", json_double(engine->median));
        json_object_object_add(o, "engine_p90", json_double(engine->p90));
        json_object_object_add(o, "engine_max", json_double(engine->max));
        return o;
}

/* ---- main ---- */

static void usage(FILE *f) {
        fprintf(f,
                "Usage: bench-decode-stall [OPTIONS]\n"
                "  --model PATH                  GGUF model ($ASYNCLLM_MODEL, else " DEFAULT_MODEL_PATH ")\n"
                "  --threads N                   CPU runner threads (2)\n"
                "  --budget N                    max_num_batched_tokens (256)\n"
                "  --long-prefill-threshold N    prefill chunk cap, 0 = none (the config default)\n"
                "  --decode-stall-limit X        the stall guard's limit, 0 = off (the config default: 2)\n"
                "  --decoders N                  decoding streams (16)\n"
                "  --prompt-len N                tokens of the long prompt (4096)\n"
                "  --warmup N                    tokens per decoder before measuring (4)\n"
                "  --unloaded-steps N            gaps per decoder in each unloaded phase, pre and post (30)\n"
                "  --max-loaded-steps N          abort the long prompt after N engine steps, 0 = never:\n"
                "                                the loaded phase ends at its first token (0)\n"
                "  --decode-tokens N             max_tokens of each decoder (enough for the run)\n"
                "  --json FILE                   write the results as JSON\n"
                "  --check                       exit 1 when the 2x check (interpolated baseline) fails\n");
}

int main(int argc, char **argv) {
        enum {
                ARG_BUDGET = 0x100,
                ARG_LONG_PREFILL,
                ARG_DECODERS,
                ARG_PROMPT_LEN,
                ARG_WARMUP,
                ARG_UNLOADED_STEPS,
                ARG_MAX_LOADED_STEPS,
                ARG_DECODE_TOKENS,
                ARG_JSON,
                ARG_CHECK,
                ARG_STALL_LIMIT,
        };
        static const struct option options[] = {
                { "model", required_argument, NULL, 'm' },
                { "threads", required_argument, NULL, 't' },
                { "budget", required_argument, NULL, ARG_BUDGET },
                { "long-prefill-threshold", required_argument, NULL, ARG_LONG_PREFILL },
                { "decoders", required_argument, NULL, ARG_DECODERS },
                { "prompt-len", required_argument, NULL, ARG_PROMPT_LEN },
                { "warmup", required_argument, NULL, ARG_WARMUP },
                { "unloaded-steps", required_argument, NULL, ARG_UNLOADED_STEPS },
                { "max-loaded-steps", required_argument, NULL, ARG_MAX_LOADED_STEPS },
                { "decode-tokens", required_argument, NULL, ARG_DECODE_TOKENS },
                { "json", required_argument, NULL, ARG_JSON },
                { "check", no_argument, NULL, ARG_CHECK },
                { "decode-stall-limit", required_argument, NULL, ARG_STALL_LIMIT },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        const char *model_path = getenv("ASYNCLLM_MODEL"), *json_path = NULL;
        unsigned threads = 2, budget = 256, n_dec = 16, prompt_len = 4096, warmup = 4, unloaded_steps = 30;
        unsigned max_loaded_steps = 0, decode_tokens = 0, threshold = 0;
        bool threshold_set = false, check = false;
        struct engine_config config;
        int c, r = 0;

        engine_config_init_default(&config);
        if (!model_path || !*model_path)
                model_path = DEFAULT_MODEL_PATH;
        while ((c = getopt_long(argc, argv, "m:t:h", options, NULL)) != -1) {
                unsigned *target = NULL;
                switch (c) {
                case 'm': model_path = optarg; break;
                case 't': target = &threads; break;
                case ARG_BUDGET: target = &budget; break;
                case ARG_LONG_PREFILL: target = &threshold; threshold_set = true; break;
                case ARG_DECODERS: target = &n_dec; break;
                case ARG_PROMPT_LEN: target = &prompt_len; break;
                case ARG_WARMUP: target = &warmup; break;
                case ARG_UNLOADED_STEPS: target = &unloaded_steps; break;
                case ARG_MAX_LOADED_STEPS: target = &max_loaded_steps; break;
                case ARG_DECODE_TOKENS: target = &decode_tokens; break;
                case ARG_JSON: json_path = optarg; break;
                case ARG_CHECK: check = true; break;
                case ARG_STALL_LIMIT: {
                        char *end;
                        config.decode_stall_limit = strtod(optarg, &end);
                        if (end == optarg || *end) {
                                fprintf(stderr, "bench-decode-stall: invalid number '%s' for --decode-stall-limit\n", optarg);
                                return 2;
                        }
                        break;
                }
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
                if (target && bench_parse_uint(optarg, target) < 0) {
                        fprintf(stderr, "bench-decode-stall: invalid number '%s' for --%s\n", optarg,
                                c == 't' ? "threads" : options[c - ARG_BUDGET + 2].name);
                        return 2;
                }
        }
        if (optind < argc || threads < 1 || n_dec < 1 || prompt_len < 1 || unloaded_steps < 1 || budget < n_dec + 1) {
                if (budget < n_dec + 1)
                        fprintf(stderr, "bench-decode-stall: --budget must be at least --decoders + 1\n");
                usage(stderr);
                return 2;
        }
        if (threshold_set)
                config.long_prefill_token_threshold = threshold;

        struct error err = {};
        struct model *model = NULL;
        struct tokenizer *tk = NULL;
        struct backend backend = { 0 };
        struct async_llm *llm = NULL;
        struct bench b = {};
        int32_t *long_prompt = NULL;
        struct json_object *json = NULL;

        if (model_load(model_path, &model, &err) < 0 || tokenizer_load(model->file, &tk, &err) < 0) {
                fprintf(stderr, "bench-decode-stall: %s\n", err.message);
                r = 1;
                goto out;
        }

        /* Sizes: the decoders must outlast all phases (warmup, pre, loaded, post); every sequence
         * fits in the KV pool at once, so nothing is ever preempted. */
        uint32_t chunk = budget - n_dec;
        if (config.long_prefill_token_threshold && config.long_prefill_token_threshold < chunk)
                chunk = config.long_prefill_token_threshold;
        if (config.decode_stall_limit > 0)
                chunk = 1; /* the guard may cut chunks to one token: size for the worst case */
        uint32_t loaded_steps = (prompt_len + chunk - 1) / chunk;
        if (max_loaded_steps && max_loaded_steps < loaded_steps)
                loaded_steps = max_loaded_steps;
        if (decode_tokens == 0)
                decode_tokens = warmup + 1 + unloaded_steps + loaded_steps + unloaded_steps + 64;
        uint32_t dec_len = DECODER_PROMPT_MAX + decode_tokens + 1;
        config.max_num_batched_tokens = budget;
        config.max_num_seqs = n_dec + 1;
        config.max_model_len = prompt_len + 64 > dec_len ? prompt_len + 64 : dec_len;
        if (config.max_model_len > model->hp.n_ctx_train) {
                fprintf(stderr, "bench-decode-stall: %u tokens do not fit in the model's context of %u\n",
                        config.max_model_len, model->hp.n_ctx_train);
                r = 1;
                goto out;
        }
        uint32_t n_blocks = n_dec * ((dec_len + config.block_size - 1) / config.block_size) +
                            (config.max_model_len + config.block_size - 1) / config.block_size + 16;
        if (engine_config_finalize(&config, model->hp.n_ctx_train, &err) < 0) {
                fprintf(stderr, "bench-decode-stall: %s\n", err.message);
                r = 1;
                goto out;
        }
        struct backend_options backend_config = backend_options_for_engine(&config, threads);
        backend_config.n_kv_blocks = n_blocks;
        if (backend_open("cpu", &backend_config, model, &backend, &err) < 0) {
                fprintf(stderr, "bench-decode-stall: %s\n", err.message);
                r = 1;
                goto out;
        }
        if (async_llm_new(&config, &backend, tk, n_blocks, &llm, &err) < 0) {
                fprintf(stderr, "bench-decode-stall: %s\n", err.message);
                r = 1;
                goto out;
        }
        printf("model %s, %u threads (%s kernels), budget %u, long_prefill_token_threshold %u, decode_stall_limit %g, "
               "%u decoders, prompt %u tokens\n",
               model_path, threads, backend.kernels, config.max_num_batched_tokens,
               config.long_prefill_token_threshold, config.decode_stall_limit, n_dec, prompt_len);
        printf("max_model_len %u, %u KV blocks (%.0f MiB), decoder max_tokens %u, prefill chunk %u tokens\n",
               config.max_model_len, n_blocks, (double) n_blocks * backend.kv.block_bytes / (1 << 20), decode_tokens,
               chunk);
        fflush(stdout);

        /* Phase 0: the decoders start and warm up. */
        struct sampling_params params;
        sampling_params_init_default(&params);
        params.temperature = 0;
        params.ignore_eos = true;
        params.output_kind = OUTPUT_DELTA;
        params.max_tokens = (int32_t) decode_tokens;
        struct rng rng;
        rng_seed(&rng, 1);
        b.n_dec = n_dec;
        b.dec = calloc(n_dec, sizeof(*b.dec));
        if (!b.dec) {
                fprintf(stderr, "bench-decode-stall: out of memory\n");
                r = 1;
                goto out;
        }
        for (unsigned i = 0; i < n_dec; i++) {
                struct decoder *d = &b.dec[i];
                d->b = &b;
                d->n_prompt = 8 + i % (DECODER_PROMPT_MAX - 8 + 1);
                for (uint32_t t = 0; t < d->n_prompt; t++)
                        d->prompt[t] = random_token(&rng);
                snprintf(d->id, sizeof(d->id), "decoder-%u", i);
                struct generate_request req = {
                        .request_id = d->id, .prompt = d->prompt, .n_prompt = d->n_prompt, .params = &params,
                };
                if (async_llm_generate(llm, &req, on_decoder, d, &d->stream, &err) < 0) {
                        fprintf(stderr, "bench-decode-stall: %s: %s\n", d->id, err.message);
                        r = 1;
                        goto out;
                }
        }

        struct phase_stats ph[_PHASE_RECORDED] = {};
        struct async_llm_stats st;
        struct pollfd pfd = { .fd = async_llm_fd(llm), .events = POLLIN };
        ph[PHASE_WARMUP].start = monotonic_seconds();
        ph[PHASE_WARMUP].load_start = load_average();
        async_llm_stats(llm, &st);
        struct summary host[_PHASE_RECORDED] = {}, engine[_PHASE_RECORDED] = {};
        bool long_aborted = false;
        ph[PHASE_WARMUP].begin = st.engine.stats;

        while (b.phase != PHASE_DONE) {
                int n = poll(&pfd, 1, 1000);
                if (n < 0 && errno != EINTR) {
                        fprintf(stderr, "bench-decode-stall: poll: %s\n", strerror(errno));
                        r = 1;
                        goto out;
                }
                if (n > 0)
                        async_llm_dispatch(llm);
                if (async_llm_check_health(llm, STALL_TIMEOUT, &err) < 0) {
                        fprintf(stderr, "bench-decode-stall: %s\n", err.message);
                        r = 1;
                        goto out;
                }
                if (b.oom) {
                        fprintf(stderr, "bench-decode-stall: out of memory\n");
                        r = 1;
                        goto out;
                }
                for (unsigned i = 0; i < n_dec; i++)
                        if (b.dec[i].finished) {
                                fprintf(stderr,
                                        "bench-decode-stall: %s ended early after %u tokens (%s); raise --decode-tokens\n",
                                        b.dec[i].id, b.dec[i].n_tokens,
                                        b.dec[i].error[0] ? b.dec[i].error : "no error");
                                r = 1;
                                goto out;
                        }
                if (b.long_error[0]) {
                        fprintf(stderr, "bench-decode-stall: the long prompt failed: %s\n", b.long_error);
                        r = 1;
                        goto out;
                }

                double now = monotonic_seconds();
                async_llm_stats(llm, &st);
                enum phase next = b.phase;
                uint32_t least_tokens = UINT32_MAX, least_gaps = UINT32_MAX;
                for (unsigned i = 0; i < n_dec; i++) {
                        if (b.dec[i].n_tokens < least_tokens)
                                least_tokens = b.dec[i].n_tokens;
                        if (b.phase < _PHASE_RECORDED && b.dec[i].n_gaps[b.phase] < least_gaps)
                                least_gaps = b.dec[i].n_gaps[b.phase];
                }
                /* --max-loaded-steps: abort the long prompt; the loaded phase ends with its
                 * final output, so the post phase has no prompt work left beside it. */
                if (b.phase == PHASE_LOADED && max_loaded_steps && !long_aborted && !b.long_finished &&
                    st.engine.stats.steps - ph[PHASE_LOADED].begin.steps >= max_loaded_steps) {
                        async_llm_abort(llm, "long-prompt");
                        long_aborted = true;
                }
                if (b.phase == PHASE_WARMUP && least_tokens >= warmup + 1)
                        next = PHASE_PRE;
                else if (b.phase == PHASE_PRE && least_gaps >= unloaded_steps)
                        next = PHASE_LOADED;
                else if (b.phase == PHASE_LOADED && b.long_finished) /* max_tokens 1: its first token */
                        next = PHASE_POST;
                else if (b.phase == PHASE_POST && least_gaps >= unloaded_steps)
                        next = PHASE_DONE;
                if (next == b.phase)
                        continue;

                enum phase ended = b.phase;
                ph[ended].end = now;
                ph[ended].cpu_end = process_cpu_seconds();
                ph[ended].load_end = load_average();
                ph[ended].finish = st.engine.stats;
                b.phase = next;
                if (ended != PHASE_WARMUP) {
                        host[ended] = summarize(&b.gaps[ended], &b.oom);
                        engine[ended] = summarize(&b.engine_gaps[ended], &b.oom);
                        print_phase(phase_names[ended], &ph[ended], &host[ended], &engine[ended]);
                }
                if (ended == PHASE_LOADED) {
                        if (b.long_first > 0)
                                printf("long prompt: TTFT %.2f s (engine: %.2f s from arrival, %.2f s from first "
                                       "scheduled)\n",
                                       b.long_first - b.long_submit, b.long_engine_ttft, b.long_engine_prefill);
                        else
                                printf("long prompt: aborted after %u steps (--max-loaded-steps), no first token\n",
                                       max_loaded_steps);
                        fflush(stdout);
                }
                if (next == PHASE_DONE)
                        break;
                ph[next].start = now;
                ph[next].cpu_start = process_cpu_seconds();
                ph[next].load_start = load_average();
                ph[next].begin = st.engine.stats;
                if (next == PHASE_PRE)
                        printf("\n");
                if (next == PHASE_LOADED) {
                        struct sampling_params lp;
                        sampling_params_init_default(&lp);
                        lp.temperature = 0;
                        lp.ignore_eos = true;
                        lp.output_kind = OUTPUT_DELTA;
                        lp.max_tokens = 1;
                        if (!(long_prompt = malloc(prompt_len * sizeof(int32_t)))) {
                                fprintf(stderr, "bench-decode-stall: out of memory\n");
                                r = 1;
                                goto out;
                        }
                        struct rng lrng;
                        rng_seed(&lrng, 2);
                        for (unsigned i = 0; i < prompt_len; i++)
                                long_prompt[i] = random_token(&lrng);
                        struct generate_request req = {
                                .request_id = "long-prompt", .prompt = long_prompt, .n_prompt = prompt_len,
                                .params = &lp,
                        };
                        b.long_submit = monotonic_seconds();
                        if (async_llm_generate(llm, &req, on_long, &b, &b.long_stream, &err) < 0) {
                                fprintf(stderr, "bench-decode-stall: long-prompt: %s\n", err.message);
                                r = 1;
                                goto out;
                        }
                        ph[next].start = b.long_submit;
                }
        }

        /* ---- results ---- */
        if (b.oom) {
                fprintf(stderr, "bench-decode-stall: out of memory\n");
                r = 1;
                goto out;
        }
        bool complete = b.long_first > 0;
        double ttft = complete ? b.long_first - b.long_submit : NAN;
        double t_pre = (ph[PHASE_PRE].start + ph[PHASE_PRE].end) / 2;
        double t_post = (ph[PHASE_POST].start + ph[PHASE_POST].end) / 2;
        double pre = host[PHASE_PRE].median, post = host[PHASE_POST].median;
        double engine_pre = engine[PHASE_PRE].median, engine_post = engine[PHASE_POST].median;
        struct samples *lg = &b.gaps[PHASE_LOADED], *le = &b.engine_gaps[PHASE_LOADED];
        /* each loaded gap over the unloaded gap at its time (the check) */
        struct summary interp = ratio_summary(lg, &b.times, t_pre, pre, t_post, post, &b.oom);
        struct summary engine_interp = ratio_summary(le, &b.engine_times, t_pre, engine_pre, t_post, engine_post, &b.oom);
        /* over the pre median alone (the former check) and over the post median alone */
        struct summary pre_only = ratio_summary(lg, &b.times, 0, pre, 0, pre, &b.oom);
        struct summary engine_pre_only = ratio_summary(le, &b.engine_times, 0, engine_pre, 0, engine_pre, &b.oom);
        struct summary post_only = ratio_summary(lg, &b.times, 0, post, 0, post, &b.oom);
        struct summary engine_post_only = ratio_summary(le, &b.engine_times, 0, engine_post, 0, engine_post, &b.oom);
        if (b.oom) {
                fprintf(stderr, "bench-decode-stall: out of memory\n");
                r = 1;
                goto out;
        }
        double base_start = baseline_at(ph[PHASE_LOADED].start, t_pre, pre, t_post, post);
        double base_end = baseline_at(ph[PHASE_LOADED].end, t_pre, pre, t_post, post);
        bool pass = interp.median <= 2.0 && interp.p90 <= 2.0;
        bool pass_pre_only = pre_only.median <= 2.0 && pre_only.p90 <= 2.0;

        if (b.timeline.n > 0)
                printf("decoder-0's gap in the loaded phase: first step %.1f ms, last step %.1f ms\n",
                       b.timeline.v[0] * 1e3, b.timeline.v[b.timeline.n - 1] * 1e3);
        printf("unloaded median gap: pre %.2f ms, post %.2f ms (%.2fx); interpolated: %.2f ms at the loaded phase's "
               "start, %.2f ms at its end\n",
               pre * 1e3, post * 1e3, post / pre, base_start * 1e3, base_end * 1e3);
        printf("loaded gap / unloaded median gap:\n");
        print_ratios("interpolated pre..post (check)", &interp, &engine_interp);
        print_ratios("pre only (former check)", &pre_only, &engine_pre_only);
        print_ratios("post only", &post_only, &engine_post_only);
        printf("decodes within 2x of the unloaded gap at the time (median and p90): %s (pre-only baseline: %s)\n",
               pass ? "PASS" : "FAIL", pass_pre_only ? "PASS" : "FAIL");
        fflush(stdout);

        if (json_path) {
                json = json_object_new_object();
                struct json_object *cfg = json_object_new_object();
                json_object_object_add(cfg, "model", json_object_new_string(model_path));
                json_object_object_add(cfg, "threads", json_object_new_int64(threads));
                json_object_object_add(cfg, "kernels", json_object_new_string(backend.kernels));
                json_object_object_add(cfg, "max_num_batched_tokens", json_object_new_int64(config.max_num_batched_tokens));
                json_object_object_add(cfg, "long_prefill_token_threshold",
                                       json_object_new_int64(config.long_prefill_token_threshold));
                json_object_object_add(cfg, "decode_stall_limit", json_object_new_double(config.decode_stall_limit));
                json_object_object_add(cfg, "prefill_chunk", json_object_new_int64(chunk));
                json_object_object_add(cfg, "decoders", json_object_new_int64(n_dec));
                json_object_object_add(cfg, "decoder_max_tokens", json_object_new_int64(decode_tokens));
                json_object_object_add(cfg, "prompt_len", json_object_new_int64(prompt_len));
                json_object_object_add(cfg, "warmup", json_object_new_int64(warmup));
                json_object_object_add(cfg, "unloaded_steps", json_object_new_int64(unloaded_steps));
                json_object_object_add(cfg, "max_loaded_steps", json_object_new_int64(max_loaded_steps));
                json_object_object_add(cfg, "max_model_len", json_object_new_int64(config.max_model_len));
                json_object_object_add(cfg, "kv_blocks", json_object_new_int64(n_blocks));
                json_object_object_add(json, "config", cfg);
                json_object_object_add(json, "unloaded_pre", json_phase(&ph[PHASE_PRE], &host[PHASE_PRE],
                                                                        &engine[PHASE_PRE]));
                json_object_object_add(json, "loaded", json_phase(&ph[PHASE_LOADED], &host[PHASE_LOADED],
                                                                  &engine[PHASE_LOADED]));
                json_object_object_add(json, "unloaded_post", json_phase(&ph[PHASE_POST], &host[PHASE_POST],
                                                                         &engine[PHASE_POST]));
                struct json_object *lp = json_object_new_object();
                json_object_object_add(lp, "complete", json_object_new_boolean(complete));
                json_object_object_add(lp, "ttft_s", json_double(ttft));
                json_object_object_add(lp, "engine_ttft_s", json_double(complete ? b.long_engine_ttft : NAN));
                json_object_object_add(lp, "engine_prefill_s", json_double(complete ? b.long_engine_prefill : NAN));
                json_object_object_add(json, "long_prompt", lp);
                struct json_object *tl = json_object_new_array();
                for (size_t i = 0; i < b.timeline.n; i++)
                        json_object_array_add(tl, json_object_new_double(round(b.timeline.v[i] * 1e4) / 10));
                json_object_object_add(json, "loaded_gaps_ms_decoder0", tl);
                struct json_object *bl = json_object_new_object();
                json_object_object_add(bl, "pre_median_ms", json_double(pre * 1e3));
                json_object_object_add(bl, "post_median_ms", json_double(post * 1e3));
                json_object_object_add(bl, "pre_midpoint_s", json_double(t_pre - ph[PHASE_LOADED].start));
                json_object_object_add(bl, "post_midpoint_s", json_double(t_post - ph[PHASE_LOADED].start));
                json_object_object_add(bl, "at_loaded_start_ms", json_double(base_start * 1e3));
                json_object_object_add(bl, "at_loaded_end_ms", json_double(base_end * 1e3));
                json_object_object_add(json, "unloaded_baseline", bl);
                json_object_object_add(json, "ratio_interpolated", json_ratios(&interp, &engine_interp));
                json_object_object_add(json, "ratio_pre_only", json_ratios(&pre_only, &engine_pre_only));
                json_object_object_add(json, "ratio_post_only", json_ratios(&post_only, &engine_post_only));
                json_object_object_add(json, "pass", json_object_new_boolean(pass));
                json_object_object_add(json, "pass_pre_only", json_object_new_boolean(pass_pre_only));
                if (json_object_to_file_ext(json_path, json, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE) < 0) {
                        fprintf(stderr, "bench-decode-stall: cannot write %s: %s\n", json_path, json_util_get_last_err());
                        r = 1;
                        goto out;
                }
        }
        if (check && !pass)
                r = 1;

out:
        /* Abort what still runs and release every stream before the engine goes. */
        if (b.dec)
                for (unsigned i = 0; i < b.n_dec; i++)
                        async_stream_release(b.dec[i].stream);
        async_stream_release(b.long_stream);
        async_llm_free(llm);
        backend_free(&backend);
        tokenizer_free(tk);
        model_free(model);
        json_object_put(json);
        free(long_prompt);
        free(b.dec);
        free(b.timeline.v);
        free(b.times.v);
        free(b.engine_times.v);
        for (int p = 0; p < _PHASE_RECORDED; p++) {
                free(b.gaps[p].v);
                free(b.engine_gaps[p].v);
        }
        return r;
}
