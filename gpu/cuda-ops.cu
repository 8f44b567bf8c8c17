/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

extern "C" {
#include "error.h"
#include "model.h"
}
#include "cuda-kernels.h"
#include "cuda-ops.h"
#include "cuda-weights.h"

#define OPS_TRY(call)                                                                                          \
        do {                                                                                                   \
                cudaError_t ops_try_ = (call);                                                                 \
                if (ops_try_ != cudaSuccess) {                                                                 \
                        rc = error_set(err, EIO, "CUDA error in %s: %s", #call, cudaGetErrorString(ops_try_)); \
                        goto out;                                                                              \
                }                                                                                              \
        } while (0)

extern "C" int cuda_ops_matmul(const struct weight *w, const float *x, uint32_t n_tokens, bool is_output, float *out,
                               int8_t *xq, float *ds, struct error *err) {
        struct gpu_weight gw;
        struct gpu_activations a = { NULL, NULL, NULL, (uint32_t) w->n_cols };
        uint8_t *arena = NULL, *image = NULL;
        float *out_device = NULL;
        size_t bytes = cuda_place_weight(w, 0, (uint32_t) w->n_rows, &gw, NULL, NULL, 0), x_floats = (size_t) n_tokens * w->n_cols;
        size_t out_floats = (size_t) n_tokens * w->n_rows;
        size_t q_bytes = gpu_activation_quant_bytes(a.width, n_tokens), s_floats = gpu_activation_scale_floats(a.width, n_tokens);
        uint32_t nb = a.width / GPU_QBLOCK, nbp = gpu_padded_blocks(nb);
        int8_t *q_host = NULL;
        float *s_host = NULL;
        int rc = 0;
        if (!(image = (uint8_t *) malloc(bytes)))
                return error_set(err, ENOMEM, "out of memory");
        OPS_TRY(cudaMalloc((void **) &arena, bytes));
        cuda_place_weight(w, 0, (uint32_t) w->n_rows, &gw, arena, image, 0);
        gw.single_accumulator = weight_single_accumulator(w, is_output);
        OPS_TRY(cudaMemcpy(arena, image, bytes, cudaMemcpyHostToDevice));
        OPS_TRY(cudaMalloc((void **) &a.x, x_floats * sizeof(float)));
        OPS_TRY(cudaMalloc((void **) &a.q, q_bytes));
        OPS_TRY(cudaMalloc((void **) &a.ds, s_floats * sizeof(float)));
        OPS_TRY(cudaMalloc((void **) &out_device, out_floats * sizeof(float)));
        OPS_TRY(cudaMemset(out_device, 0xff, out_floats * sizeof(float))); /* NaN: every element must be written */
        OPS_TRY(cudaMemcpy(a.x, x, x_floats * sizeof(float), cudaMemcpyHostToDevice));
        OPS_TRY(gpu_quantize(0, n_tokens, &a));
        OPS_TRY(gpu_matmul(0, &gw, &a, n_tokens, out_device, (uint32_t) w->n_rows, false));
        OPS_TRY(cudaDeviceSynchronize());
        OPS_TRY(cudaMemcpy(out, out_device, out_floats * sizeof(float), cudaMemcpyDeviceToHost));
        /* the activations back in block order: token t's block b at xq + t * n_cols + 32 b,
         * its d and s at ds[2 (t * nb + b)] and the next */
        if (!(q_host = (int8_t *) malloc(q_bytes)) || !(s_host = (float *) malloc(s_floats * sizeof(float)))) {
                rc = error_set(err, ENOMEM, "out of memory");
                goto out;
        }
        OPS_TRY(cudaMemcpy(q_host, a.q, q_bytes, cudaMemcpyDeviceToHost));
        OPS_TRY(cudaMemcpy(s_host, a.ds, s_floats * sizeof(float), cudaMemcpyDeviceToHost));
        for (uint32_t t = 0; t < n_tokens; t++)
                for (uint32_t b = 0; b < nb; b++) {
                        for (uint32_t e = 0; e < GPU_QBLOCK; e++)
                                xq[((size_t) t * nb + b) * GPU_QBLOCK + e] =
                                        q_host[(size_t) t * nbp * GPU_QBLOCK + gpu_lane_major_offset(nbp, b, e)];
                        ds[2 * ((size_t) t * nb + b)] = s_host[(size_t) t * 2 * nbp + b];
                        ds[2 * ((size_t) t * nb + b) + 1] = s_host[(size_t) t * 2 * nbp + nbp + b];
                }
out:
        free(q_host);
        free(s_host);
        cudaFree(arena);
        cudaFree(a.x);
        cudaFree(a.q);
        cudaFree(a.ds);
        cudaFree(out_device);
        free(image);
        return rc;
}
