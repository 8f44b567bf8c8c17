/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "sampler.h"
#include "sampling-params.h"

#define ELEMENTS(a) (sizeof(a) / sizeof((a)[0]))

/* ---- helpers ---------------------------------------------------------------------------- */

/* Deterministic test logits: a standard normal times scale, from its own generator. */
static void fill_normal(float *x, int32_t n, uint64_t seed, double scale) {
        struct rng r;

        rng_seed(&r, seed);
        for (int32_t i = 0; i < n; i++) {
                double u1 = rng_uniform(&r), u2 = rng_uniform(&r);

                x[i] = (float) (scale * sqrt(-2.0 * log(1.0 - u1)) * cos(2.0 * M_PI * u2));
        }
}

/* probs = softmax(x / t) in double; masked (-inf) entries get 0. */
static void softmax_ref(const float *x, int32_t n, double t, double *probs) {
        double m = -INFINITY, sum = 0.0;

        for (int32_t i = 0; i < n; i++)
                if (x[i] > m)
                        m = x[i];
        for (int32_t i = 0; i < n; i++) {
                probs[i] = x[i] > -INFINITY ? exp(((double) x[i] - m) / t) : 0.0;
                sum += probs[i];
        }
        for (int32_t i = 0; i < n; i++)
                probs[i] /= sum;
}

/* Draws `draws` tokens from fresh copies of logits and counts them. */
static void draw_many(const struct sampling_params *p, const float *logits, int32_t n, int draws, uint64_t *counts) {
        struct sampler_seq s;
        float *work = malloc((size_t) n * sizeof(float));

        ck_assert_ptr_nonnull(work);
        ck_assert_int_eq(sampler_seq_init(&s, p, NULL, 0, n, 12345), 0);
        memset(counts, 0, (size_t) n * sizeof(uint64_t));
        for (int d = 0; d < draws; d++) {
                struct sample_result res;

                memcpy(work, logits, (size_t) n * sizeof(float));
                ck_assert_int_eq(sampler_sample(p, &s, work, n, NULL, 0, &res), 0);
                ck_assert_int_ge(res.token, 0);
                ck_assert_int_lt(res.token, n);
                counts[res.token]++;
                sample_result_clear(&res);
        }
        sampler_seq_free(&s);
        free(work);
}

/* Pearson's statistic of the counts against expected probabilities. A count where the
 * probability is 0 makes it infinite. */
static double chi_square(const uint64_t *counts, const double *probs, int32_t n, int draws, int *df) {
        double chi = 0.0;

        *df = -1;
        for (int32_t i = 0; i < n; i++) {
                double e = probs[i] * draws;

                if (probs[i] == 0.0) {
                        if (counts[i] > 0)
                                return INFINITY;
                        continue;
                }
                chi += ((double) counts[i] - e) * ((double) counts[i] - e) / e;
                (*df)++;
        }
        return chi;
}

/* Upper 0.1% points of the chi-square distribution, df = 1..10. */
static double chi_square_limit(int df) {
        static const double limit[] = { 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59 };

        ck_assert_int_ge(df, 1);
        ck_assert_int_le(df, (int) ELEMENTS(limit));
        return limit[df - 1];
}

static int32_t sample_once(const struct sampling_params *p, struct sampler_seq *s, float *logits, int32_t n,
                           const int32_t *eog_ids, size_t n_eog_ids) {
        struct sample_result res;
        int32_t token;

        ck_assert_int_eq(sampler_sample(p, s, logits, n, eog_ids, n_eog_ids, &res), 0);
        token = res.token;
        sample_result_clear(&res);
        return token;
}

static struct sampling_params greedy_params(void) {
        struct sampling_params p;

        sampling_params_init_default(&p);
        p.temperature = 0.0;
        return p;
}

/* ---- RNG -------------------------------------------------------------------------------- */

START_TEST(test_rng_reference_values) {
        /* Published first outputs: splitmix64 from state 0, xoshiro256** from {1, 2, 3, 4}. */
        uint64_t sm = 0;
        struct rng r = { .s = { 1, 2, 3, 4 } };

        ck_assert_uint_eq(rng_splitmix64(&sm), UINT64_C(0xe220a8397b1dcdaf));
        ck_assert_uint_eq(rng_next(&r), UINT64_C(11520));
        ck_assert_uint_eq(rng_next(&r), UINT64_C(0));
        ck_assert_uint_eq(rng_next(&r), UINT64_C(1509978240));
        ck_assert_uint_eq(rng_next(&r), UINT64_C(1215971899390074240));
}
END_TEST

START_TEST(test_rng_uniform) {
        struct rng r;
        double sum = 0.0;

        rng_seed(&r, 7);
        for (int i = 0; i < 100000; i++) {
                double u = rng_uniform(&r);

                ck_assert(u >= 0.0 && u < 1.0);
                sum += u;
        }
        ck_assert_double_eq_tol(sum / 100000, 0.5, 0.005);
}
END_TEST

/* ---- params ----------------------------------------------------------------------------- */

START_TEST(test_defaults) {
        struct sampling_params p;
        struct error err = {};

        sampling_params_init_default(&p);
        ck_assert_double_eq(p.temperature, 1.0);
        ck_assert_double_eq(p.top_p, 1.0);
        ck_assert_int_eq(p.top_k, 0);
        ck_assert_double_eq(p.min_p, 0.0);
        ck_assert_double_eq(p.presence_penalty, 0.0);
        ck_assert_double_eq(p.frequency_penalty, 0.0);
        ck_assert_double_eq(p.repetition_penalty, 1.0);
        ck_assert(!p.has_seed);
        ck_assert_int_eq(p.logprobs, -1);
        ck_assert_uint_eq(p.n_logit_bias, 0);
        ck_assert(!p.has_allowed_token_ids);
        ck_assert_uint_eq(p.n_stop_token_ids, 0);
        ck_assert(!p.ignore_eos);
        ck_assert_int_eq(p.min_tokens, 0);
        ck_assert_int_eq(p.max_tokens, 16);
        ck_assert_int_eq(sampling_params_validate(&p, 100, 20, &err), 0);
        ck_assert(!sampling_params_is_greedy(&p));
}
END_TEST

START_TEST(test_validate_accepts_edges) {
        static const int32_t ids[] = { 0, 99 };
        static const struct logit_bias bias[] = { { 0, -1000.0f }, { 99, 1000.0f } };
        struct sampling_params p;
        struct error err = {};

        sampling_params_init_default(&p);
        p.temperature = 0.0;
        p.top_p = 1e-9;
        p.top_k = -1;
        p.min_p = 1.0;
        p.presence_penalty = -2.0;
        p.frequency_penalty = 2.0;
        p.repetition_penalty = 1e-3;
        p.logprobs = 20;
        p.max_tokens = SAMPLING_MAX_TOKENS_NONE;
        p.min_tokens = 1000;
        p.logit_bias = bias;
        p.n_logit_bias = ELEMENTS(bias);
        p.has_allowed_token_ids = true;
        p.allowed_token_ids = ids;
        p.n_allowed_token_ids = ELEMENTS(ids);
        p.stop_token_ids = ids;
        p.n_stop_token_ids = ELEMENTS(ids);
        ck_assert_int_eq(sampling_params_validate(&p, 100, 20, &err), 0);

        p.temperature = 2.0;
        p.top_k = 0;
        p.max_tokens = 1000;
        ck_assert_int_eq(sampling_params_validate(&p, 100, 20, &err), 0);
        /* A negative limit means the vocabulary. */
        p.logprobs = 100;
        ck_assert_int_eq(sampling_params_validate(&p, 100, -1, &err), 0);
}
END_TEST

enum bad_case {
        BAD_TEMPERATURE_NEGATIVE,
        BAD_TEMPERATURE_HIGH,
        BAD_TEMPERATURE_NAN,
        BAD_TOP_P_ZERO,
        BAD_TOP_P_HIGH,
        BAD_TOP_P_NAN,
        BAD_TOP_K,
        BAD_MIN_P_NEGATIVE,
        BAD_MIN_P_HIGH,
        BAD_PRESENCE_HIGH,
        BAD_PRESENCE_LOW,
        BAD_FREQUENCY_HIGH,
        BAD_FREQUENCY_NAN,
        BAD_REPETITION_ZERO,
        BAD_REPETITION_INF,
        BAD_LOGPROBS_HIGH,
        BAD_LOGPROBS_NEGATIVE,
        BAD_MAX_TOKENS_ZERO,
        BAD_MAX_TOKENS_NEGATIVE,
        BAD_MIN_TOKENS_NEGATIVE,
        BAD_MIN_TOKENS_ABOVE_MAX,
        BAD_LOGIT_BIAS_ID_NEGATIVE,
        BAD_LOGIT_BIAS_ID_HIGH,
        BAD_LOGIT_BIAS_NAN,
        BAD_LOGIT_BIAS_NULL,
        BAD_ALLOWED_EMPTY,
        BAD_ALLOWED_ID,
        BAD_STOP_ID,
        BAD_BAD_WORD_EMPTY,
        BAD_BAD_WORD_ID,
        BAD_TRUNCATE,
        BAD_BEST_OF_BELOW_N,
        BAD_BEST_OF_ABOVE_N,
        _BAD_MAX,
};

static const struct {
        const char *name;  /* the parameter the message must name */
        const char *range; /* and the allowed range it must state */
} bad_expect[_BAD_MAX] = {
        [BAD_TEMPERATURE_NEGATIVE] = { "temperature", "[0, 2]" },
        [BAD_TEMPERATURE_HIGH] = { "temperature", "[0, 2]" },
        [BAD_TEMPERATURE_NAN] = { "temperature", "[0, 2]" },
        [BAD_TOP_P_ZERO] = { "top_p", "(0, 1]" },
        [BAD_TOP_P_HIGH] = { "top_p", "(0, 1]" },
        [BAD_TOP_P_NAN] = { "top_p", "(0, 1]" },
        [BAD_TOP_K] = { "top_k", "at least 1" },
        [BAD_MIN_P_NEGATIVE] = { "min_p", "[0, 1]" },
        [BAD_MIN_P_HIGH] = { "min_p", "[0, 1]" },
        [BAD_PRESENCE_HIGH] = { "presence_penalty", "[-2, 2]" },
        [BAD_PRESENCE_LOW] = { "presence_penalty", "[-2, 2]" },
        [BAD_FREQUENCY_HIGH] = { "frequency_penalty", "[-2, 2]" },
        [BAD_FREQUENCY_NAN] = { "frequency_penalty", "[-2, 2]" },
        [BAD_REPETITION_ZERO] = { "repetition_penalty", "> 0" },
        [BAD_REPETITION_INF] = { "repetition_penalty", "> 0" },
        [BAD_LOGPROBS_HIGH] = { "logprobs", "[0, 20]" },
        [BAD_LOGPROBS_NEGATIVE] = { "logprobs", "[0, 20]" },
        [BAD_MAX_TOKENS_ZERO] = { "max_tokens", "at least 1" },
        [BAD_MAX_TOKENS_NEGATIVE] = { "max_tokens", "at least 1" },
        [BAD_MIN_TOKENS_NEGATIVE] = { "min_tokens", "at least 0" },
        [BAD_MIN_TOKENS_ABOVE_MAX] = { "min_tokens", "max_tokens=16" },
        [BAD_LOGIT_BIAS_ID_NEGATIVE] = { "logit_bias[1]", "[0, 100)" },
        [BAD_LOGIT_BIAS_ID_HIGH] = { "logit_bias[1]", "[0, 100)" },
        [BAD_LOGIT_BIAS_NAN] = { "logit_bias[1]", "finite" },
        [BAD_LOGIT_BIAS_NULL] = { "logit_bias", "no array" },
        [BAD_ALLOWED_EMPTY] = { "allowed_token_ids", "empty" },
        [BAD_ALLOWED_ID] = { "allowed_token_ids[2]", "[0, 100)" },
        [BAD_STOP_ID] = { "stop_token_ids[0]", "[0, 100)" },
        [BAD_BAD_WORD_EMPTY] = { "bad_words", "empty string" },
        [BAD_BAD_WORD_ID] = { "bad_words", "[0, 100)" },
        [BAD_TRUNCATE] = { "truncate_prompt_tokens", ">= 1 or -1" },
        [BAD_BEST_OF_BELOW_N] = { "best_of", "greater than or equal to n, got n=3 and best_of=2." },
        [BAD_BEST_OF_ABOVE_N] = { "best_of", "does not yet support best_of" },
};

START_TEST(test_validate_rejects) {
        struct logit_bias bias[2] = { { 5, 1.0f }, { 6, 2.0f } };
        int32_t allowed[3] = { 1, 2, 3 };
        int32_t stop[1] = { 4 };
        const char *bad_words[2] = { "fine", "" };
        int32_t bad_word_ids[3] = { 1, 2, 100 };
        uint32_t bad_word_ends[2] = { 1, 3 };
        struct sampling_params p;
        struct error err = {};

        sampling_params_init_default(&p);
        switch ((enum bad_case) _i) {
        case BAD_TEMPERATURE_NEGATIVE: p.temperature = -0.1; break;
        case BAD_TEMPERATURE_HIGH: p.temperature = 2.5; break;
        case BAD_TEMPERATURE_NAN: p.temperature = NAN; break;
        case BAD_TOP_P_ZERO: p.top_p = 0.0; break;
        case BAD_TOP_P_HIGH: p.top_p = 1.01; break;
        case BAD_TOP_P_NAN: p.top_p = NAN; break;
        case BAD_TOP_K: p.top_k = -2; break;
        case BAD_MIN_P_NEGATIVE: p.min_p = -0.01; break;
        case BAD_MIN_P_HIGH: p.min_p = 1.5; break;
        case BAD_PRESENCE_HIGH: p.presence_penalty = 2.01; break;
        case BAD_PRESENCE_LOW: p.presence_penalty = -3.0; break;
        case BAD_FREQUENCY_HIGH: p.frequency_penalty = 2.5; break;
        case BAD_FREQUENCY_NAN: p.frequency_penalty = NAN; break;
        case BAD_REPETITION_ZERO: p.repetition_penalty = 0.0; break;
        case BAD_REPETITION_INF: p.repetition_penalty = INFINITY; break;
        case BAD_LOGPROBS_HIGH: p.logprobs = 21; break;
        case BAD_LOGPROBS_NEGATIVE: p.logprobs = -2; break;
        case BAD_MAX_TOKENS_ZERO: p.max_tokens = 0; break;
        case BAD_MAX_TOKENS_NEGATIVE: p.max_tokens = -5; break;
        case BAD_MIN_TOKENS_NEGATIVE: p.min_tokens = -1; break;
        case BAD_MIN_TOKENS_ABOVE_MAX: p.min_tokens = 17; break;
        case BAD_LOGIT_BIAS_ID_NEGATIVE: bias[1].token = -1; goto set_bias;
        case BAD_LOGIT_BIAS_ID_HIGH: bias[1].token = 100; goto set_bias;
        case BAD_LOGIT_BIAS_NAN: bias[1].bias = NAN; goto set_bias;
        set_bias:
                p.logit_bias = bias;
                p.n_logit_bias = 2;
                break;
        case BAD_LOGIT_BIAS_NULL: p.n_logit_bias = 1; break;
        case BAD_ALLOWED_EMPTY:
                p.has_allowed_token_ids = true;
                p.allowed_token_ids = allowed;
                break;
        case BAD_ALLOWED_ID:
                allowed[2] = 100;
                p.has_allowed_token_ids = true;
                p.allowed_token_ids = allowed;
                p.n_allowed_token_ids = 3;
                break;
        case BAD_STOP_ID:
                stop[0] = -3;
                p.stop_token_ids = stop;
                p.n_stop_token_ids = 1;
                break;
        case BAD_BAD_WORD_EMPTY:
                p.bad_words = bad_words;
                p.n_bad_words = 2;
                break;
        case BAD_BAD_WORD_ID:
                p.bad_words_token_ids = bad_word_ids;
                p.bad_words_ends = bad_word_ends;
                p.n_bad_word_sequences = 2;
                break;
        case BAD_TRUNCATE: p.truncate_prompt_tokens = -2; break;
        case BAD_BEST_OF_BELOW_N: p.n = 3; p.best_of = 2; break;
        case BAD_BEST_OF_ABOVE_N: p.n = 2; p.best_of = 3; break;
        case _BAD_MAX: break;
        }

        ck_assert_int_eq(sampling_params_validate(&p, 100, 20, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, bad_expect[_i].name), "case %d: \"%s\" does not name %s", _i, err.message,
                      bad_expect[_i].name);
        ck_assert_msg(strstr(err.message, bad_expect[_i].range), "case %d: \"%s\" does not state %s", _i, err.message,
                      bad_expect[_i].range);
        /* A NULL error is fine. */
        ck_assert_int_eq(sampling_params_validate(&p, 100, 20, NULL), -EINVAL);
}
END_TEST

START_TEST(test_temperature_clamp) {
        struct sampling_params p;

        sampling_params_init_default(&p);
        p.temperature = 0.0;
        ck_assert(sampling_params_is_greedy(&p));
        /* vLLM raises (0, 0.01) to 0.01: random, not greedy. */
        p.temperature = 1e-6;
        ck_assert(!sampling_params_is_greedy(&p));
        ck_assert_double_eq(sampling_params_temperature(&p), 0.01);
        p.temperature = 0.5;
        ck_assert_double_eq(sampling_params_temperature(&p), 0.5);
}
END_TEST

/* ---- greedy ----------------------------------------------------------------------------- */

START_TEST(test_greedy_argmax) {
        struct sampling_params p = greedy_params();
        struct sampler_seq s;
        float logits[1000], work[1000];
        int32_t best = 0;

        fill_normal(logits, 1000, 1, 2.0);
        for (int32_t i = 1; i < 1000; i++)
                if (logits[i] > logits[best])
                        best = i;
        /* Filters are ignored when greedy. */
        p.top_k = 5;
        p.top_p = 0.1;
        p.min_p = 0.9;
        ck_assert_int_eq(sampler_seq_init(&s, &p, NULL, 0, 1000, 0), 0);
        for (int k = 0; k < 3; k++) {
                struct rng before = s.rng;

                memcpy(work, logits, sizeof(work));
                ck_assert_int_eq(sample_once(&p, &s, work, 1000, NULL, 0), best);
                /* Greedy does not draw from the generator and leaves the logits alone. */
                ck_assert(memcmp(&before, &s.rng, sizeof(before)) == 0);
                ck_assert(memcmp(work, logits, sizeof(work)) == 0);
        }
        sampler_seq_free(&s);
}
END_TEST

START_TEST(test_greedy_ties) {
        struct sampling_params p = greedy_params();
        struct sampler_seq s;
        float logits[6] = { 1.0f, 3.0f, -2.0f, 3.0f, 3.0f, 0.0f };
        float nans[4] = { NAN, 1.0f, NAN, 1.0f };

        ck_assert_int_eq(sampler_seq_init(&s, &p, NULL, 0, 6, 0), 0);
        ck_assert_int_eq(sample_once(&p, &s, logits, 6, NULL, 0), 1);
        sampler_seq_free(&s);

        /* A near-maximum just before the maximum, in the same block of values. */
        float near[8] = { 0.0f, 5.0f - 1e-4f, 5.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f };
        ck_assert_int_eq(sampler_seq_init(&s, &p, NULL, 0, 8, 0), 0);
        ck_assert_int_eq(sample_once(&p, &s, near, 8, NULL, 0), 2);
        sampler_seq_free(&s);

        /* The maximum in the tail of a vocabulary that is not a multiple of the vector width. */
        float tail[4099];
        for (int32_t i = 0; i < 4099; i++)
                tail[i] = (float) (i % 100) * 0.01f;
        tail[4098] = 2.0f;
        tail[4097] = 2.0f - 1e-6f;
        ck_assert_int_eq(sampler_seq_init(&s, &p, NULL, 0, 4099, 0), 0);
        ck_assert_int_eq(sample_once(&p, &s, tail, 4099, NULL, 0), 4098);
        sampler_seq_free(&s);

        /* NaN never wins. */
        ck_assert_int_eq(sampler_seq_init(&s, &p, NULL, 0, 4, 0), 0);
        ck_assert_int_eq(sample_once(&p, &s, nans, 4, NULL, 0), 1);
        sampler_seq_free(&s);
}
END_TEST

/* ---- random sampling -------------------------------------------------------------------- */

static const float dist_logits[8] = { 1.2f, -0.3f, 0.8f, 2.0f, -1.5f, 0.1f, 1.9f, 0.0f };

START_TEST(test_temperature_distribution) {
        static const double temps[] = { 1.0, 0.7, 1.6 };
        struct sampling_params p;
        uint64_t counts[8];
        double probs[8], chi;
        int df;
        const int draws = 200000;

        for (size_t t = 0; t < ELEMENTS(temps); t++) {
                sampling_params_init_default(&p);
                p.temperature = temps[t];
                draw_many(&p, dist_logits, 8, draws, counts);
                softmax_ref(dist_logits, 8, temps[t], probs);
                chi = chi_square(counts, probs, 8, draws, &df);
                ck_assert_int_eq(df, 7);
                ck_assert_msg(chi < chi_square_limit(df), "T=%g: chi-square %g", temps[t], chi);
        }
}
END_TEST

struct ranked {
        double prob;
        int32_t token;
};

static int ranked_compare(const void *a, const void *b) {
        const struct ranked *x = a, *y = b;

        if (x->prob != y->prob)
                return x->prob > y->prob ? -1 : 1;
        return x->token < y->token ? -1 : x->token > y->token;
}

/* order[] = the ids by probability, descending. */
static void sort_desc(const double *probs, int32_t n, int32_t *order) {
        struct ranked *r = malloc((size_t) n * sizeof(*r));

        ck_assert_ptr_nonnull(r);
        for (int32_t i = 0; i < n; i++)
                r[i] = (struct ranked) { probs[i], i };
        qsort(r, (size_t) n, sizeof(*r), ranked_compare);
        for (int32_t i = 0; i < n; i++)
                order[i] = r[i].token;
        free(r);
}

/* Probabilities after the filters, computed the slow way: sort, then cut. */
static void filtered_ref(const float *x, int32_t n, double t, double min_p, int32_t top_k, double top_p,
                         double *probs) {
        int32_t *order = malloc((size_t) n * sizeof(int32_t));
        double max = 0.0, sum = 0.0, acc = 0.0;
        int32_t kept = 0;

        ck_assert_ptr_nonnull(order);
        softmax_ref(x, n, t, probs);
        for (int32_t i = 0; i < n; i++)
                if (probs[i] > max)
                        max = probs[i];
        for (int32_t i = 0; i < n; i++)
                if (probs[i] < min_p * max)
                        probs[i] = 0.0;
        sort_desc(probs, n, order);
        if (top_k > 0 && top_k < n)
                for (int32_t i = top_k; i < n; i++)
                        if (probs[order[i]] < probs[order[top_k - 1]])
                                probs[order[i]] = 0.0;
        for (int32_t i = 0; i < n; i++)
                sum += probs[i];
        for (kept = 0; kept < n && probs[order[kept]] > 0.0; kept++) {
                acc += probs[order[kept]];
                if (acc >= top_p * sum) {
                        kept++;
                        break;
                }
        }
        for (int32_t i = kept; i < n; i++)
                probs[order[i]] = 0.0;
        sum = 0.0;
        for (int32_t i = 0; i < n; i++)
                sum += probs[i];
        for (int32_t i = 0; i < n; i++)
                probs[i] /= sum;
        free(order);
}

static void check_filtered_distribution(double t, double min_p, int32_t top_k, double top_p, int expect_kept) {
        struct sampling_params p;
        uint64_t counts[8];
        double probs[8], chi;
        int df;
        const int draws = 100000;

        sampling_params_init_default(&p);
        p.temperature = t;
        p.min_p = min_p;
        p.top_k = top_k;
        p.top_p = top_p;
        draw_many(&p, dist_logits, 8, draws, counts);
        filtered_ref(dist_logits, 8, t, min_p, top_k, top_p, probs);
        chi = chi_square(counts, probs, 8, draws, &df);
        ck_assert_msg(df + 1 == expect_kept, "expected %d tokens kept, reference keeps %d", expect_kept, df + 1);
        if (df == 0) {
                ck_assert(chi == 0.0);
                return;
        }
        ck_assert_msg(chi < chi_square_limit(df), "T=%g min_p=%g top_k=%d top_p=%g: chi-square %g (df %d)", t, min_p,
                      top_k, top_p, chi, df);
}

START_TEST(test_top_k_distribution) {
        check_filtered_distribution(1.0, 0.0, 3, 1.0, 3);
        check_filtered_distribution(0.8, 0.0, 5, 1.0, 5);
        check_filtered_distribution(1.0, 0.0, 7, 1.0, 7);
        check_filtered_distribution(1.0, 0.0, 8, 1.0, 8);
        check_filtered_distribution(1.0, 0.0, -1, 1.0, 8);
}
END_TEST

START_TEST(test_top_p_distribution) {
        /* At T=1, descending: 3 .326, 6 .295, 0 .146, 2 .098, 5 .049, 7 .044, 1 .033, 4 .010;
         * cumulated .326 .620 .767 .865 .913 ... */
        check_filtered_distribution(1.0, 0.0, 0, 0.5, 2);
        check_filtered_distribution(1.0, 0.0, 0, 0.65, 3);
        check_filtered_distribution(1.0, 0.0, 0, 0.9, 5);
        /* At T=0.5: .462 .840 .934 */
        check_filtered_distribution(0.5, 0.0, 0, 0.9, 3);
        /* top_k then top_p on what top_k left: .425 .809 1 */
        check_filtered_distribution(1.0, 0.0, 3, 0.85, 3);
        check_filtered_distribution(1.0, 0.0, 3, 0.6, 2);
}
END_TEST

START_TEST(test_min_p_distribution) {
        /* Relative to the best (.326): 0.4 keeps >= .130 (3 tokens), 0.25 keeps >= .081 (4). */
        check_filtered_distribution(1.0, 0.4, 0, 1.0, 3);
        check_filtered_distribution(1.0, 0.25, 0, 1.0, 4);
        check_filtered_distribution(1.0, 1.0, 0, 1.0, 1);
        /* min_p first, then top_p on what is left. */
        check_filtered_distribution(1.0, 0.25, 0, 0.6, 2);
}
END_TEST

START_TEST(test_top_k_one_and_tiny_top_p_are_greedy) {
        struct sampling_params greedy = greedy_params(), pk, pp;
        struct sampler_seq sg, sk, sp;
        float logits[4099], a[4099], b[4099], c[4099];

        sampling_params_init_default(&pk);
        pk.temperature = 1.5;
        pk.top_k = 1;
        sampling_params_init_default(&pp);
        pp.temperature = 1.5;
        pp.top_p = 1e-6;
        ck_assert_int_eq(sampler_seq_init(&sg, &greedy, NULL, 0, 4099, 1), 0);
        ck_assert_int_eq(sampler_seq_init(&sk, &pk, NULL, 0, 4099, 2), 0);
        ck_assert_int_eq(sampler_seq_init(&sp, &pp, NULL, 0, 4099, 3), 0);
        for (uint64_t trial = 0; trial < 50; trial++) {
                int32_t g;

                fill_normal(logits, 4099, 100 + trial, 3.0);
                memcpy(a, logits, sizeof(a));
                memcpy(b, logits, sizeof(b));
                memcpy(c, logits, sizeof(c));
                g = sample_once(&greedy, &sg, a, 4099, NULL, 0);
                ck_assert_int_eq(sample_once(&pk, &sk, b, 4099, NULL, 0), g);
                ck_assert_int_eq(sample_once(&pp, &sp, c, 4099, NULL, 0), g);
        }
        sampler_seq_free(&sg);
        sampler_seq_free(&sk);
        sampler_seq_free(&sp);
}
END_TEST

START_TEST(test_top_k_keeps_ties) {
        /* Three tokens tie for the second place: top_k = 2 keeps all four (vLLM masks only the
         * values below the k-th). */
        static const float x[6] = { 5.0f, 4.0f, 4.0f, -9.0f, 4.0f, -9.0f };
        struct sampling_params p;
        uint64_t counts[6];

        sampling_params_init_default(&p);
        p.top_k = 2;
        draw_many(&p, x, 6, 20000, counts);
        ck_assert(counts[0] > 0 && counts[1] > 0 && counts[2] > 0 && counts[4] > 0);
        ck_assert(counts[3] == 0 && counts[5] == 0);
}
END_TEST

/* Large vocabulary: the tokens drawn under top_k / top_p / min_p must all lie in the set a
 * sort-based reference keeps, and the frequent ones must show up. The model's 49152, and a
 * size that leaves a tail after every vector block. Also one with top_k above the heap's
 * reach (the radix path). */
START_TEST(test_filters_large_vocab) {
        static const int32_t sizes[] = { 49152, 32003 };
        static const struct {
                double t, min_p, top_p;
                int32_t top_k;
        } cases[] = {
                { 1.0, 0.0, 1.0, 50 },
                { 1.0, 0.0, 0.9, 0 },
                { 0.7, 0.0, 0.95, 40 },
                { 1.3, 0.05, 0.8, 0 },
                { 1.0, 0.0, 0.5, 1000 },
                { 1.0, 0.0, 1.0, 3000 },
                { 0.8, 0.0, 0.97, 2500 },
        };
        const int32_t n = sizes[_i];
        float *logits = malloc((size_t) n * sizeof(float));
        double *probs = malloc((size_t) n * sizeof(double));
        uint64_t *counts = malloc((size_t) n * sizeof(uint64_t));

        ck_assert(logits && probs && counts);
        fill_normal(logits, n, 77 + (uint64_t) _i, 2.5);
        for (size_t c = 0; c < ELEMENTS(cases); c++) {
                struct sampling_params p;
                const int draws = 2000;

                sampling_params_init_default(&p);
                p.temperature = cases[c].t;
                p.min_p = cases[c].min_p;
                p.top_p = cases[c].top_p;
                p.top_k = cases[c].top_k;
                draw_many(&p, logits, n, draws, counts);
                filtered_ref(logits, n, p.temperature, p.min_p, p.top_k, p.top_p, probs);
                for (int32_t i = 0; i < n; i++) {
                        ck_assert_msg(counts[i] == 0 || probs[i] > 0.0, "case %zu: token %d drawn outside the kept set",
                                      c, i);
                        if (probs[i] * draws > 25.0)
                                ck_assert_msg(counts[i] > 0, "case %zu: token %d (p %g) never drawn", c, i, probs[i]);
                }
        }
        free(logits);
        free(probs);
        free(counts);
}
END_TEST

/* ---- logits processing: exact values ---------------------------------------------------- */

START_TEST(test_repetition_penalty_values) {
        static const int32_t prompt[] = { 1, 2, 1 };
        struct sampling_params p = greedy_params();
        struct sampler_seq s;
        float x[8] = { 0.5f, 2.0f, -1.0f, 0.75f, 3.0f, -0.25f, 0.0f, 1.0f };
        float rep = 1.3f;

        p.repetition_penalty = 1.3;
        ck_assert_int_eq(sampler_seq_init(&s, &p, prompt, ELEMENTS(prompt), 8, 0), 0);
        ck_assert_int_eq(sampler_seq_accept(&s, 3), 0);
        ck_assert_int_eq(sampler_seq_accept(&s, 3), 0);
        ck_assert_int_eq(sampler_seq_accept(&s, 5), 0);
        ck_assert_int_eq(sampler_seq_accept(&s, 6), 0);
        ck_assert_int_eq(sample_once(&p, &s, x, 8, NULL, 0), 4);

        ck_assert_float_eq(x[0], 0.5f);        /* unseen */
        ck_assert_float_eq(x[1], 2.0f / rep);  /* prompt, positive: divided */
        ck_assert_float_eq(x[2], -1.0f * rep); /* prompt, negative: multiplied */
        ck_assert_float_eq(x[3], 0.75f / rep); /* output twice: once, not per occurrence */
        ck_assert_float_eq(x[4], 3.0f);
        ck_assert_float_eq(x[5], -0.25f * rep);
        ck_assert_float_eq(x[6], 0.0f); /* zero stays zero */
        ck_assert_float_eq(x[7], 1.0f);
        sampler_seq_free(&s);
}
END_TEST

START_TEST(test_frequency_presence_values) {
        static const int32_t prompt[] = { 0, 1 };
        struct sampling_params p = greedy_params();
        struct sampler_seq s;
        float x[6] = { 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 5.0f };
        float freq = 0.4f, pres = 0.7f;

        p.frequency_penalty = 0.4;
        p.presence_penalty = 0.7;
        ck_assert_int_eq(sampler_seq_init(&s, &p, prompt, ELEMENTS(prompt), 6, 0), 0);
        ck_assert_int_eq(sampler_seq_accept(&s, 2), 0);
        ck_assert_int_eq(sampler_seq_accept(&s, 2), 0);
        ck_assert_int_eq(sampler_seq_accept(&s, 2), 0);
        ck_assert_int_eq(sampler_seq_accept(&s, 1), 0);
        ck_assert_int_eq(sample_once(&p, &s, x, 6, NULL, 0), 5);

        /* logit - frequency * count - presence; an FMA may fuse the first step (an ulp). */
        ck_assert_float_eq(x[0], 1.0f);                                 /* prompt only: untouched */
        ck_assert_float_eq_tol(x[1], (1.0f - freq * 1.0f) - pres, 1e-6f); /* prompt and once in output */
        ck_assert_float_eq_tol(x[2], (1.0f - freq * 3.0f) - pres, 1e-6f); /* three times in output */
        ck_assert_float_eq(x[3], 1.0f);
        ck_assert_float_eq(x[5], 5.0f);

        /* Negative penalties encourage repeats. */
        p.frequency_penalty = -2.0;
        p.presence_penalty = -2.0;
        float y[6] = { 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 5.0f };
        ck_assert_int_eq(sample_once(&p, &s, y, 6, NULL, 0), 2); /* 1 + 6 + 2 = 9 */
        ck_assert_float_eq(y[2], 9.0f);
        sampler_seq_free(&s);
}
END_TEST

START_TEST(test_penalties_combined_order) {
        /* Repetition first, then frequency, then presence. */
        static const int32_t prompt[] = { 0 };
        struct sampling_params p = greedy_params();
        struct sampler_seq s;
        float x[3] = { 2.0f, 2.0f, -1.0f };
        float rep = 2.0f, freq = 0.5f, pres = 0.25f;

        p.repetition_penalty = 2.0;
        p.frequency_penalty = 0.5;
        p.presence_penalty = 0.25;
        ck_assert_int_eq(sampler_seq_init(&s, &p, prompt, 1, 3, 0), 0);
        ck_assert_int_eq(sampler_seq_accept(&s, 1), 0);
        ck_assert_int_eq(sampler_seq_accept(&s, 1), 0);
        sample_once(&p, &s, x, 3, NULL, 0);
        ck_assert_float_eq(x[0], 2.0f / rep);
        ck_assert_float_eq_tol(x[1], (2.0f / rep - freq * 2.0f) - pres, 1e-6f);
        ck_assert_float_eq(x[2], -1.0f);
        sampler_seq_free(&s);
}
END_TEST

START_TEST(test_logit_bias) {
        const struct logit_bias bias[] = { { 7, 3.5f }, { 2, -1.0f }, { 2, -0.5f }, { 4, 1000.0f } };
        struct sampling_params p = greedy_params();
        struct sampler_seq s;
        float x[8] = { 0.0f, 1.0f, 2.0f, 0.5f, -300.0f, 0.0f, 0.0f, 0.0f };

        p.logit_bias = bias;
        p.n_logit_bias = 3;
        ck_assert_int_eq(sampler_seq_init(&s, &p, NULL, 0, 8, 0), 0);
        ck_assert_int_eq(sample_once(&p, &s, x, 8, NULL, 0), 7);
        ck_assert_float_eq(x[7], 3.5f);
        ck_assert_float_eq(x[2], (2.0f - 1.0f) - 0.5f); /* repeated ids add up */
        ck_assert_float_eq(x[1], 1.0f);

        /* Clamped to +100 as the OpenAI range. */
        float y[8] = { 0.0f, 1.0f, 2.0f, 0.5f, -300.0f, 0.0f, 0.0f, 0.0f };
        p.n_logit_bias = 4;
        ck_assert_int_eq(sample_once(&p, &s, y, 8, NULL, 0), 7);
        ck_assert_float_eq(y[4], -200.0f);
        sampler_seq_free(&s);
}
END_TEST

START_TEST(test_allowed_token_ids) {
        static const int32_t allowed[] = { 3, 5, 3 };
        struct sampling_params p = greedy_params();
        struct sampler_seq s;
        float x[70];
        uint64_t counts[70];

        for (int32_t i = 0; i < 70; i++)
                x[i] = (float) i * 0.1f;
        p.has_allowed_token_ids = true;
        p.allowed_token_ids = allowed;
        p.n_allowed_token_ids = ELEMENTS(allowed);
        ck_assert_int_eq(sampler_seq_init(&s, &p, NULL, 0, 70, 0), 0);
        ck_assert_int_eq(sample_once(&p, &s, x, 70, NULL, 0), 5);
        for (int32_t i = 0; i < 70; i++)
                if (i == 3 || i == 5)
                        ck_assert_float_eq(x[i], (float) i * 0.1f);
                else
                        ck_assert(x[i] == -INFINITY);
        sampler_seq_free(&s);

        for (int32_t i = 0; i < 70; i++)
                x[i] = (float) i * 0.1f;
        p.temperature = 1.0;
        draw_many(&p, x, 70, 5000, counts);
        for (int32_t i = 0; i < 70; i++)
                if (i == 3 || i == 5)
                        ck_assert_uint_gt(counts[i], 1000);
                else
                        ck_assert_uint_eq(counts[i], 0);
}
END_TEST

START_TEST(test_min_tokens) {
        static const int32_t stop[] = { 4 };
        struct sampling_params p = greedy_params();
        struct sampler_seq s;
        static const int32_t eog[] = { 2, 5 }; /* EOS and a second end-of-generation token */

        p.min_tokens = 2;
        p.stop_token_ids = stop;
        p.n_stop_token_ids = 1;
        p.ignore_eos = _i; /* vLLM masks EOS until min_tokens even with ignore_eos */
        ck_assert_int_eq(sampler_seq_init(&s, &p, NULL, 0, 6, 0), 0);
        for (int step = 0; step < 4; step++) {
                float x[6] = { 0.0f, 1.0f, 9.0f, 0.0f, 8.0f, 7.0f };
                int32_t t = sample_once(&p, &s, x, 6, eog, 2);

                if (step < 2) {
                        ck_assert_int_eq(t, 1);
                        ck_assert(x[2] == -INFINITY && x[4] == -INFINITY && x[5] == -INFINITY);
                } else {
                        ck_assert_int_eq(t, 2);
                        ck_assert_float_eq(x[4], 8.0f);
                        ck_assert_float_eq(x[5], 7.0f);
                }
                ck_assert_int_eq(sampler_seq_accept(&s, t), 0);
        }
        sampler_seq_free(&s);
}
END_TEST

/* The rule written plainly: the whole output against each sequence. */
static bool bad_word_masks(const int32_t *ids, const uint32_t *ends, size_t n_seq, const int32_t *output,
                           size_t n_output, int32_t token) {
        for (size_t i = 0, start = 0; i < n_seq; start = ends[i++]) {
                size_t prefix = ends[i] - start - 1;
                if (ids[ends[i] - 1] != token || prefix > n_output)
                        continue;
                if (memcmp(output + n_output - prefix, ids + start, prefix * sizeof(*ids)) == 0)
                        return true;
        }
        return false;
}

START_TEST(test_bad_words) {
        /* always 7; 3 after 1 2; 5 after 4; 2 after 2 2 2 (its own prefix overlaps) */
        static const int32_t ids[] = { 7, 1, 2, 3, 4, 5, 2, 2, 2, 2 };
        static const uint32_t ends[] = { 1, 4, 6, 10 };
        struct sampling_params p = greedy_params();
        struct sampler_seq s;
        int32_t output[400];
        uint64_t state = 12345;
        size_t masked = 0;

        p.bad_words_token_ids = ids;
        p.bad_words_ends = ends;
        p.n_bad_word_sequences = ELEMENTS(ends);
        ck_assert_int_eq(sampling_params_validate(&p, 10, 20, NULL), 0);
        ck_assert_int_eq(sampler_seq_init(&s, &p, NULL, 0, 10, 0), 0);
        for (size_t step = 0; step < ELEMENTS(output); step++) {
                /* the banned tokens are the likeliest: greedy takes the best one left */
                static const float x0[10] = { 0, 10, 11, 12, 13, 14, 1, 20, 2, 3 };
                float x[10];
                int32_t expect_best = -1;
                memcpy(x, x0, sizeof(x));
                int32_t best = sample_once(&p, &s, x, 10, NULL, 0);
                for (int32_t t = 0; t < 10; t++) {
                        bool expect = bad_word_masks(ids, ends, ELEMENTS(ends), output, step, t);
                        ck_assert_msg((x[t] == -INFINITY) == expect, "step %zu token %d: masked %d, expected %d", step,
                                      t, x[t] == -INFINITY, expect);
                        masked += expect;
                        if (!expect && (expect_best < 0 || x0[t] > x0[expect_best]))
                                expect_best = t;
                }
                ck_assert_int_eq(best, expect_best);
                /* the output the test drives, from the tokens the sequences are made of */
                state = state * 6364136223846793005u + 1442695040888963407u;
                output[step] = (int32_t) ((state >> 33) % 6);
                ck_assert_int_eq(sampler_seq_accept(&s, output[step]), 0);
        }
        ck_assert_uint_gt(masked, ELEMENTS(output) + 40); /* 7 every step, and the others often */
        sampler_seq_free(&s);

        /* params with a longer sequence than the state was made for are refused */
        struct sampling_params none = greedy_params();
        float x[10] = { 0 };
        struct sample_result res;
        ck_assert_int_eq(sampler_seq_init(&s, &none, NULL, 0, 10, 0), 0);
        ck_assert_int_eq(sampler_sample(&p, &s, x, 10, NULL, 0, &res), -EINVAL);
        sampler_seq_free(&s);
}
END_TEST

START_TEST(test_nothing_to_sample) {
        static const int32_t allowed[] = { 2 };
        struct sampling_params p = greedy_params();
        struct sampler_seq s;
        struct sample_result res;
        float x[4] = { 1.0f, 2.0f, 3.0f, 4.0f };
        float nans[4] = { NAN, NAN, NAN, NAN };

        /* Only EOS allowed, and EOS masked by min_tokens. */
        p.has_allowed_token_ids = true;
        p.allowed_token_ids = allowed;
        p.n_allowed_token_ids = 1;
        p.min_tokens = 1;
        p.logprobs = 2;
        ck_assert_int_eq(sampler_seq_init(&s, &p, NULL, 0, 4, 0), 0);
        ck_assert_int_eq(sampler_sample(&p, &s, x, 4, (const int32_t[]) { 2 }, 1, &res), -EDOM);
        ck_assert_ptr_null(res.top);
        ck_assert_int_eq(res.token, -1);
        sampler_seq_free(&s);

        sampling_params_init_default(&p);
        ck_assert_int_eq(sampler_seq_init(&s, &p, NULL, 0, 4, 0), 0);
        ck_assert_int_eq(sampler_sample(&p, &s, nans, 4, NULL, 0, &res), -EDOM);
        sampler_seq_free(&s);
}
END_TEST

/* ---- reproducibility -------------------------------------------------------------------- */

static void run_sequence(const struct sampling_params *p, uint64_t fallback, int32_t *tokens, int steps,
                         struct sampler_seq *other, const struct sampling_params *other_p) {
        struct sampler_seq s;
        float x[300];

        ck_assert_int_eq(sampler_seq_init(&s, p, NULL, 0, 300, fallback), 0);
        for (int i = 0; i < steps; i++) {
                fill_normal(x, 300, 1000 + (uint64_t) i, 1.0);
                tokens[i] = sample_once(p, &s, x, 300, NULL, 0);
                ck_assert_int_eq(sampler_seq_accept(&s, tokens[i]), 0);
                if (other) {
                        /* Something else runs in between. */
                        fill_normal(x, 300, 5000 + (uint64_t) i, 1.0);
                        sample_once(other_p, other, x, 300, NULL, 0);
                }
        }
        sampler_seq_free(&s);
}

START_TEST(test_seed_reproducible) {
        struct sampling_params p, q;
        struct sampler_seq other;
        int32_t a[64], b[64], c[64], d[64], e[64];

        sampling_params_init_default(&p);
        p.temperature = 1.0;
        p.top_p = 0.95;
        p.has_seed = true;
        p.seed = 42;
        sampling_params_init_default(&q);

        run_sequence(&p, 1, a, 64, NULL, NULL);
        /* Same seed, another fallback, and another sequence sampled in between. */
        ck_assert_int_eq(sampler_seq_init(&other, &q, NULL, 0, 300, 99), 0);
        run_sequence(&p, 2, b, 64, &other, &q);
        sampler_seq_free(&other);
        ck_assert(memcmp(a, b, sizeof(a)) == 0);

        p.seed = 43;
        run_sequence(&p, 1, c, 64, NULL, NULL);
        ck_assert(memcmp(a, c, sizeof(a)) != 0);

        /* Unseeded: the fallback decides. */
        p.has_seed = false;
        run_sequence(&p, 7, d, 64, NULL, NULL);
        run_sequence(&p, 7, e, 64, NULL, NULL);
        ck_assert(memcmp(d, e, sizeof(d)) == 0);
        run_sequence(&p, 8, e, 64, NULL, NULL);
        ck_assert(memcmp(d, e, sizeof(d)) != 0);
        /* A fallback value is not the same stream as the same number given as a seed. */
        p.has_seed = true;
        p.seed = 7;
        run_sequence(&p, 0, e, 64, NULL, NULL);
        ck_assert(memcmp(d, e, sizeof(d)) != 0);
}
END_TEST

/* ---- logprobs --------------------------------------------------------------------------- */

static void log_softmax_ref(const float *x, int32_t n, double *lp) {
        double m = -INFINITY, sum = 0.0;

        for (int32_t i = 0; i < n; i++)
                if (x[i] > m)
                        m = x[i];
        for (int32_t i = 0; i < n; i++)
                sum += exp((double) x[i] - m);
        for (int32_t i = 0; i < n; i++)
                lp[i] = (double) x[i] - m - log(sum);
}

static void check_logprobs(const float *raw, int32_t n, int32_t n_top, const struct sample_result *res) {
        double *lp = malloc((size_t) n * sizeof(double));
        int32_t rank = 0;
        bool chosen_in_top = false;

        ck_assert_ptr_nonnull(lp);
        log_softmax_ref(raw, n, lp);
        ck_assert_double_eq_tol(res->logprob, lp[res->token], 1e-5);
        for (int32_t i = 0; i < n; i++)
                if (raw[i] >= raw[res->token])
                        rank++;
        ck_assert_int_eq(res->rank, rank);

        for (int32_t j = 0; j < n_top; j++) {
                const struct token_logprob *e = &res->top[j];
                int32_t better = 0;

                ck_assert_double_eq_tol(e->logprob, lp[e->token], 1e-5);
                /* Exactly j tokens rank before entry j: the top N, sorted, lower id first on ties. */
                for (int32_t i = 0; i < n; i++)
                        if (raw[i] > raw[e->token] || (raw[i] == raw[e->token] && i < e->token))
                                better++;
                ck_assert_int_eq(better, j);
                if (e->token == res->token)
                        chosen_in_top = true;
        }
        if (chosen_in_top)
                ck_assert_uint_eq(res->n_top, (size_t) n_top);
        else {
                ck_assert_uint_eq(res->n_top, (size_t) n_top + 1);
                ck_assert_int_eq(res->top[n_top].token, res->token);
                ck_assert_float_eq(res->top[n_top].logprob, res->logprob);
        }
        free(lp);
}

START_TEST(test_logprobs_raw) {
        static const int32_t prompt[] = { 3, 9, 27 };
        const struct logit_bias bias[] = { { 11, 4.0f } };
        const int32_t n = 500;
        struct sampling_params p;
        struct sampler_seq s;
        float raw[500], x[500];

        sampling_params_init_default(&p);
        p.temperature = 0.7;
        p.top_k = 40;
        p.repetition_penalty = 1.2;
        p.frequency_penalty = 0.5;
        p.logit_bias = bias;
        p.n_logit_bias = 1;
        p.logprobs = 5;
        ck_assert_int_eq(sampler_seq_init(&s, &p, prompt, ELEMENTS(prompt), n, 3), 0);
        for (int step = 0; step < 40; step++) {
                struct sample_result res;

                fill_normal(raw, n, 300 + (uint64_t) step, 2.0);
                memcpy(x, raw, sizeof(x));
                ck_assert_int_eq(sampler_sample(&p, &s, x, n, NULL, 0, &res), 0);
                check_logprobs(raw, n, 5, &res);
                ck_assert_int_eq(sampler_seq_accept(&s, res.token), 0);
                sample_result_clear(&res);
                ck_assert_ptr_null(res.top);
        }
        sampler_seq_free(&s);
}
END_TEST

START_TEST(test_logprobs_n_plus_one) {
        static const int32_t allowed[] = { 17 };
        const int32_t n = 64;
        struct sampling_params p = greedy_params();
        struct sampler_seq s;
        struct sample_result res;
        float raw[64], x[64];

        for (int32_t i = 0; i < n; i++)
                raw[i] = (float) ((i * 37) % 64) * 0.1f;

        /* The chosen token is among the top 3: 3 entries. */
        p.logprobs = 3;
        ck_assert_int_eq(sampler_seq_init(&s, &p, NULL, 0, n, 0), 0);
        memcpy(x, raw, sizeof(x));
        ck_assert_int_eq(sampler_sample(&p, &s, x, n, NULL, 0, &res), 0);
        ck_assert_uint_eq(res.n_top, 3);
        ck_assert_int_eq(res.top[0].token, res.token);
        ck_assert_int_eq(res.rank, 1);
        check_logprobs(raw, n, 3, &res);
        sample_result_clear(&res);
        sampler_seq_free(&s);

        /* Forced to a poor token: top 3 plus it. */
        p.has_allowed_token_ids = true;
        p.allowed_token_ids = allowed;
        p.n_allowed_token_ids = 1;
        ck_assert_int_eq(sampler_seq_init(&s, &p, NULL, 0, n, 0), 0);
        memcpy(x, raw, sizeof(x));
        ck_assert_int_eq(sampler_sample(&p, &s, x, n, NULL, 0, &res), 0);
        ck_assert_int_eq(res.token, 17);
        ck_assert_uint_eq(res.n_top, 4);
        check_logprobs(raw, n, 3, &res);
        sample_result_clear(&res);

        /* logprobs = 0: the chosen token alone. */
        p.logprobs = 0;
        memcpy(x, raw, sizeof(x));
        ck_assert_int_eq(sampler_sample(&p, &s, x, n, NULL, 0, &res), 0);
        ck_assert_uint_eq(res.n_top, 1);
        ck_assert_int_eq(res.top[0].token, 17);
        check_logprobs(raw, n, 0, &res);
        sample_result_clear(&res);

        /* Not requested: nothing. */
        p.logprobs = -1;
        memcpy(x, raw, sizeof(x));
        ck_assert_int_eq(sampler_sample(&p, &s, x, n, NULL, 0, &res), 0);
        ck_assert_int_eq(res.token, 17);
        ck_assert_ptr_null(res.top);
        ck_assert_uint_eq(res.n_top, 0);
        ck_assert(isnan(res.logprob));
        ck_assert_int_eq(res.rank, 0);
        sample_result_clear(&res);
        sampler_seq_free(&s);
}
END_TEST

START_TEST(test_logprobs_ties_and_whole_vocab) {
        struct sampling_params p = greedy_params();
        struct sampler_seq s;
        struct sample_result res;
        float raw[6] = { 1.0f, 2.0f, 2.0f, 0.5f, 2.0f, 1.0f }, x[6];

        /* All six: the whole vocabulary, ties by id. */
        p.logprobs = 6;
        ck_assert_int_eq(sampler_seq_init(&s, &p, NULL, 0, 6, 0), 0);
        memcpy(x, raw, sizeof(x));
        ck_assert_int_eq(sampler_sample(&p, &s, x, 6, NULL, 0, &res), 0);
        ck_assert_int_eq(res.token, 1);
        ck_assert_int_eq(res.rank, 3); /* the tied ones count */
        ck_assert_uint_eq(res.n_top, 6);
        ck_assert_int_eq(res.top[0].token, 1);
        ck_assert_int_eq(res.top[1].token, 2);
        ck_assert_int_eq(res.top[2].token, 4);
        ck_assert_int_eq(res.top[3].token, 0);
        ck_assert_int_eq(res.top[4].token, 5);
        ck_assert_int_eq(res.top[5].token, 3);
        check_logprobs(raw, 6, 6, &res);
        sample_result_clear(&res);

        /* More than the vocabulary is capped to it. */
        p.logprobs = 10;
        memcpy(x, raw, sizeof(x));
        ck_assert_int_eq(sampler_sample(&p, &s, x, 6, NULL, 0, &res), 0);
        ck_assert_uint_eq(res.n_top, 6);
        sample_result_clear(&res);
        sampler_seq_free(&s);
}
END_TEST

/* ---- state ------------------------------------------------------------------------------ */

START_TEST(test_state_errors) {
        static const int32_t bad_prompt[] = { 1, 10 };
        struct sampling_params p;
        struct sampler_seq s;
        struct sample_result res;
        float x[10] = {};

        sampling_params_init_default(&p);
        ck_assert_int_eq(sampler_seq_init(&s, &p, bad_prompt, 2, 10, 0), -EINVAL);
        sampler_seq_free(&s); /* harmless after a failed init */
        ck_assert_int_eq(sampler_seq_init(&s, &p, NULL, 3, 10, 0), -EINVAL);
        ck_assert_int_eq(sampler_seq_init(&s, &p, NULL, 0, 0, 0), -EINVAL);

        ck_assert_int_eq(sampler_seq_init(&s, &p, bad_prompt, 1, 10, 0), 0);
        ck_assert_int_eq(sampler_seq_accept(&s, -1), -EINVAL);
        ck_assert_int_eq(sampler_seq_accept(&s, 10), -EINVAL);
        ck_assert_uint_eq(s.n_output, 0);
        ck_assert_int_eq(sampler_sample(&p, &s, x, 9, NULL, 0, &res), -EINVAL);
        ck_assert_int_eq(sampler_sample(&p, &s, x, 10, (const int32_t[]) { 10 }, 1, &res), -EINVAL);
        ck_assert_int_eq(sampler_sample(&p, &s, x, 10, (const int32_t[]) { -1 }, 1, &res), -EINVAL);
        ck_assert_int_eq(sampler_sample(&p, &s, x, 10, NULL, 1, &res), -EINVAL);
        ck_assert_int_eq(sampler_sample(&p, &s, x, 10, NULL, 0, NULL), -EINVAL);
        sampler_seq_free(&s);
        sampler_seq_free(&s);
        sampler_seq_free(NULL);
        sample_result_clear(NULL);
}
END_TEST

START_TEST(test_many_distinct_outputs) {
        /* Enough distinct output tokens to grow the count table several times. */
        const int32_t n = 20000;
        struct sampling_params p = greedy_params();
        struct sampler_seq s;
        float *x = malloc((size_t) n * sizeof(float));
        float freq = 0.01f;

        ck_assert_ptr_nonnull(x);
        p.frequency_penalty = 0.01;
        ck_assert_int_eq(sampler_seq_init(&s, &p, NULL, 0, n, 0), 0);
        for (int32_t i = 0; i < 3000; i++)
                for (int32_t r = 0; r <= i % 3; r++)
                        ck_assert_int_eq(sampler_seq_accept(&s, (i * 7) % n), 0);
        ck_assert_uint_eq(s.n_output, 6000);
        ck_assert_uint_eq(s.n_counts, 3000);
        for (int32_t i = 0; i < n; i++)
                x[i] = 0.0f;
        sample_once(&p, &s, x, n, NULL, 0);
        for (int32_t i = 0; i < 3000; i++)
                ck_assert_float_eq_tol(x[(i * 7) % n], 0.0f - freq * (float) (i % 3 + 1), 1e-7f);
        ck_assert_float_eq(x[1], 0.0f);
        sampler_seq_free(&s);
        free(x);
}
END_TEST

static Suite *sampler_suite(void) {
        Suite *suite = suite_create("sampler");
        TCase *tc;

        tc = tcase_create("rng");
        tcase_add_test(tc, test_rng_reference_values);
        tcase_add_test(tc, test_rng_uniform);
        suite_add_tcase(suite, tc);

        tc = tcase_create("params");
        tcase_add_test(tc, test_defaults);
        tcase_add_test(tc, test_validate_accepts_edges);
        tcase_add_loop_test(tc, test_validate_rejects, 0, _BAD_MAX);
        tcase_add_test(tc, test_temperature_clamp);
        suite_add_tcase(suite, tc);

        tc = tcase_create("greedy");
        tcase_add_test(tc, test_greedy_argmax);
        tcase_add_test(tc, test_greedy_ties);
        suite_add_tcase(suite, tc);

        tc = tcase_create("random");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_temperature_distribution);
        tcase_add_test(tc, test_top_k_distribution);
        tcase_add_test(tc, test_top_p_distribution);
        tcase_add_test(tc, test_min_p_distribution);
        tcase_add_test(tc, test_top_k_one_and_tiny_top_p_are_greedy);
        tcase_add_test(tc, test_top_k_keeps_ties);
        tcase_add_loop_test(tc, test_filters_large_vocab, 0, 2);
        suite_add_tcase(suite, tc);

        tc = tcase_create("processing");
        tcase_add_test(tc, test_repetition_penalty_values);
        tcase_add_test(tc, test_frequency_presence_values);
        tcase_add_test(tc, test_penalties_combined_order);
        tcase_add_test(tc, test_logit_bias);
        tcase_add_test(tc, test_allowed_token_ids);
        tcase_add_test(tc, test_bad_words);
        tcase_add_loop_test(tc, test_min_tokens, 0, 2);
        tcase_add_test(tc, test_nothing_to_sample);
        suite_add_tcase(suite, tc);

        tc = tcase_create("seed");
        tcase_add_test(tc, test_seed_reproducible);
        suite_add_tcase(suite, tc);

        tc = tcase_create("logprobs");
        tcase_add_test(tc, test_logprobs_raw);
        tcase_add_test(tc, test_logprobs_n_plus_one);
        tcase_add_test(tc, test_logprobs_ties_and_whole_vocab);
        suite_add_tcase(suite, tc);

        tc = tcase_create("state");
        tcase_add_test(tc, test_state_errors);
        tcase_add_test(tc, test_many_distinct_outputs);
        suite_add_tcase(suite, tc);

        return suite;
}

int main(void) {
        SRunner *runner = srunner_create(sampler_suite());
        int failed;

        srunner_run_all(runner, CK_NORMAL);
        failed = srunner_ntests_failed(runner);
        srunner_free(runner);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
