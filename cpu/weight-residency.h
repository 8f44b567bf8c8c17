/* SPDX-License-Identifier: MIT */
#pragma once

/* Whether the repacked weights should stay in the caches from one step to the next, or pass
 * through them as a stream. Every decode step reads all of them once. Where the last-level
 * cache can hold them, the kernels' prefetches must keep them there: on an Intel Xeon VM
 * with a 300 MiB L3 (2026-11-26), a 2-thread read of 98 MB went ~47 GB/s with plain or
 * all-level prefetches and ~20 GB/s with non-temporal ones, which leave nothing behind, and
 * tg128 Q4_1 went from ~120 to ~335 t/s. Where it cannot, non-temporal prefetches spare the
 * rest of the cache and read faster (the Zen 4 machine's 32 MiB L3: ~28 -> ~33 GB/s). */

#include <stdbool.h>
#include <stdint.h>

#include "error.h"

/* Chooses for weight_bytes of weights: kept when they take at most half of the last-level
 * cache (the other half is left to the key-value cache, the activations and the rest of
 * the machine), unless ASYNCLLM_CPU_WEIGHT_CACHE says "keep" or "stream". -EINVAL with a
 * message for any other value of it. */
int weight_residency_choose(uint64_t weight_bytes, bool *keep_cached, struct error *err);

/* The rule itself: llc_bytes is the last-level cache's size, 0 when unknown (streamed). */
bool weight_residency_fits(uint64_t weight_bytes, uint64_t llc_bytes);

/* The size of the last-level data cache of CPU 0, from sysfs, else from the C library; 0 when
 * neither says. */
uint64_t last_level_cache_bytes(void);
