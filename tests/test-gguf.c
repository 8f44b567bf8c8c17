/* SPDX-License-Identifier: MIT */
/* The GGUF reader and the model loader: the real model, round trips through the test
 * writer, malformed files (each must fail with a message naming the file and the problem)
 * and model-level errors on synthetic files. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "float16.h"
#include "gguf-writer.h"
#include "gguf.h"
#include "model.h"
#include "synthetic-llama.h"
#include "tensor-types.h"
#include "test-helpers.h"

#define ELEMENTS(a) (sizeof(a) / sizeof((a)[0]))

/* Byte offsets in the fixed header, and of the first key-value pair. */
#define OFF_N_TENSORS 8
#define OFF_N_KV 16
#define OFF_FIRST_KV 24

static void patch_u64(uint8_t *buf, size_t off, uint64_t v) {
        memcpy(buf + off, &v, sizeof(v));
}

static uint8_t *writer_image(struct gguf_writer *w, size_t *len) {
        uint8_t *buf;
        ck_assert_int_eq(gguf_writer_to_buffer(w, &buf, len), 0);
        return buf;
}

/* Parses a copy of exactly len bytes, so that ASan sees any read past the end, and lets the
 * result go. */
static int parse_exact(const uint8_t *buf, size_t len, const char *name, struct error *err) {
        uint8_t *copy = malloc(len ? len : 1);
        ck_assert_ptr_nonnull(copy);
        if (len)
                memcpy(copy, buf, len);
        struct gguf_file *f = NULL;
        int r = gguf_parse(copy, len, name, &f, err);
        ck_assert(r == 0 ? f != NULL : f == NULL);
        gguf_close(f);
        free(copy);
        return r;
}

static void assert_message(const struct error *err, const char *name, const char *needle) {
        ck_assert_msg(strstr(err->message, name), "message does not name '%s': %s", name, err->message);
        ck_assert_msg(strstr(err->message, needle), "message does not mention '%s': %s", needle, err->message);
}

/* The image must fail to parse from memory and from a file, with errnum and a message that
 * names the file and contains needle. */
static void expect_invalid(const uint8_t *buf, size_t len, const char *name, int errnum, const char *needle) {
        struct error err = { "" };
        int r = parse_exact(buf, len, name, &err);
        ck_assert_msg(r == -errnum, "%s: parse gave %d (%s), expected %d", name, r, err.message, -errnum);
        assert_message(&err, name, needle);

        char *dir = test_tmpdir(), *path = test_path_join(dir, name);
        ck_assert_int_eq(test_write_file(path, buf, len), 0);
        struct gguf_file *f = NULL;
        err.message[0] = 0;
        r = gguf_open(path, &f, &err);
        ck_assert_msg(r < 0, "%s: gguf_open accepted the file", name);
        ck_assert_ptr_null(f);
        /* An empty file is caught before parsing, with its own message. */
        if (len > 0) {
                ck_assert_int_eq(r, -errnum);
                assert_message(&err, path, needle);
        }
        free(path);
        test_tmpdir_remove(dir);
}

static void expect_invalid_writer(struct gguf_writer *w, const char *name, int errnum, const char *needle) {
        size_t len;
        uint8_t *buf = writer_image(w, &len);
        expect_invalid(buf, len, name, errnum, needle);
        free(buf);
        gguf_writer_free(w);
}

static bool mentions_truncation(const char *msg) {
        return strstr(msg, "truncated") || strstr(msg, "cannot fit") || strstr(msg, "out of bounds");
}

/* ---- (a) the real model ---------------------------------------------------------------- */

START_TEST(test_real_model_tensor_types) {
        struct gguf_file *f = NULL;
        struct error err = { "" };
        unsigned seen[TENSOR_TYPE_MAX] = { 0 };

        int r = gguf_open(test_model_path(), &f, &err);
        ck_assert_msg(r == 0, "gguf_open: %s", err.message);
        ck_assert_uint_eq(f->version, 3);
        ck_assert_uint_eq(f->alignment, GGUF_DEFAULT_ALIGNMENT);
        ck_assert_uint_eq(f->n_tensors, 30 * 9 + 2);
        for (uint64_t i = 0; i < f->n_tensors; i++) {
                const struct gguf_tensor *t = &f->tensors[i];
                ck_assert_msg(tensor_type_info(t->type), "tensor %.*s has unsupported type %u", (int) t->name.len,
                              t->name.data, (unsigned) t->type);
                ck_assert_uint_lt(t->type, TENSOR_TYPE_MAX);
                ck_assert_uint_eq((uint64_t) ((const uint8_t *) t->data - f->base) % f->alignment, 0);
                ck_assert_uint_le((uint64_t) ((const uint8_t *) t->data - f->base) + t->n_bytes, f->size);
                seen[t->type]++;
        }
        for (uint32_t type = 0; type < TENSOR_TYPE_MAX; type++)
                if (seen[type])
                        printf("real model: %u tensors of type %s\n", seen[type], tensor_type_info(type)->name);
        ck_assert_uint_gt(seen[TENSOR_F32], 0);
        ck_assert_uint_gt(seen[TENSOR_Q4_1], 0);
        ck_assert_uint_gt(seen[TENSOR_Q8_0], 0);

        const struct gguf_tensor *embd = gguf_find_tensor(f, "token_embd.weight");
        ck_assert_ptr_nonnull(embd);
        ck_assert_uint_eq(embd->ne[0], 576);
        ck_assert_uint_eq(embd->ne[1], 49152);
        ck_assert_ptr_null(gguf_find_tensor(f, "output.weight"));
        gguf_close(f);
}
END_TEST

static uint32_t meta_u32(const struct gguf_file *f, const char *key) {
        struct error err;
        uint32_t v = 0;
        int r = gguf_get_u32(f, key, &v, &err);
        ck_assert_msg(r == 0, "%s", err.message);
        return v;
}

START_TEST(test_real_model_hparams) {
        struct model *m = NULL;
        struct error err = { "" };
        float v;

        int r = model_load(test_model_path(), &m, &err);
        ck_assert_msg(r == 0, "model_load: %s", err.message);
        const struct model_hparams *hp = &m->hp;
        const struct gguf_file *f = m->file;

        ck_assert_str_eq(m->architecture, "llama");
        ck_assert_uint_eq(hp->n_layer, meta_u32(f, "llama.block_count"));
        ck_assert_uint_eq(hp->n_embd, meta_u32(f, "llama.embedding_length"));
        ck_assert_uint_eq(hp->n_ff, meta_u32(f, "llama.feed_forward_length"));
        ck_assert_uint_eq(hp->n_head, meta_u32(f, "llama.attention.head_count"));
        ck_assert_uint_eq(hp->n_head_kv, meta_u32(f, "llama.attention.head_count_kv"));
        ck_assert_uint_eq(hp->n_ctx_train, meta_u32(f, "llama.context_length"));
        ck_assert_uint_eq(hp->n_vocab, meta_u32(f, "llama.vocab_size"));
        ck_assert_uint_eq(hp->rope_dim, meta_u32(f, "llama.rope.dimension_count"));
        ck_assert_int_eq(gguf_get_f32(f, "llama.rope.freq_base", &v, &err), 0);
        ck_assert_float_eq(hp->rope_theta, v);
        ck_assert_int_eq(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &v, &err), 0);
        ck_assert_float_eq(hp->rms_eps, v);

        ck_assert_uint_eq(hp->n_layer, 30);
        ck_assert_uint_eq(hp->n_embd, 576);
        ck_assert_uint_eq(hp->n_ff, 1536);
        ck_assert_uint_eq(hp->n_head, 9);
        ck_assert_uint_eq(hp->n_head_kv, 3);
        ck_assert_uint_eq(hp->head_dim, 64);
        ck_assert_uint_eq(hp->n_vocab, 49152);
        ck_assert_uint_eq(hp->n_ctx_train, 8192);
        ck_assert_float_eq(hp->rope_theta, 100000.0f);
        ck_assert_float_eq_tol(hp->rms_eps, 1e-5f, 1e-12f);
        ck_assert(m->tied_output);
        ck_assert_ptr_eq(m->output.data, m->token_embd.data);
        ck_assert_int_eq(m->token_embd.type, TENSOR_Q8_0);
        ck_assert_int_eq(m->layers[0].wq.type, TENSOR_Q4_1);
        ck_assert_uint_eq(m->layers[0].wk.n_rows, 192);
        ck_assert_uint_eq(m->layers[29].w_down.n_cols, 1536);
        ck_assert_uint_gt(model_weight_bytes(m), 50u * 1000 * 1000);
        model_free(m);
}
END_TEST

/* A download cut short anywhere must say so, not blame the tensors' shapes. */
START_TEST(test_real_model_truncated) {
        struct gguf_file *f = NULL;
        struct error err = { "" };
        const char *path = test_model_path();

        int r = gguf_open(path, &f, &err);
        ck_assert_msg(r == 0, "gguf_open: %s", err.message);
        const uint64_t cuts[] = { 0, 4, 23, 1000, 100000, 1000000, 1800000, 2500000, 3600000, 50000000,
                                  f->size - 1 };
        for (size_t i = 0; i < ELEMENTS(cuts); i++) {
                struct gguf_file *g = NULL;
                err.message[0] = 0;
                r = gguf_parse(f->base, cuts[i], path, &g, &err);
                ck_assert_msg(r == -EINVAL, "cut at %llu gave %d", (unsigned long long) cuts[i], r);
                ck_assert_ptr_null(g);
                ck_assert_msg(strstr(err.message, path), "cut at %llu: %s", (unsigned long long) cuts[i], err.message);
                ck_assert_msg(mentions_truncation(err.message), "cut at %llu: %s", (unsigned long long) cuts[i],
                              err.message);
        }
        gguf_close(f);
}
END_TEST

/* ---- (b) writer round trips ------------------------------------------------------------ */

static const struct gguf_kv *must_find(const struct gguf_file *f, const char *key, enum gguf_value_type type) {
        const struct gguf_kv *kv = gguf_find_kv(f, key);
        ck_assert_msg(kv, "key %s not found", key);
        ck_assert_msg(kv->value.type == type, "key %s is a %s, expected %s", key, gguf_value_type_name(kv->value.type),
                      gguf_value_type_name(type));
        return kv;
}

static void assert_scalar_array(const struct gguf_file *f, const char *key, enum gguf_value_type type,
                                const void *elems, size_t count, size_t elem_size) {
        const struct gguf_kv *kv = must_find(f, key, GGUF_VALUE_ARRAY);
        ck_assert_int_eq(kv->value.array.type, type);
        ck_assert_uint_eq(kv->value.array.count, count);
        ck_assert_ptr_null(kv->value.array.strings);
        if (count)
                ck_assert_mem_eq(kv->value.array.raw, elems, count * elem_size);
}

START_TEST(test_roundtrip_values) {
        static const uint8_t a_u8[] = { 0, 1, 255 };
        static const int8_t a_i8[] = { -128, 0, 127 };
        static const uint16_t a_u16[] = { 0, 65535, 4660 };
        static const int16_t a_i16[] = { -32768, 32767, -1 };
        static const uint32_t a_u32[] = { 0, 1, 0xffffffffu, 123456789 };
        static const int32_t a_i32[] = { INT32_MIN, -1, 0, INT32_MAX };
        static const uint64_t a_u64[] = { UINT64_MAX, 0, 1ull << 40 };
        static const int64_t a_i64[] = { INT64_MIN, INT64_MAX, -7 };
        static const float a_f32[] = { -1.5f, 0.0f, 3.25e-7f, 1e30f };
        static const double a_f64[] = { -2.0, 1e-300, 3.141592653589793 };
        static const uint8_t a_bool[] = { 1, 0, 1 };
        static const char *const a_str[] = { "", "hello", "\xc4\xa0t", "a longer string with spaces" };
        static const uint16_t inner0[] = { 1, 2, 3 }, inner2[] = { 65535 };
        const void *const inners[] = { inner0, NULL, inner2 };
        const size_t inner_counts[] = { 3, 0, 1 };
        static const char with_nul[] = { 'a', 0, 'b' };

        struct gguf_writer *w = gguf_writer_new();
        gguf_writer_add_u8(w, "u8", 200);
        gguf_writer_add_i8(w, "i8", -100);
        gguf_writer_add_u16(w, "u16", 65535);
        gguf_writer_add_i16(w, "i16", -32768);
        gguf_writer_add_u32(w, "u32", 0xfffffffeu);
        gguf_writer_add_i32(w, "i32", INT32_MIN);
        gguf_writer_add_u64(w, "u64", UINT64_MAX);
        gguf_writer_add_i64(w, "i64", INT64_MIN);
        gguf_writer_add_f32(w, "f32", -0.15625f);
        gguf_writer_add_f64(w, "f64", 1.0 / 3.0);
        gguf_writer_add_bool(w, "bool.true", true);
        gguf_writer_add_bool(w, "bool.false", false);
        gguf_writer_add_string(w, "string", "hello, world");
        gguf_writer_add_string(w, "string.empty", "");
        gguf_writer_add_string_n(w, "string.nul", with_nul, sizeof(with_nul));
        gguf_writer_add_string(w, "", "the empty key");
        gguf_writer_add_array(w, "array.u8", GGUF_VALUE_U8, a_u8, ELEMENTS(a_u8));
        gguf_writer_add_array(w, "array.i8", GGUF_VALUE_I8, a_i8, ELEMENTS(a_i8));
        gguf_writer_add_array(w, "array.u16", GGUF_VALUE_U16, a_u16, ELEMENTS(a_u16));
        gguf_writer_add_array(w, "array.i16", GGUF_VALUE_I16, a_i16, ELEMENTS(a_i16));
        gguf_writer_add_u32_array(w, "array.u32", a_u32, ELEMENTS(a_u32));
        gguf_writer_add_i32_array(w, "array.i32", a_i32, ELEMENTS(a_i32));
        gguf_writer_add_array(w, "array.u64", GGUF_VALUE_U64, a_u64, ELEMENTS(a_u64));
        gguf_writer_add_array(w, "array.i64", GGUF_VALUE_I64, a_i64, ELEMENTS(a_i64));
        gguf_writer_add_f32_array(w, "array.f32", a_f32, ELEMENTS(a_f32));
        gguf_writer_add_array(w, "array.f64", GGUF_VALUE_F64, a_f64, ELEMENTS(a_f64));
        gguf_writer_add_array(w, "array.bool", GGUF_VALUE_BOOL, a_bool, ELEMENTS(a_bool));
        gguf_writer_add_array(w, "array.empty", GGUF_VALUE_U32, NULL, 0);
        gguf_writer_add_string_array(w, "array.string", a_str, ELEMENTS(a_str));
        gguf_writer_add_string_array(w, "array.string.empty", NULL, 0);
        gguf_writer_add_array_of_arrays(w, "array.nested", GGUF_VALUE_U16, inners, inner_counts, ELEMENTS(inners));
        gguf_writer_add_nested_array(w, "array.deep2", 2);
        gguf_writer_add_nested_array(w, "array.deep4", 4);
        gguf_writer_add_u32(w, "after.arrays", 42); /* proves the arrays were skipped exactly */

        size_t len;
        uint8_t *buf = writer_image(w, &len);
        gguf_writer_free(w);
        struct gguf_file *f = NULL;
        struct error err = { "" };
        int r = gguf_parse(buf, len, "values.gguf", &f, &err);
        ck_assert_msg(r == 0, "%s", err.message);
        ck_assert_uint_eq(f->n_kv, 34);
        ck_assert_uint_eq(f->n_tensors, 0);
        ck_assert_uint_eq(f->alignment, GGUF_DEFAULT_ALIGNMENT);
        ck_assert_uint_eq(f->data_size, 0);

        ck_assert_uint_eq(must_find(f, "u8", GGUF_VALUE_U8)->value.u64, 200);
        ck_assert_int_eq(must_find(f, "i8", GGUF_VALUE_I8)->value.i64, -100);
        ck_assert_uint_eq(must_find(f, "u16", GGUF_VALUE_U16)->value.u64, 65535);
        ck_assert_int_eq(must_find(f, "i16", GGUF_VALUE_I16)->value.i64, -32768);
        ck_assert_uint_eq(must_find(f, "u32", GGUF_VALUE_U32)->value.u64, 0xfffffffeu);
        ck_assert_int_eq(must_find(f, "i32", GGUF_VALUE_I32)->value.i64, INT32_MIN);
        ck_assert_uint_eq(must_find(f, "u64", GGUF_VALUE_U64)->value.u64, UINT64_MAX);
        ck_assert_int_eq(must_find(f, "i64", GGUF_VALUE_I64)->value.i64, INT64_MIN);
        ck_assert_double_eq(must_find(f, "f32", GGUF_VALUE_F32)->value.f64, -0.15625);
        ck_assert_double_eq(must_find(f, "f64", GGUF_VALUE_F64)->value.f64, 1.0 / 3.0);
        ck_assert_uint_eq(must_find(f, "bool.true", GGUF_VALUE_BOOL)->value.u64, 1);
        ck_assert_uint_eq(must_find(f, "bool.false", GGUF_VALUE_BOOL)->value.u64, 0);
        ck_assert(gguf_string_equals(must_find(f, "string", GGUF_VALUE_STRING)->value.str, "hello, world"));
        ck_assert_uint_eq(must_find(f, "string.empty", GGUF_VALUE_STRING)->value.str.len, 0);
        struct gguf_string nul = must_find(f, "string.nul", GGUF_VALUE_STRING)->value.str;
        ck_assert_uint_eq(nul.len, 3);
        ck_assert_mem_eq(nul.data, with_nul, 3);
        ck_assert(gguf_string_equals(must_find(f, "", GGUF_VALUE_STRING)->value.str, "the empty key"));

        assert_scalar_array(f, "array.u8", GGUF_VALUE_U8, a_u8, ELEMENTS(a_u8), 1);
        assert_scalar_array(f, "array.i8", GGUF_VALUE_I8, a_i8, ELEMENTS(a_i8), 1);
        assert_scalar_array(f, "array.u16", GGUF_VALUE_U16, a_u16, ELEMENTS(a_u16), 2);
        assert_scalar_array(f, "array.i16", GGUF_VALUE_I16, a_i16, ELEMENTS(a_i16), 2);
        assert_scalar_array(f, "array.u32", GGUF_VALUE_U32, a_u32, ELEMENTS(a_u32), 4);
        assert_scalar_array(f, "array.i32", GGUF_VALUE_I32, a_i32, ELEMENTS(a_i32), 4);
        assert_scalar_array(f, "array.u64", GGUF_VALUE_U64, a_u64, ELEMENTS(a_u64), 8);
        assert_scalar_array(f, "array.i64", GGUF_VALUE_I64, a_i64, ELEMENTS(a_i64), 8);
        assert_scalar_array(f, "array.f32", GGUF_VALUE_F32, a_f32, ELEMENTS(a_f32), 4);
        assert_scalar_array(f, "array.f64", GGUF_VALUE_F64, a_f64, ELEMENTS(a_f64), 8);
        assert_scalar_array(f, "array.bool", GGUF_VALUE_BOOL, a_bool, ELEMENTS(a_bool), 1);
        assert_scalar_array(f, "array.empty", GGUF_VALUE_U32, NULL, 0, 4);

        /* Integer arrays of every width read back through gguf_array_int. */
        const struct gguf_value *arr;
        ck_assert_int_eq(gguf_get_array(f, "array.i8", GGUF_VALUE_I32, &arr, &err), 0);
        for (size_t i = 0; i < ELEMENTS(a_i8); i++)
                ck_assert_int_eq(gguf_array_int(arr, i), a_i8[i]);
        ck_assert_int_eq(gguf_get_array(f, "array.u16", GGUF_VALUE_U32, &arr, &err), 0);
        for (size_t i = 0; i < ELEMENTS(a_u16); i++)
                ck_assert_int_eq(gguf_array_int(arr, i), a_u16[i]);
        ck_assert_int_eq(gguf_get_array(f, "array.i64", GGUF_VALUE_I64, &arr, &err), 0);
        for (size_t i = 0; i < ELEMENTS(a_i64); i++)
                ck_assert_int_eq(gguf_array_int(arr, i), a_i64[i]);
        ck_assert_int_eq(gguf_get_array(f, "array.u32", GGUF_VALUE_U32, &arr, &err), 0);
        ck_assert_int_eq(gguf_array_int(arr, 2), 0xffffffffll);

        ck_assert_int_eq(gguf_get_array(f, "array.string", GGUF_VALUE_STRING, &arr, &err), 0);
        ck_assert_uint_eq(arr->array.count, ELEMENTS(a_str));
        ck_assert_ptr_nonnull(arr->array.strings);
        for (size_t i = 0; i < ELEMENTS(a_str); i++)
                ck_assert(gguf_string_equals(arr->array.strings[i], a_str[i]));
        ck_assert_int_eq(gguf_get_array(f, "array.string.empty", GGUF_VALUE_STRING, &arr, &err), 0);
        ck_assert_uint_eq(arr->array.count, 0);

        /* The nested array: walk its encoded elements. */
        ck_assert_int_eq(gguf_get_array(f, "array.nested", GGUF_VALUE_ARRAY, &arr, &err), 0);
        ck_assert_uint_eq(arr->array.count, ELEMENTS(inners));
        const uint8_t *p = arr->array.raw;
        for (size_t i = 0; i < ELEMENTS(inners); i++) {
                uint32_t type;
                uint64_t count;
                memcpy(&type, p, 4);
                memcpy(&count, p + 4, 8);
                ck_assert_uint_eq(type, GGUF_VALUE_U16);
                ck_assert_uint_eq(count, inner_counts[i]);
                if (count)
                        ck_assert_mem_eq(p + 12, inners[i], count * 2);
                p += 12 + count * 2;
        }
        const struct gguf_kv *deep = must_find(f, "array.deep4", GGUF_VALUE_ARRAY);
        ck_assert_int_eq(deep->value.array.type, GGUF_VALUE_ARRAY);
        ck_assert_uint_eq(must_find(f, "after.arrays", GGUF_VALUE_U32)->value.u64, 42);

        /* Typed look-ups: widening, range checks and type mismatches. */
        uint32_t u;
        float fl;
        bool b;
        struct gguf_string s;
        ck_assert_int_eq(gguf_get_u32(f, "u8", &u, &err), 0);
        ck_assert_uint_eq(u, 200);
        ck_assert_int_eq(gguf_get_u32(f, "i8", &u, &err), -EINVAL);
        assert_message(&err, "values.gguf", "out of range");
        ck_assert_int_eq(gguf_get_u32(f, "u64", &u, &err), -EINVAL);
        ck_assert_int_eq(gguf_get_u32(f, "string", &u, &err), -EINVAL);
        assert_message(&err, "values.gguf", "is a string, expected an integer");
        ck_assert_int_eq(gguf_get_u32(f, "no.such.key", &u, &err), -ENOENT);
        assert_message(&err, "values.gguf", "missing metadata key 'no.such.key'");
        ck_assert_int_eq(gguf_get_f32(f, "f64", &fl, &err), 0);
        ck_assert_float_eq_tol(fl, 1.0f / 3.0f, 1e-7f);
        ck_assert_int_eq(gguf_get_f32(f, "u32", &fl, &err), -EINVAL);
        ck_assert_int_eq(gguf_get_bool(f, "bool.true", &b, &err), 0);
        ck_assert(b);
        ck_assert_int_eq(gguf_get_bool(f, "u8", &b, &err), -EINVAL);
        ck_assert_int_eq(gguf_get_string(f, "string", &s, &err), 0);
        ck_assert_int_eq(gguf_get_string(f, "array.string", &s, &err), -EINVAL);
        ck_assert_int_eq(gguf_get_array(f, "array.f32", GGUF_VALUE_U32, &arr, &err), -EINVAL);
        assert_message(&err, "values.gguf", "array of f32");
        ck_assert_int_eq(gguf_get_array(f, "u32", GGUF_VALUE_U32, &arr, &err), -EINVAL);

        gguf_close(f);
        free(buf);
}
END_TEST

/* Expected floats are written out by hand from the block formulas in REFERENCE.md. */
struct tensor_case {
        const char *name;
        enum tensor_type type;
        uint32_t n_dims;
        uint64_t ne[4];
        const void *data;
        size_t n_bytes;
        const float *expected;
        size_t n;
};

START_TEST(test_roundtrip_tensors) {
        static const uint32_t alignments[] = { 0 /* default */, 64, 8, 256 };
        uint32_t alignment = alignments[_i];

        static const float f32[7] = { 1.0f, -2.5f, 3.0e-38f, 65504.0f, -0.0f, 1e-45f, 123.456f };
        /* 1, -2, 0.333251953125, 65504, 2^-24 (subnormal), -0, inf, 0.5 and so on */
        static const uint16_t f16[15] = { 0x3c00, 0xc000, 0x3555, 0x7bff, 0x0001, 0x8000, 0x7c00, 0x3800,
                                          0xfc00, 0x0400, 0x03ff, 0x4248, 0xbe00, 0x5640, 0x0000 };
        static const float f16_expected[15] = { 1.0f, -2.0f, 0.333251953125f, 65504.0f, 0x1p-24f, -0.0f, INFINITY,
                                                0.5f, -INFINITY, 0x1p-14f, 0x3ffp-24f, 3.140625f, -1.5f, 100.0f, 0.0f };
        static const uint16_t bf16[12] = { 0x3f80, 0xc040, 0x4049, 0x0001, 0x7f80, 0xff80,
                                           0x3e80, 0x8000, 0x4780, 0xbf00, 0x0080, 0x42c8 };
        static const float bf16_expected[12] = { 1.0f, -3.0f, 3.140625f, 0x1p-133f, INFINITY, -INFINITY,
                                                 0.25f, -0.0f, 65536.0f, -0.5f, 0x1p-126f, 100.0f };

        struct block_q4_0 q4_0[4];
        struct block_q4_1 q4_1[3];
        struct block_q8_0 q8_0[2];
        struct block_q5_0 q5_0[2];
        struct block_q5_1 q5_1[2];
        float q4_0_expected[128], q4_1_expected[96], q8_0_expected[64], q5_0_expected[64], q5_1_expected[64];
        static const uint16_t q4_0_d[4] = { 0x3800 /* 0.5 */, 0xbc00 /* -1 */, 0x0000, 0x4400 /* 4 */ };
        static const float q4_0_dv[4] = { 0.5f, -1.0f, 0.0f, 4.0f };
        for (int k = 0; k < 4; k++) {
                q4_0[k].d = q4_0_d[k];
                for (int j = 0; j < 16; j++) {
                        uint8_t lo = (uint8_t) ((j * 7 + k) & 15), hi = (uint8_t) ((15 - j + 3 * k) & 15);
                        q4_0[k].qs[j] = (uint8_t) (lo | hi << 4);
                        q4_0_expected[k * 32 + j] = (float) (lo - 8) * q4_0_dv[k];
                        q4_0_expected[k * 32 + j + 16] = (float) (hi - 8) * q4_0_dv[k];
                }
        }
        static const uint16_t q4_1_d[3] = { 0x3400 /* 0.25 */, 0x3c00 /* 1 */, 0x2000 /* 2^-7 */ };
        static const uint16_t q4_1_m[3] = { 0xc000 /* -2 */, 0x0000, 0x4900 /* 10 */ };
        static const float q4_1_dv[3] = { 0.25f, 1.0f, 0x1p-7f }, q4_1_mv[3] = { -2.0f, 0.0f, 10.0f };
        for (int k = 0; k < 3; k++) {
                q4_1[k].d = q4_1_d[k];
                q4_1[k].m = q4_1_m[k];
                for (int j = 0; j < 16; j++) {
                        uint8_t lo = (uint8_t) j, hi = (uint8_t) ((j * 5 + k) & 15);
                        q4_1[k].qs[j] = (uint8_t) (lo | hi << 4);
                        q4_1_expected[k * 32 + j] = (float) lo * q4_1_dv[k] + q4_1_mv[k];
                        q4_1_expected[k * 32 + j + 16] = (float) hi * q4_1_dv[k] + q4_1_mv[k];
                }
        }
        static const uint16_t q8_0_d[2] = { 0x2c00 /* 0.0625 */, 0xc400 /* -4 */ };
        static const float q8_0_dv[2] = { 0.0625f, -4.0f };
        for (int k = 0; k < 2; k++) {
                q8_0[k].d = q8_0_d[k];
                for (int j = 0; j < 32; j++) {
                        int q = k == 0 ? j * 8 - 128 : 127 - j * 3;
                        q8_0[k].qs[j] = (int8_t) q;
                        q8_0_expected[k * 32 + j] = (float) q * q8_0_dv[k];
                }
        }

        /* code j of block k is (7 * j + 3 * k) mod 32: both halves of the range, every fifth bit */
        static const uint16_t q5_d[2] = { 0x3800 /* 0.5 */, 0xc400 /* -4 */ }, q5_m[2] = { 0xbc00 /* -1 */, 0x4900 /* 10 */ };
        static const float q5_dv[2] = { 0.5f, -4.0f }, q5_mv[2] = { -1.0f, 10.0f };
        for (int k = 0; k < 2; k++) {
                uint32_t high = 0;
                q5_0[k].d = q5_1[k].d = q5_d[k];
                q5_1[k].m = q5_m[k];
                for (int j = 0; j < 32; j++) {
                        int q = (7 * j + 3 * k) % 32;
                        high |= (uint32_t) (q >> 4) << j;
                        q5_0_expected[k * 32 + j] = (float) (q - 16) * q5_dv[k];
                        q5_1_expected[k * 32 + j] = (float) q * q5_dv[k] + q5_mv[k];
                }
                for (int j = 0; j < 16; j++)
                        q5_0[k].qs[j] = q5_1[k].qs[j] = (uint8_t) (((7 * j + 3 * k) % 32 & 15) | ((7 * (j + 16) + 3 * k) % 32 & 15) << 4);
                for (int i = 0; i < 4; i++)
                        q5_0[k].qh[i] = q5_1[k].qh[i] = (uint8_t) (high >> (8 * i));
        }

        const struct tensor_case cases[] = {
                { "f32", TENSOR_F32, 1, { 7 }, f32, sizeof(f32), f32, 7 },
                { "f16", TENSOR_F16, 2, { 5, 3 }, f16, sizeof(f16), f16_expected, 15 },
                { "bf16", TENSOR_BF16, 3, { 3, 2, 2 }, bf16, sizeof(bf16), bf16_expected, 12 },
                { "q4_0", TENSOR_Q4_0, 2, { 64, 2 }, q4_0, sizeof(q4_0), q4_0_expected, 128 },
                { "q4_1", TENSOR_Q4_1, 2, { 32, 3 }, q4_1, sizeof(q4_1), q4_1_expected, 96 },
                { "q8_0", TENSOR_Q8_0, 4, { 32, 1, 1, 2 }, q8_0, sizeof(q8_0), q8_0_expected, 64 },
                { "q5_0", TENSOR_Q5_0, 2, { 32, 2 }, q5_0, sizeof(q5_0), q5_0_expected, 64 },
                { "q5_1", TENSOR_Q5_1, 1, { 64 }, q5_1, sizeof(q5_1), q5_1_expected, 64 },
        };

        struct gguf_writer *w = gguf_writer_new();
        gguf_writer_add_string(w, "general.architecture", "test");
        if (alignment)
                gguf_writer_set_alignment(w, alignment);
        gguf_writer_add_u32(w, "odd", 1); /* keeps the metadata end off any alignment boundary */
        for (size_t i = 0; i < ELEMENTS(cases); i++)
                gguf_writer_add_tensor(w, cases[i].name, cases[i].type, cases[i].n_dims, cases[i].ne, cases[i].data,
                                       cases[i].n_bytes);
        size_t len;
        uint8_t *buf = writer_image(w, &len);
        size_t min_len = gguf_writer_min_valid_length(w);
        gguf_writer_free(w);
        /* Only the padding after the last tensor may go. */
        ck_assert_uint_le(min_len, len);
        ck_assert_uint_lt(len - min_len, alignment ? alignment : GGUF_DEFAULT_ALIGNMENT);
        struct error err_min = { "" };
        ck_assert_msg(parse_exact(buf, min_len, "tensors-unpadded.gguf", &err_min) == 0, "%s", err_min.message);

        struct gguf_file *f = NULL;
        struct error err = { "" };
        int r = gguf_parse(buf, len, "tensors.gguf", &f, &err);
        ck_assert_msg(r == 0, "%s", err.message);
        uint32_t expected_alignment = alignment ? alignment : GGUF_DEFAULT_ALIGNMENT;
        ck_assert_uint_eq(f->alignment, expected_alignment);
        if (alignment)
                ck_assert_uint_eq(must_find(f, "general.alignment", GGUF_VALUE_U32)->value.u64, alignment);
        else
                ck_assert_ptr_null(gguf_find_kv(f, "general.alignment"));
        ck_assert_uint_eq((uint64_t) (f->data - f->base) % expected_alignment, 0);
        ck_assert_uint_eq(f->n_tensors, ELEMENTS(cases));

        for (size_t i = 0; i < ELEMENTS(cases); i++) {
                const struct tensor_case *c = &cases[i];
                const struct gguf_tensor *t = &f->tensors[i];
                ck_assert_ptr_eq(gguf_find_tensor(f, c->name), t);
                ck_assert(gguf_string_equals(t->name, c->name));
                ck_assert_uint_eq(t->n_dims, c->n_dims);
                for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++)
                        ck_assert_uint_eq(t->ne[d], d < c->n_dims ? c->ne[d] : 1);
                ck_assert_int_eq(t->type, c->type);
                ck_assert_uint_eq(t->n_bytes, c->n_bytes);
                ck_assert_uint_eq(t->offset % expected_alignment, 0);
                ck_assert_uint_eq((uint64_t) ((const uint8_t *) t->data - f->base) % expected_alignment, 0);
                ck_assert_mem_eq(t->data, c->data, c->n_bytes);

                float out[128];
                ck_assert_uint_le(c->n, ELEMENTS(out));
                /* Row by row, as the engine reads them. */
                uint64_t row_bytes = tensor_row_bytes(t->type, t->ne[0]);
                for (uint64_t row = 0; row < c->n / t->ne[0]; row++)
                        tensor_row_to_float(t->type, (const uint8_t *) t->data + row * row_bytes, out + row * t->ne[0],
                                            t->ne[0]);
                for (size_t j = 0; j < c->n; j++)
                        ck_assert_msg(memcmp(&out[j], &c->expected[j], sizeof(float)) == 0,
                                      "%s[%zu]: got %g, expected %g", c->name, j, out[j], c->expected[j]);
        }
        gguf_close(f);
        free(buf);
}
END_TEST

/* The test quantizers the synthetic models use: errors within half a step of each block. */
START_TEST(test_quantizers) {
        static const enum tensor_type types[] = { TENSOR_Q4_0, TENSOR_Q4_1, TENSOR_Q5_0, TENSOR_Q5_1, TENSOR_Q8_0,
                                                  TENSOR_F16,  TENSOR_BF16, TENSOR_F32 };
        enum { N = 32 * 64 };
        static float x[N], y[N];
        static uint8_t q[N * 4];
        struct test_rng rng = { 1234 };

        for (size_t i = 0; i < N; i++)
                x[i] = test_rng_normal(&rng) * (i < N / 2 ? 0.05f : 3.0f);
        x[5] = 0.0f;
        for (size_t i = 64; i < 96; i++) /* a constant block */
                x[i] = 0.125f;
        for (size_t i = 96; i < 128; i++) /* an all-zero block */
                x[i] = 0.0f;
        for (size_t t = 0; t < ELEMENTS(types); t++) {
                test_quantize_row(types[t], x, q, N);
                tensor_row_to_float(types[t], q, y, N);
                for (size_t k = 0; k < N / 32; k++) {
                        float lo = x[k * 32], hi = x[k * 32], amax = 0.0f;
                        for (int j = 0; j < 32; j++) {
                                lo = fminf(lo, x[k * 32 + j]);
                                hi = fmaxf(hi, x[k * 32 + j]);
                                amax = fmaxf(amax, fabsf(x[k * 32 + j]));
                        }
                        float tol;
                        switch (types[t]) {
                        /* q4_0 has 8 steps below zero but 7 above: values of the other sign
                         * than the largest clamp at up to a whole step. */
                        case TENSOR_Q4_0: tol = amax / 8.0f * 1.01f + 1e-6f; break;
                        case TENSOR_Q4_1: tol = (hi - lo) / 15.0f * 0.5f * 1.01f + 1e-3f * fabsf(lo) + 1e-6f; break;
                        /* as q4_0 and q4_1, with 16 steps on the largest's side and 31 in all */
                        case TENSOR_Q5_0: tol = amax / 16.0f * 1.01f + 1e-6f; break;
                        case TENSOR_Q5_1: tol = (hi - lo) / 31.0f * 0.5f * 1.01f + 1e-3f * fabsf(lo) + 1e-6f; break;
                        case TENSOR_Q8_0: tol = amax / 127.0f * 0.5f * 1.01f + 1e-6f; break;
                        case TENSOR_F16: tol = amax * 0x1p-11f + 1e-7f; break;
                        case TENSOR_BF16: tol = amax * 0x1p-8f; break;
                        default: tol = 0.0f; break;
                        }
                        for (int j = 0; j < 32; j++) {
                                float e = fabsf(y[k * 32 + j] - x[k * 32 + j]);
                                ck_assert_msg(e <= tol, "%s block %zu [%d]: %g vs %g (tolerance %g)",
                                              tensor_type_info(types[t])->name, k, j, y[k * 32 + j], x[k * 32 + j],
                                              tol);
                        }
                }
                /* A zero block comes back exact, and a constant one too where the scale need
                 * not be rounded (q8_0 stores 0.125/127 as f16). */
                for (size_t i = types[t] == TENSOR_Q8_0 ? 96 : 64; i < 128; i++)
                        ck_assert_float_eq(y[i], x[i]);
        }
        ck_assert_uint_eq(test_f32_to_bf16(1.00390625f), 0x3f80);  /* a tie rounds to even */
        ck_assert_uint_eq(test_f32_to_bf16(1.01171875f), 0x3f82);  /* a tie rounds to even, up */
        ck_assert_uint_eq(test_f32_to_bf16(-3.0f), 0xc040);
}
END_TEST

START_TEST(test_roundtrip_minimal) {
        /* A header alone, padded to the alignment: no keys, no tensors. */
        struct gguf_writer *w = gguf_writer_new();
        size_t len;
        uint8_t *buf = writer_image(w, &len);
        ck_assert_uint_eq(len, 32);
        ck_assert_uint_eq(gguf_writer_min_valid_length(w), 24);
        struct gguf_file *f = NULL;
        struct error err = { "" };
        ck_assert_int_eq(gguf_parse(buf, len, "minimal.gguf", &f, &err), 0);
        ck_assert_uint_eq(f->n_kv, 0);
        ck_assert_uint_eq(f->n_tensors, 0);
        ck_assert_ptr_null(gguf_find_kv(f, "general.architecture"));
        ck_assert_ptr_null(gguf_find_tensor(f, "x"));
        gguf_close(f);
        /* Without tensors the padding may go, as in llama.cpp's vocabulary-only files; a byte
         * less is a cut header. */
        ck_assert_int_eq(gguf_parse(buf, 24, "header-only.gguf", &f, &err), 0);
        ck_assert_uint_eq(f->data_size, 0);
        gguf_close(f);
        expect_invalid(buf, 23, "cut-header.gguf", EINVAL, "truncated");
        free(buf);
        gguf_writer_free(w);
}
END_TEST

/* ---- (c) malformed files --------------------------------------------------------------- */

/* A small valid file with a bit of everything: strings, arrays, nesting, two tensors. */
static struct gguf_writer *small_writer(void) {
        static const char *const strs[] = { "a", "bc", "" };
        static const int32_t ints[] = { 1, -2, 3 };
        static float f32[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
        static struct block_q8_0 q8[2];
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

START_TEST(test_bad_magic) {
        struct gguf_writer *w = small_writer();
        size_t len;
        uint8_t *buf = writer_image(w, &len);
        gguf_writer_free(w);
        buf[3] = 'X';
        expect_invalid(buf, len, "bad-magic.gguf", EINVAL, "bad magic");
        memcpy(buf, "\0\0\0\0", 4);
        expect_invalid(buf, len, "zero-magic.gguf", EINVAL, "bad magic");
        free(buf);
}
END_TEST

START_TEST(test_bad_version) {
        static const uint32_t versions[] = { 2, 4, 1, 0, 0xffffffffu };
        for (size_t i = 0; i < ELEMENTS(versions); i++) {
                struct gguf_writer *w = small_writer();
                gguf_writer_set_version(w, versions[i]);
                char needle[64];
                snprintf(needle, sizeof(needle), "unsupported GGUF version %u", versions[i]);
                expect_invalid_writer(w, "version.gguf", EOPNOTSUPP, needle);
        }
}
END_TEST

START_TEST(test_truncated_everywhere) {
        struct gguf_writer *w = small_writer();
        size_t len;
        uint8_t *buf = writer_image(w, &len);
        size_t min_len = gguf_writer_min_valid_length(w);
        gguf_writer_free(w);
        ck_assert_uint_lt(min_len, len);

        for (size_t n = 0; n <= len; n++) {
                struct error err = { "" };
                int r = parse_exact(buf, n, "prefix.gguf", &err);
                if (n >= min_len) {
                        ck_assert_msg(r == 0, "prefix of %zu bytes (valid from %zu): %s", n, min_len, err.message);
                        continue;
                }
                ck_assert_msg(r == -EINVAL, "prefix of %zu bytes gave %d", n, r);
                ck_assert_msg(strstr(err.message, "prefix.gguf"), "prefix of %zu: %s", n, err.message);
                ck_assert_msg(mentions_truncation(err.message), "prefix of %zu: %s", n, err.message);
        }
        /* A few prefixes through gguf_open as well. */
        expect_invalid(buf, 3, "cut-in-magic.gguf", EINVAL, "truncated");
        expect_invalid(buf, 20, "cut-in-counts.gguf", EINVAL, "truncated");
        expect_invalid(buf, 40, "cut-by-counts.gguf", EINVAL, "metadata count 6 cannot fit");
        expect_invalid(buf, 100, "cut-in-array.gguf", EINVAL, "truncated: string array");
        expect_invalid(buf, min_len - 1, "cut-in-data.gguf", EINVAL, "out of bounds");
        free(buf);
}
END_TEST

START_TEST(test_huge_lengths) {
        size_t len;
        uint8_t *buf;
        struct gguf_writer *w;

        /* The first key's length. */
        w = small_writer();
        buf = writer_image(w, &len);
        gguf_writer_free(w);
        patch_u64(buf, OFF_FIRST_KV, UINT64_MAX);
        expect_invalid(buf, len, "huge-key.gguf", EINVAL, "metadata key");
        patch_u64(buf, OFF_FIRST_KV, 1ull << 62);
        expect_invalid(buf, len, "huge-key2.gguf", EINVAL, "truncated");
        free(buf);

        /* A string value's length: key "k" ends at 24 + 8 + 1, its type takes 4. */
        w = gguf_writer_new();
        gguf_writer_add_string(w, "k", "value");
        buf = writer_image(w, &len);
        gguf_writer_free(w);
        patch_u64(buf, OFF_FIRST_KV + 8 + 1 + 4, UINT64_MAX - 3);
        expect_invalid(buf, len, "huge-string.gguf", EINVAL, "metadata string");
        free(buf);

        /* Array counts: element type at 24 + 8 + 1 + 4, count 4 bytes later. */
        static const uint32_t u32s[] = { 1, 2, 3 };
        static const char *const strs[] = { "x", "y" };
        const size_t count_at = OFF_FIRST_KV + 8 + 1 + 4 + 4;
        static const uint64_t counts[] = { UINT64_MAX, 1ull << 62, (1ull << 62) + 1, 1000 };
        for (size_t i = 0; i < ELEMENTS(counts); i++) {
                w = gguf_writer_new();
                gguf_writer_add_u32_array(w, "a", u32s, ELEMENTS(u32s));
                buf = writer_image(w, &len);
                gguf_writer_free(w);
                patch_u64(buf, count_at, counts[i]);
                expect_invalid(buf, len, "huge-array.gguf", EINVAL, "array elements");
                free(buf);

                w = gguf_writer_new();
                gguf_writer_add_string_array(w, "a", strs, ELEMENTS(strs));
                buf = writer_image(w, &len);
                gguf_writer_free(w);
                patch_u64(buf, count_at, counts[i]);
                expect_invalid(buf, len, "huge-string-array.gguf", EINVAL, "string array");
                free(buf);

                w = gguf_writer_new();
                gguf_writer_add_nested_array(w, "a", 3);
                buf = writer_image(w, &len);
                gguf_writer_free(w);
                patch_u64(buf, count_at, counts[i]);
                expect_invalid(buf, len, "huge-nested-array.gguf", EINVAL, "truncated");
                free(buf);
        }

        /* Header counts. */
        static const uint64_t big[] = { UINT64_MAX, 1ull << 40, 1000 };
        for (size_t i = 0; i < ELEMENTS(big); i++) {
                w = small_writer();
                buf = writer_image(w, &len);
                gguf_writer_free(w);
                patch_u64(buf, OFF_N_TENSORS, big[i]);
                expect_invalid(buf, len, "huge-tensor-count.gguf", EINVAL, "tensor count");
                patch_u64(buf, OFF_N_TENSORS, 2);
                patch_u64(buf, OFF_N_KV, big[i]);
                expect_invalid(buf, len, "huge-kv-count.gguf", EINVAL, "metadata count");
                free(buf);
        }
}
END_TEST

START_TEST(test_bad_values) {
        struct gguf_writer *w;
        static const uint8_t one = 1, two = 2, byte_255 = 255;
        static const uint32_t unknown_types[] = { 13, 100, 0xffffffffu };

        for (size_t i = 0; i < ELEMENTS(unknown_types); i++) {
                w = small_writer();
                gguf_writer_add_raw(w, "weird", unknown_types[i], &one, 1);
                char needle[64];
                snprintf(needle, sizeof(needle), "unknown value type %u", unknown_types[i]);
                expect_invalid_writer(w, "unknown-type.gguf", EINVAL, needle);

                /* The same as an array element type. */
                uint8_t arr[12];
                uint64_t count = 1;
                memcpy(arr, &unknown_types[i], 4);
                memcpy(arr + 4, &count, 8);
                w = small_writer();
                gguf_writer_add_raw(w, "weird.array", GGUF_VALUE_ARRAY, arr, sizeof(arr));
                expect_invalid_writer(w, "unknown-elem-type.gguf", EINVAL, needle);
        }

        w = small_writer();
        gguf_writer_add_raw(w, "flag2", GGUF_VALUE_BOOL, &two, 1);
        expect_invalid_writer(w, "bool-2.gguf", EINVAL, "bool value 2");
        w = small_writer();
        gguf_writer_add_raw(w, "flag255", GGUF_VALUE_BOOL, &byte_255, 1);
        expect_invalid_writer(w, "bool-255.gguf", EINVAL, "'flag255' holds bool value 255");

        /* Nesting: legal up to the limit, refused beyond it without deep recursion. */
        static const unsigned legal[] = { 1, 2, 3, 4 }, illegal[] = { 5, 6, 1000 };
        for (size_t i = 0; i < ELEMENTS(legal); i++) {
                w = small_writer();
                gguf_writer_add_nested_array(w, "deep", legal[i]);
                size_t len;
                uint8_t *buf = writer_image(w, &len);
                gguf_writer_free(w);
                struct error err = { "" };
                ck_assert_msg(parse_exact(buf, len, "deep.gguf", &err) == 0, "depth %u: %s", legal[i],
                              err.message);
                free(buf);
        }
        for (size_t i = 0; i < ELEMENTS(illegal); i++) {
                w = small_writer();
                gguf_writer_add_nested_array(w, "deep", illegal[i]);
                expect_invalid_writer(w, "too-deep.gguf", EINVAL, "'deep' nests arrays deeper than");
        }
}
END_TEST

/* A valid file plus one raw tensor info; data padding so that in-range offsets exist. */
static struct gguf_writer *writer_with_raw_tensor(uint32_t type, uint32_t n_dims, const uint64_t *ne,
                                                  uint64_t offset) {
        struct gguf_writer *w = small_writer();
        gguf_writer_add_tensor_info_raw(w, "raw", type, n_dims, ne, offset);
        gguf_writer_add_data_padding(w, 4096);
        return w;
}

START_TEST(test_bad_tensor_infos) {
        const uint64_t ne32[] = { 32, 2 }, ne5[] = { 32, 1, 1, 1, 1 }, ne8[] = { 32, 1, 1, 1, 1, 1, 1, 1 };

        /* The writer's data padding puts offset 4096 within bounds: sanity check it. */
        struct gguf_writer *w = writer_with_raw_tensor(TENSOR_F32, 2, ne32, 128);
        size_t len;
        uint8_t *buf = writer_image(w, &len);
        gguf_writer_free(w);
        struct error err = { "" };
        ck_assert_msg(parse_exact(buf, len, "raw-ok.gguf", &err) == 0, "%s", err.message);
        free(buf);

        /* Types the loader does not read: named by id and, where GGUF defines the id, by name,
         * beside the list of those it reads. */
        static const struct {
                uint32_t type;
                const char *name;
        } bad_types[] = { { 23, "IQ4_XS" }, { 20, "IQ4_NL" }, { 16, "IQ2_XXS" }, { 39, "MXFP4" }, { 4, "not a GGUF type" },
                          { TENSOR_TYPE_MAX, "not a GGUF type" }, { 1000, "not a GGUF type" },
                          { 0xffffffffu, "not a GGUF type" } };
        for (size_t i = 0; i < ELEMENTS(bad_types); i++) {
                char needle[256];
                snprintf(needle, sizeof(needle), "'raw' has unsupported tensor type %u (%s; supported: F32, F16, Q4_0, Q4_1, Q5_0, "
                         "Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, BF16)", bad_types[i].type, bad_types[i].name);
                expect_invalid_writer(writer_with_raw_tensor(bad_types[i].type, 2, ne32, 0), "bad-type.gguf", EOPNOTSUPP,
                                      needle);
        }

        expect_invalid_writer(writer_with_raw_tensor(TENSOR_F32, 0, ne32, 0), "ndims-0.gguf", EINVAL,
                              "'raw' has 0 dimensions");
        expect_invalid_writer(writer_with_raw_tensor(TENSOR_F32, 5, ne5, 0), "ndims-5.gguf", EINVAL,
                              "'raw' has 5 dimensions");
        expect_invalid_writer(writer_with_raw_tensor(TENSOR_F32, 0xffffffffu, ne8, 0), "ndims-huge.gguf", EINVAL,
                              "dimensions");

        const uint64_t zero0[] = { 0, 4 }, zero1[] = { 32, 0 }, zero3[] = { 32, 1, 1, 0 };
        expect_invalid_writer(writer_with_raw_tensor(TENSOR_F32, 2, zero0, 0), "zero-dim0.gguf", EINVAL,
                              "'raw' has an invalid shape (dimension 0 is 0)");
        expect_invalid_writer(writer_with_raw_tensor(TENSOR_F32, 2, zero1, 0), "zero-dim1.gguf", EINVAL,
                              "invalid shape (dimension 1 is 0)");
        expect_invalid_writer(writer_with_raw_tensor(TENSOR_Q8_0, 4, zero3, 0), "zero-dim3.gguf", EINVAL,
                              "invalid shape (dimension 3 is 0)");

        const uint64_t overflow[] = { 1ull << 32, 1ull << 32, 1ull << 32 }, max0[] = { UINT64_MAX },
                       overflow4[] = { 1ull << 16, 1ull << 16, 1ull << 16, 1ull << 17 };
        expect_invalid_writer(writer_with_raw_tensor(TENSOR_F32, 3, overflow, 0), "overflow.gguf", EINVAL,
                              "invalid shape");
        expect_invalid_writer(writer_with_raw_tensor(TENSOR_F32, 1, max0, 0), "overflow-max.gguf", EINVAL,
                              "tensor 'raw'");
        expect_invalid_writer(writer_with_raw_tensor(TENSOR_F16, 4, overflow4, 0), "overflow4.gguf", EINVAL,
                              "invalid shape");

        const uint64_t partial_block[] = { 48, 2 };
        static const enum tensor_type blocked[] = { TENSOR_Q4_1, TENSOR_Q5_0, TENSOR_Q5_1 };
        for (size_t i = 0; i < ELEMENTS(blocked); i++)
                expect_invalid_writer(writer_with_raw_tensor(blocked[i], 2, partial_block, 0), "partial-block.gguf", EINVAL,
                                      "not a multiple of its block size 32");
        /* the K-quants' super-blocks: 320 columns are ten blocks of 32 but not whole blocks of 256 */
        const uint64_t partial_super_block[] = { 320, 2 };
        static const enum tensor_type k_quants[] = { TENSOR_Q2_K, TENSOR_Q3_K, TENSOR_Q4_K, TENSOR_Q5_K, TENSOR_Q6_K };
        for (size_t i = 0; i < ELEMENTS(k_quants); i++)
                expect_invalid_writer(writer_with_raw_tensor(k_quants[i], 2, partial_super_block, 0), "partial-super-block.gguf",
                                      EINVAL, "not a multiple of its block size 256");

        expect_invalid_writer(writer_with_raw_tensor(TENSOR_F32, 2, ne32, 4), "misaligned.gguf", EINVAL,
                              "'raw' offset 4 is not a multiple of the alignment 32");
        expect_invalid_writer(writer_with_raw_tensor(TENSOR_F32, 2, ne32, 1ull << 62), "offset-oob.gguf", EINVAL,
                              "'raw' (bytes 4611686018427387904..");
        expect_invalid_writer(writer_with_raw_tensor(TENSOR_F32, 2, ne32, UINT64_MAX - 31), "offset-wrap.gguf",
                              EINVAL, "out of bounds");
        /* Starting inside the data section (4224 bytes), but running past its end. */
        const uint64_t long_tensor[] = { 32, 20 };
        expect_invalid_writer(writer_with_raw_tensor(TENSOR_F32, 2, long_tensor, 2048), "past-end.gguf", EINVAL,
                              "'raw' (bytes 2048..4608 of the data section) is out of bounds");

        /* A duplicate name, both valid otherwise. */
        static const float v[8];
        const uint64_t ne_a[] = { 8 };
        w = small_writer();
        gguf_writer_add_tensor(w, "a", TENSOR_F32, 1, ne_a, v, sizeof(v));
        expect_invalid_writer(w, "duplicate.gguf", EINVAL, "tensor 'a' appears twice");
}
END_TEST

START_TEST(test_data_past_eof) {
        struct gguf_writer *w = small_writer();
        size_t len;
        uint8_t *buf = writer_image(w, &len);
        size_t min_len = gguf_writer_min_valid_length(w);
        gguf_writer_free(w);
        /* Cut the last tensor's data short by one byte and by a whole block. */
        expect_invalid(buf, min_len - 1, "short-data.gguf", EINVAL, "tensor 'b'");
        expect_invalid(buf, min_len - 34, "short-data2.gguf", EINVAL, "out of bounds");
        free(buf);
}
END_TEST

START_TEST(test_bad_alignment) {
        struct gguf_writer *w;
        static const uint32_t bad[] = { 0, 3, 48, 0x80000001u };

        for (size_t i = 0; i < ELEMENTS(bad); i++) {
                w = small_writer();
                gguf_writer_add_u32(w, "general.alignment", bad[i]);
                expect_invalid_writer(w, "bad-alignment.gguf", EINVAL, "general.alignment must be a u32 power of two");
        }
        w = small_writer();
        gguf_writer_add_u64(w, "general.alignment", 32);
        expect_invalid_writer(w, "alignment-u64.gguf", EINVAL,
                              "general.alignment must be a u32 power of two, got a u64");
        w = small_writer();
        gguf_writer_add_string(w, "general.alignment", "32");
        expect_invalid_writer(w, "alignment-string.gguf", EINVAL, "got a string");
        w = small_writer();
        gguf_writer_add_i32(w, "general.alignment", 32);
        expect_invalid_writer(w, "alignment-i32.gguf", EINVAL, "got a i32");
}
END_TEST

/* The format asks for a multiple of 8: below that, f32 and f16 tensor data could start at an
 * address their loads may not use. */
START_TEST(test_small_alignment) {
        static const uint32_t small[] = { 1, 2, 4 };
        for (size_t i = 0; i < ELEMENTS(small); i++) {
                struct gguf_writer *w = small_writer();
                gguf_writer_add_u32(w, "general.alignment", small[i]);
                expect_invalid_writer(w, "small-alignment.gguf", EINVAL, "general.alignment");
        }
}
END_TEST

START_TEST(test_open_special_files) {
        struct gguf_file *f = NULL;
        struct error err = { "" };
        char *dir = test_tmpdir();

        /* An empty file, a directory, a missing file. */
        char *empty = test_path_join(dir, "empty.gguf");
        ck_assert_int_eq(test_write_file(empty, "", 0), 0);
        ck_assert_int_eq(gguf_open(empty, &f, &err), -EINVAL);
        assert_message(&err, empty, "empty");
        ck_assert_int_eq(gguf_open(dir, &f, &err), -EINVAL);
        assert_message(&err, dir, "not a regular file");
        char *missing = test_path_join(dir, "missing.gguf");
        ck_assert_int_eq(gguf_open(missing, &f, &err), -ENOENT);
        assert_message(&err, missing, "cannot open");
        ck_assert_int_eq(gguf_parse("", 0, "empty-buffer", &f, &err), -EINVAL);
        assert_message(&err, "empty-buffer", "truncated");
        ck_assert_ptr_null(f);

        /* model_load passes the reader's errors through unchanged. */
        struct model *m = NULL;
        ck_assert_int_eq(model_load(empty, &m, &err), -EINVAL);
        assert_message(&err, empty, "empty");
        ck_assert_ptr_null(m);

        free(empty);
        free(missing);
        test_tmpdir_remove(dir);
}
END_TEST

/* ---- (d) model-level errors ------------------------------------------------------------ */

static struct synthetic_llama_config small_config(void) {
        return (struct synthetic_llama_config) {
                .n_layer = 2, .n_embd = 64, .n_ff = 96, .n_head = 4, .n_head_kv = 2, .n_vocab = 300, .n_ctx = 512,
                .weight_type = TENSOR_Q4_1, .embd_type = TENSOR_Q8_0, .tied_output = true, .rope_theta = 10000.0f,
                .seed = 42,
        };
}

static void expect_model_error(const struct synthetic_llama_config *cfg, int errnum, const char *needle) {
        char *dir = test_tmpdir(), *path = test_path_join(dir, "model.gguf");
        struct model *m = NULL;
        struct error err = { "" };

        ck_assert_int_eq(synthetic_llama_write(path, cfg), 0);
        int r = model_load(path, &m, &err);
        ck_assert_msg(r == -errnum, "model_load gave %d (%s), expected %d", r, err.message, -errnum);
        ck_assert_ptr_null(m);
        assert_message(&err, path, needle);
        free(path);
        test_tmpdir_remove(dir);
}

START_TEST(test_model_errors) {
        struct synthetic_llama_config cfg;

        cfg = small_config();
        cfg.omit_tensor = "blk.1.ffn_up.weight";
        expect_model_error(&cfg, EINVAL, "missing tensor 'blk.1.ffn_up.weight'");
        cfg = small_config();
        cfg.omit_tensor = "output_norm.weight";
        expect_model_error(&cfg, EINVAL, "missing tensor 'output_norm.weight'");
        cfg = small_config();
        cfg.omit_tensor = "token_embd.weight";
        expect_model_error(&cfg, EINVAL, "missing tensor 'token_embd.weight'");
        cfg = small_config();
        cfg.omit_tensor = "blk.0.attn_norm.weight";
        expect_model_error(&cfg, EINVAL, "missing tensor 'blk.0.attn_norm.weight'");

        cfg = small_config();
        cfg.omit_key = "llama.block_count";
        expect_model_error(&cfg, ENOENT, "missing metadata key 'llama.block_count'");
        cfg = small_config();
        cfg.omit_key = "general.architecture";
        expect_model_error(&cfg, ENOENT, "missing metadata key 'general.architecture'");
        cfg = small_config();
        cfg.omit_key = "llama.attention.layer_norm_rms_epsilon";
        expect_model_error(&cfg, ENOENT, "layer_norm_rms_epsilon");

        cfg = small_config();
        cfg.string_key = "llama.embedding_length";
        expect_model_error(&cfg, EINVAL, "'llama.embedding_length' is a string, expected an integer");
        cfg = small_config();
        cfg.string_key = "llama.attention.head_count_kv"; /* optional, but present with a wrong type */
        expect_model_error(&cfg, EINVAL, "'llama.attention.head_count_kv' is a string");
        cfg = small_config();
        cfg.string_key = "llama.rope.freq_base";
        expect_model_error(&cfg, EINVAL, "'llama.rope.freq_base' is a string, expected a float");

        cfg = small_config();
        cfg.extra_row_tensor = "blk.0.attn_q.weight";
        expect_model_error(&cfg, EINVAL, "'blk.0.attn_q.weight' has shape [64, 65], inconsistent with the metadata");
        cfg = small_config();
        cfg.extra_row_tensor = "blk.1.ffn_down.weight";
        expect_model_error(&cfg, EINVAL, "'blk.1.ffn_down.weight' has shape [96, 65]");
        cfg = small_config();
        cfg.tied_output = false;
        cfg.extra_row_tensor = "output.weight";
        expect_model_error(&cfg, EINVAL, "'output.weight' has shape [64, 301]");

        cfg = small_config();
        cfg.n_head_kv = 3;
        expect_model_error(&cfg, EINVAL, "head_count 4 is not a multiple of head_count_kv 3");
        cfg = small_config();
        cfg.n_head_kv = 8;
        expect_model_error(&cfg, EINVAL, "head_count 4 is not a multiple of head_count_kv 8");

        cfg = small_config();
        cfg.architecture = "gpt2";
        expect_model_error(&cfg, EOPNOTSUPP, "architecture 'gpt2' is not supported (supported: llama, gemma3, mistral3, phi3, qwen2, qwen3)");

        /* Gemma 3's own tensors and keys are required and checked like the rest */
        cfg = small_config();
        cfg.architecture = "gemma3";
        cfg.sliding_window = 4;
        cfg.omit_tensor = "blk.1.post_ffw_norm.weight";
        expect_model_error(&cfg, EINVAL, "missing tensor 'blk.1.post_ffw_norm.weight'");
        cfg.omit_tensor = "blk.0.attn_k_norm.weight";
        expect_model_error(&cfg, EINVAL, "missing tensor 'blk.0.attn_k_norm.weight'");
        cfg.omit_tensor = NULL;
        cfg.string_key = "gemma3.attention.sliding_window";
        expect_model_error(&cfg, EINVAL, "'gemma3.attention.sliding_window' is a string");

        /* Without llama.vocab_size the vocabulary size comes from the token list. */
        cfg = small_config();
        cfg.omit_key = "llama.vocab_size";
        char *dir = test_tmpdir(), *path = test_path_join(dir, "model.gguf");
        struct model *m = NULL;
        struct error err = { "" };
        ck_assert_int_eq(synthetic_llama_write(path, &cfg), 0);
        ck_assert_msg(model_load(path, &m, &err) == 0, "%s", err.message);
        ck_assert_uint_eq(m->hp.n_vocab, 300);
        model_free(m);
        free(path);
        test_tmpdir_remove(dir);
}
END_TEST

/* Models of the 5-bit types cut anywhere in their tensor data, or their data a block short,
 * are refused with a message that says so. */
START_TEST(test_q5_models_truncated) {
        static const enum tensor_type types[] = { TENSOR_Q5_0, TENSOR_Q5_1 };
        for (size_t t = 0; t < ELEMENTS(types); t++) {
                struct synthetic_llama_config cfg = small_config();
                cfg.weight_type = types[t];
                cfg.embd_type = types[t];
                struct gguf_writer *w = gguf_writer_new();
                ck_assert_int_eq(synthetic_llama_build(w, &cfg), 0);
                size_t len;
                uint8_t *buf = writer_image(w, &len);
                size_t min_len = gguf_writer_min_valid_length(w);
                gguf_writer_free(w);
                struct model *m = NULL;
                struct gguf_file *f = NULL;
                struct error err = { "" };
                ck_assert_msg(gguf_parse(buf, len, "q5.gguf", &f, &err) == 0, "%s", err.message);
                ck_assert_msg(model_from_gguf(f, &m, &err) == 0, "%s", err.message);
                ck_assert_int_eq(m->layers[0].w_down.type, types[t]);
                model_free(m);
                const size_t cuts[] = { min_len - 1, min_len - tensor_type_info(types[t])->block_bytes, min_len / 2,
                                        min_len - 1000 };
                for (size_t c = 0; c < ELEMENTS(cuts); c++) {
                        f = NULL;
                        err = (struct error) { "" };
                        ck_assert_int_eq(gguf_parse(buf, cuts[c], "q5-cut.gguf", &f, &err), -EINVAL);
                        ck_assert_msg(mentions_truncation(err.message), "%s cut at %zu: %s", tensor_type_info(types[t])->name,
                                      cuts[c], err.message);
                }
                free(buf);
        }
}
END_TEST

/* A small llama with extra keys and tensors added before the model's own: loaded into *m,
 * or the error returned. */
typedef void (*extend_fn)(struct gguf_writer *w);

static int load_extended(extend_fn extend, struct model **m, struct error *err) {
        struct synthetic_llama_config cfg = small_config();
        char *dir = test_tmpdir(), *path = test_path_join(dir, "variation.gguf");
        struct gguf_writer *w = gguf_writer_new();
        extend(w);
        ck_assert_int_eq(synthetic_llama_build(w, &cfg), 0);
        ck_assert_int_eq(gguf_writer_write_file(w, path), 0);
        gguf_writer_free(w);
        *m = NULL;
        int r = model_load(path, m, err);
        free(path);
        test_tmpdir_remove(dir);
        return r;
}

static void add_vector(struct gguf_writer *w, const char *name, uint64_t n, float value) {
        float *v = malloc(n * sizeof(float));
        ck_assert_ptr_nonnull(v);
        for (uint64_t i = 0; i < n; i++)
                v[i] = value + (float) i / 64.0f;
        gguf_writer_add_tensor(w, name, TENSOR_F32, 1, &n, v, n * sizeof(float));
        free(v);
}

static void add_yarn(struct gguf_writer *w) {
        gguf_writer_add_string(w, "llama.rope.scaling.type", "yarn");
        gguf_writer_add_f32(w, "llama.rope.scaling.factor", 4.0f);
        gguf_writer_add_u32(w, "llama.rope.scaling.original_context_length", 256);
}
static void add_shrinking_yarn(struct gguf_writer *w) {
        gguf_writer_add_string(w, "llama.rope.scaling.type", "yarn");
        gguf_writer_add_f32(w, "llama.rope.scaling.factor", 0.5f);
}
static void add_longrope_without_factors(struct gguf_writer *w) {
        gguf_writer_add_string(w, "llama.rope.scaling.type", "longrope");
        gguf_writer_add_u32(w, "llama.rope.scaling.original_context_length", 256);
}
static void add_dynamic_scaling(struct gguf_writer *w) {
        gguf_writer_add_string(w, "llama.rope.scaling.type", "dynamic");
}
static void add_negative_factor(struct gguf_writer *w) {
        gguf_writer_add_f32(w, "llama.rope.scaling.factor", -2.0f);
}
static void add_qkv_biases(struct gguf_writer *w) {
        for (int i = 0; i < 2; i++) {
                char name[64];
                snprintf(name, sizeof(name), "blk.%d.attn_q.bias", i);
                add_vector(w, name, 64, 0.5f);
                snprintf(name, sizeof(name), "blk.%d.attn_k.bias", i);
                add_vector(w, name, 32, -0.5f);
                snprintf(name, sizeof(name), "blk.%d.attn_v.bias", i);
                add_vector(w, name, 32, 0.25f);
        }
}
static void add_short_fused_bias(struct gguf_writer *w) {
        add_vector(w, "blk.0.attn_qkv.bias", 100, 0.5f);
}
static void add_query_bias_only(struct gguf_writer *w) {
        add_vector(w, "blk.1.attn_q.bias", 64, 0.5f);
}
static void add_ffn_bias(struct gguf_writer *w) {
        add_vector(w, "blk.0.ffn_up.bias", 96, 0.5f);
}
static void add_rope_freqs(struct gguf_writer *w) {
        add_vector(w, "rope_freqs.weight", 8, 1.0f);
}
static void add_zero_rope_freqs(struct gguf_writer *w) {
        add_vector(w, "rope_freqs.weight", 8, 0.0f);
}
static void add_long_factors_only(struct gguf_writer *w) {
        add_vector(w, "rope_factors_long.weight", 8, 1.0f);
}
static void add_long_short_factors(struct gguf_writer *w) {
        add_vector(w, "rope_factors_long.weight", 8, 2.0f);
        add_vector(w, "rope_factors_short.weight", 8, 1.0f);
        gguf_writer_add_u32(w, "llama.rope.scaling.original_context_length", 256);
}

/* The variations every architecture may carry: context extension by the rope.scaling keys,
 * query/key/value biases, RoPE frequency factors; and what the loader refuses, by name. */
START_TEST(test_model_layout_variations) {
        struct model *m;
        struct error err = { "" };

        ck_assert_msg(load_extended(add_yarn, &m, &err) == 0, "%s", err.message);
        ck_assert_float_eq(m->hp.rope_scale, 0.25f);
        ck_assert_float_eq(m->hp.rope_ext_factor, 1.0f);
        ck_assert_uint_eq(m->hp.n_ctx_orig, 256);
        ck_assert_uint_eq(m->hp.n_ctx_max, 1024); /* the context YaRN extends to: 4 x 256, past context_length 512 */
        /* YaRN's magnitude 1 + 0.1 ln 4 is applied by the rotation; the factor cancels it */
        ck_assert_float_eq_tol(m->hp.rope_attn_factor, 1.0f, 1e-6f);
        model_free(m);

        ck_assert_int_eq(load_extended(add_dynamic_scaling, &m, &err), -EOPNOTSUPP);
        ck_assert_msg(strstr(err.message, "'dynamic' is not supported (none, linear, yarn, longrope)"), "%s", err.message);
        ck_assert_int_eq(load_extended(add_negative_factor, &m, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "rope.scaling.factor must not be negative"), "%s", err.message);
        ck_assert_int_eq(load_extended(add_shrinking_yarn, &m, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "rope.scaling.factor is 0.5 under YaRN"), "%s", err.message);
        /* longrope without the factor tensors rotates as plain RoPE, as llama.cpp does */
        ck_assert_msg(load_extended(add_longrope_without_factors, &m, &err) == 0, "%s", err.message);
        ck_assert_ptr_null(model_rope_factors(m, 1u << 20));
        ck_assert_float_eq(m->hp.rope_scale, 1.0f);
        ck_assert_float_eq(m->hp.rope_ext_factor, 0.0f);
        model_free(m);

        ck_assert_msg(load_extended(add_qkv_biases, &m, &err) == 0, "%s", err.message);
        for (uint32_t i = 0; i < 2; i++) {
                ck_assert_float_eq(m->layers[i].bq[63], 0.5f + 63.0f / 64.0f);
                ck_assert_float_eq(m->layers[i].bk[0], -0.5f);
                ck_assert_float_eq(m->layers[i].bv[31], 0.25f + 31.0f / 64.0f);
        }
        model_free(m);
        ck_assert_int_eq(load_extended(add_short_fused_bias, &m, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "'blk.0.attn_qkv.bias' has 1 dimensions and 100 elements; the metadata implies a vector of 128"),
                      "%s", err.message);
        ck_assert_int_eq(load_extended(add_query_bias_only, &m, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "layer 1 has biases for some of the query, key and value projections"), "%s",
                      err.message);
        ck_assert_int_eq(load_extended(add_ffn_bias, &m, &err), -EOPNOTSUPP);
        ck_assert_msg(strstr(err.message, "'blk.0.ffn_up.bias' is not supported"), "%s", err.message);

        ck_assert_msg(load_extended(add_rope_freqs, &m, &err) == 0, "%s", err.message);
        ck_assert_ptr_eq(model_rope_factors(m, 1u << 20), m->rope_freqs);
        ck_assert_float_eq(m->rope_freqs[7], 1.0f + 7.0f / 64.0f);
        ck_assert_uint_eq(m->hp.n_ctx_max, 512);
        model_free(m);
        ck_assert_int_eq(load_extended(add_zero_rope_freqs, &m, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "RoPE frequency factor 0 is 0"), "%s", err.message);
        ck_assert_int_eq(load_extended(add_long_factors_only, &m, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "come as a pair"), "%s", err.message);

        /* the long factors once the served context passes the original one */
        ck_assert_msg(load_extended(add_long_short_factors, &m, &err) == 0, "%s", err.message);
        ck_assert_ptr_eq(model_rope_factors(m, 256), m->rope_factors_short);
        ck_assert_ptr_eq(model_rope_factors(m, 257), m->rope_factors_long);
        model_free(m);
}
END_TEST

/* A block_count the file cannot hold is refused before anything is allocated for it (this
 * once asked calloc for a terabyte). */
START_TEST(test_model_huge_block_count) {
        struct synthetic_llama_config cfg = small_config();
        char *dir = test_tmpdir(), *path = test_path_join(dir, "layers.gguf");
        struct gguf_writer *w = gguf_writer_new();
        struct model *m = NULL;
        struct error err = { "" };

        cfg.omit_key = "llama.block_count";
        gguf_writer_add_u32(w, "llama.block_count", 0xffffffffu);
        ck_assert_int_eq(synthetic_llama_build(w, &cfg), 0);
        ck_assert_int_eq(gguf_writer_write_file(w, path), 0);
        gguf_writer_free(w);
        ck_assert_int_eq(model_load(path, &m, &err), -EINVAL);
        ck_assert_ptr_null(m);
        assert_message(&err, path, "block_count 4294967295");
        free(path);
        test_tmpdir_remove(dir);
}
END_TEST

/* ---- (e) synthetic models of several shapes -------------------------------------------- */

static const struct synthetic_llama_config shapes[] = {
        { .n_layer = 1, .n_embd = 32, .n_ff = 64, .n_head = 1, .n_head_kv = 1, .n_vocab = 259, .n_ctx = 128,
          .weight_type = TENSOR_Q4_0, .embd_type = TENSOR_Q4_0, .tied_output = true, .seed = 1 },
        { .n_layer = 2, .n_embd = 64, .n_ff = 160, .n_head = 4, .n_head_kv = 2, .n_vocab = 300, .n_ctx = 256,
          .weight_type = TENSOR_Q4_1, .embd_type = TENSOR_Q8_0, .tied_output = true, .rope_theta = 100000.0f,
          .seed = 2 },
        { .n_layer = 3, .n_embd = 96, .n_ff = 256, .n_head = 3, .n_head_kv = 1, .n_vocab = 512, .n_ctx = 1024,
          .weight_type = TENSOR_Q8_0, .embd_type = TENSOR_F16, .tied_output = false, .rope_theta = 500000.0f,
          .seed = 3 },
        { .n_layer = 2, .n_embd = 128, .n_ff = 96, .n_head = 8, .n_head_kv = 8, .n_vocab = 1000, .n_ctx = 4096,
          .weight_type = TENSOR_F16, .embd_type = TENSOR_F32, .tied_output = false, .seed = 4 },
        { .n_layer = 1, .n_embd = 64, .n_ff = 128, .n_head = 2, .n_head_kv = 1, .n_vocab = 270, .n_ctx = 64,
          .weight_type = TENSOR_F32, .embd_type = TENSOR_BF16, .tied_output = true, .seed = 5 },
        { .n_layer = 2, .n_embd = 64, .n_ff = 64, .n_head = 4, .n_head_kv = 4, .n_vocab = 333, .n_ctx = 300,
          .weight_type = TENSOR_BF16, .embd_type = TENSOR_Q4_1, .tied_output = false, .seed = 6 },
        /* SmolLM2's head layout (9 heads in 3 groups, head_dim 64) with fewer layers and tokens. */
        { .n_layer = 2, .n_embd = 576, .n_ff = 1536, .n_head = 9, .n_head_kv = 3, .n_vocab = 1024, .n_ctx = 8192,
          .weight_type = TENSOR_Q4_1, .embd_type = TENSOR_Q8_0, .tied_output = true, .rope_theta = 100000.0f,
          .seed = 7 },
        { .n_layer = 2, .n_embd = 96, .n_ff = 160, .n_head = 3, .n_head_kv = 1, .n_vocab = 310, .n_ctx = 256,
          .weight_type = TENSOR_Q5_0, .embd_type = TENSOR_Q5_1, .tied_output = false, .seed = 8 },
        { .n_layer = 1, .n_embd = 64, .n_ff = 128, .n_head = 4, .n_head_kv = 2, .n_vocab = 300, .n_ctx = 128,
          .weight_type = TENSOR_Q5_1, .embd_type = TENSOR_Q5_0, .tied_output = true, .seed = 9 },
};

static void assert_weight(const struct weight *w, enum tensor_type type, uint64_t n_cols, uint64_t n_rows) {
        ck_assert_int_eq(w->type, type);
        ck_assert_uint_eq(w->n_cols, n_cols);
        ck_assert_uint_eq(w->n_rows, n_rows);
        ck_assert_uint_eq(w->row_bytes, tensor_row_bytes(type, n_cols));
        ck_assert_ptr_nonnull(w->data);

        /* The values decode to the generator's scale: finite, small, not all zero. */
        float *row = malloc(n_cols * sizeof(float));
        ck_assert_ptr_nonnull(row);
        tensor_row_to_float(type, w->data + (n_rows - 1) * w->row_bytes, row, n_cols);
        double sum2 = 0;
        for (uint64_t i = 0; i < n_cols; i++) {
                ck_assert(isfinite(row[i]));
                ck_assert_float_lt(fabsf(row[i]), 4.0f);
                sum2 += (double) row[i] * row[i];
        }
        ck_assert_double_gt(sum2, 0.0);
        free(row);
}

START_TEST(test_synthetic_shapes) {
        const struct synthetic_llama_config *cfg = &shapes[_i];
        char *dir = test_tmpdir(), *path = test_path_join(dir, "model.gguf");
        struct model *m = NULL;
        struct error err = { "" };

        ck_assert_int_eq(synthetic_llama_write(path, cfg), 0);
        int r = model_load(path, &m, &err);
        ck_assert_msg(r == 0, "shape %d: %s", _i, err.message);

        const struct model_hparams *hp = &m->hp;
        uint32_t head_dim = cfg->n_embd / cfg->n_head;
        ck_assert_str_eq(m->architecture, "llama");
        ck_assert_str_eq(m->name, "synthetic-llama");
        ck_assert_uint_eq(hp->n_layer, cfg->n_layer);
        ck_assert_uint_eq(hp->n_embd, cfg->n_embd);
        ck_assert_uint_eq(hp->n_ff, cfg->n_ff);
        ck_assert_uint_eq(hp->n_head, cfg->n_head);
        ck_assert_uint_eq(hp->n_head_kv, cfg->n_head_kv);
        ck_assert_uint_eq(hp->n_vocab, cfg->n_vocab);
        ck_assert_uint_eq(hp->n_ctx_train, cfg->n_ctx);
        ck_assert_uint_eq(hp->head_dim, head_dim);
        ck_assert_uint_eq(hp->rope_dim, head_dim);
        ck_assert_float_eq(hp->rope_theta, cfg->rope_theta > 0.0f ? cfg->rope_theta : 10000.0f);
        ck_assert_float_eq(hp->rms_eps, 1e-5f);
        ck_assert(m->tied_output == cfg->tied_output);

        assert_weight(&m->token_embd, cfg->embd_type, cfg->n_embd, cfg->n_vocab);
        if (cfg->tied_output)
                ck_assert_ptr_eq(m->output.data, m->token_embd.data);
        else
                assert_weight(&m->output, cfg->embd_type, cfg->n_embd, cfg->n_vocab);
        uint64_t kv_dim = (uint64_t) cfg->n_head_kv * head_dim;
        for (uint32_t i = 0; i < cfg->n_layer; i++) {
                const struct model_layer *l = &m->layers[i];
                assert_weight(&l->wq, cfg->weight_type, cfg->n_embd, cfg->n_embd);
                assert_weight(&l->wk, cfg->weight_type, cfg->n_embd, kv_dim);
                assert_weight(&l->wv, cfg->weight_type, cfg->n_embd, kv_dim);
                assert_weight(&l->wo, cfg->weight_type, cfg->n_embd, cfg->n_embd);
                assert_weight(&l->w_gate, cfg->weight_type, cfg->n_embd, cfg->n_ff);
                assert_weight(&l->w_up, cfg->weight_type, cfg->n_embd, cfg->n_ff);
                assert_weight(&l->w_down, cfg->weight_type, cfg->n_ff, cfg->n_embd);
                for (uint32_t j = 0; j < cfg->n_embd; j++) {
                        ck_assert_float_lt(fabsf(l->attn_norm[j] - 1.0f), 0.5f);
                        ck_assert_float_lt(fabsf(l->ffn_norm[j] - 1.0f), 0.5f);
                }
        }
        for (uint32_t j = 0; j < cfg->n_embd; j++)
                ck_assert_float_lt(fabsf(m->output_norm[j] - 1.0f), 0.5f);

        /* The same seed gives the same file. */
        char *again = test_path_join(dir, "again.gguf");
        uint8_t *a, *b;
        size_t la, lb;
        ck_assert_int_eq(synthetic_llama_write(again, cfg), 0);
        ck_assert_int_eq(test_read_file(path, &a, &la), 0);
        ck_assert_int_eq(test_read_file(again, &b, &lb), 0);
        ck_assert_uint_eq(la, lb);
        ck_assert_mem_eq(a, b, la);
        free(a);
        free(b);
        free(again);

        model_free(m);
        free(path);
        test_tmpdir_remove(dir);
}
END_TEST

static bool token_exists(const struct gguf_value *tokens, const char *s, size_t len) {
        for (uint64_t i = 0; i < tokens->array.count; i++)
                if (tokens->array.strings[i].len == len && memcmp(tokens->array.strings[i].data, s, len) == 0)
                        return true;
        return false;
}

START_TEST(test_synthetic_tokenizer) {
        static const uint32_t vocab_sizes[] = { 259, 262, 300, 2000 };
        struct synthetic_llama_config cfg = small_config();
        cfg.n_vocab = vocab_sizes[_i];

        struct gguf_writer *w = gguf_writer_new();
        ck_assert_int_eq(synthetic_llama_build(w, &cfg), 0);
        size_t len;
        uint8_t *buf = writer_image(w, &len);
        gguf_writer_free(w);
        struct gguf_file *f = NULL;
        struct error err = { "" };
        ck_assert_int_eq(gguf_parse(buf, len, "tokenizer.gguf", &f, &err), 0);

        const struct gguf_value *tokens, *types, *merges;
        struct gguf_string s;
        uint32_t u;
        ck_assert_int_eq(gguf_get_string(f, "tokenizer.ggml.model", &s, &err), 0);
        ck_assert(gguf_string_equals(s, "gpt2"));
        ck_assert_int_eq(gguf_get_string(f, "tokenizer.ggml.pre", &s, &err), 0);
        ck_assert(gguf_string_equals(s, "smollm"));
        ck_assert_int_eq(gguf_get_string(f, "tokenizer.chat_template", &s, &err), 0);
        ck_assert_uint_gt(s.len, 0);
        ck_assert_int_eq(gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &u, &err), 0);
        ck_assert_uint_eq(u, 1);
        ck_assert_int_eq(gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &u, &err), 0);
        ck_assert_uint_eq(u, 2);
        ck_assert_int_eq(gguf_get_u32(f, "tokenizer.ggml.unknown_token_id", &u, &err), 0);
        ck_assert_uint_eq(u, 0);
        ck_assert_int_eq(gguf_get_array(f, "tokenizer.ggml.tokens", GGUF_VALUE_STRING, &tokens, &err), 0);
        ck_assert_int_eq(gguf_get_array(f, "tokenizer.ggml.token_type", GGUF_VALUE_I32, &types, &err), 0);
        ck_assert_int_eq(gguf_get_array(f, "tokenizer.ggml.merges", GGUF_VALUE_STRING, &merges, &err), 0);
        ck_assert_uint_eq(tokens->array.count, cfg.n_vocab);
        ck_assert_uint_eq(types->array.count, cfg.n_vocab);

        ck_assert(gguf_string_equals(tokens->array.strings[0], "<|endoftext|>"));
        ck_assert(gguf_string_equals(tokens->array.strings[1], "<|im_start|>"));
        ck_assert(gguf_string_equals(tokens->array.strings[2], "<|im_end|>"));
        for (int i = 0; i < 3; i++)
                ck_assert_int_eq(gguf_array_int(types, i), 3);
        /* Byte tokens: '!' stands for itself, space is "Ġ" (U+0120), newline "Ċ" (U+010A). */
        ck_assert(gguf_string_equals(tokens->array.strings[3 + '!'], "!"));
        ck_assert(gguf_string_equals(tokens->array.strings[3 + ' '], "\xc4\xa0"));
        ck_assert(gguf_string_equals(tokens->array.strings[3 + '\n'], "\xc4\x8a"));
        ck_assert(gguf_string_equals(tokens->array.strings[3 + 0xad], "\xc5\x83")); /* U+0143 */
        for (int i = 3; i < 259; i++) {
                ck_assert_int_eq(gguf_array_int(types, i), 1);
                for (int j = 3; j < i; j++) /* all distinct */
                        ck_assert(!(tokens->array.strings[i].len == tokens->array.strings[j].len &&
                                    memcmp(tokens->array.strings[i].data, tokens->array.strings[j].data,
                                           tokens->array.strings[i].len) == 0));
        }
        for (uint32_t i = 259 + (uint32_t) merges->array.count; i < cfg.n_vocab; i++)
                ck_assert_int_eq(gguf_array_int(types, i), 4);
        ck_assert_uint_le(merges->array.count, cfg.n_vocab - 259);
        /* Every merge "a b" has both parts and "ab" in the vocabulary. */
        for (uint64_t i = 0; i < merges->array.count; i++) {
                struct gguf_string mg = merges->array.strings[i];
                const char *sp = memchr(mg.data, ' ', mg.len);
                ck_assert_ptr_nonnull(sp);
                size_t ll = (size_t) (sp - mg.data), rl = mg.len - ll - 1;
                char joined[64];
                ck_assert_uint_lt(ll + rl, sizeof(joined));
                memcpy(joined, mg.data, ll);
                memcpy(joined + ll, sp + 1, rl);
                ck_assert(token_exists(tokens, mg.data, ll));
                ck_assert(token_exists(tokens, sp + 1, rl));
                ck_assert(token_exists(tokens, joined, ll + rl));
        }
        gguf_close(f);
        free(buf);
}
END_TEST

static Suite *gguf_suite(void) {
        Suite *s = suite_create("gguf");
        TCase *tc;

        tc = tcase_create("real-model");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_real_model_tensor_types);
        tcase_add_test(tc, test_real_model_hparams);
        tcase_add_test(tc, test_real_model_truncated);
        suite_add_tcase(s, tc);

        tc = tcase_create("round-trip");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_roundtrip_values);
        tcase_add_loop_test(tc, test_roundtrip_tensors, 0, 4);
        tcase_add_test(tc, test_quantizers);
        tcase_add_test(tc, test_roundtrip_minimal);
        suite_add_tcase(s, tc);

        tc = tcase_create("malformed");
        tcase_set_timeout(tc, 300);
        tcase_add_test(tc, test_bad_magic);
        tcase_add_test(tc, test_bad_version);
        tcase_add_test(tc, test_truncated_everywhere);
        tcase_add_test(tc, test_huge_lengths);
        tcase_add_test(tc, test_bad_values);
        tcase_add_test(tc, test_bad_tensor_infos);
        tcase_add_test(tc, test_data_past_eof);
        tcase_add_test(tc, test_bad_alignment);
        tcase_add_test(tc, test_small_alignment);
        tcase_add_test(tc, test_open_special_files);
        suite_add_tcase(s, tc);

        tc = tcase_create("model-errors");
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_model_errors);
        tcase_add_test(tc, test_model_huge_block_count);
        tcase_add_test(tc, test_model_layout_variations);
        tcase_add_test(tc, test_q5_models_truncated);
        suite_add_tcase(s, tc);

        tc = tcase_create("synthetic");
        tcase_set_timeout(tc, 300);
        tcase_add_loop_test(tc, test_synthetic_shapes, 0, (int) ELEMENTS(shapes));
        tcase_add_loop_test(tc, test_synthetic_tokenizer, 0, 4);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        SRunner *sr = srunner_create(gguf_suite());
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
