/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "request.h"

const char *finish_reason_name(enum finish_reason r) {
        switch (r) {
        case FINISH_STOP: return "stop";
        case FINISH_LENGTH: return "length";
        case FINISH_ABORT: return "abort";
        case FINISH_ERROR: return "error";
        case FINISH_NONE: break;
        }
        return NULL;
}

int request_spec_validate(const struct request_spec *spec, const struct engine_config *config, int32_t n_vocab,
                          struct error *err) {
        int r;
        if (!spec->id || !*spec->id)
                return error_set(err, EINVAL, "request_id must be a non-empty string");
        if ((r = sampling_params_validate(&spec->params, n_vocab, config->max_logprobs, err)) < 0)
                return r;
        if (!(spec->class.slo >= 0 && spec->class.slo <= 3600))
                return error_set(err, EINVAL, "slo must be in (0, 3600] seconds per output token (0 = the default), got %g",
                                 spec->class.slo);
        if (!(spec->class.ttft_slo >= 0 && spec->class.ttft_slo <= 3600))
                return error_set(err, EINVAL, "ttft_slo must be in (0, 3600] seconds (0 = the default), got %g",
                                 spec->class.ttft_slo);
        if (!spec->prompt || spec->n_prompt == 0)
                return error_set(err, EINVAL, "prompt is empty: give at least one token");
        if (spec->n_prompt >= config->max_model_len)
                return error_set(err, EINVAL, "prompt has %u tokens; it must be shorter than max_model_len (%u)",
                                 spec->n_prompt, config->max_model_len);
        for (uint32_t i = 0; i < spec->n_prompt; i++)
                if (spec->prompt[i] < 0 || spec->prompt[i] >= n_vocab)
                        return error_set(err, EINVAL, "prompt token id %" PRId32 " at position %u is outside the vocabulary [0, %" PRId32 ")",
                                         spec->prompt[i], i, n_vocab);
        return 0;
}

/* A copy of n items of size bytes; NULL for none, and on failure (*failed set). */
static void *copy_array(const void *src, size_t n, size_t size, bool *failed) {
        if (n == 0 || !src)
                return NULL;
        void *p = malloc(n * size);
        if (!p)
                *failed = true;
        else
                memcpy(p, src, n * size);
        return p;
}

int request_spec_own(struct request_spec *spec) {
        struct sampling_params *p = &spec->params;
        bool failed = false;
        if (spec->id && !(spec->id = strdup(spec->id)))
                failed = true;
        spec->prompt = copy_array(spec->prompt, spec->n_prompt, sizeof(*spec->prompt), &failed);
        spec->prompt_text = NULL;
        p->logit_bias = copy_array(p->logit_bias, p->n_logit_bias, sizeof(*p->logit_bias), &failed);
        p->allowed_token_ids = copy_array(p->allowed_token_ids, p->n_allowed_token_ids, sizeof(int32_t), &failed);
        p->stop_token_ids = copy_array(p->stop_token_ids, p->n_stop_token_ids, sizeof(int32_t), &failed);
        size_t n_bad_word_ids = p->n_bad_word_sequences ? p->bad_words_ends[p->n_bad_word_sequences - 1] : 0;
        p->bad_words_token_ids = copy_array(p->bad_words_token_ids, n_bad_word_ids, sizeof(int32_t), &failed);
        p->bad_words_ends = copy_array(p->bad_words_ends, p->n_bad_word_sequences, sizeof(uint32_t), &failed);
        p->stop = NULL;
        p->n_stop = 0;
        p->bad_words = NULL;
        p->n_bad_words = 0;
        if (failed) {
                request_spec_done(spec);
                return -ENOMEM;
        }
        return 0;
}

void request_spec_done(struct request_spec *spec) {
        free((void *) spec->id);
        free((void *) spec->prompt);
        free((void *) spec->params.logit_bias);
        free((void *) spec->params.allowed_token_ids);
        free((void *) spec->params.stop_token_ids);
        free((void *) spec->params.bad_words_token_ids);
        free((void *) spec->params.bad_words_ends);
        *spec = (struct request_spec) { 0 };
}

int request_new(struct request_spec *spec, uint64_t arrival_order, int32_t n_vocab, uint64_t fallback_seed,
                struct request **ret, struct error *err) {
        struct request *r = calloc(1, sizeof(*r));
        if (!r) {
                request_spec_done(spec);
                return error_set(err, ENOMEM, "out of memory");
        }
        /* moved: the request frees them from now on */
        r->id = (char *) spec->id;
        r->tokens = (int32_t *) spec->prompt;
        r->params = spec->params;
        r->owner = spec->owner;
        r->arrival_order = arrival_order;
        r->class = spec->class;
        r->encode = spec->encode;
        r->pooling = spec->pooling;
        r->n_prompt = r->n_tokens = spec->n_prompt;
        r->arrival_time = spec->arrival_time > 0 ? spec->arrival_time : monotonic_seconds();
        *spec = (struct request_spec) { 0 };

        const struct sampling_params *p = &r->params;
        r->cap = r->n_prompt + 16;
        int32_t *tokens = realloc(r->tokens, r->cap * sizeof(int32_t));
        if (tokens)
                r->tokens = tokens;
        r->samples = calloc(16, sizeof(*r->samples));
        if (p->prompt_logprobs >= 0) {
                r->prompt_logprobs = calloc(r->n_prompt, sizeof(*r->prompt_logprobs));
                if (r->prompt_logprobs) {
                        r->prompt_logprobs[0] = (struct sample_result) { .token = -1, .logprob = NAN };
                        r->n_prompt_logprobs = 1;
                }
        }
        r->stop_token = -1;
        if (!tokens || !r->samples || (p->prompt_logprobs >= 0 && !r->prompt_logprobs)) {
                request_free(r);
                return error_set(err, ENOMEM, "out of memory");
        }
        int rc = sampler_seq_init(&r->sampler, &r->params, r->tokens, r->n_prompt, n_vocab, fallback_seed);
        if (rc < 0) {
                r->sampler = (struct sampler_seq) { 0 };
                request_free(r);
                return error_set(err, -rc, "cannot set up the sampler");
        }
        *ret = r;
        return 0;
}

void request_free(struct request *r) {
        if (!r)
                return;
        sample_results_free(r->samples, request_num_output(r));
        sample_results_free(r->prompt_logprobs, r->n_prompt_logprobs);
        sampler_seq_free(&r->sampler);
        kv_block_list_free(&r->blocks);
        pooler_done(&r->pooler);
        free(r->embedding);
        free((void *) r->params.logit_bias);
        free((void *) r->params.allowed_token_ids);
        free((void *) r->params.stop_token_ids);
        free((void *) r->params.bad_words_token_ids);
        free((void *) r->params.bad_words_ends);
        free(r->tokens);
        free(r->id);
        free(r);
}

int request_append(struct request *r, struct sample_result *sample) {
        uint32_t n_out = request_num_output(r);
        if (r->n_tokens == r->cap) {
                /* tokens holds cap entries, samples cap - n_prompt: they grow together */
                uint32_t cap = r->cap * 2;
                int32_t *tokens = realloc(r->tokens, cap * sizeof(int32_t));
                if (!tokens)
                        return -ENOMEM;
                r->tokens = tokens;
                struct sample_result *samples = realloc(r->samples, (cap - r->n_prompt) * sizeof(*samples));
                if (!samples)
                        return -ENOMEM;
                r->samples = samples;
                r->cap = cap;
        }
        r->samples[n_out] = *sample;
        *sample = (struct sample_result) { 0 };
        r->tokens[r->n_tokens++] = r->samples[n_out].token;
        return sampler_seq_accept(&r->sampler, r->samples[n_out].token);
}
