/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

extern "C" {
#include "gpu-device.h"
}

extern "C" void gpu_versions_get(struct gpu_versions *ret) {
        memset(ret, 0, sizeof(*ret));
        cudaRuntimeGetVersion(&ret->cuda_runtime);
        if (cudaDriverGetVersion(&ret->cuda_driver) != cudaSuccess)
                ret->cuda_driver = 0;
        ret->cublas = CUBLAS_VERSION;
        ncclGetVersion(&ret->nccl);
}

extern "C" int gpu_device_count(struct error *err) {
        int n = 0;
        cudaError_t e = cudaGetDeviceCount(&n);
        if (e != cudaSuccess)
                return error_set(err, ENODEV, "no CUDA device: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        if (n == 0)
                return error_set(err, ENODEV, "no CUDA device: the driver reports none");
        return n;
}

extern "C" int gpu_device_info(int index, struct gpu_device_info *ret, struct error *err) {
        cudaDeviceProp prop;
        cudaError_t e = cudaGetDeviceProperties(&prop, index);
        if (e != cudaSuccess)
                return error_set(err, ENODEV, "CUDA device %d: %s", index, cudaGetErrorString(e));
        memset(ret, 0, sizeof(*ret));
        snprintf(ret->name, sizeof(ret->name), "%s", prop.name);
        ret->total_memory = prop.totalGlobalMem;
        ret->compute_major = prop.major;
        ret->compute_minor = prop.minor;
        return 0;
}
