/* SPDX-License-Identifier: MIT */
#pragma once

/* One generation request inside the engine: its tokens (prompt, then output), how many of
 * them have KV computed, its KV blocks, its sampler state and what it produced. Only token
 * ids live here; text belongs to the frontend. */

#include <stdbool.h>
#include <stdint.h>

#include "engine-config.h"
#include "error.h"
#include "kv-blocks.h"
#include "pooling.h"
#include "sampler.h"
#include "sampling-params.h"

enum request_state {
        REQUEST_WAITING, /* new, or preempted: needs (re)computing from num_computed_tokens */
        REQUEST_RUNNING,
        REQUEST_FINISHED,
};

enum finish_reason {
        FINISH_NONE = 0,
        FINISH_STOP,   /* EOS or a stop token id */
        FINISH_LENGTH, /* max_tokens or max_model_len */
        FINISH_ABORT,
        FINISH_ERROR,
};

const char *finish_reason_name(enum finish_reason r);

/* How the scheduling policies treat a request. */
struct request_class {
        int32_t priority;       /* lower is served first under the priority policy */
        /* The slo policy's: latency-sensitive requests get their tokens by deadlines (slo
         * seconds per output token after the first, ttft_slo seconds to the first; 0 = the
         * engine's default); best-effort ones get the rest. */
        bool latency_sensitive;
        double slo;
        double ttft_slo;
};

/* A request as it is submitted: the one description that travels from the host to the
 * engine's request. The host's spec borrows its arrays and goes to async_llm_generate(),
 * which validates it (request_spec_validate()) and makes each engine request's spec own
 * its arrays (request_spec_own()); that spec is then moved, never copied, into the engine
 * thread's command and on into the engine's request, and whoever holds it last frees it
 * (request_spec_done()). */
struct request_spec {
        const char *id;
        const int32_t *prompt;   /* (n_prompt) token ids, or NULL to tokenize prompt_text */
        uint32_t n_prompt;
        const char *prompt_text; /* for async_llm_generate() alone; special tokens written in it are parsed */
        struct sampling_params params;
        struct request_class class;
        double arrival_time;     /* CLOCK_MONOTONIC seconds; 0 = now */
        void *owner;             /* the caller's, handed back with every output */
        /* encode: one pooled vector from the prompt's final hidden states, no tokens
         * generated; params are not used */
        bool encode;
        struct pooling_params pooling;
};

/* Checks the request's own fields against the engine's limits: a non-empty id, a prompt of
 * token ids in [0, n_vocab) shorter than max_model_len, the class's slo and ttft_slo, and
 * the sampling params. -EINVAL with a message that names the field and its allowed range. */
int request_spec_validate(const struct request_spec *spec, const struct engine_config *config, int32_t n_vocab,
                          struct error *err);

/* Replaces what the spec borrows (id, prompt, and the params' logit_bias, allowed_token_ids
 * and stop_token_ids) with copies of its own. Stop strings and prompt_text are the
 * frontend's: the owned spec has none. -ENOMEM, with nothing left to free. */
int request_spec_own(struct request_spec *spec);
/* Frees what an owned spec holds and empties it; safe on an emptied one. */
void request_spec_done(struct request_spec *spec);

struct request {
        char *id;
        void *owner;
        uint64_t arrival_order;
        /* slo and ttft_slo with the defaults resolved; latency_sensitive false once demoted
         * by admission control */
        struct request_class class;
        double sort_key;        /* the slo policy's order within its class, for the current step */
        /* The slo policy's aim for a latency-sensitive request: the time its latest output
         * token was aimed at, and how many output tokens it had then (0: none aimed yet). */
        double aimed_token_time;
        uint32_t aimed_n_out;

        struct sampling_params params; /* its arrays point into the request's own copies */
        struct sampler_seq sampler;

        int32_t *tokens;  /* (cap) prompt, then output */
        uint32_t n_prompt;
        uint32_t n_tokens;
        uint32_t cap;
        uint32_t num_computed_tokens; /* tokens whose KV is in blocks */
        uint32_t num_cached_tokens;   /* served by the prefix cache on first admission */
        bool admitted_once;
        uint32_t n_preemptions;
        uint32_t n_reported; /* output tokens already handed to the frontend */
        struct kv_block_list blocks;

        /* One sample per output token; top and logprob filled only when logprobs >= 0. */
        struct sample_result *samples;
        /* (n_prompt) when params.prompt_logprobs >= 0: entry p > 0 rates prompt token p
         * given the ones before it; entry 0 stays empty (token -1). Filled in order as
         * chunks run; n_prompt_logprobs counts the entries done, 1 + the rated ones. */
        struct sample_result *prompt_logprobs;
        uint32_t n_prompt_logprobs;

        enum request_state state;
        enum finish_reason finish_reason;
        int32_t stop_token; /* the stop_token_ids entry that ended it, else -1 */

        bool encode; /* the spec's */
        struct pooling_params pooling;
        struct pooler pooler;     /* encode: the states pooled so far */
        float *embedding;         /* encode: the result (n_embedding), once the prompt is computed */
        uint32_t n_embedding;

        double arrival_time;
        double scheduled_time;  /* first admission */
        double first_token_time;
        double last_token_time;
};

/* Takes the owned spec over, even on failure: *spec is left empty. */
int request_new(struct request_spec *spec, uint64_t arrival_order, int32_t n_vocab, uint64_t fallback_seed,
                struct request **ret, struct error *err);
void request_free(struct request *r);

static inline uint32_t request_num_output(const struct request *r) {
        return r->n_tokens - r->n_prompt;
}

/* Appends a sampled token (taking ownership of the sample's top array). */
int request_append(struct request *r, struct sample_result *sample);
