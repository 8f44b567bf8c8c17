/* SPDX-License-Identifier: MIT */
#pragma once

/* A line per executed step, for studying the step-time model on a real workload: when the
 * step started, what it carried, what the model predicted and how long it took. On where
 * the environment variable ASYNCLLM_STEP_TRACE names a file (bench/coserve sets it for its
 * slo points and compares the model with what steps of one shape do); off otherwise. The
 * file is appended to, so a daemon started again adds its steps after the last run's. */

#include <stdio.h>

#include "error.h"
#include "step-time-model.h"

#define STEP_TRACE_ENV "ASYNCLLM_STEP_TRACE"

/* The first line of a new trace file: the columns. */
#define STEP_TRACE_HEADER \
        "# started_s n_prompt n_decode prompt_context decode_context n_best_effort predicted_s measured_s\n"

/* Opens the file ASYNCLLM_STEP_TRACE names, or sets *ret to NULL when it is unset or empty. */
int step_trace_open_from_env(FILE **ret, struct error *err);

/* started: CLOCK_MONOTONIC seconds; predicted: NAN before the model is ready. */
void step_trace_write(FILE *trace, double started, const struct step_shape *shape, double predicted, double seconds);
