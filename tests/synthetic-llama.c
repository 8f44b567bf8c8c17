/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "float16.h"
#include "synthetic-llama.h"

uint64_t test_rng_next(struct test_rng *rng) {
        uint64_t z = (rng->state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

float test_rng_uniform(struct test_rng *rng) {
        return (float) (test_rng_next(rng) >> 40) * 0x1p-24f;
}

float test_rng_normal(struct test_rng *rng) {
        /* Box-Muller; u1 in (0, 1] keeps the log finite. */
        float u1 = (float) ((test_rng_next(rng) >> 40) + 1) * 0x1p-24f;
        float u2 = test_rng_uniform(rng);
        return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

uint16_t test_f32_to_bf16(float f) {
        uint32_t u = f32_to_bits(f);
        if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a (quiet) NaN after truncation */
                return (uint16_t) ((u >> 16) | 0x40);
        u += 0x7fff + ((u >> 16) & 1); /* round to nearest even on the dropped half */
        return (uint16_t) (u >> 16);
}

/* Four-bit codes go in the tensor-types.h layout: element j in the low nibble of byte j,
 * element j + 16 in its high nibble. */
static void pack_nibbles(const uint8_t q[QUANT_BLOCK], uint8_t qs[QUANT_BLOCK / 2]) {
        for (int j = 0; j < QUANT_BLOCK / 2; j++)
                qs[j] = (uint8_t) (q[j] | (q[j + 16] << 4));
}

static int clamp_round(float v, int lo, int hi) {
        long r = lrintf(v);
        return r < lo ? lo : r > hi ? hi : (int) r;
}

/* Codes 0..2 * zero - 1 around zero, the element of largest magnitude at code 0 (-zero * d)
 * exactly, so that the sign of d follows it and the full range is used on its side: q4_0's
 * and q5_0's rule. */
static void quantize_symmetric(const float *x, int zero, f16_bits *d_bits, uint8_t q[QUANT_BLOCK]) {
        float vmax = 0.0f;
        for (int j = 0; j < QUANT_BLOCK; j++)
                if (fabsf(x[j]) > fabsf(vmax))
                        vmax = x[j];
        *d_bits = f32_to_f16(vmax / (float) -zero);
        float d = f16_to_f32(*d_bits), id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < QUANT_BLOCK; j++)
                q[j] = (uint8_t) clamp_round(x[j] * id + (float) zero, 0, 2 * zero - 1);
}

static void quantize_q4_0(const float *x, struct block_q4_0 *b) {
        uint8_t q[QUANT_BLOCK];
        quantize_symmetric(x, 8, &b->d, q);
        pack_nibbles(q, b->qs);
}

/* Codes 0..max_code from the block's minimum m in steps of d: q4_1's and q5_1's rule. */
static void quantize_with_offset(const float *x, int max_code, f16_bits *d_bits, f16_bits *m_bits,
                                 uint8_t q[QUANT_BLOCK]) {
        float lo = x[0], hi = x[0];
        for (int j = 1; j < QUANT_BLOCK; j++) {
                lo = fminf(lo, x[j]);
                hi = fmaxf(hi, x[j]);
        }
        *d_bits = f32_to_f16((hi - lo) / (float) max_code);
        *m_bits = f32_to_f16(lo);
        float d = f16_to_f32(*d_bits), m = f16_to_f32(*m_bits), id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < QUANT_BLOCK; j++)
                q[j] = (uint8_t) clamp_round((x[j] - m) * id, 0, max_code);
}

static void quantize_q4_1(const float *x, struct block_q4_1 *b) {
        uint8_t q[QUANT_BLOCK];
        quantize_with_offset(x, 15, &b->d, &b->m, q);
        pack_nibbles(q, b->qs);
}

/* Five-bit codes: the low four bits as pack_nibbles() lays them out, the fifth of element j
 * in bit j of qh (a little-endian uint32). */
static void pack_q5(const uint8_t q[QUANT_BLOCK], uint8_t qs[QUANT_BLOCK / 2], uint8_t qh[4]) {
        uint8_t low[QUANT_BLOCK];
        uint32_t high = 0;
        for (int j = 0; j < QUANT_BLOCK; j++) {
                low[j] = q[j] & 15;
                high |= (uint32_t) (q[j] >> 4) << j;
        }
        pack_nibbles(low, qs);
        for (int i = 0; i < 4; i++)
                qh[i] = (uint8_t) (high >> (8 * i));
}

static void quantize_q5_0(const float *x, struct block_q5_0 *b) {
        uint8_t q[QUANT_BLOCK];
        quantize_symmetric(x, 16, &b->d, q);
        pack_q5(q, b->qs, b->qh);
}

static void quantize_q5_1(const float *x, struct block_q5_1 *b) {
        uint8_t q[QUANT_BLOCK];
        quantize_with_offset(x, 31, &b->d, &b->m, q);
        pack_q5(q, b->qs, b->qh);
}

static void quantize_q8_0(const float *x, struct block_q8_0 *b) {
        float amax = 0.0f;
        for (int j = 0; j < QUANT_BLOCK; j++)
                amax = fmaxf(amax, fabsf(x[j]));
        b->d = f32_to_f16(amax / 127.0f);
        float d = f16_to_f32(b->d), id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < QUANT_BLOCK; j++)
                b->qs[j] = (int8_t) clamp_round(x[j] * id, -127, 127);
}

/* The K-quants, plainly (not llama.cpp's search for the best scales): per sub-block a scale
 * (and a min) from its range, the sub-block scales as integers of the super-block's d (and
 * dmin), then each element's code under its sub-block's d * scale, packed in the layouts of
 * tensor-types.h. */
struct k_codes {
        int q[QK_K];         /* Q3_K and Q6_K signed, the others from 0 */
        int scale[16], min[16];
        f16_bits d, dmin;
};

static void k_quantize(const float *x, unsigned width, int q_lo, int q_hi, int scale_max, bool mins, struct k_codes *c) {
        unsigned n_sub = QK_K / width;
        float sub_scale[16], sub_min[16], scale_top = 0.0f, min_top = 0.0f;
        for (unsigned s = 0; s < n_sub; s++) {
                const float *v = x + s * width;
                float lo = 0.0f, hi = 0.0f, big = 0.0f;
                for (unsigned j = 0; j < width; j++) {
                        lo = fminf(lo, v[j]);
                        hi = fmaxf(hi, v[j]);
                        if (fabsf(v[j]) > fabsf(big))
                                big = v[j];
                }
                /* with mins: codes 0.. up from -min; else the largest magnitude at code q_lo */
                sub_scale[s] = mins ? (hi - lo) / (float) q_hi : big / (float) q_lo;
                sub_min[s] = -lo;
                scale_top = fmaxf(scale_top, fabsf(sub_scale[s]));
                min_top = fmaxf(min_top, sub_min[s]);
        }
        c->d = f32_to_f16(scale_top / (float) scale_max);
        c->dmin = f32_to_f16(min_top / (float) scale_max);
        float d = f16_to_f32(c->d), dmin = f16_to_f32(c->dmin);
        for (unsigned s = 0; s < n_sub; s++) {
                c->scale[s] = d != 0.0f ? clamp_round(sub_scale[s] / d, mins ? 0 : -scale_max - 1, scale_max) : 0;
                c->min[s] = mins && dmin != 0.0f ? clamp_round(sub_min[s] / dmin, 0, scale_max) : 0;
                float step = d * (float) c->scale[s], offset = dmin * (float) c->min[s];
                for (unsigned j = s * width; j < s * width + width; j++)
                        c->q[j] = step != 0.0f ? clamp_round((x[j] + offset) / step, q_lo < 0 ? q_lo : 0, q_hi) : 0;
        }
}

/* Q4_K's and Q5_K's sub-block s scale and min in their 12 bytes (k_quant_scale_min()'s inverse). */
static void pack_scale_min(uint8_t scales[12], unsigned s, int scale, int min) {
        if (s < 4) {
                scales[s] |= (uint8_t) scale;
                scales[s + 4] |= (uint8_t) min;
        } else {
                scales[s + 4] = (uint8_t) ((scale & 15) | (min & 15) << 4);
                scales[s - 4] |= (uint8_t) ((scale >> 4) << 6);
                scales[s] |= (uint8_t) ((min >> 4) << 6);
        }
}

static void quantize_k(enum tensor_type type, const float *x, void *out) {
        struct k_codes c;
        memset(out, 0, tensor_type_info(type)->block_bytes);
        switch (type) {
        case TENSOR_Q2_K: {
                struct block_q2_K *b = out;
                k_quantize(x, 16, 0, 3, 15, true, &c);
                for (unsigned e = 0; e < QK_K; e++)
                        b->qs[e / 128 * 32 + e % 32] |= (uint8_t) (c.q[e] << (2 * (e % 128 / 32)));
                for (unsigned s = 0; s < 16; s++)
                        b->scales[s] = (uint8_t) (c.scale[s] | c.min[s] << 4);
                b->d = c.d, b->dmin = c.dmin;
                return;
        }
        case TENSOR_Q3_K: {
                struct block_q3_K *b = out;
                k_quantize(x, 16, -4, 3, 31, false, &c);
                for (unsigned e = 0; e < QK_K; e++) {
                        unsigned n = e / 128, j = e % 128 / 32, l = e % 32, u = (unsigned) (c.q[e] + 4);
                        b->qs[32 * n + l] |= (uint8_t) ((u & 3) << (2 * j));
                        b->hmask[l] |= (uint8_t) ((u >> 2) << (4 * n + j));
                }
                for (unsigned s = 0; s < 16; s++) {
                        unsigned v = (unsigned) (c.scale[s] + 32);
                        b->scales[s % 8] |= (uint8_t) ((v & 15) << (s < 8 ? 0 : 4));
                        b->scales[8 + s % 4] |= (uint8_t) ((v >> 4) << (2 * (s / 4)));
                }
                b->d = c.d;
                return;
        }
        case TENSOR_Q4_K: case TENSOR_Q5_K: {
                bool five = type == TENSOR_Q5_K;
                struct block_q4_K *b4 = out;
                struct block_q5_K *b5 = out;
                k_quantize(x, 32, 0, five ? 31 : 15, 63, true, &c);
                uint8_t *qs = five ? b5->qs : b4->qs, *scales = five ? b5->scales : b4->scales;
                for (unsigned e = 0; e < QK_K; e++) {
                        qs[e / 64 * 32 + e % 32] |= (uint8_t) ((c.q[e] & 15) << (4 * (e % 64 / 32)));
                        if (five)
                                b5->qh[e % 32] |= (uint8_t) ((c.q[e] >> 4) << (e / 32));
                }
                for (unsigned s = 0; s < 8; s++)
                        pack_scale_min(scales, s, c.scale[s], c.min[s]);
                if (five)
                        b5->d = c.d, b5->dmin = c.dmin;
                else
                        b4->d = c.d, b4->dmin = c.dmin;
                return;
        }
        default: {
                struct block_q6_K *b = out;
                k_quantize(x, 16, -32, 31, 127, false, &c);
                for (unsigned e = 0; e < QK_K; e++) {
                        unsigned n = e / 128, j = e % 128 / 32, l = e % 32, u = (unsigned) (c.q[e] + 32);
                        b->ql[64 * n + 32 * (j & 1) + l] |= (uint8_t) ((u & 15) << (4 * (j >> 1)));
                        b->qh[32 * n + l] |= (uint8_t) ((u >> 4) << (2 * j));
                }
                for (unsigned s = 0; s < 16; s++)
                        b->scales[s] = (int8_t) c.scale[s];
                b->d = c.d;
                return;
        }
        }
}

void test_quantize_row(enum tensor_type type, const float *x, void *out, uint64_t n) {
        switch (type) {
        case TENSOR_F32:
                memcpy(out, x, n * sizeof(float));
                return;
        case TENSOR_F16:
                for (uint64_t i = 0; i < n; i++)
                        ((uint16_t *) out)[i] = f32_to_f16(x[i]);
                return;
        case TENSOR_BF16:
                for (uint64_t i = 0; i < n; i++)
                        ((uint16_t *) out)[i] = test_f32_to_bf16(x[i]);
                return;
        case TENSOR_Q4_0:
                for (uint64_t k = 0; k < n / QUANT_BLOCK; k++)
                        quantize_q4_0(x + k * QUANT_BLOCK, (struct block_q4_0 *) out + k);
                return;
        case TENSOR_Q4_1:
                for (uint64_t k = 0; k < n / QUANT_BLOCK; k++)
                        quantize_q4_1(x + k * QUANT_BLOCK, (struct block_q4_1 *) out + k);
                return;
        case TENSOR_Q5_0:
                for (uint64_t k = 0; k < n / QUANT_BLOCK; k++)
                        quantize_q5_0(x + k * QUANT_BLOCK, (struct block_q5_0 *) out + k);
                return;
        case TENSOR_Q5_1:
                for (uint64_t k = 0; k < n / QUANT_BLOCK; k++)
                        quantize_q5_1(x + k * QUANT_BLOCK, (struct block_q5_1 *) out + k);
                return;
        case TENSOR_Q8_0:
                for (uint64_t k = 0; k < n / QUANT_BLOCK; k++)
                        quantize_q8_0(x + k * QUANT_BLOCK, (struct block_q8_0 *) out + k);
                return;
        case TENSOR_Q2_K: case TENSOR_Q3_K: case TENSOR_Q4_K: case TENSOR_Q5_K: case TENSOR_Q6_K:
                for (uint64_t k = 0; k < n / QK_K; k++)
                        quantize_k(type, x + k * QK_K, (uint8_t *) out + k * tensor_type_info(type)->block_bytes);
                return;
        default:
                fprintf(stderr, "test_quantize_row: no quantizer for type %u\n", (unsigned) type);
                abort();
        }
}

static bool quantizable(enum tensor_type t) {
        return t == TENSOR_F32 || t == TENSOR_F16 || t == TENSOR_BF16 || t == TENSOR_Q4_0 || t == TENSOR_Q4_1 ||
               t == TENSOR_Q5_0 || t == TENSOR_Q5_1 || t == TENSOR_Q8_0 || (t >= TENSOR_Q2_K && t <= TENSOR_Q6_K);
}

struct builder {
        struct gguf_writer *w;
        const struct synthetic_llama_config *cfg;
        const char *arch;
};

static bool omitted_key(const struct builder *b, const char *key) {
        return b->cfg->omit_key && strcmp(b->cfg->omit_key, key) == 0;
}

/* Writes the key as a string instead when the configuration asks for a wrong type. */
static bool retyped_key(const struct builder *b, const char *key) {
        if (!b->cfg->string_key || strcmp(b->cfg->string_key, key) != 0)
                return false;
        gguf_writer_add_string(b->w, key, "not a number");
        return true;
}

static void key_u32(const struct builder *b, const char *key, uint32_t v) {
        if (!omitted_key(b, key) && !retyped_key(b, key))
                gguf_writer_add_u32(b->w, key, v);
}

static void key_f32(const struct builder *b, const char *key, float v) {
        if (!omitted_key(b, key) && !retyped_key(b, key))
                gguf_writer_add_f32(b->w, key, v);
}

static void key_bool(const struct builder *b, const char *key, bool v) {
        if (!omitted_key(b, key) && !retyped_key(b, key))
                gguf_writer_add_bool(b->w, key, v);
}

static void key_string(const struct builder *b, const char *key, const char *v) {
        if (!omitted_key(b, key))
                gguf_writer_add_string(b->w, key, v);
}

static void arch_u32(const struct builder *b, const char *suffix, uint32_t v) {
        char key[128];
        snprintf(key, sizeof(key), "%s.%s", b->arch, suffix);
        key_u32(b, key, v);
}

static void arch_f32(const struct builder *b, const char *suffix, float v) {
        char key[128];
        snprintf(key, sizeof(key), "%s.%s", b->arch, suffix);
        key_f32(b, key, v);
}

static const char chatml_template[] =
        "{% for message in messages %}"
        "{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}"
        "{% endif %}"
        "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/* Merges over the byte alphabet ("Ġ" is the byte-level space); each result is added as a
 * token right after the byte tokens, and a merge refers only to tokens added before it. */
static const char *const merge_pairs[][2] = {
        { "\xc4\xa0", "t" }, { "\xc4\xa0", "a" }, { "i", "n" },     { "h", "e" },
        { "r", "e" },        { "o", "n" },        { "e", "r" },     { "\xc4\xa0t", "he" },
        { "\xc4\xa0", "s" }, { "a", "n" },
};
#define N_MERGES (sizeof(merge_pairs) / sizeof(merge_pairs[0]))

/* GPT-2's byte-to-unicode map: printable Latin-1 bytes stand for themselves, the others
 * are moved to U+0100 and up, in byte order. */
static void byte_token(unsigned byte, char out[3]) {
        unsigned cp;
        if ((byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || (byte >= 174 && byte <= 255))
                cp = byte;
        else {
                unsigned n = 0;
                for (unsigned b = 0; b < byte; b++)
                        if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)))
                                n++;
                cp = 256 + n;
        }
        if (cp < 0x80) {
                out[0] = (char) cp;
                out[1] = 0;
        } else {
                out[0] = (char) (0xc0 | (cp >> 6));
                out[1] = (char) (0x80 | (cp & 0x3f));
                out[2] = 0;
        }
}

static void add_tokenizer(const struct builder *b) {
        uint32_t n_vocab = b->cfg->n_vocab;
        char **tokens = calloc(n_vocab, sizeof(*tokens));
        int32_t *types = calloc(n_vocab, sizeof(*types));
        const char **merges = calloc(N_MERGES, sizeof(*merges));
        char *merge_text[N_MERGES] = { 0 };
        size_t n_merges = 0;
        uint32_t id = 0;

        if (!tokens || !types || !merges)
                abort();
        static const char *const control[] = { "<|endoftext|>", "<|im_start|>", "<|im_end|>" };
        for (size_t i = 0; i < 3; i++, id++) {
                tokens[id] = strdup(control[i]);
                types[id] = 3;
        }
        /* GPT-2 BPE vocabularies in GGUF mark their byte tokens as normal (1), not byte (6). */
        for (unsigned byte = 0; byte < 256; byte++, id++) {
                char s[3];
                byte_token(byte, s);
                tokens[id] = strdup(s);
                types[id] = 1;
        }
        for (; n_merges < N_MERGES && id < n_vocab; n_merges++, id++) {
                const char *l = merge_pairs[n_merges][0], *r = merge_pairs[n_merges][1];
                size_t ll = strlen(l), rl = strlen(r);
                tokens[id] = malloc(ll + rl + 1);
                merge_text[n_merges] = malloc(ll + rl + 2);
                if (!tokens[id] || !merge_text[n_merges])
                        abort();
                snprintf(tokens[id], ll + rl + 1, "%s%s", l, r);
                snprintf(merge_text[n_merges], ll + rl + 2, "%s %s", l, r);
                merges[n_merges] = merge_text[n_merges];
                types[id] = 1;
        }
        for (uint32_t fill = 0; id < n_vocab; fill++, id++) {
                char s[32];
                snprintf(s, sizeof(s), "<fill_%u>", fill);
                tokens[id] = strdup(s);
                types[id] = 4;
        }
        for (uint32_t i = 0; i < n_vocab; i++)
                if (!tokens[i])
                        abort();

        key_bool(b, "tokenizer.ggml.add_space_prefix", false);
        key_bool(b, "tokenizer.ggml.add_bos_token", false);
        key_string(b, "tokenizer.ggml.model", "gpt2");
        key_string(b, "tokenizer.ggml.pre", "smollm");
        if (!omitted_key(b, "tokenizer.ggml.tokens"))
                gguf_writer_add_string_array(b->w, "tokenizer.ggml.tokens", (const char *const *) tokens, n_vocab);
        if (!omitted_key(b, "tokenizer.ggml.token_type"))
                gguf_writer_add_i32_array(b->w, "tokenizer.ggml.token_type", types, n_vocab);
        if (!omitted_key(b, "tokenizer.ggml.merges"))
                gguf_writer_add_string_array(b->w, "tokenizer.ggml.merges", merges, n_merges);
        key_u32(b, "tokenizer.ggml.bos_token_id", 1);
        key_u32(b, "tokenizer.ggml.eos_token_id", 2);
        key_u32(b, "tokenizer.ggml.unknown_token_id", 0);
        key_u32(b, "tokenizer.ggml.padding_token_id", 2);
        key_string(b, "tokenizer.chat_template", chatml_template);

        for (uint32_t i = 0; i < n_vocab; i++)
                free(tokens[i]);
        for (size_t i = 0; i < n_merges; i++)
                free(merge_text[i]);
        free(tokens);
        free(types);
        free(merges);
}

/* Each tensor draws from its own stream, seeded by the model seed and its name, so leaving
 * one out (fault injection) does not change the others. */
static struct test_rng tensor_rng(const struct synthetic_llama_config *cfg, const char *name) {
        uint64_t h = 0xcbf29ce484222325ull;
        for (const char *p = name; *p; p++)
                h = (h ^ (uint8_t) *p) * 0x100000001b3ull;
        struct test_rng rng = { cfg->seed ^ h };
        test_rng_next(&rng);
        return rng;
}

/* Writes a [n_cols, n_rows] tensor of mean + std * N(0, 1) values encoded as type. */
static void add_random_tensor(const struct builder *b, const char *name, enum tensor_type type, uint64_t n_cols,
                              uint64_t n_rows, float mean, float std) {
        const struct synthetic_llama_config *cfg = b->cfg;
        if (cfg->omit_tensor && strcmp(cfg->omit_tensor, name) == 0)
                return;
        if (n_rows > 1 && cfg->extra_row_tensor && strcmp(cfg->extra_row_tensor, name) == 0)
                n_rows++;

        struct test_rng rng = tensor_rng(cfg, name);
        uint64_t n = n_cols * n_rows, row_bytes = tensor_row_bytes(type, n_cols);
        float *x = malloc(n * sizeof(float));
        uint8_t *q = malloc(row_bytes * n_rows);
        if (!x || !q)
                abort();
        for (uint64_t i = 0; i < n; i++)
                x[i] = mean + std * test_rng_normal(&rng);
        test_quantize_row(type, x, q, n);
        uint64_t ne[2] = { n_cols, n_rows };
        gguf_writer_add_tensor(b->w, name, type, n_rows > 1 ? 2 : 1, ne, q, row_bytes * n_rows);
        free(x);
        free(q);
}

static void add_linear(const struct builder *b, const char *name, uint64_t n_in, uint64_t n_out) {
        /* std 0.5/sqrt(n_in): 0.02 at n_in = 576, larger for tiny models, so the output of a
         * layer stays around the scale of its (normalized) input. */
        add_random_tensor(b, name, b->cfg->weight_type, n_in, n_out, 0.0f, 0.5f / sqrtf((float) n_in));
}

static void add_norm(const struct builder *b, const char *name, uint64_t n) {
        add_random_tensor(b, name, TENSOR_F32, n, 1, 1.0f, 0.05f);
}

int synthetic_llama_build(struct gguf_writer *w, const struct synthetic_llama_config *cfg) {
        struct builder b = { .w = w, .cfg = cfg, .arch = cfg->architecture ? cfg->architecture : "llama" };

        bool gemma3 = strcmp(b.arch, "gemma3") == 0;
        if (cfg->n_layer == 0 || cfg->n_embd == 0 || cfg->n_ff == 0 || cfg->n_head == 0 || cfg->n_head_kv == 0 ||
            (cfg->head_dim == 0 && cfg->n_embd % cfg->n_head != 0) || cfg->n_vocab < SYNTHETIC_LLAMA_MIN_VOCAB ||
            !quantizable(cfg->weight_type) || !quantizable(cfg->embd_type) ||
            tensor_row_bytes(cfg->weight_type, cfg->n_embd) == 0 ||
            tensor_row_bytes(cfg->weight_type, cfg->n_ff) == 0 || tensor_row_bytes(cfg->embd_type, cfg->n_embd) == 0)
                return -EINVAL;

        uint32_t head_dim = cfg->head_dim ? cfg->head_dim : cfg->n_embd / cfg->n_head;
        uint64_t q_dim = (uint64_t) cfg->n_head * head_dim, kv_dim = (uint64_t) cfg->n_head_kv * head_dim;

        key_string(&b, "general.architecture", b.arch);
        key_string(&b, "general.name", "synthetic-llama");
        arch_u32(&b, "block_count", cfg->n_layer);
        arch_u32(&b, "context_length", cfg->n_ctx ? cfg->n_ctx : 2048);
        arch_u32(&b, "embedding_length", cfg->n_embd);
        arch_u32(&b, "feed_forward_length", cfg->n_ff);
        arch_u32(&b, "attention.head_count", cfg->n_head);
        arch_u32(&b, "attention.head_count_kv", cfg->n_head_kv);
        arch_f32(&b, "rope.freq_base", cfg->rope_theta > 0.0f ? cfg->rope_theta : 10000.0f);
        arch_f32(&b, "attention.layer_norm_rms_epsilon", 1e-5f);
        arch_u32(&b, "vocab_size", cfg->n_vocab);
        arch_u32(&b, "rope.dimension_count", head_dim);
        if (gemma3 && cfg->head_dim) {
                arch_u32(&b, "attention.key_length", head_dim);
                arch_u32(&b, "attention.value_length", head_dim);
        }
        if (gemma3 && cfg->sliding_window)
                arch_u32(&b, "attention.sliding_window", cfg->sliding_window);
        if (gemma3 && cfg->sliding_window_pattern)
                arch_u32(&b, "attention.sliding_window_pattern", cfg->sliding_window_pattern);
        if (gemma3 && cfg->rope_theta_local > 0.0f)
                arch_f32(&b, "rope.freq_base_swa", cfg->rope_theta_local);
        add_tokenizer(&b);
        key_u32(&b, "general.quantization_version", 2);

        add_random_tensor(&b, "token_embd.weight", cfg->embd_type, cfg->n_embd, cfg->n_vocab, 0.0f, 0.5f);
        for (uint32_t i = 0; i < cfg->n_layer; i++) {
                char name[96];
#define LAYER(suffix) (snprintf(name, sizeof(name), "blk.%u." suffix ".weight", i), name)
                add_norm(&b, LAYER("attn_norm"), cfg->n_embd);
                add_linear(&b, LAYER("attn_q"), cfg->n_embd, q_dim);
                add_linear(&b, LAYER("attn_k"), cfg->n_embd, kv_dim);
                add_linear(&b, LAYER("attn_v"), cfg->n_embd, kv_dim);
                add_linear(&b, LAYER("attn_output"), q_dim, cfg->n_embd);
                add_norm(&b, LAYER("ffn_norm"), cfg->n_embd);
                add_linear(&b, LAYER("ffn_gate"), cfg->n_embd, cfg->n_ff);
                add_linear(&b, LAYER("ffn_up"), cfg->n_embd, cfg->n_ff);
                add_linear(&b, LAYER("ffn_down"), cfg->n_ff, cfg->n_embd);
                if (gemma3) {
                        add_norm(&b, LAYER("attn_q_norm"), head_dim);
                        add_norm(&b, LAYER("attn_k_norm"), head_dim);
                        add_norm(&b, LAYER("post_attention_norm"), cfg->n_embd);
                        add_norm(&b, LAYER("post_ffw_norm"), cfg->n_embd);
                }
#undef LAYER
        }
        add_norm(&b, "output_norm.weight", cfg->n_embd);
        if (!cfg->tied_output)
                add_random_tensor(&b, "output.weight", cfg->embd_type, cfg->n_embd, cfg->n_vocab, 0.0f,
                                  0.5f / sqrtf((float) cfg->n_embd));
        return 0;
}

int synthetic_llama_write(const char *path, const struct synthetic_llama_config *cfg) {
        struct gguf_writer *w = gguf_writer_new();
        int r = synthetic_llama_build(w, cfg);
        if (r == 0)
                r = gguf_writer_write_file(w, path);
        gguf_writer_free(w);
        return r;
}
