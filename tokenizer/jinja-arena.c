/* SPDX-License-Identifier: MIT */
#include <stdlib.h>
#include <string.h>

#include "jinja-internal.h"

/* Chunks of at least CHUNK_MIN bytes, newest first; a large request gets a chunk of its own. */
#define CHUNK_MIN (64u * 1024u)
#define ALIGNMENT 16u

struct chunk {
        struct chunk *next;
        size_t size, used;
        _Alignas(16) unsigned char data[];
};

struct arena {
        struct chunk *chunks;
        size_t total, limit;
};

struct arena *arena_new(size_t limit) {
        struct arena *a = calloc(1, sizeof(*a));
        if (a)
                a->limit = limit;
        return a;
}

void arena_free(struct arena *a) {
        if (!a)
                return;
        while (a->chunks) {
                struct chunk *next = a->chunks->next;
                free(a->chunks);
                a->chunks = next;
        }
        free(a);
}

void *arena_alloc(struct arena *a, size_t size) {
        size = (size + ALIGNMENT - 1) & ~(size_t) (ALIGNMENT - 1);
        if (size == 0)
                size = ALIGNMENT;
        struct chunk *c = a->chunks;
        if (!c || c->size - c->used < size) {
                size_t chunk_size = size > CHUNK_MIN ? size : CHUNK_MIN;
                if (chunk_size > a->limit || a->total > a->limit - chunk_size)
                        return NULL;
                c = malloc(sizeof(*c) + chunk_size);
                if (!c)
                        return NULL;
                *c = (struct chunk) { .next = a->chunks, .size = chunk_size };
                a->chunks = c;
                a->total += chunk_size;
        }
        void *p = c->data + c->used;
        c->used += size;
        return memset(p, 0, size);
}

void *arena_grow(struct arena *a, void *items, size_t n, size_t *cap, size_t item_size, size_t first_cap) {
        if (n < *cap)
                return items;
        size_t new_cap = *cap ? 2 * *cap : first_cap;
        void *grown = arena_alloc(a, new_cap * item_size);
        if (!grown)
                return NULL;
        if (n)
                memcpy(grown, items, n * item_size);
        *cap = new_cap;
        return grown;
}
