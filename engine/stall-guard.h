/* SPDX-License-Identifier: MIT */
#pragma once

/* Keeps prefill work from stalling the requests that decode. On a CPU a step costs time in
 * proportion to its tokens (and, for prompt tokens deep in a long prompt, to their context),
 * so a 256-token prefill chunk can make a step many times longer than a decode-only step,
 * and every decoding stream waits that long for its next token. The guard measures the time
 * of decode-only steps and the cost of a prefill token in mixed steps, and gives the
 * scheduler a prefill allowance: the prompt tokens a step may carry next to its decodes so
 * that it takes at most `limit` times a decode-only step. At least one prompt token always
 * fits, so prompts keep moving. */

#include <stdint.h>

struct stall_guard {
        double limit;              /* allowed step time / decode-only step time; 0 = off */
        double decode_token_time;  /* seconds per decode in decode-only steps; 0 = unknown */
        double prefill_token_time; /* seconds per prompt token in mixed steps; 0 = unknown */
};

void stall_guard_init(struct stall_guard *g, double limit);

/* Learns from a step that ran n_decode decode tokens and n_prefill prompt tokens. */
void stall_guard_record(struct stall_guard *g, uint32_t n_decode, uint32_t n_prefill, double seconds);

/* Prompt tokens a step with n_decode decodes may carry, at most budget; budget when there is
 * nothing to protect or nothing known yet. */
uint32_t stall_guard_allowance(const struct stall_guard *g, uint32_t n_decode, uint32_t budget);
