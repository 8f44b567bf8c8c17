/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>
#include <unistd.h>

#include <json-c/json.h>

#include "log.h"
#include "name-table.h"
#include "settings.h"

#ifndef ASYNCLLM_CONFIG_FILE
#define ASYNCLLM_CONFIG_FILE "/etc/asyncllm/asyncllmd.conf"
#endif
#ifndef ASYNCLLM_STATE_DIR
#define ASYNCLLM_STATE_DIR "/var/lib/asyncllm"
#endif
#define DEFAULT_MODEL_NAME "SmolLM2-135M-Instruct.Q4_1.gguf"
#define SOCKET_NAME "asyncllmd.sock"
#define SOCKET_PATH_MAX (sizeof(((struct sockaddr_un *) 0)->sun_path) - 1)
#define GROUP_NAME_MAX 31
#define MAX_THREADS 4096

/* What a value is, how it is parsed and where it is stored. */
enum setting_type {
        SETTING_BOOL,        /* bool */
        SETTING_U32,         /* uint32_t in [min, max] */
        SETTING_U64,         /* uint64_t in [min, max] */
        SETTING_I32,         /* int32_t in [min, max] (non-negative) */
        SETTING_SIZE,        /* uint64_t bytes in [min, max], with an optional unit suffix */
        SETTING_SECONDS,     /* double in [dmin, dmax], or (dmin, dmax] with dmin_open */
        SETTING_FACTOR,      /* double: 0 (what .zero says), or in (1, 1000] */
        SETTING_FRACTION,    /* double in [0, 1) */
        SETTING_PATH,        /* char *, malloc()ed; at most max bytes when max > 0 */
        SETTING_GROUP,       /* char *, malloc()ed; a group name */
        SETTING_CHOICE,      /* an int-sized enum: the index of the value in choices */
        SETTING_NAME,        /* const char *: the entry of choices itself (static) */
        SETTING_LOG_LEVEL,   /* int: LOG_EMERG..LOG_DEBUG by syslog's names */
        SETTING_LIST,        /* char *, malloc()ed: a JSON list of strings or a comma-separated one,
                              * stored as "a, b" (the form HTTP headers take) */
};

enum setting_id {
        KEY_MODEL,
        KEY_CHAT_TEMPLATE,
        KEY_DEVICE,
        KEY_TENSOR_PARALLEL_SIZE,
        KEY_THREADS,
        KEY_MAX_NUM_SEQS,
        KEY_MAX_NUM_BATCHED_TOKENS,
        KEY_ENABLE_CHUNKED_PREFILL,
        KEY_LONG_PREFILL_TOKEN_THRESHOLD,
        KEY_MAX_MODEL_LEN,
        KEY_BLOCK_SIZE,
        KEY_KV_CACHE_SPACE,
        KEY_GPU_MEMORY_UTILIZATION,
        KEY_ENFORCE_EAGER,
        KEY_ENABLE_PREFIX_CACHING,
        KEY_SCHEDULING_POLICY,
        KEY_SLO_ADMISSION,
        KEY_DEFAULT_SLO,
        KEY_DEFAULT_TTFT_SLO,
        KEY_SLO_KV_RESERVE,
        KEY_SLO_AIM_FACTOR,
        KEY_SEED,
        KEY_MAX_LOGPROBS,
        KEY_DECODE_STALL_LIMIT,
        KEY_SOCKET,
        KEY_HOST,
        KEY_PORT,
        KEY_SERVED_MODEL_NAME,
        KEY_API_KEY,
        KEY_API_KEY_FILE,
        KEY_ALLOWED_ORIGINS,
        KEY_ALLOWED_METHODS,
        KEY_ALLOWED_HEADERS,
        KEY_ALLOW_CREDENTIALS,
        KEY_ENABLE_ADMIN_HTTP,
        KEY_ADMIN_API_KEY,
        KEY_ADMIN_API_KEY_FILE,
        KEY_BUS,
        KEY_CONFIG,
        KEY_LOG_LEVEL,
        KEY_SHUTDOWN_TIMEOUT,
        KEY_HEALTH_STALL_TIMEOUT,
        KEY_MAX_LINE_BYTES,
        KEY_MAX_REQUESTS_PER_CONNECTION,
        KEY_MAX_REQUESTS_PER_UID,
        KEY_MAX_CONNECTIONS,
        KEY_CLIENT_TIMEOUT,
        KEY_ADMIN_GROUP,
        KEY_SERVICE_GROUP,
        KEY_PROFILE_DIR,
        N_KEYS,
};

_Static_assert(N_KEYS <= DAEMON_SETTINGS_MAX_KEYS, "too many keys for the masks");
_Static_assert(sizeof(enum scheduling_policy) == sizeof(int), "scheduling_policy is stored as an int");
_Static_assert(sizeof(enum slo_admission) == sizeof(int), "slo_admission is stored as an int");
_Static_assert(sizeof(enum daemon_bus) == sizeof(int), "daemon_bus is stored as an int");
_Static_assert(LOG_EMERG == 0 && LOG_DEBUG == 7, "syslog levels");

#define BIT(id) (UINT64_C(1) << (id))

struct setting {
        const char *key;            /* the flag without "--" and the file's key */
        enum setting_type type;
        size_t offset;              /* in struct daemon_settings */
        uint64_t min, max;          /* integers and sizes; the longest path */
        double dmin, dmax;          /* seconds */
        bool dmin_open;             /* dmin itself is out of range (an SLO of 0 s means nothing) */
        const char *zero;           /* what 0 means, when it means something special */
        const char *const *choices; /* SETTING_CHOICE, SETTING_NAME; NULL-terminated */
        const char *negated;        /* SETTING_BOOL: the flag that sets false */
        bool reloadable;            /* SIGHUP applies a new value */
        bool flag_only;             /* not a key of the file */
        const char *arg;            /* the value's name in --help */
        const char *help;
        const char *default_text;   /* for --help, when the default is worked out at startup */
};

#define FIELD(f) offsetof(struct daemon_settings, f)
#define KiB UINT64_C(1024)
#define MiB (KiB * 1024)
#define GiB (MiB * 1024)
#define TiB (GiB * 1024)

static const char *const device_names[] = { "cpu", "cuda", NULL };
static const char *const bus_names[] = {
        [DAEMON_BUS_NONE] = "none", [DAEMON_BUS_SYSTEM] = "system", [DAEMON_BUS_USER] = "user", NULL,
};

static const struct setting table[N_KEYS] = {
        [KEY_MODEL] = {
                "model", SETTING_PATH, FIELD(model), .arg = "PATH",
                .help = "the GGUF model to serve",
                .default_text = "models/" DEFAULT_MODEL_NAME " in a source tree, else "
                                ASYNCLLM_STATE_DIR "/models/" DEFAULT_MODEL_NAME,
        },
        [KEY_CHAT_TEMPLATE] = {
                "chat-template", SETTING_PATH, FIELD(chat_template), .max = 4096, .arg = "PATH",
                .help = "a file whose Jinja chat template replaces the model's",
                .default_text = "the model's own",
        },
        [KEY_DEVICE] = {
                "device", SETTING_NAME, FIELD(device), .choices = device_names, .arg = "cpu|cuda",
                .help = "where the model runs: the CPU, or the first NVIDIA GPU",
        },
        [KEY_TENSOR_PARALLEL_SIZE] = {
                "tensor-parallel-size", SETTING_U32, FIELD(engine.tensor_parallel_size), .min = 1, .max = 64,
                .arg = "N", .help = "GPUs the model is split over, one rank each (--device cuda)",
        },
        [KEY_THREADS] = {
                "threads", SETTING_U32, FIELD(threads), .min = 0, .max = MAX_THREADS, .zero = "online CPUs",
                .arg = "N", .help = "CPU threads of the forward pass",
        },
        [KEY_MAX_NUM_SEQS] = {
                "max-num-seqs", SETTING_U32, FIELD(engine.max_num_seqs), .min = 1, .max = 4096, .arg = "N",
                .help = "requests running at once",
        },
        [KEY_MAX_NUM_BATCHED_TOKENS] = {
                "max-num-batched-tokens", SETTING_U32, FIELD(engine.max_num_batched_tokens), .min = 1,
                .max = UINT32_C(1) << 20, .arg = "N", .help = "tokens per engine step",
        },
        [KEY_ENABLE_CHUNKED_PREFILL] = {
                "enable-chunked-prefill", SETTING_BOOL, FIELD(engine.enable_chunked_prefill),
                .negated = "no-enable-chunked-prefill", .arg = "BOOL",
                .help = "split long prompts over several steps",
        },
        [KEY_LONG_PREFILL_TOKEN_THRESHOLD] = {
                "long-prefill-token-threshold", SETTING_U32, FIELD(engine.long_prefill_token_threshold), .min = 0,
                .max = UINT32_C(1) << 20, .zero = "no cap", .arg = "N",
                .help = "the most tokens one prompt chunk takes",
        },
        [KEY_MAX_MODEL_LEN] = {
                "max-model-len", SETTING_U32, FIELD(engine.max_model_len), .min = 0, .max = UINT32_C(1) << 24,
                .zero = "the model's context length", .arg = "N", .help = "the longest prompt + output in tokens",
        },
        [KEY_BLOCK_SIZE] = {
                "block-size", SETTING_U32, FIELD(engine.block_size), .min = 1, .max = 1024, .arg = "N",
                .help = "tokens per KV cache block",
        },
        [KEY_KV_CACHE_SPACE] = {
                "kv-cache-space", SETTING_SIZE, FIELD(engine.kv_cache_space), .min = MiB, .max = 16 * TiB,
                .arg = "BYTES", .help = "memory for the KV cache (K, M, G, T = 1000^n; KiB, MiB, GiB, TiB = 1024^n)",
        },
        [KEY_GPU_MEMORY_UTILIZATION] = {
                "gpu-memory-utilization", SETTING_FRACTION, FIELD(engine.gpu_memory_utilization), .arg = "FRACTION",
                .help = "cuda: the share of the GPU's memory to take, KV cache included (0 = kv-cache-space)",
        },
        [KEY_ENFORCE_EAGER] = {
                "enforce-eager", SETTING_BOOL, FIELD(engine.enforce_eager), .negated = "no-enforce-eager", .arg = "BOOL",
                .help = "cuda: launch every step's kernels one by one, never replaying CUDA graphs",
        },
        [KEY_ENABLE_PREFIX_CACHING] = {
                "enable-prefix-caching", SETTING_BOOL, FIELD(engine.enable_prefix_caching),
                .negated = "no-enable-prefix-caching", .arg = "BOOL", .help = "reuse the KV blocks of shared prefixes",
        },
        [KEY_SCHEDULING_POLICY] = {
                "scheduling-policy", SETTING_CHOICE, FIELD(engine.scheduling_policy), .choices = scheduling_policy_names,
                .arg = "fcfs|priority|slo", .help = "the order waiting requests are admitted in",
        },
        [KEY_SLO_ADMISSION] = {
                "slo-admission", SETTING_CHOICE, FIELD(engine.slo_admission), .choices = slo_admission_names,
                .arg = "reject|demote",
                .help = "slo policy: refuse or demote a request whose SLO it cannot meet",
        },
        [KEY_DEFAULT_SLO] = {
                "default-slo", SETTING_SECONDS, FIELD(engine.default_slo), .dmin = 0, .dmax = 3600, .dmin_open = true,
                .arg = "SECONDS", .help = "slo policy: seconds per output token when a request gives none",
        },
        [KEY_DEFAULT_TTFT_SLO] = {
                "default-ttft-slo", SETTING_SECONDS, FIELD(engine.default_ttft_slo), .dmin = 0, .dmax = 3600,
                .dmin_open = true, .arg = "SECONDS",
                .help = "slo policy: seconds to the first token when a request gives none",
        },
        [KEY_SLO_KV_RESERVE] = {
                "slo-kv-reserve", SETTING_FRACTION, FIELD(engine.slo_kv_reserve), .arg = "FRACTION",
                .help = "slo policy: the share of KV blocks best-effort requests may not take",
        },
        [KEY_SLO_AIM_FACTOR] = {
                "slo-aim-factor", SETTING_FACTOR, FIELD(engine.slo_aim_factor), .zero = "at the slo", .arg = "X",
                .help = "slo policy: aim latency-sensitive tokens at their step + X-1 one-decode steps, within the slo",
        },
        [KEY_SEED] = {
                "seed", SETTING_U64, FIELD(engine.seed), .min = 0, .max = UINT64_MAX, .arg = "N",
                .help = "seeds requests that bring no seed of their own",
        },
        [KEY_MAX_LOGPROBS] = {
                "max-logprobs", SETTING_I32, FIELD(engine.max_logprobs), .min = 0, .max = UINT32_C(1) << 20,
                .arg = "N", .help = "the most logprobs a request may ask for",
        },
        [KEY_DECODE_STALL_LIMIT] = {
                "decode-stall-limit", SETTING_FACTOR, FIELD(engine.decode_stall_limit), .zero = "no limit", .arg = "X",
                .help = "with decodes running, 99 steps in 100 take at most X times a decode-only step (0 = no limit)",
        },
        [KEY_SOCKET] = {
                "socket", SETTING_PATH, FIELD(socket), .max = SOCKET_PATH_MAX, .arg = "PATH",
                .help = "the listening Unix socket when not socket-activated",
                .default_text = "$RUNTIME_DIRECTORY/" SOCKET_NAME ", /run/asyncllm/" SOCKET_NAME
                                " for root, else $XDG_RUNTIME_DIR/asyncllm/" SOCKET_NAME,
        },
        [KEY_BUS] = {
                "bus", SETTING_CHOICE, FIELD(bus), .choices = bus_names, .arg = "none|system|user",
                .help = "the D-Bus bus to serve org.asyncllm.Engine1 on",
        },
        [KEY_CONFIG] = {
                "config", SETTING_PATH, FIELD(config), .flag_only = true, .arg = "PATH",
                .help = "the configuration file", .default_text = ASYNCLLM_CONFIG_FILE " if it exists",
        },
        [KEY_LOG_LEVEL] = {
                "log-level", SETTING_LOG_LEVEL, FIELD(log_level), .reloadable = true, .arg = "LEVEL",
                .help = "the least important messages logged (emerg ... debug)",
        },
        [KEY_SHUTDOWN_TIMEOUT] = {
                "shutdown-timeout", SETTING_SECONDS, FIELD(shutdown_timeout), .dmin = 0, .dmax = 86400,
                .reloadable = true, .arg = "SECONDS", .help = "how long a stop waits for requests in flight",
        },
        [KEY_HEALTH_STALL_TIMEOUT] = {
                "health-stall-timeout", SETTING_SECONDS, FIELD(health_stall_timeout), .dmin = 0.1, .dmax = 86400,
                .reloadable = true, .arg = "SECONDS",
                .help = "engine time without progress, work pending, before health fails",
        },
        [KEY_MAX_LINE_BYTES] = {
                "max-line-bytes", SETTING_SIZE, FIELD(max_line_bytes), .min = KiB, .max = GiB, .reloadable = true,
                .arg = "BYTES", .help = "the longest request line a client may send",
        },
        [KEY_MAX_REQUESTS_PER_CONNECTION] = {
                "max-requests-per-connection", SETTING_U32, FIELD(max_requests_per_connection), .min = 1,
                .max = 65536, .reloadable = true, .arg = "N", .help = "requests in flight on one connection",
        },
        [KEY_MAX_REQUESTS_PER_UID] = {
                "max-requests-per-uid", SETTING_U32, FIELD(max_requests_per_uid), .min = 1,
                .max = UINT32_C(1) << 20, .reloadable = true, .arg = "N", .help = "requests in flight of one user",
        },
        [KEY_HOST] = {
                "host", SETTING_PATH, FIELD(host), .max = 255, .arg = "ADDRESS",
                .help = "the HTTP front's address (vLLM's OpenAI-compatible API)",
                .default_text = "127.0.0.1 when --port is given",
        },
        [KEY_PORT] = {
                "port", SETTING_U32, FIELD(port), .min = 0, .max = 65535, .zero = "no HTTP front", .arg = "N",
                .help = "the HTTP front's TCP port (8000 when only --host is given)",
        },
        [KEY_SERVED_MODEL_NAME] = {
                "served-model-name", SETTING_PATH, FIELD(served_model_name), .max = 255, .arg = "NAME",
                .help = "the model's name in the HTTP API", .default_text = "the model file's name without .gguf",
        },
        [KEY_API_KEY] = {
                "api-key", SETTING_PATH, FIELD(api_key), .max = 1024, .arg = "KEY",
                .help = "the key HTTP clients send as 'Authorization: Bearer KEY' (visible in ps: prefer --api-key-file)",
                .default_text = "no key",
        },
        [KEY_API_KEY_FILE] = {
                "api-key-file", SETTING_PATH, FIELD(api_key_file), .max = 4096, .arg = "PATH",
                .help = "a file whose first line is the API key (a systemd credential, for one)",
                .default_text = "no file",
        },
        [KEY_ALLOWED_ORIGINS] = {
                "allowed-origins", SETTING_LIST, FIELD(allowed_origins), .arg = "LIST",
                .help = "CORS: the origins whose browser pages may read the HTTP front's answers (\"*\": any)",
                .default_text = "none, no CORS headers",
        },
        [KEY_ALLOWED_METHODS] = {
                "allowed-methods", SETTING_LIST, FIELD(allowed_methods), .arg = "LIST",
                .help = "CORS: the methods a preflight allows (\"*\": whichever is asked)",
        },
        [KEY_ALLOWED_HEADERS] = {
                "allowed-headers", SETTING_LIST, FIELD(allowed_headers), .arg = "LIST",
                .help = "CORS: the request headers a preflight allows (\"*\": whichever are asked)",
        },
        [KEY_ALLOW_CREDENTIALS] = {
                "allow-credentials", SETTING_BOOL, FIELD(allow_credentials), .negated = "no-allow-credentials",
                .arg = "BOOL", .help = "CORS: browsers may send cookies and Authorization to the allowed origins",
        },
        [KEY_ENABLE_ADMIN_HTTP] = {
                "enable-admin-http", SETTING_BOOL, FIELD(enable_admin_http), .negated = "no-enable-admin-http",
                .arg = "BOOL", .help = "serve pause, resume, sleep, wake_up, reset_prefix_cache and collective_rpc "
                                       "over HTTP, to holders of the admin key",
        },
        [KEY_ADMIN_API_KEY] = {
                "admin-api-key", SETTING_PATH, FIELD(admin_api_key), .max = 1024, .arg = "KEY",
                .help = "the key the HTTP admin routes want, other than the API key (visible in ps: prefer "
                        "--admin-api-key-file)",
                .default_text = "no key",
        },
        [KEY_ADMIN_API_KEY_FILE] = {
                "admin-api-key-file", SETTING_PATH, FIELD(admin_api_key_file), .max = 4096, .arg = "PATH",
                .help = "a file whose first line is the admin key", .default_text = "no file",
        },
        [KEY_MAX_CONNECTIONS] = {
                "max-connections", SETTING_U32, FIELD(max_connections), .min = 1, .max = 65536, .reloadable = true,
                .arg = "N", .help = "client connections open at once",
        },
        [KEY_CLIENT_TIMEOUT] = {
                "client-timeout", SETTING_SECONDS, FIELD(client_timeout), .dmin = 0.1, .dmax = 86400,
                .reloadable = true, .arg = "SECONDS", .help = "how long a client may stop reading before it is dropped",
        },
        [KEY_ADMIN_GROUP] = {
                "admin-group", SETTING_GROUP, FIELD(admin_group), .reloadable = true, .arg = "GROUP",
                .help = "members may pause, resume, sleep, wake up and reset caches",
        },
        [KEY_SERVICE_GROUP] = {
                "service-group", SETTING_GROUP, FIELD(service_group), .reloadable = true, .arg = "GROUP",
                .help = "members may generate",
        },
        [KEY_PROFILE_DIR] = {
                "profile-dir", SETTING_PATH, FIELD(profile_dir), .max = 4096, .reloadable = true, .arg = "DIR",
                .help = "where start_profile and stop_profile write their traces",
                .default_text = "none: profiling is refused",
        },
};

/* A parsed value, before it is stored. */
union setting_value {
        bool b;
        uint64_t u;
        double d;
        int i;         /* choice index, log level */
        const char *s; /* paths and groups: the input; names: the static choice */
};

static void *field(const struct daemon_settings *s, const struct setting *st) {
        return (char *) s + st->offset;
}

static const struct setting *find_setting(const char *key) {
        for (size_t i = 0; i < N_KEYS; i++)
                if (strcmp(table[i].key, key) == 0)
                        return &table[i];
        return NULL;
}

static size_t setting_id(const struct setting *st) {
        return (size_t) (st - table);
}

static void format_double(double d, char *buf, size_t size) {
        /* whole numbers as such ("86400", not "8.64e+04"), others by the shortest text that
         * reads back as the same double */
        if (d == floor(d) && fabs(d) < 1e15) {
                snprintf(buf, size, "%.0f", d);
                return;
        }
        for (int prec = 1; prec <= 17; prec++) {
                snprintf(buf, size, "%.*g", prec, d);
                if (strtod(buf, NULL) == d)
                        return;
        }
}

static void format_size(uint64_t v, char *buf, size_t size) {
        static const char *const units[] = { "KiB", "MiB", "GiB", "TiB" };
        int u = -1;
        while (u < 3 && v > 0 && v % 1024 == 0) {
                v /= 1024;
                u++;
        }
        snprintf(buf, size, "%" PRIu64 "%s", v, u < 0 ? "" : units[u]);
}

static void join_choices(const char *const *choices, char *buf, size_t size) {
        size_t n = 0;
        buf[0] = 0;
        for (size_t i = 0; choices[i] && n < size; i++)
                n += (size_t) snprintf(buf + n, size - n, "%s%s", i ? ", " : "", choices[i]);
}

static void join_log_levels(char *buf, size_t size) {
        size_t n = 0;
        buf[0] = 0;
        for (int i = LOG_EMERG; i <= LOG_DEBUG && n < size; i++)
                n += (size_t) snprintf(buf + n, size - n, "%s%s", i ? ", " : "", log_level_to_string(i));
}

/* What st accepts, for the "allowed: ..." part of a message. */
static const char *describe_allowed(const struct setting *st, char *buf, size_t size) {
        char lo[64], hi[64], list[128];
        switch (st->type) {
        case SETTING_BOOL:
                snprintf(buf, size, "true, false, yes, no, on, off, 1, 0");
                break;
        case SETTING_U32:
        case SETTING_U64:
        case SETTING_I32:
                if (st->min == 0 && st->zero)
                        snprintf(buf, size, "0 (%s) to %" PRIu64, st->zero, st->max);
                else if (st->min == st->max)
                        snprintf(buf, size, "%" PRIu64, st->min);
                else
                        snprintf(buf, size, "%" PRIu64 " to %" PRIu64, st->min, st->max);
                break;
        case SETTING_SIZE:
                format_size(st->min, lo, sizeof(lo));
                format_size(st->max, hi, sizeof(hi));
                snprintf(buf, size,
                         "%s to %s, in bytes, optionally followed by K, M, G, T (powers of 1000) or KiB, MiB, "
                         "GiB, TiB (powers of 1024)",
                         lo, hi);
                break;
        case SETTING_SECONDS:
                format_double(st->dmin, lo, sizeof(lo));
                format_double(st->dmax, hi, sizeof(hi));
                if (st->dmin_open)
                        snprintf(buf, size, "more than %s and at most %s seconds", lo, hi);
                else
                        snprintf(buf, size, "%s to %s seconds", lo, hi);
                break;
        case SETTING_FRACTION:
                snprintf(buf, size, "a fraction from 0 to less than 1 (0.1 is a tenth)");
                break;
        case SETTING_FACTOR:
                snprintf(buf, size, "0 (%s), or more than 1 and at most 1000", st->zero);
                break;
        case SETTING_PATH:
                if (st->max > 0)
                        snprintf(buf, size, "a path of at most %" PRIu64 " bytes", st->max);
                else
                        snprintf(buf, size, "a path");
                break;
        case SETTING_GROUP:
                snprintf(buf, size,
                         "a group name: 1 to %d letters, digits, '_', '-' or '.', starting with a letter or '_'",
                         GROUP_NAME_MAX);
                break;
        case SETTING_CHOICE:
        case SETTING_NAME:
                join_choices(st->choices, list, sizeof(list));
                snprintf(buf, size, "%s", list);
                break;
        case SETTING_LOG_LEVEL:
                join_log_levels(list, sizeof(list));
                snprintf(buf, size, "%s", list);
                break;
        case SETTING_LIST:
                snprintf(buf, size, "a JSON list of strings such as [\"a\", \"b\"], or a, b; each item visible ASCII "
                         "without commas or quotes");
                break;
        }
        return buf;
}

/* Decimal digits only: no sign, space or base prefix. *end points after them. -EINVAL
 * without digits, -ERANGE above UINT64_MAX. */
static int parse_digits(const char *v, uint64_t *ret, const char **end) {
        uint64_t u = 0;
        const char *p = v;
        bool overflow = false;
        for (; *p >= '0' && *p <= '9'; p++) {
                unsigned d = (unsigned) (*p - '0');
                if (u > (UINT64_MAX - d) / 10)
                        overflow = true;
                else
                        u = u * 10 + d;
        }
        *end = p;
        if (p == v)
                return -EINVAL;
        if (overflow)
                return -ERANGE;
        *ret = u;
        return 0;
}

/* A whole unsigned number; "-N" is a number out of range, not garbage. */
/* Digits only; a leading minus sign reads as a value out of range (-0 too: integers take no
 * sign), so that "-1" is told it is too small rather than not a number. */
static int parse_unsigned(const char *v, uint64_t *ret) {
        const char *end;
        int r;
        bool negative = v[0] == '-';
        r = parse_digits(v + negative, ret, &end);
        if (r == -EINVAL || *end != 0)
                return -EINVAL;
        if (r < 0)
                return r;
        return negative ? -ERANGE : 0;
}

static int parse_size(const char *v, uint64_t *ret) {
        static const struct {
                const char *suffix;
                uint64_t factor;
        } units[] = {
                { "", 1 },
                { "B", 1 },
                { "K", 1000 },
                { "KB", 1000 },
                { "M", 1000000 },
                { "MB", 1000000 },
                { "G", 1000000000 },
                { "GB", 1000000000 },
                { "T", UINT64_C(1000000000000) },
                { "TB", UINT64_C(1000000000000) },
                { "KiB", KiB },
                { "MiB", MiB },
                { "GiB", GiB },
                { "TiB", TiB },
        };
        const char *end;
        uint64_t u;
        bool negative = v[0] == '-';
        int r = parse_digits(v + negative, &u, &end);
        if (r == -EINVAL)
                return -EINVAL;
        while (*end == ' ' || *end == '\t')
                end++;
        for (size_t i = 0; i < sizeof(units) / sizeof(*units); i++) {
                if (strcmp(end, units[i].suffix) != 0)
                        continue;
                if (r < 0 || (negative && u != 0))
                        return -ERANGE;
                if (u > UINT64_MAX / units[i].factor)
                        return -ERANGE;
                *ret = u * units[i].factor;
                return 0;
        }
        return -EINVAL;
}

static int parse_double(const char *v, double *ret) {
        char *end;
        /* plain decimal notation only: no spaces, hex, "inf" or "nan" */
        if (v[strspn(v, "0123456789.eE+-")] != 0)
                return -EINVAL;
        errno = 0;
        double d = strtod(v, &end);
        if (end == v || *end != 0)
                return -EINVAL;
        if (errno == ERANGE || !isfinite(d))
                return -ERANGE;
        *ret = d;
        return 0;
}

static int parse_bool(const char *v) {
        static const char *const yes[] = { "true", "yes", "on", "1" }, *const no[] = { "false", "no", "off", "0" };
        for (size_t i = 0; i < 4; i++) {
                if (strcasecmp(v, yes[i]) == 0)
                        return 1;
                if (strcasecmp(v, no[i]) == 0)
                        return 0;
        }
        return -EINVAL;
}

static bool valid_group_name(const char *v) {
        size_t n = strlen(v);
        if (n < 1 || n > GROUP_NAME_MAX)
                return false;
        if (!((v[0] >= 'a' && v[0] <= 'z') || (v[0] >= 'A' && v[0] <= 'Z') || v[0] == '_'))
                return false;
        for (size_t i = 1; i < n; i++)
                if (!((v[i] >= 'a' && v[i] <= 'z') || (v[i] >= 'A' && v[i] <= 'Z') || (v[i] >= '0' && v[i] <= '9') ||
                      v[i] == '_' || v[i] == '-' || v[i] == '.'))
                        return false;
        return true;
}

/* A list item: an origin, a method or a header name, which need nothing else, and with which
 * the stored "a, b" splits back unambiguously. */
static bool valid_list_item(const char *item, size_t len) {
        if (len == 0)
                return false;
        for (size_t i = 0; i < len; i++)
                if (item[i] <= ' ' || item[i] > '~' || item[i] == ',' || item[i] == '"')
                        return false;
        return true;
}

/* The JSON text v (with nothing after it but blanks), or NULL. */
static struct json_object *parse_json_whole(const char *v) {
        struct json_tokener *tok = json_tokener_new();
        if (!tok)
                return NULL;
        size_t len = strlen(v);
        struct json_object *o = json_tokener_parse_ex(tok, v, (int) len);
        size_t end = (size_t) json_tokener_get_parse_end(tok);
        if (o && (json_tokener_get_error(tok) != json_tokener_success || v[end + strspn(v + end, " \t")])) {
                json_object_put(o);
                o = NULL;
        }
        json_tokener_free(tok);
        return o;
}

/* v, a JSON list of strings or a comma-separated list, as "a, b" in *ret (malloc()ed); ret
 * NULL only checks it. -EINVAL with what is wrong in problem, or -ENOMEM. */
static int normalize_list(const char *v, char **ret, char *problem, size_t size) {
        /* an item's ", " is at most twice what the input spends between items */
        char *out = malloc(2 * strlen(v) + 1);
        size_t n = 0;
        int r = 0;
        if (!out)
                return -ENOMEM;
        out[0] = 0;
        const char *p = v + strspn(v, " \t");
        if (*p == '[') {
                struct json_object *list = parse_json_whole(p);
                size_t count = json_object_is_type(list, json_type_array) ? json_object_array_length(list) : 0;
                if (!json_object_is_type(list, json_type_array)) {
                        snprintf(problem, size, "'%s' is not a JSON list of strings", v);
                        r = -EINVAL;
                } else if (count == 0) {
                        snprintf(problem, size, "an empty list (leave the key out for none)");
                        r = -EINVAL;
                }
                for (size_t i = 0; r == 0 && i < count; i++) {
                        struct json_object *item = json_object_array_get_idx(list, i);
                        const char *text = json_object_get_string(item);
                        if (!json_object_is_type(item, json_type_string) ||
                            !valid_list_item(text, (size_t) json_object_get_string_len(item))) {
                                snprintf(problem, size, "item %zu of %s is not a string of visible ASCII without "
                                         "commas or quotes", i, v);
                                r = -EINVAL;
                        } else
                                n += (size_t) sprintf(out + n, "%s%s", i ? ", " : "", text);
                }
                json_object_put(list);
        } else
                for (;;) {
                        p += strspn(p, " \t");
                        size_t len = strcspn(p, ",");
                        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
                                len--;
                        if (!valid_list_item(p, len)) {
                                snprintf(problem, size, "'%s' has an empty item, or one with other than visible "
                                         "ASCII", v);
                                r = -EINVAL;
                                break;
                        }
                        n += (size_t) sprintf(out + n, "%s%.*s", n ? ", " : "", (int) len, p);
                        p += strcspn(p, ",");
                        if (!*p++)
                                break;
                }
        if (r < 0 || !ret)
                free(out);
        else
                *ret = out;
        return r;
}

/* Fails with "WHO: PROBLEM; allowed: what st takes". */
static int refuse_value(struct error *err, int errnum, const struct setting *st, const char *who,
                        const char *problem_fmt, ...) __attribute__((format(printf, 5, 6)));
static int refuse_value(struct error *err, int errnum, const struct setting *st, const char *who,
                        const char *problem_fmt, ...) {
        char problem[ERROR_MESSAGE_MAX], allowed[320];
        va_list ap;
        va_start(ap, problem_fmt);
        vsnprintf(problem, sizeof(problem), problem_fmt, ap);
        va_end(ap);
        return error_set(err, errnum, "%s: %s; allowed: %s", who, problem, describe_allowed(st, allowed, sizeof(allowed)));
}

/* Parses v for st. who starts the message: "--max-num-seqs" or "FILE:LINE: max-num-seqs". */
static int parse_value(const struct setting *st, const char *who, const char *v, union setting_value *ret,
                       struct error *err) {
        char allowed[320];
        uint64_t u;
        double d;
        int r;

        if (!*v)
                return refuse_value(err, EINVAL, st, who, "empty value");
        switch (st->type) {
        case SETTING_BOOL:
                if ((r = parse_bool(v)) < 0)
                        return refuse_value(err, EINVAL, st, who, "'%s' is not a boolean", v);
                ret->b = r;
                return 0;
        case SETTING_U32:
        case SETTING_U64:
        case SETTING_I32:
        case SETTING_SIZE:
                r = st->type == SETTING_SIZE ? parse_size(v, &u) : parse_unsigned(v, &u);
                if (r == -EINVAL)
                        return refuse_value(err, EINVAL, st, who, "'%s' is not %s", v,
                                            st->type == SETTING_SIZE ? "a size" : "an integer");
                if (r < 0 || u < st->min || u > st->max)
                        return refuse_value(err, ERANGE, st, who, "%s is out of range", v);
                ret->u = u;
                return 0;
        case SETTING_SECONDS:
        case SETTING_FACTOR:
        case SETTING_FRACTION:
                r = parse_double(v, &d);
                if (r == -EINVAL)
                        return refuse_value(err, EINVAL, st, who, "'%s' is not a number", v);
                if (r < 0 ||
                    (st->type == SETTING_SECONDS &&
                     (d < st->dmin || (st->dmin_open && d == st->dmin) || d > st->dmax)) ||
                    (st->type == SETTING_FACTOR && !(d == 0 || (d > 1 && d <= 1000))) ||
                    (st->type == SETTING_FRACTION && !(d >= 0 && d < 1)))
                        return refuse_value(err, ERANGE, st, who, "%s is out of range", v);
                ret->d = d == 0 ? 0 : d; /* no -0 */
                return 0;
        case SETTING_PATH:
                if (st->max > 0 && strlen(v) > st->max)
                        return refuse_value(err, ENAMETOOLONG, st, who, "'%s' is %zu bytes long", v, strlen(v));
                ret->s = v;
                return 0;
        case SETTING_GROUP:
                if (!valid_group_name(v))
                        return refuse_value(err, EINVAL, st, who, "'%s' is not a group name", v);
                ret->s = v;
                return 0;
        case SETTING_CHOICE:
        case SETTING_NAME:
                if ((r = name_table_find(st->choices, SIZE_MAX, v)) >= 0) {
                        if (st->type == SETTING_CHOICE)
                                ret->i = r;
                        else
                                ret->s = st->choices[r];
                        return 0;
                }
                break;
        case SETTING_LOG_LEVEL:
                if ((r = log_level_from_string(v)) < 0)
                        break;
                ret->i = r;
                return 0;
        case SETTING_LIST: {
                char problem[ERROR_MESSAGE_MAX / 2];
                if ((r = normalize_list(v, NULL, problem, sizeof(problem))) == -EINVAL)
                        return refuse_value(err, EINVAL, st, who, "%s", problem);
                if (r < 0)
                        return error_set(err, -r, "out of memory");
                ret->s = v;
                return 0;
        }
        }
        /* a name that is not one of the choices (the list says what is allowed) */
        return error_set(err, EINVAL, "%s: '%s' is not one of %s", who, v, describe_allowed(st, allowed, sizeof(allowed)));
}

static int store_value(struct daemon_settings *s, const struct setting *st, const union setting_value *v) {
        void *p = field(s, st);
        switch (st->type) {
        case SETTING_BOOL:
                *(bool *) p = v->b;
                break;
        case SETTING_U32:
                *(uint32_t *) p = (uint32_t) v->u;
                break;
        case SETTING_U64:
        case SETTING_SIZE:
                *(uint64_t *) p = v->u;
                break;
        case SETTING_I32:
                *(int32_t *) p = (int32_t) v->u;
                break;
        case SETTING_SECONDS:
        case SETTING_FACTOR:
        case SETTING_FRACTION:
                *(double *) p = v->d;
                break;
        case SETTING_PATH:
        case SETTING_GROUP: {
                char *copy = strdup(v->s);
                if (!copy)
                        return -ENOMEM;
                free(*(char **) p);
                *(char **) p = copy;
                break;
        }
        case SETTING_CHOICE:
        case SETTING_LOG_LEVEL:
                *(int *) p = v->i;
                break;
        case SETTING_NAME:
                *(const char **) p = v->s;
                break;
        case SETTING_LIST: {
                char *list, problem[8];
                if (normalize_list(v->s, &list, problem, sizeof(problem)) < 0) /* checked already: -ENOMEM */
                        return -ENOMEM;
                free(*(char **) p);
                *(char **) p = list;
                break;
        }
        }
        return 0;
}

static bool value_equal(const struct daemon_settings *a, const struct daemon_settings *b, const struct setting *st) {
        const void *pa = field(a, st), *pb = field(b, st);
        switch (st->type) {
        case SETTING_BOOL:
                return *(const bool *) pa == *(const bool *) pb;
        case SETTING_U32:
                return *(const uint32_t *) pa == *(const uint32_t *) pb;
        case SETTING_U64:
        case SETTING_SIZE:
                return *(const uint64_t *) pa == *(const uint64_t *) pb;
        case SETTING_I32:
                return *(const int32_t *) pa == *(const int32_t *) pb;
        case SETTING_SECONDS:
        case SETTING_FACTOR:
        case SETTING_FRACTION:
                return *(const double *) pa == *(const double *) pb;
        case SETTING_PATH:
        case SETTING_GROUP:
        case SETTING_LIST:
        case SETTING_NAME: {
                const char *sa = *(char *const *) pa, *sb = *(char *const *) pb;
                return sa == sb || (sa && sb && strcmp(sa, sb) == 0);
        }
        case SETTING_CHOICE:
        case SETTING_LOG_LEVEL:
                return *(const int *) pa == *(const int *) pb;
        }
        return false;
}

static size_t value_size(const struct setting *st) {
        switch (st->type) {
        case SETTING_BOOL:
                return sizeof(bool);
        case SETTING_U32:
                return sizeof(uint32_t);
        case SETTING_U64:
        case SETTING_SIZE:
                return sizeof(uint64_t);
        case SETTING_I32:
                return sizeof(int32_t);
        case SETTING_SECONDS:
        case SETTING_FACTOR:
        case SETTING_FRACTION:
                return sizeof(double);
        case SETTING_PATH:
        case SETTING_GROUP:
        case SETTING_LIST:
                return sizeof(char *);
        case SETTING_NAME:
                return sizeof(const char *);
        case SETTING_CHOICE:
        case SETTING_LOG_LEVEL:
                return sizeof(int);
        }
        return 0;
}

static void format_value(const struct daemon_settings *s, const struct setting *st, char *buf, size_t size) {
        const void *p = field(s, st);
        const char *str;
        switch (st->type) {
        case SETTING_BOOL:
                snprintf(buf, size, "%s", *(const bool *) p ? "true" : "false");
                break;
        case SETTING_U32:
                snprintf(buf, size, "%" PRIu32, *(const uint32_t *) p);
                break;
        case SETTING_U64:
                snprintf(buf, size, "%" PRIu64, *(const uint64_t *) p);
                break;
        case SETTING_I32:
                snprintf(buf, size, "%" PRId32, *(const int32_t *) p);
                break;
        case SETTING_SIZE:
                format_size(*(const uint64_t *) p, buf, size);
                break;
        case SETTING_SECONDS:
        case SETTING_FACTOR:
        case SETTING_FRACTION:
                format_double(*(const double *) p, buf, size);
                break;
        case SETTING_PATH:
        case SETTING_GROUP:
        case SETTING_LIST:
        case SETTING_NAME:
                str = *(char *const *) p;
                snprintf(buf, size, "%s", str ? str : "(none)");
                break;
        case SETTING_CHOICE:
                snprintf(buf, size, "%s", st->choices[*(const int *) p]);
                break;
        case SETTING_LOG_LEVEL:
                str = log_level_to_string(*(const int *) p);
                snprintf(buf, size, "%s", str ? str : "(invalid)");
                break;
        }
}

int daemon_settings_init(struct daemon_settings *s) {
        *s = (struct daemon_settings) {
                .device = device_names[0],
                .threads = 0,
                .bus = DAEMON_BUS_NONE,
                .log_level = LOG_INFO,
                .shutdown_timeout = 30,
                .health_stall_timeout = 60,
                .max_line_bytes = MiB,
                .max_requests_per_connection = 256,
                .max_requests_per_uid = 1024,
                .max_connections = 256,
                .client_timeout = 30,
                .action = DAEMON_SETTINGS_RUN,
                .default_config = ASYNCLLM_CONFIG_FILE,
        };
        engine_config_init_default(&s->engine);
        s->admin_group = strdup("asyncllm-admin");
        s->service_group = strdup("asyncllm");
        s->allowed_methods = strdup("GET, POST"); /* what the routes take */
        s->allowed_headers = strdup("*");
        if (!s->admin_group || !s->service_group || !s->allowed_methods || !s->allowed_headers) {
                daemon_settings_done(s);
                return -ENOMEM;
        }
        return 0;
}

void daemon_settings_done(struct daemon_settings *s) {
        for (size_t i = 0; i < N_KEYS; i++)
                if (table[i].type == SETTING_PATH || table[i].type == SETTING_GROUP || table[i].type == SETTING_LIST) {
                        char **p = field(s, &table[i]);
                        free(*p);
                        *p = NULL;
                }
}

enum {
        OPT_HELP = 'h',
        OPT_VERSION = 'V',
        OPT_PRINT = 0xff,
        OPT_KEY = 0x100,                /* + setting id */
        OPT_NEGATED = OPT_KEY + N_KEYS, /* + setting id: --no-KEY */
};

int daemon_settings_parse_argv(struct daemon_settings *s, int argc, char **argv, struct error *err) {
        struct option options[2 * N_KEYS + 4];
        size_t n = 0;
        int r;

        for (size_t i = 0; i < N_KEYS; i++) {
                const struct setting *st = &table[i];
                int has_arg = st->type == SETTING_BOOL ? optional_argument : required_argument;
                options[n++] = (struct option) { st->key, has_arg, NULL, OPT_KEY + (int) i };
                if (st->negated)
                        options[n++] = (struct option) { st->negated, no_argument, NULL, OPT_NEGATED + (int) i };
        }
        options[n++] = (struct option) { "help", no_argument, NULL, OPT_HELP };
        options[n++] = (struct option) { "version", no_argument, NULL, OPT_VERSION };
        options[n++] = (struct option) { "print-settings", no_argument, NULL, OPT_PRINT };
        options[n] = (struct option) { 0 };

        /* start over (GNU getopt: optind = 0 reinitializes), and report errors ourselves */
        optind = 0;
        opterr = 0;
        for (;;) {
                int c = getopt_long(argc, argv, ":hV", options, NULL);
                if (c < 0)
                        break;
                if (c == OPT_HELP || c == OPT_VERSION) {
                        s->action = c == OPT_HELP ? DAEMON_SETTINGS_HELP : DAEMON_SETTINGS_VERSION;
                        return 0;
                }
                if (c == OPT_PRINT) { /* the rest still counts: it is what gets printed */
                        s->action = DAEMON_SETTINGS_PRINT;
                        continue;
                }
                if (c == ':')
                        return error_set(err, EINVAL, "option '%s' needs a value", argv[optind - 1]);
                if (c == '?') {
                        if (optopt >= OPT_KEY || optopt == OPT_HELP || optopt == OPT_VERSION || optopt == OPT_PRINT)
                                return error_set(err, EINVAL, "option '%s' takes no value", argv[optind - 1]);
                        if (optopt)
                                return error_set(err, EINVAL, "unknown option '-%c'; see --help", optopt);
                        return error_set(err, EINVAL, "unknown or ambiguous option '%s'; see --help",
                                         argv[optind - 1]);
                }
                if (c < OPT_KEY || c >= OPT_NEGATED + N_KEYS)
                        return error_set(err, EINVAL, "unexpected option code %d", c);

                const struct setting *st = &table[(c - OPT_KEY) % N_KEYS];
                union setting_value v;
                if (c >= OPT_NEGATED)
                        v.b = false;
                else if (st->type == SETTING_BOOL && !optarg)
                        v.b = true;
                else {
                        char who[128];
                        snprintf(who, sizeof(who), "--%s", st->key);
                        if ((r = parse_value(st, who, optarg, &v, err)) < 0)
                                return r;
                }
                if ((r = store_value(s, st, &v)) < 0)
                        return error_set(err, -r, "out of memory");
                s->from_command_line |= BIT(setting_id(st));
        }
        if (optind < argc)
                return error_set(err, EINVAL,
                                 "unexpected argument '%s'; every setting is an option (booleans take a value "
                                 "only as --KEY=BOOL); see --help",
                                 argv[optind]);
        return 0;
}

static char *strip(char *p) {
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n' || *p == '\f' || *p == '\v')
                p++;
        size_t n = strlen(p);
        while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '\r' || p[n - 1] == '\n' ||
                         p[n - 1] == '\f' || p[n - 1] == '\v'))
                p[--n] = 0;
        return p;
}

static int unknown_key(const char *path, unsigned line, const char *key, struct error *err) {
        char guess[128];
        const struct setting *st;
        size_t i;

        /* "--max-num-seqs", "max_num_seqs", "no-enable-prefix-caching": say what was meant */
        snprintf(guess, sizeof(guess), "%s", key + (strncmp(key, "--", 2) == 0 ? 2 : 0));
        for (i = 0; guess[i]; i++)
                if (guess[i] == '_')
                        guess[i] = '-';
        if ((st = find_setting(guess)) && !st->flag_only)
                return error_set(err, EINVAL, "%s:%u: unknown key '%s'; did you mean '%s'?", path, line, key, st->key);
        if (strncmp(guess, "no-", 3) == 0 && (st = find_setting(guess + 3)) && st->type == SETTING_BOOL)
                return error_set(err, EINVAL, "%s:%u: unknown key '%s'; write '%s = false'", path, line, key, st->key);
        if ((st = find_setting(guess)) && st->flag_only)
                return error_set(err, EINVAL, "%s:%u: '%s' cannot be set in a configuration file; use --%s", path,
                                 line, key, st->key);
        return error_set(err, EINVAL, "%s:%u: unknown key '%s'; the keys are listed in asyncllmd.conf(5)", path,
                         line, key);
}

static int parse_file(struct daemon_settings *s, FILE *f, const char *path, struct error *err) {
        unsigned first_line[N_KEYS] = { 0 };
        char *buf = NULL;
        size_t cap = 0;
        ssize_t len;
        unsigned line = 0;
        int r = 0;

        for (;;) {
                errno = 0;
                if ((len = getline(&buf, &cap, f)) < 0)
                        break;
                line++;
                if (memchr(buf, 0, (size_t) len)) {
                        r = error_set(err, EINVAL, "%s:%u: the line contains a NUL byte", path, line);
                        goto out;
                }
                char *p = buf;
                if (line == 1 && strncmp(p, "\xef\xbb\xbf", 3) == 0) /* a UTF-8 byte order mark */
                        p += 3;
                p = strip(p);
                if (*p == 0 || *p == '#')
                        continue;

                char *eq = strchr(p, '=');
                if (!eq) {
                        r = error_set(err, EINVAL, "%s:%u: '%s' is not a 'key = value' line", path, line, p);
                        goto out;
                }
                *eq = 0;
                char *key = strip(p), *value = strip(eq + 1);
                if (*key == 0) {
                        r = error_set(err, EINVAL, "%s:%u: '= %s' has no key before '='", path, line, value);
                        goto out;
                }
                const struct setting *st = find_setting(key);
                if (!st || st->flag_only) {
                        r = unknown_key(path, line, key, err);
                        goto out;
                }
                size_t id = setting_id(st);
                if (first_line[id]) {
                        r = error_set(err, EINVAL, "%s:%u: %s = %s: the key was already set on line %u; each key may "
                                      "appear once", path, line, key, value, first_line[id]);
                        goto out;
                }
                first_line[id] = line;

                char who[PATH_MAX + 128];
                union setting_value v;
                snprintf(who, sizeof(who), "%s:%u: %s", path, line, key);
                if ((r = parse_value(st, who, value, &v, err)) < 0)
                        goto out;
                if (s->from_command_line & BIT(id))
                        continue; /* the flag wins, but the file's value had to be valid */
                if ((r = store_value(s, st, &v)) < 0) {
                        r = error_set(err, -r, "out of memory");
                        goto out;
                }
                s->from_file |= BIT(id);
        }
        if (ferror(f)) {
                int e = errno ? errno : EIO;
                r = error_set(err, e, "%s: cannot read the configuration file: %s", path, strerror(e));
        }
out:
        free(buf);
        return r;
}

int daemon_settings_load_file(struct daemon_settings *s, struct error *err) {
        bool named = s->from_command_line & BIT(KEY_CONFIG);
        const char *path = named ? s->config : s->default_config;
        FILE *f;
        int r;

        if (!path)
                return 0;
        if (!(f = fopen(path, "re"))) {
                r = errno;
                if (r == ENOENT && !named)
                        return 0;
                return error_set(err, r, "%s: cannot read the configuration file%s: %s", path,
                                 named ? " named by --config" : "", strerror(r));
        }
        if (!named) {
                free(s->config);
                if (!(s->config = strdup(path))) {
                        fclose(f);
                        return error_set(err, ENOMEM, "out of memory");
                }
        }
        r = parse_file(s, f, s->config, err);
        fclose(f);
        return r;
}

int daemon_settings_default_socket(uid_t euid, char **ret, struct error *err) {
        const char *dir = getenv("RUNTIME_DIRECTORY");
        char *path = NULL;

        if (dir && dir[0] && dir[0] != ':') {
                /* systemd: one absolute path per RuntimeDirectory=, separated by ':' */
                if (asprintf(&path, "%.*s/" SOCKET_NAME, (int) strcspn(dir, ":"), dir) < 0)
                        path = NULL;
        } else if (euid == 0) {
                path = strdup("/run/asyncllm/" SOCKET_NAME);
        } else {
                dir = getenv("XDG_RUNTIME_DIR");
                if (!dir || !dir[0])
                        return error_set(err, EINVAL,
                                         "socket: no default for uid %u: neither $RUNTIME_DIRECTORY nor "
                                         "$XDG_RUNTIME_DIR is set; pass --socket PATH (or set 'socket =' in "
                                         "asyncllmd.conf)",
                                         (unsigned) euid);
                if (asprintf(&path, "%s/asyncllm/" SOCKET_NAME, dir) < 0)
                        path = NULL;
        }
        if (!path)
                return error_set(err, ENOMEM, "out of memory");
        if (strlen(path) > SOCKET_PATH_MAX) {
                int r = error_set(err, ENAMETOOLONG,
                                  "socket: the default '%s' is %zu bytes long; allowed: at most %zu; pass a shorter "
                                  "--socket PATH",
                                  path, strlen(path), SOCKET_PATH_MAX);
                free(path);
                return r;
        }
        *ret = path;
        return 0;
}

int daemon_settings_default_model(const char *source_dir, char **ret) {
        char *path;
        if (source_dir && source_dir[0]) {
                if (asprintf(&path, "%s/models/" DEFAULT_MODEL_NAME, source_dir) < 0)
                        return -ENOMEM;
                if (access(path, F_OK) == 0) {
                        *ret = path;
                        return 0;
                }
                free(path);
        }
        if (!(path = strdup(ASYNCLLM_STATE_DIR "/models/" DEFAULT_MODEL_NAME)))
                return -ENOMEM;
        *ret = path;
        return 0;
}

int daemon_settings_resolve(struct daemon_settings *s, struct error *err) {
        struct engine_config *e = &s->engine;
        uint64_t set = s->from_command_line | s->from_file;
        int r;

        if (!s->model) {
#ifdef ASYNCLLM_SOURCE_DIR
                r = daemon_settings_default_model(ASYNCLLM_SOURCE_DIR, &s->model);
#else
                r = daemon_settings_default_model(NULL, &s->model);
#endif
                if (r < 0)
                        return error_set(err, -r, "out of memory");
        }
        if (!s->socket && (r = daemon_settings_default_socket(geteuid(), &s->socket, err)) < 0)
                return r;
        if (s->threads == 0) {
                long n = sysconf(_SC_NPROCESSORS_ONLN);
                s->threads = n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (uint32_t) n;
        }

        /* what engine_config_finalize() would refuse and can be seen without the model; a limit
         * that was not set follows the one that was, as vLLM does */
        if (e->max_num_batched_tokens < e->max_num_seqs) {
                if (set & BIT(KEY_MAX_NUM_BATCHED_TOKENS))
                        return error_set(err, EINVAL,
                                         "max-num-batched-tokens: %" PRIu32 " is less than max-num-seqs (%" PRIu32
                                         "); allowed: at least max-num-seqs",
                                         e->max_num_batched_tokens, e->max_num_seqs);
                e->max_num_batched_tokens = e->max_num_seqs;
        }
        if (!e->enable_chunked_prefill && e->max_model_len > 0 && e->max_num_batched_tokens < e->max_model_len) {
                if (set & BIT(KEY_MAX_NUM_BATCHED_TOKENS))
                        return error_set(err, EINVAL,
                                         "max-num-batched-tokens: %" PRIu32 " is less than max-model-len (%" PRIu32
                                         "), which without chunked prefill it must hold; allowed: at least "
                                         "max-model-len, or enable-chunked-prefill = true",
                                         e->max_num_batched_tokens, e->max_model_len);
                e->max_num_batched_tokens = e->max_model_len;
        }
        return 0;
}

int daemon_settings_load(struct daemon_settings *s, int argc, char **argv, bool *ret_usage, struct error *err) {
        int r;
        if (ret_usage)
                *ret_usage = false;
        if ((r = daemon_settings_init(s)) < 0)
                return error_set(err, -r, "out of memory");
        if ((r = daemon_settings_parse_argv(s, argc, argv, err)) < 0) {
                if (ret_usage) /* running out of memory is no misuse */
                        *ret_usage = r != -ENOMEM;
                goto fail;
        }
        if (s->action == DAEMON_SETTINGS_HELP || s->action == DAEMON_SETTINGS_VERSION)
                return 0;
        if ((r = daemon_settings_load_file(s, err)) < 0 || (r = daemon_settings_resolve(s, err)) < 0)
                goto fail;
        return 0;
fail:
        daemon_settings_done(s);
        return r;
}

int daemon_settings_reload(const struct daemon_settings *current, int argc, char **argv,
                           struct daemon_settings *next, struct daemon_settings_changes *changes,
                           struct error *err) {
        int r;

        *changes = (struct daemon_settings_changes) { 0 };
        if ((r = daemon_settings_init(next)) < 0)
                return error_set(err, -r, "out of memory");
        next->default_config = current->default_config;
        if ((r = daemon_settings_parse_argv(next, argc, argv, err)) < 0 ||
            (r = daemon_settings_load_file(next, err)) < 0 || (r = daemon_settings_resolve(next, err)) < 0) {
                daemon_settings_done(next);
                return r;
        }
        for (size_t i = 0; i < N_KEYS; i++) {
                /* the file may have appeared or gone: that shows in the keys it sets */
                if (i == KEY_CONFIG || value_equal(current, next, &table[i]))
                        continue;
                if (table[i].reloadable)
                        changes->applied[changes->n_applied++] = table[i].key;
                else
                        changes->need_restart[changes->n_need_restart++] = table[i].key;
        }
        return 0;
}

void daemon_settings_apply_reload(struct daemon_settings *current, struct daemon_settings *next) {
        for (size_t i = 0; i < N_KEYS; i++) {
                if (!table[i].reloadable && i != KEY_CONFIG)
                        continue;
                /* swap, so that freeing next frees the old strings */
                char tmp[sizeof(uint64_t) > sizeof(char *) ? sizeof(uint64_t) : sizeof(char *)];
                size_t n = value_size(&table[i]);
                memcpy(tmp, field(current, &table[i]), n);
                memcpy(field(current, &table[i]), field(next, &table[i]), n);
                memcpy(field(next, &table[i]), tmp, n);
                current->from_file = (current->from_file & ~BIT(i)) | (next->from_file & BIT(i));
        }
        daemon_settings_done(next);
}

const char *daemon_settings_key(size_t i) {
        return i < N_KEYS ? table[i].key : NULL;
}

bool daemon_settings_key_exists(const char *key) {
        return find_setting(key) != NULL;
}

bool daemon_settings_key_reloadable(const char *key) {
        const struct setting *st = find_setting(key);
        return st && st->reloadable;
}

int daemon_settings_format(const struct daemon_settings *s, const char *key, char *buf, size_t size) {
        const struct setting *st = find_setting(key);
        if (!st)
                return -ENOENT;
        format_value(s, st, buf, size);
        return 0;
}

void daemon_settings_dump(const struct daemon_settings *s, FILE *f) {
        /* in asyncllmd.conf's syntax, grouped by where each value came from */
        static const char *const sources[] = { "from the command line", "from the configuration file", "defaults" };
        char value[PATH_MAX + 64];
        for (int source = 0; source < 3; source++) {
                bool header = false;
                for (size_t i = 0; i < N_KEYS; i++) {
                        int from = s->from_command_line & BIT(i) ? 0 : s->from_file & BIT(i) ? 1 : 2;
                        if (from != source)
                                continue;
                        if (!header) {
                                fprintf(f, "# %s%s%s\n", sources[source], source == 1 ? " " : "",
                                        source == 1 && s->config ? s->config : "");
                                header = true;
                        }
                        /* a string whole: model and the lists have no length limit, and a cut value
                         * would read back as another one */
                        const struct setting *st = &table[i];
                        bool is_string = st->type == SETTING_PATH || st->type == SETTING_GROUP ||
                                         st->type == SETTING_LIST || st->type == SETTING_NAME;
                        const char *text = is_string ? *(char *const *) field(s, st) : NULL;
                        /* an unset string is commented out: "(none)" would read back as that text */
                        bool commented = i == KEY_CONFIG || (is_string && !text);
                        if (!text) {
                                format_value(s, st, value, sizeof(value));
                                text = value;
                        }
                        fprintf(f, "%s%s = %s\n", commented ? "# " : "", st->key, text);
                }
        }
}

void daemon_settings_help(FILE *f, const char *program) {
        struct daemon_settings defaults;
        char flag[96], value[128];

        fprintf(f,
                "Usage: %s [OPTION...]\n"
                "\n"
                "Serves a GGUF language model to local clients over a Unix socket and D-Bus, with\n"
                "continuous batching. Every option is also a key of asyncllmd.conf(5), the same name\n"
                "without \"--\": a flag beats the file, the file beats the default.\n"
                "\n"
                "Options:\n",
                program);
        if (daemon_settings_init(&defaults) < 0)
                return;
        for (size_t i = 0; i < N_KEYS; i++) {
                const struct setting *st = &table[i];
                if (st->type == SETTING_BOOL)
                        snprintf(flag, sizeof(flag), "--[no-]%s", st->key);
                else
                        snprintf(flag, sizeof(flag), "--%s %s", st->key, st->arg);
                if (st->default_text)
                        snprintf(value, sizeof(value), "%s", st->default_text);
                else {
                        format_value(&defaults, st, value, sizeof(value));
                        if (st->zero && strcmp(value, "0") == 0)
                                snprintf(value, sizeof(value), "0 (%s)", st->zero);
                }
                fprintf(f, "  %-40s %s\n  %-40s (default: %s%s)\n", flag, st->help, "", value,
                        st->reloadable ? "; SIGHUP reloads it" : "");
        }
        fprintf(f, "  %-40s %s\n  %-40s %s\n  %-40s %s\n", "-h, --help", "show this help", "-V, --version",
                "show the version", "--print-settings", "show the settings in effect, as asyncllmd.conf, and exit");
        daemon_settings_done(&defaults);
}

const char *daemon_bus_to_string(enum daemon_bus bus) {
        return bus >= DAEMON_BUS_NONE && bus <= DAEMON_BUS_USER ? bus_names[bus] : NULL;
}
