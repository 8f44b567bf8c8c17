/* SPDX-License-Identifier: MIT */
/* Control ops: the socket through the client library, or the matching D-Bus method; the
 * result is the same JSON either way. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "ctl-bus.h"
#include "ctl-call.h"
#include "ctl-socket.h"

struct json_object *ctl_json_member(struct json_object *o, const char *key) {
        struct json_object *v = NULL;
        return o && json_object_object_get_ex(o, key, &v) ? v : NULL;
}

int ctl_call(struct ctl *ctl, const char *op, struct json_object *args, struct json_object **ret_result) {
        struct json_object *result = NULL;
        char *text = NULL;
        int status;

        if (ctl->bus != CTL_BUS_NONE)
                status = ctl_bus_call(ctl, op, args, &result);
        else {
                status = ctl_socket_call(ctl, op, args ? json_object_to_json_string_ext(args, JSON_C_TO_STRING_PLAIN) : NULL,
                                         &text);
                if (status == CTL_EXIT_OK && !(result = json_tokener_parse(text)) && strcmp(text, "null") != 0)
                        status = ctl_fail(ctl, CTL_EXIT_REQUEST, "the daemon's result is not JSON: %.80s", text);
                free(text);
        }
        if (status != CTL_EXIT_OK) {
                json_object_put(result);
                return status;
        }
        if (ret_result)
                *ret_result = result;
        else
                json_object_put(result);
        return CTL_EXIT_OK;
}
