/* SPDX-License-Identifier: MIT */
#include "cuda-kernels.h"

#include <math.h>

#define FULL_MASK 0xffffffffu
#define ROW_THREADS 256   /* norms, quantization, RoPE: one block of threads per token */
#define MATMUL_WARPS 4

static uint32_t ceil_div(uint32_t a, uint32_t b) {
        return (a + b - 1) / b;
}

/* Where token t's activation row starts: quants and scales (gpu-math.h's layout). */
__device__ static size_t act_quants_offset(uint32_t width, size_t t) {
        return t * gpu_padded_blocks(width / GPU_QBLOCK) * GPU_QBLOCK;
}

__device__ static size_t act_scales_offset(uint32_t width, size_t t) {
        return t * 2 * gpu_padded_blocks(width / GPU_QBLOCK);
}

/* q8_1 blocks of a row of n floats (n a multiple of 32) into a lane-major activation row,
 * one warp per block in turn. */
__device__ static void quantize_blocks(const float *row, uint32_t n, int8_t *q, float *ds) {
        uint32_t lane = threadIdx.x % 32, n_warps = blockDim.x / 32, nbp = gpu_padded_blocks(n / GPU_QBLOCK);
        for (uint32_t b = threadIdx.x / 32; b < n / GPU_QBLOCK; b += n_warps) {
                float v = row[b * GPU_QBLOCK + lane], amax = fabsf(v);
                for (int offset = 16; offset > 0; offset /= 2)
                        amax = fmaxf(amax, __shfl_xor_sync(FULL_MASK, amax, offset));
                int32_t qi = gpu_q8_quantize(v, gpu_q8_inverse_scale(amax)), sum = qi;
                q[gpu_lane_major_offset(nbp, b, lane)] = (int8_t) qi;
                for (int offset = 16; offset > 0; offset /= 2)
                        sum += __shfl_xor_sync(FULL_MASK, sum, offset);
                if (lane == 0)
                        gpu_q8_block_scales(amax, sum, &ds[b], &ds[nbp + b]);
        }
}

__global__ static void k_embed(struct gpu_weight w, const int32_t *tokens, float *x) {
        uint32_t t = blockIdx.x, n = w.n_cols;
        size_t row = (size_t) tokens[t];
        for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
                float v;
                uint32_t nbp = gpu_padded_blocks(n / GPU_QBLOCK);
                if (w.kind <= GPU_WEIGHT_Q8_0)
                        v = gpu_dequant(w.kind, w.quants + row * nbp * gpu_block_quant_bytes(w.kind), w.scales + row * nbp, nbp, i);
                else
                        v = gpu_float_weight(w.kind, (const uint8_t *) w.rows + row * n * (w.kind == GPU_WEIGHT_F32 ? 4 : 2), i);
                x[(size_t) t * n + i] = v;
        }
}

cudaError_t gpu_embed(cudaStream_t s, const struct gpu_weight *w, const struct gpu_step *step, float *x) {
        k_embed<<<step->n_tokens, ROW_THREADS, 0, s>>>(*w, step->tokens, x);
        return cudaGetLastError();
}

/* Squares in double, each thread's share in order, then a fixed tree over the threads. */
__global__ static void k_rms_norm_quantize(const float *x, const int32_t *rows, uint32_t n, const float *weight,
                                           float eps, float *ox, int8_t *oq, float *ods) {
        __shared__ double partial[ROW_THREADS];
        uint32_t r = blockIdx.x, tid = threadIdx.x;
        const float *xr = x + (size_t) (rows ? (uint32_t) rows[r] : r) * n;
        double sum = 0.0;
        for (uint32_t i = tid; i < n; i += ROW_THREADS) {
                float v = xr[i];
                sum += (double) (v * v);
        }
        partial[tid] = sum;
        __syncthreads();
        for (uint32_t stride = ROW_THREADS / 2; stride > 0; stride /= 2) {
                if (tid < stride)
                        partial[tid] += partial[tid + stride];
                __syncthreads();
        }
        float scale = gpu_rms_scale(partial[0], n, eps);
        float *out = ox + (size_t) r * n;
        for (uint32_t i = tid; i < n; i += ROW_THREADS)
                out[i] = xr[i] * scale * weight[i];
        __syncthreads();
        quantize_blocks(out, n, oq + act_quants_offset(n, r), ods + act_scales_offset(n, r));
}

cudaError_t gpu_rms_norm_quantize(cudaStream_t s, const float *x, const int32_t *rows, uint32_t n, const float *weight,
                                  float eps, const struct gpu_activations *out) {
        k_rms_norm_quantize<<<n, ROW_THREADS, 0, s>>>(x, rows, out->width, weight, eps, out->x, out->q, out->ds);
        return cudaGetLastError();
}

__global__ static void k_quantize(const float *x, uint32_t width, int8_t *q, float *ds) {
        size_t t = blockIdx.x;
        quantize_blocks(x + t * width, width, q + act_quants_offset(width, t), ds + act_scales_offset(width, t));
}

cudaError_t gpu_quantize(cudaStream_t s, uint32_t n, const struct gpu_activations *a) {
        k_quantize<<<n, ROW_THREADS, 0, s>>>(a->x, a->width, a->q, a->ds);
        return cudaGetLastError();
}

__global__ static void k_swiglu_quantize(const float *gate, const float *up, uint32_t width, float *h, int8_t *q,
                                         float *ds) {
        size_t t = blockIdx.x, base = t * width;
        for (uint32_t i = threadIdx.x; i < width; i += blockDim.x)
                h[base + i] = gpu_silu_mul(gate[base + i], up[base + i]);
        __syncthreads();
        quantize_blocks(h + base, width, q + act_quants_offset(width, t), ds + act_scales_offset(width, t));
}

cudaError_t gpu_swiglu_quantize(cudaStream_t s, uint32_t n, const float *gate, const float *up,
                                const struct gpu_activations *a) {
        k_swiglu_quantize<<<n, ROW_THREADS, 0, s>>>(gate, up, a->width, a->x, a->q, a->ds);
        return cudaGetLastError();
}

/* Quantized weights in the CPU's order (gpu-math.h): GPU_ROW_LANES threads per row, thread
 * l keeping lane l's sums over the blocks for TT tokens, four blocks' words loaded at once
 * from the lane-major rows; a warp holds 4 rows. With logits_product, the lanes' integer sums
 * of a block are added first (exactly) and each thread keeps the row's single accumulator. */
#define ROWS_PER_WARP (32 / GPU_ROW_LANES)
template <int TT>
__global__ static void __launch_bounds__(MATMUL_WARPS * 32)
        k_matmul_q(struct gpu_weight w, const int8_t *xq, const float *xds, uint32_t width, uint32_t n, float *out,
                   uint32_t out_stride, bool accumulate, bool logits_product) {
        uint32_t lane = threadIdx.x % 32, l = lane % GPU_ROW_LANES;
        uint32_t row = (blockIdx.x * MATMUL_WARPS + threadIdx.x / 32) * ROWS_PER_WARP + lane / GPU_ROW_LANES;
        uint32_t nb = w.n_cols / GPU_QBLOCK, nbp = gpu_padded_blocks(nb), t0 = blockIdx.y * TT;
        uint32_t words_per_block = gpu_block_quant_bytes(w.kind) / 4;
        uint32_t group = 0xffu << (lane / GPU_ROW_LANES * GPU_ROW_LANES);
        float acc[TT], off[TT];
        for (int t = 0; t < TT; t++)
                acc[t] = off[t] = 0.0f;
        if (row < w.n_rows) {
                const uint32_t *wq = (const uint32_t *) w.quants + ((size_t) row * words_per_block + gpu_lane_word(w.kind, l)) * nbp;
                const uint32_t *ws = w.scales + (size_t) row * nbp;
                for (uint32_t b4 = 0; b4 < nb; b4 += 4) {
                        uint4 wv = *(const uint4 *) (wq + b4), sv = *(const uint4 *) (ws + b4);
                        uint32_t words[4] = { wv.x, wv.y, wv.z, wv.w }, scales[4] = { sv.x, sv.y, sv.z, sv.w };
#pragma unroll
                        for (int t = 0; t < TT; t++) {
                                if (t0 + t >= n)
                                        break;
                                size_t tok = t0 + t;
                                const uint32_t *aq = (const uint32_t *) (xq + act_quants_offset(width, tok)) + (size_t) l * nbp;
                                const float *ad = xds + act_scales_offset(width, tok);
                                uint4 av = *(const uint4 *) (aq + b4);
                                float4 dv = *(const float4 *) (ad + b4), s4 = *(const float4 *) (ad + nbp + b4);
                                uint32_t act[4] = { av.x, av.y, av.z, av.w };
                                float d[4] = { dv.x, dv.y, dv.z, dv.w }, sums[4] = { s4.x, s4.y, s4.z, s4.w };
#pragma unroll
                                for (uint32_t k = 0; k < 4; k++) {
                                        if (b4 + k >= nb)
                                                break;
                                        float wd = gpu_f16_to_f32(scales[k] & 0xffffu);
                                        int32_t isum = gpu_lane_isum(w.kind, words[k], l, act[k]);
                                        if (logits_product)
                                                for (int offset = GPU_ROW_LANES / 2; offset > 0; offset /= 2)
                                                        isum += __shfl_xor_sync(group, isum, offset, GPU_ROW_LANES);
                                        acc[t] = fmaf((float) isum, wd * d[k], acc[t]);
                                        if (w.kind == GPU_WEIGHT_Q4_1)
                                                off[t] = fmaf(gpu_f16_to_f32(scales[k] >> 16), sums[k], off[t]);
                                }
                        }
                }
        }
        if (!logits_product)
#pragma unroll
                for (int t = 0; t < TT; t++)
                        for (int offset = GPU_ROW_LANES / 2; offset > 0; offset /= 2)
                                acc[t] += __shfl_xor_sync(group, acc[t], offset, GPU_ROW_LANES);
        if (row >= w.n_rows || l != 0)
                return;
        for (int t = 0; t < TT && t0 + t < n; t++) {
                float v = w.kind == GPU_WEIGHT_Q4_1 && !logits_product ? acc[t] + off[t] : acc[t];
                float *o = &out[(size_t) (t0 + t) * out_stride + row];
                *o = accumulate ? *o + v : v;
        }
}

/* Float weights: one warp per row, lane l taking elements l, l + 32, ... in order. */
template <int TT>
__global__ static void __launch_bounds__(MATMUL_WARPS * 32)
        k_matmul_f(struct gpu_weight w, const float *x, uint32_t width, uint32_t n, float *out, uint32_t out_stride,
                   bool accumulate) {
        uint32_t lane = threadIdx.x % 32, row = blockIdx.x * MATMUL_WARPS + threadIdx.x / 32, t0 = blockIdx.y * TT;
        size_t elem = w.kind == GPU_WEIGHT_F32 ? 4 : 2;
        float acc[TT];
        for (int t = 0; t < TT; t++)
                acc[t] = 0.0f;
        if (row < w.n_rows) {
                const uint8_t *wr = (const uint8_t *) w.rows + (size_t) row * w.n_cols * elem;
                for (uint32_t i = lane; i < w.n_cols; i += 32) {
                        float wi = gpu_float_weight(w.kind, wr, i);
#pragma unroll
                        for (int t = 0; t < TT; t++)
                                if (t0 + t < n)
                                        acc[t] = fmaf(wi, x[(size_t) (t0 + t) * width + i], acc[t]);
                }
        }
#pragma unroll
        for (int t = 0; t < TT; t++)
                for (int offset = 16; offset > 0; offset /= 2)
                        acc[t] += __shfl_xor_sync(FULL_MASK, acc[t], offset);
        if (row >= w.n_rows || lane != 0)
                return;
        for (int t = 0; t < TT && t0 + t < n; t++) {
                float *o = &out[(size_t) (t0 + t) * out_stride + row];
                *o = accumulate ? *o + acc[t] : acc[t];
        }
}

template <int TT>
static void launch_matmul(cudaStream_t s, const struct gpu_weight *w, const struct gpu_activations *a, uint32_t n,
                          float *out, uint32_t out_stride, bool accumulate, bool logits_product) {
        if (w->kind <= GPU_WEIGHT_Q8_0) {
                dim3 grid(ceil_div(w->n_rows, MATMUL_WARPS * ROWS_PER_WARP), ceil_div(n, TT));
                k_matmul_q<TT><<<grid, MATMUL_WARPS * 32, 0, s>>>(*w, a->q, a->ds, a->width, n, out, out_stride, accumulate,
                                                                  logits_product);
        } else {
                dim3 grid(ceil_div(w->n_rows, MATMUL_WARPS), ceil_div(n, TT));
                k_matmul_f<TT><<<grid, MATMUL_WARPS * 32, 0, s>>>(*w, a->x, a->width, n, out, out_stride, accumulate);
        }
}

cudaError_t gpu_matmul(cudaStream_t s, const struct gpu_weight *w, const struct gpu_activations *a, uint32_t n,
                       float *out, uint32_t out_stride, bool accumulate, bool logits_product) {
        logits_product = logits_product && w->kind == GPU_WEIGHT_Q8_0;
        if (n == 1)
                launch_matmul<1>(s, w, a, n, out, out_stride, accumulate, logits_product);
        else if (n == 2)
                launch_matmul<2>(s, w, a, n, out, out_stride, accumulate, logits_product);
        else if (n <= 4)
                launch_matmul<4>(s, w, a, n, out, out_stride, accumulate, logits_product);
        else
                launch_matmul<8>(s, w, a, n, out, out_stride, accumulate, logits_product);
        return cudaGetLastError();
}

__device__ static size_t kv_slot(const struct gpu_kv_layer *kv, const struct gpu_step *st, int32_t seq, uint32_t pos,
                                 uint32_t kv_head) {
        uint32_t block = (uint32_t) st->block_tables[(size_t) seq * st->max_blocks + pos / kv->block_size];
        return (((size_t) block * kv->n_head_kv + kv_head) * kv->block_size + pos % kv->block_size) * kv->head_dim;
}

__global__ static void k_rope_store_kv(struct gpu_step st, float *q, float *k, const float *v, uint32_t n_head,
                                       uint32_t rope_dim, const float *rope_cos, const float *rope_sin,
                                       struct gpu_kv_layer kv) {
        uint32_t t = blockIdx.x, hd = kv.head_dim, half = hd / 2, q_pairs = n_head * half;
        uint32_t pos = (uint32_t) st.positions[t];
        int32_t seq = st.seq_ids[t];
        float *qt = q + (size_t) t * n_head * hd, *kt = k + (size_t) t * kv.n_head_kv * hd;
        const float *vt = v + (size_t) t * kv.n_head_kv * hd;
        for (uint32_t p = threadIdx.x; p < q_pairs + kv.n_head_kv * half; p += blockDim.x) {
                bool is_q = p < q_pairs;
                uint32_t head = (is_q ? p : p - q_pairs) / half, i = (is_q ? p : p - q_pairs) % half;
                float *x = (is_q ? qt : kt) + (size_t) head * hd + 2 * i;
                if (2 * i < rope_dim) {
                        size_t at = (size_t) pos * (rope_dim / 2) + i;
                        gpu_rope_pair(&x[0], &x[1], rope_cos[at], rope_sin[at]);
                }
                if (!is_q) {
                        size_t slot = kv_slot(&kv, &st, seq, pos, head) + 2 * i;
                        const float *vx = vt + (size_t) head * hd + 2 * i;
                        kv.k[slot] = (uint16_t) gpu_f32_to_f16(x[0]);
                        kv.k[slot + 1] = (uint16_t) gpu_f32_to_f16(x[1]);
                        kv.v[slot] = (uint16_t) gpu_f32_to_f16(vx[0]);
                        kv.v[slot + 1] = (uint16_t) gpu_f32_to_f16(vx[1]);
                }
        }
}

cudaError_t gpu_rope_store_kv(cudaStream_t s, const struct gpu_step *step, float *q, float *k, const float *v,
                              uint32_t n_head, uint32_t rope_dim, const float *rope_cos, const float *rope_sin,
                              const struct gpu_kv_layer *kv) {
        k_rope_store_kv<<<step->n_tokens, ROW_THREADS / 2, 0, s>>>(*step, q, k, v, n_head, rope_dim, rope_cos, rope_sin, *kv);
        return cudaGetLastError();
}

/* Attention as the CPU's reference computes it: the scores of the query (rounded to f16, as
 * it meets f16 keys) with every key up to the token's position, their softmax with its
 * weights rounded to f16 (they meet f16 values), then the weighted sum of the values. One
 * block of ATTN_THREADS threads per (query head, token): thread i scores positions i,
 * i + ATTN_THREADS, ... (recomputed in each of the passes for the maximum, the sum and the
 * weights rather than stored), the maximum and the sum go through a fixed tree, and the
 * values are summed ATTN_CHUNK positions at a time, the chunk's weights and value rows in
 * shared memory: thread i takes dimension i % head_dim (and every 128th after it) over the
 * positions of its group i / head_dim, in order, and the groups are added in order at the
 * end. Every order depends on the position and the head size alone. */
#define ATTN_THREADS 128
#define ATTN_CHUNK 1024

__device__ static float attention_score(const uint16_t *key_row, const float *query, uint32_t head_dim, float scale) {
        const uint4 *key = (const uint4 *) key_row;
        float dot = 0.0f;
        for (uint32_t d8 = 0; d8 < head_dim / 8; d8++) {
                uint4 u = key[d8];
                uint32_t words[4] = { u.x, u.y, u.z, u.w };
#pragma unroll
                for (int w = 0; w < 4; w++) {
                        dot = fmaf(query[d8 * 8 + 2 * w], gpu_f16_to_f32(words[w] & 0xffffu), dot);
                        dot = fmaf(query[d8 * 8 + 2 * w + 1], gpu_f16_to_f32(words[w] >> 16), dot);
                }
        }
        return dot * scale;
}

/* The sum (or, with take_max, the maximum) of each thread's v by a fixed tree; every thread
 * gets it. */
template <typename T>
__device__ static T block_reduce(T v, T *scratch, bool take_max) {
        uint32_t i = threadIdx.x;
        scratch[i] = v;
        __syncthreads();
        for (uint32_t stride = ATTN_THREADS / 2; stride > 0; stride /= 2) {
                if (i < stride)
                        scratch[i] = take_max ? (scratch[i] > scratch[i + stride] ? scratch[i] : scratch[i + stride])
                                              : scratch[i] + scratch[i + stride];
                __syncthreads();
        }
        T r = scratch[0];
        __syncthreads();
        return r;
}

__global__ static void __launch_bounds__(ATTN_THREADS)
        k_attention(struct gpu_step st, const float *q, uint32_t n_head, float scale, struct gpu_kv_layer kv, float *out) {
        __shared__ float query[256], weights[ATTN_CHUNK];
        __shared__ size_t rows[ATTN_CHUNK];
        __shared__ double scratch[ATTN_THREADS];
        __shared__ float partial[ATTN_THREADS * 2];
        uint32_t h = blockIdx.x, t = blockIdx.y, i = threadIdx.x, hd = kv.head_dim;
        uint32_t kv_head = h / (n_head / kv.n_head_kv), pos = (uint32_t) st.positions[t];
        int32_t seq = st.seq_ids[t];
        const float *qh = q + ((size_t) t * n_head + h) * hd;
        for (uint32_t d = i; d < hd; d += ATTN_THREADS)
                query[d] = gpu_round_f16(qh[d]);
        __syncthreads();

        float max = -INFINITY;
        for (uint32_t j = i; j <= pos; j += ATTN_THREADS)
                max = fmaxf(max, attention_score(kv.k + kv_slot(&kv, &st, seq, j, kv_head), query, hd, scale));
        max = (float) block_reduce<double>((double) max, scratch, true);
        double sum = 0.0;
        for (uint32_t j = i; j <= pos; j += ATTN_THREADS)
                sum += (double) gpu_exp(attention_score(kv.k + kv_slot(&kv, &st, seq, j, kv_head), query, hd, scale) - max);
        float inverse = (float) (1.0 / block_reduce<double>(sum, scratch, false));

        /* thread i: group i / hd of the positions, dimensions i % hd, + 128, ... */
        uint32_t n_groups = hd < ATTN_THREADS ? ATTN_THREADS / hd : 1, group = i / hd, d0 = i % hd;
        float acc[2] = { 0.0f, 0.0f };
        for (uint32_t c0 = 0; c0 <= pos; c0 += ATTN_CHUNK) {
                uint32_t n = pos + 1 - c0 < ATTN_CHUNK ? pos + 1 - c0 : ATTN_CHUNK;
                for (uint32_t j = i; j < n; j += ATTN_THREADS) {
                        size_t slot = kv_slot(&kv, &st, seq, c0 + j, kv_head);
                        weights[j] = gpu_round_f16(gpu_exp(attention_score(kv.k + slot, query, hd, scale) - max) * inverse);
                        rows[j] = slot;
                }
                __syncthreads();
                if (group < n_groups)
#pragma unroll 4
                        for (uint32_t j = group; j < n; j += n_groups) {
                                const uint16_t *value = kv.v + rows[j];
                                acc[0] = fmaf(gpu_f16_to_f32(value[d0]), weights[j], acc[0]);
                                if (hd > ATTN_THREADS)
                                        acc[1] = fmaf(gpu_f16_to_f32(value[d0 + ATTN_THREADS]), weights[j], acc[1]);
                        }
                __syncthreads();
        }
        partial[i] = acc[0];
        partial[ATTN_THREADS + i] = acc[1];
        __syncthreads();
        float *o = out + ((size_t) t * n_head + h) * hd;
        for (uint32_t d = i; d < hd; d += ATTN_THREADS) {
                /* dimension d: the groups' sums in order (one group for heads of 128 and more) */
                uint32_t k = d / ATTN_THREADS, e = d % ATTN_THREADS;
                float v = partial[k * ATTN_THREADS + e];
                for (uint32_t g = 1; g < n_groups; g++)
                        v += partial[g * hd + e];
                o[d] = v;
        }
}

cudaError_t gpu_attention(cudaStream_t s, const struct gpu_step *step, const float *q, uint32_t n_head, float scale,
                          const struct gpu_kv_layer *kv, float *out) {
        dim3 grid(n_head, step->n_tokens);
        /* a head size that divides ATTN_THREADS (or is a multiple of it, up to 256) */
        uint32_t hd = kv->head_dim;
        if (hd % 8 || hd > 256 || (hd < ATTN_THREADS ? ATTN_THREADS % hd : hd % ATTN_THREADS))
                return cudaErrorInvalidValue;
        k_attention<<<grid, ATTN_THREADS, 0, s>>>(*step, q, n_head, scale, *kv, out);
        return cudaGetLastError();
}
