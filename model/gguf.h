/* SPDX-License-Identifier: MIT */
#pragma once

/* A reader for GGUF v3 files over a read-only mmap. Everything returned points into the
 * mapping (or into the caller's buffer for gguf_parse) and lives until gguf_close(). Every
 * length, count and offset is checked against the file before use, so a malformed file gives
 * an error that names the file and the problem, never a crash. */

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "error.h"
#include "tensor-types.h"

enum gguf_value_type {
        GGUF_VALUE_U8 = 0,
        GGUF_VALUE_I8 = 1,
        GGUF_VALUE_U16 = 2,
        GGUF_VALUE_I16 = 3,
        GGUF_VALUE_U32 = 4,
        GGUF_VALUE_I32 = 5,
        GGUF_VALUE_F32 = 6,
        GGUF_VALUE_BOOL = 7,
        GGUF_VALUE_STRING = 8,
        GGUF_VALUE_ARRAY = 9,
        GGUF_VALUE_U64 = 10,
        GGUF_VALUE_I64 = 11,
        GGUF_VALUE_F64 = 12,
        GGUF_VALUE_TYPE_COUNT,
};

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

/* Not NUL-terminated: GGUF strings are length-prefixed. */
struct gguf_string {
        const char *data;
        uint64_t len;
};

struct gguf_value {
        enum gguf_value_type type;
        union {
                uint64_t u64; /* every unsigned integer type, and bool */
                int64_t i64;  /* every signed integer type */
                double f64;   /* f32 and f64 */
                struct gguf_string str;
                struct {
                        enum gguf_value_type type;
                        uint64_t count;
                        const uint8_t *raw;                 /* the encoded elements */
                        const struct gguf_string *strings; /* for string arrays, else NULL */
                } array;
        };
};

struct gguf_kv {
        struct gguf_string key;
        struct gguf_value value;
};

struct gguf_tensor {
        struct gguf_string name;
        uint32_t n_dims;
        uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] varies fastest; unused dims are 1 */
        enum tensor_type type;
        uint64_t offset; /* relative to the data section */
        uint64_t n_bytes;
        const void *data;
};

struct gguf_file {
        char *path;
        uint32_t version;
        uint64_t alignment;
        uint64_t n_kv;
        struct gguf_kv *kv;
        uint64_t n_tensors;
        struct gguf_tensor *tensors;
        const uint8_t *base; /* the whole file */
        uint64_t size;
        const uint8_t *data; /* the data section */
        uint64_t data_size;
        void *mapping; /* NULL when parsed from a caller's buffer */
        bool released; /* the mapping is a PROT_NONE reservation: see gguf_release_mapping() */
        /* The file as gguf_open() found it, to tell on restore whether it changed since. */
        dev_t dev;
        ino_t ino;
        struct timespec mtime;
};

/* Maps and parses the file at path. */
int gguf_open(const char *path, struct gguf_file **ret, struct error *err);

/* Parses a file image held by the caller; name is used in messages. buf must outlive the
 * result. */
int gguf_parse(const void *buf, uint64_t size, const char *name, struct gguf_file **ret,
               struct error *err);

/* Closes the file in either state, mapped or released. */
void gguf_close(struct gguf_file *f);

/* Drops the file's pages from the process while the engine sleeps, keeping the address range
 * reserved, so that every pointer into the file is valid again after gguf_restore_mapping().
 * Meanwhile nothing in the file may be read: not the tensor data, and not the metadata
 * (keys, strings, tensor names) either; a stray read faults. -EOPNOTSUPP for a file from
 * gguf_parse(), whose memory belongs to the caller. Releasing twice is a no-op. */
int gguf_release_mapping(struct gguf_file *f, struct error *err);

/* Maps the file again at the same address, read in at once. The file must be the one
 * gguf_open() read (same device, inode, size and modification time); otherwise -ESTALE with
 * a message naming the file and what changed (or the open error when it is gone), and the
 * mapping stays released. Restoring a mapped file is a no-op. */
int gguf_restore_mapping(struct gguf_file *f, struct error *err);

const struct gguf_kv *gguf_find_kv(const struct gguf_file *f, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);

const char *gguf_value_type_name(enum gguf_value_type type);
bool gguf_string_equals(struct gguf_string s, const char *cstr);

/* Typed look-ups: integer keys of any integer type are accepted when the value fits.
 * -ENOENT with a message naming the key when it is absent, -EINVAL when its type or value
 * does not fit. */
int gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *ret, struct error *err);
int gguf_get_f32(const struct gguf_file *f, const char *key, float *ret, struct error *err);
int gguf_get_bool(const struct gguf_file *f, const char *key, bool *ret, struct error *err);
int gguf_get_string(const struct gguf_file *f, const char *key, struct gguf_string *ret,
                    struct error *err);
/* An array whose elements have the given type. */
int gguf_get_array(const struct gguf_file *f, const char *key, enum gguf_value_type elem_type,
                   const struct gguf_value **ret, struct error *err);

/* Element i of an integer array as int64 (arrays of any integer type). */
int64_t gguf_array_int(const struct gguf_value *array, uint64_t i);
