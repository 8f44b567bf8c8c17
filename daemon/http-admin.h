/* SPDX-License-Identifier: MIT */
#pragma once

/* vLLM's dev-mode admin routes on the HTTP front, off unless --enable-admin-http (then for
 * holders of the admin key): /pause, /resume, /is_paused, /sleep, /wake_up, /is_sleeping,
 * /reset_prefix_cache, /collective_rpc. Each becomes the socket op's message and goes
 * through the socket's parser and commands_control(), so both fronts check and run an op
 * the same way; the connection waits suspended for the engine's answer. */

#include "http-exchange.h"

enum MHD_Result http_admin_pause(struct http_exchange *ex);
enum MHD_Result http_admin_resume(struct http_exchange *ex);
enum MHD_Result http_admin_is_paused(struct http_exchange *ex);
enum MHD_Result http_admin_sleep(struct http_exchange *ex);
enum MHD_Result http_admin_wake_up(struct http_exchange *ex);
enum MHD_Result http_admin_is_sleeping(struct http_exchange *ex);
enum MHD_Result http_admin_reset_mm_cache(struct http_exchange *ex);
enum MHD_Result http_admin_start_profile(struct http_exchange *ex);
enum MHD_Result http_admin_stop_profile(struct http_exchange *ex);
enum MHD_Result http_admin_reset_prefix_cache(struct http_exchange *ex);
enum MHD_Result http_admin_collective_rpc(struct http_exchange *ex);

/* The answer of an exchange running an admin op: the wait while the engine has not
 * answered, else the answer. */
enum MHD_Result http_admin_answer(struct http_exchange *ex);
/* Nobody waits for the op's answer any more: ex answers this error instead. */
void http_admin_abandon(struct http_exchange *ex, int status, const char *type, const char *message);
/* Frees what an exchange holds of an admin op. */
void http_admin_exchange_done(struct http_exchange *ex);
