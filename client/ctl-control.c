/* SPDX-License-Identifier: MIT */
/* The commands that act on the engine or on one request: abort, pause, resume, sleep,
 * wake-up, rpc, reset-prefix-cache, drain and profile. They print nothing on success (rpc
 * prints its result, profile stop the trace's path); the exit status tells. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ctl-call.h"
#include "ctl-commands.h"

static const struct option help_only[] = {
        { "help", no_argument, NULL, 'h' },
        {},
};

/* Options of commands with only --help; returns -1 to go on, else an exit status. */
static int parse_help_only(struct ctl *ctl, int argc, char **argv, void (*help)(void)) {
        int opt;
        ctl_options_begin();
        while ((opt = getopt_long(argc, argv, ":h", help_only, NULL)) >= 0) {
                if (opt != 'h')
                        return ctl_option_failure(ctl, opt, argv);
                help();
                return CTL_EXIT_OK;
        }
        return -1;
}

static int no_more_arguments(struct ctl *ctl, int argc, char **argv, int expected) {
        if (argc - optind > expected)
                return ctl_fail(ctl, CTL_EXIT_USAGE, "unexpected argument '%s'; `%s %s --help` shows the usage",
                                argv[optind + expected], ctl->program, ctl->command);
        if (argc - optind < expected)
                return ctl_fail(ctl, CTL_EXIT_USAGE, "missing argument; `%s %s --help` shows the usage", ctl->program,
                                ctl->command);
        return -1;
}

/* Runs op with args (consumed), and prints nothing on success. */
static int call_quietly(struct ctl *ctl, const char *op, struct json_object *args) {
        int status = ctl_call(ctl, op, args, NULL);
        json_object_put(args);
        return status;
}

/* ---- abort ---- */

static void abort_help(void) {
        printf("Usage: asyncllmctl [--socket PATH | --bus system|user] abort [OPTIONS] ID\n"
               "\n"
               "Aborts the request ID; it ends with finish reason \"abort\". Ids are as `asyncllmctl list`\n"
               "shows them: requests of other connections as SERIAL/ID (your own uid's; root and the\n"
               "admin group may abort anyone's), D-Bus requests by the id Generate returned. Exit\n"
               "status 1 when no such request is in flight.\n"
               "\n"
               "Options:\n"
               "  -h, --help                        show this help\n");
}

int ctl_abort(struct ctl *ctl, int argc, char **argv) {
        struct json_object *args, *result = NULL;
        int status = parse_help_only(ctl, argc, argv, abort_help);
        if (status >= 0 || (status = no_more_arguments(ctl, argc, argv, 1)) >= 0)
                return status;
        const char *id = argv[optind];
        args = json_object_new_object();
        json_object_object_add(args, "request", json_object_new_string(id));
        status = ctl_call(ctl, "abort", args, &result);
        json_object_put(args);
        if (status == CTL_EXIT_OK && !json_object_get_boolean(ctl_json_member(result, "aborted")))
                status = ctl_fail(ctl, CTL_EXIT_REQUEST, "no request %s is in flight; `asyncllmctl list` shows the ids "
                                  "(of other connections as SERIAL/ID, to root and the admin group)", id);
        json_object_put(result);
        return status;
}

/* ---- pause, resume ---- */

static void pause_help(void) {
        printf("Usage: asyncllmctl [--socket PATH | --bus system|user] pause [OPTIONS]\n"
               "\n"
               "Pauses the engine: no request makes progress until `asyncllmctl resume`; new requests\n"
               "are accepted and wait. As vLLM's pause_generation, the prefix cache is cleared once\n"
               "paused unless --keep-cache is given. Needs root or the admin group.\n"
               "\n"
               "Options:\n"
               "      --mode abort|wait|keep        abort the requests in flight (default), wait for them to\n"
               "                                    finish first, or keep them frozen where they are\n"
               "      --keep-cache                  keep the prefix cache\n"
               "  -h, --help                        show this help\n");
}

int ctl_pause(struct ctl *ctl, int argc, char **argv) {
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "mode", required_argument, NULL, 'm' },
                { "keep-cache", no_argument, NULL, 'k' },
                {},
        };
        const char *mode = "abort";
        bool keep_cache = false;
        int opt, status;

        ctl_options_begin();
        while ((opt = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                if (opt == 'h') {
                        pause_help();
                        return CTL_EXIT_OK;
                } else if (opt == 'm') {
                        if (strcmp(optarg, "abort") != 0 && strcmp(optarg, "wait") != 0 && strcmp(optarg, "keep") != 0)
                                return ctl_fail(ctl, CTL_EXIT_USAGE, "--mode takes abort, wait or keep, got '%s'", optarg);
                        mode = optarg;
                } else if (opt == 'k')
                        keep_cache = true;
                else
                        return ctl_option_failure(ctl, opt, argv);
        }
        if ((status = no_more_arguments(ctl, argc, argv, 0)) >= 0)
                return status;
        struct json_object *args = json_object_new_object();
        json_object_object_add(args, "mode", json_object_new_string(mode));
        json_object_object_add(args, "clear_cache", json_object_new_boolean(!keep_cache));
        return call_quietly(ctl, "pause", args);
}

static void resume_help(void) {
        printf("Usage: asyncllmctl [--socket PATH | --bus system|user] resume [OPTIONS]\n"
               "\n"
               "Ends a pause: waiting and frozen requests go on. Needs root or the admin group.\n"
               "\n"
               "Options:\n"
               "  -h, --help                        show this help\n");
}

int ctl_resume(struct ctl *ctl, int argc, char **argv) {
        int status = parse_help_only(ctl, argc, argv, resume_help);
        if (status >= 0 || (status = no_more_arguments(ctl, argc, argv, 0)) >= 0)
                return status;
        return call_quietly(ctl, "resume", NULL);
}

/* ---- sleep, wake-up ---- */

static void sleep_help(void) {
        printf("Usage: asyncllmctl [--socket PATH | --bus system|user] sleep [OPTIONS]\n"
               "\n"
               "Gives the engine's memory back until `asyncllmctl wake-up`; running requests go back to\n"
               "waiting. Needs root or the admin group.\n"
               "\n"
               "Options:\n"
               "      --level 1|2                   1 frees the KV cache (default), 2 the weights too\n"
               "  -h, --help                        show this help\n");
}

int ctl_sleep(struct ctl *ctl, int argc, char **argv) {
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "level", required_argument, NULL, 'l' },
                {},
        };
        int opt, level = 1, status;

        ctl_options_begin();
        while ((opt = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                if (opt == 'h') {
                        sleep_help();
                        return CTL_EXIT_OK;
                } else if (opt == 'l') {
                        if (strcmp(optarg, "1") != 0 && strcmp(optarg, "2") != 0)
                                return ctl_fail(ctl, CTL_EXIT_USAGE, "--level takes 1 or 2, got '%s'", optarg);
                        level = optarg[0] - '0';
                } else
                        return ctl_option_failure(ctl, opt, argv);
        }
        if ((status = no_more_arguments(ctl, argc, argv, 0)) >= 0)
                return status;
        struct json_object *args = json_object_new_object();
        json_object_object_add(args, "level", json_object_new_int(level));
        return call_quietly(ctl, "sleep", args);
}

static void wake_up_help(void) {
        printf("Usage: asyncllmctl [--socket PATH | --bus system|user] wake-up [OPTIONS]\n"
               "\n"
               "Takes back the memory that `asyncllmctl sleep` gave back. Needs root or the admin group.\n"
               "\n"
               "Options:\n"
               "      --tags TAG[,TAG]              what to restore: weights, kv_cache (default: both)\n"
               "  -h, --help                        show this help\n");
}

int ctl_wake_up(struct ctl *ctl, int argc, char **argv) {
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "tags", required_argument, NULL, 't' },
                {},
        };
        struct json_object *tags = NULL;
        int opt, status;

        ctl_options_begin();
        while ((opt = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                if (opt == 'h') {
                        wake_up_help();
                        json_object_put(tags);
                        return CTL_EXIT_OK;
                }
                if (opt != 't') {
                        json_object_put(tags);
                        return ctl_option_failure(ctl, opt, argv);
                }
                json_object_put(tags);
                tags = json_object_new_array();
                char *copy = strdup(optarg), *save = NULL;
                for (char *tag = strtok_r(copy, ",", &save); tag; tag = strtok_r(NULL, ",", &save)) {
                        if (strcmp(tag, "weights") != 0 && strcmp(tag, "kv_cache") != 0) {
                                status = ctl_fail(ctl, CTL_EXIT_USAGE, "--tags takes weights and kv_cache, comma-separated; "
                                                  "'%s' is neither", tag);
                                free(copy);
                                json_object_put(tags);
                                return status;
                        }
                        json_object_array_add(tags, json_object_new_string(tag));
                }
                free(copy);
                if (json_object_array_length(tags) == 0) {
                        json_object_put(tags);
                        return ctl_fail(ctl, CTL_EXIT_USAGE, "--tags needs weights, kv_cache or both");
                }
        }
        if ((status = no_more_arguments(ctl, argc, argv, 0)) >= 0) {
                json_object_put(tags);
                return status;
        }
        struct json_object *args = json_object_new_object();
        if (tags)
                json_object_object_add(args, "tags", tags);
        return call_quietly(ctl, "wake_up", args);
}

/* ---- rpc, reset-prefix-cache ---- */

static void rpc_help(void) {
        printf("Usage: asyncllmctl [--socket PATH | --bus system|user] rpc [OPTIONS] METHOD [JSON]\n"
               "\n"
               "Calls METHOD on every worker of the engine (vLLM's collective_rpc) with JSON as its\n"
               "arguments, and prints the results as a JSON array, one entry per worker. Methods: ping,\n"
               "memory_usage, kv_cache_info, reset_prefix_cache. Needs root or the admin group.\n"
               "\n"
               "Options:\n"
               "      --timeout SECONDS             give up when the workers have not answered by then\n"
               "                                    (exit status 124); not over D-Bus\n"
               "  -h, --help                        show this help\n");
}

/* Options of commands with --help and --timeout SECONDS (more than 0 and at most a day, as
 * the daemon takes them); returns -1 to go on, else an exit status. */
static int parse_timeout_option(struct ctl *ctl, int argc, char **argv, void (*help)(void), double *timeout) {
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "timeout", required_argument, NULL, 't' },
                {},
        };
        int opt;
        ctl_options_begin();
        while ((opt = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                if (opt == 'h') {
                        help();
                        return CTL_EXIT_OK;
                }
                if (opt != 't')
                        return ctl_option_failure(ctl, opt, argv);
                char *end;
                errno = 0;
                double x = strtod(optarg, &end);
                if (errno || end == optarg || *end || !isfinite(x) || !(x > 0 && x <= 86400))
                        return ctl_fail(ctl, CTL_EXIT_USAGE,
                                        "--timeout takes seconds, more than 0 and at most 86400, got '%s'", optarg);
                *timeout = x;
        }
        return -1;
}

int ctl_rpc(struct ctl *ctl, int argc, char **argv) {
        struct json_object *result = NULL, *call_args = NULL;
        double timeout = 0;
        int status = parse_timeout_option(ctl, argc, argv, rpc_help, &timeout);
        if (status >= 0)
                return status;
        if (argc - optind < 1 || argc - optind > 2)
                return ctl_fail(ctl, CTL_EXIT_USAGE, "takes METHOD and optionally its arguments as JSON, such as: "
                                "asyncllmctl rpc ping, asyncllmctl rpc reset_prefix_cache '{\"preempt\": true}'");
        if (timeout > 0 && ctl->bus != CTL_BUS_NONE)
                return ctl_fail(ctl, CTL_EXIT_USAGE, "--timeout is the socket's: D-Bus's CollectiveRpc waits for the workers");
        if (argc - optind == 2) {
                enum json_tokener_error e;
                call_args = json_tokener_parse_verbose(argv[optind + 1], &e);
                if (e != json_tokener_success)
                        return ctl_fail(ctl, CTL_EXIT_USAGE, "the arguments are not JSON (%s): %s", json_tokener_error_desc(e),
                                        argv[optind + 1]);
        }
        struct json_object *args = json_object_new_object();
        json_object_object_add(args, "method", json_object_new_string(argv[optind]));
        if (call_args)
                json_object_object_add(args, "args", call_args);
        if (timeout > 0)
                json_object_object_add(args, "timeout", json_object_new_double(timeout));
        status = ctl_call(ctl, "collective_rpc", args, &result);
        json_object_put(args);
        if (status == CTL_EXIT_OK)
                printf("%s\n", json_object_to_json_string_ext(result, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(result);
        return status;
}

static void reset_prefix_cache_help(void) {
        printf("Usage: asyncllmctl [--socket PATH | --bus system|user] reset-prefix-cache [OPTIONS]\n"
               "\n"
               "Empties the prefix cache. It fails while running requests hold cached blocks, unless\n"
               "--preempt sends them back to waiting. Needs root or the admin group.\n"
               "\n"
               "Options:\n"
               "      --preempt                     preempt running requests to free their blocks\n"
               "  -h, --help                        show this help\n");
}

int ctl_reset_prefix_cache(struct ctl *ctl, int argc, char **argv) {
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "preempt", no_argument, NULL, 'p' },
                {},
        };
        bool preempt = false;
        int opt, status;

        ctl_options_begin();
        while ((opt = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                if (opt == 'h') {
                        reset_prefix_cache_help();
                        return CTL_EXIT_OK;
                } else if (opt == 'p')
                        preempt = true;
                else
                        return ctl_option_failure(ctl, opt, argv);
        }
        if ((status = no_more_arguments(ctl, argc, argv, 0)) >= 0)
                return status;
        struct json_object *args = json_object_new_object();
        json_object_object_add(args, "preempt", json_object_new_boolean(preempt));
        return call_quietly(ctl, "reset_prefix_cache", args);
}

/* ---- drain ---- */

static void drain_help(void) {
        printf("Usage: asyncllmctl [--socket PATH | --bus system|user] drain [OPTIONS]\n"
               "\n"
               "Waits until no request is in flight on any of the daemon's fronts (vLLM's\n"
               "wait_for_requests_to_drain). It neither pauses the engine nor refuses new requests:\n"
               "pause first for that. Exit status 124 when requests are still in flight at the timeout.\n"
               "\n"
               "Options:\n"
               "      --timeout SECONDS             how long to wait (default 300)\n"
               "  -h, --help                        show this help\n");
}

int ctl_drain(struct ctl *ctl, int argc, char **argv) {
        double timeout = 300;
        int status = parse_timeout_option(ctl, argc, argv, drain_help, &timeout);
        if (status >= 0 || (status = no_more_arguments(ctl, argc, argv, 0)) >= 0)
                return status;
        struct json_object *args = json_object_new_object();
        json_object_object_add(args, "timeout", json_object_new_double(timeout));
        return call_quietly(ctl, "wait_for_requests_to_drain", args);
}

/* ---- profile ---- */

static void profile_help(void) {
        printf("Usage: asyncllmctl [--socket PATH | --bus system|user] profile [OPTIONS] start|stop\n"
               "\n"
               "start begins recording the engine's steps (scheduling, the forward pass by layer and\n"
               "phase, sampling) and the frontend's detokenization; stop writes them as a Chrome trace\n"
               "(chrome://tracing, Perfetto) into the daemon's profile-dir and prints the file's path.\n"
               "Needs root or the admin group, and profile-dir set in the daemon.\n"
               "\n"
               "Options:\n"
               "  -h, --help                        show this help\n");
}

int ctl_profile(struct ctl *ctl, int argc, char **argv) {
        struct json_object *result = NULL;
        int status = parse_help_only(ctl, argc, argv, profile_help);
        if (status >= 0 || (status = no_more_arguments(ctl, argc, argv, 1)) >= 0)
                return status;
        const char *what = argv[optind];
        if (strcmp(what, "start") != 0 && strcmp(what, "stop") != 0)
                return ctl_fail(ctl, CTL_EXIT_USAGE, "takes start or stop, got '%s'", what);
        bool start = strcmp(what, "start") == 0;
        status = ctl_call(ctl, start ? "start_profile" : "stop_profile", NULL, &result);
        if (status == CTL_EXIT_OK && !start)
                printf("%s\n", json_object_get_string(ctl_json_member(result, "path")));
        json_object_put(result);
        return status;
}
