/* SPDX-License-Identifier: MIT */
#pragma once

/* The CPU runner as the engine's backend (engine/backend.h): the runner, the logits rows it
 * hands the engine, and its KV pool's geometry. */

#include "backend.h"
#include "cpu-runner.h"

/* Blocks of block_size tokens that kv_cache_bytes of f16 keys and values hold for model. */
uint32_t cpu_backend_kv_blocks(const struct model *model, uint32_t block_size, uint64_t kv_cache_bytes);

/* Starts a runner with config as the backend named "cpu"; backend_free() stops it. */
int cpu_backend_new(const struct model *model, const struct cpu_runner_config *config, struct backend *ret,
                    struct error *err);
