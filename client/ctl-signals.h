/* SPDX-License-Identifier: MIT */
#pragma once

/* SIGINT and SIGTERM as a descriptor (signalfd), so that a command's poll loop sees them
 * and can abort its request in the daemon before it exits. */

/* Blocks SIGINT and SIGTERM (those not ignored since the start) and returns a descriptor that becomes readable when one comes,
 * or a negative errno. */
int ctl_signals_open(void);
/* The signal that came (SIGINT, SIGTERM), or 0 when none is pending. */
int ctl_signals_read(int fd);
/* The exit status for having been stopped by the signal: 130 or 143. */
int ctl_signals_exit_status(int signo);
