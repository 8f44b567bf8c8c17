/* SPDX-License-Identifier: MIT */
#pragma once

/* The candidate joins of adjacent symbols that both tokenizers keep while encoding, in a
 * binary min-heap on one 64-bit order key: the tokenizer's priority in the high half (BPE's
 * merge rank, SentencePiece's score turned by merge_order_from_score()) and the left
 * symbol's index in the low half, so that ties go to the leftmost pair. */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct merge_candidate {
        uint64_t order;
        int32_t left;
        int32_t a, b; /* what the tokenizer needs to tell a stale candidate */
};

static inline uint64_t merge_order(uint32_t priority, int32_t left) {
        return (uint64_t) priority << 32 | (uint32_t) left;
}

/* Higher scores first: the float's bits mapped so that unsigned order is descending score
 * order (-0 and +0 alike, as they compare equal). */
static inline uint32_t merge_order_from_score(float score) {
        uint32_t bits;
        if (score == 0)
                score = 0;
        memcpy(&bits, &score, sizeof(bits));
        uint32_t ascending = bits & 0x80000000u ? ~bits : bits | 0x80000000u;
        return ~ascending;
}

static inline void merge_heap_push(struct merge_candidate *heap, size_t *n, struct merge_candidate c) {
        size_t i = (*n)++;
        while (i > 0) {
                size_t parent = (i - 1) / 2;
                if (heap[parent].order <= c.order)
                        break;
                heap[i] = heap[parent];
                i = parent;
        }
        heap[i] = c;
}

static inline struct merge_candidate merge_heap_pop(struct merge_candidate *heap, size_t *n) {
        struct merge_candidate top = heap[0], last = heap[--*n];
        size_t i = 0;

        for (;;) {
                size_t child = 2 * i + 1;
                if (child >= *n)
                        break;
                if (child + 1 < *n && heap[child + 1].order < heap[child].order)
                        child++;
                if (heap[child].order >= last.order)
                        break;
                heap[i] = heap[child];
                i = child;
        }
        if (*n > 0)
                heap[i] = last;
        return top;
}
