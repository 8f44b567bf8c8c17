/* SPDX-License-Identifier: MIT */
/* Fuzzes what libasyncllm-client (lib/asyncllm-client.c, client-output.c, client-json.c,
 * client-blocking.c) does with whatever comes back on its socket, from the daemon or from
 * anything else holding the other end. The client talks over a socketpair whose far end
 * says the input, and makes the calls the input picks.
 *
 * Input: byte 0 sets the client's line limit (its low 6 bits times 32 bytes; 0 keeps the
 * library's default), byte 1 holds flags (ATTACH_*: a generate request attached before
 * connecting, and how its callback behaves). The rest is what the daemon says, cut at form
 * feeds ("\f", which valid JSON holds only escaped) into
 * segments: the first is in the socket before the client connects; each later one starts
 * with the byte of an action (run_action()), and its other bytes are in the socket before
 * the client performs that action. After the last segment the daemon's end shuts down, so
 * that the client sees the end of the stream instead of waiting; a short timeout ends the
 * waits of the actions before it.
 *
 * Properties, besides no crash, leak, undefined behaviour or hang:
 * - every call returns 0 (or asyncllm_client_wait()'s 1) or a negative errno, and after a
 *   failure asyncllm_client_error() is a non-empty UTF-8 string, and the daemon's code, when
 *   there is one, is UTF-8 and maps to that errno as asyncllm-client.h says;
 * - every output reads consistently: an id; texts NUL-terminated at their length and UTF-8;
 *   token ids NULL exactly when there are none; finish and stop reasons NULL or UTF-8, the
 *   finish reason never ""; done exactly for a failure or a finished output without an
 *   "error" completion; a failure has no completions and a non-empty message, and a retry
 *   hint only with the overloaded error (-EAGAIN), as a finite number of seconds; the raw
 *   line is one line of JSON, an object whose "id" is the output's; out-of-range
 *   completions read as documented;
 * - a request gets no callback after its last one, after its callback gave it up, after its
 *   blocking call returned, or after a failed connect dropped it; all its callbacks carry
 *   one id; a blocking generate returns 0 only after a last output without error, else the
 *   error of its last callback (whose code and message are then the client's error) or the
 *   callback's own negative value;
 * - a control op's reply comes once: JSON text, or an error with NULL; a blocking call's
 *   result is JSON text;
 * - inside a callback, blocking calls and asyncllm_client_process()/_wait() give -EBUSY;
 * - asyncllm_client_pending() counts exactly the requests in flight not given up;
 *   asyncllm_client_events() asks for POLLIN and POLLOUT only; once
 *   asyncllm_client_process() reports the connection's end, every request in flight has had
 *   its last callback, nothing is pending and there is nothing to wait for; -EEXIST for an
 *   id in flight;
 * - connected: the protocol is 1, the hello is a JSON object whose "model" is the model, a
 *   generate that goes out fits its max_line_bytes and one refused locally with -EMSGSIZE
 *   had such a limit to exceed, and a second connect
 *   gives -EISCONN (closing the descriptor); a failed connect leaves the client unconnected,
 *   and it then connects to a daemon that says hello.
 * Built with libFuzzer, or with fuzz-main.c to replay the committed corpus
 * (tests/fuzz/client-reader) as a regression test. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <math.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "asyncllm-client.h"
#include "ndjson-reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ACTIONS 8
#define MAX_TRACKERS 32
#define ID_MAX 256
/* Everything the daemon says for an action is in the socket before the action starts, so
 * the timeout only ends the wait for an answer that is not there. */
#define TIMEOUT_USEC 2000
/* The reconnection after a failed connect finds its hello and the end in the socket. */
#define RECONNECT_TIMEOUT_USEC (10 * 1000000ull)
/* The nesting the client accepts (CLIENT_JSON_MAX_DEPTH): what it hands out parses with it. */
#define JSON_DEPTH 128

/* Byte 1. */
#define ATTACH 0x01         /* attach a generate request ATTACH_ID before connecting */
#define ATTACH_GIVE_UP 0x02 /* its callback gives it up at its first output that is not its last */
#define ATTACH_REENTER 0x04 /* its callback tries the calls refused inside callbacks */
#define ATTACH_ID "c1"      /* the first id the library picks itself: it must skip it */

/* The modifiers of an action byte, for the actions that send a generate request. */
#define ACTION_GIVE_UP 0x08 /* the callback gives up at the first output that is not the last */
#define ACTION_REENTER 0x10 /* the callback tries the calls refused inside callbacks */
#define ACTION_DUP_ID 0x20  /* the request is DUP_ID, sent again from its last callback */
#define DUP_ID "dup"

struct session;

/* What the harness knows of one request or control op it sent. */
struct tracker {
        struct session *session;
        bool is_call;       /* a control op's reply, else a generate request's outputs */
        bool sent;          /* the submission succeeded, or its blocking call runs */
        bool blocking;      /* sent by a blocking call */
        bool returned;      /* that call has returned */
        bool dropped;       /* a failed connect dropped it */
        bool done;          /* its last callback ran */
        bool gave_up;       /* its callback gave it up */
        int final_error;
        bool final_has_code; /* the last callback's failure, as the client's error has it after */
        char final_code[64];
        char final_message[1024];
        bool give_up;       /* give up at the first output that is not the last */
        bool reenter;       /* try, inside the callback, the calls refused there */
        bool resubmit;      /* once done, send a request under its id from the callback */
        char id[ID_MAX + 1]; /* "" until known */
};

struct session {
        asyncllm_client *client;
        int client_fd;
        int daemon_fd;
        size_t daemon_max_line; /* the hello's max_line_bytes; 0 when it said none */
        asyncllm_request *plain; /* for the refused calls inside callbacks */
        struct tracker trackers[MAX_TRACKERS];
        size_t n_trackers;
};

struct segment {
        uint8_t action;
        const uint8_t *bytes;
        size_t len;
};

static volatile uint64_t sink; /* keeps the reads below from being optimized away */

static void check(bool ok) {
        if (!ok)
                abort();
}

static bool utf8(const char *s) {
        return ndjson_utf8_valid(s, strlen(s));
}

/* Parses text as the client parses the daemon's lines; NULL when it does not parse (or is
 * JSON null). Whitespace may follow the value. */
static struct json_object *parse_json(const char *text, bool *ret_ok) {
        size_t len = strlen(text);
        struct json_tokener *tok = json_tokener_new_ex(JSON_DEPTH);
        check(tok != NULL);
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
        struct json_object *o = json_tokener_parse_ex(tok, text, (int) len + 1);
        size_t end = json_tokener_get_parse_end(tok);
        bool ok = json_tokener_get_error(tok) == json_tokener_success;
        json_tokener_free(tok);
        while (ok && end < len && strchr(" \t\r", text[end]))
                end++;
        *ret_ok = ok && end >= len;
        return o;
}

static void check_json(const char *text) {
        bool ok;
        check(text != NULL && utf8(text) && !strchr(text, '\n'));
        json_object_put(parse_json(text, &ok));
        check(ok);
}

/* The daemon's error codes as asyncllm-client.h maps them. */
static int errno_of_code(const char *code) {
        static const struct {
                const char *code;
                int errnum;
        } codes[] = {
                { "invalid_request", EINVAL }, { "invalid_params", EINVAL }, { "invalid_json", EBADMSG },
                { "invalid_utf8", EILSEQ }, { "line_too_long", EMSGSIZE }, { "unknown_op", EOPNOTSUPP },
                { "duplicate_id", EEXIST }, { "too_many_requests", EBUSY }, { "permission_denied", EACCES },
                { "unsupported_protocol", EPROTONOSUPPORT }, { "engine_dead", EIO }, { "shutting_down", ESHUTDOWN },
                { "not_found", ENOENT }, { "internal_error", EREMOTEIO }, { "overloaded", EAGAIN },
        };
        for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
                if (strcmp(code, codes[i].code) == 0)
                        return -codes[i].errnum;
        return -EPROTO;
}

/* A call's return: 0 or a negative errno that comes with a message, and with the daemon's
 * code when that is what failed. */
static int check_result(const struct session *s, int q) {
        check(q <= 0);
        if (q < 0) {
                const char *e = asyncllm_client_error(s->client), *code = asyncllm_client_error_code(s->client);
                check(e != NULL && *e && utf8(e));
                check(!code || (utf8(code) && errno_of_code(code) == q));
        }
        return q;
}

/* ---- Requests in flight ---------------------------------------------------------------- */

static struct tracker *new_tracker(struct session *s, bool is_call) {
        if (s->n_trackers == MAX_TRACKERS)
                return NULL;
        struct tracker *t = &s->trackers[s->n_trackers++];
        *t = (struct tracker) { .session = s, .is_call = is_call };
        return t;
}

/* Sent, and neither ended nor given up: what the library counts as pending. */
static bool in_flight(const struct tracker *t) {
        return t->sent && !t->done && !t->gave_up && !t->dropped && !t->returned;
}

static bool id_in_flight(const struct session *s, const char *id) {
        for (size_t i = 0; i < s->n_trackers; i++)
                if (in_flight(&s->trackers[i]) && strcmp(s->trackers[i].id, id) == 0)
                        return true;
        return false;
}

static void check_pending(const struct session *s) {
        size_t want = 0;
        for (size_t i = 0; i < s->n_trackers; i++)
                want += in_flight(&s->trackers[i]) && !s->trackers[i].blocking;
        check(asyncllm_client_pending(s->client) == want);
        check((asyncllm_client_events(s->client) & ~(POLLIN | POLLOUT)) == 0);
}

/* The connection's end was reported: every request has had its last callback. */
static void check_all_ended(const struct session *s) {
        for (size_t i = 0; i < s->n_trackers; i++)
                check(!in_flight(&s->trackers[i]));
        check(asyncllm_client_pending(s->client) == 0);
        check(asyncllm_client_events(s->client) == 0);
}

static void remember_id(struct tracker *t, const char *id) {
        check(id != NULL && *id && strlen(id) <= ID_MAX && utf8(id));
        if (t->id[0])
                check(strcmp(t->id, id) == 0);
        else
                snprintf(t->id, sizeof(t->id), "%s", id);
}

/* ---- Callbacks ------------------------------------------------------------------------- */

static void check_completion(const asyncllm_output *o, size_t i, bool *error_finish) {
        size_t len = SIZE_MAX, n_ids = SIZE_MAX;
        const char *text = asyncllm_output_text(o, i, &len);
        /* NUL-terminated at its length; a NUL inside (\u0000) is UTF-8 too */
        check(text != NULL && len != SIZE_MAX && text[len] == 0 && strlen(text) <= len);
        check(ndjson_utf8_valid(text, len));
        check(asyncllm_output_text(o, i, NULL) == text);
        const int32_t *ids = asyncllm_output_token_ids(o, i, &n_ids);
        check((ids == NULL) == (n_ids == 0));
        for (size_t j = 0; j < n_ids; j++)
                sink += (uint32_t) ids[j];
        const char *finish = asyncllm_output_finish_reason(o, i), *stop = asyncllm_output_stop_reason(o, i);
        check(!finish || (*finish && utf8(finish)));
        if (finish && strcmp(finish, "error") == 0)
                *error_finish = true;
        /* a stop string or a stop token, not both */
        check(!stop || (utf8(stop) && asyncllm_output_stop_token_id(o, i) == -1));
        sink += asyncllm_output_index(o, i);
}

static void check_output(const asyncllm_output *o) {
        const char *id = asyncllm_output_id(o), *line = asyncllm_output_json(o);
        int error = asyncllm_output_error(o);
        size_t n = asyncllm_output_n_completions(o);
        double retry_after = asyncllm_output_retry_after(o);
        bool error_finish = false;

        check(id != NULL && *id && strlen(id) <= ID_MAX && utf8(id));
        check(error <= 0);
        for (size_t i = 0; i < n; i++)
                check_completion(o, i, &error_finish);
        if (error < 0) {
                const char *message = asyncllm_output_error_message(o), *code = asyncllm_output_error_code(o);
                check(asyncllm_output_done(o) && n == 0);
                check(message != NULL && *message && utf8(message));
                check(!code || utf8(code));
                check(retry_after == -1 || (error == -EAGAIN && isfinite(retry_after) && retry_after >= 0));
        } else {
                /* an output comes from a line, and only a failure has a code or a message */
                check(line != NULL);
                check(!asyncllm_output_error_code(o) && !asyncllm_output_error_message(o));
                check(retry_after == -1);
                check(asyncllm_output_done(o) == (asyncllm_output_finished(o) && !error_finish));
        }

        /* out of range: "", no ids, no reasons */
        size_t len = SIZE_MAX, n_ids = SIZE_MAX;
        check(strcmp(asyncllm_output_text(o, n, &len), "") == 0 && len == 0);
        check(asyncllm_output_token_ids(o, n, &n_ids) == NULL && n_ids == 0);
        check(!asyncllm_output_finish_reason(o, n) && !asyncllm_output_stop_reason(o, n));
        check(asyncllm_output_stop_token_id(o, n) == -1 && asyncllm_output_index(o, n) == 0);
        sink += (uint64_t) asyncllm_output_prompt_tokens(o) + (uint64_t) asyncllm_output_completion_tokens(o);

        if (line) {
                struct json_object *msg, *v;
                bool ok;
                check(utf8(line) && !strchr(line, '\n'));
                msg = parse_json(line, &ok);
                check(ok && json_object_is_type(msg, json_type_object));
                check(json_object_object_get_ex(msg, "id", &v) && json_object_is_type(v, json_type_string));
                check(strcmp(json_object_get_string(v), id) == 0);
                json_object_put(msg);
        }
}

/* What may not be done from inside a callback is refused, and says why. */
static void check_refused_inside(const struct session *s) {
        asyncllm_client *c = s->client;
        check(check_result(s, asyncllm_client_process(c)) == -EBUSY);
        check(check_result(s, asyncllm_client_wait(c, 0)) == -EBUSY);
        check(check_result(s, asyncllm_client_call(c, "health", NULL, NULL)) == -EBUSY);
        check(check_result(s, asyncllm_client_generate(c, s->plain, NULL, NULL)) == -EBUSY);
        check((asyncllm_client_events(c) & ~(POLLIN | POLLOUT)) == 0);
        sink += asyncllm_client_pending(c);
}

static int on_output(asyncllm_client *c, const asyncllm_output *o, void *userdata);

/* From a last callback: a new request under the same id, which the library allows. */
static void resubmit(struct session *s, const char *id) {
        struct tracker *t = new_tracker(s, false);
        asyncllm_request *r = NULL;
        if (!t)
                return;
        check(asyncllm_request_new(&r) == 0);
        check(asyncllm_request_set_prompt(r, "again") == 0);
        check(asyncllm_request_set_id(r, id) == 0);
        snprintf(t->id, sizeof(t->id), "%s", id);
        int q = check_result(s, asyncllm_client_submit_generate(s->client, r, on_output, t, NULL));
        t->sent = q == 0; /* submitting only sends: no callback runs before this */
        asyncllm_request_free(r);
}

static int on_output(asyncllm_client *c, const asyncllm_output *o, void *userdata) {
        struct tracker *t = userdata;
        struct session *s = t->session;

        check(c == s->client && !t->is_call && t->sent);
        check(!t->done && !t->gave_up && !t->returned && !t->dropped);
        check_output(o);
        remember_id(t, asyncllm_output_id(o));
        if (t->reenter)
                check_refused_inside(s);
        if (asyncllm_output_done(o)) {
                t->done = true;
                t->final_error = asyncllm_output_error(o);
                if (t->final_error < 0) {
                        const char *code = asyncllm_output_error_code(o);
                        t->final_has_code = code != NULL;
                        snprintf(t->final_code, sizeof(t->final_code), "%s", code ? code : "");
                        snprintf(t->final_message, sizeof(t->final_message), "%s", asyncllm_output_error_message(o));
                }
                if (t->resubmit)
                        resubmit(s, t->id);
                return 0;
        }
        if (t->give_up) {
                t->gave_up = true;
                return -ECANCELED;
        }
        return 0;
}

static void on_reply(asyncllm_client *c, int error, const char *result, void *userdata) {
        struct tracker *t = userdata;

        check(c == t->session->client && t->is_call && t->sent);
        check(!t->done && !t->dropped);
        t->done = true;
        t->final_error = error;
        check(error <= 0);
        if (error == 0)
                check_json(result);
        else {
                check(result == NULL);
                check(check_result(t->session, error) == error);
        }
}

/* ---- The daemon's end ------------------------------------------------------------------ */

/* What fits in the socket goes in; the rest is lost, as from a daemon cut off. */
static void daemon_say(const struct session *s, const uint8_t *bytes, size_t len, bool last) {
        while (len > 0) {
                ssize_t n = send(s->daemon_fd, bytes, len, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                bytes += n;
                len -= (size_t) n;
        }
        if (last)
                (void) shutdown(s->daemon_fd, SHUT_WR);
}

/* Reads what the client sent, so that its writes never wait. */
static void drain(const struct session *s) {
        char buf[4096];
        while (recv(s->daemon_fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
                ;
}

/* The first segment, then one per "\f" with its action byte first. */
static size_t split(const uint8_t *stream, size_t len, struct segment *segments) {
        size_t n = 0, at = 0;
        uint8_t action = 0;
        for (;;) {
                const uint8_t *ff = n < MAX_ACTIONS ? memchr(stream + at, '\f', len - at) : NULL;
                size_t end = ff ? (size_t) (ff - stream) : len;
                segments[n++] = (struct segment) { action, stream + at, end - at };
                if (!ff)
                        return n;
                at = end + 1;
                action = at < len ? stream[at++] : 0;
        }
}

/* ---- Actions --------------------------------------------------------------------------- */

/* Bits 6-7 of the action: a plain prompt, n = 2 with logprobs, the final output kind, or a
 * long prompt (over a small max_line_bytes). */
static asyncllm_request *make_request(uint8_t action) {
        asyncllm_request *r = NULL;
        char long_prompt[301];

        check(asyncllm_request_new(&r) == 0);
        switch (action >> 6) {
        case 0:
                check(asyncllm_request_set_prompt(r, "Hi") == 0);
                break;
        case 1: /* n > 1 with logprobs, everything so far in each output */
                check(asyncllm_request_set_prompt(r, "Hi") == 0);
                check(asyncllm_request_set_param_int(r, "n", 2) == 0);
                check(asyncllm_request_set_param_int(r, "logprobs", 1) == 0);
                check(asyncllm_request_set_param_string(r, "output_kind", "cumulative") == 0);
                break;
        case 2: /* one output at the end */
                check(asyncllm_request_set_prompt(r, "Hi") == 0);
                check(asyncllm_request_set_param_string(r, "output_kind", "final") == 0);
                break;
        default: /* longer than a small max_line_bytes */
                memset(long_prompt, 'x', sizeof(long_prompt) - 1);
                long_prompt[sizeof(long_prompt) - 1] = 0;
                check(asyncllm_request_set_prompt(r, long_prompt) == 0);
                break;
        }
        if (action & ACTION_DUP_ID)
                check(asyncllm_request_set_id(r, DUP_ID) == 0);
        return r;
}

/* A generate request, by the blocking call or submitted. */
static void send_generate(struct session *s, uint8_t action, bool blocking) {
        struct tracker *t = new_tracker(s, false);
        asyncllm_request *r;
        char *json = NULL, *id = NULL;
        int q;

        if (!t)
                return;
        t->give_up = action & ACTION_GIVE_UP;
        t->reenter = action & ACTION_REENTER;
        t->resubmit = action & ACTION_DUP_ID;
        t->blocking = blocking;
        r = make_request(action);
        check(asyncllm_request_to_json(r, &json) == 0);
        size_t len = strlen(json); /* without the id: the line sent is longer */
        free(json);
        bool busy = (action & ACTION_DUP_ID) && id_in_flight(s, DUP_ID);
        if (action & ACTION_DUP_ID)
                snprintf(t->id, sizeof(t->id), "%s", DUP_ID);

        if (blocking) {
                t->sent = true;
                q = check_result(s, asyncllm_client_generate(s->client, r, on_output, t));
                t->returned = true;
                if (t->gave_up)
                        check(q == -ECANCELED && !asyncllm_client_error_code(s->client));
                else if (t->done)
                        check(q == t->final_error);
                else
                        check(q < 0);
                if (t->done && q < 0) {
                        /* the failure's code and message are the client's error (cut to fit) */
                        const char *e = asyncllm_client_error(s->client), *code = asyncllm_client_error_code(s->client);
                        check(strncmp(e, t->final_message, strlen(e)) == 0);
                        check(t->final_has_code == (code != NULL));
                        check(!code || strncmp(code, t->final_code, strlen(code)) == 0);
                }
        } else {
                t->sent = true;
                q = check_result(s, asyncllm_client_submit_generate(s->client, r, on_output, t, &id));
                t->sent = q == 0;
                check((q == 0) == (id != NULL));
                if (id)
                        remember_id(t, id);
                free(id);
        }
        if (busy)
                check(q == -EEXIST || q == -ENOTCONN);
        if (q == 0 && s->daemon_max_line > 0)
                check(len <= s->daemon_max_line);
        /* refused locally (no callback ran): only for a line over the daemon's limit */
        if (q == -EMSGSIZE && !t->done && !t->gave_up)
                check(s->daemon_max_line > 0);
        asyncllm_request_free(r);
}

static void blocking_call(const struct session *s, uint8_t action) {
        asyncllm_client *c = s->client;
        char *result = NULL;
        bool wants_result = true, aborted = false;
        int q;

        switch ((action >> 3) & 7) {
        case 0:
                q = asyncllm_client_call(c, "collective_rpc", "{\"method\":\"ping\"}", &result);
                break;
        case 1:
                q = asyncllm_client_health(c, &result);
                break;
        case 2:
                q = asyncllm_client_stats(c, &result);
                break;
        case 3:
                wants_result = false;
                q = asyncllm_client_abort(c, ATTACH_ID, &aborted);
                break;
        case 4:
                wants_result = false;
                q = asyncllm_client_pause(c, "wait", true);
                break;
        case 5:
                wants_result = false;
                q = asyncllm_client_resume(c);
                break;
        case 6:
                q = asyncllm_client_call(c, "list", NULL, &result);
                break;
        default:
                wants_result = false;
                q = asyncllm_client_abort(c, DUP_ID, NULL);
                break;
        }
        check_result(s, q);
        if (q == 0 && wants_result)
                check_json(result);
        else
                check(result == NULL);
        sink += aborted;
        free(result);
}

static void submit_call(struct session *s, uint8_t action) {
        struct tracker *t = new_tracker(s, true);
        char *id = NULL;
        int q;

        if (!t)
                return;
        t->sent = true;
        if (action & 0x08)
                q = asyncllm_client_submit_abort(s->client, ATTACH_ID, on_reply, t, &id);
        else
                q = asyncllm_client_submit_call(s->client, "list", NULL, on_reply, t, &id);
        check_result(s, q);
        t->sent = q == 0;
        check((q == 0) == (id != NULL));
        if (id)
                remember_id(t, id);
        free(id);
}

static void attach(struct session *s, uint8_t action) {
        struct tracker *t = new_tracker(s, false);
        const char *id = action & ACTION_DUP_ID ? DUP_ID : ATTACH_ID;

        if (!t)
                return;
        t->give_up = action & ACTION_GIVE_UP;
        t->reenter = action & ACTION_REENTER;
        snprintf(t->id, sizeof(t->id), "%s", id);
        bool busy = id_in_flight(s, id);
        t->sent = true;
        int q = check_result(s, asyncllm_client_attach_generate(s->client, id, on_output, t));
        t->sent = q == 0;
        if (busy)
                check(q == -EEXIST || q == -ENOTCONN);
}

/* asyncllm_client_process(), or asyncllm_client_wait() without waiting. */
static int process(const struct session *s, bool by_wait) {
        int q = by_wait ? asyncllm_client_wait(s->client, 0) : asyncllm_client_process(s->client);
        if (by_wait && q == 1)
                return q;
        check_result(s, q);
        if (q < 0)
                check_all_ended(s);
        return q;
}

/* An action byte: its low 3 bits pick the call, 0 to 7: a blocking generate, a submitted one
 * then asyncllm_client_process(), a blocking control op (bits 3-5 pick which), a submitted
 * one (list, or with bit 3 an abort) then process, asyncllm_client_wait() without waiting,
 * process, a generate attached after connecting then process, a submitted generate left
 * for the next action. Generates take ACTION_* and, in bits 6-7, their parameters
 * (make_request()). */
static void run_action(struct session *s, uint8_t action) {
        switch (action & 7) {
        case 0:
                send_generate(s, action, true);
                break;
        case 1:
                send_generate(s, action, false);
                (void) process(s, false);
                break;
        case 2:
                blocking_call(s, action);
                break;
        case 3:
                submit_call(s, action);
                (void) process(s, false);
                break;
        case 4:
                (void) process(s, true);
                break;
        case 5:
                (void) process(s, false);
                check(asyncllm_client_fd(s->client) == s->client_fd);
                break;
        case 6:
                attach(s, action);
                (void) process(s, false);
                break;
        default: /* submitted and left to whichever call comes next, a blocking one maybe */
                send_generate(s, action, false);
                break;
        }
}

/* ---- Connecting ------------------------------------------------------------------------ */

/* Connected: the hello's promises. */
static void check_connected(struct session *s) {
        asyncllm_client *c = s->client;
        const char *hello = asyncllm_client_hello(c), *model = asyncllm_client_model(c);
        struct json_object *h, *v;
        bool ok;
        int extra[2];

        check(asyncllm_client_protocol(c) == ASYNCLLM_PROTOCOL_VERSION);
        check(hello != NULL && utf8(hello));
        h = parse_json(hello, &ok);
        check(ok && json_object_is_type(h, json_type_object));
        if (json_object_object_get_ex(h, "model", &v) && json_object_is_type(v, json_type_string))
                check(model != NULL && utf8(model) && strcmp(model, json_object_get_string(v)) == 0);
        else
                check(model == NULL);
        if (json_object_object_get_ex(h, "max_line_bytes", &v) && json_object_is_type(v, json_type_int) &&
            json_object_get_int64(v) > 0)
                s->daemon_max_line = (size_t) json_object_get_int64(v);
        json_object_put(h);

        check(asyncllm_client_fd(c) == s->client_fd);
        check(check_result(s, asyncllm_client_set_max_line(c, 4096)) == -EISCONN);
        /* the client owns the descriptor, refused too */
        check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, extra) == 0);
        check(check_result(s, asyncllm_client_connect_fd(c, extra[0])) == -EISCONN);
        check(fcntl(extra[0], F_GETFD) < 0 && errno == EBADF);
        close(extra[1]);
        check_pending(s);
}

/* A failed connect leaves the client as it was before, and it connects again. */
static void check_reconnect(struct session *s) {
        static const char hello[] = "{\"hello\":{\"protocol\":1,\"server\":\"asyncllmd\",\"model\":\"m\"}}\n";
        asyncllm_client *c = s->client;
        int fds[2];

        for (size_t i = 0; i < s->n_trackers; i++)
                s->trackers[i].dropped = true;
        check(asyncllm_client_protocol(c) == 0 && !asyncllm_client_hello(c) && !asyncllm_client_model(c));
        check(asyncllm_client_fd(c) == -ENOTCONN && asyncllm_client_events(c) == 0);
        check(asyncllm_client_pending(c) == 0);
        check(check_result(s, asyncllm_client_process(c)) == -ENOTCONN);
        check(asyncllm_client_set_max_line(c, 4096) == 0);

        check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
        check(write(fds[1], hello, sizeof(hello) - 1) == (ssize_t) sizeof(hello) - 1);
        check(shutdown(fds[1], SHUT_WR) == 0);
        asyncllm_client_set_timeout(c, RECONNECT_TIMEOUT_USEC);
        check(asyncllm_client_connect_fd(c, fds[0]) == 0);
        check(asyncllm_client_protocol(c) == ASYNCLLM_PROTOCOL_VERSION);
        check(asyncllm_client_model(c) && strcmp(asyncllm_client_model(c), "m") == 0);
        /* the end came right behind the hello: reported from inside the connect, or now */
        int q = check_result(s, asyncllm_client_process(c));
        check(q == -ECONNRESET || q == -ENOTCONN);
        check_all_ended(s);
        close(fds[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct segment segments[MAX_ACTIONS + 1];
        struct session s = { .client = NULL };
        int fds[2], q;

        if (size < 2)
                return 0;
        size_t max_line = (size_t) (data[0] & 0x3f) * 32;
        uint8_t flags = data[1];
        size_t n_segments = split(data + 2, size - 2, segments);

        check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
        /* Room for a whole input where the kernel allows it. */
        int room = 1 << 20;
        (void) setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &room, sizeof(room));
        s.client_fd = fds[0];
        s.daemon_fd = fds[1];
        check(asyncllm_request_new(&s.plain) == 0);
        check(asyncllm_request_set_prompt(s.plain, "Hi") == 0);
        check(asyncllm_client_new(&s.client) == 0);
        asyncllm_client_set_timeout(s.client, TIMEOUT_USEC);
        check(check_result(&s, asyncllm_client_set_max_line(s.client, 0)) == -EINVAL);
        if (max_line > 0)
                check(asyncllm_client_set_max_line(s.client, max_line) == 0);
        if (flags & ATTACH) {
                struct tracker *t = new_tracker(&s, false);
                t->give_up = flags & ATTACH_GIVE_UP;
                t->reenter = flags & ATTACH_REENTER;
                t->sent = true;
                snprintf(t->id, sizeof(t->id), "%s", ATTACH_ID);
                check(asyncllm_client_attach_generate(s.client, ATTACH_ID, on_output, t) == 0);
        }

        daemon_say(&s, segments[0].bytes, segments[0].len, n_segments == 1);
        q = check_result(&s, asyncllm_client_connect_fd(s.client, fds[0]));
        if (q < 0)
                check_reconnect(&s);
        else {
                check_connected(&s);
                for (size_t i = 1; i < n_segments; i++) {
                        daemon_say(&s, segments[i].bytes, segments[i].len, i + 1 == n_segments);
                        run_action(&s, segments[i].action);
                        drain(&s);
                        check_pending(&s);
                }
                /* The daemon's end is shut: the stream ends, and with it the connection. */
                check(process(&s, false) < 0);
                check(check_result(&s, asyncllm_client_process(s.client)) == -ENOTCONN);
                check(check_result(&s, asyncllm_client_generate(s.client, s.plain, NULL, NULL)) == -ENOTCONN);
                check(check_result(&s, asyncllm_client_attach_generate(s.client, "late", on_output, NULL)) ==
                      -ENOTCONN);
        }
        drain(&s);
        asyncllm_client_free(s.client);
        asyncllm_request_free(s.plain);
        close(fds[1]);
        return 0;
}
