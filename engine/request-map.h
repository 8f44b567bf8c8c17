/* SPDX-License-Identifier: MIT */
#pragma once

/* Requests by id: open addressing with linear probing and backward-shift deletion, so that
 * lookups stay O(1) with thousands of requests in flight and no tombstones pile up. */

#include <stdint.h>

#include "request.h"

struct request_map {
        struct request **slots; /* (cap), NULL = empty */
        uint32_t cap;           /* a power of two */
        uint32_t n;
};

void request_map_init(struct request_map *m);
void request_map_done(struct request_map *m);
struct request *request_map_get(const struct request_map *m, const char *id);
/* -EEXIST when the id is taken, -ENOMEM. */
int request_map_put(struct request_map *m, struct request *r);
void request_map_remove(struct request_map *m, const struct request *r);
