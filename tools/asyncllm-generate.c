/* SPDX-License-Identifier: MIT */
/* asyncllm-generate: one completion for one prompt, straight through the engine's pieces
 * (model, tokenizer, the CPU backend, sampler), streamed to stdout. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend-open.h"
#include "chat-template.h"
#include "detokenizer.h"
#include "model.h"
#include "clock.h"
#include "sampler.h"
#include "sequence.h"
#include "tokenizer.h"

#define DEFAULT_MAX_TOKENS 128
#define DEFAULT_MAX_BATCH_TOKENS 512
#define KV_BLOCK_SIZE 16

struct options {
        const char *model_path;
        const char *prompt;
        const char *system;
        const char *prompt_token_ids;
        bool chat;
        bool parse_special;
        bool verbose;
        unsigned threads;
        uint32_t max_model_len;
        struct sampling_params params;
};

static void usage(FILE *f) {
        fprintf(f,
                "Usage: asyncllm-generate [OPTIONS] PROMPT|-\n"
                "Generate a completion for PROMPT (or standard input with -) and stream it to stdout.\n"
                "\n"
                "  -m, --model PATH            GGUF model (default: $ASYNCLLM_MODEL, else %s)\n"
                "      --chat                  render PROMPT as a user message with the model's chat template\n"
                "      --system TEXT           system message for --chat (default: the template's)\n"
                "      --prompt-token-ids LIST comma-separated token ids instead of a text prompt\n"
                "      --parse-special         recognise control tokens such as <|im_start|> in a plain prompt\n"
                "      --max-tokens N          tokens to generate at most (default %d)\n"
                "      --temperature T         0 is greedy (default 0 here; vLLM's default is 1)\n"
                "      --top-p P               nucleus sampling, (0, 1] (default 1)\n"
                "      --top-k K               keep the K most likely tokens; 0 or -1 disables (default 0)\n"
                "      --min-p P               drop tokens below P times the top probability (default 0)\n"
                "      --presence-penalty X    [-2, 2] (default 0)\n"
                "      --frequency-penalty X   [-2, 2] (default 0)\n"
                "      --repetition-penalty X  > 0, 1 disables (default 1)\n"
                "      --seed N                seed of the sampler: the same seed gives the same text\n"
                "      --ignore-eos            keep generating after the end-of-sequence token\n"
                "      --logprobs N            print each token's logprob and the top N to stderr\n"
                "  -t, --threads N             CPU threads (default: online CPUs)\n"
                "      --max-model-len N       longest prompt + output (default: the model's context length)\n"
                "  -v, --verbose               print token counts and speeds to stderr\n"
                "  -h, --help                  show this help\n",
                SOURCE_MODEL_PATH, DEFAULT_MAX_TOKENS);
}

static int parse_number(const char *name, const char *text, double lo, double hi, double *ret) {
        char *end;
        errno = 0;
        double v = strtod(text, &end);
        if (errno || end == text || *end || !(v >= lo && v <= hi)) {
                fprintf(stderr, "asyncllm-generate: --%s must be a number in [%g, %g], got '%s'\n", name, lo, hi, text);
                return -EINVAL;
        }
        *ret = v;
        return 0;
}

static int parse_options(int argc, char **argv, struct options *o) {
        enum {
                OPT_CHAT = 1000, OPT_SYSTEM, OPT_IDS, OPT_SPECIAL, OPT_MAX_TOKENS, OPT_TEMPERATURE, OPT_TOP_P,
                OPT_TOP_K, OPT_MIN_P, OPT_PRESENCE, OPT_FREQUENCY, OPT_REPETITION, OPT_SEED, OPT_IGNORE_EOS,
                OPT_LOGPROBS, OPT_MAX_MODEL_LEN,
        };
        static const struct option long_options[] = {
                { "model", required_argument, NULL, 'm' },
                { "chat", no_argument, NULL, OPT_CHAT },
                { "system", required_argument, NULL, OPT_SYSTEM },
                { "prompt-token-ids", required_argument, NULL, OPT_IDS },
                { "parse-special", no_argument, NULL, OPT_SPECIAL },
                { "max-tokens", required_argument, NULL, OPT_MAX_TOKENS },
                { "temperature", required_argument, NULL, OPT_TEMPERATURE },
                { "top-p", required_argument, NULL, OPT_TOP_P },
                { "top-k", required_argument, NULL, OPT_TOP_K },
                { "min-p", required_argument, NULL, OPT_MIN_P },
                { "presence-penalty", required_argument, NULL, OPT_PRESENCE },
                { "frequency-penalty", required_argument, NULL, OPT_FREQUENCY },
                { "repetition-penalty", required_argument, NULL, OPT_REPETITION },
                { "seed", required_argument, NULL, OPT_SEED },
                { "ignore-eos", no_argument, NULL, OPT_IGNORE_EOS },
                { "logprobs", required_argument, NULL, OPT_LOGPROBS },
                { "threads", required_argument, NULL, 't' },
                { "max-model-len", required_argument, NULL, OPT_MAX_MODEL_LEN },
                { "verbose", no_argument, NULL, 'v' },
                { "help", no_argument, NULL, 'h' },
                {}
        };
        struct sampling_params *p = &o->params;
        double v;
        int c, r = 0;

        sampling_params_init_default(p);
        p->temperature = 0.0;
        p->max_tokens = DEFAULT_MAX_TOKENS;
        o->model_path = getenv("ASYNCLLM_MODEL");
        if (!o->model_path || !*o->model_path)
                o->model_path = SOURCE_MODEL_PATH;
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        o->threads = cpus > 0 ? (unsigned) cpus : 1;

        while ((c = getopt_long(argc, argv, "m:t:vh", long_options, NULL)) != -1) {
                switch (c) {
                case 'm': o->model_path = optarg; break;
                case OPT_CHAT: o->chat = true; break;
                case OPT_SYSTEM: o->system = optarg; break;
                case OPT_IDS: o->prompt_token_ids = optarg; break;
                case OPT_SPECIAL: o->parse_special = true; break;
                case OPT_MAX_TOKENS:
                        if ((r = parse_number("max-tokens", optarg, 1, INT32_MAX, &v)) == 0)
                                p->max_tokens = (int32_t) v;
                        break;
                case OPT_TEMPERATURE: r = parse_number("temperature", optarg, 0, 1e9, &p->temperature); break;
                case OPT_TOP_P: r = parse_number("top-p", optarg, -1e9, 1e9, &p->top_p); break;
                case OPT_TOP_K:
                        if ((r = parse_number("top-k", optarg, -1, INT32_MAX, &v)) == 0)
                                p->top_k = (int32_t) v;
                        break;
                case OPT_MIN_P: r = parse_number("min-p", optarg, -1e9, 1e9, &p->min_p); break;
                case OPT_PRESENCE: r = parse_number("presence-penalty", optarg, -1e9, 1e9, &p->presence_penalty); break;
                case OPT_FREQUENCY: r = parse_number("frequency-penalty", optarg, -1e9, 1e9, &p->frequency_penalty); break;
                case OPT_REPETITION: r = parse_number("repetition-penalty", optarg, -1e9, 1e9, &p->repetition_penalty); break;
                case OPT_SEED:
                        if ((r = parse_number("seed", optarg, 0, 18446744073709551615.0, &v)) == 0) {
                                p->has_seed = true;
                                p->seed = strtoull(optarg, NULL, 10);
                        }
                        break;
                case OPT_IGNORE_EOS: p->ignore_eos = true; break;
                case OPT_LOGPROBS:
                        if ((r = parse_number("logprobs", optarg, 0, 1000, &v)) == 0)
                                p->logprobs = (int32_t) v;
                        break;
                case 't':
                        if ((r = parse_number("threads", optarg, 1, 1024, &v)) == 0)
                                o->threads = (unsigned) v;
                        break;
                case OPT_MAX_MODEL_LEN:
                        if ((r = parse_number("max-model-len", optarg, 1, 1 << 24, &v)) == 0)
                                o->max_model_len = (uint32_t) v;
                        break;
                case 'v': o->verbose = true; break;
                case 'h': usage(stdout); exit(EXIT_SUCCESS);
                default: return -EINVAL;
                }
                if (r < 0)
                        return r;
        }
        if (o->prompt_token_ids) {
                if (optind != argc) {
                        fprintf(stderr, "asyncllm-generate: give either PROMPT or --prompt-token-ids, not both\n");
                        return -EINVAL;
                }
                return 0;
        }
        if (optind + 1 != argc) {
                fprintf(stderr, "asyncllm-generate: expected one PROMPT (or - for standard input); see --help\n");
                return -EINVAL;
        }
        o->prompt = argv[optind];
        return 0;
}

static char *read_stdin(void) {
        size_t cap = 4096, len = 0;
        char *buf = malloc(cap);
        while (buf) {
                size_t n = fread(buf + len, 1, cap - len - 1, stdin);
                len += n;
                if (n == 0)
                        break;
                if (cap - len < 2) {
                        char *bigger = realloc(buf, cap *= 2);
                        if (!bigger)
                                free(buf);
                        buf = bigger;
                }
        }
        if (buf)
                buf[len] = 0;
        return buf;
}

static int parse_id_list(const char *list, int32_t **ret, size_t *ret_n) {
        size_t n = 1;
        for (const char *p = list; *p; p++)
                n += *p == ',';
        int32_t *ids = calloc(n, sizeof(int32_t));
        if (!ids)
                return -ENOMEM;
        const char *p = list;
        for (size_t i = 0; i < n; i++) {
                char *end;
                errno = 0;
                long v = strtol(p, &end, 10);
                if (errno || end == p || v < INT32_MIN || v > INT32_MAX || (*end && *end != ',')) {
                        fprintf(stderr, "asyncllm-generate: --prompt-token-ids must be comma-separated integers, got '%s'\n", list);
                        free(ids);
                        return -EINVAL;
                }
                ids[i] = (int32_t) v;
                p = end + 1;
        }
        *ret = ids;
        *ret_n = n;
        return 0;
}

/* The prompt as token ids: given directly, or text tokenized (after the chat template). */
static int prompt_ids(const struct options *o, const struct tokenizer *tk, int32_t **ret, size_t *ret_n,
                      struct error *err) {
        if (o->prompt_token_ids)
                return parse_id_list(o->prompt_token_ids, ret, ret_n) < 0 ? error_set(err, EINVAL, "bad token id list") : 0;

        char *owned = NULL;
        const char *text = o->prompt;
        if (strcmp(text, "-") == 0 && !(text = owned = read_stdin()))
                return error_set(err, ENOMEM, "cannot read the prompt from standard input");
        int r;
        if (o->chat) {
                struct chat_message msgs[2];
                size_t n = 0;
                if (o->system)
                        msgs[n++] = (struct chat_message) { "system", o->system };
                msgs[n++] = (struct chat_message) { "user", text };
                char *rendered;
                if ((r = chat_render(tk, msgs, n, true, &rendered, err)) == 0) {
                        r = tokenizer_encode_prompt(tk, rendered, strlen(rendered), true, ret, ret_n, err);
                        free(rendered);
                }
        } else
                r = tokenizer_encode_prompt(tk, text, strlen(text), o->parse_special, ret, ret_n, err);
        free(owned);
        return r;
}

static void print_logprobs(const struct tokenizer *tk, const struct sample_result *s) {
        size_t len;
        const char *text = tokenizer_token_text(tk, s->token, &len);
        fprintf(stderr, "[%d %.*s logprob %.4f rank %d |", s->token, (int) len, text, s->logprob, s->rank);
        for (size_t i = 0; i < s->n_top; i++) {
                text = tokenizer_token_text(tk, s->top[i].token, &len);
                fprintf(stderr, " %d %.*s %.4f", s->top[i].token, (int) len, text, s->top[i].logprob);
        }
        fprintf(stderr, "]\n");
}

struct generation {
        struct model *model;
        struct tokenizer *tokenizer;
        struct backend backend;
        struct sequence *seq;
        struct detokenizer *detok;
        struct sampler_seq sampler;
        bool sampler_ready;
        int32_t *prompt;
        float *logits;
};

static void generation_free(struct generation *g) {
        if (g->sampler_ready)
                sampler_seq_free(&g->sampler);
        free(g->logits);
        free(g->prompt);
        detokenizer_free(g->detok);
        sequence_free(g->seq);
        backend_free(&g->backend);
        tokenizer_free(g->tokenizer);
        model_free(g->model);
}

static int run(const struct options *o, struct error *err) {
        struct generation g = {};
        size_t n_prompt = 0;
        int r;

        if ((r = model_load(o->model_path, &g.model, err)) < 0) {
                if (r == -ENOENT)
                        error_prefix(err, r, "no model (run scripts/fetch-model, or pass --model PATH)");
                goto out;
        }
        const struct model_hparams *hp = &g.model->hp;
        if ((r = tokenizer_load(g.model->file, &g.tokenizer, err)) < 0 ||
            (r = prompt_ids(o, g.tokenizer, &g.prompt, &n_prompt, err)) < 0 ||
            (r = sampling_params_validate(&o->params, (int32_t) hp->n_vocab, SAMPLING_DEFAULT_MAX_LOGPROBS, err)) < 0)
                goto out;
        if (n_prompt == 0) {
                r = error_set(err, EINVAL, "the prompt is empty");
                goto out;
        }
        for (size_t i = 0; i < n_prompt; i++)
                if (g.prompt[i] < 0 || (uint32_t) g.prompt[i] >= hp->n_vocab) {
                        r = error_set(err, EINVAL, "prompt token id %d is outside the vocabulary [0, %u)", g.prompt[i], hp->n_vocab);
                        goto out;
                }

        uint32_t max_model_len = o->max_model_len ? o->max_model_len : hp->n_ctx_train;
        if (n_prompt >= max_model_len) {
                r = error_set(err, EINVAL, "the prompt has %zu tokens; it must be shorter than max_model_len %u", n_prompt,
                              max_model_len);
                goto out;
        }
        struct backend_options options = {
                .n_threads = o->threads,
                .max_batch_tokens = DEFAULT_MAX_BATCH_TOKENS,
                .max_model_len = max_model_len,
                .block_size = KV_BLOCK_SIZE,
                .n_kv_blocks = (max_model_len + KV_BLOCK_SIZE - 1) / KV_BLOCK_SIZE,
        };
        g.logits = malloc(sizeof(float) * hp->n_vocab);
        if (!g.logits) {
                r = error_set(err, ENOMEM, "out of memory");
                goto out;
        }
        if ((r = backend_open("cpu", &options, g.model, &g.backend, err)) < 0 ||
            (r = sequence_new(&g.backend, &options, hp->n_vocab, &g.seq, err)) < 0 ||
            (r = detokenizer_new(g.tokenizer, true, &g.detok, err)) < 0 ||
            (r = sampler_seq_init(&g.sampler, &o->params, g.prompt, n_prompt, (int32_t) hp->n_vocab,
                                  (uint64_t) time(NULL))) < 0)
                goto out;
        g.sampler_ready = true;

        double t0 = monotonic_seconds();
        if ((r = sequence_feed(g.seq, g.prompt, n_prompt, false, g.logits, err)) < 0)
                goto out;
        double t1 = monotonic_seconds();
        size_t n_eog;
        const int32_t *eog = tokenizer_eog_ids(g.tokenizer, &n_eog);
        if (o->params.ignore_eos)
                n_eog = 0;
        int32_t n_out = 0;
        const char *text;
        size_t len;
        for (;;) {
                struct sample_result s;
                if ((r = sampler_sample(&o->params, &g.sampler, g.logits, (int32_t) hp->n_vocab, eog, n_eog, &s)) < 0)
                        goto out;
                int32_t token = s.token;
                if (o->params.logprobs >= 0)
                        print_logprobs(g.tokenizer, &s);
                sample_result_clear(&s);
                n_out++;
                if ((r = sampler_seq_accept(&g.sampler, token)) < 0)
                        goto out;
                if (!o->params.ignore_eos && tokenizer_is_eog(g.tokenizer, token))
                        break;
                if ((r = detokenizer_push(g.detok, token, &text, &len, err)) < 0)
                        goto out;
                fwrite(text, 1, len, stdout);
                fflush(stdout);
                if (n_out >= o->params.max_tokens || sequence_length(g.seq) >= max_model_len)
                        break;
                if ((r = sequence_feed(g.seq, &token, 1, false, g.logits, err)) < 0)
                        goto out;
        }
        if ((r = detokenizer_finish(g.detok, &text, &len, err)) < 0)
                goto out;
        fwrite(text, 1, len, stdout);
        fputc('\n', stdout);
        double t2 = monotonic_seconds();
        if (o->verbose)
                fprintf(stderr, "asyncllm-generate: %zu prompt tokens at %.1f tokens/s, %d generated at %.1f tokens/s (%s kernels, weights %s, %u threads)\n",
                        n_prompt, n_prompt / (t1 - t0), n_out, n_out > 1 ? (n_out - 1) / (t2 - t1) : 0.0,
                        g.backend.kernels, g.backend.weights, o->threads);
out:
        generation_free(&g);
        return r;
}

int main(int argc, char **argv) {
        struct options o = {};
        struct error err = {};
        if (parse_options(argc, argv, &o) < 0)
                return 2;
        if (run(&o, &err) < 0) {
                fprintf(stderr, "asyncllm-generate: %s\n", err.message);
                return 1;
        }
        return 0;
}
