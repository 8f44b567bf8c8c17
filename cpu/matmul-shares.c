/* SPDX-License-Identifier: MIT */
#include "matmul-shares.h"

#include <stdatomic.h>

#define FRONT(word) ((word) & UINT32_MAX)
#define BACK(word) ((word) >> 32)

void matmul_shares_reset(struct matmul_share *shares, unsigned nth, uint64_t n_groups) {
        for (unsigned i = 0; i < nth; i++) {
                uint64_t front = matmul_share_begin(n_groups, i, nth), back = matmul_share_begin(n_groups, i + 1, nth);
                atomic_store_explicit(&shares[i].front_back, back << 32 | front, memory_order_relaxed);
        }
}

bool matmul_shares_take(struct matmul_share *shares, unsigned ith, unsigned nth, uint32_t max_own, uint64_t *first,
                        uint32_t *n) {
        /* Front and back are one word, so that the owner's take and another thread's take
         * from the back see each other: whichever compares and swaps first wins, the other
         * retries with what is left. */
        _Atomic uint64_t *own = &shares[ith].front_back;
        uint64_t word = atomic_load_explicit(own, memory_order_relaxed);
        while (FRONT(word) < BACK(word)) {
                uint64_t count = BACK(word) - FRONT(word) < max_own ? BACK(word) - FRONT(word) : max_own;
                if (atomic_compare_exchange_weak_explicit(own, &word, word + count, memory_order_relaxed, memory_order_relaxed)) {
                        *first = FRONT(word);
                        *n = (uint32_t) count;
                        return true;
                }
        }
        for (unsigned k = 1; k < nth; k++) {
                _Atomic uint64_t *other = &shares[(ith + k) % nth].front_back;
                word = atomic_load_explicit(other, memory_order_relaxed);
                while (FRONT(word) < BACK(word)) {
                        /* half of what is left, at most max_own: a preempted owner's run
                         * goes in a few takes, the last ones a group at a time */
                        uint64_t left = BACK(word) - FRONT(word), count = left / 2 < max_own ? left / 2 : max_own;
                        if (count == 0)
                                count = 1;
                        if (atomic_compare_exchange_weak_explicit(other, &word, word - (count << 32), memory_order_relaxed,
                                                                  memory_order_relaxed)) {
                                *first = BACK(word) - count;
                                *n = (uint32_t) count;
                                return true;
                        }
                }
        }
        return false;
}
