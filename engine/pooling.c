/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pooling.h"

static const char *const names[_POOLING_MAX] = {
        [POOLING_LAST] = "last",
        [POOLING_MEAN] = "mean",
        [POOLING_CLS] = "cls",
};

const char *pooling_type_name(enum pooling_type t) {
        return t < _POOLING_MAX ? names[t] : NULL;
}

/* vLLM spells them in capitals (PoolingType.MEAN), llama.cpp in lower case: both go. */
int pooling_type_from_string(const char *s, enum pooling_type *ret) {
        for (int t = 0; t < _POOLING_MAX; t++)
                if (strcasecmp(s, names[t]) == 0) {
                        *ret = (enum pooling_type) t;
                        return 0;
                }
        return -EINVAL;
}

enum pooling_type pooling_type_from_gguf(int32_t declared) {
        switch (declared) {
        case 1: return POOLING_MEAN;
        case 2: return POOLING_CLS;
        default: return POOLING_LAST;
        }
}

bool pooling_reads(enum pooling_type t, uint32_t position, uint32_t n_prompt) {
        switch (t) {
        case POOLING_LAST: return position + 1 == n_prompt;
        case POOLING_CLS: return position == 0;
        default: return position < n_prompt;
        }
}

int pooler_init(struct pooler *p, enum pooling_type type, uint32_t n_embd) {
        *p = (struct pooler) { .type = type, .n_embd = n_embd, .sum = calloc(n_embd, sizeof(double)) };
        return p->sum ? 0 : -ENOMEM;
}

void pooler_add(struct pooler *p, const float *state) {
        /* last and cls read one state: it is the sum of one */
        for (uint32_t i = 0; i < p->n_embd; i++)
                p->sum[i] += state[i];
        p->n++;
}

void pooler_restart(struct pooler *p) {
        memset(p->sum, 0, p->n_embd * sizeof(double));
        p->n = 0;
}

int pooler_finish(const struct pooler *p, const struct pooling_params *params, float **ret, uint32_t *ret_n,
                  struct error *err) {
        uint32_t n = params->dimensions ? params->dimensions : p->n_embd;
        *ret = NULL;
        if (params->dimensions > p->n_embd)
                return error_set(err, EINVAL, "dimensions is %u, more than the model's %u", params->dimensions, p->n_embd);
        if (p->n == 0)
                return error_set(err, EINVAL, "no hidden state was pooled");
        float *v = malloc(n * sizeof(*v));
        if (!v)
                return error_set(err, ENOMEM, "out of memory");
        double length = 0;
        for (uint32_t i = 0; i < n; i++) {
                double x = p->sum[i] / p->n;
                v[i] = (float) x;
                length += x * x;
        }
        length = sqrt(length);
        /* a zero vector stays zero, as llama.cpp leaves it */
        for (uint32_t i = 0; params->normalize && length > 0 && i < n; i++)
                v[i] = (float) ((p->sum[i] / p->n) / length);
        *ret = v;
        *ret_n = n;
        return 0;
}

void pooler_done(struct pooler *p) {
        free(p->sum);
        p->sum = NULL;
}
