/* SPDX-License-Identifier: MIT */
#pragma once

/* How the threads divide a matmul's groups of rows. Each thread owns an equal run of
 * consecutive groups and takes them from its front, a few at a time, on a cache line no
 * other thread writes while it has work of its own; a thread whose run is done takes the
 * last groups of another's, so that one that runs slow (preempted, a stalled stream) holds
 * the others up by at most a take. A thread's groups are thus one stream of bytes that its
 * prefetches can run ahead on. Taking a shared counter's next chunk instead had every take
 * wait for the line from the other core and every chunk start its stream cold: a decode
 * step makes ~3000 takes, and 4 chunks per thread in place of 16 made decode ~10% faster.
 * Which thread computes a row never changes its numbers. */

#include <stdbool.h>
#include <stdint.h>

struct matmul_share {
        _Atomic uint64_t front_back; /* groups [front, back) left: front in the low 32 bits */
} __attribute__((aligned(64)));

/* The first group of thread ith's run of n_groups split among nth threads. */
static inline uint64_t matmul_share_begin(uint64_t n_groups, unsigned ith, unsigned nth) {
        return n_groups * ith / nth;
}

/* Gives each of the nth threads its run of n_groups (< 2^32). Not concurrent with takes. */
void matmul_shares_reset(struct matmul_share *shares, unsigned nth, uint64_t n_groups);

/* Groups [*first, *first + *n) for thread ith: up to max_own from the front of its own run,
 * else from the back of another thread's (half of what it has left, at most max_own). False
 * when every run is done. */
bool matmul_shares_take(struct matmul_share *shares, unsigned ith, unsigned nth, uint32_t max_own, uint64_t *first,
                        uint32_t *n);
