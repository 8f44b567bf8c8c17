/* SPDX-License-Identifier: MIT */
/* The CUDA backend as built: library versions always; device properties only where a GPU
 * exists. Without one the test says so and exits 77, which the test harness counts as a
 * skip, not a pass. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "gpu-device.h"

int main(void) {
        struct gpu_versions v;
        struct gpu_device_info info;
        struct error err;

        gpu_versions_get(&v);
        printf("CUDA runtime %d, driver %d, cuBLAS %d, NCCL %d\n", v.cuda_runtime, v.cuda_driver, v.cublas, v.nccl);
        if (v.cuda_runtime <= 0 || v.cublas <= 0 || v.nccl <= 0) {
                fprintf(stderr, "FAIL: the linked CUDA libraries report no version\n");
                return EXIT_FAILURE;
        }
        int n = gpu_device_count(&err);
        if (n < 0) {
                printf("SKIP: %s; the GPU checks need a CUDA device\n", err.message);
                return 77;
        }
        for (int i = 0; i < n; i++) {
                if (gpu_device_info(i, &info, &err) < 0) {
                        fprintf(stderr, "FAIL: %s\n", err.message);
                        return EXIT_FAILURE;
                }
                printf("device %d: %s, %zu MiB, compute %d.%d\n", i, info.name, info.total_memory >> 20,
                       info.compute_major, info.compute_minor);
        }
        return EXIT_SUCCESS;
}
