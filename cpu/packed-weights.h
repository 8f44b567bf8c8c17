/* SPDX-License-Identifier: MIT */
#pragma once

/* Quantized weight matrices repacked for the packed product (cpu/dot.h, dot_packed_fn):
 * PACKED_ROWS rows interleaved so that one vector lane belongs to one row. For each block of
 * 32 columns, dword q of every row's quants sits in lane q of one 64-byte vector: one
 * unsigned-by-signed dot instruction (vpdpbusd) then multiplies four consecutive elements of
 * all sixteen rows by the same four activation bytes. Those four elements are one of the
 * eight lanes of llama.cpp's x86 block product (PACKED_LANES), so each instruction leaves the
 * sixteen rows' exact int32 of one lane, which the kernels accumulate in floats lane by lane
 * as llama.cpp does: the bits of today's tiles, with the rows side by side.
 *
 * A group of PACKED_ROWS rows (the last one padded with zero rows) is one stretch of
 * group_bytes at data + g * group_bytes:
 *   quants: n_blocks records of quant_bytes; record b holds quant_bytes / 64 vectors, and
 *           vector q lane r (bytes 4r..4r+3) is bytes 4q..4q+3 of row r's block b.
 *           For 4-bit types the low nibbles of vector q are elements 4q..4q+3 (lane q) and
 *           the high nibbles elements 16+4q..16+4q+3 (lane 4+q), as in the GGUF block. Q8_0
 *           quants are stored biased as unsigned bytes (w + 128), so that vpdpbusd takes them
 *           as they are. 5-bit types hold their low four bits as the 4-bit types do, then a
 *           fifth vector whose lane r is row r's fifth bits rearranged (packed_q5_high()):
 *           bit l of byte k is element 4l + k's, so that lane l's bits come to 16 in each
 *           byte by one shift and one mask (320 bytes a record: the rows' 22 or 24-byte
 *           blocks take 352 or 384 with the scales, as in the file).
 *   scales: n_blocks records of scale_bytes: the 16 rows' d as f16, then for Q4_1 and Q5_1
 *           their m.
 * For Q4_0 (nibbles 0..15 for w + 8), Q5_0 (0..31 for w + 16) and Q8_0 the kernels start each
 * lane's integer sum at -bias * (the sum of the lane's four activation quants), from
 * packed_activation_corrections(), which leaves the exact int32 of the signed weights.
 *
 * Q4_K (packed-q4-k.c) keeps the same group of sixteen rows, one row per 32-bit lane, but its
 * blocks are super-blocks of 256 (n_blocks counts them): the K-quant products' integer sums
 * are then made for sixteen rows by each instruction and their float steps (dot-k-quants.h)
 * run sixteen rows to a vector. Per super-block:
 *   quants (PACKED_Q4_K_QUANT_BYTES): 32 vectors, vector 8c + j lane r = bytes
 *           32c + 4j .. 32c + 4j + 3 of row r's qs, whose low nibbles are elements
 *           64c + 4j .. + 3 (sub-block 2c) and high nibbles elements 64c + 32 + 4j .. + 3
 *           (sub-block 2c + 1); then the sub-blocks' 6-bit scales, 8 x 16 bytes
 *           ([sub-block][row]); then their mins, 4 x 32 bytes (chunk c: [row][min 2c, min 2c + 1]);
 *   scales: the rows' d as f16, then their dmin.
 * Q5_K: Q4_K's record, then its fifth bits, 8 vectors: vector j lane r = bytes 4j .. 4j + 3 of
 * row r's qh, whose bit s is the fifth bit of sub-block s's element 4j + i (byte i).
 * Q2_K (packed-q2-k.c): 16 vectors of two-bit quants as Q3_K's below, then the sixteen 4-bit
 * scales by pairs ([pair p][row][scale 2p, scale 2p + 1]) and the mins likewise; d, dmin.
 * Q3_K (packed-q3-k.c): 16 vectors of two-bit quants, vector 8n + k lane r = bytes
 * 32n + 4k .. + 3 of row r's qs (bits 2j, 2j + 1 of each: sub-blocks 2(4n + j) and the next),
 * 8 vectors of their third bits, vector k lane r = bytes 4k .. 4k + 3 of row r's hmask (bit s:
 * run s's element), then the sixteen scales less 32 as int8 by pairs, as Q6_K's; d.
 * Q6_K (packed-q6-k.c) likewise, in the file's own bits (a decode step reads them once):
 *   quants (PACKED_Q6_K_QUANT_BYTES): 32 vectors of low bits, vector 8(2n + h) + k lane r =
 *           bytes 64n + 32h + 4k .. + 3 of row r's ql, whose low nibbles are the low bits of run
 *           4n + h's elements 4k .. 4k + 3 and high nibbles those of run 4n + h + 2 (a run is
 *           32 elements); 16 vectors of high bits, vector 8n + k lane r = bytes
 *           32n + 4k .. + 3 of row r's qh, bits 2j, 2j + 1 of each the top bits of run
 *           4n + j's; then the sixteen 8-bit scales by pairs, 8 x 32 bytes
 *           ([pair p][row][scale 2p, scale 2p + 1]);
 *   scales: the rows' d as f16. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor-types.h"

#define PACKED_ROWS 16
#define PACKED_ALIGN 64
/* Kernels that unpack a group's 4-bit blocks once for all of a call's tokens do so for
 * rows of up to this many blocks (the unpacked group stays on the stack, in L1 or L2);
 * wider rows unpack in every pass over the tokens. */
#define PACKED_UNPACK_MAX_BLOCKS 128
/* How far ahead of its reads a kernel's first pass over a group prefetches the stream of
 * packed weights. The hardware prefetcher alone left decode at half the bandwidth a plain
 * read gets (AVX-512 and AVX2 machines alike). */
#ifndef PACKED_PREFETCH
#define PACKED_PREFETCH 4096
#endif

/* llama.cpp's x86 block product sums a block's 32 products in 8 int32 lanes, lane l holding
 * elements 4l..4l+3, and keeps one float accumulator per lane. */
#define PACKED_LANES 8
/* A packed Q4_K super-block's record, and where its scales and mins start in it. */
#define PACKED_Q4_K_QUANTS (PACKED_ROWS * QK_K / 2)
#define PACKED_Q4_K_SCALES PACKED_Q4_K_QUANTS
#define PACKED_Q4_K_MINS (PACKED_Q4_K_SCALES + 8 * PACKED_ROWS)
#define PACKED_Q4_K_QUANT_BYTES (PACKED_Q4_K_MINS + 8 * PACKED_ROWS)
#define PACKED_Q5_K_HIGH PACKED_Q4_K_QUANT_BYTES
#define PACKED_Q5_K_QUANT_BYTES (PACKED_Q5_K_HIGH + PACKED_ROWS * QK_K / 8)
#define PACKED_Q2_K_SCALES (PACKED_ROWS * QK_K / 4)
#define PACKED_Q2_K_MINS (PACKED_Q2_K_SCALES + QK_K / 16 * PACKED_ROWS)
#define PACKED_Q2_K_QUANT_BYTES (PACKED_Q2_K_MINS + QK_K / 16 * PACKED_ROWS)
#define PACKED_Q3_K_HIGH (PACKED_ROWS * QK_K / 4)
#define PACKED_Q3_K_SCALES (PACKED_Q3_K_HIGH + PACKED_ROWS * QK_K / 8)
#define PACKED_Q3_K_QUANT_BYTES (PACKED_Q3_K_SCALES + QK_K / 16 * PACKED_ROWS)
#define PACKED_Q6_K_HIGH (PACKED_ROWS * QK_K / 2)
#define PACKED_Q6_K_SCALES (PACKED_Q6_K_HIGH + PACKED_ROWS * QK_K / 4)
#define PACKED_Q6_K_QUANT_BYTES (PACKED_Q6_K_SCALES + QK_K / 16 * PACKED_ROWS)

/* Per activation block: the lanes' corrections for Q4_0, then those for Q8_0 and Q5_0. */
#define PACKED_CORRECTIONS (3 * PACKED_LANES)

struct packed_weights {
        enum tensor_type type; /* packed_type_supported() */
        uint64_t n_rows, n_cols;
        uint64_t n_groups; /* ceil(n_rows / PACKED_ROWS) */
        uint64_t n_blocks; /* n_cols / QUANT_BLOCK, for the K-quants n_cols / QK_K */
        uint32_t quant_bytes; /* per block of a group: 256 (4-bit), 320 (5-bit), 512 (Q8_0), PACKED_Q4_K_QUANT_BYTES,
                               * PACKED_Q6_K_QUANT_BYTES */
        uint32_t scale_bytes; /* per block of a group: 32 (d), 64 (d, m; Q4_K's d, dmin) */
        uint64_t group_bytes; /* a multiple of PACKED_ALIGN */
        uint8_t *data;        /* PACKED_ALIGN-aligned, n_groups * group_bytes; NULL when empty */
        bool keep_cached;     /* the kernels' prefetches keep the stream in every cache level (weight-residency.h) */
};

/* The bias of the stored quants: 8 for Q4_0 (nibbles stored as 0..15), 16 for Q5_0 (0..31),
 * 128 for Q8_0 (stored w + 128), 0 for Q4_1 and Q5_1 (unsigned already; their offset is the
 * separate m * s). */
static inline int32_t packed_quant_bias(enum tensor_type type) {
        return type == TENSOR_Q4_0 ? 8 : type == TENSOR_Q5_0 ? 16 : type == TENSOR_Q8_0 ? 128 : 0;
}

/* Where a type's corrections start within a block's PACKED_CORRECTIONS. */
static inline unsigned packed_correction_offset(enum tensor_type type) {
        return type == TENSOR_Q8_0 ? PACKED_LANES : type == TENSOR_Q5_0 ? 2 * PACKED_LANES : 0;
}

/* The K-quant weight types, packed by super-blocks. */
static inline bool packed_k_quant(enum tensor_type type) {
        return type == TENSOR_Q2_K || type == TENSOR_Q3_K || type == TENSOR_Q4_K || type == TENSOR_Q5_K || type == TENSOR_Q6_K;
}

/* Whether packed_weights_build() takes this type. */
static inline bool packed_type_supported(enum tensor_type type) {
        return type == TENSOR_Q4_0 || type == TENSOR_Q4_1 || type == TENSOR_Q5_0 || type == TENSOR_Q5_1 ||
               type == TENSOR_Q8_0 || packed_k_quant(type);
}

/* packed-q4-k.c: a Q4_K or Q5_K row's super-block (lane r of the group's record and scales)
 * in and out of the packed layout. */
void packed_q4_K_put(const struct block_q4_K *block, unsigned lane, uint8_t *record, uint8_t *scales);
void packed_q4_K_get(const uint8_t *record, const uint8_t *scales, unsigned lane, struct block_q4_K *block);
void packed_q5_K_put(const struct block_q5_K *block, unsigned lane, uint8_t *record, uint8_t *scales);
void packed_q5_K_get(const uint8_t *record, const uint8_t *scales, unsigned lane, struct block_q5_K *block);
/* packed-q2-k.c, packed-q3-k.c, packed-q6-k.c: the same for Q2_K, Q3_K and Q6_K. */
void packed_q2_K_put(const struct block_q2_K *block, unsigned lane, uint8_t *record, uint8_t *scales);
void packed_q2_K_get(const uint8_t *record, const uint8_t *scales, unsigned lane, struct block_q2_K *block);
void packed_q3_K_put(const struct block_q3_K *block, unsigned lane, uint8_t *record, uint8_t *scales);
void packed_q3_K_get(const uint8_t *record, const uint8_t *scales, unsigned lane, struct block_q3_K *block);
void packed_q6_K_put(const struct block_q6_K *block, unsigned lane, uint8_t *record, uint8_t *scales);
void packed_q6_K_get(const uint8_t *record, const uint8_t *scales, unsigned lane, struct block_q6_K *block);

/* A 5-bit block's qh (bit e: element e's fifth bit) as the packed layout holds it: bit l of
 * byte k is element 4l + k's, lane l's four elements in bit l of the four bytes. */
static inline uint32_t packed_q5_high(const uint8_t qh[4]) {
        uint32_t bits = (uint32_t) qh[0] | (uint32_t) qh[1] << 8 | (uint32_t) qh[2] << 16 | (uint32_t) qh[3] << 24, high = 0;
        for (unsigned l = 0; l < PACKED_LANES; l++)
                for (unsigned k = 0; k < 4; k++)
                        high |= (bits >> (4 * l + k) & 1u) << (8 * k + l);
        return high;
}

/* The layout for n_rows rows of n_cols (a multiple of 32) elements, data left NULL. -EINVAL
 * for an unsupported type or shape. */
int packed_weights_init(struct packed_weights *p, enum tensor_type type, uint64_t n_rows, uint64_t n_cols);

/* Bytes the repacked copy takes. */
static inline uint64_t packed_weights_bytes(const struct packed_weights *p) {
        return p->n_groups * p->group_bytes;
}

/* Repacks the rows (row_bytes apart) into dest (PACKED_ALIGN-aligned, packed_weights_bytes()
 * long, owned by the caller), which becomes p->data. Callers that pack many matrices put
 * them in one arena: large pages then serve the whole stream. */
void packed_weights_fill(struct packed_weights *p, uint8_t *dest, const void *rows, uint64_t row_bytes);

/* Row row (< n_rows) back in its GGUF blocks at out (tensor_row_bytes(type, n_cols)
 * bytes): the same bytes the fill read. */
void packed_weights_row(const struct packed_weights *p, uint64_t row, void *out);

/* init and fill into memory of its own, which packed_weights_free() releases. -EINVAL, -ENOMEM. */
int packed_weights_build(enum tensor_type type, const void *rows, uint64_t row_bytes, uint64_t n_rows, uint64_t n_cols,
                         struct packed_weights *ret);

void packed_weights_free(struct packed_weights *p);

/* A group's bytes and the next groups' are one stream: a kernel's first pass over a group
 * fetches it PACKED_PREFETCH (or distance) bytes ahead, one block's worth (block_bytes, quants and scales,
 * a multiple of 64) per block b, at the pace it is consumed. Non-temporal unless the weights
 * are kept cached: a stream read once a step that the last-level cache cannot hold would only
 * evict what is reused (on the Zen 4 machine a plain 2-thread read of 98 MB went from ~28 to
 * ~33 GB/s with the hint); where the cache holds them, the hint is what evicts them. */
static inline void packed_prefetch_block_at(const struct packed_weights *w, const uint8_t *group, uint64_t b,
                                            size_t block_bytes, size_t distance) {
        const uint8_t *ahead = group + b * block_bytes + distance;
        if (w->keep_cached) {
                _Pragma("GCC unroll 10") for (size_t line = 0; line < block_bytes; line += 64)
                        __builtin_prefetch(ahead + line, 0, 3);
        } else {
                _Pragma("GCC unroll 10") for (size_t line = 0; line < block_bytes; line += 64)
                        __builtin_prefetch(ahead + line, 0, 0);
        }
}

static inline void packed_prefetch_block(const struct packed_weights *w, const uint8_t *group, uint64_t b, size_t block_bytes) {
        packed_prefetch_block_at(w, group, b, block_bytes, PACKED_PREFETCH);
}

/* A share of a later group's bytes to fetch while this group's passes compute, a few lines
 * per block: with the group unpacked once for many tokens, its passes are pure arithmetic,
 * and the bytes, left to the group's unpacking, came from memory with nothing to do
 * meanwhile. The group after next, not the next: a group's scales come last in its bytes,
 * so the next group's, fetched by the last pass, were still on their way when its unpacking
 * began (bench-packed-dot, 8 tokens from memory, 576 columns, Zen 4: 24.5 -> 22.5 cycles
 * per 16-row block and token). Fetched at the pace of the work: the core drops prefetches
 * it has no room for. Share pass of n_passes; NULL fetch_group: nothing to fetch. */
struct packed_fetch {
        const uint8_t *next, *end;
        size_t lines_per_block;
};

static inline struct packed_fetch packed_fetch_share(const uint8_t *fetch_group, uint64_t group_bytes, unsigned pass,
                                                     unsigned n_passes, uint64_t n_blocks) {
        if (!fetch_group)
                return (struct packed_fetch) { NULL, NULL, 0 };
        uint64_t lines = group_bytes / 64, per_pass = (lines + n_passes - 1) / n_passes;
        uint64_t first = (uint64_t) pass * per_pass, last = first + per_pass < lines ? first + per_pass : lines;
        if (first >= last)
                return (struct packed_fetch) { NULL, NULL, 0 };
        return (struct packed_fetch) { fetch_group + 64 * first, fetch_group + 64 * last, (last - first + n_blocks - 1) / n_blocks };
}

static inline void packed_fetch_step(struct packed_fetch *f) {
        for (size_t i = 0; i < f->lines_per_block && f->next < f->end; i++, f->next += 64)
                __builtin_prefetch(f->next, 0, 3);
}

/* For each activation block b and lane l: corrections[b * PACKED_CORRECTIONS +
 * packed_correction_offset(type) + l] = -packed_quant_bias(type) * (the sum of the block's
 * quants 4l..4l+3), for Q4_0, Q8_0 and Q5_0; exact. Computed once per activation, shared by every
 * matrix and row that meets it. */
void packed_activation_corrections(const struct block_q8_1 *xq, size_t n_blocks, int32_t *corrections);

/* For the single-accumulator product (dot.h): sums[b] = the sum of all 32 quants of
 * activation block b, which times -packed_quant_bias() corrects a whole block's sum. */
void packed_block_sums(const struct block_q8_1 *xq, size_t n_blocks, int32_t *sums);
