/* SPDX-License-Identifier: MIT */
#pragma once

/* A control op of the socket protocol (asyncllmd-protocol(7)), over whichever way --socket
 * or --bus chose. */

#include <json-c/json.h>

#include "ctl.h"

/* args: the op's fields as a JSON object, or NULL. *ret_result (may be NULL) gets the
 * result. Returns an exit status, the failure printed. */
int ctl_call(struct ctl *ctl, const char *op, struct json_object *args, struct json_object **ret_result);

/* The member key of a JSON object, or NULL. */
struct json_object *ctl_json_member(struct json_object *o, const char *key);
