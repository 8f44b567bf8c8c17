/* SPDX-License-Identifier: MIT */
#include <math.h>

#include "rope-angles.h"

/* The pair where YaRN's blend starts or ends: the one that turns n_rotations times in
 * n_ctx_orig positions. */
static float yarn_correction_pair(uint32_t rope_dim, uint32_t n_ctx_orig, float n_rotations, float base) {
        return (float) rope_dim * logf((float) n_ctx_orig / (n_rotations * 2.0f * (float) M_PI)) / (2.0f * logf(base));
}

void rope_angles_init(struct rope_angles *ra, const struct model *m, bool sliding, uint32_t max_model_len) {
        const struct model_hparams *hp = &m->hp;
        float base = sliding ? hp->rope_theta_local : hp->rope_theta;
        ra->n_pairs = hp->rope_dim / 2;
        ra->theta_scale = powf(base, -2.0f / (float) hp->rope_dim);
        ra->freq_scale = sliding ? 1.0f : hp->rope_scale;
        ra->ext_factor = hp->rope_ext_factor;
        ra->magnitude = hp->rope_attn_factor;
        float low = floorf(yarn_correction_pair(hp->rope_dim, hp->n_ctx_orig, hp->rope_beta_fast, base));
        float high = ceilf(yarn_correction_pair(hp->rope_dim, hp->n_ctx_orig, hp->rope_beta_slow, base));
        ra->ramp_low = low > 0.0f ? low : 0.0f;
        high = high < (float) (hp->rope_dim - 1) ? high : (float) (hp->rope_dim - 1);
        ra->ramp_span = fmaxf(0.001f, high - ra->ramp_low);
        ra->factors = model_rope_factors(m, max_model_len);
}

void rope_angles_row(const struct rope_angles *ra, float position, float *cos, float *sin) {
        float theta = position, magnitude = ra->magnitude;
        if (ra->ext_factor != 0.0f)
                magnitude *= 1.0f + 0.1f * logf(1.0f / ra->freq_scale);
        for (uint32_t i = 0; i < ra->n_pairs; i++) {
                float unscaled = ra->factors ? theta / ra->factors[i] : theta;
                float angle = ra->freq_scale * unscaled;
                if (ra->ext_factor != 0.0f) {
                        /* pairs below the ramp keep their unscaled angle, those above it the scaled one */
                        float y = ((float) i - ra->ramp_low) / ra->ramp_span;
                        float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * ra->ext_factor;
                        angle = angle * (1.0f - mix) + unscaled * mix;
                }
                cos[i] = cosf(angle) * magnitude;
                sin[i] = sinf(angle) * magnitude;
                theta *= ra->theta_scale;
        }
}
