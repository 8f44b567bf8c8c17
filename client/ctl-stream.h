/* SPDX-License-Identifier: MIT */
#pragma once

/* Runs one generation request to its end, over the socket or D-Bus, while watching for
 * SIGINT and SIGTERM: a signal aborts the request in the daemon, waits briefly for its final
 * output, and ends the run with 130 or 143. */

#include "asyncllm-client.h"
#include "ctl-generation.h"
#include "ctl.h"

/* cb gets every output, the final one and a failure included (asyncllm_output_json() is the
 * daemon's line, for --json). Returns an exit status: CTL_EXIT_OK when the request finished
 * (an abort by someone else, or the daemon's failure, is printed and gives 1, 3 or 4), or
 * the signal's status once the request was aborted. ctl->signal_fd must be open. */
int ctl_generate_run(struct ctl *ctl, const struct ctl_generation *g, asyncllm_output_fn cb, void *userdata);
