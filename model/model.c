/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

/* The architectures whose tensors and keys follow the Llama layout, each with the variations
 * of it that it uses. The facts are llama.cpp's for the same architecture. Every one may
 * fuse its query, key and value projections into one attn_qkv tensor and add biases to them,
 * and declares its context extension with the rope.scaling keys. */
struct architecture {
        const char *name;
        enum ffn_activation ffn_activation;
        enum rope_pairing rope_pairing;
        bool scaled_embeddings; /* token embeddings times sqrt(n_embd) */
        bool qk_norms;          /* attn_q_norm and attn_k_norm tensors */
        bool post_norms;        /* post_attention_norm and post_ffw_norm tensors */
        bool query_scaled;      /* queries scaled before attention (query_scale), scores not */
        bool fused_gate_up;     /* ffn_up holds the gate's n_ff rows, then the up's; no ffn_gate */
        /* reads final_logit_softcapping, attention.sliding_window and rope.freq_base_swa
         * (phi3 files carry a sliding window that llama.cpp ignores, and so do we) */
        bool gemma_keys;
        /* reads the YaRN keys rope.scaling.yarn_beta_fast, yarn_beta_slow and
         * yarn_log_multiplier, and attention.temperature_scale */
        bool yarn_keys;
        /* With attention.sliding_window in the file: every sliding_window_pattern-th layer is
         * global, the others slide, unless attention.sliding_window_pattern says otherwise. */
        uint32_t sliding_window_pattern;
};

static const struct architecture architectures[] = {
        { .name = "llama", .ffn_activation = FFN_SILU, .rope_pairing = ROPE_ADJACENT },
        { .name = "gemma3", .ffn_activation = FFN_GELU, .rope_pairing = ROPE_HALVES, .scaled_embeddings = true,
          .qk_norms = true, .post_norms = true, .query_scaled = true, .gemma_keys = true, .sliding_window_pattern = 6 },
        { .name = "mistral3", .ffn_activation = FFN_SILU, .rope_pairing = ROPE_ADJACENT, .yarn_keys = true },
        { .name = "phi3", .ffn_activation = FFN_SILU, .rope_pairing = ROPE_HALVES, .query_scaled = true,
          .fused_gate_up = true },
        { .name = "qwen2", .ffn_activation = FFN_SILU, .rope_pairing = ROPE_HALVES },
        { .name = "qwen3", .ffn_activation = FFN_SILU, .rope_pairing = ROPE_HALVES, .qk_norms = true },
};
#define N_ARCHITECTURES (sizeof(architectures) / sizeof(architectures[0]))

static const struct architecture *find_architecture(const char *name) {
        for (size_t i = 0; i < N_ARCHITECTURES; i++)
                if (strcmp(architectures[i].name, name) == 0)
                        return &architectures[i];
        return NULL;
}

static char *string_dup(struct gguf_string s) {
        char *p = malloc(s.len + 1);
        if (p) {
                memcpy(p, s.data, s.len);
                p[s.len] = 0;
        }
        return p;
}

static int arch_key_u32(const struct gguf_file *f, const char *arch, const char *suffix, uint32_t *ret,
                        struct error *err) {
        char key[128];
        snprintf(key, sizeof(key), "%s.%s", arch, suffix);
        return gguf_get_u32(f, key, ret, err);
}

static int arch_key_f32(const struct gguf_file *f, const char *arch, const char *suffix, float *ret,
                        struct error *err) {
        char key[128];
        snprintf(key, sizeof(key), "%s.%s", arch, suffix);
        return gguf_get_f32(f, key, ret, err);
}

static int nonzero(const struct gguf_file *f, const char *what, uint32_t v, struct error *err) {
        if (v == 0)
                return error_set(err, EINVAL, "%s: %s is 0", f->path, what);
        return 0;
}

static int arch_key_string(const struct gguf_file *f, const char *arch, const char *suffix, struct gguf_string *ret,
                           struct error *err) {
        char key[128];
        snprintf(key, sizeof(key), "%s.%s", arch, suffix);
        return gguf_get_string(f, key, ret, err);
}

/* llama.cpp's YaRN magnitude: 1 + 0.1 * m * ln(s) for a scale s above 1. */
static float yarn_magnitude(float scale, float m) {
        return scale <= 1.0f ? 1.0f : 0.1f * m * logf(scale) + 1.0f;
}

/* The rope.scaling keys: the type (none, linear, yarn, longrope; linear by default), the
 * factor (or the older rope.scale_linear), the original context, the attention factor and,
 * for YaRN, the magnitude that its cosines and sines carry, as llama.cpp derives it. */
static int read_rope_scaling(const struct gguf_file *f, const struct architecture *a, struct model_hparams *hp,
                             struct error *err) {
        static const char *const types[] = { "none", "linear", "yarn", "longrope" };
        enum { NONE, LINEAR, YARN, LONGROPE } type = LINEAR;
        struct gguf_string name;
        int r = arch_key_string(f, a->name, "rope.scaling.type", &name, err);
        if (r == -EINVAL)
                return r;
        if (r == 0) {
                size_t i = 0;
                while (i < sizeof(types) / sizeof(types[0]) && !gguf_string_equals(name, types[i]))
                        i++;
                if (i == sizeof(types) / sizeof(types[0]))
                        return error_set(err, EOPNOTSUPP, "%s: %s.rope.scaling.type '%.*s' is not supported (none, linear, yarn, longrope)",
                                         f->path, a->name, (int) name.len, name.data);
                type = (typeof(type)) i;
        }
        float factor = 0.0f, log_multiplier = 0.0f;
        if ((r = arch_key_f32(f, a->name, "rope.scaling.factor", &factor, err)) == -ENOENT)
                r = arch_key_f32(f, a->name, "rope.scale_linear", &factor, err);
        if (r == -EINVAL)
                return r;
        if (!(factor >= 0.0f) || !isfinite(factor))
                return error_set(err, EINVAL, "%s: rope.scaling.factor must not be negative", f->path);
        /* YaRN's ramp and magnitude are defined for stretching the context, not shrinking it */
        if (type == YARN && factor > 0.0f && factor < 1.0f)
                return error_set(err, EINVAL, "%s: rope.scaling.factor is %g under YaRN, which extends the context by a factor of at least 1",
                                 f->path, (double) factor);
        hp->rope_scale = factor == 0.0f || type == NONE ? 1.0f : 1.0f / factor;
        hp->n_ctx_orig = hp->n_ctx_train;
        hp->rope_attn_factor = 1.0f;
        hp->rope_beta_fast = 32.0f;
        hp->rope_beta_slow = 1.0f;
        hp->attn_temp_scale = 0.0f;
        if (arch_key_u32(f, a->name, "rope.scaling.original_context_length", &hp->n_ctx_orig, err) == -EINVAL ||
            arch_key_f32(f, a->name, "rope.scaling.attn_factor", &hp->rope_attn_factor, err) == -EINVAL)
                return -EINVAL;
        if (a->yarn_keys &&
            (arch_key_f32(f, a->name, "rope.scaling.yarn_beta_fast", &hp->rope_beta_fast, err) == -EINVAL ||
             arch_key_f32(f, a->name, "rope.scaling.yarn_beta_slow", &hp->rope_beta_slow, err) == -EINVAL ||
             arch_key_f32(f, a->name, "rope.scaling.yarn_log_multiplier", &log_multiplier, err) == -EINVAL ||
             arch_key_f32(f, a->name, "attention.temperature_scale", &hp->attn_temp_scale, err) == -EINVAL))
                return -EINVAL;
        if (hp->n_ctx_orig == 0)
                return error_set(err, EINVAL, "%s: rope.scaling.original_context_length is 0", f->path);
        if (!isfinite(hp->rope_attn_factor) || !isfinite(hp->rope_beta_fast) || !isfinite(hp->rope_beta_slow) ||
            !(hp->rope_beta_fast > 0.0f) || !(hp->rope_beta_slow > 0.0f) || !isfinite(log_multiplier) ||
            !isfinite(hp->attn_temp_scale))
                return error_set(err, EINVAL, "%s: the rope.scaling attention factor, YaRN betas and log multiplier and the attention temperature must be finite, the betas positive",
                                 f->path);
        hp->rope_ext_factor = type == YARN ? 1.0f : 0.0f;
        float attn_factor = 1.0f;
        if (type == YARN) {
                float scale = 1.0f / hp->rope_scale;
                attn_factor = log_multiplier != 0.0f ? yarn_magnitude(scale, 1.0f) / yarn_magnitude(scale, log_multiplier)
                                                     : yarn_magnitude(scale, 1.0f);
                /* the rotation applies 1 + 0.1 ln(scale) itself (rope-angles.h) */
                attn_factor *= 1.0f / (1.0f + 0.1f * logf(scale));
        }
        hp->rope_attn_factor *= attn_factor;
        hp->n_ctx_max = hp->n_ctx_train;
        if (type == YARN) {
                double extended = (double) hp->n_ctx_orig / hp->rope_scale;
                if (extended > hp->n_ctx_max)
                        hp->n_ctx_max = extended < UINT32_MAX ? (uint32_t) extended : UINT32_MAX;
        }
        return 0;
}

/* The architecture's variations on the Llama layout and the keys that tune them. */
static int read_variations(const struct gguf_file *f, const struct architecture *a, struct model_hparams *hp,
                           struct error *err) {
        hp->ffn_activation = a->ffn_activation;
        hp->rope_pairing = a->rope_pairing;
        hp->embd_scale = a->scaled_embeddings ? sqrtf((float) hp->n_embd) : 1.0f;
        /* llama.cpp's rule: 1 / sqrt(head size) on the queries, except Gemma 3 27B (62
         * layers), whose query_pre_attn_scalar is n_embd / n_head */
        bool gemma_27b = a->gemma_keys && hp->n_layer == 62;
        float scaled_dim = (float) (gemma_27b ? hp->n_embd / hp->n_head : hp->head_dim);
        hp->query_scale = a->query_scaled ? 1.0f / sqrtf(scaled_dim) : 1.0f;
        hp->score_scale = a->query_scaled ? 1.0f : 1.0f / sqrtf((float) hp->head_dim);
        hp->logit_softcap = 0.0f;
        hp->sliding_window = 0;
        hp->rope_theta_local = hp->rope_theta;
        int r = read_rope_scaling(f, a, hp, err);
        if (r < 0 || !a->gemma_keys)
                return r;

        if (arch_key_f32(f, a->name, "final_logit_softcapping", &hp->logit_softcap, err) == -EINVAL)
                return -EINVAL;
        if (!(hp->logit_softcap >= 0.0f))
                return error_set(err, EINVAL, "%s: final_logit_softcapping must not be negative", f->path);
        if (arch_key_u32(f, a->name, "attention.sliding_window", &hp->sliding_window, err) == -EINVAL)
                return -EINVAL;
        hp->rope_theta_local = 10000.0f; /* llama.cpp's default for the sliding layers */
        if (arch_key_f32(f, a->name, "rope.freq_base_swa", &hp->rope_theta_local, err) == -EINVAL)
                return -EINVAL;
        if (!(hp->rope_theta_local > 0.0f))
                return error_set(err, EINVAL, "%s: rope.freq_base_swa must be positive", f->path);
        return 0;
}

/* Which layers slide: attention.sliding_window_pattern as a list of booleans (one per layer),
 * or as n (every n-th layer, counting from 1, global; 0: all slide), or the architecture's n. */
static int mark_sliding_layers(const struct gguf_file *f, const struct architecture *a, struct model *m,
                               struct error *err) {
        const struct model_hparams *hp = &m->hp;
        if (hp->sliding_window == 0)
                return 0;
        char key[128];
        snprintf(key, sizeof(key), "%s.attention.sliding_window_pattern", a->name);
        const struct gguf_value *list;
        uint32_t n = a->sliding_window_pattern;
        struct error ignored;
        if (gguf_get_array(f, key, GGUF_VALUE_BOOL, &list, &ignored) == 0) {
                if (list->array.count != hp->n_layer)
                        return error_set(err, EINVAL, "%s: %s has %llu entries for %u layers", f->path, key,
                                         (unsigned long long) list->array.count, hp->n_layer);
                for (uint32_t i = 0; i < hp->n_layer; i++)
                        m->layers[i].sliding = gguf_array_int(list, i) != 0;
                return 0;
        }
        if (gguf_get_u32(f, key, &n, err) == -EINVAL)
                return -EINVAL;
        for (uint32_t i = 0; i < hp->n_layer; i++)
                m->layers[i].sliding = n == 0 || i % n < n - 1;
        return 0;
}

static int read_hparams(const struct gguf_file *f, const struct architecture *a, struct model_hparams *hp,
                        struct error *err) {
        const char *arch = a->name;
        int r;
        if ((r = arch_key_u32(f, arch, "block_count", &hp->n_layer, err)) < 0 ||
            (r = arch_key_u32(f, arch, "embedding_length", &hp->n_embd, err)) < 0 ||
            (r = arch_key_u32(f, arch, "feed_forward_length", &hp->n_ff, err)) < 0 ||
            (r = arch_key_u32(f, arch, "attention.head_count", &hp->n_head, err)) < 0 ||
            (r = arch_key_u32(f, arch, "context_length", &hp->n_ctx_train, err)) < 0 ||
            (r = arch_key_f32(f, arch, "attention.layer_norm_rms_epsilon", &hp->rms_eps, err)) < 0)
                return r;
        if ((r = nonzero(f, "block_count", hp->n_layer, err)) < 0 ||
            (r = nonzero(f, "embedding_length", hp->n_embd, err)) < 0 ||
            (r = nonzero(f, "feed_forward_length", hp->n_ff, err)) < 0 ||
            (r = nonzero(f, "attention.head_count", hp->n_head, err)) < 0 ||
            (r = nonzero(f, "context_length", hp->n_ctx_train, err)) < 0)
                return r;

        /* Optional keys with the format's documented defaults. */
        hp->n_head_kv = hp->n_head;
        if (arch_key_u32(f, arch, "attention.head_count_kv", &hp->n_head_kv, err) == -EINVAL)
                return -EINVAL;
        hp->rope_theta = 10000.0f;
        if (arch_key_f32(f, arch, "rope.freq_base", &hp->rope_theta, err) == -EINVAL)
                return -EINVAL;
        uint32_t pooling = UINT32_MAX;
        if (arch_key_u32(f, arch, "pooling_type", &pooling, err) == -EINVAL)
                return -EINVAL;
        hp->pooling_type = pooling <= INT32_MAX ? (int32_t) pooling : -1;

        if (hp->n_head_kv == 0 || hp->n_head % hp->n_head_kv != 0)
                return error_set(err, EINVAL, "%s: head_count %u is not a multiple of head_count_kv %u", f->path,
                                 hp->n_head, hp->n_head_kv);
        hp->head_dim = 0;
        if (arch_key_u32(f, arch, "attention.key_length", &hp->head_dim, err) == -EINVAL)
                return -EINVAL;
        if (hp->head_dim == 0) {
                if (hp->n_embd % hp->n_head != 0)
                        return error_set(err, EINVAL, "%s: embedding_length %u is not a multiple of head_count %u", f->path,
                                         hp->n_embd, hp->n_head);
                hp->head_dim = hp->n_embd / hp->n_head;
        }
        uint32_t value_length = hp->head_dim;
        if (arch_key_u32(f, arch, "attention.value_length", &value_length, err) == -EINVAL)
                return -EINVAL;
        if (value_length != hp->head_dim)
                return error_set(err, EOPNOTSUPP, "%s: attention.value_length %u differs from the key length %u", f->path,
                                 value_length, hp->head_dim);
        if (hp->head_dim % 2 != 0)
                return error_set(err, EINVAL, "%s: head dimension %u is odd; RoPE needs pairs", f->path, hp->head_dim);
        hp->rope_dim = hp->head_dim;
        if (arch_key_u32(f, arch, "rope.dimension_count", &hp->rope_dim, err) == -EINVAL)
                return -EINVAL;
        if (hp->rope_dim > hp->head_dim || hp->rope_dim % 2 != 0)
                return error_set(err, EINVAL, "%s: rope.dimension_count %u must be even and at most the head dimension %u",
                                 f->path, hp->rope_dim, hp->head_dim);
        if (!(hp->rms_eps > 0.0f) || !(hp->rope_theta > 0.0f))
                return error_set(err, EINVAL, "%s: layer_norm_rms_epsilon and rope.freq_base must be positive", f->path);
        return read_variations(f, a, hp, err);
}

static int missing_tensor(const struct gguf_file *f, const char *name, struct error *err) {
        return error_set(err, EINVAL, "%s: missing tensor '%s'", f->path, name);
}

static int bind_weight(const struct gguf_file *f, const char *name, uint64_t n_cols, uint64_t n_rows,
                       struct weight *w, struct error *err) {
        const struct gguf_tensor *t = gguf_find_tensor(f, name);
        if (!t)
                return missing_tensor(f, name, err);
        if (t->n_dims > 2 || t->ne[0] != n_cols || t->ne[1] != n_rows)
                return error_set(err, EINVAL,
                                 "%s: tensor '%s' has shape [%llu, %llu], inconsistent with the metadata, which implies [%llu, %llu]",
                                 f->path, name, (unsigned long long) t->ne[0], (unsigned long long) t->ne[1],
                                 (unsigned long long) n_cols, (unsigned long long) n_rows);
        switch (t->type) {
        case TENSOR_Q4_0: case TENSOR_Q4_1: case TENSOR_Q5_0: case TENSOR_Q5_1: case TENSOR_Q8_0:
        case TENSOR_Q2_K: case TENSOR_Q3_K: case TENSOR_Q4_K: case TENSOR_Q5_K: case TENSOR_Q6_K:
        case TENSOR_F32: case TENSOR_F16: case TENSOR_BF16:
                break;
        default:
                return error_set(err, EOPNOTSUPP, "%s: tensor '%s' has type %s, which a weight matrix may not have",
                                 f->path, name, tensor_type_info(t->type)->name);
        }
        w->type = t->type;
        w->n_rows = n_rows;
        w->n_cols = n_cols;
        w->row_bytes = tensor_row_bytes(t->type, n_cols);
        w->data = t->data;
        return 0;
}

static int load_vector(const struct gguf_file *f, const char *name, uint64_t n, float **ret, struct error *err) {
        const struct gguf_tensor *t = gguf_find_tensor(f, name);
        if (!t)
                return missing_tensor(f, name, err);
        if (t->n_dims != 1 || t->ne[0] != n)
                return error_set(err, EINVAL, "%s: tensor '%s' has %u dimensions and %llu elements; the metadata implies a vector of %llu",
                                 f->path, name, t->n_dims, (unsigned long long) t->ne[0], (unsigned long long) n);
        float *v = malloc(n * sizeof(float));
        if (!v)
                return error_set(err, ENOMEM, "out of memory");
        tensor_row_to_float(t->type, t->data, v, n);
        *ret = v;
        return 0;
}

/* rows of w from row first on, as a weight of their own */
static struct weight weight_rows(const struct weight *w, uint64_t first, uint64_t n_rows) {
        struct weight part = *w;
        part.n_rows = n_rows;
        part.data = w->data + first * w->row_bytes;
        return part;
}

/* A vector the file may lack: 0 and *ret NULL when it does. */
static int load_optional_vector(const struct gguf_file *f, const char *name, uint64_t n, float **ret,
                                struct error *err) {
        *ret = NULL;
        return gguf_find_tensor(f, name) ? load_vector(f, name, n, ret, err) : 0;
}

/* The query, key and value projections: three tensors, or one attn_qkv whose rows are the
 * three in that order; with their biases where the file has them (three, or one fused). */
static int bind_attention_inputs(const struct gguf_file *f, const struct model_hparams *hp, uint32_t i,
                                 struct model_layer *l, struct error *err) {
        uint64_t q_dim = (uint64_t) hp->n_head * hp->head_dim, kv_dim = (uint64_t) hp->n_head_kv * hp->head_dim;
        char name[96], fused_bias[96];
        int r;
#define LAYER_TENSOR(suffix) (snprintf(name, sizeof(name), "blk.%u." suffix, i), name)
        if (gguf_find_tensor(f, LAYER_TENSOR("attn_qkv.weight"))) {
                struct weight qkv;
                if ((r = bind_weight(f, name, hp->n_embd, q_dim + 2 * kv_dim, &qkv, err)) < 0)
                        return r;
                l->wq = weight_rows(&qkv, 0, q_dim);
                l->wk = weight_rows(&qkv, q_dim, kv_dim);
                l->wv = weight_rows(&qkv, q_dim + kv_dim, kv_dim);
        } else if ((r = bind_weight(f, LAYER_TENSOR("attn_q.weight"), hp->n_embd, q_dim, &l->wq, err)) < 0 ||
                   (r = bind_weight(f, LAYER_TENSOR("attn_k.weight"), hp->n_embd, kv_dim, &l->wk, err)) < 0 ||
                   (r = bind_weight(f, LAYER_TENSOR("attn_v.weight"), hp->n_embd, kv_dim, &l->wv, err)) < 0)
                return r;
        snprintf(fused_bias, sizeof(fused_bias), "blk.%u.attn_qkv.bias", i);
        if (gguf_find_tensor(f, fused_bias)) {
                float *qkv;
                if ((r = load_vector(f, fused_bias, q_dim + 2 * kv_dim, &qkv, err)) < 0)
                        return r;
                l->bq = qkv;
                l->bk = malloc(kv_dim * sizeof(float));
                l->bv = malloc(kv_dim * sizeof(float));
                if (!l->bk || !l->bv)
                        return error_set(err, ENOMEM, "out of memory");
                memcpy(l->bk, qkv + q_dim, kv_dim * sizeof(float));
                memcpy(l->bv, qkv + q_dim + kv_dim, kv_dim * sizeof(float));
                return 0;
        }
        if ((r = load_optional_vector(f, LAYER_TENSOR("attn_q.bias"), q_dim, &l->bq, err)) < 0 ||
            (r = load_optional_vector(f, LAYER_TENSOR("attn_k.bias"), kv_dim, &l->bk, err)) < 0 ||
            (r = load_optional_vector(f, LAYER_TENSOR("attn_v.bias"), kv_dim, &l->bv, err)) < 0)
                return r;
        if ((l->bq != NULL) != (l->bk != NULL) || (l->bk != NULL) != (l->bv != NULL))
                return error_set(err, EINVAL, "%s: layer %u has biases for some of the query, key and value projections but not all",
                                 f->path, i);
#undef LAYER_TENSOR
        return 0;
}

/* Bias tensors llama.cpp may read but this loader does not implement: refused by name rather
 * than left out of the sums. */
static int refuse_unsupported_biases(const struct gguf_file *f, uint32_t i, struct error *err) {
        static const char *const suffixes[] = { "attn_output.bias", "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias" };
        char name[96];
        for (size_t k = 0; k < sizeof(suffixes) / sizeof(suffixes[0]); k++) {
                snprintf(name, sizeof(name), "blk.%u.%s", i, suffixes[k]);
                if (gguf_find_tensor(f, name))
                        return error_set(err, EOPNOTSUPP, "%s: tensor '%s' is not supported: only the query, key and value projections may have biases",
                                         f->path, name);
        }
        return 0;
}

static int bind_layer(const struct gguf_file *f, const struct architecture *a, const struct model_hparams *hp,
                      uint32_t i, struct model_layer *l, struct error *err) {
        uint64_t q_dim = (uint64_t) hp->n_head * hp->head_dim;
        char name[96];
        int r;
#define LAYER_TENSOR(suffix) (snprintf(name, sizeof(name), "blk.%u." suffix ".weight", i), name)
        if ((r = load_vector(f, LAYER_TENSOR("attn_norm"), hp->n_embd, &l->attn_norm, err)) < 0 ||
            (r = bind_attention_inputs(f, hp, i, l, err)) < 0 || (r = refuse_unsupported_biases(f, i, err)) < 0 ||
            (r = bind_weight(f, LAYER_TENSOR("attn_output"), q_dim, hp->n_embd, &l->wo, err)) < 0 ||
            (r = load_vector(f, LAYER_TENSOR("ffn_norm"), hp->n_embd, &l->ffn_norm, err)) < 0 ||
            (r = bind_weight(f, LAYER_TENSOR("ffn_down"), hp->n_ff, hp->n_embd, &l->w_down, err)) < 0)
                return r;
        if (a->fused_gate_up) {
                struct weight gate_up;
                if ((r = bind_weight(f, LAYER_TENSOR("ffn_up"), hp->n_embd, 2 * (uint64_t) hp->n_ff, &gate_up, err)) < 0)
                        return r;
                l->w_gate = weight_rows(&gate_up, 0, hp->n_ff);
                l->w_up = weight_rows(&gate_up, hp->n_ff, hp->n_ff);
        } else if ((r = bind_weight(f, LAYER_TENSOR("ffn_gate"), hp->n_embd, hp->n_ff, &l->w_gate, err)) < 0 ||
                   (r = bind_weight(f, LAYER_TENSOR("ffn_up"), hp->n_embd, hp->n_ff, &l->w_up, err)) < 0)
                return r;
        if (a->qk_norms && ((r = load_vector(f, LAYER_TENSOR("attn_q_norm"), hp->head_dim, &l->attn_q_norm, err)) < 0 ||
                            (r = load_vector(f, LAYER_TENSOR("attn_k_norm"), hp->head_dim, &l->attn_k_norm, err)) < 0))
                return r;
        if (a->post_norms &&
            ((r = load_vector(f, LAYER_TENSOR("post_attention_norm"), hp->n_embd, &l->attn_post_norm, err)) < 0 ||
             (r = load_vector(f, LAYER_TENSOR("post_ffw_norm"), hp->n_embd, &l->ffn_post_norm, err)) < 0))
                return r;
#undef LAYER_TENSOR
        return 0;
}

/* The RoPE frequency factors: rope_freqs, or rope_factors_long with rope_factors_short. */
static int load_rope_factors(const struct gguf_file *f, struct model *m, struct error *err) {
        uint32_t n = m->hp.rope_dim / 2;
        int r;
        if ((r = load_optional_vector(f, "rope_freqs.weight", n, &m->rope_freqs, err)) < 0 ||
            (r = load_optional_vector(f, "rope_factors_long.weight", n, &m->rope_factors_long, err)) < 0 ||
            (r = load_optional_vector(f, "rope_factors_short.weight", n, &m->rope_factors_short, err)) < 0)
                return r;
        if ((m->rope_factors_long != NULL) != (m->rope_factors_short != NULL))
                return error_set(err, EINVAL, "%s: rope_factors_long and rope_factors_short come as a pair; the file has one",
                                 f->path);
        const float *tables[] = { m->rope_freqs, m->rope_factors_long, m->rope_factors_short };
        for (size_t k = 0; k < sizeof(tables) / sizeof(tables[0]); k++)
                for (uint32_t i = 0; tables[k] && i < n; i++)
                        if (!(tables[k][i] > 0.0f) || !isfinite(tables[k][i]))
                                return error_set(err, EINVAL, "%s: RoPE frequency factor %u is %g; factors must be positive and finite",
                                                 f->path, i, (double) tables[k][i]);
        return 0;
}

static int vocab_size(const struct gguf_file *f, const char *arch, uint32_t *ret, struct error *err) {
        const struct gguf_value *tokens;
        int r = arch_key_u32(f, arch, "vocab_size", ret, err);
        if (r != -ENOENT)
                return r;
        struct error tokens_err;
        if ((r = gguf_get_array(f, "tokenizer.ggml.tokens", GGUF_VALUE_STRING, &tokens, &tokens_err)) < 0)
                return error_set(err, -r, "%s: no %s.vocab_size, and tokenizer.ggml.tokens cannot stand in (%s)", f->path,
                                 arch, tokens_err.message);
        if (tokens->array.count == 0 || tokens->array.count > UINT32_MAX)
                return error_set(err, EINVAL, "%s: tokenizer.ggml.tokens has %llu entries", f->path,
                                 (unsigned long long) tokens->array.count);
        *ret = (uint32_t) tokens->array.count;
        return 0;
}

int model_from_gguf(struct gguf_file *file, struct model **ret, struct error *err) {
        struct gguf_string arch_s, name_s;
        struct model *m;
        int r;

        m = calloc(1, sizeof(*m));
        if (!m) {
                gguf_close(file);
                return error_set(err, ENOMEM, "out of memory");
        }
        m->file = file;
        if ((r = gguf_get_string(file, "general.architecture", &arch_s, err)) < 0)
                goto fail;
        if (memchr(arch_s.data, 0, arch_s.len)) {
                r = error_set(err, EINVAL, "%s: general.architecture contains a NUL byte", file->path);
                goto fail;
        }
        if (!(m->architecture = string_dup(arch_s))) {
                r = error_set(err, ENOMEM, "out of memory");
                goto fail;
        }
        const struct architecture *arch = find_architecture(m->architecture);
        if (!arch) {
                char names[128] = "";
                for (size_t i = 0; i < N_ARCHITECTURES; i++)
                        snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", i ? ", " : "",
                                 architectures[i].name);
                r = error_set(err, EOPNOTSUPP, "%s: architecture '%s' is not supported (supported: %s)", file->path,
                              m->architecture, names);
                goto fail;
        }
        m->name = gguf_get_string(file, "general.name", &name_s, NULL) == 0 ? string_dup(name_s) : strdup(m->architecture);
        if (!m->name) {
                r = error_set(err, ENOMEM, "out of memory");
                goto fail;
        }

        struct model_hparams *hp = &m->hp;
        if ((r = read_hparams(file, arch, hp, err)) < 0 ||
            (r = vocab_size(file, m->architecture, &hp->n_vocab, err)) < 0 ||
            (r = nonzero(file, "vocab_size", hp->n_vocab, err)) < 0 ||
            (r = bind_weight(file, "token_embd.weight", hp->n_embd, hp->n_vocab, &m->token_embd, err)) < 0 ||
            (r = load_vector(file, "output_norm.weight", hp->n_embd, &m->output_norm, err)) < 0)
                goto fail;

        m->tied_output = gguf_find_tensor(file, "output.weight") == NULL;
        if (m->tied_output)
                m->output = m->token_embd;
        else if ((r = bind_weight(file, "output.weight", hp->n_embd, hp->n_vocab, &m->output, err)) < 0)
                goto fail;

        /* Every layer has at least 6 tensors: refuse a block_count the file cannot hold before
         * allocating for it (a corrupt count would otherwise ask for terabytes). */
        if (hp->n_layer > file->n_tensors / 6) {
                r = error_set(err, EINVAL, "%s: block_count %u needs %llu layer tensors, but the file has %llu tensors in all",
                              file->path, hp->n_layer, (unsigned long long) hp->n_layer * 6,
                              (unsigned long long) file->n_tensors);
                goto fail;
        }
        m->layers = calloc(hp->n_layer, sizeof(*m->layers));
        if (!m->layers) {
                r = error_set(err, ENOMEM, "out of memory");
                goto fail;
        }
        for (uint32_t i = 0; i < hp->n_layer; i++)
                if ((r = bind_layer(file, arch, hp, i, &m->layers[i], err)) < 0)
                        goto fail;
        m->post_norms = arch->post_norms;
        if ((r = load_rope_factors(file, m, err)) < 0 || (r = mark_sliding_layers(file, arch, m, err)) < 0)
                goto fail;
        *ret = m;
        return 0;
fail:
        model_free(m);
        return r;
}

int model_load(const char *path, struct model **ret, struct error *err) {
        struct gguf_file *file;
        int r = gguf_open(path, &file, err);
        if (r < 0)
                return r;
        return model_from_gguf(file, ret, err);
}

void model_free(struct model *m) {
        if (!m)
                return;
        if (m->layers)
                for (uint32_t i = 0; i < m->hp.n_layer; i++) {
                        free(m->layers[i].attn_norm);
                        free(m->layers[i].bq);
                        free(m->layers[i].bk);
                        free(m->layers[i].bv);
                        free(m->layers[i].attn_q_norm);
                        free(m->layers[i].attn_k_norm);
                        free(m->layers[i].attn_post_norm);
                        free(m->layers[i].ffn_norm);
                        free(m->layers[i].ffn_post_norm);
                }
        free(m->layers);
        free(m->rope_freqs);
        free(m->rope_factors_long);
        free(m->rope_factors_short);
        free(m->output_norm);
        free(m->name);
        free(m->architecture);
        gguf_close(m->file);
        free(m);
}

static uint64_t weight_bytes(const struct weight *w) {
        return w->n_rows * w->row_bytes;
}

uint64_t model_weight_bytes(const struct model *m) {
        uint64_t total = weight_bytes(&m->output);
        for (uint32_t i = 0; i < m->hp.n_layer; i++) {
                const struct model_layer *l = &m->layers[i];
                total += weight_bytes(&l->wq) + weight_bytes(&l->wk) + weight_bytes(&l->wv) + weight_bytes(&l->wo) +
                         weight_bytes(&l->w_gate) + weight_bytes(&l->w_up) + weight_bytes(&l->w_down);
        }
        return total;
}
