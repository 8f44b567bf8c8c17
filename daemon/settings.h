/* SPDX-License-Identifier: MIT */
#pragma once

/* asyncllmd's settings: command-line flags with vLLM's names and asyncllmd.conf(5), whose keys are
 * the same names without the leading dashes. A flag beats the file, the file beats the default.
 *
 * Startup, in this order (each step returns 0 or a negative errno with a message in err that
 * names the key, the value and what is allowed):
 *
 *     daemon_settings_init()        defaults
 *     daemon_settings_parse_argv()  flags; a failure is a usage error (exit status 2)
 *     daemon_settings_load_file()   --config FILE, else the default file if it exists
 *     daemon_settings_resolve()     model, socket and thread defaults, cross-checks
 *
 * The engine settings are checked here as far as they can be without the model;
 * engine_config_finalize() does the rest once the model's context length is known.
 *
 * On SIGHUP, daemon_settings_reload() builds the settings again from the same argv and the file as
 * it is now, and says which keys changed: the reloadable ones take effect with
 * daemon_settings_apply_reload(), the others need a restart. So the daemon keeps argc/argv. */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "engine-config.h"
#include "error.h"

/* The most keys there are; the table in settings.c has fewer (checked at compile time). */
#define DAEMON_SETTINGS_MAX_KEYS 64

enum daemon_bus {
        DAEMON_BUS_NONE,
        DAEMON_BUS_SYSTEM,
        DAEMON_BUS_USER,
};

/* What the command line asked for besides running. */
enum daemon_settings_action {
        DAEMON_SETTINGS_RUN,
        DAEMON_SETTINGS_HELP,    /* --help, -h: print daemon_settings_help() and exit 0 */
        DAEMON_SETTINGS_VERSION, /* --version, -V: print the version and exit 0 */
        DAEMON_SETTINGS_PRINT,   /* --print-settings: load and resolve all, print daemon_settings_dump(), exit 0 */
};

struct daemon_settings {
        /* max-num-seqs, max-num-batched-tokens, enable-chunked-prefill, long-prefill-token-threshold,
         * max-model-len, block-size, kv-cache-space, enable-prefix-caching, scheduling-policy,
         * slo-admission, default-slo, default-ttft-slo, slo-kv-reserve, slo-aim-factor, seed, max-logprobs,
         * decode-stall-limit */
        struct engine_config engine;

        char *model;                  /* path of the GGUF file; set by daemon_settings_resolve() */
        char *chat_template;          /* a file whose text replaces the model's chat template; NULL: none */
        const char *device;           /* "cpu", the only device that serves (a static string) */
        uint32_t threads;             /* 0 = online CPUs; never 0 after daemon_settings_resolve() */
        char *socket;                 /* path; set by daemon_settings_resolve() */
        char *host;                   /* the HTTP front's address; NULL: 127.0.0.1 */
        uint32_t port;                /* the HTTP front's port; 0 (and no host): none */
        char *served_model_name;      /* NULL: the model file's name */
        char *api_key;                /* the HTTP front's key; NULL: none */
        char *api_key_file;           /* a file holding it */
        char *allowed_origins;        /* CORS, as "a, b" ("*": any); NULL: no CORS headers */
        char *allowed_methods;        /* CORS, as "GET, POST" ("*": whichever a preflight asks) */
        char *allowed_headers;        /* CORS, likewise */
        bool allow_credentials;       /* CORS: Access-Control-Allow-Credentials */
        bool enable_admin_http;       /* the admin routes, for holders of the admin key */
        char *admin_api_key;          /* the admin routes' key; NULL: none */
        char *admin_api_key_file;     /* a file holding it */
        enum daemon_bus bus;
        char *config;                 /* the file read (or to read); NULL when there is none */
        int log_level;                /* LOG_EMERG..LOG_DEBUG */
        double shutdown_timeout;      /* seconds to drain requests in flight on SIGTERM */
        double health_stall_timeout;  /* seconds without engine progress, work pending, before health fails */
        uint64_t max_line_bytes;      /* longest protocol line accepted from a client */
        uint32_t max_requests_per_connection;
        uint32_t max_requests_per_uid;
        uint32_t max_connections;
        double client_timeout;        /* seconds a client may stop reading before it is disconnected */
        char *admin_group;
        char *service_group;
        char *profile_dir;            /* where stop_profile writes its trace; NULL: profiling refused */

        /* Bookkeeping. */
        enum daemon_settings_action action;
        const char *default_config;   /* read when --config is absent and it exists; NULL: none */
        uint64_t from_command_line;   /* bit i: the key at index i was given as a flag */
        uint64_t from_file;           /* bit i: the key at index i was set by the file */
};

/* Which keys a reload changed (static key names, in the table's order). */
struct daemon_settings_changes {
        const char *applied[DAEMON_SETTINGS_MAX_KEYS];      /* reloadable: take effect now */
        unsigned n_applied;
        const char *need_restart[DAEMON_SETTINGS_MAX_KEYS]; /* not reloadable: need a restart */
        unsigned n_need_restart;
};

/* The defaults (engine_config_init_default() for the engine). Returns 0 or -ENOMEM. */
int daemon_settings_init(struct daemon_settings *s);
/* Frees the strings; safe on a zeroed or already freed struct. */
void daemon_settings_done(struct daemon_settings *s);

/* Both "--key value" and "--key=value"; booleans as --key, --key=BOOL and --no-key. A key given
 * twice takes its last value. Sets s->action for --help and --version (and stops there). Any
 * error (unknown option, missing value, bad value, stray argument) is a usage error. Not
 * reentrant (getopt_long). */
int daemon_settings_parse_argv(struct daemon_settings *s, int argc, char **argv, struct error *err);

/* Reads s->config when --config named it (it must exist), else s->default_config when that
 * exists (s->config is then set to it). Keys given on the command line keep their value, but
 * the file's value for them must still be valid. */
int daemon_settings_load_file(struct daemon_settings *s, struct error *err);

/* Fills what has no fixed default and checks settings against each other:
 * - model: $ASYNCLLM_SOURCE_DIR/models/<default> if that file exists (a source tree), else
 *   /var/lib/asyncllm/models/<default>;
 * - socket: daemon_settings_default_socket(geteuid());
 * - threads: 0 becomes the number of online CPUs;
 * - max-num-batched-tokens is raised to max-num-seqs when it was not set, else it must be at
 *   least max-num-seqs; likewise to max-model-len without chunked prefill. */
int daemon_settings_resolve(struct daemon_settings *s, struct error *err);

/* init + parse_argv + load_file + resolve; *ret_usage (may be NULL) tells a usage error apart.
 * On failure s holds nothing to free. */
int daemon_settings_load(struct daemon_settings *s, int argc, char **argv, bool *ret_usage, struct error *err);

/* The socket when none is set: $RUNTIME_DIRECTORY/asyncllmd.sock (the first of several ':'
 * separated directories), else /run/asyncllm/asyncllmd.sock for euid 0, else
 * $XDG_RUNTIME_DIR/asyncllm/asyncllmd.sock; an error when none applies. *ret is malloc()ed. */
int daemon_settings_default_socket(uid_t euid, char **ret, struct error *err);

/* The model when none is set: source_dir/models/<default> if it exists (source_dir may be NULL),
 * else the installed one. *ret is malloc()ed. Returns 0 or -ENOMEM. */
int daemon_settings_default_model(const char *source_dir, char **ret);

/* Builds *next from the same argv and the file as it is now (with current's default_config)
 * and lists in *changes the keys whose value differs from current. On failure (the file has
 * become invalid, say) next holds nothing to free and current stays as it is. */
int daemon_settings_reload(const struct daemon_settings *current, int argc, char **argv,
                           struct daemon_settings *next, struct daemon_settings_changes *changes,
                           struct error *err);

/* Moves the reloadable keys' values from next into current and frees next. The others stay as
 * they are (and their strings at the same addresses). */
void daemon_settings_apply_reload(struct daemon_settings *current, struct daemon_settings *next);

/* The i-th key in the table's order (flags' and keys' names without "--"), NULL past the last. */
const char *daemon_settings_key(size_t i);
/* Whether key names a setting, and whether SIGHUP reloads it. */
bool daemon_settings_key_exists(const char *key);
bool daemon_settings_key_reloadable(const char *key);

/* A key's value as asyncllmd.conf would write it ("64", "true", "256MiB", "(none)" for an unset
 * path). Returns 0, or -ENOENT for an unknown key; a value too long for buf is cut. */
int daemon_settings_format(const struct daemon_settings *s, const char *key, char *buf, size_t size);

/* Every key as "key = value" lines in the file's syntax, grouped under comments that say where the
 * values came from (command line, file, defaults), for debugging. */
void daemon_settings_dump(const struct daemon_settings *s, FILE *f);

/* The --help text: every flag, its argument, a line of help and its default. */
void daemon_settings_help(FILE *f, const char *program);

const char *daemon_bus_to_string(enum daemon_bus bus);
