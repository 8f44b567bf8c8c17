/* SPDX-License-Identifier: MIT */
#pragma once

/* Deterministic data for kernel tests and benchmarks (xorshift64): the same numbers on every
 * run and machine, so a failure reproduces. */

#include <stdint.h>

static uint64_t test_random_state = 0x9e3779b97f4a7c15ull;

static inline uint32_t next_u32(void) {
        test_random_state ^= test_random_state << 13;
        test_random_state ^= test_random_state >> 7;
        test_random_state ^= test_random_state << 17;
        return (uint32_t) (test_random_state >> 16);
}

/* Uniform in [-scale, scale). */
static inline float next_float(float scale) {
        return ((float) (next_u32() & 0xffffff) / 8388608.0f - 1.0f) * scale;
}
