/* SPDX-License-Identifier: MIT */
#include "config.h"

#if HAVE_X86_64_KERNELS
#include <immintrin.h>
#include <math.h>

#include "dot.h"

#define DOT_TARGET "avx2,fma,f16c"
#define DOT_SET avx2
#define DOT_SET_NAME "avx2"
#define DOT_ATTENTION "attention-avx2.h"

__attribute__((target(DOT_TARGET))) static inline __m256i dot_u8_s8(__m256i u, __m256i s) {
        /* pairs of products fit int16 here: |u| <= 128 and |s| <= 127 */
        return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

#include "dot-x86-template.h"
#endif
