/* SPDX-License-Identifier: MIT */
#pragma once

/* What the engine needs from a device: run one batch to logits. The CPU runner implements
 * it today; the CUDA backend will implement the same table. The engine never includes a
 * device header. */

#include "batch.h"
#include "error.h"

struct backend {
        void *impl;
        /* Runs batch; writes n_vocab logits per output token. A failure is an engine error. */
        int (*forward)(void *impl, const struct batch *batch, float *logits, struct error *err);
};
