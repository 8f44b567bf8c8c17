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
};

struct cpu_runner;

int cpu_runner_new(const struct model *model, const struct cpu_runner_config *config, struct cpu_runner **ret,
                   struct error *err);
void cpu_runner_free(struct cpu_runner *runner);

/* Runs the batch, writing n_vocab logits for each of its output tokens, in order. Keys and
 * values of every token are stored in the KV pool at its position's slot. */
int cpu_runner_forward(struct cpu_runner *runner, const struct batch *batch, float *logits, struct error *err);

const struct model *cpu_runner_model(const struct cpu_runner *runner);

/* The runner as the engine's backend. */
struct backend cpu_runner_backend(struct cpu_runner *runner);

/* The kernel set chosen for this CPU. */
const char *cpu_runner_kernels(const struct cpu_runner *runner);
