/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-runner.h"
#include "served-model.h"

int served_model_load(const char *path, const char *device, unsigned threads, const struct engine_config *config,
                      struct served_model *m, struct error *err) {
        int r;
        *m = (struct served_model) { .config = *config };
        if (strcmp(device, "cpu") != 0)
                return error_set(err, EOPNOTSUPP,
                                 "device '%s' cannot serve yet: the CUDA backend only probes the GPU so far; use --device cpu",
                                 device);
        if ((r = model_load(path, &m->model, err)) < 0 || (r = tokenizer_load(m->model->file, &m->tk, err)) < 0)
                goto fail;
        if ((r = engine_config_finalize(&m->config, m->model->hp.n_ctx_train, err)) < 0)
                goto fail;
        m->n_kv_blocks = engine_kv_blocks_for_space(&m->config, m->model->hp.n_layer,
                                                    m->model->hp.n_head_kv * m->model->hp.head_dim);
        struct cpu_runner_config rc = {
                .n_threads = threads,
                .max_batch_tokens = m->config.max_num_batched_tokens,
                .max_model_len = m->config.max_model_len,
                .block_size = m->config.block_size,
                .n_kv_blocks = m->n_kv_blocks,
        };
        if ((r = cpu_runner_new(m->model, &rc, &m->runner, err)) < 0)
                goto fail;
        struct backend cpu = cpu_runner_backend(m->runner);
        if ((r = fault_injection_wrap(&cpu, &m->faults, &m->backend)) < 0) {
                error_set(err, -r, "out of memory");
                goto fail;
        }
        if ((r = async_llm_new(&m->config, &m->backend, m->tk, m->n_kv_blocks, &m->llm, err)) < 0)
                goto fail;
        /* the file's name, as users name the model (vLLM serves the name it was given), not
         * general.name, which is often a training run's label */
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        size_t len = strlen(base);
        if (len > 5 && strcmp(base + len - 5, ".gguf") == 0)
                len -= 5;
        if (!(m->name = strndup(base, len))) {
                r = error_set(err, ENOMEM, "out of memory");
                goto fail;
        }
        return 0;
fail:
        served_model_unload(m);
        return r;
}

void served_model_unload(struct served_model *m) {
        async_llm_free(m->llm);
        fault_injection_free(m->faults);
        cpu_runner_free(m->runner);
        tokenizer_free(m->tk);
        model_free(m->model);
        free(m->name);
        *m = (struct served_model) { 0 };
}
