/* SPDX-License-Identifier: MIT */
#pragma once

/* The per-request knobs of token sampling, with vLLM's SamplingParams meanings, defaults and
 * allowed ranges. Arrays are borrowed: the caller owns them and keeps them alive as long as
 * the params are used (pointer + count; a NULL pointer is fine with a count of 0). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* A temperature below this samples greedily (argmax), as vLLM's _SAMPLING_EPS. */
#define SAMPLING_GREEDY_EPS 1e-5
/* A temperature in (0, this) is raised to this, as vLLM does to keep the softmax finite;
 * hence only a temperature of exactly 0 is greedy. */
#define SAMPLING_MIN_TEMPERATURE 1e-2
#define SAMPLING_MAX_TEMPERATURE 2.0
/* logit_bias values are clamped to [-this, this] when applied (OpenAI's range). */
#define SAMPLING_MAX_LOGIT_BIAS 100.0
/* vLLM's default for --max-logprobs. */
#define SAMPLING_DEFAULT_MAX_LOGPROBS 20
/* vLLM's SamplingParams default for max_tokens. */
#define SAMPLING_DEFAULT_MAX_TOKENS 16
/* max_tokens value meaning "no limit but the context length" (vLLM: None). */
#define SAMPLING_MAX_TOKENS_NONE (-1)
/* logprobs value meaning "return no logprobs" (vLLM: None). */
#define SAMPLING_LOGPROBS_NONE (-1)
/* The most completions one request may ask for (n). */
#define SAMPLING_MAX_N 128
/* The most stop strings one request may give, and the longest one in bytes. */
#define SAMPLING_MAX_STOP 64
#define SAMPLING_MAX_STOP_BYTES 256
/* The most bad_words one request may give, the longest one in bytes, and the most token
 * sequences they may tokenize to (each word gives one or two: vLLM's VLLM_MAX_NUM_BAD_WORDS
 * default is the latter). */
#define SAMPLING_MAX_BAD_WORDS 64
#define SAMPLING_MAX_BAD_WORD_BYTES 256
#define SAMPLING_MAX_BAD_WORD_SEQUENCES 128
/* truncate_prompt_tokens value meaning "no truncation" (vLLM: None), and the value asking
 * for the longest prompt the context allows (vLLM: -1). */
#define SAMPLING_TRUNCATE_NONE 0
#define SAMPLING_TRUNCATE_TO_CONTEXT (-1)

/* What each output of a streamed request carries (vLLM's RequestOutputKind). */
enum output_kind {
        OUTPUT_CUMULATIVE,  /* everything generated so far */
        OUTPUT_DELTA,       /* only what is new since the previous output */
        OUTPUT_FINAL_ONLY,  /* one output, when the request finishes */
};

const char *output_kind_name(enum output_kind k);
int output_kind_from_string(const char *s, enum output_kind *ret);

struct logit_bias {
        int32_t token;
        float bias; /* added to the token's logit; clamped to [-100, 100] */
};

struct sampling_params {
        double temperature;        /* [0, 2]; 0 = greedy. Default 1 */
        double top_p;              /* (0, 1]; 1 = disabled. Default 1 */
        int32_t top_k;             /* >= 1, or 0 / -1 = disabled. Default 0 */
        double min_p;              /* [0, 1], relative to the most likely token; 0 = disabled */
        double presence_penalty;   /* [-2, 2], output tokens only. Default 0 */
        double frequency_penalty;  /* [-2, 2], per occurrence in the output. Default 0 */
        double repetition_penalty; /* > 0, prompt and output tokens; 1 = disabled. Default 1 */

        bool has_seed;
        uint64_t seed;

        int32_t logprobs; /* SAMPLING_LOGPROBS_NONE, or N >= 0: the top N plus the chosen token */

        const struct logit_bias *logit_bias; /* (n_logit_bias); repeated ids add up */
        size_t n_logit_bias;

        bool has_allowed_token_ids; /* when set, only these ids can be sampled; must be non-empty */
        const int32_t *allowed_token_ids; /* (n_allowed_token_ids) */
        size_t n_allowed_token_ids;

        const int32_t *stop_token_ids; /* (n_stop_token_ids); also masked until min_tokens */
        size_t n_stop_token_ids;
        bool ignore_eos;

        /* bad_words as token sequences (vLLM's _bad_words_token_ids): the last token of a
         * sequence is masked when the output so far ends with the rest of it. Stored back to
         * back: sequence i is bad_words_token_ids[ends[i - 1] (0 for i = 0) .. ends[i]). */
        const int32_t *bad_words_token_ids;
        const uint32_t *bad_words_ends; /* (n_bad_word_sequences), increasing, the last one
                                         * the length of bad_words_token_ids */
        size_t n_bad_word_sequences;

        int32_t min_tokens; /* EOS and stop_token_ids are masked until this many output tokens */
        int32_t max_tokens; /* >= 1, or SAMPLING_MAX_TOKENS_NONE. Default 16 */

        /* Read by the frontend (engine/async-llm.c); the engine core ignores them. */
        uint32_t n;                      /* completions per prompt, [1, SAMPLING_MAX_N]. Default 1 */
        int32_t prompt_logprobs;         /* SAMPLING_LOGPROBS_NONE, or the top N per prompt token */
        const char *const *stop;         /* (n_stop) stop strings, non-empty, valid UTF-8 */
        size_t n_stop;
        bool include_stop_str_in_output;
        bool skip_special_tokens;        /* leave special tokens out of the text. Default true */
        enum output_kind output_kind;    /* Default OUTPUT_CUMULATIVE, as vLLM */
        const char *const *bad_words;    /* (n_bad_words) tokenized into bad_words_token_ids */
        size_t n_bad_words;
        /* Keep only the prompt's last N tokens (N >= 1), SAMPLING_TRUNCATE_TO_CONTEXT for
         * max_model_len - 1 of them, or SAMPLING_TRUNCATE_NONE. */
        int32_t truncate_prompt_tokens;
        /* vLLM's best_of, checked only: 0 (vLLM: None) or n; more candidates than n are not
         * generated here, as in vLLM's V1 engine. */
        uint32_t best_of;
};

void sampling_params_init_default(struct sampling_params *p);

/* Checks every field against vLLM's ranges and every token id against [0, n_vocab).
 * max_logprobs bounds logprobs (vLLM's --max-logprobs; negative = n_vocab). On failure
 * returns -EINVAL with a message that names the parameter and the allowed range. */
int sampling_params_validate(const struct sampling_params *p, int32_t n_vocab, int32_t max_logprobs,
                             struct error *err);

/* The temperature sampling really uses: values in (0, SAMPLING_MIN_TEMPERATURE) are raised
 * to it. */
double sampling_params_temperature(const struct sampling_params *p);

/* True when the token is the argmax: top_k, top_p and min_p are then ignored. */
bool sampling_params_is_greedy(const struct sampling_params *p);
