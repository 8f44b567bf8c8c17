/* SPDX-License-Identifier: MIT */
#pragma once

/* Keeps prefill work from stalling the requests that decode. On a CPU a step costs time in
 * proportion to its tokens (and, for prompt tokens deep in a long prompt, to their context),
 * so a 256-token prefill chunk can make a step many times longer than a decode-only step,
 * and every decoding stream waits that long for its next token. Each step, the guard grants
 * prompt chunks only as long as the step-time model predicts the step to take at most
 * `limit` times its decodes alone. At least one prompt token always fits, so prompts keep
 * moving. Before the model has learned, a prompt token is priced like a decoding sequence,
 * which overprices it (a decode step's fixed cost is shared by its sequences). */

#include <stdbool.h>
#include <stdint.h>

#include "step-time-model.h"

/* One step's guard. */
struct stall_guard {
        const struct step_time_model *model;
        bool active;            /* there are decodes to protect */
        double allowed;         /* seconds the step may take (when timed) */
        uint32_t untimed_left;  /* prompt tokens still allowed (when not timed) */
        struct step_shape shape; /* the decodes and the prompt chunks granted so far */
};

/* Starts a step whose decodes have this shape; limit 0 lets every chunk through. */
void stall_guard_begin(struct stall_guard *g, double limit, const struct step_time_model *m,
                       const struct step_shape *decodes);

/* Prompt tokens (at most cap) that a chunk starting at position start may carry, counted as
 * planned. */
uint32_t stall_guard_grant(struct stall_guard *g, uint32_t start, uint32_t cap);
