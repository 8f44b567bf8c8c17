/* SPDX-License-Identifier: MIT */
/* The commands that only read: health (whose answer is the exit status), status (a table
 * for people, JSON for programs), list and metrics. */
#include "config.h"

#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl-call.h"
#include "ctl-commands.h"

/* status measures tokens/s over this many seconds: the daemon's counters, read twice. */
#define RATE_INTERVAL_SEC 1

#define COLOUR_GREEN "\033[32m"
#define COLOUR_YELLOW "\033[33m"
#define COLOUR_RED "\033[31m"
#define COLOUR_OFF "\033[0m"

/* --help and --json, the options of every command here; returns -1 to go on, else an
 * exit status. */
static int parse_json_option(struct ctl *ctl, int argc, char **argv, void (*help)(void), bool *json) {
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "json", no_argument, NULL, 'j' },
                {},
        };
        int opt;
        ctl_options_begin();
        while ((opt = getopt_long(argc, argv, ":h", options, NULL)) >= 0) {
                if (opt == 'h') {
                        help();
                        return CTL_EXIT_OK;
                }
                if (opt != 'j' || !json)
                        return ctl_option_failure(ctl, opt, argv);
                *json = true;
        }
        if (optind < argc)
                return ctl_fail(ctl, CTL_EXIT_USAGE, "takes no arguments, got '%s'", argv[optind]);
        return -1;
}

static void print_json(struct json_object *o) {
        printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
}

static const char *state_colour(const char *state) {
        if (strcmp(state, "running") == 0 || strcmp(state, "ok") == 0)
                return COLOUR_GREEN;
        if (strcmp(state, "dead") == 0)
                return COLOUR_RED;
        return COLOUR_YELLOW;
}

/* A state word, coloured for a terminal. */
static void print_state(const char *state) {
        if (ctl_use_colour(stdout))
                printf("%s%s%s\n", state_colour(state), state, COLOUR_OFF);
        else
                printf("%s\n", state);
}

/* ---- health ---- */

static void health_help(void) {
        printf("Usage: asyncllmctl [--socket PATH | --bus system|user] health [OPTIONS]\n"
               "\n"
               "Asks whether the engine is healthy and prints ok, stalled or dead (with the reason).\n"
               "The answer is the exit status: 0 ok, 5 stalled (work is pending and no engine step has\n"
               "completed for the daemon's health-stall-timeout), 4 dead, 3 no answer.\n"
               "\n"
               "Options:\n"
               "      --json                        print the daemon's answer as JSON\n"
               "  -h, --help                        show this help\n");
}

int ctl_health(struct ctl *ctl, int argc, char **argv) {
        struct json_object *result = NULL;
        bool json = false;
        int status = parse_json_option(ctl, argc, argv, health_help, &json);
        if (status >= 0 || (status = ctl_call(ctl, "health", NULL, &result)) != CTL_EXIT_OK)
                return status;
        const char *state = json_object_get_string(ctl_json_member(result, "status"));
        const char *message = json_object_get_string(ctl_json_member(result, "message"));
        bool healthy = json_object_get_boolean(ctl_json_member(result, "healthy"));
        if (json)
                print_json(result);
        else {
                print_state(state ? state : healthy ? "ok" : "unhealthy");
                if (!healthy && message && *message)
                        printf("%s\n", message);
        }
        status = healthy ? CTL_EXIT_OK : state && strcmp(state, "dead") == 0 ? CTL_EXIT_ENGINE_DEAD : CTL_EXIT_UNHEALTHY;
        json_object_put(result);
        return status;
}

/* ---- status ---- */

static void status_help(void) {
        printf("Usage: asyncllmctl [--socket PATH | --bus system|user] status [OPTIONS]\n"
               "\n"
               "Shows the model, the engine's state, the requests running and waiting, the KV cache's\n"
               "use, the prefix cache's hit rate (since the daemon started), the tokens per second\n"
               "(measured over one second) and the scheduling policy; under the slo policy also the\n"
               "latency-sensitive requests refused and demoted, and how well it predicts step times.\n"
               "\n"
               "Options:\n"
               "      --json                        one JSON object: the daemon's stats, plus model,\n"
               "                                    kv_cache_usage, prefix_cache_hit_rate,\n"
               "                                    prompt_tokens_per_second and generation_tokens_per_second\n"
               "  -h, --help                        show this help\n");
}

static double number(struct json_object *stats, const char *key) {
        struct json_object *v = ctl_json_member(stats, key);
        return v && (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double))
                       ? json_object_get_double(v)
                       : NAN;
}

static double seconds_now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void set_number(struct json_object *o, const char *key, double v) {
        json_object_object_add(o, key, isnan(v) ? NULL : json_object_new_double(v));
}

static void print_row(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void print_row(const char *name, const char *fmt, ...) {
        va_list ap;
        printf("%-22s ", name);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        putchar('\n');
}

int ctl_status(struct ctl *ctl, int argc, char **argv) {
        struct json_object *model = NULL, *before = NULL, *stats = NULL;
        bool json = false;
        int status = parse_json_option(ctl, argc, argv, status_help, &json);
        if (status >= 0)
                return status;
        if ((status = ctl_call(ctl, "model", NULL, &model)) != CTL_EXIT_OK ||
            (status = ctl_call(ctl, "stats", NULL, &before)) != CTL_EXIT_OK)
                goto finish;
        double start = seconds_now();
        nanosleep(&(struct timespec) { .tv_sec = RATE_INTERVAL_SEC }, NULL);
        if ((status = ctl_call(ctl, "stats", NULL, &stats)) != CTL_EXIT_OK)
                goto finish;
        double elapsed = seconds_now() - start;

        double prompt_rate = (number(stats, "prompt_tokens") - number(before, "prompt_tokens")) / elapsed;
        double generation_rate = (number(stats, "generation_tokens") - number(before, "generation_tokens")) / elapsed;
        double usage = number(stats, "kv_cache_usage");
        if (isnan(usage) && number(stats, "kv_blocks_total") > 0)
                usage = number(stats, "kv_blocks_used") / number(stats, "kv_blocks_total");
        double queries = number(stats, "prefix_cache_queries"), hits = number(stats, "prefix_cache_hits");
        double hit_rate = queries > 0 ? hits / queries : queries == 0 ? 0 : NAN;
        const char *model_name = json_object_get_string(ctl_json_member(model, "name"));
        const char *state = json_object_get_string(ctl_json_member(stats, "state"));

        if (json) {
                json_object_object_add(stats, "model", json_object_get(ctl_json_member(model, "name")));
                set_number(stats, "kv_cache_usage", usage);
                set_number(stats, "prefix_cache_hit_rate", hit_rate);
                set_number(stats, "prompt_tokens_per_second", prompt_rate);
                set_number(stats, "generation_tokens_per_second", generation_rate);
                print_json(stats);
                goto finish;
        }
        const char *device = json_object_get_string(ctl_json_member(model, "device"));
        if (device)
                print_row("Model:", "%s (%s)", model_name ? model_name : "?", device);
        else
                print_row("Model:", "%s", model_name ? model_name : "?");
        printf("%-22s ", "State:");
        print_state(state ? state : "?");
        print_row("Running:", "%.0f", number(stats, "num_requests_running"));
        print_row("Waiting:", "%.0f", number(stats, "num_requests_waiting"));
        if (isnan(usage))
                print_row("KV cache usage:", "-");
        else
                print_row("KV cache usage:", "%.1f%% (%.0f of %.0f blocks)", usage * 100, number(stats, "kv_blocks_used"),
                          number(stats, "kv_blocks_total"));
        if (isnan(hit_rate))
                print_row("Prefix cache hit rate:", "-");
        else
                print_row("Prefix cache hit rate:", "%.1f%% (%.0f of %.0f prompt tokens)", hit_rate * 100, hits, queries);
        double mib = 1024.0 * 1024.0, device_total = number(stats, "device_memory_total_bytes");
        if (!isnan(number(stats, "memory_weights_bytes")))
                print_row("Memory:", "weights %.1f MiB, KV cache %.1f MiB", number(stats, "memory_weights_bytes") / mib,
                          number(stats, "memory_kv_cache_bytes") / mib);
        if (device_total > 0)
                print_row("Device memory:", "%.1f of %.1f GiB used", (device_total - number(stats, "device_memory_free_bytes")) / (1024 * mib),
                          device_total / (1024 * mib));
        print_row("Prompt tokens/s:", "%.1f", prompt_rate);
        print_row("Generation tokens/s:", "%.1f", generation_rate);
        const char *policy = json_object_get_string(ctl_json_member(stats, "scheduling_policy"));
        if (policy)
                print_row("Scheduling policy:", "%s", policy);
        if (policy && strcmp(policy, "slo") == 0) {
                double samples = number(stats, "step_model_samples");
                print_row("SLO admission:", "%.0f refused, %.0f demoted to best-effort", number(stats, "slo_rejected"),
                          number(stats, "slo_demoted"));
                if (samples > 0)
                        print_row("Step model error:", "%.1f%% median, %.1f%% p99 (%.0f steps)",
                                  number(stats, "step_model_error_p50") * 100, number(stats, "step_model_error_p99") * 100,
                                  samples);
                else
                        print_row("Step model error:", "- (no steps measured yet)");
        }
finish:
        json_object_put(model);
        json_object_put(before);
        json_object_put(stats);
        return status;
}

/* ---- list, metrics ---- */

static void list_help(void) {
        printf("Usage: asyncllmctl [--socket PATH | --bus system|user] list [OPTIONS]\n"
               "\n"
               "Lists the requests in flight, one id per line, newest first, as `asyncllmctl abort`\n"
               "takes them (other connections' as SERIAL/ID). Root and the admin group see every\n"
               "request; other users only their own uid's.\n"
               "\n"
               "Options:\n"
               "      --json                        print the daemon's answer as JSON\n"
               "  -h, --help                        show this help\n");
}

int ctl_list(struct ctl *ctl, int argc, char **argv) {
        struct json_object *result = NULL;
        bool json = false;
        int status = parse_json_option(ctl, argc, argv, list_help, &json);
        if (status >= 0 || (status = ctl_call(ctl, "list", NULL, &result)) != CTL_EXIT_OK)
                return status;
        struct json_object *requests = ctl_json_member(result, "requests");
        if (json)
                print_json(result);
        else
                for (size_t i = 0; i < json_object_array_length(requests); i++)
                        printf("%s\n", json_object_get_string(json_object_array_get_idx(requests, i)));
        json_object_put(result);
        return CTL_EXIT_OK;
}

static void metrics_help(void) {
        printf("Usage: asyncllmctl [--socket PATH | --bus system|user] metrics [OPTIONS]\n"
               "\n"
               "Prints the daemon's metrics in the Prometheus text format, under vLLM's names.\n"
               "\n"
               "Options:\n"
               "  -h, --help                        show this help\n");
}

int ctl_metrics(struct ctl *ctl, int argc, char **argv) {
        struct json_object *result = NULL;
        int status = parse_json_option(ctl, argc, argv, metrics_help, NULL);
        if (status >= 0 || (status = ctl_call(ctl, "metrics", NULL, &result)) != CTL_EXIT_OK)
                return status;
        const char *text = json_object_get_string(ctl_json_member(result, "text"));
        fputs(text ? text : "", stdout);
        if (text && *text && text[strlen(text) - 1] != '\n')
                putchar('\n');
        json_object_put(result);
        return CTL_EXIT_OK;
}
