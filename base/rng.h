/* SPDX-License-Identifier: MIT */
#pragma once

/* A small, fast, reproducible pseudo-random generator for sampling: xoshiro256** (Blackman
 * and Vigna), its 256-bit state filled from a 64-bit seed by splitmix64 as its authors
 * recommend. Not for cryptography. The stream depends on nothing but the seed, so a
 * sequence that owns its generator draws the same numbers whatever else the engine runs. */

#include <stdint.h>

struct rng {
        uint64_t s[4];
};

/* One step of splitmix64: advances *state and returns the next output. */
static inline uint64_t rng_splitmix64(uint64_t *state) {
        uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));

        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        return z ^ (z >> 31);
}

/* Four splitmix64 outputs never are all zero together, the one state xoshiro must avoid. */
static inline void rng_seed(struct rng *r, uint64_t seed) {
        uint64_t sm = seed;

        for (unsigned i = 0; i < 4; i++)
                r->s[i] = rng_splitmix64(&sm);
}

static inline uint64_t rng_rotl64(uint64_t x, unsigned k) {
        return (x << k) | (x >> (64 - k));
}

static inline uint64_t rng_next(struct rng *r) {
        uint64_t *s = r->s;
        uint64_t out = rng_rotl64(s[1] * 5, 7) * 9;
        uint64_t t = s[1] << 17;

        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = rng_rotl64(s[3], 45);
        return out;
}

/* Uniform in [0, 1) with 53 random bits: every value is a multiple of 2^-53. */
static inline double rng_uniform(struct rng *r) {
        return (double) (rng_next(r) >> 11) * 0x1.0p-53;
}
