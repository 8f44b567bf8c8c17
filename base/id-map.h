/* SPDX-License-Identifier: MIT */
#pragma once

/* Items by their string id: open addressing with linear probing and backward-shift
 * deletion, so that lookups stay O(1) with thousands of items and no tombstones pile up.
 * The map stores pointers; each item holds its own id as a `char *` field at key_offset. */

#include <stddef.h>
#include <stdint.h>

struct id_map {
        void **slots;      /* (cap), NULL = empty */
        uint32_t cap;      /* a power of two */
        uint32_t n;
        size_t key_offset; /* offsetof(item type, its char * id) */
};

void id_map_init(struct id_map *m, size_t key_offset);
void id_map_done(struct id_map *m);
void *id_map_get(const struct id_map *m, const char *id);
/* -EEXIST when the id is taken, -ENOMEM. */
int id_map_put(struct id_map *m, void *item);
void id_map_remove(struct id_map *m, const void *item);
