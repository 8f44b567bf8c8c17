/* SPDX-License-Identifier: MIT */
/* Writes the seed corpus for fuzz-gguf: tiny valid models of every weight type, a file with
 * every metadata value type, each kind of malformed file the reader must reject, model-level
 * errors, regressions for inputs that once crashed, and a few seeded random mutations.
 * Deterministic: rerunning it rewrites the same bytes. The corpus also holds inputs that
 * libFuzzer found (fuzz-*.gguf for new coverage, crash-fuzz-*.gguf for crashes), kept as
 * found; this program leaves them alone.
 *
 *   gcc -std=gnu11 -Ibase -Imodel -Itests -I<dir with config.h> tests/fuzz/make-gguf-corpus.c \
 *       tests/gguf-writer.c tests/synthetic-llama.c tests/k-quantize.c model/gguf.c model/tensor-types.c \
 *       base/error.c -lm -o make-gguf-corpus && ./make-gguf-corpus tests/fuzz/gguf
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf-writer.h"
#include "synthetic-llama.h"

#define ELEMENTS(a) (sizeof(a) / sizeof((a)[0]))
#define OFF_N_TENSORS 8
#define OFF_N_KV 16
#define OFF_FIRST_KV 24

static const char *out_dir;
static unsigned n_written;

static void emit_buffer(const char *name, const uint8_t *buf, size_t len) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", out_dir, name);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
                fprintf(stderr, "make-gguf-corpus: %s: %s\n", path, strerror(errno));
                exit(EXIT_FAILURE);
        }
        n_written++;
}

static uint8_t *image(struct gguf_writer *w, size_t *len) {
        uint8_t *buf;
        gguf_writer_to_buffer(w, &buf, len);
        return buf;
}

/* Writes the writer's image and frees the writer. */
static void emit(const char *name, struct gguf_writer *w) {
        size_t len;
        uint8_t *buf = image(w, &len);
        emit_buffer(name, buf, len);
        free(buf);
        gguf_writer_free(w);
}

static void patch_u64(uint8_t *buf, size_t off, uint64_t v) {
        memcpy(buf + off, &v, sizeof(v));
}

static struct synthetic_llama_config tiny(void) {
        return (struct synthetic_llama_config) {
                .n_layer = 1, .n_embd = 32, .n_ff = 32, .n_head = 2, .n_head_kv = 1, .n_vocab = 259, .n_ctx = 64,
                .weight_type = TENSOR_Q4_1, .embd_type = TENSOR_Q8_0, .tied_output = true, .seed = 1,
        };
}

static struct gguf_writer *model_writer(const struct synthetic_llama_config *cfg) {
        struct gguf_writer *w = gguf_writer_new();
        if (synthetic_llama_build(w, cfg) < 0) {
                fprintf(stderr, "make-gguf-corpus: bad model configuration\n");
                exit(EXIT_FAILURE);
        }
        return w;
}

/* The same small non-model file as test-gguf's: strings, arrays, nesting, two tensors. */
static struct gguf_writer *small_writer(void) {
        static const char *const strs[] = { "a", "bc", "" };
        static const int32_t ints[] = { 1, -2, 3 };
        static const float f32[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
        static const struct block_q8_0 q8[2];
        const uint64_t ne_f32[] = { 8 }, ne_q8[] = { 32, 2 };

        struct gguf_writer *w = gguf_writer_new();
        gguf_writer_add_string(w, "general.architecture", "llama");
        gguf_writer_add_string_array(w, "strings", strs, ELEMENTS(strs));
        gguf_writer_add_i32_array(w, "ints", ints, ELEMENTS(ints));
        gguf_writer_add_nested_array(w, "nested", 2);
        gguf_writer_add_f32(w, "float", 0.5f);
        gguf_writer_add_bool(w, "flag", true);
        gguf_writer_add_tensor(w, "a", TENSOR_F32, 1, ne_f32, f32, sizeof(f32));
        gguf_writer_add_tensor(w, "b", TENSOR_Q8_0, 2, ne_q8, q8, sizeof(q8));
        return w;
}

static void valid_models(void) {
        static const struct {
                const char *name;
                enum tensor_type weight, embd;
                bool tied;
                uint32_t n_layer, n_head, n_head_kv;
        } models[] = {
                { "valid-q4_1-tied.gguf", TENSOR_Q4_1, TENSOR_Q8_0, true, 1, 2, 1 },
                { "valid-q4_0-untied.gguf", TENSOR_Q4_0, TENSOR_Q4_0, false, 1, 2, 2 },
                { "valid-q8_0-2layers.gguf", TENSOR_Q8_0, TENSOR_Q8_0, true, 2, 1, 1 },
                { "valid-f16.gguf", TENSOR_F16, TENSOR_F16, false, 1, 2, 1 },
                { "valid-f32-bf16.gguf", TENSOR_F32, TENSOR_BF16, true, 1, 4, 2 },
                { "valid-bf16-q4_1.gguf", TENSOR_BF16, TENSOR_Q4_1, false, 1, 2, 1 },
                { "valid-q5_0-untied.gguf", TENSOR_Q5_0, TENSOR_Q5_1, false, 1, 2, 1 },
                { "valid-q5_1-tied.gguf", TENSOR_Q5_1, TENSOR_Q5_1, true, 2, 2, 2 },
        };
        for (size_t i = 0; i < ELEMENTS(models); i++) {
                struct synthetic_llama_config cfg = tiny();
                cfg.weight_type = models[i].weight;
                cfg.embd_type = models[i].embd;
                cfg.tied_output = models[i].tied;
                cfg.n_layer = models[i].n_layer;
                cfg.n_head = models[i].n_head;
                cfg.n_head_kv = models[i].n_head_kv;
                cfg.seed = i + 1;
                emit(models[i].name, model_writer(&cfg));
        }

        struct synthetic_llama_config cfg = tiny();
        struct gguf_writer *w = gguf_writer_new();
        gguf_writer_set_alignment(w, 64);
        synthetic_llama_build(w, &cfg);
        emit("valid-align64.gguf", w);
}

/* Inputs that crashed the loader once; each must now fail cleanly. */
static void regressions(void) {
        /* block_count 0xffffffff: model_from_gguf allocated the layer table (about 1 TB)
         * before looking for the layers' tensors. */
        struct synthetic_llama_config cfg = tiny();
        cfg.omit_key = "llama.block_count";
        struct gguf_writer *w = gguf_writer_new();
        gguf_writer_add_u32(w, "llama.block_count", 0xffffffffu);
        synthetic_llama_build(w, &cfg);
        emit("crash-huge-block-count.gguf", w);

        /* general.alignment 1: tensor data packed without padding, so the f32 norm vectors
         * sat at odd addresses and decoding them was a misaligned load. */
        cfg = tiny();
        w = gguf_writer_new();
        gguf_writer_set_alignment(w, 1);
        synthetic_llama_build(w, &cfg);
        emit("crash-alignment-1-model.gguf", w);
}

static void valid_values(void) {
        static const uint8_t u8s[] = { 0, 255 };
        static const int16_t i16s[] = { -32768, 7 };
        static const uint64_t u64s[] = { UINT64_MAX };
        static const double f64s[] = { 0.25, -1e300 };
        static const uint8_t bools[] = { 0, 1 };
        static const float f32s[] = { 1.5f, -0.0f };
        static const uint32_t inner0[] = { 1, 2 }, inner1[] = { 3 };
        const void *const inners[] = { inner0, inner1 };
        const size_t inner_counts[] = { 2, 1 };
        static const float t_f32[4] = { 1, -1, 0.5f, 2 };
        static const uint16_t t_16[4] = { 0x3c00, 0xc000, 0x3800, 0x0001 };
        static const struct block_q4_0 t_q4_0 = { 0x3c00, { 0x12, 0x34 } };
        static const struct block_q4_1 t_q4_1 = { 0x3c00, 0xbc00, { 0x56 } };
        static const struct block_q8_1 t_q8_1 = { 0x3c00, 0x4000, { 1, -1 } };
        static const struct block_q5_0 t_q5_0 = { 0x3c00, { 0x0f, 0, 0, 0x80 }, { 0x12, 0x34 } };
        static const struct block_q5_1 t_q5_1 = { 0x3c00, 0xbc00, { 0xff, 0, 0x01, 0 }, { 0x56 } };
        static struct block_q2_K t_q2_K = { .d = 0x3c00, .dmin = 0xbc00, .scales = { 0x21 }, .qs = { 0xe4 } };
        static struct block_q3_K t_q3_K = { .d = 0x3c00, .hmask = { 0x0f }, .qs = { 0x1b }, .scales = { 0x5a, 0, 0, 0, 0, 0, 0, 0, 0x3f } };
        static struct block_q4_K t_q4_K = { .d = 0x3c00, .dmin = 0x3800, .scales = { 0xc1, 0, 0, 0, 0x02 }, .qs = { 0x9f } };
        static struct block_q5_K t_q5_K = { .d = 0x3c00, .dmin = 0x3800, .scales = { 0x01, 0, 0, 0, 0x02 }, .qh = { 0x81 }, .qs = { 0x7e } };
        static struct block_q6_K t_q6_K = { .d = 0x3c00, .ql = { 0x5a }, .qh = { 0xc3 }, .scales = { -3, 5 } };
        const uint64_t ne4[] = { 4 }, ne32[] = { 32 }, ne_bf16[] = { 2, 2 }, ne256[] = { QK_K };

        struct gguf_writer *w = gguf_writer_new();
        gguf_writer_add_u8(w, "u8", 1);
        gguf_writer_add_i8(w, "i8", -1);
        gguf_writer_add_u16(w, "u16", 2);
        gguf_writer_add_i16(w, "i16", -2);
        gguf_writer_add_u32(w, "u32", 3);
        gguf_writer_add_i32(w, "i32", -3);
        gguf_writer_add_u64(w, "u64", 4);
        gguf_writer_add_i64(w, "i64", -4);
        gguf_writer_add_f32(w, "f32", 0.5f);
        gguf_writer_add_f64(w, "f64", 0.25);
        gguf_writer_add_bool(w, "bool", true);
        gguf_writer_add_string(w, "string", "text");
        gguf_writer_add_array(w, "a.u8", GGUF_VALUE_U8, u8s, ELEMENTS(u8s));
        gguf_writer_add_array(w, "a.i16", GGUF_VALUE_I16, i16s, ELEMENTS(i16s));
        gguf_writer_add_array(w, "a.u64", GGUF_VALUE_U64, u64s, ELEMENTS(u64s));
        gguf_writer_add_array(w, "a.f64", GGUF_VALUE_F64, f64s, ELEMENTS(f64s));
        gguf_writer_add_array(w, "a.bool", GGUF_VALUE_BOOL, bools, ELEMENTS(bools));
        gguf_writer_add_f32_array(w, "a.f32", f32s, ELEMENTS(f32s));
        gguf_writer_add_array_of_arrays(w, "a.nested", GGUF_VALUE_U32, inners, inner_counts, 2);
        gguf_writer_add_nested_array(w, "a.deep4", 4);
        gguf_writer_add_tensor(w, "f32", TENSOR_F32, 1, ne4, t_f32, sizeof(t_f32));
        gguf_writer_add_tensor(w, "f16", TENSOR_F16, 1, ne4, t_16, sizeof(t_16));
        gguf_writer_add_tensor(w, "bf16", TENSOR_BF16, 2, ne_bf16, t_16, sizeof(t_16));
        gguf_writer_add_tensor(w, "q4_0", TENSOR_Q4_0, 1, ne32, &t_q4_0, sizeof(t_q4_0));
        gguf_writer_add_tensor(w, "q4_1", TENSOR_Q4_1, 1, ne32, &t_q4_1, sizeof(t_q4_1));
        gguf_writer_add_tensor(w, "q8_1", TENSOR_Q8_1, 1, ne32, &t_q8_1, sizeof(t_q8_1));
        gguf_writer_add_tensor(w, "q5_0", TENSOR_Q5_0, 1, ne32, &t_q5_0, sizeof(t_q5_0));
        gguf_writer_add_tensor(w, "q5_1", TENSOR_Q5_1, 1, ne32, &t_q5_1, sizeof(t_q5_1));
        gguf_writer_add_tensor(w, "q2_K", TENSOR_Q2_K, 1, ne256, &t_q2_K, sizeof(t_q2_K));
        gguf_writer_add_tensor(w, "q3_K", TENSOR_Q3_K, 1, ne256, &t_q3_K, sizeof(t_q3_K));
        gguf_writer_add_tensor(w, "q4_K", TENSOR_Q4_K, 1, ne256, &t_q4_K, sizeof(t_q4_K));
        gguf_writer_add_tensor(w, "q5_K", TENSOR_Q5_K, 1, ne256, &t_q5_K, sizeof(t_q5_K));
        gguf_writer_add_tensor(w, "q6_K", TENSOR_Q6_K, 1, ne256, &t_q6_K, sizeof(t_q6_K));
        emit("valid-values.gguf", w);

        emit("valid-minimal.gguf", gguf_writer_new());
        emit("valid-small.gguf", small_writer());
}

static void malformed_header(void) {
        size_t len;
        struct gguf_writer *w = small_writer();
        uint8_t *buf = image(w, &len);
        size_t min_len = gguf_writer_min_valid_length(w);
        gguf_writer_free(w);

        uint8_t *copy = malloc(len);
        if (!copy)
                abort();
#define FRESH() memcpy(copy, buf, len)
        FRESH();
        copy[3] = 'X';
        emit_buffer("bad-magic.gguf", copy, len);
        emit_buffer("truncated-header.gguf", buf, 20);
        emit_buffer("truncated-metadata.gguf", buf, 100);
        emit_buffer("truncated-data.gguf", buf, min_len - 1);
        emit_buffer("empty.gguf", buf, 0);
        FRESH();
        patch_u64(copy, OFF_FIRST_KV, UINT64_MAX);
        emit_buffer("huge-key-length.gguf", copy, len);
        FRESH();
        patch_u64(copy, OFF_N_TENSORS, 1ull << 40);
        emit_buffer("huge-tensor-count.gguf", copy, len);
        FRESH();
        patch_u64(copy, OFF_N_KV, UINT64_MAX);
        emit_buffer("huge-kv-count.gguf", copy, len);
#undef FRESH
        free(copy);
        free(buf);

        w = small_writer();
        gguf_writer_set_version(w, 2);
        emit("version-2.gguf", w);
        w = small_writer();
        gguf_writer_set_version(w, 4);
        emit("version-4.gguf", w);
}

static void malformed_values(void) {
        static const uint32_t u32s[] = { 1, 2, 3 };
        static const char *const strs[] = { "x", "y" };
        static const uint8_t two = 2;
        const size_t count_at = OFF_FIRST_KV + 8 + 1 + 4 + 4;
        size_t len;
        uint8_t *buf;
        struct gguf_writer *w;

        w = gguf_writer_new();
        gguf_writer_add_string(w, "k", "value");
        buf = image(w, &len);
        gguf_writer_free(w);
        patch_u64(buf, OFF_FIRST_KV + 8 + 1 + 4, UINT64_MAX - 3);
        emit_buffer("huge-string-length.gguf", buf, len);
        free(buf);

        w = gguf_writer_new();
        gguf_writer_add_u32_array(w, "a", u32s, ELEMENTS(u32s));
        buf = image(w, &len);
        gguf_writer_free(w);
        patch_u64(buf, count_at, 1ull << 62);
        emit_buffer("huge-array-count.gguf", buf, len);
        free(buf);

        w = gguf_writer_new();
        gguf_writer_add_string_array(w, "a", strs, ELEMENTS(strs));
        buf = image(w, &len);
        gguf_writer_free(w);
        patch_u64(buf, count_at, UINT64_MAX);
        emit_buffer("huge-string-array-count.gguf", buf, len);
        free(buf);

        uint8_t arr[12];
        uint32_t unknown = 13;
        uint64_t one = 1;
        memcpy(arr, &unknown, 4);
        memcpy(arr + 4, &one, 8);
        w = small_writer();
        gguf_writer_add_raw(w, "weird", unknown, &two, 1);
        emit("unknown-value-type.gguf", w);
        w = small_writer();
        gguf_writer_add_raw(w, "weird", GGUF_VALUE_ARRAY, arr, sizeof(arr));
        emit("unknown-array-type.gguf", w);
        w = small_writer();
        gguf_writer_add_nested_array(w, "deep", 5);
        emit("nested-too-deep.gguf", w);
        w = small_writer();
        gguf_writer_add_raw(w, "flag2", GGUF_VALUE_BOOL, &two, 1);
        emit("bool-2.gguf", w);

        static const uint32_t alignments[] = { 0, 3, 1, 4 };
        for (size_t i = 0; i < ELEMENTS(alignments); i++) {
                char name[64];
                snprintf(name, sizeof(name), "alignment-%u.gguf", alignments[i]);
                w = small_writer();
                gguf_writer_add_u32(w, "general.alignment", alignments[i]);
                emit(name, w);
        }
        w = small_writer();
        gguf_writer_add_u64(w, "general.alignment", 32);
        emit("alignment-u64.gguf", w);
}

static void malformed_tensors(void) {
        static const struct {
                const char *name;
                uint32_t type, n_dims;
                uint64_t ne[5];
                uint64_t offset;
        } raw[] = {
                { "tensor-type-q6_k.gguf", 14, 2, { 32, 2 }, 0 },
                { "tensor-type-huge.gguf", 0xffffffffu, 2, { 32, 2 }, 0 },
                { "tensor-zero-dim.gguf", TENSOR_F32, 2, { 32, 0 }, 0 },
                { "tensor-ndims-0.gguf", TENSOR_F32, 0, { 0 }, 0 },
                { "tensor-ndims-5.gguf", TENSOR_F32, 5, { 32, 1, 1, 1, 1 }, 0 },
                { "tensor-overflow.gguf", TENSOR_F32, 3, { 1ull << 32, 1ull << 32, 1ull << 32 }, 0 },
                { "tensor-partial-block.gguf", TENSOR_Q4_1, 2, { 48, 2 }, 0 },
                { "tensor-partial-block-q5_0.gguf", TENSOR_Q5_0, 2, { 48, 2 }, 0 },
                { "tensor-partial-block-q5_1.gguf", TENSOR_Q5_1, 1, { 40 }, 0 },
                { "tensor-past-end-q5_1.gguf", TENSOR_Q5_1, 2, { 32, 64 }, 0 },
                { "tensor-partial-block-q2_k.gguf", TENSOR_Q2_K, 2, { 320, 2 }, 0 },
                { "tensor-partial-block-q3_k.gguf", TENSOR_Q3_K, 1, { 128 }, 0 },
                { "tensor-partial-block-q4_k.gguf", TENSOR_Q4_K, 2, { 288, 1 }, 0 },
                { "tensor-partial-block-q5_k.gguf", TENSOR_Q5_K, 2, { 32, 8 }, 0 },
                { "tensor-partial-block-q6_k.gguf", TENSOR_Q6_K, 2, { 264, 2 }, 0 },
                { "tensor-past-end-q2_k.gguf", TENSOR_Q2_K, 2, { 256, 16 }, 0 },
                { "tensor-past-end-q3_k.gguf", TENSOR_Q3_K, 2, { 512, 8 }, 0 },
                { "tensor-past-end-q4_k.gguf", TENSOR_Q4_K, 2, { 256, 8 }, 0 },
                { "tensor-past-end-q5_k.gguf", TENSOR_Q5_K, 2, { 768, 2 }, 0 },
                { "tensor-past-end-q6_k.gguf", TENSOR_Q6_K, 2, { 256, 5 }, 0 },
                { "tensor-type-iq4_xs.gguf", 23, 2, { 256, 2 }, 0 },
                { "tensor-misaligned.gguf", TENSOR_F32, 2, { 32, 2 }, 4 },
                { "tensor-offset-oob.gguf", TENSOR_F32, 2, { 32, 2 }, 1ull << 62 },
                { "tensor-past-end.gguf", TENSOR_F32, 2, { 32, 64 }, 0 },
        };
        for (size_t i = 0; i < ELEMENTS(raw); i++) {
                struct gguf_writer *w = small_writer();
                gguf_writer_add_tensor_info_raw(w, "raw", raw[i].type, raw[i].n_dims, raw[i].ne, raw[i].offset);
                gguf_writer_add_data_padding(w, 1024);
                emit(raw[i].name, w);
        }
        static const float v[8];
        const uint64_t ne8[] = { 8 };
        struct gguf_writer *w = small_writer();
        gguf_writer_add_tensor(w, "a", TENSOR_F32, 1, ne8, v, sizeof(v));
        emit("tensor-duplicate.gguf", w);
}

/* Models of the 5-bit types cut inside their tensor data. */
static void truncated_q5_models(void) {
        static const enum tensor_type types[] = { TENSOR_Q5_0, TENSOR_Q5_1 };
        for (size_t t = 0; t < ELEMENTS(types); t++) {
                struct synthetic_llama_config cfg = tiny();
                cfg.weight_type = cfg.embd_type = types[t];
                struct gguf_writer *w = model_writer(&cfg);
                size_t len, min_len = gguf_writer_min_valid_length(w);
                uint8_t *buf = image(w, &len);
                gguf_writer_free(w);
                char name[64];
                snprintf(name, sizeof(name), "truncated-%s-model.gguf", types[t] == TENSOR_Q5_0 ? "q5_0" : "q5_1");
                emit_buffer(name, buf, min_len - tensor_type_info(types[t])->block_bytes - 5);
                free(buf);
        }
}

static void model_errors(void) {
        struct synthetic_llama_config cfg;

        cfg = tiny();
        cfg.omit_tensor = "blk.0.ffn_up.weight";
        emit("model-missing-tensor.gguf", model_writer(&cfg));
        cfg = tiny();
        cfg.omit_key = "llama.block_count";
        emit("model-missing-key.gguf", model_writer(&cfg));
        cfg = tiny();
        cfg.omit_key = "llama.vocab_size";
        emit("model-no-vocab-size.gguf", model_writer(&cfg));
        cfg = tiny();
        cfg.string_key = "llama.embedding_length";
        emit("model-wrong-key-type.gguf", model_writer(&cfg));
        cfg = tiny();
        cfg.extra_row_tensor = "blk.0.attn_q.weight";
        emit("model-bad-shape.gguf", model_writer(&cfg));
        cfg = tiny();
        cfg.n_head = 2;
        cfg.n_head_kv = 3;
        emit("model-head-kv.gguf", model_writer(&cfg));
        cfg = tiny();
        cfg.architecture = "gpt2";
        emit("model-arch-gpt2.gguf", model_writer(&cfg));
}

/* A few seeded byte flips in the metadata of a valid model, where the parser branches most. */
static void mutations(void) {
        struct synthetic_llama_config cfg = tiny();
        struct gguf_writer *w = model_writer(&cfg);
        size_t len;
        uint8_t *buf = image(w, &len);
        gguf_writer_free(w);
        struct test_rng rng = { 2024 };

        for (int i = 0; i < 4; i++) {
                uint8_t *copy = malloc(len);
                if (!copy)
                        abort();
                memcpy(copy, buf, len);
                for (int k = 0; k < 1 + i; k++)
                        copy[test_rng_next(&rng) % 4096] ^= (uint8_t) (1u << (test_rng_next(&rng) % 8));
                char name[64];
                snprintf(name, sizeof(name), "mutated-%d.gguf", i);
                emit_buffer(name, copy, len);
                free(copy);
        }
        free(buf);
}

int main(int argc, char *argv[]) {
        out_dir = argc > 1 ? argv[1] : "tests/fuzz/gguf";
        valid_models();
        valid_values();
        malformed_header();
        malformed_values();
        malformed_tensors();
        model_errors();
        truncated_q5_models();
        mutations();
        regressions();
        printf("make-gguf-corpus: wrote %u files to %s\n", n_written, out_dir);
        return EXIT_SUCCESS;
}
