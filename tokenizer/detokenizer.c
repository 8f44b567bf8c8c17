/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "detokenizer.h"
#include "unicode.h"

struct detokenizer {
        const struct tokenizer *tk;
        bool skip_special;
        uint8_t held[UTF8_MAX_LEN - 1]; /* an acceptable prefix of a character: 3 bytes at most */
        size_t n_held;
        char *out; /* what the last call returned */
        size_t out_cap;
};

int detokenizer_new(const struct tokenizer *tk, bool skip_special, struct detokenizer **ret, struct error *err) {
        struct detokenizer *d = calloc(1, sizeof(*d));
        if (!d)
                return error_set(err, ENOMEM, "out of memory creating a detokenizer");
        d->tk = tk;
        d->skip_special = skip_special;
        *ret = d;
        return 0;
}

void detokenizer_free(struct detokenizer *d) {
        if (!d)
                return;
        free(d->out);
        free(d);
}

void detokenizer_reset(struct detokenizer *d) {
        d->n_held = 0;
}

static int reserve(struct detokenizer *d, size_t size, struct error *err) {
        if (size <= d->out_cap)
                return 0;
        size_t cap = d->out_cap ? d->out_cap : 64;
        while (cap < size)
                cap *= 2;
        char *p = realloc(d->out, cap);
        if (!p)
                return error_set(err, ENOMEM, "out of memory detokenizing");
        d->out = p;
        d->out_cap = cap;
        return 0;
}

int detokenizer_push(struct detokenizer *d, int32_t id, const char **ret_text, size_t *ret_len,
                     struct error *err) {
        const uint8_t *bytes;
        size_t n_bytes = 0, o = 0;
        int r;

        bytes = (const uint8_t *) tokenizer_token_bytes(d->tk, id, &n_bytes);
        if (!bytes)
                return error_set(err, EINVAL, "token id %" PRId32 " is out of range (vocabulary of %" PRId32 ")", id,
                                 tokenizer_vocab_size(d->tk));
        if (d->skip_special && tokenizer_is_special(d->tk, id))
                n_bytes = 0;

        /* Each input byte yields at most 3 output bytes (a U+FFFD). */
        r = reserve(d, 3 * (d->n_held + n_bytes) + 1, err);
        if (r < 0)
                return r;

        /* The held prefix followed by the token's bytes, walked as one stream. */
        size_t total = d->n_held + n_bytes, i = 0;
        while (i < total) {
                uint8_t window[UTF8_MAX_LEN];
                size_t avail = total - i < UTF8_MAX_LEN ? total - i : UTF8_MAX_LEN, n;
                uint32_t cp;

                for (size_t k = 0; k < avail; k++) {
                        size_t at = i + k;
                        window[k] = at < d->n_held ? d->held[at] : bytes[at - d->n_held];
                }
                switch (utf8_next(window, avail, &cp, &n)) {
                case UTF8_VALID:
                        memcpy(d->out + o, window, n);
                        o += n;
                        break;
                case UTF8_INVALID:
                        o += utf8_encode(UNICODE_REPLACEMENT, d->out + o);
                        break;
                case UTF8_INCOMPLETE:
                        /* Only at the very end: keep it for the next token. */
                        memcpy(d->held, window, n);
                        d->n_held = n;
                        d->out[o] = '\0';
                        *ret_text = d->out;
                        *ret_len = o;
                        return 0;
                }
                i += n;
        }

        d->n_held = 0;
        d->out[o] = '\0';
        *ret_text = d->out;
        *ret_len = o;
        return 0;
}

int detokenizer_finish(struct detokenizer *d, const char **ret_text, size_t *ret_len, struct error *err) {
        size_t o = 0;
        int r;

        r = reserve(d, UTF8_MAX_LEN, err);
        if (r < 0)
                return r;
        if (d->n_held > 0)
                o = utf8_encode(UNICODE_REPLACEMENT, d->out);
        d->n_held = 0;
        d->out[o] = '\0';
        *ret_text = d->out;
        *ret_len = o;
        return 0;
}
