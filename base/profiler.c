/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "profiler.h"

struct span {
        const char *category, *name, *arg_name;
        double start, end;
        int64_t arg;
        enum profile_track track;
};

atomic_bool profiler_on;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct span *spans;
static size_t n_spans, spans_cap;
static bool truncated;
static double origin; /* monotonic seconds at the start: the trace's time 0 */

void profiler_span(enum profile_track track, const char *category, const char *name, double start, double end,
                   const char *arg_name, int64_t arg) {
        if (!profiler_active())
                return;
        pthread_mutex_lock(&lock);
        if (atomic_load(&profiler_on) && n_spans == spans_cap) {
                size_t cap = spans_cap ? spans_cap * 2 : 4096;
                struct span *bigger = cap <= PROFILER_MAX_SPANS ? realloc(spans, cap * sizeof(*spans)) : NULL;
                if (bigger) {
                        spans = bigger;
                        spans_cap = cap;
                } else
                        truncated = true; /* out of room or memory: the trace says it is cut short */
        }
        if (atomic_load(&profiler_on) && n_spans < spans_cap)
                spans[n_spans++] = (struct span) { category, name, arg_name, start, end, arg, track };
        pthread_mutex_unlock(&lock);
}

int profiler_start(struct error *err) {
        pthread_mutex_lock(&lock);
        bool was_on = atomic_load(&profiler_on);
        if (!was_on) {
                n_spans = 0;
                truncated = false;
                origin = monotonic_seconds();
                atomic_store(&profiler_on, true);
        }
        pthread_mutex_unlock(&lock);
        return was_on ? error_set(err, EALREADY, "the profiler is running already: stop_profile first") : 0;
}

/* The spans as {"traceEvents": [...]}: complete events ("ph": "X") in microseconds since the
 * start, one thread row per track. */
static int write_trace(FILE *f) {
        static const char *const track_names[] = {
                [PROFILE_TRACK_ENGINE] = "engine",
                [PROFILE_TRACK_FRONTEND] = "frontend",
        };
        long pid = (long) getpid();
        fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"truncated\":%s},\"traceEvents\":[\n",
                truncated ? "true" : "false");
        /* Each event after the first is preceded by its comma, so that a trace of no spans
         * is valid JSON too. */
        for (int t = PROFILE_TRACK_ENGINE; t <= PROFILE_TRACK_FRONTEND; t++)
                fprintf(f, "%s{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%ld,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                        t == PROFILE_TRACK_ENGINE ? "" : ",\n", pid, t, track_names[t]);
        for (size_t i = 0; i < n_spans; i++) {
                const struct span *s = &spans[i];
                fprintf(f, ",\n{\"ph\":\"X\",\"cat\":\"%s\",\"name\":\"%s\",\"pid\":%ld,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f",
                        s->category, s->name, pid, (int) s->track, (s->start - origin) * 1e6, (s->end - s->start) * 1e6);
                if (s->arg_name)
                        fprintf(f, ",\"args\":{\"%s\":%" PRId64 "}", s->arg_name, s->arg);
                fputc('}', f);
        }
        fprintf(f, "\n]}\n");
        return ferror(f) ? -EIO : 0;
}

int profiler_stop(const char *path, size_t *ret_spans, bool *ret_truncated, struct error *err) {
        int r = 0;
        pthread_mutex_lock(&lock);
        if (!atomic_load(&profiler_on)) {
                pthread_mutex_unlock(&lock);
                return error_set(err, ENOENT, "the profiler is not running: start_profile first");
        }
        atomic_store(&profiler_on, false);
        *ret_spans = n_spans;
        *ret_truncated = truncated;
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0640);
        FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (!f) {
                r = error_set(err, EIO, "cannot write the trace %s: %s", path, strerror(errno));
                if (fd >= 0)
                        close(fd);
        } else {
                r = write_trace(f);
                if (fclose(f) != 0 && r == 0)
                        r = -errno;
                if (r < 0) {
                        error_set(err, EIO, "cannot write the trace %s: %s", path, strerror(-r));
                        r = -EIO;
                        unlink(path);
                }
        }
        free(spans);
        spans = NULL;
        n_spans = spans_cap = 0;
        pthread_mutex_unlock(&lock);
        return r;
}
