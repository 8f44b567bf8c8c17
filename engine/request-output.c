/* SPDX-License-Identifier: MIT */
#include <stdlib.h>

#include "request-output.h"

void request_output_free(struct request_output *o) {
        if (!o)
                return;
        for (uint32_t i = 0; i < o->n_outputs; i++) {
                struct completion_output *c = &o->outputs[i];
                free(c->text);
                free(c->token_ids);
                sample_results_free(c->logprobs, c->n_token_ids);
                free(c->stop_reason_text);
        }
        free(o->outputs);
        sample_results_free(o->prompt_logprobs, o->n_prompt);
        free(o->request_id);
        free(o->error);
        free(o->embedding);
        free(o);
}
