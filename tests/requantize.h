/* SPDX-License-Identifier: MIT */
#pragma once

/* The parts of tests/requantize: llama.cpp's reference quantizers (what llama-quantize runs
 * when no importance matrix is given), in its scalar float arithmetic: these files are built
 * with contraction off, as ggml's quantizers are built without FMA; and llama-quantize's
 * choice of a type per tensor for the file types it writes. */

#include <stdbool.h>
#include <stdint.h>

#include "gguf.h"
#include "tensor-types.h"

/* One block of each type from its QUANT_BLOCK or QK_K floats. */
void quantize_q4_0_block(const float *x, struct block_q4_0 *b);
void quantize_q5_0_block(const float *x, struct block_q5_0 *b);
void quantize_q5_1_block(const float *x, struct block_q5_1 *b);
void quantize_q8_0_block(const float *x, struct block_q8_0 *b);
void quantize_q2_K_block(const float *x, struct block_q2_K *b);
void quantize_q3_K_block(const float *x, struct block_q3_K *b);
void quantize_q4_K_block(const float *x, struct block_q4_K *b);
void quantize_q5_K_block(const float *x, struct block_q5_K *b);
void quantize_q6_K_block(const float *x, struct block_q6_K *b);

/* Quantizes n floats (whole blocks of type) into out; false for a type with no quantizer
 * here. */
bool quantize_row(enum tensor_type type, const float *x, void *out, uint64_t n);

/* What `llama-quantize --allow-requantize [options] IN OUT TYPE` writes: the file type it
 * records and the options that are not its defaults. */
struct requantize_target {
        const char *name;           /* the argument of tests/requantize */
        const char *options;        /* llama-quantize's options beyond --allow-requantize */
        const char *file_type_name; /* its TYPE argument */
        uint32_t file_type;         /* llama.cpp's llama_ftype, general.file_type */
        enum tensor_type default_type;
        bool has_ffn_down_type; /* --tensor-type ffn_down=TYPE: every ffn_down tensor's type */
        enum tensor_type ffn_down_type;
};

/* The target named name; NULL when there is none. */
const struct requantize_target *requantize_target_named(const char *name);

/* Every target, for the usage text; a NULL name ends the list. */
extern const struct requantize_target requantize_targets[];

/* llama-quantize's choice of type per tensor: the model's facts and its counters. */
struct type_choice {
        const struct requantize_target *target;
        uint32_t n_layer;
        uint32_t n_gqa; /* query heads per key-value head */
        bool tied_embeddings; /* no output.weight: token_embd.weight is the output too */
        uint32_t n_attention_v, i_attention_v;
        uint32_t i_ffn_down;
};

/* Reads the model's facts from the file; -1 with a message on stderr when one is missing. */
int type_choice_init(struct type_choice *c, const struct requantize_target *target, const struct gguf_file *f);

/* The type of each tensor, asked in the order llama-quantize writes them (the counters
 * advance as its do). */
enum tensor_type type_choice_next(struct type_choice *c, const struct gguf_tensor *t);
