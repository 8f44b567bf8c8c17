/* SPDX-License-Identifier: MIT */
#pragma once

/* The engine core on a thread of its own (vLLM's EngineCore process): the frontend hands it
 * commands through a submit queue and is told through an eventfd when events (request
 * updates and control replies) wait in the output queue. The loop: apply commands, step
 * while there is work, publish what happened; with nothing to do it sleeps in read() on its
 * own eventfd, using no CPU. The two queues are the only shared state besides a published
 * snapshot of the engine's state. Every function here is for the frontend thread. */

#include <stdbool.h>
#include <stdint.h>

#include <json-c/json.h>

#include "backend.h"
#include "engine-config.h"
#include "engine-core.h"
#include "error.h"
#include "request.h"
#include "sampler.h"

struct engine_thread;

/* One request's news since its previous update: what one step (or an abort) did to it. */
struct engine_update {
        void *owner;                  /* the request_spec's owner */
        int32_t *tokens;              /* (n_tokens) new output tokens */
        uint32_t n_tokens;
        struct sample_result *logprobs;        /* (n_tokens) when the request asked for logprobs */
        struct sample_result *prompt_logprobs; /* (n_prompt) once, with the first token */
        uint32_t n_prompt;
        uint32_t num_cached_tokens;
        bool finished;
        enum finish_reason finish_reason;
        int32_t stop_token;           /* the stop_token_ids entry that ended it, else -1 */
        double scheduled_time, first_token_time, last_token_time; /* monotonic seconds; 0 = not yet */
        int error;                    /* -errno when the engine refused or failed it */
        double retry_after;           /* with -EAGAIN (overloaded): seconds until a retry may succeed */
        char *message;                /* why, when error != 0 or finish_reason is error */
        float *embedding;             /* encode: the pooled vector (n_embedding), with the finished update */
        uint32_t n_embedding;
};

enum pause_mode {
        PAUSE_ABORT, /* abort every request in flight, then pause */
        PAUSE_WAIT,  /* let the requests in flight finish, then pause; new ones wait */
        PAUSE_KEEP,  /* freeze the requests in flight where they are */
};

const char *pause_mode_name(enum pause_mode m);
int pause_mode_from_string(const char *s, enum pause_mode *ret);

/* The answer to a control command, on the frontend thread; result (may be NULL) belongs to
 * the engine thread's event and is put after the call: take a reference to keep it. */
typedef void (*engine_reply_fn)(int rc, const char *message, struct json_object *result, void *userdata);

/* Called by engine_thread_dispatch() for each update, in order. It may take ownership of
 * tokens, logprobs, prompt_logprobs, message and embedding by setting the fields to NULL. */
typedef void (*engine_update_fn)(struct engine_update *u, void *userdata);

struct engine_thread_state {
        struct engine_stats stats;
        uint32_t n_deferred;  /* requests held back while a pause(wait) drains */
        bool paused;          /* a pause completed and no resume came since */
        bool draining;        /* a pause(wait) is waiting for requests in flight */
        unsigned released;    /* enum backend_memory bits given back by sleep */
        bool dead;
        char dead_message[ERROR_MESSAGE_MAX + 16];
        bool busy;            /* work is pending and allowed to run: progress is expected */
        double progress_time; /* monotonic seconds of the last step, or of becoming busy */
        /* What the backend's first worker holds, at most MEMORY_REFRESH old */
        struct backend_memory_usage memory;
};

/* Starts the thread with a core of its own over backend (which the caller keeps alive). */
int engine_thread_start(const struct engine_config *config, const struct backend *backend, uint32_t n_vocab,
                        const int32_t *eog_ids, size_t n_eog_ids, struct engine_thread **ret, struct error *err);
/* Stops and joins the thread; undelivered events are dropped, unfinished requests freed. */
void engine_thread_stop(struct engine_thread *et);

/* Readable while events wait: poll it, then call engine_thread_dispatch(). */
int engine_thread_fd(const struct engine_thread *et);
/* Delivers the waiting events in order; before_reply (may be NULL) runs before each control
 * reply, so that the frontend can pass on the updates that came before it first. */
void engine_thread_dispatch(struct engine_thread *et, engine_update_fn on_update, void (*before_reply)(void *userdata),
                            void *userdata);

/* Queues a request: the spec, validated and owned (request_spec_own()), is moved into the
 * command and taken over even on failure (*spec is left empty). Its outcome, even a
 * refusal, arrives as updates, the last one finished: exactly one finished update per
 * request added. -ENOMEM. */
int engine_thread_add(struct engine_thread *et, struct request_spec *spec, struct error *err);
/* Queues an abort; applied before the outputs of a step in progress are recorded. */
int engine_thread_abort(struct engine_thread *et, const char *id);

int engine_thread_pause(struct engine_thread *et, enum pause_mode mode, bool clear_cache, engine_reply_fn fn,
                        void *userdata);
int engine_thread_resume(struct engine_thread *et, engine_reply_fn fn, void *userdata);
/* level 1 frees the KV cache, level 2 the weights too. Running requests go back to waiting
 * (recomputed after wake-up) and the prefix cache is emptied; nothing runs until every
 * released memory is restored. */
int engine_thread_sleep(struct engine_thread *et, int level, engine_reply_fn fn, void *userdata);
/* tags: enum backend_memory bits to restore. */
int engine_thread_wake_up(struct engine_thread *et, unsigned tags, engine_reply_fn fn, void *userdata);
int engine_thread_reset_prefix_cache(struct engine_thread *et, bool preempt, engine_reply_fn fn, void *userdata);
/* args (may be NULL) is taken over. The result is an array, one entry per worker. */
int engine_thread_collective_rpc(struct engine_thread *et, const char *method, struct json_object *args,
                                 engine_reply_fn fn, void *userdata);

void engine_thread_state(struct engine_thread *et, struct engine_thread_state *ret);
