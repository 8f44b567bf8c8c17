/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "clock.h"
#include "engine-thread.h"
#include "name-table.h"
#include "worker-rpc.h"

enum command_type {
        COMMAND_ADD,
        COMMAND_ABORT,
        COMMAND_PAUSE,
        COMMAND_RESUME,
        COMMAND_SLEEP,
        COMMAND_WAKE_UP,
        COMMAND_RESET_PREFIX_CACHE,
        COMMAND_RPC,
        COMMAND_STOP,
};

struct command {
        enum command_type type;
        struct command *next;
        char *id;                 /* abort */
        struct request_spec spec; /* add: owned, moved on into the engine's request */
        /* control */
        enum pause_mode mode;
        bool flag;      /* pause: clear_cache; reset: preempt */
        unsigned value; /* sleep: level; wake_up: tags */
        char *method;
        struct json_object *args;
        engine_reply_fn reply;
        void *reply_userdata;
};

enum event_type {
        EVENT_UPDATE,
        EVENT_REPLY,
};

struct event {
        enum event_type type;
        struct event *next;
        struct engine_update update;
        int rc;
        char *message;
        struct json_object *result;
        engine_reply_fn reply;
        void *reply_userdata;
};

struct queue {
        void *head, **tail; /* singly linked through each item's next, oldest first */
};

struct engine_thread {
        pthread_t thread;
        bool started;
        int command_fd, event_fd;

        pthread_mutex_t lock; /* guards commands, events, state */
        struct command *commands, **commands_tail;
        struct event *events, **events_tail;
        struct engine_thread_state state;

        /* Owned by the engine thread alone. */
        struct engine_core *core;
        struct backend backend;
        bool paused, draining, stopping;
        unsigned released;
        struct command *deferred, **deferred_tail; /* adds held back while draining */
        uint32_t n_deferred;
        struct command *pending_pause;             /* the pause(wait) being drained */
        struct command *stop_command;              /* allocated up front: stopping cannot fail */
        struct event *out, **out_tail;             /* events of this iteration, not yet published */
        bool was_busy;
        double progress_time;
        double memory_time;       /* when state.memory was taken */
        unsigned memory_released; /* released, as it was then */
        char dead_message[ERROR_MESSAGE_MAX + 16];
};

static const char *const pause_mode_names[] = {
        [PAUSE_ABORT] = "abort",
        [PAUSE_WAIT] = "wait",
        [PAUSE_KEEP] = "keep",
};

const char *pause_mode_name(enum pause_mode m) {
        return name_table_name(pause_mode_names, NAME_TABLE_SIZE(pause_mode_names), m);
}

int pause_mode_from_string(const char *s, enum pause_mode *ret) {
        int m = name_table_find(pause_mode_names, NAME_TABLE_SIZE(pause_mode_names), s);
        if (m < 0)
                return m;
        *ret = (enum pause_mode) m;
        return 0;
}

static void command_free(struct command *c) {
        if (!c)
                return;
        free(c->id);
        request_spec_done(&c->spec);
        free(c->method);
        json_object_put(c->args);
        free(c);
}

static void update_clear(struct engine_update *u) {
        free(u->tokens);
        sample_results_free(u->logprobs, u->n_tokens);
        sample_results_free(u->prompt_logprobs, u->n_prompt);
        free(u->message);
        free(u->embedding);
}

static void event_free(struct event *e) {
        if (!e)
                return;
        update_clear(&e->update);
        free(e->message);
        json_object_put(e->result);
        free(e);
}

static void signal_fd(int fd) {
        uint64_t one = 1;
        /* EAGAIN only when the counter is about to overflow: the reader is awake anyway */
        while (write(fd, &one, sizeof(one)) < 0 && errno == EINTR)
                ;
}

/* ---- frontend side ---- */

static int submit(struct engine_thread *et, struct command *c) {
        c->next = NULL;
        pthread_mutex_lock(&et->lock);
        *et->commands_tail = c;
        et->commands_tail = &c->next;
        pthread_mutex_unlock(&et->lock);
        signal_fd(et->command_fd);
        return 0;
}

int engine_thread_add(struct engine_thread *et, struct request_spec *spec, struct error *err) {
        struct command *c = calloc(1, sizeof(*c));
        if (!c) {
                request_spec_done(spec);
                return error_set(err, ENOMEM, "out of memory");
        }
        c->type = COMMAND_ADD;
        c->spec = *spec;
        *spec = (struct request_spec) { 0 };
        return submit(et, c);
}

int engine_thread_abort(struct engine_thread *et, const char *id) {
        struct command *c = calloc(1, sizeof(*c));
        if (!c || !(c->id = strdup(id))) {
                free(c);
                return -ENOMEM;
        }
        c->type = COMMAND_ABORT;
        return submit(et, c);
}

static int submit_control(struct engine_thread *et, enum command_type type, engine_reply_fn fn, void *userdata,
                          struct command **ret) {
        struct command *c = calloc(1, sizeof(*c));
        if (!c)
                return -ENOMEM;
        c->type = type;
        c->reply = fn;
        c->reply_userdata = userdata;
        *ret = c;
        return 0;
}

int engine_thread_pause(struct engine_thread *et, enum pause_mode mode, bool clear_cache, engine_reply_fn fn,
                        void *userdata) {
        struct command *c;
        if (!pause_mode_name(mode))
                return -EINVAL;
        if (submit_control(et, COMMAND_PAUSE, fn, userdata, &c) < 0)
                return -ENOMEM;
        c->mode = mode;
        c->flag = clear_cache;
        return submit(et, c);
}

int engine_thread_resume(struct engine_thread *et, engine_reply_fn fn, void *userdata) {
        struct command *c;
        if (submit_control(et, COMMAND_RESUME, fn, userdata, &c) < 0)
                return -ENOMEM;
        return submit(et, c);
}

int engine_thread_sleep(struct engine_thread *et, int level, engine_reply_fn fn, void *userdata) {
        struct command *c;
        if (level != 1 && level != 2)
                return -EINVAL;
        if (submit_control(et, COMMAND_SLEEP, fn, userdata, &c) < 0)
                return -ENOMEM;
        c->value = (unsigned) level;
        return submit(et, c);
}

int engine_thread_wake_up(struct engine_thread *et, unsigned tags, engine_reply_fn fn, void *userdata) {
        struct command *c;
        if (tags == 0 || (tags & ~(unsigned) (BACKEND_MEMORY_WEIGHTS | BACKEND_MEMORY_KV_CACHE)))
                return -EINVAL;
        if (submit_control(et, COMMAND_WAKE_UP, fn, userdata, &c) < 0)
                return -ENOMEM;
        c->value = tags;
        return submit(et, c);
}

int engine_thread_reset_prefix_cache(struct engine_thread *et, bool preempt, engine_reply_fn fn, void *userdata) {
        struct command *c;
        if (submit_control(et, COMMAND_RESET_PREFIX_CACHE, fn, userdata, &c) < 0)
                return -ENOMEM;
        c->flag = preempt;
        return submit(et, c);
}

int engine_thread_collective_rpc(struct engine_thread *et, const char *method, struct json_object *args,
                                 engine_reply_fn fn, void *userdata) {
        struct command *c = NULL;
        if (submit_control(et, COMMAND_RPC, fn, userdata, &c) < 0 || !(c->method = strdup(method))) {
                free(c);
                json_object_put(args);
                return -ENOMEM;
        }
        c->args = args;
        return submit(et, c);
}

int engine_thread_fd(const struct engine_thread *et) {
        return et->event_fd;
}

void engine_thread_dispatch(struct engine_thread *et, engine_update_fn on_update, void (*before_reply)(void *userdata),
                            void *userdata) {
        uint64_t count;
        while (read(et->event_fd, &count, sizeof(count)) < 0 && errno == EINTR)
                ;
        pthread_mutex_lock(&et->lock);
        struct event *e = et->events;
        et->events = NULL;
        et->events_tail = &et->events;
        pthread_mutex_unlock(&et->lock);
        while (e) {
                struct event *next = e->next;
                if (e->type == EVENT_UPDATE)
                        on_update(&e->update, userdata);
                else {
                        if (before_reply)
                                before_reply(userdata);
                        if (e->reply)
                                e->reply(e->rc, e->message, e->result, e->reply_userdata);
                }
                event_free(e);
                e = next;
        }
}

void engine_thread_state(struct engine_thread *et, struct engine_thread_state *ret) {
        pthread_mutex_lock(&et->lock);
        *ret = et->state;
        pthread_mutex_unlock(&et->lock);
}

/* ---- engine side ---- */

static void emit(struct engine_thread *et, struct event *e) {
        e->next = NULL;
        *et->out_tail = e;
        et->out_tail = &e->next;
}

static void collect_outputs(struct engine_thread *et);

/* Queues a control command's answer. An event that cannot be allocated is lost: the
 * caller then never hears back, which only an out-of-memory process can cause. */
static void reply(struct engine_thread *et, struct command *c, int rc, const char *message, struct json_object *result) {
        collect_outputs(et); /* what the command did to requests reaches the frontend first */
        struct event *e = calloc(1, sizeof(*e));
        if (!e) {
                json_object_put(result);
                return;
        }
        e->type = EVENT_REPLY;
        e->rc = rc;
        e->message = message ? strdup(message) : NULL;
        e->result = result;
        e->reply = c->reply;
        e->reply_userdata = c->reply_userdata;
        emit(et, e);
}

/* The final update of a request the engine never took (refused or aborted while held back). */
static void emit_refusal(struct engine_thread *et, void *owner, enum finish_reason reason, int error,
                         const char *message, double retry_after) {
        struct event *e = calloc(1, sizeof(*e));
        if (!e)
                return;
        e->type = EVENT_UPDATE;
        e->update = (struct engine_update) {
                .owner = owner, .finished = true, .finish_reason = reason, .stop_token = -1, .error = error,
                .retry_after = retry_after, .message = message ? strdup(message) : NULL,
        };
        emit(et, e);
}

static void collect_outputs(struct engine_thread *et) {
        uint32_t n;
        const struct engine_output *outs = engine_core_outputs(et->core, &n);
        for (uint32_t i = 0; i < n; i++) {
                struct request *r = outs[i].req;
                uint32_t *reported = &r->n_reported;
                uint32_t n_out = request_num_output(r);
                if (!outs[i].finished && *reported == n_out)
                        continue; /* a later entry of this step covers it, or nothing is new */
                struct event *e = calloc(1, sizeof(*e));
                if (!e)
                        continue;
                struct engine_update *u = &e->update;
                e->type = EVENT_UPDATE;
                *u = (struct engine_update) {
                        .owner = r->owner,
                        .n_tokens = n_out - *reported,
                        .num_cached_tokens = r->num_cached_tokens,
                        .finished = outs[i].finished,
                        .finish_reason = outs[i].finished ? r->finish_reason : FINISH_NONE,
                        .stop_token = r->stop_token,
                        .scheduled_time = r->scheduled_time,
                        .first_token_time = r->first_token_time,
                        .last_token_time = r->last_token_time,
                };
                bool failed = false;
                if (u->n_tokens) {
                        if ((u->tokens = malloc(u->n_tokens * sizeof(int32_t))))
                                memcpy(u->tokens, r->tokens + r->n_prompt + *reported, u->n_tokens * sizeof(int32_t));
                        else
                                failed = true;
                        if (r->params.logprobs >= 0 && sample_results_copy(r->samples + *reported, u->n_tokens, &u->logprobs) < 0)
                                failed = true;
                }
                if (*reported == 0 && u->n_tokens && r->prompt_logprobs) {
                        u->n_prompt = r->n_prompt;
                        if (sample_results_copy(r->prompt_logprobs, r->n_prompt, &u->prompt_logprobs) < 0)
                                failed = true;
                }
                if (outs[i].finished && r->embedding) { /* moved: the request is freed with the outputs */
                        u->embedding = r->embedding;
                        u->n_embedding = r->n_embedding;
                        r->embedding = NULL;
                }
                if (outs[i].finished && r->finish_reason == FINISH_ERROR)
                        u->message = strdup(engine_core_is_dead(et->core) ? et->dead_message
                                                                          : "sampling failed for this request");
                if (failed) { /* report the request as failed rather than lose its end */
                        update_clear(u);
                        *u = (struct engine_update) { .owner = r->owner, .finished = true,
                                                      .finish_reason = FINISH_ERROR, .stop_token = -1,
                                                      .error = -ENOMEM };
                        if (!outs[i].finished)
                                engine_core_abort(et->core, r->id);
                }
                *reported = n_out;
                emit(et, e);
        }
        engine_core_clear_outputs(et->core);
}

static void add_to_core(struct engine_thread *et, struct command *c) {
        struct error err = { 0 };
        double retry_after = 0;
        void *owner = c->spec.owner;
        int r = engine_core_add_request(et->core, &c->spec, &retry_after, &err);
        if (r < 0)
                emit_refusal(et, owner, FINISH_ERROR, r, r == -ESHUTDOWN ? et->dead_message : err.message,
                             retry_after);
        command_free(c);
}

static void release_deferred(struct engine_thread *et) {
        struct command *c = et->deferred;
        et->deferred = NULL;
        et->deferred_tail = &et->deferred;
        et->n_deferred = 0;
        while (c) {
                struct command *next = c->next;
                add_to_core(et, c);
                c = next;
        }
}

static bool abort_deferred(struct engine_thread *et, const char *id) {
        for (struct command **p = &et->deferred; *p; p = &(*p)->next)
                if (strcmp((*p)->spec.id, id) == 0) {
                        struct command *c = *p;
                        *p = c->next;
                        if (!*p)
                                et->deferred_tail = p;
                        et->n_deferred--;
                        emit_refusal(et, c->spec.owner, FINISH_ABORT, 0, NULL, 0);
                        command_free(c);
                        return true;
                }
        return false;
}

static void clear_cache(struct engine_thread *et) {
        engine_core_reset_prefix_cache(et->core, true);
}

/* The pause(wait) completes once nothing is left in flight. */
static void finish_draining(struct engine_thread *et) {
        struct command *c = et->pending_pause;
        if (!et->draining || engine_core_has_work(et->core))
                return;
        et->draining = false;
        et->paused = true;
        et->pending_pause = NULL;
        if (c->flag)
                clear_cache(et);
        release_deferred(et); /* they wait in the core now: nothing runs while paused */
        reply(et, c, 0, NULL, NULL);
        command_free(c);
}

static void do_pause(struct engine_thread *et, struct command *c) {
        if (et->draining) {
                reply(et, c, -EALREADY, "a pause(wait) is already waiting for requests in flight", NULL);
                command_free(c);
                return;
        }
        if (c->mode == PAUSE_ABORT)
                engine_core_abort_all(et->core);
        if (c->mode == PAUSE_WAIT && !et->paused) {
                et->draining = true;
                et->pending_pause = c;
                finish_draining(et);
                return;
        }
        et->paused = true;
        if (c->flag)
                clear_cache(et);
        reply(et, c, 0, NULL, NULL);
        command_free(c);
}

static void do_resume(struct engine_thread *et, struct command *c) {
        if (et->pending_pause) {
                reply(et, et->pending_pause, -ECANCELED, "resumed before the requests in flight finished", NULL);
                command_free(et->pending_pause);
                et->pending_pause = NULL;
        }
        et->paused = et->draining = false;
        release_deferred(et);
        reply(et, c, 0, NULL, NULL);
        command_free(c);
}

static void do_sleep(struct engine_thread *et, struct command *c) {
        struct error err = { 0 };
        unsigned what = BACKEND_MEMORY_KV_CACHE |
                        (c->value >= 2 || et->backend.weights_on_device ? BACKEND_MEMORY_WEIGHTS : 0);
        /* running requests lose their KV: back to waiting, recomputed after wake-up */
        engine_core_reset_prefix_cache(et->core, true);
        int r = et->backend.release_memory(et->backend.impl, what & ~et->released, &err);
        if (r >= 0)
                et->released |= what;
        reply(et, c, r < 0 ? r : 0, r < 0 ? err.message : NULL, NULL);
        command_free(c);
}

static void do_wake_up(struct engine_thread *et, struct command *c) {
        struct error err = { 0 };
        unsigned what = c->value & et->released;
        int r = what ? et->backend.restore_memory(et->backend.impl, what, &err) : 0;
        if (r >= 0)
                et->released &= ~what;
        reply(et, c, r < 0 ? r : 0, r < 0 ? err.message : NULL, NULL);
        command_free(c);
}

static void do_rpc(struct engine_thread *et, struct command *c) {
        struct error err = { 0 };
        struct json_object *result = NULL;
        struct worker_rpc_context ctx = { et->core, &et->backend };
        int r = worker_rpc_call(&ctx, c->method, c->args, &result, &err);
        reply(et, c, r < 0 ? r : 0, r < 0 ? err.message : NULL, result);
        command_free(c);
}

static void apply(struct engine_thread *et, struct command *c) {
        switch (c->type) {
        case COMMAND_ADD:
                if (et->draining) {
                        c->next = NULL;
                        *et->deferred_tail = c;
                        et->deferred_tail = &c->next;
                        et->n_deferred++;
                } else
                        add_to_core(et, c);
                return;
        case COMMAND_ABORT:
                if (!engine_core_abort(et->core, c->id))
                        abort_deferred(et, c->id);
                command_free(c);
                return;
        case COMMAND_PAUSE:
                do_pause(et, c);
                return;
        case COMMAND_RESUME:
                do_resume(et, c);
                return;
        case COMMAND_SLEEP:
                do_sleep(et, c);
                return;
        case COMMAND_WAKE_UP:
                do_wake_up(et, c);
                return;
        case COMMAND_RESET_PREFIX_CACHE: {
                int r = engine_core_reset_prefix_cache(et->core, c->flag);
                reply(et, c, r, r == -EBUSY ? "running requests hold KV blocks; ask to preempt them" : NULL, NULL);
                command_free(c);
                return;
        }
        case COMMAND_RPC:
                do_rpc(et, c);
                return;
        case COMMAND_STOP:
                et->stopping = true;
                command_free(c);
                return;
        }
}

static struct command *take_commands(struct engine_thread *et) {
        pthread_mutex_lock(&et->lock);
        struct command *c = et->commands;
        et->commands = NULL;
        et->commands_tail = &et->commands;
        pthread_mutex_unlock(&et->lock);
        return c;
}

/* The step's hook: aborts that arrived while the batch ran end their requests before the
 * step's results are recorded. An abort the core does not know yet (its add is still
 * queued) stays queued, to be applied in order. */
static void apply_aborts_now(struct engine_core *core, void *userdata) {
        struct engine_thread *et = userdata;
        struct command *done = NULL;
        pthread_mutex_lock(&et->lock);
        for (struct command **p = &et->commands; *p;) {
                struct command *c = *p;
                if (c->type == COMMAND_ABORT && engine_core_abort(core, c->id)) {
                        *p = c->next;
                        c->next = done;
                        done = c;
                } else
                        p = &c->next;
        }
        et->commands_tail = &et->commands;
        while (*et->commands_tail)
                et->commands_tail = &(*et->commands_tail)->next;
        pthread_mutex_unlock(&et->lock);
        while (done) {
                struct command *next = done->next;
                command_free(done);
                done = next;
        }
}

static bool can_step(struct engine_thread *et) {
        return !et->paused && !et->released && engine_core_has_work(et->core);
}

/* How often the published memory figures are taken again: a device backend asks its driver,
 * which costs more than a step's bookkeeping should. */
#define MEMORY_REFRESH 1.0

static void publish(struct engine_thread *et) {
        bool busy = can_step(et);
        double now = monotonic_seconds();
        struct backend_memory_usage memory;
        bool refresh = now - et->memory_time >= MEMORY_REFRESH || et->released != et->memory_released;
        if (refresh) {
                et->backend.memory_usage(et->backend.impl, 0, &memory);
                et->memory_time = now;
                et->memory_released = et->released;
        }
        if (busy && !et->was_busy)
                et->progress_time = monotonic_seconds(); /* idle time is not a stall */
        et->was_busy = busy;

        pthread_mutex_lock(&et->lock);
        engine_core_stats(et->core, &et->state.stats);
        et->state.n_deferred = et->n_deferred;
        et->state.paused = et->paused;
        et->state.draining = et->draining;
        et->state.released = et->released;
        et->state.dead = engine_core_is_dead(et->core);
        memcpy(et->state.dead_message, et->dead_message, sizeof(et->dead_message));
        et->state.busy = busy;
        et->state.progress_time = et->progress_time;
        if (refresh)
                et->state.memory = memory;
        bool any = et->out != NULL;
        if (any) {
                *et->events_tail = et->out;
                et->events_tail = et->out_tail;
                et->out = NULL;
                et->out_tail = &et->out;
        }
        pthread_mutex_unlock(&et->lock);
        if (any)
                signal_fd(et->event_fd);
}

static void step(struct engine_thread *et) {
        struct error err = { 0 };
        int r = engine_core_step(et->core, &err);
        if (r < 0 && engine_core_is_dead(et->core) && !et->dead_message[0])
                snprintf(et->dead_message, sizeof(et->dead_message), "engine_dead: %s", err.message);
        et->progress_time = monotonic_seconds();
}

/* Hands what happened to the frontend: outputs, a completed drain, the state. */
static void report(struct engine_thread *et) {
        collect_outputs(et);
        finish_draining(et);
        publish(et);
}

static void apply_commands(struct engine_thread *et) {
        struct command *c = take_commands(et);
        while (c) {
                struct command *next = c->next;
                apply(et, c);
                c = next;
        }
}

/* Requests that reach an idle engine a moment apart (clients answering the same event, a
 * wave) go into one first step: commands that keep coming within WAVE_GAP_MS of each other
 * are taken, for at most WAVE_WINDOW seconds. Otherwise the first request would start
 * decoding alone and the stall guard, which keeps its decodes' gaps within the limit, would
 * let the others in a few prompt tokens a step, one after another, and the wave would never
 * decode as one batch again. A lone request waits WAVE_GAP_MS. */
#define WAVE_GAP_MS 1
#define WAVE_WINDOW 0.01

static void gather_wave(struct engine_thread *et) {
        double end = monotonic_seconds() + WAVE_WINDOW;
        struct pollfd fd = { .fd = et->command_fd, .events = POLLIN };
        while (!et->stopping && monotonic_seconds() < end && poll(&fd, 1, WAVE_GAP_MS) > 0) {
                uint64_t count;
                if (read(et->command_fd, &count, sizeof(count)) < 0 && errno != EINTR && errno != EAGAIN)
                        return;
                apply_commands(et);
        }
}

static void *engine_main(void *userdata) {
        struct engine_thread *et = userdata;
        while (!et->stopping) {
                bool idle = !engine_core_has_work(et->core);
                apply_commands(et);
                if (idle && can_step(et))
                        gather_wave(et);
                report(et); /* before a step too: a step that hangs must show as busy */
                if (et->stopping)
                        break;
                if (can_step(et)) {
                        step(et);
                        report(et);
                        continue;
                }
                uint64_t count;
                /* nothing to do: sleep until a command comes */
                if (read(et->command_fd, &count, sizeof(count)) < 0 && errno != EINTR && errno != EAGAIN)
                        break;
        }
        return NULL;
}

int engine_thread_start(const struct engine_config *config, const struct backend *backend, uint32_t n_vocab,
                        const int32_t *eog_ids, size_t n_eog_ids, struct engine_thread **ret, struct error *err) {
        struct engine_thread *et = calloc(1, sizeof(*et));
        int r;
        if (!et)
                return error_set(err, ENOMEM, "out of memory");
        et->command_fd = et->event_fd = -1;
        pthread_mutex_init(&et->lock, NULL);
        et->commands_tail = &et->commands;
        et->events_tail = &et->events;
        et->deferred_tail = &et->deferred;
        et->out_tail = &et->out;
        et->backend = *backend;
        et->command_fd = eventfd(0, EFD_CLOEXEC);
        et->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        et->stop_command = calloc(1, sizeof(*et->stop_command));
        if (!et->stop_command) {
                engine_thread_stop(et);
                return error_set(err, ENOMEM, "out of memory");
        }
        et->stop_command->type = COMMAND_STOP;
        if (et->command_fd < 0 || et->event_fd < 0) {
                r = error_set(err, errno, "cannot create an eventfd: %s", strerror(errno));
                engine_thread_stop(et);
                return r;
        }
        if ((r = engine_core_new(config, backend, n_vocab, eog_ids, n_eog_ids, &et->core, err)) < 0) {
                engine_thread_stop(et);
                return r;
        }
        engine_core_set_hook(et->core, apply_aborts_now, et);
        publish(et);
        if ((r = pthread_create(&et->thread, NULL, engine_main, et)) != 0) {
                engine_thread_stop(et);
                return error_set(err, r, "cannot start the engine thread: %s", strerror(r));
        }
        et->started = true;
        *ret = et;
        return 0;
}

void engine_thread_stop(struct engine_thread *et) {
        if (!et)
                return;
        if (et->started) {
                submit(et, et->stop_command);
                et->stop_command = NULL; /* the thread frees it */
                pthread_join(et->thread, NULL);
        }
        command_free(et->stop_command);
        for (struct command *c = et->commands, *next; c; c = next) {
                next = c->next;
                command_free(c);
        }
        for (struct command *c = et->deferred, *next; c; c = next) {
                next = c->next;
                command_free(c);
        }
        command_free(et->pending_pause);
        for (struct event *e = et->events, *next; e; e = next) {
                next = e->next;
                event_free(e);
        }
        for (struct event *e = et->out, *next; e; e = next) {
                next = e->next;
                event_free(e);
        }
        engine_core_free(et->core);
        if (et->command_fd >= 0)
                close(et->command_fd);
        if (et->event_fd >= 0)
                close(et->event_fd);
        pthread_mutex_destroy(&et->lock);
        free(et);
}
