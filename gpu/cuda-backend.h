/* SPDX-License-Identifier: MIT */
#pragma once

/* The CUDA runner as the engine's backend (engine/backend.h), named "cuda". */

#include "backend.h"
#include "cuda-runner.h"

/* Starts a runner with config; backend_free() stops it. */
int cuda_backend_new(const struct model *model, const struct cuda_runner_config *config, struct backend *ret,
                     struct error *err);

/* What runner holds, as struct backend's memory_usage reports it. */
void cuda_backend_usage(const struct cuda_runner *runner, struct backend_memory_usage *ret);
