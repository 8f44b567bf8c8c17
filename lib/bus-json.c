/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdint.h>

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
