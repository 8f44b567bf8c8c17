/* SPDX-License-Identifier: MIT */
#pragma once

/* D-Bus values as JSON, shared by the daemon (params a{sv}) and asyncllmctl (GetStats). */

#include <json-c/json.h>
#include <systemd/sd-bus.h>

/* Reads one basic value of the given type where the message is: a number, boolean or string
 * as JSON. *rr gets sd_bus_message_read_basic()'s result, or -EINVAL for a type without a
 * JSON form (a file descriptor); NULL then. */
struct json_object *bus_basic_to_json(sd_bus_message *m, char type, int *rr);
