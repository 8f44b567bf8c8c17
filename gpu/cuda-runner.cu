/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

extern "C" {
#include "backend.h"
#include "batch.h"
#include "error.h"
#include "model.h"
#include "rope-angles.h"
}
#include "cuda-kernels.h"
#include "cuda-runner.h"
#include "cuda-vmm.h"
#include "cuda-weights.h"
#include "tp-comm.h"

/* The KV pool leaves this much of the device free for the runtime's own needs (module
 * loading, the launch queue). */
#define DEVICE_HEADROOM ((uint64_t) 256 << 20)
#define LOGITS_ROWS_MIN 64
/* Decode steps up to this many sequences replay graphs: sizes 1, 2, 4, 8, then multiples of
 * 16 (vLLM's ladder of padded batch sizes), each captured the first time it is needed. */
#define GRAPH_MAX_BATCH 512
#define GRAPH_SLOTS (3 + GRAPH_MAX_BATCH / 16 + 1)

struct layer_weights {
        const float *attn_norm, *ffn_norm;
        struct gpu_weight wq, wk, wv, wo, gate, up, down;
};

struct cuda_runner {
        const struct model *model;
        struct cuda_runner_config config;
        const struct tp_shard *shard; /* &config.shard */
        char device_name[320];
        cudaStream_t stream;
        unsigned released; /* enum backend_memory bits */

        /* Weights: one device arena, laid out by place_weights(), whose address survives sleep
         * where the driver has the virtual-memory API. */
        struct vmm_region weights;
        size_t arena_bytes;
        struct layer_weights *layers;
        struct gpu_weight embd, output;
        const float *output_norm;

        /* KV pool: (n_layer, n_blocks + 1, n_head_kv, block_size, head_dim) f16, keys and values;
         * the last block, which the engine never sees, takes what the padding tokens of a
         * graph's step write */
        struct vmm_region kv;
        uint16_t *k_pool, *v_pool; /* in kv */
        size_t kv_pool_bytes; /* of each */
        uint32_t n_blocks;

        /* Decode graphs by ladder slot (graph_slot()); NULL until captured, and again after
         * anything they captured moved (the logits rows grew, memory was released). */
        cudaGraphExec_t graphs[GRAPH_SLOTS];
        uint32_t graph_max_batch;
        uint64_t graphs_captured;

        /* The step's buffers, for max_batch_tokens tokens; q, k, v, gate and up hold this
         * rank's rows (all of them alone). */
        uint32_t q_local, kv_local, max_dim, max_blocks_per_seq;
        float *x, *q, *k, *v, *gate, *up;
        /* A rank of a group: what it sends to an all-gather and what comes back, (tokens,
         * send_chunk) and (size, tokens, send_chunk); the logits' own pair grows with the
         * logits rows. */
        uint32_t send_chunk;
        float *send, *gathered, *logits_send, *logits_gathered;
        struct gpu_activations act;
        int32_t *inputs_host, *inputs_device; /* tokens, positions, seq ids, outputs, block tables */
        size_t inputs_capacity;               /* int32s */
        float *logits_host, *logits_device;
        uint32_t logits_rows;
        uint64_t scratch_bytes;

        /* RoPE's cosines and sines, (max_model_len, rope_dim / 2) each, made on the host as
         * the CPU makes them (its angles, the C library's cosf and sinf), so that both
         * backends turn the pairs by the same bits */
        float *rope_cos, *rope_sin;
        float attention_scale;
};

static int cuda_error(struct error *err, cudaError_t e, const char *what) {
        return error_set(err, EIO, "CUDA error in %s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

#define CUDA_TRY(call)                                                    \
        do {                                                              \
                cudaError_t cuda_try_ = (call);                           \
                if (cuda_try_ != cudaSuccess)                             \
                        return cuda_error(err, cuda_try_, #call);         \
        } while (0)

static size_t place_floats(const float *v, uint32_t n, const float **ret, uint8_t *base, uint8_t *image, size_t at) {
        *ret = (const float *) (base + at);
        if (image)
                memcpy(image + at, v, (size_t) n * sizeof(float));
        return cuda_arena_align(at + (size_t) n * sizeof(float));
}

/* Lays the weights out from base (pointers only, with image NULL; the bytes too into image
 * otherwise) and returns the arena's size. */
static size_t place_weights(struct cuda_runner *r, uint8_t *base, uint8_t *image) {
        const struct model *m = r->model;
        const struct tp_shard *s = r->shard;
        size_t at = 0;
        /* the embeddings whole on every rank (any token's row); the logits' rows split */
        at = cuda_place_weight(&m->token_embd, 0, m->hp.n_vocab, &r->embd, base, image, at);
        if (m->output.data == m->token_embd.data)
                r->output = cuda_weight_rows(&r->embd, s->vocab.first, s->vocab.count);
        else
                at = cuda_place_weight(&m->output, s->vocab.first, s->vocab.count, &r->output, base, image, at);
        r->output.single_accumulator = weight_single_accumulator(&m->output, true);
        at = place_floats(m->output_norm, m->hp.n_embd, &r->output_norm, base, image, at);
        for (uint32_t i = 0; i < m->hp.n_layer; i++) {
                const struct model_layer *l = &m->layers[i];
                struct layer_weights *g = &r->layers[i];
                at = place_floats(l->attn_norm, m->hp.n_embd, &g->attn_norm, base, image, at);
                at = place_floats(l->ffn_norm, m->hp.n_embd, &g->ffn_norm, base, image, at);
                at = cuda_place_weight(&l->wq, s->q.first, s->q.count, &g->wq, base, image, at);
                at = cuda_place_weight(&l->wk, s->kv.first, s->kv.count, &g->wk, base, image, at);
                at = cuda_place_weight(&l->wv, s->kv.first, s->kv.count, &g->wv, base, image, at);
                at = cuda_place_weight(&l->wo, s->embd.first, s->embd.count, &g->wo, base, image, at);
                at = cuda_place_weight(&l->w_gate, s->ff.first, s->ff.count, &g->gate, base, image, at);
                at = cuda_place_weight(&l->w_up, s->ff.first, s->ff.count, &g->up, base, image, at);
                at = cuda_place_weight(&l->w_down, s->embd.first, s->embd.count, &g->down, base, image, at);
        }
        return at;
}

/* The weights into their region, mapped (again) first; with a stable region every pointer
 * comes out as before. */
static int upload_weights(struct cuda_runner *r, struct error *err) {
        size_t bytes = place_weights(r, NULL, NULL);
        int rc = r->weights.base ? vmm_region_map(&r->weights, err) : vmm_region_new(&r->weights, r->config.device, bytes, err);
        if (rc < 0)
                return error_prefix(err, rc, "the weights (%zu MiB): ", bytes >> 20);
        uint8_t *image = (uint8_t *) malloc(bytes);
        if (!image)
                return error_set(err, ENOMEM, "cannot stage %zu MiB of weights for the GPU", bytes >> 20);
        place_weights(r, (uint8_t *) r->weights.base, image);
        cudaError_t e = cudaMemcpy(r->weights.base, image, bytes, cudaMemcpyHostToDevice);
        free(image);
        if (e != cudaSuccess)
                return cuda_error(err, e, "cudaMemcpy of the weights");
        r->arena_bytes = bytes;
        return 0;
}

/* Whether the kernels read w's type; err says which type when not. */
static bool kernel_for(const struct weight *w, struct error *err) {
        if (gpu_weight_kind_of(w->type) != GPU_WEIGHT_UNSUPPORTED)
                return true;
        const struct tensor_type_info *info = tensor_type_info(w->type);
        error_set(err, EOPNOTSUPP, "the CUDA backend has no kernel for tensor type %s", info ? info->name : "?");
        return false;
}

static int check_model(const struct model *m, struct error *err) {
        const struct model_hparams *hp = &m->hp;
        /* the kernels implement the llama layout only: none of the variations model.h names */
        if (strcmp(m->architecture, "llama") != 0)
                return error_set(err, EOPNOTSUPP,
                                 "the CUDA backend implements the llama architecture only, not '%s'; run it with --device cpu",
                                 m->architecture);
        if (hp->attn_temp_scale != 0.0f)
                return error_set(err, EOPNOTSUPP, "the CUDA backend does not implement the attention temperature (%s.attention.temperature_scale); run it with --device cpu",
                                 m->architecture);
        if (!kernel_for(&m->token_embd, err) || !kernel_for(&m->output, err))
                return -EOPNOTSUPP;
        for (uint32_t i = 0; i < hp->n_layer; i++) {
                const struct model_layer *l = &m->layers[i];
                const struct weight *w[] = { &l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down };
                for (size_t j = 0; j < sizeof(w) / sizeof(w[0]); j++)
                        if (!kernel_for(w[j], err))
                                return error_prefix(err, -EOPNOTSUPP, "layer %u: ", i);
                if (l->bq)
                        return error_set(err, EOPNOTSUPP, "the CUDA backend does not implement query, key and value biases (layer %u has them); run it with --device cpu",
                                         i);
        }
        uint32_t hd = hp->head_dim;
        if (hd != 8 && hd != 16 && hd != 32 && hd != 64 && hd != 128 && hd != 256)
                return error_set(err, EOPNOTSUPP, "the CUDA backend's attention takes head sizes 8, 16, 32, 64, 128 and 256, not %u",
                                 hd);
        if (hp->n_embd % GPU_QBLOCK || hp->n_ff % GPU_QBLOCK || (hp->n_head * hp->head_dim) % GPU_QBLOCK)
                return error_set(err, EOPNOTSUPP, "the CUDA backend needs widths that are multiples of %d", GPU_QBLOCK);
        return 0;
}

static void drop_graphs(struct cuda_runner *r) {
        for (uint32_t i = 0; i < GRAPH_SLOTS; i++)
                if (r->graphs[i]) {
                        cudaGraphExecDestroy(r->graphs[i]);
                        r->graphs[i] = NULL;
                }
}

/* A rank of a group's logits: its rows of the vocabulary, sent, and every rank's, gathered. */
static size_t logits_gather_floats(const struct cuda_runner *r, uint32_t rows) {
        return r->shard->size > 1 ? (size_t) rows * r->shard->vocab.chunk : 0;
}

static int alloc_logits(struct cuda_runner *r, uint32_t rows, struct error *err) {
        drop_graphs(r);
        size_t bytes = (size_t) rows * r->model->hp.n_vocab * sizeof(float);
        size_t send = logits_gather_floats(r, rows) * sizeof(float);
        void *old[] = { r->logits_device, r->logits_send, r->logits_gathered };
        for (size_t i = 0; i < sizeof(old) / sizeof(old[0]); i++)
                if (old[i])
                        cudaFree(old[i]);
        if (r->logits_host)
                cudaFreeHost(r->logits_host);
        r->scratch_bytes -= 2 * (uint64_t) r->logits_rows * r->model->hp.n_vocab * sizeof(float) +
                            (1 + r->shard->size) * logits_gather_floats(r, r->logits_rows) * sizeof(float);
        r->logits_device = r->logits_send = r->logits_gathered = NULL;
        r->logits_host = NULL;
        r->logits_rows = 0;
        CUDA_TRY(cudaMalloc((void **) &r->logits_device, bytes));
        CUDA_TRY(cudaHostAlloc((void **) &r->logits_host, bytes, cudaHostAllocDefault));
        if (send) {
                CUDA_TRY(cudaMalloc((void **) &r->logits_send, send));
                CUDA_TRY(cudaMalloc((void **) &r->logits_gathered, r->shard->size * send));
        }
        r->logits_rows = rows;
        r->scratch_bytes += 2 * (uint64_t) bytes + (1 + r->shard->size) * (uint64_t) send;
        return 0;
}

static int alloc_scratch(struct cuda_runner *r, struct error *err) {
        const struct model_hparams *hp = &r->model->hp;
        size_t T = r->config.max_batch_tokens, size = r->shard->size, send = size > 1 ? T * r->send_chunk : 0;
        struct { void **p; size_t bytes; } bufs[] = {
                { (void **) &r->x, T * hp->n_embd * sizeof(float) },
                { (void **) &r->q, T * r->q_local * sizeof(float) },
                { (void **) &r->k, T * r->kv_local * sizeof(float) },
                { (void **) &r->v, T * r->kv_local * sizeof(float) },
                { (void **) &r->gate, T * r->shard->ff.chunk * sizeof(float) },
                { (void **) &r->up, T * r->shard->ff.chunk * sizeof(float) },
                { (void **) &r->send, send * sizeof(float) },
                { (void **) &r->gathered, size * send * sizeof(float) },
                { (void **) &r->act.x, T * r->max_dim * sizeof(float) },
                { (void **) &r->act.q, gpu_activation_quant_bytes(r->max_dim, T) },
                { (void **) &r->act.ds, gpu_activation_scale_floats(r->max_dim, T) * sizeof(float) },
                { (void **) &r->inputs_device, r->inputs_capacity * sizeof(int32_t) },
        };
        for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
                if (!bufs[i].bytes)
                        continue;
                CUDA_TRY(cudaMalloc(bufs[i].p, bufs[i].bytes));
                r->scratch_bytes += bufs[i].bytes;
        }
        CUDA_TRY(cudaHostAlloc((void **) &r->inputs_host, r->inputs_capacity * sizeof(int32_t), cudaHostAllocDefault));
        r->scratch_bytes += r->inputs_capacity * sizeof(int32_t);
        return alloc_logits(r, LOGITS_ROWS_MIN, err);
}

static int upload_rope_tables(struct cuda_runner *r, struct error *err) {
        const struct model_hparams *hp = &r->model->hp;
        uint32_t half = hp->rope_dim / 2;
        size_t n = (size_t) r->config.max_model_len * half;
        float *table = (float *) malloc(2 * n * sizeof(float));
        if (!table)
                return error_set(err, ENOMEM, "out of memory for the RoPE tables");
        /* the CPU's angles (rope-angles.h), bit for bit */
        struct rope_angles angles;
        rope_angles_init(&angles, r->model, false, r->config.max_model_len);
        for (uint32_t p = 0; p < r->config.max_model_len; p++)
                rope_angles_row(&angles, (float) p, table + (size_t) p * half, table + n + (size_t) p * half);
        cudaError_t e = cudaMalloc((void **) &r->rope_cos, 2 * n * sizeof(float));
        if (e == cudaSuccess) {
                r->rope_sin = r->rope_cos + n;
                r->scratch_bytes += 2 * n * sizeof(float);
                e = cudaMemcpy(r->rope_cos, table, 2 * n * sizeof(float), cudaMemcpyHostToDevice);
        }
        free(table);
        return e == cudaSuccess ? 0 : cuda_error(err, e, "the RoPE tables");
}

/* The KV pool mapped (again) and zeroed: keys, then values, in one region. */
static int alloc_kv_pool(struct cuda_runner *r, struct error *err) {
        size_t elems = (size_t) r->model->hp.n_layer * (r->n_blocks + 1) * r->config.block_size * r->kv_local;
        r->kv_pool_bytes = elems * sizeof(uint16_t);
        int rc = r->kv.base ? vmm_region_map(&r->kv, err) : vmm_region_new(&r->kv, r->config.device, 2 * r->kv_pool_bytes, err);
        if (rc < 0)
                return error_prefix(err, rc, "the KV cache (%zu MiB): ", (2 * r->kv_pool_bytes) >> 20);
        r->k_pool = (uint16_t *) r->kv.base;
        r->v_pool = r->k_pool + elems;
        CUDA_TRY(cudaMemset(r->kv.base, 0, 2 * r->kv_pool_bytes));
        return 0;
}

/* As many blocks as the memory gpu_memory_utilization leaves once everything else is
 * allocated; at least one sequence of max_model_len must fit. */
static int size_kv_pool(struct cuda_runner *r, struct error *err) {
        uint64_t block_bytes = cuda_runner_block_bytes(r);
        uint32_t per_seq = r->max_blocks_per_seq;
        if (r->config.n_kv_blocks) {
                r->n_blocks = r->config.n_kv_blocks;
                return 0;
        }
        size_t free_bytes, total_bytes;
        CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
        double budget = r->config.gpu_memory_utilization * (double) total_bytes - (double) (total_bytes - free_bytes);
        if (budget > (double) free_bytes - (double) DEVICE_HEADROOM)
                budget = (double) free_bytes - (double) DEVICE_HEADROOM;
        uint64_t blocks = budget > 0 ? (uint64_t) (budget / (double) block_bytes) : 0;
        if (blocks > INT32_MAX - 1)
                blocks = INT32_MAX - 1;
        if (blocks > 0)
                blocks--; /* the padding tokens' block */
        if (blocks < per_seq)
                return error_set(err, ENOMEM,
                                 "--gpu-memory-utilization %.2f leaves %.0f MiB of the GPU's %zu MiB (%zu MiB in use) for the KV cache, under the %" PRIu64
                                 " MiB one sequence of --max-model-len %u needs; raise --gpu-memory-utilization or lower --max-model-len",
                                 r->config.gpu_memory_utilization, budget > 0 ? budget / 1048576.0 : 0.0, total_bytes >> 20,
                                 (total_bytes - free_bytes) >> 20, (per_seq * block_bytes) >> 20, r->config.max_model_len);
        r->n_blocks = (uint32_t) blocks;
        return 0;
}

extern "C" int cuda_runner_new(const struct model *model, const struct cuda_runner_config *config,
                               struct cuda_runner **ret, struct error *err) {
        *ret = NULL;
        int rc = check_model(model, err);
        if (rc < 0)
                return rc;
        if (config->max_batch_tokens == 0 || config->block_size == 0 || config->max_model_len == 0)
                return error_set(err, EINVAL, "the CUDA runner needs a step size, a block size and a max_model_len");
        CUDA_TRY(cudaSetDevice(config->device));
        struct cudaDeviceProp prop;
        CUDA_TRY(cudaGetDeviceProperties(&prop, config->device));

        struct cuda_runner *r = (struct cuda_runner *) calloc(1, sizeof(*r));
        if (!r)
                return error_set(err, ENOMEM, "out of memory");
        const struct model_hparams *hp = &model->hp;
        r->model = model;
        r->config = *config;
        r->shard = &r->config.shard;
        if (r->shard->size <= 1 && (rc = tp_shard_plan(hp, 1, 0, &r->config.shard, err)) < 0) {
                free(r);
                return rc;
        }
        if (r->shard->size > 1 && !config->comm) {
                free(r);
                return error_set(err, EINVAL, "a rank of a tensor-parallel group needs the group's communicator");
        }
        snprintf(r->device_name, sizeof(r->device_name), "%s (sm_%d%d)", prop.name, prop.major, prop.minor);
        r->q_local = r->shard->q.count;
        r->kv_local = r->shard->kv.count;
        r->send_chunk = r->shard->q.chunk;
        if (r->shard->embd.chunk > r->send_chunk)
                r->send_chunk = r->shard->embd.chunk;
        if (r->shard->ff.chunk > r->send_chunk)
                r->send_chunk = r->shard->ff.chunk;
        r->max_dim = model_max_width(hp);
        r->max_blocks_per_seq = (config->max_model_len + config->block_size - 1) / config->block_size;
        r->graph_max_batch = config->enforce_eager || r->shard->size > 1 ? 0
                           : config->max_batch_tokens < GRAPH_MAX_BATCH ? config->max_batch_tokens : GRAPH_MAX_BATCH;
        r->inputs_capacity = 5 * (size_t) config->max_batch_tokens + (size_t) config->max_batch_tokens * r->max_blocks_per_seq;
        r->attention_scale = 1.0f / sqrtf((float) hp->head_dim);
        r->layers = (struct layer_weights *) calloc(hp->n_layer, sizeof(*r->layers));
        if (!r->layers) {
                free(r);
                return error_set(err, ENOMEM, "out of memory");
        }
        cudaError_t e = cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking);
        if (e != cudaSuccess) {
                free(r->layers);
                free(r);
                return cuda_error(err, e, "cudaStreamCreate");
        }
        if ((rc = upload_weights(r, err)) < 0 || (rc = alloc_scratch(r, err)) < 0 || (rc = upload_rope_tables(r, err)) < 0 ||
            (rc = size_kv_pool(r, err)) < 0 ||
            (rc = alloc_kv_pool(r, err)) < 0) {
                cuda_runner_free(r);
                return rc;
        }
        *ret = r;
        return 0;
}

extern "C" void cuda_runner_free(struct cuda_runner *r) {
        if (!r)
                return;
        cudaSetDevice(r->config.device);
        if (r->stream)
                cudaStreamSynchronize(r->stream);
        drop_graphs(r);
        vmm_region_free(&r->weights);
        vmm_region_free(&r->kv);
        void *device[] = { r->x, r->q, r->k, r->v, r->gate, r->up, r->send, r->gathered, r->logits_send, r->logits_gathered,
                           r->act.x, r->act.q, r->act.ds, r->inputs_device, r->logits_device, r->rope_cos };
        for (size_t i = 0; i < sizeof(device) / sizeof(device[0]); i++)
                if (device[i])
                        cudaFree(device[i]);
        if (r->inputs_host)
                cudaFreeHost(r->inputs_host);
        if (r->logits_host)
                cudaFreeHost(r->logits_host);
        if (r->stream)
                cudaStreamDestroy(r->stream);
        free(r->layers);
        free(r);
}

/* Copies the step's indices to the device in one transfer and describes them in *step. */
static int stage_inputs(struct cuda_runner *r, const struct batch *b, struct gpu_step *step, const int32_t **outputs,
                        struct error *err) {
        uint32_t T = b->n_tokens, max_blocks = 1;
        for (uint32_t s = 0; s < b->n_seqs; s++)
                if (b->seqs[s].n_blocks > max_blocks)
                        max_blocks = b->seqs[s].n_blocks;
        if (max_blocks > r->max_blocks_per_seq)
                max_blocks = r->max_blocks_per_seq;
        size_t n = 4 * (size_t) T + (size_t) b->n_seqs * (max_blocks + 1);
        if (n > r->inputs_capacity)
                return error_set(err, EINVAL, "a step of %u tokens in %u sequences is more than the CUDA runner holds",
                                 T, b->n_seqs);
        int32_t *h = r->inputs_host;
        memcpy(h, b->tokens, T * sizeof(int32_t));
        memcpy(h + T, b->positions, T * sizeof(int32_t));
        memcpy(h + 2 * T, b->seq_ids, T * sizeof(int32_t));
        memcpy(h + 3 * T, b->output_tokens, b->n_outputs * sizeof(int32_t));
        int32_t *tables = h + 4 * T;
        for (uint32_t s = 0; s < b->n_seqs; s++) {
                uint32_t have = b->seqs[s].n_blocks < max_blocks ? b->seqs[s].n_blocks : max_blocks;
                memcpy(tables + (size_t) s * max_blocks, b->seqs[s].block_table, have * sizeof(int32_t));
                for (uint32_t j = have; j < max_blocks; j++)
                        tables[(size_t) s * max_blocks + j] = 0;
        }
        int32_t *n_prompt = tables + (size_t) b->n_seqs * max_blocks;
        for (uint32_t s = 0; s < b->n_seqs; s++)
                n_prompt[s] = (int32_t) b->seqs[s].n_prompt;
        CUDA_TRY(cudaMemcpyAsync(r->inputs_device, h, n * sizeof(int32_t), cudaMemcpyHostToDevice, r->stream));
        const int32_t *d = r->inputs_device;
        *step = (struct gpu_step) { T, d, d + T, d + 2 * T, d + 4 * T, max_blocks, d + 4 * T + (size_t) b->n_seqs * max_blocks };
        *outputs = d + 3 * T;
        return 0;
}

static struct gpu_kv_layer kv_layer(const struct cuda_runner *r, uint32_t layer) {
        size_t per_layer = (size_t) (r->n_blocks + 1) * r->config.block_size * r->kv_local;
        return (struct gpu_kv_layer) { r->k_pool + layer * per_layer, r->v_pool + layer * per_layer, r->config.block_size,
                                       r->shard->n_head_kv, r->model->hp.head_dim };
}

#define LAUNCH(call)                                                  \
        do {                                                          \
                cudaError_t launch_ = (call);                         \
                if (launch_ != cudaSuccess)                           \
                        return cuda_error(err, launch_, #call);       \
        } while (0)

/* A rank's rows of n tokens (send, (n, chunk)) all-gathered and put in order into out, (n,
 * rows); added to out with accumulate. */
static int gather_rows(struct cuda_runner *r, const float *send, float *gathered, uint32_t n, uint32_t chunk,
                       uint32_t rows, float *out, bool accumulate, struct error *err) {
        int rc = tp_comm_all_gather(r->config.comm, r->shard->rank, send, gathered, (size_t) n * chunk, r->stream, err);
        if (rc < 0)
                return rc;
        LAUNCH(gpu_gather_rows(r->stream, gathered, n, chunk, rows, out, accumulate));
        return 0;
}

/* A layer's queries, keys and values for this runner's heads, RoPE turned and the keys and
 * values stored. */
static int run_qkv(struct cuda_runner *r, const struct layer_weights *l, const struct gpu_kv_layer *kv,
                   const struct gpu_step *st, struct error *err) {
        const struct model_hparams *hp = &r->model->hp;
        uint32_t T = st->n_tokens;
        struct gpu_activations *a = &r->act;
        a->width = hp->n_embd;
        LAUNCH(gpu_rms_norm_quantize(r->stream, r->x, NULL, T, l->attn_norm, hp->rms_eps, a));
        LAUNCH(gpu_matmul(r->stream, &l->wq, a, T, r->q, r->q_local, false));
        LAUNCH(gpu_matmul(r->stream, &l->wk, a, T, r->k, r->kv_local, false));
        LAUNCH(gpu_matmul(r->stream, &l->wv, a, T, r->v, r->kv_local, false));
        LAUNCH(gpu_rope_store_kv(r->stream, st, r->q, r->k, r->v, r->shard->n_head, hp->rope_dim, r->rope_cos, r->rope_sin,
                                 kv));
        return 0;
}

/* A layer alone on its device. */
static int run_layer_whole(struct cuda_runner *r, const struct layer_weights *l, const struct gpu_kv_layer *kv,
                           const struct gpu_step *st, struct error *err) {
        const struct model_hparams *hp = &r->model->hp;
        uint32_t T = st->n_tokens;
        struct gpu_activations *a = &r->act;
        int rc = run_qkv(r, l, kv, st, err);
        if (rc < 0)
                return rc;
        a->width = r->q_local;
        LAUNCH(gpu_attention(r->stream, st, r->q, hp->n_head, r->attention_scale, kv, a->x));
        LAUNCH(gpu_quantize(r->stream, T, a));
        LAUNCH(gpu_matmul(r->stream, &l->wo, a, T, r->x, hp->n_embd, true));
        a->width = hp->n_embd;
        LAUNCH(gpu_rms_norm_quantize(r->stream, r->x, NULL, T, l->ffn_norm, hp->rms_eps, a));
        LAUNCH(gpu_matmul(r->stream, &l->gate, a, T, r->gate, hp->n_ff, false));
        LAUNCH(gpu_matmul(r->stream, &l->up, a, T, r->up, hp->n_ff, false));
        a->width = hp->n_ff;
        LAUNCH(gpu_swiglu_quantize(r->stream, T, r->gate, r->up, a));
        LAUNCH(gpu_matmul(r->stream, &l->down, a, T, r->x, hp->n_embd, true));
        return 0;
}

/* A layer on one rank of a group (model/tensor-parallel.h): its heads and its rows of every
 * product, the whole inputs of the output and down projections and the hidden state
 * all-gathered; every rank ends with the same hidden state. */
static int run_layer_rank(struct cuda_runner *r, const struct layer_weights *l, const struct gpu_kv_layer *kv,
                          const struct gpu_step *st, struct error *err) {
        const struct model_hparams *hp = &r->model->hp;
        const struct tp_shard *s = r->shard;
        uint32_t T = st->n_tokens;
        struct gpu_activations *a = &r->act;
        int rc = run_qkv(r, l, kv, st, err);
        if (rc < 0)
                return rc;
        LAUNCH(gpu_attention(r->stream, st, r->q, s->n_head, r->attention_scale, kv, r->send));
        if ((rc = gather_rows(r, r->send, r->gathered, T, s->q.chunk, hp->n_head * hp->head_dim, a->x, false, err)) < 0)
                return rc;
        a->width = hp->n_head * hp->head_dim;
        LAUNCH(gpu_quantize(r->stream, T, a));
        LAUNCH(gpu_matmul(r->stream, &l->wo, a, T, r->send, s->embd.chunk, false));
        if ((rc = gather_rows(r, r->send, r->gathered, T, s->embd.chunk, hp->n_embd, r->x, true, err)) < 0)
                return rc;
        a->width = hp->n_embd;
        LAUNCH(gpu_rms_norm_quantize(r->stream, r->x, NULL, T, l->ffn_norm, hp->rms_eps, a));
        LAUNCH(gpu_matmul(r->stream, &l->gate, a, T, r->gate, s->ff.chunk, false));
        LAUNCH(gpu_matmul(r->stream, &l->up, a, T, r->up, s->ff.chunk, false));
        LAUNCH(gpu_swiglu(r->stream, T, s->ff.chunk, r->gate, r->up, r->send));
        if ((rc = gather_rows(r, r->send, r->gathered, T, s->ff.chunk, hp->n_ff, a->x, false, err)) < 0)
                return rc;
        a->width = hp->n_ff;
        LAUNCH(gpu_quantize(r->stream, T, a));
        LAUNCH(gpu_matmul(r->stream, &l->down, a, T, r->send, s->embd.chunk, false));
        return gather_rows(r, r->send, r->gathered, T, s->embd.chunk, hp->n_embd, r->x, true, err);
}

static int run_layers(struct cuda_runner *r, const struct gpu_step *st, struct error *err) {
        LAUNCH(gpu_embed(r->stream, &r->embd, st, r->x));
        for (uint32_t i = 0; i < r->model->hp.n_layer; i++) {
                struct gpu_kv_layer kv = kv_layer(r, i);
                int rc = r->shard->size > 1 ? run_layer_rank(r, &r->layers[i], &kv, st, err)
                                            : run_layer_whole(r, &r->layers[i], &kv, st, err);
                if (rc < 0)
                        return rc;
        }
        return 0;
}

/* The normed final rows of the output tokens and their logits (a rank of a group: its rows
 * of the vocabulary, all-gathered). */
static int run_logits(struct cuda_runner *r, const int32_t *outputs, uint32_t n_outputs, struct error *err) {
        const struct model_hparams *hp = &r->model->hp;
        struct gpu_activations *a = &r->act;
        a->width = hp->n_embd;
        LAUNCH(gpu_rms_norm_quantize(r->stream, r->x, outputs, n_outputs, r->output_norm, hp->rms_eps, a));
        if (r->shard->size == 1) {
                LAUNCH(gpu_matmul(r->stream, &r->output, a, n_outputs, r->logits_device, hp->n_vocab, false));
                return 0;
        }
        uint32_t chunk = r->shard->vocab.chunk;
        LAUNCH(gpu_matmul(r->stream, &r->output, a, n_outputs, r->logits_send, chunk, false));
        return gather_rows(r, r->logits_send, r->logits_gathered, n_outputs, chunk, hp->n_vocab, r->logits_device, false,
                           err);
}

/* A decode step: one token for each sequence, in the sequences' order, each asking for its
 * logits. */
static bool is_decode_step(const struct batch *b) {
        if (b->n_tokens != b->n_seqs || b->n_outputs != b->n_tokens)
                return false;
        for (uint32_t t = 0; t < b->n_tokens; t++)
                if (b->seq_ids[t] != (int32_t) t || b->output_tokens[t] != (int32_t) t)
                        return false;
        return true;
}

/* The ladder: 1, 2, 4, 8, then multiples of 16. */
static uint32_t graph_size(uint32_t n) {
        return n <= 8 ? (n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : 8) : (n + 15) / 16 * 16;
}

static uint32_t graph_slot(uint32_t size) {
        return size <= 8 ? (size == 1 ? 0 : size == 2 ? 1 : size == 4 ? 2 : 3) : 3 + size / 16;
}

/* A decode step of n sequences padded to size tokens: the padding tokens are token 0 at
 * position 0 of sequences of their own (prompts of one token), whose blocks are all the
 * pool's hidden last block;
 * every row of the block tables is max_blocks_per_seq wide, so that the graph's arguments
 * stay the same. */
static int stage_graph_inputs(struct cuda_runner *r, const struct batch *b, uint32_t size, struct gpu_step *step,
                              const int32_t **outputs, struct error *err) {
        uint32_t n = b->n_tokens, width = r->max_blocks_per_seq;
        int32_t *h = r->inputs_host, *tables = h + 4 * (size_t) size, *n_prompt = tables + (size_t) size * width;
        for (uint32_t t = 0; t < size; t++) {
                bool real = t < n;
                h[t] = real ? b->tokens[t] : 0;
                h[size + t] = real ? b->positions[t] : 0;
                h[2 * size + t] = (int32_t) t;
                h[3 * size + t] = (int32_t) t;
                n_prompt[t] = real ? (int32_t) b->seqs[t].n_prompt : 1;
                uint32_t have = real ? (b->seqs[t].n_blocks < width ? b->seqs[t].n_blocks : width) : 0;
                if (have)
                        memcpy(tables + (size_t) t * width, b->seqs[t].block_table, have * sizeof(int32_t));
                for (uint32_t j = have; j < width; j++)
                        tables[(size_t) t * width + j] = real ? 0 : (int32_t) r->n_blocks;
        }
        size_t count = 4 * (size_t) size + (size_t) size * (width + 1);
        CUDA_TRY(cudaMemcpyAsync(r->inputs_device, h, count * sizeof(int32_t), cudaMemcpyHostToDevice, r->stream));
        const int32_t *d = r->inputs_device;
        *step = (struct gpu_step) { size, d, d + size, d + 2 * size, d + 4 * (size_t) size, width,
                                    d + 4 * (size_t) size + (size_t) size * width };
        *outputs = d + 3 * size;
        return 0;
}

static int capture_graph(struct cuda_runner *r, const struct gpu_step *st, const int32_t *outputs, cudaGraphExec_t *ret,
                         struct error *err) {
        cudaGraph_t graph = NULL;
        CUDA_TRY(cudaStreamBeginCapture(r->stream, cudaStreamCaptureModeThreadLocal));
        int rc = run_layers(r, st, err);
        if (rc == 0)
                rc = run_logits(r, outputs, st->n_tokens, err);
        cudaError_t e = cudaStreamEndCapture(r->stream, &graph);
        if (rc == 0 && e != cudaSuccess)
                rc = cuda_error(err, e, "cudaStreamEndCapture");
        if (rc == 0 && (e = cudaGraphInstantiate(ret, graph, 0)) != cudaSuccess)
                rc = cuda_error(err, e, "cudaGraphInstantiate");
        if (graph)
                cudaGraphDestroy(graph);
        return rc;
}

extern "C" int cuda_runner_forward(struct cuda_runner *r, const struct batch *b, float **logits, struct error *err) {
        const struct model_hparams *hp = &r->model->hp;
        *logits = NULL;
        if (r->released)
                return error_set(err, EBUSY, "cannot run a step: GPU memory is released (the engine is asleep)");
        struct batch_limits limits = { r->config.max_batch_tokens, r->config.max_model_len, hp->n_vocab,
                                       r->config.block_size, r->n_blocks };
        int rc = batch_validate(b, &limits, err);
        if (rc < 0)
                return rc;
        if (b->n_hidden)
                return error_set(err, EOPNOTSUPP, "the cuda backend gives no hidden states yet (encode runs on the cpu)");
        CUDA_TRY(cudaSetDevice(r->config.device));
        bool graph = b->n_tokens <= r->graph_max_batch && is_decode_step(b);
        uint32_t rows = graph ? graph_size(b->n_tokens) : b->n_outputs;
        if (rows > r->logits_rows && (rc = alloc_logits(r, rows > 2 * r->logits_rows ? rows : 2 * r->logits_rows, err)) < 0)
                return rc;
        struct gpu_step st;
        const int32_t *outputs = NULL;
        if (graph) {
                uint32_t size = graph_size(b->n_tokens);
                cudaGraphExec_t *exec = &r->graphs[graph_slot(size)];
                if ((rc = stage_graph_inputs(r, b, size, &st, &outputs, err)) < 0)
                        return rc;
                if (!*exec) {
                        if ((rc = capture_graph(r, &st, outputs, exec, err)) < 0)
                                return rc;
                        r->graphs_captured++;
                }
                CUDA_TRY(cudaGraphLaunch(*exec, r->stream));
        } else {
                if ((rc = stage_inputs(r, b, &st, &outputs, err)) < 0 || (rc = run_layers(r, &st, err)) < 0)
                        return rc;
                if (b->n_outputs && (rc = run_logits(r, outputs, b->n_outputs, err)) < 0)
                        return rc;
        }
        bool first_rank = r->shard->rank == 0;
        if (b->n_outputs && first_rank)
                CUDA_TRY(cudaMemcpyAsync(r->logits_host, r->logits_device, (size_t) b->n_outputs * hp->n_vocab * sizeof(float),
                                         cudaMemcpyDeviceToHost, r->stream));
        CUDA_TRY(cudaStreamSynchronize(r->stream));
        *logits = first_rank ? r->logits_host : NULL;
        return 0;
}

extern "C" uint32_t cuda_runner_kv_blocks(const struct cuda_runner *r) {
        return r->n_blocks;
}

extern "C" uint64_t cuda_runner_block_bytes(const struct cuda_runner *r) {
        return (uint64_t) r->config.block_size * r->model->hp.n_layer * r->kv_local * 2 * sizeof(uint16_t);
}

extern "C" const char *cuda_runner_device_name(const struct cuda_runner *r) {
        return r->device_name;
}

extern "C" int cuda_runner_release_memory(struct cuda_runner *r, unsigned what, struct error *err) {
        int rc;
        CUDA_TRY(cudaSetDevice(r->config.device));
        CUDA_TRY(cudaStreamSynchronize(r->stream));
        bool weights = (what & BACKEND_MEMORY_WEIGHTS) && !(r->released & BACKEND_MEMORY_WEIGHTS);
        bool kv = (what & BACKEND_MEMORY_KV_CACHE) && !(r->released & BACKEND_MEMORY_KV_CACHE);
        /* the graphs hold the addresses of what goes: they outlive it only where it comes back
         * at the same address */
        if ((weights && !r->weights.stable) || (kv && !r->kv.stable))
                drop_graphs(r);
        if (weights) {
                if ((rc = vmm_region_release(&r->weights, err)) < 0)
                        return rc;
                r->released |= BACKEND_MEMORY_WEIGHTS;
        }
        if (kv) {
                if ((rc = vmm_region_release(&r->kv, err)) < 0)
                        return rc;
                r->released |= BACKEND_MEMORY_KV_CACHE;
        }
        return 0;
}

extern "C" int cuda_runner_restore_memory(struct cuda_runner *r, unsigned what, struct error *err) {
        int rc;
        CUDA_TRY(cudaSetDevice(r->config.device));
        if ((what & BACKEND_MEMORY_WEIGHTS) && (r->released & BACKEND_MEMORY_WEIGHTS)) {
                if ((rc = upload_weights(r, err)) < 0)
                        return rc;
                r->released &= ~(unsigned) BACKEND_MEMORY_WEIGHTS;
        }
        if ((what & BACKEND_MEMORY_KV_CACHE) && (r->released & BACKEND_MEMORY_KV_CACHE)) {
                if ((rc = alloc_kv_pool(r, err)) < 0)
                        return rc;
                r->released &= ~(unsigned) BACKEND_MEMORY_KV_CACHE;
        }
        return 0;
}

extern "C" void cuda_runner_usage(const struct cuda_runner *r, struct cuda_runner_usage *ret) {
        size_t free_bytes = 0, total_bytes = 0;
        cudaSetDevice(r->config.device);
        if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess)
                free_bytes = total_bytes = 0;
        *ret = (struct cuda_runner_usage) {
                .weights_bytes = r->released & BACKEND_MEMORY_WEIGHTS ? 0 : r->arena_bytes,
                .kv_cache_bytes = r->released & BACKEND_MEMORY_KV_CACHE ? 0 : 2 * r->kv_pool_bytes,
                .scratch_bytes = r->scratch_bytes,
                .released = r->released,
                .device_free = free_bytes,
                .device_total = total_bytes,
                .graphs_captured = r->graphs_captured,
        };
}
