/* SPDX-License-Identifier: MIT */
/* Every architecture the daemon loads, against llama.cpp on the same synthetic file: each
 * tests/fixtures/arch-*.json (written by tests/make-arch-fixtures) records the options its
 * model was written with (tests/synthetic-args.h), its family's real vocabulary and
 * llama.cpp's greedy continuations. The model is written again here, from the same options
 * and seed, loaded, and run through the CPU backend as the engine runs it (a batched prompt,
 * then one token at a time); our tokenizer must give llama.cpp's prompt ids, the greedy
 * tokens must be llama.cpp's except at a genuine near-tie, and their logprobs within 1e-2.
 * The vocabularies come from $ASYNCLLM_VOCABS (tests/test-architectures.sh fills it with
 * tests/extract-vocab-fixtures). */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend-open.h"
#include "model.h"
#include "sampler.h"
#include "sequence.h"
#include "synthetic-args.h"
#include "test-fixtures.h"
#include "test-helpers.h"
#include "tokenizer.h"

/* Two implementations that round differently (the activations quantized before each product,
 * f16 conversions) move these models' logprobs by a few 1e-3, so two tokens closer than the
 * logprob tolerance may swap: a divergence is accepted there, when both sides see it, and
 * comparing that prompt stops. */
#define LOGPROB_TOLERANCE 1e-2
#define NEAR_TIE_LOGPROB_GAP LOGPROB_TOLERANCE
#define MAX_FIXTURES 64

static char *fixture_names[MAX_FIXTURES];
static int n_fixtures;
static const char *vocab_dir;

static double pair_logprob(json_object *top2, size_t k) {
        return json_object_get_double(json_object_array_get_idx(json_object_array_get_idx(top2, k), 1));
}

/* Our logprob of token id, or NAN when it is not in our top entries. */
static double our_logprob(const struct sample_result *r, int32_t id) {
        for (size_t k = 0; k < r->n_top; k++)
                if (r->top[k].token == id)
                        return r->top[k].logprob;
        return NAN;
}

/* The fixture's model, written from its recorded options with the vocabulary file. */
static struct model *write_and_load(json_object *root, char **ret_dir) {
        json_object *args = test_json_field(root, "writer_args");
        const char *vocab = json_object_get_string(test_json_field(root, "vocab"));
        size_t n_args = json_object_array_length(args);
        char **argv = calloc(n_args + 4, sizeof(char *));
        char vocab_path[4096];
        struct synthetic_llama_config cfg;
        struct model *m;
        struct error err;
        int next;

        ck_assert_ptr_nonnull(argv);
        snprintf(vocab_path, sizeof(vocab_path), "%s/ggml-vocab-%s.gguf", vocab_dir, vocab);
        argv[0] = (char *) "write-synthetic-model";
        for (size_t i = 0; i < n_args; i++)
                argv[i + 1] = (char *) json_object_get_string(json_object_array_get_idx(args, i));
        argv[n_args + 1] = (char *) "--vocab";
        argv[n_args + 2] = vocab_path;
        ck_assert_int_eq(synthetic_llama_parse_args((int) n_args + 3, argv, &cfg, &next), 0);
        ck_assert_int_eq(next, (int) n_args + 3);

        char *dir = test_tmpdir();
        char *path = test_path_join(dir, "model.gguf");
        ck_assert_msg(synthetic_llama_write(path, &cfg) == 0, "cannot write the model (vocabulary %s)", vocab_path);
        ck_assert_msg(model_load(path, &m, &err) == 0, "%s", err.message);
        free(path);
        free(argv);
        *ret_dir = dir;
        return m;
}

START_TEST(test_matches_llama_cpp) {
        const char *fixture = fixture_names[_i];
        json_object *root = test_load_fixture(fixture);
        json_object *cases = test_json_field(root, "cases");
        uint32_t server_ctx = (uint32_t) json_object_get_int(test_json_field(root, "server_ctx"));
        size_t n_cases = json_object_array_length(cases), identical = 0, near_ties = 0, n_compared = 0;
        size_t tokenizer_mismatches = 0;
        double worst = 0.0;
        const char *worst_case = "-";
        size_t worst_pos = 0;
        char *dir;
        struct model *model = write_and_load(root, &dir);
        struct tokenizer *tk;
        struct backend backend;
        struct sequence *seq;
        struct error err;
        /* llama.cpp's context: the long rope factors apply past the original context */
        const struct backend_options options = {
                .n_threads = 2, .max_batch_tokens = 512, .max_model_len = server_ctx, .block_size = 16,
                .n_kv_blocks = (server_ctx + 15) / 16,
        };
        struct sampling_params params;

        ck_assert_uint_ge(n_cases, 16);
        ck_assert_msg(tokenizer_load(model->file, &tk, &err) == 0, "%s", err.message);
        ck_assert_msg(backend_open("cpu", &options, model, &backend, &err) == 0, "%s", err.message);
        ck_assert_msg(sequence_new(&backend, &options, model->hp.n_vocab, &seq, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(model->hp.n_vocab, (uint32_t) json_object_get_int(test_json_field(root, "n_vocab")));
        sampling_params_init_default(&params);
        params.temperature = 0.0;
        params.logprobs = 2;
        float *logits = malloc(sizeof(float) * model->hp.n_vocab);
        ck_assert_ptr_nonnull(logits);

        for (size_t c = 0; c < n_cases; c++) {
                json_object *tc = json_object_array_get_idx(cases, c);
                const char *name = json_object_get_string(test_json_field(tc, "name"));
                const char *prompt_text = json_object_get_string(test_json_field(tc, "prompt"));
                json_object *ref_logprobs = test_json_field(tc, "logprobs");
                json_object *ref_top2 = test_json_field(tc, "top2");
                size_t n_prompt, n_ref, n_ours;
                int32_t *prompt = test_json_ids(test_json_field(tc, "prompt_ids"), &n_prompt);
                int32_t *ref = test_json_ids(test_json_field(tc, "ids"), &n_ref);
                int32_t *ours;
                struct sampler_seq sampler;

                /* the tokenizer: compared here, reported at the end; the forward pass runs on
                 * llama.cpp's ids either way */
                ck_assert_msg(tokenizer_encode_prompt(tk, prompt_text, strlen(prompt_text), true, &ours, &n_ours,
                                                      &err) == 0, "%s", err.message);
                if (n_ours != n_prompt || memcmp(ours, prompt, n_prompt * sizeof(int32_t)) != 0) {
                        printf("%s: %s: our prompt ids differ from llama.cpp's (%zu and %zu tokens)\n", fixture,
                               name, n_ours, n_prompt);
                        tokenizer_mismatches++;
                }
                free(ours);

                ck_assert_int_eq(sampler_seq_init(&sampler, &params, prompt, n_prompt, (int32_t) model->hp.n_vocab,
                                                  0), 0);
                sequence_reset(seq);
                ck_assert_msg(sequence_feed(seq, prompt, n_prompt, false, logits, &err) == 0, "%s", err.message);
                size_t pos = 0;
                for (; pos < n_ref; pos++) {
                        struct sample_result r;
                        double ref_lp = json_object_get_double(json_object_array_get_idx(ref_logprobs, pos));
                        json_object *top2 = json_object_array_get_idx(ref_top2, pos);
                        double gap = pair_logprob(top2, 0) - pair_logprob(top2, 1);

                        ck_assert_int_eq(sampler_sample(&params, &sampler, logits, (int32_t) model->hp.n_vocab,
                                                        NULL, 0, &r), 0);
                        if (r.token != ref[pos]) {
                                double our_gap = r.logprob - our_logprob(&r, ref[pos]);
                                printf("%s: %s: diverges at token %zu: ours %d (%.5f), llama.cpp %d (%.5f); "
                                       "top-2 gap: llama.cpp's %.5f, ours %.5f\n",
                                       fixture, name, pos, r.token, r.logprob, ref[pos], ref_lp, gap, our_gap);
                                ck_assert_msg(gap < NEAR_TIE_LOGPROB_GAP && our_gap < NEAR_TIE_LOGPROB_GAP,
                                              "%s: %s: token %zu is %d, llama.cpp's %d, whose lead is %.5f (ours "
                                              "%.5f): not a near-tie", fixture, name, pos, r.token, ref[pos], gap,
                                              our_gap);
                                near_ties++;
                                sample_result_clear(&r);
                                break;
                        }
                        double e = fabs(r.logprob - ref_lp);
                        if (e > worst) {
                                worst = e;
                                worst_case = name;
                                worst_pos = pos;
                        }
                        n_compared++;
                        ck_assert_msg(e <= LOGPROB_TOLERANCE, "%s: %s: token %zu (%d) logprob %.5f, llama.cpp %.5f",
                                      fixture, name, pos, r.token, r.logprob, ref_lp);
                        sample_result_clear(&r);
                        ck_assert_int_eq(sampler_seq_accept(&sampler, ref[pos]), 0);
                        if (pos + 1 < n_ref)
                                ck_assert_msg(sequence_feed(seq, &ref[pos], 1, false, logits, &err) == 0, "%s",
                                              err.message);
                }
                if (pos == n_ref)
                        identical++;
                sampler_seq_free(&sampler);
                free(prompt);
                free(ref);
        }
        printf("%s: %zu of %zu prompts tokenized as llama.cpp does; %zu identical to the end, %zu stopped at a "
               "near-tie; largest logprob difference over %zu tokens %.5f (%s, token %zu)\n",
               fixture, n_cases - tokenizer_mismatches, n_cases, identical, near_ties, n_compared, worst,
               worst_case, worst_pos);
        fflush(stdout);
        ck_assert_msg(tokenizer_mismatches == 0, "%s: %zu prompts tokenized differently from llama.cpp", fixture,
                      tokenizer_mismatches);

        free(logits);
        sequence_free(seq);
        backend_free(&backend);
        tokenizer_free(tk);
        model_free(model);
        test_tmpdir_remove(dir);
        json_object_put(root);
}
END_TEST

static int compare_names(const void *a, const void *b) {
        return strcmp(*(char *const *) a, *(char *const *) b);
}

/* The arch-*.json fixtures, sorted. */
static int find_fixtures(void) {
        const char *dir = getenv("ASYNCLLM_FIXTURES");
        DIR *d = opendir(dir && *dir ? dir : "tests/fixtures");
        struct dirent *e;

        if (!d)
                return -1;
        while ((e = readdir(d)) && n_fixtures < MAX_FIXTURES) {
                size_t len = strlen(e->d_name);
                if (strncmp(e->d_name, "arch-", 5) == 0 && len > 5 && strcmp(e->d_name + len - 5, ".json") == 0)
                        fixture_names[n_fixtures++] = strdup(e->d_name);
        }
        closedir(d);
        qsort(fixture_names, (size_t) n_fixtures, sizeof(char *), compare_names);
        return n_fixtures;
}

int main(void) {
        char source[4096];

        vocab_dir = getenv("ASYNCLLM_VOCABS");
        snprintf(source, sizeof(source), "%s/SOURCE", vocab_dir ? vocab_dir : "");
        if (!vocab_dir || !*vocab_dir || access(source, R_OK) != 0) {
                printf("SKIP: no vocabulary files: $ASYNCLLM_VOCABS must name a folder that "
                       "tests/extract-vocab-fixtures filled (tests/test-architectures.sh does)\n");
                return 77;
        }
        if (find_fixtures() <= 0) {
                printf("FAIL: no tests/fixtures/arch-*.json ($ASYNCLLM_FIXTURES)\n");
                return EXIT_FAILURE;
        }

        Suite *s = suite_create("architectures");
        TCase *tc = tcase_create("llama.cpp");
        tcase_set_timeout(tc, 600);
        tcase_add_loop_test(tc, test_matches_llama_cpp, 0, n_fixtures);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        for (int i = 0; i < n_fixtures; i++)
                free(fixture_names[i]);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
