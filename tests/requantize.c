/* SPDX-License-Identifier: MIT */
/* requantize IN OUT Q5_0|Q5_1: the file that `llama-quantize --allow-requantize IN OUT TYPE`
 * of the pinned llama.cpp writes, byte for byte, for a file whose matrices are Q4_1 (the
 * default model), so that the fidelity tests of those types need no llama.cpp build where
 * they run: tests/make-fixtures records the sha256 of llama-quantize's file and
 * tests/test-fidelity-quant.sh checks this tool's against it. What llama-quantize does, as
 * its source and its output show: every Q4_1 tensor decoded to floats and quantized again by
 * its reference quantizer (scalar float arithmetic, no fused multiply-add: this file is built
 * with contraction off), the others copied; the tensors sorted by name with blk.N's N
 * compared as a number and the names outside blocks first; the keys in their order with
 * general.quantization_version (2) and general.file_type moved to the end; the data aligned
 * as the input's, zero padding. */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "float16.h"
#include "gguf.h"
#include "tensor-types.h"

#define QUANTIZATION_VERSION 2
/* llama.cpp's file types (general.file_type) for the two targets */
#define FILE_TYPE_Q5_0 8
#define FILE_TYPE_Q5_1 9

static void pack_q5(const uint8_t q[QUANT_BLOCK], uint8_t qs[QUANT_BLOCK / 2], uint8_t qh[4]) {
        uint32_t high = 0;
        for (int j = 0; j < QUANT_BLOCK / 2; j++) {
                qs[j] = (uint8_t) ((q[j] & 15) | (q[j + 16] & 15) << 4);
                high |= (uint32_t) (q[j] >> 4 & 1) << j | (uint32_t) (q[j + 16] >> 4 & 1) << (j + 16);
        }
        for (int i = 0; i < 4; i++)
                qh[i] = (uint8_t) (high >> (8 * i));
}

/* The element of largest magnitude (the first of equals) gives d = x / -16, so that it is
 * code 0; codes are truncations of x / d + 16.5, at most 31. */
static void quantize_q5_0_block(const float *x, struct block_q5_0 *b) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QUANT_BLOCK; j++)
                if (amax < fabsf(x[j])) {
                        amax = fabsf(x[j]);
                        max = x[j];
                }
        float d = max / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f32_to_f16(d);
        uint8_t q[QUANT_BLOCK];
        for (int j = 0; j < QUANT_BLOCK; j++) {
                float v = x[j] * id;
                int8_t code = (int8_t) (v + 16.5f);
                q[j] = (uint8_t) (code < 31 ? code : 31);
        }
        pack_q5(q, b->qs, b->qh);
}

/* d = (max - min) / 31 and m = min; codes are truncations of (x - min) / d + 0.5, kept to
 * eight bits as they come (the largest rounds to 31). */
static void quantize_q5_1_block(const float *x, struct block_q5_1 *b) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QUANT_BLOCK; j++) {
                if (x[j] < min)
                        min = x[j];
                if (x[j] > max)
                        max = x[j];
        }
        float d = (max - min) / 31.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = f32_to_f16(d);
        b->m = f32_to_f16(min);
        uint8_t q[QUANT_BLOCK];
        for (int j = 0; j < QUANT_BLOCK; j++) {
                float v = (x[j] - min) * id;
                q[j] = (uint8_t) (v + 0.5f);
        }
        pack_q5(q, b->qs, b->qh);
}

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

/* The tensor's data as it goes out: a Q4_1 one decoded and quantized to type. */
static void put_tensor_data(struct output *o, const struct gguf_tensor *t, enum tensor_type type) {
        if (t->type != TENSOR_Q4_1) {
                put(o, t->data, t->n_bytes);
                return;
        }
        uint64_t n_blocks = t->n_bytes / sizeof(struct block_q4_1);
        for (uint64_t b = 0; b < n_blocks; b++) {
                float x[QUANT_BLOCK];
                tensor_row_to_float(TENSOR_Q4_1, (const struct block_q4_1 *) t->data + b, x, QUANT_BLOCK);
                if (type == TENSOR_Q5_0) {
                        struct block_q5_0 q;
                        quantize_q5_0_block(x, &q);
                        put(o, &q, sizeof(q));
                } else {
                        struct block_q5_1 q;
                        quantize_q5_1_block(x, &q);
                        put(o, &q, sizeof(q));
                }
        }
}

int main(int argc, char **argv) {
        if (argc != 4 || (strcmp(argv[3], "Q5_0") != 0 && strcmp(argv[3], "Q5_1") != 0)) {
                fprintf(stderr, "usage: requantize IN OUT Q5_0|Q5_1\n");
                return 2;
        }
        enum tensor_type type = strcmp(argv[3], "Q5_0") == 0 ? TENSOR_Q5_0 : TENSOR_Q5_1;
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
        const struct gguf_tensor **order = malloc(in->n_tensors * sizeof(*order));
        if (!order)
                return 1;
        for (uint64_t i = 0; i < in->n_tensors; i++)
                order[i] = &in->tensors[i];
        qsort(order, in->n_tensors, sizeof(*order), compare_tensors);

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
        put_u32(&o, type == TENSOR_Q5_0 ? FILE_TYPE_Q5_0 : FILE_TYPE_Q5_1);

        uint64_t offset = 0;
        for (uint64_t i = 0; i < in->n_tensors; i++) {
                const struct gguf_tensor *t = order[i];
                enum tensor_type out_type = t->type == TENSOR_Q4_1 ? type : t->type;
                put_u64(&o, t->name.len);
                put(&o, t->name.data, t->name.len);
                put_u32(&o, t->n_dims);
                for (uint32_t d = 0; d < t->n_dims; d++)
                        put_u64(&o, t->ne[d]);
                put_u32(&o, out_type);
                put_u64(&o, offset);
                offset = aligned(offset + tensor_row_bytes(out_type, t->ne[0]) * (t->n_bytes / tensor_row_bytes(t->type, t->ne[0])),
                                 in->alignment);
        }
        put_zeros(&o, aligned(o.written, in->alignment) - o.written);
        uint64_t data_start = o.written;
        for (uint64_t i = 0; i < in->n_tensors; i++) {
                put_tensor_data(&o, order[i], order[i]->type == TENSOR_Q4_1 ? type : order[i]->type);
                put_zeros(&o, aligned(o.written - data_start, in->alignment) - (o.written - data_start));
        }
        if (fclose(o.f) != 0) {
                perror(argv[2]);
                return 1;
        }
        free(order);
        gguf_close(in);
        return 0;
}
