/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

/* The architectures whose tensors and keys follow the Llama layout, each with the variations
 * of it that it uses. The facts are llama.cpp's for the same architecture. */
struct architecture {
        const char *name;
        enum ffn_activation ffn_activation;
        enum rope_pairing rope_pairing;
        bool scaled_embeddings; /* token embeddings times sqrt(n_embd) */
        bool qk_norms;          /* attn_q_norm and attn_k_norm tensors */
        bool post_norms;        /* post_attention_norm and post_ffw_norm tensors */
        bool query_scaled;      /* queries scaled before attention (query_scale), scores not */
        /* reads final_logit_softcapping, rope.scaling.*, attention.sliding_window and
         * rope.freq_base_swa (llama's loader never did, so its files keep their numbers) */
        bool variant_keys;
        /* With attention.sliding_window in the file: every sliding_window_pattern-th layer is
         * global, the others slide, unless attention.sliding_window_pattern says otherwise. */
        uint32_t sliding_window_pattern;
};

static const struct architecture architectures[] = {
        { .name = "llama", .ffn_activation = FFN_SILU, .rope_pairing = ROPE_ADJACENT },
        { .name = "gemma3", .ffn_activation = FFN_GELU, .rope_pairing = ROPE_HALVES, .scaled_embeddings = true,
          .qk_norms = true, .post_norms = true, .query_scaled = true, .variant_keys = true,
          .sliding_window_pattern = 6 },
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

/* The architecture's variations on the Llama layout and the keys that tune them. */
static int read_variations(const struct gguf_file *f, const struct architecture *a, struct model_hparams *hp,
                           struct error *err) {
        hp->ffn_activation = a->ffn_activation;
        hp->rope_pairing = a->rope_pairing;
        hp->rope_scale = 1.0f;
        hp->embd_scale = a->scaled_embeddings ? sqrtf((float) hp->n_embd) : 1.0f;
        /* llama.cpp's rule: 1 / sqrt(head size) on the queries, except Gemma 3 27B (62
         * layers), whose query_pre_attn_scalar is n_embd / n_head */
        float scaled_dim = (float) (a->query_scaled && hp->n_layer == 62 ? hp->n_embd / hp->n_head : hp->head_dim);
        hp->query_scale = a->query_scaled ? 1.0f / sqrtf(scaled_dim) : 1.0f;
        hp->score_scale = a->query_scaled ? 1.0f : 1.0f / sqrtf((float) hp->head_dim);
        hp->logit_softcap = 0.0f;
        hp->sliding_window = 0;
        hp->rope_theta_local = hp->rope_theta;
        if (!a->variant_keys)
                return 0;

        if (arch_key_f32(f, a->name, "final_logit_softcapping", &hp->logit_softcap, err) == -EINVAL)
                return -EINVAL;
        float factor = 0.0f;
        if (arch_key_f32(f, a->name, "rope.scaling.factor", &factor, err) == -EINVAL)
                return -EINVAL;
        if (factor != 0.0f) {
                struct gguf_string type;
                char key[128];
                snprintf(key, sizeof(key), "%s.rope.scaling.type", a->name);
                if (gguf_get_string(f, key, &type, NULL) == 0 && !gguf_string_equals(type, "linear") &&
                    !gguf_string_equals(type, "none"))
                        return error_set(err, EOPNOTSUPP, "%s: %s '%.*s' is not supported (only linear)", f->path, key,
                                         (int) type.len, type.data);
                hp->rope_scale = 1.0f / factor;
        }
        if (!(hp->logit_softcap >= 0.0f) || !(hp->rope_scale > 0.0f) || !isfinite(hp->rope_scale))
                return error_set(err, EINVAL, "%s: final_logit_softcapping must not be negative, rope.scaling.factor must be positive",
                                 f->path);
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

static int bind_layer(const struct gguf_file *f, const struct architecture *a, const struct model_hparams *hp,
                      uint32_t i, struct model_layer *l, struct error *err) {
        uint64_t q_dim = (uint64_t) hp->n_head * hp->head_dim, kv_dim = (uint64_t) hp->n_head_kv * hp->head_dim;
        char name[96];
        int r;
#define LAYER_TENSOR(suffix) (snprintf(name, sizeof(name), "blk.%u." suffix ".weight", i), name)
        if ((r = load_vector(f, LAYER_TENSOR("attn_norm"), hp->n_embd, &l->attn_norm, err)) < 0 ||
            (r = bind_weight(f, LAYER_TENSOR("attn_q"), hp->n_embd, q_dim, &l->wq, err)) < 0 ||
            (r = bind_weight(f, LAYER_TENSOR("attn_k"), hp->n_embd, kv_dim, &l->wk, err)) < 0 ||
            (r = bind_weight(f, LAYER_TENSOR("attn_v"), hp->n_embd, kv_dim, &l->wv, err)) < 0 ||
            (r = bind_weight(f, LAYER_TENSOR("attn_output"), q_dim, hp->n_embd, &l->wo, err)) < 0 ||
            (r = load_vector(f, LAYER_TENSOR("ffn_norm"), hp->n_embd, &l->ffn_norm, err)) < 0 ||
            (r = bind_weight(f, LAYER_TENSOR("ffn_gate"), hp->n_embd, hp->n_ff, &l->w_gate, err)) < 0 ||
            (r = bind_weight(f, LAYER_TENSOR("ffn_up"), hp->n_embd, hp->n_ff, &l->w_up, err)) < 0 ||
            (r = bind_weight(f, LAYER_TENSOR("ffn_down"), hp->n_ff, hp->n_embd, &l->w_down, err)) < 0)
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

        /* Every layer has 9 tensors: refuse a block_count the file cannot hold before
         * allocating for it (a corrupt count would otherwise ask for terabytes). */
        if (hp->n_layer > file->n_tensors / 9) {
                r = error_set(err, EINVAL, "%s: block_count %u needs %llu layer tensors, but the file has %llu tensors in all",
                              file->path, hp->n_layer, (unsigned long long) hp->n_layer * 9,
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
        if ((r = mark_sliding_layers(file, arch, m, err)) < 0)
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
                        free(m->layers[i].attn_q_norm);
                        free(m->layers[i].attn_k_norm);
                        free(m->layers[i].attn_post_norm);
                        free(m->layers[i].ffn_norm);
                        free(m->layers[i].ffn_post_norm);
                }
        free(m->layers);
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
