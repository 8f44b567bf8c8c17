/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "error.h"

int error_set(struct error *err, int errnum, const char *fmt, ...) {
        if (err) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err->message, sizeof(err->message), fmt, ap);
                va_end(ap);
        }
        return -errnum;
}

int error_prefix(struct error *err, int r, const char *fmt, ...) {
        if (err) {
                char prefix[ERROR_MESSAGE_MAX], joined[2 * ERROR_MESSAGE_MAX + 2];
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(prefix, sizeof(prefix), fmt, ap);
                va_end(ap);
                snprintf(joined, sizeof(joined), "%s: %s", prefix, err->message);
                /* a message too long for the buffer is cut, never overrun */
                memcpy(err->message, joined, sizeof(err->message) - 1);
                err->message[sizeof(err->message) - 1] = 0;
        }
        return r;
}
