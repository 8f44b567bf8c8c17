/* SPDX-License-Identifier: MIT */
/* Sleep and wake-up on the CPU backend, with the real model: releasing the KV pool and the
 * weights lowers the process's resident memory by their size, a step while anything is
 * released is refused, and after restoring both the same prompt gives bit-identical logits.
 * Restoring weights whose file changed on disk fails, naming the file, and leaves them
 * released. The factory sizes the KV pool and refuses devices that cannot serve. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend-open.h"
#include "gguf.h"
#include "kv-pool.h"
#include "model.h"
#include "sequence.h"
#include "test-helpers.h"
#include "tokenizer.h"

#define N_DECODE 8
#define ALL_MEMORY (BACKEND_MEMORY_WEIGHTS | BACKEND_MEMORY_KV_CACHE)

/* 192 blocks of 16 tokens: about 70 MB of KV cache for SmolLM2-135M, far above the noise in
 * the resident set. */
static const struct backend_options config = {
        .n_threads = 2, .max_batch_tokens = 64, .max_model_len = 256, .block_size = 16, .n_kv_blocks = 192,
};

static const char prompt_text[] =
        "The printing press spread across Europe within a few decades: by 1500, presses in more than two "
        "hundred cities had printed millions of books, and";

static struct model *model;
static struct backend backend;
static struct sequence *seq;
static int32_t *prompt;
static size_t n_prompt;

static void open_backend(const char *path) {
        struct tokenizer *tk;
        struct error err;
        ck_assert_msg(model_load(path, &model, &err) == 0, "%s", err.message);
        ck_assert_msg(backend_open("cpu", &config, model, &backend, &err) == 0, "%s", err.message);
        ck_assert_msg(sequence_new(&backend, &config, model->hp.n_vocab, &seq, &err) == 0, "%s", err.message);
        ck_assert_msg(tokenizer_load(model->file, &tk, &err) == 0, "%s", err.message);
        ck_assert_msg(tokenizer_encode(tk, prompt_text, strlen(prompt_text), false, &prompt, &n_prompt, &err) == 0,
                      "%s", err.message);
        tokenizer_free(tk);
        ck_assert_uint_ge(n_prompt, 30);
}

static void close_backend(void) {
        free(prompt);
        sequence_free(seq);
        backend_free(&backend);
        model_free(model);
}

static int32_t argmax(const float *x, uint32_t n) {
        uint32_t best = 0;
        for (uint32_t i = 1; i < n; i++)
                if (x[i] > x[best])
                        best = i;
        return (int32_t) best;
}

/* The prompt from position 0, then N_DECODE greedy steps: logits gets 1 + N_DECODE rows. */
static void run_prompt(float *logits, int32_t *tokens) {
        uint32_t n_vocab = model->hp.n_vocab;
        struct error err;
        sequence_reset(seq);
        ck_assert_msg(sequence_feed(seq, prompt, n_prompt, false, logits, &err) == 0, "%s", err.message);
        for (int i = 0; i < N_DECODE; i++) {
                tokens[i] = argmax(logits + (size_t) i * n_vocab, n_vocab);
                ck_assert_msg(sequence_feed(seq, &tokens[i], 1, false, logits + (size_t) (i + 1) * n_vocab, &err) == 0,
                              "%s", err.message);
        }
}

static void expect_step_refused(const char *what) {
        float *logits = malloc(sizeof(float) * model->hp.n_vocab);
        struct error err = { "" };
        sequence_reset(seq);
        ck_assert_int_eq(sequence_feed(seq, prompt, n_prompt, false, logits, &err), -EBUSY);
        ck_assert_msg(strstr(err.message, what) && strstr(err.message, "asleep"), "message: %s", err.message);
        free(logits);
}

static struct backend_memory_usage usage(void) {
        struct backend_memory_usage u;
        backend.memory_usage(backend.impl, 0, &u);
        return u;
}

static int64_t rss_bytes(void) {
        unsigned long long size, resident;
        FILE *f = fopen("/proc/self/statm", "re");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(fscanf(f, "%llu %llu", &size, &resident), 2);
        fclose(f);
        return (int64_t) resident * sysconf(_SC_PAGESIZE);
}

static void release(unsigned what) {
        struct error err;
        ck_assert_msg(backend.release_memory(backend.impl, what, &err) == 0, "%s", err.message);
}

static void restore(unsigned what) {
        struct error err;
        ck_assert_msg(backend.restore_memory(backend.impl, what, &err) == 0, "%s", err.message);
}

START_TEST(test_sleep_and_wake) {
        open_backend(test_model_path());
        size_t rows = (size_t) (1 + N_DECODE) * model->hp.n_vocab;
        float *before = malloc(sizeof(float) * rows), *after = malloc(sizeof(float) * rows);
        int32_t tokens_before[N_DECODE], tokens_after[N_DECODE];
        struct stat st;

        ck_assert_uint_eq(backend.n_workers, 1);
        run_prompt(before, tokens_before);
        struct backend_memory_usage awake = usage();
        ck_assert_int_eq(stat(test_model_path(), &st), 0);
        ck_assert_uint_eq(awake.weights_bytes, (uint64_t) st.st_size);
        ck_assert_uint_ge(awake.kv_cache_bytes, 64u << 20);
        ck_assert_uint_eq(awake.kv_cache_bytes, (uint64_t) backend.kv.n_blocks * backend.kv.block_bytes);
        ck_assert_uint_gt(awake.scratch_bytes, 0);
        ck_assert_uint_eq(awake.released, 0);

        /* sleep(level=1) */
        int64_t rss_awake = rss_bytes();
        release(BACKEND_MEMORY_KV_CACHE);
        int64_t rss_kv = rss_bytes();
        struct backend_memory_usage u = usage();
        ck_assert_uint_eq(u.kv_cache_bytes, 0);
        ck_assert_uint_eq(u.weights_bytes, awake.weights_bytes);
        ck_assert_uint_eq(u.released, BACKEND_MEMORY_KV_CACHE);
        ck_assert_msg(rss_awake - rss_kv >= (int64_t) (0.8 * (double) awake.kv_cache_bytes),
                      "releasing %llu bytes of KV cache lowered RSS by %lld", (unsigned long long) awake.kv_cache_bytes,
                      (long long) (rss_awake - rss_kv));
        expect_step_refused("KV cache is released");

        /* sleep(level=2): the forward pass read every weight, so the whole file was resident */
        release(BACKEND_MEMORY_WEIGHTS);
        int64_t rss_asleep = rss_bytes();
        u = usage();
        ck_assert_uint_eq(u.weights_bytes, 0);
        ck_assert_uint_eq(u.kv_cache_bytes, 0);
        ck_assert_uint_eq(u.scratch_bytes, awake.scratch_bytes);
        ck_assert_uint_eq(u.released, ALL_MEMORY);
        ck_assert_msg(rss_kv - rss_asleep >= (int64_t) (0.8 * (double) awake.weights_bytes),
                      "releasing %llu bytes of weights lowered RSS by %lld", (unsigned long long) awake.weights_bytes,
                      (long long) (rss_kv - rss_asleep));
        expect_step_refused("model weights and the KV cache are released");

        /* wake_up(): both come back resident */
        restore(ALL_MEMORY);
        int64_t rss_woken = rss_bytes();
        u = usage();
        ck_assert_uint_eq(u.weights_bytes, awake.weights_bytes);
        ck_assert_uint_eq(u.kv_cache_bytes, awake.kv_cache_bytes);
        ck_assert_uint_eq(u.released, 0);
        ck_assert_msg(rss_woken - rss_asleep >= (int64_t) (0.8 * (double) (awake.weights_bytes + awake.kv_cache_bytes)),
                      "restoring lowered RSS by only %lld", (long long) (rss_woken - rss_asleep));
        printf("RSS: awake %lld MB; KV cache released -%lld MB (pool %llu MB); weights released -%lld MB (file %llu MB); "
               "restored +%lld MB\n",
               (long long) (rss_awake >> 20), (long long) ((rss_awake - rss_kv) >> 20),
               (unsigned long long) (awake.kv_cache_bytes >> 20), (long long) ((rss_kv - rss_asleep) >> 20),
               (unsigned long long) (awake.weights_bytes >> 20), (long long) ((rss_woken - rss_asleep) >> 20));

        /* The KV cache came back empty: recompute from the start. */
        run_prompt(after, tokens_after);
        ck_assert_mem_eq(tokens_after, tokens_before, sizeof(tokens_before));
        ck_assert_msg(memcmp(after, before, sizeof(float) * rows) == 0, "logits after wake-up differ");

        free(before);
        free(after);
        close_backend();
}
END_TEST

START_TEST(test_release_and_restore_are_idempotent) {
        open_backend(test_model_path());
        size_t rows = (size_t) (1 + N_DECODE) * model->hp.n_vocab;
        float *logits = malloc(sizeof(float) * rows);
        int32_t tokens[N_DECODE];
        struct error err = { "" };

        restore(ALL_MEMORY); /* nothing released yet */
        release(BACKEND_MEMORY_KV_CACHE);
        release(BACKEND_MEMORY_KV_CACHE);
        release(BACKEND_MEMORY_WEIGHTS);
        release(BACKEND_MEMORY_WEIGHTS);
        release(ALL_MEMORY);
        ck_assert_uint_eq(usage().released, ALL_MEMORY);
        restore(BACKEND_MEMORY_WEIGHTS);
        ck_assert_uint_eq(usage().released, BACKEND_MEMORY_KV_CACHE);
        expect_step_refused("KV cache is released");
        restore(BACKEND_MEMORY_WEIGHTS);
        restore(ALL_MEMORY);
        restore(ALL_MEMORY);
        ck_assert_uint_eq(usage().released, 0);
        run_prompt(logits, tokens);

        ck_assert_int_eq(backend.release_memory(backend.impl, 1u << 5, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "0x20"), "message: %s", err.message);
        ck_assert_int_eq(backend.restore_memory(backend.impl, ALL_MEMORY | 1u << 5, &err), -EINVAL);
        ck_assert_uint_eq(usage().released, 0);
        free(logits);
        close_backend();
}
END_TEST

/* How the copy of the model changes while its weights are released. */
enum change { CHANGE_APPEND, CHANGE_IN_PLACE, CHANGE_REPLACE, CHANGE_REMOVE, N_CHANGES };

static void change_file(const char *dir, const char *path, enum change change, const uint8_t *image, size_t len) {
        int fd;
        switch (change) {
        case CHANGE_APPEND:
                ck_assert_int_ge(fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC), 0);
                ck_assert_int_eq(write(fd, "x", 1), 1);
                ck_assert_int_eq(close(fd), 0);
                break;
        case CHANGE_IN_PLACE: {
                uint8_t flipped = (uint8_t) ~image[len - 1];
                ck_assert_int_ge(fd = open(path, O_WRONLY | O_CLOEXEC), 0);
                ck_assert_int_eq(pwrite(fd, &flipped, 1, (off_t) len - 1), 1);
                ck_assert_int_eq(close(fd), 0);
                break;
        }
        case CHANGE_REPLACE: { /* the same bytes, but another file: identity, not content, counts */
                char *other = test_path_join(dir, "new.gguf");
                ck_assert_int_eq(test_write_file(other, image, len), 0);
                ck_assert_int_eq(rename(other, path), 0);
                free(other);
                break;
        }
        case CHANGE_REMOVE:
                ck_assert_int_eq(unlink(path), 0);
                break;
        default:
                ck_abort();
        }
}

START_TEST(test_restore_refuses_a_changed_file) {
        static const char *const expected[N_CHANGES] = {
                [CHANGE_APPEND] = "size", [CHANGE_IN_PLACE] = "modification time",
                [CHANGE_REPLACE] = "replaced by another file", [CHANGE_REMOVE] = "No such file",
        };
        char *dir = test_tmpdir(), *path = test_path_join(dir, "model.gguf");
        /* An old modification time, so that a write within the same clock tick still shows. */
        const struct timespec old[2] = { { 1000000000, 0 }, { 1000000000, 0 } };
        struct error err = { "" };
        uint8_t *image;
        size_t len;

        ck_assert_int_eq(test_read_file(test_model_path(), &image, &len), 0);
        ck_assert_int_eq(test_write_file(path, image, len), 0);
        ck_assert_int_eq(utimensat(AT_FDCWD, path, old, 0), 0);
        open_backend(path);
        release(BACKEND_MEMORY_WEIGHTS);
        change_file(dir, path, (enum change) _i, image, len);

        for (int attempt = 0; attempt < 2; attempt++) {
                int r = backend.restore_memory(backend.impl, BACKEND_MEMORY_WEIGHTS, &err);
                ck_assert_int_eq(r, _i == CHANGE_REMOVE ? -ENOENT : -ESTALE);
                ck_assert_msg(strstr(err.message, path) && strstr(err.message, expected[_i]) &&
                              strstr(err.message, "restart the daemon"), "message: %s", err.message);
                if (_i != CHANGE_REMOVE)
                        ck_assert_msg(strstr(err.message, "changed on disk"), "message: %s", err.message);
                struct backend_memory_usage u = usage();
                ck_assert_uint_eq(u.released, BACKEND_MEMORY_WEIGHTS);
                ck_assert_uint_eq(u.weights_bytes, 0);
                expect_step_refused("model weights are released");
        }
        /* Releasing the KV cache too, and restoring it alone, still works. */
        release(BACKEND_MEMORY_KV_CACHE);
        restore(BACKEND_MEMORY_KV_CACHE);
        ck_assert_uint_eq(usage().released, BACKEND_MEMORY_WEIGHTS);
        ck_assert_int_lt(backend.restore_memory(backend.impl, ALL_MEMORY, &err), 0);
        ck_assert_uint_eq(usage().released, BACKEND_MEMORY_WEIGHTS);

        close_backend();
        free(image);
        free(path);
        test_tmpdir_remove(dir);
}
END_TEST

START_TEST(test_parsed_buffer_has_no_mapping) {
        /* A header alone, padded to the alignment: no keys, no tensors. */
        uint8_t image[32] = { 'G', 'G', 'U', 'F', 3 };
        struct gguf_file *f;
        struct error err = { "" };

        ck_assert_msg(gguf_parse(image, sizeof(image), "buffer.gguf", &f, &err) == 0, "%s", err.message);
        ck_assert_int_eq(gguf_release_mapping(f, &err), -EOPNOTSUPP);
        ck_assert_msg(strstr(err.message, "buffer.gguf"), "message: %s", err.message);
        ck_assert_int_eq(gguf_restore_mapping(f, &err), -EOPNOTSUPP);
        ck_assert(!f->released);
        gguf_close(f);
}
END_TEST

START_TEST(test_kv_pool_restores_zeroed) {
        struct kv_pool *pool;
        struct error err = { "" };

        ck_assert_int_eq(kv_pool_new(UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX, &pool, &err), -ENOMEM);
        ck_assert_msg(strstr(err.message, "too large"), "message: %s", err.message);

        ck_assert_int_eq(kv_pool_new(2, 3, 4, 8, &pool, &err), 0);
        uint64_t n = kv_pool_block(pool, 2, 0);
        ck_assert_uint_eq(kv_pool_bytes(pool), 2 * n * sizeof(f16_bits));
        for (uint64_t i = 0; i < n; i++)
                pool->k[i] = pool->v[i] = 0x3c00;
        kv_pool_release(pool);
        kv_pool_release(pool);
        ck_assert_ptr_null(pool->k);
        ck_assert_ptr_null(pool->v);
        ck_assert_uint_eq(kv_pool_bytes(pool), 0);
        ck_assert_int_eq(kv_pool_restore(pool, &err), 0);
        ck_assert_int_eq(kv_pool_restore(pool, &err), 0);
        ck_assert_uint_eq(kv_pool_bytes(pool), 2 * n * sizeof(f16_bits));
        for (uint64_t i = 0; i < n; i++)
                ck_assert(pool->k[i] == 0 && pool->v[i] == 0);
        kv_pool_release(pool);
        kv_pool_free(pool); /* released */
}
END_TEST

/* The factory: the pool holds as many blocks as the memory it is given, or the blocks asked
 * for; a device that cannot serve yet, or one it does not know, is refused by name. */
START_TEST(test_open_by_device) {
        struct backend_options options = config;
        struct backend b;
        struct error err = { "" };

        ck_assert_msg(model_load(test_model_path(), &model, &err) == 0, "%s", err.message);
        const struct model_hparams *hp = &model->hp;
        uint64_t block_bytes = (uint64_t) config.block_size * hp->n_layer * hp->n_head_kv * hp->head_dim * 2 * 2;
        options.n_kv_blocks = 0;
        options.kv_cache_bytes = 100 * block_bytes + block_bytes / 2;
        ck_assert_msg(backend_open("cpu", &options, model, &b, &err) == 0, "%s", err.message);
        ck_assert_str_eq(b.name, "cpu");
        ck_assert_uint_eq(b.kv.block_size, config.block_size);
        ck_assert_uint_eq(b.kv.block_bytes, block_bytes);
        ck_assert_uint_eq(b.kv.n_blocks, 100);
        ck_assert_ptr_nonnull(b.kernels);
        ck_assert_ptr_nonnull(b.weights);
        backend_free(&b);
        ck_assert_ptr_null(b.impl);

        ck_assert_int_eq(backend_check_device("cpu", &err), 0);
#ifdef HAVE_CUDA
        /* a build with CUDA takes the name, and opens it where a GPU is found */
        ck_assert_int_eq(backend_check_device("cuda", &err), 0);
        int r = backend_open("cuda", &options, model, &b, &err);
        if (r == 0) {
                ck_assert_str_eq(b.name, "cuda");
                ck_assert_uint_eq(b.kv.n_blocks, 100);
                ck_assert_uint_eq(b.kv.block_bytes, block_bytes);
                backend_free(&b);
        } else {
                ck_assert_int_eq(r, -ENODEV);
                ck_assert_msg(strstr(err.message, "no CUDA device") && strstr(err.message, "--device cpu"), "message: %s",
                              err.message);
        }
#else
        ck_assert_int_eq(backend_check_device("cuda", &err), -EOPNOTSUPP);
        ck_assert_int_eq(backend_open("cuda", &config, model, &b, &err), -EOPNOTSUPP);
        ck_assert_msg(strstr(err.message, "--enable-cuda") && strstr(err.message, "--device cpu"), "message: %s",
                      err.message);
#endif
        ck_assert_int_eq(backend_open("tpu", &config, model, &b, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "'tpu'") && strstr(err.message, "cpu, cuda"), "message: %s", err.message);
        /* tensor parallelism splits over GPUs only */
        struct backend_options split = config;
        split.tensor_parallel_size = 3;
        ck_assert_int_eq(backend_open("cpu", &split, model, &b, &err), -EINVAL);
        ck_assert_str_eq(err.message, "a tensor-parallel size of 3 splits the model over GPUs: it needs --device cuda");
        ck_assert_ptr_null(b.impl);
        ck_assert_int_eq(backend_check_device("tpu", &err), -EINVAL);
        model_free(model);
}
END_TEST

int main(void) {
        Suite *s = suite_create("backend-memory");
        TCase *tc = tcase_create("backend-memory");
        tcase_set_timeout(tc, 600);
        tcase_add_test(tc, test_sleep_and_wake);
        tcase_add_test(tc, test_release_and_restore_are_idempotent);
        tcase_add_loop_test(tc, test_restore_refuses_a_changed_file, 0, N_CHANGES);
        tcase_add_test(tc, test_parsed_buffer_has_no_mapping);
        tcase_add_test(tc, test_kv_pool_restores_zeroed);
        tcase_add_test(tc, test_open_by_device);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
