/* SPDX-License-Identifier: MIT */
#pragma once

/* Predicts how long a step takes from what it carries, fitted online from every step the
 * engine runs (recursive least squares on relative errors, with forgetting, so it follows a
 * machine whose speed drifts). A step costs a fixed part (reading every weight once: the memory-bound floor),
 * a part per prompt token, a part per decoding sequence, and a part per key/value position
 * its attention reads, priced apart for prompt chunks and for decodes: a chunk's queries
 * share each key and value row they read, while a decode reads its whole context from
 * memory for one query (on the Zen 4 machine ~0.6 against ~1.5 us a position). The slo
 * policy plans steps and admits requests with it; a margin taken from its recent
 * under-predictions keeps the plans on the safe side. A step that took over three times
 * its prediction is taken for a descheduled one (another process had the cores): it counts
 * in the reported error but neither in the fit nor the margin, unless such steps keep
 * coming (then the machine is slower, and the model follows). */

#include <stdbool.h>
#include <stdint.h>

#define STEP_MODEL_FEATURES 5
#define STEP_MODEL_WARMUP 16     /* steps before predictions are trusted */
#define STEP_MODEL_HISTORY 256   /* recent relative errors kept for the margin and stats */

/* What one step carries. */
struct step_shape {
        uint32_t n_prompt;  /* prompt (or recomputed) tokens */
        uint32_t n_decode;  /* decoding sequences: one token each */
        uint64_t prompt_context; /* key/value positions the prompt tokens' attention reads */
        uint64_t decode_context; /* those the decodes' attention reads */
        /* Best-effort requests among those: not priced (a token costs the same in either
         * class), but steps of latency-sensitive decodes alone keep a margin of their own. */
        uint32_t n_best_effort;
};

struct step_time_model {
        double theta[STEP_MODEL_FEATURES];
        double cov[STEP_MODEL_FEATURES][STEP_MODEL_FEATURES];
        uint64_t n_samples;
        /* relative errors (measured - predicted) / measured of the latest steps, after warm-up */
        double errors[STEP_MODEL_HISTORY];
        bool outliers[STEP_MODEL_HISTORY]; /* errors[i] is of a step left out of fit and margin */
        bool decodes_alone[STEP_MODEL_HISTORY]; /* errors[i] is of latency-sensitive decodes alone */
        uint32_t n_errors, next_error;
        uint32_t outlier_run; /* outlier-sized steps in a row */
};

void step_time_model_init(struct step_time_model *m);

/* The attention reads of a chunk of n tokens at positions start..start+n-1. */
uint64_t step_shape_context(uint32_t start, uint32_t n);

static inline bool step_time_model_ready(const struct step_time_model *m) {
        return m->n_samples >= STEP_MODEL_WARMUP;
}

/* Learns from a step of this shape that took seconds. */
void step_time_model_record(struct step_time_model *m, const struct step_shape *shape, double seconds);

/* Predicted seconds, never below 0; meaningful once ready. */
double step_time_model_predict(const struct step_time_model *m, const struct step_shape *shape);

/* The most prompt tokens (at most cap) of a chunk from position start that a step of this
 * shape can add and still be predicted to take at most seconds; 0 when not one. */
uint32_t step_time_model_fitting_chunk(const struct step_time_model *m, const struct step_shape *shape, uint32_t start,
                                       uint32_t cap, double seconds);

/* The factor to plan with: 1 + the 90th percentile of recent under-predictions, outliers
 * left out (at most 2); 1.25 before enough errors are known. */
double step_time_model_margin(const struct step_time_model *m);

/* The same, from the recent steps of latency-sensitive decodes alone (no prompt token, no
 * best-effort request): what slo admission judges. Best-effort work makes up most steps
 * and sets the margin above: its prompt chunks and long-context decodes are predicted less
 * closely, and the fit, pulled by them, over-predicts a few short decodes (a bench/coserve
 * trace: two of them predicted 6.3 ms, measured 5.6). The margin above until 16 such
 * steps are known; below 1 where they came in under their predictions. */
double step_time_model_decodes_alone_margin(const struct step_time_model *m);

/* Percentile (0..1) of the recent absolute relative errors, outliers included; 0 when
 * none. */
double step_time_model_error(const struct step_time_model *m, double quantile);
