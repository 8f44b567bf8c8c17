/* SPDX-License-Identifier: MIT */
#pragma once

/* asyncllmctl's shared state: the global options, the connection to the daemon (the socket
 * through libasyncllm-client, or D-Bus), and the exit statuses every command returns. */

#include <stdbool.h>
#include <stdio.h>

#include <systemd/sd-bus.h>

#include "asyncllm-client.h"

/* The exit statuses, documented in asyncllmctl(1) and --help. */
enum {
        CTL_EXIT_OK = 0,
        CTL_EXIT_REQUEST = 1,     /* the daemon refused or failed the request */
        CTL_EXIT_USAGE = 2,       /* a bad command line */
        CTL_EXIT_CONNECT = 3,     /* cannot connect, or the connection was lost */
        CTL_EXIT_ENGINE_DEAD = 4, /* the engine has failed */
        CTL_EXIT_UNHEALTHY = 5,   /* health: alive but stalled */
        CTL_EXIT_TEMPFAIL = 75,   /* overloaded: try again later (sysexits.h's EX_TEMPFAIL) */
        CTL_EXIT_TIMEOUT = 124,   /* a wait ended by its --timeout (timeout(1)'s status) */
        CTL_EXIT_SIGINT = 130,
        CTL_EXIT_SIGTERM = 143,
};

enum ctl_bus {
        CTL_BUS_NONE,
        CTL_BUS_SYSTEM,
        CTL_BUS_USER,
};

struct ctl {
        const char *program;     /* "asyncllmctl" */
        const char *command;     /* the command running, for messages */
        const char *socket_path; /* --socket; NULL: $ASYNCLLM_SOCKET, else the library's default */
        enum ctl_bus bus;
        asyncllm_client *client; /* the socket connection, made on first use */
        sd_bus *sd_bus;          /* the bus connection, made on first use */
        int signal_fd;           /* SIGINT and SIGTERM, for commands that abort on them; -1 */
};

/* Prints "asyncllmctl COMMAND: message" on stderr and returns status. */
int ctl_fail(const struct ctl *ctl, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Before a command parses its own options with getopt_long(). */
void ctl_options_begin(void);

/* getopt_long() (with opterr = 0 and ':' leading the short options) returned '?' or ':':
 * names the unknown option, or the one missing its value; returns CTL_EXIT_USAGE. */
int ctl_option_failure(const struct ctl *ctl, int opt, char *const *argv);

/* The exit status for a failure the daemon reported with this protocol error code (NULL: a
 * local failure of the connection). */
int ctl_exit_for_code(const char *code);

/* All of standard input, without one trailing newline, in *ret (malloc()ed); what names it
 * in the error ("the prompt"). */
int ctl_read_stdin(const struct ctl *ctl, const char *what, char **ret);

/* Whether output to f is for a person: a terminal, and colour only without $NO_COLOR. */
bool ctl_is_terminal(FILE *f);
bool ctl_use_colour(FILE *f);
