/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "synthetic-args.h"

void synthetic_llama_usage(FILE *out) {
        fputs("  --arch NAME                  llama (default), gemma3, qwen2, qwen3, phi3, mistral3\n"
              "  --vocab FILE                 copy the tokenizer.* keys of this GGUF (n_vocab: its token count)\n"
              "  --type TYPE                  linear weights: F32, F16, BF16, Q8_0, Q4_K... (default F32)\n"
              "  --embd-type TYPE             token_embd (and output when untied); default: --type\n"
              "  --seed N                     (default 1)\n"
              "  --layers N --embd N --ff N --heads N --heads-kv N --vocab-size N --ctx N\n"
              "                               (defaults 2, 256, 512, 4, 2, 512, 2048)\n"
              "  --untied                     an output.weight of its own\n"
              "  --embd-std F --output-std F  their weights' standard deviations (0.5, 0.5 / sqrt(n_embd))\n"
              "  --rope-theta F               rope.freq_base (default 10000)\n"
              "  --rope-freqs                 Llama 3.1's rope_freqs.weight\n"
              "  --rope-scaling TYPE          rope.scaling.type: linear, yarn\n"
              "  --rope-scaling-factor F      rope.scaling.factor\n"
              "  --rope-original-context N    rope.scaling.original_context_length\n"
              "  --rope-attn-factor F         rope.scaling.attn_factor\n"
              "  --yarn-beta-fast F --yarn-beta-slow F --yarn-log-multiplier F\n"
              "  --attn-temperature-scale F   attention.temperature_scale\n",
              out);
}

static int parse_type(const char *name, enum tensor_type *ret) {
        for (uint32_t t = 0; t < 64; t++) {
                const char *n = tensor_type_name(t);
                if (n && strcasecmp(n, name) == 0) {
                        *ret = (enum tensor_type) t;
                        return 0;
                }
        }
        return -EINVAL;
}

static int parse_u32(const char *s, uint32_t *ret) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || end == s || *end || v > UINT32_MAX)
                return -EINVAL;
        *ret = (uint32_t) v;
        return 0;
}

static int parse_float(const char *s, float *ret) {
        char *end;
        errno = 0;
        float v = strtof(s, &end);
        if (errno || end == s || *end)
                return -EINVAL;
        *ret = v;
        return 0;
}

enum {
        OPT_ARCH = 256, OPT_VOCAB, OPT_TYPE, OPT_EMBD_TYPE, OPT_SEED, OPT_LAYERS, OPT_EMBD, OPT_FF, OPT_HEADS,
        OPT_HEADS_KV, OPT_VOCAB_SIZE, OPT_CTX, OPT_UNTIED, OPT_EMBD_STD, OPT_OUTPUT_STD, OPT_ROPE_THETA,
        OPT_ROPE_FREQS, OPT_ROPE_SCALING,
        OPT_ROPE_SCALING_FACTOR, OPT_ROPE_ORIGINAL_CONTEXT, OPT_ROPE_ATTN_FACTOR, OPT_YARN_BETA_FAST,
        OPT_YARN_BETA_SLOW, OPT_YARN_LOG_MULTIPLIER, OPT_ATTN_TEMPERATURE_SCALE,
};

int synthetic_llama_parse_args(int argc, char **argv, struct synthetic_llama_config *cfg, int *ret_next) {
        static const struct option options[] = {
                { "arch", required_argument, NULL, OPT_ARCH },
                { "vocab", required_argument, NULL, OPT_VOCAB },
                { "type", required_argument, NULL, OPT_TYPE },
                { "embd-type", required_argument, NULL, OPT_EMBD_TYPE },
                { "seed", required_argument, NULL, OPT_SEED },
                { "layers", required_argument, NULL, OPT_LAYERS },
                { "embd", required_argument, NULL, OPT_EMBD },
                { "ff", required_argument, NULL, OPT_FF },
                { "heads", required_argument, NULL, OPT_HEADS },
                { "heads-kv", required_argument, NULL, OPT_HEADS_KV },
                { "vocab-size", required_argument, NULL, OPT_VOCAB_SIZE },
                { "ctx", required_argument, NULL, OPT_CTX },
                { "untied", no_argument, NULL, OPT_UNTIED },
                { "embd-std", required_argument, NULL, OPT_EMBD_STD },
                { "output-std", required_argument, NULL, OPT_OUTPUT_STD },
                { "rope-theta", required_argument, NULL, OPT_ROPE_THETA },
                { "rope-freqs", no_argument, NULL, OPT_ROPE_FREQS },
                { "rope-scaling", required_argument, NULL, OPT_ROPE_SCALING },
                { "rope-scaling-factor", required_argument, NULL, OPT_ROPE_SCALING_FACTOR },
                { "rope-original-context", required_argument, NULL, OPT_ROPE_ORIGINAL_CONTEXT },
                { "rope-attn-factor", required_argument, NULL, OPT_ROPE_ATTN_FACTOR },
                { "yarn-beta-fast", required_argument, NULL, OPT_YARN_BETA_FAST },
                { "yarn-beta-slow", required_argument, NULL, OPT_YARN_BETA_SLOW },
                { "yarn-log-multiplier", required_argument, NULL, OPT_YARN_LOG_MULTIPLIER },
                { "attn-temperature-scale", required_argument, NULL, OPT_ATTN_TEMPERATURE_SCALE },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        bool embd_type_set = false;
        int c, r = 0;

        *cfg = (struct synthetic_llama_config) {
                .n_layer = 2, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2, .n_vocab = 512,
                .weight_type = TENSOR_F32, .tied_output = true, .seed = 1,
        };
        optind = 0; /* glibc: start over, whatever an earlier parse left */
        while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
                switch (c) {
                case OPT_ARCH: cfg->architecture = optarg; break;
                case OPT_VOCAB: cfg->vocab_path = optarg; break;
                case OPT_TYPE: r = parse_type(optarg, &cfg->weight_type); break;
                case OPT_EMBD_TYPE:
                        r = parse_type(optarg, &cfg->embd_type);
                        embd_type_set = true;
                        break;
                case OPT_SEED: {
                        char *end;
                        errno = 0;
                        cfg->seed = strtoull(optarg, &end, 0);
                        if (errno || end == optarg || *end)
                                r = -EINVAL;
                        break;
                }
                case OPT_LAYERS: r = parse_u32(optarg, &cfg->n_layer); break;
                case OPT_EMBD: r = parse_u32(optarg, &cfg->n_embd); break;
                case OPT_FF: r = parse_u32(optarg, &cfg->n_ff); break;
                case OPT_HEADS: r = parse_u32(optarg, &cfg->n_head); break;
                case OPT_HEADS_KV: r = parse_u32(optarg, &cfg->n_head_kv); break;
                case OPT_VOCAB_SIZE: r = parse_u32(optarg, &cfg->n_vocab); break;
                case OPT_CTX: r = parse_u32(optarg, &cfg->n_ctx); break;
                case OPT_UNTIED: cfg->tied_output = false; break;
                case OPT_EMBD_STD: r = parse_float(optarg, &cfg->embd_std); break;
                case OPT_OUTPUT_STD: r = parse_float(optarg, &cfg->output_std); break;
                case OPT_ROPE_THETA: r = parse_float(optarg, &cfg->rope_theta); break;
                case OPT_ROPE_FREQS: cfg->rope_freqs = true; break;
                case OPT_ROPE_SCALING: cfg->rope_scaling_type = optarg; break;
                case OPT_ROPE_SCALING_FACTOR: r = parse_float(optarg, &cfg->rope_scaling_factor); break;
                case OPT_ROPE_ORIGINAL_CONTEXT: r = parse_u32(optarg, &cfg->rope_scaling_original_context); break;
                case OPT_ROPE_ATTN_FACTOR: r = parse_float(optarg, &cfg->rope_scaling_attn_factor); break;
                case OPT_YARN_BETA_FAST: r = parse_float(optarg, &cfg->yarn_beta_fast); break;
                case OPT_YARN_BETA_SLOW: r = parse_float(optarg, &cfg->yarn_beta_slow); break;
                case OPT_YARN_LOG_MULTIPLIER: r = parse_float(optarg, &cfg->yarn_log_multiplier); break;
                case OPT_ATTN_TEMPERATURE_SCALE: r = parse_float(optarg, &cfg->attention_temperature_scale); break;
                case 'h':
                        return 1;
                default:
                        return -EINVAL;
                }
                if (r < 0) {
                        fprintf(stderr, "synthetic model: invalid value \"%s\" for %s\n", optarg, argv[optind - 1]);
                        return r;
                }
        }
        if (!embd_type_set)
                cfg->embd_type = cfg->weight_type;
        *ret_next = optind;
        return 0;
}
