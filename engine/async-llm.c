/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async-llm.h"
#include "bad-words.h"
#include "clock.h"
#include "detokenizer.h"
#include "id-map.h"
#include "profiler.h"
#include "stop-strings.h"

/* One completion of a request: an engine request of its own. */
struct async_child {
        struct async_stream *stream;
        uint32_t index;
        char engine_id[24];
        struct detokenizer *detok;

        int32_t *tokens; /* (cap) output tokens */
        struct sample_result *logprobs; /* (cap) when logprobs were asked for */
        uint32_t n_tokens, cap;
        double cumulative_logprob;
        char *text;         /* (text_cap) everything decoded, NUL-terminated */
        size_t text_len, text_cap;
        size_t text_visible; /* what may be shown: short of a partial stop string, or cut at one */

        bool finished;     /* no more output: the engine ended it, or a stop string, or an abort */
        bool engine_done;  /* the engine sent its last update */
        enum finish_reason finish_reason;
        const char *stop_reason_text; /* one of the stream's stop strings */
        int32_t stop_reason_token;
        double first_token_time, last_token_time;

        /* What the consumer has taken. */
        uint32_t taken_tokens;
        size_t taken_text;
        bool taken_finish;
};

struct async_stream {
        struct async_llm *llm;
        char *request_id;
        unsigned refs;     /* the consumer's, one per child the engine still runs, dispatch's */
        bool in_map;       /* in flight: its id is taken */
        bool released;
        async_stream_notify notify;
        void *userdata;
        struct async_stream *prev, *next; /* every stream alive */
        struct async_stream *touched_next; /* to notify at the end of a dispatch */
        bool touched;

        struct sampling_params params; /* without the token-level arrays; stop points into stop_copy */
        char **stop_copy;
        enum output_kind kind;
        uint32_t n_prompt;
        struct sample_result *prompt_logprobs; /* (n_prompt) once the engine sent them */
        bool prompt_logprobs_sent;
        uint32_t num_cached_tokens;
        struct request_metrics metrics;
        char *error;
        int error_code;     /* the engine's -errno with error, when it gave one */
        double retry_after; /* with -EAGAIN */
        float *embedding;   /* encode: the engine's pooled vector, until the last output takes it */
        uint32_t n_embedding;

        struct async_child *children;
        uint32_t n_children, n_finished;
        bool pending;     /* the mailbox holds something */
        bool final_taken; /* the last output went out */
};

struct async_llm {
        struct engine_config config;
        const struct tokenizer *tk;
        int32_t n_vocab;
        uint32_t n_embd; /* the backend's hidden size; 0: it gives no hidden states to pool */
        struct engine_thread *engine;
        struct id_map streams; /* in flight, by request id */
        struct async_stream *all;
        struct async_stream *touched;
        uint64_t next_engine_id;
};

static void stream_free(struct async_stream *s) {
        struct async_llm *llm = s->llm;
        if (s->in_map)
                id_map_remove(&llm->streams, s);
        if (s->prev)
                s->prev->next = s->next;
        else if (llm->all == s)
                llm->all = s->next;
        if (s->next)
                s->next->prev = s->prev;
        for (uint32_t i = 0; s->children && i < s->n_children; i++) { /* none when calloc() failed */
                struct async_child *c = &s->children[i];
                detokenizer_free(c->detok);
                free(c->tokens);
                sample_results_free(c->logprobs, c->n_tokens);
                free(c->text);
        }
        free(s->children);
        if (s->stop_copy)
                for (size_t i = 0; i < s->params.n_stop; i++)
                        free(s->stop_copy[i]);
        free(s->stop_copy);
        sample_results_free(s->prompt_logprobs, s->n_prompt);
        free(s->request_id);
        free(s->error);
        free(s->embedding);
        free(s);
}

static void stream_unref(struct async_stream *s) {
        if (--s->refs == 0)
                stream_free(s);
}

/* Queues the consumer's notification for the end of the current dispatch (or abort). */
static void mark_pending(struct async_stream *s) {
        if (s->pending || s->final_taken)
                return;
        if (s->kind == OUTPUT_FINAL_ONLY && s->n_finished < s->n_children)
                return;
        s->pending = true;
        if (!s->touched) {
                s->touched = true;
                s->refs++;
                s->touched_next = s->llm->touched;
                s->llm->touched = s;
        }
}

/* Notifications go out only here, never from inside an update, so a consumer that takes,
 * aborts or releases in its callback finds the stream in a settled state. */
static void notify_touched(struct async_llm *llm) {
        while (llm->touched) {
                struct async_stream *s = llm->touched;
                llm->touched = s->touched_next;
                s->touched = false;
                if (s->pending && !s->released && s->notify)
                        s->notify(s, s->userdata);
                stream_unref(s);
        }
}

static void leave_map(struct async_stream *s) {
        if (s->in_map) {
                id_map_remove(&s->llm->streams, s);
                s->in_map = false;
        }
}

static void finish_child(struct async_child *c, enum finish_reason reason) {
        struct async_stream *s = c->stream;
        if (c->finished)
                return;
        c->finished = true;
        c->finish_reason = reason;
        c->text_visible = c->text_len; /* nothing is held back once it is over */
        if (++s->n_finished == s->n_children) {
                s->metrics.finished_time = monotonic_seconds();
                leave_map(s); /* the id may be used again at once */
        }
        mark_pending(s);
}

static int append_text(struct async_child *c, const char *text, size_t len) {
        if (c->text_len + len + 1 > c->text_cap) {
                size_t cap = c->text_cap ? c->text_cap : 64;
                while (cap < c->text_len + len + 1)
                        cap *= 2;
                char *t = realloc(c->text, cap);
                if (!t)
                        return -ENOMEM;
                c->text = t;
                c->text_cap = cap;
        }
        memcpy(c->text + c->text_len, text, len);
        c->text_len += len;
        c->text[c->text_len] = 0;
        return 0;
}

/* After new text: a stop string ends the completion (cut before it, or after it with
 * include_stop_str_in_output); otherwise what may still become one is held back. vLLM
 * looks for stop strings only once more than min_tokens tokens are out. */
static void check_stop_strings(struct async_child *c, size_t old_len) {
        const struct sampling_params *p = &c->stream->params;
        size_t at;
        if (p->n_stop == 0) {
                c->text_visible = c->text_len;
                return;
        }
        if (c->n_tokens > (uint32_t) p->min_tokens) {
                int i = stop_strings_find(p->stop, p->n_stop, c->text, c->text_len, old_len, &at);
                if (i >= 0) {
                        size_t end = p->include_stop_str_in_output ? at + strlen(p->stop[i]) : at;
                        c->text_len = c->text_visible = end;
                        c->text[end] = 0;
                        c->stop_reason_text = p->stop[i];
                        finish_child(c, FINISH_STOP);
                        engine_thread_abort(c->stream->llm->engine, c->engine_id);
                        return;
                }
        }
        c->text_visible = c->text_len - stop_strings_partial(p->stop, p->n_stop, c->text, c->text_len);
}

static int reserve_tokens(struct async_child *c, uint32_t n) {
        if (c->n_tokens + n <= c->cap)
                return 0;
        uint32_t cap = c->cap ? c->cap : 16;
        while (cap < c->n_tokens + n)
                cap *= 2;
        int32_t *t = realloc(c->tokens, cap * sizeof(*t));
        if (!t)
                return -ENOMEM;
        c->tokens = t;
        if (c->stream->params.logprobs >= 0) {
                struct sample_result *l = realloc(c->logprobs, cap * sizeof(*l));
                if (!l)
                        return -ENOMEM;
                c->logprobs = l;
        }
        c->cap = cap;
        return 0;
}

static void fail_stream(struct async_stream *s, const char *message) {
        if (!s->error && message)
                s->error = strdup(message);
}

/* Takes the update's tokens into the completion, one at a time through the detokenizer and
 * the stop strings, so that a stop string ends it at the token that completed it. */
static int take_tokens(struct async_child *c, struct engine_update *u) {
        struct error err;
        int r;
        /* vLLM leaves the token that stopped the request (EOS or a stop_token_ids entry)
         * out of the text, unless include_stop_str_in_output */
        uint32_t n_text = u->n_tokens;
        if (u->finished && u->finish_reason == FINISH_STOP && !c->stream->params.include_stop_str_in_output)
                n_text--;
        if ((r = reserve_tokens(c, u->n_tokens)) < 0)
                return r;
        for (uint32_t i = 0; i < u->n_tokens && !c->finished; i++) {
                const char *piece;
                size_t len, old_len = c->text_len;
                c->tokens[c->n_tokens] = u->tokens[i];
                if (c->logprobs) {
                        c->logprobs[c->n_tokens] = u->logprobs[i];
                        u->logprobs[i].top = NULL; /* moved */
                        u->logprobs[i].n_top = 0;
                        c->cumulative_logprob += c->logprobs[c->n_tokens].logprob;
                }
                c->n_tokens++;
                if (i >= n_text)
                        break;
                if ((r = detokenizer_push(c->detok, u->tokens[i], &piece, &len, &err)) < 0 ||
                    (r = append_text(c, piece, len)) < 0)
                        return r;
                check_stop_strings(c, old_len);
        }
        return 0;
}

static void on_update(struct engine_update *u, void *userdata) {
        struct async_child *c = u->owner;
        struct async_stream *s = c->stream;
        (void) userdata;

        if (!c->finished) {
                if (u->scheduled_time && (!s->metrics.scheduled_time || u->scheduled_time < s->metrics.scheduled_time))
                        s->metrics.scheduled_time = u->scheduled_time;
                if (u->num_cached_tokens > s->num_cached_tokens)
                        s->num_cached_tokens = u->num_cached_tokens;
                if (u->first_token_time && !c->first_token_time)
                        c->first_token_time = u->first_token_time;
                if (u->last_token_time)
                        c->last_token_time = u->last_token_time;
                if (u->embedding && !s->embedding) {
                        s->embedding = u->embedding;
                        s->n_embedding = u->n_embedding;
                        u->embedding = NULL;
                }
                if (u->prompt_logprobs && !s->prompt_logprobs) {
                        s->prompt_logprobs = u->prompt_logprobs;
                        u->prompt_logprobs = NULL;
                }
                double detokenize_start = profiler_active() ? monotonic_seconds() : 0;
                int taken = u->n_tokens ? take_tokens(c, u) : 0;
                if (detokenize_start && u->n_tokens)
                        profiler_span(PROFILE_TRACK_FRONTEND, "frontend", "detokenize", detokenize_start, monotonic_seconds(),
                                      "tokens", u->n_tokens);
                if (taken < 0) {
                        fail_stream(s, "out of memory while taking the request's output");
                        finish_child(c, FINISH_ERROR);
                        engine_thread_abort(s->llm->engine, c->engine_id);
                } else if (u->n_tokens)
                        mark_pending(s);
                if (u->finished && !c->finished) {
                        const char *tail;
                        size_t len;
                        struct error err;
                        if (detokenizer_finish(c->detok, &tail, &len, &err) < 0 || append_text(c, tail, len) < 0)
                                fail_stream(s, "out of memory while decoding the request's output");
                        else if (len)
                                check_stop_strings(c, c->text_len - len);
                        if (!c->finished) {
                                c->stop_reason_token = u->stop_token;
                                if (u->finish_reason == FINISH_ERROR || u->error) {
                                        if (!s->error) {
                                                s->error_code = u->error;
                                                s->retry_after = u->retry_after;
                                        }
                                        fail_stream(s, u->message ? u->message : "the engine failed the request");
                                }
                                finish_child(c, u->error ? FINISH_ERROR : u->finish_reason);
                        }
                }
        }
        if (u->finished) {
                c->engine_done = true;
                stream_unref(s);
        }
}

static void notify_before_reply(void *userdata) {
        notify_touched(userdata);
}

void async_llm_dispatch(struct async_llm *llm) {
        double start = profiler_active() ? monotonic_seconds() : 0;
        engine_thread_dispatch(llm->engine, on_update, notify_before_reply, llm);
        notify_touched(llm);
        if (start)
                profiler_span(PROFILE_TRACK_FRONTEND, "frontend", "outputs", start, monotonic_seconds(), NULL, 0);
}

int async_llm_fd(const struct async_llm *llm) {
        return engine_thread_fd(llm->engine);
}

int async_llm_new(const struct engine_config *config, const struct backend *backend, const struct tokenizer *tk,
                  struct async_llm **ret, struct error *err) {
        struct async_llm *llm = calloc(1, sizeof(*llm));
        int r;
        if (!llm)
                return error_set(err, ENOMEM, "out of memory");
        llm->config = *config;
        llm->tk = tk;
        llm->n_vocab = tokenizer_vocab_size(tk);
        llm->n_embd = backend->n_embd;
        id_map_init(&llm->streams, offsetof(struct async_stream, request_id));
        size_t n_eog;
        const int32_t *eog = tokenizer_eog_ids(tk, &n_eog);
        r = engine_thread_start(&llm->config, backend, (uint32_t) llm->n_vocab, eog, n_eog, &llm->engine, err);
        if (r < 0) {
                id_map_done(&llm->streams);
                free(llm);
                return r;
        }
        *ret = llm;
        return 0;
}

void async_llm_free(struct async_llm *llm) {
        if (!llm)
                return;
        engine_thread_stop(llm->engine);
        while (llm->all)
                stream_free(llm->all);
        id_map_done(&llm->streams);
        free(llm);
}

/* The stream keeps the params the frontend reads (stop strings, logprobs, output kind);
 * the token-level arrays are the engine requests'. */
static int keep_params(struct async_stream *s, const struct sampling_params *p) {
        s->params = *p;
        s->params.logit_bias = NULL;
        s->params.n_logit_bias = 0;
        s->params.allowed_token_ids = NULL;
        s->params.n_allowed_token_ids = 0;
        s->params.stop_token_ids = NULL;
        s->params.n_stop_token_ids = 0;
        s->params.bad_words_token_ids = NULL;
        s->params.bad_words_ends = NULL;
        s->params.n_bad_word_sequences = 0;
        s->params.bad_words = NULL;
        s->params.n_bad_words = 0;
        s->params.stop = NULL;
        if (p->n_stop) {
                s->stop_copy = calloc(p->n_stop, sizeof(char *));
                if (!s->stop_copy)
                        return -ENOMEM;
                for (size_t i = 0; i < p->n_stop; i++)
                        if (!(s->stop_copy[i] = strdup(p->stop[i])))
                                return -ENOMEM;
                s->params.stop = (const char *const *) s->stop_copy;
        }
        return 0;
}

/* vLLM's left truncation: the prompt's last tokens are kept. */
static void truncate_prompt(struct request_spec *spec, uint32_t max_model_len) {
        int32_t keep = spec->params.truncate_prompt_tokens;
        if (keep == SAMPLING_TRUNCATE_TO_CONTEXT)
                keep = max_model_len > 1 ? (int32_t) (max_model_len - 1) : 1;
        if (keep <= 0 || spec->n_prompt <= (uint32_t) keep)
                return;
        spec->prompt += spec->n_prompt - (uint32_t) keep;
        spec->n_prompt = (uint32_t) keep;
}

/* Each child is an engine request of its own: its spec, built from the request's, owns its
 * arrays and moves into the engine thread. */
static int submit_children(struct async_llm *llm, struct async_stream *s, const struct request_spec *req,
                           struct error *err) {
        for (uint32_t i = 0; i < s->n_children; i++) {
                struct async_child *c = &s->children[i];
                struct request_spec child = *req;
                child.id = c->engine_id;
                child.params.n = 1;
                if (child.params.has_seed) /* vLLM: child i of a seeded request uses seed + i */
                        child.params.seed += i;
                child.arrival_time = s->metrics.arrival_time;
                child.owner = c;
                int r = request_spec_own(&child) < 0 ? error_set(err, ENOMEM, "out of memory")
                                                     : engine_thread_add(llm->engine, &child, err);
                if (r < 0) {
                        /* the children already queued end through the engine as usual */
                        for (uint32_t j = i; j < s->n_children; j++) {
                                s->children[j].engine_done = true;
                                s->refs--;
                        }
                        return r;
                }
        }
        return 0;
}

bool async_llm_can_encode(const struct async_llm *llm) {
        return llm->n_embd > 0;
}

int async_llm_generate(struct async_llm *llm, const struct request_spec *req, async_stream_notify notify,
                       void *userdata, struct async_stream **ret, struct error *err) {
        struct engine_thread_state state;
        struct request_spec spec = *req;
        int32_t *tokenized = NULL;
        int r;

        if (spec.encode) { /* one vector, once: no completions to fan out or stream */
                if (!llm->n_embd)
                        return error_set(err, EOPNOTSUPP, "this backend gives no hidden states to pool: encode runs on the cpu");
                if (spec.pooling.dimensions > llm->n_embd)
                        return error_set(err, EINVAL, "dimensions must be at most the model's hidden size, %u; got %u",
                                         llm->n_embd, spec.pooling.dimensions);
                if (spec.pooling.type == POOLING_MODEL_DEFAULT)
                        spec.pooling.type = llm->config.default_pooling;
                spec.params.n = 1;
                spec.params.output_kind = OUTPUT_FINAL_ONLY;
        }

        struct bad_word_sequences bad_words = { 0 };
        if (!spec.prompt && spec.prompt_text) {
                size_t n;
                if ((r = tokenizer_encode_prompt(llm->tk, spec.prompt_text, strlen(spec.prompt_text), true, &tokenized,
                                                 &n, err)) < 0)
                        return r;
                spec.prompt = tokenized;
                spec.n_prompt = n > UINT32_MAX ? UINT32_MAX : (uint32_t) n;
        }
        truncate_prompt(&spec, llm->config.max_model_len);
        if (spec.params.n_bad_words > 0) {
                if ((r = bad_words_tokenize(llm->tk, spec.params.bad_words, spec.params.n_bad_words, &bad_words,
                                            err)) < 0)
                        goto out;
                spec.params.bad_words_token_ids = bad_words.token_ids;
                spec.params.bad_words_ends = bad_words.ends;
                spec.params.n_bad_word_sequences = bad_words.n;
        }
        if ((r = request_spec_validate(&spec, &llm->config, llm->n_vocab, err)) < 0)
                goto out;
        if (id_map_get(&llm->streams, spec.id)) {
                r = error_set(err, EEXIST, "request id '%s' is already in flight", spec.id);
                goto out;
        }
        engine_thread_state(llm->engine, &state);
        if (state.dead) {
                r = error_set(err, ESHUTDOWN, "%s", state.dead_message);
                goto out;
        }

        struct async_stream *s = calloc(1, sizeof(*s));
        if (!s) {
                r = error_set(err, ENOMEM, "out of memory");
                goto out;
        }
        s->llm = llm;
        s->notify = notify;
        s->userdata = userdata;
        s->kind = spec.params.output_kind;
        s->n_prompt = spec.n_prompt;
        s->metrics.arrival_time = monotonic_seconds();
        s->n_children = spec.params.n;
        s->refs = 1 + s->n_children;
        s->next = llm->all;
        if (llm->all)
                llm->all->prev = s;
        llm->all = s;
        s->request_id = strdup(spec.id);
        s->children = calloc(s->n_children, sizeof(*s->children));
        r = !s->request_id || !s->children ? -ENOMEM : keep_params(s, &spec.params);
        for (uint32_t i = 0; r >= 0 && i < s->n_children; i++) {
                struct async_child *c = &s->children[i];
                c->stream = s;
                c->index = i;
                c->stop_reason_token = -1;
                c->cumulative_logprob = spec.params.logprobs >= 0 ? 0.0 : NAN;
                snprintf(c->engine_id, sizeof(c->engine_id), "%" PRIu64, llm->next_engine_id++);
                r = detokenizer_new(llm->tk, spec.params.skip_special_tokens, &c->detok, err);
        }
        if (r < 0 || (r = id_map_put(&llm->streams, s)) < 0) {
                s->refs = 1;
                stream_free(s);
                r = error_set(err, -r, "out of memory");
                goto out;
        }
        s->in_map = true;
        r = submit_children(llm, s, &spec, err);
        if (r < 0) {
                async_stream_release(s);
                goto out;
        }
        *ret = s;
out:
        bad_word_sequences_done(&bad_words);
        free(tokenized);
        return r;
}

static void abort_stream(struct async_stream *s) {
        leave_map(s);
        s->refs++; /* finishing the last child must not free s under us */
        for (uint32_t i = 0; i < s->n_children; i++) {
                struct async_child *c = &s->children[i];
                if (!c->finished) {
                        finish_child(c, FINISH_ABORT);
                        if (!c->engine_done)
                                engine_thread_abort(s->llm->engine, c->engine_id);
                }
        }
        stream_unref(s);
}

void async_llm_for_each_request(struct async_llm *llm, void (*fn)(const char *request_id, void *userdata),
                                void *userdata) {
        for (struct async_stream *s = llm->all; s; s = s->next)
                if (s->in_map)
                        fn(s->request_id, userdata);
}

bool async_llm_abort(struct async_llm *llm, const char *request_id) {
        struct async_stream *s = id_map_get(&llm->streams, request_id);
        if (!s)
                return false;
        abort_stream(s);
        notify_touched(llm);
        return true;
}

/* A completion's output from token from_token and text byte from_text on. */
static int fill_completion(const struct async_child *c, uint32_t from_token, size_t from_text,
                           struct completion_output *o) {
        *o = (struct completion_output) {
                .index = c->index,
                .text_len = c->text_visible - from_text,
                .n_token_ids = c->n_tokens - from_token,
                .cumulative_logprob = c->cumulative_logprob,
                .finish_reason = c->finished ? c->finish_reason : FINISH_NONE,
                .stop_reason_token = c->finished ? c->stop_reason_token : -1,
        };
        o->text = malloc(o->text_len + 1);
        o->token_ids = malloc((o->n_token_ids ? o->n_token_ids : 1) * sizeof(int32_t));
        if (!o->text || !o->token_ids)
                return -ENOMEM;
        if (o->text_len)
                memcpy(o->text, c->text + from_text, o->text_len);
        o->text[o->text_len] = 0;
        if (o->n_token_ids)
                memcpy(o->token_ids, c->tokens + from_token, o->n_token_ids * sizeof(int32_t));
        if (c->logprobs && sample_results_copy(c->logprobs + from_token, o->n_token_ids, &o->logprobs) < 0)
                return -ENOMEM;
        if (c->finished && c->finish_reason == FINISH_STOP && c->stop_reason_text &&
            !(o->stop_reason_text = strdup(c->stop_reason_text)))
                return -ENOMEM;
        return 0;
}

static struct request_output *build_output(struct async_stream *s) {
        struct request_output *o = calloc(1, sizeof(*o));
        bool delta = s->kind == OUTPUT_DELTA;
        if (!o || !(o->outputs = calloc(s->n_children, sizeof(*o->outputs))) || !(o->request_id = strdup(s->request_id)))
                goto fail;
        o->finished = s->n_finished == s->n_children;
        o->num_cached_tokens = s->num_cached_tokens;
        o->metrics = s->metrics;
        for (uint32_t i = 0; i < s->n_children; i++) {
                const struct async_child *c = &s->children[i];
                if (c->first_token_time && (!o->metrics.first_token_time || c->first_token_time < o->metrics.first_token_time))
                        o->metrics.first_token_time = c->first_token_time;
                if (c->last_token_time > o->metrics.last_token_time)
                        o->metrics.last_token_time = c->last_token_time;
                if (delta && c->n_tokens == c->taken_tokens && c->text_visible == c->taken_text &&
                    (!c->finished || c->taken_finish))
                        continue; /* nothing new in this completion */
                if (fill_completion(c, delta ? c->taken_tokens : 0, delta ? c->taken_text : 0, &o->outputs[o->n_outputs++]) < 0)
                        goto fail;
        }
        if (s->prompt_logprobs && (!delta || !s->prompt_logprobs_sent)) {
                o->n_prompt = s->n_prompt;
                if (sample_results_copy(s->prompt_logprobs, s->n_prompt, &o->prompt_logprobs) < 0)
                        goto fail;
        }
        if (s->error && !(o->error = strdup(s->error)))
                goto fail;
        o->error_code = s->error ? s->error_code : 0;
        o->retry_after = s->retry_after;
        return o;
fail:
        request_output_free(o);
        return NULL;
}

struct request_output *async_stream_take(struct async_stream *s) {
        if (!s->pending)
                return NULL;
        struct request_output *o = build_output(s);
        if (!o)
                return NULL; /* out of memory: the output stays pending */
        s->pending = false;
        if (o->prompt_logprobs)
                s->prompt_logprobs_sent = true;
        for (uint32_t i = 0; i < s->n_children; i++) {
                struct async_child *c = &s->children[i];
                c->taken_tokens = c->n_tokens;
                c->taken_text = c->text_visible;
                c->taken_finish = c->finished;
        }
        if (o->finished) {
                s->final_taken = true;
                o->embedding = s->embedding;
                o->n_embedding = s->n_embedding;
                s->embedding = NULL;
        }
        return o;
}

bool async_stream_has_output(const struct async_stream *s) {
        return s->pending;
}

bool async_stream_done(const struct async_stream *s) {
        return s->final_taken;
}

uint32_t async_stream_prompt_tokens(const struct async_stream *s) {
        return s->n_prompt;
}

void async_stream_release(struct async_stream *s) {
        if (!s)
                return;
        s->released = true;
        if (s->n_finished < s->n_children)
                abort_stream(s);
        stream_unref(s);
}

int async_llm_pause(struct async_llm *llm, enum pause_mode mode, bool clear_cache, async_llm_reply_fn fn,
                    void *userdata) {
        return engine_thread_pause(llm->engine, mode, clear_cache, fn, userdata);
}

int async_llm_resume(struct async_llm *llm, async_llm_reply_fn fn, void *userdata) {
        return engine_thread_resume(llm->engine, fn, userdata);
}

int async_llm_sleep(struct async_llm *llm, int level, async_llm_reply_fn fn, void *userdata) {
        return engine_thread_sleep(llm->engine, level, fn, userdata);
}

int async_llm_wake_up(struct async_llm *llm, unsigned tags, async_llm_reply_fn fn, void *userdata) {
        if (tags == 0)
                tags = BACKEND_MEMORY_WEIGHTS | BACKEND_MEMORY_KV_CACHE;
        return engine_thread_wake_up(llm->engine, tags, fn, userdata);
}

int async_llm_reset_prefix_cache(struct async_llm *llm, bool preempt, async_llm_reply_fn fn, void *userdata) {
        return engine_thread_reset_prefix_cache(llm->engine, preempt, fn, userdata);
}

int async_llm_collective_rpc(struct async_llm *llm, const char *method, struct json_object *args,
                             async_llm_reply_fn fn, void *userdata) {
        return engine_thread_collective_rpc(llm->engine, method, args, fn, userdata);
}

bool async_llm_is_paused(struct async_llm *llm) {
        struct engine_thread_state st;
        engine_thread_state(llm->engine, &st);
        return st.paused;
}

bool async_llm_is_sleeping(struct async_llm *llm) {
        struct engine_thread_state st;
        engine_thread_state(llm->engine, &st);
        return st.released != 0;
}

int async_llm_check_health(struct async_llm *llm, double stall_timeout, struct error *err) {
        struct engine_thread_state st;
        engine_thread_state(llm->engine, &st);
        if (st.dead)
                return error_set(err, ESHUTDOWN, "%s", st.dead_message);
        double idle = monotonic_seconds() - st.progress_time;
        if (st.busy && idle > stall_timeout)
                return error_set(err, ETIMEDOUT,
                                 "the engine has made no progress for %.1f s with %u requests running and %u waiting",
                                 idle, st.stats.n_running, st.stats.n_waiting);
        return 0;
}

void async_llm_stats(struct async_llm *llm, struct async_llm_stats *ret) {
        engine_thread_state(llm->engine, &ret->engine);
        ret->n_streams = llm->streams.n;
}
