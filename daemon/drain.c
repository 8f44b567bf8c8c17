/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "drain.h"
#include "server.h"

struct drain_waiter {
        struct server *server;
        sd_event_source *timer;
        drain_fn fn;
        void *userdata;
        struct drain_waiter *next, **prev_next;
};

/* Unlinks w, frees it, then answers: fn may start another wait (or stop the loop). */
static void finish(struct drain_waiter *w, int result) {
        drain_fn fn = w->fn;
        void *userdata = w->userdata;
        if (w->next)
                w->next->prev_next = w->prev_next;
        *w->prev_next = w->next;
        sd_event_source_disable_unref(w->timer);
        free(w);
        fn(result, userdata);
}

static int on_timeout(sd_event_source *source, uint64_t usec, void *userdata) {
        (void) source, (void) usec;
        finish(userdata, -ETIMEDOUT);
        return 0;
}

int drain_wait(struct server *s, double timeout, drain_fn fn, void *userdata) {
        if (server_in_flight(s) == 0) {
                fn(0, userdata);
                return 0;
        }
        struct drain_waiter *w = calloc(1, sizeof(*w));
        if (!w)
                return -ENOMEM;
        int r = sd_event_add_time_relative(s->event, &w->timer, CLOCK_MONOTONIC, (uint64_t) (timeout * 1e6), 0,
                                           on_timeout, w);
        if (r < 0) {
                free(w);
                return r;
        }
        *w = (struct drain_waiter) { .server = s, .timer = w->timer, .fn = fn, .userdata = userdata };
        w->next = s->drain_waiters;
        if (w->next)
                w->next->prev_next = &w->next;
        w->prev_next = &s->drain_waiters;
        s->drain_waiters = w;
        return 0;
}

void drain_check(struct server *s) {
        while (s->drain_waiters && server_in_flight(s) == 0)
                finish(s->drain_waiters, 0);
}

void drain_release_all(struct server *s) {
        while (s->drain_waiters)
                finish(s->drain_waiters, -ESHUTDOWN);
}
