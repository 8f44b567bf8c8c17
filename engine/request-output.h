/* SPDX-License-Identifier: MIT */
#pragma once

/* What a generation request yields to its consumer, with vLLM's RequestOutput and
 * CompletionOutput fields. Each output owns all its memory. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "request.h"
#include "sampler.h"

struct completion_output {
        uint32_t index;                   /* which of the request's n completions */
        char *text;                       /* NUL-terminated; text_len bytes (may hold NULs) */
        size_t text_len;
        int32_t *token_ids;               /* (n_token_ids) */
        uint32_t n_token_ids;
        double cumulative_logprob;        /* of every token so far; NAN without logprobs */
        struct sample_result *logprobs;   /* (n_token_ids) when logprobs were asked for */
        enum finish_reason finish_reason; /* FINISH_NONE while it runs */
        char *stop_reason_text;           /* the stop string that ended it, or NULL */
        int32_t stop_reason_token;        /* the stop token id that ended it, or -1 */
};

/* Monotonic seconds (CLOCK_MONOTONIC); 0 = not happened yet. */
struct request_metrics {
        double arrival_time;
        double scheduled_time; /* first admitted to a batch: queued until then */
        double first_token_time;
        double last_token_time;
        double finished_time;
};

struct request_output {
        char *request_id;
        struct completion_output *outputs; /* (n_outputs) */
        uint32_t n_outputs;
        bool finished;                     /* true on the request's last output only */
        uint32_t num_cached_tokens;        /* prompt tokens served by the prefix cache */
        uint32_t n_prompt;
        struct sample_result *prompt_logprobs; /* (n_prompt), entry 0 empty; NULL when not asked for or already sent */
        struct request_metrics metrics;
        char *error;                       /* why the request failed, when it did */
        int error_code;                    /* -errno with error: -EAGAIN = refused as overloaded */
        double retry_after;                /* with -EAGAIN: seconds until a retry may succeed */
        float *embedding;                  /* encode: the pooled vector (n_embedding), on the last output */
        uint32_t n_embedding;
};

void request_output_free(struct request_output *o);
