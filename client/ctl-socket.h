/* SPDX-License-Identifier: MIT */
#pragma once

/* The daemon's Unix socket, through libasyncllm-client. */

#include "ctl.h"

/* Connects ctl->client once: --socket, else $ASYNCLLM_SOCKET, else the library's default.
 * On failure says which path was tried, why, and what to do; returns an exit status. */
int ctl_socket_connect(struct ctl *ctl);

/* Runs a control op (args_json: a JSON object as text, or NULL) and hands out its result
 * as JSON text (malloc()ed). Returns an exit status, the failure printed. */
int ctl_socket_call(struct ctl *ctl, const char *op, const char *args_json, char **ret_result);

/* The exit status for the client's last failure, printed. */
int ctl_socket_failure(struct ctl *ctl, int error);
