/* SPDX-License-Identifier: MIT */
/* Today's 4x4 tile against the packed product on packed weights, on one thread, for the
 * matmul shapes of SmolLM2-135M: decode (one token) streaming ~100 MB of distinct copies of
 * the matrix as a forward pass does (cold), the same with one copy that stays in cache (hot),
 * a 32-sequence decode step streaming the copies (batch-cold) and from cache (batch-hot),
 * --batch-tokens for another batch, and a 512-token prefill. The
 * two run interleaved, alternating which goes first; medians. With --single (Q4_0, Q8_0) the
 * packed side runs the single-accumulator product instead (Q4_0 matrices of 8k rows and the
 * Q8_0 logits take it in the model), and the output's shape gets a batch-cold run too. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench-util.h"
#include "clock.h"
#include "dot.h"
#include "float16.h"
#include "packed-weights.h"
#include "tensor-types.h"
#include "../tests/test-random.h"


struct shape {
        const char *name;
        uint64_t rows, cols;
        bool prefill; /* also time a 32-token batch and 512 tokens */
};

struct matrices {
        enum tensor_type type;
        uint64_t rows, cols, n_blocks, row_bytes, n_copies;
        uint8_t *original;              /* n_copies matrices, one after the other */
        uint8_t *arena;                 /* their packed copies, one after the other */
        struct packed_weights *packed;  /* n_copies */
};

static bool huge_pages;

/* 2 MiB-aligned, with large pages asked for when --huge-pages is given. */
static void *alloc_stream(uint64_t bytes) {
        uint64_t size = (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
        void *p = aligned_alloc(2u << 20, size);
        if (p && huge_pages)
                (void) madvise(p, size, MADV_HUGEPAGE);
        return p;
}

static int matrices_new(enum tensor_type type, const struct shape *s, uint64_t total_bytes, struct matrices *m) {
        *m = (struct matrices) { .type = type, .rows = s->rows, .cols = s->cols, .n_blocks = s->cols / QUANT_BLOCK };
        m->row_bytes = tensor_row_bytes(type, s->cols);
        uint64_t bytes = m->rows * m->row_bytes;
        m->n_copies = total_bytes / bytes ? total_bytes / bytes : 1;
        m->original = alloc_stream(m->n_copies * bytes);
        m->packed = calloc(m->n_copies, sizeof(*m->packed));
        if (!m->original || !m->packed || packed_weights_init(&m->packed[0], type, m->rows, m->cols) < 0)
                return -1;
        uint64_t packed_bytes = packed_weights_bytes(&m->packed[0]);
        if (!(m->arena = alloc_stream(m->n_copies * packed_bytes)))
                return -1;
        size_t block_bytes = tensor_type_info(type)->block_bytes;
        for (uint64_t i = 0; i < m->n_copies * bytes; i++)
                m->original[i] = (uint8_t) next_u32();
        for (uint64_t b = 0; b < m->n_copies * m->rows * m->n_blocks; b++) {
                f16_bits d = f32_to_f16(next_float(0.05f)), mm = f32_to_f16(next_float(0.1f));
                memcpy(m->original + b * block_bytes, &d, 2);
                if (type == TENSOR_Q4_1 || type == TENSOR_Q5_1)
                        memcpy(m->original + b * block_bytes + 2, &mm, 2);
        }
        for (uint64_t c = 0; c < m->n_copies; c++) {
                m->packed[c] = m->packed[0];
                packed_weights_fill(&m->packed[c], m->arena + c * packed_bytes, m->original + c * bytes, m->row_bytes);
        }
        return 0;
}

static void matrices_free(struct matrices *m) {
        free(m->arena);
        free(m->packed);
        free(m->original);
}

struct acts {
        struct block_q8_1 *xq;
        float *ds;
        int32_t *corrections;
        int32_t *block_sums;
};

static bool single;

/* The runner's tile loop: four rows at a time, each tile meeting the tokens four at a time. */
static void run_tiles(const struct dot_kernels *k, const struct matrices *m, uint64_t copy, const struct acts *a,
                      unsigned n_tokens, float *out) {
        dot_tile_fn tile = dot_tile_kernel_for(k, m->type);
        const uint8_t *data = m->original + copy * m->rows * m->row_bytes;
        for (uint64_t row0 = 0; row0 + DOT_TILE_ROWS <= m->rows; row0 += DOT_TILE_ROWS)
                for (unsigned t0 = 0; t0 < n_tokens; t0 += DOT_TILE_TOKENS) {
                        unsigned n = n_tokens - t0 < DOT_TILE_TOKENS ? n_tokens - t0 : DOT_TILE_TOKENS;
                        float v[DOT_TILE_TOKENS * DOT_TILE_ROWS];
                        tile(data + row0 * m->row_bytes, m->row_bytes, a->xq + t0 * m->n_blocks, a->ds + 2 * t0 * m->n_blocks,
                             m->n_blocks, n, m->n_blocks, v);
                        for (unsigned t = 0; t < n; t++)
                                for (unsigned r = 0; r < DOT_TILE_ROWS; r++)
                                        out[(t0 + t) * m->rows + row0 + r] = v[t * DOT_TILE_ROWS + r];
                }
}

/* The packed product: one call over all groups and tokens (per group, the tokens pass
 * over its weights while they stay in L1). */
static void run_packed(const struct dot_kernels *k, const struct matrices *m, uint64_t copy, const struct acts *a,
                       unsigned n_tokens, float *out) {
        const struct packed_weights *p = &m->packed[copy];
        struct packed_activations pa = { a->xq, a->ds, a->corrections, m->n_blocks, a->block_sums };
        dot_packed_fn fn = single ? k->packed_single_accumulator : dot_packed_kernel_for(k, m->type);
        fn(p, 0, p->n_groups, &pa, n_tokens, out, m->rows, false);
}

/* A plain read of the same bytes, for the bandwidth one core gets. */
static uint64_t read_all(const uint8_t *p, uint64_t bytes) {
        uint64_t acc[8] = { 0 };
        for (uint64_t i = 0; i + 64 <= bytes; i += 64)
                for (int j = 0; j < 8; j++) {
                        uint64_t v;
                        memcpy(&v, p + i + 8 * j, sizeof(v));
                        acc[j] ^= v;
                }
        return acc[0] ^ acc[1] ^ acc[2] ^ acc[3] ^ acc[4] ^ acc[5] ^ acc[6] ^ acc[7];
}

static volatile uint64_t read_sink;

static double median(double *v, unsigned n) {
        qsort(v, n, sizeof(double), bench_compare_double);
        return v[n / 2];
}

/* Times both over `passes` matrices (distinct copies when cold), reps times, interleaved. */
static void measure(const struct dot_kernels *k, const struct matrices *m, const char *shape, const char *mode,
                    const struct acts *a, unsigned n_tokens, uint64_t passes, bool cold, unsigned reps, float *out) {
        double tile_ns[64], packed_ns[64], read_ns[64];
        for (unsigned rep = 0; rep < reps; rep++) {
                if (cold) {
                        double start = monotonic_seconds();
                        read_sink ^= read_all(m->original, m->n_copies * m->rows * m->row_bytes);
                        read_ns[rep] = (monotonic_seconds() - start) * 1e9;
                }
                for (unsigned which = 0; which < 2; which++) {
                        bool packed = (which + rep) % 2 == 1;
                        double start = monotonic_seconds();
                        for (uint64_t i = 0; i < passes; i++) {
                                uint64_t copy = cold ? i % m->n_copies : 0;
                                if (packed)
                                        run_packed(k, m, copy, a, n_tokens, out);
                                else
                                        run_tiles(k, m, copy, a, n_tokens, out);
                        }
                        (packed ? packed_ns : tile_ns)[rep] = (monotonic_seconds() - start) * 1e9;
                }
        }
        double t = median(tile_ns, reps), p = median(packed_ns, reps);
        double products = (double) passes * (double) m->rows * (double) m->n_blocks * n_tokens;
        double bytes = (double) passes * (double) (m->rows * m->row_bytes);
        printf("{\"shape\": \"%s\", \"type\": \"%s\", \"mode\": \"%s\", \"tokens\": %u, \"kernels\": \"%s\", "
               "\"tile_ms\": %.3f, \"packed_ms\": %.3f, \"tile_ns_per_block\": %.4f, \"packed_ns_per_block\": %.4f, "
               "\"tile_gbps\": %.2f, \"packed_gbps\": %.2f, \"plain_read_gbps\": %.2f, \"speedup\": %.2f}\n",
               shape, tensor_type_info(m->type)->name, mode, n_tokens, k->name, t / 1e6, p / 1e6, t / products, p / products,
               bytes / t, bytes / p, cold ? (double) (m->n_copies * m->rows * m->row_bytes) / median(read_ns, reps) : 0.0, t / p);
        fflush(stdout);
}

static void usage(FILE *f) {
        fprintf(f, "Usage: bench-packed-dot [--type q4_1|q4_0|q5_0|q5_1|q8_0] [--single] [--kernels NAME] [--reps N] [--mbytes N] [--no-prefill]\n"
                   "                        [--batch-tokens N] [--huge-pages]\n");
}

int main(int argc, char **argv) {
        static const struct shape shapes[] = {
                { "576x576", 576, 576, true },
                { "1536x576", 1536, 576, true },
                { "576x1536", 576, 1536, true },
                { "49152x576", 49152, 576, false },
        };
        static const struct option options[] = {
                { "type", required_argument, NULL, 'T' }, { "kernels", required_argument, NULL, 'k' },
                { "reps", required_argument, NULL, 'r' }, { "mbytes", required_argument, NULL, 'm' },
                { "no-prefill", no_argument, NULL, 'P' }, { "huge-pages", no_argument, NULL, 'H' },
                { "single", no_argument, NULL, 'L' }, { "batch-tokens", required_argument, NULL, 'B' },
                { "help", no_argument, NULL, 'h' },
                { NULL, 0, NULL, 0 },
        };
        enum tensor_type type = TENSOR_Q4_1;
        const struct dot_kernels *k;
        struct error err;
        if (dot_kernels_select(&k, &err) < 0) {
                fprintf(stderr, "bench-packed-dot: %s\n", err.message);
                return 1;
        }
        unsigned reps = 7, mbytes = 100, batch_tokens = 32;
        bool prefill = true;
        int c;
        while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1)
                switch (c) {
                case 'T':
                        type = strcmp(optarg, "q4_0") == 0   ? TENSOR_Q4_0
                               : strcmp(optarg, "q5_0") == 0 ? TENSOR_Q5_0
                               : strcmp(optarg, "q5_1") == 0 ? TENSOR_Q5_1
                               : strcmp(optarg, "q8_0") == 0 ? TENSOR_Q8_0
                                                             : TENSOR_Q4_1;
                        break;
                case 'k':
                        if (!(k = dot_kernels_by_name(optarg))) {
                                fprintf(stderr, "bench-packed-dot: no kernel set %s here\n", optarg);
                                return 1;
                        }
                        break;
                case 'r':
                        if (bench_parse_uint(optarg, &reps) < 0 || reps < 1 || reps > 64)
                                return usage(stderr), 2;
                        break;
                case 'm':
                        if (bench_parse_uint(optarg, &mbytes) < 0 || mbytes < 1)
                                return usage(stderr), 2;
                        break;
                case 'B':
                        if (bench_parse_uint(optarg, &batch_tokens) < 0 || batch_tokens < 1 || batch_tokens > 32)
                                return usage(stderr), 2;
                        break;
                case 'P': prefill = false; break;
                case 'H': huge_pages = true; break;
                case 'L': single = true; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }

        if (single && type != TENSOR_Q8_0 && type != TENSOR_Q4_0) {
                fprintf(stderr, "bench-packed-dot: --single is a product of Q4_0 and Q8_0 weights; add --type q4_0 or --type q8_0\n");
                return 2;
        }
        const unsigned n_prefill = 512;
        uint64_t max_blocks = 1536 / QUANT_BLOCK;
        struct acts a = {
                .xq = malloc(sizeof(struct block_q8_1) * n_prefill * max_blocks),
                .ds = malloc(sizeof(float) * 2 * n_prefill * max_blocks),
                .corrections = malloc(sizeof(int32_t) * PACKED_CORRECTIONS * n_prefill * max_blocks),
                .block_sums = malloc(sizeof(int32_t) * n_prefill * max_blocks),
        };
        /* the widest result: 32 tokens of the output's rows (batch-cold with --single) */
        float *out = malloc(sizeof(float) * 49152 * 32 > sizeof(float) * 1536 * n_prefill ? sizeof(float) * 49152 * 32
                                                                                           : sizeof(float) * 1536 * n_prefill);
        if (!a.xq || !a.ds || !a.corrections || !a.block_sums || !out)
                return 1;
        float x[1536];

        for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
                const struct shape *s = &shapes[si];
                struct matrices m;
                if (matrices_new(type, s, (uint64_t) mbytes << 20, &m) < 0) {
                        fprintf(stderr, "bench-packed-dot: out of memory\n");
                        return 1;
                }
                for (unsigned t = 0; t < n_prefill; t++) {
                        for (unsigned i = 0; i < s->cols; i++)
                                x[i] = next_float(3.0f);
                        k->quantize_q8_1(x, a.xq + t * m.n_blocks, a.ds + 2 * t * m.n_blocks, s->cols);
                        packed_activation_corrections(a.xq + t * m.n_blocks, m.n_blocks,
                                                      a.corrections + t * m.n_blocks * PACKED_CORRECTIONS);
                        packed_block_sums(a.xq + t * m.n_blocks, m.n_blocks, a.block_sums + t * m.n_blocks);
                }
                measure(k, &m, s->name, "decode-cold", &a, 1, m.n_copies, true, reps, out);
                measure(k, &m, s->name, "decode-hot", &a, 1, m.n_copies, false, reps, out);
                if (prefill && (s->prefill || single))
                        measure(k, &m, s->name, "batch-cold", &a, batch_tokens, m.n_copies, true, reps, out);
                if (prefill && s->prefill) {
                        measure(k, &m, s->name, "batch-hot", &a, batch_tokens, m.n_copies, false, reps, out);
                        measure(k, &m, s->name, "prefill", &a, n_prefill, 3, false, reps, out);
                }
                matrices_free(&m);
        }
        free(a.xq);
        free(a.ds);
        free(a.corrections);
        free(a.block_sums);
        free(out);
        return 0;
}
