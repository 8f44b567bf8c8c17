/* SPDX-License-Identifier: MIT */
#pragma once

/* The cosines and sines RoPE turns a position's pairs by, for one kind of layer (global or
 * sliding), with the context extension the file declares: linear scaling, YaRN, frequency
 * factors. Every backend takes its tables from here, so that they agree to the bit. The
 * arithmetic is llama.cpp's, in its order: pair i's unscaled angle is position *
 * base^(-2i / rope_dim), made by repeated multiplication, divided by factor i. */

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

struct rope_angles {
        uint32_t n_pairs;     /* rope_dim / 2 */
        float theta_scale;    /* base^(-2 / rope_dim) */
        float freq_scale;     /* the scaled angle is freq_scale times the unscaled one */
        float ext_factor;     /* YaRN's share of the unscaled angle at the ramp's low end; 0 = none */
        float magnitude;      /* cos and sin are multiplied by it */
        float ramp_low;       /* YaRN's ramp: the pair where it starts, */
        float ramp_span;      /* and how many pairs it takes (at least 0.001) */
        const float *factors; /* (n_pairs) divisors of the unscaled angles, or NULL */
};

/* The angles of m's sliding-window layers (sliding) or global layers, serving sequences of up
 * to max_model_len positions (which chooses between long and short frequency factors). */
void rope_angles_init(struct rope_angles *ra, const struct model *m, bool sliding, uint32_t max_model_len);

/* cos[i] and sin[i] for the n_pairs pairs of a token at position. */
void rope_angles_row(const struct rope_angles *ra, float position, float *cos, float *sin);
