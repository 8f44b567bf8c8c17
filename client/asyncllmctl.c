/* SPDX-License-Identifier: MIT */
/* asyncllmctl: the command line of asyncllmd. The global options pick the way to the daemon
 * (its socket, or D-Bus); the command does the rest and returns the exit status. */
#include "config.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl-commands.h"
#include "ctl.h"

static const struct {
        const char *name;
        int (*run)(struct ctl *ctl, int argc, char **argv);
        const char *usage;
        const char *summary;
} commands[] = {
        { "generate", ctl_generate, "generate [PROMPT|-]", "generate text from a prompt, streamed to stdout" },
        { "chat", ctl_chat, "chat", "a conversation with the model on the terminal" },
        { "encode", ctl_encode, "encode [PROMPT|-]", "the embedding of a prompt" },
        { "abort", ctl_abort, "abort ID", "abort a request in flight" },
        { "pause", ctl_pause, "pause", "pause the engine" },
        { "resume", ctl_resume, "resume", "end a pause" },
        { "sleep", ctl_sleep, "sleep", "give back the engine's memory" },
        { "wake-up", ctl_wake_up, "wake-up", "take back what sleep gave back" },
        { "rpc", ctl_rpc, "rpc METHOD [JSON]", "call a method on every worker (collective_rpc)" },
        { "reset-prefix-cache", ctl_reset_prefix_cache, "reset-prefix-cache", "empty the prefix cache" },
        { "drain", ctl_drain, "drain", "wait until no request is in flight" },
        { "profile", ctl_profile, "profile start|stop", "record the engine's steps as a trace" },
        { "tokenize", ctl_tokenize, "tokenize [TEXT|-]", "the token ids of a text" },
        { "detokenize", ctl_detokenize, "detokenize ID...", "the text of token ids" },
        { "health", ctl_health, "health", "whether the engine is healthy, as the exit status" },
        { "status", ctl_status, "status", "model, state, requests, cache use and tokens/s" },
        { "list", ctl_list, "list", "the requests in flight" },
        { "metrics", ctl_metrics, "metrics", "the daemon's metrics, in the Prometheus format" },
};

#define N_COMMANDS (sizeof(commands) / sizeof(*commands))

static void help(void) {
        printf("Usage: asyncllmctl [--socket PATH | --bus system|user] COMMAND [OPTIONS] [ARGS]\n"
               "\n"
               "Talks to asyncllmd, the LLM inference daemon: generates text, holds a chat, and\n"
               "controls and inspects the engine.\n"
               "\n"
               "Options:\n"
               "      --socket PATH      the daemon's socket (default: $ASYNCLLM_SOCKET, else\n"
               "                         /run/asyncllm/asyncllmd.sock for root; for other users\n"
               "                         $XDG_RUNTIME_DIR/asyncllm/asyncllmd.sock when it exists,\n"
               "                         else the system one)\n"
               "      --bus system|user  talk to org.asyncllm.Engine1 on D-Bus instead\n"
               "  -h, --help             show this help\n"
               "  -V, --version          show the version\n"
               "\n"
               "Commands:\n");
        for (size_t i = 0; i < N_COMMANDS; i++)
                printf("  %-24s %s\n", commands[i].usage, commands[i].summary);
        printf("\n"
               "`asyncllmctl COMMAND --help` shows a command's options.\n"
               "\n"
               "Exit status:\n"
               "  0    success\n"
               "  1    the daemon refused or failed the request (invalid parameters, not found,\n"
               "       permission denied, too many requests, busy), or it was aborted by someone else\n"
               "  2    usage: a bad command, option or value\n"
               "  3    cannot connect to the daemon, or the connection was lost\n"
               "  4    the engine is dead\n"
               "  5    health: the engine is stalled\n"
               "  75   the daemon is overloaded: it refused a latency-sensitive request for now; try\n"
               "       again after the number of seconds the message gives\n"
               "  124  drain or rpc: the wait ended by its --timeout\n"
               "  130  interrupted by SIGINT (Ctrl-C), after aborting the request in the daemon\n"
               "  143  terminated by SIGTERM, likewise\n");
}

int main(int argc, char **argv) {
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                { "socket", required_argument, NULL, 's' },
                { "bus", required_argument, NULL, 'b' },
                {},
        };
        struct ctl ctl = { .program = "asyncllmctl", .signal_fd = -1 };
        int opt, status = -1;

        opterr = 0;
        /* "+": the first argument that is not an option is the command; the rest is its. */
        while ((opt = getopt_long(argc, argv, "+:hV", options, NULL)) >= 0) {
                switch (opt) {
                case 'h':
                        help();
                        return CTL_EXIT_OK;
                case 'V':
                        printf("asyncllmctl %s\n", PACKAGE_VERSION);
                        return CTL_EXIT_OK;
                case 's':
                        if (!*optarg)
                                return ctl_fail(&ctl, CTL_EXIT_USAGE, "--socket needs a path");
                        ctl.socket_path = optarg;
                        break;
                case 'b':
                        if (strcmp(optarg, "system") == 0)
                                ctl.bus = CTL_BUS_SYSTEM;
                        else if (strcmp(optarg, "user") == 0)
                                ctl.bus = CTL_BUS_USER;
                        else
                                return ctl_fail(&ctl, CTL_EXIT_USAGE, "--bus takes system or user, got '%s'", optarg);
                        break;
                default:
                        return ctl_option_failure(&ctl, opt, argv);
                }
        }
        if (ctl.socket_path && ctl.bus != CTL_BUS_NONE)
                return ctl_fail(&ctl, CTL_EXIT_USAGE, "--socket and --bus are two ways to the daemon: choose one");
        if (optind >= argc)
                return ctl_fail(&ctl, CTL_EXIT_USAGE, "no command given; `asyncllmctl --help` lists them");

        const char *name = argv[optind];
        for (size_t i = 0; i < N_COMMANDS; i++)
                if (strcmp(name, commands[i].name) == 0) {
                        ctl.command = commands[i].name;
                        status = commands[i].run(&ctl, argc - optind, argv + optind);
                        break;
                }
        if (status < 0)
                status = ctl_fail(&ctl, CTL_EXIT_USAGE, "unknown command '%s'; `asyncllmctl --help` lists them", name);
        if (fflush(stdout) != 0 && status == CTL_EXIT_OK)
                status = ctl_fail(&ctl, CTL_EXIT_REQUEST, "cannot write the output");
        asyncllm_client_free(ctl.client);
        sd_bus_flush_close_unref(ctl.sd_bus);
        if (ctl.signal_fd >= 0)
                close(ctl.signal_fd);
        return status;
}
