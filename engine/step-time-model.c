/* SPDX-License-Identifier: MIT */
#include <math.h>
#include <string.h>

#include "quantile.h"
#include "step-time-model.h"

/* Scales that bring every feature's coefficient near a step's duration, which keeps the
 * least-squares update well conditioned. */
#define PROMPT_SCALE 64.0
#define DECODE_SCALE 8.0
#define PROMPT_CONTEXT_SCALE 16384.0
#define DECODE_CONTEXT_SCALE 4096.0

/* A window of about two hundred steps: the shape of the cost; the kinds' speeds follow the
 * machine's drift. A shorter memory makes the fit chaotic (times moved by a millionth part
 * its predictions after a few thousand steps: test-slo-policy replays a trace to hold
 * that), and a longer one fits no better (docs/design.md, the step-time model). */
#define FORGETTING 0.995
/* Forgetting inflates the covariance along directions the steps do not vary in (a run of
 * decode-only steps says nothing about prompt tokens); capping its trace keeps the next
 * varied step from throwing the fit about. */
#define MAX_COV_TRACE 1e4
#define INITIAL_COV 1e2

/* A step that took more than this times the fit is taken for a descheduled one:
 * on a shared machine another process's wake-up stalls every thread of a step at its next
 * barrier. Such steps are rare and arbitrarily long; learning from them pulled the fit up
 * for every step, and counting them in the margin (a 90th percentile) pushed it to its cap
 * once they were a tenth of the steps, so every plan paid for them. */
#define OUTLIER_RATIO 3.0
/* Outlier-sized steps in a row after which they are not outliers any more: the machine
 * (or the work) is that much slower, and the fit must follow. */
#define MAX_OUTLIER_RUN 4

/* Weight of a step in its kind's speed: about the last three steps of the kind, which
 * roughly halves the 90th percentile of under-prediction (what the margin covers); other
 * weights from 0.1 to 0.5 did as well. */
#define SPEED_WEIGHT 0.3
/* A prompt chunk of at least this many tokens makes a step of the prompt kind: its time is
 * mostly the chunk's products, not the weights' reading and the decodes. */
#define LARGE_CHUNK 64

void step_time_model_init(struct step_time_model *m) {
        memset(m, 0, sizeof(*m));
        for (int i = 0; i < STEP_MODEL_FEATURES; i++)
                m->cov[i][i] = INITIAL_COV;
}

uint64_t step_shape_context(uint32_t start, uint32_t n) {
        /* position p attends to p + 1 positions */
        return (uint64_t) n * start + (uint64_t) n * (n + 1) / 2;
}

static void features(const struct step_shape *s, double x[STEP_MODEL_FEATURES]) {
        x[0] = 1.0;
        x[1] = s->n_prompt / PROMPT_SCALE;
        x[2] = s->n_decode / DECODE_SCALE;
        x[3] = (double) s->prompt_context / PROMPT_CONTEXT_SCALE;
        x[4] = (double) s->decode_context / DECODE_CONTEXT_SCALE;
}

static double dot(const double *a, const double *b) {
        double sum = 0;
        for (int i = 0; i < STEP_MODEL_FEATURES; i++)
                sum += a[i] * b[i];
        return sum;
}

double step_time_model_fit(const struct step_time_model *m, const struct step_shape *shape) {
        double x[STEP_MODEL_FEATURES];
        features(shape, x);
        double t = dot(m->theta, x);
        return t > 0 ? t : 0;
}

static unsigned step_kind(const struct step_shape *s) {
        if (s->n_prompt == 0)
                return s->n_best_effort == 0 ? 0 : 1;
        return s->n_prompt < LARGE_CHUNK ? 2 : 3;
}

static double speed(const struct step_time_model *m, const struct step_shape *shape) {
        return exp(m->log_speed[step_kind(shape)]);
}

/* A prediction from the fit's seconds for this shape: times its kind's speed, at least the
 * floors. */
static double priced(const struct step_time_model *m, const struct step_shape *shape, double fitted) {
        double predicted = fitted * speed(m, shape);
        /* half the least a prompt token has taken: a step's time per token carries its
         * fixed part, so a bigger chunk than any seen may come in cheaper */
        double floor = shape->n_prompt * m->cheapest_prompt_token / 2;
        if (floor < m->shortest_seconds)
                floor = m->shortest_seconds;
        return predicted > floor ? predicted : floor;
}

double step_time_model_predict(const struct step_time_model *m, const struct step_shape *shape) {
        return priced(m, shape, step_time_model_fit(m, shape));
}

double step_time_model_predict_added(const struct step_time_model *m, const struct step_shape *base,
                                     const struct step_shape *with) {
        double added = step_time_model_fit(m, with) - step_time_model_fit(m, base);
        return added > 0 ? added * speed(m, with) : 0;
}

static bool chunk_fits(const struct step_time_model *m, const struct step_shape *shape, uint32_t start, uint32_t n,
                       double seconds) {
        struct step_shape with = *shape;
        with.n_prompt += n;
        with.prompt_context += step_shape_context(start, n);
        return step_time_model_predict(m, &with) <= seconds;
}

uint32_t step_time_model_fitting_chunk(const struct step_time_model *m, const struct step_shape *shape, uint32_t start,
                                       uint32_t cap, double seconds) {
        if (chunk_fits(m, shape, start, cap, seconds))
                return cap;
        uint32_t lo = 0, hi = cap; /* lo == 0 or fits; hi does not */
        while (hi - lo > 1) {
                uint32_t mid = lo + (hi - lo) / 2;
                if (chunk_fits(m, shape, start, mid, seconds))
                        lo = mid;
                else
                        hi = mid;
        }
        return lo;
}

/* Keeps seconds as the shortest step run when it is. */
static void lower_shortest(struct step_time_model *m, double seconds) {
        if (m->shortest_seconds == 0 || seconds < m->shortest_seconds)
                m->shortest_seconds = seconds;
}

void step_time_model_set_calibration(struct step_time_model *m, const struct decode_calibration *c) {
        m->calibration = *c;
        /* Without it, where best-effort work ran from the start, the shortest step was a
         * best-effort chunk's and admission, knowing no step of decodes alone, refused
         * every latency-sensitive request paced faster: the only ones that would have made
         * such steps. */
        if (c->n > 0 && c->seconds[0] > 0)
                lower_shortest(m, c->seconds[0]);
}

void step_time_model_record(struct step_time_model *m, const struct step_shape *shape, double seconds) {
        if (!(seconds > 0) || !isfinite(seconds))
                return;
        if (shape->n_prompt == 0 && shape->n_best_effort > 0 && shape->n_decode > 0) {
                m->best_effort_decodes = m->best_effort_decodes * FORGETTING + shape->n_decode;
                m->best_effort_decode_context = m->best_effort_decode_context * FORGETTING + (double) shape->decode_context;
        }
        double x[STEP_MODEL_FEATURES], px[STEP_MODEL_FEATURES];
        features(shape, x);
        unsigned kind = step_kind(shape);
        double fitted = step_time_model_fit(m, shape), predicted = priced(m, shape, fitted);
        lower_shortest(m, seconds);
        if (shape->n_prompt >= LARGE_CHUNK &&
            (m->cheapest_prompt_token == 0 || seconds / shape->n_prompt < m->cheapest_prompt_token))
                m->cheapest_prompt_token = seconds / shape->n_prompt;

        bool outlier = false;
        m->seconds_since_alone += seconds;
        m->clock += seconds;
        if (step_time_model_ready(m)) { /* judge the prediction made before learning from it */
                /* against the fit, which moves slowly: judged against the kinds' speeds,
                 * a stall's steps stopped looking like one after three or four of them,
                 * and were kept as steps of decodes alone */
                bool stalled = fitted > 0 && seconds > OUTLIER_RATIO * fitted;
                if (stalled) {
                        outlier = m->outlier_run < MAX_OUTLIER_RUN;
                        if (outlier)
                                m->outlier_run++;
                } else
                        m->outlier_run = 0;
                m->errors[m->next_error] = (seconds - predicted) / seconds;
                m->outliers[m->next_error] = outlier;
                m->next_error = (m->next_error + 1) % STEP_MODEL_HISTORY;
                if (m->n_errors < STEP_MODEL_HISTORY)
                        m->n_errors++;
                if (!stalled && shape->n_prompt == 0 && shape->n_decode > 0 && shape->n_best_effort > 0) {
                        m->decode_only_shapes[m->next_decode_only] = *shape;
                        m->decode_only_seconds[m->next_decode_only] = seconds;
                        m->decode_only_clock[m->next_decode_only] = m->clock;
                        m->next_decode_only = (m->next_decode_only + 1) % STEP_MODEL_DECODE_ONLY_HISTORY;
                        if (m->n_decode_only < STEP_MODEL_DECODE_ONLY_HISTORY)
                                m->n_decode_only++;
                }
                /* Kept only within the outlier bound, even past a run of them: the fit
                 * follows a slower machine, and the factor is taken against the fit, but a
                 * stall's steps alone would hold the factor high until every request after
                 * them was refused. */
                if (!stalled && shape->n_prompt == 0 && shape->n_best_effort == 0) {
                        m->alone_shapes[m->next_alone] = *shape;
                        m->alone_seconds[m->next_alone] = seconds;
                        m->next_alone = (m->next_alone + 1) % STEP_MODEL_ALONE_HISTORY;
                        if (m->n_alone < STEP_MODEL_ALONE_HISTORY)
                                m->n_alone++;
                        m->seconds_since_alone = 0;
                }
        }
        if (outlier)
                return;
        if (step_time_model_ready(m) && fitted > 0) {
                /* within the outlier ratio: where the fit has swung to almost nothing for
                 * a shape, one step would otherwise set its kind's speed to hundreds, and
                 * once the fit came back every step of that kind would be priced that much
                 * too long */
                double ratio = log(seconds / fitted), bound = log(OUTLIER_RATIO);
                ratio = ratio > bound ? bound : ratio < -bound ? -bound : ratio;
                m->log_speed[kind] += SPEED_WEIGHT * (ratio - m->log_speed[kind]);
        }

        /* Least squares on relative errors: each row divided by the step's time, so that a
         * 15 ms decode step counts as much as a 1.5 s prompt step. */
        for (int i = 0; i < STEP_MODEL_FEATURES; i++)
                x[i] /= seconds;
        for (int i = 0; i < STEP_MODEL_FEATURES; i++)
                px[i] = dot(m->cov[i], x);
        double denominator = FORGETTING + dot(x, px);
        double residual = 1.0 - dot(m->theta, x);
        double trace = 0;
        for (int i = 0; i < STEP_MODEL_FEATURES; i++)
                trace += m->cov[i][i];
        double forget = trace < MAX_COV_TRACE ? FORGETTING : 1.0;
        for (int i = 0; i < STEP_MODEL_FEATURES; i++) {
                double gain = px[i] / denominator;
                m->theta[i] += gain * residual;
                for (int j = 0; j < STEP_MODEL_FEATURES; j++)
                        m->cov[i][j] = (m->cov[i][j] - gain * px[j]) / forget;
        }
        /* No clamping of coefficients to >= 0: prompt tokens and attention reads grow
         * together, so one may dip below 0 while their sum is right; forcing it back
         * (tried) biases the fit badly. Predictions are clamped instead. */
        m->n_samples++;
}

double step_time_model_error(const struct step_time_model *m, double quantile) {
        double values[STEP_MODEL_HISTORY];
        for (uint32_t i = 0; i < m->n_errors; i++)
                values[i] = fabs(m->errors[i]);
        return quantile_sorting(values, m->n_errors, quantile);
}

/* Steps known before a margin or factor is taken from them. */
#define MARGIN_MIN_ERRORS 16

double step_time_model_margin(const struct step_time_model *m) {
        double values[STEP_MODEL_HISTORY];
        uint32_t n = 0;
        for (uint32_t i = 0; i < m->n_errors; i++)
                if (!m->outliers[i])
                        values[n++] = m->errors[i];
        if (n < MARGIN_MIN_ERRORS)
                return 1.25;
        /* 9 in 10 covered; a step that took (1 + u) times the prediction has error e = u / (1 + u) */
        double e = quantile_sorting(values, n, 0.9);
        return e >= 0.5 ? 2.0 : e <= 0 ? 1.0 : 1.0 / (1.0 - e);
}

/* Kept steps of the count asked for before their own factor is taken. */
#define SAME_COUNT_MIN 4

/* The mean of measured / predicted over the kept steps of decodes alone, against the fit as
 * it is now: all of them into *all, those of n_decode into *same (n_same of them). False
 * when they are not to be trusted (too few or too old). */
static bool alone_factors(const struct step_time_model *m, uint32_t n_decode, double *all, double *same,
                          uint32_t *n_same) {
        if (m->n_alone < MARGIN_MIN_ERRORS || m->seconds_since_alone > STEP_MODEL_ALONE_HORIZON)
                return false;
        double sum = 0, same_sum = 0;
        *n_same = 0;
        for (uint32_t i = 0; i < m->n_alone; i++) {
                /* never 0: predictions are at least the shortest step recorded */
                double predicted = step_time_model_predict(m, &m->alone_shapes[i]);
                sum += m->alone_seconds[i] / predicted;
                if (m->alone_shapes[i].n_decode == n_decode) {
                        same_sum += m->alone_seconds[i] / predicted;
                        (*n_same)++;
                }
        }
        *all = sum / m->n_alone;
        *same = *n_same ? same_sum / *n_same : NAN;
        return true;
}

double step_time_model_decodes_alone_own_factor(const struct step_time_model *m, uint32_t n_decode) {
        double all, same;
        uint32_t n_same;
        return alone_factors(m, n_decode, &all, &same, &n_same) && n_same >= SAME_COUNT_MIN ? same : NAN;
}

double step_time_model_decodes_alone_factor(const struct step_time_model *m, uint32_t n_decode) {
        double all, same;
        uint32_t n_same;
        if (!alone_factors(m, n_decode, &all, &same, &n_same))
                return NAN;
        return n_same >= SAME_COUNT_MIN ? same : all;
}

double step_time_model_extra_decode_bound(const struct step_time_model *m, uint64_t context) {
        if (m->best_effort_decodes == 0)
                return NAN;
        double mean_context = m->best_effort_decode_context / m->best_effort_decodes;
        if ((double) context > mean_context)
                return NAN;
        double extra = m->theta[2] / DECODE_SCALE + m->theta[4] * mean_context / DECODE_CONTEXT_SCALE;
        return extra > 0 ? extra : 0;
}

static bool dominates(const struct step_time_model *m, uint32_t i, const struct step_shape *decodes) {
        const struct step_shape *s = &m->decode_only_shapes[i];
        return m->clock - m->decode_only_clock[i] <= STEP_MODEL_ALONE_HORIZON && s->n_decode >= decodes->n_decode &&
               s->decode_context >= decodes->decode_context;
}

double step_time_model_dominating_step(const struct step_time_model *m, const struct step_shape *decodes) {
        uint32_t fewest = UINT32_MAX;
        for (uint32_t i = 0; i < m->n_decode_only; i++) {
                uint32_t count = m->decode_only_shapes[i].n_decode, n_same = 0;
                if (count >= fewest || !dominates(m, i, decodes))
                        continue;
                for (uint32_t j = 0; j < m->n_decode_only; j++)
                        n_same += m->decode_only_shapes[j].n_decode == count && dominates(m, j, decodes);
                if (n_same >= SAME_COUNT_MIN)
                        fewest = count;
        }
        if (fewest == UINT32_MAX)
                return NAN;
        double sum = 0;
        uint32_t n = 0;
        for (uint32_t i = 0; i < m->n_decode_only; i++)
                if (m->decode_only_shapes[i].n_decode == fewest && dominates(m, i, decodes)) {
                        sum += m->decode_only_seconds[i];
                        n++;
                }
        return sum / n;
}

double step_time_model_calibrated_decodes(const struct step_time_model *m, uint32_t n, double one_step,
                                          double one_at_calibration) {
        const struct decode_calibration *c = &m->calibration;
        if (n < 2 || c->n < 2 || !(c->seconds[0] > 0) || !(one_at_calibration > 0))
                return NAN;
        uint32_t k = n < c->n ? n : c->n;
        double one = c->seconds[0];
        double shared = (k * one - c->seconds[k - 1]) / (k - 1);
        shared = shared < 0 ? 0 : shared > one ? one : shared;
        double price = n * one_step - (n - 1) * shared * (one_at_calibration / one);
        return price > one_step ? price : one_step; /* shorter contexts than the calibration's */
}
