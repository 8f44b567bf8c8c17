/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
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

int dot_kernels_select(const struct dot_kernels **ret, struct error *err) {
        const char *forced = getenv("ASYNCLLM_CPU_KERNELS");
        if (forced && *forced) {
                if ((*ret = dot_kernels_by_name(forced)))
                        return 0;
                static const char *const x86[] = DOT_X86_SET_NAMES;
                char runs[128] = "scalar";
                for (size_t i = 0; i < sizeof(x86) / sizeof(x86[0]); i++)
                        if (dot_kernels_by_name(x86[i])) {
                                strcat(runs, ", ");
                                strcat(runs, x86[i]);
                        }
                return error_set(err, EINVAL, "ASYNCLLM_CPU_KERNELS=%s: not a kernel set this CPU runs; name one of %s, or unset it",
                                 forced, runs);
        }
        if ((*ret = dot_kernels_by_name(cpu_features_get()->amd ? "avx512vnni-amd" : "avx512vnni")) ||
            (*ret = dot_kernels_by_name("avx2")))
                return 0;
        *ret = &dot_kernels_scalar;
        return 0;
}

dot_q_fn dot_kernel_for(const struct dot_kernels *k, enum tensor_type type) {
        switch (type) {
        case TENSOR_Q4_0: return k->q4_0;
        case TENSOR_Q4_1: return k->q4_1;
        case TENSOR_Q5_0: return k->q5_0;
        case TENSOR_Q5_1: return k->q5_1;
        case TENSOR_Q8_0: return k->q8_0;
        default: return NULL;
        }
}

dot_tile_fn dot_tile_kernel_for(const struct dot_kernels *k, enum tensor_type type) {
        switch (type) {
        case TENSOR_Q4_0: return k->tile_q4_0;
        case TENSOR_Q4_1: return k->tile_q4_1;
        case TENSOR_Q5_0: return k->tile_q5_0;
        case TENSOR_Q5_1: return k->tile_q5_1;
        case TENSOR_Q8_0: return k->tile_q8_0;
        default: return NULL;
        }
}

dot_k_fn dot_k_kernel_for(const struct dot_kernels *k, enum tensor_type type) {
        switch (type) {
        case TENSOR_Q2_K: return k->q2_K;
        case TENSOR_Q3_K: return k->q3_K;
        case TENSOR_Q4_K: return k->q4_K;
        case TENSOR_Q5_K: return k->q5_K;
        case TENSOR_Q6_K: return k->q6_K;
        default: return NULL;
        }
}

dot_k_tile_fn dot_k_tile_kernel_for(const struct dot_kernels *k, enum tensor_type type) {
        switch (type) {
        case TENSOR_Q2_K: return k->tile_q2_K;
        case TENSOR_Q3_K: return k->tile_q3_K;
        case TENSOR_Q4_K: return k->tile_q4_K;
        case TENSOR_Q5_K: return k->tile_q5_K;
        case TENSOR_Q6_K: return k->tile_q6_K;
        default: return NULL;
        }
}

dot_packed_k_fn dot_packed_k_kernel_for(const struct dot_kernels *k, enum tensor_type type) {
        switch (type) {
        case TENSOR_Q2_K: return k->packed_q2_K;
        case TENSOR_Q3_K: return k->packed_q3_K;
        case TENSOR_Q4_K: return k->packed_q4_K;
        case TENSOR_Q5_K: return k->packed_q5_K;
        case TENSOR_Q6_K: return k->packed_q6_K;
        default: return NULL;
        }
}

dot_packed_fn dot_packed_kernel_for(const struct dot_kernels *k, enum tensor_type type) {
        switch (type) {
        case TENSOR_Q4_0: return k->packed_q4_0;
        case TENSOR_Q4_1: return k->packed_q4_1;
        case TENSOR_Q5_0: return k->packed_q5_0;
        case TENSOR_Q5_1: return k->packed_q5_1;
        case TENSOR_Q8_0: return k->packed_q8_0;
        default: return NULL;
        }
}
