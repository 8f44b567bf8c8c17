/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "bus.h"
#include "chat-template.h"
#include "clock.h"
#include "commands.h"
#include "connection.h"
#include "listen-socket.h"
#include "log.h"
#include "http-server.h"
#include "server.h"

#define STATUS_INTERVAL_USEC (5 * 1000000ULL)
#define ACCEPT_RETRY_USEC 1000000ULL

static double realtime_seconds(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

/* Once the engine died every request has had its error; the daemon exits non-zero so that
 * systemd restarts it, after a moment for the clients' final messages to go out. */
static void check_engine_death(struct server *s) {
        struct error err;
        if (s->engine_dead_seen || async_llm_check_health(s->model.llm, 1e9, &err) != -ESHUTDOWN)
                return;
        s->engine_dead_seen = true;
        /* The failed requests' last outputs were published together with the dead state,
         * possibly after this round's dispatch took its outputs: take them now, or the final
         * flush would close connections whose requests never got their error. */
        async_llm_dispatch(s->model.llm);
        log_error("%s; exiting so that the service manager can restart the daemon", err.message);
        sd_notifyf(0, "STATUS=Engine dead: %s", err.message);
        s->exit_status = 3;
        connections_flush_and_close_all(s, "engine_dead", err.message);
        sd_event_exit(s->event, 3);
}

static int on_engine(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        struct server *s = userdata;
        (void) source, (void) fd, (void) revents;
        async_llm_dispatch(s->model.llm);
        /* each step on its own while the loop keeps up with the engine */
        struct async_llm_stats st;
        async_llm_stats(s->model.llm, &st);
        daemon_metrics_observe_steps(&s->metrics, &st.engine.stats);
        bus_check_state(s);
        check_engine_death(s);
        server_request_ended(s);
        return 0;
}

static int on_accept_retry(sd_event_source *source, uint64_t usec, void *userdata) {
        struct server *s = userdata;
        (void) source, (void) usec;
        if (s->listen_source)
                sd_event_source_set_enabled(s->listen_source, SD_EVENT_ON);
        return 0;
}

/* The listening socket stays readable while accept() fails: stop watching it for a second
 * rather than spin, then try again. */
static void pause_accepting(struct server *s) {
        sd_event_source_set_enabled(s->listen_source, SD_EVENT_OFF);
        uint64_t now = 0;
        sd_event_now(s->event, CLOCK_MONOTONIC, &now);
        if (s->accept_retry_timer) {
                sd_event_source_set_time(s->accept_retry_timer, now + ACCEPT_RETRY_USEC);
                sd_event_source_set_enabled(s->accept_retry_timer, SD_EVENT_ONESHOT);
        } else if (sd_event_add_time(s->event, &s->accept_retry_timer, CLOCK_MONOTONIC, now + ACCEPT_RETRY_USEC, 0,
                                     on_accept_retry, s) < 0)
                sd_event_source_set_enabled(s->listen_source, SD_EVENT_ON); /* spinning beats never accepting */
}

/* Out of file descriptors: the spare one, closed, makes room to take the waiting client and
 * tell it why it is refused, instead of leaving it in the backlog. 1 when a client was
 * refused, 0 when none was waiting, -1 when there is no spare to close. */
static int refuse_for_lack_of_fds(struct server *s, int listen_fd) {
        if (s->spare_fd < 0)
                return -1;
        close(s->spare_fd);
        int cfd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd >= 0)
                connection_refuse(cfd, "too_many_requests",
                                  "the daemon is out of file descriptors; try again later, or raise its LimitNOFILE=");
        s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        return cfd >= 0 ? 1 : 0;
}

static int on_accept(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        struct server *s = userdata;
        (void) source, (void) revents;
        for (;;) {
                int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (cfd < 0) {
                        int e = errno;
                        if (e == EAGAIN || e == EINTR)
                                return 0;
                        /* keep serving who is connected; say so once per shortage */
                        if (!s->accept_failing)
                                log_warning_errno(e, "cannot accept connections; refusing them until it can");
                        s->accept_failing = true;
                        int r = e == EMFILE || e == ENFILE ? refuse_for_lack_of_fds(s, fd) : -1;
                        if (r > 0)
                                continue;
                        if (r < 0)
                                pause_accepting(s);
                        return 0;
                }
                if (s->accept_failing) {
                        log_notice("accepting connections again");
                        s->accept_failing = false;
                }
                if (s->n_connections >= s->settings->max_connections) {
                        connection_refuse(cfd, "too_many_requests", "the daemon already serves max-connections clients");
                        continue;
                }
                struct error err;
                if (connection_new(s, cfd, &err) < 0)
                        log_warning("dropping a new connection: %s", err.message);
        }
}

static int on_status(sd_event_source *source, uint64_t usec, void *userdata) {
        struct server *s = userdata;
        struct async_llm_stats st;
        async_llm_stats(s->model.llm, &st);
        double now = monotonic_seconds();
        double rate = s->last_status_time > 0 ? (double) (st.engine.stats.generation_tokens - s->last_generation_tokens) /
                                                        (now - s->last_status_time)
                                              : 0.0;
        s->last_status_time = now;
        s->last_generation_tokens = st.engine.stats.generation_tokens;
        const char *state = st.engine.dead ? "dead" : st.engine.released ? "sleeping" : st.engine.paused ? "paused" : "running";
        sd_notifyf(0, "STATUS=%s: %u running, %u waiting, %.1f tokens/s", state, st.engine.stats.n_running,
                   st.engine.stats.n_waiting + st.engine.n_deferred, rate);
        check_engine_death(s);
        sd_event_source_set_time(source, usec + STATUS_INTERVAL_USEC);
        return 0;
}

/* WATCHDOG=1 only while the engine is healthy: alive, and not stuck on pending work. */
static int on_watchdog(sd_event_source *source, uint64_t usec, void *userdata) {
        struct server *s = userdata;
        struct error err;
        if (async_llm_check_health(s->model.llm, s->settings->health_stall_timeout, &err) == 0)
                sd_notify(0, "WATCHDOG=1");
        else
                log_warning("not pinging the watchdog: %s", err.message);
        sd_event_source_set_time(source, usec + s->watchdog_usec / 2);
        return 0;
}

static int on_shutdown_timeout(sd_event_source *source, uint64_t usec, void *userdata) {
        struct server *s = userdata;
        (void) source, (void) usec;
        log_notice("shutdown timeout: aborting %u requests still in flight", server_in_flight(s));
        connections_abort_all_requests(s);
        http_front_abort_all(s->http);
        sd_event_exit(s->event, s->exit_status);
        return 0;
}

static void begin_shutdown(struct server *s, const char *why) {
        if (s->shutting_down)
                return;
        s->shutting_down = true;
        log_notice("%s: no new requests; waiting up to %g s for %u in flight", why, s->settings->shutdown_timeout,
                   server_in_flight(s));
        sd_notifyf(0, "STOPPING=1\nSTATUS=Stopping (%s), %u requests in flight", why, server_in_flight(s));
        s->listen_source = sd_event_source_disable_unref(s->listen_source);
        if (server_in_flight(s) == 0) {
                sd_event_exit(s->event, s->exit_status);
                return;
        }
        sd_event_add_time_relative(s->event, &s->shutdown_timer, CLOCK_MONOTONIC,
                                   (uint64_t) (s->settings->shutdown_timeout * 1e6), 0, on_shutdown_timeout, s);
}

static int on_terminate(sd_event_source *source, const struct signalfd_siginfo *si, void *userdata) {
        (void) source;
        begin_shutdown(userdata, strsignal((int) si->ssi_signo));
        return 0;
}

static void reload_settings(struct server *s) {
        struct daemon_settings next;
        struct daemon_settings_changes changes;
        struct error err;
        if (daemon_settings_reload(s->settings, s->argc, s->argv, &next, &changes, &err) < 0) {
                log_error("reload failed, keeping the current settings: %s", err.message);
                return;
        }
        daemon_settings_apply_reload(s->settings, &next);
        log_set_max_level(s->settings->log_level);
        for (unsigned i = 0; i < changes.n_applied; i++)
                log_notice("reload: %s changed and applies now", changes.applied[i]);
        for (unsigned i = 0; i < changes.n_need_restart; i++)
                log_warning("reload: %s changed but needs a restart to apply", changes.need_restart[i]);
        if (changes.n_applied + changes.n_need_restart == 0)
                log_notice("reload: nothing changed");
}

static int on_reload(sd_event_source *source, const struct signalfd_siginfo *si, void *userdata) {
        struct server *s = userdata;
        (void) source, (void) si;
        sd_notify(0, "RELOADING=1");
        reload_settings(s);
        sd_notify(0, "READY=1");
        return 0;
}

/* The loop's end: every client hears why its connection ends, and D-Bus callers waiting
 * for Complete get their answer, before the bus connection closes (sd-bus closes it from
 * its own exit source, which runs after this more important one). */
static int on_loop_exit(sd_event_source *source, void *userdata) {
        struct server *s = userdata;
        (void) source;
        if (s->shutting_down)
                connections_flush_and_close_all(s, "shutting_down", "the daemon is stopping");
        connections_free_all(s);
        return 0;
}

/* What the slo policy's admission will price batches of short decodes from. */
static void log_decode_calibration(struct served_model *m) {
        struct async_llm_stats stats;
        async_llm_stats(m->llm, &stats);
        const struct decode_calibration *c = &stats.engine.stats.decode_calibration;
        if (c->n == 0)
                return;
        char times[STEP_MODEL_CALIBRATED_DECODES * 12] = "";
        size_t used = 0;
        for (uint32_t k = 0; k < c->n && used < sizeof(times); k++)
                used += (size_t) snprintf(times + used, sizeof(times) - used, "%s%.2f", k ? ", " : "",
                                          c->seconds[k] * 1e3);
        log_info("slo: steps of 1..%u decodes alone at %llu positions took %s ms", c->n, (unsigned long long) c->context,
                 times);
}

/* SIGTERM, SIGINT and SIGHUP must be blocked in every thread already (see main()). */
int server_start(struct server *s, struct daemon_settings *settings, int argc, char **argv, struct error *err) {
        int r;

        *s = (struct server) {
                .settings = settings, .argc = argc, .argv = argv, .listen_fd = -1, .http_listen_fd = -1, .protocol = &commands_protocol,
                .spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC),
        };
        id_map_init(&s->requests, offsetof(struct daemon_request, daemon_id));
        id_map_init(&s->uid_counts, offsetof(struct uid_count, key));
        daemon_metrics_init(&s->metrics);

        sd_notifyf(0, "STATUS=Loading %s\nEXTEND_TIMEOUT_USEC=%llu", settings->model, 120ULL * 1000000);
        if ((r = served_model_load(settings->model, settings->device, settings->threads, &settings->engine,
                                   settings->chat_template, &s->model, err)) < 0)
                return r;
        log_info("serving %s (%s): %s, %u layers, context %u, max_model_len %u, %u KV blocks of %u tokens, %u threads",
                 s->model.name, settings->model, s->model.model->architecture, s->model.model->hp.n_layer, s->model.model->hp.n_ctx_max,
                 s->model.config.max_model_len, s->model.backend.kv.n_blocks, s->model.config.block_size, settings->threads);
        const char *chat = chat_template_describe(s->model.tk);
        if (chat)
                log_info("chat template: %s", chat);
        else {
                struct error chat_err = {};
                chat_template_check(s->model.tk, &chat_err);
                log_warning("chat template: none; chat requests are refused (%s)", chat_err.message);
        }
        log_decode_calibration(&s->model);
        s->realtime_offset = realtime_seconds() - monotonic_seconds();

        if ((r = listen_socket_open(settings->socket, &s->listen_fd, &s->socket_activated, &s->http_listen_fd, err)) < 0)
                return r;
        if ((r = sd_event_default(&s->event)) < 0)
                return error_set(err, -r, "cannot create the event loop: %s", strerror(-r));
        signal(SIGPIPE, SIG_IGN);
        if ((r = sd_event_add_signal(s->event, NULL, SIGTERM, on_terminate, s)) < 0 ||
            (r = sd_event_add_signal(s->event, NULL, SIGINT, on_terminate, s)) < 0 ||
            (r = sd_event_add_signal(s->event, NULL, SIGHUP, on_reload, s)) < 0 ||
            (r = sd_event_add_io(s->event, &s->listen_source, s->listen_fd, EPOLLIN, on_accept, s)) < 0 ||
            (r = sd_event_add_io(s->event, &s->engine_source, async_llm_fd(s->model.llm), EPOLLIN, on_engine, s)) < 0 ||
            (r = sd_event_add_time_relative(s->event, &s->status_timer, CLOCK_MONOTONIC, STATUS_INTERVAL_USEC, 0,
                                            on_status, s)) < 0)
                return error_set(err, -r, "cannot set up the event loop: %s", strerror(-r));
        sd_event_source_set_enabled(s->status_timer, SD_EVENT_ON);
        if ((r = sd_event_add_exit(s->event, &s->exit_source, on_loop_exit, s)) < 0 ||
            (r = sd_event_source_set_priority(s->exit_source, SD_EVENT_PRIORITY_IMPORTANT)) < 0)
                return error_set(err, -r, "cannot set up the event loop: %s", strerror(-r));
        if (sd_watchdog_enabled(0, &s->watchdog_usec) > 0) {
                r = sd_event_add_time_relative(s->event, &s->watchdog_timer, CLOCK_MONOTONIC, s->watchdog_usec / 2, 0,
                                               on_watchdog, s);
                if (r < 0)
                        return error_set(err, -r, "cannot set up the watchdog timer: %s", strerror(-r));
                sd_event_source_set_enabled(s->watchdog_timer, SD_EVENT_ON);
        }
        if ((r = bus_start(s, err)) < 0 || (r = http_front_start(s, &s->http, err)) < 0)
                return r;
        if (s->socket_activated)
                log_info("listening on the socket systemd passed");
        else
                log_info("listening on %s", settings->socket);
        sd_notifyf(0, "READY=1\nSTATUS=Serving %s", s->model.name);
        return 0;
}

int server_run(struct server *s) {
        int r = sd_event_loop(s->event);
        if (r < 0) /* out of memory for its epoll buffer, say: the service manager restarts us */
                log_error("the event loop failed: %s; exiting", strerror(-r));
        return r < 0 ? 1 : r;
}

void server_done(struct server *s) {
        drain_release_all(s); /* before the connections they would answer go */
        connections_free_all(s);
        http_front_free(s->http); /* its requests end before the engine does */
        s->http = NULL;
        bus_stop(s);
        sd_event_source_disable_unref(s->listen_source);
        sd_event_source_disable_unref(s->engine_source);
        sd_event_source_disable_unref(s->status_timer);
        sd_event_source_disable_unref(s->watchdog_timer);
        sd_event_source_disable_unref(s->shutdown_timer);
        sd_event_source_disable_unref(s->accept_retry_timer);
        sd_event_source_disable_unref(s->exit_source);
        if (s->spare_fd >= 0)
                close(s->spare_fd);
        if (s->listen_fd >= 0) {
                close(s->listen_fd);
                if (!s->socket_activated)
                        unlink(s->settings->socket);
        }
        served_model_unload(&s->model);
        id_map_done(&s->requests);
        id_map_done(&s->uid_counts);
        sd_event_unref(s->event);
}
