/* SPDX-License-Identifier: MIT */
/* Failures as the user sees them: one line on stderr that names the command, and the exit
 * status the failure maps to. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"

int ctl_fail(const struct ctl *ctl, int status, const char *fmt, ...) {
        va_list ap;
        fflush(stdout); /* the message comes after the text already shown */
        if (ctl->command)
                fprintf(stderr, "%s %s: ", ctl->program, ctl->command);
        else
                fprintf(stderr, "%s: ", ctl->program);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        return status;
}

int ctl_exit_for_code(const char *code) {
        if (!code)
                return CTL_EXIT_CONNECT;
        if (strcmp(code, "engine_dead") == 0)
                return CTL_EXIT_ENGINE_DEAD;
        if (strcmp(code, "overloaded") == 0)
                return CTL_EXIT_TEMPFAIL;
        if (strcmp(code, "timed_out") == 0)
                return CTL_EXIT_TIMEOUT;
        return CTL_EXIT_REQUEST;
}
