/* SPDX-License-Identifier: MIT */
#pragma once

/* Predicts how long a step takes from what it carries, fitted online from every step the
 * engine runs (recursive least squares on relative errors, with forgetting), times a speed
 * each kind of step has shown over its latest few (the machine's drift is faster than the
 * fit can follow). A step costs a fixed part (reading every weight once: the memory-bound floor),
 * a part per prompt token, a part per decoding sequence, and a part per key/value position
 * its attention reads, priced apart for prompt chunks and for decodes: a chunk's queries
 * share each key and value row they read, while a decode reads its whole context from
 * memory for one query (~0.6 against ~1.5 us a position where measured). The slo
 * policy plans steps and admits requests with it; a margin taken from its recent
 * under-predictions keeps the plans on the safe side. A step that took over three times
 * the fit is taken for a descheduled one (another process had the cores): it counts
 * in the reported error but neither in the fit nor the margin, unless such steps keep
 * coming (then the machine is slower, and the model follows). */

#include <stdbool.h>
#include <stdint.h>

#define STEP_MODEL_FEATURES 5
#define STEP_MODEL_WARMUP 16     /* steps before predictions are trusted */
#define STEP_MODEL_HISTORY 256   /* recent relative errors kept for the margin and stats */
#define STEP_MODEL_ALONE_HISTORY 64 /* steps of latency-sensitive decodes alone kept */
#define STEP_MODEL_ALONE_HORIZON 5.0 /* seconds of steps after the newest of them they are trusted */
#define STEP_MODEL_DECODE_ONLY_HISTORY 64 /* decode-only steps with best-effort work kept */
#define STEP_MODEL_KINDS 4 /* kinds of step with a speed of their own (step_time_model_predict()) */
#define STEP_MODEL_CALIBRATED_DECODES 8 /* counts of decodes alone timed at start (decode-calibration.h) */

/* Steps of 1..n short decodes alone, timed when the engine started (decode-calibration.h). */
struct decode_calibration {
        double seconds[STEP_MODEL_CALIBRATED_DECODES]; /* seconds[k - 1]: the median step of k decodes */
        uint32_t n;       /* counts timed: 0 without them */
        uint64_t context; /* positions each decode's attention read, its own token's included */
};

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
        uint32_t n_errors, next_error;
        /* The latest steps of latency-sensitive decodes alone, outlier-sized ones left
         * out: their shapes and times, set against the fit as it is when asked (it drifts
         * with best-effort work, and in that corner of it most), and the seconds of the
         * steps since the newest. */
        struct step_shape alone_shapes[STEP_MODEL_ALONE_HISTORY];
        double alone_seconds[STEP_MODEL_ALONE_HISTORY];
        uint32_t n_alone, next_alone;
        double seconds_since_alone;
        uint32_t outlier_run; /* outlier-sized steps in a row */
        double shortest_seconds; /* the shortest step ever recorded; 0 before any */
        /* The least seconds a prompt token has taken, over steps of at least LARGE_CHUNK
         * prompt tokens (their time is mostly the tokens'); 0 before any. */
        double cheapest_prompt_token;
        /* The decodes of decode-only steps with best-effort work, and the positions they
         * read, forgotten as the fit forgets. */
        double best_effort_decodes, best_effort_decode_context;
        /* The latest of those steps, stalls left out: their shapes and times, and the clock
         * (seconds of steps recorded, below) when each ran. */
        struct step_shape decode_only_shapes[STEP_MODEL_DECODE_ONLY_HISTORY];
        double decode_only_seconds[STEP_MODEL_DECODE_ONLY_HISTORY], decode_only_clock[STEP_MODEL_DECODE_ONLY_HISTORY];
        uint32_t n_decode_only, next_decode_only;
        double clock; /* the sum of every recorded step's seconds */
        /* Per kind of step, the log of measured / fitted time, averaged over its latest
         * steps with a short memory (predictions are the fit times its exponential). */
        double log_speed[STEP_MODEL_KINDS];
        /* what step_time_model_calibrated_decodes() prices from (step_time_model_set_calibration()) */
        struct decode_calibration calibration;
};

void step_time_model_init(struct step_time_model *m);

/* The attention reads of a chunk of n tokens at positions start..start+n-1. */
uint64_t step_shape_context(uint32_t start, uint32_t n);

static inline bool step_time_model_ready(const struct step_time_model *m) {
        return m->n_samples >= STEP_MODEL_WARMUP;
}

/* Learns from a step of this shape that took seconds. */
void step_time_model_record(struct step_time_model *m, const struct step_shape *shape, double seconds);

/* The least-squares fit's seconds for a step of this shape, never below 0. */
double step_time_model_fit(const struct step_time_model *m, const struct step_shape *shape);

/* Predicted seconds: the fit times how its latest steps of the same kind (decodes alone,
 * decodes with best-effort work, prompt chunks of under 64 or of more tokens) ran against
 * it. The machine's speed drifts over a few dozen steps, faster than the fit can follow
 * without forgetting what rarer shapes cost, and each kind drifts its own way. Never below
 * the shortest step recorded, nor below its prompt tokens at half the least a prompt token
 * has taken: after long runs of one shape the fit can swing to nothing for another, and a
 * long chunk priced at nothing would run whole amid latency-sensitive decodes. Meaningful
 * once ready. */
double step_time_model_predict(const struct step_time_model *m, const struct step_shape *shape);

/* What adding work to a step of shape base, making it with, is predicted to add to its
 * time: the fit's difference at with's speed. */
double step_time_model_predict_added(const struct step_time_model *m, const struct step_shape *base,
                                     const struct step_shape *with);

/* The most prompt tokens (at most cap) of a chunk from position start that a step of this
 * shape can add and still be predicted to take at most seconds; 0 when not one. */
uint32_t step_time_model_fitting_chunk(const struct step_time_model *m, const struct step_shape *shape, uint32_t start,
                                       uint32_t cap, double seconds);

/* The factor to plan with: 1 + the 90th percentile of recent under-predictions, outliers
 * left out (at most 2); 1.25 before enough errors are known. */
double step_time_model_margin(const struct step_time_model *m);

/* How many times their predictions steps of n_decode latency-sensitive decodes alone (no
 * prompt token, no best-effort request) take: the mean of measured / predicted over the
 * latest STEP_MODEL_ALONE_HISTORY such steps of any count, against the fit as it is now,
 * or over those of n_decode decodes alone when 4 of them are kept (the fit swings most
 * along the count of decodes: a factor learned from steps of one does not correct its
 * price for two). What slo admission prices such steps with: best-effort work makes up
 * most steps, and the fit extrapolates to these from it, far off for a few short decodes.
 * A mean, not a percentile: a request's time per token is the mean of its steps. NAN
 * until 16 are known, and once steps of STEP_MODEL_ALONE_HORIZON seconds have run since
 * the newest: only admitted requests make them, and judged on old ones (or on the
 * extrapolation) every request can be refused, so that none comes to renew them. The
 * horizon is in seconds, not steps: best-effort prompt chunks make few, long steps. */
double step_time_model_decodes_alone_factor(const struct step_time_model *m, uint32_t n_decode);

/* step_time_model_decodes_alone_factor() when it is that of kept steps of n_decode decodes
 * alone (4 of them); NAN when it would be that of all kept steps, or is not known. */
double step_time_model_decodes_alone_own_factor(const struct step_time_model *m, uint32_t n_decode);

/* What one more decode at this context adds to a step of decodes, by the fit along the
 * decode-only steps with best-effort work it has seen: their count of decodes and their
 * reads move together there (each decode at about their mean context), so the sum of the
 * fit's two coefficients along that line is what those steps pin, however it splits them
 * (their split swings). A bound for a decode at no more than their mean context, whose
 * reads cost no more; NAN for one above it or before such a step. */
double step_time_model_extra_decode_bound(const struct step_time_model *m, uint64_t context);

/* The mean time of recent decode-only steps with best-effort work that carry at least as
 * many decodes as these, reading at least as many positions: those with the fewest decodes
 * of which 4 are kept, within the last STEP_MODEL_ALONE_HORIZON seconds of steps. A step's
 * cost grows with its decodes and its reads, so these bound what a step of these decodes
 * alone costs, by measurement rather than by the fit: where best-effort decodes read long
 * contexts the fit cannot tell what a decode costs from what a position costs, and both it
 * and step_time_model_extra_decode_bound() can price two short decodes above what a step
 * of one short and one long decode takes. NAN when fewer than 4 steps qualify. */
double step_time_model_dominating_step(const struct step_time_model *m, const struct step_shape *decodes);

/* The price of a step of n decodes alone, each at the same context, given a step of one of
 * them priced at one_step, and a step of one at the calibration's context at
 * one_at_calibration (both as the machine runs now): n steps of one, less what a batch of
 * n shares (the weights' reads, the threads' meetings), as the calibration measured it and
 * scaled to the machine's speed now (beyond the counts timed, each decode more shares
 * what one did in the largest batch timed), and never less than one_step. The fit cannot
 * tell this: it learns decodes mostly from best-effort ones at long contexts, whose count
 * and reads move together, and before a step of n of them alone has run nothing else
 * measures it (the bounds below can price such a batch at ~1.6x what it takes, and
 * refuse it). NAN when not calibrated or for n < 2. */
double step_time_model_calibrated_decodes(const struct step_time_model *m, uint32_t n, double one_step,
                                          double one_at_calibration);

/* Keeps the steps of decodes alone timed at start: what step_time_model_calibrated_decodes()
 * prices from, and, its step of one decode being a step this engine ran, a bound on the
 * shortest step (below). */
void step_time_model_set_calibration(struct step_time_model *m, const struct decode_calibration *c);

/* The shortest step this engine has run, of any shape, the calibration's included: no step
 * of latency-sensitive decodes can be shorter, whatever the fit says (admission refuses a
 * slo below it before it knows their factor); 0 before the first. */
static inline double step_time_model_shortest_step(const struct step_time_model *m) {
        return m->shortest_seconds;
}

/* Percentile (0..1) of the recent absolute relative errors, outliers included; 0 when
 * none. */
double step_time_model_error(const struct step_time_model *m, double quantile);
