/* SPDX-License-Identifier: MIT */
#pragma once

/* Test hooks for the daemon's failure paths, read from the environment at startup:
 *   ASYNCLLMD_FAULT_FAIL_STEP=N   the N-th engine step fails (engine death);
 *   ASYNCLLMD_FAULT_STALL_MS=N    every engine step first sleeps N ms (a hung engine);
 *   ASYNCLLMD_FAULT_STALL_FILE=P  steps sleep only while the file P exists.
 * Without them the backend is used as it is. The tests drive the real daemon through them. */

#include <stdbool.h>

#include "backend.h"

struct fault_injection;

/* Wraps inner when a hook is set; *ret is then the backend to use, else *ret = *inner. The
 * wrapper does not own inner: its free is NULL. */
int fault_injection_wrap(const struct backend *inner, struct fault_injection **ret_state, struct backend *ret);
void fault_injection_free(struct fault_injection *f);
