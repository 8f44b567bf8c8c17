/* SPDX-License-Identifier: MIT */
/* Fuzzes the socket protocol's codec with a client line: any byte string must give either a
 * message or an error, never a crash, a leak or an out-of-bounds read. What the daemon then
 * writes must be one line of strict JSON in valid UTF-8: the error line, with the id exactly
 * when one was read; a collective_rpc's args echoed in a result line, unchanged; an output
 * line whose text is the input's bytes, which read back the same when they are UTF-8, and
 * one whose logprobs and times are the input's bytes, written as numbers or null.
 * Built with libFuzzer, or with fuzz-main.c to replay the committed corpus as a regression
 * test. */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol.h"
#include "unicode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink; /* keeps the reads below from being optimized away */

static void fail(const char *what, const char *line) {
        fprintf(stderr, "fuzz-protocol: %s: %s\n", what, line ? line : "(null)");
        abort();
}

static bool valid_utf8(const char *s, size_t len) {
        size_t n;
        for (size_t i = 0; i < len; i += n)
                if (utf8_next((const uint8_t *) s + i, len - i, NULL, &n) != UTF8_VALID)
                        return false;
        return true;
}

/* The line is one line of strict JSON in valid UTF-8; returns it parsed. */
static struct json_object *check_line(const char *line, size_t len) {
        if (len == 0 || strlen(line) != len || line[len - 1] != '\n' || memchr(line, '\n', len - 1))
                fail("not one line", line);
        if (!valid_utf8(line, len))
                fail("not UTF-8", line);
        struct json_tokener *tok = json_tokener_new_ex(PROTOCOL_MAX_DEPTH + 2);
        if (!tok)
                abort();
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
        struct json_object *o = json_tokener_parse_ex(tok, line, (int) len);
        if (json_tokener_get_error(tok) != json_tokener_success || !json_object_is_type(o, json_type_object))
                fail("not a JSON object", line);
        json_tokener_free(tok);
        return o;
}

static void check_error(const struct protocol_error *e) {
        char *line;
        size_t len;
        struct json_object *id, *error, *code;

        if (!e->code || !valid_utf8(e->message, strlen(e->message)))
                fail("bad error", e->message);
        if (protocol_parse_error_line(e, &line, &len) < 0)
                return;
        struct json_object *o = check_line(line, len);
        if (!json_object_object_get_ex(o, "id", &id) || (e->has_id ? !json_object_is_type(id, json_type_string) ||
                                                                             strcmp(json_object_get_string(id), e->id) != 0 :
                                                                     id != NULL))
                fail("wrong id", line);
        if (!json_object_object_get_ex(o, "error", &error) || !json_object_object_get_ex(error, "code", &code) ||
            strcmp(json_object_get_string(code), e->code) != 0)
                fail("wrong code", line);
        json_object_put(o);
        free(line);
}

static void touch_generate(const struct generate_message *g) {
        const struct sampling_params *p = &g->params;
        uint64_t sum = g->n_prompt_token_ids + g->n_messages + (uint64_t) g->class.priority;
        struct error err;

        if (g->prompt)
                sum += strlen(g->prompt);
        for (uint32_t i = 0; i < g->n_prompt_token_ids; i++)
                sum += (uint32_t) g->prompt_token_ids[i];
        for (size_t i = 0; i < g->n_messages; i++)
                sum += strlen(g->messages[i].role) + strlen(g->messages[i].content);
        for (size_t i = 0; i < p->n_stop; i++)
                sum += strlen(p->stop[i]);
        for (size_t i = 0; i < p->n_stop_token_ids; i++)
                sum += (uint32_t) p->stop_token_ids[i];
        for (size_t i = 0; i < p->n_allowed_token_ids; i++)
                sum += (uint32_t) p->allowed_token_ids[i];
        for (size_t i = 0; i < p->n_logit_bias; i++)
                sum += (uint32_t) p->logit_bias[i].token;
        sink = sum;
        /* what the engine runs on it next */
        sink += (uint64_t) sampling_params_validate(p, 49152, 20, &err);
}

/* args in a result line read back equal: nothing json-c accepts is echoed as non-JSON. */
static void check_echo(const char *id, struct json_object *args) {
        char *line;
        size_t len;
        struct json_object *result;

        if (protocol_result_line(id, args, &line, &len) < 0)
                return;
        struct json_object *o = check_line(line, len);
        if (!json_object_object_get_ex(o, "result", &result) || !json_object_equal(result, args))
                fail("args changed", line);
        json_object_put(o);
        free(line);
}

/* The input's bytes as a completion's text, NULs and invalid UTF-8 included. */
static void check_text(const uint8_t *data, size_t size) {
        struct completion_output c = {
                .text = (char *) data, .text_len = size, .cumulative_logprob = (double) size / 3 - 1,
                .finish_reason = FINISH_STOP, .stop_reason_text = size ? (char *) "x" : NULL, .stop_reason_token = -1,
        };
        struct request_output o = { .outputs = &c, .n_outputs = 1, .finished = true };
        struct output_line_options opts = { .realtime_offset = 1.5e9, .prompt_tokens = 1, .logprobs = -1 };
        struct json_object *outputs, *text;
        char *line;
        size_t len;

        if (protocol_output_line("fuzz", &o, &opts, &line, &len) < 0)
                return;
        struct json_object *back = check_line(line, len);
        if (!json_object_object_get_ex(back, "outputs", &outputs) ||
            !json_object_object_get_ex(json_object_array_get_idx(outputs, 0), "text", &text))
                fail("no text", line);
        if (valid_utf8((const char *) data, size) &&
            ((size_t) json_object_get_string_len(text) != size || memcmp(json_object_get_string(text), data, size) != 0))
                fail("text changed", line);
        json_object_put(back);
        free(line);
}

/* The input's bytes as logprobs (floats) and times (doubles): every value, NaN, infinities
 * and subnormals included, is written as a JSON number or null. */
static void check_numbers(const uint8_t *data, size_t size) {
        struct token_logprob top[8];
        struct sample_result samples[4] = { 0 };
        int32_t ids[4] = { 0, 1, 2, 3 };
        size_t n_floats = size / sizeof(float) < 8 ? size / sizeof(float) : 8;
        double times[5] = { 0 };
        char *line;
        size_t len;

        for (size_t i = 0; i < n_floats; i++) {
                float f;
                memcpy(&f, data + i * sizeof(f), sizeof(f));
                top[i] = (struct token_logprob) { (int32_t) i, f };
        }
        for (size_t i = 0; i < 4; i++)
                samples[i] = (struct sample_result) {
                        .token = (int32_t) i, .logprob = n_floats > i ? top[i].logprob : 0, .rank = 1,
                        .top = top, .n_top = n_floats,
                };
        for (size_t i = 0; i < 5 && (i + 1) * sizeof(double) <= size; i++)
                memcpy(&times[i], data + i * sizeof(double), sizeof(double));
        struct completion_output c = {
                .text = (char *) "", .token_ids = ids, .n_token_ids = 4, .cumulative_logprob = times[0],
                .logprobs = samples, .stop_reason_token = size > 0 ? data[0] : -1, .finish_reason = FINISH_LENGTH,
        };
        struct request_output o = {
                .outputs = &c, .n_outputs = 1, .finished = true, .n_prompt = 4, .prompt_logprobs = samples,
                .metrics = { times[0], times[1], times[2], times[3], times[4] },
        };
        struct output_line_options opts = {
                .realtime_offset = times[1], .prompt_tokens = 4, .completion_tokens = 4,
                .logprobs = size > 1 ? (int8_t) data[1] : -1, .prompt_logprobs = size > 2 ? (int8_t) data[2] : -1,
        };
        if (protocol_output_line("fuzz", &o, &opts, &line, &len) < 0)
                return;
        json_object_put(check_line(line, len));
        free(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct client_message m;
        struct protocol_error e;

        /* The daemon's line reader never hands over more than max-line-bytes. */
        if (size > (1u << 20))
                return 0;
        if (protocol_parse((const char *) data, size, &m, &e) < 0)
                check_error(&e);
        else {
                if (!m.id || strlen(m.id) == 0 || strlen(m.id) > PROTOCOL_ID_MAX || !client_op_name(m.op))
                        fail("bad message", m.id);
                switch (m.op) {
                case CLIENT_OP_GENERATE:
                        touch_generate(&m.generate);
                        break;
                case CLIENT_OP_ABORT:
                        for (size_t i = 0; i < m.abort.n; i++)
                                sink += strlen(m.abort.requests[i]);
                        break;
                case CLIENT_OP_COLLECTIVE_RPC:
                        sink = strlen(m.collective_rpc.method);
                        check_echo(m.id, m.collective_rpc.args);
                        break;
                case CLIENT_OP_HELLO: {
                        int32_t v;
                        sink = (uint64_t) protocol_negotiate(&m, &v);
                        break;
                }
                default:
                        break;
                }
                client_message_free(&m);
        }
        check_text(data, size);
        check_numbers(data, size);
        return 0;
}
