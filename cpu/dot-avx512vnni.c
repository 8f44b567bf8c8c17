/* SPDX-License-Identifier: MIT */
#include "config.h"

#if HAVE_X86_64_KERNELS
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "dot.h"

#define DOT_TARGET "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
#define DOT_SET avx512vnni
#define DOT_SET_NAME "avx512vnni"

__attribute__((target(DOT_TARGET))) static inline __m256i dot_u8_s8(__m256i u, __m256i s) {
        return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
}

/* Bit j of a 5-bit block's qh as 16 in byte j, else 0: qh is a byte mask as it stands. */
__attribute__((target(DOT_TARGET))) static inline __m256i dot_q5_high_bits(const uint8_t *qh) {
        uint32_t bits;
        memcpy(&bits, qh, sizeof(bits));
        return _mm256_maskz_mov_epi8((__mmask32) bits, _mm256_set1_epi8(16));
}

#define DOT_ATTENTION "attention-avx512.h"
#include "dot-avx512-tiles.h"
#include "packed-dot-avx512.h"
#include "dot-x86-template.h"
#endif
