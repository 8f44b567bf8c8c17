/* SPDX-License-Identifier: MIT */
/* chat: a conversation, one line a turn. The history stays here, as chat messages that the
 * daemon renders with the model's chat template on every turn. Ctrl-C stops an answer (what
 * came of it stays in the history) or clears the line being typed; Ctrl-D ends. */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl-commands.h"
#include "ctl-generation.h"
#include "ctl-signals.h"
#include "ctl-stream.h"

#define PROMPT "> "

static const struct option chat_options[] = {
        { "help", no_argument, NULL, 'h' },
        { "system", required_argument, NULL, 's' },
};

static void chat_help(void) {
        printf("Usage: asyncllmctl [--socket PATH | --bus system|user] chat [OPTIONS]\n"
               "\n"
               "A conversation with the model: each line typed at the \"> \" prompt is a turn, and the\n"
               "answer streams back. The history is kept here and sent whole on every turn, rendered\n"
               "by the model's chat template in the daemon. Ctrl-C stops the answer being written (the\n"
               "part that came stays in the history) or clears the line being typed; Ctrl-D ends.\n"
               "Answers run up to the context unless --max-tokens says otherwise.\n"
               "\n"
               "Options:\n"
               "      --system TEXT                 a system message that opens the conversation\n"
               "  -h, --help                        show this help\n"
               "\n"
               "Sampling and scheduling, for every answer:\n");
        ctl_sampling_help(stdout);
        printf("\n"
               "Exit status: 0 after Ctrl-D or the end of input, 3 connection, 4 engine dead,\n"
               "143 terminated; a refused turn is reported and the conversation goes on.\n");
}

/* Lines read from standard input, without blocking the signals' loop. */
struct input {
        char *data;
        size_t len, cap;
        bool eof;
};

enum line_result {
        LINE_READ,
        LINE_END,         /* end of input */
        LINE_INTERRUPTED, /* SIGINT while typing: the line is dropped */
        LINE_TERMINATED,  /* SIGTERM */
        LINE_FAILED,
};

/* The next line (malloc()ed, without its newline); at the end of input, what is left. */
static enum line_result next_line(struct ctl *ctl, struct input *in, char **ret) {
        for (;;) {
                char *newline = in->data ? memchr(in->data, '\n', in->len) : NULL;
                if (newline || (in->eof && in->len > 0)) {
                        size_t n = newline ? (size_t) (newline - in->data) : in->len;
                        if (!(*ret = strndup(in->data, n)))
                                return LINE_FAILED;
                        size_t used = newline ? n + 1 : n;
                        memmove(in->data, in->data + used, in->len - used);
                        in->len -= used;
                        return LINE_READ;
                }
                if (in->eof)
                        return LINE_END;
                struct pollfd p[2] = {
                        { .fd = STDIN_FILENO, .events = POLLIN },
                        { .fd = ctl->signal_fd, .events = POLLIN },
                };
                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        return LINE_FAILED;
                }
                if (p[1].revents & POLLIN) {
                        int signo = ctl_signals_read(ctl->signal_fd);
                        if (signo == SIGTERM)
                                return LINE_TERMINATED;
                        if (signo == SIGINT) {
                                in->len = 0; /* the terminal dropped the line too */
                                return LINE_INTERRUPTED;
                        }
                }
                if (!p[0].revents)
                        continue;
                if (in->cap - in->len < 4096) {
                        char *bigger = realloc(in->data, in->cap + 65536);
                        if (!bigger)
                                return LINE_FAILED;
                        in->data = bigger;
                        in->cap += 65536;
                }
                ssize_t n = read(STDIN_FILENO, in->data + in->len, in->cap - in->len);
                if (n < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                if (n < 0)
                        return LINE_FAILED;
                if (n == 0)
                        in->eof = true;
                in->len += (size_t) n;
        }
}

/* The answer as it streams: shown, and kept for the history. */
struct answer {
        char *text;
        size_t len;
};

static int show_answer(asyncllm_client *client, const asyncllm_output *o, void *userdata) {
        struct answer *a = userdata;
        for (size_t i = 0; i < asyncllm_output_n_completions(o); i++) {
                size_t len;
                const char *text = asyncllm_output_text(o, i, &len);
                char *t = realloc(a->text, a->len + len + 1);
                if (!t)
                        return -ENOMEM;
                memcpy(t + a->len, text, len);
                a->len += len;
                t[a->len] = 0;
                a->text = t;
                fwrite(text, 1, len, stdout);
        }
        fflush(stdout);
        return 0;
}

/* Drops the history's last message (a turn that failed). */
static void drop_last(struct json_object *messages) {
        size_t n = json_object_array_length(messages);
        if (n > 0)
                json_object_array_del_idx(messages, n - 1, 1);
}

/* One turn: the question goes into the history, the answer streams and follows it. Returns
 * an exit status; a refused turn leaves the history as it was and gives CTL_EXIT_OK. */
static int turn(struct ctl *ctl, struct ctl_generation *g, const char *question) {
        struct answer answer = { 0 };
        if (ctl_generation_add_message(g, "user", question) < 0)
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "out of memory");
        int status = ctl_generate_run(ctl, g, show_answer, &answer);
        if (answer.len > 0 && answer.text[answer.len - 1] != '\n')
                fputc('\n', stdout);
        else if (status == CTL_EXIT_SIGINT && answer.len == 0)
                fputc('\n', stdout); /* after the terminal's ^C */
        fflush(stdout);
        if (status == CTL_EXIT_OK || (status == CTL_EXIT_SIGINT && answer.len > 0)) {
                if (ctl_generation_add_message(g, "assistant", answer.text ? answer.text : "") < 0)
                        status = ctl_fail(ctl, CTL_EXIT_REQUEST, "out of memory");
                else
                        status = CTL_EXIT_OK;
        } else {
                drop_last(g->messages); /* unanswered: as if never asked */
                if (status == CTL_EXIT_SIGINT || status == CTL_EXIT_REQUEST || status == CTL_EXIT_TEMPFAIL)
                        status = CTL_EXIT_OK;
        }
        free(answer.text);
        return status;
}

int ctl_chat(struct ctl *ctl, int argc, char **argv) {
        struct ctl_generation g;
        struct input input = { 0 };
        struct option *options = NULL;
        const char *system = NULL;
        bool interactive = ctl_is_terminal(stdin);
        int opt, status = CTL_EXIT_OK;

        if (ctl_generation_init(&g) < 0 || !(g.messages = json_object_new_array()) ||
            !(options = ctl_sampling_options_with(chat_options, sizeof(chat_options) / sizeof(*chat_options)))) {
                ctl_generation_done(&g);
                return ctl_fail(ctl, CTL_EXIT_REQUEST, "out of memory");
        }
        ctl_options_begin();
        while (status == CTL_EXIT_OK && (opt = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                if (opt == 'h') {
                        chat_help();
                        goto finish;
                } else if (opt == 's')
                        system = optarg;
                else if (ctl_sampling_is_option(opt))
                        status = ctl_sampling_parse(ctl, &g, opt, optarg);
                else
                        status = ctl_option_failure(ctl, opt, argv);
        }
        if (status != CTL_EXIT_OK)
                goto finish;
        if (optind < argc) {
                status = ctl_fail(ctl, CTL_EXIT_USAGE, "takes no arguments (got '%s'); type the questions after it starts",
                                  argv[optind]);
                goto finish;
        }
        if (!json_object_object_get_ex(g.params, "max_tokens", NULL))
                json_object_object_add(g.params, "max_tokens", json_object_new_int(-1)); /* up to the context */
        if (system && ctl_generation_add_message(&g, "system", system) < 0) {
                status = ctl_fail(ctl, CTL_EXIT_REQUEST, "out of memory");
                goto finish;
        }
        if ((ctl->signal_fd = ctl_signals_open()) < 0) {
                status = ctl_fail(ctl, CTL_EXIT_REQUEST, "cannot watch for signals: %s", strerror(-ctl->signal_fd));
                goto finish;
        }
        for (;;) {
                char *line = NULL;
                if (interactive) {
                        fputs(PROMPT, stdout);
                        fflush(stdout);
                }
                enum line_result r = next_line(ctl, &input, &line);
                if (r == LINE_INTERRUPTED) {
                        fputc('\n', stdout);
                        continue;
                }
                if (r == LINE_END) {
                        if (interactive)
                                fputc('\n', stdout); /* the shell's prompt on a line of its own */
                        break;
                }
                if (r == LINE_TERMINATED) {
                        status = CTL_EXIT_SIGTERM;
                        break;
                }
                if (r == LINE_FAILED) {
                        status = ctl_fail(ctl, CTL_EXIT_REQUEST, "cannot read standard input: %s", strerror(errno));
                        break;
                }
                if (line[strspn(line, " \t\r")] != 0)
                        status = turn(ctl, &g, line);
                free(line);
                if (status != CTL_EXIT_OK)
                        break;
        }
finish:
        fflush(stdout);
        free(input.data);
        free(options);
        ctl_generation_done(&g);
        return status;
}
