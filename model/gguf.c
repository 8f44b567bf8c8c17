/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_VERSION 3
/* Nested arrays are legal GGUF; bound the nesting so a hostile file cannot exhaust the stack. */
#define GGUF_MAX_ARRAY_DEPTH 4

/* A bounds-checked cursor over the file image. Every read fails cleanly past the end. */
struct cursor {
        const uint8_t *base;
        uint64_t size;
        uint64_t pos;
        const char *name;
        struct error *err;
};

static int truncated(struct cursor *c, const char *what) {
        return error_set(c->err, EINVAL,
                         "%s: file truncated: %s at byte %llu runs past the end of the file (%llu bytes)",
                         c->name, what, (unsigned long long) c->pos, (unsigned long long) c->size);
}

static int read_bytes(struct cursor *c, void *out, uint64_t n, const char *what) {
        if (n > c->size - c->pos)
                return truncated(c, what);
        memcpy(out, c->base + c->pos, n);
        c->pos += n;
        return 0;
}

static int read_u32(struct cursor *c, uint32_t *v, const char *what) {
        return read_bytes(c, v, sizeof(*v), what);
}

static int read_u64(struct cursor *c, uint64_t *v, const char *what) {
        return read_bytes(c, v, sizeof(*v), what);
}

static int read_string(struct cursor *c, struct gguf_string *s, const char *what) {
        uint64_t len = 0;
        int r = read_u64(c, &len, what);
        if (r < 0)
                return r;
        if (len > c->size - c->pos)
                return truncated(c, what);
        s->data = (const char *) c->base + c->pos;
        s->len = len;
        c->pos += len;
        return 0;
}

static const uint8_t scalar_size[GGUF_VALUE_TYPE_COUNT] = {
        [GGUF_VALUE_U8] = 1,  [GGUF_VALUE_I8] = 1,  [GGUF_VALUE_U16] = 2, [GGUF_VALUE_I16] = 2,
        [GGUF_VALUE_U32] = 4, [GGUF_VALUE_I32] = 4, [GGUF_VALUE_F32] = 4, [GGUF_VALUE_BOOL] = 1,
        [GGUF_VALUE_U64] = 8, [GGUF_VALUE_I64] = 8, [GGUF_VALUE_F64] = 8,
};

const char *gguf_value_type_name(enum gguf_value_type type) {
        static const char *const names[GGUF_VALUE_TYPE_COUNT] = {
                [GGUF_VALUE_U8] = "u8",    [GGUF_VALUE_I8] = "i8",       [GGUF_VALUE_U16] = "u16",
                [GGUF_VALUE_I16] = "i16",  [GGUF_VALUE_U32] = "u32",     [GGUF_VALUE_I32] = "i32",
                [GGUF_VALUE_F32] = "f32",  [GGUF_VALUE_BOOL] = "bool",   [GGUF_VALUE_STRING] = "string",
                [GGUF_VALUE_ARRAY] = "array", [GGUF_VALUE_U64] = "u64", [GGUF_VALUE_I64] = "i64",
                [GGUF_VALUE_F64] = "f64",
        };
        if ((unsigned) type >= GGUF_VALUE_TYPE_COUNT)
                return "unknown";
        return names[type];
}

static int64_t decode_signed(const uint8_t *p, enum gguf_value_type type) {
        switch (type) {
        case GGUF_VALUE_I8: { int8_t v; memcpy(&v, p, 1); return v; }
        case GGUF_VALUE_I16: { int16_t v; memcpy(&v, p, 2); return v; }
        case GGUF_VALUE_I32: { int32_t v; memcpy(&v, p, 4); return v; }
        default: { int64_t v; memcpy(&v, p, 8); return v; }
        }
}

static uint64_t decode_unsigned(const uint8_t *p, enum gguf_value_type type) {
        switch (type) {
        case GGUF_VALUE_U8: case GGUF_VALUE_BOOL: return p[0];
        case GGUF_VALUE_U16: { uint16_t v; memcpy(&v, p, 2); return v; }
        case GGUF_VALUE_U32: { uint32_t v; memcpy(&v, p, 4); return v; }
        default: { uint64_t v; memcpy(&v, p, 8); return v; }
        }
}

static bool is_signed_type(enum gguf_value_type t) {
        return t == GGUF_VALUE_I8 || t == GGUF_VALUE_I16 || t == GGUF_VALUE_I32 || t == GGUF_VALUE_I64;
}

static bool is_integer_type(enum gguf_value_type t) {
        return is_signed_type(t) || t == GGUF_VALUE_U8 || t == GGUF_VALUE_U16 ||
               t == GGUF_VALUE_U32 || t == GGUF_VALUE_U64;
}

static int check_value_type(struct cursor *c, uint32_t type, const struct gguf_string *key) {
        if (type >= GGUF_VALUE_TYPE_COUNT)
                return error_set(c->err, EINVAL, "%s: metadata key '%.*s' has unknown value type %u",
                                 c->name, (int) key->len, key->data, type);
        return 0;
}

/* Skips (and so validates) an array's elements; builds nothing. */
static int skip_array(struct cursor *c, const struct gguf_string *key, unsigned depth);

static int skip_elements(struct cursor *c, const struct gguf_string *key, uint32_t type,
                         uint64_t count, unsigned depth) {
        int r;
        if (type == GGUF_VALUE_STRING) {
                for (uint64_t i = 0; i < count; i++) {
                        struct gguf_string s;
                        if ((r = read_string(c, &s, "array string")) < 0)
                                return r;
                }
                return 0;
        }
        if (type == GGUF_VALUE_ARRAY) {
                for (uint64_t i = 0; i < count; i++)
                        if ((r = skip_array(c, key, depth + 1)) < 0)
                                return r;
                return 0;
        }
        if (count > (c->size - c->pos) / scalar_size[type])
                return truncated(c, "array elements");
        c->pos += count * scalar_size[type];
        return 0;
}

static int skip_array(struct cursor *c, const struct gguf_string *key, unsigned depth) {
        uint32_t type = 0;
        uint64_t count = 0;
        int r;
        if (depth > GGUF_MAX_ARRAY_DEPTH)
                return error_set(c->err, EINVAL, "%s: metadata key '%.*s' nests arrays deeper than %d",
                                 c->name, (int) key->len, key->data, GGUF_MAX_ARRAY_DEPTH);
        if ((r = read_u32(c, &type, "array element type")) < 0 ||
            (r = check_value_type(c, type, key)) < 0 ||
            (r = read_u64(c, &count, "array length")) < 0)
                return r;
        return skip_elements(c, key, type, count, depth);
}

static int read_array(struct cursor *c, const struct gguf_string *key, struct gguf_value *v) {
        uint32_t type = 0;
        uint64_t count = 0;
        int r;
        if ((r = read_u32(c, &type, "array element type")) < 0 ||
            (r = check_value_type(c, type, key)) < 0 ||
            (r = read_u64(c, &count, "array length")) < 0)
                return r;
        v->array.type = type;
        v->array.count = count;
        v->array.raw = c->base + c->pos;
        v->array.strings = NULL;
        if (type != GGUF_VALUE_STRING)
                return skip_elements(c, key, type, count, 1);

        /* Each string takes at least its 8-byte length, which bounds the allocation by the
         * file size before anything is read. */
        if (count > (c->size - c->pos) / 8)
                return truncated(c, "string array");
        struct gguf_string *strings = calloc(count ? count : 1, sizeof(*strings));
        if (!strings)
                return error_set(c->err, ENOMEM, "%s: out of memory for %llu strings of '%.*s'", c->name,
                                 (unsigned long long) count, (int) key->len, key->data);
        v->array.strings = strings;
        for (uint64_t i = 0; i < count; i++)
                if ((r = read_string(c, &strings[i], "array string")) < 0)
                        return r;
        return 0;
}

static int read_value(struct cursor *c, const struct gguf_string *key, struct gguf_value *v) {
        uint32_t type = 0;
        uint8_t scalar[8];
        int r;
        if ((r = read_u32(c, &type, "metadata value type")) < 0 ||
            (r = check_value_type(c, type, key)) < 0)
                return r;
        v->type = type;
        switch (type) {
        case GGUF_VALUE_STRING:
                return read_string(c, &v->str, "metadata string");
        case GGUF_VALUE_ARRAY:
                return read_array(c, key, v);
        default:
                if ((r = read_bytes(c, scalar, scalar_size[type], "metadata value")) < 0)
                        return r;
                if (type == GGUF_VALUE_F32) {
                        float f;
                        memcpy(&f, scalar, 4);
                        v->f64 = f;
                } else if (type == GGUF_VALUE_F64)
                        memcpy(&v->f64, scalar, 8);
                else if (is_signed_type(type))
                        v->i64 = decode_signed(scalar, type);
                else
                        v->u64 = decode_unsigned(scalar, type);
                if (type == GGUF_VALUE_BOOL && v->u64 > 1)
                        return error_set(c->err, EINVAL, "%s: metadata key '%.*s' holds bool value %llu (not 0 or 1)",
                                         c->name, (int) key->len, key->data, (unsigned long long) v->u64);
                return 0;
        }
}

bool gguf_string_equals(struct gguf_string s, const char *cstr) {
        size_t n = strlen(cstr);
        return s.len == n && memcmp(s.data, cstr, n) == 0;
}

const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key) {
        for (uint64_t i = 0; i < f->n_kv; i++)
                if (gguf_string_equals(f->kv[i].key, key))
                        return &f->kv[i];
        return NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name) {
        for (uint64_t i = 0; i < f->n_tensors; i++)
                if (gguf_string_equals(f->tensors[i].name, name))
                        return &f->tensors[i];
        return NULL;
}

static int read_tensor_info(struct cursor *c, struct gguf_tensor *t) {
        uint32_t type = 0;
        int r;
        if ((r = read_string(c, &t->name, "tensor name")) < 0 ||
            (r = read_u32(c, &t->n_dims, "tensor dimension count")) < 0)
                return r;
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
                return error_set(c->err, EINVAL, "%s: tensor '%.*s' has %u dimensions (1 to %d allowed)",
                                 c->name, (int) t->name.len, t->name.data, t->n_dims, GGUF_MAX_DIMS);
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++)
                t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++)
                if ((r = read_u64(c, &t->ne[d], "tensor shape")) < 0)
                        return r;
        if ((r = read_u32(c, &type, "tensor type")) < 0 || (r = read_u64(c, &t->offset, "tensor offset")) < 0)
                return r;

        const struct tensor_type_info *info = tensor_type_info(type);
        if (!info) {
                char supported[256];
                const char *name = tensor_type_name(type);
                tensor_type_supported_names(supported, sizeof(supported));
                return error_set(c->err, EOPNOTSUPP, "%s: tensor '%.*s' has unsupported tensor type %u (%s; supported: %s)",
                                 c->name, (int) t->name.len, t->name.data, type, name ? name : "not a GGUF type",
                                 supported);
        }
        t->type = type;

        uint64_t n_elements = 1;
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
                if (t->ne[d] == 0 || n_elements > UINT64_MAX / t->ne[d])
                        return error_set(c->err, EINVAL, "%s: tensor '%.*s' has an invalid shape (dimension %u is %llu)",
                                         c->name, (int) t->name.len, t->name.data, d,
                                         (unsigned long long) t->ne[d]);
                n_elements *= t->ne[d];
        }
        if (t->ne[0] % info->block_size != 0)
                return error_set(c->err, EINVAL,
                                 "%s: tensor '%.*s' of type %s has %llu elements per row, not a multiple of its block size %u",
                                 c->name, (int) t->name.len, t->name.data, info->name,
                                 (unsigned long long) t->ne[0], info->block_size);
        /* The data must fit in the file, which also keeps n_bytes and every later product of
         * these dimensions in range. A sane shape that does not fit means a cut-off file. */
        if (n_elements / info->block_size > c->size / info->block_bytes)
                return error_set(c->err, EINVAL,
                                 "%s: tensor '%.*s' (%llu elements of %s) does not fit in the file of %llu bytes (truncated file?)",
                                 c->name, (int) t->name.len, t->name.data, (unsigned long long) n_elements, info->name,
                                 (unsigned long long) c->size);
        t->n_bytes = n_elements / info->block_size * info->block_bytes;
        return 0;
}

static int compare_keys(const void *a, const void *b) {
        const struct gguf_string *x = &(*(const struct gguf_kv *const *) a)->key;
        const struct gguf_string *y = &(*(const struct gguf_kv *const *) b)->key;
        int c = memcmp(x->data, y->data, x->len < y->len ? x->len : y->len);
        return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* A key given twice would make look-ups depend on order; refuse it. Sorting keeps this
 * n log n for files with very many keys. */
static int check_unique_keys(const struct gguf_file *f, struct error *err) {
        if (f->n_kv < 2)
                return 0;
        const struct gguf_kv **sorted = malloc(f->n_kv * sizeof(*sorted));
        if (!sorted)
                return error_set(err, ENOMEM, "%s: out of memory", f->path);
        for (uint64_t i = 0; i < f->n_kv; i++)
                sorted[i] = &f->kv[i];
        qsort(sorted, f->n_kv, sizeof(*sorted), compare_keys);
        int r = 0;
        for (uint64_t i = 1; i < f->n_kv && r == 0; i++)
                if (compare_keys(&sorted[i - 1], &sorted[i]) == 0)
                        r = error_set(err, EINVAL, "%s: metadata key '%.*s' appears twice", f->path,
                                      (int) sorted[i]->key.len, sorted[i]->key.data);
        free(sorted);
        return r;
}

static int parse(struct gguf_file *f, struct error *err) {
        struct cursor c = { .base = f->base, .size = f->size, .name = f->path, .err = err };
        char magic[4];
        int r;

        if ((r = read_bytes(&c, magic, 4, "magic")) < 0)
                return r;
        if (memcmp(magic, GGUF_MAGIC, 4) != 0)
                return error_set(err, EINVAL, "%s: bad magic: not a GGUF file (the first bytes are not \"GGUF\")", f->path);
        if ((r = read_u32(&c, &f->version, "version")) < 0)
                return r;
        if (f->version != GGUF_VERSION)
                return error_set(err, EOPNOTSUPP, "%s: unsupported GGUF version %u (only version %d is supported; reconvert the model)",
                                 f->path, f->version, GGUF_VERSION);
        if ((r = read_u64(&c, &f->n_tensors, "tensor count")) < 0 || (r = read_u64(&c, &f->n_kv, "metadata count")) < 0)
                return r;

        /* A key-value pair takes at least 12 bytes and a tensor info at least 28: reject
         * counts the file cannot hold before allocating for them. */
        if (f->n_kv > (f->size - c.pos) / 12)
                return error_set(err, EINVAL, "%s: metadata count %llu cannot fit in a file of %llu bytes",
                                 f->path, (unsigned long long) f->n_kv, (unsigned long long) f->size);
        if (f->n_tensors > (f->size - c.pos) / 28)
                return error_set(err, EINVAL, "%s: tensor count %llu cannot fit in a file of %llu bytes",
                                 f->path, (unsigned long long) f->n_tensors, (unsigned long long) f->size);

        f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof(*f->kv));
        f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof(*f->tensors));
        if (!f->kv || !f->tensors)
                return error_set(err, ENOMEM, "%s: out of memory", f->path);

        for (uint64_t i = 0; i < f->n_kv; i++) {
                struct gguf_kv *kv = &f->kv[i];
                if ((r = read_string(&c, &kv->key, "metadata key")) < 0 ||
                    (r = read_value(&c, &kv->key, &kv->value)) < 0)
                        return r;
        }

        if ((r = check_unique_keys(f, err)) < 0)
                return r;

        f->alignment = GGUF_DEFAULT_ALIGNMENT;
        const struct gguf_kv *align = gguf_find_kv(f, "general.alignment");
        if (align) {
                if (align->value.type != GGUF_VALUE_U32)
                        return error_set(err, EINVAL, "%s: general.alignment must be a u32 power of two, got a %s",
                                         f->path, gguf_value_type_name(align->value.type));
                /* The format asks for a multiple of 8; less would let f32 and f16 data start at
                 * addresses their loads may not use. */
                if (align->value.u64 < 8 || (align->value.u64 & (align->value.u64 - 1)) != 0)
                        return error_set(err, EINVAL, "%s: general.alignment must be a u32 power of two of at least 8, got %llu",
                                         f->path, (unsigned long long) align->value.u64);
                f->alignment = align->value.u64;
        }

        for (uint64_t i = 0; i < f->n_tensors; i++)
                if ((r = read_tensor_info(&c, &f->tensors[i])) < 0)
                        return r;

        uint64_t data_start = (c.pos + f->alignment - 1) / f->alignment * f->alignment;
        /* A file of metadata alone (llama.cpp's vocabulary-only files) may end unpadded: its
         * data section is empty. */
        if (f->n_tensors == 0 && data_start > f->size)
                data_start = f->size;
        if (data_start > f->size)
                return error_set(err, EINVAL, "%s: file truncated: the data section would start at byte %llu, past the end (%llu bytes)",
                                 f->path, (unsigned long long) data_start, (unsigned long long) f->size);
        f->data = f->base + data_start;
        f->data_size = f->size - data_start;

        for (uint64_t i = 0; i < f->n_tensors; i++) {
                struct gguf_tensor *t = &f->tensors[i];
                if (t->offset % f->alignment != 0)
                        return error_set(err, EINVAL, "%s: tensor '%.*s' offset %llu is not a multiple of the alignment %llu",
                                         f->path, (int) t->name.len, t->name.data, (unsigned long long) t->offset,
                                         (unsigned long long) f->alignment);
                if (t->offset > f->data_size || t->n_bytes > f->data_size - t->offset)
                        return error_set(err, EINVAL,
                                         "%s: tensor '%.*s' (bytes %llu..%llu of the data section) is out of bounds: the data section holds %llu bytes (truncated file?)",
                                         f->path, (int) t->name.len, t->name.data, (unsigned long long) t->offset,
                                         (unsigned long long) (t->offset + t->n_bytes), (unsigned long long) f->data_size);
                t->data = f->data + t->offset;
                for (uint64_t j = 0; j < i; j++)
                        if (t->name.len == f->tensors[j].name.len &&
                            memcmp(t->name.data, f->tensors[j].name.data, t->name.len) == 0)
                                return error_set(err, EINVAL, "%s: tensor '%.*s' appears twice", f->path,
                                                 (int) t->name.len, t->name.data);
        }
        return 0;
}

void gguf_close(struct gguf_file *f) {
        if (!f)
                return;
        if (f->kv)
                for (uint64_t i = 0; i < f->n_kv; i++)
                        if (f->kv[i].value.type == GGUF_VALUE_ARRAY)
                                free((void *) f->kv[i].value.array.strings);
        free(f->kv);
        free(f->tensors);
        if (f->mapping) /* the file or the reservation standing in for it: same range */
                munmap(f->mapping, f->size);
        free(f->path);
        free(f);
}

static int gguf_new(const char *name, struct gguf_file **ret, struct error *err) {
        struct gguf_file *f = calloc(1, sizeof(*f));
        if (!f || !(f->path = strdup(name))) {
                free(f);
                return error_set(err, ENOMEM, "%s: out of memory", name);
        }
        *ret = f;
        return 0;
}

int gguf_parse(const void *buf, uint64_t size, const char *name, struct gguf_file **ret, struct error *err) {
        struct gguf_file *f;
        int r = gguf_new(name, &f, err);
        if (r < 0)
                return r;
        f->base = buf;
        f->size = size;
        if ((r = parse(f, err)) < 0) {
                gguf_close(f);
                return r;
        }
        *ret = f;
        return 0;
}

int gguf_open(const char *path, struct gguf_file **ret, struct error *err) {
        struct gguf_file *f;
        struct stat st;
        int r, fd;

        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return error_set(err, errno, "%s: cannot open: %s", path, strerror(errno));
        if (fstat(fd, &st) < 0) {
                r = error_set(err, errno, "%s: cannot stat: %s", path, strerror(errno));
                close(fd);
                return r;
        }
        if (!S_ISREG(st.st_mode)) {
                close(fd);
                return error_set(err, EINVAL, "%s: not a regular file", path);
        }
        if (st.st_size == 0) {
                close(fd);
                return error_set(err, EINVAL, "%s: file is empty (truncated download? run scripts/fetch-model)", path);
        }
        r = gguf_new(path, &f, err);
        if (r < 0) {
                close(fd);
                return r;
        }
        f->size = (uint64_t) st.st_size;
        f->dev = st.st_dev;
        f->ino = st.st_ino;
        f->mtime = st.st_mtim;
        f->mapping = mmap(NULL, f->size, PROT_READ, MAP_SHARED, fd, 0);
        close(fd);
        if (f->mapping == MAP_FAILED) {
                f->mapping = NULL;
                r = error_set(err, errno, "%s: cannot mmap: %s", path, strerror(errno));
                gguf_close(f);
                return r;
        }
        f->base = f->mapping;
        if ((r = parse(f, err)) < 0) {
                gguf_close(f);
                return r;
        }
        *ret = f;
        return 0;
}

/* Replaces whatever is mapped over the file's range by an inaccessible anonymous mapping that
 * holds no pages, in one step, so the range is never free for another mapping to take. */
static int reserve_range(struct gguf_file *f) {
        if (mmap(f->mapping, f->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) ==
            MAP_FAILED)
                return -errno;
        return 0;
}

int gguf_release_mapping(struct gguf_file *f, struct error *err) {
        if (!f->mapping)
                return error_set(err, EOPNOTSUPP, "%s: parsed from a caller's buffer, not mapped from a file: nothing to release",
                                 f->path);
        if (f->released)
                return 0;
        int r = reserve_range(f);
        if (r < 0)
                return error_set(err, -r, "model file %s: cannot release its mapping: %s", f->path, strerror(-r));
        f->released = true;
        return 0;
}

/* Appends to the list in buf, separated by "; ". */
static __attribute__((format(printf, 3, 4))) void append(char *buf, size_t size, const char *fmt, ...) {
        size_t n = strlen(buf);
        va_list ap;
        if (n > 0 && n + 2 < size) {
                memcpy(buf + n, "; ", 3);
                n += 2;
        }
        va_start(ap, fmt);
        vsnprintf(buf + n, size - n, fmt, ap);
        va_end(ap);
}

/* Whether st is the file gguf_open() mapped; if not, what changed, into what. */
static bool same_file(const struct gguf_file *f, const struct stat *st, char *what, size_t size) {
        what[0] = 0;
        if (st->st_dev != f->dev || st->st_ino != f->ino)
                append(what, size, "replaced by another file: inode %llu, was %llu", (unsigned long long) st->st_ino,
                       (unsigned long long) f->ino);
        if ((uint64_t) st->st_size != f->size)
                append(what, size, "size %llu bytes, was %llu", (unsigned long long) st->st_size,
                       (unsigned long long) f->size);
        if (st->st_mtim.tv_sec != f->mtime.tv_sec || st->st_mtim.tv_nsec != f->mtime.tv_nsec)
                append(what, size, "modification time %lld.%09ld, was %lld.%09ld", (long long) st->st_mtim.tv_sec,
                       st->st_mtim.tv_nsec, (long long) f->mtime.tv_sec, f->mtime.tv_nsec);
        return what[0] == 0;
}

int gguf_restore_mapping(struct gguf_file *f, struct error *err) {
        char what[256];
        struct stat st;
        int r = 0, fd;

        if (!f->mapping)
                return error_set(err, EOPNOTSUPP, "%s: parsed from a caller's buffer, not mapped from a file: nothing to restore",
                                 f->path);
        if (!f->released)
                return 0;
        fd = open(f->path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return error_set(err, errno, "model file %s cannot be opened again since it was loaded (%s); restart the daemon",
                                 f->path, strerror(errno));
        if (fstat(fd, &st) < 0)
                r = error_set(err, errno, "model file %s: cannot stat: %s", f->path, strerror(errno));
        else if (!same_file(f, &st, what, sizeof(what)))
                r = error_set(err, ESTALE, "model file %s changed on disk since it was loaded (%s); restart the daemon",
                              f->path, what);
        /* Read in now, so that the first step after wake-up does not fault it in page by page. */
        else if (mmap(f->mapping, f->size, PROT_READ, MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd, 0) == MAP_FAILED) {
                r = error_set(err, errno, "model file %s: cannot map again: %s", f->path, strerror(errno));
                /* A failed MAP_FIXED may have unmapped the range: reserve it again. */
                (void) reserve_range(f);
        } else
                f->released = false;
        close(fd);
        return r;
}

static int find_typed(const struct gguf_file *f, const char *key, const struct gguf_kv **ret, struct error *err) {
        const struct gguf_kv *kv = gguf_find_kv(f, key);
        if (!kv)
                return error_set(err, ENOENT, "%s: missing metadata key '%s'", f->path, key);
        *ret = kv;
        return 0;
}

static int wrong_type(const struct gguf_file *f, const char *key, const struct gguf_kv *kv, const char *wanted,
                      struct error *err) {
        return error_set(err, EINVAL, "%s: metadata key '%s' is a %s, expected %s", f->path, key,
                         gguf_value_type_name(kv->value.type), wanted);
}

int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *ret, struct error *err) {
        const struct gguf_kv *kv = NULL;
        int r = find_typed(f, key, &kv, err);
        if (r < 0)
                return r;
        if (!is_integer_type(kv->value.type))
                return wrong_type(f, key, kv, "an integer", err);
        if (is_signed_type(kv->value.type) ? (kv->value.i64 < 0 || kv->value.i64 > UINT32_MAX)
                                           : kv->value.u64 > UINT32_MAX)
                return error_set(err, EINVAL, "%s: metadata key '%s' is out of range for a 32-bit unsigned value",
                                 f->path, key);
        *ret = is_signed_type(kv->value.type) ? (uint32_t) kv->value.i64 : (uint32_t) kv->value.u64;
        return 0;
}

int gguf_get_f32(const struct gguf_file *f, const char *key, float *ret, struct error *err) {
        const struct gguf_kv *kv = NULL;
        int r = find_typed(f, key, &kv, err);
        if (r < 0)
                return r;
        if (kv->value.type != GGUF_VALUE_F32 && kv->value.type != GGUF_VALUE_F64)
                return wrong_type(f, key, kv, "a float", err);
        *ret = (float) kv->value.f64;
        return 0;
}

int gguf_get_bool(const struct gguf_file *f, const char *key, bool *ret, struct error *err) {
        const struct gguf_kv *kv = NULL;
        int r = find_typed(f, key, &kv, err);
        if (r < 0)
                return r;
        if (kv->value.type != GGUF_VALUE_BOOL)
                return wrong_type(f, key, kv, "a bool", err);
        *ret = kv->value.u64 != 0;
        return 0;
}

int gguf_get_string(const struct gguf_file *f, const char *key, struct gguf_string *ret, struct error *err) {
        const struct gguf_kv *kv = NULL;
        int r = find_typed(f, key, &kv, err);
        if (r < 0)
                return r;
        if (kv->value.type != GGUF_VALUE_STRING)
                return wrong_type(f, key, kv, "a string", err);
        *ret = kv->value.str;
        return 0;
}

int gguf_get_array(const struct gguf_file *f, const char *key, enum gguf_value_type elem_type,
                   const struct gguf_value **ret, struct error *err) {
        const struct gguf_kv *kv = NULL;
        int r = find_typed(f, key, &kv, err);
        if (r < 0)
                return r;
        if (kv->value.type != GGUF_VALUE_ARRAY)
                return wrong_type(f, key, kv, "an array", err);
        bool integer_ok = is_integer_type(elem_type) && is_integer_type(kv->value.array.type);
        if (kv->value.array.type != elem_type && !integer_ok)
                return error_set(err, EINVAL, "%s: metadata key '%s' is an array of %s, expected an array of %s",
                                 f->path, key, gguf_value_type_name(kv->value.array.type),
                                 gguf_value_type_name(elem_type));
        *ret = &kv->value;
        return 0;
}

int64_t gguf_array_int(const struct gguf_value *array, uint64_t i) {
        enum gguf_value_type t = array->array.type;
        const uint8_t *p = array->array.raw + i * scalar_size[t];
        if (is_signed_type(t))
                return decode_signed(p, t);
        return (int64_t) decode_unsigned(p, t);
}
