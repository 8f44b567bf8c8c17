/* SPDX-License-Identifier: MIT */
#include <math.h>

#include "stall-guard.h"

void stall_guard_begin(struct stall_guard *g, double limit, const struct step_time_model *m,
                       const struct step_shape *decodes, uint32_t mixed_in_a_row) {
        *g = (struct stall_guard) { .model = m, .shape = *decodes, .active = limit > 0 && decodes->n_decode > 0 };
        if (!g->active)
                return;
        g->decodes_only = mixed_in_a_row >= STALL_GUARD_PROBE_EVERY;
        double decode_step = step_time_model_ready(m) ? step_time_model_predict(m, decodes) : 0;
        if (decode_step > 0) /* the margin keeps ~9 in 10 steps within the limit, not half */
                g->allowed = limit * decode_step / step_time_model_margin(m);
        else {
                double n = floor((limit - 1) * decodes->n_decode);
                g->untimed_left = n >= 1 ? (n < UINT32_MAX ? (uint32_t) n : UINT32_MAX) : 1;
        }
}

uint32_t stall_guard_grant(struct stall_guard *g, uint32_t start, uint32_t cap) {
        if (!g->active || cap == 0)
                return cap;
        if (g->decodes_only)
                return 0;
        uint32_t n;
        if (g->allowed > 0)
                n = step_time_model_fitting_chunk(g->model, &g->shape, start, cap, g->allowed);
        else {
                n = cap < g->untimed_left ? cap : g->untimed_left;
                g->untimed_left -= n;
        }
        if (n == 0 && g->shape.n_prompt == 0)
                n = 1; /* prompts keep moving however dear their tokens */
        g->shape.n_prompt += n;
        g->shape.prompt_context += step_shape_context(start, n);
        return n;
}
