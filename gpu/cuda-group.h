/* SPDX-License-Identifier: MIT */
#pragma once

/* The CUDA backend over a tensor-parallel group (model/tensor-parallel.h), named "cuda": one
 * runner per rank, each on its own worker thread and stream, all-gathering over NCCL (rank i
 * on GPU i) or, with loopback, every rank on config's device through the loopback
 * communicator. A step runs on every rank at once; rank 0's logits are the step's. A rank
 * that fails aborts the group's communicator, so no rank waits for it, and the step fails:
 * the engine's death path. */

#include <stdbool.h>
#include <stdint.h>

#include "backend.h"
#include "cuda-runner.h"

/* size ranks of config (config->shard and config->comm are the group's to set). */
int cuda_group_backend_new(const struct model *model, const struct cuda_runner_config *config, uint32_t size,
                           bool loopback, struct backend *ret, struct error *err);
