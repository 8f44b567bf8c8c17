/* SPDX-License-Identifier: MIT */
/* encode: one prompt's embedding, the vector pooled from the model's final hidden states,
 * printed as numbers on one line (or as JSON with --json). */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ctl-bus.h"
#include "ctl-commands.h"
#include "ctl-generation.h"
#include "ctl-signals.h"
#include "ctl-stream.h"

enum {
        OPT_JSON = 0x100,
        OPT_CHAT,
        OPT_SYSTEM,
        OPT_POOLING_TYPE,
        OPT_NO_NORMALIZE,
        OPT_DIMENSIONS,
        OPT_PROMPT_TOKEN_IDS,
        OPT_PRIORITY,
};

static void encode_help(void) {
        printf("Usage: asyncllmctl [--socket PATH | --bus system|user] encode [OPTIONS] [PROMPT | -]\n"
               "\n"
               "Prints the embedding of PROMPT: the model's final hidden states pooled into one vector,\n"
               "its components separated by spaces on one line (9 significant digits: each is the\n"
               "float the daemon computed). The prompt is read from standard input with -, or when\n"
               "none is given and standard input is not a terminal (one trailing newline dropped).\n"
               "\n"
               "Options:\n"
               "      --pooling-type TYPE           last (the last token's state, which has read the whole\n"
               "                                    prompt), mean, or cls (the first token's); by default\n"
               "                                    the one the model file declares, else last\n"
               "      --no-normalize                the vector as pooled, not scaled to length 1\n"
               "      --dimensions N                keep the first N components (before normalizing)\n"
               "      --chat                        send PROMPT as a user message, rendered with the\n"
               "                                    model's chat template\n"
               "      --system TEXT                 a system message before it (implies --chat)\n"
               "      --prompt-token-ids ID[,ID...] token ids as the prompt, instead of PROMPT\n"
               "      --priority N                  the request's priority (lower runs first under the\n"
               "                                    priority policy)\n"
               "      --json                        print {\"data\": [...], \"prompt_tokens\": N} instead\n"
               "  -h, --help                        show this help\n"
               "\n"
               "Exit status: 0 the vector was printed, 1 the daemon refused or failed the request, 2\n"
               "usage, 3 connection, 4 engine dead, 75 overloaded, 130 interrupted.\n");
}

/* What the request's final output carried. */
struct embedding {
        float *data;
        size_t n;
        int64_t prompt_tokens;
        bool aborted; /* finished without a vector or an error */
};

static int keep_embedding(asyncllm_client *client, const asyncllm_output *o, void *userdata) {
        struct embedding *e = userdata;
        size_t n;
        const float *data = asyncllm_output_embedding(o, &n);
        (void) client;
        if (!data && asyncllm_output_finished(o) && asyncllm_output_error(o) == 0)
                e->aborted = true;
        if (!data || e->data)
                return 0;
        if (!(e->data = malloc(n * sizeof(*data))))
                return -ENOMEM;
        memcpy(e->data, data, n * sizeof(*data));
        e->n = n;
        e->prompt_tokens = asyncllm_output_prompt_tokens(o);
        return 0;
}

static void print_vector(const struct embedding *e, bool json) {
        if (json)
                printf("{\"data\":[");
        for (size_t i = 0; i < e->n; i++)
                printf("%s%.9g", i ? (json ? "," : " ") : "", e->data[i]);
        if (json)
                printf("],\"prompt_tokens\":%" PRId64 "}", e->prompt_tokens);
        printf("\n");
}

/* Encode on D-Bus: the method answers with the whole vector. */
static int encode_on_bus(struct ctl *ctl, const struct ctl_generation *g, struct embedding *e) {
        struct json_object *result = NULL;
        int status = ctl_bus_encode(ctl, g, &result);
        if (status != CTL_EXIT_OK)
                return status;
        struct json_object *data = json_object_object_get(result, "data");
        e->n = json_object_array_length(data);
        if (!(e->data = malloc((e->n ? e->n : 1) * sizeof(*e->data)))) {
                json_object_put(result);
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "out of memory");
        }
        for (size_t i = 0; i < e->n; i++)
                e->data[i] = (float) json_object_get_double(json_object_array_get_idx(data, i));
        e->prompt_tokens = json_object_get_int64(json_object_object_get(result, "prompt_tokens"));
        json_object_put(result);
        return CTL_EXIT_OK;
}

int ctl_encode(struct ctl *ctl, int argc, char **argv) {
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "json", no_argument, NULL, OPT_JSON },
                { "chat", no_argument, NULL, OPT_CHAT },
                { "system", required_argument, NULL, OPT_SYSTEM },
                { "pooling-type", required_argument, NULL, OPT_POOLING_TYPE },
                { "no-normalize", no_argument, NULL, OPT_NO_NORMALIZE },
                { "dimensions", required_argument, NULL, OPT_DIMENSIONS },
                { "prompt-token-ids", required_argument, NULL, OPT_PROMPT_TOKEN_IDS },
                { "priority", required_argument, NULL, OPT_PRIORITY },
                {},
        };
        struct ctl_generation g;
        struct embedding e = { .prompt_tokens = -1 };
        const char *system = NULL;
        char *stdin_prompt = NULL;
        bool chat = false, json = false;
        int opt, status = CTL_EXIT_OK;

        if (ctl_generation_init(&g) < 0)
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "out of memory");
        g.encode = true;
        g.normalize = true;
        ctl_options_begin();
        while (status == CTL_EXIT_OK && (opt = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                struct json_object *v = NULL;
                switch (opt) {
                case 'h':
                        encode_help();
                        goto finish;
                case OPT_JSON:
                        json = true;
                        break;
                case OPT_CHAT:
                        chat = true;
                        break;
                case OPT_SYSTEM:
                        system = optarg;
                        chat = true;
                        break;
                case OPT_POOLING_TYPE:
                        if (strcmp(optarg, "last") != 0 && strcmp(optarg, "mean") != 0 && strcmp(optarg, "cls") != 0)
                                status = ctl_fail(ctl, CTL_EXIT_USAGE, "--pooling-type takes last, mean or cls, got '%s'",
                                                  optarg);
                        g.pooling_type = optarg;
                        break;
                case OPT_NO_NORMALIZE:
                        g.normalize = false;
                        break;
                case OPT_DIMENSIONS:
                        if ((status = ctl_parse_integer(ctl, "dimensions", optarg, &v)) != CTL_EXIT_OK)
                                break;
                        if (json_object_get_int64(v) < 1 || json_object_get_int64(v) > INT32_MAX)
                                status = ctl_fail(ctl, CTL_EXIT_USAGE, "--dimensions takes a count from 1, got '%s'", optarg);
                        else
                                g.dimensions = (uint32_t) json_object_get_int64(v);
                        json_object_put(v);
                        break;
                case OPT_PROMPT_TOKEN_IDS:
                        json_object_put(g.prompt_token_ids);
                        g.prompt_token_ids = NULL;
                        status = ctl_parse_int_list(ctl, "prompt-token-ids", optarg, &g.prompt_token_ids);
                        break;
                case OPT_PRIORITY:
                        if ((status = ctl_parse_integer(ctl, "priority", optarg, &v)) == CTL_EXIT_OK)
                                json_object_object_add(g.request_fields, "priority", v);
                        break;
                default:
                        status = ctl_option_failure(ctl, opt, argv);
                }
        }
        if (status != CTL_EXIT_OK)
                goto finish;

        if ((status = ctl_generation_take_prompt(ctl, &g, argc, argv, chat, system, &stdin_prompt)) != CTL_EXIT_OK)
                goto finish;
        if (ctl->bus != CTL_BUS_NONE)
                status = encode_on_bus(ctl, &g, &e);
        else if ((ctl->signal_fd = ctl_signals_open()) < 0)
                status = ctl_fail(ctl, CTL_EXIT_REQUEST, "cannot watch for signals: %s", strerror(-ctl->signal_fd));
        else
                status = ctl_generate_run(ctl, &g, keep_embedding, &e);
        if (status == CTL_EXIT_OK && !e.data)
                status = ctl_fail(ctl, CTL_EXIT_REQUEST, e.aborted ? "the request was aborted in the daemon (by "
                                  "`asyncllmctl abort`, a pause in abort mode, or the daemon stopping)"
                                                                   : "the daemon's answer holds no vector");
        if (status == CTL_EXIT_OK)
                print_vector(&e, json);
finish:
        free(e.data);
        free(stdin_prompt);
        ctl_generation_done(&g);
        return status;
}
