/* SPDX-License-Identifier: MIT */
#pragma once

/* Shared by the tokenizer, detokenizer and chat template tests: the model's tokenizer,
 * loaded once in main() before the runner forks, so that each test need not load it. */

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"

#define DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"

static struct tokenizer *model_tokenizer;
static char model_load_error[ERROR_MESSAGE_MAX + 256];

static inline const char *model_path(void) {
        const char *p = getenv("ASYNCLLM_MODEL");
        return p && *p ? p : DEFAULT_MODEL;
}

/* Never skips: a missing model is a failure that says how to get it. */
static inline void load_model_tokenizer(void) {
        struct error err = {};
        struct gguf_file *f;
        int r;

        r = gguf_open(model_path(), &f, &err);
        if (r < 0) {
                snprintf(model_load_error, sizeof(model_load_error),
                         "cannot open the model %s (set ASYNCLLM_MODEL, or run scripts/fetch-model): %s",
                         model_path(), err.message);
                return;
        }
        r = tokenizer_load(f, &model_tokenizer, &err);
        if (r < 0)
                snprintf(model_load_error, sizeof(model_load_error), "tokenizer_load(%s): %s", model_path(),
                         err.message);
        gguf_close(f);
}

static inline const struct tokenizer *require_tokenizer(void) {
        ck_assert_msg(model_tokenizer, "%s", model_load_error);
        return model_tokenizer;
}

static inline int run_suite(Suite *s) {
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        tokenizer_free(model_tokenizer);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
