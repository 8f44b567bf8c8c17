/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "profiler.h"
#include "profiling.h"
#include "server.h"

static int need_dir(struct server *s, struct error *err) {
        if (s->settings->profile_dir)
                return 0;
        return error_set(err, EOPNOTSUPP, "profiling is off: set profile-dir in asyncllmd.conf (or --profile-dir) to "
                                          "the directory the traces go to");
}

int profiling_start(struct server *s, struct error *err) {
        int r = need_dir(s, err);
        if (r < 0 || (r = profiler_start(err)) < 0)
                return r;
        log_info("profiler started");
        return 0;
}

int profiling_stop(struct server *s, struct json_object **ret, struct error *err) {
        char path[4200], stamp[32];
        time_t now = time(NULL);
        struct tm tm;
        size_t spans;
        bool truncated;
        int r = need_dir(s, err);
        if (r < 0)
                return r;
        strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%S", gmtime_r(&now, &tm));
        snprintf(path, sizeof(path), "%s/asyncllmd-profile-%s-%ld.json", s->settings->profile_dir, stamp, (long) getpid());
        if ((r = profiler_stop(path, &spans, &truncated, err)) < 0)
                return r;
        log_info("profiler stopped: %zu spans in %s%s", spans, path, truncated ? " (cut short)" : "");
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "path", json_object_new_string(path));
        json_object_object_add(o, "spans", json_object_new_int64((int64_t) spans));
        json_object_object_add(o, "truncated", json_object_new_boolean(truncated));
        *ret = o;
        return 0;
}
