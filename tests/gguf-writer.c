/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf-writer.h"

#define RAW_MAX_DIMS 8

/* A growable byte buffer; every GGUF field is little-endian, as is every host we build on. */
struct bytes {
        uint8_t *data;
        size_t len;
        size_t cap;
};

struct writer_tensor {
        char *name;
        uint32_t type;
        uint32_t n_dims; /* as written, which for raw infos may exceed the dimensions stored */
        uint32_t n_ne;
        uint64_t ne[RAW_MAX_DIMS];
        bool raw;        /* info written verbatim, no data */
        uint64_t offset; /* given for raw infos, assigned by layout otherwise */
        uint8_t *data;
        size_t n_bytes;
};

struct gguf_writer {
        uint32_t version;
        uint32_t alignment;
        bool has_alignment_key;
        size_t alignment_value_pos; /* where the u32 value of general.alignment sits in kv */
        struct bytes kv;
        uint64_t n_kv;
        struct writer_tensor *tensors;
        size_t n_tensors;
        size_t cap_tensors;
        size_t extra_data;
};

static void *xrealloc(void *p, size_t n) {
        p = realloc(p, n ? n : 1);
        if (!p) {
                fputs("gguf-writer: out of memory\n", stderr);
                abort();
        }
        return p;
}

static void put(struct bytes *b, const void *p, size_t n) {
        if (n > b->cap - b->len) {
                size_t cap = b->cap ? b->cap : 256;
                while (cap - b->len < n)
                        cap *= 2;
                b->data = xrealloc(b->data, cap);
                b->cap = cap;
        }
        if (n)
                memcpy(b->data + b->len, p, n);
        b->len += n;
}

static void put_zeros(struct bytes *b, size_t n) {
        static const uint8_t zeros[64];
        while (n > 0) {
                size_t k = n < sizeof(zeros) ? n : sizeof(zeros);
                put(b, zeros, k);
                n -= k;
        }
}

static void put_u32(struct bytes *b, uint32_t v) {
        put(b, &v, sizeof(v));
}

static void put_u64(struct bytes *b, uint64_t v) {
        put(b, &v, sizeof(v));
}

static void put_string(struct bytes *b, const char *s, size_t len) {
        put_u64(b, len);
        put(b, s, len);
}

static size_t scalar_size(enum gguf_value_type t) {
        switch (t) {
        case GGUF_VALUE_U8: case GGUF_VALUE_I8: case GGUF_VALUE_BOOL:
                return 1;
        case GGUF_VALUE_U16: case GGUF_VALUE_I16:
                return 2;
        case GGUF_VALUE_U32: case GGUF_VALUE_I32: case GGUF_VALUE_F32:
                return 4;
        case GGUF_VALUE_U64: case GGUF_VALUE_I64: case GGUF_VALUE_F64:
                return 8;
        default:
                fprintf(stderr, "gguf-writer: value type %u is not a scalar type\n", (unsigned) t);
                abort();
        }
}

struct gguf_writer *gguf_writer_new(void) {
        struct gguf_writer *w = xrealloc(NULL, sizeof(*w));
        *w = (struct gguf_writer) { .version = 3, .alignment = GGUF_DEFAULT_ALIGNMENT };
        return w;
}

void gguf_writer_free(struct gguf_writer *w) {
        if (!w)
                return;
        for (size_t i = 0; i < w->n_tensors; i++) {
                free(w->tensors[i].name);
                free(w->tensors[i].data);
        }
        free(w->tensors);
        free(w->kv.data);
        free(w);
}

/* Starts a key-value pair: the key and the value type. The caller appends the value. */
static void begin_kv(struct gguf_writer *w, const char *key, uint32_t type) {
        put_string(&w->kv, key, strlen(key));
        put_u32(&w->kv, type);
        w->n_kv++;
}

static void add_scalar(struct gguf_writer *w, const char *key, enum gguf_value_type type, const void *v) {
        begin_kv(w, key, type);
        put(&w->kv, v, scalar_size(type));
}

void gguf_writer_add_u8(struct gguf_writer *w, const char *key, uint8_t v) {
        add_scalar(w, key, GGUF_VALUE_U8, &v);
}

void gguf_writer_add_i8(struct gguf_writer *w, const char *key, int8_t v) {
        add_scalar(w, key, GGUF_VALUE_I8, &v);
}

void gguf_writer_add_u16(struct gguf_writer *w, const char *key, uint16_t v) {
        add_scalar(w, key, GGUF_VALUE_U16, &v);
}

void gguf_writer_add_i16(struct gguf_writer *w, const char *key, int16_t v) {
        add_scalar(w, key, GGUF_VALUE_I16, &v);
}

void gguf_writer_add_u32(struct gguf_writer *w, const char *key, uint32_t v) {
        add_scalar(w, key, GGUF_VALUE_U32, &v);
}

void gguf_writer_add_i32(struct gguf_writer *w, const char *key, int32_t v) {
        add_scalar(w, key, GGUF_VALUE_I32, &v);
}

void gguf_writer_add_u64(struct gguf_writer *w, const char *key, uint64_t v) {
        add_scalar(w, key, GGUF_VALUE_U64, &v);
}

void gguf_writer_add_i64(struct gguf_writer *w, const char *key, int64_t v) {
        add_scalar(w, key, GGUF_VALUE_I64, &v);
}

void gguf_writer_add_f32(struct gguf_writer *w, const char *key, float v) {
        add_scalar(w, key, GGUF_VALUE_F32, &v);
}

void gguf_writer_add_f64(struct gguf_writer *w, const char *key, double v) {
        add_scalar(w, key, GGUF_VALUE_F64, &v);
}

void gguf_writer_add_bool(struct gguf_writer *w, const char *key, bool v) {
        uint8_t b = v;
        add_scalar(w, key, GGUF_VALUE_BOOL, &b);
}

void gguf_writer_add_string_n(struct gguf_writer *w, const char *key, const char *v, size_t len) {
        begin_kv(w, key, GGUF_VALUE_STRING);
        put_string(&w->kv, v, len);
}

void gguf_writer_add_string(struct gguf_writer *w, const char *key, const char *v) {
        gguf_writer_add_string_n(w, key, v, strlen(v));
}

/* The body of a scalar array: element type, count, elements. */
static void put_scalar_array(struct bytes *b, enum gguf_value_type elem_type, const void *elems, size_t count) {
        size_t size = scalar_size(elem_type);
        put_u32(b, elem_type);
        put_u64(b, count);
        put(b, elems, count * size);
}

void gguf_writer_add_array(struct gguf_writer *w, const char *key, enum gguf_value_type elem_type,
                           const void *elems, size_t count) {
        begin_kv(w, key, GGUF_VALUE_ARRAY);
        put_scalar_array(&w->kv, elem_type, elems, count);
}

void gguf_writer_add_string_array(struct gguf_writer *w, const char *key, const char *const *v, size_t count) {
        begin_kv(w, key, GGUF_VALUE_ARRAY);
        put_u32(&w->kv, GGUF_VALUE_STRING);
        put_u64(&w->kv, count);
        for (size_t i = 0; i < count; i++)
                put_string(&w->kv, v[i], strlen(v[i]));
}

void gguf_writer_add_u32_array(struct gguf_writer *w, const char *key, const uint32_t *v, size_t count) {
        gguf_writer_add_array(w, key, GGUF_VALUE_U32, v, count);
}

void gguf_writer_add_i32_array(struct gguf_writer *w, const char *key, const int32_t *v, size_t count) {
        gguf_writer_add_array(w, key, GGUF_VALUE_I32, v, count);
}

void gguf_writer_add_f32_array(struct gguf_writer *w, const char *key, const float *v, size_t count) {
        gguf_writer_add_array(w, key, GGUF_VALUE_F32, v, count);
}

void gguf_writer_add_array_of_arrays(struct gguf_writer *w, const char *key, enum gguf_value_type elem_type,
                                     const void *const *arrays, const size_t *counts, size_t n) {
        begin_kv(w, key, GGUF_VALUE_ARRAY);
        put_u32(&w->kv, GGUF_VALUE_ARRAY);
        put_u64(&w->kv, n);
        for (size_t i = 0; i < n; i++)
                put_scalar_array(&w->kv, elem_type, arrays[i], counts[i]);
}

static void put_nested(struct bytes *b, unsigned depth) {
        static const uint8_t seven = 7;
        if (depth <= 1) {
                put_scalar_array(b, GGUF_VALUE_U8, &seven, 1);
                return;
        }
        put_u32(b, GGUF_VALUE_ARRAY);
        put_u64(b, 1);
        put_nested(b, depth - 1);
}

void gguf_writer_add_nested_array(struct gguf_writer *w, const char *key, unsigned depth) {
        begin_kv(w, key, GGUF_VALUE_ARRAY);
        put_nested(&w->kv, depth);
}

void gguf_writer_add_raw(struct gguf_writer *w, const char *key, uint32_t value_type, const void *value,
                         size_t n_bytes) {
        begin_kv(w, key, value_type);
        put(&w->kv, value, n_bytes);
}

void gguf_writer_set_alignment(struct gguf_writer *w, uint32_t alignment) {
        if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
                fprintf(stderr, "gguf-writer: alignment %u is not a power of two\n", alignment);
                abort();
        }
        w->alignment = alignment;
        if (w->has_alignment_key) {
                memcpy(w->kv.data + w->alignment_value_pos, &alignment, sizeof(alignment));
                return;
        }
        begin_kv(w, "general.alignment", GGUF_VALUE_U32);
        w->alignment_value_pos = w->kv.len;
        w->has_alignment_key = true;
        put_u32(&w->kv, alignment);
}

void gguf_writer_set_version(struct gguf_writer *w, uint32_t version) {
        w->version = version;
}

static struct writer_tensor *new_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                        const uint64_t *ne) {
        if (w->n_tensors == w->cap_tensors) {
                w->cap_tensors = w->cap_tensors ? 2 * w->cap_tensors : 16;
                w->tensors = xrealloc(w->tensors, w->cap_tensors * sizeof(*w->tensors));
        }
        struct writer_tensor *t = &w->tensors[w->n_tensors++];
        /* A reader stops at a bad dimension count before reading the shape, so a lying
         * count needs no more than RAW_MAX_DIMS values behind it. */
        *t = (struct writer_tensor) {
                .type = type,
                .n_dims = n_dims,
                .n_ne = n_dims < RAW_MAX_DIMS ? n_dims : RAW_MAX_DIMS,
        };
        t->name = xrealloc(NULL, strlen(name) + 1);
        strcpy(t->name, name);
        if (t->n_ne)
                memcpy(t->ne, ne, t->n_ne * sizeof(*ne));
        return t;
}

void gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum tensor_type type, uint32_t n_dims,
                            const uint64_t *ne, const void *data, size_t n_bytes) {
        if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) {
                fprintf(stderr, "gguf-writer: tensor '%s' has %u dimensions (1 to %d allowed)\n", name, n_dims,
                        GGUF_MAX_DIMS);
                abort();
        }
        struct writer_tensor *t = new_tensor(w, name, type, n_dims, ne);
        t->data = xrealloc(NULL, n_bytes);
        if (n_bytes)
                memcpy(t->data, data, n_bytes);
        t->n_bytes = n_bytes;
}

void gguf_writer_add_tensor_info_raw(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                     const uint64_t *ne, uint64_t offset) {
        struct writer_tensor *t = new_tensor(w, name, type, n_dims, ne);
        t->raw = true;
        t->offset = offset;
}

void gguf_writer_add_data_padding(struct gguf_writer *w, size_t n_bytes) {
        w->extra_data += n_bytes;
}

static size_t align_up(size_t n, size_t alignment) {
        return (n + alignment - 1) / alignment * alignment;
}

/* Assigns data offsets; returns where the last tensor's data ends within the data section. */
static size_t layout(struct gguf_writer *w) {
        size_t end = 0;
        for (size_t i = 0; i < w->n_tensors; i++) {
                struct writer_tensor *t = &w->tensors[i];
                if (t->raw)
                        continue;
                t->offset = align_up(end, w->alignment);
                end = t->offset + t->n_bytes;
        }
        return end;
}

static size_t metadata_length(const struct gguf_writer *w) {
        size_t n = 4 + 4 + 8 + 8 + w->kv.len;
        for (size_t i = 0; i < w->n_tensors; i++)
                n += 8 + strlen(w->tensors[i].name) + 4 + 8 * w->tensors[i].n_ne + 4 + 8;
        return n;
}

size_t gguf_writer_min_valid_length(struct gguf_writer *w) {
        if (w->n_tensors == 0)
                return metadata_length(w);
        return align_up(metadata_length(w), w->alignment) + layout(w);
}

int gguf_writer_to_buffer(struct gguf_writer *w, uint8_t **ret_buf, size_t *ret_len) {
        struct bytes b = { 0 };

        layout(w);
        put(&b, "GGUF", 4);
        put_u32(&b, w->version);
        put_u64(&b, w->n_tensors);
        put_u64(&b, w->n_kv);
        put(&b, w->kv.data, w->kv.len);
        for (size_t i = 0; i < w->n_tensors; i++) {
                const struct writer_tensor *t = &w->tensors[i];
                put_string(&b, t->name, strlen(t->name));
                put_u32(&b, t->n_dims);
                for (uint32_t d = 0; d < t->n_ne; d++)
                        put_u64(&b, t->ne[d]);
                put_u32(&b, t->type);
                put_u64(&b, t->offset);
        }
        put_zeros(&b, align_up(b.len, w->alignment) - b.len);

        size_t data_start = b.len;
        for (size_t i = 0; i < w->n_tensors; i++) {
                const struct writer_tensor *t = &w->tensors[i];
                if (t->raw)
                        continue;
                put_zeros(&b, data_start + t->offset - b.len);
                put(&b, t->data, t->n_bytes);
        }
        /* Each tensor's data is padded to the alignment, the last one's too. */
        put_zeros(&b, align_up(b.len, w->alignment) - b.len);
        put_zeros(&b, w->extra_data);

        *ret_buf = b.data ? b.data : xrealloc(NULL, 1);
        *ret_len = b.len;
        return 0;
}

int gguf_writer_write_file(struct gguf_writer *w, const char *path) {
        uint8_t *buf;
        size_t len;
        int r = 0;

        gguf_writer_to_buffer(w, &buf, &len);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) {
                r = -errno;
                free(buf);
                return r;
        }
        for (size_t done = 0; done < len;) {
                ssize_t k = write(fd, buf + done, len - done);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        r = -errno;
                        break;
                }
                done += (size_t) k;
        }
        if (close(fd) < 0 && r == 0)
                r = -errno;
        free(buf);
        return r;
}
