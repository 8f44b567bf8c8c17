/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "id-map.h"

static uint64_t hash_id(const char *id) {
        uint64_t h = UINT64_C(0xcbf29ce484222325);
        for (; *id; id++)
                h = (h ^ (uint8_t) *id) * UINT64_C(0x100000001b3);
        return h ^ (h >> 29);
}

static const char *key_of(const struct id_map *m, const void *item) {
        return *(char *const *) ((const char *) item + m->key_offset);
}

void id_map_init(struct id_map *m, size_t key_offset) {
        *m = (struct id_map) { .key_offset = key_offset };
}

void id_map_done(struct id_map *m) {
        free(m->slots);
        *m = (struct id_map) { .key_offset = m->key_offset };
}

static uint32_t find_slot(const struct id_map *m, const char *id) {
        uint32_t i = (uint32_t) hash_id(id) & (m->cap - 1);
        while (m->slots[i] && strcmp(key_of(m, m->slots[i]), id) != 0)
                i = (i + 1) & (m->cap - 1);
        return i;
}

void *id_map_get(const struct id_map *m, const char *id) {
        if (m->n == 0)
                return NULL;
        return m->slots[find_slot(m, id)];
}

static int grow(struct id_map *m) {
        struct id_map bigger = { .cap = m->cap ? m->cap * 2 : 64, .key_offset = m->key_offset };
        bigger.slots = calloc(bigger.cap, sizeof(*bigger.slots));
        if (!bigger.slots)
                return -ENOMEM;
        for (uint32_t i = 0; i < m->cap; i++)
                if (m->slots[i])
                        bigger.slots[find_slot(&bigger, key_of(m, m->slots[i]))] = m->slots[i];
        bigger.n = m->n;
        free(m->slots);
        *m = bigger;
        return 0;
}

int id_map_put(struct id_map *m, void *item) {
        if ((m->n + 1) * 2 > m->cap) {
                int rc = grow(m);
                if (rc < 0)
                        return rc;
        }
        uint32_t i = find_slot(m, key_of(m, item));
        if (m->slots[i])
                return -EEXIST;
        m->slots[i] = item;
        m->n++;
        return 0;
}

void id_map_remove(struct id_map *m, const void *item) {
        if (m->n == 0)
                return;
        uint32_t i = find_slot(m, key_of(m, item));
        if (m->slots[i] != item)
                return;
        m->slots[i] = NULL;
        m->n--;
        /* shift back the entries of the probe run that follow, so every lookup still finds them */
        for (uint32_t j = (i + 1) & (m->cap - 1); m->slots[j]; j = (j + 1) & (m->cap - 1)) {
                uint32_t home = (uint32_t) hash_id(key_of(m, m->slots[j])) & (m->cap - 1);
                /* move j to the hole i when its home lies cyclically outside (i, j] */
                if (((j - home) & (m->cap - 1)) >= ((j - i) & (m->cap - 1))) {
                        m->slots[i] = m->slots[j];
                        m->slots[j] = NULL;
                        i = j;
                }
        }
}
