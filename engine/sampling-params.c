/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "name-table.h"
#include "sampling-params.h"
#include "unicode.h"

void sampling_params_init_default(struct sampling_params *p) {
        *p = (struct sampling_params) {
                .temperature = 1.0,
                .top_p = 1.0,
                .top_k = 0,
                .min_p = 0.0,
                .presence_penalty = 0.0,
                .frequency_penalty = 0.0,
                .repetition_penalty = 1.0,
                .logprobs = SAMPLING_LOGPROBS_NONE,
                .min_tokens = 0,
                .max_tokens = SAMPLING_DEFAULT_MAX_TOKENS,
                .n = 1,
                .prompt_logprobs = SAMPLING_LOGPROBS_NONE,
                .skip_special_tokens = true,
                .output_kind = OUTPUT_CUMULATIVE,
        };
}

static const char *const output_kind_names[] = {
        [OUTPUT_CUMULATIVE] = "cumulative",
        [OUTPUT_DELTA] = "delta",
        [OUTPUT_FINAL_ONLY] = "final",
};

const char *output_kind_name(enum output_kind k) {
        return name_table_name(output_kind_names, NAME_TABLE_SIZE(output_kind_names), k);
}

int output_kind_from_string(const char *s, enum output_kind *ret) {
        int k = name_table_find(output_kind_names, NAME_TABLE_SIZE(output_kind_names), s);
        if (k < 0)
                return k;
        *ret = (enum output_kind) k;
        return 0;
}

static bool valid_utf8(const char *s) {
        size_t len = strlen(s), n;
        for (size_t i = 0; i < len; i += n)
                if (utf8_next((const uint8_t *) s + i, len - i, NULL, &n) != UTF8_VALID)
                        return false;
        return true;
}

static int check_ids(const char *name, const int32_t *ids, size_t n, int32_t n_vocab, struct error *err) {
        if (n > 0 && !ids)
                return error_set(err, EINVAL, "%s: %zu entries given but no array", name, n);
        for (size_t i = 0; i < n; i++)
                if (ids[i] < 0 || ids[i] >= n_vocab)
                        return error_set(err, EINVAL, "%s[%zu]: token id %" PRId32 " is outside the vocabulary [0, %"
                                         PRId32 ")", name, i, ids[i], n_vocab);
        return 0;
}

static int check_bad_words(const struct sampling_params *p, int32_t n_vocab, struct error *err) {
        if (p->n_bad_words > SAMPLING_MAX_BAD_WORDS)
                return error_set(err, EINVAL, "bad_words may hold at most %d words, got %zu", SAMPLING_MAX_BAD_WORDS,
                                 p->n_bad_words);
        if (p->n_bad_words > 0 && !p->bad_words)
                return error_set(err, EINVAL, "bad_words: %zu words given but no array", p->n_bad_words);
        for (size_t i = 0; i < p->n_bad_words; i++) {
                size_t len = p->bad_words[i] ? strlen(p->bad_words[i]) : 0;
                if (len == 0)
                        return error_set(err, EINVAL, "bad_words cannot contain an empty string (bad_words[%zu])", i);
                if (len > SAMPLING_MAX_BAD_WORD_BYTES)
                        return error_set(err, EINVAL, "bad_words[%zu] is %zu bytes long; at most %d allowed", i, len,
                                         SAMPLING_MAX_BAD_WORD_BYTES);
                if (!valid_utf8(p->bad_words[i]))
                        return error_set(err, EINVAL, "bad_words[%zu] is not valid UTF-8", i);
        }
        if (p->n_bad_word_sequences > SAMPLING_MAX_BAD_WORD_SEQUENCES)
                return error_set(err, EINVAL, "bad_words gives too many token sequences after tokenization: %zu, at most %d",
                                 p->n_bad_word_sequences, SAMPLING_MAX_BAD_WORD_SEQUENCES);
        if (p->n_bad_word_sequences > 0 && (!p->bad_words_ends || !p->bad_words_token_ids))
                return error_set(err, EINVAL, "bad_words: %zu token sequences given but no arrays",
                                 p->n_bad_word_sequences);
        for (size_t i = 0, start = 0; i < p->n_bad_word_sequences; start = p->bad_words_ends[i++]) {
                if (p->bad_words_ends[i] <= start)
                        return error_set(err, EINVAL, "bad_words: token sequence %zu is empty", i);
                for (size_t j = start; j < p->bad_words_ends[i]; j++)
                        if (p->bad_words_token_ids[j] < 0 || p->bad_words_token_ids[j] >= n_vocab)
                                return error_set(err, EINVAL, "bad_words: token id %" PRId32 " of sequence %zu is "
                                                 "outside the vocabulary [0, %" PRId32 ")",
                                                 p->bad_words_token_ids[j], i, n_vocab);
        }
        return 0;
}

/* Every range check is written so that NaN fails it. */
int sampling_params_validate(const struct sampling_params *p, int32_t n_vocab, int32_t max_logprobs,
                             struct error *err) {
        int r;

        if (!p)
                return error_set(err, EINVAL, "sampling params missing");
        if (n_vocab <= 0)
                return error_set(err, EINVAL, "vocabulary size must be positive, got %" PRId32, n_vocab);

        if (!(p->temperature >= 0.0 && p->temperature <= SAMPLING_MAX_TEMPERATURE))
                return error_set(err, EINVAL, "temperature must be in [0, %g] (0 = greedy), got %g",
                                 SAMPLING_MAX_TEMPERATURE, p->temperature);
        if (!(p->top_p > 0.0 && p->top_p <= 1.0))
                return error_set(err, EINVAL, "top_p must be in (0, 1], got %g", p->top_p);
        if (p->top_k < -1)
                return error_set(err, EINVAL, "top_k must be 0 or -1 (disabled) or at least 1, got %" PRId32, p->top_k);
        if (!(p->min_p >= 0.0 && p->min_p <= 1.0))
                return error_set(err, EINVAL, "min_p must be in [0, 1], got %g", p->min_p);
        if (!(p->presence_penalty >= -2.0 && p->presence_penalty <= 2.0))
                return error_set(err, EINVAL, "presence_penalty must be in [-2, 2], got %g", p->presence_penalty);
        if (!(p->frequency_penalty >= -2.0 && p->frequency_penalty <= 2.0))
                return error_set(err, EINVAL, "frequency_penalty must be in [-2, 2], got %g", p->frequency_penalty);
        if (!(p->repetition_penalty > 0.0 && isfinite(p->repetition_penalty)))
                return error_set(err, EINVAL, "repetition_penalty must be a finite number > 0 (1 = disabled), got %g",
                                 p->repetition_penalty);

        if (max_logprobs < 0 || max_logprobs > n_vocab)
                max_logprobs = n_vocab;
        if (p->logprobs < SAMPLING_LOGPROBS_NONE || p->logprobs > max_logprobs)
                return error_set(err, EINVAL, "logprobs must be -1 (none) or in [0, %" PRId32 "], got %" PRId32,
                                 max_logprobs, p->logprobs);

        if (p->max_tokens != SAMPLING_MAX_TOKENS_NONE && p->max_tokens < 1)
                return error_set(err, EINVAL, "max_tokens must be at least 1 (or -1 for no limit), got %" PRId32,
                                 p->max_tokens);
        if (p->min_tokens < 0)
                return error_set(err, EINVAL, "min_tokens must be at least 0, got %" PRId32, p->min_tokens);
        if (p->max_tokens != SAMPLING_MAX_TOKENS_NONE && p->min_tokens > p->max_tokens)
                return error_set(err, EINVAL, "min_tokens must be in [0, max_tokens=%" PRId32 "], got %" PRId32,
                                 p->max_tokens, p->min_tokens);

        if (p->n_logit_bias > 0 && !p->logit_bias)
                return error_set(err, EINVAL, "logit_bias: %zu entries given but no array", p->n_logit_bias);
        for (size_t i = 0; i < p->n_logit_bias; i++) {
                const struct logit_bias *b = &p->logit_bias[i];

                if (b->token < 0 || b->token >= n_vocab)
                        return error_set(err, EINVAL, "logit_bias[%zu]: token id %" PRId32
                                         " is outside the vocabulary [0, %" PRId32 ")", i, b->token, n_vocab);
                if (!isfinite(b->bias))
                        return error_set(err, EINVAL, "logit_bias[%zu]: bias of token %" PRId32
                                         " must be a finite number, got %g", i, b->token, (double) b->bias);
        }

        if (p->has_allowed_token_ids && p->n_allowed_token_ids == 0)
                return error_set(err, EINVAL, "allowed_token_ids must not be empty when given");
        if (p->has_allowed_token_ids) {
                r = check_ids("allowed_token_ids", p->allowed_token_ids, p->n_allowed_token_ids, n_vocab, err);
                if (r < 0)
                        return r;
        }
        r = check_ids("stop_token_ids", p->stop_token_ids, p->n_stop_token_ids, n_vocab, err);
        if (r < 0)
                return r;

        if (p->n < 1 || p->n > SAMPLING_MAX_N)
                return error_set(err, EINVAL, "n must be in [1, %d], got %" PRIu32, SAMPLING_MAX_N, p->n);
        if (p->prompt_logprobs < SAMPLING_LOGPROBS_NONE || p->prompt_logprobs > max_logprobs)
                return error_set(err, EINVAL, "prompt_logprobs must be -1 (none) or in [0, %" PRId32 "], got %" PRId32,
                                 max_logprobs, p->prompt_logprobs);
        if (p->n_stop > SAMPLING_MAX_STOP)
                return error_set(err, EINVAL, "stop: at most %d strings allowed, got %zu", SAMPLING_MAX_STOP, p->n_stop);
        if (p->n_stop > 0 && !p->stop)
                return error_set(err, EINVAL, "stop: %zu strings given but no array", p->n_stop);
        for (size_t i = 0; i < p->n_stop; i++) {
                size_t len = p->stop[i] ? strlen(p->stop[i]) : 0;
                if (len == 0)
                        return error_set(err, EINVAL, "stop[%zu] is empty: stop strings must have at least one character", i);
                if (len > SAMPLING_MAX_STOP_BYTES)
                        return error_set(err, EINVAL, "stop[%zu] is %zu bytes long; at most %d allowed", i, len,
                                         SAMPLING_MAX_STOP_BYTES);
                if (!valid_utf8(p->stop[i]))
                        return error_set(err, EINVAL, "stop[%zu] is not valid UTF-8", i);
        }
        if (!output_kind_name(p->output_kind))
                return error_set(err, EINVAL, "output_kind must be cumulative, delta or final");
        if ((r = check_bad_words(p, n_vocab, err)) < 0)
                return r;
        if (p->truncate_prompt_tokens < SAMPLING_TRUNCATE_TO_CONTEXT)
                return error_set(err, EINVAL, "truncate_prompt_tokens must be an integer >= 1 or -1, got %" PRId32,
                                 p->truncate_prompt_tokens);
        /* vLLM's two messages: SamplingParams' for fewer than n, its V1 engine's for more */
        if (p->best_of != 0 && p->best_of < p->n)
                return error_set(err, EINVAL, "best_of must be greater than or equal to n, got n=%" PRIu32
                                 " and best_of=%" PRIu32 ".", p->n, p->best_of);
        if (p->best_of > p->n)
                return error_set(err, EINVAL, "best_of greater than n is not supported (vLLM V1 does not yet support "
                                 "best_of either): got n=%" PRIu32 " and best_of=%" PRIu32 "; leave it out or set it "
                                 "to n", p->n, p->best_of);

        return 0;
}

double sampling_params_temperature(const struct sampling_params *p) {
        if (p->temperature > 0.0 && p->temperature < SAMPLING_MIN_TEMPERATURE)
                return SAMPLING_MIN_TEMPERATURE;
        return p->temperature;
}

bool sampling_params_is_greedy(const struct sampling_params *p) {
        return sampling_params_temperature(p) < SAMPLING_GREEDY_EPS;
}
