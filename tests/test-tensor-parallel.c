/* SPDX-License-Identifier: MIT */
/* Tensor parallelism without a GPU: the split (model/tensor-parallel.h) and, on the real
 * model, one layer and the logits computed as a group of ranks computes them (each rank its
 * rows with the kernels' arithmetic, tests/gpu-host-model.h; all-gathers between) against
 * the same computed whole, bit for bit. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "float16.h"
#include "gpu-host-model.h"
#include "model.h"
#include "tensor-parallel.h"
#include "tensor-types.h"
#include "test-helpers.h"
#include "test-random.h"

#define TOKENS 6

static struct model *model;

static void setup(void) {
        struct error err;
        ck_assert_msg(model_load(test_model_path(), &model, &err) == 0, "%s", err.message);
}

static void teardown(void) {
        model_free(model);
        model = NULL;
}

START_TEST(test_sizes_that_do_not_divide_the_heads_are_refused) {
        struct model_hparams hp = { .n_layer = 1, .n_embd = 576, .n_ff = 1536, .n_head = 9, .n_head_kv = 3,
                                    .head_dim = 64, .n_vocab = 49152 };
        struct tp_shard s;
        struct error err;
        ck_assert_int_eq(tp_shard_plan(&hp, 2, 0, &s, &err), -EINVAL);
        ck_assert_str_eq(err.message, "a tensor-parallel size of 2 does not divide the model's 9 attention heads and 3 "
                                      "key-value heads; the sizes that do: 1, 3");
        ck_assert_int_eq(tp_size_check(&hp, 9, &err), -EINVAL);
        ck_assert_int_eq(tp_size_check(&hp, 3, &err), 0);
        ck_assert_int_eq(tp_shard_plan(&hp, 3, 3, &s, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "rank 3"));
        hp.n_head = 4, hp.n_head_kv = 1; /* Gemma 3 270M */
        ck_assert_int_eq(tp_size_check(&hp, 2, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "the sizes that do: 1"));
}
END_TEST

START_TEST(test_slices_cover_every_row_once) {
        struct model_hparams hp = { .n_layer = 1, .n_embd = 1000, .n_ff = 2050, .n_head = 8, .n_head_kv = 4,
                                    .head_dim = 32, .n_vocab = 32003 };
        for (uint32_t size = 1; size <= 4; size *= 2) {
                uint32_t next[5] = { 0 };
                for (uint32_t rank = 0; rank < size; rank++) {
                        struct tp_shard s;
                        struct error err;
                        ck_assert_int_eq(tp_shard_plan(&hp, size, rank, &s, &err), 0);
                        const struct tp_slice *sl[] = { &s.q, &s.kv, &s.embd, &s.ff, &s.vocab };
                        const uint32_t rows[] = { 256, 128, 1000, 2050, 32003 };
                        for (int k = 0; k < 5; k++) {
                                ck_assert_uint_eq(sl[k]->first, next[k]);
                                ck_assert_uint_eq(sl[k]->chunk, (rows[k] + size - 1) / size);
                                ck_assert_uint_le(sl[k]->count, sl[k]->chunk);
                                ck_assert(sl[k]->count == sl[k]->chunk || rank == size - 1);
                                next[k] += sl[k]->count;
                                for (uint32_t i = sl[k]->first; i < sl[k]->first + sl[k]->count; i++)
                                        ck_assert_uint_eq(tp_gathered_index(sl[k]->chunk, 3, 2, i),
                                                          ((uint64_t) rank * 3 + 2) * sl[k]->chunk + (i - sl[k]->first));
                        }
                        ck_assert_uint_eq(s.q.first, s.head0 * hp.head_dim);
                        ck_assert_uint_eq(s.q.count, s.n_head * hp.head_dim);
                        ck_assert_uint_eq(s.kv.count, s.n_head_kv * hp.head_dim);
                        /* each rank's query heads read its own key-value heads */
                        ck_assert_uint_eq(s.head0 / (hp.n_head / hp.n_head_kv), s.kv_head0);
                }
                const uint32_t rows[] = { 256, 128, 1000, 2050, 32003 };
                for (int k = 0; k < 5; k++)
                        ck_assert_uint_eq(next[k], rows[k]);
        }
}
END_TEST

/* A weight as the device holds it: rows repacked lane-major (gpu_repack_row()). */
struct packed {
        const struct weight *w;
        enum gpu_weight_kind kind;
        uint32_t nb;
        uint8_t *quants;
        uint32_t *scales;
};

static void pack(const struct weight *w, struct packed *p) {
        enum gpu_weight_kind kind = gpu_weight_kind_of(w->type);
        ck_assert_int_ne(kind, GPU_WEIGHT_UNSUPPORTED);
        *p = (struct packed) { w, kind, (uint32_t) (w->n_cols / GPU_QBLOCK), NULL, NULL };
        if (kind > GPU_WEIGHT_Q8_0)
                return;
        uint32_t nbp = gpu_padded_blocks(p->nb), qb = gpu_block_quant_bytes(kind);
        p->quants = calloc(w->n_rows * nbp, qb);
        p->scales = calloc(w->n_rows * gpu_row_scale_words(kind, nbp), sizeof(uint32_t));
        ck_assert(p->quants && p->scales);
        for (uint64_t r = 0; r < w->n_rows; r++)
                gpu_repack_row(kind, w->data + r * w->row_bytes, tensor_type_info(w->type)->block_bytes, p->nb,
                               p->quants + r * nbp * qb, p->scales + r * gpu_row_scale_words(kind, nbp));
}

static void unpack(struct packed *p) {
        free(p->quants);
        free(p->scales);
}

/* Rows slice->first .. + count of p times each token's activations (x for float weights; xq
 * and ds quantized), into out[t * slice->chunk + row - first]: one rank's send buffer. */
static void rank_product(const struct packed *p, const struct tp_slice *slice, const float *x, const int8_t *xq,
                         const float *ds, uint32_t width, float *out, bool logits) {
        uint32_t nbp = gpu_padded_blocks(p->nb), qb = gpu_block_quant_bytes(p->kind);
        for (uint32_t t = 0; t < TOKENS; t++)
                for (uint32_t r = 0; r < slice->count; r++) {
                        uint32_t row = slice->first + r;
                        out[(size_t) t * slice->chunk + r] =
                                p->kind > GPU_WEIGHT_Q8_0
                                        ? host_row_dot_float(p->kind, p->w->data + (size_t) row * p->w->row_bytes, width,
                                                             x + (size_t) t * width)
                                        : host_row_dot(p->kind, p->quants + (size_t) row * nbp * qb,
                                                       p->scales + (size_t) row * gpu_row_scale_words(p->kind, nbp),
                                                       p->nb, xq + (size_t) t * width, ds + (size_t) t * width / 16,
                                                       weight_single_accumulator(p->w, logits));
                }
}

/* The all-gather of each rank's (TOKENS, chunk) send buffer, and the rows put in order:
 * out[t * rows + i] = (or +=) the gathered row i of token t. */
static void gather(float *const *send, uint32_t size, uint32_t chunk, uint32_t rows, float *out, bool add) {
        float *gathered = malloc((size_t) size * TOKENS * chunk * sizeof(float));
        ck_assert_ptr_nonnull(gathered);
        for (uint32_t r = 0; r < size; r++)
                memcpy(gathered + (size_t) r * TOKENS * chunk, send[r], (size_t) TOKENS * chunk * sizeof(float));
        for (uint32_t t = 0; t < TOKENS; t++)
                for (uint32_t i = 0; i < rows; i++) {
                        float v = gathered[tp_gathered_index(chunk, TOKENS, t, i)];
                        out[(size_t) t * rows + i] = add ? out[(size_t) t * rows + i] + v : v;
                }
        free(gathered);
}

static void norm_quantize(const float *x, const float *weight, uint32_t n, float *xn, int8_t *q, float *ds) {
        for (uint32_t t = 0; t < TOKENS; t++) {
                double ss = 0.0;
                for (uint32_t i = 0; i < n; i++)
                        ss += (double) x[(size_t) t * n + i] * x[(size_t) t * n + i];
                float scale = gpu_rms_scale(ss, n, model->hp.rms_eps);
                for (uint32_t i = 0; i < n; i++)
                        xn[(size_t) t * n + i] = x[(size_t) t * n + i] * scale * weight[i];
                host_quantize_row(xn + (size_t) t * n, n, q + (size_t) t * n, ds + (size_t) t * n / 16);
        }
}

static void quantize_rows(const float *x, uint32_t n, int8_t *q, float *ds) {
        for (uint32_t t = 0; t < TOKENS; t++)
                host_quantize_row(x + (size_t) t * n, n, q + (size_t) t * n, ds + (size_t) t * n / 16);
}

/* Layer 0 and the logits of TOKENS prompt tokens (positions 0 ..), split size ways: the
 * hidden state after the layer into x_out, the logits into logits. Position embedding (RoPE)
 * turns each head's pairs alone, whatever the split, and is left out. */
static void run_split(uint32_t size, const float *x_in, float *x_out, float *logits) {
        const struct model_hparams *hp = &model->hp;
        const struct model_layer *l = &model->layers[0];
        uint32_t hd = hp->head_dim, q_dim = hp->n_head * hd, kv_dim = hp->n_head_kv * hd, width = model_max_width(hp);
        struct packed wq, wk, wv, wo, gate, up, down, out;
        pack(&l->wq, &wq), pack(&l->wk, &wk), pack(&l->wv, &wv), pack(&l->wo, &wo);
        pack(&l->w_gate, &gate), pack(&l->w_up, &up), pack(&l->w_down, &down), pack(&model->output, &out);
        float *x = malloc(TOKENS * hp->n_embd * sizeof(float)), *xn = malloc(TOKENS * width * sizeof(float));
        float *full = malloc(TOKENS * width * sizeof(float)), *ds = malloc(TOKENS * width / 16 * sizeof(float));
        int8_t *xq = malloc(TOKENS * width);
        float *send[8], *k = malloc(TOKENS * kv_dim * sizeof(float)), *v = malloc(TOKENS * kv_dim * sizeof(float));
        float *gate_r = malloc(TOKENS * hp->n_ff * sizeof(float)), *up_r = malloc(TOKENS * hp->n_ff * sizeof(float));
        float *q = malloc(TOKENS * q_dim * sizeof(float)), *scores = malloc(TOKENS * sizeof(float));
        ck_assert(x && xn && full && ds && xq && k && v && gate_r && up_r && q && scores && size <= 8);
        struct tp_shard s[8];
        for (uint32_t r = 0; r < size; r++) {
                struct error err;
                ck_assert_int_eq(tp_shard_plan(hp, size, r, &s[r], &err), 0);
                send[r] = malloc((size_t) TOKENS * hp->n_vocab * sizeof(float)); /* the widest send */
                ck_assert_ptr_nonnull(send[r]);
        }
        memcpy(x, x_in, TOKENS * hp->n_embd * sizeof(float));

        /* attention: each rank its heads, from its own key-value heads */
        norm_quantize(x, l->attn_norm, hp->n_embd, xn, xq, ds);
        for (uint32_t r = 0; r < size; r++) {
                rank_product(&wq, &s[r].q, xn, xq, ds, hp->n_embd, q, false);
                rank_product(&wk, &s[r].kv, xn, xq, ds, hp->n_embd, k, false);
                rank_product(&wv, &s[r].kv, xn, xq, ds, hp->n_embd, v, false);
                uint32_t group = s[r].n_head / s[r].n_head_kv;
                for (uint32_t h = 0; h < s[r].n_head; h++)
                        for (uint32_t t = 0; t < TOKENS; t++) {
                                uint16_t kh[TOKENS][256], vh[TOKENS][256];
                                const uint16_t *keys[TOKENS], *values[TOKENS];
                                for (uint32_t j = 0; j <= t; j++) {
                                        for (uint32_t i = 0; i < hd; i++) {
                                                kh[j][i] = f32_to_f16(k[(size_t) j * s[r].kv.chunk + h / group * hd + i]);
                                                vh[j][i] = f32_to_f16(v[(size_t) j * s[r].kv.chunk + h / group * hd + i]);
                                        }
                                        keys[j] = kh[j], values[j] = vh[j];
                                }
                                host_attention(keys, values, t, q + (size_t) t * s[r].q.chunk + h * hd, hd, false,
                                               1.0f / sqrtf((float) hd), scores, send[r] + (size_t) t * s[r].q.chunk + h * hd);
                        }
        }
        gather(send, size, s[0].q.chunk, q_dim, full, false);
        quantize_rows(full, q_dim, xq, ds);
        for (uint32_t r = 0; r < size; r++)
                rank_product(&wo, &s[r].embd, full, xq, ds, q_dim, send[r], false);
        gather(send, size, s[0].embd.chunk, hp->n_embd, x, true);

        /* feed-forward: each rank its columns of the hidden layer */
        norm_quantize(x, l->ffn_norm, hp->n_embd, xn, xq, ds);
        for (uint32_t r = 0; r < size; r++) {
                rank_product(&gate, &s[r].ff, xn, xq, ds, hp->n_embd, gate_r, false);
                rank_product(&up, &s[r].ff, xn, xq, ds, hp->n_embd, up_r, false);
                for (uint32_t t = 0; t < TOKENS; t++)
                        for (uint32_t i = 0; i < s[r].ff.count; i++) {
                                size_t at = (size_t) t * s[r].ff.chunk + i;
                                send[r][at] = gpu_silu_mul(gate_r[at], up_r[at]);
                        }
        }
        gather(send, size, s[0].ff.chunk, hp->n_ff, full, false);
        quantize_rows(full, hp->n_ff, xq, ds);
        for (uint32_t r = 0; r < size; r++)
                rank_product(&down, &s[r].embd, full, xq, ds, hp->n_ff, send[r], false);
        gather(send, size, s[0].embd.chunk, hp->n_embd, x, true);
        memcpy(x_out, x, TOKENS * hp->n_embd * sizeof(float));

        /* the logits: each rank its rows of the vocabulary */
        norm_quantize(x, model->output_norm, hp->n_embd, xn, xq, ds);
        for (uint32_t r = 0; r < size; r++)
                rank_product(&out, &s[r].vocab, xn, xq, ds, hp->n_embd, send[r], true);
        gather(send, size, s[0].vocab.chunk, hp->n_vocab, logits, false);

        for (uint32_t r = 0; r < size; r++)
                free(send[r]);
        struct packed *all[] = { &wq, &wk, &wv, &wo, &gate, &up, &down, &out };
        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
                unpack(all[i]);
        free(x), free(xn), free(full), free(ds), free(xq), free(k), free(v), free(gate_r), free(up_r), free(q), free(scores);
}

START_TEST(test_a_split_layer_gives_the_whole_layers_bits) {
        const struct model_hparams *hp = &model->hp;
        struct tp_shard s;
        struct error err;
        ck_assert_msg(tp_shard_plan(hp, 3, 0, &s, &err) == 0, "%s", err.message);
        /* the embeddings of a few tokens as the layer's input */
        float *x = malloc(TOKENS * hp->n_embd * sizeof(float));
        float *whole_x = malloc(TOKENS * hp->n_embd * sizeof(float)), *split_x = malloc(TOKENS * hp->n_embd * sizeof(float));
        float *whole_logits = malloc((size_t) TOKENS * hp->n_vocab * sizeof(float));
        float *split_logits = malloc((size_t) TOKENS * hp->n_vocab * sizeof(float));
        ck_assert(x && whole_x && split_x && whole_logits && split_logits);
        for (uint32_t i = 0; i < TOKENS * hp->n_embd; i++)
                x[i] = next_float(1.0f);
        run_split(1, x, whole_x, whole_logits);
        run_split(3, x, split_x, split_logits);
        ck_assert_mem_eq(split_x, whole_x, TOKENS * hp->n_embd * sizeof(float));
        ck_assert_mem_eq(split_logits, whole_logits, (size_t) TOKENS * hp->n_vocab * sizeof(float));
        /* and the layer did something: the hidden state moved */
        ck_assert(memcmp(whole_x, x, TOKENS * hp->n_embd * sizeof(float)) != 0);
        free(x), free(whole_x), free(split_x), free(whole_logits), free(split_logits);
}
END_TEST

static Suite *tensor_parallel_suite(void) {
        Suite *s = suite_create("tensor-parallel");
        TCase *plan = tcase_create("plan");
        tcase_add_test(plan, test_sizes_that_do_not_divide_the_heads_are_refused);
        tcase_add_test(plan, test_slices_cover_every_row_once);
        suite_add_tcase(s, plan);
        TCase *split = tcase_create("real-model");
        tcase_add_checked_fixture(split, setup, teardown);
        tcase_set_timeout(split, 120);
        tcase_add_test(split, test_a_split_layer_gives_the_whole_layers_bits);
        suite_add_tcase(s, split);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(tensor_parallel_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
