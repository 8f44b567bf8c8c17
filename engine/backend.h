/* SPDX-License-Identifier: MIT */
#pragma once

/* What the engine needs from a device: run one batch to logits, give memory back while the
 * engine sleeps and take it again on wake-up, say how much it holds and how its KV pool is
 * laid out. backends/backend-open.h opens one by device name; the engine never includes a
 * device header. */

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

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
        uint64_t scratch_bytes;  /* per-step buffers, the logits rows included */
        unsigned released;       /* enum backend_memory bits currently released */
        /* The device's memory as its driver reports it, other processes' use included; 0 for
         * a backend that runs in host memory. */
        uint64_t device_free_bytes;
        uint64_t device_total_bytes;
};

/* The KV pool as the backend laid it out; the engine's block tables index its blocks. */
struct backend_kv_geometry {
        uint32_t block_size;  /* tokens per block */
        uint32_t n_blocks;    /* blocks in the pool: as many as the memory it was given holds */
        uint64_t block_bytes; /* one block's keys and values, every layer */
};

struct backend {
        const char *name; /* the device it runs on, as it was opened: "cpu" */
        void *impl;
        /* Runs batch. On success *logits points at n_vocab logits for each of its output
         * tokens, in order: rows the backend keeps where it likes (a device backend, in host
         * memory it can copy to), valid until the next call of forward, release_memory or
         * free. The engine may change them in place (the sampler does). A failure is an
         * engine error. Never called while weights or the KV cache are released. */
        int (*forward)(void *impl, const struct batch *batch, float **logits, struct error *err);
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
        struct backend_kv_geometry kv;
        /* The length of the final hidden states a batch's hidden rows receive (batch.h); 0:
         * the backend gives none, and encode is refused. */
        uint32_t n_embd;
        /* How it runs, for logs and benchmark reports: the kernel set ("avx512vnni") and
         * where the weights are read from each step ("cached", "streamed"). */
        const char *kernels;
        const char *weights;
        /* The weights live in device memory, which sleep level 1 frees too (vLLM's level 1
         * moves them off the GPU; they come back from the model on wake-up). */
        bool weights_on_device;
        /* Frees impl and everything it holds; NULL in a table that does not own its impl (a
         * wrapper around another backend). */
        void (*free)(void *impl);
};

/* Frees what b owns and clears it; a cleared backend is left as it is. */
static inline void backend_free(struct backend *b) {
        if (b->free)
                b->free(b->impl);
        memset(b, 0, sizeof(*b));
}
