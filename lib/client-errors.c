/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "client-internal.h"

/* The daemon's error codes (docs/protocol.md) as errno values; asyncllm-client.h lists them
 * for users. */
static const struct {
        const char *code;
        int errnum;
} codes[] = {
        { "invalid_json", EBADMSG },
        { "invalid_utf8", EILSEQ },
        { "line_too_long", EMSGSIZE },
        { "invalid_request", EINVAL },
        { "unknown_op", EOPNOTSUPP },
        { "invalid_params", EINVAL },
        { "duplicate_id", EEXIST },
        { "too_many_requests", EBUSY },
        { "permission_denied", EACCES },
        { "unsupported_protocol", EPROTONOSUPPORT },
        { "engine_dead", EIO },
        { "shutting_down", ESHUTDOWN },
        { "not_found", ENOENT },
        { "internal_error", EREMOTEIO },
        { "overloaded", EAGAIN },
};

int client_errno_from_code(const char *code) {
        if (code)
                for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
                        if (strcmp(codes[i].code, code) == 0)
                                return -codes[i].errnum;
        return -EPROTO;
}
