/* SPDX-License-Identifier: MIT */
#pragma once

/* The model the daemon serves and the engine over it: the GGUF file, its tokenizer, the
 * device backend and the asynchronous engine, set up and torn down together. */

#include "async-llm.h"
#include "backend.h"
#include "chat-template.h"
#include "engine-config.h"
#include "error.h"
#include "fault-injection.h"
#include "model.h"
#include "tokenizer.h"

struct served_model {
        struct model *model;
        struct tokenizer *tk;
        struct backend device;  /* the backend as opened, owned here */
        struct fault_injection *faults;
        struct backend backend; /* what the engine drives: device, or a fault injector around it */
        struct async_llm *llm;
        struct engine_config config; /* finalized against the model */
        char *name; /* the file's base name without .gguf */
};

/* Loads path and starts the engine with config (finalized here: max_model_len resolves
 * against the model's context). device: a name backend_open() knows ("cpu" is the only one that
 * serves today). chat_template: NULL, or a file whose text replaces the model's chat template;
 * a template that does not parse or render a one-message chat (chat_template_check()) is
 * refused, -EINVAL with a message naming the file, the line and the problem. */
int served_model_load(const char *path, const char *device, unsigned threads, const struct engine_config *config,
                      const char *chat_template, struct served_model *ret, struct error *err);
void served_model_unload(struct served_model *m);

/* The token ids a generate request of this prompt starts from: text (NULL: messages) as the
 * engine encodes a prompt, messages rendered with the chat template first, the assistant's
 * turn opened when add_generation_prompt. *ret is malloc()ed (never NULL on success).
 * -EINVAL with the reason (a template that does not render), -ENOMEM. */
int served_model_tokenize(const struct served_model *m, const char *text, const struct chat_message *messages,
                          size_t n_messages, bool add_generation_prompt, int32_t **ret, size_t *ret_n,
                          struct error *err);
