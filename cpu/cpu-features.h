/* SPDX-License-Identifier: MIT */
#pragma once

#include <stdbool.h>

/* The instruction sets the running CPU (and OS) offer, read once at run time. The build never
 * assumes any of them: kernels for each are compiled with per-function target attributes. */
struct cpu_features {
        bool avx2;       /* with FMA and F16C */
        bool avx512vnni; /* AVX-512 F, BW, VL and VNNI together */
        bool amd;        /* an AMD core: some kernels have variants tuned for its pipes */
};

const struct cpu_features *cpu_features_get(void);
