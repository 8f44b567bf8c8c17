/* SPDX-License-Identifier: MIT */
#pragma once

/* A GGUF v3 writer for tests: builds valid files for round trips and synthetic models, and,
 * through the raw entry points, the malformed ones the reader must reject. Keys, values and
 * tensors are written in the order they are added. Out of memory aborts: test code only. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "tensor-types.h"

struct gguf_writer;

struct gguf_writer *gguf_writer_new(void);
void gguf_writer_free(struct gguf_writer *w);

/* Scalar values. */
void gguf_writer_add_u8(struct gguf_writer *w, const char *key, uint8_t v);
void gguf_writer_add_i8(struct gguf_writer *w, const char *key, int8_t v);
void gguf_writer_add_u16(struct gguf_writer *w, const char *key, uint16_t v);
void gguf_writer_add_i16(struct gguf_writer *w, const char *key, int16_t v);
void gguf_writer_add_u32(struct gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_add_i32(struct gguf_writer *w, const char *key, int32_t v);
void gguf_writer_add_u64(struct gguf_writer *w, const char *key, uint64_t v);
void gguf_writer_add_i64(struct gguf_writer *w, const char *key, int64_t v);
void gguf_writer_add_f32(struct gguf_writer *w, const char *key, float v);
void gguf_writer_add_f64(struct gguf_writer *w, const char *key, double v);
void gguf_writer_add_bool(struct gguf_writer *w, const char *key, bool v);
void gguf_writer_add_string(struct gguf_writer *w, const char *key, const char *v);
/* A string of len bytes that may hold NULs. */
void gguf_writer_add_string_n(struct gguf_writer *w, const char *key, const char *v, size_t len);

/* An array of count scalars of elem_type (any type but string and array), elems packed as
 * the matching C type: uint8_t for u8 and bool, float for f32, double for f64, and so on. */
void gguf_writer_add_array(struct gguf_writer *w, const char *key, enum gguf_value_type elem_type,
                           const void *elems, size_t count);
void gguf_writer_add_string_array(struct gguf_writer *w, const char *key, const char *const *v, size_t count);
void gguf_writer_add_u32_array(struct gguf_writer *w, const char *key, const uint32_t *v, size_t count);
void gguf_writer_add_i32_array(struct gguf_writer *w, const char *key, const int32_t *v, size_t count);
void gguf_writer_add_f32_array(struct gguf_writer *w, const char *key, const float *v, size_t count);
/* An array of n arrays; inner array i holds counts[i] scalars of elem_type from arrays[i]. */
void gguf_writer_add_array_of_arrays(struct gguf_writer *w, const char *key, enum gguf_value_type elem_type,
                                     const void *const *arrays, const size_t *counts, size_t n);
/* Arrays nested depth levels deep (depth >= 1) around a single u8 of value 7: depth 1 is
 * [7], depth 2 is [[7]]. */
void gguf_writer_add_nested_array(struct gguf_writer *w, const char *key, unsigned depth);

/* A key whose value type id and encoded value bytes are taken verbatim, for malformed files
 * (unknown value types, bool 2, lying counts). */
void gguf_writer_add_raw(struct gguf_writer *w, const char *key, uint32_t value_type, const void *value,
                         size_t n_bytes);

/* Sets the data alignment (a power of two) and records it as general.alignment (u32), at
 * the position of the first call; later calls update the value. Without it the data is laid
 * out on GGUF_DEFAULT_ALIGNMENT and no key is written. */
void gguf_writer_set_alignment(struct gguf_writer *w, uint32_t alignment);

/* Overrides the version field of the header (3 by default). */
void gguf_writer_set_version(struct gguf_writer *w, uint32_t version);

/* A tensor whose n_bytes of data are copied now and laid out in the data section after the
 * previous one, at the next multiple of the alignment. n_dims may be 1 to 4. */
void gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum tensor_type type, uint32_t n_dims,
                            const uint64_t *ne, const void *data, size_t n_bytes);

/* A tensor info taken verbatim (any type id, any n_dims, any offset) with no data of its
 * own: min(n_dims, 8) values of ne are written, and the offset as given, relative to the
 * data section. */
void gguf_writer_add_tensor_info_raw(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                                     const uint64_t *ne, uint64_t offset);

/* Appends n_bytes of zeroes to the data section after the laid-out tensors, so that raw
 * tensor infos can point at data that exists. */
void gguf_writer_add_data_padding(struct gguf_writer *w, size_t n_bytes);

/* The file image in a malloc()ed buffer the caller frees. Returns 0. */
int gguf_writer_to_buffer(struct gguf_writer *w, uint8_t **ret_buf, size_t *ret_len);

/* Size of the shortest prefix of the image that is still a valid file: everything up to the
 * end of the last tensor's data (the padding after it is optional), or up to the end of the
 * metadata in a file without tensors (its padding is optional too). */
size_t gguf_writer_min_valid_length(struct gguf_writer *w);

/* Writes the image to path (created or truncated). Negative errno on failure. */
int gguf_writer_write_file(struct gguf_writer *w, const char *path);
