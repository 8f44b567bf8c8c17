/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "cuda-backend.h"

static int backend_forward(void *impl, const struct batch *batch, float **logits, struct error *err) {
        return cuda_runner_forward(impl, batch, logits, err);
}

static int backend_release_memory(void *impl, unsigned what, struct error *err) {
        return cuda_runner_release_memory(impl, what, err);
}

static int backend_restore_memory(void *impl, unsigned what, struct error *err) {
        return cuda_runner_restore_memory(impl, what, err);
}

void cuda_backend_usage(const struct cuda_runner *runner, struct backend_memory_usage *ret) {
        struct cuda_runner_usage u;
        cuda_runner_usage(runner, &u);
        *ret = (struct backend_memory_usage) {
                .weights_bytes = u.weights_bytes,
                .kv_cache_bytes = u.kv_cache_bytes,
                .scratch_bytes = u.scratch_bytes,
                .released = u.released,
                .device_free_bytes = u.device_free,
                .device_total_bytes = u.device_total,
        };
}

static void backend_memory_usage(void *impl, unsigned worker, struct backend_memory_usage *ret) {
        (void) worker;
        cuda_backend_usage(impl, ret);
}

static void backend_free_impl(void *impl) {
        cuda_runner_free(impl);
}

int cuda_backend_new(const struct model *model, const struct cuda_runner_config *config, struct backend *ret,
                     struct error *err) {
        struct cuda_runner *runner;
        int r = cuda_runner_new(model, config, &runner, err);
        if (r < 0)
                return r;
        *ret = (struct backend) {
                .name = "cuda",
                .impl = runner,
                .forward = backend_forward,
                .release_memory = backend_release_memory,
                .restore_memory = backend_restore_memory,
                .n_workers = 1,
                .memory_usage = backend_memory_usage,
                .kv = {
                        .block_size = config->block_size,
                        .n_blocks = cuda_runner_kv_blocks(runner),
                        .block_bytes = cuda_runner_block_bytes(runner),
                },
                .kernels = cuda_runner_device_name(runner),
                .weights = "device",
                .weights_on_device = true,
                .free = backend_free_impl,
        };
        return 0;
}
