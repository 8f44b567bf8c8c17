/* SPDX-License-Identifier: MIT */
#pragma once

/* One sequence driven straight through a backend, owning its whole KV pool: the model
 * runner that asyncllm-generate, the fidelity tests and the benchmark use until the engine
 * (continuous batching) schedules sequences itself. Prompts are fed as batched passes of up
 * to max_batch_tokens tokens, never one token at a time. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend-open.h"

struct sequence;

/* backend must have been opened with options, for a model of n_vocab tokens; it outlives the
 * sequence. */
int sequence_new(const struct backend *backend, const struct backend_options *options, uint32_t n_vocab,
                 struct sequence **ret, struct error *err);
void sequence_free(struct sequence *s);

/* Appends tokens to the sequence and runs them. The first feed after a reset is the prompt;
 * later ones are generated tokens (the backend sums attention differently for the two).
 * With all_logits, logits receives n rows of n_vocab (one per token); otherwise one row, for
 * the last token. -ENOSPC when the sequence would exceed max_model_len. */
int sequence_feed(struct sequence *s, const int32_t *tokens, size_t n, bool all_logits, float *logits,
                  struct error *err);

/* Forgets every token, so the next feed starts at position 0. */
void sequence_reset(struct sequence *s);

uint32_t sequence_length(const struct sequence *s);
