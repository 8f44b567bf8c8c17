/* SPDX-License-Identifier: MIT */
#pragma once

#include <time.h>

/* Seconds on CLOCK_MONOTONIC: request timings and benchmarks, never wall-clock time. */
static inline double monotonic_seconds(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}
