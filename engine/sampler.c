/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"

/* Mixed into fallback seeds so that an unseeded sequence whose counter value is, say, 0 does
 * not replay the stream of a request that asked for seed 0. */
#define FALLBACK_SEED_DOMAIN UINT64_C(0x6a09e667f3bcc909)

/* Doubles in sampler_seq.hist: the largest radix level's buckets (2^11). */
#define HIST_SIZE 2048

/* ---- small helpers ---------------------------------------------------------------------- */

static size_t bitset_words(int32_t n) {
        return ((size_t) n + 63) / 64;
}

static void bitset_set(uint64_t *set, int32_t i) {
        set[(size_t) i / 64] |= UINT64_C(1) << ((unsigned) i % 64);
}

static uint32_t float_bits(float f) {
        uint32_t u;

        memcpy(&u, &f, sizeof(u));
        return u;
}

static float float_from_bits(uint32_t u) {
        float f;

        memcpy(&f, &u, sizeof(f));
        return f;
}

/* ---- vector helpers --------------------------------------------------------------------
 * The O(n_vocab) passes run on GNU C vectors of 4 floats: SSE2 on any x86-64, NEON on arm64,
 * plain scalar code elsewhere. Comparisons give -1 / 0 lanes, NaN compares false. */

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
typedef uint32_t v4u __attribute__((vector_size(16)));

static inline v4f v4f_load(const float *p) {
        v4f v;

        memcpy(&v, p, sizeof(v));
        return v;
}

static inline void v4f_store(float *p, v4f v) {
        memcpy(p, &v, sizeof(v));
}

static inline v4f v4f_splat(float f) {
        return (v4f) { f, f, f, f };
}

/* Lanes of a where mask is set, else lanes of b. */
static inline v4f v4f_select(v4i mask, v4f a, v4f b) {
        return (v4f) (((v4i) a & mask) | ((v4i) b & ~mask));
}

static inline v4f v4f_max(v4f a, v4f m) {
        return v4f_select(a > m, a, m);
}

static inline bool v4i_any(v4i mask) {
        uint64_t half[2];

        memcpy(half, &mask, sizeof(half));
        return (half[0] | half[1]) != 0;
}

/* e^x for x <= 0, to within 2 ulp; below -87 (e^-87 ~ 1.6e-38, where floats go subnormal),
 * -inf and NaN give 0. x = k ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to r^7
 * (truncation 5e-9), 2^k put straight into the exponent bits. */
static inline v4f v4f_exp_nonpositive(v4f x) {
        const v4f round = v4f_splat(12582912.0f); /* 1.5 * 2^23: adding it rounds to an integer */
        v4i ok = x >= v4f_splat(-87.0f);
        v4f t, kf, r, p;
        v4i k;

        x = v4f_select(ok, x, v4f_splat(-87.0f));
        t = x * v4f_splat(1.44269504f) + round;
        kf = t - round;
        k = (v4i) t - (v4i) round;
        r = x - kf * v4f_splat(0.693359375f) - kf * v4f_splat(-2.12194440e-4f);
        p = v4f_splat(1.0f / 5040.0f);
        p = p * r + v4f_splat(1.0f / 720.0f);
        p = p * r + v4f_splat(1.0f / 120.0f);
        p = p * r + v4f_splat(1.0f / 24.0f);
        p = p * r + v4f_splat(1.0f / 6.0f);
        p = p * r + v4f_splat(0.5f);
        p = p * r + v4f_splat(1.0f);
        p = p * r + v4f_splat(1.0f);
        p = p * (v4f) ((v4u) (k + 127) << 23);
        return (v4f) ((v4i) p & ok);
}

/* The last n % 4 values as a vector padded with pad. */
static inline v4f v4f_load_tail(const float *x, int32_t n, int32_t i, float pad) {
        float buf[4] = { pad, pad, pad, pad };

        memcpy(buf, x + i, (size_t) (n - i) * sizeof(float));
        return v4f_load(buf);
}

static inline void v4f_store_tail(float *x, int32_t n, int32_t i, v4f v) {
        float buf[4];

        v4f_store(buf, v);
        memcpy(x + i, buf, (size_t) (n - i) * sizeof(float));
}

/* The largest value; -inf when there is none but -inf and NaN. */
static float max_value(const float *x, int32_t n) {
        v4f m0 = v4f_splat(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
        int32_t i = 0;
        float m;

        for (; i + 16 <= n; i += 16) {
                m0 = v4f_max(v4f_load(x + i), m0);
                m1 = v4f_max(v4f_load(x + i + 4), m1);
                m2 = v4f_max(v4f_load(x + i + 8), m2);
                m3 = v4f_max(v4f_load(x + i + 12), m3);
        }
        for (; i + 4 <= n; i += 4)
                m0 = v4f_max(v4f_load(x + i), m0);
        if (i < n)
                m1 = v4f_max(v4f_load_tail(x, n, i, -INFINITY), m1);
        m0 = v4f_max(v4f_max(m0, m1), v4f_max(m2, m3));
        m = m0[0];
        for (unsigned j = 1; j < 4; j++)
                if (m0[j] > m)
                        m = m0[j];
        return m;
}

/* Sums are kept in float lanes over blocks of this many values (relative error below 1e-6
 * even in the worst case), then added up in double. */
#define SUM_BLOCK 64

static inline double lanes_in_double(v4f v) {
        return ((double) v[0] + (double) v[1]) + ((double) v[2] + (double) v[3]);
}

/* Adds step(ctx, i) for i = 0, 4, 8, ... up to the last whole vector into *total, in the one
 * order every sum of the sampler takes: two float accumulators over blocks of SUM_BLOCK values,
 * each block's lanes added in double. Returns the first index left out (n - n % 4). Inlined
 * so that step is a direct call in each caller's loop. */
static inline __attribute__((always_inline)) int32_t blocked_sum(int32_t n, v4f (*step)(void *ctx, int32_t i),
                                                                 void *ctx, double *total) {
        int32_t i = 0;

        while (i + 4 <= n) {
                int32_t end = i + SUM_BLOCK <= n ? i + SUM_BLOCK : n - n % 4;
                v4f acc0 = {}, acc1 = {};

                for (; i + 8 <= end; i += 8) {
                        acc0 += step(ctx, i);
                        acc1 += step(ctx, i + 4);
                }
                for (; i < end; i += 4)
                        acc0 += step(ctx, i);
                acc0 += acc1;
                *total += lanes_in_double(acc0);
        }
        return i;
}

struct exp_pass {
        const float *x;
        float *out;
        v4f vm, vs, vmin;
};

static inline v4f exp_values(const struct exp_pass *p, v4f v) {
        v4f e = v4f_exp_nonpositive((v - p->vm) * p->vs);

        return (v4f) ((v4i) e & ~(e < p->vmin));
}

static inline v4f exp_step(void *ctx, int32_t i) {
        const struct exp_pass *p = ctx;
        v4f e = exp_values(p, v4f_load(p->x + i));

        if (p->out)
                v4f_store(p->out + i, e);
        return e;
}

/* Sum over x of e^((x - m) * scale), x <= m. When out is set, the terms are stored there,
 * those below min_p as 0 (and not summed). */
static double exp_sum(const float *x, float *out, int32_t n, float m, float scale, float min_p) {
        struct exp_pass p = { x, out, v4f_splat(m), v4f_splat(scale), v4f_splat(min_p) };
        double total = 0.0;
        int32_t i = blocked_sum(n, exp_step, &p, &total);

        if (i < n) {
                v4f e = exp_values(&p, v4f_load_tail(x, n, i, -INFINITY));

                total += lanes_in_double(e);
                if (out)
                        v4f_store_tail(out, n, i, e);
        }
        return total;
}

struct cut_pass {
        float *e;
        v4f vt;
};

static inline v4f cut_values(v4f v, v4f vt) {
        return (v4f) ((v4i) v & ~(v < vt));
}

static inline v4f cut_step(void *ctx, int32_t i) {
        const struct cut_pass *p = ctx;
        v4f v = cut_values(v4f_load(p->e + i), p->vt);

        v4f_store(p->e + i, v);
        return v;
}

/* Zeroes the values below t and returns the sum of the rest. */
static double cut_below(float *e, int32_t n, float t) {
        struct cut_pass p = { e, v4f_splat(t) };
        double total = 0.0;
        int32_t i = blocked_sum(n, cut_step, &p, &total);

        if (i < n) {
                v4f v = cut_values(v4f_load_tail(e, n, i, 0.0f), p.vt);

                v4f_store_tail(e, n, i, v);
                total += lanes_in_double(v);
        }
        return total;
}

/* How many values are >= t. */
static int32_t count_at_least(const float *x, int32_t n, float t) {
        v4f vt = v4f_splat(t);
        v4i c = {};
        int32_t i = 0;

        for (; i + 4 <= n; i += 4)
                c -= (v4i) (v4f_load(x + i) >= vt);
        if (i < n)
                c -= (v4i) (v4f_load_tail(x, n, i, -INFINITY) >= vt);
        return c[0] + c[1] + c[2] + c[3];
}

void sample_result_clear(struct sample_result *r) {
        if (!r)
                return;
        free(r->top);
        *r = (struct sample_result) { .token = -1, .logprob = NAN };
}

void sample_results_free(struct sample_result *s, uint32_t n) {
        if (!s)
                return;
        for (uint32_t i = 0; i < n; i++)
                sample_result_clear(&s[i]);
        free(s);
}

int sample_results_copy(const struct sample_result *src, uint32_t n, struct sample_result **ret) {
        struct sample_result *dst = calloc(n ? n : 1, sizeof(*dst));
        if (!dst)
                return -ENOMEM;
        for (uint32_t i = 0; i < n; i++) {
                dst[i] = src[i];
                dst[i].top = NULL;
                if (src[i].n_top) {
                        if (!(dst[i].top = malloc(src[i].n_top * sizeof(*src[i].top)))) {
                                sample_results_free(dst, i);
                                return -ENOMEM;
                        }
                        memcpy(dst[i].top, src[i].top, src[i].n_top * sizeof(*src[i].top));
                }
        }
        *ret = dst;
        return 0;
}

/* ---- per-sequence state ----------------------------------------------------------------- */

static int reserve_scratch(struct sampler_seq *s, bool mask, bool raw, bool hist) {
        if (mask && !s->mask) {
                s->mask = malloc(bitset_words(s->n_vocab) * sizeof(uint64_t));
                if (!s->mask)
                        return -ENOMEM;
        }
        if (raw && !s->raw) {
                s->raw = malloc((size_t) s->n_vocab * sizeof(float));
                if (!s->raw)
                        return -ENOMEM;
        }
        if (hist && !s->hist) {
                s->hist = malloc(HIST_SIZE * sizeof(double));
                if (!s->hist)
                        return -ENOMEM;
        }
        return 0;
}

static bool top_k_active(const struct sampling_params *p, int32_t n_vocab) {
        return p->top_k > 0 && p->top_k < n_vocab;
}

static bool needs_hist(const struct sampling_params *p, int32_t n_vocab) {
        return !sampling_params_is_greedy(p) && (top_k_active(p, n_vocab) || p->top_p < 1.0);
}

/* The longest bad word sequence less its last token: how many output tokens it looks back. */
static uint32_t bad_words_lookback(const struct sampling_params *p) {
        uint32_t longest = 0;
        for (size_t i = 0, start = 0; i < p->n_bad_word_sequences; start = p->bad_words_ends[i++])
                if (p->bad_words_ends[i] - start - 1 > longest)
                        longest = (uint32_t) (p->bad_words_ends[i] - start - 1);
        return longest;
}

void sampler_seq_free(struct sampler_seq *s) {
        if (!s)
                return;
        free(s->recent);
        free(s->seen);
        free(s->counts);
        free(s->mask);
        free(s->raw);
        free(s->hist);
        *s = (struct sampler_seq) {};
}

int sampler_seq_init(struct sampler_seq *s, const struct sampling_params *params, const int32_t *prompt,
                     size_t n_prompt, int32_t n_vocab, uint64_t fallback_seed) {
        int r;

        if (!s)
                return -EINVAL;
        *s = (struct sampler_seq) {};
        if (n_vocab <= 0 || (n_prompt > 0 && !prompt))
                return -EINVAL;
        for (size_t i = 0; i < n_prompt; i++)
                if (prompt[i] < 0 || prompt[i] >= n_vocab)
                        return -EINVAL;

        s->n_vocab = n_vocab;
        s->seen = calloc(bitset_words(n_vocab), sizeof(uint64_t));
        if (!s->seen)
                return -ENOMEM;
        for (size_t i = 0; i < n_prompt; i++)
                bitset_set(s->seen, prompt[i]);

        if (params && params->has_seed)
                rng_seed(&s->rng, params->seed);
        else
                rng_seed(&s->rng, fallback_seed ^ FALLBACK_SEED_DOMAIN);

        /* Take now what this request will need, so that sampling fails for memory only when
         * the params change under it. */
        if (params) {
                s->recent_cap = bad_words_lookback(params);
                r = reserve_scratch(s, params->has_allowed_token_ids, params->logprobs >= 0,
                                    needs_hist(params, n_vocab));
                if (r >= 0 && s->recent_cap && !(s->recent = malloc(s->recent_cap * sizeof(*s->recent))))
                        r = -ENOMEM;
                if (r < 0) {
                        sampler_seq_free(s);
                        return r;
                }
        }
        return 0;
}

static size_t count_slot(const struct token_count *table, size_t cap, int32_t token) {
        size_t i = ((uint32_t) token * UINT32_C(2654435761)) & (cap - 1);

        while (table[i].token != token && table[i].token >= 0)
                i = (i + 1) & (cap - 1);
        return i;
}

static int counts_grow(struct sampler_seq *s) {
        size_t cap = s->counts_cap ? s->counts_cap * 2 : 64;
        struct token_count *table;

        table = malloc(cap * sizeof(*table));
        if (!table)
                return -ENOMEM;
        for (size_t i = 0; i < cap; i++)
                table[i] = (struct token_count) { .token = -1 };
        for (size_t i = 0; i < s->counts_cap; i++)
                if (s->counts[i].token >= 0)
                        table[count_slot(table, cap, s->counts[i].token)] = s->counts[i];
        free(s->counts);
        s->counts = table;
        s->counts_cap = cap;
        return 0;
}

int sampler_seq_accept(struct sampler_seq *s, int32_t token) {
        size_t i;
        int r;

        if (!s || token < 0 || token >= s->n_vocab)
                return -EINVAL;
        /* Keep the table at most half full. */
        if ((s->n_counts + 1) * 2 > s->counts_cap) {
                r = counts_grow(s);
                if (r < 0)
                        return r;
        }
        i = count_slot(s->counts, s->counts_cap, token);
        if (s->counts[i].token < 0) {
                s->counts[i] = (struct token_count) { .token = token, .count = 0 };
                s->n_counts++;
        }
        if (s->counts[i].count < UINT32_MAX)
                s->counts[i].count++;
        bitset_set(s->seen, token);
        if (s->recent_cap)
                s->recent[s->n_output % s->recent_cap] = token;
        if (s->n_output < UINT32_MAX)
                s->n_output++;
        return 0;
}

/* ---- logits processing, in vLLM's order ------------------------------------------------- */

static void mask_disallowed(const struct sampling_params *p, struct sampler_seq *s, float *logits) {
        size_t words = bitset_words(s->n_vocab);

        memset(s->mask, 0, words * sizeof(uint64_t));
        for (size_t j = 0; j < p->n_allowed_token_ids; j++) {
                int32_t id = p->allowed_token_ids[j];

                if (id >= 0 && id < s->n_vocab)
                        bitset_set(s->mask, id);
        }
        for (size_t w = 0; w < words; w++)
                for (uint64_t off = ~s->mask[w]; off; off &= off - 1) {
                        size_t i = w * 64 + (size_t) __builtin_ctzll(off);

                        if (i >= (size_t) s->n_vocab)
                                break;
                        logits[i] = -INFINITY;
                }
}

static void apply_logit_bias(const struct sampling_params *p, float *logits, int32_t n_vocab) {
        for (size_t j = 0; j < p->n_logit_bias; j++) {
                const struct logit_bias *b = &p->logit_bias[j];
                float bias = fminf(fmaxf(b->bias, (float) -SAMPLING_MAX_LOGIT_BIAS), (float) SAMPLING_MAX_LOGIT_BIAS);

                if (b->token >= 0 && b->token < n_vocab)
                        logits[b->token] += bias;
        }
}

static void mask_stop_tokens(const struct sampling_params *p, float *logits, int32_t n_vocab, const int32_t *eog_ids,
                             size_t n_eog_ids) {
        for (size_t j = 0; j < n_eog_ids; j++)
                logits[eog_ids[j]] = -INFINITY;
        for (size_t j = 0; j < p->n_stop_token_ids; j++) {
                int32_t id = p->stop_token_ids[j];

                if (id >= 0 && id < n_vocab)
                        logits[id] = -INFINITY;
        }
}

/* HF/vLLM style: a seen token's positive logit is divided by the penalty, any other
 * multiplied by it, so that a penalty > 1 always makes the token less likely. */
static void apply_repetition_penalty(const struct sampler_seq *s, float *logits, float penalty) {
        size_t words = bitset_words(s->n_vocab);

        for (size_t w = 0; w < words; w++)
                for (uint64_t bits = s->seen[w]; bits; bits &= bits - 1) {
                        size_t i = w * 64 + (size_t) __builtin_ctzll(bits);
                        float x = logits[i];

                        logits[i] = x > 0.0f ? x / penalty : x * penalty;
                }
}

/* OpenAI's definition: logit -= frequency * count, then -= presence once, for every token
 * that occurs in the output; in float, as vLLM's two tensor subtractions (where the target
 * has FMA, the compiler may fuse the first: an ulp at most). */
static void apply_output_penalties(const struct sampler_seq *s, float *logits, float frequency, float presence) {
        for (size_t i = 0; i < s->counts_cap; i++) {
                const struct token_count *c = &s->counts[i];

                if (c->token < 0)
                        continue;
                logits[c->token] -= frequency * (float) c->count;
                logits[c->token] -= presence;
        }
}

/* vLLM's rule: a sequence's last token cannot follow the rest of it at the output's end. */
static void mask_bad_words(const struct sampling_params *p, const struct sampler_seq *s, float *logits) {
        for (size_t i = 0, start = 0; i < p->n_bad_word_sequences; start = p->bad_words_ends[i++]) {
                uint32_t prefix = (uint32_t) (p->bad_words_ends[i] - start - 1);
                bool follows = prefix <= s->n_output;

                /* the prefix's token k is the output's (prefix - k)-th from the end */
                for (uint32_t k = 0; follows && k < prefix; k++)
                        follows = s->recent[(s->n_output - prefix + k) % s->recent_cap] ==
                                  p->bad_words_token_ids[start + k];
                if (follows)
                        logits[p->bad_words_token_ids[start + prefix]] = -INFINITY;
        }
}

static void process_logits(const struct sampling_params *p, struct sampler_seq *s, float *logits, const int32_t *eog_ids,
                           size_t n_eog_ids) {
        float rep = (float) p->repetition_penalty;
        float freq = (float) p->frequency_penalty;
        float pres = (float) p->presence_penalty;

        if (p->has_allowed_token_ids)
                mask_disallowed(p, s, logits);
        if (p->n_bad_word_sequences)
                mask_bad_words(p, s, logits);
        apply_logit_bias(p, logits, s->n_vocab);
        if (p->min_tokens > 0 && (int64_t) s->n_output < p->min_tokens)
                mask_stop_tokens(p, logits, s->n_vocab, eog_ids, n_eog_ids);
        if (rep != 1.0f)
                apply_repetition_penalty(s, logits, rep);
        if (freq != 0.0f || pres != 0.0f)
                apply_output_penalties(s, logits, freq, pres);
}

/* ---- token choice ----------------------------------------------------------------------- */

/* The lowest id among the largest values; -1 when no value is above -inf (NaN never wins). */
static int32_t argmax(const float *x, int32_t n) {
        float m = max_value(x, n);
        v4f vm = v4f_splat(m);
        int32_t i = 0;

        if (!(m > -INFINITY))
                return -1;
        /* Vector comparisons find the block, then the lowest id in it. */
        for (; i + 4 <= n; i += 4)
                if (v4i_any(v4f_load(x + i) == vm))
                        break;
        for (; i < n; i++)
                if (x[i] == m)
                        return i;
        return -1;
}

/* Radix selection over the bits of non-negative floats, whose order as unsigned integers is
 * their order as numbers: three passes narrow down 10, then 11, then 10 bits (the sign bit
 * is always 0). Blocks of 16 values none of which can be in the current range are skipped
 * after a few vector comparisons, so the passes after the first cost little, and so does the
 * first when a floor rules out most values. */
static const struct {
        unsigned shift, width;
} radix_levels[] = {
        { 21, 10 },
        { 10, 11 },
        { 0, 10 },
};

/* Lanes of the 4 values at e that may fall in the current range: >= floor on the first
 * level, with the already fixed high bits on the later ones. */
static inline v4i range_mask(const float *e, size_t level, unsigned top, uint32_t prefix, float floor) {
        v4f v = v4f_load(e);

        if (level == 0)
                return (v4i) (v >= v4f_splat(floor));
        return (v4i) (((v4u) v >> top) == (v4u) { prefix, prefix, prefix, prefix });
}

/* Among the values >= floor (> 0) of e[], going down from the largest, finds the value t at
 * which the accumulated weight first reaches target: weight(values > t) < target <=
 * weight(values >= t). A value weighs 1 (by_mass false) or itself. The caller guarantees
 * that the crossing lies at or above floor. Returns 0 when the values >= floor together weigh
 * less than target, so that nothing is cut. */
static float select_threshold(const float *e, int32_t n, bool by_mass, double target, float floor, double *hist) {
        uint32_t prefix = 0; /* the bits above the current level, fixed so far */
        double above = 0.0;  /* weight of the values above the current prefix's range */

        for (size_t lv = 0; lv < sizeof(radix_levels) / sizeof(radix_levels[0]); lv++) {
                unsigned shift = radix_levels[lv].shift, width = radix_levels[lv].width, top = shift + width;
                uint32_t n_buckets = UINT32_C(1) << width;
                uint32_t floor_bits = float_bits(floor);
                int64_t b, lowest = -1;

                memset(hist, 0, n_buckets * sizeof(double));
                for (int32_t i = 0; i < n; i += 16) {
                        int32_t end = i + 16 <= n ? i + 16 : n;

                        if (end - i == 16 && !v4i_any(range_mask(e + i, lv, top, prefix, floor) |
                                                      range_mask(e + i + 4, lv, top, prefix, floor) |
                                                      range_mask(e + i + 8, lv, top, prefix, floor) |
                                                      range_mask(e + i + 12, lv, top, prefix, floor)))
                                continue;
                        for (int32_t j = i; j < end; j++) {
                                uint32_t u = float_bits(e[j]);

                                if (u < floor_bits || (u >> top) != prefix)
                                        continue;
                                hist[(u >> shift) & (n_buckets - 1)] += by_mass ? (double) e[j] : 1.0;
                        }
                }
                for (b = (int64_t) n_buckets - 1; b >= 0; b--) {
                        if (hist[b] == 0.0)
                                continue;
                        lowest = b;
                        if (above + hist[b] >= target)
                                break;
                        above += hist[b];
                }
                if (b < 0) {
                        if (lv == 0 || lowest < 0)
                                return 0.0f;
                        /* Summed in parts, the bucket chosen above may fall short of the target
                         * by a rounding: settle on its smallest values. */
                        b = lowest;
                        above -= hist[b];
                }
                prefix = (prefix << width) | (uint32_t) b;
        }
        return float_from_bits(prefix);
}

/* Largest k handled by kth_largest(): its heap of floats lives in the histogram buffer. */
#define HEAP_MAX 1024
_Static_assert(HEAP_MAX * sizeof(float) <= HIST_SIZE * sizeof(double), "the top_k heap fits in the histogram");

static void float_heap_sift_down(float *h, size_t n, size_t i) {
        for (;;) {
                size_t w = i, l = 2 * i + 1, r = 2 * i + 2;
                float t;

                if (l < n && h[l] < h[w])
                        w = l;
                if (r < n && h[r] < h[w])
                        w = r;
                if (w == i)
                        return;
                t = h[i];
                h[i] = h[w];
                h[w] = t;
                i = w;
        }
}

/* The k-th largest of the values of e[] (>= 0, k <= HEAP_MAX): a min-heap keeps the k
 * largest seen, and once it is full, blocks of 16 values none of which beats its smallest
 * are skipped with vector comparisons. */
static float kth_largest(const float *e, int32_t n, int32_t k, float *heap) {
        size_t size = 0;

        for (int32_t i = 0; i < n; i += 16) {
                int32_t end = i + 16 <= n ? i + 16 : n;

                if (size == (size_t) k && end - i == 16) {
                        v4f root = v4f_splat(heap[0]);

                        if (!v4i_any((v4f_load(e + i) > root) | (v4f_load(e + i + 4) > root) |
                                     (v4f_load(e + i + 8) > root) | (v4f_load(e + i + 12) > root)))
                                continue;
                }
                for (int32_t j = i; j < end; j++) {
                        if (size < (size_t) k) {
                                /* Sift up. */
                                size_t c = size++;

                                while (c > 0 && heap[(c - 1) / 2] > e[j]) {
                                        heap[c] = heap[(c - 1) / 2];
                                        c = (c - 1) / 2;
                                }
                                heap[c] = e[j];
                        } else if (e[j] > heap[0]) {
                                heap[0] = e[j];
                                float_heap_sift_down(heap, size, 0);
                        }
                }
        }
        return size == (size_t) k ? heap[0] : 0.0f;
}

/* A floor for the top_k selection: the largest power of two in [2^-24, 1] that at least k
 * values reach, found by bisection on the exponent (a handful of vector counting passes),
 * else the smallest positive float. The values are <= 1. */
static float top_k_floor(const float *e, int32_t n, int32_t k) {
        int lo = -24, hi = 0; /* 2^lo is reached by >= k values, 2^(hi + 1) is not */

        if (count_at_least(e, n, ldexpf(1.0f, lo)) < k)
                return FLT_TRUE_MIN;
        while (lo < hi) {
                int mid = (lo + hi + 1) / 2;

                if (count_at_least(e, n, ldexpf(1.0f, mid)) >= k)
                        lo = mid;
                else
                        hi = mid - 1;
        }
        return ldexpf(1.0f, lo);
}

/* Inverse transform: the first token at which the running sum of e[] exceeds target. Blocks
 * of 8 are summed as vectors and stepped over whole while the sum stays below the target.
 * Where roundings leave the sum short of the target, the last positive value is taken. */
static int32_t draw_index(const float *e, int32_t n, double target) {
        double acc = 0.0;
        int32_t i = 0;

        for (; i + 8 <= n; i += 8) {
                v4f s4 = v4f_load(e + i) + v4f_load(e + i + 4);
                double block = ((double) s4[0] + (double) s4[1]) + ((double) s4[2] + (double) s4[3]);
                int32_t last = -1;

                if (acc + block <= target) {
                        acc += block;
                        continue;
                }
                for (int32_t j = i; j < i + 8; j++) {
                        if (!(e[j] > 0.0f))
                                continue;
                        acc += (double) e[j];
                        last = j;
                        if (acc > target)
                                return j;
                }
                if (last >= 0)
                        return last;
        }
        for (; i < n; i++)
                if (e[i] > 0.0f) {
                        acc += (double) e[i];
                        if (acc > target)
                                return i;
                }
        for (i = n - 1; i >= 0; i--)
                if (e[i] > 0.0f)
                        return i;
        return -1;
}

static int sample_random(const struct sampling_params *p, struct sampler_seq *s, float *x, int32_t n,
                         int32_t *ret) {
        float temperature = (float) sampling_params_temperature(p);
        float m = max_value(x, n);
        double sum, u;
        int32_t token;

        if (!(m > -INFINITY))
                return -EDOM;

        /* Softmax numerators, scaled so that the most likely token has 1: min_p's "probability
         * below min_p times the largest" is then just "below min_p". (Multiplying by 1 / T
         * rather than dividing by T moves a logit by at most an ulp.) */
        if (m == INFINITY) {
                for (int32_t i = 0; i < n; i++)
                        x[i] = x[i] == INFINITY ? 1.0f : 0.0f;
                sum = (double) count_at_least(x, n, 1.0f);
        } else
                sum = exp_sum(x, x, n, m, 1.0f / temperature, (float) p->min_p);

        /* top_k keeps every token whose value is at least the k-th largest (ties included),
         * then top_p the fewest most likely tokens whose share of what is left reaches top_p
         * (ties of the last one included). Each keeps the most likely token. */
        if (top_k_active(p, n)) {
                int32_t k = p->top_k;
                float t = k <= HEAP_MAX ? kth_largest(x, n, k, (float *) s->hist)
                                        : select_threshold(x, n, false, (double) k, top_k_floor(x, n, k), s->hist);

                if (t > 0.0f)
                        sum = cut_below(x, n, t);
        }
        if (p->top_p < 1.0) {
                double target = (double) (float) p->top_p * sum;
                /* All the values below this weigh at most (1 - top_p) * sum together, so the
                 * cut cannot fall below it; halved for the roundings. */
                float floor = fmaxf((float) ((1.0 - (double) (float) p->top_p) * sum / n * 0.5), FLT_TRUE_MIN);
                float t = select_threshold(x, n, true, target, floor, s->hist);

                if (t > 0.0f)
                        sum = cut_below(x, n, t);
        }

        /* One draw per random step, whatever the filters kept, so that the stream's position
         * depends only on the number of steps. */
        u = rng_uniform(&s->rng);
        token = draw_index(x, n, u * sum);
        if (token < 0)
                return -EDOM;
        *ret = token;
        return 0;
}

/* ---- logprobs --------------------------------------------------------------------------- */

/* The root of the heap is the worst kept entry: the lower logit, then the higher id. */
static bool entry_worse(const struct token_logprob *a, const struct token_logprob *b) {
        return a->logprob < b->logprob || (a->logprob == b->logprob && a->token > b->token);
}

static void heap_swap(struct token_logprob *h, size_t i, size_t j) {
        struct token_logprob t = h[i];

        h[i] = h[j];
        h[j] = t;
}

static void heap_sift_up(struct token_logprob *h, size_t i) {
        while (i > 0) {
                size_t parent = (i - 1) / 2;

                if (!entry_worse(&h[i], &h[parent]))
                        break;
                heap_swap(h, i, parent);
                i = parent;
        }
}

static void heap_sift_down(struct token_logprob *h, size_t n, size_t i) {
        for (;;) {
                size_t w = i, l = 2 * i + 1, r = 2 * i + 2;

                if (l < n && entry_worse(&h[l], &h[w]))
                        w = l;
                if (r < n && entry_worse(&h[r], &h[w]))
                        w = r;
                if (w == i)
                        return;
                heap_swap(h, i, w);
                i = w;
        }
}

/* The n_top best of raw[], best first (lower id first on ties), into top[]; returns how many
 * (fewer when NaN values leave fewer candidates). A heap of n_top keeps the best seen; once it
 * is full, blocks of 4 values none of which beats its worst are skipped. */
static size_t top_entries(const float *raw, int32_t n, int32_t n_top, struct token_logprob *top) {
        size_t size = 0;

        for (int32_t i = 0; i < n; i += 4) {
                int32_t end = i + 4 <= n ? i + 4 : n;

                if (size == (size_t) n_top) {
                        v4f v = i + 4 <= n ? v4f_load(raw + i) : v4f_load_tail(raw, n, i, -INFINITY);

                        if (size == 0 || !v4i_any(v > v4f_splat(top[0].logprob)))
                                continue;
                }
                for (int32_t j = i; j < end; j++) {
                        float x = raw[j];

                        if (isnan(x))
                                continue;
                        if (size < (size_t) n_top) {
                                top[size] = (struct token_logprob) { .token = j, .logprob = x };
                                heap_sift_up(top, size++);
                        } else if (x > top[0].logprob) {
                                /* Equal values never replace: scanning ids upwards, they lose the tie. */
                                top[0] = (struct token_logprob) { .token = j, .logprob = x };
                                heap_sift_down(top, size, 0);
                        }
                }
        }
        /* Heap sort: the worst goes last, leaving the array best first. */
        for (size_t end = size; end > 1; end--) {
                heap_swap(top, 0, end - 1);
                heap_sift_down(top, end - 1, 0);
        }
        return size;
}

/* raw: the logits as the model gave them. log_softmax(x) = x - (m + log(sum e^(x - m))). */
static int fill_logprobs(const float *raw, int32_t n, int32_t chosen, int32_t n_top, struct sample_result *out) {
        struct token_logprob *top;
        float m = max_value(raw, n), x_chosen = raw[chosen];
        double lse = (double) m + log(exp_sum(raw, NULL, n, m, 1.0f, 0.0f));
        size_t size;
        bool found = false;

        if (n_top > n)
                n_top = n;
        top = malloc(((size_t) n_top + 1) * sizeof(*top));
        if (!top)
                return -ENOMEM;

        size = top_entries(raw, n, n_top, top);
        for (size_t i = 0; i < size; i++) {
                if (top[i].token == chosen)
                        found = true;
                top[i].logprob = (float) ((double) top[i].logprob - lse);
        }

        out->logprob = (float) ((double) x_chosen - lse);
        out->rank = count_at_least(raw, n, x_chosen);
        if (!found)
                top[size++] = (struct token_logprob) { .token = chosen, .logprob = out->logprob };
        out->top = top;
        out->n_top = size;
        return 0;
}

int sampler_token_logprobs(const float *logits, int32_t n_vocab, int32_t token, int32_t n_top,
                           struct sample_result *out) {
        if (!out)
                return -EINVAL;
        *out = (struct sample_result) { .token = -1, .logprob = NAN };
        if (!logits || n_vocab <= 0 || token < 0 || token >= n_vocab || n_top < 0)
                return -EINVAL;
        int r = fill_logprobs(logits, n_vocab, token, n_top, out);
        if (r < 0)
                return r;
        out->token = token;
        return 0;
}

int sampler_sample(const struct sampling_params *p, struct sampler_seq *s, float *logits, int32_t n_vocab,
                   const int32_t *eog_ids, size_t n_eog_ids, struct sample_result *out) {
        bool want_logprobs, greedy;
        int32_t token = -1;
        int r;

        if (!out)
                return -EINVAL;
        *out = (struct sample_result) { .token = -1, .logprob = NAN };
        if (!p || !s || !logits || !s->seen || n_vocab != s->n_vocab || (n_eog_ids && !eog_ids) ||
            bad_words_lookback(p) > s->recent_cap)
                return -EINVAL;
        for (size_t i = 0; i < n_eog_ids; i++)
                if (eog_ids[i] < 0 || eog_ids[i] >= n_vocab)
                        return -EINVAL;

        want_logprobs = p->logprobs >= 0;
        greedy = sampling_params_is_greedy(p);
        r = reserve_scratch(s, p->has_allowed_token_ids, want_logprobs, needs_hist(p, n_vocab));
        if (r < 0)
                return r;

        if (want_logprobs)
                memcpy(s->raw, logits, (size_t) n_vocab * sizeof(float));

        process_logits(p, s, logits, eog_ids, n_eog_ids);

        if (greedy) {
                token = argmax(logits, n_vocab);
                if (token < 0)
                        return -EDOM;
        } else {
                r = sample_random(p, s, logits, n_vocab, &token);
                if (r < 0)
                        return r;
        }

        if (want_logprobs) {
                r = fill_logprobs(s->raw, n_vocab, token, p->logprobs, out);
                if (r < 0)
                        return r;
        }
        out->token = token;
        return 0;
}
