/* SPDX-License-Identifier: MIT */
#pragma once

/* start_profile and stop_profile, as every front serves them: the process's profiler
 * (profiler.h) recording, then its trace written into profile-dir. */

#include <json-c/json.h>

#include "error.h"

struct server;

/* -EOPNOTSUPP without profile-dir, -EALREADY while it records. */
int profiling_start(struct server *s, struct error *err);
/* Writes the trace and answers {"path", "spans", "truncated"} in *ret. -EOPNOTSUPP without
 * profile-dir, -ENOENT when not started, or the file's errno. */
int profiling_stop(struct server *s, struct json_object **ret, struct error *err);
