/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "bus-json.h"

struct json_object *bus_basic_to_json(sd_bus_message *m, char type, int *rr) {
        union {
                uint8_t y;
                int b;
                int16_t n;
                uint16_t q;
                int32_t i;
                uint32_t u;
                int64_t x;
                uint64_t t;
                double d;
                const char *s;
        } v;
        if ((*rr = sd_bus_message_read_basic(m, type, &v)) <= 0)
                return NULL;
        switch (type) {
        case 'y': return json_object_new_int(v.y);
        case 'b': return json_object_new_boolean(v.b);
        case 'n': return json_object_new_int(v.n);
        case 'q': return json_object_new_int(v.q);
        case 'i': return json_object_new_int(v.i);
        case 'u': return json_object_new_int64(v.u);
        case 'x': return json_object_new_int64(v.x);
        case 't': return json_object_new_uint64(v.t);
        case 'd': return json_object_new_double(v.d);
        case 's':
        case 'o':
        case 'g': return json_object_new_string(v.s);
        default: /* a file descriptor has no JSON form */
                *rr = -EINVAL;
                return NULL;
        }
}

/* A dictionary's key becomes the text of its JSON form, so that 3 is "3". */
static struct json_object *read_dict(sd_bus_message *m, const char *sig, int *rr) {
        /* sig is "a{KV}": the entry's signature is KV, at most 255 bytes as every signature */
        char entry[SD_BUS_MAXIMUM_SIGNATURE_LENGTH + 1];
        size_t entry_len = strlen(sig) - 3;
        memcpy(entry, sig + 2, entry_len);
        entry[entry_len] = 0;

        struct json_object *o = json_object_new_object();
        if (!o) {
                *rr = -ENOMEM;
                return NULL;
        }
        if ((*rr = sd_bus_message_enter_container(m, 'a', sig + 1)) <= 0)
                goto fail;
        while ((*rr = sd_bus_message_enter_container(m, 'e', entry)) > 0) {
                struct json_object *k = bus_basic_to_json(m, entry[0], rr), *v = NULL;
                bool added = false;
                if (k && entry[0] == 'd' && !isfinite(json_object_get_double(k)))
                        *rr = -EDOM;
                else if (k && (v = bus_value_to_json(m, entry + 1, rr))) {
                        if (!(added = json_object_object_add(o, json_object_get_string(k), v) == 0)) {
                                json_object_put(v);
                                *rr = -ENOMEM;
                        }
                }
                json_object_put(k);
                if (!added || (*rr = sd_bus_message_exit_container(m)) < 0)
                        goto fail;
        }
        if (*rr < 0 || (*rr = sd_bus_message_exit_container(m)) < 0)
                goto fail;
        return o;
fail:
        if (*rr >= 0) /* a container that was not there */
                *rr = -ENXIO;
        json_object_put(o);
        return NULL;
}

static struct json_object *read_array(sd_bus_message *m, const char *sig, int *rr) {
        struct json_object *a = json_object_new_array();
        if (!a) {
                *rr = -ENOMEM;
                return NULL;
        }
        if ((*rr = sd_bus_message_enter_container(m, 'a', sig + 1)) <= 0)
                goto fail;
        while ((*rr = sd_bus_message_at_end(m, false)) == 0) {
                struct json_object *v = bus_value_to_json(m, sig + 1, rr);
                if (!v)
                        goto fail;
                if (json_object_array_add(a, v) < 0) {
                        json_object_put(v);
                        *rr = -ENOMEM;
                        goto fail;
                }
        }
        if (*rr < 0 || (*rr = sd_bus_message_exit_container(m)) < 0)
                goto fail;
        return a;
fail:
        if (*rr >= 0)
                *rr = -ENXIO;
        json_object_put(a);
        return NULL;
}

static struct json_object *read_variant(sd_bus_message *m, int *rr) {
        const char *contents;
        if ((*rr = sd_bus_message_peek_type(m, NULL, &contents)) <= 0 ||
            (*rr = sd_bus_message_enter_container(m, 'v', contents)) <= 0) {
                if (*rr >= 0)
                        *rr = -ENXIO;
                return NULL;
        }
        struct json_object *v = bus_value_to_json(m, contents, rr);
        if (v && (*rr = sd_bus_message_exit_container(m)) < 0) {
                json_object_put(v);
                return NULL;
        }
        return v;
}

struct json_object *bus_value_to_json(sd_bus_message *m, const char *sig, int *rr) {
        if (sig[0] == 'v')
                return read_variant(m, rr);
        if (sig[0] == 'a' && sig[1] == '{')
                return read_dict(m, sig, rr);
        if (sig[0] == 'a')
                return read_array(m, sig, rr);
        if (sig[0] == '(' || sig[0] == '{') {
                *rr = -EINVAL;
                return NULL;
        }
        struct json_object *v = bus_basic_to_json(m, sig[0], rr);
        if (v && sig[0] == 'd' && !isfinite(json_object_get_double(v))) {
                json_object_put(v);
                *rr = -EDOM;
                return NULL;
        }
        if (!v && *rr >= 0)
                *rr = -ENXIO;
        return v;
}
