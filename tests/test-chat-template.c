/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat-template.h"
#include "jinja.h"
#include "test-fixtures.h"
#include "tokenizer-test-util.h"
#include "tokenizer.h"

#define DEFAULT_SYSTEM "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"

static void check_render(const struct chat_message *msgs, size_t n, bool gen, const char *want) {
        const struct tokenizer *tk = require_tokenizer();
        struct error err = {};
        char *out;

        ck_assert_msg(chat_render(tk, msgs, n, gen, &out, &err) == 0, "chat_render: %s", err.message);
        ck_assert_msg(strcmp(out, want) == 0, "rendered:\n%s\nexpected:\n%s", out, want);
        free(out);
}

START_TEST(test_render_default_system) {
        check_render((const struct chat_message[]) { { "user", "Hi" } }, 1, true,
                     DEFAULT_SYSTEM "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
        check_render((const struct chat_message[]) { { "user", "Hi" } }, 1, false,
                     DEFAULT_SYSTEM "<|im_start|>user\nHi<|im_end|>\n");
}
END_TEST

START_TEST(test_render_own_system) {
        check_render((const struct chat_message[]) { { "system", "Be brief." }, { "user", "2+2?" } }, 2, true,
                     "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
                     "<|im_start|>assistant\n");
}
END_TEST

START_TEST(test_render_multi_turn) {
        check_render((const struct chat_message[]) {
                             { "user", "What is the capital of France?" },
                             { "assistant", "Paris." },
                             { "user", "And of Italy?\nAnswer in one word." },
                     },
                     3, true,
                     DEFAULT_SYSTEM "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                                    "<|im_start|>assistant\nParis.<|im_end|>\n"
                                    "<|im_start|>user\nAnd of Italy?\nAnswer in one word.<|im_end|>\n"
                                    "<|im_start|>assistant\n");
        /* A system message later on does not stop the default. */
        check_render((const struct chat_message[]) { { "user", "a" }, { "system", "b" } }, 2, false,
                     DEFAULT_SYSTEM "<|im_start|>user\na<|im_end|>\n<|im_start|>system\nb<|im_end|>\n");
        /* Empty content and no messages at all, as the template would have it. */
        check_render((const struct chat_message[]) { { "user", "" } }, 1, false,
                     DEFAULT_SYSTEM "<|im_start|>user\n<|im_end|>\n");
        check_render(NULL, 0, true, "<|im_start|>assistant\n");
        check_render(NULL, 0, false, "");
}
END_TEST

START_TEST(test_render_errors) {
        const struct tokenizer *tk = require_tokenizer();
        struct error err = {};
        char *out = NULL;

        ck_assert_int_eq(chat_render(tk, (const struct chat_message[]) { { "user", "a" }, { "tool", "b" } }, 2, true,
                                     &out, &err),
                         -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "message 1"));
        ck_assert_ptr_nonnull(strstr(err.message, "\"tool\""));
        ck_assert_ptr_null(out);
        ck_assert_int_eq(chat_render(tk, (const struct chat_message[]) { { "User", "a" } }, 1, true, &out, &err),
                         -EINVAL);
        ck_assert_int_eq(chat_render(tk, (const struct chat_message[]) { { NULL, "a" } }, 1, true, &out, &err),
                         -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "role"));
        ck_assert_int_eq(chat_render(tk, (const struct chat_message[]) { { "user", NULL } }, 1, true, &out, &err),
                         -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "content"));
}
END_TEST

/* The fixture's clock: date_string was pinned to "09 Mar 2025" in llama.cpp's renderings. */
static time_t fixture_now(void) {
        struct tm tm = { .tm_year = 2025 - 1900, .tm_mon = 2, .tm_mday = 9, .tm_hour = 12 };
        return timegm(&tm);
}

static char *read_template(const char *fixture_path) {
        const char *dir = getenv("ASYNCLLM_FIXTURES"), *prefix = "tests/fixtures/";
        char path[4096];
        ck_assert(strncmp(fixture_path, prefix, strlen(prefix)) == 0);
        snprintf(path, sizeof(path), "%s/%s", dir && *dir ? dir : "tests/fixtures", fixture_path + strlen(prefix));
        FILE *f = fopen(path, "re");
        ck_assert_msg(f, "cannot open %s", path);
        char *text = calloc(1, 1 << 20);
        ck_assert_ptr_nonnull(text);
        size_t n = fread(text, 1, (1 << 20) - 1, f);
        ck_assert(!ferror(f) && n < (1 << 20) - 1);
        fclose(f);
        return text;
}

static const char *string_member(struct json_object *o, const char *key) {
        struct json_object *v;
        ck_assert_msg(json_object_object_get_ex(o, key, &v), "fixture: no \"%s\"", key);
        return json_object_get_string(v);
}

/* Every conversation of tests/fixtures/chat-templates.json through every template, byte for
 * byte as llama-server's /apply-template rendered it (or refused, as it did). */
START_TEST(test_fixture_renderings) {
        struct json_object *root = test_load_fixture("chat-templates.json"), *runs, *cases;
        size_t n_cases = 0;

        ck_assert_str_eq(string_member(root, "date_string"), "09 Mar 2025");
        ck_assert(json_object_object_get_ex(root, "runs", &runs));
        ck_assert_uint_ge(json_object_array_length(runs), 14);
        for (size_t i = 0; i < json_object_array_length(runs); i++) {
                struct json_object *run = json_object_array_get_idx(runs, i), *add_bos;
                char *template = read_template(string_member(run, "template"));
                ck_assert(json_object_object_get_ex(run, "add_bos", &add_bos));
                const struct chat_vocabulary vocabulary = {
                        .bos_token = string_member(run, "bos_token"),
                        .eos_token = string_member(run, "eos_token"),
                        .add_bos = json_object_get_boolean(add_bos),
                };
                ck_assert(json_object_object_get_ex(run, "cases", &cases));
                for (size_t k = 0; k < json_object_array_length(cases); k++) {
                        struct json_object *c = json_object_array_get_idx(cases, k), *jmsgs, *want;
                        ck_assert(json_object_object_get_ex(c, "messages", &jmsgs));
                        struct chat_message msgs[16];
                        size_t n = json_object_array_length(jmsgs);
                        ck_assert_uint_le(n, 16);
                        for (size_t m = 0; m < n; m++) {
                                struct json_object *jm = json_object_array_get_idx(jmsgs, m);
                                msgs[m] = (struct chat_message) { string_member(jm, "role"), string_member(jm, "content") };
                        }
                        struct error err = {};
                        char *out = NULL;
                        int r = chat_render_template(template, &vocabulary, msgs, n, true, fixture_now(), &out, &err);
                        if (json_object_object_get_ex(c, "prompt", &want)) {
                                ck_assert_msg(r == 0, "%s case %zu: %s", string_member(run, "template"), k, err.message);
                                ck_assert_msg(strcmp(out, json_object_get_string(want)) == 0,
                                              "%s with %s, case %zu:\n%s\nexpected\n%s", string_member(run, "template"),
                                              string_member(run, "model"), k, out, json_object_get_string(want));
                        } else
                                ck_assert_msg(r == -EINVAL, "%s case %zu: rendered, llama.cpp refused (%s)",
                                              string_member(run, "template"), k, string_member(c, "error"));
                        free(out);
                        n_cases++;
                }
                free(template);
        }
        ck_assert_uint_ge(n_cases, 14 * 5);
        json_object_put(root);
}
END_TEST

static int render_text(const char *template, char **out, struct error *err) {
        static const struct chat_vocabulary vocabulary = { .bos_token = "<s>", .eos_token = "</s>" };
        const struct chat_message msgs[] = { { "system", "S" }, { "user", "Hi" } };
        *out = NULL;
        return chat_render_template(template, &vocabulary, msgs, 2, true, fixture_now(), out, err);
}

static void check_text(const char *template, const char *want) {
        struct error err = {};
        char *out;
        ck_assert_msg(render_text(template, &out, &err) == 0, "%s: %s", template, err.message);
        ck_assert_msg(strcmp(out, want) == 0, "%s:\n%s\nexpected\n%s", template, out, want);
        free(out);
}

static void check_refused(const char *template, int want, const char *message_part) {
        struct error err = {};
        char *out;
        ck_assert_int_eq(render_text(template, &out, &err), want);
        ck_assert_ptr_null(out);
        ck_assert_msg(strstr(err.message, message_part), "%s: message \"%s\" lacks \"%s\"", template, err.message,
                      message_part);
}

/* The language beyond what the fixture's templates use. */
START_TEST(test_language) {
        check_text("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 'a' ~ 1 }} {{ -2 }} {{ 1.5 }} {{ 2 / 4 }}",
                   "7 3 1 a1 -2 1.5 0.5");
        check_text("{{ [1, 2, 3][::-1] }}|{{ 'abc'[1:] }}|{{ {'k': 'v'}['k'] }}|{{ (1, 2)[1] }}", "[3, 2, 1]|bc|v|2");
        check_text("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }}{{ ',' if not loop.last }}{% endfor %}",
                   "a=1,b=2");
        check_text("{% for x in range(5) if x is odd %}{{ loop.index }}{{ x }}{% else %}none{% endfor %}", "1123");
        check_text("{% for x in [] %}x{% else %}empty{% endfor %}", "empty");
        check_text("{% for x in range(9) %}{% if x == 3 %}{% break %}{% endif %}{% if x == 1 %}{% continue %}"
                   "{% endif %}{{ x }}{% endfor %}",
                   "02");
        check_text("{% set ns = namespace(n=0) %}{% for m in range(3) %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
                   "3");
        check_text("{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}",
                   "S\nHi"); /* the system message, never read, joins the user's */
        check_text("{{ messages | map(attribute='role') | list | tojson }}", "[\"user\"]");
        check_text("{{ messages | map(attribute='role') | list | tojson }}{{ messages[0].content }}",
                   "[\"system\", \"user\"]S");
        check_text("{{ {'a': [1, 'x\\n'], 'b': none} | tojson(indent=2) }}",
                   "{\n  \"a\": [\n    1,\n    \"x\\n\"\n  ],\n  \"b\": null\n}");
        check_text("{{ ' a b '.strip() }}|{{ 'a,b,,c'.split(',') | length }}|{{ 'Hello World'.lower() }}|"
                   "{{ 'x' * 3 }}|{{ 'ab' in 'cabd' }}|{{ 'hello world' | title }}|{{ '  t  ' | trim }}",
                   "a b|4|hello world|xxx|True|Hello World|t");
        check_text("{{ undefined_name }}|{{ undefined_name is defined }}|{{ messages[9] is defined }}|"
                   "{{ none }}|{{ true and 'y' }}|{{ false or 0 }}",
                   "|False|False|None|y|0");
        check_text("{{ strftime_now('%Y-%m-%d') }} {{ date_string }}", "2025-03-09 09 Mar 2025");
        check_text("x\na  {%- if true -%}  b  {%- endif -%}  c\n  {% if true %}\nd{% endif %}", "x\nabc\nd");
        check_text("{# comment #}x{#- trimmed -#}  y", "xy");
        check_text("{{ bos_token }}{% generation %}{{ eos_token }}{% endgeneration %}", "<s></s>");
}
END_TEST

/* Malformed or hostile templates fail with a message, within the limits, without a crash. */
START_TEST(test_refusals) {
        check_refused("{% for m in messages %}x", -EINVAL, "line 1 column 25: the template ends before {% endfor %}");
        check_refused("{% if true %}\n{% endfor %}", -EINVAL, "line 2 column 4: {% endfor %} without its opening statement");
        check_refused("{{ 'unterminated }}", -EINVAL, "a string that is never closed");
        check_refused("{# open", -EINVAL, "a comment that is never closed");
        check_refused("{% macro m() %}{% endmacro %}", -EINVAL, "the statement 'macro' is not supported");
        check_refused("{{ x | no_such_filter }}", -EINVAL, "unknown filter 'no_such_filter'");
        check_refused("{{ raise_exception('No system role!') }}", -EINVAL, "raise_exception: No system role!");
        check_refused("{{ 1 / 0 }}", -EINVAL, "division by zero");
        check_refused("{{ 'a' - 1 }}", -EINVAL, "unsupported operands");
        check_refused("{% for i in range(2000000) %}{% endfor %}", -E2BIG, "loop iterations and calls");
        check_refused("{% for i in range(900000) %}{% for j in range(900000) %}{% endfor %}{% endfor %}", -E2BIG,
                      "loop iterations and calls");
        check_refused("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
                      "{% endfor %}",
                      -E2BIG, "MiB");
        check_refused("{% for i in range(100) %}{{ 'x' * 1000000 }}{% endfor %}", -E2BIG, "the prompt longer than 64 MiB");
        check_refused("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}"
                      "{{ ns.l | tojson }}",
                      -E2BIG, "nested more than");

        char deep[2048] = "{{ ";
        for (int k = 0; k < 300; k++)
                strcat(deep, "(");
        check_refused(deep, -EINVAL, "nested more than 128 deep");
}
END_TEST

/* Every prefix of a real template either renders or fails with a message. */
START_TEST(test_truncated_templates) {
        char *template = read_template("tests/fixtures/chat-templates/meta-llama-Llama-3.1-8B-Instruct.jinja");
        size_t len = strlen(template), rendered = 0;
        for (size_t cut = 0; cut <= len; cut++) {
                char saved = template[cut];
                struct error err = {};
                char *out;
                template[cut] = '\0';
                int r = render_text(template, &out, &err);
                ck_assert_msg(r == 0 || (r == -EINVAL && err.message[0]), "prefix %zu: %d", cut, r);
                if (r == 0) {
                        rendered++;
                        free(out);
                }
                template[cut] = saved;
        }
        ck_assert_uint_gt(rendered, 1);
        free(template);
}
END_TEST

/* chat_render() takes bos_token and eos_token from the vocabulary as spelled, and today's
 * date from the clock. */
START_TEST(test_model_variables) {
        require_tokenizer();
        struct tokenizer *tk = model_tokenizer;
        struct error err = {};
        char *original = strdup(tokenizer_chat_template(tk)), *out, before[32], after[32];
        time_t now = time(NULL);

        ck_assert_ptr_nonnull(original);
        ck_assert_int_eq(tokenizer_replace_chat_template(tk, "{{ bos_token }}|{{ eos_token }}|{{ date_string }}", &err), 0);
        strftime(before, sizeof(before), "%d %b %Y", localtime(&now));
        ck_assert_int_eq(chat_render(tk, (const struct chat_message[]) { { "user", "Hi" } }, 1, true, &out, &err), 0);
        now = time(NULL);
        strftime(after, sizeof(after), "%d %b %Y", localtime(&now));
        ck_assert_msg(strncmp(out, "<|im_start|>|<|im_end|>|", 24) == 0, "%s", out);
        ck_assert_msg(strcmp(out + 24, before) == 0 || strcmp(out + 24, after) == 0, "%s", out);
        ck_assert_str_eq(chat_template_describe(tk), "Jinja, from the template given in place of the file's");
        free(out);

        ck_assert_int_eq(tokenizer_replace_chat_template(tk, "{% if %}", &err), 0);
        ck_assert_ptr_null(chat_template_describe(tk));
        ck_assert_int_eq(chat_template_check(tk, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "line 1 column 7: expected a value"));
        ck_assert_int_eq(chat_render(tk, (const struct chat_message[]) { { "user", "Hi" } }, 1, true, &out, &err),
                         -EINVAL);
        /* parses, but fails every chat: reported before any request comes */
        ck_assert_int_eq(tokenizer_replace_chat_template(tk, "{{ messages | shuffle }}", &err), 0);
        ck_assert_int_eq(chat_template_check(tk, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "line 1 column 13: unknown filter 'shuffle'"));

        ck_assert_int_eq(tokenizer_replace_chat_template(tk, original, &err), 0);
        free(original);
}
END_TEST

START_TEST(test_rendered_tokens) {
        const struct tokenizer *tk = require_tokenizer();
        struct error err = {};
        char *out;
        int32_t *ids;
        size_t n, n_start = 0, n_end = 0;

        ck_assert_int_eq(chat_render(tk, (const struct chat_message[]) { { "user", "Hi" } }, 1, true, &out, &err), 0);
        ck_assert_int_eq(tokenizer_encode(tk, out, strlen(out), true, &ids, &n, &err), 0);
        ck_assert_int_eq(ids[0], tokenizer_bos(tk));
        for (size_t i = 0; i < n; i++) {
                n_start += ids[i] == 1;
                n_end += ids[i] == 2;
        }
        ck_assert_uint_eq(n_start, 3);
        ck_assert_uint_eq(n_end, 2);
        /* It ends "<|im_start|>assistant\n". */
        size_t last = n;
        while (last > 0 && ids[last - 1] != 1)
                last--;
        ck_assert_uint_gt(last, 0);
        char *tail;
        ck_assert_int_eq(tokenizer_decode(tk, ids + last, n - last, false, &tail, NULL, &err), 0);
        ck_assert_str_eq(tail, "assistant\n");
        free(tail);
        free(ids);
        free(out);
}
END_TEST

static Suite *chat_template_suite(void) {
        Suite *s = suite_create("chat-template");
        TCase *tc = tcase_create("chat-template");

        /* the limit checks run a million steps and fill hundreds of MiB on purpose */
        tcase_set_timeout(tc, 60);

        tcase_add_test(tc, test_render_default_system);
        tcase_add_test(tc, test_render_own_system);
        tcase_add_test(tc, test_render_multi_turn);
        tcase_add_test(tc, test_render_errors);
        tcase_add_test(tc, test_rendered_tokens);
        tcase_add_test(tc, test_fixture_renderings);
        tcase_add_test(tc, test_model_variables);
        tcase_add_test(tc, test_language);
        tcase_add_test(tc, test_refusals);
        tcase_add_test(tc, test_truncated_templates);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        /* local time is what date_string and strftime_now() read */
        setenv("TZ", "UTC", 1);
        tzset();
        load_model_tokenizer();
        return run_suite(chat_template_suite());
}
