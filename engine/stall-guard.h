/* SPDX-License-Identifier: MIT */
#pragma once

/* Keeps prefill work from stalling the requests that decode. On a CPU a step costs time in
 * proportion to its tokens (and, for prompt tokens deep in a long prompt, to their context),
 * so a 256-token prefill chunk can make a step many times longer than a decode-only step,
 * and every decoding stream waits that long for its next token. Each step, the guard grants
 * prompt chunks only as long as the step-time model predicts the step, with the model's
 * safety margin, to take at most `limit` times its decodes alone. At least one prompt token
 * always fits, so prompts keep moving. Before the model has learned, a prompt token is
 * priced like a decoding sequence, which overprices it (a decode step's fixed cost is
 * shared by its sequences).
 *
 * While prompts keep coming, every step may carry prompt work, and the model would price
 * the decodes alone from mixed steps only: deep in a long prompt its decode-only figure
 * drifts and the limit with it. So after STALL_GUARD_PROBE_EVERY mixed steps in a row a
 * step carries its decodes alone, which measures what the limit is relative to.
 *
 * No step that carries decodes is exempt: a step let through whole now and then, deep in a
 * long prompt, freezes every stream for as long as a full budget of prompt work takes. */

#include <stdbool.h>
#include <stdint.h>

#include "step-time-model.h"

#define STALL_GUARD_PROBE_EVERY 16

/* One step's guard. */
struct stall_guard {
        const struct step_time_model *model;
        bool active;            /* there are decodes to protect */
        bool decodes_only;      /* no prompt work at all this step */
        double allowed;         /* seconds the step may take (when timed) */
        uint32_t untimed_left;  /* prompt tokens still allowed (when not timed) */
        struct step_shape shape; /* the decodes and the prompt chunks granted so far */
};

/* Starts a step whose decodes have this shape, after mixed_in_a_row steps that carried
 * decodes and prompt work; limit 0 lets every chunk through. */
void stall_guard_begin(struct stall_guard *g, double limit, const struct step_time_model *m,
                       const struct step_shape *decodes, uint32_t mixed_in_a_row);

/* Prompt tokens (at most cap) that a chunk starting at position start may carry, counted as
 * planned. */
uint32_t stall_guard_grant(struct stall_guard *g, uint32_t start, uint32_t cap);
