/* SPDX-License-Identifier: MIT */
#pragma once

/* NDJSON framing, shared by the daemon and libasyncllm-client: bytes go in as they arrive
 * (partial lines, many lines at once), complete lines come out. No JSON here and no I/O.
 *
 * Rules (docs/protocol.md):
 * - A line ends at "\n". One "\r" right before the "\n" is dropped too, so that a client
 *   typing into a terminal (socat, telnet) works; JSON treats "\r" as whitespace anyway.
 * - Empty lines ("" or "\r") are skipped silently.
 * - A line longer than max_line_bytes (counting every byte before its "\n", a "\r"
 *   included) is reported once, -EMSGSIZE, as soon as it is known to be too long, and its
 *   bytes are dropped as they arrive, up to and including its "\n": it is never buffered.
 * - A line that is not valid UTF-8 (overlong forms, surrogates and code points above
 *   U+10FFFF are not) is reported, -EILSEQ, and the reader goes on with the next line.
 * - NUL bytes are valid UTF-8 and stay in the line (JSON refuses them: the parser's job);
 *   the length tells where the line ends.
 * - At the end of input (ndjson_reader_end()), bytes after the last "\n" are one more line,
 *   as if a "\n" followed: a peer that closes without a final newline loses nothing.
 *
 * Memory: at most max_line_bytes + NDJSON_READ_CHUNK + 2 bytes per reader, allocated as
 * needed and given back when a long line is done.
 *
 * Use: read into ndjson_reader_space() and ndjson_reader_commit() (no copy), or hand over
 * bytes with ndjson_reader_feed(); then call ndjson_reader_next() until it returns 0 before
 * adding more. A reader is used by one thread at a time. */

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The protocol's default line limit (max-line-bytes). */
#define NDJSON_LINE_MAX_DEFAULT ((size_t) 1024 * 1024)
/* Room offered for a read beyond the line being assembled. */
#define NDJSON_READ_CHUNK ((size_t) 4096)

struct ndjson_reader;

struct ndjson_line {
        char *data; /* len bytes, then a NUL; NUL bytes may occur inside */
        size_t len; /* without the "\n" and the "\r" before it */
};

/* max_line_bytes: 1 to SIZE_MAX / 2. Returns 0, -EINVAL or -ENOMEM. */
int ndjson_reader_new(size_t max_line_bytes, struct ndjson_reader **ret);
/* Accepts NULL; returns NULL. */
struct ndjson_reader *ndjson_reader_free(struct ndjson_reader *r);

size_t ndjson_reader_max_line(const struct ndjson_reader *r);

/* Where the next read may put up to *ret_size bytes (at least 1). Returns 0, -ENOMEM,
 * -ENOBUFS when complete lines wait to be taken with ndjson_reader_next(), or -EPIPE after
 * ndjson_reader_end(). */
int ndjson_reader_space(struct ndjson_reader *r, void **ret_buf, size_t *ret_size);
/* n bytes (at most the size space gave) were written at the buffer space gave. */
void ndjson_reader_commit(struct ndjson_reader *r, size_t n);

/* Copies as many of the len bytes as there is room for and returns how many it took (fewer
 * than len when lines wait to be taken: call ndjson_reader_next() until 0, then feed the
 * rest), or a negative errno as ndjson_reader_space(). */
ssize_t ndjson_reader_feed(struct ndjson_reader *r, const void *data, size_t len);

/* No more input will come: ndjson_reader_next() turns what is left into a last line. */
void ndjson_reader_end(struct ndjson_reader *r);

/* The next complete line:
 *   1        a line in *ret, valid until the next call on this reader;
 *   0        nothing complete: more input is needed (or, after ndjson_reader_end(), nothing
 *            is left);
 *   -EMSGSIZE a line over the limit, now being skipped;
 *   -EILSEQ  a line that is not valid UTF-8, in *ret (for diagnostics), skipped.
 * After an error the reader goes on: call again. */
int ndjson_reader_next(struct ndjson_reader *r, struct ndjson_line *ret);

/* Bytes held of a line not yet complete (0 while a line over the limit is being skipped). */
size_t ndjson_reader_pending(const struct ndjson_reader *r);
/* Whether a line over the limit is being skipped up to its "\n". */
bool ndjson_reader_skipping(const struct ndjson_reader *r);

/* Whether s[0..len) is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF). NUL bytes are well-formed. */
bool ndjson_utf8_valid(const char *s, size_t len);
