/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "backend-open.h"
#include "cpu-backend.h"
#ifdef HAVE_CUDA
#include "cuda-backend.h"
#include "cuda-group.h"
#include "gpu-device.h"
#endif

/* Only what the build lacks: whether a GPU is there is the backend's to find out when it
 * opens, after the model is read. */
static int check_cuda(struct error *err) {
#ifdef HAVE_CUDA
        (void) err;
        return 0;
#else
        return error_set(err, EOPNOTSUPP,
                         "device 'cuda': this build has no CUDA support (configure it with --enable-cuda); use --device cpu");
#endif
}

struct backend_options backend_options_for_engine(const struct engine_config *config, unsigned n_threads) {
        return (struct backend_options) {
                .n_threads = n_threads,
                .max_batch_tokens = config->max_num_batched_tokens,
                .max_model_len = config->max_model_len,
                .block_size = config->block_size,
                .kv_cache_bytes = config->kv_cache_space,
                .gpu_memory_utilization = config->gpu_memory_utilization,
                .enforce_eager = config->enforce_eager,
                .tensor_parallel_size = config->tensor_parallel_size,
        };
}

int backend_check_device(const char *device, struct error *err) {
        if (strcmp(device, "cpu") == 0)
                return 0;
        if (strcmp(device, "cuda") == 0)
                return check_cuda(err);
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
        if (strcmp(device, "cuda") != 0 && options->tensor_parallel_size > 1)
                return error_set(err, EINVAL, "a tensor-parallel size of %u splits the model over GPUs: it needs --device cuda",
                                 options->tensor_parallel_size);
#ifdef HAVE_CUDA
        if (strcmp(device, "cuda") == 0) {
                struct error probe;
                if (gpu_device_count(&probe) < 0)
                        return error_set(err, ENODEV, "device 'cuda': %s; use --device cpu", probe.message);
                struct cuda_runner_config config = {
                        .device = 0,
                        .max_batch_tokens = options->max_batch_tokens,
                        .max_model_len = options->max_model_len,
                        .block_size = options->block_size,
                        /* without a share of the GPU to fill, the pool is kv_cache_bytes, as on the CPU */
                        .n_kv_blocks = options->n_kv_blocks || options->gpu_memory_utilization > 0
                                               ? options->n_kv_blocks
                                               : cpu_backend_kv_blocks(model, options->block_size, options->kv_cache_bytes),
                        .gpu_memory_utilization = options->gpu_memory_utilization,
                        .enforce_eager = options->enforce_eager,
                };
                if (options->tensor_parallel_size > 1)
                        return cuda_group_backend_new(model, &config, options->tensor_parallel_size,
                                                      options->tensor_parallel_loopback, ret, err);
                return cuda_backend_new(model, &config, ret, err);
        }
#endif
        return open_cpu(options, model, ret, err);
}
