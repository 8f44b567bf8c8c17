/* SPDX-License-Identifier: MIT */
/* Signals through signalfd: blocked for the whole process, read in the poll loop. */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "ctl-signals.h"
#include "ctl.h"

int ctl_signals_open(void) {
        static const int watched[] = { SIGINT, SIGTERM };
        sigset_t mask;
        sigemptyset(&mask);
        for (size_t i = 0; i < sizeof(watched) / sizeof(*watched); i++) {
                struct sigaction current;
                /* One ignored from the start stays ignored (background jobs of a shell
                 * without job control ignore SIGINT, so that Ctrl-C spares them). */
                if (sigaction(watched[i], NULL, &current) == 0 && current.sa_handler == SIG_IGN)
                        continue;
                sigaddset(&mask, watched[i]);
        }
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return -errno;
        int fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        return fd < 0 ? -errno : fd;
}

int ctl_signals_read(int fd) {
        struct signalfd_siginfo info;
        ssize_t n;
        while ((n = read(fd, &info, sizeof(info))) < 0 && errno == EINTR)
                ;
        return n == (ssize_t) sizeof(info) ? (int) info.ssi_signo : 0;
}

int ctl_signals_exit_status(int signo) {
        return signo == SIGTERM ? CTL_EXIT_SIGTERM : CTL_EXIT_SIGINT;
}
