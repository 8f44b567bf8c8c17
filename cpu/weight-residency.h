/* SPDX-License-Identifier: MIT */
#pragma once

/* Whether the repacked weights should stay in the caches from one step to the next, or pass
 * through them as a stream. Every decode step reads all of them once. Where the last-level
 * cache can hold them, the kernels' prefetches must keep them there: non-temporal
 * prefetches leave the lines in no cache level, and every step would read the whole model
 * from memory again (decode ~3x slower on a 300 MiB L3). Where it cannot, non-temporal
 * prefetches spare the rest of the cache and read faster (docs/design.md, weight
 * residency). */

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
