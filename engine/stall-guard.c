/* SPDX-License-Identifier: MIT */
#include <math.h>

#include "stall-guard.h"

/* Weight of the newest measurement: follows a prompt whose tokens get dearer as it deepens
 * within a few steps, while one noisy step moves the estimate only halfway. */
#define SMOOTHING 0.5

void stall_guard_init(struct stall_guard *g, double limit) {
        *g = (struct stall_guard) { .limit = limit };
}

static void smooth(double *estimate, double sample) {
        *estimate = *estimate > 0 ? *estimate + SMOOTHING * (sample - *estimate) : sample;
}

void stall_guard_record(struct stall_guard *g, uint32_t n_decode, uint32_t n_prefill, double seconds) {
        if (g->limit <= 0 || n_decode == 0 || !(seconds > 0))
                return;
        if (n_prefill == 0) {
                smooth(&g->decode_token_time, seconds / n_decode);
                return;
        }
        if (g->decode_token_time <= 0)
                return;
        double prefill = seconds - g->decode_token_time * n_decode;
        if (prefill < 0)
                prefill = 0;
        smooth(&g->prefill_token_time, prefill / n_prefill);
}

uint32_t stall_guard_allowance(const struct stall_guard *g, uint32_t n_decode, uint32_t budget) {
        if (g->limit <= 0 || n_decode == 0 || g->decode_token_time <= 0)
                return budget;
        double decode_step = g->decode_token_time * n_decode;
        /* before any mixed step, price a prompt token like a decode */
        double per_token = g->prefill_token_time > 0 ? g->prefill_token_time : g->decode_token_time;
        double n = floor((g->limit - 1) * decode_step / per_token);
        if (!(n >= 1))
                return 1;
        return n < budget ? (uint32_t) n : budget;
}
