/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http-cors.h"
#include "http-exchange.h"

/* Every answer goes out here, so that each one to an allowed origin says so: errors and
 * streams too, or the page could not read why it failed. */
enum MHD_Result http_queue_response(struct http_exchange *ex, unsigned status, struct MHD_Response *resp) {
        http_cors_add_headers(ex, resp);
        return MHD_queue_response(ex->conn, status, resp);
}

enum MHD_Result http_queue_body(struct http_exchange *ex, unsigned status, char *body, const char *type,
                                double retry_after) {
        if (!body)
                return MHD_NO;
        struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
        if (!resp) {
                free(body);
                return MHD_NO;
        }
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
        if (retry_after > 0) {
                char s[32];
                snprintf(s, sizeof(s), "%.0f", retry_after < 1 ? 1 : retry_after + 0.5);
                MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, s);
        }
        enum MHD_Result r = http_queue_response(ex, status, resp);
        MHD_destroy_response(resp);
        return r;
}

enum MHD_Result http_queue_json(struct http_exchange *ex, unsigned status, struct json_object *o) {
        const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
        char *body = s ? strdup(s) : NULL;
        json_object_put(o);
        return http_queue_body(ex, status, body, "application/json", 0);
}

enum MHD_Result http_queue_error(struct http_exchange *ex, const struct openai_error *e, double retry_after) {
        return http_queue_body(ex, (unsigned) e->status, openai_error_body(e), "application/json", retry_after);
}

enum MHD_Result http_reply_error(struct http_exchange *ex, int status, const char *type, const char *param,
                                   const char *message) {
        struct openai_error e;
        openai_error_set(&e, status, type, param, "%s", message);
        return http_queue_error(ex, &e, 0);
}

void http_output_failure(const struct request_output *o, struct openai_error *e, double *retry_after) {
        if (o->error_code == -EAGAIN) {
                openai_error_set(e, 429, "overloaded", NULL, "%s", o->error);
                *retry_after = o->retry_after;
        } else if (o->error_code == -ESHUTDOWN || strncmp(o->error, "engine_dead", 11) == 0)
                openai_error_set(e, 503, "engine_dead", NULL, "%s", o->error);
        else
                openai_error_set(e, 500, "internal_error", NULL, "%s", o->error);
}

void http_exchange_wake(struct http_exchange *ex) {
        if (ex->suspended) {
                ex->suspended = false;
                MHD_resume_connection(ex->conn);
                sd_event_source_set_enabled(ex->front->kick, SD_EVENT_ONESHOT);
        }
}
