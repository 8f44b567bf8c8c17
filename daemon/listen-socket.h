/* SPDX-License-Identifier: MIT */
#pragma once

/* The daemon's listening socket: the one systemd passed (socket activation, by the name
 * "asyncllmd" or the only one), else one bound here at path: the directory created if
 * missing, a stale socket file (nobody listening) replaced, a live one refused. */

#include <stdbool.h>

#include "error.h"

/* *ret_fd is a listening, non-blocking, close-on-exec SOCK_STREAM Unix socket;
 * *ret_activated says whether systemd passed it. *ret_http_fd is the HTTP front's listening
 * socket when systemd passed one named "asyncllmd-http" (non-blocking), else -1. */
int listen_socket_open(const char *path, int *ret_fd, bool *ret_activated, int *ret_http_fd, struct error *err);
