/* SPDX-License-Identifier: MIT */
/* JSON helpers of libasyncllm-client, on json-c. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client-internal.h"
#include "ndjson-reader.h"

struct json_object *client_json_member(struct json_object *o, const char *key, enum json_type type) {
        struct json_object *v = NULL;
        if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, type))
                return NULL;
        return v;
}

struct json_object *client_json_double(double d) {
        char buf[32];
        /* %.17g always reads back the same; a shorter form does for most values people
         * write (0.7 rather than 0.69999999999999996). */
        for (int digits = 15; digits <= 17; digits++) {
                snprintf(buf, sizeof(buf), "%.*g", digits, d);
                if (strtod(buf, NULL) == d)
                        break;
        }
        /* Finite values printed by %g are JSON numbers; a point keeps integral ones doubles
         * ("1.0", not "1") for a reader that tells the types apart. */
        if (!strpbrk(buf, ".e"))
                strcat(buf, ".0");
        return json_object_new_double_s(d, buf);
}

int client_json_serialize(struct json_object *o, char **ret, size_t *ret_len) {
        size_t len = 0;
        const char *s = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE,
                                                          &len);
        if (!s)
                return -ENOMEM;
        char *copy = malloc(len + 1);
        if (!copy)
                return -ENOMEM;
        memcpy(copy, s, len + 1);
        *ret = copy;
        if (ret_len)
                *ret_len = len;
        return 0;
}

int client_json_parse(const char *json, struct json_object **ret) {
        if (!json || !ndjson_utf8_valid(json, strlen(json)))
                return -EINVAL;
        struct json_tokener *tok = json_tokener_new_ex(CLIENT_JSON_MAX_DEPTH);
        if (!tok)
                return -ENOMEM;
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
        size_t len = strlen(json);
        if (len >= INT32_MAX) {
                json_tokener_free(tok);
                return -EINVAL;
        }
        /* With the NUL, which ends a number or literal at the end. */
        struct json_object *v = json_tokener_parse_ex(tok, json, (int) len + 1);
        enum json_tokener_error e = json_tokener_get_error(tok);
        size_t end = json_tokener_get_parse_end(tok);
        json_tokener_free(tok);
        if (e != json_tokener_success) {
                json_object_put(v);
                return -EINVAL;
        }
        for (; end < len; end++)
                if (!strchr(" \t\r\n", json[end])) {
                        json_object_put(v);
                        return -EINVAL;
                }
        *ret = v;
        return 0;
}
