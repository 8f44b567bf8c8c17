/* SPDX-License-Identifier: MIT */
#include "config.h"

#if HAVE_X86_64_KERNELS
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "dot.h"

#define DOT_TARGET "avx2,fma,f16c"
#define DOT_SET avx2
#define DOT_SET_NAME "avx2"
#define DOT_ATTENTION "attention-avx2.h"

__attribute__((target(DOT_TARGET))) static inline __m256i dot_u8_s8(__m256i u, __m256i s) {
        /* pairs of products fit int16 here: |u| <= 128 and |s| <= 127 */
        return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* Bit j of a 5-bit block's qh as 16 in byte j, else 0: each byte takes the qh byte that holds
 * its bit, keeps that bit alone and compares. */
__attribute__((target(DOT_TARGET))) static inline __m256i dot_q5_high_bits(const uint8_t *qh) {
        int32_t bits;
        memcpy(&bits, qh, sizeof(bits));
        const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3,
                                                3, 3, 3, 3, 3);
        const __m256i bit = _mm256_set1_epi64x((int64_t) 0x8040201008040201);
        __m256i own = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(bits), spread), bit);
        return _mm256_and_si256(_mm256_cmpeq_epi8(own, bit), _mm256_set1_epi8(16));
}

#include "dot-x86-template.h"
#endif
