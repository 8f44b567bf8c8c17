/* SPDX-License-Identifier: MIT */
#pragma once

/* Opens the backend (engine/backend.h) that runs a model on a device, by the device's name:
 * the one place that knows the concrete backends in cpu/ and gpu/. */

#include <stdint.h>

#include "backend.h"
#include "engine-config.h"
#include "error.h"
#include "model.h"

struct backend_options {
        unsigned n_threads;        /* CPU threads that run the steps */
        uint32_t max_batch_tokens; /* tokens per step */
        uint32_t max_model_len;    /* longest sequence, prompt and output */
        uint32_t block_size;       /* KV cache tokens per block */
        /* The KV pool: n_kv_blocks blocks when set, else as many as kv_cache_bytes holds
         * (the backend's struct backend_kv_geometry says how many that is). */
        uint32_t n_kv_blocks;
        uint64_t kv_cache_bytes;     /* the CPU's KV pool */
        /* The fraction of the GPU's memory a GPU backend may take, weights and buffers
         * included; its KV pool gets what they leave (vLLM's --gpu-memory-utilization). 0
         * (and n_kv_blocks 0): the pool is kv_cache_bytes, as on the CPU. */
        double gpu_memory_utilization;
        bool enforce_eager; /* a GPU backend replays no CUDA graphs */
        /* GPUs a GPU backend splits the model over (0 or 1: one); with
         * tensor_parallel_loopback every rank runs on the first GPU (a test of the split on
         * one device) */
        uint32_t tensor_parallel_size;
        bool tensor_parallel_loopback;
};

/* What serves an engine of config (finalized) on n_threads threads: its step and sequence
 * limits, the KV pool as large as its kv_cache_space. */
struct backend_options backend_options_for_engine(const struct engine_config *config, unsigned n_threads);

/* Whether backend_open() can open device: -EINVAL naming the known devices for one it does
 * not know, -EOPNOTSUPP saying why for one that cannot serve yet. Costs nothing: checked
 * before a model is loaded. */
int backend_check_device(const char *device, struct error *err);

/* Opens device's backend for model, which must outlive it; backend_free() closes it.
 * Fails as backend_check_device() does, or as the backend's start does. */
int backend_open(const char *device, const struct backend_options *options, const struct model *model,
                 struct backend *ret, struct error *err);
