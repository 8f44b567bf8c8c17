/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "cpu-runner.h"

static int backend_forward(void *impl, const struct batch *batch, float *logits, struct error *err) {
        return cpu_runner_forward(impl, batch, logits, err);
}

static int backend_release_memory(void *impl, unsigned what, struct error *err) {
        return cpu_runner_release_memory(impl, what, err);
}

static int backend_restore_memory(void *impl, unsigned what, struct error *err) {
        return cpu_runner_restore_memory(impl, what, err);
}

static void backend_memory_usage(void *impl, unsigned worker, struct backend_memory_usage *ret) {
        cpu_runner_memory_usage(impl, ret);
}

struct backend cpu_runner_backend(struct cpu_runner *runner) {
        return (struct backend) {
                .impl = runner,
                .forward = backend_forward,
                .release_memory = backend_release_memory,
                .restore_memory = backend_restore_memory,
                .n_workers = 1,
                .memory_usage = backend_memory_usage,
        };
}
