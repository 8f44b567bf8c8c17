/* SPDX-License-Identifier: MIT */
/* The socket protocol's codec: every op parses with its fields and defaults; every kind of
 * bad line gets its code, its id when readable, and a message naming the field; outputs,
 * results, errors and the hello encode to the JSON of docs/protocol.md (compared as parsed
 * JSON); NUL and control characters round-trip; NaN becomes null. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "protocol.h"

/* Parses a line that must be valid. */
static void parse_ok(const char *line, struct client_message *m) {
        struct protocol_error err;
        int r = protocol_parse(line, strlen(line), m, &err);
        ck_assert_msg(r == 0, "%s: %s: %s", line, err.code, err.message);
        ck_assert_ptr_nonnull(m->root);
        ck_assert_ptr_nonnull(m->id);
}

static struct json_object *json(const char *text) {
        struct json_object *o = json_tokener_parse(text);
        ck_assert_msg(o != NULL, "bad expected JSON in the test: %s", text);
        return o;
}

/* A line must end in exactly one "\n", be the length said, and parse to what is expected. */
static void check_line(const char *line, size_t len, const char *expected) {
        ck_assert_uint_eq(strlen(line), len);
        ck_assert_uint_gt(len, 1);
        ck_assert_int_eq(line[len - 1], '\n');
        ck_assert_ptr_null(memchr(line, '\n', len - 1));

        struct json_tokener *tok = json_tokener_new();
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
        struct json_object *got = json_tokener_parse_ex(tok, line, (int) len);
        ck_assert_msg(json_tokener_get_error(tok) == json_tokener_success, "not JSON: %s", line);
        json_tokener_free(tok);
        struct json_object *want = json(expected);
        ck_assert_msg(json_object_equal(got, want), "got      %s\nexpected %s", line,
                      json_object_to_json_string_ext(want, JSON_C_TO_STRING_PLAIN));
        json_object_put(got);
        json_object_put(want);
}

START_TEST(test_generate_prompt_defaults) {
        struct client_message m;
        parse_ok("{\"op\": \"generate\", \"id\": \"c1\", \"prompt\": \"Hello\"}", &m);
        ck_assert_int_eq(m.op, CLIENT_OP_GENERATE);
        ck_assert_str_eq(m.id, "c1");
        const struct generate_message *g = &m.generate;
        ck_assert_int_eq(g->prompt_kind, PROMPT_TEXT);
        ck_assert_str_eq(g->prompt, "Hello");

        /* vLLM's defaults, but delta on the socket */
        struct sampling_params d;
        sampling_params_init_default(&d);
        d.output_kind = OUTPUT_DELTA;
        ck_assert_mem_eq(&g->params, &d, sizeof(d));
        ck_assert_int_eq(g->params.max_tokens, 16);
        ck_assert_int_eq(g->class.priority, 0);
        ck_assert(!g->class.latency_sensitive); /* best-effort */
        ck_assert_double_eq(g->class.slo, 0);    /* the engine's defaults */
        ck_assert_double_eq(g->class.ttft_slo, 0);

        struct error err;
        ck_assert_int_eq(sampling_params_validate(&g->params, 1000, -1, &err), 0);

        struct request_spec req;
        generate_message_to_spec(g, "7/c1", NULL, &req);
        ck_assert_str_eq(req.id, "7/c1");
        ck_assert_ptr_eq(req.prompt_text, g->prompt);
        ck_assert_ptr_null(req.prompt);
        ck_assert_mem_eq(&req.params, &g->params, sizeof(req.params));
        ck_assert(!req.class.latency_sensitive);
        ck_assert_double_eq(req.class.slo, 0);
        ck_assert_double_eq(req.class.ttft_slo, 0);
        client_message_free(&m);
        ck_assert_ptr_null(m.root);
}
END_TEST

START_TEST(test_generate_all_params) {
        struct client_message m;
        parse_ok("{\"id\": \"g\", \"op\": \"generate\", \"prompt_token_ids\": [1, 2, 2147483647],"
                 " \"priority\": -3, \"latency_sensitive\": true, \"slo\": 2, \"ttft_slo\": 0.5,"
                 " \"params\": {\"n\": 3, \"temperature\": 0, \"top_p\": 0.9, \"top_k\": 40, \"min_p\": 0.05,"
                 " \"presence_penalty\": 0.5, \"frequency_penalty\": -0.5, \"repetition_penalty\": 1.1, \"length_penalty\": 1.0,"
                 " \"seed\": 18446744073709551615, \"stop\": [\"\\n\\n\", \"END\"], \"stop_token_ids\": [2, 3],"
                 " \"include_stop_str_in_output\": true, \"ignore_eos\": true, \"max_tokens\": null,"
                 " \"min_tokens\": 4, \"logprobs\": 5, \"prompt_logprobs\": 0,"
                 " \"logit_bias\": {\"50256\": -100, \"7\": 2.5, \"-1\": 1}, \"allowed_token_ids\": [5, 6, 7],"
                 " \"skip_special_tokens\": false, \"output_kind\": \"final\", \"bad_words\": [\"darn\", \" heck\"],"
                 " \"truncate_prompt_tokens\": -1, \"best_of\": 3}}",
                 &m);
        const struct generate_message *g = &m.generate;
        const struct sampling_params *p = &g->params;
        ck_assert_int_eq(g->prompt_kind, PROMPT_TOKEN_IDS);
        ck_assert_uint_eq(g->n_prompt_token_ids, 3);
        ck_assert_int_eq(g->prompt_token_ids[2], 2147483647);
        ck_assert_int_eq(g->class.priority, -3);
        ck_assert(g->class.latency_sensitive);
        ck_assert_double_eq(g->class.slo, 2.0);
        ck_assert_double_eq(g->class.ttft_slo, 0.5);
        ck_assert_uint_eq(p->n, 3);
        ck_assert_double_eq(p->temperature, 0);
        ck_assert_double_eq(p->top_p, 0.9);
        ck_assert_int_eq(p->top_k, 40);
        ck_assert_double_eq(p->min_p, 0.05);
        ck_assert_double_eq(p->presence_penalty, 0.5);
        ck_assert_double_eq(p->frequency_penalty, -0.5);
        ck_assert_double_eq(p->repetition_penalty, 1.1);
        ck_assert(p->has_seed);
        ck_assert(p->seed == UINT64_MAX);
        ck_assert_uint_eq(p->n_stop, 2);
        ck_assert_str_eq(p->stop[0], "\n\n");
        ck_assert_str_eq(p->stop[1], "END");
        ck_assert_uint_eq(p->n_stop_token_ids, 2);
        ck_assert_int_eq(p->stop_token_ids[1], 3);
        ck_assert(p->include_stop_str_in_output);
        ck_assert(p->ignore_eos);
        ck_assert_int_eq(p->max_tokens, SAMPLING_MAX_TOKENS_NONE);
        ck_assert_int_eq(p->min_tokens, 4);
        ck_assert_int_eq(p->logprobs, 5);
        ck_assert_int_eq(p->prompt_logprobs, 0);
        ck_assert_uint_eq(p->n_logit_bias, 3);
        ck_assert_int_eq(p->logit_bias[0].token, 50256);
        ck_assert_float_eq(p->logit_bias[0].bias, -100.0f);
        ck_assert_int_eq(p->logit_bias[1].token, 7);
        ck_assert_float_eq(p->logit_bias[1].bias, 2.5f);
        ck_assert_int_eq(p->logit_bias[2].token, -1); /* the engine says it is outside the vocabulary */
        ck_assert(p->has_allowed_token_ids);
        ck_assert_uint_eq(p->n_allowed_token_ids, 3);
        ck_assert_int_eq(p->allowed_token_ids[0], 5);
        ck_assert(!p->skip_special_tokens);
        ck_assert_uint_eq(p->n_bad_words, 2);
        ck_assert_str_eq(p->bad_words[1], " heck");
        ck_assert_int_eq(p->truncate_prompt_tokens, SAMPLING_TRUNCATE_TO_CONTEXT);
        ck_assert_uint_eq(p->best_of, 3);
        ck_assert_int_eq(p->output_kind, OUTPUT_FINAL_ONLY);

        struct request_spec req;
        generate_message_to_spec(g, "x", "ignored", &req);
        ck_assert_ptr_eq(req.prompt, g->prompt_token_ids);
        ck_assert_uint_eq(req.n_prompt, 3);
        ck_assert_ptr_null(req.prompt_text);
        ck_assert_int_eq(req.class.priority, -3);
        ck_assert(req.class.latency_sensitive);
        ck_assert_double_eq(req.class.slo, 2.0);
        ck_assert_double_eq(req.class.ttft_slo, 0.5);
        client_message_free(&m);
}
END_TEST

START_TEST(test_generate_nullable_params) {
        struct client_message m;
        /* null is vLLM's None: the default; ints are fine where numbers are wanted */
        parse_ok("{\"op\": \"generate\", \"id\": \"n\", \"prompt\": \"x\", \"params\": {\"seed\": null,"
                 " \"max_tokens\": 32, \"logprobs\": null, \"prompt_logprobs\": null, \"stop\": null,"
                 " \"stop_token_ids\": null, \"logit_bias\": null, \"allowed_token_ids\": null, \"temperature\": 1,"
                 " \"top_p\": 1}, \"slo\": null, \"ttft_slo\": null}", &m);
        const struct sampling_params *p = &m.generate.params;
        ck_assert(!p->has_seed);
        ck_assert_int_eq(p->max_tokens, 32);
        ck_assert_int_eq(p->logprobs, SAMPLING_LOGPROBS_NONE);
        ck_assert_int_eq(p->prompt_logprobs, SAMPLING_LOGPROBS_NONE);
        ck_assert_uint_eq(p->n_stop, 0);
        ck_assert_uint_eq(p->n_logit_bias, 0);
        ck_assert(!p->has_allowed_token_ids);
        ck_assert_double_eq(p->temperature, 1.0);
        client_message_free(&m);

        /* a single stop string; seed 0; params null = defaults */
        parse_ok("{\"op\": \"generate\", \"id\": \"s\", \"prompt\": \"x\", \"params\": {\"stop\": \"\\u00e9t\\u00e9\","
                 " \"seed\": 0}}", &m);
        ck_assert_uint_eq(m.generate.params.n_stop, 1);
        ck_assert_str_eq(m.generate.params.stop[0], "\xc3\xa9t\xc3\xa9");
        ck_assert(m.generate.params.has_seed);
        ck_assert(m.generate.params.seed == 0);
        client_message_free(&m);

        parse_ok("{\"op\": \"generate\", \"id\": \"s\", \"prompt\": \"x\", \"params\": null}", &m);
        ck_assert_int_eq(m.generate.params.output_kind, OUTPUT_DELTA);
        client_message_free(&m);

        /* an empty allowed list is kept as given: validation refuses it with its own message */
        parse_ok("{\"op\": \"generate\", \"id\": \"s\", \"prompt\": \"x\", \"params\": {\"allowed_token_ids\": []}}", &m);
        ck_assert(m.generate.params.has_allowed_token_ids);
        ck_assert_uint_eq(m.generate.params.n_allowed_token_ids, 0);
        struct error err;
        ck_assert_int_eq(sampling_params_validate(&m.generate.params, 100, -1, &err), -EINVAL);
        client_message_free(&m);
}
END_TEST

/* latency_sensitive and is_latency_sensitive, as a boolean or the strings clients send; the
 * SLOs at their bounds, carried to the request for either class. */
START_TEST(test_generate_scheduling_class) {
        static const struct {
                const char *field;
                bool latency_sensitive;
        } spellings[] = {
                { "\"latency_sensitive\": true", true },       { "\"latency_sensitive\": false", false },
                { "\"latency_sensitive\": \"true\"", true },   { "\"latency_sensitive\": \"True\"", true },
                { "\"latency_sensitive\": \"false\"", false }, { "\"latency_sensitive\": \"False\"", false },
                { "\"is_latency_sensitive\": true", true },    { "\"is_latency_sensitive\": false", false },
                { "\"is_latency_sensitive\": \"True\"", true },
                { "\"is_latency_sensitive\": \"false\"", false },
        };
        struct client_message m;
        struct request_spec req;
        char line[256];

        for (size_t i = 0; i < sizeof(spellings) / sizeof(*spellings); i++) {
                snprintf(line, sizeof(line), "{\"op\": \"generate\", \"id\": \"l\", \"prompt\": \"x\", %s}",
                         spellings[i].field);
                parse_ok(line, &m);
                ck_assert_msg(m.generate.class.latency_sensitive == spellings[i].latency_sensitive, "%s", line);
                generate_message_to_spec(&m.generate, "l", NULL, &req);
                ck_assert(req.class.latency_sensitive == spellings[i].latency_sensitive);
                client_message_free(&m);
        }

        /* the bounds: more than 0, at most 3600; integers are numbers */
        parse_ok("{\"op\": \"generate\", \"id\": \"b\", \"prompt\": \"x\", \"latency_sensitive\": true,"
                 " \"slo\": 3600, \"ttft_slo\": 1e-9}", &m);
        ck_assert_double_eq(m.generate.class.slo, 3600);
        ck_assert_double_eq(m.generate.class.ttft_slo, 1e-9);
        generate_message_to_spec(&m.generate, "b", NULL, &req);
        ck_assert_double_eq(req.class.slo, 3600);
        ck_assert_double_eq(req.class.ttft_slo, 1e-9);
        client_message_free(&m);

        /* ttft_slo alone leaves slo to the engine's default */
        parse_ok("{\"op\": \"generate\", \"id\": \"t\", \"prompt\": \"x\", \"is_latency_sensitive\": \"True\","
                 " \"ttft_slo\": 3600.0}", &m);
        ck_assert(m.generate.class.latency_sensitive);
        ck_assert_double_eq(m.generate.class.slo, 0);
        ck_assert_double_eq(m.generate.class.ttft_slo, 3600);
        client_message_free(&m);

        /* best-effort requests may carry SLOs: accepted and passed on, the engine ignores them */
        parse_ok("{\"op\": \"generate\", \"id\": \"e\", \"prompt\": \"x\", \"slo\": 0.25, \"ttft_slo\": 2}", &m);
        generate_message_to_spec(&m.generate, "e", NULL, &req);
        ck_assert(!req.class.latency_sensitive);
        ck_assert_double_eq(req.class.slo, 0.25);
        ck_assert_double_eq(req.class.ttft_slo, 2);
        client_message_free(&m);
}
END_TEST

START_TEST(test_generate_messages) {
        struct client_message m;
        parse_ok("{\"op\": \"generate\", \"id\": \"chat\", \"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
                 " {\"content\": \"Capital of France?\", \"role\": \"user\"}]}", &m);
        const struct generate_message *g = &m.generate;
        ck_assert_int_eq(g->prompt_kind, PROMPT_MESSAGES);
        ck_assert_uint_eq(g->n_messages, 2);
        ck_assert_str_eq(g->messages[0].role, "system");
        ck_assert_str_eq(g->messages[0].content, "Be brief.");
        ck_assert_str_eq(g->messages[1].role, "user");
        ck_assert_str_eq(g->messages[1].content, "Capital of France?");
        struct request_spec req;
        generate_message_to_spec(g, "x", "<rendered>", &req);
        ck_assert_str_eq(req.prompt_text, "<rendered>");
        client_message_free(&m);
}
END_TEST

START_TEST(test_control_ops) {
        struct client_message m;

        parse_ok("{\"op\": \"abort\", \"id\": \"a1\", \"request\": \"c1\"}", &m);
        ck_assert_int_eq(m.op, CLIENT_OP_ABORT);
        ck_assert_uint_eq(m.abort.n, 1);
        ck_assert(!m.abort.list);
        ck_assert_str_eq(m.abort.requests[0], "c1");
        client_message_free(&m);

        /* a list, as AsyncLLM.abort takes */
        parse_ok("{\"op\": \"abort\", \"id\": \"a2\", \"request\": [\"c1\", \"c2\"]}", &m);
        ck_assert_uint_eq(m.abort.n, 2);
        ck_assert(m.abort.list);
        ck_assert_str_eq(m.abort.requests[1], "c2");
        client_message_free(&m);

        parse_ok("{\"op\": \"pause\", \"id\": \"p\"}", &m);
        ck_assert_int_eq(m.op, CLIENT_OP_PAUSE);
        ck_assert_int_eq(m.pause.mode, PAUSE_ABORT);
        ck_assert(m.pause.clear_cache); /* vLLM's default */
        client_message_free(&m);
        parse_ok("{\"op\": \"pause\", \"id\": \"p\", \"mode\": \"keep\", \"clear_cache\": true}", &m);
        ck_assert_int_eq(m.pause.mode, PAUSE_KEEP);
        ck_assert(m.pause.clear_cache);
        client_message_free(&m);
        parse_ok("{\"op\": \"pause\", \"id\": \"p\", \"mode\": \"wait\"}", &m);
        ck_assert_int_eq(m.pause.mode, PAUSE_WAIT);
        client_message_free(&m);

        parse_ok("{\"op\": \"sleep\", \"id\": \"s\"}", &m);
        ck_assert_int_eq(m.op, CLIENT_OP_SLEEP);
        ck_assert_int_eq(m.sleep.level, 1);
        client_message_free(&m);
        parse_ok("{\"op\": \"sleep\", \"id\": \"s\", \"level\": 2}", &m);
        ck_assert_int_eq(m.sleep.level, 2);
        client_message_free(&m);

        parse_ok("{\"op\": \"wake_up\", \"id\": \"w\"}", &m);
        ck_assert_int_eq(m.op, CLIENT_OP_WAKE_UP);
        ck_assert_uint_eq(m.wake_up.tags, 0);
        client_message_free(&m);
        parse_ok("{\"op\": \"wake_up\", \"id\": \"w\", \"tags\": [\"kv_cache\"]}", &m);
        ck_assert_uint_eq(m.wake_up.tags, BACKEND_MEMORY_KV_CACHE);
        client_message_free(&m);
        parse_ok("{\"op\": \"wake_up\", \"id\": \"w\", \"tags\": [\"weights\", \"kv_cache\"]}", &m);
        ck_assert_uint_eq(m.wake_up.tags, BACKEND_MEMORY_WEIGHTS | BACKEND_MEMORY_KV_CACHE);
        client_message_free(&m);

        parse_ok("{\"op\": \"reset_prefix_cache\", \"id\": \"r\", \"preempt\": true}", &m);
        ck_assert_int_eq(m.op, CLIENT_OP_RESET_PREFIX_CACHE);
        ck_assert(m.reset_prefix_cache.preempt);
        client_message_free(&m);

        parse_ok("{\"op\": \"collective_rpc\", \"id\": \"c\", \"method\": \"ping\", \"args\": {\"x\": [1, 2.5, \"y\"]}}",
                 &m);
        ck_assert_int_eq(m.op, CLIENT_OP_COLLECTIVE_RPC);
        ck_assert_str_eq(m.collective_rpc.method, "ping");
        struct json_object *want = json("{\"x\": [1, 2.5, \"y\"]}");
        ck_assert(json_object_equal(m.collective_rpc.args, want));
        json_object_put(want);
        /* the daemon hands a reference of its own to the engine, which outlives the message */
        struct json_object *args = json_object_get(m.collective_rpc.args);
        client_message_free(&m);
        ck_assert_str_eq(json_object_to_json_string_ext(args, JSON_C_TO_STRING_PLAIN), "{\"x\":[1,2.5,\"y\"]}");
        json_object_put(args);
        parse_ok("{\"op\": \"collective_rpc\", \"id\": \"c\", \"method\": \"ping\"}", &m);
        ck_assert_ptr_null(m.collective_rpc.args);
        client_message_free(&m);
        parse_ok("{\"op\": \"collective_rpc\", \"id\": \"c\", \"method\": \"ping\", \"args\": null}", &m);
        ck_assert_ptr_null(m.collective_rpc.args);
        ck_assert(m.collective_rpc.timeout == 0);
        client_message_free(&m);
        /* kwargs is the method's argument; vLLM's empty args beside it say nothing */
        parse_ok("{\"op\": \"collective_rpc\", \"id\": \"c\", \"method\": \"reset_prefix_cache\", \"args\": [], "
                 "\"kwargs\": {\"preempt\": true}, \"timeout\": 2.5}", &m);
        ck_assert_str_eq(json_object_to_json_string_ext(m.collective_rpc.args, JSON_C_TO_STRING_PLAIN), "{\"preempt\":true}");
        ck_assert(m.collective_rpc.timeout == 2.5);
        client_message_free(&m);
        parse_ok("{\"op\": \"reset_prefix_cache\", \"id\": \"r\", \"reset_running_requests\": true}", &m);
        ck_assert(m.reset_prefix_cache.preempt);
        client_message_free(&m);

        parse_ok("{\"op\": \"tokenize\", \"id\": \"t\", \"prompt\": \"a b\"}", &m);
        ck_assert_int_eq(m.op, CLIENT_OP_TOKENIZE);
        ck_assert_int_eq(m.generate.prompt_kind, PROMPT_TEXT);
        ck_assert_str_eq(m.generate.prompt, "a b");
        client_message_free(&m);
        parse_ok("{\"op\": \"tokenize\", \"id\": \"t\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", &m);
        ck_assert_int_eq(m.generate.prompt_kind, PROMPT_MESSAGES);
        ck_assert_uint_eq(m.generate.n_messages, 1);
        ck_assert(m.generate.add_generation_prompt);
        client_message_free(&m);
        parse_ok("{\"op\": \"tokenize\", \"id\": \"t\", \"messages\": [], \"add_generation_prompt\": false}", &m);
        ck_assert(!m.generate.add_generation_prompt);
        client_message_free(&m);
        parse_ok("{\"op\": \"encode\", \"id\": \"e\", \"prompt\": \"a b\"}", &m);
        ck_assert_int_eq(m.op, CLIENT_OP_ENCODE);
        ck_assert(m.generate.encode);
        ck_assert_int_eq(m.generate.pooling.type, POOLING_MODEL_DEFAULT);
        ck_assert(m.generate.pooling.normalize);
        ck_assert_uint_eq(m.generate.pooling.dimensions, 0);
        client_message_free(&m);
        parse_ok("{\"op\": \"encode\", \"id\": \"e\", \"prompt_token_ids\": [1, 2], \"pooling_type\": \"MEAN\", "
                 "\"normalize\": false, \"dimensions\": 8, \"truncate_prompt_tokens\": 1, \"priority\": 3}", &m);
        ck_assert_int_eq(m.generate.pooling.type, POOLING_MEAN);
        ck_assert(!m.generate.pooling.normalize);
        ck_assert_uint_eq(m.generate.pooling.dimensions, 8);
        ck_assert_int_eq(m.generate.params.truncate_prompt_tokens, 1);
        ck_assert_int_eq(m.generate.class.priority, 3);
        client_message_free(&m);
        parse_ok("{\"op\": \"detokenize\", \"id\": \"d\", \"tokens\": [1, 2, 3]}", &m);
        ck_assert_int_eq(m.op, CLIENT_OP_DETOKENIZE);
        ck_assert_uint_eq(m.detokenize.n, 3);
        ck_assert_int_eq(m.detokenize.tokens[2], 3);
        client_message_free(&m);
        parse_ok("{\"op\": \"wait_for_requests_to_drain\", \"id\": \"w\"}", &m);
        ck_assert(m.drain.timeout == PROTOCOL_DRAIN_TIMEOUT_DEFAULT);
        client_message_free(&m);
        parse_ok("{\"op\": \"wait_for_requests_to_drain\", \"id\": \"w\", \"timeout\": 1}", &m);
        ck_assert(m.drain.timeout == 1);
        client_message_free(&m);

        static const struct {
                const char *name;
                enum client_op op;
        } plain[] = {
                { "resume", CLIENT_OP_RESUME },   { "is_paused", CLIENT_OP_IS_PAUSED }, { "is_sleeping", CLIENT_OP_IS_SLEEPING },
                { "health", CLIENT_OP_HEALTH },   { "stats", CLIENT_OP_STATS },         { "model", CLIENT_OP_MODEL },
                { "list", CLIENT_OP_LIST },       { "metrics", CLIENT_OP_METRICS },
                { "get_supported_tasks", CLIENT_OP_GET_SUPPORTED_TASKS },
                { "reset_mm_cache", CLIENT_OP_RESET_MM_CACHE },
                { "reset_encoder_cache", CLIENT_OP_RESET_ENCODER_CACHE },
                { "start_profile", CLIENT_OP_START_PROFILE },
                { "stop_profile", CLIENT_OP_STOP_PROFILE },
        };
        for (size_t i = 0; i < sizeof(plain) / sizeof(*plain); i++) {
                char line[128];
                snprintf(line, sizeof(line), "{\"op\": \"%s\", \"id\": \"op-%zu\"}", plain[i].name, i);
                parse_ok(line, &m);
                ck_assert_int_eq(m.op, plain[i].op);
                ck_assert_str_eq(client_op_name(m.op), plain[i].name);
                client_message_free(&m);
        }
}
END_TEST

START_TEST(test_hello) {
        struct client_message m;
        int32_t v = 0;

        parse_ok("{\"op\": \"hello\", \"id\": \"h\", \"protocol\": [1]}", &m);
        ck_assert_int_eq(m.op, CLIENT_OP_HELLO);
        ck_assert(m.hello.has_versions);
        ck_assert_uint_eq(m.hello.n_versions, 1);
        ck_assert_int_eq(protocol_negotiate(&m, &v), 0);
        ck_assert_int_eq(v, 1);
        client_message_free(&m);

        parse_ok("{\"op\": \"hello\", \"id\": \"h\", \"protocol\": [3, 2, 1]}", &m);
        ck_assert_int_eq(protocol_negotiate(&m, &v), 0);
        ck_assert_int_eq(v, 1);
        client_message_free(&m);

        parse_ok("{\"op\": \"hello\", \"id\": \"h\"}", &m);
        ck_assert(!m.hello.has_versions);
        ck_assert_int_eq(protocol_negotiate(&m, &v), 0);
        ck_assert_int_eq(v, PROTOCOL_VERSION);
        client_message_free(&m);

        parse_ok("{\"op\": \"hello\", \"id\": \"h\", \"protocol\": [2]}", &m);
        ck_assert_int_eq(protocol_negotiate(&m, &v), -EPROTONOSUPPORT);
        client_message_free(&m);
        parse_ok("{\"op\": \"hello\", \"id\": \"h\", \"protocol\": []}", &m);
        ck_assert_int_eq(protocol_negotiate(&m, &v), -EPROTONOSUPPORT);
        client_message_free(&m);
}
END_TEST

START_TEST(test_ops_and_admin) {
        for (int op = 0; op < _CLIENT_OP_MAX; op++) {
                enum client_op back;
                ck_assert_ptr_nonnull(client_op_name(op));
                ck_assert_int_eq(client_op_from_string(client_op_name(op), &back), 0);
                ck_assert_int_eq(back, op);
        }
        ck_assert_ptr_null(client_op_name(_CLIENT_OP_MAX));
        ck_assert(client_op_is_admin(CLIENT_OP_PAUSE));
        ck_assert(client_op_is_admin(CLIENT_OP_RESUME));
        ck_assert(client_op_is_admin(CLIENT_OP_SLEEP));
        ck_assert(client_op_is_admin(CLIENT_OP_WAKE_UP));
        ck_assert(client_op_is_admin(CLIENT_OP_COLLECTIVE_RPC));
        ck_assert(client_op_is_admin(CLIENT_OP_RESET_PREFIX_CACHE));
        ck_assert(!client_op_is_admin(CLIENT_OP_GENERATE));
        ck_assert(!client_op_is_admin(CLIENT_OP_ABORT));
        ck_assert(!client_op_is_admin(CLIENT_OP_IS_PAUSED));
        ck_assert(!client_op_is_admin(CLIENT_OP_HELLO));
        ck_assert(client_op_is_admin(CLIENT_OP_RESET_MM_CACHE));
        ck_assert(client_op_is_admin(CLIENT_OP_RESET_ENCODER_CACHE));
        ck_assert(client_op_is_admin(CLIENT_OP_START_PROFILE));
        ck_assert(client_op_is_admin(CLIENT_OP_STOP_PROFILE));
        ck_assert(!client_op_is_admin(CLIENT_OP_TOKENIZE));
        ck_assert(!client_op_is_admin(CLIENT_OP_DETOKENIZE));
        ck_assert(!client_op_is_admin(CLIENT_OP_GET_SUPPORTED_TASKS));
        ck_assert(!client_op_is_admin(CLIENT_OP_WAIT_FOR_REQUESTS_TO_DRAIN));

        struct client_message zero = { 0 };
        client_message_free(&zero);
        client_message_free(NULL);
}
END_TEST

/* Every kind of bad line: its code, whether its id was read, and words the message must
 * hold (the field it names). */
static const struct bad_line {
        const char *line;
        const char *code;
        const char *id; /* NULL: the answer carries "id": null */
        const char *words;
} bad_lines[] = {
        /* not JSON, or not one object */
        { "", PROTOCOL_INVALID_JSON, NULL, "unexpected end" },
        { "{", PROTOCOL_INVALID_JSON, NULL, "unexpected end" },
        { "{\"op\": \"health\", \"id\": \"h\"}x", PROTOCOL_INVALID_JSON, NULL, "offset 27" },
        { "{\"op\": \"health\", \"id\": \"h\"} {}", PROTOCOL_INVALID_JSON, NULL, "unexpected character at offset 28" },
        { "{}x", PROTOCOL_INVALID_JSON, NULL, "offset 2" },
        { "{\"op\": \"health\", \"id\": \"h\",}", PROTOCOL_INVALID_JSON, NULL, "offset" },
        { "{\"a\": 01}", PROTOCOL_INVALID_JSON, NULL, "offset" },
        { "{\"a\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}", PROTOCOL_INVALID_JSON, NULL,
          "nested deeper than 32" },
        { "{\"a\": \"\xff\"}", PROTOCOL_INVALID_UTF8, NULL, "UTF-8" },
        /* overlong forms and encoded surrogates, which json-c's own check lets through */
        { "{\"op\": \"health\", \"id\": \"\xe0\x81\x81\"}", PROTOCOL_INVALID_UTF8, NULL, "invalid UTF-8 at offset 24" },
        { "{\"op\": \"health\", \"id\": \"h\", \"\xc0\xaf\": 1}", PROTOCOL_INVALID_UTF8, NULL, "offset 29" },
        { "{\"op\": \"health\", \"id\": \"\xed\xa0\x80\"}", PROTOCOL_INVALID_UTF8, NULL, "offset 24" },
        { "[]", PROTOCOL_INVALID_REQUEST, NULL, "must be a JSON object, got array" },
        { "[{\"op\": \"health\", \"id\": \"h\"}]", PROTOCOL_INVALID_REQUEST, NULL, "got array" },
        { "123", PROTOCOL_INVALID_REQUEST, NULL, "got integer" },
        { "\"health\"", PROTOCOL_INVALID_REQUEST, NULL, "got string" },
        { "null", PROTOCOL_INVALID_REQUEST, NULL, "got null" },
        { "true", PROTOCOL_INVALID_REQUEST, NULL, "got boolean" },
        /* id */
        { "{\"op\": \"health\"}", PROTOCOL_INVALID_REQUEST, NULL, "id is missing" },
        { "{\"op\": \"health\", \"id\": \"\"}", PROTOCOL_INVALID_REQUEST, NULL, "id must not be empty" },
        { "{\"op\": \"health\", \"id\": 7}", PROTOCOL_INVALID_REQUEST, NULL, "id must be a string, got integer" },
        { "{\"op\": \"health\", \"id\": null}", PROTOCOL_INVALID_REQUEST, NULL, "id must be a string, got null" },
        { "{\"op\": \"health\", \"id\": [\"a\"]}", PROTOCOL_INVALID_REQUEST, NULL, "id must be a string, got array" },
        { "{\"op\": \"health\", \"id\": \"a\\u0000b\"}", PROTOCOL_INVALID_REQUEST, NULL, "NUL" },
        /* op */
        { "{\"id\": \"x\"}", PROTOCOL_INVALID_REQUEST, "x", "op is missing" },
        { "{\"id\": \"x\", \"op\": 3}", PROTOCOL_INVALID_REQUEST, "x", "op must be a string, got integer" },
        { "{\"id\": \"x\", \"op\": \"frobnicate\"}", PROTOCOL_UNKNOWN_OP, "x", "\"frobnicate\"" },
        { "{\"id\": \"x\", \"op\": \"Health\"}", PROTOCOL_UNKNOWN_OP, "x", "\"Health\"" },
        { "{\"id\": \"x\", \"op\": \"health\\u0000\"}", PROTOCOL_INVALID_REQUEST, "x", "op must not contain NUL" },
        /* unknown fields, anywhere */
        { "{\"op\": \"health\", \"id\": \"x\", \"verbose\": true}", PROTOCOL_INVALID_PARAMS, "x",
          "unknown field \"verbose\" for op health" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"max_tokens\": 3}", PROTOCOL_INVALID_PARAMS, "x",
          "unknown field \"max_tokens\" for op generate" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"temprature\": 0}}",
          PROTOCOL_INVALID_PARAMS, "x", "unknown field \"params.temprature\"" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"length_penalty\": \"long\"}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.length_penalty must be a number" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"truncate_prompt_tokens\": 0}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.truncate_prompt_tokens must be null, -1" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"best_of\": 0}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.best_of must be null or greater than or equal to n" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"bad_words\": \"darn\"}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.bad_words must be an array of strings" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"bad_words\": [\"a\", 3]}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.bad_words[1] must be a string" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"messages\": [{\"role\": \"user\", \"content\": \"a\", \"name\": \"b\"}]}",
          PROTOCOL_INVALID_PARAMS, "x", "unknown field \"messages[0].name\"" },
        { "{\"op\": \"abort\", \"id\": \"x\", \"request\": \"c\", \"all\": true}", PROTOCOL_INVALID_PARAMS, "x",
          "unknown field \"all\" for op abort" },
        /* wrong JSON types, naming the field and the type wanted */
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"top_p\": \"0.9\"}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.top_p must be a number, got string" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"temperature\": true}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.temperature must be a number, got boolean" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"top_k\": 1.5}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.top_k must be an integer, got number" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"top_k\": 2147483648}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.top_k must be an integer in [-2147483648, 2147483647], got 2147483648" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"min_tokens\": -2147483649}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.min_tokens must be an integer in" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"max_tokens\": 99999999999999999999999}}",
          PROTOCOL_INVALID_PARAMS, "x", "the integer 99999999999999999999999 does not fit in 64 bits (at offset" },
        /* json-c would read these as 2^64 - 1 and -2^63 */
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"seed\": 18446744073709551616}}",
          PROTOCOL_INVALID_PARAMS, "x", "the integer 18446744073709551616 does not fit in 64 bits" },
        { "{\"op\": \"collective_rpc\", \"id\": \"x\", \"method\": \"ping\", \"args\": [-9223372036854775809]}",
          PROTOCOL_INVALID_PARAMS, "x", "the integer -9223372036854775809 does not fit in 64 bits" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"max_tokens\": \"16\"}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.max_tokens must be null or an integer, got string" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"logprobs\": true}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.logprobs must be null or an integer, got boolean" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"n\": -1}}", PROTOCOL_INVALID_PARAMS, "x",
          "params.n must be an integer in [0, 4294967295], got -1" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"seed\": -1}}", PROTOCOL_INVALID_PARAMS,
          "x", "params.seed must be null or an integer in [0, 18446744073709551615], got -1" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"seed\": 1.5}}", PROTOCOL_INVALID_PARAMS,
          "x", "params.seed must be null or an integer >= 0, got number" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"ignore_eos\": 1}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.ignore_eos must be a boolean, got integer" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"output_kind\": \"stream\"}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.output_kind must be \"cumulative\", \"delta\" or \"final\", got \"stream\"" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"output_kind\": 1}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.output_kind must be a string, got integer" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": []}", PROTOCOL_INVALID_PARAMS, "x",
          "params must be an object, got array" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"priority\": \"high\"}", PROTOCOL_INVALID_PARAMS, "x",
          "priority must be an integer, got string" },
        /* the scheduling class: latency_sensitive (or is_latency_sensitive) and its SLOs */
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"latency_sensitive\": \"yes\"}",
          PROTOCOL_INVALID_PARAMS, "x",
          "latency_sensitive must be true or false (the strings \"true\", \"True\", \"false\" and \"False\" are "
          "accepted too), got \"yes\"" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"latency_sensitive\": \"TRUE\"}",
          PROTOCOL_INVALID_PARAMS, "x", "latency_sensitive must be true or false" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"latency_sensitive\": \" true\"}",
          PROTOCOL_INVALID_PARAMS, "x", "got \" true\"" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"latency_sensitive\": 1}", PROTOCOL_INVALID_PARAMS,
          "x", "latency_sensitive must be true or false (the strings" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"latency_sensitive\": 1}", PROTOCOL_INVALID_PARAMS,
          "x", "got integer" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"latency_sensitive\": null}",
          PROTOCOL_INVALID_PARAMS, "x", "latency_sensitive must be true or false" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"is_latency_sensitive\": [true]}",
          PROTOCOL_INVALID_PARAMS, "x", "is_latency_sensitive must be true or false (the strings" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"is_latency_sensitive\": \"no\"}",
          PROTOCOL_INVALID_PARAMS, "x", "is_latency_sensitive must be true or false" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"latency_sensitive\": true,"
          " \"is_latency_sensitive\": true}",
          PROTOCOL_INVALID_PARAMS, "x", "latency_sensitive and is_latency_sensitive are the same field: give only one" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"is_latency_sensitive\": \"False\","
          " \"latency_sensitive\": false}",
          PROTOCOL_INVALID_PARAMS, "x", "latency_sensitive and is_latency_sensitive are the same field" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"slo\": {\"tpot\": 0.1}}", PROTOCOL_INVALID_PARAMS,
          "x", "slo must be a number of seconds per output token, got object" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"slo\": \"0.1\"}", PROTOCOL_INVALID_PARAMS, "x",
          "slo must be a number of seconds per output token, got string" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"slo\": true}", PROTOCOL_INVALID_PARAMS, "x",
          "slo must be a number of seconds per output token, got boolean" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"slo\": 0}", PROTOCOL_INVALID_PARAMS, "x",
          "slo must be a number of seconds per output token, more than 0 and at most 3600, got 0" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"slo\": -0.0}", PROTOCOL_INVALID_PARAMS, "x",
          "slo must be a number of seconds per output token, more than 0" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"slo\": -1}", PROTOCOL_INVALID_PARAMS, "x",
          "at most 3600, got -1" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"slo\": 3600.5}", PROTOCOL_INVALID_PARAMS, "x",
          "slo must be a number of seconds per output token, more than 0 and at most 3600, got 3600.5" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"slo\": 1e300}", PROTOCOL_INVALID_PARAMS, "x",
          "got 1e+300" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"slo\": NaN}", PROTOCOL_INVALID_JSON, "x",
          "slo: NaN and Infinity are not JSON numbers" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"slo\": -Infinity}", PROTOCOL_INVALID_JSON, "x",
          "slo: NaN and Infinity are not JSON numbers" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"slo\": 1e999}", PROTOCOL_INVALID_PARAMS, "x",
          "slo: 1e999 is beyond the range of a double" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"ttft_slo\": [1]}", PROTOCOL_INVALID_PARAMS, "x",
          "ttft_slo must be a number of seconds to the first token, got array" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"ttft_slo\": 0}", PROTOCOL_INVALID_PARAMS, "x",
          "ttft_slo must be a number of seconds to the first token, more than 0 and at most 3600, got 0" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"ttft_slo\": -2.5}", PROTOCOL_INVALID_PARAMS, "x",
          "got -2.5" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"ttft_slo\": 7200}", PROTOCOL_INVALID_PARAMS, "x",
          "ttft_slo must be a number of seconds to the first token, more than 0 and at most 3600, got 7200" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"ttft_slo\": Infinity}", PROTOCOL_INVALID_JSON, "x",
          "ttft_slo: NaN and Infinity are not JSON numbers" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"ttft\": 1}", PROTOCOL_INVALID_PARAMS, "x",
          "unknown field \"ttft\" for op generate" },
        /* NaN and Infinity are not JSON; numbers beyond a double neither fit */
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"top_p\": NaN}}", PROTOCOL_INVALID_JSON,
          "x", "top_p: NaN and Infinity" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"top_p\": -Infinity}}",
          PROTOCOL_INVALID_JSON, "x", "top_p" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"temperature\": 1e999}}",
          PROTOCOL_INVALID_PARAMS, "x", "temperature: 1e999 is beyond the range of a double" },
        { "{\"op\": \"collective_rpc\", \"id\": \"x\", \"method\": \"ping\", \"args\": [Infinity]}", PROTOCOL_INVALID_JSON,
          "x", "args" },
        /* an integral float is no integer; a leading zero is no JSON number */
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"max_tokens\": 4e0}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.max_tokens must be null or an integer, got number" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"max_tokens\": 00004}}",
          PROTOCOL_INVALID_JSON, NULL, "number expected" },
        /* prompts */
        { "{\"op\": \"generate\", \"id\": \"x\"}", PROTOCOL_INVALID_PARAMS, "x",
          "one of prompt, prompt_token_ids or messages is required" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"params\": {}}", PROTOCOL_INVALID_PARAMS, "x", "is required" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"prompt_token_ids\": [1]}", PROTOCOL_INVALID_PARAMS,
          "x", "got prompt and prompt_token_ids" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"messages\": [], \"prompt\": \"a\", \"prompt_token_ids\": [1]}",
          PROTOCOL_INVALID_PARAMS, "x", "got prompt, prompt_token_ids and messages" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": 5}", PROTOCOL_INVALID_PARAMS, "x",
          "prompt must be a string, got integer" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": null}", PROTOCOL_INVALID_PARAMS, "x",
          "prompt must be a string, got null" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\\u0000b\"}", PROTOCOL_INVALID_PARAMS, "x",
          "prompt must not contain NUL" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt_token_ids\": \"1 2\"}", PROTOCOL_INVALID_PARAMS, "x",
          "prompt_token_ids must be an array of integers, got string" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt_token_ids\": [1, \"2\"]}", PROTOCOL_INVALID_PARAMS, "x",
          "prompt_token_ids[1] must be an integer, got string" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt_token_ids\": [1, 4294967296]}", PROTOCOL_INVALID_PARAMS, "x",
          "prompt_token_ids[1] must be an integer in" },
        /* messages */
        { "{\"op\": \"generate\", \"id\": \"x\", \"messages\": {\"role\": \"user\"}}", PROTOCOL_INVALID_PARAMS, "x",
          "messages must be an array" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"messages\": [\"hi\"]}", PROTOCOL_INVALID_PARAMS, "x",
          "messages[0] must be an object with \"role\" and \"content\", got string" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\"}]}",
          PROTOCOL_INVALID_PARAMS, "x", "messages[1].content is missing" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"messages\": [{\"content\": \"a\"}]}", PROTOCOL_INVALID_PARAMS, "x",
          "messages[0].role is missing" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"messages\": [{\"role\": 1, \"content\": \"a\"}]}", PROTOCOL_INVALID_PARAMS,
          "x", "messages[0].role must be a string, got integer" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\"}]}]}",
          PROTOCOL_INVALID_PARAMS, "x", "messages[0].content must be a string, got array" },
        /* stop */
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"stop\": 1}}", PROTOCOL_INVALID_PARAMS,
          "x", "params.stop must be a string or an array of strings, got integer" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"stop\": [\"a\", 2]}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.stop[1] must be a string, got integer" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"stop\": \"\\u0000\"}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.stop must not contain NUL" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"stop_token_ids\": [1, null]}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.stop_token_ids[1] must be an integer, got null" },
        /* logit_bias */
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"logit_bias\": {\"abc\": 1}}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.logit_bias: key \"abc\" is not a token id" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"logit_bias\": {\"12a\": 1}}}",
          PROTOCOL_INVALID_PARAMS, "x", "key \"12a\"" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"logit_bias\": {\"\": 1}}}",
          PROTOCOL_INVALID_PARAMS, "x", "key \"\"" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"logit_bias\": {\" 1\": 1}}}",
          PROTOCOL_INVALID_PARAMS, "x", "key \" 1\"" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"logit_bias\": {\"2147483648\": 1}}}",
          PROTOCOL_INVALID_PARAMS, "x", "key \"2147483648\"" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"logit_bias\": {\"-\": 1}}}",
          PROTOCOL_INVALID_PARAMS, "x", "key \"-\"" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"logit_bias\": {\"5\": \"1\"}}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.logit_bias[\"5\"] must be a number, got string" },
        { "{\"op\": \"generate\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {\"logit_bias\": [[5, 1]]}}",
          PROTOCOL_INVALID_PARAMS, "x", "params.logit_bias must be an object" },
        /* control ops */
        { "{\"op\": \"abort\", \"id\": \"x\"}", PROTOCOL_INVALID_PARAMS, "x", "request is required" },
        { "{\"op\": \"abort\", \"id\": \"x\", \"request\": 1}", PROTOCOL_INVALID_PARAMS, "x",
          "request must be a string, got integer" },
        { "{\"op\": \"abort\", \"id\": \"x\", \"request\": []}", PROTOCOL_INVALID_PARAMS, "x",
          "request must be an id or a non-empty list of ids" },
        { "{\"op\": \"abort\", \"id\": \"x\", \"request\": [\"a\", 2]}", PROTOCOL_INVALID_PARAMS, "x",
          "request[1] must be a string, got integer" },
        { "{\"op\": \"pause\", \"id\": \"x\", \"mode\": \"later\"}", PROTOCOL_INVALID_PARAMS, "x",
          "mode must be \"abort\", \"wait\" or \"keep\", got \"later\"" },
        { "{\"op\": \"pause\", \"id\": \"x\", \"clear_cache\": \"no\"}", PROTOCOL_INVALID_PARAMS, "x",
          "clear_cache must be a boolean, got string" },
        { "{\"op\": \"sleep\", \"id\": \"x\", \"level\": 3}", PROTOCOL_INVALID_PARAMS, "x", "level must be 1" },
        { "{\"op\": \"sleep\", \"id\": \"x\", \"level\": \"1\"}", PROTOCOL_INVALID_PARAMS, "x",
          "level must be an integer, got string" },
        { "{\"op\": \"wake_up\", \"id\": \"x\", \"tags\": \"weights\"}", PROTOCOL_INVALID_PARAMS, "x",
          "tags must be an array" },
        { "{\"op\": \"wake_up\", \"id\": \"x\", \"tags\": [\"weights\", \"gpu\"]}", PROTOCOL_INVALID_PARAMS, "x",
          "tags[1] must be \"weights\" or \"kv_cache\", got \"gpu\"" },
        { "{\"op\": \"wake_up\", \"id\": \"x\", \"tags\": []}", PROTOCOL_INVALID_PARAMS, "x", "leave it out" },
        { "{\"op\": \"reset_prefix_cache\", \"id\": \"x\", \"preempt\": null}", PROTOCOL_INVALID_PARAMS, "x",
          "preempt must be a boolean, got null" },
        { "{\"op\": \"collective_rpc\", \"id\": \"x\", \"args\": {}}", PROTOCOL_INVALID_PARAMS, "x", "method is required" },
        { "{\"op\": \"collective_rpc\", \"id\": \"x\", \"method\": [\"ping\"]}", PROTOCOL_INVALID_PARAMS, "x",
          "method must be a string, got array" },
        { "{\"op\": \"collective_rpc\", \"id\": \"x\", \"method\": \"m\", \"args\": [1], \"kwargs\": {\"a\": 1}}",
          PROTOCOL_INVALID_PARAMS, "x", "give args or kwargs, not both" },
        { "{\"op\": \"collective_rpc\", \"id\": \"x\", \"method\": \"m\", \"kwargs\": [1]}", PROTOCOL_INVALID_PARAMS,
          "x", "kwargs must be an object of named arguments, got array" },
        { "{\"op\": \"collective_rpc\", \"id\": \"x\", \"method\": \"m\", \"timeout\": 0}", PROTOCOL_INVALID_PARAMS,
          "x", "timeout must be seconds, more than 0 and at most 86400, got 0" },
        { "{\"op\": \"collective_rpc\", \"id\": \"x\", \"method\": \"m\", \"timeout\": \"1\"}", PROTOCOL_INVALID_PARAMS,
          "x", "timeout must be a number, got string" },
        { "{\"op\": \"wait_for_requests_to_drain\", \"id\": \"x\", \"timeout\": 1e6}", PROTOCOL_INVALID_PARAMS, "x",
          "at most 86400, got 1e+06" },
        { "{\"op\": \"wait_for_requests_to_drain\", \"id\": \"x\", \"drain_timeout\": 1}", PROTOCOL_INVALID_PARAMS,
          "x", "unknown field \"drain_timeout\"" },
        { "{\"op\": \"tokenize\", \"id\": \"x\"}", PROTOCOL_INVALID_PARAMS, "x", "prompt or messages is required" },
        { "{\"op\": \"tokenize\", \"id\": \"x\", \"prompt\": \"a\", \"messages\": []}", PROTOCOL_INVALID_PARAMS, "x",
          "give only one of prompt and messages" },
        { "{\"op\": \"tokenize\", \"id\": \"x\", \"prompt_token_ids\": [1]}", PROTOCOL_INVALID_PARAMS, "x",
          "unknown field \"prompt_token_ids\" for op tokenize" },
        { "{\"op\": \"encode\", \"id\": \"x\"}", PROTOCOL_INVALID_PARAMS, "x", "prompt" },
        { "{\"op\": \"encode\", \"id\": \"x\", \"prompt\": \"a\", \"params\": {}}", PROTOCOL_INVALID_PARAMS, "x",
          "encode takes no params" },
        { "{\"op\": \"encode\", \"id\": \"x\", \"prompt\": \"a\", \"pooling_type\": \"max\"}", PROTOCOL_INVALID_PARAMS,
          "x", "pooling_type must be \"last\", \"mean\" or \"cls\", got \"max\"" },
        { "{\"op\": \"encode\", \"id\": \"x\", \"prompt\": \"a\", \"pooling_type\": 2}", PROTOCOL_INVALID_PARAMS, "x",
          "pooling_type must be a string" },
        { "{\"op\": \"encode\", \"id\": \"x\", \"prompt\": \"a\", \"dimensions\": 0}", PROTOCOL_INVALID_PARAMS, "x",
          "dimensions must be at least 1, got 0" },
        { "{\"op\": \"encode\", \"id\": \"x\", \"prompt\": \"a\", \"normalize\": 1}", PROTOCOL_INVALID_PARAMS, "x",
          "normalize must be a boolean" },
        { "{\"op\": \"encode\", \"id\": \"x\", \"prompt\": \"a\", \"truncate_prompt_tokens\": 0}", PROTOCOL_INVALID_PARAMS,
          "x", "truncate_prompt_tokens must be null, -1" },
        { "{\"op\": \"encode\", \"id\": \"x\", \"prompt\": \"a\", \"max_tokens\": 2}", PROTOCOL_INVALID_PARAMS, "x",
          "unknown field \"max_tokens\" for op encode" },
        { "{\"op\": \"detokenize\", \"id\": \"x\"}", PROTOCOL_INVALID_PARAMS, "x", "tokens is required" },
        { "{\"op\": \"detokenize\", \"id\": \"x\", \"tokens\": [1, \"2\"]}", PROTOCOL_INVALID_PARAMS, "x",
          "tokens[1] must be an integer, got string" },
        { "{\"op\": \"hello\", \"id\": \"x\", \"protocol\": 1}", PROTOCOL_INVALID_PARAMS, "x",
          "protocol must be an array of integers, got integer" },
        { "{\"op\": \"hello\", \"id\": \"x\", \"protocol\": [\"1\"]}", PROTOCOL_INVALID_PARAMS, "x",
          "protocol[0] must be an integer, got string" },
};

START_TEST(test_bad_line) {
        const struct bad_line *b = &bad_lines[_i];
        struct client_message m;
        struct protocol_error err;

        int r = protocol_parse(b->line, strlen(b->line), &m, &err);
        ck_assert_msg(r == -EINVAL, "%s: parsed (%d)", b->line, r);
        ck_assert_ptr_null(m.root);
        ck_assert_msg(strcmp(err.code, b->code) == 0, "%s: code %s, expected %s (%s)", b->line, err.code, b->code,
                      err.message);
        ck_assert_msg(strstr(err.message, b->words) != NULL, "%s: message \"%s\" lacks \"%s\"", b->line, err.message,
                      b->words);
        if (b->id) {
                ck_assert_msg(err.has_id, "%s: id not read", b->line);
                ck_assert_str_eq(err.id, b->id);
        } else
                ck_assert_msg(!err.has_id, "%s: id read", b->line);

        /* and the answer is a valid line */
        char *line;
        size_t len;
        ck_assert_int_eq(protocol_parse_error_line(&err, &line, &len), 0);
        struct json_object *o = json_tokener_parse(line), *id, *e, *code;
        ck_assert_ptr_nonnull(o);
        ck_assert(json_object_object_get_ex(o, "id", &id));
        if (b->id)
                ck_assert_str_eq(json_object_get_string(id), b->id);
        else
                ck_assert_ptr_null(id);
        ck_assert(json_object_object_get_ex(o, "error", &e));
        ck_assert(json_object_object_get_ex(e, "code", &code));
        ck_assert_str_eq(json_object_get_string(code), b->code);
        json_object_put(o);
        free(line);
}
END_TEST

START_TEST(test_bad_id_lengths) {
        struct client_message m;
        struct protocol_error err;
        char line[600], id[300];

        /* 256 bytes is fine, 257 is not */
        memset(id, 'i', 256);
        id[256] = 0;
        snprintf(line, sizeof(line), "{\"op\": \"health\", \"id\": \"%s\"}", id);
        parse_ok(line, &m);
        ck_assert_uint_eq(strlen(m.id), 256);
        client_message_free(&m);

        id[256] = 'i';
        id[257] = 0;
        snprintf(line, sizeof(line), "{\"op\": \"health\", \"id\": \"%s\"}", id);
        ck_assert_int_eq(protocol_parse(line, strlen(line), &m, &err), -EINVAL);
        ck_assert_str_eq(err.code, PROTOCOL_INVALID_REQUEST);
        ck_assert(!err.has_id);
        ck_assert_msg(strstr(err.message, "id is 257 bytes long; at most 256") != NULL, "%s", err.message);

        /* bytes, not characters: 86 euro signs are 258 bytes */
        strcpy(line, "{\"op\": \"health\", \"id\": \"");
        for (int i = 0; i < 86; i++)
                strcat(line, "\xe2\x82\xac");
        strcat(line, "\"}");
        ck_assert_int_eq(protocol_parse(line, strlen(line), &m, &err), -EINVAL);
        ck_assert_msg(strstr(err.message, "258 bytes") != NULL, "%s", err.message);

        /* an escaped lone surrogate becomes U+FFFD: still valid UTF-8 to echo */
        const char *s = "{\"op\": \"health\", \"id\": \"\\ud800\"}";
        parse_ok(s, &m);
        ck_assert_str_eq(m.id, "\xef\xbf\xbd");
        client_message_free(&m);
}
END_TEST

START_TEST(test_raw_bytes) {
        struct client_message m;
        struct protocol_error err;

        /* a NUL byte is never JSON */
        const char nul[] = "{\"op\": \"health\", \"id\": \"a\0\"}";
        ck_assert_int_eq(protocol_parse(nul, sizeof(nul) - 1, &m, &err), -EINVAL);
        ck_assert_str_eq(err.code, PROTOCOL_INVALID_JSON);
        ck_assert_msg(strstr(err.message, "NUL byte at offset 25") != NULL, "%s", err.message);

        /* the length given counts, not a NUL terminator: the same bytes, cut */
        const char *line = "{\"op\": \"health\", \"id\": \"h\"}garbage";
        parse_ok("{\"op\": \"health\", \"id\": \"h\"}", &m);
        client_message_free(&m);
        ck_assert_int_eq(protocol_parse(line, 27, &m, &err), 0);
        ck_assert_str_eq(m.id, "h");
        client_message_free(&m);
        ck_assert_int_eq(protocol_parse(line, strlen(line), &m, &err), -EINVAL);

        /* trailing whitespace and a CR are fine */
        parse_ok("  {\"op\": \"health\", \"id\": \"h\"} \t\r", &m);
        client_message_free(&m);

        /* a long unknown key is quoted cut, at a character boundary */
        char big[512];
        strcpy(big, "{\"op\": \"health\", \"id\": \"h\", \"");
        for (int i = 0; i < 30; i++)
                strcat(big, "\xe2\x82\xac");
        strcat(big, "\": 1}");
        ck_assert_int_eq(protocol_parse(big, strlen(big), &m, &err), -EINVAL);
        /* 21 whole euro signs fit in 64 bytes */
        ck_assert_msg(strstr(err.message, "unknown field \"\xe2\x82\xac") != NULL, "%s", err.message);
        ck_assert_msg(strstr(err.message, "\xe2\x82\xac...\" for op health") != NULL, "%s", err.message);
        ck_assert_uint_eq(strlen(err.message), strlen("unknown field \"...\" for op health") + 21 * 3);
}
END_TEST

/* A request_output as the engine hands it out, built by hand. */
static struct sample_result sample(int32_t token, float logprob, int32_t rank, size_t n_top, const int32_t *top_tokens,
                                   const float *top_logprobs) {
        struct sample_result s = { .token = token, .logprob = logprob, .rank = rank, .n_top = n_top };
        if (n_top) {
                s.top = calloc(n_top, sizeof(*s.top));
                for (size_t i = 0; i < n_top; i++)
                        s.top[i] = (struct token_logprob) { top_tokens[i], top_logprobs[i] };
        }
        return s;
}

static struct request_output *new_output(uint32_t n_outputs) {
        struct request_output *o = calloc(1, sizeof(*o));
        o->request_id = strdup("1/c1");
        o->outputs = calloc(n_outputs, sizeof(*o->outputs));
        o->n_outputs = n_outputs;
        for (uint32_t i = 0; i < n_outputs; i++) {
                o->outputs[i].index = i;
                o->outputs[i].cumulative_logprob = NAN;
                o->outputs[i].stop_reason_token = -1;
        }
        return o;
}

static void set_text(struct completion_output *c, const char *text, size_t len) {
        c->text = malloc(len + 1);
        memcpy(c->text, text, len);
        c->text[len] = 0;
        c->text_len = len;
}

static void set_tokens(struct completion_output *c, const int32_t *ids, uint32_t n) {
        c->token_ids = malloc(n * sizeof(*ids));
        memcpy(c->token_ids, ids, n * sizeof(*ids));
        c->n_token_ids = n;
}

static void check_output(const struct request_output *o, const struct output_line_options *opts, const char *expected) {
        char *line;
        size_t len;
        ck_assert_int_eq(protocol_output_line("c1", o, opts, &line, &len), 0);
        check_line(line, len, expected);
        free(line);
}

START_TEST(test_output_streaming) {
        /* the protocol's own example */
        struct request_output *o = new_output(1);
        set_text(&o->outputs[0], " Paris", 6);
        set_tokens(&o->outputs[0], (const int32_t[]) { 7042 }, 1);
        struct output_line_options opts = { .prompt_tokens = 5, .completion_tokens = 1, .logprobs = -1 };
        check_output(o, &opts,
                     "{\"id\": \"c1\", \"outputs\": [{\"index\": 0, \"text\": \" Paris\", \"token_ids\": [7042],"
                     " \"cumulative_logprob\": null, \"logprobs\": null, \"finish_reason\": null,"
                     " \"stop_reason\": null}], \"finished\": false, \"num_cached_tokens\": 0}");

        /* and exactly that text: no spaces, no escaped slashes */
        char *line;
        size_t len;
        free(o->outputs[0].text);
        set_text(&o->outputs[0], "a/b", 3);
        ck_assert_int_eq(protocol_output_line("c1", o, &opts, &line, &len), 0);
        ck_assert_str_eq(line, "{\"id\":\"c1\",\"outputs\":[{\"index\":0,\"text\":\"a/b\",\"token_ids\":[7042],"
                               "\"cumulative_logprob\":null,\"logprobs\":null,\"finish_reason\":null,"
                               "\"stop_reason\":null}],\"finished\":false,\"num_cached_tokens\":0}\n");
        free(line);
        request_output_free(o);

        /* a delta with nothing new in any completion still is a valid output */
        o = new_output(0);
        check_output(o, &opts, "{\"id\": \"c1\", \"outputs\": [], \"finished\": false, \"num_cached_tokens\": 0}");
        request_output_free(o);
}
END_TEST

START_TEST(test_output_finished) {
        struct request_output *o = new_output(2);
        o->finished = true;
        o->num_cached_tokens = 32;
        o->metrics = (struct request_metrics) {
                .arrival_time = 100.0, .scheduled_time = 100.25, .first_token_time = 100.5,
                .last_token_time = 101.5, .finished_time = 101.75,
        };
        struct completion_output *a = &o->outputs[0], *b = &o->outputs[1];
        set_text(a, " Paris.", 7);
        set_tokens(a, (const int32_t[]) { 7042, 30 }, 2);
        a->finish_reason = FINISH_STOP;
        a->stop_reason_text = strdup(".");
        a->cumulative_logprob = -1.25;
        set_text(b, "", 0);
        set_tokens(b, (const int32_t[]) { 2 }, 1);
        b->finish_reason = FINISH_STOP;
        b->stop_reason_token = 2;

        struct output_line_options opts = {
                .realtime_offset = 1700000000.0, .prompt_tokens = 40, .completion_tokens = 9, .logprobs = -1,
        };
        check_output(o, &opts,
                     "{\"id\": \"c1\", \"outputs\": ["
                     "{\"index\": 0, \"text\": \" Paris.\", \"token_ids\": [7042, 30], \"cumulative_logprob\": -1.25,"
                     " \"logprobs\": null, \"finish_reason\": \"stop\", \"stop_reason\": \".\"},"
                     "{\"index\": 1, \"text\": \"\", \"token_ids\": [2], \"cumulative_logprob\": null,"
                     " \"logprobs\": null, \"finish_reason\": \"stop\", \"stop_reason\": 2}],"
                     " \"finished\": true, \"num_cached_tokens\": 32,"
                     " \"metrics\": {\"arrival_time\": 1700000100.0, \"first_scheduled_time\": 1700000100.25,"
                     " \"first_token_time\": 1700000100.5, \"last_token_time\": 1700000101.5,"
                     " \"finished_time\": 1700000101.75},"
                     " \"usage\": {\"prompt_tokens\": 40, \"completion_tokens\": 9}}");

        /* an abort before the first step: the times that did not happen are null */
        a->finish_reason = FINISH_ABORT;
        free(a->stop_reason_text);
        a->stop_reason_text = NULL;
        b->finish_reason = FINISH_LENGTH;
        b->stop_reason_token = -1;
        o->metrics = (struct request_metrics) { .arrival_time = 5.0, .finished_time = 6.0 };
        opts.realtime_offset = 0;
        check_output(o, &opts,
                     "{\"id\": \"c1\", \"outputs\": ["
                     "{\"index\": 0, \"text\": \" Paris.\", \"token_ids\": [7042, 30], \"cumulative_logprob\": -1.25,"
                     " \"logprobs\": null, \"finish_reason\": \"abort\", \"stop_reason\": null},"
                     "{\"index\": 1, \"text\": \"\", \"token_ids\": [2], \"cumulative_logprob\": null,"
                     " \"logprobs\": null, \"finish_reason\": \"length\", \"stop_reason\": null}],"
                     " \"finished\": true, \"num_cached_tokens\": 32,"
                     " \"metrics\": {\"arrival_time\": 5.0, \"first_scheduled_time\": null, \"first_token_time\": null,"
                     " \"last_token_time\": null, \"finished_time\": 6.0},"
                     " \"usage\": {\"prompt_tokens\": 40, \"completion_tokens\": 9}}");
        ck_assert_uint_eq(protocol_output_tokens(o), 3);
        request_output_free(o);
}
END_TEST

START_TEST(test_output_logprobs) {
        struct request_output *o = new_output(1);
        struct completion_output *c = &o->outputs[0];
        set_text(c, "ab", 2);
        set_tokens(c, (const int32_t[]) { 10, 11 }, 2);
        c->cumulative_logprob = -2.75;
        c->logprobs = calloc(2, sizeof(*c->logprobs));
        /* logprobs = 2: the chosen token among the top 2, then one that is not (appended) */
        c->logprobs[0] = sample(10, -0.25f, 1, 2, (const int32_t[]) { 10, 12 }, (const float[]) { -0.25f, -1.5f });
        c->logprobs[1] = sample(11, -2.5f, 3, 3, (const int32_t[]) { 13, 14, 11 }, (const float[]) { -0.5f, -1.0f, -2.5f });

        struct output_line_options opts = { .logprobs = 2, .prompt_logprobs = -1 };
        check_output(o, &opts,
                     "{\"id\": \"c1\", \"outputs\": [{\"index\": 0, \"text\": \"ab\", \"token_ids\": [10, 11],"
                     " \"cumulative_logprob\": -2.75, \"logprobs\": ["
                     "[{\"token_id\": 10, \"logprob\": -0.25, \"rank\": 1}, {\"token_id\": 10, \"logprob\": -0.25},"
                     " {\"token_id\": 12, \"logprob\": -1.5}],"
                     "[{\"token_id\": 11, \"logprob\": -2.5, \"rank\": 3}, {\"token_id\": 13, \"logprob\": -0.5},"
                     " {\"token_id\": 14, \"logprob\": -1.0}]],"
                     " \"finish_reason\": null, \"stop_reason\": null}], \"finished\": false, \"num_cached_tokens\": 0}");

        /* not told how many: every entry the sampler gave */
        opts.logprobs = -1;
        check_output(o, &opts,
                     "{\"id\": \"c1\", \"outputs\": [{\"index\": 0, \"text\": \"ab\", \"token_ids\": [10, 11],"
                     " \"cumulative_logprob\": -2.75, \"logprobs\": ["
                     "[{\"token_id\": 10, \"logprob\": -0.25, \"rank\": 1}, {\"token_id\": 10, \"logprob\": -0.25},"
                     " {\"token_id\": 12, \"logprob\": -1.5}],"
                     "[{\"token_id\": 11, \"logprob\": -2.5, \"rank\": 3}, {\"token_id\": 13, \"logprob\": -0.5},"
                     " {\"token_id\": 14, \"logprob\": -1.0}, {\"token_id\": 11, \"logprob\": -2.5}]],"
                     " \"finish_reason\": null, \"stop_reason\": null}], \"finished\": false, \"num_cached_tokens\": 0}");

        /* logprobs = 0: the chosen token alone; a -inf logprob is null */
        opts.logprobs = 0;
        sample_result_clear(&c->logprobs[1]);
        c->logprobs[1] = sample(11, -INFINITY, 7, 1, (const int32_t[]) { 11 }, (const float[]) { -INFINITY });
        c->cumulative_logprob = -INFINITY;
        check_output(o, &opts,
                     "{\"id\": \"c1\", \"outputs\": [{\"index\": 0, \"text\": \"ab\", \"token_ids\": [10, 11],"
                     " \"cumulative_logprob\": null, \"logprobs\": ["
                     "[{\"token_id\": 10, \"logprob\": -0.25, \"rank\": 1}],"
                     "[{\"token_id\": 11, \"logprob\": null, \"rank\": 7}]],"
                     " \"finish_reason\": null, \"stop_reason\": null}], \"finished\": false, \"num_cached_tokens\": 0}");
        request_output_free(o);
}
END_TEST

START_TEST(test_output_prompt_logprobs) {
        struct request_output *o = new_output(1);
        set_text(&o->outputs[0], "x", 1);
        set_tokens(&o->outputs[0], (const int32_t[]) { 5 }, 1);
        o->n_prompt = 3;
        o->prompt_logprobs = calloc(3, sizeof(*o->prompt_logprobs));
        o->prompt_logprobs[0].token = -1; /* nothing rates the first token */
        o->prompt_logprobs[1] = sample(20, -3.0f, 4, 2, (const int32_t[]) { 21, 20 }, (const float[]) { -0.125f, -3.0f });
        o->prompt_logprobs[2] = sample(22, -0.5f, 1, 1, (const int32_t[]) { 22 }, (const float[]) { -0.5f });
        struct output_line_options opts = { .logprobs = -1, .prompt_logprobs = 1 };
        check_output(o, &opts,
                     "{\"id\": \"c1\", \"outputs\": [{\"index\": 0, \"text\": \"x\", \"token_ids\": [5],"
                     " \"cumulative_logprob\": null, \"logprobs\": null, \"finish_reason\": null, \"stop_reason\": null}],"
                     " \"finished\": false, \"num_cached_tokens\": 0, \"prompt_logprobs\": [null,"
                     " [{\"token_id\": 20, \"logprob\": -3.0, \"rank\": 4}, {\"token_id\": 21, \"logprob\": -0.125}],"
                     " [{\"token_id\": 22, \"logprob\": -0.5, \"rank\": 1}, {\"token_id\": 22, \"logprob\": -0.5}]]}");
        request_output_free(o);
}
END_TEST

/* Text goes out as a JSON string whatever its bytes, and reads back the same. */
START_TEST(test_text_round_trip) {
        char all[128];
        for (int i = 0; i < 128; i++)
                all[i] = (char) i; /* NUL, every control character, quote, backslash, slash, DEL */
        struct request_output *o = new_output(1);
        set_text(&o->outputs[0], all, sizeof(all));
        set_tokens(&o->outputs[0], (const int32_t[]) { 1 }, 1);
        struct output_line_options opts = { .logprobs = -1 };

        char *line;
        size_t len;
        ck_assert_int_eq(protocol_output_line("c1", o, &opts, &line, &len), 0);
        ck_assert_uint_eq(strlen(line), len);                 /* no raw NUL */
        ck_assert_ptr_null(memchr(line, '\n', len - 1));     /* no raw newline inside */
        for (size_t i = 0; i < len - 1; i++)
                ck_assert_msg((unsigned char) line[i] >= 0x20, "raw control byte 0x%02x at %zu", line[i], i);
        struct json_tokener *tok = json_tokener_new();
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
        struct json_object *back = json_tokener_parse_ex(tok, line, (int) len), *outputs, *text;
        ck_assert_int_eq(json_tokener_get_error(tok), json_tokener_success);
        json_tokener_free(tok);
        ck_assert(json_object_object_get_ex(back, "outputs", &outputs));
        ck_assert(json_object_object_get_ex(json_object_array_get_idx(outputs, 0), "text", &text));
        ck_assert_int_eq(json_object_get_string_len(text), sizeof(all));
        ck_assert_mem_eq(json_object_get_string(text), all, sizeof(all));
        json_object_put(back);
        free(line);

        /* UTF-8 passes through as it is; ill-formed bytes become U+FFFD */
        free(o->outputs[0].text);
        set_text(&o->outputs[0], "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 \xff\xc3", 12);
        ck_assert_int_eq(protocol_output_line("c1", o, &opts, &line, &len), 0);
        ck_assert_msg(strstr(line, "\"text\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 \xef\xbf\xbd\xef\xbf\xbd\"") != NULL,
                      "%s", line);
        free(line);
        request_output_free(o);

        /* the same through an error message */
        ck_assert_int_eq(protocol_error_line("e", PROTOCOL_INTERNAL_ERROR, "a\x01\"b\"\n\xff", &line, &len), 0);
        check_line(line, len, "{\"id\": \"e\", \"error\": {\"code\": \"internal_error\","
                              " \"message\": \"a\\u0001\\\"b\\\"\\n\\ufffd\"}}");
        free(line);
}
END_TEST

START_TEST(test_numbers) {
        /* fewest digits that read back, always as a number with a fraction */
        struct request_output *o = new_output(1);
        set_text(&o->outputs[0], "", 0);
        set_tokens(&o->outputs[0], (const int32_t[]) { 1 }, 1);
        o->outputs[0].cumulative_logprob = 0.1;
        struct output_line_options opts = { .logprobs = -1 };
        char *line;
        size_t len;
        ck_assert_int_eq(protocol_output_line("c1", o, &opts, &line, &len), 0);
        ck_assert_msg(strstr(line, "\"cumulative_logprob\":0.1,") != NULL, "%s", line);
        free(line);
        o->outputs[0].cumulative_logprob = -3;
        ck_assert_int_eq(protocol_output_line("c1", o, &opts, &line, &len), 0);
        ck_assert_msg(strstr(line, "\"cumulative_logprob\":-3.0,") != NULL, "%s", line);
        free(line);
        o->outputs[0].cumulative_logprob = NAN;
        ck_assert_int_eq(protocol_output_line("c1", o, &opts, &line, &len), 0);
        ck_assert_msg(strstr(line, "\"cumulative_logprob\":null,") != NULL, "%s", line);
        free(line);
        /* a float logprob in float's digits */
        o->outputs[0].logprobs = calloc(1, sizeof(struct sample_result));
        o->outputs[0].logprobs[0] = sample(1, 0.1f, 1, 0, NULL, NULL);
        ck_assert_int_eq(protocol_output_line("c1", o, &opts, &line, &len), 0);
        ck_assert_msg(strstr(line, "\"logprob\":0.1,") != NULL, "%s", line);
        free(line);
        /* times keep their sub-millisecond part */
        o->finished = true;
        o->metrics.arrival_time = 12345.000125;
        opts.realtime_offset = 1712345678.0;
        ck_assert_int_eq(protocol_output_line("c1", o, &opts, &line, &len), 0);
        ck_assert_msg(strstr(line, "\"arrival_time\":1712358023.0001") != NULL, "%s", line);
        free(line);
        request_output_free(o);
}
END_TEST

START_TEST(test_result_error_hello) {
        char *line;
        size_t len;

        struct json_object *result = json("{\"aborted\": true}");
        ck_assert_int_eq(protocol_result_line("a1", result, &line, &len), 0);
        check_line(line, len, "{\"id\": \"a1\", \"result\": {\"aborted\": true}}");
        free(line);
        json_object_put(result); /* borrowed: still ours */
        ck_assert_int_eq(protocol_result_line("a1", NULL, &line, &len), 0);
        check_line(line, len, "{\"id\": \"a1\", \"result\": null}");
        free(line);

        ck_assert_int_eq(protocol_error_line("c1", PROTOCOL_INVALID_PARAMS, "top_p must be in (0, 1], got 2", &line, &len), 0);
        check_line(line, len, "{\"id\": \"c1\", \"error\": {\"code\": \"invalid_params\","
                              " \"message\": \"top_p must be in (0, 1], got 2\"}}");
        free(line);
        ck_assert_int_eq(protocol_error_line(NULL, PROTOCOL_INVALID_JSON, "unexpected end", &line, &len), 0);
        check_line(line, len, "{\"id\": null, \"error\": {\"code\": \"invalid_json\", \"message\": \"unexpected end\"}}");
        free(line);

        /* the engine's refusal for now, with its hint; one it could not work out is 0 */
        ck_assert_int_eq(protocol_overloaded_line("c2", "no room to meet the slo", 1.5, &line, &len), 0);
        check_line(line, len, "{\"id\": \"c2\", \"error\": {\"code\": \"overloaded\","
                              " \"message\": \"no room to meet the slo\", \"retry_after\": 1.5}}");
        free(line);
        ck_assert_int_eq(protocol_overloaded_line("c2", "busy", 0, &line, &len), 0);
        check_line(line, len, "{\"id\": \"c2\", \"error\": {\"code\": \"overloaded\", \"message\": \"busy\","
                              " \"retry_after\": 0.0}}");
        free(line);
        ck_assert_int_eq(protocol_overloaded_line("c2", "busy", NAN, &line, &len), 0);
        check_line(line, len, "{\"id\": \"c2\", \"error\": {\"code\": \"overloaded\", \"message\": \"busy\","
                              " \"retry_after\": 0.0}}");
        free(line);
        ck_assert_int_eq(protocol_overloaded_line("c2", "busy", -3, &line, &len), 0);
        check_line(line, len, "{\"id\": \"c2\", \"error\": {\"code\": \"overloaded\", \"message\": \"busy\","
                              " \"retry_after\": 0.0}}");
        free(line);
        ck_assert_int_eq(protocol_overloaded_line("c2", "busy", INFINITY, &line, &len), 0);
        check_line(line, len, "{\"id\": \"c2\", \"error\": {\"code\": \"overloaded\", \"message\": \"busy\","
                              " \"retry_after\": null}}");
        free(line);
        /* the other codes carry no retry_after */
        ck_assert_int_eq(protocol_error_line("c3", PROTOCOL_ENGINE_DEAD, "gone", &line, &len), 0);
        ck_assert_ptr_null(strstr(line, "retry_after"));
        free(line);

        ck_assert_int_eq(protocol_hello_line("0.1.0", "SmolLM2-135M-Instruct", &line, &len), 0);
        check_line(line, len, "{\"hello\": {\"protocol\": 1, \"server\": \"asyncllmd\", \"version\": \"0.1.0\","
                              " \"model\": \"SmolLM2-135M-Instruct\"}}");
        free(line);

        /* a parsed collective_rpc's args echo back as standard JSON ("1." and "1E2" as json-c read them would not) */
        struct client_message m;
        parse_ok("{\"op\": \"collective_rpc\", \"id\": \"r\", \"method\": \"ping\", \"args\": [1., 1E2, -0.0]}", &m);
        ck_assert_int_eq(protocol_result_line(m.id, m.collective_rpc.args, &line, &len), 0);
        ck_assert_str_eq(line, "{\"id\":\"r\",\"result\":[1.0,100.0,-0.0]}\n");
        free(line);
        client_message_free(&m);

        /* the error of a line that had an id answers with it */
        struct protocol_error err = { 0 };
        const char *bad = "{\"op\": \"nope\", \"id\": \"q/1\"}";
        ck_assert_int_eq(protocol_parse(bad, strlen(bad), &m, &err), -EINVAL);
        ck_assert_int_eq(protocol_parse_error_line(&err, &line, &len), 0);
        check_line(line, len, "{\"id\": \"q/1\", \"error\": {\"code\": \"unknown_op\", \"message\": \"unknown op \\\"nope\\\"\"}}");
        free(line);
}
END_TEST

START_TEST(test_error_set_cuts_at_character) {
        struct protocol_error e = { 0 };
        char text[PROTOCOL_ERROR_MESSAGE_MAX + 8];
        /* "ab" then euro signs: the message buffer ends inside one */
        text[0] = 'a';
        text[1] = 'b';
        size_t n = 2;
        while (n + 3 < sizeof(text)) {
                memcpy(text + n, "\xe2\x82\xac", 3);
                n += 3;
        }
        text[n] = 0;
        ck_assert_int_eq(protocol_error_set(&e, PROTOCOL_INTERNAL_ERROR, "%s", text), -EINVAL);
        size_t len = strlen(e.message);
        ck_assert_uint_le(len, PROTOCOL_ERROR_MESSAGE_MAX - 1);
        ck_assert_uint_ge(len, PROTOCOL_ERROR_MESSAGE_MAX - 3);
        ck_assert_uint_eq((len - 2) % 3, 0); /* whole euro signs only */
        ck_assert_str_eq(e.code, PROTOCOL_INTERNAL_ERROR);
}
END_TEST

int main(void) {
        Suite *s = suite_create("protocol");
        TCase *tc = tcase_create("parse");
        tcase_add_test(tc, test_generate_prompt_defaults);
        tcase_add_test(tc, test_generate_all_params);
        tcase_add_test(tc, test_generate_nullable_params);
        tcase_add_test(tc, test_generate_scheduling_class);
        tcase_add_test(tc, test_generate_messages);
        tcase_add_test(tc, test_control_ops);
        tcase_add_test(tc, test_hello);
        tcase_add_test(tc, test_ops_and_admin);
        tcase_add_loop_test(tc, test_bad_line, 0, (int) (sizeof(bad_lines) / sizeof(*bad_lines)));
        tcase_add_test(tc, test_bad_id_lengths);
        tcase_add_test(tc, test_raw_bytes);
        tcase_add_test(tc, test_error_set_cuts_at_character);
        suite_add_tcase(s, tc);
        tc = tcase_create("encode");
        tcase_add_test(tc, test_output_streaming);
        tcase_add_test(tc, test_output_finished);
        tcase_add_test(tc, test_output_logprobs);
        tcase_add_test(tc, test_output_prompt_logprobs);
        tcase_add_test(tc, test_text_round_trip);
        tcase_add_test(tc, test_numbers);
        tcase_add_test(tc, test_result_error_hello);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
