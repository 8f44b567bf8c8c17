/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "cpu-features.h"

const struct cpu_features *cpu_features_get(void) {
        static struct cpu_features features;
        static bool probed;

        if (!probed) {
#if HAVE_X86_64_KERNELS
                /* __builtin_cpu_supports also checks that the OS saves the wide registers. */
                __builtin_cpu_init();
                features.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
                features.avx512vnni = features.avx2 && __builtin_cpu_supports("avx512f") &&
                                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                                      __builtin_cpu_supports("avx512vnni");
                features.amd = __builtin_cpu_is("amd");
#endif
                probed = true;
        }
        return &features;
}
