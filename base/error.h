/* SPDX-License-Identifier: MIT */
#pragma once

/* Errors cross the engine's API as a negative errno return value plus a human-readable
 * message that names what is wrong and, where possible, how to fix it. Library code never
 * logs: the caller decides where the message goes. */

#include <stddef.h>

#define ERROR_MESSAGE_MAX 512

struct error {
        char message[ERROR_MESSAGE_MAX];
};

/* Formats the message into err (which may be NULL) and returns -errnum, so that a failing
 * path reads: return error_set(err, EINVAL, "...", ...); */
int error_set(struct error *err, int errnum, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Prefixes the existing message, e.g. with the file name, and returns r unchanged. */
int error_prefix(struct error *err, int r, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
