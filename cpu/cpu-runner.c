/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpu-runner.h"
#include "dot.h"
#include "float16.h"
#include "kv-pool.h"
#include "matmul-shares.h"
#include "packed-weights.h"
#include "quantize.h"
#include "thread-pool.h"
#include "weight-residency.h"

/* A matmul's input: the floats (normed input, attention output or the feed-forward's h),
 * their q8_1 blocks and the blocks' d and s as floats. */
struct activations {
        float *xn;             /* (tokens, max_dim) */
        struct block_q8_1 *xq; /* (tokens, max_dim / 32) */
        float *ds;             /* (tokens, max_dim / 32, 2) */
        int32_t *corrections;  /* (tokens, max_dim / 32, PACKED_CORRECTIONS) for packed Q4_0 and Q8_0 */
        int32_t *logits_corrections; /* (tokens, max_dim / 32) for the packed logits product */
};

/* The matmul weights repacked for the packed product (packed-weights.h), all in one
 * anonymous arena on large pages; the file's pages of those tensors are given back. */
#define WEIGHTS_PER_LAYER 7
struct packed_model {
        uint8_t *arena;
        size_t arena_bytes;
        struct packed_weights *weights; /* (n_layer * WEIGHTS_PER_LAYER + 1), the output last; data NULL if not packed */
        bool keep_cached;               /* weight-residency.h's choice for the arena */
};

#define SMALL_BATCH 4
/* Up to this many tokens a thread takes several groups of a packed matmul at a time; more,
 * and one group is a thread's work at a time (matmul_take_size). */
#define MATMUL_FEW_TOKENS 8
/* Consecutive prompt tokens of a sequence whose attention goes together (as many as keep
 * their query heads within DOT_GROUP_MAX): each key and value is read and converted once for
 * all their query heads. */
#define ATTN_TILE_TOKENS 4
/* How much of its next matmul's first take a thread fetches while it waits at a barrier:
 * about what memory delivers in an average wait of a decode step (~1.5 us). */
#define BARRIER_FETCH_MAX 16384

struct cpu_runner {
        const struct model *model;
        struct cpu_runner_config config;
        const struct dot_kernels *kernels;
        struct thread_pool *pool;
        struct kv_pool *kv;
        uint32_t q_dim, kv_dim, max_dim;
        unsigned released; /* enum backend_memory bits */
        bool use_packed;   /* $ASYNCLLM_CPU_PACKED=0 keeps the tiles on the original rows */
        struct packed_model packed;
        struct matmul_share *shares; /* (n_matmul_weights, n_threads), reset before each step */

        /* Scratch for one slice of a step, T = slice_tokens, reused across slices and steps. */
        uint32_t slice_tokens;   /* max_slice_tokens, at most max_batch_tokens */
        int32_t *slice_outputs;  /* (T) the slice's output token indices, from its first token */
        float *x;                /* (T, n_embd) the residual stream */
        struct activations shared; /* (T, ...) written by the threads together */
        /* Per thread, for batches of at most SMALL_BATCH tokens: each thread normalizes and
         * quantizes the whole (small) batch itself, which saves the barrier after each such
         * phase; the values are the same on every thread. NULL when some weight has no tile
         * kernel (the float path reads the shared xn). */
        struct activations *own;
        float *q;                /* (T, q_dim) */
        float *k;                /* (T, kv_dim) */
        float *v;                /* (T, kv_dim) */
        float *gate;             /* (T, n_ff) */
        float *up;               /* (T, n_ff) */
        float *rope_cos;         /* (T, rope_dim / 2) */
        float *rope_sin;         /* (T, rope_dim / 2) */
        float *thread_scratch;   /* (n_threads, max_model_len + max_dim) scores and rows */
        size_t thread_scratch_stride;
        uint32_t attn_tile_tokens;
        size_t attn_scores_floats; /* of a thread's scratch: the tile's scores, then its queries or a row */
        size_t attn_queries_floats;
        uint32_t *attn_done_until; /* (thread, key-value head): tokens before it are done */
        uint32_t attn_split_positions;
        /* (SMALL_BATCH * n_head_kv items) for attention shared between the threads: each
         * item's scores, rounded queries and lane rows (attn_split_scores(), _queries(),
         * _lanes()); NULL with one thread */
        float *attn_split;
        size_t attn_split_stride;
        uint64_t scratch_bytes;  /* all of the above */

        /* The step in progress, read by every worker. */
        const struct batch *batch;
        float *logits;
        bool store_own_kv;      /* attention_stores_own_kv() of the batch */
        bool shared_attention;  /* attention_is_shared() of the batch */
};

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
        a->logits_corrections = alloc_scratch(r, tokens * (r->max_dim / QUANT_BLOCK), sizeof(int32_t));
        return a->xn && a->xq && a->ds && a->corrections && a->logits_corrections;
}

static void activations_free(struct activations *a) {
        free(a->xn);
        free(a->xq);
        free(a->ds);
        free(a->corrections);
        free(a->logits_corrections);
}

static const struct weight *layer_weight(const struct model_layer *l, unsigned k) {
        const struct weight *w[WEIGHTS_PER_LAYER] = { &l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down };
        return w[k];
}

static const struct weight *matmul_weight(const struct model *m, size_t i) {
        return i == (size_t) m->hp.n_layer * WEIGHTS_PER_LAYER ? &m->output
                                                                  : layer_weight(&m->layers[i / WEIGHTS_PER_LAYER], i % WEIGHTS_PER_LAYER);
}

static size_t n_matmul_weights(const struct model *m) {
        return (size_t) m->hp.n_layer * WEIGHTS_PER_LAYER + 1;
}

/* Whether matmul weight i makes the logits with the logits product (dot.h): the output of a
 * Q8_0 output weight. */
static bool logits_product(const struct model *m, size_t i) {
        return i == (size_t) m->hp.n_layer * WEIGHTS_PER_LAYER && m->output.type == TENSOR_Q8_0;
}

static bool packable(const struct cpu_runner *r, const struct weight *w) {
        return packed_type_supported(w->type) && dot_packed_kernel_for(r->kernels, w->type) && w->n_cols % QUANT_BLOCK == 0;
}

/* The file's whole pages inside [p, p + n) are dropped from this process: the mapping is
 * shared and read-only, so a later read faults the bytes back in from the page cache. */
static void drop_file_pages(const void *p, uint64_t n) {
        uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
        uintptr_t begin = ((uintptr_t) p + page - 1) / page * page, end = ((uintptr_t) p + n) / page * page;
        if (end > begin)
                (void) madvise((void *) begin, end - begin, MADV_DONTNEED);
}

static void packed_model_free(struct packed_model *pm) {
        if (pm->arena)
                munmap(pm->arena, pm->arena_bytes);
        free(pm->weights);
        *pm = (struct packed_model) { 0 };
}

/* Repacks every quantized matmul weight into one arena. The tied output is repacked too; the
 * token embedding lookup keeps reading the original rows. */
static int packed_model_build(struct cpu_runner *r, struct error *err) {
        const struct model *m = r->model;
        struct packed_model *pm = &r->packed;
        size_t n = n_matmul_weights(m);
        uint64_t total = 0;

        pm->weights = calloc(n, sizeof(*pm->weights));
        if (!pm->weights)
                return error_set(err, ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
                const struct weight *w = matmul_weight(m, i);
                if (packable(r, w) && packed_weights_init(&pm->weights[i], w->type, w->n_rows, w->n_cols) == 0)
                        total += packed_weights_bytes(&pm->weights[i]);
        }
        if (total == 0)
                return 0;
        const size_t huge = 2u << 20;
        pm->arena_bytes = (total + huge - 1) / huge * huge;
        pm->arena = mmap(NULL, pm->arena_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (pm->arena == MAP_FAILED) {
                pm->arena = NULL;
                packed_model_free(pm);
                return error_set(err, ENOMEM, "cannot allocate %llu bytes for the repacked weights", (unsigned long long) total);
        }
        /* one stream per matmul: large pages spare the TLB and let the prefetch run on */
        (void) madvise(pm->arena, pm->arena_bytes, MADV_HUGEPAGE);
        int rc = weight_residency_choose(total, &pm->keep_cached, err);
        if (rc < 0) {
                packed_model_free(pm);
                return rc;
        }
        uint64_t offset = 0;
        for (size_t i = 0; i < n; i++) {
                struct packed_weights *p = &pm->weights[i];
                const struct weight *w = matmul_weight(m, i);
                if (p->n_groups == 0)
                        continue;
                packed_weights_fill(p, pm->arena + offset, w->data, w->row_bytes);
                p->keep_cached = pm->keep_cached;
                offset += packed_weights_bytes(p);
                if (m->file->mapping)
                        drop_file_pages(w->data, w->n_rows * w->row_bytes);
        }
        return 0;
}

static const struct packed_weights *packed_for(const struct cpu_runner *r, size_t i) {
        return r->packed.weights && r->packed.weights[i].data ? &r->packed.weights[i] : NULL;
}

static bool all_weights_tiled(const struct cpu_runner *r) {
        const struct model *m = r->model;
        if (!dot_tile_kernel_for(r->kernels, m->output.type))
                return false;
        for (uint32_t i = 0; i < m->hp.n_layer; i++) {
                const struct model_layer *l = &m->layers[i];
                const struct weight *w[] = { &l->wq, &l->wk, &l->wv, &l->wo, &l->w_gate, &l->w_up, &l->w_down };
                for (size_t k = 0; k < sizeof(w) / sizeof(*w); k++)
                        if (!dot_tile_kernel_for(r->kernels, w[k]->type))
                                return false;
        }
        return true;
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
        r->max_dim = hp->n_embd;
        if (r->q_dim > r->max_dim)
                r->max_dim = r->q_dim;
        if (hp->n_ff > r->max_dim)
                r->max_dim = hp->n_ff;

        if ((rc = thread_pool_new(config->n_threads, &r->pool, err)) < 0 ||
            (rc = kv_pool_new(hp->n_layer, config->n_kv_blocks, config->block_size, r->kv_dim, &r->kv, err)) < 0 ||
            (r->use_packed && (rc = packed_model_build(r, err)) < 0)) {
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
        r->x = alloc_floats(r, T * hp->n_embd);
        bool ok = activations_alloc(r, T, &r->shared);
        if (ok && all_weights_tiled(r)) {
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
        r->rope_cos = alloc_floats(r, T * (hp->rope_dim / 2));
        r->rope_sin = alloc_floats(r, T * (hp->rope_dim / 2));
        r->thread_scratch = alloc_floats(r, config->n_threads * r->thread_scratch_stride);
        r->attn_split_positions = config->attn_split_positions ? config->attn_split_positions
                                                               : CPU_RUNNER_ATTN_SPLIT_POSITIONS;
        r->attn_split_stride = (size_t) group * ((size_t) config->max_model_len + 16 + (1 + 64) * hp->head_dim);
        if (config->n_threads > 1 && !(r->attn_split = alloc_floats(r, (size_t) SMALL_BATCH * hp->n_head_kv *
                                                                               r->attn_split_stride)))
                ok = false;
        r->shares = aligned_alloc(_Alignof(struct matmul_share),
                                  n_matmul_weights(r->model) * config->n_threads * sizeof(struct matmul_share));
        if (!ok || !r->slice_outputs || !r->x || !r->q || !r->k || !r->v || !r->gate || !r->up || !r->rope_cos ||
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

/* The share [begin, end) of n items that thread ith of nth works on. */
static void split(uint64_t n, unsigned ith, unsigned nth, uint64_t *begin, uint64_t *end) {
        *begin = n * ith / nth;
        *end = n * (ith + 1) / nth;
}

static void rms_norm(const float *x, const float *weight, float *out, uint32_t n, float eps) {
        /* squares rounded to float, summed in double, as the reference does */
        double sum = 0.0;
        for (uint32_t i = 0; i < n; i++)
                sum += (double) (x[i] * x[i]);
        float scale = 1.0f / sqrtf((float) (sum / n) + eps);
        for (uint32_t i = 0; i < n; i++)
                out[i] = x[i] * scale * weight[i];
}

/* Groups of a packed matmul a thread takes from its own run at a time (matmul-shares.h):
 * about eight takes per thread, enough to even out, few enough that a take costs little next
 * to computing it; one group at a time for many tokens. */
static uint32_t matmul_take_size(const struct packed_weights *packed, uint32_t n_tokens, unsigned nth) {
        uint64_t size = packed->n_groups / (8 * (uint64_t) nth);
        return size == 0 || n_tokens > MATMUL_FEW_TOKENS ? 1 : (uint32_t) size;
}

/* A barrier that fetches what this thread's next matmul reads first while it waits. A decode
 * step's phases between the matmuls (attention, norms, the barriers themselves) are a
 * quarter of its time, and the memory stood idle through them: the weights' stream
 * restarted cold at every matmul. */
static void barrier_before_matmul(const struct cpu_runner *r, size_t weight_index, uint32_t n_tokens, unsigned ith,
                                  unsigned nth) {
        const struct packed_weights *packed = packed_for(r, weight_index);
        const uint8_t *from = NULL;
        size_t bytes = 0;
        if (packed) {
                uint64_t g0 = matmul_share_begin(packed->n_groups, ith, nth);
                if (g0 < matmul_share_begin(packed->n_groups, ith + 1, nth)) {
                        from = packed->data + g0 * packed->group_bytes;
                        bytes = (size_t) matmul_take_size(packed, n_tokens, nth) * packed->group_bytes;
                        if (bytes > BARRIER_FETCH_MAX)
                                bytes = BARRIER_FETCH_MAX;
                }
        }
        thread_pool_barrier_fetch(r->pool, from, bytes);
}

/* out[t * out_stride + row] (+)= W[row] . x[t] for this thread's share of W's rows. Each
 * result depends only on its row and token, never on the split or the batch: the tiles give
 * the bits of the single products. Rows go in tiles of four across the threads, and each
 * tile of weights (in L1) meets every token before the next is loaded. */
static void matmul(const struct cpu_runner *r, size_t weight_index, const struct activations *a, uint32_t n_tokens,
                   float *out, uint32_t out_stride, bool accumulate, float *row_scratch, unsigned ith, unsigned nth) {
        const struct weight *w = matmul_weight(r->model, weight_index);
        const struct packed_weights *packed = packed_for(r, weight_index);
        const float *x = a->xn;
        const struct block_q8_1 *xq = a->xq;
        uint64_t begin, end;
        size_t n_blocks = w->n_cols / QUANT_BLOCK;
        bool logits = logits_product(r->model, weight_index);
        /* unpacked, the logits product goes one row at a time through its reference */
        dot_q_fn dot = logits ? dot_logits_q8_0_reference : dot_kernel_for(r->kernels, w->type);
        dot_tile_fn tile = logits ? NULL : dot_tile_kernel_for(r->kernels, w->type);
        uint64_t n_tiles = tile ? w->n_rows / DOT_TILE_ROWS : 0;

        /* Packed: groups of sixteen rows across the threads, every token in one call, the
         * group's weights staying in L1 while the tokens pass over them. */
        if (packed) {
                dot_packed_fn fn = logits ? r->kernels->packed_logits_q8_0 : dot_packed_kernel_for(r->kernels, w->type);
                struct matmul_share *shares = &r->shares[weight_index * nth];
                struct packed_activations pa = { xq, a->ds, a->corrections, n_blocks, a->logits_corrections };
                uint32_t take = matmul_take_size(packed, n_tokens, nth), n;
                uint64_t g0;
                while (matmul_shares_take(shares, ith, nth, take, &g0, &n))
                        fn(packed, g0, g0 + n, &pa, n_tokens, out, out_stride, accumulate);
                return;
        }

        split(n_tiles, ith, nth, &begin, &end);
        for (uint64_t g = begin; g < end; g++) {
                uint64_t row0 = g * DOT_TILE_ROWS;
                for (uint32_t t0 = 0; t0 < n_tokens; t0 += DOT_TILE_TOKENS) {
                        unsigned n = n_tokens - t0 < DOT_TILE_TOKENS ? n_tokens - t0 : DOT_TILE_TOKENS;
                        float v[DOT_TILE_TOKENS * DOT_TILE_ROWS];
                        tile(w->data + row0 * w->row_bytes, w->row_bytes, xq + (size_t) t0 * n_blocks,
                             a->ds + (size_t) t0 * n_blocks * 2, n_blocks, n, n_blocks, v);
                        for (unsigned t = 0; t < n; t++)
                                for (unsigned k = 0; k < DOT_TILE_ROWS; k++) {
                                        float *o = &out[(size_t) (t0 + t) * out_stride + row0 + k];
                                        *o = accumulate ? *o + v[t * DOT_TILE_ROWS + k] : v[t * DOT_TILE_ROWS + k];
                                }
                }
        }
        /* rows left over from the tiles, float weights and the logits product, one product at a time */
        split(w->n_rows - n_tiles * DOT_TILE_ROWS, ith, nth, &begin, &end);
        for (uint64_t row = n_tiles * DOT_TILE_ROWS + begin; row < n_tiles * DOT_TILE_ROWS + end; row++) {
                const uint8_t *wrow = w->data + row * w->row_bytes;
                if (!dot)
                        tensor_row_to_float(w->type, wrow, row_scratch, w->n_cols);
                for (uint32_t t = 0; t < n_tokens; t++) {
                        float v;
                        if (dot)
                                v = dot(wrow, xq + t * n_blocks, n_blocks);
                        else {
                                const float *xt = x + (size_t) t * w->n_cols;
                                v = 0.0f;
                                for (uint64_t i = 0; i < w->n_cols; i++)
                                        v += row_scratch[i] * xt[i];
                        }
                        float *o = &out[(size_t) t * out_stride + row];
                        *o = accumulate ? *o + v : v;
                }
        }
}

/* Quantizes token row i of a (width elements at x) for the matmuls: its q8_1 blocks, their
 * scales as floats, and, when the packed product runs, the lanes' corrections it reads. */
static void quantize_row(const struct cpu_runner *r, const struct activations *a, const float *x, uint64_t i,
                         uint32_t width) {
        size_t n_blocks = width / QUANT_BLOCK;
        r->kernels->quantize_q8_1(x, a->xq + i * n_blocks, a->ds + i * n_blocks * 2, width);
        if (r->packed.arena)
                r->kernels->activation_corrections(a->xq + i * n_blocks, n_blocks,
                                                   a->corrections + i * n_blocks * PACKED_CORRECTIONS);
}

/* Normalizes and quantizes this thread's share of tokens: xn = norm(x) * weight, xq = q8(xn);
 * with for_logits also the blocks' corrections that the packed logits product reads. */
static void norm_tokens(struct cpu_runner *r, const struct activations *a, const float *weight, const int32_t *rows,
                        uint32_t n_rows, unsigned ith, unsigned nth, bool for_logits) {
        const struct model_hparams *hp = &r->model->hp;
        size_t n_blocks = hp->n_embd / QUANT_BLOCK;
        uint64_t begin, end;
        split(n_rows, ith, nth, &begin, &end);
        for (uint64_t i = begin; i < end; i++) {
                uint32_t t = rows ? (uint32_t) rows[i] : (uint32_t) i;
                float *xn = a->xn + i * hp->n_embd;
                rms_norm(r->x + (size_t) t * hp->n_embd, weight, xn, hp->n_embd, hp->rms_eps);
                quantize_row(r, a, xn, i, hp->n_embd);
                if (for_logits)
                        packed_logits_corrections(a->xq + i * n_blocks, n_blocks, a->logits_corrections + i * n_blocks);
        }
}

static void quantize_tokens(struct cpu_runner *r, const struct activations *a, const float *x, uint32_t width,
                            uint32_t n_tokens, unsigned ith, unsigned nth) {
        uint64_t begin, end;
        split(n_tokens, ith, nth, &begin, &end);
        for (uint64_t t = begin; t < end; t++)
                quantize_row(r, a, x + t * width, t, width);
}

/* Rotates adjacent pairs (x[2i], x[2i+1]) of each head by position * theta^(-2i / rope_dim). */
static void rope(const struct cpu_runner *r, float *x, uint32_t n_heads, uint32_t t) {
        const struct model_hparams *hp = &r->model->hp;
        uint32_t half = hp->rope_dim / 2;
        r->kernels->rope(x, n_heads, hp->head_dim, half, r->rope_cos + (size_t) t * half, r->rope_sin + (size_t) t * half);
}

static void rope_tables(struct cpu_runner *r, unsigned ith, unsigned nth) {
        const struct model_hparams *hp = &r->model->hp;
        const struct batch *b = r->batch;
        uint32_t half = hp->rope_dim / 2;
        /* The angle advances by repeated multiplication, as the reference does, so that the
         * rounding of each angle matches it. */
        float theta_scale = powf(hp->rope_theta, -2.0f / (float) hp->rope_dim);
        uint64_t begin, end;
        split(b->n_tokens, ith, nth, &begin, &end);
        for (uint64_t t = begin; t < end; t++) {
                float theta = (float) b->positions[t];
                for (uint32_t i = 0; i < half; i++) {
                        r->rope_cos[t * half + i] = cosf(theta);
                        r->rope_sin[t * half + i] = sinf(theta);
                        theta *= theta_scale;
                }
        }
}

/* The first element of a head's row at a slot of a block of the KV pool: a block keeps each
 * head's rows together, (head, slot, head_dim), so that attention reads a head's part of a
 * block as consecutive lines. */
static uint64_t kv_row(const struct cpu_runner *r, uint32_t layer, uint32_t block, uint32_t head, uint32_t slot) {
        uint32_t bs = r->kv->block_size, hd = r->model->hp.head_dim;
        return kv_pool_block(r->kv, layer, block) + ((uint64_t) head * bs + slot) * hd;
}

/* Key-value head kv_head's keys or values (pool: the KV pool's k or v) in a layer, read
 * through block_table; fetch_beside: the other pool, whose rows the scores kernels fetch
 * beside the keys they read, or NULL. */
static struct f16_rows kv_head_rows(const struct cpu_runner *r, const f16_bits *pool, const f16_bits *fetch_beside,
                                    uint32_t layer, uint32_t kv_head, const int32_t *block_table) {
        size_t head_base = kv_row(r, layer, 0, kv_head, 0);
        return (struct f16_rows) { pool + head_base, block_table, r->kv->block_size, r->model->hp.head_dim,
                                   kv_pool_block(r->kv, 0, 1), fetch_beside ? fetch_beside + head_base : NULL };
}

/* Token t's query heads of key-value head kv_head, n_tokens consecutive tokens of them,
 * rounded to f16 precision into q16: the queries meet the f16 keys at f16 precision, as in
 * the reference. */
static void round_queries(const struct cpu_runner *r, uint32_t t, uint32_t n_tokens, uint32_t kv_head, float *q16) {
        const struct model_hparams *hp = &r->model->hp;
        size_t head_floats = (size_t) (hp->n_head / hp->n_head_kv) * hp->head_dim;
        for (uint32_t i = 0; i < n_tokens; i++)
                memcpy(q16 + i * head_floats, r->q + (size_t) (t + i) * r->q_dim + kv_head * head_floats,
                       head_floats * sizeof(float));
        r->kernels->round_f16(q16, n_tokens * head_floats);
}

/* Where attention writes token t's output for query head g of key-value head kv_head. */
static float *attention_output(const struct cpu_runner *r, uint32_t t, uint32_t kv_head, uint32_t g) {
        const struct model_hparams *hp = &r->model->hp;
        return r->shared.xn + (size_t) t * r->q_dim + ((size_t) kv_head * (hp->n_head / hp->n_head_kv) + g) * hp->head_dim;
}

/* Applies RoPE to token t's query heads of key-value head h and to its key head h, and
 * stores that key and value in the KV pool. */
static void store_kv_head(struct cpu_runner *r, uint32_t layer, uint32_t t, uint32_t h) {
        const struct model_hparams *hp = &r->model->hp;
        const struct batch *b = r->batch;
        const struct batch_seq *seq = &b->seqs[b->seq_ids[t]];
        uint32_t pos = (uint32_t) b->positions[t], group = hp->n_head / hp->n_head_kv;
        uint32_t bs = r->kv->block_size, hd = hp->head_dim, block = (uint32_t) seq->block_table[pos / bs];
        float *q = r->q + (size_t) t * r->q_dim + (size_t) h * group * hd;
        float *k = r->k + (size_t) t * r->kv_dim + (size_t) h * hd, *v = r->v + (size_t) t * r->kv_dim + (size_t) h * hd;
        rope(r, q, group, t);
        rope(r, k, 1, t);
        uint64_t row = kv_row(r, layer, block, h, pos % bs);
        for (uint32_t i = 0; i < hd; i++) {
                r->kv->k[row + i] = f32_to_f16(k[i]);
                r->kv->v[row + i] = f32_to_f16(v[i]);
        }
}

/* store_kv_head() for every head of this thread's tokens. */
static void store_kv(struct cpu_runner *r, uint32_t layer, unsigned ith, unsigned nth) {
        uint64_t begin, end;
        split(r->batch->n_tokens, ith, nth, &begin, &end);
        for (uint64_t t = begin; t < end; t++)
                for (uint32_t h = 0; h < r->model->hp.n_head_kv; h++)
                        store_kv_head(r, layer, (uint32_t) t, h);
}

/* Whether each token of a small batch is its sequence's only one: then a token's attention
 * under one key-value head reads no key or value that another head or token stores in this
 * step, and attention can store its own before it reads (store_kv_head()), without a
 * barrier between. */
static bool attention_stores_own_kv(const struct batch *b) {
        if (b->n_tokens > SMALL_BATCH)
                return false;
        for (uint32_t t = 0; t < b->n_tokens; t++)
                for (uint32_t u = 0; u < t; u++)
                        if (b->seq_ids[u] == b->seq_ids[t])
                                return false;
        return true;
}

/* Attention items are (token, key-value head) pairs costing (position + 1) per query head
 * each; a thread's share is cut by cost, not by count, so that a mixed step's long-context
 * prompt tokens do not all land on one thread. Returns the first item at which the running
 * cost reaches target. */
static uint64_t item_at_cost(const struct batch *b, uint32_t n_items_per_token, uint32_t heads_per_item, uint64_t target) {
        uint64_t before = 0;
        for (uint32_t t = 0; t < b->n_tokens; t++) {
                uint64_t cost = ((uint64_t) b->positions[t] + 1) * heads_per_item;
                if (before + cost * n_items_per_token > target)
                        return (uint64_t) t * n_items_per_token + (target - before + cost - 1) / cost;
                before += cost * n_items_per_token;
        }
        return (uint64_t) b->n_tokens * n_items_per_token;
}

/* The batch's attention cost in item_at_cost()'s units: (position + 1) per query head. */
static uint64_t attention_cost(const struct cpu_runner *r) {
        uint64_t total = 0;
        for (uint32_t t = 0; t < r->batch->n_tokens; t++)
                total += ((uint64_t) r->batch->positions[t] + 1) * r->model->hp.n_head;
        return total;
}

/* Thread ith's run of attention items [begin, end), of nth threads' even shares of total. */
static void attention_run(const struct cpu_runner *r, uint64_t total, unsigned ith, unsigned nth, uint64_t *begin,
                          uint64_t *end) {
        const struct model_hparams *hp = &r->model->hp;
        const struct batch *b = r->batch;
        uint32_t group = hp->n_head / hp->n_head_kv;
        *begin = item_at_cost(b, hp->n_head_kv, group, total * ith / nth);
        *end = ith + 1 == nth ? (uint64_t) b->n_tokens * hp->n_head_kv
                              : item_at_cost(b, hp->n_head_kv, group, total * (ith + 1) / nth);
}

/* Tokens from t on (at most max) that go with t under key-value head kv_head: consecutive
 * prompt positions of t's sequence whose items are below end. */
static uint32_t attention_tile(const struct batch *b, uint32_t t, uint32_t kv_head, uint32_t n_head_kv, uint64_t end,
                               uint32_t max) {
        uint32_t n = 1;
        if ((uint32_t) b->positions[t] >= b->seqs[b->seq_ids[t]].n_prompt)
                return 1;
        while (n < max && t + n < b->n_tokens && (uint64_t) (t + n) * n_head_kv + kv_head < end &&
               b->seq_ids[t + n] == b->seq_ids[t] && b->positions[t + n] == b->positions[t] + (int32_t) n &&
               (uint32_t) b->positions[t + n] < b->seqs[b->seq_ids[t]].n_prompt)
                n++;
        return n;
}

/* Causal grouped-query attention of each (token, key-value head) in this thread's share over
 * the token's sequence, positions 0..pos in order, read through the block table; the query
 * heads of the group, and of a few consecutive prompt tokens, go together,
 * so that each key and value is converted once for them all. A tile's earlier tokens also
 * meet the keys of its later positions: their scores are not used and their weights are 0,
 * which adds exactly nothing to the value sums. Sums follow the lane order of llama.cpp's
 * f16 matrix products, so that rounding matches the reference: its tiled product (16 lanes)
 * for prompt positions, its vector dot product (64 lanes) for generated ones; position j
 * feeds lane j % lanes. The order depends only on the sequence, and each head's numbers are
 * what it would get alone. */
static void attention(struct cpu_runner *r, uint32_t layer, unsigned ith, unsigned nth) {
        const struct model_hparams *hp = &r->model->hp;
        const struct batch *b = r->batch;
        const struct dot_kernels *kern = r->kernels;
        uint32_t group = hp->n_head / hp->n_head_kv, hd = hp->head_dim;
        size_t scores_stride = (size_t) r->config.max_model_len + 16;
        float scale = 1.0f / sqrtf((float) hd);
        float *scores = r->thread_scratch + ith * r->thread_scratch_stride; /* (tile heads, scores_stride) */
        float *q16 = scores + r->attn_scores_floats;                        /* (tile heads, hd) */
        float *lanes = q16 + r->attn_queries_floats;                         /* (tile heads, 64, hd) */
        uint32_t *done_until = r->attn_done_until + (size_t) ith * hp->n_head_kv;
        size_t lanes_stride = (size_t) 64 * hd;
        uint64_t begin, end;
        attention_run(r, attention_cost(r), ith, nth, &begin, &end);
        memset(done_until, 0, hp->n_head_kv * sizeof(*done_until));
        for (uint64_t item = begin; item < end; item++) {
                uint32_t t = (uint32_t) (item / hp->n_head_kv), kv_head = (uint32_t) (item % hp->n_head_kv);
                if (t < done_until[kv_head])
                        continue; /* in a tile already computed */
                uint32_t n_tile = attention_tile(b, t, kv_head, hp->n_head_kv, end, r->attn_tile_tokens);
                done_until[kv_head] = t + n_tile;
                if (r->store_own_kv)
                        store_kv_head(r, layer, t, kv_head);
                const struct batch_seq *seq = &b->seqs[b->seq_ids[t]];
                uint32_t n_pos = (uint32_t) b->positions[t + n_tile - 1] + 1; /* the tile's last token's */
                bool prompt = (uint32_t) b->positions[t] < seq->n_prompt;
                uint32_t n_lanes = prompt ? 16 : 64, n_q = n_tile * group;

                struct f16_rows values = kv_head_rows(r, r->kv->v, NULL, layer, kv_head, seq->block_table);
                /* A generated token's values are read lane by lane, positions 64 apart in
                 * blocks scattered over the pool, and the sums waited on each row. */
                struct f16_rows keys = kv_head_rows(r, r->kv->k, prompt ? NULL : r->kv->v, layer, kv_head, seq->block_table);

                round_queries(r, t, n_tile, kv_head, q16);
                kern->attn_scores(&keys, n_pos, q16, hd, n_q, hd, !prompt, scale, scores, scores_stride);

                /* The weights meet the f16 values at f16 precision, as in the reference's
                 * attention without flash attention; a query's positions past its own (the
                 * tile's later tokens) weigh nothing. */
                for (uint32_t g = 0; g < n_q; g++) {
                        float *sg = scores + g * scores_stride;
                        uint32_t n_ctx = (uint32_t) b->positions[t + g / group] + 1;
                        kern->softmax_f16(sg, n_ctx);
                        for (uint32_t j = n_ctx; j < n_pos; j++)
                                sg[j] = 0.0f;
                }
                kern->attn_values(&values, n_pos, scores, scores_stride, n_q, hd, n_lanes, 0, 16, lanes, lanes_stride);
                for (uint32_t g = 0; g < n_q; g++) {
                        uint32_t n_ctx = (uint32_t) b->positions[t + g / group] + 1;
                        kern->sum_lanes(lanes + g * lanes_stride, hd, n_ctx < 16 ? n_ctx : 16, hd,
                                        attention_output(r, t + g / group, kv_head, g % group));
                }
        }
}

/* How much more than its fair share of attention's reads the busiest thread may get from
 * attention()'s runs of items before a decode step shares them out (attention_shared()).
 * Shared when they were even already (two sequences at 1024 positions on two threads), a
 * step lost ~8%: half of each head's values then come from the other core's cache. */
#define ATTN_SHARE_IMBALANCE 1.2

/* Whether this decode step shares each item's attention between the threads: every token
 * its sequence's only one, some context of at least attn_split_positions (below, the extra
 * barriers cost more than the evener split saves), and attention()'s runs of items uneven
 * (one sequence's 3 key-value heads on 2 threads: two thirds of the reads on one). */
static bool attention_is_shared(const struct cpu_runner *r, bool store_own_kv, unsigned nth) {
        const struct model_hparams *hp = &r->model->hp;
        const struct batch *b = r->batch;
        if (!store_own_kv || !r->attn_split)
                return false;
        uint32_t group = hp->n_head / hp->n_head_kv, longest = 0;
        for (uint32_t t = 0; t < b->n_tokens; t++)
                longest = (uint32_t) b->positions[t] + 1 > longest ? (uint32_t) b->positions[t] + 1 : longest;
        if (longest < r->attn_split_positions)
                return false;
        uint64_t total = attention_cost(r), busiest = 0;
        for (unsigned i = 0; i < nth; i++) {
                uint64_t begin, end, cost = 0;
                attention_run(r, total, i, nth, &begin, &end);
                for (uint64_t item = begin; item < end; item++)
                        cost += ((uint64_t) b->positions[item / hp->n_head_kv] + 1) * group;
                busiest = cost > busiest ? cost : busiest;
        }
        return (double) busiest > ATTN_SHARE_IMBALANCE * (double) total / nth;
}

/* Item i's part of attn_split: the scores of its query heads, their queries rounded to f16,
 * and their 64 lane rows of a head. */
static float *attn_split_scores(const struct cpu_runner *r, uint32_t item) {
        return r->attn_split + item * r->attn_split_stride;
}

static float *attn_split_queries(const struct cpu_runner *r, uint32_t item) {
        uint32_t group = r->model->hp.n_head / r->model->hp.n_head_kv;
        return attn_split_scores(r, item) + (size_t) group * (r->config.max_model_len + 16);
}

static float *attn_split_lanes(const struct cpu_runner *r, uint32_t item) {
        const struct model_hparams *hp = &r->model->hp;
        return attn_split_queries(r, item) + (size_t) (hp->n_head / hp->n_head_kv) * hp->head_dim;
}

/* attention() for a decode step, each (token, key-value head) shared by all the threads in
 * phases with barriers between: one thread stores the item's key and value and rounds its
 * queries; each thread scores a run of whole blocks of positions; a thread takes each
 * query's softmax; each thread makes a run of the 16 rows of value sums (row e: the
 * positions e mod 16); a thread adds each query's rows. Every number is made by the same
 * kernels over the same positions in the same order as when one thread has the item, so
 * the results are the same bits. */
static void attention_shared(struct cpu_runner *r, uint32_t layer, unsigned ith, unsigned nth) {
        const struct model_hparams *hp = &r->model->hp;
        const struct batch *b = r->batch;
        const struct dot_kernels *kern = r->kernels;
        uint32_t group = hp->n_head / hp->n_head_kv, hd = hp->head_dim, bs = r->kv->block_size;
        uint32_t n_items = b->n_tokens * hp->n_head_kv;
        size_t scores_stride = (size_t) r->config.max_model_len + 16, lanes_stride = (size_t) 64 * hd;
        float scale = 1.0f / sqrtf((float) hd);

        for (uint32_t item = ith; item < n_items; item += nth) {
                uint32_t t = item / hp->n_head_kv, kv_head = item % hp->n_head_kv;
                store_kv_head(r, layer, t, kv_head);
                round_queries(r, t, 1, kv_head, attn_split_queries(r, item));
        }
        thread_pool_barrier(r->pool);

        for (uint32_t item = 0; item < n_items; item++) {
                uint32_t t = item / hp->n_head_kv, kv_head = item % hp->n_head_kv;
                const struct batch_seq *seq = &b->seqs[b->seq_ids[t]];
                uint32_t n_pos = (uint32_t) b->positions[t] + 1, n_blocks = (n_pos + bs - 1) / bs;
                uint32_t per_thread = (n_blocks + nth - 1) / nth;
                uint32_t first = ith * per_thread * bs, end = (ith + 1) * per_thread * bs;
                if (end > n_pos)
                        end = n_pos;
                if (first >= end)
                        continue;
                struct f16_rows keys = kv_head_rows(r, r->kv->k, r->kv->v, layer, kv_head, seq->block_table + first / bs);
                kern->attn_scores(&keys, end - first, attn_split_queries(r, item), hd, group, hd, true, scale,
                                  attn_split_scores(r, item) + first, scores_stride);
        }
        thread_pool_barrier(r->pool);

        for (uint32_t query = ith; query < n_items * group; query += nth) {
                uint32_t item = query / group, t = item / hp->n_head_kv;
                kern->softmax_f16(attn_split_scores(r, item) + (query % group) * scores_stride, (size_t) b->positions[t] + 1);
        }
        thread_pool_barrier(r->pool);

        uint32_t first_row = 16 * ith / nth, end_row = 16 * (ith + 1) / nth;
        for (uint32_t item = 0; item < n_items && first_row < end_row; item++) {
                uint32_t t = item / hp->n_head_kv, kv_head = item % hp->n_head_kv;
                const struct batch_seq *seq = &b->seqs[b->seq_ids[t]];
                struct f16_rows values = kv_head_rows(r, r->kv->v, NULL, layer, kv_head, seq->block_table);
                kern->attn_values(&values, (uint32_t) b->positions[t] + 1, attn_split_scores(r, item), scores_stride, group,
                                  hd, 64, first_row, end_row - first_row, attn_split_lanes(r, item), lanes_stride);
        }
        thread_pool_barrier(r->pool);

        for (uint32_t query = ith; query < n_items * group; query += nth) {
                uint32_t item = query / group, t = item / hp->n_head_kv, kv_head = item % hp->n_head_kv;
                uint32_t n_ctx = (uint32_t) b->positions[t] + 1, g = query % group;
                kern->sum_lanes(attn_split_lanes(r, item) + g * lanes_stride, hd, n_ctx < 16 ? n_ctx : 16, hd,
                                attention_output(r, t, kv_head, g));
        }
}

static void swiglu(struct cpu_runner *r, const struct activations *a, unsigned ith, unsigned nth) {
        uint32_t n_ff = r->model->hp.n_ff;
        uint64_t begin, end;
        split(r->batch->n_tokens, ith, nth, &begin, &end);
        for (uint64_t t = begin; t < end; t++) {
                float *h = a->xn + t * n_ff;
                r->kernels->swiglu(h, r->gate + t * n_ff, r->up + t * n_ff, n_ff);
                quantize_row(r, a, h, t, n_ff);
        }
}

/* A tied output matrix's repacked rows give the embeddings: the file's pages were dropped
 * once repacked, and reading rows from the file faulted them back in, up to the whole
 * table (27 MiB of resident memory after a serving run). row_scratch holds one row's
 * blocks. */
static void embed(struct cpu_runner *r, float *row_scratch, unsigned ith, unsigned nth) {
        const struct model *m = r->model;
        const struct batch *b = r->batch;
        const struct packed_weights *packed = m->tied_output ? packed_for(r, n_matmul_weights(m) - 1) : NULL;
        uint64_t begin, end;
        split(b->n_tokens, ith, nth, &begin, &end);
        for (uint64_t t = begin; t < end; t++) {
                const void *row = m->token_embd.data + (uint64_t) b->tokens[t] * m->token_embd.row_bytes;
                if (packed) {
                        packed_weights_row(packed, b->tokens[t], row_scratch);
                        row = row_scratch;
                }
                tensor_row_to_float(m->token_embd.type, row, r->x + t * m->hp.n_embd, m->hp.n_embd);
        }
}

static void forward_worker(void *ctx, unsigned ith, unsigned nth) {
        struct cpu_runner *r = ctx;
        const struct model *m = r->model;
        const struct model_hparams *hp = &m->hp;
        const struct batch *b = r->batch;
        uint32_t T = b->n_tokens;
        float *row_scratch = r->thread_scratch + ith * r->thread_scratch_stride + r->attn_scores_floats;
        /* The phases that feed a matmul (norm, quantization, swiglu) run on every thread for
         * the whole batch when it is small, on the thread's own activations: no barrier
         * before the matmul. Otherwise the threads share them out. */
        bool small = r->own && T <= SMALL_BATCH;
        const struct activations *a = small ? &r->own[ith] : &r->shared;
        unsigned feed_ith = small ? 0 : ith, feed_nth = small ? 1 : nth;

        embed(r, row_scratch, ith, nth);
        rope_tables(r, ith, nth);
        barrier_before_matmul(r, 0, T, ith, nth);

        for (uint32_t layer = 0; layer < hp->n_layer; layer++) {
                const struct model_layer *l = &m->layers[layer];
                size_t w = (size_t) layer * WEIGHTS_PER_LAYER; /* the layer's first weight */

                norm_tokens(r, a, l->attn_norm, NULL, T, feed_ith, feed_nth, false);
                if (!small)
                        barrier_before_matmul(r, w + 0, T, ith, nth);
                matmul(r, w + 0, a, T, r->q, r->q_dim, false, row_scratch, ith, nth);
                matmul(r, w + 1, a, T, r->k, r->kv_dim, false, row_scratch, ith, nth);
                matmul(r, w + 2, a, T, r->v, r->kv_dim, false, row_scratch, ith, nth);
                barrier_before_matmul(r, w + 3, T, ith, nth);
                if (!r->store_own_kv) {
                        store_kv(r, layer, ith, nth);
                        barrier_before_matmul(r, w + 3, T, ith, nth);
                }
                if (r->shared_attention)
                        attention_shared(r, layer, ith, nth); /* into shared.xn */
                else
                        attention(r, layer, ith, nth); /* into shared.xn */
                barrier_before_matmul(r, w + 3, T, ith, nth);
                quantize_tokens(r, a, r->shared.xn, r->q_dim, T, feed_ith, feed_nth);
                if (!small)
                        barrier_before_matmul(r, w + 3, T, ith, nth);
                matmul(r, w + 3, a, T, r->x, hp->n_embd, true, row_scratch, ith, nth);
                barrier_before_matmul(r, w + 4, T, ith, nth);

                norm_tokens(r, a, l->ffn_norm, NULL, T, feed_ith, feed_nth, false);
                if (!small)
                        barrier_before_matmul(r, w + 4, T, ith, nth);
                matmul(r, w + 4, a, T, r->gate, hp->n_ff, false, row_scratch, ith, nth);
                matmul(r, w + 5, a, T, r->up, hp->n_ff, false, row_scratch, ith, nth);
                barrier_before_matmul(r, w + 6, T, ith, nth);
                swiglu(r, a, feed_ith, feed_nth);
                if (!small)
                        barrier_before_matmul(r, w + 6, T, ith, nth);
                matmul(r, w + 6, a, T, r->x, hp->n_embd, true, row_scratch, ith, nth);
                if (layer + 1 < hp->n_layer)
                        barrier_before_matmul(r, w + WEIGHTS_PER_LAYER, T, ith, nth);
                else
                        barrier_before_matmul(r, n_matmul_weights(m) - 1, b->n_outputs, ith, nth);
        }

        bool packed_logits = packed_for(r, n_matmul_weights(m) - 1) && logits_product(m, n_matmul_weights(m) - 1);
        norm_tokens(r, a, m->output_norm, b->output_tokens, b->n_outputs, feed_ith, feed_nth, packed_logits);
        if (!small)
                barrier_before_matmul(r, n_matmul_weights(m) - 1, b->n_outputs, ith, nth);
        matmul(r, n_matmul_weights(m) - 1, a, b->n_outputs, r->logits, hp->n_vocab, false, row_scratch, ith, nth);
}

static int validate_batch(const struct cpu_runner *r, const struct batch *b, struct error *err) {
        const struct model_hparams *hp = &r->model->hp;
        if (b->n_tokens == 0 || b->n_tokens > r->config.max_batch_tokens)
                return error_set(err, EINVAL, "batch of %u tokens; 1 to %u allowed", b->n_tokens, r->config.max_batch_tokens);
        if (b->n_outputs > b->n_tokens)
                return error_set(err, EINVAL, "batch asks for %u outputs from %u tokens", b->n_outputs, b->n_tokens);
        for (uint32_t i = 0; i < b->n_outputs; i++) {
                if (b->output_tokens[i] < 0 || (uint32_t) b->output_tokens[i] >= b->n_tokens)
                        return error_set(err, EINVAL, "output token index %d out of range", b->output_tokens[i]);
                if (i > 0 && b->output_tokens[i] <= b->output_tokens[i - 1])
                        return error_set(err, EINVAL, "output token indices must rise: %d follows %d",
                                         b->output_tokens[i], b->output_tokens[i - 1]);
        }
        for (uint32_t t = 0; t < b->n_tokens; t++) {
                if (b->tokens[t] < 0 || (uint32_t) b->tokens[t] >= hp->n_vocab)
                        return error_set(err, EINVAL, "token id %d outside the vocabulary [0, %u)", b->tokens[t], hp->n_vocab);
                if (b->seq_ids[t] < 0 || (uint32_t) b->seq_ids[t] >= b->n_seqs)
                        return error_set(err, EINVAL, "token %u names sequence %d of %u", t, b->seq_ids[t], b->n_seqs);
                const struct batch_seq *seq = &b->seqs[b->seq_ids[t]];
                int32_t pos = b->positions[t];
                if (pos < 0 || (uint32_t) pos >= r->config.max_model_len ||
                    (uint32_t) pos / r->kv->block_size >= seq->n_blocks)
                        return error_set(err, EINVAL, "position %d is outside its sequence's %u KV blocks (max_model_len %u)",
                                         pos, seq->n_blocks, r->config.max_model_len);
                for (uint32_t j = 0; j <= (uint32_t) pos / r->kv->block_size; j++)
                        if (seq->block_table[j] < 0 || (uint32_t) seq->block_table[j] >= r->kv->n_blocks)
                                return error_set(err, EINVAL, "block id %d outside the KV pool of %u blocks",
                                                 seq->block_table[j], r->kv->n_blocks);
        }
        return 0;
}

static void run_slice(struct cpu_runner *r, const struct batch *slice, float *logits) {
        unsigned nth = r->config.n_threads;
        for (size_t i = 0; i < n_matmul_weights(r->model); i++) {
                const struct packed_weights *packed = packed_for(r, i);
                if (packed)
                        matmul_shares_reset(&r->shares[i * nth], nth, packed->n_groups);
        }
        r->batch = slice;
        r->logits = logits;
        r->store_own_kv = attention_stores_own_kv(slice);
        r->shared_attention = attention_is_shared(r, r->store_own_kv, nth);
        thread_pool_run(r->pool, forward_worker, r);
        r->batch = NULL;
        r->logits = NULL;
}

int cpu_runner_forward(struct cpu_runner *r, const struct batch *batch, float *logits, struct error *err) {
        static const char *const what[] = {
                [BACKEND_MEMORY_WEIGHTS] = "model weights are",
                [BACKEND_MEMORY_KV_CACHE] = "KV cache is",
                [BACKEND_MEMORY_WEIGHTS | BACKEND_MEMORY_KV_CACHE] = "model weights and the KV cache are",
        };
        if (r->released)
                return error_set(err, EBUSY, "cannot run a step: the %s released (the engine is asleep)",
                                 what[r->released]);
        int rc = validate_batch(r, batch, err);
        if (rc < 0)
                return rc;
        /* A long step goes through the layers in slices of consecutive tokens: a slice's
         * tokens read the keys and values of earlier slices' tokens as a later chunk reads
         * an earlier chunk's, so each token gets the bits it would get in one slice. */
        uint32_t n_vocab = r->model->hp.n_vocab, out = 0;
        for (uint32_t first = 0; first < batch->n_tokens; first += r->slice_tokens) {
                uint32_t n = batch->n_tokens - first < r->slice_tokens ? batch->n_tokens - first : r->slice_tokens;
                uint32_t n_out = 0;
                for (; out + n_out < batch->n_outputs && (uint32_t) batch->output_tokens[out + n_out] < first + n; n_out++)
                        r->slice_outputs[n_out] = batch->output_tokens[out + n_out] - (int32_t) first;
                struct batch slice = {
                        .n_tokens = n,
                        .tokens = batch->tokens + first,
                        .positions = batch->positions + first,
                        .seq_ids = batch->seq_ids + first,
                        .n_seqs = batch->n_seqs,
                        .seqs = batch->seqs,
                        .n_outputs = n_out,
                        .output_tokens = r->slice_outputs,
                };
                run_slice(r, &slice, logits ? logits + (size_t) out * n_vocab : NULL);
                out += n_out;
        }
        return 0;
}

static int check_memory_bits(unsigned what, struct error *err) {
        if (what & ~(unsigned) (BACKEND_MEMORY_WEIGHTS | BACKEND_MEMORY_KV_CACHE))
                return error_set(err, EINVAL, "unknown backend memory bits 0x%x", what);
        return 0;
}

/* The runner holds its model const because nothing it does changes what the model computes.
 * Neither does giving the file's pages back and mapping the same bytes again, so that goes
 * through the model's file pointer (not itself const) rather than through a new model API. */

int cpu_runner_release_memory(struct cpu_runner *r, unsigned what, struct error *err) {
        int rc = check_memory_bits(what, err);
        if (rc < 0)
                return rc;
        /* the weights first: only they can fail, and then nothing has changed */
        if (what & BACKEND_MEMORY_WEIGHTS) {
                if ((rc = gguf_release_mapping(r->model->file, err)) < 0)
                        return rc;
                packed_model_free(&r->packed);
                r->released |= BACKEND_MEMORY_WEIGHTS;
        }
        if (what & BACKEND_MEMORY_KV_CACHE) {
                kv_pool_release(r->kv);
                r->released |= BACKEND_MEMORY_KV_CACHE;
        }
        return 0;
}

int cpu_runner_restore_memory(struct cpu_runner *r, unsigned what, struct error *err) {
        int rc = check_memory_bits(what, err);
        if (rc < 0)
                return rc;
        /* restoring what is not released does nothing (and must not build a second packed copy) */
        if ((what & BACKEND_MEMORY_WEIGHTS) && (r->released & BACKEND_MEMORY_WEIGHTS)) {
                if ((rc = gguf_restore_mapping(r->model->file, err)) < 0)
                        return rc;
                if (r->use_packed && (rc = packed_model_build(r, err)) < 0) {
                        /* back to asleep: the state the call found */
                        struct error ignored;
                        (void) gguf_release_mapping(r->model->file, &ignored);
                        return rc;
                }
                r->released &= ~(unsigned) BACKEND_MEMORY_WEIGHTS;
        }
        if (what & BACKEND_MEMORY_KV_CACHE) {
                if ((rc = kv_pool_restore(r->kv, err)) < 0)
                        return rc;
                r->released &= ~(unsigned) BACKEND_MEMORY_KV_CACHE;
        }
        return 0;
}

void cpu_runner_memory_usage(const struct cpu_runner *r, struct backend_memory_usage *ret) {
        *ret = (struct backend_memory_usage) {
                .weights_bytes = r->released & BACKEND_MEMORY_WEIGHTS ? 0 : r->model->file->size,
                .kv_cache_bytes = kv_pool_bytes(r->kv),
                .scratch_bytes = r->scratch_bytes,
                .released = r->released,
        };
}

static int backend_forward(void *impl, const struct batch *batch, float *logits, struct error *err) {
        return cpu_runner_forward(impl, batch, logits, err);
}

static int backend_release_memory(void *impl, unsigned what, struct error *err) {
        return cpu_runner_release_memory(impl, what, err);
}

static int backend_restore_memory(void *impl, unsigned what, struct error *err) {
        return cpu_runner_restore_memory(impl, what, err);
}

static void backend_memory_usage(void *impl, unsigned worker, struct backend_memory_usage *ret) {
        cpu_runner_memory_usage(impl, ret);
}

struct backend cpu_runner_backend(struct cpu_runner *runner) {
        return (struct backend) {
                .impl = runner,
                .forward = backend_forward,
                .release_memory = backend_release_memory,
                .restore_memory = backend_restore_memory,
                .n_workers = 1,
                .memory_usage = backend_memory_usage,
        };
}
