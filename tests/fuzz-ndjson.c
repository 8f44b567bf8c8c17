/* SPDX-License-Identifier: MIT */
/* Fuzzes the NDJSON line reader (lib/ndjson-reader.c) that both the daemon and the client
 * library put in front of their sockets. The first byte picks the line limit, the second how
 * the rest is cut into reads; the rest is the stream. Whatever the cuts, the reader must give
 * exactly the events of a plain reference split of the whole stream, never hold more than
 * its memory bound, and never crash. Built with libFuzzer, or with fuzz-main.c to replay the
 * committed corpus (tests/fuzz/ndjson) as a regression test. */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ndjson-reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* One event: a line (kind 1), a line too long (-EMSGSIZE) or one not UTF-8 (-EILSEQ). */
struct event {
        int kind;
        const uint8_t *bytes; /* into the input, for lines and -EILSEQ */
        size_t len;
};

struct events {
        struct event *v;
        size_t n, cap;
};

static void check(bool ok) {
        if (!ok)
                abort();
}

static void push(struct events *e, int kind, const uint8_t *bytes, size_t len) {
        if (e->n == e->cap) {
                e->cap = e->cap ? 2 * e->cap : 16;
                e->v = realloc(e->v, e->cap * sizeof(*e->v));
                check(e->v != NULL);
        }
        e->v[e->n++] = (struct event) { kind, bytes, len };
}

/* The rules of ndjson-reader.h applied to the whole stream at once. */
static void reference(const uint8_t *s, size_t len, size_t max_line, struct events *out) {
        size_t at = 0;
        while (at < len) {
                const uint8_t *nl = memchr(s + at, '\n', len - at);
                size_t raw = nl ? (size_t) (nl - s) - at : len - at;
                size_t n = raw;
                if (n > 0 && s[at + n - 1] == '\r')
                        n--;
                if (raw > max_line)
                        push(out, -EMSGSIZE, NULL, 0);
                else if (n > 0)
                        push(out, ndjson_utf8_valid((const char *) s + at, n) ? 1 : -EILSEQ, s + at, n);
                at += raw + (nl ? 1 : 0);
        }
}

static uint32_t next_random(uint32_t *state) {
        *state = *state * 1664525u + 1013904223u;
        return *state >> 16;
}

static void drain(struct ndjson_reader *r, size_t max_line, const struct events *want, size_t *i) {
        struct ndjson_line line;
        int q;
        while ((q = ndjson_reader_next(r, &line)) != 0) {
                check(*i < want->n);
                const struct event *w = &want->v[(*i)++];
                check(q == w->kind);
                if (q == -EMSGSIZE)
                        continue;
                check(line.len == w->len && line.len <= max_line);
                check(memcmp(line.data, w->bytes, line.len) == 0);
                check(line.data[line.len] == 0);
                check(memchr(line.data, '\n', line.len) == NULL);
        }
        check(ndjson_reader_pending(r) <= max_line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 2)
                return 0;
        /* Limits from 1 byte up, most of them small so that inputs reach them. */
        size_t max_line = data[0] < 224 ? (size_t) data[0] % 64 + 1 : ((size_t) data[0] - 223) * 100;
        uint32_t rng = data[1];
        bool zero_copy = data[1] & 1;
        const uint8_t *s = data + 2;
        size_t len = size - 2;

        struct events want = { 0 };
        reference(s, len, max_line, &want);

        struct ndjson_reader *r = NULL;
        check(ndjson_reader_new(max_line, &r) == 0);
        size_t at = 0, i = 0;
        while (at < len) {
                /* Reads of 1 to 64 bytes, or as much as there is room for. */
                size_t cut = next_random(&rng) % 80;
                cut = cut < 64 ? cut + 1 : len - at;
                if (cut > len - at)
                        cut = len - at;
                if (zero_copy) {
                        void *buf;
                        size_t room;
                        check(ndjson_reader_space(r, &buf, &room) == 0);
                        check(room >= 1);
                        if (cut > room)
                                cut = room;
                        memcpy(buf, s + at, cut);
                        ndjson_reader_commit(r, cut);
                } else {
                        ssize_t n = ndjson_reader_feed(r, s + at, cut);
                        check(n > 0 && (size_t) n <= cut);
                        cut = (size_t) n;
                }
                at += cut;
                drain(r, max_line, &want, &i);
        }
        ndjson_reader_end(r);
        drain(r, max_line, &want, &i);
        check(i == want.n);
        check(ndjson_reader_pending(r) == 0);

        ndjson_reader_free(r);
        free(want.v);
        return 0;
}
