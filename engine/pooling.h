/* SPDX-License-Identifier: MIT */
#pragma once

/* encode's pooling (vLLM's PoolingParams): one vector per prompt from the final hidden states
 * of its tokens (after the output norm), fed chunk by chunk as prefill computes them. */

#include <stdbool.h>
#include <stdint.h>

#include "error.h"

enum pooling_type {
        POOLING_LAST, /* the last token's state: what a causal model has seen all of the prompt in */
        POOLING_MEAN, /* the mean over every token */
        POOLING_CLS,  /* the first token's state */
        _POOLING_MAX,
        /* a request that names none: the model's, as the engine's configuration says */
        POOLING_MODEL_DEFAULT = _POOLING_MAX,
};

const char *pooling_type_name(enum pooling_type t);
int pooling_type_from_string(const char *s, enum pooling_type *ret);
/* The pooling a model file declares (llama.cpp's numbering: 1 mean, 2 cls, 3 last), or
 * last, a causal model's natural choice, for any other value (-1: none declared). */
enum pooling_type pooling_type_from_gguf(int32_t declared);

struct pooling_params {
        enum pooling_type type;
        bool normalize;      /* divide by the Euclidean length (vLLM's and llama.cpp's default) */
        uint32_t dimensions; /* keep the first this many components, before normalizing; 0: all */
};

/* Whether the pooling reads the state at position of a prompt of n_prompt tokens. */
bool pooling_reads(enum pooling_type t, uint32_t position, uint32_t n_prompt);

/* One request's pooling under way. */
struct pooler {
        enum pooling_type type;
        uint32_t n_embd;
        double *sum;  /* (n_embd) mean: the states added so far, summed in token order */
        uint32_t n;   /* states added */
};

int pooler_init(struct pooler *p, enum pooling_type type, uint32_t n_embd);
/* The next state the pooling reads (pooling_reads() said so), in position order. */
void pooler_add(struct pooler *p, const float *state);
/* The request was preempted: its prompt is computed again from the start. */
void pooler_restart(struct pooler *p);
/* The pooled vector, as params say, malloc()ed in *ret (*ret_n components). -EINVAL when
 * no state was added or dimensions exceeds n_embd; -ENOMEM. */
int pooler_finish(const struct pooler *p, const struct pooling_params *params, float **ret, uint32_t *ret_n,
                  struct error *err);
void pooler_done(struct pooler *p);
