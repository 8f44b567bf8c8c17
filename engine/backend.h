/* SPDX-License-Identifier: MIT */
#pragma once

/* What the engine needs from a device: run one batch to logits, give memory back while the
 * engine sleeps and take it again on wake-up, and say how much it holds. The CPU runner
 * implements it today; the CUDA backend will implement the same table. The engine never
 * includes a device header. */

#include <stdint.h>

#include "batch.h"
#include "error.h"

/* What sleep frees and wake_up restores, as a bit set. */
enum backend_memory {
        BACKEND_MEMORY_WEIGHTS = 1 << 0,  /* the model's weights: restored from the model file */
        BACKEND_MEMORY_KV_CACHE = 1 << 1, /* the KV pool: restored empty, its contents are lost */
};

struct backend_memory_usage {
        uint64_t weights_bytes;  /* weights mapped or allocated now (0 while released) */
        uint64_t kv_cache_bytes; /* KV pool allocated now (0 while released) */
        uint64_t scratch_bytes;  /* per-step buffers */
        unsigned released;       /* enum backend_memory bits currently released */
};

struct backend {
        void *impl;
        /* Runs batch; writes n_vocab logits per output token. A failure is an engine error.
         * Never called while weights or the KV cache are released. */
        int (*forward)(void *impl, const struct batch *batch, float *logits, struct error *err);
        /* Frees the memory named by what (enum backend_memory bits); releasing what is
         * already released is a no-op. */
        int (*release_memory)(void *impl, unsigned what, struct error *err);
        /* Takes the named memory back; the weights must come back identical (a model file
         * changed on disk meanwhile is an error that leaves them released). */
        int (*restore_memory)(void *impl, unsigned what, struct error *err);
        /* Workers this backend runs (tensor-parallel ranks; 1 on the CPU). */
        unsigned n_workers;
        /* What worker (0 .. n_workers - 1) holds now. */
        void (*memory_usage)(void *impl, unsigned worker, struct backend_memory_usage *ret);
};
