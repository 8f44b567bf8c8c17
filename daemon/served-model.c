/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend-open.h"
#include "served-model.h"

int served_model_load(const char *path, const char *device, unsigned threads, const struct engine_config *config,
                      struct served_model *m, struct error *err) {
        int r;
        *m = (struct served_model) { .config = *config };
        if ((r = backend_check_device(device, err)) < 0)
                return r;
        if ((r = model_load(path, &m->model, err)) < 0 || (r = tokenizer_load(m->model->file, &m->tk, err)) < 0)
                goto fail;
        if ((r = engine_config_finalize(&m->config, m->model->hp.n_ctx_train, err)) < 0)
                goto fail;
        struct backend_options options = backend_options_for_engine(&m->config, threads);
        if ((r = backend_open(device, &options, m->model, &m->device, err)) < 0)
                goto fail;
        if ((r = fault_injection_wrap(&m->device, &m->faults, &m->backend)) < 0) {
                error_set(err, -r, "out of memory");
                goto fail;
        }
        if ((r = async_llm_new(&m->config, &m->backend, m->tk, &m->llm, err)) < 0)
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
        backend_free(&m->device);
        tokenizer_free(m->tk);
        model_free(m->model);
        free(m->name);
        *m = (struct served_model) { 0 };
}
