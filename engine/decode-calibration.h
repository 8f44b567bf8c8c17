/* SPDX-License-Identifier: MIT */
#pragma once

/* Times steps of 1, 2, ... short decodes alone on the backend when the engine starts, for
 * the slo policy's admission (step_time_model_calibrated_decodes()): how much of a step a
 * batch of decodes shares is a property of the kernels and the threads, which the online
 * fit, taught mostly by long best-effort decodes, cannot tell. */

#include <stdint.h>

#include "backend.h"
#include "error.h"
#include "kv-blocks.h"
#include "step-time-model.h"

/* Computes one prompt of up to 128 tokens, then times steps of 1..max_decodes decodes (at
 * most STEP_MODEL_CALIBRATED_DECODES, and at most max_tokens) that all read its keys and
 * values, each writing its own token's into a block of its own; three rounds, the median
 * of each count (ret->n is 0 when the cache or the token budget left no room). Takes its
 * blocks from kv and gives them back. Fails only when the backend does. */
int decode_calibration_run(const struct backend *backend, struct kv_blocks *kv, uint32_t max_decodes,
                           uint32_t max_tokens, uint32_t max_model_len, uint32_t n_vocab,
                           struct decode_calibration *ret, struct error *err);
