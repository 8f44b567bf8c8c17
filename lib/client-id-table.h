/* SPDX-License-Identifier: MIT */
#pragma once

/* The client's requests in flight by id: open addressing with linear probing and
 * backward-shift deletion (no tombstones), grown at 1/2 load. Stores pointers to items that
 * hold their own id as a `char *` at key_offset. Private to libasyncllm-client. */

#include <stddef.h>
#include <stdint.h>

struct client_id_table {
        void **slots;      /* (cap), NULL = empty */
        size_t cap;        /* 0 or a power of two */
        size_t n;
        size_t key_offset; /* offsetof(item type, its char * id) */
};

void client_id_table_init(struct client_id_table *t, size_t key_offset);
/* Frees the slots, not the items. */
void client_id_table_done(struct client_id_table *t);
void *client_id_table_get(const struct client_id_table *t, const char *id);
/* -EEXIST when the id is taken, -ENOMEM. */
int client_id_table_put(struct client_id_table *t, void *item);
/* Does nothing when the item is not there. */
void client_id_table_remove(struct client_id_table *t, const void *item);
