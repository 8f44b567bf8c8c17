/* SPDX-License-Identifier: MIT */
#pragma once

/* D-Bus values as JSON, shared by the daemon (params a{sv}) and asyncllmctl (GetStats). */

#include <json-c/json.h>
#include <systemd/sd-bus.h>

/* Reads one basic value of the given type where the message is: a number, boolean or string
 * as JSON. *rr gets sd_bus_message_read_basic()'s result, or -EINVAL for a type without a
 * JSON form (a file descriptor); NULL then. */
struct json_object *bus_basic_to_json(sd_bus_message *m, char type, int *rr);

/* Reads the value of complete type sig where the message is, as JSON: basic values as above,
 * arrays as arrays, dictionaries as objects (a key in its JSON text: "3", "true"; a later
 * duplicate wins), variants as their contents. Returns a new reference, or NULL with *rr < 0:
 * sd-bus's error, -EINVAL for a struct or a file descriptor, -EDOM for a double that is not
 * finite (strict JSON has no NaN or infinity). */
struct json_object *bus_value_to_json(sd_bus_message *m, const char *sig, int *rr);
