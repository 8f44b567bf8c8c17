/* SPDX-License-Identifier: MIT */
#pragma once

/* The CPU model runner: executes one batch (engine/batch.h) through a Llama model to logits,
 * with every thread of a persistent pool working on each phase, and keys and values kept in a
 * paged f16 KV pool. */

#include "backend.h"
#include "batch.h"
#include "error.h"
#include "model.h"

struct cpu_runner_config {
        unsigned n_threads;
        uint32_t max_batch_tokens; /* tokens per forward step */
        uint32_t max_model_len;    /* longest sequence, prompt and output */
        uint32_t block_size;       /* KV cache tokens per block */
        uint32_t n_kv_blocks;      /* blocks in the KV pool */
        /* A step's tokens go through the layers in slices of at most this many consecutive
         * tokens, with the same results; 0 for the default, CPU_RUNNER_SLICE_TOKENS. */
        uint32_t max_slice_tokens;
        /* A decode step (one token per sequence, at most a few) whose longest context reaches
         * this many positions shares each (token, key-value head)'s attention between the
         * threads, with the same results; 0 for the default, CPU_RUNNER_ATTN_SPLIT_POSITIONS;
         * UINT32_MAX never. */
        uint32_t attn_split_positions;
};

/* One (token, key-value head) is one thread's unless shared: 3 key-value heads on 2 threads
 * left one thread two thirds of a long context's reads. */
#define CPU_RUNNER_ATTN_SPLIT_POSITIONS 512

/* Slices of 256 tokens keep the activations of the widest matmul's input (n_ff = 1536 for
 * SmolLM2-135M: ~500 KB of q8_1 blocks and scales) within a 1 MB L2 while every group of
 * weight rows goes over all of the slice's tokens. */
#define CPU_RUNNER_SLICE_TOKENS 256

struct cpu_runner;

int cpu_runner_new(const struct model *model, const struct cpu_runner_config *config, struct cpu_runner **ret,
                   struct error *err);
void cpu_runner_free(struct cpu_runner *runner);

/* Runs the batch, writing n_vocab logits for each of its output tokens, in order (their
 * indices must rise). Keys and
 * values of every token are stored in the KV pool at its position's slot. -EBUSY while any
 * memory is released. */
int cpu_runner_forward(struct cpu_runner *runner, const struct batch *batch, float *logits, struct error *err);

const struct model *cpu_runner_model(const struct cpu_runner *runner);

/* Frees the memory named by what (enum backend_memory bits) while the engine sleeps: the KV
 * pool (its contents are lost) and the mapping of the model's file (-EOPNOTSUPP for a model
 * parsed from a caller's buffer). Releasing twice is a no-op; on failure nothing changed. */
int cpu_runner_release_memory(struct cpu_runner *runner, unsigned what, struct error *err);

/* Takes the named memory back: the KV pool empty, the weights from the model file, which must
 * not have changed since it was loaded (see gguf_restore_mapping()). After a failure the
 * released bits of cpu_runner_memory_usage() say what is still released. */
int cpu_runner_restore_memory(struct cpu_runner *runner, unsigned what, struct error *err);

/* weights_bytes is the size of the model file's mapping (metadata and every tensor: what
 * releasing the weights gives back); scratch_bytes the per-step buffers, which stay. */
void cpu_runner_memory_usage(const struct cpu_runner *runner, struct backend_memory_usage *ret);

/* The kernel set chosen for this CPU. */
const char *cpu_runner_kernels(const struct cpu_runner *runner);

/* Whether the repacked weights are kept in the caches between steps rather than streamed
 * (weight-residency.h); false when nothing was repacked. */
bool cpu_runner_weights_cached(const struct cpu_runner *runner);
