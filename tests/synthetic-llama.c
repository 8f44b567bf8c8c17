/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "float16.h"
#include "k-quantize.h"
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
                k_quantize_row(type, x, out, n);
                return;
        default:
                fprintf(stderr, "test_quantize_row: no quantizer for type %u\n", (unsigned) type);
                abort();
        }
}

static bool quantizable(enum tensor_type t) {
        return t == TENSOR_F32 || t == TENSOR_F16 || t == TENSOR_BF16 || t == TENSOR_Q4_0 || t == TENSOR_Q4_1 ||
               t == TENSOR_Q5_0 || t == TENSOR_Q5_1 || t == TENSOR_Q8_0 || t == TENSOR_Q2_K || t == TENSOR_Q3_K ||
               t == TENSOR_Q4_K || t == TENSOR_Q5_K || t == TENSOR_Q6_K;
}

struct builder {
        struct gguf_writer *w;
        const struct synthetic_llama_config *cfg;
        const char *arch;
        uint32_t n_vocab;
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

static void arch_string(const struct builder *b, const char *suffix, const char *v) {
        char key[128];
        snprintf(key, sizeof(key), "%s.%s", b->arch, suffix);
        key_string(b, key, v);
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
        uint32_t n_vocab = b->n_vocab;
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

/* One tokenizer.* key of a vocabulary file, copied as it is. -EINVAL for what the writer
 * cannot express: nested arrays, strings in an array holding NUL bytes. */
static int copy_key(struct gguf_writer *w, const struct gguf_kv *kv) {
        char key[256];
        const struct gguf_value *v = &kv->value;
        if (kv->key.len >= sizeof(key))
                return -EINVAL;
        memcpy(key, kv->key.data, kv->key.len);
        key[kv->key.len] = 0;

        /* llama.cpp reads a key only in the type it expects: each keeps its own */
        switch (v->type) {
        case GGUF_VALUE_U8:
                gguf_writer_add_u8(w, key, (uint8_t) v->u64);
                return 0;
        case GGUF_VALUE_U16:
                gguf_writer_add_u16(w, key, (uint16_t) v->u64);
                return 0;
        case GGUF_VALUE_U32:
                gguf_writer_add_u32(w, key, (uint32_t) v->u64);
                return 0;
        case GGUF_VALUE_U64:
                gguf_writer_add_u64(w, key, v->u64);
                return 0;
        case GGUF_VALUE_I8:
                gguf_writer_add_i8(w, key, (int8_t) v->i64);
                return 0;
        case GGUF_VALUE_I16:
                gguf_writer_add_i16(w, key, (int16_t) v->i64);
                return 0;
        case GGUF_VALUE_I32:
                gguf_writer_add_i32(w, key, (int32_t) v->i64);
                return 0;
        case GGUF_VALUE_I64:
                gguf_writer_add_i64(w, key, v->i64);
                return 0;
        case GGUF_VALUE_F32:
                gguf_writer_add_f32(w, key, (float) v->f64);
                return 0;
        case GGUF_VALUE_F64:
                gguf_writer_add_f64(w, key, v->f64);
                return 0;
        case GGUF_VALUE_BOOL:
                gguf_writer_add_bool(w, key, v->u64 != 0);
                return 0;
        case GGUF_VALUE_STRING:
                gguf_writer_add_string_n(w, key, v->str.data, v->str.len);
                return 0;
        case GGUF_VALUE_ARRAY:
                break;
        default:
                return -EINVAL;
        }
        if (v->array.type == GGUF_VALUE_ARRAY)
                return -EINVAL;
        if (v->array.type != GGUF_VALUE_STRING) {
                gguf_writer_add_array(w, key, v->array.type, v->array.raw, v->array.count);
                return 0;
        }
        char **strings = calloc(v->array.count ? v->array.count : 1, sizeof(*strings));
        int r = 0;
        if (!strings)
                abort();
        for (uint64_t i = 0; i < v->array.count && r == 0; i++) {
                const struct gguf_string *s = &v->array.strings[i];
                if (memchr(s->data, 0, s->len))
                        r = -EINVAL;
                else if (!(strings[i] = strndup(s->data, s->len)))
                        abort();
        }
        if (r == 0)
                gguf_writer_add_string_array(w, key, (const char *const *) strings, v->array.count);
        for (uint64_t i = 0; i < v->array.count; i++)
                free(strings[i]);
        free(strings);
        return r;
}

/* Copies every tokenizer.* key of the vocabulary file; *ret_n_vocab is its token count. */
static int copy_vocabulary(const struct builder *b, const struct gguf_file *vocab, uint32_t *ret_n_vocab) {
        const struct gguf_kv *tokens = gguf_find_kv(vocab, "tokenizer.ggml.tokens");
        if (!tokens || tokens->value.type != GGUF_VALUE_ARRAY || tokens->value.array.type != GGUF_VALUE_STRING ||
            tokens->value.array.count > UINT32_MAX)
                return -EINVAL;
        for (uint64_t i = 0; i < vocab->n_kv; i++) {
                const struct gguf_kv *kv = &vocab->kv[i];
                if (kv->key.len < 10 || memcmp(kv->key.data, "tokenizer.", 10) != 0)
                        continue;
                int r = copy_key(b->w, kv);
                if (r < 0)
                        return r;
        }
        *ret_n_vocab = (uint32_t) tokens->value.array.count;
        return 0;
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

static void add_bias(const struct builder *b, const char *name, uint64_t n) {
        add_random_tensor(b, name, TENSOR_F32, n, 1, 0.0f, 0.2f);
}

static void add_f32_vector(const struct builder *b, const char *name, const float *v, uint64_t n) {
        if (b->cfg->omit_tensor && strcmp(b->cfg->omit_tensor, name) == 0)
                return;
        gguf_writer_add_tensor(b->w, name, TENSOR_F32, 1, &n, v, n * sizeof(float));
}

/* Llama 3.1's rope frequency factors, as its converter derives them from the model's rope
 * settings: wavelengths shorter than 8192/4 keep their frequency, those longer than 8192/1
 * are slowed 8 times, and the band between moves smoothly from one to the other. */
static void add_llama3_rope_freqs(const struct builder *b, uint32_t rope_dim, float theta) {
        const double factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_context = 8192.0;
        const double low_freq_wavelen = original_context / low_freq_factor;
        const double high_freq_wavelen = original_context / high_freq_factor;
        float *factors = malloc(sizeof(float) * (rope_dim / 2));
        if (!factors)
                abort();
        for (uint32_t i = 0; i < rope_dim / 2; i++) {
                double freq = 1.0 / pow((double) theta, (double) (2 * i) / (double) rope_dim);
                double wavelen = 2.0 * M_PI / freq;
                if (wavelen < high_freq_wavelen)
                        factors[i] = 1.0f;
                else if (wavelen > low_freq_wavelen)
                        factors[i] = (float) factor;
                else {
                        double smooth = (original_context / wavelen - low_freq_factor) /
                                        (high_freq_factor - low_freq_factor);
                        factors[i] = (float) (1.0 / ((1.0 - smooth) / factor + smooth));
                }
        }
        add_f32_vector(b, "rope_freqs.weight", factors, rope_dim / 2);
        free(factors);
}

/* Phi-3's long and short rope factors: both above 1, rising with the dimension, the long
 * ones from 1 to 4 and the short ones from 1 to 1.5 on a curve, so that using one set for the
 * other shows. */
static void add_phi3_rope_factors(const struct builder *b, uint32_t rope_dim) {
        uint32_t n = rope_dim / 2;
        float *long_factors = malloc(sizeof(float) * n), *short_factors = malloc(sizeof(float) * n);
        if (!long_factors || !short_factors)
                abort();
        for (uint32_t i = 0; i < n; i++) {
                float t = n > 1 ? (float) i / (float) (n - 1) : 0.0f;
                long_factors[i] = 1.0f + 3.0f * t;
                short_factors[i] = 1.0f + 0.5f * t * t;
        }
        add_f32_vector(b, "rope_factors_long.weight", long_factors, n);
        add_f32_vector(b, "rope_factors_short.weight", short_factors, n);
        free(long_factors);
        free(short_factors);
}

static void add_rope_scaling_keys(const struct builder *b) {
        const struct synthetic_llama_config *cfg = b->cfg;
        if (cfg->rope_scaling_type)
                arch_string(b, "rope.scaling.type", cfg->rope_scaling_type);
        if (cfg->rope_scaling_factor > 0.0f)
                arch_f32(b, "rope.scaling.factor", cfg->rope_scaling_factor);
        if (cfg->rope_scaling_original_context)
                arch_u32(b, "rope.scaling.original_context_length", cfg->rope_scaling_original_context);
        if (cfg->rope_scaling_attn_factor > 0.0f)
                arch_f32(b, "rope.scaling.attn_factor", cfg->rope_scaling_attn_factor);
        if (cfg->yarn_beta_fast > 0.0f)
                arch_f32(b, "rope.scaling.yarn_beta_fast", cfg->yarn_beta_fast);
        if (cfg->yarn_beta_slow > 0.0f)
                arch_f32(b, "rope.scaling.yarn_beta_slow", cfg->yarn_beta_slow);
        if (cfg->yarn_log_multiplier > 0.0f)
                arch_f32(b, "rope.scaling.yarn_log_multiplier", cfg->yarn_log_multiplier);
        if (cfg->attention_temperature_scale > 0.0f)
                arch_f32(b, "attention.temperature_scale", cfg->attention_temperature_scale);
}

static bool is_arch(const struct builder *b, const char *name) {
        return strcmp(b->arch, name) == 0;
}

static void add_layers(const struct builder *b, uint32_t head_dim) {
        const struct synthetic_llama_config *cfg = b->cfg;
        uint64_t q_dim = (uint64_t) cfg->n_head * head_dim, kv_dim = (uint64_t) cfg->n_head_kv * head_dim;
        bool gemma3 = is_arch(b, "gemma3"), phi3 = is_arch(b, "phi3");

        for (uint32_t i = 0; i < cfg->n_layer; i++) {
                char name[96];
#define LAYER(suffix) (snprintf(name, sizeof(name), "blk.%u." suffix, i), name)
                add_norm(b, LAYER("attn_norm.weight"), cfg->n_embd);
                if (phi3) /* q rows, then k, then v */
                        add_linear(b, LAYER("attn_qkv.weight"), cfg->n_embd, q_dim + 2 * kv_dim);
                else {
                        add_linear(b, LAYER("attn_q.weight"), cfg->n_embd, q_dim);
                        add_linear(b, LAYER("attn_k.weight"), cfg->n_embd, kv_dim);
                        add_linear(b, LAYER("attn_v.weight"), cfg->n_embd, kv_dim);
                }
                if (is_arch(b, "qwen2")) {
                        add_bias(b, LAYER("attn_q.bias"), q_dim);
                        add_bias(b, LAYER("attn_k.bias"), kv_dim);
                        add_bias(b, LAYER("attn_v.bias"), kv_dim);
                }
                add_linear(b, LAYER("attn_output.weight"), q_dim, cfg->n_embd);
                add_norm(b, LAYER("ffn_norm.weight"), cfg->n_embd);
                if (phi3) /* the gate's n_ff rows, then the up projection's */
                        add_linear(b, LAYER("ffn_up.weight"), cfg->n_embd, 2 * (uint64_t) cfg->n_ff);
                else {
                        add_linear(b, LAYER("ffn_gate.weight"), cfg->n_embd, cfg->n_ff);
                        add_linear(b, LAYER("ffn_up.weight"), cfg->n_embd, cfg->n_ff);
                }
                add_linear(b, LAYER("ffn_down.weight"), cfg->n_ff, cfg->n_embd);
                if (gemma3 || is_arch(b, "qwen3")) {
                        add_norm(b, LAYER("attn_q_norm.weight"), head_dim);
                        add_norm(b, LAYER("attn_k_norm.weight"), head_dim);
                }
                if (gemma3) {
                        add_norm(b, LAYER("post_attention_norm.weight"), cfg->n_embd);
                        add_norm(b, LAYER("post_ffw_norm.weight"), cfg->n_embd);
                }
#undef LAYER
        }
}

int synthetic_llama_build(struct gguf_writer *w, const struct synthetic_llama_config *cfg) {
        struct builder b = { .w = w, .cfg = cfg, .arch = cfg->architecture ? cfg->architecture : "llama",
                             .n_vocab = cfg->n_vocab };
        struct gguf_file *vocab = NULL;

        bool gemma3 = is_arch(&b, "gemma3");
        if (cfg->n_layer == 0 || cfg->n_embd == 0 || cfg->n_ff == 0 || cfg->n_head == 0 || cfg->n_head_kv == 0 ||
            (cfg->head_dim == 0 && cfg->n_embd % cfg->n_head != 0) ||
            (!cfg->vocab_path && cfg->n_vocab < SYNTHETIC_LLAMA_MIN_VOCAB) ||
            !quantizable(cfg->weight_type) || !quantizable(cfg->embd_type) ||
            tensor_row_bytes(cfg->weight_type, cfg->n_embd) == 0 ||
            tensor_row_bytes(cfg->weight_type, cfg->n_ff) == 0 || tensor_row_bytes(cfg->embd_type, cfg->n_embd) == 0)
                return -EINVAL;
        if (cfg->vocab_path) {
                struct error err;
                int r = gguf_open(cfg->vocab_path, &vocab, &err);
                if (r < 0) {
                        fprintf(stderr, "synthetic-llama: %s\n", err.message);
                        return r;
                }
        }

        uint32_t head_dim = cfg->head_dim ? cfg->head_dim : cfg->n_embd / cfg->n_head;
        float rope_theta = cfg->rope_theta > 0.0f ? cfg->rope_theta : 10000.0f;

        key_string(&b, "general.architecture", b.arch);
        key_string(&b, "general.name", "synthetic-llama");
        arch_u32(&b, "block_count", cfg->n_layer);
        arch_u32(&b, "context_length", cfg->n_ctx ? cfg->n_ctx : 2048);
        arch_u32(&b, "embedding_length", cfg->n_embd);
        arch_u32(&b, "feed_forward_length", cfg->n_ff);
        arch_u32(&b, "attention.head_count", cfg->n_head);
        arch_u32(&b, "attention.head_count_kv", cfg->n_head_kv);
        arch_f32(&b, "rope.freq_base", rope_theta);
        arch_f32(&b, "attention.layer_norm_rms_epsilon", 1e-5f);
        if (vocab) {
                int r = copy_vocabulary(&b, vocab, &b.n_vocab);
                gguf_close(vocab);
                if (r < 0)
                        return r;
        }
        arch_u32(&b, "vocab_size", b.n_vocab);
        arch_u32(&b, "rope.dimension_count", head_dim);
        add_rope_scaling_keys(&b);
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
        if (!cfg->vocab_path)
                add_tokenizer(&b);
        key_u32(&b, "general.quantization_version", 2);

        add_random_tensor(&b, "token_embd.weight", cfg->embd_type, cfg->n_embd, b.n_vocab, 0.0f,
                          cfg->embd_std > 0.0f ? cfg->embd_std : 0.5f);
        if (cfg->rope_freqs)
                add_llama3_rope_freqs(&b, head_dim, rope_theta);
        if (is_arch(&b, "phi3"))
                add_phi3_rope_factors(&b, head_dim);
        add_layers(&b, head_dim);
        add_norm(&b, "output_norm.weight", cfg->n_embd);
        if (!cfg->tied_output)
                add_random_tensor(&b, "output.weight", cfg->embd_type, cfg->n_embd, b.n_vocab, 0.0f,
                                  cfg->output_std > 0.0f ? cfg->output_std : 0.5f / sqrtf((float) cfg->n_embd));
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
