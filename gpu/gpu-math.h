/* SPDX-License-Identifier: MIT */
#pragma once

/* The arithmetic of the CUDA kernels, one function per thread's piece of work, compiled both
 * for the device and (as plain C) for the host: the host tests run these bodies, with the
 * warp's shuffles modelled in the same order, against the CPU backend's reference, and the
 * GPU tests hold the device's results to the host model bit for bit. Every multiply-add is
 * an explicit fmaf and the device code is built with contraction off (--fmad=false), so a
 * result's bits depend on the data and the order written here, never on the compiler, the
 * batch or the launch shape. */

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "tensor-types.h"

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define GPU_MATH __host__ __device__ static inline
#else
#include <math.h>
#define GPU_MATH static inline
#endif
/* What the host alone runs: the repacking at upload. */
#define GPU_HOST static inline

/* The device's layouts are lane-major, so that a thread loads the words it multiplies for
 * four blocks at once (16 bytes): a row of nb blocks is padded to gpu_padded_blocks(nb)
 * blocks (nbp), and word w (of the 4 words of a 4-bit block's nibbles, or the 8 of a Q8_0
 * block's, a 5-bit block's or an activation block's byte quants) of block b lies at word
 * w * nbp + b of the row. 5-bit blocks go up as one byte a quant (Q5_0's less 16, signed;
 * Q5_1's as they are), so that the kernel multiplies them as Q8_0's, with no bits to gather:
 * 32 bytes a block on the device where the file has 22 or 24. A weight row's scales are one
 * word per block (nbp of them): the f16 scale d in the low half, the f16 minimum m (Q4_1,
 * Q5_1) in the high half. An activation row's scales are nbp floats
 * d, then nbp floats s = d * sum(quants), both rounded to f16 as the CPU's q8_1 blocks hold
 * them. Padding is zero and never enters a product.
 *
 * The K-quants go up expanded to blocks of 32 of the same layout, so that they run the same
 * dp4a path: Q2_K, Q3_K and Q4_K as nibbles (Q3_K's plus 4, taken off again as Q4_0's 8 is),
 * Q5_K as bytes, Q6_K as bytes less 32 (signed). Their scales are integers per half block
 * (16 elements: Q2_K's, Q3_K's and Q6_K's sub-blocks; Q4_K's and Q5_K's sub-block of 32
 * gives both halves the same), so a block's scale word holds the super-block's f16 d in the
 * low half and the int8 scales of elements 0..15 and 16..31 in bytes 2 and 3; the kinds with
 * mins (Q2_K, Q4_K, Q5_K) have a second word per block, the f16 dmin and the two unsigned
 * mins likewise, at word nbp + b of the row's scales. Every weight is then d * scale * q
 * (less dmin * min), the file's value to the bit. */
#define GPU_QBLOCK 32

enum gpu_weight_kind { /* the quantized kinds first, up to GPU_WEIGHT_Q8_0 */
        GPU_WEIGHT_Q4_0,
        GPU_WEIGHT_Q4_1,
        GPU_WEIGHT_Q5_0,
        GPU_WEIGHT_Q5_1,
        GPU_WEIGHT_Q2_K, /* the K-quants, from GPU_WEIGHT_Q2_K to GPU_WEIGHT_Q6_K */
        GPU_WEIGHT_Q3_K,
        GPU_WEIGHT_Q4_K,
        GPU_WEIGHT_Q5_K,
        GPU_WEIGHT_Q6_K,
        GPU_WEIGHT_Q8_0,
        GPU_WEIGHT_F32,
        GPU_WEIGHT_F16,
        GPU_WEIGHT_BF16,
        GPU_WEIGHT_UNSUPPORTED, /* a tensor type the kernels do not read */
};

/* The kernels' kind for a tensor type. */
GPU_MATH enum gpu_weight_kind gpu_weight_kind_of(enum tensor_type type) {
        switch (type) {
        case TENSOR_Q4_0: return GPU_WEIGHT_Q4_0;
        case TENSOR_Q4_1: return GPU_WEIGHT_Q4_1;
        case TENSOR_Q5_0: return GPU_WEIGHT_Q5_0;
        case TENSOR_Q5_1: return GPU_WEIGHT_Q5_1;
        case TENSOR_Q2_K: return GPU_WEIGHT_Q2_K;
        case TENSOR_Q3_K: return GPU_WEIGHT_Q3_K;
        case TENSOR_Q4_K: return GPU_WEIGHT_Q4_K;
        case TENSOR_Q5_K: return GPU_WEIGHT_Q5_K;
        case TENSOR_Q6_K: return GPU_WEIGHT_Q6_K;
        case TENSOR_Q8_0: return GPU_WEIGHT_Q8_0;
        case TENSOR_F32: return GPU_WEIGHT_F32;
        case TENSOR_F16: return GPU_WEIGHT_F16;
        case TENSOR_BF16: return GPU_WEIGHT_BF16;
        default: return GPU_WEIGHT_UNSUPPORTED;
        }
}

/* Whether the device holds a block's quants one a byte (else two a byte, as nibbles). */
GPU_MATH bool gpu_byte_quants(enum gpu_weight_kind kind) {
        return kind == GPU_WEIGHT_Q8_0 || kind == GPU_WEIGHT_Q5_0 || kind == GPU_WEIGHT_Q5_1 || kind == GPU_WEIGHT_Q5_K ||
               kind == GPU_WEIGHT_Q6_K;
}

/* Whether the kind has a minimum m, which meets the activations' sums apart. */
GPU_MATH bool gpu_has_offset(enum gpu_weight_kind kind) {
        return kind == GPU_WEIGHT_Q4_1 || kind == GPU_WEIGHT_Q5_1;
}

GPU_MATH bool gpu_k_quant(enum gpu_weight_kind kind) {
        return kind >= GPU_WEIGHT_Q2_K && kind <= GPU_WEIGHT_Q6_K;
}

/* Whether a K-quant has mins (a second scale word per block). */
GPU_MATH bool gpu_k_has_mins(enum gpu_weight_kind kind) {
        return kind == GPU_WEIGHT_Q2_K || kind == GPU_WEIGHT_Q4_K || kind == GPU_WEIGHT_Q5_K;
}

/* Scale words per block: the word (d, and m or the K scales), and the K mins' word. */
GPU_MATH uint32_t gpu_scale_words(enum gpu_weight_kind kind) {
        return gpu_k_has_mins(kind) ? 2 : 1;
}

/* What the device's nibbles are stored above the quant: Q4_0's 8, Q3_K's 4. */
GPU_MATH uint32_t gpu_nibble_bias(enum gpu_weight_kind kind) {
        return kind == GPU_WEIGHT_Q4_0 ? 8 : kind == GPU_WEIGHT_Q3_K ? 4 : 0;
}

GPU_MATH uint32_t gpu_block_quant_bytes(enum gpu_weight_kind kind) {
        return gpu_byte_quants(kind) ? 32 : 16;
}

GPU_MATH uint32_t gpu_padded_blocks(uint32_t n_blocks) {
        return (n_blocks + 3) / 4 * 4;
}

/* Scale words of a row of nbp blocks. */
GPU_MATH uint32_t gpu_row_scale_words(enum gpu_weight_kind kind, uint32_t nbp) {
        return nbp * gpu_scale_words(kind);
}

/* Byte `byte` (0 .. 31, or 0 .. 15 for nibbles) of block b of a lane-major row of nbp blocks. */
GPU_MATH uint32_t gpu_lane_major_offset(uint32_t nbp, uint32_t b, uint32_t byte) {
        return ((byte / 4) * nbp + b) * 4 + byte % 4;
}

GPU_MATH float gpu_bits_to_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
        return __uint_as_float(u);
#else
        float f;
        memcpy(&f, &u, sizeof(f));
        return f;
#endif
}

GPU_MATH uint32_t gpu_f32_to_bits(float f) {
#ifdef __CUDA_ARCH__
        return __float_as_uint(f);
#else
        uint32_t u;
        memcpy(&u, &f, sizeof(u));
        return u;
#endif
}

/* IEEE binary16 to float, exact (the device's conversion instruction gives the same bits for
 * every value but NaN payloads). */
GPU_MATH float gpu_f16_to_f32(uint32_t h) {
#ifdef __CUDA_ARCH__
        return __half2float(__ushort_as_half((unsigned short) h));
#else
        uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
        if (exponent == 0x1f)
                return gpu_bits_to_f32(sign | 0x7f800000u | (mantissa << 13));
        if (exponent == 0) {
                float v = (float) mantissa * 0x1p-24f;
                return sign ? -v : v;
        }
        return gpu_bits_to_f32(sign | ((exponent + 112) << 23) | (mantissa << 13));
#endif
}

/* Float to binary16, round to nearest even: the bits base/float16.h's f32_to_f16 gives (the
 * device's instruction too, NaN payloads aside). */
GPU_MATH uint32_t gpu_f32_to_f16(float f) {
#ifdef __CUDA_ARCH__
        return __half_as_ushort(__float2half_rn(f));
#else
        uint32_t u = gpu_f32_to_bits(f), sign = (u >> 16) & 0x8000u, abs = u & 0x7fffffffu;
        if (abs >= 0x7f800000u)
                return sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u);
        if (abs >= 0x477ff000u)
                return sign | 0x7c00u;
        if (abs < 0x38800000u) /* subnormal or zero: the float add rounds at the f16 step */
                return sign | (gpu_f32_to_bits(gpu_bits_to_f32(abs) + 0.5f) - 0x3f000000u);
        abs += 0xfffu + ((abs >> 13) & 1);
        return sign | ((abs - 0x38000000u) >> 13);
#endif
}

GPU_MATH float gpu_round_f16(float f) {
        return gpu_f16_to_f32(gpu_f32_to_f16(f));
}

GPU_MATH float gpu_bf16_to_f32(uint32_t b) {
        return gpu_bits_to_f32(b << 16);
}

/* Sum of the four signed byte products of a and b, plus c (the dp4a instruction). */
GPU_MATH int32_t gpu_dp4a(uint32_t a, uint32_t b, int32_t c) {
#ifdef __CUDA_ARCH__
        return __dp4a((int) a, (int) b, c);
#else
        for (int i = 0; i < 32; i += 8)
                c += (int32_t) (int8_t) (a >> i) * (int32_t) (int8_t) (b >> i);
        return c;
#endif
}

/* The quantized products follow the CPU's order (cpu/dot.h, llama.cpp's x86 order), so that
 * each result has the CPU backend's bits: eight lanes per row, lane l taking elements
 * 4l..4l+3 of every block,
 *     lane[l] = fmaf((float) isum_bl, d_w[b] * d_a[b], lane[l])   for each block b in order,
 *     result = lanes_sum8(lane), plus off = fmaf(m_w[b], s_a[b], off) in order for Q4_1 and Q5_1,
 * and for the single-accumulator product (weight_single_accumulator(): Q4_0 matrices as
 * llama.cpp repacks them, a Q8_0 output weight) one accumulator per row over the blocks' whole
 * integer sums, acc = fmaf((float) isum_b, d_w[b] * d_a[b], acc). On the device the
 * eight lanes are eight threads and lanes_sum8 is the butterfly of shuffles 4, 2, 1. */
#define GPU_ROW_LANES 8

/* Which of a block's quant words lane l reads: word l of the byte kinds' eight, word l % 4 of
 * the 4-bit types' four (element i in the low nibble of byte i, element 16 + i in its high one). */
GPU_MATH uint32_t gpu_lane_word(enum gpu_weight_kind kind, uint32_t l) {
        return gpu_byte_quants(kind) ? l : l % 4;
}

/* Lane l's exact integer product in a block: its quant word (gpu_lane_word()), the bias
 * taken off each quant (gpu_nibble_bias(); Q5_0's and Q6_K's went at the upload), with the
 * activation's word l. */
GPU_MATH int32_t gpu_lane_isum(enum gpu_weight_kind kind, uint32_t word, uint32_t l, uint32_t activation_word) {
        uint32_t quants;
        if (gpu_byte_quants(kind))
                quants = word;
        else {
                uint32_t nibbles = l < 4 ? word & 0x0f0f0f0fu : (word >> 4) & 0x0f0f0f0fu, bias = gpu_nibble_bias(kind);
                /* nibbles are 0..15: offset each byte by 0x80 so that taking the bias off
                 * never borrows across bytes, then back */
                quants = bias ? ((nibbles | 0x80808080u) - bias * 0x01010101u) ^ 0x80808080u : nibbles;
        }
        return gpu_dp4a(quants, activation_word, 0);
}

/* A K-quant block's factors for lane l (elements 4l .. 4l + 3, in half l / 4): its integer
 * scale and min, the super-block's d and dmin. */
struct gpu_k_factors {
        int32_t scale, min;
        float d, dmin;
};

GPU_MATH struct gpu_k_factors gpu_k_lane_factors(enum gpu_weight_kind kind, uint32_t scale_word, uint32_t min_word,
                                                 uint32_t l) {
        uint32_t shift = 16 + 8 * (l / 4);
        struct gpu_k_factors f = { (int32_t) (int8_t) (scale_word >> shift), 0, gpu_f16_to_f32(scale_word & 0xffffu), 0.0f };
        if (gpu_k_has_mins(kind)) {
                f.min = (int32_t) ((min_word >> shift) & 0xffu);
                f.dmin = gpu_f16_to_f32(min_word & 0xffffu);
        }
        return f;
}

/* The K-quants' products (their own order, not the CPU's: see docs/design.md): the same eight
 * lanes as the other kinds over the same q8_1 activation blocks, lane l adding per block
 *     lane[l] = fmaf((float) (scale_l * isum_l), d_w * d_a, lane[l])
 *     lane[l] = fmaf((float) (min_l * asum_l), -(dmin_w * d_a), lane[l])   (kinds with mins)
 * where isum_l is its exact integer product and asum_l the sum of its four activation quants,
 * then lanes_sum8. Every integer is exact, so the bits depend on the data alone. */
GPU_MATH float gpu_k_lane_step(enum gpu_weight_kind kind, uint32_t word, uint32_t l, uint32_t activation_word,
                               const struct gpu_k_factors *f, float d_a, float lane) {
        int32_t isum = gpu_lane_isum(kind, word, l, activation_word);
        lane = fmaf((float) (f->scale * isum), f->d * d_a, lane);
        if (gpu_k_has_mins(kind))
                lane = fmaf((float) (f->min * gpu_dp4a(0x01010101u, activation_word, 0)), -(f->dmin * d_a), lane);
        return lane;
}

/* lanes_sum8(): ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). */
GPU_MATH float gpu_lanes_sum8(const float l[8]) {
        return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

/* Element i of a repacked quantized row (quants and scales lane-major, nbp blocks), as float
 * (the embedding's gather). */
GPU_MATH float gpu_dequant(enum gpu_weight_kind kind, const uint8_t *quants, const uint32_t *scales, uint32_t nbp,
                           uint32_t i) {
        uint32_t b = i / GPU_QBLOCK, j = i % GPU_QBLOCK, scale = scales[b];
        float d = gpu_f16_to_f32(scale & 0xffffu);
        int32_t q;
        if (gpu_byte_quants(kind)) /* the unsigned kinds' bytes are below 128 */
                q = (int8_t) quants[gpu_lane_major_offset(nbp, b, j)];
        else {
                uint32_t byte = quants[gpu_lane_major_offset(nbp, b, j % 16)];
                q = (int32_t) (j < 16 ? byte & 15 : byte >> 4) - (int32_t) gpu_nibble_bias(kind);
        }
        if (gpu_k_quant(kind)) {
                /* as the file's dequantization rounds: (d * scale) * q, less dmin * min by one fma */
                struct gpu_k_factors f = gpu_k_lane_factors(kind, scale, gpu_k_has_mins(kind) ? scales[nbp + b] : 0, j / 4);
                float ds = f.d * (float) f.scale;
                return gpu_k_has_mins(kind) ? fmaf(ds, (float) q, -(f.dmin * (float) f.min)) : ds * (float) q;
        }
        if (gpu_has_offset(kind))
                return fmaf((float) q, d, gpu_f16_to_f32(scale >> 16));
        return (float) q * d;
}

/* Quant k (0..31) of a 5-bit block whose qh and 16 nibble bytes start at high, as the device
 * holds it: Q5_0's less 16 (a signed byte), Q5_1's as it is. */
GPU_MATH uint8_t gpu_q5_byte(enum gpu_weight_kind kind, const uint8_t *high, uint32_t k) {
        uint32_t qh = (uint32_t) high[0] | (uint32_t) high[1] << 8 | (uint32_t) high[2] << 16 | (uint32_t) high[3] << 24;
        uint32_t nibble = k < 16 ? high[4 + k] & 15u : high[4 + k - 16] >> 4;
        uint32_t q = nibble | ((qh >> k) & 1u) << 4;
        return (uint8_t) (kind == GPU_WEIGHT_Q5_0 ? q - 16u : q);
}

/* Block b (of 32) of a K-quant super-block at sb as the device holds it: quant k of the block
 * (its stored value: gpu_nibble_bias() above the quant for nibbles, Q6_K's less 32) and the
 * integer scale and min of half h. */
struct gpu_k_block {
        int32_t quants[GPU_QBLOCK];
        int32_t scale[2], min[2];
        uint16_t d, dmin;
};

GPU_HOST void gpu_k_block_of(enum gpu_weight_kind kind, const uint8_t *sb, uint32_t b, struct gpu_k_block *out) {
        const struct block_q2_K *q2 = (const struct block_q2_K *) sb;
        const struct block_q3_K *q3 = (const struct block_q3_K *) sb;
        const struct block_q4_K *q4 = (const struct block_q4_K *) sb;
        const struct block_q5_K *q5 = (const struct block_q5_K *) sb;
        const struct block_q6_K *q6 = (const struct block_q6_K *) sb;
        memset(out, 0, sizeof(*out));
        for (uint32_t k = 0; k < GPU_QBLOCK; k++) {
                unsigned e = GPU_QBLOCK * b + k;
                switch (kind) {
                case GPU_WEIGHT_Q2_K: out->quants[k] = (int32_t) k_quant_q2_element(q2, e); break;
                case GPU_WEIGHT_Q3_K: out->quants[k] = k_quant_q3_element(q3, e) + 4; break;
                case GPU_WEIGHT_Q4_K: out->quants[k] = (int32_t) k_quant_q4_element(q4->qs, e); break;
                case GPU_WEIGHT_Q5_K: out->quants[k] = (int32_t) k_quant_q5_element(q5, e); break;
                default: out->quants[k] = (int32_t) k_quant_q6_element(q6, e) - 32; break;
                }
        }
        for (uint32_t h = 0; h < 2; h++) {
                unsigned s16 = 2 * b + h; /* the sub-block of 16 */
                uint8_t scale, min;
                switch (kind) {
                case GPU_WEIGHT_Q2_K:
                        out->scale[h] = q2->scales[s16] & 15;
                        out->min[h] = q2->scales[s16] >> 4;
                        out->d = q2->d, out->dmin = q2->dmin;
                        break;
                case GPU_WEIGHT_Q3_K:
                        out->scale[h] = k_quant_q3_scale(q3->scales, s16) - 32;
                        out->d = q3->d;
                        break;
                case GPU_WEIGHT_Q4_K: case GPU_WEIGHT_Q5_K:
                        k_quant_scale_min(kind == GPU_WEIGHT_Q4_K ? q4->scales : q5->scales, b, &scale, &min);
                        out->scale[h] = scale;
                        out->min[h] = min;
                        out->d = kind == GPU_WEIGHT_Q4_K ? q4->d : q5->d;
                        out->dmin = kind == GPU_WEIGHT_Q4_K ? q4->dmin : q5->dmin;
                        break;
                default:
                        out->scale[h] = q6->scales[s16];
                        out->d = q6->d;
                        break;
                }
        }
}

/* A GGUF row of nb blocks of 32 (Q4_0, Q4_1, Q5_0, Q5_1 or Q8_0 blocks of block_bytes, or
 * K-quant super-blocks of block_bytes, eight blocks each) repacked lane-major into quants
 * (nbp * block_quant_bytes) and scales (gpu_row_scale_words()), the padding zeroed: what the
 * device reads, made on the host when the weights are uploaded. */
GPU_HOST void gpu_repack_row(enum gpu_weight_kind kind, const uint8_t *row, uint32_t block_bytes, uint32_t nb,
                             uint8_t *quants, uint32_t *scales) {
        uint32_t nbp = gpu_padded_blocks(nb), qb = gpu_block_quant_bytes(kind), head = gpu_has_offset(kind) ? 4 : 2;
        bool five_bits = kind == GPU_WEIGHT_Q5_0 || kind == GPU_WEIGHT_Q5_1;
        if (gpu_k_quant(kind)) {
                memset(scales, 0, gpu_row_scale_words(kind, nbp) * sizeof(uint32_t));
                for (uint32_t b = 0; b < nbp; b++) {
                        struct gpu_k_block kb = { { 0 }, { 0, 0 }, { 0, 0 }, 0, 0 };
                        if (b < nb)
                                gpu_k_block_of(kind, row + (size_t) (b / 8) * block_bytes, b % 8, &kb);
                        for (uint32_t k = 0; k < qb; k++)
                                quants[gpu_lane_major_offset(nbp, b, k)] =
                                        gpu_byte_quants(kind) ? (uint8_t) kb.quants[k] : (uint8_t) (kb.quants[k] | kb.quants[k + 16] << 4);
                        if (b >= nb)
                                continue;
                        scales[b] = kb.d | (uint32_t) (uint8_t) kb.scale[0] << 16 | (uint32_t) (uint8_t) kb.scale[1] << 24;
                        if (gpu_k_has_mins(kind))
                                scales[nbp + b] = kb.dmin | (uint32_t) kb.min[0] << 16 | (uint32_t) kb.min[1] << 24;
                }
                return;
        }
        for (uint32_t b = 0; b < nbp; b++) {
                uint32_t d = 0, m = 0;
                for (uint32_t k = 0; k < qb; k++)
                        quants[gpu_lane_major_offset(nbp, b, k)] = 0;
                if (b < nb) {
                        const uint8_t *block = row + (size_t) b * block_bytes;
                        d = (uint32_t) block[0] | (uint32_t) block[1] << 8;
                        if (gpu_has_offset(kind))
                                m = (uint32_t) block[2] | (uint32_t) block[3] << 8;
                        for (uint32_t k = 0; k < qb; k++)
                                quants[gpu_lane_major_offset(nbp, b, k)] = five_bits ? gpu_q5_byte(kind, block + head, k)
                                                                                     : block[head + k];
                }
                scales[b] = d | m << 16;
        }
}

/* A float weight's element (F32, F16 or BF16 rows, as in the file). */
GPU_MATH float gpu_float_weight(enum gpu_weight_kind kind, const void *row, uint32_t i) {
        if (kind == GPU_WEIGHT_F32)
                return ((const float *) row)[i];
        uint32_t h = ((const uint16_t *) row)[i];
        return kind == GPU_WEIGHT_F16 ? gpu_f16_to_f32(h) : gpu_bf16_to_f32(h);
}

/* q8_1 quantization of one block of 32: amax over the block (a warp's max, exact in any
 * order) gives the scale; each element rounds half to even, as the CPU does. */
GPU_MATH float gpu_q8_inverse_scale(float amax) {
        return amax != 0.0f ? 127.0f / amax : 0.0f;
}

GPU_MATH int32_t gpu_q8_quantize(float x, float inverse_scale) {
        return (int32_t) rintf(x * inverse_scale);
}

/* The block's d and s as the products read them: rounded to f16 as block_q8_1 stores them. */
GPU_MATH void gpu_q8_block_scales(float amax, int32_t quant_sum, float *d, float *s) {
        float scale = amax / 127.0f;
        *d = gpu_round_f16(scale);
        *s = gpu_round_f16((float) quant_sum * scale);
}

/* RMSNorm: squares rounded to float, summed in double (each thread's strided share in order,
 * then a fixed tree across the threads), as the CPU does with one running sum. */
GPU_MATH float gpu_rms_scale(double sum_squares, uint32_t n, float eps) {
        return 1.0f / sqrtf((float) (sum_squares / n) + eps);
}

/* exp as the CPU computes it (cpu/exp-poly.h: 2^n times a degree-5 polynomial, the
 * algorithm llama.cpp's softmax and SiLU use), so that attention weights and activations
 * round alike on both backends. */
GPU_MATH float gpu_exp(float x) {
        float z = fmaf(x, 0x1.715476p+0f, 0x1.8p23f);
        float n = z - 0x1.8p23f;
        float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
        if (!(fabsf(n) <= 192.0f))
                return n <= 0.0f || isnan(n) ? 0.0f : INFINITY;
        float u = b * b;
        float p = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                       fmaf(0x1.ffffecp-1f, b, 1.0f));
        return ldexpf(p, (int) n);
}

GPU_MATH float gpu_silu_mul(float gate, float up) {
        return gate / (1.0f + gpu_exp(0.0f - gate)) * up;
}

/* A RoPE pair turned by the angle with cosine c and sine s, one product fused into each
 * sum as the CPU's rope_rows() does. */
GPU_MATH void gpu_rope_pair(float *x0, float *x1, float c, float s) {
        float a = *x0, b = *x1;
        *x0 = fmaf(a, c, -(b * s));
        *x1 = fmaf(a, s, b * c);
}

/* Attention in the CPU's order (cpu/dot.h: llama.cpp's f16 products on x86), keyed to the
 * position: a prompt position's score sums element i into lane i % 16 (its tiled product),
 * a generated token's into lane i % 64 over whole runs of 64 (its vector product), the rest
 * in double; the softmax sums its exps in runs of 16 positions, the runs in double, in order;
 * the values are summed in lanes by position, j % 16 for a prompt position and j % 64 for a
 * generated one, each lane over its positions in order, the 64 lanes folded to 16 rows, and
 * the rows added by gpu_lanes_sum16(). */

/* lanes_sum16(): (l[e] + l[e + 8]), then 4 apart, then 2 apart, then the last pair. */
GPU_MATH float gpu_lanes_sum16(const float l[16]) {
        float a[8], b[4];
        for (int e = 0; e < 8; e++)
                a[e] = l[e + 8] + l[e];
        for (int e = 0; e < 4; e++)
                b[e] = a[e + 4] + a[e];
        return (b[0] + b[2]) + (b[1] + b[3]);
}

/* The four lanes that fold into row e of 64: (lane e + lane 32 + e) + (lane 16 + e + lane 48 + e). */
GPU_MATH float gpu_fold64(float lane_e, float lane_16e, float lane_32e, float lane_48e) {
        return (lane_e + lane_32e) + (lane_16e + lane_48e);
}

/* Eight f16 elements from p (16-byte aligned) as floats: one 16-byte load on the device. */
GPU_MATH void gpu_load8_f16(const uint16_t *p, float out[8]) {
#ifdef __CUDA_ARCH__
        uint4 u = *(const uint4 *) p;
        uint32_t w[4] = { u.x, u.y, u.z, u.w };
        for (int k = 0; k < 4; k++) {
                out[2 * k] = gpu_f16_to_f32(w[k] & 0xffffu);
                out[2 * k + 1] = gpu_f16_to_f32(w[k] >> 16);
        }
#else
        for (int k = 0; k < 8; k++)
                out[k] = gpu_f16_to_f32(p[k]);
#endif
}

/* Lanes 8g .. 8g + 7 of a generated token's score (64 lanes): lane x sums elements x, x + 64,
 * ... below whole in rising order. */
GPU_MATH void gpu_wide_lanes(const uint16_t *key, const float *query, uint32_t whole, int g, float out[8]) {
        float k8[8];
        for (int e = 0; e < 8; e++)
                out[e] = 0.0f;
        for (uint32_t base = 0; base < whole; base += 64) {
                gpu_load8_f16(key + base + 8 * g, k8);
                for (int e = 0; e < 8; e++)
                        out[e] = fmaf(k8[e], query[base + 8 * g + e], out[e]);
        }
}

/* The score's dot product of an f16 key row (hd elements, a multiple of 8, 16-byte aligned)
 * with the query rounded to f16. Each lane takes its elements in rising order, eight
 * elements loaded at a time. */
GPU_MATH float gpu_score_dot(const uint16_t *key, const float *query, uint32_t hd, bool generated) {
        float rows[16], k8[8];
        if (!generated) {
                for (int e = 0; e < 16; e++)
                        rows[e] = 0.0f;
                for (uint32_t base = 0; base < hd; base += 16) {
                        gpu_load8_f16(key + base, k8);
                        for (int e = 0; e < 8; e++)
                                rows[e] = fmaf(k8[e], query[base + e], rows[e]);
                        if (base + 8 < hd) {
                                gpu_load8_f16(key + base + 8, k8);
                                for (int e = 0; e < 8; e++)
                                        rows[8 + e] = fmaf(k8[e], query[base + 8 + e], rows[8 + e]);
                        }
                }
                return gpu_lanes_sum16(rows);
        }
        /* lanes_sum64's rows, e < 8 for h = 0 and 8 + e for h = 1: (lane e + lane 32 + e) +
         * (lane 16 + e + lane 48 + e), each lane's whole sum (eight lanes at a time) first */
        uint32_t whole = hd / 64 * 64;
        for (int h = 0; h < 2; h++) {
                float l0[8], l32[8], l16[8], l48[8];
                gpu_wide_lanes(key, query, whole, h, l0);
                gpu_wide_lanes(key, query, whole, h + 4, l32);
                gpu_wide_lanes(key, query, whole, h + 2, l16);
                gpu_wide_lanes(key, query, whole, h + 6, l48);
                for (int e = 0; e < 8; e++)
                        rows[8 * h + e] = gpu_fold64(l0[e], l16[e], l32[e], l48[e]);
        }
        double sum = (double) gpu_lanes_sum16(rows);
        for (uint32_t i = whole; i < hd; i++)
                sum += (double) (gpu_f16_to_f32(key[i]) * query[i]);
        return (float) sum;
}

/* The lanes positions are summed in for the values: 16 for a prompt position, 64 for a
 * generated token's. */
GPU_MATH uint32_t gpu_value_lanes(bool generated) {
        return generated ? 64 : 16;
}

/* Sums 32 lanes' values v[0..31] the way the device's butterfly of shuffles does: each
 * round, lane l adds lane l ^ offset's value, offset from 16 down to 1. Returns lane 0's sum. */
GPU_MATH float gpu_lane_tree_sum(float v[32]) {
        for (uint32_t offset = 16; offset > 0; offset /= 2) {
                float next[32];
                for (uint32_t l = 0; l < 32; l++)
                        next[l] = v[l] + v[l ^ offset];
                for (uint32_t l = 0; l < 32; l++)
                        v[l] = next[l];
        }
        return v[0];
}
