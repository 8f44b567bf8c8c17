/* SPDX-License-Identifier: MIT */
#pragma once

/* The model's matmul weights, indexed layer by layer (WEIGHTS_PER_LAYER each) with the output
 * last, and their repacked copy for the packed product (packed-weights.h). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dot.h"
#include "error.h"
#include "model.h"
#include "packed-weights.h"

/* The matmul weights repacked for the packed product (packed-weights.h), all in one
 * anonymous arena on large pages; the file's pages of those tensors are given back. */
#define WEIGHTS_PER_LAYER 7
struct packed_model {
        uint8_t *arena;
        size_t arena_bytes;
        struct packed_weights *weights; /* (n_layer * WEIGHTS_PER_LAYER + 1), the output last; data NULL if not packed */
        bool keep_cached;               /* weight-residency.h's choice for the arena */
};

static inline const struct weight *layer_weight(const struct model_layer *l, unsigned k) {
        const struct weight *w[WEIGHTS_PER_LAYER] = { &l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down };
        return w[k];
}

static inline const struct weight *matmul_weight(const struct model *m, size_t i) {
        return i == (size_t) m->hp.n_layer * WEIGHTS_PER_LAYER ? &m->output
                                                                  : layer_weight(&m->layers[i / WEIGHTS_PER_LAYER], i % WEIGHTS_PER_LAYER);
}

static inline size_t n_matmul_weights(const struct model *m) {
        return (size_t) m->hp.n_layer * WEIGHTS_PER_LAYER + 1;
}

/* Whether matmul weight i takes the single-accumulator product (dot.h). */
static inline bool single_accumulator_product(const struct model *m, size_t i) {
        return weight_single_accumulator(matmul_weight(m, i), i == (size_t) m->hp.n_layer * WEIGHTS_PER_LAYER);
}

/* Repacks every quantized matmul weight of m that kernels have a packed product for into one
 * arena; nothing when none is. */
int packed_model_build(const struct model *m, const struct dot_kernels *kernels, struct packed_model *pm,
                       struct error *err);
void packed_model_free(struct packed_model *pm);
