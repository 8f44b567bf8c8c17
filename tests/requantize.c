/* SPDX-License-Identifier: MIT */
/* requantize IN OUT TYPE: the file that `llama-quantize --allow-requantize IN OUT TYPE` of the
 * pinned llama.cpp writes (for TYPE Q2_K-FFN: `--tensor-type ffn_down=q2_k IN OUT Q2_K`; the
 * usage text lists them), byte for byte, for a file whose matrices are Q4_1 (the default
 * model), so that the fidelity tests of those types need no llama.cpp build where they run:
 * tests/make-fixtures records the sha256 of llama-quantize's file and
 * tests/test-fidelity-quant.sh checks this tool's against it. What llama-quantize does, as
 * its source and its output show: each tensor's type chosen by the file type's mixture
 * (requantize-types.c); a tensor whose type changes decoded to floats and quantized by the
 * reference quantizer (requantize-quants.c, requantize-k-quants.c), the others copied; the
 * tensors sorted by name with blk.N's N compared as a number and the names outside blocks
 * first; the keys in their order with general.quantization_version (2) and
 * general.file_type moved to the end; the data aligned as the input's, zero padding. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "requantize.h"

#define QUANTIZATION_VERSION 2

/* The layer of a tensor name, -1 outside the blocks. */
static long layer_of(struct gguf_string name) {
        if (name.len < 5 || memcmp(name.data, "blk.", 4) != 0)
                return -1;
        long n = 0;
        for (uint64_t i = 4; i < name.len && name.data[i] >= '0' && name.data[i] <= '9'; i++)
                n = n * 10 + (name.data[i] - '0');
        return n;
}

static int compare_names(struct gguf_string a, struct gguf_string b) {
        int c = memcmp(a.data, b.data, a.len < b.len ? a.len : b.len);
        return c ? c : (a.len > b.len) - (a.len < b.len);
}

static int compare_tensors(const void *pa, const void *pb) {
        const struct gguf_tensor *a = *(const struct gguf_tensor *const *) pa, *b = *(const struct gguf_tensor *const *) pb;
        long la = layer_of(a->name), lb = layer_of(b->name);
        return la != lb ? (la > lb) - (la < lb) : compare_names(a->name, b->name);
}

static uint64_t aligned(uint64_t n, uint64_t alignment) {
        return (n + alignment - 1) / alignment * alignment;
}

struct output {
        FILE *f;
        const char *path;
        uint64_t written;
};

static void put(struct output *o, const void *p, size_t n) {
        if (fwrite(p, 1, n, o->f) != n) {
                perror(o->path);
                exit(1);
        }
        o->written += n;
}

static void put_u32(struct output *o, uint32_t v) {
        put(o, &v, sizeof(v));
}

static void put_u64(struct output *o, uint64_t v) {
        put(o, &v, sizeof(v));
}

static void put_string(struct output *o, const char *s) {
        put_u64(o, strlen(s));
        put(o, s, strlen(s));
}

static void put_zeros(struct output *o, uint64_t n) {
        static const uint8_t zeros[256];
        for (; n > 0; n -= n < sizeof(zeros) ? n : sizeof(zeros))
                put(o, zeros, n < sizeof(zeros) ? n : sizeof(zeros));
}

/* The tensor's data as it goes out: copied when its type stays, else decoded and quantized
 * again a row at a time. */
static int put_tensor_data(struct output *o, const struct gguf_tensor *t, enum tensor_type type) {
        if (t->type == type) {
                put(o, t->data, t->n_bytes);
                return 0;
        }
        uint64_t n_rows = t->n_bytes / tensor_row_bytes(t->type, t->ne[0]), out_bytes = tensor_row_bytes(type, t->ne[0]);
        float *x = malloc(t->ne[0] * sizeof(*x));
        void *row = malloc(out_bytes);
        int rc = x && row ? 0 : -1;
        for (uint64_t r = 0; r < n_rows && rc == 0; r++) {
                tensor_row_to_float(t->type, (const uint8_t *) t->data + r * tensor_row_bytes(t->type, t->ne[0]), x, t->ne[0]);
                if (!quantize_row(type, x, row, t->ne[0])) {
                        fprintf(stderr, "requantize: %.*s: no quantizer for %s\n", (int) t->name.len, t->name.data,
                                tensor_type_name(type));
                        rc = -1;
                } else {
                        put(o, row, out_bytes);
                }
        }
        free(x);
        free(row);
        return rc;
}

static void usage(void) {
        fprintf(stderr, "usage: requantize IN OUT TYPE\n"
                        "writes, for the default model as IN, what llama-quantize writes; TYPE and its command:\n");
        for (const struct requantize_target *t = requantize_targets; t->name; t++)
                fprintf(stderr, "  %-9s llama-quantize --allow-requantize %sIN OUT %s\n", t->name, t->options, t->file_type_name);
}

int main(int argc, char **argv) {
        const struct requantize_target *target = argc == 4 ? requantize_target_named(argv[3]) : NULL;
        if (!target) {
                usage();
                return 2;
        }
        struct gguf_file *in;
        struct error err;
        if (gguf_open(argv[1], &in, &err) < 0) {
                fprintf(stderr, "requantize: %s\n", err.message);
                return 1;
        }
        if (in->n_tensors == 0 || in->n_kv == 0) {
                fprintf(stderr, "requantize: %s: no keys or no tensors\n", argv[1]);
                return 1;
        }
        struct type_choice choice;
        if (type_choice_init(&choice, target, in) < 0)
                return 1;
        const struct gguf_tensor **order = malloc(in->n_tensors * sizeof(*order));
        enum tensor_type *types = malloc(in->n_tensors * sizeof(*types));
        if (!order || !types)
                return 1;
        for (uint64_t i = 0; i < in->n_tensors; i++)
                order[i] = &in->tensors[i];
        qsort(order, in->n_tensors, sizeof(*order), compare_tensors);
        for (uint64_t i = 0; i < in->n_tensors; i++)
                types[i] = type_choice_next(&choice, order[i]);

        struct output o = { fopen(argv[2], "wb"), argv[2], 0 };
        if (!o.f) {
                perror(argv[2]);
                return 1;
        }
        bool has_version = gguf_find_kv(in, "general.quantization_version") != NULL;
        bool has_file_type = gguf_find_kv(in, "general.file_type") != NULL;
        put(&o, "GGUF", 4);
        put_u32(&o, 3);
        put_u64(&o, in->n_tensors);
        put_u64(&o, in->n_kv + !has_version + !has_file_type);
        /* A key's encoding runs from its name's length to the next key's (the last one's to
         * the first tensor info's): copied as it is. */
        for (uint64_t i = 0; i < in->n_kv; i++) {
                struct gguf_string key = in->kv[i].key;
                if (gguf_string_equals(key, "general.quantization_version") || gguf_string_equals(key, "general.file_type"))
                        continue;
                const char *begin = key.data - sizeof(uint64_t);
                const char *end = (i + 1 < in->n_kv ? in->kv[i + 1].key.data : in->tensors[0].name.data) - sizeof(uint64_t);
                put(&o, begin, (size_t) (end - begin));
        }
        put_string(&o, "general.quantization_version");
        put_u32(&o, GGUF_VALUE_U32);
        put_u32(&o, QUANTIZATION_VERSION);
        put_string(&o, "general.file_type");
        put_u32(&o, GGUF_VALUE_U32);
        put_u32(&o, target->file_type);

        uint64_t offset = 0;
        for (uint64_t i = 0; i < in->n_tensors; i++) {
                const struct gguf_tensor *t = order[i];
                put_u64(&o, t->name.len);
                put(&o, t->name.data, t->name.len);
                put_u32(&o, t->n_dims);
                for (uint32_t d = 0; d < t->n_dims; d++)
                        put_u64(&o, t->ne[d]);
                put_u32(&o, types[i]);
                put_u64(&o, offset);
                offset = aligned(offset + tensor_row_bytes(types[i], t->ne[0]) * (t->n_bytes / tensor_row_bytes(t->type, t->ne[0])),
                                 in->alignment);
        }
        put_zeros(&o, aligned(o.written, in->alignment) - o.written);
        uint64_t data_start = o.written;
        int rc = 0;
        for (uint64_t i = 0; i < in->n_tensors && rc == 0; i++) {
                rc = put_tensor_data(&o, order[i], types[i]);
                put_zeros(&o, aligned(o.written - data_start, in->alignment) - (o.written - data_start));
        }
        if (fclose(o.f) != 0) {
                perror(argv[2]);
                rc = -1;
        }
        if (rc != 0)
                remove(argv[2]);
        free(types);
        free(order);
        gguf_close(in);
        return rc == 0 ? 0 : 1;
}
