/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <grp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "connection.h"
#include "log.h"
#include "ndjson-reader.h"
#include "protocol.h"
#include "server.h"

/* Above this many queued bytes the connection takes no more outputs (they merge in their
 * mailboxes) and reads no more lines, until the client catches up. */
#define OUT_HIGH_WATER ((size_t) 1 << 20)

static bool in_group(gid_t gid, const gid_t *groups, int n, const char *name) {
        struct group *g = name && *name ? getgrnam(name) : NULL;
        if (!g)
                return false;
        if (g->gr_gid == gid)
                return true;
        for (int i = 0; i < n; i++)
                if (groups[i] == g->gr_gid)
                        return true;
        return false;
}

void permissions_for(const struct daemon_settings *st, uid_t uid, gid_t gid, const gid_t *groups, int n,
                     bool *ret_may_generate, bool *ret_is_admin) {
        *ret_is_admin = uid == 0 || uid == geteuid() || in_group(gid, groups, n, st->admin_group);
        *ret_may_generate = *ret_is_admin || in_group(gid, groups, n, st->service_group);
}

static void read_credentials(struct connection *c) {
        struct ucred cred = { .uid = (uid_t) -1, .gid = (gid_t) -1 };
        socklen_t len = sizeof(cred);
        gid_t groups[256];
        socklen_t glen = sizeof(groups);
        int n = 0;
        if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
                return;
        if (getsockopt(c->fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen) == 0)
                n = (int) (glen / sizeof(gid_t));
        c->uid = cred.uid;
        c->pid = cred.pid;
        permissions_for(c->server->settings, cred.uid, cred.gid, groups, n, &c->may_generate, &c->is_admin);
}

static size_t out_queued(const struct connection *c) {
        return c->out_len - c->out_sent;
}

static void update_events(struct connection *c);

static int on_stall(sd_event_source *source, uint64_t usec, void *userdata) {
        struct connection *c = userdata;
        (void) source, (void) usec;
        log_warning("client pid %d (uid %u) read nothing for %g s with %zu bytes waiting: disconnecting it", (int) c->pid,
                    (unsigned) c->uid, c->server->settings->client_timeout, out_queued(c));
        connection_close(c);
        return 0;
}

/* While output waits, the client must make progress within client-timeout. */
static void arm_stall_timer(struct connection *c, bool progress) {
        if (out_queued(c) == 0 || c->fd < 0) {
                if (c->stall_timer)
                        sd_event_source_set_enabled(c->stall_timer, SD_EVENT_OFF);
                return;
        }
        uint64_t usec = (uint64_t) (c->server->settings->client_timeout * 1e6);
        if (!c->stall_timer) {
                if (sd_event_add_time_relative(c->server->event, &c->stall_timer, CLOCK_MONOTONIC, usec, 0, on_stall, c) < 0)
                        return;
        } else if (progress || sd_event_source_get_enabled(c->stall_timer, NULL) == 0) {
                uint64_t now;
                sd_event_now(c->server->event, CLOCK_MONOTONIC, &now);
                sd_event_source_set_time(c->stall_timer, now + usec);
        }
        sd_event_source_set_enabled(c->stall_timer, SD_EVENT_ONESHOT);
}

static int on_close_later(sd_event_source *source, void *userdata) {
        struct connection *c = userdata;
        (void) source;
        c->close_later = sd_event_source_disable_unref(c->close_later);
        connection_close(c);
        connection_unref(c);
        return 0;
}

/* Closes from the event loop, not from inside a caller that may still use c. */
void connection_close_later(struct connection *c) {
        if (c->closed || c->close_later)
                return;
        if (sd_event_add_defer(c->server->event, &c->close_later, on_close_later, c) < 0)
                return; /* out of memory: the client's hang-up or the stall timer closes it */
        c->refs++;
}

/* Writes what it can without blocking. */
static void flush(struct connection *c) {
        bool progress = false;
        if (c->closed)
                return;
        while (out_queued(c) > 0 && c->fd >= 0) {
                ssize_t n = send(c->fd, c->out + c->out_sent, out_queued(c), MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                break;
                        /* the client is gone: drop its output and close from the loop */
                        c->out_sent = c->out_len = 0;
                        connection_close_later(c);
                        return;
                }
                c->out_sent += (size_t) n;
                progress = true;
        }
        if (c->out_sent == c->out_len)
                c->out_sent = c->out_len = 0;
        else if (c->fd < 0)
                ; /* a sink keeps everything for its reader */
        else if (c->out_sent > c->out_cap / 2) {
                memmove(c->out, c->out + c->out_sent, out_queued(c));
                c->out_len -= c->out_sent;
                c->out_sent = 0;
        }
        arm_stall_timer(c, progress);
        if (c->closing && out_queued(c) == 0 && !c->first_request && !c->pending_replies)
                connection_close_later(c);
        update_events(c);
}

int connection_send(struct connection *c, const char *line, size_t len) {
        if (c->closed)
                return -EPIPE;
        if (c->out_len + len > c->out_cap) {
                size_t cap = c->out_cap ? c->out_cap : 4096;
                while (cap < c->out_len + len)
                        cap *= 2;
                char *out = realloc(c->out, cap);
                if (!out)
                        return -ENOMEM;
                c->out = out;
                c->out_cap = cap;
        }
        memcpy(c->out + c->out_len, line, len);
        c->out_len += len;
        flush(c);
        return 0;
}

/* Takes and sends a request's pending outputs while the queue has room; the request ends
 * with its last output. */
void connection_pump_request(struct daemon_request *r) {
        struct connection *c = r->conn;
        while (!c->closed && out_queued(c) < OUT_HIGH_WATER && async_stream_has_output(r->stream)) {
                struct request_output *o = async_stream_take(r->stream);
                /* Out of memory for an output: the request ends with an error, as no later
                 * step may bring another chance to take it (the last output's request is
                 * done in the engine). */
                if (!o)
                        c->server->protocol->send_error(c, r->client_id, PROTOCOL_INTERNAL_ERROR,
                                                        "out of memory for an output; the request ends");
                bool finished = !o || c->server->protocol->send_output(r, o) < 0 || o->finished;
                request_output_free(o);
                if (finished) {
                        c->server->protocol->request_done(r);
                        return;
                }
        }
}

static void pump_all(struct connection *c) {
        for (struct daemon_request *r = c->first_request, *next; r && !c->closed; r = next) {
                next = r->next;
                if (async_stream_has_output(r->stream))
                        connection_pump_request(r);
        }
}

static void update_events(struct connection *c) {
        if (c->closed || !c->io)
                return;
        uint32_t events = 0;
        if (!c->closing && !c->read_done && out_queued(c) < OUT_HIGH_WATER)
                events |= EPOLLIN;
        if (out_queued(c) > 0)
                events |= EPOLLOUT;
        sd_event_source_set_io_events(c->io, events);
}

static void handle_lines(struct connection *c) {
        const struct connection_protocol *protocol = c->server->protocol;
        struct ndjson_line line;
        int r;
        while (!c->closed && (r = ndjson_reader_next(c->reader, &line)) != 0) {
                if (r == -EMSGSIZE)
                        protocol->send_error(c, NULL, PROTOCOL_LINE_TOO_LONG, "line longer than max-line-bytes; it was skipped");
                else if (r == -EILSEQ)
                        protocol->send_error(c, NULL, PROTOCOL_INVALID_UTF8, "line is not valid UTF-8; it was skipped");
                else
                        protocol->handle_line(c, line.data, line.len);
        }
}

static void read_input(struct connection *c) {
        for (int rounds = 0; rounds < 16 && !c->closed && !c->read_done && out_queued(c) < OUT_HIGH_WATER; rounds++) {
                void *buf;
                size_t size;
                int r = ndjson_reader_space(c->reader, &buf, &size);
                if (r < 0) {
                        connection_close_later(c);
                        return;
                }
                ssize_t n = read(c->fd, buf, size);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN)
                                connection_close_later(c);
                        return;
                }
                if (n == 0) {
                        /* the client shut its sending side: answer what it sent, finish its
                         * requests, then close */
                        ndjson_reader_end(c->reader);
                        handle_lines(c);
                        c->read_done = true;
                        c->closing = true;
                        if (!c->closed && !c->first_request && !c->pending_replies && out_queued(c) == 0)
                                connection_close_later(c);
                        return;
                }
                ndjson_reader_commit(c->reader, (size_t) n);
                handle_lines(c);
        }
}

static int on_io(sd_event_source *source, int fd, uint32_t revents, void *userdata) {
        struct connection *c = userdata;
        (void) source, (void) fd;
        c->refs++;
        if (revents & (EPOLLHUP | EPOLLERR))
                connection_close(c); /* the client is gone: abort its requests */
        else {
                if (revents & EPOLLOUT) {
                        flush(c);
                        if (!c->closed && out_queued(c) < OUT_HIGH_WATER)
                                pump_all(c);
                }
                if (!c->closed && (revents & EPOLLIN))
                        read_input(c);
                update_events(c);
        }
        connection_unref(c);
        return 0;
}

static int setup(struct server *s, int fd, const struct connection *creds, struct connection **ret, struct error *err) {
        struct connection *c = calloc(1, sizeof(*c));
        int r;
        if (!c) {
                close(fd);
                return error_set(err, ENOMEM, "out of memory");
        }
        c->server = s;
        c->fd = fd;
        c->refs = 1;
        c->serial = ++s->next_connection;
        id_map_init(&c->requests, offsetof(struct daemon_request, client_id));
        if (creds) { /* a stream handed out over D-Bus, or a sink: nothing is read from it */
                c->uid = creds->uid;
                c->pid = creds->pid;
                c->may_generate = creds->may_generate;
                c->is_admin = creds->is_admin;
                c->read_done = true;
                c->closing = true;
        } else
                read_credentials(c);
        if ((r = ndjson_reader_new(s->settings->max_line_bytes, &c->reader)) < 0 ||
            (fd >= 0 && (r = sd_event_add_io(s->event, &c->io, fd, EPOLLIN, on_io, c)) < 0)) {
                ndjson_reader_free(c->reader);
                if (fd >= 0)
                        close(fd);
                free(c);
                return error_set(err, -r, "cannot set up a connection: %s", strerror(-r));
        }
        if (creds && c->io)
                sd_event_source_set_io_events(c->io, 0); /* only hang-ups matter until output is queued */
        c->next = s->connections;
        if (s->connections)
                s->connections->prev = c;
        s->connections = c;
        s->n_connections++;
        *ret = c;
        return 0;
}

int connection_new(struct server *s, int fd, struct error *err) {
        struct connection *c;
        int r = setup(s, fd, NULL, &c, err);
        if (r < 0)
                return r;
        log_debug("client connected: pid %d, uid %u%s", (int) c->pid, (unsigned) c->uid,
                  c->is_admin ? " (admin)" : c->may_generate ? "" : " (no permissions)");
        /* a client waits for the hello: without one, the connection ends at once */
        if ((r = s->protocol->send_hello(c)) < 0) {
                connection_close(c);
                return error_set(err, -r, "out of memory for its hello line");
        }
        return 0;
}

int connection_new_stream(struct server *s, int fd, const struct connection *creds, struct connection **ret,
                          struct error *err) {
        int r = setup(s, fd, creds, ret, err);
        if (r < 0)
                return r;
        /* the same stream as the socket's, so the same client reads it; not closing while
         * the hello alone is queued, before the caller adds the request */
        (*ret)->closing = false;
        if ((r = s->protocol->send_hello(*ret)) < 0) {
                connection_close(*ret);
                return error_set(err, -r, "out of memory for its hello line");
        }
        (*ret)->closing = true;
        return 0;
}

int connection_new_sink(struct server *s, const struct connection *creds,
                        void (*closed)(struct connection *c, void *userdata), void *userdata, struct connection **ret,
                        struct error *err) {
        int r = setup(s, -1, creds, ret, err);
        if (r < 0)
                return r;
        (*ret)->sink_closed = closed;
        (*ret)->sink_userdata = userdata;
        return 0;
}

void connection_refuse(int fd, const char *code, const char *message) {
        char *line = NULL;
        size_t len;
        if (protocol_error_line(NULL, code, message, &line, &len) == 0)
                (void) !send(fd, line, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        free(line);
        close(fd);
}

void connection_close(struct connection *c) {
        struct server *s = c->server;
        if (c->closed)
                return;
        c->closed = true;
        c->refs++;
        while (c->first_request)
                s->protocol->request_done(c->first_request); /* releasing a running stream aborts it */
        c->io = sd_event_source_disable_unref(c->io);
        c->stall_timer = sd_event_source_disable_unref(c->stall_timer);
        if (c->close_later) { /* it held a reference */
                c->close_later = sd_event_source_disable_unref(c->close_later);
                c->refs--;
        }
        if (c->sink_closed)
                c->sink_closed(c, c->sink_userdata);
        if (c->fd >= 0)
                close(c->fd);
        c->fd = -1;
        if (c->prev)
                c->prev->next = c->next;
        else
                s->connections = c->next;
        if (c->next)
                c->next->prev = c->prev;
        s->n_connections--;
        c->refs--;           /* the open connection's reference */
        connection_unref(c); /* the temporary one */
}

void connection_unref(struct connection *c) {
        if (--c->refs > 0)
                return;
        ndjson_reader_free(c->reader);
        id_map_done(&c->requests);
        free(c->out);
        free(c);
}

void connections_abort_all_requests(struct server *s) {
        for (struct connection *c = s->connections; c; c = c->next)
                for (struct daemon_request *r = c->first_request, *next; r; r = next) {
                        next = r->next;
                        async_llm_abort(s->model.llm, r->daemon_id);
                }
}

void connections_flush_and_close_all(struct server *s, const char *code, const char *message) {
        for (struct connection *c = s->connections, *next; c; c = next) {
                next = c->next;
                c->refs++;
                pump_all(c);
                s->protocol->send_error(c, NULL, code, message);
                if (!c->closed) {
                        /* one last blocking-free attempt; what does not fit is lost with the process */
                        flush(c);
                }
                connection_unref(c);
        }
}

void connections_free_all(struct server *s) {
        while (s->connections)
                connection_close(s->connections);
}
