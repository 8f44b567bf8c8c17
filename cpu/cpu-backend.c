/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "cpu-backend.h"
#include "kv-pool.h"

struct cpu_backend {
        struct cpu_runner *runner;
        uint32_t n_vocab;
        uint32_t max_batch_tokens;
        /* The rows of the last step's logits, grown to the most outputs a step asked for:
         * the engine samples from them in place. */
        float *logits;
        uint32_t logits_rows;
};

uint32_t cpu_backend_kv_blocks(const struct model *model, uint32_t block_size, uint64_t kv_cache_bytes) {
        const struct model_hparams *hp = &model->hp;
        uint64_t block_bytes = kv_pool_block_bytes(hp->n_layer, block_size, hp->n_head_kv * hp->head_dim);
        uint64_t n = block_bytes ? kv_cache_bytes / block_bytes : 0;
        return n > INT32_MAX / 2 ? INT32_MAX / 2 : (uint32_t) n;
}

/* Room for n (at most max_batch_tokens) logits rows: at least twice what was there, so that
 * steps rarely grow them, and never more than a step can ask for. */
static int reserve_logits(struct cpu_backend *b, uint32_t n, struct error *err) {
        if (n <= b->logits_rows)
                return 0;
        uint32_t rows = n < 2 * b->logits_rows ? 2 * b->logits_rows : n;
        if (rows > b->max_batch_tokens)
                rows = b->max_batch_tokens;
        float *l = realloc(b->logits, (size_t) rows * b->n_vocab * sizeof(float));
        if (!l)
                return error_set(err, ENOMEM, "out of memory for %u logits rows", rows);
        b->logits = l;
        b->logits_rows = rows;
        return 0;
}

static int backend_forward(void *impl, const struct batch *batch, float **logits, struct error *err) {
        struct cpu_backend *b = impl;
        /* a batch asking for more outputs than a step can have is the runner's to refuse */
        uint32_t rows = batch->n_outputs <= b->max_batch_tokens ? batch->n_outputs : b->max_batch_tokens;
        int r = reserve_logits(b, rows, err);
        if (r < 0)
                return r;
        *logits = b->logits;
        return cpu_runner_forward(b->runner, batch, b->logits, err);
}

static int backend_release_memory(void *impl, unsigned what, struct error *err) {
        struct cpu_backend *b = impl;
        return cpu_runner_release_memory(b->runner, what, err);
}

static int backend_restore_memory(void *impl, unsigned what, struct error *err) {
        struct cpu_backend *b = impl;
        return cpu_runner_restore_memory(b->runner, what, err);
}

static void backend_memory_usage(void *impl, unsigned worker, struct backend_memory_usage *ret) {
        struct cpu_backend *b = impl;
        cpu_runner_memory_usage(b->runner, ret);
        ret->scratch_bytes += (uint64_t) b->logits_rows * b->n_vocab * sizeof(float);
}

static void backend_free_impl(void *impl) {
        struct cpu_backend *b = impl;
        cpu_runner_free(b->runner);
        free(b->logits);
        free(b);
}

int cpu_backend_new(const struct model *model, const struct cpu_runner_config *config, struct backend *ret,
                    struct error *err) {
        const struct model_hparams *hp = &model->hp;
        struct cpu_backend *b = calloc(1, sizeof(*b));
        if (!b)
                return error_set(err, ENOMEM, "out of memory");
        int r = cpu_runner_new(model, config, &b->runner, err);
        if (r < 0) {
                free(b);
                return r;
        }
        b->n_vocab = hp->n_vocab;
        b->max_batch_tokens = config->max_batch_tokens;
        *ret = (struct backend) {
                .name = "cpu",
                .impl = b,
                .forward = backend_forward,
                .release_memory = backend_release_memory,
                .restore_memory = backend_restore_memory,
                .n_workers = 1,
                .memory_usage = backend_memory_usage,
                .kv = {
                        .block_size = config->block_size,
                        .n_blocks = config->n_kv_blocks,
                        .block_bytes = kv_pool_block_bytes(hp->n_layer, config->block_size, hp->n_head_kv * hp->head_dim),
                },
                .n_embd = hp->n_embd,
                .kernels = cpu_runner_kernels(b->runner),
                .weights = cpu_runner_weights_cached(b->runner) ? "cached" : "streamed",
                .free = backend_free_impl,
        };
        return 0;
}
