/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "backend-open.h"
#include "cpu-backend.h"
#ifdef HAVE_CUDA
#include "gpu-device.h"
#endif

/* The CUDA backend only probes the GPU so far: say what the probe found. */
static int refuse_cuda(struct error *err) {
#ifdef HAVE_CUDA
        struct error probe;
        int n = gpu_device_count(&probe);
        if (n < 0)
                return error_set(err, EOPNOTSUPP,
                                 "device 'cuda' cannot serve yet: the CUDA backend only probes the GPU so far (%s); use --device cpu",
                                 probe.message);
        return error_set(err, EOPNOTSUPP,
                         "device 'cuda' cannot serve yet: the CUDA backend only probes the GPU so far (%d found); use --device cpu",
                         n);
#else
        return error_set(err, EOPNOTSUPP,
                         "device 'cuda' cannot serve: this build has no CUDA support, and the CUDA backend only probes the GPU so far; use --device cpu");
#endif
}

struct backend_options backend_options_for_engine(const struct engine_config *config, unsigned n_threads) {
        return (struct backend_options) {
                .n_threads = n_threads,
                .max_batch_tokens = config->max_num_batched_tokens,
                .max_model_len = config->max_model_len,
                .block_size = config->block_size,
                .kv_cache_bytes = config->kv_cache_space,
        };
}

int backend_check_device(const char *device, struct error *err) {
        if (strcmp(device, "cpu") == 0)
                return 0;
        if (strcmp(device, "cuda") == 0)
                return refuse_cuda(err);
        return error_set(err, EINVAL, "unknown device '%s'; the devices are cpu, cuda", device);
}

static int open_cpu(const struct backend_options *o, const struct model *model, struct backend *ret,
                    struct error *err) {
        struct cpu_runner_config config = {
                .n_threads = o->n_threads,
                .max_batch_tokens = o->max_batch_tokens,
                .max_model_len = o->max_model_len,
                .block_size = o->block_size,
                .n_kv_blocks = o->n_kv_blocks ? o->n_kv_blocks
                                              : cpu_backend_kv_blocks(model, o->block_size, o->kv_cache_bytes),
        };
        return cpu_backend_new(model, &config, ret, err);
}

int backend_open(const char *device, const struct backend_options *options, const struct model *model,
                 struct backend *ret, struct error *err) {
        *ret = (struct backend) { 0 };
        int r = backend_check_device(device, err);
        if (r < 0)
                return r;
        return open_cpu(options, model, ret, err);
}
