/* SPDX-License-Identifier: MIT */
#pragma once

/* One forward step, as the model runner hands it to a backend: a flat list of tokens from one
 * or more sequences, each token with its position and its sequence, and each sequence with
 * the block table that maps its positions to slots of the paged KV cache. */

#include <stdint.h>

#include "error.h"

struct batch_seq {
        const int32_t *block_table; /* block ids; position p lives in block_table[p / block_size] */
        uint32_t n_blocks;
        /* Positions below this are the prompt, the rest were generated. The CPU runner sums
         * attention in a different order for each, as the reference does for a prompt pass
         * and for a decode step; keyed to the position, never to the batch, so a sequence's
         * results stay the same however it is batched, chunked or cached. */
        uint32_t n_prompt;
};

struct batch {
        uint32_t n_tokens;
        const int32_t *tokens;    /* (n_tokens) */
        const int32_t *positions; /* (n_tokens) positions of one sequence are consecutive and rising */
        const int32_t *seq_ids;   /* (n_tokens) index into seqs */
        uint32_t n_seqs;
        const struct batch_seq *seqs;
        uint32_t n_outputs;
        const int32_t *output_tokens; /* (n_outputs) indices of the tokens whose logits are wanted, rising */
        /* Tokens whose final hidden state (after the output norm: what the logits are computed
         * from, and what embeddings pool) is wanted, written as n_embd floats each into hidden
         * in this order. Independent of output_tokens: an encode request's prompt tokens
         * want no logits. */
        uint32_t n_hidden;
        const int32_t *hidden_tokens; /* (n_hidden) indices, rising */
        float *hidden;                /* (n_hidden, n_embd), the caller's */
};

/* What a backend can run: its step size, sequence length, vocabulary and KV pool. */
struct batch_limits {
        uint32_t max_tokens;
        uint32_t max_model_len;
        uint32_t n_vocab;
        uint32_t block_size;
        uint32_t n_blocks;
};

/* Checks every index of b against limits before a backend reads or writes through it:
 * -EINVAL naming the first one out of range. */
int batch_validate(const struct batch *b, const struct batch_limits *limits, struct error *err);
