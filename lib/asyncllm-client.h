/* SPDX-License-Identifier: MIT */
#ifndef ASYNCLLM_CLIENT_H
#define ASYNCLLM_CLIENT_H

/* libasyncllm-client: a client of asyncllmd's socket protocol, version 1
 * (asyncllmd-protocol(7)). Link with `pkg-config --libs libasyncllm-client`.
 *
 * Errors: every function that can fail returns 0 (or a documented positive value) or a
 * negative errno. The client keeps a message for the last failure, asyncllm_client_error(),
 * and, when the daemon reported it, the daemon's code (asyncllm_client_error_code():
 * "invalid_params", "too_many_requests", ...). The daemon's codes map to errno as follows:
 * invalid_request, invalid_params -EINVAL; invalid_json -EBADMSG; invalid_utf8 -EILSEQ;
 * line_too_long -EMSGSIZE; unknown_op -EOPNOTSUPP; duplicate_id -EEXIST; too_many_requests
 * -EBUSY; permission_denied -EACCES; unsupported_protocol -EPROTONOSUPPORT; engine_dead -EIO;
 * shutting_down -ESHUTDOWN; not_found -ENOENT; internal_error -EREMOTEIO; overloaded -EAGAIN
 * (the engine refused a latency-sensitive request for now: try again after
 * asyncllm_output_retry_after() seconds); any other -EPROTO.
 * A daemon that breaks the protocol gives -EPROTO (or -EMSGSIZE for a line over the
 * limit); a closed connection -ECONNRESET; a dead client -ENOTCONN. An error the daemon
 * sends with "id": null (it shuts down, or could not read one of our lines, which cannot
 * be told apart) concerns the whole connection and ends it, with the daemon's code. After
 * a connection error every request in flight gets its final callback with that error, and
 * the client stays dead: free it and connect a new one.
 *
 * Two ways to use it, which mix freely on one client:
 * - blocking: asyncllm_client_generate() and asyncllm_client_call() (and their wrappers)
 *   return when the request is done, calling back for each output meanwhile;
 * - non-blocking: asyncllm_client_submit_generate() and asyncllm_client_submit_call()
 *   queue a request and return at once; the caller's loop (sd-event, epoll, poll) watches
 *   asyncllm_client_fd() for asyncllm_client_events() and calls asyncllm_client_process(),
 *   which reads, writes what is queued and runs the callbacks. Writes never block.
 * A blocking call runs the same dispatch, so callbacks of submitted requests may run
 * from inside it. From inside a callback the client may submit requests, abort requests and
 * read its state, but not make a blocking call, call asyncllm_client_process() (both give
 * -EBUSY) or free the client.
 *
 * Thread safety: a client, and everything it hands out, is used by one thread at a time
 * (it may move between threads with the caller's own locking); callbacks run on the thread
 * that calls into the client. Distinct clients and distinct requests share nothing and may
 * be used from different threads at once. The library has no global state and sets no
 * signal handlers (it sends with MSG_NOSIGNAL: no SIGPIPE).
 *
 * Strings go in and come out as UTF-8 and NUL-terminated; JSON text arguments are parsed
 * and checked before anything is sent. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The protocol versions this library speaks. */
#define ASYNCLLM_PROTOCOL_VERSION 1

typedef struct asyncllm_client asyncllm_client;
typedef struct asyncllm_request asyncllm_request;
typedef struct asyncllm_output asyncllm_output;

/* ---- Connection ---------------------------------------------------------------------- */

/* A client that is not connected yet. Returns 0 or -ENOMEM. */
int asyncllm_client_new(asyncllm_client **ret);
/* Closes the connection and frees everything; requests in flight are dropped without a
 * callback (the daemon aborts them when the connection closes). Accepts NULL; returns NULL.
 * Not from inside a callback. */
asyncllm_client *asyncllm_client_free(asyncllm_client *c);

/* The socket asyncllm_client_connect() uses for NULL: $ASYNCLLM_SOCKET; else, for root,
 * /run/asyncllm/asyncllmd.sock; else $XDG_RUNTIME_DIR/asyncllm/asyncllmd.sock when that
 * socket exists (a user's own daemon), else /run/asyncllm/asyncllmd.sock (the system one).
 * *ret is malloc()ed. Returns 0 or -ENOMEM. */
int asyncllm_default_socket_path(char **ret);

/* Connects to the daemon's socket (path NULL: asyncllm_default_socket_path()), reads its
 * hello and agrees on the protocol version; blocks until then (see
 * asyncllm_client_set_timeout()). -EPROTONOSUPPORT when the daemon speaks no version this
 * library speaks; the daemon's error when it refuses the connection (-EBUSY for
 * too_many_requests...); -EISCONN when already connected; the connect(2) errors (-ENOENT,
 * -ECONNREFUSED, -EACCES) with the path in the message. On failure the client is left
 * unconnected and may connect again. When the hello says "max_line_bytes", longer
 * messages are refused locally (-EMSGSIZE) instead of being sent. */
int asyncllm_client_connect(asyncllm_client *c, const char *path);
/* The same over a connected stream socket the caller made (a socketpair, a descriptor
 * passed over D-Bus): the client owns fd from here, on failure too. */
int asyncllm_client_connect_fd(asyncllm_client *c, int fd);

/* The longest time, in microseconds, a blocking call waits for the daemon to say anything
 * (the hello, the next output, the reply) before it gives up with -ETIMEDOUT; a request
 * given up on is aborted. 0, the default, waits as long as it takes. */
void asyncllm_client_set_timeout(asyncllm_client *c, uint64_t usec);

/* The longest line accepted from the daemon, before connecting (default 64 MiB: outputs
 * with prompt logprobs of long prompts are big). A longer line is a protocol error
 * (-EMSGSIZE) that ends the connection. -EINVAL for 0, -EISCONN once connected. */
int asyncllm_client_set_max_line(asyncllm_client *c, size_t bytes);

/* The daemon's hello, as JSON text ({"protocol": 1, "server": ..., "version": ...,
 * "model": ...}); NULL before connecting. Valid while the client lives. */
const char *asyncllm_client_hello(const asyncllm_client *c);
/* The model the daemon serves (from the hello); NULL when unknown. */
const char *asyncllm_client_model(const asyncllm_client *c);
/* The protocol version agreed on; 0 before connecting. */
int asyncllm_client_protocol(const asyncllm_client *c);

/* The last failure's message (never NULL: "" when there was none); valid until the next
 * call on the client. */
const char *asyncllm_client_error(const asyncllm_client *c);
/* The daemon's error code for the last failure, or NULL when the failure was local. */
const char *asyncllm_client_error_code(const asyncllm_client *c);

/* ---- Requests: what asyncllm_client_generate() sends --------------------------------- */

/* An empty generate request. A request is a builder: it can be submitted many times and
 * changed between submissions; submitting copies it. Returns 0 or -ENOMEM. */
int asyncllm_request_new(asyncllm_request **ret);
asyncllm_request *asyncllm_request_free(asyncllm_request *r);

/* The request's id on the connection: 1 to 256 bytes of UTF-8. Without one the library
 * picks "c1", "c2", ... for each submission. NULL clears it. -EINVAL, -ENOMEM. */
int asyncllm_request_set_id(asyncllm_request *r, const char *id);

/* The prompt, one of three kinds; setting one replaces the others. Text may contain special
 * tokens. -EINVAL (NULL), -EILSEQ (not UTF-8), -ENOMEM. */
int asyncllm_request_set_prompt(asyncllm_request *r, const char *prompt);
int asyncllm_request_set_prompt_token_ids(asyncllm_request *r, const int32_t *ids, size_t n);
/* A chat message ({"role", "content"}), appended; rendered with the model's chat template. */
int asyncllm_request_add_message(asyncllm_request *r, const char *role, const char *content);
/* Drops every message added so far. */
void asyncllm_request_clear_messages(asyncllm_request *r);

/* A sampling parameter ("params" in the protocol), under vLLM's name: max_tokens,
 * temperature, top_p, seed, stop, logprobs, output_kind... The daemon checks names and
 * values (invalid_params names the bad one). A key set twice keeps its last value.
 * _double refuses NaN and infinities (-EINVAL); _json takes any JSON value as text
 * ("[\"\\n\", \"END\"]", "null", "{\"50256\": -100}"), -EINVAL when it does not parse. */
int asyncllm_request_set_param_int(asyncllm_request *r, const char *key, int64_t value);
int asyncllm_request_set_param_double(asyncllm_request *r, const char *key, double value);
int asyncllm_request_set_param_bool(asyncllm_request *r, const char *key, bool value);
int asyncllm_request_set_param_string(asyncllm_request *r, const char *key, const char *value);
int asyncllm_request_set_param_json(asyncllm_request *r, const char *key, const char *json);
/* Removes a parameter; 0 whether or not it was set. */
int asyncllm_request_unset_param(asyncllm_request *r, const char *key);

/* Scheduling: priority (lower first under the priority policy), and the request's class
 * under the slo policy: latency-sensitive (best-effort otherwise), with its SLO in seconds
 * to the first token (ttft_slo) and per output token (slo), each > 0, or 0 for the
 * daemon's default (default-ttft-slo, default-slo). */
int asyncllm_request_set_priority(asyncllm_request *r, int64_t priority);
int asyncllm_request_set_latency_sensitive(asyncllm_request *r, bool yes);
int asyncllm_request_set_slo(asyncllm_request *r, double ttft, double tpot);
/* Any other top-level field of the generate message, as JSON text (for protocol additions).
 * "op" and "id" are refused (-EINVAL). */
int asyncllm_request_set_field_json(asyncllm_request *r, const char *key, const char *json);

/* Makes the request an encode request: one vector pooled from the prompt's final hidden
 * states instead of generated tokens (asyncllm_output_embedding() reads it). pooling_type:
 * "last", "mean", "cls", or NULL for the daemon's default (the
 * pooling type the model file declares, else last); normalize: scale it to unit
 * length; dimensions: keep the first this many components (before normalizing), 0 for all.
 * An encode request takes no params (the daemon refuses them); its prompt and its
 * scheduling class are set as for generate, and asyncllm_client_generate() and
 * asyncllm_client_submit_generate() send it. -EINVAL (pooling_type not UTF-8), -ENOMEM. */
int asyncllm_request_set_encode(asyncllm_request *r, const char *pooling_type, bool normalize, uint32_t dimensions);

/* The message as it would be sent (without its id), malloc()ed JSON text. -ENOMEM, or
 * -EINVAL when no prompt is set. */
int asyncllm_request_to_json(const asyncllm_request *r, char **ret);

/* ---- Outputs: what the daemon sends back for a generate request ---------------------- */

/* A view of one daemon message for a generate request, valid only during the callback
 * that receives it. It is either an output (asyncllm_output_error() == 0) or the request's
 * failure (from the daemon, or local: connection lost, timed out). */

/* Called for each message of a generate request, in the order the daemon sent them.
 * asyncllm_output_done() tells the last one. Returning a negative errno gives the request up:
 * the library sends an abort, drops whatever else comes for it, and a blocking
 * asyncllm_client_generate() returns that value. The return value of the last call is
 * ignored. */
typedef int (*asyncllm_output_fn)(asyncllm_client *c, const asyncllm_output *o, void *userdata);

/* The request's id. */
const char *asyncllm_output_id(const asyncllm_output *o);
/* Whether this is the last callback for the request: a finished output (unless a completion
 * finished with "error": the daemon's error follows), or a failure. */
bool asyncllm_output_done(const asyncllm_output *o);
/* The protocol's "finished": the request has ended (every completion has a finish_reason). */
bool asyncllm_output_finished(const asyncllm_output *o);

/* 0 for an output, else the failure as a negative errno with its code (NULL when local) and
 * message. */
int asyncllm_output_error(const asyncllm_output *o);
const char *asyncllm_output_error_code(const asyncllm_output *o);
const char *asyncllm_output_error_message(const asyncllm_output *o);
/* With the error code "overloaded" (-EAGAIN): the seconds after which a retry may
 * succeed, as the daemon estimates them; -1 for anything else. */
double asyncllm_output_retry_after(const asyncllm_output *o);

/* The completions in this output (n > 1 gives several; 0 for a failure), each picked by its
 * position i here (0 .. n_completions - 1). */
size_t asyncllm_output_n_completions(const asyncllm_output *o);
/* The completion's own index (0 .. n - 1 of the request's n). */
uint32_t asyncllm_output_index(const asyncllm_output *o, size_t i);
/* Its text (new text for the "delta" output kind, the default), NUL-terminated; *ret_len
 * (may be NULL) gets its length in bytes. "" when out of range. */
const char *asyncllm_output_text(const asyncllm_output *o, size_t i, size_t *ret_len);
/* Its token ids; *ret_n gets their number. NULL and 0 when there are none. */
const int32_t *asyncllm_output_token_ids(const asyncllm_output *o, size_t i, size_t *ret_n);
/* "stop", "length", "abort", "error", or NULL while the completion runs. */
const char *asyncllm_output_finish_reason(const asyncllm_output *o, size_t i);
/* The stop string that ended it, or NULL (see asyncllm_output_stop_token_id()). */
const char *asyncllm_output_stop_reason(const asyncllm_output *o, size_t i);
/* The stop token id that ended it, or -1. */
int64_t asyncllm_output_stop_token_id(const asyncllm_output *o, size_t i);

/* An encode request's vector, on its finished output: *ret_n (may be NULL) gets its length.
 * NULL and 0 for any other output. Each component is the float the daemon computed. */
const float *asyncllm_output_embedding(const asyncllm_output *o, size_t *ret_n);

/* "usage" of a finished output; -1 when absent. */
int64_t asyncllm_output_prompt_tokens(const asyncllm_output *o);
int64_t asyncllm_output_completion_tokens(const asyncllm_output *o);

/* The whole message as the daemon sent it (JSON text, one line without its "\n"): logprobs,
 * metrics, num_cached_tokens and anything newer are there. NULL for a local failure. */
const char *asyncllm_output_json(const asyncllm_output *o);

/* ---- Blocking API -------------------------------------------------------------------- */

/* Sends the request and returns when it is done: 0 once it finished (whatever the
 * finish_reason), the daemon's error for a failed request (code and message in the client's
 * error), the callback's negative return, or a connection error. cb may be NULL. */
int asyncllm_client_generate(asyncllm_client *c, const asyncllm_request *r, asyncllm_output_fn cb, void *userdata);

/* Any control op ("pause", "stats", "collective_rpc", ...): args_json is a JSON object whose
 * members join the message ({"mode": "wait"}), or NULL. On success *ret_result_json (may be
 * NULL) gets the result as malloc()ed JSON text. */
int asyncllm_client_call(asyncllm_client *c, const char *op, const char *args_json, char **ret_result_json);

/* Wrappers for the common ops. */
/* Aborts request_id of this connection; *ret_aborted (may be NULL): whether it was in
 * flight. The request's own callback then gets its final output. */
int asyncllm_client_abort(asyncllm_client *c, const char *request_id, bool *ret_aborted);
int asyncllm_client_health(asyncllm_client *c, char **ret_result_json);
int asyncllm_client_stats(asyncllm_client *c, char **ret_result_json);
/* mode: "abort", "wait", "keep", or NULL for the daemon's default. */
int asyncllm_client_pause(asyncllm_client *c, const char *mode, bool clear_cache);
int asyncllm_client_resume(asyncllm_client *c);

/* ---- Non-blocking API ---------------------------------------------------------------- */

/* Called once with the reply of a control op: error 0 and the result as JSON text, or a
 * negative errno (the daemon's code and message, or the local failure, are in the client's
 * error during the call) and NULL. */
typedef void (*asyncllm_reply_fn)(asyncllm_client *c, int error, const char *result_json, void *userdata);

/* The connected socket, non-blocking; -ENOTCONN when there is none. Do not read or write it. */
int asyncllm_client_fd(const asyncllm_client *c);
/* What to wait for: POLLIN, plus POLLOUT while bytes are queued (poll(2) bits; EPOLLIN and
 * EPOLLOUT have the same values). After the connection failed, POLLIN until
 * asyncllm_client_process() has reported it, then 0. */
int asyncllm_client_events(const asyncllm_client *c);
/* Reads what has arrived, writes what is queued and runs the callbacks; never blocks. Reads
 * until the socket is empty, so edge-triggered epoll works. Returns 0, or the connection's
 * error once it fails (after the final callbacks; -ENOTCONN on later calls). */
int asyncllm_client_process(asyncllm_client *c);
/* Waits up to timeout_usec (UINT64_MAX: forever) for the socket, then processes. Returns 1
 * when something was processed, 0 on timeout, or a negative errno. */
int asyncllm_client_wait(asyncllm_client *c, uint64_t timeout_usec);
/* Requests and calls in flight (given up ones not counted). */
size_t asyncllm_client_pending(const asyncllm_client *c);

/* Queues the request and sends what the socket takes at once; cb gets its outputs from
 * asyncllm_client_process() (or a blocking call). *ret_id (may be NULL) gets its id,
 * malloc()ed. -EEXIST when the id is in flight already, -ENOTCONN, -EMSGSIZE when the
 * message is longer than the daemon accepts. The send queue has no bound of its own: how
 * much is submitted ahead is the caller's choice (asyncllm_client_pending()). */
int asyncllm_client_submit_generate(asyncllm_client *c, const asyncllm_request *r, asyncllm_output_fn cb,
                                    void *userdata, char **ret_id);
/* Expects the outputs of a generate request that was started some other way and whose
 * lines come on this connection under request_id, such as the stream that the D-Bus method
 * Generate hands out: cb gets them as if asyncllm_client_submit_generate() had sent it.
 * Nothing is sent. Call it before asyncllm_client_connect_fd(), so that outputs right behind
 * the hello are not missed (cb may then run from inside the connect, and a stream that ended
 * with them still connects); a failed connect drops it. A callback that gives the request up
 * sends an abort for it on this connection, which a stream that is not read ignores: abort
 * such a request where it was started (D-Bus Abort) or close the connection. -EINVAL (not
 * an id), -EEXIST (in flight already), -ENOTCONN (the connection failed), -ENOMEM. */
int asyncllm_client_attach_generate(asyncllm_client *c, const char *request_id, asyncllm_output_fn cb,
                                    void *userdata);
/* Queues a control op, as asyncllm_client_call(); cb (may be NULL) gets the reply. */
int asyncllm_client_submit_call(asyncllm_client *c, const char *op, const char *args_json, asyncllm_reply_fn cb,
                                void *userdata, char **ret_id);
/* Queues an abort of request_id; the reply's result is {"aborted": true|false}. */
int asyncllm_client_submit_abort(asyncllm_client *c, const char *request_id, asyncllm_reply_fn cb, void *userdata,
                                 char **ret_id);

#ifdef __cplusplus
}
#endif

#endif
