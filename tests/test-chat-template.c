/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "chat-template.h"
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

START_TEST(test_default_system_extraction) {
        const struct tokenizer *tk = require_tokenizer();
        struct error err = {};
        char *text;

        ck_assert_int_eq(chat_template_default_system(tokenizer_chat_template(tk), &text, &err), 0);
        ck_assert_str_eq(text, "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
        free(text);

        /* Plain ChatML with no default. */
        ck_assert_int_eq(chat_template_default_system(
                                 "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                                 "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
                                 &text, &err),
                         0);
        ck_assert_ptr_null(text);

        /* A system turn built from the caller's content is skipped; the literal after it is
         * the default; "\n" written as an escape is understood. */
        ck_assert_int_eq(chat_template_default_system(
                                 "{% if messages[0]['role'] == 'system' %}{{ '<|im_start|>system\\n' + "
                                 "messages[0]['content'] + '<|im_end|>\\n' }}{% else %}{{ \"<|im_start|>system\\n"
                                 "You are Qwen.\\nBe helpful.<|im_end|>\\n\" }}{% endif %}",
                                 &text, &err),
                         0);
        ck_assert_str_eq(text, "You are Qwen.\nBe helpful.");
        free(text);

        /* Not ChatML at all. */
        ck_assert_int_eq(chat_template_default_system(
                                 "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>{% endfor %}",
                                 &text, &err),
                         -EOPNOTSUPP);
        ck_assert_ptr_nonnull(strstr(err.message, "ChatML"));
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

        tcase_add_test(tc, test_render_default_system);
        tcase_add_test(tc, test_render_own_system);
        tcase_add_test(tc, test_render_multi_turn);
        tcase_add_test(tc, test_render_errors);
        tcase_add_test(tc, test_default_system_extraction);
        tcase_add_test(tc, test_rendered_tokens);
        suite_add_tcase(s, tc);
        return s;
}

int main(void) {
        load_model_tokenizer();
        return run_suite(chat_template_suite());
}
