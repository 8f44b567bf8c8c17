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
                        v = gpu_dequant(w.kind, w.quants + row * nbp * gpu_block_quant_bytes(w.kind),
                                        w.scales + row * gpu_row_scale_words(w.kind, nbp), nbp, i);
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

__global__ static void k_swiglu(size_t count, const float *gate, const float *up, float *out) {
        for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t) gridDim.x * blockDim.x)
                out[i] = gpu_silu_mul(gate[i], up[i]);
}

cudaError_t gpu_swiglu(cudaStream_t s, uint32_t n, uint32_t width, const float *gate, const float *up, float *out) {
        size_t count = (size_t) n * width, blocks = (count + ROW_THREADS - 1) / ROW_THREADS;
        k_swiglu<<<(uint32_t) (blocks < 4096 ? blocks : 4096), ROW_THREADS, 0, s>>>(count, gate, up, out);
        return cudaGetLastError();
}

__global__ static void k_gather_rows(const float *gathered, uint32_t n_tokens, uint32_t chunk, uint32_t rows, float *out,
                                     bool accumulate) {
        uint32_t t = blockIdx.x;
        for (uint32_t i = threadIdx.x; i < rows; i += blockDim.x) {
                float v = gathered[((size_t) (i / chunk) * n_tokens + t) * chunk + i % chunk];
                float *o = &out[(size_t) t * rows + i];
                *o = accumulate ? *o + v : v;
        }
}

cudaError_t gpu_gather_rows(cudaStream_t s, const float *gathered, uint32_t n_tokens, uint32_t chunk, uint32_t rows,
                            float *out, bool accumulate) {
        k_gather_rows<<<n_tokens, ROW_THREADS, 0, s>>>(gathered, n_tokens, chunk, rows, out, accumulate);
        return cudaGetLastError();
}

/* Quantized weights in the CPU's order (gpu-math.h): GPU_ROW_LANES threads per row, thread
 * l keeping lane l's sums over the blocks for TT tokens, four blocks' words loaded at once
 * from the lane-major rows; a warp holds 4 rows. With single, the lanes' integer sums
 * of a block are added first (exactly) and each thread keeps the row's single accumulator.
 * K (the K-quants) takes each lane's scale and min from the block's scale words instead
 * (gpu_k_lane_step()). */
#define ROWS_PER_WARP (32 / GPU_ROW_LANES)
template <int TT, bool K>
__global__ static void __launch_bounds__(MATMUL_WARPS * 32)
        k_matmul_q(struct gpu_weight w, const int8_t *xq, const float *xds, uint32_t width, uint32_t n, float *out,
                   uint32_t out_stride, bool accumulate, bool single) {
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
                const uint32_t *ws = w.scales + (size_t) row * gpu_row_scale_words(w.kind, nbp);
                for (uint32_t b4 = 0; b4 < nb; b4 += 4) {
                        uint4 wv = *(const uint4 *) (wq + b4), sv = *(const uint4 *) (ws + b4);
                        uint32_t words[4] = { wv.x, wv.y, wv.z, wv.w }, scales[4] = { sv.x, sv.y, sv.z, sv.w };
                        float wd[4], wm[4];
                        struct gpu_k_factors kf[4];
                        if (K) {
                                uint4 mv = gpu_k_has_mins(w.kind) ? *(const uint4 *) (ws + nbp + b4) : make_uint4(0, 0, 0, 0);
                                uint32_t mins[4] = { mv.x, mv.y, mv.z, mv.w };
#pragma unroll
                                for (uint32_t k = 0; k < 4; k++)
                                        kf[k] = gpu_k_lane_factors(w.kind, scales[k], mins[k], l);
                        } else
#pragma unroll
                                for (uint32_t k = 0; k < 4; k++) {
                                        wd[k] = gpu_f16_to_f32(scales[k] & 0xffffu);
                                        wm[k] = gpu_f16_to_f32(scales[k] >> 16);
                                }
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
                                        if (K) {
                                                acc[t] = gpu_k_lane_step(w.kind, words[k], l, act[k], &kf[k], d[k], acc[t]);
                                                continue;
                                        }
                                        int32_t isum = gpu_lane_isum(w.kind, words[k], l, act[k]);
                                        if (single)
                                                for (int offset = GPU_ROW_LANES / 2; offset > 0; offset /= 2)
                                                        isum += __shfl_xor_sync(group, isum, offset, GPU_ROW_LANES);
                                        acc[t] = fmaf((float) isum, wd[k] * d[k], acc[t]);
                                        if (gpu_has_offset(w.kind))
                                                off[t] = fmaf(wm[k], sums[k], off[t]);
                                }
                        }
                }
        }
        if (!single)
#pragma unroll
                for (int t = 0; t < TT; t++)
                        for (int offset = GPU_ROW_LANES / 2; offset > 0; offset /= 2)
                                acc[t] += __shfl_xor_sync(group, acc[t], offset, GPU_ROW_LANES);
        if (row >= w.n_rows || l != 0)
                return;
        for (int t = 0; t < TT && t0 + t < n; t++) {
                float v = gpu_has_offset(w.kind) && !single ? acc[t] + off[t] : acc[t];
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
                          float *out, uint32_t out_stride, bool accumulate, bool single) {
        if (w->kind <= GPU_WEIGHT_Q8_0) {
                dim3 grid(ceil_div(w->n_rows, MATMUL_WARPS * ROWS_PER_WARP), ceil_div(n, TT));
                if (gpu_k_quant(w->kind))
                        k_matmul_q<TT, true><<<grid, MATMUL_WARPS * 32, 0, s>>>(*w, a->q, a->ds, a->width, n, out, out_stride,
                                                                                accumulate, single);
                else
                        k_matmul_q<TT, false><<<grid, MATMUL_WARPS * 32, 0, s>>>(*w, a->q, a->ds, a->width, n, out, out_stride,
                                                                                 accumulate, single);
        } else {
                dim3 grid(ceil_div(w->n_rows, MATMUL_WARPS), ceil_div(n, TT));
                k_matmul_f<TT><<<grid, MATMUL_WARPS * 32, 0, s>>>(*w, a->x, a->width, n, out, out_stride, accumulate);
        }
}

cudaError_t gpu_matmul(cudaStream_t s, const struct gpu_weight *w, const struct gpu_activations *a, uint32_t n,
                       float *out, uint32_t out_stride, bool accumulate) {
        bool single = w->single_accumulator;
        /* Tokens per block of threads: one for a decode step's few tokens, so that the rows
         * of a narrow weight (576 rows are 36 blocks) still fill the chip; more for a prompt,
         * whose many blocks each reuse a weight word for several tokens. A token's sums are
         * the same whatever the tile. */
        if (n <= 32)
                launch_matmul<1>(s, w, a, n, out, out_stride, accumulate, single);
        else if (n <= 64)
                launch_matmul<2>(s, w, a, n, out, out_stride, accumulate, single);
        else if (n <= 256)
                launch_matmul<4>(s, w, a, n, out, out_stride, accumulate, single);
        else
                launch_matmul<8>(s, w, a, n, out, out_stride, accumulate, single);
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

/* Attention in the CPU's order (gpu-math.h), one block of threads per (query head, token),
 * ATTN_CHUNK positions at a time: each thread scores its own positions of the chunk (one key
 * each, all in parallel) into shared memory; the maximum of the scores through a fixed tree;
 * the sum of their exps in runs of 16 positions, each run by one thread, the runs added in
 * order by one thread; then the values, thread i keeping the lane sums of up to ATTN_PAIRS
 * (row e, dimension d) pairs, each lane over its positions in order; the rows folded and
 * added as the CPU adds them. A context of one chunk is scored once; a longer one is scored
 * again in each pass, as shared memory holds one chunk. */
#define ATTN_CHUNK 1024
#define ATTN_PAIRS 8

__device__ static float block_max(float v, double *scratch) {
        uint32_t i = threadIdx.x;
        scratch[i] = v;
        __syncthreads();
        for (uint32_t stride = blockDim.x / 2; stride > 0; stride /= 2) {
                if (i < stride && scratch[i + stride] > scratch[i])
                        scratch[i] = scratch[i + stride];
                __syncthreads();
        }
        float r = (float) scratch[0];
        __syncthreads();
        return r;
}

struct attention_row {
        const struct gpu_step *st;
        const struct gpu_kv_layer *kv;
        const float *query;
        int32_t seq;
        uint32_t kv_head;
        bool generated;
        float scale;
};

/* Positions c0 .. c0 + in_chunk - 1: the scaled score and the KV slot of each, thread i
 * taking positions i, i + threads, ... (the passes read back only their own thread's). */
__device__ static void score_chunk(const struct attention_row *a, uint32_t c0, uint32_t in_chunk, float *scores,
                                   size_t *slots) {
        for (uint32_t j = threadIdx.x; j < in_chunk; j += blockDim.x) {
                size_t slot = kv_slot(a->kv, a->st, a->seq, c0 + j, a->kv_head);
                scores[j] = gpu_score_dot(a->kv->k + slot, a->query, a->kv->head_dim, a->generated) * a->scale;
                slots[j] = slot;
        }
}

__global__ static void __launch_bounds__(512)
        k_attention(struct gpu_step st, const int32_t *n_prompt, const float *q, uint32_t n_head,
                                   float scale, struct gpu_kv_layer kv, float *out) {
        __shared__ float query[256], scores[ATTN_CHUNK], rows[16 * 256];
        __shared__ size_t slots[ATTN_CHUNK];
        __shared__ double scratch[512];
        uint32_t h = blockIdx.x, t = blockIdx.y, tid = threadIdx.x, threads = blockDim.x, hd = kv.head_dim;
        uint32_t pos = (uint32_t) st.positions[t], n = pos + 1;
        int32_t seq = st.seq_ids[t];
        bool generated = pos >= (uint32_t) n_prompt[seq], one_chunk = n <= ATTN_CHUNK;
        struct attention_row a = { &st, &kv, query, seq, h / (n_head / kv.n_head_kv), generated, scale };
        const float *qh = q + ((size_t) t * n_head + h) * hd;
        for (uint32_t d = tid; d < hd; d += threads)
                query[d] = gpu_round_f16(qh[d]);
        __syncthreads();

        float max = -INFINITY;
        for (uint32_t c0 = 0; c0 < n; c0 += ATTN_CHUNK) {
                uint32_t in_chunk = n - c0 < ATTN_CHUNK ? n - c0 : ATTN_CHUNK;
                score_chunk(&a, c0, in_chunk, scores, slots);
                for (uint32_t j = tid; j < in_chunk; j += threads)
                        max = fmaxf(max, scores[j]);
        }
        max = block_max(max, scratch);

        double sum = 0.0; /* thread 0's */
        for (uint32_t c0 = 0; c0 < n; c0 += ATTN_CHUNK) {
                uint32_t in_chunk = n - c0 < ATTN_CHUNK ? n - c0 : ATTN_CHUNK;
                if (!one_chunk) {
                        __syncthreads();
                        score_chunk(&a, c0, in_chunk, scores, slots);
                }
                __syncthreads();
                /* ATTN_CHUNK is a multiple of 16: the chunk's runs are the context's */
                uint32_t n_runs = (in_chunk + 15) / 16;
                for (uint32_t r = tid; r < n_runs; r += threads) {
                        float run[16];
#pragma unroll
                        for (uint32_t e = 0; e < 16; e++) {
                                uint32_t j = r * 16 + e;
                                run[e] = j < in_chunk ? gpu_exp(scores[j] - max) : 0.0f;
                        }
                        scratch[r] = (double) gpu_lanes_sum16(run);
                }
                __syncthreads();
                if (tid == 0)
                        for (uint32_t r = 0; r < n_runs; r++)
                                sum += scratch[r];
        }
        __syncthreads();
        if (tid == 0)
                scratch[0] = sum;
        __syncthreads();
        float inverse = (float) (1.0 / scratch[0]);

        /* pair m of this thread: dimension (tid + m threads) % hd of row (tid + m threads) / hd */
        uint32_t n_pairs = 16 * hd / threads;
        float acc[ATTN_PAIRS][4];
#pragma unroll
        for (int m = 0; m < ATTN_PAIRS; m++)
                acc[m][0] = acc[m][1] = acc[m][2] = acc[m][3] = 0.0f;
        for (uint32_t c0 = 0; c0 < n; c0 += ATTN_CHUNK) {
                uint32_t in_chunk = n - c0 < ATTN_CHUNK ? n - c0 : ATTN_CHUNK;
                if (!one_chunk)
                        score_chunk(&a, c0, in_chunk, scores, slots);
                for (uint32_t j = tid; j < in_chunk; j += threads)
                        scores[j] = gpu_round_f16(gpu_exp(scores[j] - max) * inverse);
                __syncthreads();
#pragma unroll
                for (int m = 0; m < ATTN_PAIRS; m++) {
                        if ((uint32_t) m >= n_pairs)
                                break;
                        uint32_t p = tid + m * threads, d = p % hd, e = p / hd;
                        /* positions 64 apart: lanes e, 16 + e, 32 + e, 48 + e of 64, or all lane e of 16 */
                        for (uint32_t base = 0; base < in_chunk; base += 64)
#pragma unroll
                                for (int k = 0; k < 4; k++) {
                                        uint32_t j = base + 16 * k + e;
                                        if (j < in_chunk) {
                                                /* k is a constant once unrolled: no run-time index */
                                                float v = gpu_f16_to_f32(kv.v[slots[j] + d]);
                                                if (generated)
                                                        acc[m][k] = fmaf(v, scores[j], acc[m][k]);
                                                else
                                                        acc[m][0] = fmaf(v, scores[j], acc[m][0]);
                                        }
                                }
                }
                __syncthreads();
        }
#pragma unroll
        for (int m = 0; m < ATTN_PAIRS; m++) {
                if ((uint32_t) m >= n_pairs)
                        break;
                uint32_t p = tid + m * threads, d = p % hd, e = p / hd;
                rows[e * hd + d] = generated ? gpu_fold64(acc[m][0], acc[m][1], acc[m][2], acc[m][3]) : acc[m][0];
        }
        __syncthreads();
        float *o = out + ((size_t) t * n_head + h) * hd;
        for (uint32_t d = tid; d < hd; d += threads) {
                float r16[16];
#pragma unroll
                for (int e = 0; e < 16; e++)
                        r16[e] = rows[e * hd + d];
                o[d] = gpu_lanes_sum16(r16);
        }
}

cudaError_t gpu_attention(cudaStream_t s, const struct gpu_step *step, const float *q, uint32_t n_head, float scale,
                          const struct gpu_kv_layer *kv, float *out) {
        /* 2 hd threads (at least 128): 16 hd (row, dimension) pairs, ATTN_PAIRS or fewer each */
        uint32_t hd = kv->head_dim, threads = 2 * hd < 128 ? 128 : 2 * hd;
        if (hd % 8 || hd > 256 || 16 * hd / threads * threads != 16 * hd)
                return cudaErrorInvalidValue;
        dim3 grid(n_head, step->n_tokens);
        k_attention<<<grid, threads, 0, s>>>(*step, step->n_prompt, q, n_head, scale, *kv, out);
        return cudaGetLastError();
}
