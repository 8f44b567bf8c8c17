/* SPDX-License-Identifier: MIT */
/* Text a command reads from standard input, given as "-" or piped in. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"

int ctl_read_stdin(const struct ctl *ctl, const char *what, char **ret) {
        size_t len = 0, cap = 4096;
        char *buf = malloc(cap);
        if (!buf)
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "out of memory");
        for (;;) {
                ssize_t n = read(STDIN_FILENO, buf + len, cap - len - 1);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        free(buf);
                        return ctl_fail(ctl, CTL_EXIT_USAGE, "cannot read %s from standard input: %s", what,
                                        strerror(errno));
                }
                if (n == 0)
                        break;
                len += (size_t) n;
                if (cap - len < 2) {
                        char *bigger = realloc(buf, cap * 2);
                        if (!bigger) {
                                free(buf);
                                return ctl_fail(ctl, CTL_EXIT_REQUEST, "out of memory");
                        }
                        buf = bigger;
                        cap *= 2;
                }
        }
        if (len > 0 && buf[len - 1] == '\n')
                len--;
        if (len > 0 && buf[len - 1] == '\r')
                len--;
        buf[len] = 0;
        *ret = buf;
        return CTL_EXIT_OK;
}
