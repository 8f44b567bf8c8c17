/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <math.h>
#include <string.h>

#include "dot-k-quants.h"
#include "dot.h"
#include "float16.h"

/* The exact integers of one super-block that every order is made of. */
struct super_block_sums {
        int32_t lanes[PACKED_LANES]; /* the vector product's lanes (Q6_K's less its -32 bias) */
        int32_t sub[QK_K / 16];      /* per sub-block: scale x its exact product */
        int32_t min[QK_K / 16];      /* per sub-block: min x its activation sum (Q2_K, Q4_K, Q5_K) */
        unsigned n_sub;
};

static int32_t sum_of(const int32_t *v, unsigned n) {
        int32_t s = 0;
        for (unsigned i = 0; i < n; i++)
                s += v[i];
        return s;
}

/* Accumulators of a row's product; which are used depends on the order. */
struct k_accumulators {
        float lanes[PACKED_LANES];
        float acc, accm, summs;
};

/* The vector product: one fma per lane and super-block. */
static void vector_order(struct k_accumulators *a, const struct super_block_sums *s, float d_a, float d_w) {
        float d = d_a * d_w;
        for (unsigned l = 0; l < PACKED_LANES; l++)
                a->lanes[l] = fmaf((float) s->lanes[l], d, a->lanes[l]);
}

/* The tiled prompt product: the super-block's sum scaled by the weight's d, its mins taken off
 * by one fused step, then added times the activation's d by another (llama.cpp's compiler
 * fuses that multiply and add). */
static void tiled_order(struct k_accumulators *a, const struct super_block_sums *s, bool mins, float d_a, float d_w,
                        float dmin_w) {
        float r = (float) sum_of(s->sub, s->n_sub) * d_w;
        if (mins)
                r = fmaf(-dmin_w, (float) sum_of(s->min, s->n_sub), r);
        a->acc = fmaf(r, d_a, a->acc);
}

/* The repacked products: one fma pair per run of per_fma sub-blocks. */
static void runs_order(struct k_accumulators *a, const struct super_block_sums *s, unsigned per_fma, float d_a,
                       float d_w, float dmin_w) {
        for (unsigned s0 = 0; s0 < s->n_sub; s0 += per_fma) {
                a->acc = fmaf((float) sum_of(s->sub + s0, per_fma), d_w * d_a, a->acc);
                a->accm = fmaf((float) sum_of(s->min + s0, per_fma), dmin_w * d_a, a->accm);
        }
}

/* The lane (0..7) of element e in the vector products: elements 4l..4l+3 of each run of 32. */
static unsigned lane_of(unsigned e) {
        return e % 32 / 4;
}

/* Sub-block products of n_sub sub-blocks from per-element quants q and scales, and the mins
 * against the activation sums (Q8_K's bsums are per 16 elements). */
static void sums_from(struct super_block_sums *s, const int32_t *q, const int32_t *scale, const int32_t *min,
                      unsigned n_sub, const struct block_q8_K *a) {
        unsigned width = QK_K / n_sub;
        memset(s, 0, sizeof(*s));
        s->n_sub = n_sub;
        for (unsigned sb = 0; sb < n_sub; sb++) {
                int32_t product = 0;
                for (unsigned e = sb * width; e < sb * width + width; e++) {
                        product += q[e] * a->qs[e];
                        s->lanes[lane_of(e)] += scale[sb] * q[e] * a->qs[e];
                }
                s->sub[sb] = scale[sb] * product;
                if (min)
                        s->min[sb] = min[sb] * (width == 16 ? a->bsums[sb] : a->bsums[2 * sb] + a->bsums[2 * sb + 1]);
        }
}

/* Q4_K's and Q5_K's eight 6-bit scales and mins. */
static void scales_and_mins(const uint8_t packed[12], int32_t scale[8], int32_t min[8]) {
        for (unsigned sb = 0; sb < 8; sb++) {
                uint8_t sc, m;
                k_quant_scale_min(packed, sb, &sc, &m);
                scale[sb] = sc;
                min[sb] = m;
        }
}

float dot_q4_K_reference(const void *weight_row, const struct block_q8_K *act, size_t n_super, bool batched) {
        const struct block_q4_K *w = weight_row;
        struct k_accumulators a = { 0 };
        for (size_t b = 0; b < n_super; b++) {
                int32_t q[QK_K], scale[8], min[8];
                struct super_block_sums s;
                for (unsigned e = 0; e < QK_K; e++)
                        q[e] = (int32_t) k_quant_q4_element(w[b].qs, e);
                scales_and_mins(w[b].scales, scale, min);
                sums_from(&s, q, scale, min, 8, &act[b]);
                runs_order(&a, &s, batched ? 2 : 8, act[b].d, f16_to_f32(w[b].d), f16_to_f32(w[b].dmin));
        }
        return a.acc - a.accm;
}

float dot_q2_K_reference(const void *weight_row, const struct block_q8_K *act, size_t n_super, bool batched) {
        const struct block_q2_K *w = weight_row;
        struct k_accumulators a = { 0 };
        for (size_t b = 0; b < n_super; b++) {
                int32_t q[QK_K], scale[16], min[16];
                struct super_block_sums s;
                for (unsigned e = 0; e < QK_K; e++)
                        q[e] = (int32_t) k_quant_q2_element(&w[b], e);
                for (unsigned sb = 0; sb < 16; sb++) {
                        scale[sb] = w[b].scales[sb] & 15;
                        min[sb] = w[b].scales[sb] >> 4;
                }
                sums_from(&s, q, scale, min, 16, &act[b]);
                runs_order(&a, &s, batched ? 8 : 16, act[b].d, f16_to_f32(w[b].d), f16_to_f32(w[b].dmin));
        }
        return a.acc - a.accm;
}

float dot_q3_K_reference(const void *weight_row, const struct block_q8_K *act, size_t n_super, bool batched) {
        const struct block_q3_K *w = weight_row;
        struct k_accumulators a = { 0 };
        for (size_t b = 0; b < n_super; b++) {
                int32_t q[QK_K], scale[16];
                struct super_block_sums s;
                for (unsigned e = 0; e < QK_K; e++)
                        q[e] = k_quant_q3_element(&w[b], e);
                for (unsigned sb = 0; sb < 16; sb++)
                        scale[sb] = k_quant_q3_scale(w[b].scales, sb) - 32;
                sums_from(&s, q, scale, NULL, 16, &act[b]);
                if (batched)
                        tiled_order(&a, &s, false, act[b].d, f16_to_f32(w[b].d), 0.0f);
                else
                        vector_order(&a, &s, act[b].d, f16_to_f32(w[b].d));
        }
        return batched ? a.acc : lanes_sum8(a.lanes);
}

float dot_q5_K_reference(const void *weight_row, const struct block_q8_K *act, size_t n_super, bool batched) {
        const struct block_q5_K *w = weight_row;
        struct k_accumulators a = { 0 };
        for (size_t b = 0; b < n_super; b++) {
                int32_t q[QK_K], scale[8], min[8];
                struct super_block_sums s;
                for (unsigned e = 0; e < QK_K; e++)
                        q[e] = (int32_t) k_quant_q5_element(&w[b], e);
                scales_and_mins(w[b].scales, scale, min);
                sums_from(&s, q, scale, min, 8, &act[b]);
                float d_w = f16_to_f32(w[b].d), dmin_w = f16_to_f32(w[b].dmin);
                if (batched)
                        tiled_order(&a, &s, true, act[b].d, d_w, dmin_w);
                else {
                        vector_order(&a, &s, act[b].d, d_w);
                        a.summs = fmaf(-act[b].d * dmin_w, (float) sum_of(s.min, 8), a.summs);
                }
        }
        return batched ? a.acc : lanes_sum8(a.lanes) + a.summs;
}

float dot_q6_K_reference(const void *weight_row, const struct block_q8_K *act, size_t n_super, bool batched) {
        const struct block_q6_K *w = weight_row;
        struct k_accumulators a = { 0 };
        for (size_t b = 0; b < n_super; b++) {
                int32_t q[QK_K], scale[16];
                struct super_block_sums s;
                for (unsigned e = 0; e < QK_K; e++)
                        q[e] = (int32_t) k_quant_q6_element(&w[b], e) - 32;
                for (unsigned sb = 0; sb < 16; sb++)
                        scale[sb] = w[b].scales[sb];
                sums_from(&s, q, scale, NULL, 16, &act[b]);
                /* the vector product keeps the quants unsigned and takes 32 x the scaled activation
                 * sums of runs 2l and 2l + 1 off lane l, not each element's own lane */
                for (unsigned l = 0; l < PACKED_LANES; l++) {
                        for (unsigned e = 0; e < QK_K; e++)
                                if (lane_of(e) == l)
                                        s.lanes[l] += 32 * scale[e / 16] * act[b].qs[e];
                        s.lanes[l] -= 32 * (scale[2 * l] * act[b].bsums[2 * l] + scale[2 * l + 1] * act[b].bsums[2 * l + 1]);
                }
                if (batched)
                        tiled_order(&a, &s, false, act[b].d, f16_to_f32(w[b].d), 0.0f);
                else
                        vector_order(&a, &s, act[b].d, f16_to_f32(w[b].d));
        }
        return batched ? a.acc : lanes_sum8(a.lanes);
}

bool k_quant_batched_order(enum tensor_type type, uint32_t position, uint32_t n_prompt) {
        if (position >= n_prompt)
                return false;
        uint32_t first = position - position % K_QUANT_PROMPT_UBATCH;
        uint32_t size = n_prompt - first < K_QUANT_PROMPT_UBATCH ? n_prompt - first : K_QUANT_PROMPT_UBATCH;
        if (type == TENSOR_Q4_K || type == TENSOR_Q2_K)
                return position - first < size - size % 4;
        return size >= 8;
}

void quantize_row_q8_K(const float *x, struct block_q8_K *out, size_t n) {
        for (size_t b = 0; b < n / QK_K; b++, x += QK_K) {
                float amax = 0.0f, max = 0.0f;
                for (unsigned j = 0; j < QK_K; j++)
                        if (fabsf(x[j]) > amax) {
                                amax = fabsf(x[j]);
                                max = x[j];
                        }
                memset(&out[b], 0, sizeof(out[b]));
                if (amax == 0.0f)
                        continue;
                float iscale = -127.0f / max;
                for (unsigned j = 0; j < QK_K; j++) {
                        /* the product rounded to float, then to the nearest integer, half to even
                         * (llama.cpp's generic build adds 1.5 * 2^23 to the rounded product) */
                        int32_t q = (int32_t) nearbyintf(iscale * x[j]);
                        out[b].qs[j] = (int8_t) (q < 127 ? q : 127);
                        out[b].bsums[j / 16] = (int16_t) (out[b].bsums[j / 16] + out[b].qs[j]);
                }
                out[b].d = 1.0f / iscale;
        }
}
