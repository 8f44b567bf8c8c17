/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client-id-table.h"

static const char *key_of(const struct client_id_table *t, const void *item) {
        return *(char *const *) ((const char *) item + t->key_offset);
}

/* FNV-1a, 64 bits. */
static size_t hash(const char *s) {
        uint64_t h = UINT64_C(14695981039346656037);
        for (; *s; s++)
                h = (h ^ (uint8_t) *s) * UINT64_C(1099511628211);
        return (size_t) (h ^ (h >> 32));
}

void client_id_table_init(struct client_id_table *t, size_t key_offset) {
        *t = (struct client_id_table) { .key_offset = key_offset };
}

void client_id_table_done(struct client_id_table *t) {
        free(t->slots);
        t->slots = NULL;
        t->cap = t->n = 0;
}

/* The slot that holds id, or the empty one where it would go. */
static size_t find(const struct client_id_table *t, const char *id) {
        size_t mask = t->cap - 1, i = hash(id) & mask;
        while (t->slots[i] && strcmp(key_of(t, t->slots[i]), id) != 0)
                i = (i + 1) & mask;
        return i;
}

void *client_id_table_get(const struct client_id_table *t, const char *id) {
        if (t->n == 0)
                return NULL;
        return t->slots[find(t, id)];
}

static int grow(struct client_id_table *t) {
        size_t cap = t->cap ? 2 * t->cap : 16;
        void **old = t->slots;
        size_t old_cap = t->cap;

        t->slots = calloc(cap, sizeof(*t->slots));
        if (!t->slots) {
                t->slots = old;
                return -ENOMEM;
        }
        t->cap = cap;
        for (size_t i = 0; i < old_cap; i++)
                if (old[i])
                        t->slots[find(t, key_of(t, old[i]))] = old[i];
        free(old);
        return 0;
}

int client_id_table_put(struct client_id_table *t, void *item) {
        int r;

        if (client_id_table_get(t, key_of(t, item)))
                return -EEXIST;
        if ((t->n + 1) * 2 > t->cap && (r = grow(t)) < 0)
                return r;
        t->slots[find(t, key_of(t, item))] = item;
        t->n++;
        return 0;
}

void client_id_table_remove(struct client_id_table *t, const void *item) {
        if (t->n == 0)
                return;
        size_t mask = t->cap - 1, i = find(t, key_of(t, item));
        if (t->slots[i] != item)
                return;
        t->slots[i] = NULL;
        t->n--;
        /* Backward shift: move later members of the run into the hole when their home slot
         * does not lie (cyclically) between the hole and them. */
        for (size_t j = (i + 1) & mask; t->slots[j]; j = (j + 1) & mask) {
                size_t home = hash(key_of(t, t->slots[j])) & mask;
                if (((j - home) & mask) >= ((j - i) & mask)) {
                        t->slots[i] = t->slots[j];
                        t->slots[j] = NULL;
                        i = j;
                }
        }
}
