/* SPDX-License-Identifier: MIT */
#pragma once

/* wait_for_requests_to_drain: callers that wait until no request is in flight on any front
 * (socket, D-Bus, HTTP), each for at most its own timeout. */

struct server;

/* 0: nothing is in flight; -ETIMEDOUT: the timeout passed first; -ESHUTDOWN: the daemon
 * stops, and the waiter is let go without an answer it could still send. */
typedef void (*drain_fn)(int result, void *userdata);

/* Calls fn once, from this call when nothing is in flight now, else from the loop.
 * timeout in seconds. -ENOMEM, fn not called. */
int drain_wait(struct server *s, double timeout, drain_fn fn, void *userdata);
/* A request ended: the waiters are answered when it was the last one in flight. */
void drain_check(struct server *s);
/* The daemon stops: every waiter is let go (-ESHUTDOWN). */
void drain_release_all(struct server *s);
