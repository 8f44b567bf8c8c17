/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "special-tokens.h"

/* Trie edges in one open-addressing table keyed by parent node and byte; key 0 marks a
 * free slot (no edge leads back to the root, node 0, so no real key is 0). */
struct trie_edge {
        uint64_t key; /* child << 40 | parent << 8 | byte: kept whole to tell slots apart */
};

struct special_matcher {
        struct special_token *tokens; /* (n_tokens) priority order */
        size_t n_tokens;
        int32_t *node_token; /* (n_nodes) the first token spelled by the path to the node, or -1 */
        size_t n_nodes;
        struct trie_edge *edges; /* (edge_mask + 1) */
        size_t edge_mask;
};

static uint64_t edge_hash(uint64_t parent, uint8_t byte) {
        uint64_t x = parent << 8 | byte;
        x ^= x >> 33;
        x *= 0xff51afd7ed558ccdull;
        x ^= x >> 33;
        return x;
}

static int64_t trie_child(const struct special_matcher *m, uint64_t parent, uint8_t byte) {
        uint64_t want = parent << 8 | byte;
        for (size_t i = edge_hash(parent, byte) & m->edge_mask;; i = (i + 1) & m->edge_mask) {
                uint64_t key = m->edges[i].key;
                if (key == 0)
                        return -1;
                if ((key & ((1ull << 40) - 1)) == want)
                        return (int64_t) (key >> 40);
        }
}

static void trie_add_edge(struct special_matcher *m, uint64_t parent, uint8_t byte, uint64_t child) {
        size_t i = edge_hash(parent, byte) & m->edge_mask;
        while (m->edges[i].key != 0)
                i = (i + 1) & m->edge_mask;
        m->edges[i].key = child << 40 | parent << 8 | byte;
}

int special_matcher_new(const struct special_token *tokens, size_t n, struct special_matcher **ret) {
        struct special_matcher *m = calloc(1, sizeof(*m));
        size_t max_nodes = 1, n_edges = 16;

        if (!m)
                return -ENOMEM;
        for (size_t k = 0; k < n; k++)
                max_nodes += tokens[k].len;
        if (max_nodes >= 1ull << 24) { /* the edge key's child field */
                free(m);
                return -ENOMEM;
        }
        while (n_edges < 2 * max_nodes)
                n_edges *= 2;
        m->tokens = malloc((n ? n : 1) * sizeof(*m->tokens));
        m->node_token = malloc(max_nodes * sizeof(*m->node_token));
        m->edges = calloc(n_edges, sizeof(*m->edges));
        if (!m->tokens || !m->node_token || !m->edges) {
                special_matcher_free(m);
                return -ENOMEM;
        }
        memcpy(m->tokens, tokens, n * sizeof(*tokens));
        m->n_tokens = n;
        m->edge_mask = n_edges - 1;
        m->n_nodes = 1;
        m->node_token[0] = -1;

        for (size_t k = 0; k < n; k++) {
                uint64_t node = 0;
                for (uint32_t i = 0; i < tokens[k].len; i++) {
                        uint8_t byte = (uint8_t) tokens[k].text[i];
                        int64_t child = trie_child(m, node, byte);
                        if (child < 0) {
                                child = (int64_t) m->n_nodes++;
                                m->node_token[child] = -1;
                                trie_add_edge(m, node, byte, (uint64_t) child);
                        }
                        node = (uint64_t) child;
                }
                /* Two tokens spelled alike: the first in priority order takes every place. */
                if (m->node_token[node] < 0)
                        m->node_token[node] = (int32_t) k;
        }
        *ret = m;
        return 0;
}

void special_matcher_free(struct special_matcher *m) {
        if (!m)
                return;
        free(m->tokens);
        free(m->node_token);
        free(m->edges);
        free(m);
}

/* memmem() is a GNU extension. */
static const char *find_bytes(const char *hay, size_t hay_len, const char *needle, size_t needle_len) {
        if (needle_len > hay_len)
                return NULL;
        const char *last = hay + (hay_len - needle_len);
        for (const char *p = hay; p <= last; p++) {
                p = memchr(p, needle[0], (size_t) (last - p) + 1);
                if (!p)
                        return NULL;
                if (memcmp(p, needle, needle_len) == 0)
                        return p;
        }
        return NULL;
}

/* Marks in seen[] the tokens that occur anywhere in the text and may be matched. */
static bool find_occurring(const struct special_matcher *m, const char *text, size_t len, bool parse_special,
                           bool *seen) {
        bool any = false;
        for (size_t i = 0; i < len; i++) {
                uint64_t node = 0;
                for (size_t j = i; j < len; j++) {
                        int64_t child = trie_child(m, node, (uint8_t) text[j]);
                        if (child < 0)
                                break;
                        node = (uint64_t) child;
                        int32_t k = m->node_token[node];
                        if (k >= 0 && (parse_special || m->tokens[k].always)) {
                                seen[k] = true;
                                any = true;
                        }
                }
        }
        return any;
}

/* owner[i]: the token that took byte i, or one of these. */
#define OWNER_FREE (-1)
#define OWNER_STRIPPED (-2) /* white space an rstrip token dropped */

static bool is_c_space(char c) {
        return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Places token k at each free occurrence. */
static void place_token(const struct special_matcher *m, size_t k, const char *text, size_t len, int32_t *owner) {
        const struct special_token *t = &m->tokens[k];
        size_t pos = 0;
        const char *hit;

        while (pos < len && (hit = find_bytes(text + pos, len - pos, t->text, t->len))) {
                size_t at = (size_t) (hit - text), taken = at + t->len;
                /* The last byte already taken: no occurrence free of it starts before. */
                while (taken > at && owner[taken - 1] == OWNER_FREE)
                        taken--;
                if (taken > at) {
                        pos = taken;
                        continue;
                }
                for (size_t i = at; i < at + t->len; i++)
                        owner[i] = (int32_t) k;
                pos = at + t->len;
                if (t->rstrip)
                        for (; pos < len && owner[pos] == OWNER_FREE && is_c_space(text[pos]); pos++)
                                owner[pos] = OWNER_STRIPPED;
        }
}

static int fragments_add(struct fragment **items, size_t *n, size_t *cap, size_t start, size_t len, int32_t id) {
        if (*n == *cap) {
                size_t new_cap = *cap ? 2 * *cap : 16;
                struct fragment *p = realloc(*items, new_cap * sizeof(*p));
                if (!p)
                        return -ENOMEM;
                *items = p;
                *cap = new_cap;
        }
        (*items)[(*n)++] = (struct fragment) { .start = start, .len = len, .id = id };
        return 0;
}

int special_partition(const struct special_matcher *m, const char *text, size_t len, bool parse_special,
                      struct fragment **ret, size_t *ret_n) {
        struct fragment *items = NULL;
        size_t n = 0, cap = 0;
        bool *seen = NULL;
        int32_t *owner = NULL;
        int r = 0;

        *ret = NULL;
        *ret_n = 0;
        if (len == 0)
                return 0;
        if (m && m->n_tokens > 0) {
                seen = calloc(m->n_tokens, sizeof(*seen));
                if (!seen)
                        return -ENOMEM;
        }
        if (!seen || !find_occurring(m, text, len, parse_special, seen)) {
                r = fragments_add(&items, &n, &cap, 0, len, -1);
                goto finish;
        }

        owner = malloc(len * sizeof(*owner));
        if (!owner) {
                r = -ENOMEM;
                goto finish;
        }
        for (size_t i = 0; i < len; i++)
                owner[i] = OWNER_FREE;
        for (size_t k = 0; k < m->n_tokens; k++)
                if (seen[k])
                        place_token(m, k, text, len, owner);

        for (size_t i = 0; i < len && r == 0;) {
                size_t start = i;
                if (owner[i] == OWNER_STRIPPED)
                        i++;
                else if (owner[i] == OWNER_FREE) {
                        while (i < len && owner[i] == OWNER_FREE)
                                i++;
                        r = fragments_add(&items, &n, &cap, start, i - start, -1);
                } else {
                        const struct special_token *t = &m->tokens[owner[i]];
                        i += t->len;
                        r = fragments_add(&items, &n, &cap, start, t->len, t->id);
                }
        }

finish:
        free(seen);
        free(owner);
        if (r < 0) {
                free(items);
                return r;
        }
        *ret = items;
        *ret_n = n;
        return 0;
}
