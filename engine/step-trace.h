/* SPDX-License-Identifier: MIT */
#pragma once

/* A line per executed step, for studying the step-time model on a real workload: when the
 * step started, what it carried, what the model predicted and how long it took. On where
 * the environment variable ASYNCLLM_STEP_TRACE names a file (bench/coserve sets it for its
 * slo points and compares the model with what steps of one shape do); off otherwise. The
 * file is appended to, so a daemon started again adds its steps after the last run's. */

#include "error.h"
#include "step-time-model.h"

#define STEP_TRACE_ENV "ASYNCLLM_STEP_TRACE"

/* The first line of a new trace file: the columns. */
#define STEP_TRACE_HEADER \
        "# started_s n_prompt n_decode prompt_context decode_context n_best_effort predicted_s measured_s\n"

struct step_trace;

/* Opens the file ASYNCLLM_STEP_TRACE names, or sets *ret to NULL when it is unset or empty. */
int step_trace_open_from_env(struct step_trace **ret, struct error *err);

/* started: CLOCK_MONOTONIC seconds; predicted: NAN before the model is ready. A line that
 * cannot be written (a full disk) stops the trace: it is cut back to its last whole line, the
 * reason goes to stderr once, and later steps write nothing; serving goes on. */
void step_trace_write(struct step_trace *trace, double started, const struct step_shape *shape, double predicted,
                      double seconds);

void step_trace_close(struct step_trace *trace);
