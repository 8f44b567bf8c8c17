/* SPDX-License-Identifier: MIT */
/* tokenize and detokenize: the served model's tokenizer, as generate uses it. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ctl-call.h"
#include "ctl-commands.h"

static void tokenize_help(void) {
        printf("Usage: asyncllmctl [--socket PATH | --bus system|user] tokenize [OPTIONS] [TEXT|-]\n"
               "\n"
               "Prints the token ids a generate request of TEXT starts from (special tokens such as\n"
               "BOS included), separated by spaces; TEXT - or none reads standard input.\n"
               "\n"
               "Options:\n"
               "      --json                        print the daemon's result: count, max_model_len, tokens\n"
               "  -h, --help                        show this help\n");
}

int ctl_tokenize(struct ctl *ctl, int argc, char **argv) {
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "json", no_argument, NULL, 'j' },
                {},
        };
        bool json = false;
        char *input = NULL;
        int opt, status;

        ctl_options_begin();
        while ((opt = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                if (opt == 'h') {
                        tokenize_help();
                        return CTL_EXIT_OK;
                } else if (opt == 'j')
                        json = true;
                else
                        return ctl_option_failure(ctl, opt, argv);
        }
        if (argc - optind > 1)
                return ctl_fail(ctl, CTL_EXIT_USAGE, "takes one TEXT, got %d arguments; quote a text of several words",
                                argc - optind);
        const char *text = argc - optind == 1 ? argv[optind] : "-";
        if (strcmp(text, "-") == 0) {
                if ((status = ctl_read_stdin(ctl, "the text", &input)) != CTL_EXIT_OK)
                        return status;
                text = input;
        }
        struct json_object *args = json_object_new_object(), *result = NULL;
        json_object_object_add(args, "prompt", json_object_new_string(text));
        status = ctl_call(ctl, "tokenize", args, &result);
        json_object_put(args);
        free(input);
        if (status == CTL_EXIT_OK && json)
                printf("%s\n", json_object_to_json_string_ext(result, JSON_C_TO_STRING_PLAIN));
        else if (status == CTL_EXIT_OK) {
                struct json_object *tokens = ctl_json_member(result, "tokens");
                for (size_t i = 0; i < json_object_array_length(tokens); i++)
                        printf("%s%d", i ? " " : "", json_object_get_int(json_object_array_get_idx(tokens, i)));
                printf("\n");
        }
        json_object_put(result);
        return status;
}

static void detokenize_help(void) {
        printf("Usage: asyncllmctl [--socket PATH | --bus system|user] detokenize [OPTIONS] ID...\n"
               "\n"
               "Prints the text of the token ids, special tokens as their text, with no newline added.\n"
               "\n"
               "Options:\n"
               "  -h, --help                        show this help\n");
}

int ctl_detokenize(struct ctl *ctl, int argc, char **argv) {
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                {},
        };
        int opt, status;

        ctl_options_begin();
        while ((opt = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                if (opt != 'h')
                        return ctl_option_failure(ctl, opt, argv);
                detokenize_help();
                return CTL_EXIT_OK;
        }
        if (argc - optind < 1)
                return ctl_fail(ctl, CTL_EXIT_USAGE, "needs token ids, such as: asyncllmctl detokenize 19556 905");
        struct json_object *tokens = json_object_new_array();
        for (int i = optind; i < argc; i++) {
                char *end;
                errno = 0;
                long long id = strtoll(argv[i], &end, 10);
                if (errno || end == argv[i] || *end || id < 0 || id > INT32_MAX) {
                        json_object_put(tokens);
                        return ctl_fail(ctl, CTL_EXIT_USAGE, "'%s' is not a token id (an integer from 0)", argv[i]);
                }
                json_object_array_add(tokens, json_object_new_int((int32_t) id));
        }
        struct json_object *args = json_object_new_object(), *result = NULL;
        json_object_object_add(args, "tokens", tokens);
        status = ctl_call(ctl, "detokenize", args, &result);
        json_object_put(args);
        if (status == CTL_EXIT_OK) {
                struct json_object *prompt = ctl_json_member(result, "prompt");
                fwrite(json_object_get_string(prompt), 1, (size_t) json_object_get_string_len(prompt), stdout);
        }
        json_object_put(result);
        return status;
}
