/* SPDX-License-Identifier: MIT */
#pragma once

/* The socket protocol, version 1 (docs/protocol.md), as the daemon speaks it: client lines
 * parsed into messages (protocol-request.c), daemon lines encoded from engine outputs,
 * command results and errors (protocol-output.c). Pure functions: no I/O, no logging, no
 * engine calls, so that the fuzzer and the tests drive them directly.
 *
 * Parsing is strict: every field is typed, unknown fields are errors, and an error names the
 * field and what it must be. Value ranges of sampling parameters are left to
 * request_spec_validate(), which AsyncLLM runs on submission; this layer checks only
 * what JSON typing requires (integers in int32 range, a seed in uint64 range, known enum
 * strings) and the ranges nobody else checks with a message (sleep level, slo and ttft_slo).
 *
 * Every encoder returns a malloc'ed, NUL-terminated line that ends in "\n" (*ret_len
 * counts the "\n", not the NUL), serialized by json-c without pretty-printing and without
 * escaping "/". Strings that come from the engine or the daemon (text, stop strings, error
 * messages, the model name) are written as valid UTF-8 whatever their bytes: ill-formed
 * parts become U+FFFD, NUL and control characters are escaped (\u0000). Non-finite numbers
 * (NaN, infinities), which JSON cannot carry, are written as null. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "async-llm.h"
#include "chat-template.h"
#include "engine-thread.h"
#include "error.h"
#include "pooling.h"
#include "request-output.h"
#include "sampling-params.h"

#define PROTOCOL_VERSION 1
#define PROTOCOL_SERVER_NAME "asyncllmd"
/* A message's id: 1 to this many bytes. */
#define PROTOCOL_ID_MAX 256
/* JSON nesting a client line may use, the message object included; json-c's default, set
 * explicitly. generate nests 3 deep; collective_rpc args get the rest. */
#define PROTOCOL_MAX_DEPTH 32
#define PROTOCOL_ERROR_MESSAGE_MAX ERROR_MESSAGE_MAX

/* Error codes, exactly as docs/protocol.md lists them. */
#define PROTOCOL_INVALID_JSON "invalid_json"
#define PROTOCOL_INVALID_UTF8 "invalid_utf8"
#define PROTOCOL_LINE_TOO_LONG "line_too_long"
#define PROTOCOL_INVALID_REQUEST "invalid_request"
#define PROTOCOL_UNKNOWN_OP "unknown_op"
#define PROTOCOL_INVALID_PARAMS "invalid_params"
#define PROTOCOL_DUPLICATE_ID "duplicate_id"
#define PROTOCOL_TOO_MANY_REQUESTS "too_many_requests"
#define PROTOCOL_PERMISSION_DENIED "permission_denied"
#define PROTOCOL_UNSUPPORTED_PROTOCOL "unsupported_protocol"
#define PROTOCOL_ENGINE_DEAD "engine_dead"
#define PROTOCOL_SHUTTING_DOWN "shutting_down"
#define PROTOCOL_NOT_FOUND "not_found"
#define PROTOCOL_INTERNAL_ERROR "internal_error"
#define PROTOCOL_OVERLOADED "overloaded"
#define PROTOCOL_TIMED_OUT "timed_out"

/* The longest slo or ttft_slo a request may ask for, in seconds (the engine's limit). */
#define PROTOCOL_SLO_MAX 3600
/* The longest wait_for_requests_to_drain or collective_rpc timeout, in seconds: a day. */
#define PROTOCOL_TIMEOUT_MAX 86400
/* wait_for_requests_to_drain's default timeout, as vLLM's drain_timeout. */
#define PROTOCOL_DRAIN_TIMEOUT_DEFAULT 300

enum client_op {
        CLIENT_OP_GENERATE,
        CLIENT_OP_ENCODE,
        CLIENT_OP_ABORT,
        CLIENT_OP_PAUSE,
        CLIENT_OP_RESUME,
        CLIENT_OP_IS_PAUSED,
        CLIENT_OP_SLEEP,
        CLIENT_OP_WAKE_UP,
        CLIENT_OP_IS_SLEEPING,
        CLIENT_OP_RESET_PREFIX_CACHE,
        CLIENT_OP_COLLECTIVE_RPC,
        CLIENT_OP_HEALTH,
        CLIENT_OP_STATS,
        CLIENT_OP_MODEL,
        CLIENT_OP_LIST,
        CLIENT_OP_METRICS,
        CLIENT_OP_TOKENIZE,
        CLIENT_OP_DETOKENIZE,
        CLIENT_OP_GET_SUPPORTED_TASKS,
        CLIENT_OP_WAIT_FOR_REQUESTS_TO_DRAIN,
        CLIENT_OP_RESET_MM_CACHE,
        CLIENT_OP_RESET_ENCODER_CACHE,
        CLIENT_OP_START_PROFILE,
        CLIENT_OP_STOP_PROFILE,
        CLIENT_OP_HELLO,
        _CLIENT_OP_MAX,
};

/* The op's name on the wire ("generate", "wake_up", ...); NULL when out of range. */
const char *client_op_name(enum client_op op);
int client_op_from_string(const char *s, enum client_op *ret);
/* pause, resume, sleep, wake_up, collective_rpc, reset_prefix_cache, reset_mm_cache,
 * reset_encoder_cache, start_profile and stop_profile: root and the admin group only.
 * Everything else is for the service group. */
bool client_op_is_admin(enum client_op op);

enum prompt_kind {
        PROMPT_TEXT,      /* "prompt" */
        PROMPT_TOKEN_IDS, /* "prompt_token_ids" */
        PROMPT_MESSAGES,  /* "messages", to render with the chat template */
};

/* generate's; encode's (its prompt, class and pooling); and tokenize's prompt fields (prompt
 * or messages) with add_generation_prompt. */
struct generate_message {
        enum prompt_kind prompt_kind;
        const char *prompt;             /* PROMPT_TEXT; no NUL inside */
        int32_t *prompt_token_ids;      /* PROMPT_TOKEN_IDS: (n_prompt_token_ids), ranges unchecked */
        uint32_t n_prompt_token_ids;
        struct chat_message *messages;  /* PROMPT_MESSAGES: (n_messages), roles unchecked */
        size_t n_messages;
        /* messages: the rendering ends with the assistant's turn opened. Always for generate;
         * tokenize's option, true unless given false. */
        bool add_generation_prompt;

        /* vLLM's defaults, but output_kind OUTPUT_DELTA (the socket's default). Its arrays
         * point into the storage below; unvalidated (sampling_params_validate() does that). */
        struct sampling_params params;
        /* Priority 0 and best-effort unless given. slo and ttft_slo are in
         * (0, PROTOCOL_SLO_MAX], or 0 for the engine's default; they are carried for
         * best-effort requests too, where they do nothing. */
        struct request_class class;

        /* encode: one pooled vector instead of generated tokens. The pooling type defaults to
         * the model's (POOLING_MODEL_DEFAULT), normalize to true. */
        bool encode;
        struct pooling_params pooling;

        /* Owned storage behind params; private to protocol-request.c. */
        const char **stop_storage;
        const char **bad_words_storage;
        int32_t *stop_token_ids_storage;
        struct logit_bias *logit_bias_storage;
        int32_t *allowed_token_ids_storage;
};

/* A parsed client line. Every string points into root, the parsed JSON, which the message
 * holds: they live as long as the message. Arrays are owned by the message. Free it with
 * client_message_free(). */
struct client_message {
        enum client_op op;
        const char *id; /* 1 to PROTOCOL_ID_MAX bytes, valid UTF-8, no NUL */
        union {
                struct generate_message generate; /* generate and tokenize */
                struct {
                        int32_t *tokens; /* (n) owned, ranges unchecked */
                        size_t n;
                } detokenize;
                struct {
                        double timeout; /* seconds, (0, PROTOCOL_TIMEOUT_MAX]; default 300 */
                } drain;
                struct {
                        /* the ids to abort (no NUL), as AsyncLLM.abort takes them: one
                         * string (list false, n 1) or a list of them; owned */
                        const char **requests;
                        size_t n;
                        bool list;
                } abort;
                struct {
                        enum pause_mode mode; /* default PAUSE_ABORT */
                        bool clear_cache;
                } pause;
                struct {
                        int level; /* 1 or 2; default 1 */
                } sleep;
                struct {
                        unsigned tags; /* enum backend_memory bits; 0 = not given: everything */
                } wake_up;
                struct {
                        bool preempt;
                } reset_prefix_cache;
                struct {
                        const char *method;
                        /* Any JSON, or NULL for null or absent; NaN/Infinity are refused.
                         * Borrowed: async_llm_collective_rpc() takes its argument over, so
                         * pass json_object_get(args). */
                        struct json_object *args;
                        /* seconds to wait for the workers' answer, (0, PROTOCOL_TIMEOUT_MAX];
                         * 0: as long as it takes */
                        double timeout;
                } collective_rpc;
                struct {
                        bool has_versions;  /* false: no "protocol" given, i.e. [1] */
                        int32_t *versions;  /* (n_versions) as the client listed them */
                        size_t n_versions;
                } hello;
        };
        struct json_object *root;
};

/* Why a line was refused: a code of docs/protocol.md and a message naming the field. The id
 * is there when the line's id could be read (answer with it, else with "id": null). */
struct protocol_error {
        const char *code; /* one of the PROTOCOL_* codes above */
        char message[PROTOCOL_ERROR_MESSAGE_MAX];
        bool has_id;
        char id[PROTOCOL_ID_MAX + 1];
};

/* Formats the message (truncated to fit, at a UTF-8 character boundary) and sets the code,
 * leaving the id as it is. Returns -EINVAL, so that a failing path can return it. */
int protocol_error_set(struct protocol_error *e, const char *code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Parses one client line, without its "\n": len bytes, not NUL-terminated necessarily. The
 * caller has checked the length already. The UTF-8 is checked again, by the standard's
 * rules (json-c's own check admits overlong forms), and raw NUL bytes are refused, so that
 * every string of the message is valid UTF-8 (escapes included: a lone surrogate becomes
 * U+FFFD) and strings other than collective_rpc args hold no NUL.
 * Returns 0 and fills *ret, or a negative errno (-EINVAL for a refused line, -ENOMEM) with
 * *ret zeroed and *err filled (internal_error for -ENOMEM). */
int protocol_parse(const char *line, size_t len, struct client_message *ret, struct protocol_error *err);

/* Frees what the message owns and zeroes it; safe on a zeroed message. */
void client_message_free(struct client_message *m);

/* The version to speak with a client that sent this hello: 0 and *ret, or
 * -EPROTONOSUPPORT when it lists none the daemon speaks. */
int protocol_negotiate(const struct client_message *hello, int32_t *ret);

/* A JSON string of len bytes of s (NULL: ""), valid UTF-8 whatever the bytes (ill-formed parts
 * become U+FFFD); NULL when out of memory. */
struct json_object *protocol_json_text(const char *s, size_t len);
/* floats as a JSON array of numbers, each written with 9 significant digits, which give the
 * float back exactly (null for one not finite). One object however long the vector: its
 * elements are written when the array is serialized, never made one by one. NULL when out of
 * memory. */
struct json_object *protocol_json_float_array(const float *values, uint32_t n);

/* The request to submit for a generate message. prompt_text is what to use for a
 * PROMPT_MESSAGES prompt (the rendered chat; chat_render()), ignored otherwise. The spec
 * borrows from g. */
void generate_message_to_spec(const struct generate_message *g, const char *request_id, const char *prompt_text,
                              struct request_spec *ret);

/* What an output line needs beyond the output itself. */
struct output_line_options {
        /* CLOCK_REALTIME - CLOCK_MONOTONIC in seconds: metrics are written as Unix times. */
        double realtime_offset;
        /* usage.prompt_tokens: the prompt's length in tokens (request_output.n_prompt is set
         * only with prompt_logprobs). */
        uint32_t prompt_tokens;
        /* usage.completion_tokens: every token the request's completions generated. A delta
         * output holds only the new ones (sum protocol_output_tokens() over every output
         * taken); cumulative and final outputs hold them all. */
        uint64_t completion_tokens;
        /* encode: outputs is {"data": [the pooled vector]} (vLLM's PoolingOutput) */
        bool encode;
        /* The request's params.logprobs and params.prompt_logprobs: how many top entries
         * follow the chosen token. The sampler appends the chosen token to the top N when it
         * is not among them; it is written first already, so that entry is dropped. Negative:
         * write every entry the sampler gave. */
        int32_t logprobs;
        int32_t prompt_logprobs;
};

/* The tokens of o summed over its completions. */
uint64_t protocol_output_tokens(const struct request_output *o);

/* {"id", "outputs": [{"index", "text", "token_ids", "cumulative_logprob", "logprobs",
 * "finish_reason", "stop_reason"}], "finished", "num_cached_tokens"} plus
 * "prompt_logprobs" when o has them and, on the finished output, "metrics" and "usage".
 * id is the client's id. NULL when out of memory. */
struct json_object *protocol_output_json(const char *id, const struct request_output *o,
                                         const struct output_line_options *opts);
int protocol_output_line(const char *id, const struct request_output *o, const struct output_line_options *opts,
                         char **ret, size_t *ret_len);

/* {"id", "result": result}; result is borrowed (NULL writes null). */
int protocol_result_line(const char *id, struct json_object *result, char **ret, size_t *ret_len);
/* {"id", "error": {"code", "message"}}; id NULL writes "id": null. */
int protocol_error_line(const char *id, const char *code, const char *message, char **ret, size_t *ret_len);
/* {"id", "error": {"code": "overloaded", "message", "retry_after"}}: the engine refused the
 * request for now; a retry after retry_after seconds may succeed. */
int protocol_overloaded_line(const char *id, const char *message, double retry_after, char **ret, size_t *ret_len);
/* The error line for a refused client line: with its id when it could be read. */
int protocol_parse_error_line(const struct protocol_error *e, char **ret, size_t *ret_len);
/* {"hello": {"protocol": PROTOCOL_VERSION, "server": "asyncllmd", "version", "model"}}. */
int protocol_hello_line(const char *version, const char *model, char **ret, size_t *ret_len);
/* Any object as a line. */
int protocol_json_line(struct json_object *obj, char **ret, size_t *ret_len);
