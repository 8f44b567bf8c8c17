/* SPDX-License-Identifier: MIT */
#include <errno.h>
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

static void *copy_array(const void *src, size_t n, size_t size) {
        if (n == 0)
                return NULL;
        void *p = malloc(n * size);
        if (p)
                memcpy(p, src, n * size);
        return p;
}

int request_new(const struct request_spec *spec, uint64_t arrival_order, int32_t n_vocab, uint64_t fallback_seed,
                struct request **ret, struct error *err) {
        const struct sampling_params *p = spec->params;
        struct request *r = calloc(1, sizeof(*r));
        if (!r)
                return error_set(err, ENOMEM, "out of memory");
        r->id = strdup(spec->id);
        r->owner = spec->owner;
        r->arrival_order = arrival_order;
        r->priority = spec->priority;
        r->latency_sensitive = spec->latency_sensitive;
        r->slo = spec->slo;
        r->ttft_slo = spec->ttft_slo;
        r->params = *p;
        r->params.logit_bias = copy_array(p->logit_bias, p->n_logit_bias, sizeof(*p->logit_bias));
        r->params.allowed_token_ids = copy_array(p->allowed_token_ids, p->n_allowed_token_ids, sizeof(int32_t));
        r->params.stop_token_ids = copy_array(p->stop_token_ids, p->n_stop_token_ids, sizeof(int32_t));
        r->n_prompt = r->n_tokens = spec->n_prompt;
        r->cap = spec->n_prompt + 16;
        r->tokens = malloc(r->cap * sizeof(int32_t));
        r->samples = calloc(16, sizeof(*r->samples));
        r->params.stop = NULL; /* stop strings are the frontend's */
        r->params.n_stop = 0;
        if (p->prompt_logprobs >= 0) {
                r->prompt_logprobs = calloc(spec->n_prompt, sizeof(*r->prompt_logprobs));
                if (r->prompt_logprobs) {
                        r->prompt_logprobs[0] = (struct sample_result) { .token = -1, .logprob = NAN };
                        r->n_prompt_logprobs = 1;
                }
        }
        r->stop_token = -1;
        r->arrival_time = spec->arrival_time > 0 ? spec->arrival_time : monotonic_seconds();
        if (!r->id || !r->tokens || !r->samples || (p->n_logit_bias && !r->params.logit_bias) ||
            (p->n_allowed_token_ids && !r->params.allowed_token_ids) ||
            (p->n_stop_token_ids && !r->params.stop_token_ids) || (p->prompt_logprobs >= 0 && !r->prompt_logprobs)) {
                request_free(r);
                return error_set(err, ENOMEM, "out of memory");
        }
        memcpy(r->tokens, spec->prompt, spec->n_prompt * sizeof(int32_t));
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
        free((void *) r->params.logit_bias);
        free((void *) r->params.allowed_token_ids);
        free((void *) r->params.stop_token_ids);
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
