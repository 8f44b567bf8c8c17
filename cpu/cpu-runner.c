/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-runner-internal.h"
#include "quantize.h"

static void *alloc_scratch(struct cpu_runner *r, size_t n, size_t size) {
        r->scratch_bytes += (uint64_t) n * size;
        return calloc(n ? n : 1, size);
}

static void *alloc_floats(struct cpu_runner *r, size_t n) {
        return alloc_scratch(r, n, sizeof(float));
}

static bool activations_alloc(struct cpu_runner *r, size_t tokens, struct activations *a) {
        a->xn = alloc_floats(r, tokens * r->max_dim);
        a->xq = alloc_scratch(r, tokens * (r->max_dim / QUANT_BLOCK), sizeof(struct block_q8_1));
        a->ds = alloc_floats(r, tokens * (r->max_dim / QUANT_BLOCK) * 2);
        a->corrections = alloc_scratch(r, tokens * (r->max_dim / QUANT_BLOCK), PACKED_CORRECTIONS * sizeof(int32_t));
        a->block_sums = alloc_scratch(r, tokens * (r->max_dim / QUANT_BLOCK), sizeof(int32_t));
        a->xk = r->k_quants ? alloc_scratch(r, tokens * (r->max_dim / QK_K), sizeof(struct block_q8_K)) : NULL;
        return a->xn && a->xq && a->ds && a->corrections && a->block_sums && (a->xk || !r->k_quants);
}

static void activations_free(struct activations *a) {
        free(a->xn);
        free(a->xq);
        free(a->ds);
        free(a->corrections);
        free(a->block_sums);
        free(a->xk);
}

/* Whether every matmul reads quantized activations (a tile or a K-quant product), so that
 * small batches can quantize them per thread; a float weight reads the shared floats. */
static bool all_weights_quantized(const struct cpu_runner *r) {
        for (size_t i = 0; i < n_matmul_weights(r->model); i++) {
                enum tensor_type type = matmul_weight(r->model, i)->type;
                if (!dot_tile_kernel_for(r->kernels, type) && !dot_k_kernel_for(r->kernels, type))
                        return false;
        }
        return true;
}

static bool any_k_quant_weight(const struct cpu_runner *r) {
        for (size_t i = 0; i < n_matmul_weights(r->model); i++)
                if (dot_k_kernel_for(r->kernels, matmul_weight(r->model, i)->type))
                        return true;
        return false;
}

int cpu_runner_new(const struct model *model, const struct cpu_runner_config *config, struct cpu_runner **ret,
                   struct error *err) {
        const struct model_hparams *hp = &model->hp;
        struct cpu_runner *r;
        int rc;

        if (config->max_batch_tokens == 0 || config->max_model_len == 0)
                return error_set(err, EINVAL, "max_batch_tokens and max_model_len must be positive");
        if (hp->n_embd % QUANT_BLOCK != 0 || hp->n_ff % QUANT_BLOCK != 0 || (hp->n_head * hp->head_dim) % QUANT_BLOCK != 0)
                return error_set(err, EOPNOTSUPP, "the CPU runner needs embedding, feed-forward and attention widths that are multiples of %d",
                                 QUANT_BLOCK);
        if (hp->head_dim > DOT_F16_MAX_DIM || hp->n_head % hp->n_head_kv != 0 || hp->n_head / hp->n_head_kv > DOT_GROUP_MAX)
                return error_set(err, EOPNOTSUPP,
                                 "the CPU runner handles heads of up to %d dimensions and up to %d query heads per key-value head",
                                 DOT_F16_MAX_DIM, DOT_GROUP_MAX);
        const struct dot_kernels *kernels;
        if ((rc = dot_kernels_select(&kernels, err)) < 0)
                return rc;
        const char *packed_env = getenv("ASYNCLLM_CPU_PACKED");
        bool tiles_only = packed_env && strcmp(packed_env, "0") == 0;
        if (packed_env && *packed_env && !tiles_only && strcmp(packed_env, "1") != 0)
                return error_set(err, EINVAL,
                                 "ASYNCLLM_CPU_PACKED=%s: say 1 (repacked weights, the default) or 0 (the file's rows), or unset it",
                                 packed_env);
        r = calloc(1, sizeof(*r));
        if (!r)
                return error_set(err, ENOMEM, "out of memory");
        r->model = model;
        r->config = *config;
        r->kernels = kernels;
        r->use_packed = !tiles_only;
        r->q_dim = hp->n_head * hp->head_dim;
        r->kv_dim = hp->n_head_kv * hp->head_dim;
        r->max_dim = model_max_width(hp);

        if ((rc = thread_pool_new(config->n_threads, &r->pool, err)) < 0 ||
            (rc = kv_pool_new(hp->n_layer, config->n_kv_blocks, config->block_size, r->kv_dim, &r->kv, err)) < 0 ||
            (r->use_packed && (rc = packed_model_build(r->model, r->kernels, &r->packed, err)) < 0)) {
                cpu_runner_free(r);
                return rc;
        }

        r->slice_tokens = config->max_slice_tokens ? config->max_slice_tokens : CPU_RUNNER_SLICE_TOKENS;
        if (r->slice_tokens > config->max_batch_tokens)
                r->slice_tokens = config->max_batch_tokens;
        size_t T = r->slice_tokens;
        /* per query head of a tile: scores (padded to 16); then the tile's queries or a
         * dequantized row; then per query head of a tile 64 lanes of a head */
        uint32_t group = hp->n_head / hp->n_head_kv;
        r->attn_tile_tokens = DOT_GROUP_MAX / group < ATTN_TILE_TOKENS ? DOT_GROUP_MAX / group : ATTN_TILE_TOKENS;
        size_t attn_rows = (size_t) group * r->attn_tile_tokens, queries = attn_rows * hp->head_dim;
        r->attn_scores_floats = attn_rows * ((size_t) config->max_model_len + 16);
        r->attn_queries_floats = queries > r->max_dim ? queries : r->max_dim;
        r->thread_scratch_stride = r->attn_scores_floats + r->attn_queries_floats + attn_rows * 64 * hp->head_dim;
        r->attn_done_until = calloc((size_t) config->n_threads * hp->n_head_kv, sizeof(*r->attn_done_until));
        r->slice_outputs = alloc_scratch(r, T, sizeof(*r->slice_outputs));
        r->slice_hidden = alloc_scratch(r, T, sizeof(*r->slice_hidden));
        r->x = alloc_floats(r, T * hp->n_embd);
        r->k_quants = any_k_quant_weight(r);
        bool ok = activations_alloc(r, T, &r->shared);
        if (r->k_quants && !(r->k_orders = alloc_scratch(r, K_ORDER_KINDS * T, sizeof(bool))))
                ok = false;
        if (ok && all_weights_quantized(r)) {
                r->own = calloc(config->n_threads, sizeof(*r->own));
                for (unsigned i = 0; r->own && i < config->n_threads; i++)
                        ok = ok && activations_alloc(r, SMALL_BATCH, &r->own[i]);
                ok = ok && r->own;
        }
        r->q = alloc_floats(r, T * r->q_dim);
        r->k = alloc_floats(r, T * r->kv_dim);
        r->v = alloc_floats(r, T * r->kv_dim);
        r->gate = alloc_floats(r, T * hp->n_ff);
        r->up = alloc_floats(r, T * hp->n_ff);
        if (model->post_norms && !(r->branch = alloc_floats(r, T * hp->n_embd)))
                ok = false;
        r->n_rope_tables = hp->sliding_window ? 2 : 1;
        r->rope_cos = alloc_floats(r, r->n_rope_tables * T * (hp->rope_dim / 2));
        r->rope_sin = alloc_floats(r, r->n_rope_tables * T * (hp->rope_dim / 2));
        r->window_align = 64;
        while (r->window_align % config->block_size != 0)
                r->window_align += 64;
        r->thread_scratch = alloc_floats(r, config->n_threads * r->thread_scratch_stride);
        r->attn_split_positions = config->attn_split_positions ? config->attn_split_positions
                                                               : CPU_RUNNER_ATTN_SPLIT_POSITIONS;
        r->attn_split_stride = (size_t) group * ((size_t) config->max_model_len + 16 + (1 + 64) * hp->head_dim);
        if (config->n_threads > 1 && !(r->attn_split = alloc_floats(r, (size_t) SMALL_BATCH * hp->n_head_kv *
                                                                               r->attn_split_stride)))
                ok = false;
        r->shares = aligned_alloc(_Alignof(struct matmul_share),
                                  n_matmul_weights(r->model) * config->n_threads * sizeof(struct matmul_share));
        if (!ok || !r->slice_outputs || !r->slice_hidden || !r->x || !r->q || !r->k || !r->v || !r->gate || !r->up || !r->rope_cos ||
            !r->rope_sin || !r->thread_scratch || !r->shares || !r->attn_done_until) {
                cpu_runner_free(r);
                return error_set(err, ENOMEM, "cannot allocate scratch for slices of %zu tokens", T);
        }
        *ret = r;
        return 0;
}

void cpu_runner_free(struct cpu_runner *r) {
        if (!r)
                return;
        thread_pool_free(r->pool);
        kv_pool_free(r->kv);
        packed_model_free(&r->packed);
        free(r->slice_outputs);
        free(r->slice_hidden);
        free(r->k_orders);
        free(r->x);
        activations_free(&r->shared);
        for (unsigned i = 0; r->own && i < r->config.n_threads; i++)
                activations_free(&r->own[i]);
        free(r->own);
        free(r->q);
        free(r->k);
        free(r->v);
        free(r->gate);
        free(r->up);
        free(r->branch);
        free(r->rope_cos);
        free(r->rope_sin);
        free(r->thread_scratch);
        free(r->attn_split);
        free(r->shares);
        free(r->attn_done_until);
        free(r);
}

const struct model *cpu_runner_model(const struct cpu_runner *r) {
        return r->model;
}

const char *cpu_runner_kernels(const struct cpu_runner *r) {
        return r->kernels->name;
}

bool cpu_runner_weights_cached(const struct cpu_runner *r) {
        return r->packed.arena && r->packed.keep_cached;
}
