/* SPDX-License-Identifier: MIT */
#pragma once

/* The CUDA side as C sees it: plain functions, no CUDA types, errors as negative errno with a
 * message. The core never includes a CUDA header. */

#include <stddef.h>

#include "error.h"

struct gpu_device_info {
        char name[256];
        size_t total_memory;
        int compute_major;
        int compute_minor;
};

struct gpu_versions {
        int cuda_runtime;
        int cuda_driver; /* 0 when no driver is installed */
        int cublas;
        int nccl;
};

/* Versions of the libraries this build links; never fails, needs no GPU. */
void gpu_versions_get(struct gpu_versions *ret);

/* Number of usable CUDA devices; -ENODEV with a message saying why when there is none. */
int gpu_device_count(struct error *err);

int gpu_device_info(int index, struct gpu_device_info *ret, struct error *err);
