/* SPDX-License-Identifier: MIT */
/* llama-quantize's choice of a type per tensor (llama_tensor_get_type in src/llama-quant.cpp
 * of the pinned llama.cpp), as far as a llama model meets it: no experts, no fused QKV, not
 * Falcon, not a 70B, no importance matrix. The file type gives a default; attn_v, attn_output
 * and ffn_down take more or fewer bits by file type and layer; the embedding tied to the
 * output takes the output's Q6_K; a --tensor-type override replaces all that; and a type
 * whose blocks do not divide the row falls back to a 32-element type. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "requantize.h"

/* llama.cpp's llama_ftype values, recorded as general.file_type */
enum {
        FILE_TYPE_Q5_0 = 8,
        FILE_TYPE_Q5_1 = 9,
        FILE_TYPE_Q2_K = 10,
        FILE_TYPE_Q3_K_M = 12,
        FILE_TYPE_Q4_K_M = 15,
        FILE_TYPE_Q5_K_M = 17,
        FILE_TYPE_Q6_K = 18,
};

const struct requantize_target requantize_targets[] = {
        { "Q5_0", "", "Q5_0", FILE_TYPE_Q5_0, TENSOR_Q5_0, false, TENSOR_F32 },
        { "Q5_1", "", "Q5_1", FILE_TYPE_Q5_1, TENSOR_Q5_1, false, TENSOR_F32 },
        { "Q4_K_M", "", "Q4_K_M", FILE_TYPE_Q4_K_M, TENSOR_Q4_K, false, TENSOR_F32 },
        { "Q5_K_M", "", "Q5_K_M", FILE_TYPE_Q5_K_M, TENSOR_Q5_K, false, TENSOR_F32 },
        { "Q6_K", "", "Q6_K", FILE_TYPE_Q6_K, TENSOR_Q6_K, false, TENSOR_F32 },
        { "Q3_K_M", "", "Q3_K_M", FILE_TYPE_Q3_K_M, TENSOR_Q3_K, false, TENSOR_F32 },
        { "Q2_K", "", "Q2_K", FILE_TYPE_Q2_K, TENSOR_Q2_K, false, TENSOR_F32 },
        /* ftype Q2_K gives this model's ffn_down Q3_K and its other matrices (576 columns)
         * Q4_0: only the override puts Q2_K weights into the file */
        { "Q2_K-FFN", "--tensor-type ffn_down=q2_k ", "Q2_K", FILE_TYPE_Q2_K, TENSOR_Q2_K, true, TENSOR_Q2_K },
        { NULL, NULL, NULL, 0, TENSOR_F32, false, TENSOR_F32 },
};

const struct requantize_target *requantize_target_named(const char *name) {
        for (const struct requantize_target *t = requantize_targets; t->name; t++)
                if (strcmp(t->name, name) == 0)
                        return t;
        return NULL;
}

static bool name_contains(struct gguf_string name, const char *part) {
        size_t n = strlen(part);
        for (uint64_t i = 0; i + n <= name.len; i++)
                if (memcmp(name.data + i, part, n) == 0)
                        return true;
        return false;
}

static bool name_ends_with(struct gguf_string name, const char *suffix) {
        size_t n = strlen(suffix);
        return name.len >= n && memcmp(name.data + name.len - n, suffix, n) == 0;
}

/* The architecture's key KEY (llama.KEY for a llama model). */
static int architecture_u32(const struct gguf_file *f, const char *key, uint32_t *value) {
        struct gguf_string arch;
        struct error err;
        char full[128];
        if (gguf_get_string(f, "general.architecture", &arch, &err) < 0 || arch.len > 64) {
                fprintf(stderr, "requantize: %s: no general.architecture\n", f->path);
                return -1;
        }
        snprintf(full, sizeof(full), "%.*s.%s", (int) arch.len, arch.data, key);
        if (gguf_get_u32(f, full, value, &err) < 0) {
                fprintf(stderr, "requantize: %s\n", err.message);
                return -1;
        }
        return 0;
}

int type_choice_init(struct type_choice *c, const struct requantize_target *target, const struct gguf_file *f) {
        uint32_t heads, kv_heads;
        *c = (struct type_choice) { .target = target, .tied_embeddings = true };
        if (architecture_u32(f, "block_count", &c->n_layer) != 0 || architecture_u32(f, "attention.head_count", &heads) != 0 ||
            architecture_u32(f, "attention.head_count_kv", &kv_heads) != 0)
                return -1;
        if (kv_heads == 0) {
                fprintf(stderr, "requantize: %s: no key-value heads\n", f->path);
                return -1;
        }
        c->n_gqa = heads / kv_heads;
        for (uint64_t i = 0; i < f->n_tensors; i++) {
                if (name_contains(f->tensors[i].name, "attn_v.weight"))
                        c->n_attention_v++;
                if (gguf_string_equals(f->tensors[i].name, "output.weight"))
                        c->tied_embeddings = false;
        }
        return 0;
}

/* llama.cpp's "use more bits" layers: the first and last eighth and every third between. */
static bool use_more_bits(uint32_t i_layer, uint32_t n_layer) {
        return i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2;
}

/* The mixture of the file type for one tensor, before the fallback. */
static enum tensor_type mixture_type(struct type_choice *c, const struct gguf_tensor *t) {
        uint32_t file_type = c->target->file_type;
        enum tensor_type type = c->target->default_type;
        bool output = gguf_string_equals(t->name, "output.weight");
        if (output || (c->tied_embeddings && gguf_string_equals(t->name, "token_embd.weight"))) {
                if (t->ne[0] % tensor_type_info(type)->block_size != 0)
                        return TENSOR_Q8_0;
                return type == TENSOR_Q8_0 ? type : TENSOR_Q6_K;
        }
        if (name_contains(t->name, "attn_v.weight")) {
                uint32_t i = c->i_attention_v++;
                if (file_type == FILE_TYPE_Q2_K)
                        return c->n_gqa >= 4 ? TENSOR_Q4_K : TENSOR_Q3_K;
                if (file_type == FILE_TYPE_Q3_K_M)
                        return i < 2 ? TENSOR_Q5_K : TENSOR_Q4_K;
                if ((file_type == FILE_TYPE_Q4_K_M || file_type == FILE_TYPE_Q5_K_M) && use_more_bits(i, c->n_attention_v))
                        return TENSOR_Q6_K;
                return type;
        }
        if (name_contains(t->name, "attn_output.weight")) {
                if (file_type == FILE_TYPE_Q2_K)
                        return TENSOR_Q3_K;
                if (file_type == FILE_TYPE_Q3_K_M)
                        return TENSOR_Q4_K;
                return type;
        }
        if (name_contains(t->name, "ffn_down")) {
                uint32_t i = c->i_ffn_down++;
                if (file_type == FILE_TYPE_Q2_K)
                        return TENSOR_Q3_K;
                if (file_type == FILE_TYPE_Q3_K_M)
                        return i < c->n_layer / 16 ? TENSOR_Q5_K : TENSOR_Q4_K;
                if ((file_type == FILE_TYPE_Q4_K_M || file_type == FILE_TYPE_Q5_K_M) && use_more_bits(i, c->n_layer))
                        return TENSOR_Q6_K;
                return type;
        }
        return type;
}

/* A K-quant whose 256-element super-blocks do not divide the row falls back to the
 * 32-element type of about its size; F16 when even that does not divide it. */
static enum tensor_type fallback_type(enum tensor_type type, uint64_t n_columns) {
        if (n_columns % tensor_type_info(type)->block_size == 0)
                return type;
        switch (type) {
        case TENSOR_Q2_K:
        case TENSOR_Q3_K: type = TENSOR_Q4_0; break;
        case TENSOR_Q4_K: type = TENSOR_Q5_0; break;
        case TENSOR_Q5_K: type = TENSOR_Q5_1; break;
        case TENSOR_Q6_K: type = TENSOR_Q8_0; break;
        default: break;
        }
        return n_columns % tensor_type_info(type)->block_size == 0 ? type : TENSOR_F16;
}

enum tensor_type type_choice_next(struct type_choice *c, const struct gguf_tensor *t) {
        /* Only matrices named *weight are quantized, and never the norms. */
        if (t->n_dims < 2 || !name_ends_with(t->name, "weight") || name_contains(t->name, "_norm.weight"))
                return t->type;
        enum tensor_type type;
        if (c->target->has_ffn_down_type && name_contains(t->name, "ffn_down"))
                type = c->target->ffn_down_type;
        else
                type = mixture_type(c, t);
        return fallback_type(type, t->ne[0]);
}
