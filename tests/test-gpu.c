/* SPDX-License-Identifier: MIT */
/* The CUDA backend on a GPU: the linked libraries' versions always; where a GPU exists, the
 * matmul kernels of every weight type against the host model of their arithmetic
 * (tests/gpu-host-model.h), bit for bit, at every token count; then the real model through
 * the backend: a sequence's logits the same bits alone, in a batch of 8 or 64 and in any
 * chunking, replayed from CUDA graphs or launched eagerly, and the CPU backend's bits; sleep
 * gives back what it releases on the device, and after wake-up the outputs are the same bits
 * and no graph is captured again; the model split over a tensor-parallel group of ranks on the
 * one device gives the same bits; and models of SmolLM2's shape with the weight types the real
 * file lacks (Q5_0, Q5_1, written here) give the CPU backend's bits, those with K-quants (of
 * widths that are multiples of 256) its logits within a tolerance, the same bits alone and
 * batched. Without a GPU the test says so and exits 77, which the
 * harness counts as a skip, not a pass. scripts/gpu-check runs it with the model tests on the
 * GPU. With --nccl (tests/test-gpu-nccl.sh) it runs the split over GPUs instead. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend-open.h"
#include "cuda-ops.h"
#include "cuda-runner.h"
#include "float16.h"
#include "gpu-device.h"
#include "gpu-host-model.h"
#include "model.h"
#include "synthetic-llama.h"
#include "tensor-parallel.h"
#include "test-random.h"

#define MAX_COLS 1536
#define MAX_ROWS 300
#define MAX_TOKENS 300
#define BLOCK_SIZE 16
#define MAX_LEN 1024
#define MAX_SEQS 64

static int failures;

#define CHECK(cond, ...)                                    \
        do {                                                \
                if (!(cond)) {                              \
                        failures++;                         \
                        printf("FAIL %s:%d: ", __FILE__, __LINE__); \
                        printf(__VA_ARGS__);                \
                        printf("\n");                       \
                }                                           \
        } while (0)

/* Random rows of a weight of type in the file's layout (the K-quants quantized from random
 * floats, the others random quants with small scales). */
static void random_weight(enum tensor_type type, uint32_t n_rows, uint32_t n_cols, uint8_t *data, struct weight *w) {
        static float values[MAX_ROWS * MAX_COLS];
        uint64_t row_bytes = tensor_row_bytes(type, n_cols);
        *w = (struct weight) { type, n_rows, n_cols, row_bytes, data };
        if (gpu_k_quant(gpu_weight_kind_of(type))) {
                for (uint64_t i = 0; i < (uint64_t) n_rows * n_cols; i++)
                        values[i] = next_float(0.1f);
                test_quantize_row(type, values, data, (uint64_t) n_rows * n_cols);
                return;
        }
        for (uint64_t i = 0; i < n_rows * row_bytes; i++)
                data[i] = (uint8_t) next_u32();
        uint32_t block_bytes = tensor_type_info(type)->block_bytes;
        for (uint32_t r = 0; r < n_rows; r++)
                for (uint32_t c = 0; c < n_cols; c += tensor_type_info(type)->block_size) {
                        uint8_t *p = data + r * row_bytes + (uint64_t) c / tensor_type_info(type)->block_size * block_bytes;
                        if (type == TENSOR_F32) {
                                float v = next_float(0.1f);
                                memcpy(p, &v, 4);
                        } else if (type == TENSOR_F16 || type == TENSOR_BF16) {
                                float v = next_float(0.1f);
                                uint16_t h = type == TENSOR_F16 ? f32_to_f16(v) : (uint16_t) (f32_to_bits(v) >> 16);
                                memcpy(p, &h, 2);
                        } else {
                                f16_bits d = f32_to_f16(next_float(0.05f)), m = f32_to_f16(next_float(0.1f));
                                memcpy(p, &d, 2);
                                if (type == TENSOR_Q4_1 || type == TENSOR_Q5_1)
                                        memcpy(p + 2, &m, 2);
                        }
                }
}

/* Each matmul kernel against the host model, bit for bit: the quantized activations and
 * every output, for token counts that take each tile width of the kernel. */
static void check_matmuls(void) {
        static const enum tensor_type types[] = { TENSOR_Q4_0, TENSOR_Q4_1, TENSOR_Q5_0, TENSOR_Q5_1, TENSOR_Q2_K,
                                                  TENSOR_Q3_K, TENSOR_Q4_K, TENSOR_Q5_K, TENSOR_Q6_K, TENSOR_Q8_0,
                                                  TENSOR_F16,  TENSOR_BF16, TENSOR_F32 };
        static const uint32_t shapes[][2] = { { 300, 576 }, { 77, 1536 }, { 5, 32 }, { 192, 64 }, { 40, 256 } };
        static const uint32_t token_counts[] = { 1, 2, 3, 5, 8, 13, 40, 100, 300 }; /* every tile width */
        enum { ROW_QUANTS = MAX_COLS + 3 * 32, ROW_SCALES = 2 * (MAX_COLS / 32 + 3) };
        static uint8_t data[MAX_ROWS * MAX_COLS * 4], quants[MAX_ROWS * ROW_QUANTS];
        static uint32_t scales[MAX_ROWS * ROW_SCALES];
        static float x[MAX_TOKENS * MAX_COLS], out[MAX_TOKENS * MAX_ROWS], ds[MAX_TOKENS * MAX_COLS / 16],
                want_ds[MAX_COLS / 16];
        static int8_t xq[MAX_TOKENS * MAX_COLS], want_q[MAX_COLS];
        size_t n_checked = 0;
        for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++)
                for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
                        for (size_t ni = 0; ni < sizeof(token_counts) / sizeof(token_counts[0]); ni++) {
                                uint32_t rows = shapes[si][0], cols = shapes[si][1], n = token_counts[ni];
                                if (cols % tensor_type_info(types[ti])->block_size)
                                        continue;
                                struct weight w;
                                struct error err;
                                random_weight(types[ti], rows, cols, data, &w);
                                for (uint32_t i = 0; i < n * cols; i++)
                                        x[i] = next_float(ni % 2 ? 8.0f : 1.0f);
                                bool is_output = si == 0; /* Q8_0 takes the logits' order */
                                if (cuda_ops_matmul(&w, x, n, is_output, out, xq, ds, &err) < 0) {
                                        CHECK(0, "%s", err.message);
                                        return;
                                }
                                enum gpu_weight_kind kind = gpu_weight_kind_of(types[ti]);
                                uint32_t mismatches = 0;
                                for (uint32_t r = 0; kind <= GPU_WEIGHT_Q8_0 && r < rows; r++)
                                        gpu_repack_row(kind, w.data + r * w.row_bytes, tensor_type_info(types[ti])->block_bytes,
                                                       cols / 32, quants + r * ROW_QUANTS, scales + r * ROW_SCALES);
                                for (uint32_t t = 0; t < n; t++) {
                                        host_quantize_row(x + t * cols, cols, want_q, want_ds);
                                        mismatches += memcmp(want_q, xq + t * cols, cols) != 0;
                                        for (uint32_t b = 0; b < cols / 16; b++)
                                                mismatches += f32_to_bits(want_ds[b]) != f32_to_bits(ds[t * cols / 16 + b]);
                                        for (uint32_t r = 0; r < rows; r++) {
                                                float want;
                                                if (kind <= GPU_WEIGHT_Q8_0)
                                                        want = host_row_dot(kind, quants + r * ROW_QUANTS, scales + r * ROW_SCALES,
                                                                            cols / 32, want_q, want_ds,
                                                                            weight_single_accumulator(&w, is_output));
                                                else
                                                        want = host_row_dot_float(kind, w.data + r * w.row_bytes, cols, x + t * cols);
                                                if (f32_to_bits(want) != f32_to_bits(out[t * rows + r]) && mismatches++ < 3)
                                                        printf("  %s %ux%u, %u tokens: token %u row %u: device %.9g, host %.9g\n",
                                                               tensor_type_info(types[ti])->name, rows, cols, n, t, r,
                                                               out[t * rows + r], want);
                                        }
                                }
                                CHECK(mismatches == 0, "%s %ux%u with %u tokens: %u values differ from the host model",
                                      tensor_type_info(types[ti])->name, rows, cols, n, mismatches);
                                n_checked++;
                        }
        printf("matmul kernels: %zu shapes and token counts checked bit for bit against the host model\n", n_checked);
}

/* Sequences driven through the backend by hand: each its own blocks of the pool. */
struct seqs {
        int32_t tables[MAX_SEQS][MAX_LEN / BLOCK_SIZE];
        struct batch_seq seqs[MAX_SEQS];
        uint32_t len[MAX_SEQS];
};

static void seqs_init(struct seqs *s, uint32_t n, uint32_t prompt_len) {
        memset(s, 0, sizeof(*s));
        for (uint32_t i = 0; i < n; i++) {
                for (uint32_t b = 0; b < MAX_LEN / BLOCK_SIZE; b++)
                        s->tables[i][b] = (int32_t) (i * (MAX_LEN / BLOCK_SIZE) + b);
                s->seqs[i] = (struct batch_seq) { s->tables[i], MAX_LEN / BLOCK_SIZE, prompt_len };
        }
}

/* One step: n_take[i] tokens of sequence i (from tokens[i] at its length), the last of each
 * asked for; the logits rows copied into logits (one per sequence that took tokens). */
static int step(const struct backend *b, struct seqs *s, uint32_t n_seqs, int32_t *const *tokens, const uint32_t *n_take,
                float *logits, uint32_t n_vocab) {
        static int32_t tok[MAX_SEQS * MAX_LEN], pos[MAX_SEQS * MAX_LEN], sid[MAX_SEQS * MAX_LEN], outs[MAX_SEQS];
        uint32_t n = 0, n_out = 0;
        for (uint32_t i = 0; i < n_seqs; i++) {
                for (uint32_t j = 0; j < n_take[i]; j++, n++) {
                        tok[n] = tokens[i][s->len[i] + j];
                        pos[n] = (int32_t) (s->len[i] + j);
                        sid[n] = (int32_t) i;
                }
                if (n_take[i])
                        outs[n_out++] = (int32_t) n - 1;
                s->len[i] += n_take[i];
        }
        struct batch batch = { .n_tokens = n, .tokens = tok, .positions = pos, .seq_ids = sid,
                .n_seqs = n_seqs, .seqs = s->seqs, .n_outputs = n_out, .output_tokens = outs };
        float *rows;
        struct error err;
        if (b->forward(b->impl, &batch, &rows, &err) < 0) {
                CHECK(0, "forward: %s", err.message);
                return -1;
        }
        memcpy(logits, rows, (size_t) n_out * n_vocab * sizeof(float));
        return 0;
}

/* Sequence 0's logits after its prompt and after each of 4 decode steps, run with n_others
 * other sequences beside it, its prompt fed chunk tokens at a time. */
static int run_sequence(const struct backend *b, uint32_t n_vocab, int32_t *const *tokens, uint32_t prompt_len,
                        uint32_t n_others, uint32_t chunk, float *trace) {
        static struct seqs s;
        static float logits[(MAX_SEQS) * 49152 * 1];
        uint32_t n = 1 + n_others, take[MAX_SEQS];
        if ((size_t) n * n_vocab > sizeof(logits) / sizeof(float))
                return -1;
        seqs_init(&s, n, prompt_len);
        uint32_t row = 0;
        while (s.len[0] < prompt_len + 4) {
                for (uint32_t i = 0; i < n; i++) {
                        uint32_t left = prompt_len - (s.len[i] < prompt_len ? s.len[i] : prompt_len);
                        take[i] = left ? (left < chunk ? left : chunk) : 1;
                }
                if (step(b, &s, n, tokens, take, logits, n_vocab) < 0)
                        return -1;
                if (s.len[0] >= prompt_len)
                        memcpy(trace + (size_t) row++ * n_vocab, logits, n_vocab * sizeof(float));
        }
        return (int) row;
}

static double now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int compare_doubles(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return (x > y) - (x < y);
}

/* What a step costs through the backend alone, for the notes (no target is checked here):
 * the median wall time of decode steps of n sequences at context 100, and of one 512-token
 * prompt. */
static void report_step_times(const struct backend *b, const char *how, uint32_t n_vocab, int32_t *const *tokens) {
        static struct seqs s;
        static float logits[MAX_SEQS * 49152];
        static const uint32_t batch_sizes[] = { 1, 8, 32, 64 };
        uint32_t take[MAX_SEQS];
        double times[64];
        for (size_t k = 0; k < sizeof(batch_sizes) / sizeof(batch_sizes[0]); k++) {
                uint32_t n = batch_sizes[k];
                seqs_init(&s, n, 100);
                for (uint32_t i = 0; i < n; i++)
                        take[i] = 100;
                if (step(b, &s, n, tokens, take, logits, n_vocab) < 0)
                        return;
                for (uint32_t i = 0; i < n; i++)
                        take[i] = 1;
                for (int r = 0; r < 64; r++) {
                        double t0 = now();
                        if (step(b, &s, n, tokens, take, logits, n_vocab) < 0)
                                return;
                        times[r] = now() - t0;
                }
                qsort(times, 64, sizeof(double), compare_doubles);
                printf("timing: %s decode step of %u sequences at context 100: median %.3f ms\n", how, n, times[32] * 1e3);
        }
        for (int r = 0; r < 9; r++) {
                seqs_init(&s, 1, 512);
                take[0] = 512;
                double t0 = now();
                if (step(b, &s, 1, tokens, take, logits, n_vocab) < 0)
                        return;
                times[r] = now() - t0;
        }
        qsort(times, 9, sizeof(double), compare_doubles);
        printf("timing: %s one 512-token prompt: median %.3f ms\n", how, times[4] * 1e3);
}

static int32_t token_store[MAX_SEQS][MAX_LEN];

/* Random prompts of MAX_LEN tokens for MAX_SEQS sequences. */
static void random_tokens(uint32_t n_vocab, int32_t **tokens) {
        for (uint32_t i = 0; i < MAX_SEQS; i++) {
                tokens[i] = token_store[i];
                for (uint32_t j = 0; j < MAX_LEN; j++)
                        token_store[i][j] = (int32_t) (next_u32() % n_vocab);
        }
}

static struct backend_options model_options(void) {
        return (struct backend_options) {
                .n_threads = 1, .max_batch_tokens = 8192, .max_model_len = MAX_LEN, .block_size = BLOCK_SIZE,
                .n_kv_blocks = MAX_SEQS * MAX_LEN / BLOCK_SIZE,
        };
}

/* The smallest tensor-parallel size above 1 that splits the model's heads, or 0. */
static uint32_t split_size(const struct model *model) {
        struct error err;
        for (uint32_t size = 2; size <= model->hp.n_head_kv; size++)
                if (tp_size_check(&model->hp, size, &err) == 0)
                        return size;
        return 0;
}

/* The model split over a group of ranks (on one device through the loopback communicator, or
 * one GPU each over NCCL) against one runner's logits, alone. */
static void check_tensor_parallel(const struct model *model, const struct backend_options *options, int32_t *const *tokens,
                                  uint32_t prompt_len, const float *alone, int rows, bool loopback) {
        uint32_t size = split_size(model), n_vocab = model->hp.n_vocab;
        if (!size) {
                printf("tensor-parallel: the model's %u and %u heads split no way\n", model->hp.n_head, model->hp.n_head_kv);
                return;
        }
        struct backend_options o = *options;
        o.tensor_parallel_size = size;
        o.tensor_parallel_loopback = loopback;
        struct backend group;
        struct error err;
        if (backend_open("cuda", &o, model, &group, &err) < 0) {
                CHECK(0, "a tensor-parallel group of %u: %s", size, err.message);
                return;
        }
        float *other = malloc((size_t) 8 * n_vocab * sizeof(float));
        for (uint32_t others = 0; others <= 7; others += 7) {
                int got = run_sequence(&group, n_vocab, tokens, prompt_len, others, others ? 32 : 100, other);
                CHECK(got == rows && memcmp(alone, other, (size_t) rows * n_vocab * sizeof(float)) == 0,
                      "%s group of %u beside %u others: logits differ from one runner's", group.kernels, size, others);
        }
        printf("tensor-parallel: %s gives one runner's logits bit for bit, alone and beside 7 others\n", group.kernels);
        free(other);
        backend_free(&group);
}

static void check_model(const char *path) {
        int32_t *tokens[MAX_SEQS];
        struct model *model;
        struct error err;
        if (model_load(path, &model, &err) < 0) {
                CHECK(0, "%s", err.message);
                return;
        }
        uint32_t n_vocab = model->hp.n_vocab;
        struct backend_options options = model_options();
        struct backend b;
        if (backend_open("cuda", &options, model, &b, &err) < 0) {
                CHECK(0, "%s", err.message);
                model_free(model);
                return;
        }
        printf("backend %s on %s, %u KV blocks\n", b.name, b.kernels, b.kv.n_blocks);
        random_tokens(n_vocab, tokens);
        uint32_t prompt_len = 100;
        size_t trace_floats = (size_t) 8 * n_vocab;
        float *alone = malloc(trace_floats * sizeof(float)), *other = malloc(trace_floats * sizeof(float));
        int rows = run_sequence(&b, n_vocab, tokens, prompt_len, 0, prompt_len, alone), got;
        CHECK(rows == 5, "the sequence alone gave %d rows of logits", rows);
        static const struct { uint32_t others, chunk; } cases[] = { { 0, 7 }, { 0, 64 }, { 7, 512 }, { 7, 13 }, { 63, 100 }, { 63, 9 } };
        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]) && rows == 5; c++) {
                got = run_sequence(&b, n_vocab, tokens, prompt_len, cases[c].others, cases[c].chunk, other);
                CHECK(got == rows && memcmp(alone, other, (size_t) rows * n_vocab * sizeof(float)) == 0,
                      "sequence 0 beside %u others, prompt in chunks of %u: logits differ from its run alone", cases[c].others,
                      cases[c].chunk);
        }
        printf("invariance: one sequence's logits checked alone, in batches of 8 and 64, in chunks of 7 to 512\n");

        /* the CPU backend's bits: every product, RoPE and attention follow its order */
        struct backend cpu;
        options.n_threads = 4;
        if (backend_open("cpu", &options, model, &cpu, &err) < 0)
                CHECK(0, "%s", err.message);
        else {
                got = run_sequence(&cpu, n_vocab, tokens, prompt_len, 0, 64, other);
                size_t differ = 0;
                double worst = 0;
                for (size_t i = 0; got == rows && i < (size_t) rows * n_vocab; i++)
                        if (f32_to_bits(alone[i]) != f32_to_bits(other[i])) {
                                differ++;
                                worst = fmax(worst, fabs((double) alone[i] - other[i]));
                        }
                printf("cpu: %zu of %zu logits differ from the CPU backend's (largest difference %.3g)\n", differ,
                       (size_t) rows * n_vocab, worst);
                CHECK(got == rows && differ == 0, "the GPU's logits are not the CPU backend's bits");
                backend_free(&cpu);
        }
        check_tensor_parallel(model, &options, tokens, prompt_len, alone, rows, true);

        /* sleep: the device's free memory grows by what is released; outputs after wake-up
         * are the same bits */
        struct backend_memory_usage before, asleep, awake;
        b.memory_usage(b.impl, 0, &before);
        struct cuda_runner_usage runner_before, runner_after;
        cuda_runner_usage(b.impl, &runner_before);
        CHECK(b.release_memory(b.impl, BACKEND_MEMORY_WEIGHTS | BACKEND_MEMORY_KV_CACHE, &err) == 0, "release: %s", err.message);
        b.memory_usage(b.impl, 0, &asleep);
        uint64_t released = before.weights_bytes + before.kv_cache_bytes, gained = asleep.device_free_bytes - before.device_free_bytes;
        printf("sleep: %.1f MiB released, device free memory up %.1f MiB\n", released / 1048576.0, gained / 1048576.0);
        CHECK(asleep.device_free_bytes > before.device_free_bytes && gained >= released / 100 * 95,
              "sleep released %" PRIu64 " bytes but the device gained %" PRIu64, released, gained);
        CHECK(b.restore_memory(b.impl, BACKEND_MEMORY_WEIGHTS | BACKEND_MEMORY_KV_CACHE, &err) == 0, "restore: %s", err.message);
        b.memory_usage(b.impl, 0, &awake);
        CHECK(awake.released == 0 && awake.weights_bytes == before.weights_bytes, "wake-up left memory released");
        got = run_sequence(&b, n_vocab, tokens, prompt_len, 7, 32, other);
        CHECK(got == rows && memcmp(alone, other, (size_t) rows * n_vocab * sizeof(float)) == 0,
              "logits after wake-up differ from before sleep");
        /* the same decode sizes as before sleep: the graphs kept their addresses */
        cuda_runner_usage(b.impl, &runner_after);
        printf("sleep: %" PRIu64 " graph(s) captured again after wake-up\n",
               runner_after.graphs_captured - runner_before.graphs_captured);
        CHECK(runner_after.graphs_captured == runner_before.graphs_captured,
              "wake-up made the decode graphs be captured again (%" PRIu64 " more)",
              runner_after.graphs_captured - runner_before.graphs_captured);
        report_step_times(&b, "graphs,", n_vocab, tokens);

        /* eager: the same bits as the graphs' replays */
        struct backend eager;
        options.enforce_eager = true;
        if (backend_open("cuda", &options, model, &eager, &err) < 0)
                CHECK(0, "%s", err.message);
        else {
                got = run_sequence(&eager, n_vocab, tokens, prompt_len, 7, 512, other);
                CHECK(got == rows && memcmp(alone, other, (size_t) rows * n_vocab * sizeof(float)) == 0,
                      "logits launched eagerly differ from the graphs' replays");
                got = run_sequence(&eager, n_vocab, tokens, prompt_len, 63, 100, other);
                CHECK(got == rows && memcmp(alone, other, (size_t) rows * n_vocab * sizeof(float)) == 0,
                      "logits launched eagerly beside 63 others differ from the graphs' replays");
                printf("graphs: decode steps replayed from CUDA graphs give the eager launches' bits\n");
                report_step_times(&eager, "eager,", n_vocab, tokens);
                backend_free(&eager);
        }
        free(alone);
        free(other);
        backend_free(&b);
        model_free(model);
}

/* How far the GPU's logits on a K-quant model may be from the CPU backend's: the root mean
 * square of the difference over that of the CPU's logits about their mean. The two quantize
 * the activations differently (q8_1 blocks of 32 with f16 scales, Q8_K super-blocks of 256),
 * so they agree to that quantization's noise, not to the bit. */
#define K_QUANT_LOGITS_TOLERANCE 0.05

/* The root mean square of a - b over that of b about its mean, over n values. */
static double relative_rms_difference(const float *a, const float *b, size_t n) {
        double mean = 0.0, diff = 0.0, spread = 0.0;
        for (size_t i = 0; i < n; i++)
                mean += b[i];
        mean /= (double) n;
        for (size_t i = 0; i < n; i++) {
                diff += ((double) a[i] - b[i]) * ((double) a[i] - b[i]);
                spread += (b[i] - mean) * (b[i] - mean);
        }
        return spread > 0.0 ? sqrt(diff / spread) : sqrt(diff);
}

/* A model of SmolLM2's shape (two layers) with weight_type matrices and an embd_type
 * embedding, random weights: the GPU's logits against the CPU backend's on one sequence's
 * prompt and decode steps, bit for bit, or for the K-quants (whose widths must be multiples
 * of 256: 768 and 2048 here) within K_QUANT_LOGITS_TOLERANCE. For the types the real file
 * does not hold. */
static void check_type_against_cpu(enum tensor_type weight_type, enum tensor_type embd_type, bool tied) {
        bool k_quants = gpu_k_quant(gpu_weight_kind_of(weight_type)) || gpu_k_quant(gpu_weight_kind_of(embd_type));
        const struct synthetic_llama_config cfg = {
                .n_layer = 2, .n_embd = k_quants ? 768 : 576, .n_ff = k_quants ? 2048 : 1536, .n_head = k_quants ? 12 : 9,
                .n_head_kv = k_quants ? 4 : 3, .n_vocab = 2048, .n_ctx = MAX_LEN, .weight_type = weight_type,
                .embd_type = embd_type, .tied_output = tied, .rope_theta = 100000.0f, .seed = 37,
        };
        const char *name = tensor_type_info(weight_type)->name;
        char path[] = "/tmp/test-gpu-model-XXXXXX";
        int fd = mkstemp(path);
        struct model *model = NULL;
        struct error err;
        if (fd < 0 || close(fd) < 0 || synthetic_llama_write(path, &cfg) < 0 || model_load(path, &model, &err) < 0) {
                CHECK(0, "%s model: cannot write or load %s", name, path);
                unlink(path);
                return;
        }
        unlink(path); /* the mapping outlives the name */
        int32_t *tokens[MAX_SEQS];
        random_tokens(cfg.n_vocab, tokens);
        struct backend_options options = model_options();
        struct backend gpu, cpu;
        float *on_gpu = malloc((size_t) 8 * cfg.n_vocab * sizeof(float)), *on_cpu = malloc((size_t) 8 * cfg.n_vocab * sizeof(float));
        if (backend_open("cuda", &options, model, &gpu, &err) < 0)
                CHECK(0, "%s model on the GPU: %s", name, err.message);
        else {
                int rows = run_sequence(&gpu, cfg.n_vocab, tokens, 100, 7, 64, on_gpu);
                if (k_quants) { /* the CPU's bits say nothing of the K-quants' invariance: alone, the same bits */
                        int alone = run_sequence(&gpu, cfg.n_vocab, tokens, 100, 0, 100, on_cpu);
                        CHECK(alone == rows && memcmp(on_gpu, on_cpu, (size_t) rows * cfg.n_vocab * sizeof(float)) == 0,
                              "%s model: the GPU's logits alone differ from beside 7 others", name);
                }
                backend_free(&gpu);
                options.n_threads = 4;
                if (backend_open("cpu", &options, model, &cpu, &err) < 0)
                        CHECK(0, "%s model on the CPU: %s", name, err.message);
                else {
                        int got = run_sequence(&cpu, cfg.n_vocab, tokens, 100, 0, 100, on_cpu);
                        backend_free(&cpu);
                        size_t differ = 0, n = (size_t) rows * cfg.n_vocab;
                        for (size_t i = 0; rows == 5 && got == rows && i < n; i++)
                                differ += f32_to_bits(on_gpu[i]) != f32_to_bits(on_cpu[i]);
                        double off = rows == 5 && got == rows ? relative_rms_difference(on_gpu, on_cpu, n) : INFINITY;
                        printf("cpu: %s weights, %s embedding%s: %zu of %zu logits differ from the CPU backend's "
                               "(relative RMS difference %.3g)\n", name, tensor_type_info(embd_type)->name,
                               tied ? " (tied output)" : "", differ, n, off);
                        if (k_quants)
                                CHECK(off <= K_QUANT_LOGITS_TOLERANCE,
                                      "%s model: the GPU's logits are %.3g (relative RMS) from the CPU backend's, over %g", name, off,
                                      K_QUANT_LOGITS_TOLERANCE);
                        else
                                CHECK(rows == 5 && got == rows && differ == 0,
                                      "%s model: the GPU's logits are not the CPU backend's bits", name);
                }
        }
        free(on_gpu);
        free(on_cpu);
        model_free(model);
}

static const char *model_path(void) {
        const char *model = getenv("ASYNCLLM_MODEL");
        return model && *model ? model : SOURCE_MODEL_PATH;
}

/* --nccl: the model split over GPUs, one rank each, all-gathering over NCCL, against one GPU's
 * logits; a skip (77) where the machine has fewer GPUs than the split needs. */
static int check_nccl(void) {
        struct error err;
        struct model *model;
        int n = gpu_device_count(&err);
        if (model_load(model_path(), &model, &err) < 0) {
                printf("FAIL: %s\n", err.message);
                return EXIT_FAILURE;
        }
        uint32_t size = split_size(model), n_vocab = model->hp.n_vocab;
        if (n < 0 || size == 0 || (uint32_t) n < size) {
                printf("SKIP: a tensor-parallel group over NCCL needs %u GPUs for this model (its %u and %u heads); "
                       "this machine has %d\n", size, model->hp.n_head, model->hp.n_head_kv, n < 0 ? 0 : n);
                model_free(model);
                return 77;
        }
        int32_t *tokens[MAX_SEQS];
        random_tokens(n_vocab, tokens);
        struct backend_options options = model_options();
        struct backend one;
        float *alone = malloc((size_t) 8 * n_vocab * sizeof(float));
        if (backend_open("cuda", &options, model, &one, &err) < 0)
                CHECK(0, "%s", err.message);
        else {
                int rows = run_sequence(&one, n_vocab, tokens, 100, 0, 100, alone);
                backend_free(&one);
                CHECK(rows == 5, "the sequence alone gave %d rows of logits", rows);
                if (rows == 5)
                        check_tensor_parallel(model, &options, tokens, 100, alone, rows, false);
        }
        free(alone);
        model_free(model);
        printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
        return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
int main(int argc, char **argv) {
        if (argc > 1 && strcmp(argv[1], "--nccl") == 0)
                return check_nccl();
        struct gpu_versions v;
        struct gpu_device_info info;
        struct error err;

        gpu_versions_get(&v);
        printf("CUDA runtime %d, driver %d, cuBLAS %d, NCCL %d\n", v.cuda_runtime, v.cuda_driver, v.cublas, v.nccl);
        if (v.cuda_runtime <= 0 || v.cublas <= 0 || v.nccl <= 0) {
                fprintf(stderr, "FAIL: the linked CUDA libraries report no version\n");
                return EXIT_FAILURE;
        }
        int n = gpu_device_count(&err);
        if (n < 0) {
                printf("SKIP: %s; the GPU checks need a CUDA device\n", err.message);
                return 77;
        }
        for (int i = 0; i < n; i++) {
                if (gpu_device_info(i, &info, &err) < 0) {
                        fprintf(stderr, "FAIL: %s\n", err.message);
                        return EXIT_FAILURE;
                }
                printf("device %d: %s, %zu MiB, compute %d.%d\n", i, info.name, info.total_memory >> 20,
                       info.compute_major, info.compute_minor);
        }
        check_matmuls();
        check_model(model_path());
        check_type_against_cpu(TENSOR_Q5_0, TENSOR_Q5_1, false);
        check_type_against_cpu(TENSOR_Q5_1, TENSOR_Q5_0, true);
        /* every K-quant as the matrices and as the embedding, tied and not */
        check_type_against_cpu(TENSOR_Q2_K, TENSOR_Q3_K, false);
        check_type_against_cpu(TENSOR_Q3_K, TENSOR_Q2_K, true);
        check_type_against_cpu(TENSOR_Q4_K, TENSOR_Q6_K, true);
        check_type_against_cpu(TENSOR_Q5_K, TENSOR_Q4_K, false);
        check_type_against_cpu(TENSOR_Q6_K, TENSOR_Q5_K, true);
        printf("%s: %d failure(s)\n", failures ? "FAIL" : "PASS", failures);
        return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
