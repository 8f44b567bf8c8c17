/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ndjson-reader.h"

/* What a fresh reader allocates, and what an idle one shrinks back to. */
#define INITIAL_CAPACITY ((size_t) 4096)
#define SHRINK_ABOVE ((size_t) 64 * 1024)

struct ndjson_reader {
        char *buf;        /* (cap + 1): the + 1 holds the NUL after a last line */
        size_t cap;       /* grows up to cap_max */
        size_t cap_max;   /* max_line + 1 ("\n") + NDJSON_READ_CHUNK */
        size_t max_line;
        size_t start;     /* first byte not taken yet */
        size_t scan;      /* [start, scan) holds no "\n" */
        size_t end;       /* end of the bytes held */
        size_t committable; /* what the last space() offered */
        bool skipping;    /* dropping a line over the limit up to its "\n" */
        bool eof;
};

int ndjson_reader_new(size_t max_line_bytes, struct ndjson_reader **ret) {
        if (max_line_bytes == 0 || max_line_bytes > SIZE_MAX / 2)
                return -EINVAL;
        struct ndjson_reader *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        r->max_line = max_line_bytes;
        r->cap_max = max_line_bytes + 1 + NDJSON_READ_CHUNK;
        r->cap = r->cap_max < INITIAL_CAPACITY ? r->cap_max : INITIAL_CAPACITY;
        r->buf = malloc(r->cap + 1);
        if (!r->buf) {
                free(r);
                return -ENOMEM;
        }
        *ret = r;
        return 0;
}

struct ndjson_reader *ndjson_reader_free(struct ndjson_reader *r) {
        if (r) {
                free(r->buf);
                free(r);
        }
        return NULL;
}

size_t ndjson_reader_max_line(const struct ndjson_reader *r) {
        return r->max_line;
}

static int resize(struct ndjson_reader *r, size_t cap) {
        char *b = realloc(r->buf, cap + 1);
        if (!b)
                return -ENOMEM;
        r->buf = b;
        r->cap = cap;
        return 0;
}

int ndjson_reader_space(struct ndjson_reader *r, void **ret_buf, size_t *ret_size) {
        int q;

        r->committable = 0;
        if (r->eof)
                return -EPIPE;
        if (r->start == r->end) {
                r->start = r->scan = r->end = 0;
                /* A long line is over: give its memory back. Failing to is harmless. */
                if (r->cap > SHRINK_ABOVE)
                        (void) resize(r, INITIAL_CAPACITY);
        } else if (r->start > 0) {
                memmove(r->buf, r->buf + r->start, r->end - r->start);
                r->end -= r->start;
                r->scan -= r->start;
                r->start = 0;
        }

        size_t want = r->end + NDJSON_READ_CHUNK;
        if (want > r->cap_max)
                want = r->cap_max;
        if (r->cap < want) {
                size_t cap = r->cap * 2;
                if (cap < want)
                        cap = want;
                if (cap > r->cap_max)
                        cap = r->cap_max;
                if ((q = resize(r, cap)) < 0)
                        return q;
        }
        if (r->end >= r->cap)
                return -ENOBUFS;
        r->committable = r->cap - r->end;
        *ret_buf = r->buf + r->end;
        *ret_size = r->committable;
        return 0;
}

void ndjson_reader_commit(struct ndjson_reader *r, size_t n) {
        if (n > r->committable)
                n = r->committable; /* a caller's bug; never write past the buffer */
        r->end += n;
        r->committable -= n;
}

ssize_t ndjson_reader_feed(struct ndjson_reader *r, const void *data, size_t len) {
        size_t taken = 0;

        while (taken < len) {
                void *buf;
                size_t size;
                int q = ndjson_reader_space(r, &buf, &size);
                if (q == -ENOBUFS)
                        break;
                if (q < 0)
                        return taken > 0 ? (ssize_t) taken : q;
                if (size > len - taken)
                        size = len - taken;
                memcpy(buf, (const char *) data + taken, size);
                ndjson_reader_commit(r, size);
                taken += size;
        }
        return (ssize_t) taken;
}

void ndjson_reader_end(struct ndjson_reader *r) {
        r->eof = true;
        r->committable = 0;
}

size_t ndjson_reader_pending(const struct ndjson_reader *r) {
        return r->skipping ? 0 : r->end - r->start;
}

bool ndjson_reader_skipping(const struct ndjson_reader *r) {
        return r->skipping;
}

/* Hands out [start, start + len) as a line and moves past it and its terminator (of
 * skip_after bytes). */
static int take_line(struct ndjson_reader *r, size_t len, size_t skip_after, struct ndjson_line *ret) {
        char *line = r->buf + r->start;

        r->start += len + skip_after;
        r->scan = r->start;
        if (len > 0 && line[len - 1] == '\r')
                len--;
        line[len] = 0; /* over the "\r" or "\n", or the spare byte after a last line */
        ret->data = line;
        ret->len = len;
        if (!ndjson_utf8_valid(line, len))
                return -EILSEQ;
        return 1;
}

int ndjson_reader_next(struct ndjson_reader *r, struct ndjson_line *ret) {
        for (;;) {
                char *nl = r->scan < r->end ? memchr(r->buf + r->scan, '\n', r->end - r->scan) : NULL;

                if (r->skipping) {
                        if (!nl) {
                                r->start = r->scan = r->end;
                                return 0;
                        }
                        r->start = r->scan = (size_t) (nl - r->buf) + 1;
                        r->skipping = false;
                        continue;
                }

                if (!nl) {
                        r->scan = r->end;
                        if (r->end - r->start > r->max_line) {
                                r->skipping = true;
                                r->start = r->scan = r->end;
                                return -EMSGSIZE;
                        }
                        if (!r->eof || r->start == r->end)
                                return 0;
                        /* The end of input ends the last line, as a "\n" would. */
                        if (r->end - r->start == 1 && r->buf[r->start] == '\r') {
                                r->start = r->scan = r->end;
                                return 0;
                        }
                        return take_line(r, r->end - r->start, 0, ret);
                }

                size_t len = (size_t) (nl - r->buf) - r->start;
                if (len > r->max_line) {
                        /* All of it came at once: skip it whole. */
                        r->start = r->scan = (size_t) (nl - r->buf) + 1;
                        return -EMSGSIZE;
                }
                if (len == 0 || (len == 1 && r->buf[r->start] == '\r')) {
                        r->start = r->scan = (size_t) (nl - r->buf) + 1;
                        continue;
                }
                return take_line(r, len, 1, ret);
        }
}

bool ndjson_utf8_valid(const char *s, size_t len) {
        const uint8_t *p = (const uint8_t *) s, *e = p + len;

        while (p < e) {
                uint8_t c = *p;
                if (c < 0x80) {
                        p++;
                        continue;
                }
                /* The second byte's range depends on the first (RFC 3629's table); the
                 * others are 80..BF. */
                size_t n;
                uint8_t lo = 0x80, hi = 0xBF;
                if (c >= 0xC2 && c <= 0xDF)
                        n = 2;
                else if (c >= 0xE0 && c <= 0xEF) {
                        n = 3;
                        if (c == 0xE0)
                                lo = 0xA0;
                        else if (c == 0xED)
                                hi = 0x9F;
                } else if (c >= 0xF0 && c <= 0xF4) {
                        n = 4;
                        if (c == 0xF0)
                                lo = 0x90;
                        else if (c == 0xF4)
                                hi = 0x8F;
                } else
                        return false;
                if ((size_t) (e - p) < n)
                        return false;
                if (p[1] < lo || p[1] > hi)
                        return false;
                for (size_t i = 2; i < n; i++)
                        if (p[i] < 0x80 || p[i] > 0xBF)
                                return false;
                p += n;
        }
        return true;
}
