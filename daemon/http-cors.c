/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <string.h>

#include "http-cors.h"
#include "server.h"
#include "settings.h"

#define CORS_MAX_AGE "600" /* seconds a browser may keep a preflight's answer */

/* Whether list, "a, b" as the settings keep it, holds item or "*". */
static bool list_allows(const char *list, const char *item) {
        size_t n = strlen(item);
        for (const char *p = list; p && *p; p += strspn(p, ", ")) {
                size_t len = strcspn(p, ",");
                if ((len == 1 && *p == '*') || (len == n && strncmp(p, item, n) == 0))
                        return true;
                p += len;
        }
        return false;
}

/* The request's Origin when CORS is on and that origin may read the answer, else NULL: an
 * answer without CORS headers, which the browser then keeps from the page. */
const char *http_cors_allowed_origin(struct http_exchange *ex) {
        const char *list = ex->front->server->settings->allowed_origins;
        const char *origin = list ? MHD_lookup_connection_value(ex->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ORIGIN) : NULL;
        return origin && list_allows(list, origin) ? origin : NULL;
}

void http_cors_add_headers(struct http_exchange *ex, struct MHD_Response *resp) {
        const struct daemon_settings *st = ex->front->server->settings;
        const char *origin = http_cors_allowed_origin(ex);
        if (!origin)
                return;
        /* browsers refuse "*" for a request with credentials: they want the origin */
        bool any = list_allows(st->allowed_origins, "*") && !st->allow_credentials;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, any ? "*" : origin);
        if (st->allow_credentials)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_CREDENTIALS, "true");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, MHD_HTTP_HEADER_ORIGIN);
}

bool http_cors_is_preflight(struct http_exchange *ex, const char *method) {
        return strcmp(method, MHD_HTTP_METHOD_OPTIONS) == 0 && http_cors_allowed_origin(ex) &&
               MHD_lookup_connection_value(ex->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCESS_CONTROL_REQUEST_METHOD);
}

/* A preflight from an allowed origin: what the page may send. It needs no API key, since
 * browsers send none with it. "*" answers with what the preflight asks for, which works with
 * credentials too, where a literal "*" does not. */
struct MHD_Response *http_cors_preflight_response(struct http_exchange *ex) {
        const struct daemon_settings *st = ex->front->server->settings;
        const char *method = MHD_lookup_connection_value(ex->conn, MHD_HEADER_KIND,
                                                         MHD_HTTP_HEADER_ACCESS_CONTROL_REQUEST_METHOD);
        const char *headers = MHD_lookup_connection_value(ex->conn, MHD_HEADER_KIND,
                                                          MHD_HTTP_HEADER_ACCESS_CONTROL_REQUEST_HEADERS);
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        if (!resp)
                return NULL;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_METHODS,
                                list_allows(st->allowed_methods, "*") ? method : st->allowed_methods);
        if (!list_allows(st->allowed_headers, "*"))
                MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_HEADERS, st->allowed_headers);
        else if (headers)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_HEADERS, headers);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_MAX_AGE, CORS_MAX_AGE);
        return resp;
}
