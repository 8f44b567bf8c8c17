/* SPDX-License-Identifier: MIT */
#include "cuda-kernels.h"

#include <math.h>

#define FULL_MASK 0xffffffffu
#define ROW_THREADS 256   /* norms, quantization, RoPE: one block of threads per token */
#define MATMUL_WARPS 4

static uint32_t ceil_div(uint32_t a, uint32_t b) {
        return (a + b - 1) / b;
}

/* q8_1 blocks of a row of n floats (n a multiple of 32), one warp per block in turn. */
__device__ static void quantize_blocks(const float *row, uint32_t n, int8_t *q, float *ds) {
        uint32_t lane = threadIdx.x % 32, n_warps = blockDim.x / 32;
        for (uint32_t b = threadIdx.x / 32; b < n / GPU_QBLOCK; b += n_warps) {
                float v = row[b * GPU_QBLOCK + lane], amax = fabsf(v);
                for (int offset = 16; offset > 0; offset /= 2)
                        amax = fmaxf(amax, __shfl_xor_sync(FULL_MASK, amax, offset));
                int32_t qi = gpu_q8_quantize(v, gpu_q8_inverse_scale(amax)), sum = qi;
                q[b * GPU_QBLOCK + lane] = (int8_t) qi;
                for (int offset = 16; offset > 0; offset /= 2)
                        sum += __shfl_xor_sync(FULL_MASK, sum, offset);
                if (lane == 0)
                        gpu_q8_block_scales(amax, sum, &ds[2 * b], &ds[2 * b + 1]);
        }
}

__global__ static void k_embed(struct gpu_weight w, const int32_t *tokens, float *x) {
        uint32_t t = blockIdx.x, n = w.n_cols;
        size_t row = (size_t) tokens[t];
        for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
                float v;
                if (w.kind <= GPU_WEIGHT_Q8_0)
                        v = gpu_dequant(w.kind, w.quants + row * (n / GPU_QBLOCK) * gpu_block_quant_bytes(w.kind),
                                        w.scales + row * (n / GPU_QBLOCK), i);
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
        quantize_blocks(out, n, oq + (size_t) r * n, ods + (size_t) r * (n / GPU_QBLOCK) * 2);
}

cudaError_t gpu_rms_norm_quantize(cudaStream_t s, const float *x, const int32_t *rows, uint32_t n, const float *weight,
                                  float eps, const struct gpu_activations *out) {
        k_rms_norm_quantize<<<n, ROW_THREADS, 0, s>>>(x, rows, out->width, weight, eps, out->x, out->q, out->ds);
        return cudaGetLastError();
}

__global__ static void k_quantize(const float *x, uint32_t width, int8_t *q, float *ds) {
        size_t t = blockIdx.x;
        quantize_blocks(x + t * width, width, q + t * width, ds + t * (width / GPU_QBLOCK) * 2);
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
        quantize_blocks(h + base, width, q + base, ds + t * (width / GPU_QBLOCK) * 2);
}

cudaError_t gpu_swiglu_quantize(cudaStream_t s, uint32_t n, const float *gate, const float *up,
                                const struct gpu_activations *a) {
        k_swiglu_quantize<<<n, ROW_THREADS, 0, s>>>(gate, up, a->width, a->x, a->q, a->ds);
        return cudaGetLastError();
}

/* Quantized weights: a row's blocks are shared by gpu_lanes_per_row() lanes, each taking
 * blocks sub, sub + lanes, ... in order; a warp holds 32 / lanes rows and TT tokens, each
 * token's sums the same whatever TT is. */
template <int TT>
__global__ static void __launch_bounds__(MATMUL_WARPS * 32)
        k_matmul_q(struct gpu_weight w, const int8_t *xq, const float *xds, uint32_t width, uint32_t n, float *out,
                   uint32_t out_stride, bool accumulate) {
        uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
        uint32_t nb = w.n_cols / GPU_QBLOCK, lanes = gpu_lanes_per_row(nb);
        uint32_t row = (blockIdx.x * MATMUL_WARPS + warp) * (32 / lanes) + lane / lanes, sub = lane % lanes;
        uint32_t t0 = blockIdx.y * TT, qb = gpu_block_quant_bytes(w.kind);
        float acc[TT];
        for (int t = 0; t < TT; t++)
                acc[t] = 0.0f;
        if (row < w.n_rows) {
                const uint8_t *wq = w.quants + (size_t) row * nb * qb;
                const uint32_t *ws = w.scales + (size_t) row * nb;
                for (uint32_t b = sub; b < nb; b += lanes) {
                        uint32_t wv[8];
                        const uint4 *src = (const uint4 *) (wq + (size_t) b * qb);
                        uint4 w0 = src[0];
                        wv[0] = w0.x, wv[1] = w0.y, wv[2] = w0.z, wv[3] = w0.w;
                        if (qb == 32) {
                                uint4 w1 = src[1];
                                wv[4] = w1.x, wv[5] = w1.y, wv[6] = w1.z, wv[7] = w1.w;
                        }
                        uint32_t scale = ws[b];
#pragma unroll
                        for (int t = 0; t < TT; t++) {
                                if (t0 + t >= n)
                                        break;
                                size_t tok = t0 + t;
                                const uint4 *a = (const uint4 *) (xq + tok * width + (size_t) b * GPU_QBLOCK);
                                uint4 a0 = a[0], a1 = a[1];
                                uint32_t av[8] = { a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w };
                                float2 d = ((const float2 *) xds)[tok * (width / GPU_QBLOCK) + b];
                                acc[t] = gpu_block_dot(w.kind, wv, scale, av, d.x, d.y, acc[t]);
                        }
                }
        }
#pragma unroll
        for (int t = 0; t < TT; t++)
                for (uint32_t offset = lanes / 2; offset > 0; offset /= 2)
                        acc[t] += __shfl_xor_sync(FULL_MASK, acc[t], offset);
        if (row >= w.n_rows || sub != 0)
                return;
        for (int t = 0; t < TT && t0 + t < n; t++) {
                float *o = &out[(size_t) (t0 + t) * out_stride + row];
                *o = accumulate ? *o + acc[t] : acc[t];
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
                          float *out, uint32_t out_stride, bool accumulate) {
        if (w->kind <= GPU_WEIGHT_Q8_0) {
                uint32_t rows_per_block = MATMUL_WARPS * (32 / gpu_lanes_per_row(w->n_cols / GPU_QBLOCK));
                dim3 grid(ceil_div(w->n_rows, rows_per_block), ceil_div(n, TT));
                k_matmul_q<TT><<<grid, MATMUL_WARPS * 32, 0, s>>>(*w, a->q, a->ds, a->width, n, out, out_stride, accumulate);
        } else {
                dim3 grid(ceil_div(w->n_rows, MATMUL_WARPS), ceil_div(n, TT));
                k_matmul_f<TT><<<grid, MATMUL_WARPS * 32, 0, s>>>(*w, a->x, a->width, n, out, out_stride, accumulate);
        }
}

cudaError_t gpu_matmul(cudaStream_t s, const struct gpu_weight *w, const struct gpu_activations *a, uint32_t n,
                       float *out, uint32_t out_stride, bool accumulate) {
        if (n == 1)
                launch_matmul<1>(s, w, a, n, out, out_stride, accumulate);
        else if (n == 2)
                launch_matmul<2>(s, w, a, n, out, out_stride, accumulate);
        else if (n <= 4)
                launch_matmul<4>(s, w, a, n, out, out_stride, accumulate);
        else
                launch_matmul<8>(s, w, a, n, out, out_stride, accumulate);
        return cudaGetLastError();
}

__device__ static size_t kv_slot(const struct gpu_kv_layer *kv, const struct gpu_step *st, int32_t seq, uint32_t pos,
                                 uint32_t kv_head) {
        uint32_t block = (uint32_t) st->block_tables[(size_t) seq * st->max_blocks + pos / kv->block_size];
        return (((size_t) block * kv->n_head_kv + kv_head) * kv->block_size + pos % kv->block_size) * kv->head_dim;
}

__global__ static void k_rope_store_kv(struct gpu_step st, float *q, float *k, const float *v, uint32_t n_head,
                                       uint32_t rope_dim, float theta_scale, struct gpu_kv_layer kv) {
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
                        float angle = gpu_rope_angle((int32_t) pos, i, theta_scale);
                        gpu_rope_pair(&x[0], &x[1], cosf(angle), sinf(angle));
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
                              uint32_t n_head, uint32_t rope_dim, float theta_scale, const struct gpu_kv_layer *kv) {
        k_rope_store_kv<<<step->n_tokens, ROW_THREADS / 2, 0, s>>>(*step, q, k, v, n_head, rope_dim, theta_scale, *kv);
        return cudaGetLastError();
}

/* One warp per (query head, token), as the CPU's reference computes attention: the scores
 * of the query (rounded to f16, as it meets f16 keys) with every key up to the token's
 * position, their softmax with its weights rounded to f16 (they meet f16 values), then the
 * weighted sum of the values. Lane j takes positions j, j + 32, ... for the scores, which
 * are recomputed in each of the three passes (maximum, sum, weights) rather than stored;
 * lane l sums dimensions l, l + 32, ... of the values over the positions in order. The
 * order depends on the position alone. */
__device__ static float attention_score(const struct gpu_kv_layer *kv, const struct gpu_step *st, int32_t seq,
                                        uint32_t j, uint32_t kv_head, const float *query, float scale) {
        const uint4 *key = (const uint4 *) (kv->k + kv_slot(kv, st, seq, j, kv_head));
        float dot = 0.0f;
        for (uint32_t d8 = 0; d8 < kv->head_dim / 8; d8++) {
                uint4 u = key[d8];
                uint32_t words[4] = { u.x, u.y, u.z, u.w };
                for (int w = 0; w < 4; w++) {
                        dot = fmaf(query[d8 * 8 + 2 * w], gpu_f16_to_f32(words[w] & 0xffffu), dot);
                        dot = fmaf(query[d8 * 8 + 2 * w + 1], gpu_f16_to_f32(words[w] >> 16), dot);
                }
        }
        return dot * scale;
}

template <int HPL>
__global__ static void __launch_bounds__(32)
        k_attention(struct gpu_step st, const float *q, uint32_t n_head, float scale, struct gpu_kv_layer kv, float *out) {
        __shared__ float query[HPL * 32];
        uint32_t h = blockIdx.x, t = blockIdx.y, lane = threadIdx.x, hd = kv.head_dim;
        uint32_t kv_head = h / (n_head / kv.n_head_kv), pos = (uint32_t) st.positions[t];
        int32_t seq = st.seq_ids[t];
        const float *qh = q + ((size_t) t * n_head + h) * hd;
        for (int i = 0; i < HPL; i++)
                if (lane + 32 * i < hd)
                        query[lane + 32 * i] = gpu_round_f16(qh[lane + 32 * i]);
        __syncwarp();
        float max = -INFINITY;
        for (uint32_t j = lane; j <= pos; j += 32)
                max = fmaxf(max, attention_score(&kv, &st, seq, j, kv_head, query, scale));
        for (int offset = 16; offset > 0; offset /= 2)
                max = fmaxf(max, __shfl_xor_sync(FULL_MASK, max, offset));
        double sum = 0.0;
        for (uint32_t j = lane; j <= pos; j += 32)
                sum += (double) gpu_exp(attention_score(&kv, &st, seq, j, kv_head, query, scale) - max);
        for (int offset = 16; offset > 0; offset /= 2)
                sum += __shfl_xor_sync(FULL_MASK, sum, offset);
        float inverse = (float) (1.0 / sum), acc[HPL];
        for (int i = 0; i < HPL; i++)
                acc[i] = 0.0f;
        for (uint32_t c0 = 0; c0 <= pos; c0 += 32) {
                uint32_t j = c0 + lane;
                float weight = 0.0f;
                if (j <= pos)
                        weight = gpu_round_f16(gpu_exp(attention_score(&kv, &st, seq, j, kv_head, query, scale) - max) * inverse);
                uint32_t n_valid = pos - c0 + 1 < 32 ? pos - c0 + 1 : 32;
                for (uint32_t jj = 0; jj < n_valid; jj++) {
                        float wj = __shfl_sync(FULL_MASK, weight, jj);
                        const uint16_t *value = kv.v + kv_slot(&kv, &st, seq, c0 + jj, kv_head);
                        for (int i = 0; i < HPL; i++)
                                if (lane + 32 * i < hd)
                                        acc[i] = fmaf(gpu_f16_to_f32(value[lane + 32 * i]), wj, acc[i]);
                }
        }
        float *o = out + ((size_t) t * n_head + h) * hd;
        for (int i = 0; i < HPL; i++)
                if (lane + 32 * i < hd)
                        o[lane + 32 * i] = acc[i];
}

cudaError_t gpu_attention(cudaStream_t s, const struct gpu_step *step, const float *q, uint32_t n_head, float scale,
                          const struct gpu_kv_layer *kv, float *out) {
        dim3 grid(n_head, step->n_tokens);
        if (kv->head_dim % 8 || kv->head_dim > 256)
                return cudaErrorInvalidValue;
        if (kv->head_dim <= 32)
                k_attention<1><<<grid, 32, 0, s>>>(*step, q, n_head, scale, *kv, out);
        else if (kv->head_dim <= 64)
                k_attention<2><<<grid, 32, 0, s>>>(*step, q, n_head, scale, *kv, out);
        else if (kv->head_dim <= 128)
                k_attention<4><<<grid, 32, 0, s>>>(*step, q, n_head, scale, *kv, out);
        else
                k_attention<8><<<grid, 32, 0, s>>>(*step, q, n_head, scale, *kv, out);
        return cudaGetLastError();
}
