/* SPDX-License-Identifier: MIT */
#pragma once

/* start_profile and stop_profile, as every front serves them: the process's profiler
 * (profiler.h) recording, then its trace written into profile-dir. */

#include <errno.h>
#include <json-c/json.h>
#include <stdbool.h>

#include "error.h"

struct server;

/* -EOPNOTSUPP without profile-dir, -EALREADY while it records. */
int profiling_start(struct server *s, struct error *err);
/* Writes the trace and answers {"path", "spans", "truncated"} in *ret. -EOPNOTSUPP without
 * profile-dir, -ENOENT when not started, -EIO when the trace cannot be written (the message
 * names the file and why). */
int profiling_stop(struct server *s, struct json_object **ret, struct error *err);

/* Whether a failure of the two is the caller's to fix (profiling not configured, or not in
 * the state the op needs), as the fronts answer it, rather than the daemon's. */
static inline bool profiling_refused(int r) {
        return r == -EOPNOTSUPP || r == -EALREADY || r == -ENOENT;
}
