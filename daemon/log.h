/* SPDX-License-Identifier: MIT */
#pragma once

/* Logging: to the journal with structured fields when stderr is connected to it (a systemd
 * service), to stderr otherwise. Levels are syslog's. Prompts and generated text are only
 * ever logged at LOG_DEBUG. */

#include <syslog.h>

void log_setup(void);
void log_set_max_level(int level);
/* syslog's names: emerg, alert, crit, err, warning, notice, info, debug; -1 if unknown. */
int log_level_from_string(const char *s);
const char *log_level_to_string(int level);

/* Logs when level passes the maximum; request_id (may be NULL) becomes REQUEST_ID=. Returns
 * -error when error is not 0 (its text is appended), else 0, so that callers can
 * `return log_request(...)`. */
int log_internal(int level, int error, const char *request_id, const char *file, int line, const char *func,
                 const char *format, ...) __attribute__((format(printf, 7, 8)));

#define log_full_errno(level, error, ...) log_internal(level, error, NULL, __FILE__, __LINE__, __func__, __VA_ARGS__)
#define log_request(level, request_id, ...) log_internal(level, 0, request_id, __FILE__, __LINE__, __func__, __VA_ARGS__)
#define log_debug(...) log_full_errno(LOG_DEBUG, 0, __VA_ARGS__)
#define log_info(...) log_full_errno(LOG_INFO, 0, __VA_ARGS__)
#define log_notice(...) log_full_errno(LOG_NOTICE, 0, __VA_ARGS__)
#define log_warning(...) log_full_errno(LOG_WARNING, 0, __VA_ARGS__)
#define log_error(...) log_full_errno(LOG_ERR, 0, __VA_ARGS__)
#define log_error_errno(error, ...) log_full_errno(LOG_ERR, error, __VA_ARGS__)
#define log_warning_errno(error, ...) log_full_errno(LOG_WARNING, error, __VA_ARGS__)
