/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "step-trace.h"

int step_trace_open_from_env(FILE **ret, struct error *err) {
        const char *path = getenv(STEP_TRACE_ENV);
        *ret = NULL;
        if (!path || !*path)
                return 0;
        FILE *f = fopen(path, "ae");
        if (!f)
                return error_set(err, errno, "%s=%s: cannot open the step trace: %s; name a writable file or unset it",
                                 STEP_TRACE_ENV, path, strerror(errno));
        /* a new file says what its columns are */
        if (fseek(f, 0, SEEK_END) == 0 && ftell(f) == 0)
                fputs(STEP_TRACE_HEADER, f);
        *ret = f;
        return 0;
}

void step_trace_write(FILE *trace, double started, const struct step_shape *shape, double predicted, double seconds) {
        fprintf(trace, "%.6f %u %u %llu %llu %u %.6g %.6g\n", started, shape->n_prompt, shape->n_decode,
                (unsigned long long) shape->prompt_context, (unsigned long long) shape->decode_context,
                shape->n_best_effort, predicted, seconds);
}
