/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend-open.h"
#include "chat-template.h"
#include "served-model.h"

/* Chat templates are a few KB; a larger file is not one. */
#define CHAT_TEMPLATE_MAX_BYTES (1024 * 1024)

/* Puts the text of the file path in place of the model's chat template, and checks that
 * it parses and renders a one-message chat, so that a wrong file stops the daemon at
 * startup rather than failing every chat request. */
static int replace_chat_template(struct tokenizer *tk, const char *path, struct error *err) {
        FILE *f = fopen(path, "re");
        if (!f)
                return error_set(err, errno, "--chat-template %s: %s", path, strerror(errno));
        char *text = malloc(CHAT_TEMPLATE_MAX_BYTES + 1);
        if (!text) {
                fclose(f);
                return error_set(err, ENOMEM, "out of memory");
        }
        size_t n = fread(text, 1, CHAT_TEMPLATE_MAX_BYTES + 1, f);
        int r;
        if (ferror(f))
                r = error_set(err, EIO, "--chat-template %s: cannot read it", path);
        else if (n > CHAT_TEMPLATE_MAX_BYTES)
                r = error_set(err, EFBIG, "--chat-template %s: larger than %d bytes, not a chat template", path,
                              CHAT_TEMPLATE_MAX_BYTES);
        else if (memchr(text, '\0', n))
                r = error_set(err, EINVAL, "--chat-template %s: holds a NUL byte, not a chat template", path);
        else {
                text[n] = '\0';
                r = tokenizer_replace_chat_template(tk, text, err);
        }
        fclose(f);
        free(text);
        if (r == 0 && (r = chat_template_check(tk, err)) < 0)
                error_prefix(err, r, "--chat-template %s", path);
        return r;
}

int served_model_load(const char *path, const char *device, unsigned threads, const struct engine_config *config,
                      const char *chat_template, struct served_model *m, struct error *err) {
        int r;
        *m = (struct served_model) { .config = *config };
        if ((r = backend_check_device(device, err)) < 0)
                return r;
        if ((r = model_load(path, &m->model, err)) < 0 || (r = tokenizer_load(m->model->file, &m->tk, err)) < 0)
                goto fail;
        if (chat_template && (r = replace_chat_template(m->tk, chat_template, err)) < 0)
                goto fail;
        if ((r = engine_config_finalize(&m->config, m->model->hp.n_ctx_max, err)) < 0)
                goto fail;
        m->config.default_pooling = pooling_type_from_gguf(m->model->hp.pooling_type);
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

int served_model_tokenize(const struct served_model *m, const char *text, const struct chat_message *messages,
                          size_t n_messages, bool add_generation_prompt, int32_t **ret, size_t *ret_n,
                          struct error *err) {
        char *rendered = NULL;
        int r = 0;
        *ret = NULL;
        *ret_n = 0;
        if (!text && (r = chat_render(m->tk, messages, n_messages, add_generation_prompt, &rendered, err)) < 0)
                return r;
        r = tokenizer_encode_prompt(m->tk, text ? text : rendered, strlen(text ? text : rendered), true, ret, ret_n, err);
        free(rendered);
        if (r >= 0 && !*ret && !(*ret = malloc(sizeof(**ret))))
                r = error_set(err, ENOMEM, "out of memory");
        return r < 0 ? r : 0;
}
