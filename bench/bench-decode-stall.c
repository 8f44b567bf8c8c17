/* SPDX-License-Identifier: MIT */
/* Do decodes stall when a long prompt arrives? `decoders` greedy streams decode through the
 * real AsyncLLM on the CPU backend; their inter-token gaps are measured first alone
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
 * against the post median alone (conservative for early gaps) are reported too. Every ratio
 * summary gives the median, p90, p99 and max, pooled over the decoders and per decoder (with
 * its longest gap in ms): a stream that froze once is what a watching user sees, and a pooled
 * p99 hides it. The max against the stall guard's limit (--decode-stall-limit; the check's
 * 2x when the guard is off) is printed with the worst stream, but is not part of the check.
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
#include "backend-open.h"
#include "bench-util.h"
#include "clock.h"
#include "model.h"
#include "rng.h"
#include "tokenizer.h"

#define DECODER_PROMPT_MAX 16
#define DEFAULT_MODEL_PATH "models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define STALL_TIMEOUT 120.0 /* seconds without a step: give up */
#define CHECK_RATIO 2.0     /* --check: the loaded gaps' median and p90 ratios at most this */

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
        /* this stream's share of the loaded gaps, each with the host time at its middle, host
         * and engine side: its own figures, since a pooled p99 can hide one stream's freeze */
        struct samples loaded_gaps, loaded_times, loaded_engine_gaps, loaded_engine_times;
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
        double median, p90, p99, max, mean;
};

static const struct summary empty_summary = { .median = NAN, .p90 = NAN, .p99 = NAN, .max = NAN, .mean = NAN };

/* The largest sample; NAN when there are none. */
static double samples_max(const struct samples *s) {
        double max = NAN;
        for (size_t i = 0; i < s->n; i++)
                if (i == 0 || s->v[i] > max)
                        max = s->v[i];
        return max;
}

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
        struct summary r = empty_summary;
        r.n = s->n;
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
        r.p99 = percentile(v, s->n, 0.99);
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
                return empty_summary;
        }
        for (size_t i = 0; i < gaps->n; i++)
                r.v[i] = gaps->v[i] / baseline_at(times->v[i], t0, g0, t1, g1);
        r.n = r.cap = gaps->n;
        s = summarize(&r, oom);
        free(r.v);
        return s;
}

/* ---- streams ---- */

/* One gap of a stream, counted once per token of the output that ended it. */
struct gap {
        double host, engine; /* seconds per token */
        double middle;       /* host time halfway through it */
        bool has_engine;     /* both ends carried the engine's token time */
        unsigned n_tokens;
};

/* Files a gap under the current phase; a loaded one also with its time, pooled and under its
 * stream. 0 or -ENOMEM. */
static int record_gap(struct decoder *d, const struct gap *g) {
        struct bench *b = d->b;
        unsigned n = g->n_tokens;
        if (samples_push(&b->gaps[b->phase], g->host, n) < 0 ||
            (g->has_engine && samples_push(&b->engine_gaps[b->phase], g->engine, n) < 0))
                return -ENOMEM;
        if (b->phase != PHASE_LOADED)
                return 0;
        if (samples_push(&b->times, g->middle, n) < 0 || samples_push(&d->loaded_gaps, g->host, n) < 0 ||
            samples_push(&d->loaded_times, g->middle, n) < 0)
                return -ENOMEM;
        if (!g->has_engine)
                return 0;
        if (samples_push(&b->engine_times, g->middle, n) < 0 ||
            samples_push(&d->loaded_engine_gaps, g->engine, n) < 0 ||
            samples_push(&d->loaded_engine_times, g->middle, n) < 0 ||
            (d == &b->dec[0] && samples_push(&b->timeline, g->engine, n) < 0))
                return -ENOMEM;
        return 0;
}

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
                                struct gap g = {
                                        .host = (now - d->last_time) / n_new,
                                        .engine = (engine_now - d->last_engine_time) / n_new,
                                        .middle = (now + d->last_time) / 2,
                                        .has_engine = d->last_engine_time > 0 && engine_now > 0,
                                        .n_tokens = n_new,
                                };
                                if (record_gap(d, &g) < 0)
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
        json_object_object_add(o, "p99_ms", json_double(s->p99 * 1e3));
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

static void print_gap_summary(const char *name, const struct summary *s) {
        printf("          %s median %7.2f ms  p90 %7.2f ms  p99 %7.2f ms  max %7.2f ms  mean %7.2f ms  (%zu samples)\n",
               name, s->median * 1e3, s->p90 * 1e3, s->p99 * 1e3, s->max * 1e3, s->mean * 1e3, s->n);
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
        print_gap_summary("host gap  ", host);
        print_gap_summary("engine gap", engine);
        fflush(stdout);
}

static void print_ratios(const char *name, const struct summary *host, const struct summary *engine) {
        printf("  %-30s median %5.2fx  p90 %5.2fx  p99 %5.2fx  max %5.2fx  (engine-side: %.2fx, %.2fx, %.2fx, "
               "%.2fx)\n",
               name, host->median, host->p90, host->p99, host->max, engine->median, engine->p90, engine->p99,
               engine->max);
}

static struct json_object *json_ratios(const struct summary *host, const struct summary *engine) {
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "median", json_double(host->median));
        json_object_object_add(o, "p90", json_double(host->p90));
        json_object_object_add(o, "p99", json_double(host->p99));
        json_object_object_add(o, "max", json_double(host->max));
        json_object_object_add(o, "engine_median", json_double(engine->median));
        json_object_object_add(o, "engine_p90", json_double(engine->p90));
        json_object_object_add(o, "engine_p99", json_double(engine->p99));
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
                "  --check                       exit 1 when the 2x check (interpolated baseline: median and\n"
                "                                p90) fails; the max against the limit is only reported\n");
}

/* What the command line asks for. */
struct options {
        const char *model_path, *json_path;
        unsigned threads, budget, n_dec, prompt_len, warmup, unloaded_steps, max_loaded_steps, decode_tokens;
        bool check;
        struct engine_config config; /* the defaults with the options' changes */
};

/* -1 to go on, else the exit status (0 after --help, 2 for a bad command line). */
static int parse_options(int argc, char **argv, struct options *o) {
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
        unsigned threshold = 0;
        bool threshold_set = false;
        int c;

        *o = (struct options) {
                .model_path = getenv("ASYNCLLM_MODEL"), .threads = 2, .budget = 256, .n_dec = 16, .prompt_len = 4096,
                .warmup = 4, .unloaded_steps = 30,
        };
        engine_config_init_default(&o->config);
        if (!o->model_path || !*o->model_path)
                o->model_path = DEFAULT_MODEL_PATH;
        while ((c = getopt_long(argc, argv, "m:t:h", options, NULL)) != -1) {
                unsigned *target = NULL;
                switch (c) {
                case 'm': o->model_path = optarg; break;
                case 't': target = &o->threads; break;
                case ARG_BUDGET: target = &o->budget; break;
                case ARG_LONG_PREFILL: target = &threshold; threshold_set = true; break;
                case ARG_DECODERS: target = &o->n_dec; break;
                case ARG_PROMPT_LEN: target = &o->prompt_len; break;
                case ARG_WARMUP: target = &o->warmup; break;
                case ARG_UNLOADED_STEPS: target = &o->unloaded_steps; break;
                case ARG_MAX_LOADED_STEPS: target = &o->max_loaded_steps; break;
                case ARG_DECODE_TOKENS: target = &o->decode_tokens; break;
                case ARG_JSON: o->json_path = optarg; break;
                case ARG_CHECK: o->check = true; break;
                case ARG_STALL_LIMIT:
                        if (bench_parse_double(optarg, &o->config.decode_stall_limit) < 0) {
                                fprintf(stderr, "bench-decode-stall: invalid number '%s' for --decode-stall-limit\n", optarg);
                                return 2;
                        }
                        break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
                if (target && bench_parse_uint(optarg, target) < 0) {
                        fprintf(stderr, "bench-decode-stall: invalid number '%s' for --%s\n", optarg,
                                c == 't' ? "threads" : options[c - ARG_BUDGET + 2].name);
                        return 2;
                }
        }
        if (optind < argc || o->threads < 1 || o->n_dec < 1 || o->prompt_len < 1 || o->unloaded_steps < 1 ||
            o->budget < o->n_dec + 1) {
                if (o->budget < o->n_dec + 1)
                        fprintf(stderr, "bench-decode-stall: --budget must be at least --decoders + 1\n");
                usage(stderr);
                return 2;
        }
        if (threshold_set)
                o->config.long_prefill_token_threshold = threshold;
        return -1;
}

/* One run: the options, the engine, the streams' state and each phase's measurements. */
struct run {
        struct options o;
        struct model *model;
        struct tokenizer *tk;
        struct backend backend;
        struct async_llm *llm;
        uint32_t chunk;    /* the prefill chunk the sizes assume */
        uint32_t n_blocks; /* KV blocks */
        struct bench b;
        int32_t *long_prompt;
        struct phase_stats ph[_PHASE_RECORDED];
        struct summary host[_PHASE_RECORDED], engine[_PHASE_RECORDED];
        bool long_aborted;
};

/* Sizes the engine: the decoders must outlast all phases (warmup, pre, loaded, post); every
 * sequence fits in the KV pool at once, so nothing is ever preempted. 0 or -1. */
static int size_engine(struct run *run, struct error *err) {
        struct options *o = &run->o;
        struct engine_config *config = &o->config;
        const struct model *model = run->model;
        uint32_t chunk = o->budget - o->n_dec;
        if (config->long_prefill_token_threshold && config->long_prefill_token_threshold < chunk)
                chunk = config->long_prefill_token_threshold;
        if (config->decode_stall_limit > 0)
                chunk = 1; /* the guard may cut chunks to one token: size for the worst case */
        run->chunk = chunk;
        uint32_t loaded_steps = (o->prompt_len + chunk - 1) / chunk;
        if (o->max_loaded_steps && o->max_loaded_steps < loaded_steps)
                loaded_steps = o->max_loaded_steps;
        if (o->decode_tokens == 0)
                o->decode_tokens = o->warmup + 1 + o->unloaded_steps + loaded_steps + o->unloaded_steps + 64;
        uint32_t dec_len = DECODER_PROMPT_MAX + o->decode_tokens + 1;
        config->max_num_batched_tokens = o->budget;
        config->max_num_seqs = o->n_dec + 1;
        config->max_model_len = o->prompt_len + 64 > dec_len ? o->prompt_len + 64 : dec_len;
        if (config->max_model_len > model->hp.n_ctx_train) {
                fprintf(stderr, "bench-decode-stall: %u tokens do not fit in the model's context of %u\n",
                        config->max_model_len, model->hp.n_ctx_train);
                return -1;
        }
        run->n_blocks = o->n_dec * ((dec_len + config->block_size - 1) / config->block_size) +
                        (config->max_model_len + config->block_size - 1) / config->block_size + 16;
        if (engine_config_finalize(config, model->hp.n_ctx_train, err) < 0) {
                fprintf(stderr, "bench-decode-stall: %s\n", err->message);
                return -1;
        }
        return 0;
}

/* Loads the model, sizes and starts the engine, and prints the setup. 0 or -1. */
static int start_engine(struct run *run) {
        const struct options *o = &run->o;
        const struct engine_config *config = &o->config;
        struct error err = {};
        if (model_load(o->model_path, &run->model, &err) < 0 || tokenizer_load(run->model->file, &run->tk, &err) < 0) {
                fprintf(stderr, "bench-decode-stall: %s\n", err.message);
                return -1;
        }
        if (size_engine(run, &err) < 0)
                return -1;
        struct backend_options backend_config = backend_options_for_engine(config, o->threads);
        backend_config.n_kv_blocks = run->n_blocks;
        if (backend_open("cpu", &backend_config, run->model, &run->backend, &err) < 0) {
                fprintf(stderr, "bench-decode-stall: %s\n", err.message);
                return -1;
        }
        if (async_llm_new(config, &run->backend, run->tk, &run->llm, &err) < 0) {
                fprintf(stderr, "bench-decode-stall: %s\n", err.message);
                return -1;
        }
        printf("model %s, %u threads (%s kernels), budget %u, long_prefill_token_threshold %u, decode_stall_limit %g, "
               "%u decoders, prompt %u tokens\n",
               o->model_path, o->threads, run->backend.kernels, config->max_num_batched_tokens,
               config->long_prefill_token_threshold, config->decode_stall_limit, o->n_dec, o->prompt_len);
        printf("max_model_len %u, %u KV blocks (%.0f MiB), decoder max_tokens %u, prefill chunk %u tokens\n",
               config->max_model_len, run->n_blocks, (double) run->n_blocks * run->backend.kv.block_bytes / (1 << 20), o->decode_tokens,
               run->chunk);
        fflush(stdout);
        return 0;
}

/* Greedy, end of text ignored, delta outputs. */
static void greedy_params(struct sampling_params *p, int32_t max_tokens) {
        sampling_params_init_default(p);
        p->temperature = 0;
        p->ignore_eos = true;
        p->output_kind = OUTPUT_DELTA;
        p->max_tokens = max_tokens;
}

/* Phase 0: the decoders start, each on a short prompt of its own. 0 or -1. */
static int start_decoders(struct run *run) {
        struct bench *b = &run->b;
        struct error err = {};
        struct sampling_params params;
        greedy_params(&params, (int32_t) run->o.decode_tokens);
        struct rng rng;
        rng_seed(&rng, 1);
        b->n_dec = run->o.n_dec;
        b->dec = calloc(b->n_dec, sizeof(*b->dec));
        if (!b->dec) {
                fprintf(stderr, "bench-decode-stall: out of memory\n");
                return -1;
        }
        for (unsigned i = 0; i < b->n_dec; i++) {
                struct decoder *d = &b->dec[i];
                d->b = b;
                d->n_prompt = 8 + i % (DECODER_PROMPT_MAX - 8 + 1);
                for (uint32_t t = 0; t < d->n_prompt; t++)
                        d->prompt[t] = random_token(&rng);
                snprintf(d->id, sizeof(d->id), "decoder-%u", i);
                struct request_spec req = {
                        .id = d->id, .prompt = d->prompt, .n_prompt = d->n_prompt, .params = params,
                };
                if (async_llm_generate(run->llm, &req, on_decoder, d, &d->stream, &err) < 0) {
                        fprintf(stderr, "bench-decode-stall: %s: %s\n", d->id, err.message);
                        return -1;
                }
        }
        return 0;
}

/* Starts the loaded phase: the long prompt, one first token wanted. 0 or -1. */
static int submit_long_prompt(struct run *run) {
        struct bench *b = &run->b;
        struct error err = {};
        struct sampling_params lp;
        greedy_params(&lp, 1);
        if (!(run->long_prompt = malloc(run->o.prompt_len * sizeof(int32_t)))) {
                fprintf(stderr, "bench-decode-stall: out of memory\n");
                return -1;
        }
        struct rng lrng;
        rng_seed(&lrng, 2);
        for (unsigned i = 0; i < run->o.prompt_len; i++)
                run->long_prompt[i] = random_token(&lrng);
        struct request_spec req = {
                .id = "long-prompt", .prompt = run->long_prompt, .n_prompt = run->o.prompt_len, .params = lp,
        };
        b->long_submit = monotonic_seconds();
        if (async_llm_generate(run->llm, &req, on_long, b, &b->long_stream, &err) < 0) {
                fprintf(stderr, "bench-decode-stall: long-prompt: %s\n", err.message);
                return -1;
        }
        return 0;
}

/* What ends the run early: a stalled engine, no memory, a decoder that finished (it had to
 * outlast every phase), a failed long prompt. 0 or -1. */
static int check_progress(struct run *run) {
        struct bench *b = &run->b;
        struct error err = {};
        if (async_llm_check_health(run->llm, STALL_TIMEOUT, &err) < 0) {
                fprintf(stderr, "bench-decode-stall: %s\n", err.message);
                return -1;
        }
        if (b->oom) {
                fprintf(stderr, "bench-decode-stall: out of memory\n");
                return -1;
        }
        for (unsigned i = 0; i < b->n_dec; i++)
                if (b->dec[i].finished) {
                        fprintf(stderr, "bench-decode-stall: %s ended early after %u tokens (%s); raise --decode-tokens\n",
                                b->dec[i].id, b->dec[i].n_tokens, b->dec[i].error[0] ? b->dec[i].error : "no error");
                        return -1;
                }
        if (b->long_error[0]) {
                fprintf(stderr, "bench-decode-stall: the long prompt failed: %s\n", b->long_error);
                return -1;
        }
        return 0;
}

/* The phase the run is in now; with --max-loaded-steps, aborts the long prompt when its steps
 * are used up (the loaded phase ends with its final output, so the post phase has no prompt
 * work left beside it). */
static enum phase next_phase(struct run *run, const struct async_llm_stats *st) {
        const struct options *o = &run->o;
        struct bench *b = &run->b;
        uint32_t least_tokens = UINT32_MAX, least_gaps = UINT32_MAX;
        for (unsigned i = 0; i < b->n_dec; i++) {
                if (b->dec[i].n_tokens < least_tokens)
                        least_tokens = b->dec[i].n_tokens;
                if (b->phase < _PHASE_RECORDED && b->dec[i].n_gaps[b->phase] < least_gaps)
                        least_gaps = b->dec[i].n_gaps[b->phase];
        }
        if (b->phase == PHASE_LOADED && o->max_loaded_steps && !run->long_aborted && !b->long_finished &&
            st->engine.stats.steps - run->ph[PHASE_LOADED].begin.steps >= o->max_loaded_steps) {
                async_llm_abort(run->llm, "long-prompt");
                run->long_aborted = true;
        }
        if (b->phase == PHASE_WARMUP && least_tokens >= o->warmup + 1)
                return PHASE_PRE;
        if (b->phase == PHASE_PRE && least_gaps >= o->unloaded_steps)
                return PHASE_LOADED;
        if (b->phase == PHASE_LOADED && b->long_finished) /* max_tokens 1: its first token */
                return PHASE_POST;
        if (b->phase == PHASE_POST && least_gaps >= o->unloaded_steps)
                return PHASE_DONE;
        return b->phase;
}

/* Closes the phase that ended at now: its figures, summarized and printed. */
static void end_phase(struct run *run, enum phase ended, double now, const struct async_llm_stats *st) {
        struct bench *b = &run->b;
        struct phase_stats *p = &run->ph[ended];
        p->end = now;
        p->cpu_end = process_cpu_seconds();
        p->load_end = load_average();
        p->finish = st->engine.stats;
        if (ended != PHASE_WARMUP) {
                run->host[ended] = summarize(&b->gaps[ended], &b->oom);
                run->engine[ended] = summarize(&b->engine_gaps[ended], &b->oom);
                print_phase(phase_names[ended], p, &run->host[ended], &run->engine[ended]);
        }
        if (ended == PHASE_LOADED) {
                if (b->long_first > 0)
                        printf("long prompt: TTFT %.2f s (engine: %.2f s from arrival, %.2f s from first "
                               "scheduled)\n",
                               b->long_first - b->long_submit, b->long_engine_ttft, b->long_engine_prefill);
                else
                        printf("long prompt: aborted after %u steps (--max-loaded-steps), no first token\n",
                               run->o.max_loaded_steps);
                fflush(stdout);
        }
}

/* Opens the phase that starts at now; the loaded one with the long prompt's submission. 0 or -1. */
static int begin_phase(struct run *run, enum phase next, double now, const struct async_llm_stats *st) {
        struct phase_stats *p = &run->ph[next];
        p->start = now;
        p->cpu_start = process_cpu_seconds();
        p->load_start = load_average();
        p->begin = st->engine.stats;
        if (next == PHASE_PRE)
                printf("\n");
        if (next == PHASE_LOADED) {
                if (submit_long_prompt(run) < 0)
                        return -1;
                p->start = run->b.long_submit;
        }
        return 0;
}

/* Runs the phases, warmup to post, taking the streams' outputs as they come. 0 or -1. */
static int measure(struct run *run) {
        struct bench *b = &run->b;
        struct async_llm_stats st;
        struct pollfd pfd = { .fd = async_llm_fd(run->llm), .events = POLLIN };
        run->ph[PHASE_WARMUP].start = monotonic_seconds();
        run->ph[PHASE_WARMUP].load_start = load_average();
        async_llm_stats(run->llm, &st);
        run->ph[PHASE_WARMUP].begin = st.engine.stats;

        while (b->phase != PHASE_DONE) {
                int n = poll(&pfd, 1, 1000);
                if (n < 0 && errno != EINTR) {
                        fprintf(stderr, "bench-decode-stall: poll: %s\n", strerror(errno));
                        return -1;
                }
                if (n > 0)
                        async_llm_dispatch(run->llm);
                if (check_progress(run) < 0)
                        return -1;
                double now = monotonic_seconds();
                async_llm_stats(run->llm, &st);
                enum phase next = next_phase(run, &st);
                if (next == b->phase)
                        continue;
                enum phase ended = b->phase;
                b->phase = next;
                end_phase(run, ended, now, &st);
                if (next != PHASE_DONE && begin_phase(run, next, now, &st) < 0)
                        return -1;
        }
        if (b->oom) {
                fprintf(stderr, "bench-decode-stall: out of memory\n");
                return -1;
        }
        return 0;
}

/* One decoder's loaded gaps against the unloaded gap at their moments (interpolated). */
struct stream_result {
        const char *id;
        struct summary ratio, engine_ratio;
        double max_gap, engine_max_gap; /* seconds */
};

/* The loaded gaps against the unloaded ones, and the 2x check. */
struct results {
        bool complete; /* the long prompt gave its first token */
        double ttft;
        double t_pre, t_post;           /* the middles of the unloaded phases */
        double pre, post;               /* their median host gaps */
        double engine_pre, engine_post; /* and engine gaps */
        double base_start, base_end; /* the interpolated baseline at the loaded phase's ends */
        /* each loaded gap over the unloaded gap at its time (the check), over the pre median
         * alone (the former check) and over the post median alone; host and engine side */
        struct summary interp, engine_interp, pre_only, engine_pre_only, post_only, engine_post_only;
        bool pass, pass_pre_only;
        struct stream_result *streams; /* one per decoder */
        unsigned n_streams, worst;     /* worst: the stream with the highest max ratio */
        /* every loaded gap against the limit the run's stall guard kept (the check's ratio
         * when the guard was off): reported, never part of the check */
        double gap_limit;
        bool every_gap_within_limit, engine_every_gap_within_limit;
};

/* Each decoder's own ratios, the worst of them, and every gap against the limit. 0 or -1. */
static int compute_stream_results(struct run *run, struct results *res) {
        struct bench *b = &run->b;
        double stall_limit = run->o.config.decode_stall_limit;
        if (!(res->streams = calloc(b->n_dec, sizeof(*res->streams))))
                return -1;
        res->n_streams = b->n_dec;
        for (unsigned i = 0; i < b->n_dec; i++) {
                const struct decoder *d = &b->dec[i];
                struct stream_result *sr = &res->streams[i];
                sr->id = d->id;
                sr->ratio = ratio_summary(&d->loaded_gaps, &d->loaded_times, res->t_pre, res->pre, res->t_post,
                                          res->post, &b->oom);
                sr->engine_ratio = ratio_summary(&d->loaded_engine_gaps, &d->loaded_engine_times, res->t_pre,
                                                 res->engine_pre, res->t_post, res->engine_post, &b->oom);
                sr->max_gap = samples_max(&d->loaded_gaps);
                sr->engine_max_gap = samples_max(&d->loaded_engine_gaps);
                double worst_max = res->streams[res->worst].ratio.max;
                if (isnan(worst_max) || sr->ratio.max > worst_max) /* one without loaded gaps (NAN) gives way */
                        res->worst = i;
        }
        res->gap_limit = stall_limit > 0 ? stall_limit : CHECK_RATIO;
        res->every_gap_within_limit = res->interp.max <= res->gap_limit;
        res->engine_every_gap_within_limit = res->engine_interp.max <= res->gap_limit;
        return b->oom ? -1 : 0;
}

/* 0 or -1 (out of memory). */
static int compute_results(struct run *run, struct results *res) {
        struct bench *b = &run->b;
        const struct phase_stats *ph = run->ph;
        res->complete = b->long_first > 0;
        res->ttft = res->complete ? b->long_first - b->long_submit : NAN;
        double t_pre = res->t_pre = (ph[PHASE_PRE].start + ph[PHASE_PRE].end) / 2;
        double t_post = res->t_post = (ph[PHASE_POST].start + ph[PHASE_POST].end) / 2;
        double pre = res->pre = run->host[PHASE_PRE].median, post = res->post = run->host[PHASE_POST].median;
        double engine_pre = res->engine_pre = run->engine[PHASE_PRE].median;
        double engine_post = res->engine_post = run->engine[PHASE_POST].median;
        struct samples *lg = &b->gaps[PHASE_LOADED], *le = &b->engine_gaps[PHASE_LOADED];
        res->interp = ratio_summary(lg, &b->times, t_pre, pre, t_post, post, &b->oom);
        res->engine_interp = ratio_summary(le, &b->engine_times, t_pre, engine_pre, t_post, engine_post, &b->oom);
        res->pre_only = ratio_summary(lg, &b->times, 0, pre, 0, pre, &b->oom);
        res->engine_pre_only = ratio_summary(le, &b->engine_times, 0, engine_pre, 0, engine_pre, &b->oom);
        res->post_only = ratio_summary(lg, &b->times, 0, post, 0, post, &b->oom);
        res->engine_post_only = ratio_summary(le, &b->engine_times, 0, engine_post, 0, engine_post, &b->oom);
        if (b->oom || compute_stream_results(run, res) < 0) {
                fprintf(stderr, "bench-decode-stall: out of memory\n");
                return -1;
        }
        res->base_start = baseline_at(ph[PHASE_LOADED].start, t_pre, pre, t_post, post);
        res->base_end = baseline_at(ph[PHASE_LOADED].end, t_pre, pre, t_post, post);
        res->pass = res->interp.median <= CHECK_RATIO && res->interp.p90 <= CHECK_RATIO;
        res->pass_pre_only = res->pre_only.median <= CHECK_RATIO && res->pre_only.p90 <= CHECK_RATIO;
        return 0;
}

static void results_free(struct results *res) {
        free(res->streams);
}

/* One line per decoder: a stream that froze once shows here even when the pooled p99 hides it. */
static void print_streams(const struct results *res) {
        printf("per stream, loaded gap / unloaded gap at the time (interpolated):\n");
        printf("  %-12s %6s %7s %7s %7s %7s %10s   %s\n", "stream", "gaps", "median", "p90", "p99", "max", "max gap",
               "engine-side max");
        for (unsigned i = 0; i < res->n_streams; i++) {
                const struct stream_result *sr = &res->streams[i];
                printf("  %-12s %6zu %6.2fx %6.2fx %6.2fx %6.2fx %7.1f ms   %.2fx, %.1f ms\n", sr->id, sr->ratio.n,
                       sr->ratio.median, sr->ratio.p90, sr->ratio.p99, sr->ratio.max, sr->max_gap * 1e3,
                       sr->engine_ratio.max, sr->engine_max_gap * 1e3);
        }
}

static void print_gap_limit(const struct run *run, const struct results *res) {
        const struct stream_result *worst = &res->streams[res->worst];
        bool guarded = run->o.config.decode_stall_limit > 0;
        printf("every loaded gap within %gx (%s): %s, engine-side %s; worst stream %s: max %.2fx, %.1f ms "
               "(reported, not checked)\n",
               res->gap_limit, guarded ? "the stall limit" : "the check's ratio; the stall guard was off",
               res->every_gap_within_limit ? "yes" : "NO", res->engine_every_gap_within_limit ? "yes" : "NO",
               worst->id, worst->ratio.max, worst->max_gap * 1e3);
}

static void print_results(const struct run *run, const struct results *res) {
        const struct samples *timeline = &run->b.timeline;
        if (timeline->n > 0)
                printf("decoder-0's gap in the loaded phase: first step %.1f ms, last step %.1f ms\n",
                       timeline->v[0] * 1e3, timeline->v[timeline->n - 1] * 1e3);
        printf("unloaded median gap: pre %.2f ms, post %.2f ms (%.2fx); interpolated: %.2f ms at the loaded phase's "
               "start, %.2f ms at its end\n",
               res->pre * 1e3, res->post * 1e3, res->post / res->pre, res->base_start * 1e3, res->base_end * 1e3);
        printf("loaded gap / unloaded median gap:\n");
        print_ratios("interpolated pre..post (check)", &res->interp, &res->engine_interp);
        print_ratios("pre only (former check)", &res->pre_only, &res->engine_pre_only);
        print_ratios("post only", &res->post_only, &res->engine_post_only);
        print_streams(res);
        printf("decodes within %gx of the unloaded gap at the time (median and p90): %s (pre-only baseline: %s)\n",
               CHECK_RATIO, res->pass ? "PASS" : "FAIL", res->pass_pre_only ? "PASS" : "FAIL");
        print_gap_limit(run, res);
        fflush(stdout);
}

static struct json_object *json_config(const struct run *run) {
        const struct options *o = &run->o;
        const struct engine_config *config = &o->config;
        struct json_object *cfg = json_object_new_object();
        json_object_object_add(cfg, "model", json_object_new_string(o->model_path));
        json_object_object_add(cfg, "threads", json_object_new_int64(o->threads));
        json_object_object_add(cfg, "kernels", json_object_new_string(run->backend.kernels));
        json_object_object_add(cfg, "max_num_batched_tokens", json_object_new_int64(config->max_num_batched_tokens));
        json_object_object_add(cfg, "long_prefill_token_threshold",
                               json_object_new_int64(config->long_prefill_token_threshold));
        json_object_object_add(cfg, "decode_stall_limit", json_object_new_double(config->decode_stall_limit));
        json_object_object_add(cfg, "prefill_chunk", json_object_new_int64(run->chunk));
        json_object_object_add(cfg, "decoders", json_object_new_int64(o->n_dec));
        json_object_object_add(cfg, "decoder_max_tokens", json_object_new_int64(o->decode_tokens));
        json_object_object_add(cfg, "prompt_len", json_object_new_int64(o->prompt_len));
        json_object_object_add(cfg, "warmup", json_object_new_int64(o->warmup));
        json_object_object_add(cfg, "unloaded_steps", json_object_new_int64(o->unloaded_steps));
        json_object_object_add(cfg, "max_loaded_steps", json_object_new_int64(o->max_loaded_steps));
        json_object_object_add(cfg, "max_model_len", json_object_new_int64(config->max_model_len));
        json_object_object_add(cfg, "kv_blocks", json_object_new_int64(run->n_blocks));
        return cfg;
}

static struct json_object *json_streams(const struct results *res) {
        struct json_object *streams = json_object_new_array();
        for (unsigned i = 0; i < res->n_streams; i++) {
                const struct stream_result *sr = &res->streams[i];
                struct json_object *o = json_object_new_object();
                json_object_object_add(o, "id", json_object_new_string(sr->id));
                json_object_object_add(o, "samples", json_object_new_int64((int64_t) sr->ratio.n));
                json_object_object_add(o, "ratio_interpolated", json_ratios(&sr->ratio, &sr->engine_ratio));
                json_object_object_add(o, "max_gap_ms", json_double(sr->max_gap * 1e3));
                json_object_object_add(o, "engine_max_gap_ms", json_double(sr->engine_max_gap * 1e3));
                json_object_array_add(streams, o);
        }
        return streams;
}

static struct json_object *json_gap_limit(const struct results *res) {
        const struct stream_result *worst = &res->streams[res->worst];
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "limit", json_double(res->gap_limit));
        json_object_object_add(o, "every_gap_within", json_object_new_boolean(res->every_gap_within_limit));
        json_object_object_add(o, "engine_every_gap_within",
                               json_object_new_boolean(res->engine_every_gap_within_limit));
        json_object_object_add(o, "worst_stream", json_object_new_string(worst->id));
        json_object_object_add(o, "worst_stream_max", json_double(worst->ratio.max));
        json_object_object_add(o, "worst_stream_max_gap_ms", json_double(worst->max_gap * 1e3));
        return o;
}

static struct json_object *json_results(const struct run *run, const struct results *res) {
        const struct bench *b = &run->b;
        const struct phase_stats *ph = run->ph;
        struct json_object *json = json_object_new_object();
        json_object_object_add(json, "config", json_config(run));
        json_object_object_add(json, "unloaded_pre", json_phase(&ph[PHASE_PRE], &run->host[PHASE_PRE],
                                                                &run->engine[PHASE_PRE]));
        json_object_object_add(json, "loaded", json_phase(&ph[PHASE_LOADED], &run->host[PHASE_LOADED],
                                                          &run->engine[PHASE_LOADED]));
        json_object_object_add(json, "unloaded_post", json_phase(&ph[PHASE_POST], &run->host[PHASE_POST],
                                                                 &run->engine[PHASE_POST]));
        struct json_object *lp = json_object_new_object();
        json_object_object_add(lp, "complete", json_object_new_boolean(res->complete));
        json_object_object_add(lp, "ttft_s", json_double(res->ttft));
        json_object_object_add(lp, "engine_ttft_s", json_double(res->complete ? b->long_engine_ttft : NAN));
        json_object_object_add(lp, "engine_prefill_s", json_double(res->complete ? b->long_engine_prefill : NAN));
        json_object_object_add(json, "long_prompt", lp);
        struct json_object *tl = json_object_new_array();
        for (size_t i = 0; i < b->timeline.n; i++)
                json_object_array_add(tl, json_object_new_double(round(b->timeline.v[i] * 1e4) / 10));
        json_object_object_add(json, "loaded_gaps_ms_decoder0", tl);
        struct json_object *bl = json_object_new_object();
        json_object_object_add(bl, "pre_median_ms", json_double(res->pre * 1e3));
        json_object_object_add(bl, "post_median_ms", json_double(res->post * 1e3));
        json_object_object_add(bl, "pre_midpoint_s", json_double(res->t_pre - ph[PHASE_LOADED].start));
        json_object_object_add(bl, "post_midpoint_s", json_double(res->t_post - ph[PHASE_LOADED].start));
        json_object_object_add(bl, "at_loaded_start_ms", json_double(res->base_start * 1e3));
        json_object_object_add(bl, "at_loaded_end_ms", json_double(res->base_end * 1e3));
        json_object_object_add(json, "unloaded_baseline", bl);
        json_object_object_add(json, "ratio_interpolated", json_ratios(&res->interp, &res->engine_interp));
        json_object_object_add(json, "ratio_pre_only", json_ratios(&res->pre_only, &res->engine_pre_only));
        json_object_object_add(json, "ratio_post_only", json_ratios(&res->post_only, &res->engine_post_only));
        json_object_object_add(json, "pass", json_object_new_boolean(res->pass));
        json_object_object_add(json, "pass_pre_only", json_object_new_boolean(res->pass_pre_only));
        json_object_object_add(json, "streams", json_streams(res));
        json_object_object_add(json, "gap_limit", json_gap_limit(res));
        return json;
}

/* 0 or -1. */
static int write_json(const struct run *run, const struct results *res) {
        struct json_object *json = json_results(run, res);
        int r = json_object_to_file_ext(run->o.json_path, json, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
        if (r < 0)
                fprintf(stderr, "bench-decode-stall: cannot write %s: %s\n", run->o.json_path, json_util_get_last_err());
        json_object_put(json);
        return r < 0 ? -1 : 0;
}

/* Aborts what still runs and releases every stream before the engine goes. */
static void run_done(struct run *run) {
        struct bench *b = &run->b;
        if (b->dec)
                for (unsigned i = 0; i < b->n_dec; i++)
                        async_stream_release(b->dec[i].stream);
        async_stream_release(b->long_stream);
        async_llm_free(run->llm);
        backend_free(&run->backend);
        tokenizer_free(run->tk);
        model_free(run->model);
        free(run->long_prompt);
        for (unsigned i = 0; b->dec && i < b->n_dec; i++) {
                free(b->dec[i].loaded_gaps.v);
                free(b->dec[i].loaded_times.v);
                free(b->dec[i].loaded_engine_gaps.v);
                free(b->dec[i].loaded_engine_times.v);
        }
        free(b->dec);
        free(b->timeline.v);
        free(b->times.v);
        free(b->engine_times.v);
        for (int p = 0; p < _PHASE_RECORDED; p++) {
                free(b->gaps[p].v);
                free(b->engine_gaps[p].v);
        }
}

int main(int argc, char **argv) {
        struct run run = {};
        struct results res = {};
        int r = parse_options(argc, argv, &run.o);
        if (r >= 0)
                return r;
        r = 1;
        if (start_engine(&run) == 0 && start_decoders(&run) == 0 && measure(&run) == 0 &&
            compute_results(&run, &res) == 0) {
                print_results(&run, &res);
                if (!run.o.json_path || write_json(&run, &res) == 0)
                        r = run.o.check && !res.pass ? 1 : 0;
        }
        results_free(&res);
        run_done(&run);
        return r;
}
