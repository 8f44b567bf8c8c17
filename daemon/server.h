/* SPDX-License-Identifier: MIT */
#pragma once

/* The daemon's state on its event loop: the served model and engine, the listening socket,
 * the client connections, metrics, and the timers for status, watchdog and shutdown. */

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "drain.h"
#include "id-map.h"
#include "metrics.h"
#include "served-model.h"
#include "settings.h"

struct connection;
struct connection_protocol;

struct server {
        sd_event *event;
        struct daemon_settings *settings;
        int argc; /* kept for SIGHUP: the settings are read again from the same flags */
        char **argv;
        struct served_model model;
        struct daemon_metrics metrics;
        double realtime_offset; /* CLOCK_REALTIME - CLOCK_MONOTONIC, for Unix times in outputs */

        int listen_fd;
        bool socket_activated;
        int http_listen_fd; /* the HTTP front's socket systemd passed ("asyncllmd-http"), or -1 */
        sd_event_source *listen_source;
        sd_event_source *accept_retry_timer; /* turns listen_source back on after accept() failed */
        int spare_fd;                        /* /dev/null, closed to refuse a client when out of descriptors */
        bool accept_failing;                 /* accept() failed and has not succeeded since */
        sd_event_source *engine_source;
        sd_event_source *status_timer;
        sd_event_source *watchdog_timer;
        sd_event_source *shutdown_timer;
        sd_event_source *exit_source;
        uint64_t watchdog_usec;

        const struct connection_protocol *protocol; /* what the connections speak: commands.c's */
        struct connection *connections; /* every open connection */
        uint32_t n_connections;
        uint64_t next_connection; /* serial number, part of the engine-side request ids */
        struct id_map requests;   /* every request in flight, by its daemon-wide id */
        struct id_map uid_counts; /* in-flight requests per client uid */
        struct bus_state *bus;    /* NULL without --bus */
        struct http_front *http;  /* NULL without --host or --port */
        uint32_t http_in_flight;  /* its generate requests submitted and not yet answered */
        struct drain_waiter *drain_waiters; /* wait_for_requests_to_drain callers */

        bool shutting_down;
        bool engine_dead_seen;
        int exit_status;
        uint64_t last_generation_tokens;
        double last_status_time;
};

/* Requests in flight on every front (socket, D-Bus, HTTP). Inline: the fronts report to the
 * server without calling back into the file that owns them. */
static inline uint32_t server_in_flight(const struct server *s) {
        return s->requests.n + s->http_in_flight;
}

/* The model's name as the HTTP routes answer with it and requests name it: --served-model-name,
 * else the file's. */
static inline const char *server_served_name(const struct server *s) {
        return s->settings->served_model_name ? s->settings->served_model_name : s->model.name;
}

/* A request of any front ended: the drain waiters are answered, and the daemon exits, once
 * the last one does. */
static inline void server_request_ended(struct server *s) {
        drain_check(s);
        if (s->shutting_down && server_in_flight(s) == 0)
                sd_event_exit(s->event, s->exit_status);
}

/* Loads the model, opens the socket, sets up the loop and says READY=1. server_done() is
 * needed afterwards, on failure too. */
int server_start(struct server *s, struct daemon_settings *settings, int argc, char **argv, struct error *err);
/* Runs the loop until a signal or an engine death ends it; returns the exit status. */
int server_run(struct server *s);
void server_done(struct server *s);
