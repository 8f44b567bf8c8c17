/* SPDX-License-Identifier: MIT */
#pragma once

/* The process's profiler, for start_profile and stop_profile: timed spans of the engine's
 * steps and their parts, the backend's layers and phases, and the frontend's
 * detokenization, written as Chrome's trace event format (JSON; chrome://tracing and
 * Perfetto open it). Process-wide because the spans come from every layer of the stack and
 * from two threads; while it is off a span costs one relaxed atomic load. */

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* The thread a span ran on, as the trace shows it: one row each. */
enum profile_track {
        PROFILE_TRACK_ENGINE = 1,   /* the engine thread: steps, scheduling, the forward pass, sampling */
        PROFILE_TRACK_FRONTEND = 2, /* the event loop: outputs, detokenization */
};

/* Spans kept at most; beyond it the trace is cut short and says so. */
#define PROFILER_MAX_SPANS (4u * 1024 * 1024)

extern atomic_bool profiler_on;

static inline bool profiler_active(void) {
        return atomic_load_explicit(&profiler_on, memory_order_relaxed);
}

/* Records the span [start, end] (monotonic seconds) on track; name and category are
 * static strings; arg_name (static, or NULL) labels arg, a number shown with the span.
 * Dropped while the profiler is off, and past PROFILER_MAX_SPANS. Thread-safe. */
void profiler_span(enum profile_track track, const char *category, const char *name, double start, double end,
                   const char *arg_name, int64_t arg);

/* Starts recording; -EALREADY while it records. */
int profiler_start(struct error *err);
/* Stops recording and writes what it holds to path (created with mode 0640, replacing a
 * file there), then forgets it. *ret_spans: how many; *ret_truncated: whether spans were
 * dropped for PROFILER_MAX_SPANS. -ENOENT (not started), or -EIO when the file cannot be
 * written, the message saying why (the spans are dropped either way). */
int profiler_stop(const char *path, size_t *ret_spans, bool *ret_truncated, struct error *err);
