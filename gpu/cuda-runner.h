/* SPDX-License-Identifier: MIT */
#pragma once

/* The CUDA model runner: one batch (engine/batch.h) through a Llama model on one GPU, with
 * the weights uploaded once (quantized blocks repacked for the kernels), the paged KV pool in
 * device memory and the logits rows copied back to pinned host memory. A plain C interface:
 * callers never see a CUDA type. Every CUDA error comes back as -EIO with its name. */

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "batch.h"
#include "error.h"
#include "model.h"
#include "tensor-parallel.h"

struct cuda_runner_config {
        int device;                /* CUDA device index */
        uint32_t max_batch_tokens; /* tokens per forward step */
        uint32_t max_model_len;    /* longest sequence, prompt and output */
        uint32_t block_size;       /* KV cache tokens per block */
        /* Blocks in the KV pool; 0 for as many as gpu_memory_utilization leaves once the
         * weights and the step's buffers are allocated. */
        uint32_t n_kv_blocks;
        /* The fraction of the device's memory this runner may take, weights, buffers and KV
         * pool together, as vLLM's --gpu-memory-utilization; what other processes hold
         * counts against it. */
        double gpu_memory_utilization;
        /* Every step launched kernel by kernel; otherwise decode steps (one token for each
         * sequence) replay a CUDA graph captured for their padded size (vLLM's
         * --enforce-eager). */
        bool enforce_eager;
        /* This runner's share of a tensor-parallel group (shard.size 0 or 1: the whole model)
         * and the group's all-gathers (NULL alone). A rank of several replays no graphs. */
        struct tp_shard shard;
        struct tp_comm *comm;
};

struct cuda_runner_usage {
        uint64_t weights_bytes; /* on the device now (0 while released) */
        uint64_t kv_cache_bytes;
        uint64_t scratch_bytes;  /* the step's device buffers and the pinned logits rows */
        unsigned released;       /* enum backend_memory bits */
        uint64_t device_free;    /* the device's free and total memory, as the driver says */
        uint64_t device_total;
        uint64_t graphs_captured; /* CUDA graphs captured since the start */
};

struct cuda_runner;

int cuda_runner_new(const struct model *model, const struct cuda_runner_config *config, struct cuda_runner **ret,
                    struct error *err);
void cuda_runner_free(struct cuda_runner *runner);

/* Runs the batch; *logits points at n_vocab floats for each output token, in order, in pinned
 * host memory the runner owns until the next call (rank 0's; NULL on the group's other
 * ranks). -EBUSY while memory is released. */
int cuda_runner_forward(struct cuda_runner *runner, const struct batch *batch, float **logits, struct error *err);

uint32_t cuda_runner_kv_blocks(const struct cuda_runner *runner);
uint64_t cuda_runner_block_bytes(const struct cuda_runner *runner);
/* "NVIDIA H200 (sm_90)": what runs the steps, for logs and reports. */
const char *cuda_runner_device_name(const struct cuda_runner *runner);

/* Frees what (enum backend_memory bits) on the device while the engine sleeps: the weights
 * (uploaded again from the model on restore) and the KV pool (restored empty). */
int cuda_runner_release_memory(struct cuda_runner *runner, unsigned what, struct error *err);
int cuda_runner_restore_memory(struct cuda_runner *runner, unsigned what, struct error *err);

void cuda_runner_usage(const struct cuda_runner *runner, struct cuda_runner_usage *ret);

#ifdef __cplusplus
}
#endif
