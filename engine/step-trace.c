/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "step-trace.h"

struct step_trace {
        FILE *file;         /* NULL once a write has failed */
        char *path;
        long whole_lines;   /* the file's length up to its last whole line */
};

int step_trace_open_from_env(struct step_trace **ret, struct error *err) {
        const char *path = getenv(STEP_TRACE_ENV);
        *ret = NULL;
        if (!path || !*path)
                return 0;
        struct step_trace *t = calloc(1, sizeof(*t));
        if (!t || !(t->path = strdup(path))) {
                free(t);
                return error_set(err, ENOMEM, "out of memory for the step trace");
        }
        t->file = fopen(path, "ae");
        if (!t->file) {
                int e = errno;
                step_trace_close(t);
                return error_set(err, e, "%s=%s: cannot open the step trace: %s; name a writable file or unset it",
                                 STEP_TRACE_ENV, path, strerror(e));
        }
        /* a line a step, each written whole as it comes: what a killed daemon traced is
         * there, and a full disk shows at the step that meets it */
        setvbuf(t->file, NULL, _IOLBF, 0);
        if (fseek(t->file, 0, SEEK_END) == 0 && ftell(t->file) == 0 && fputs(STEP_TRACE_HEADER, t->file) < 0) {
                int e = errno;
                step_trace_close(t);
                return error_set(err, e, "%s=%s: cannot write the step trace: %s; name a writable file or unset it",
                                 STEP_TRACE_ENV, path, strerror(e));
        }
        t->whole_lines = ftell(t->file);
        *ret = t;
        return 0;
}

void step_trace_write(struct step_trace *t, double started, const struct step_shape *shape, double predicted,
                      double seconds) {
        if (!t->file)
                return;
        int written = fprintf(t->file, "%.6f %u %u %llu %llu %u %.6g %.6g\n", started, shape->n_prompt, shape->n_decode,
                              (unsigned long long) shape->prompt_context, (unsigned long long) shape->decode_context,
                              shape->n_best_effort, predicted, seconds);
        if (written >= 0) {
                t->whole_lines += written;
                return;
        }
        int e = errno;
        /* Readers parse whole lines: cut back to the last one, after fclose() has flushed
         * (or failed to flush) what the stream still held. */
        int fd = fcntl(fileno(t->file), F_DUPFD_CLOEXEC, 0);
        fclose(t->file);
        t->file = NULL;
        if (fd < 0 || ftruncate(fd, t->whole_lines) < 0)
                fprintf(stderr, "%s=%s: cannot cut the step trace back to its last whole line: %s\n", STEP_TRACE_ENV,
                        t->path, strerror(errno));
        if (fd >= 0)
                close(fd);
        fprintf(stderr, "%s=%s: cannot write the step trace: %s; tracing stopped, serving goes on\n", STEP_TRACE_ENV,
                t->path, strerror(e));
}

void step_trace_close(struct step_trace *t) {
        if (!t)
                return;
        if (t->file)
                fclose(t->file);
        free(t->path);
        free(t);
}
