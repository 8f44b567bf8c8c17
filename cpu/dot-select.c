/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cpu-features.h"
#include "dot.h"

const struct dot_kernels *dot_kernels_by_name(const char *name) {
        const struct cpu_features *cpu = cpu_features_get();
        if (strcmp(name, "scalar") == 0)
                return &dot_kernels_scalar;
#if HAVE_X86_64_KERNELS
        if (strcmp(name, "avx2") == 0 && cpu->avx2)
                return &dot_kernels_avx2;
        if (strcmp(name, "avx512vnni") == 0 && cpu->avx512vnni)
                return &dot_kernels_avx512vnni;
        if (strcmp(name, "avx512vnni-amd") == 0 && cpu->avx512vnni)
                return &dot_kernels_avx512vnni_amd;
#endif
        (void) cpu;
        return NULL;
}

const struct dot_kernels *dot_kernels_select(void) {
        const char *forced = getenv("ASYNCLLM_CPU_KERNELS");
        const struct dot_kernels *k;
        if (forced && (k = dot_kernels_by_name(forced)))
                return k;
        if ((k = dot_kernels_by_name(cpu_features_get()->amd ? "avx512vnni-amd" : "avx512vnni")) ||
            (k = dot_kernels_by_name("avx2")))
                return k;
        return &dot_kernels_scalar;
}

dot_q_fn dot_kernel_for(const struct dot_kernels *k, enum tensor_type type) {
        switch (type) {
        case TENSOR_Q4_0: return k->q4_0;
        case TENSOR_Q4_1: return k->q4_1;
        case TENSOR_Q8_0: return k->q8_0;
        default: return NULL;
        }
}

dot_tile_fn dot_tile_kernel_for(const struct dot_kernels *k, enum tensor_type type) {
        switch (type) {
        case TENSOR_Q4_0: return k->tile_q4_0;
        case TENSOR_Q4_1: return k->tile_q4_1;
        case TENSOR_Q8_0: return k->tile_q8_0;
        default: return NULL;
        }
}

dot_packed_fn dot_packed_kernel_for(const struct dot_kernels *k, enum tensor_type type) {
        switch (type) {
        case TENSOR_Q4_0: return k->packed_q4_0;
        case TENSOR_Q4_1: return k->packed_q4_1;
        case TENSOR_Q8_0: return k->packed_q8_0;
        default: return NULL;
        }
}
