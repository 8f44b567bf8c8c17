/* SPDX-License-Identifier: MIT */
/* Fuzzes the chat-template interpreter (tokenizer/jinja*.c) through chat_render_template():
 * any text as a template, rendered for a chat with a system message and one without, must
 * give either a NUL-terminated prompt within the output limit or an error with a message,
 * never a crash, a leak or a hang. Built with libFuzzer, or with fuzz-main.c to replay the
 * committed corpus (tests/fuzz/chat-template) as a regression test. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat-template.h"
#include "jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok) {
        if (!ok)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static const struct chat_vocabulary vocabulary = { .bos_token = "<s>", .eos_token = "</s>", .add_bos = true };
        static const struct chat_message chat[] = {
                { "system", " Be brief. " },
                { "user", "Hi\n" },
                { "assistant", "<think>\nhm\n</think>\n\nHello" },
                { "user", "{{ not a tag }}" },
        };
        char *template = malloc(size + 1);
        if (!template)
                return 0;
        memcpy(template, data, size);
        template[size] = '\0';

        for (size_t first = 0; first < 2; first++) {
                struct error err = {};
                char *out = NULL;
                int r = chat_render_template(template, &vocabulary, chat + first, 4 - first, first == 0, 0, &out, &err);
                if (r == 0) {
                        check(out && strlen(out) <= JINJA_OUTPUT_MAX);
                        free(out);
                } else
                        check(r < 0 && !out && err.message[0]);
        }
        free(template);
        return 0;
}
