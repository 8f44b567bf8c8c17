/* SPDX-License-Identifier: MIT */
#pragma once

/* Picks the next token of one sequence from the model's logits, with vLLM's semantics:
 *
 *   raw logprobs (log_softmax of the logits as they came, when requested)
 *   -> allowed_token_ids mask -> bad_words mask -> logit_bias -> min_tokens mask of EOS and stop_token_ids
 *   -> repetition penalty (prompt and output tokens) -> frequency, presence penalties (output)
 *   -> greedy argmax when the temperature is 0, else
 *      temperature -> softmax -> min_p -> top_k -> top_p -> draw from the sequence's RNG.
 *
 * One sampler_seq per sequence; it is used by one thread at a time and the sampler keeps no
 * global state, so sequences can be sampled in parallel. Cost is O(n_vocab) per token, no
 * sorting: top_p finds its cut-off by a radix selection on the probabilities' bits, top_k
 * by a heap of k (radix selection above k = 1024); the passes over the vocabulary run on
 * 4-float vectors. */

#include <stddef.h>
#include <stdint.h>

#include "rng.h"
#include "sampling-params.h"

struct token_logprob {
        int32_t token;
        float logprob;
};

struct sample_result {
        int32_t token;
        /* The rest is filled only when params->logprobs >= 0 (else logprob is NAN, rank 0,
         * top NULL), and is computed from the raw logits, before any processing. */
        float logprob; /* of the chosen token */
        int32_t rank;  /* tokens whose logprob is >= the chosen one's, itself included (1 = best) */
        /* The top N (params->logprobs) tokens, sorted by logprob descending (lower id first
         * on ties), then the chosen token when it is not among them: N or N + 1 entries.
         * Owned by the result: free with sample_result_clear(). */
        struct token_logprob *top;
        size_t n_top;
};

/* Frees what the result owns and empties it; safe on an emptied or zeroed result. */
void sample_result_clear(struct sample_result *r);
/* Clears n results and frees their array; safe on NULL. */
void sample_results_free(struct sample_result *s, uint32_t n);
/* A new array (never of size 0) holding a copy of n results, their top entries included.
 * -ENOMEM. */
int sample_results_copy(const struct sample_result *src, uint32_t n, struct sample_result **ret);

struct token_count {
        int32_t token; /* -1: empty slot */
        uint32_t count;
};

/* Sampling state of one sequence. Fields are private to sampler.c. */
struct sampler_seq {
        int32_t n_vocab;
        uint32_t n_output; /* output tokens accepted so far */
        struct rng rng;

        uint64_t *seen; /* (n_vocab bits) token is in the prompt or the output */

        struct token_count *counts; /* (counts_cap) open addressing: each distinct output token */
        size_t counts_cap;          /* 0 or a power of two */
        size_t n_counts;

        /* The latest output tokens, as many as the longest bad word's prefix: a ring where
         * output token i is at i % recent_cap. */
        int32_t *recent;
        uint32_t recent_cap;

        /* Scratch, allocated on first need and kept. */
        uint64_t *mask; /* (n_vocab bits) allowed_token_ids */
        float *raw;     /* (n_vocab) copy of the raw logits, for logprobs */
        double *hist;   /* (2048) histogram of the top_p / top_k selection, or heap of top_k */
};

/* Sets up the state of a new sequence. The RNG is seeded from params->seed when the request
 * has one, so that a seed always gives the same tokens, else from fallback_seed, which the
 * caller takes from an engine-wide counter. The prompt ids must be in [0, n_vocab).
 * Returns 0, -EINVAL or -ENOMEM (the state is then empty and sampler_seq_free() is a no-op). */
int sampler_seq_init(struct sampler_seq *s, const struct sampling_params *params, const int32_t *prompt,
                     size_t n_prompt, int32_t n_vocab, uint64_t fallback_seed);

/* Records an output token (for the penalties and min_tokens). Returns 0, -EINVAL for an id
 * outside the vocabulary, or -ENOMEM (the state is then unchanged). */
int sampler_seq_accept(struct sampler_seq *s, int32_t token);

void sampler_seq_free(struct sampler_seq *s);

/* Samples the next token of the sequence. logits (n_vocab) are modified in place. eog_ids
 * (n_eog_ids, each below n_vocab; NULL when 0) are the model's end-of-generation tokens: they
 * are masked until min_tokens like the stop ids. The params must be the validated ones the sequence was
 * created with. Does not record the token: call sampler_seq_accept() with it.
 * Returns 0; -EINVAL for arguments that do not fit the state; -ENOMEM; -EDOM when no token
 * can be sampled (every token masked, or no finite logit). On error *out is empty. */
int sampler_sample(const struct sampling_params *p, struct sampler_seq *s, float *logits, int32_t n_vocab,
                   const int32_t *eog_ids, size_t n_eog_ids, struct sample_result *out);

/* The logprob and rank of token, and the top n_top entries (plus token when it is not among
 * them), from raw logits: what prompt_logprobs reports for each prompt token. Returns 0,
 * -EINVAL or -ENOMEM (out is then empty). */
int sampler_token_logprobs(const float *logits, int32_t n_vocab, int32_t token, int32_t n_top,
                           struct sample_result *out);
