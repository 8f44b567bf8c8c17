/* SPDX-License-Identifier: MIT */
/* generate: one request, its text streamed to stdout as it comes (or the daemon's output
 * lines with --json), aborted in the daemon on Ctrl-C. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl-commands.h"
#include "ctl-generation.h"
#include "ctl-signals.h"
#include "ctl-stream.h"

enum {
        OPT_JSON = 0x100,
        OPT_CHAT,
        OPT_SYSTEM,
        OPT_OUTPUT_KIND,
        OPT_ID,
        OPT_PROMPT_TOKEN_IDS,
};

static const struct option generate_options[] = {
        { "help", no_argument, NULL, 'h' },
        { "json", no_argument, NULL, OPT_JSON },
        { "chat", no_argument, NULL, OPT_CHAT },
        { "system", required_argument, NULL, OPT_SYSTEM },
        { "output-kind", required_argument, NULL, OPT_OUTPUT_KIND },
        { "id", required_argument, NULL, OPT_ID },
        { "prompt-token-ids", required_argument, NULL, OPT_PROMPT_TOKEN_IDS },
};

static void generate_help(void) {
        printf("Usage: asyncllmctl [--socket PATH | --bus system|user] generate [OPTIONS] [PROMPT | -]\n"
               "\n"
               "Generates text from PROMPT and streams it to stdout as it comes. The prompt is read from\n"
               "standard input with -, or when none is given and standard input is not a terminal (one\n"
               "trailing newline dropped). Ctrl-C aborts the request in the daemon and exits with 130.\n"
               "Parameters the command line leaves out take the daemon's defaults (vLLM's: --max-tokens 16).\n"
               "\n"
               "Prompt and output:\n"
               "      --chat                        send PROMPT as a user message, rendered with the\n"
               "                                    model's chat template\n"
               "      --system TEXT                 a system message before it (implies --chat)\n"
               "      --prompt-token-ids ID[,ID...] token ids as the prompt, instead of PROMPT\n"
               "  -n N                              completions to generate; above 1 each is printed whole\n"
               "                                    once the request ends, after a line \"--- completion I ---\"\n"
               "      --output-kind KIND            delta (default), cumulative or final: how often the daemon\n"
               "                                    sends, as --json shows\n"
               "      --id ID                       the request's id on the connection (not with --bus)\n"
               "      --json                        print the daemon's output lines as they come, one JSON\n"
               "                                    object per line, instead of the text\n"
               "  -h, --help                        show this help\n"
               "\n"
               "Sampling and scheduling (asyncllmd-protocol(7) gives ranges and defaults):\n");
        ctl_sampling_help(stdout);
        printf("\n"
               "Exit status: 0 the request finished, 1 the daemon refused or failed it (or it was\n"
               "aborted by someone else), 2 usage, 3 connection, 4 engine dead, 75 overloaded (try again\n"
               "after the seconds the message gives), 130 interrupted.\n");
}

/* What is printed, and how, for one completion. */
struct completion_text {
        char *text; /* -n > 1: collected until the end */
        size_t len;
        size_t printed; /* cumulative outputs repeat what came before */
};

struct printer {
        bool json;
        bool terminal;
        bool cumulative;
        bool several; /* -n > 1 */
        struct completion_text *completions;
        size_t n_completions;
        char last_byte; /* of what went to stdout */
};

static struct completion_text *completion_at(struct printer *p, uint32_t index) {
        if (index >= p->n_completions) {
                struct completion_text *c = realloc(p->completions, (index + 1) * sizeof(*c));
                if (!c)
                        return NULL;
                memset(c + p->n_completions, 0, (index + 1 - p->n_completions) * sizeof(*c));
                p->completions = c;
                p->n_completions = index + 1;
        }
        return &p->completions[index];
}

static void write_text(struct printer *p, const char *text, size_t len) {
        if (len == 0)
                return;
        fwrite(text, 1, len, stdout);
        p->last_byte = text[len - 1];
}

static int collect(struct printer *p, struct completion_text *c, const char *text, size_t len) {
        size_t keep = p->cumulative ? 0 : c->len;
        char *t = realloc(c->text, keep + len + 1);
        if (!t)
                return -ENOMEM;
        memcpy(t + keep, text, len);
        t[keep + len] = 0;
        c->text = t;
        c->len = keep + len;
        return 0;
}

static void print_collected(struct printer *p) {
        for (size_t i = 0; i < p->n_completions; i++) {
                printf("--- completion %zu ---\n", i);
                p->last_byte = '\n';
                write_text(p, p->completions[i].text, p->completions[i].len);
                if (p->last_byte != '\n')
                        write_text(p, "\n", 1);
        }
}

static int print_output(asyncllm_client *client, const asyncllm_output *o, void *userdata) {
        struct printer *p = userdata;
        if (p->json) {
                if (asyncllm_output_json(o))
                        printf("%s\n", asyncllm_output_json(o));
                fflush(stdout);
                return 0;
        }
        for (size_t i = 0; i < asyncllm_output_n_completions(o); i++) {
                size_t len;
                const char *text = asyncllm_output_text(o, i, &len);
                struct completion_text *c = completion_at(p, asyncllm_output_index(o, i));
                if (!c)
                        return -ENOMEM;
                if (p->several) {
                        if (collect(p, c, text, len) < 0)
                                return -ENOMEM;
                        continue;
                }
                if (p->cumulative) {
                        if (len > c->printed)
                                write_text(p, text + c->printed, len - c->printed);
                        c->printed = len > c->printed ? len : c->printed;
                } else
                        write_text(p, text, len);
        }
        if (asyncllm_output_done(o)) {
                if (p->several)
                        print_collected(p);
                else if (p->terminal && p->last_byte && p->last_byte != '\n')
                        write_text(p, "\n", 1); /* the shell's prompt on a line of its own */
        }
        fflush(stdout);
        return 0;
}

int ctl_generate(struct ctl *ctl, int argc, char **argv) {
        struct ctl_generation g;
        struct printer printer = { .terminal = ctl_is_terminal(stdout) };
        struct option *options = NULL;
        const char *system = NULL, *output_kind = NULL;
        char *stdin_prompt = NULL;
        bool chat = false;
        int opt, status = CTL_EXIT_OK;

        if (ctl_generation_init(&g) < 0 ||
            !(options = ctl_sampling_options_with(generate_options, sizeof(generate_options) / sizeof(*generate_options))))
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "out of memory");
        ctl_options_begin();
        while (status == CTL_EXIT_OK && (opt = getopt_long(argc, argv, ":hn:", options, NULL)) >= 0) {
                struct json_object *n = NULL;
                switch (opt) {
                case 'h':
                        generate_help();
                        goto finish;
                case 'n':
                        if ((status = ctl_parse_integer(ctl, "n", optarg, &n)) == CTL_EXIT_OK) {
                                printer.several = json_object_get_int64(n) > 1;
                                json_object_object_add(g.params, "n", n);
                        }
                        break;
                case OPT_JSON:
                        printer.json = true;
                        break;
                case OPT_CHAT:
                        chat = true;
                        break;
                case OPT_SYSTEM:
                        system = optarg;
                        chat = true;
                        break;
                case OPT_OUTPUT_KIND:
                        if (strcmp(optarg, "delta") != 0 && strcmp(optarg, "cumulative") != 0 && strcmp(optarg, "final") != 0)
                                status = ctl_fail(ctl, CTL_EXIT_USAGE,
                                                  "--output-kind takes delta, cumulative or final, got '%s'", optarg);
                        output_kind = optarg;
                        break;
                case OPT_ID:
                        g.id = optarg;
                        break;
                case OPT_PROMPT_TOKEN_IDS:
                        json_object_put(g.prompt_token_ids);
                        g.prompt_token_ids = NULL;
                        status = ctl_parse_int_list(ctl, "prompt-token-ids", optarg, &g.prompt_token_ids);
                        break;
                default:
                        if (ctl_sampling_is_option(opt))
                                status = ctl_sampling_parse(ctl, &g, opt, optarg);
                        else
                                status = ctl_option_failure(ctl, opt, argv);
                }
        }
        if (status != CTL_EXIT_OK)
                goto finish;

        if (ctl->bus != CTL_BUS_NONE && g.id) {
                status = ctl_fail(ctl, CTL_EXIT_USAGE, "--id does not go with --bus: the daemon names requests made over "
                                  "D-Bus (`asyncllmctl --bus ... list` shows them)");
                goto finish;
        }
        if ((status = ctl_generation_take_prompt(ctl, &g, argc, argv, chat, system, &stdin_prompt)) != CTL_EXIT_OK)
                goto finish;
        if (output_kind) {
                json_object_object_add(g.params, "output_kind", json_object_new_string(output_kind));
                printer.cumulative = strcmp(output_kind, "cumulative") == 0;
        }
        if ((ctl->signal_fd = ctl_signals_open()) < 0) {
                status = ctl_fail(ctl, CTL_EXIT_REQUEST, "cannot watch for signals: %s", strerror(-ctl->signal_fd));
                goto finish;
        }
        status = ctl_generate_run(ctl, &g, print_output, &printer);
finish:
        for (size_t i = 0; i < printer.n_completions; i++)
                free(printer.completions[i].text);
        free(printer.completions);
        free(stdin_prompt);
        free(options);
        ctl_generation_done(&g);
        return status;
}
