/* SPDX-License-Identifier: MIT */
/* asyncllmd's settings: flags in both forms, the file's syntax, flag > file > default, a message
 * naming the key, the value and what is allowed for every kind of bad input, the computed
 * defaults (model, socket, threads), and what a reload reports. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "settings.h"
#include "test-helpers.h"

#define DEFAULT_MODEL_NAME "SmolLM2-135M-Instruct.Q4_1.gguf"

static char *tmpdir;

static void setup(void) {
        tmpdir = test_tmpdir();
        /* resolve() must not depend on who runs the tests, nor the file on depend on /etc */
        ck_assert_int_eq(setenv("RUNTIME_DIRECTORY", tmpdir, 1), 0);
}

static void teardown(void) {
        test_tmpdir_remove(tmpdir);
        tmpdir = NULL;
}

static char *write_conf(const char *name, const char *text) {
        char *path = test_path_join(tmpdir, name);
        ck_assert_int_eq(test_write_file(path, text, strlen(text)), 0);
        return path;
}

/* argv is NULL-terminated, without the program name. Runs the steps up to the file (and
 * resolve when asked); returns the first failure. default_config is NULL unless given. */
static int load(struct daemon_settings *s, char **args, const char *default_config, bool resolve, struct error *err) {
        char *argv[64] = { (char *) "asyncllmd" };
        int argc = 1, r;
        for (; args && args[argc - 1]; argc++) {
                ck_assert_int_lt(argc, 63);
                argv[argc] = args[argc - 1];
        }
        argv[argc] = NULL;
        ck_assert_int_eq(daemon_settings_init(s), 0);
        s->default_config = default_config;
        err->message[0] = 0;
        if ((r = daemon_settings_parse_argv(s, argc, argv, err)) < 0 || (r = daemon_settings_load_file(s, err)) < 0)
                return r;
        return resolve ? daemon_settings_resolve(s, err) : 0;
}

#define ARGS(...) ((char *[]) { __VA_ARGS__, NULL })

/* Loads a config file with this text and expects a failure whose message contains want. */
static void expect_file_error(const char *text, const char *want) {
        struct daemon_settings s;
        struct error err;
        char *path = write_conf("bad.conf", text);
        int r = load(&s, ARGS("--config", path), NULL, false, &err);
        if (r >= 0 || !strstr(err.message, want))
                ck_abort_msg("file \"%s\": r=%d, message \"%s\", wanted \"%s\"", text, r, err.message, want);
        daemon_settings_done(&s);
        free(path);
}

/* Parses one flag with this value and expects a failure whose message contains want. */
static void expect_flag_error(char **args, const char *want) {
        struct daemon_settings s;
        struct error err;
        int r = load(&s, args, NULL, false, &err);
        if (r >= 0 || !strstr(err.message, want))
                ck_abort_msg("%s %s: r=%d, message \"%s\", wanted \"%s\"", args[0], args[1] ? args[1] : "", r,
                             err.message, want);
        daemon_settings_done(&s);
}

static void expect_format(const struct daemon_settings *s, const char *key, const char *want) {
        char buf[512];
        ck_assert_int_eq(daemon_settings_format(s, key, buf, sizeof(buf)), 0);
        ck_assert_msg(strcmp(buf, want) == 0, "%s = '%s', wanted '%s'", key, buf, want);
}

START_TEST(test_defaults) {
        struct daemon_settings s;
        struct engine_config e;
        ck_assert_int_eq(daemon_settings_init(&s), 0);
        engine_config_init_default(&e);
        ck_assert_uint_eq(s.engine.max_num_seqs, e.max_num_seqs);
        ck_assert_uint_eq(s.engine.max_num_batched_tokens, e.max_num_batched_tokens);
        ck_assert(s.engine.enable_chunked_prefill == e.enable_chunked_prefill);
        ck_assert_uint_eq(s.engine.long_prefill_token_threshold, e.long_prefill_token_threshold);
        ck_assert_uint_eq(s.engine.max_model_len, e.max_model_len);
        ck_assert_uint_eq(s.engine.block_size, e.block_size);
        ck_assert_uint_eq(s.engine.kv_cache_space, e.kv_cache_space);
        ck_assert(s.engine.enable_prefix_caching == e.enable_prefix_caching);
        ck_assert_int_eq(s.engine.scheduling_policy, e.scheduling_policy);
        ck_assert_uint_eq(s.engine.seed, e.seed);
        ck_assert_int_eq(s.engine.max_logprobs, e.max_logprobs);
        ck_assert_double_eq(s.engine.decode_stall_limit, e.decode_stall_limit);
        ck_assert_int_eq(s.engine.slo_admission, e.slo_admission);
        ck_assert_double_eq(s.engine.default_slo, e.default_slo);
        ck_assert_double_eq(s.engine.default_ttft_slo, e.default_ttft_slo);
        ck_assert_double_eq(s.engine.slo_kv_reserve, e.slo_kv_reserve);
        ck_assert_double_eq(s.engine.slo_aim_factor, e.slo_aim_factor);
        ck_assert_ptr_null(s.model);
        ck_assert_ptr_null(s.chat_template);
        ck_assert_ptr_null(s.socket);
        ck_assert_ptr_null(s.config);
        ck_assert_str_eq(s.device, "cpu");
        ck_assert_uint_eq(s.engine.tensor_parallel_size, 1);
        ck_assert_uint_eq(s.threads, 0);
        ck_assert_int_eq(s.bus, DAEMON_BUS_NONE);
        ck_assert_int_eq(s.log_level, LOG_INFO);
        ck_assert_double_eq(s.shutdown_timeout, 30);
        ck_assert_double_eq(s.health_stall_timeout, 60);
        ck_assert_uint_eq(s.max_line_bytes, 1 << 20);
        ck_assert_uint_eq(s.max_requests_per_connection, 256);
        ck_assert_uint_eq(s.max_requests_per_uid, 1024);
        ck_assert_uint_eq(s.max_connections, 256);
        ck_assert_double_eq(s.client_timeout, 30);
        ck_assert_str_eq(s.admin_group, "asyncllm-admin");
        ck_assert_str_eq(s.service_group, "asyncllm");
        ck_assert_int_eq(s.action, DAEMON_SETTINGS_RUN);
        ck_assert_ptr_nonnull(s.default_config); /* /etc/asyncllm/asyncllmd.conf unless the build says otherwise */
        ck_assert_ptr_nonnull(strstr(s.default_config, "/asyncllmd.conf"));
        expect_format(&s, "kv-cache-space", "256MiB");
        expect_format(&s, "decode-stall-limit", "2");
        expect_format(&s, "scheduling-policy", "fcfs");
        expect_format(&s, "slo-admission", "reject");
        expect_format(&s, "default-slo", "0.05");
        expect_format(&s, "default-ttft-slo", "1");
        expect_format(&s, "slo-kv-reserve", "0.1");
        expect_format(&s, "slo-aim-factor", "1.05");
        expect_format(&s, "bus", "none");
        expect_format(&s, "log-level", "info");
        expect_format(&s, "model", "(none)");
        ck_assert_str_eq(daemon_bus_to_string(DAEMON_BUS_USER), "user");
        daemon_settings_done(&s);
        daemon_settings_done(&s); /* twice is fine */
}
END_TEST

START_TEST(test_flags) {
        struct daemon_settings s;
        struct error err;
        ck_assert_int_eq(load(&s,
                              ARGS("--model", "/m.gguf", "--chat-template", "/t.jinja", "--max-num-seqs=8", "--max-num-batched-tokens", "128",
                                   "--no-enable-chunked-prefill", "--long-prefill-token-threshold=64",
                                   "--max-model-len", "100", "--block-size=32", "--kv-cache-space", "1GiB",
                                   "--enable-prefix-caching=off", "--scheduling-policy", "priority", "--seed",
                                   "18446744073709551615", "--max-logprobs=5", "--decode-stall-limit", "1.5",
                                   "--device=cpu", "--tensor-parallel-size", "1", "--threads", "3", "--socket",
                                   "/tmp/x.sock", "--bus", "user", "--log-level=debug", "--shutdown-timeout", "2.5",
                                   "--health-stall-timeout=0.5", "--max-line-bytes", "64KiB",
                                   "--max-requests-per-connection", "4", "--max-requests-per-uid=5",
                                   "--max-connections", "6", "--client-timeout=7", "--admin-group", "wheel",
                                   "--service-group=users"),
                              NULL, true, &err),
                         0);
        ck_assert_str_eq(s.model, "/m.gguf");
        ck_assert_str_eq(s.chat_template, "/t.jinja");
        ck_assert_uint_eq(s.engine.max_num_seqs, 8);
        ck_assert_uint_eq(s.engine.max_num_batched_tokens, 128);
        ck_assert(!s.engine.enable_chunked_prefill);
        ck_assert_uint_eq(s.engine.long_prefill_token_threshold, 64);
        ck_assert_uint_eq(s.engine.max_model_len, 100);
        ck_assert_uint_eq(s.engine.block_size, 32);
        ck_assert_uint_eq(s.engine.kv_cache_space, UINT64_C(1) << 30);
        ck_assert(!s.engine.enable_prefix_caching);
        ck_assert_int_eq(s.engine.scheduling_policy, SCHEDULING_PRIORITY);
        ck_assert_uint_eq(s.engine.seed, UINT64_MAX);
        ck_assert_int_eq(s.engine.max_logprobs, 5);
        ck_assert_double_eq(s.engine.decode_stall_limit, 1.5);
        ck_assert_str_eq(s.device, "cpu");
        ck_assert_uint_eq(s.engine.tensor_parallel_size, 1);
        ck_assert_uint_eq(s.threads, 3);
        ck_assert_str_eq(s.socket, "/tmp/x.sock");
        ck_assert_int_eq(s.bus, DAEMON_BUS_USER);
        ck_assert_int_eq(s.log_level, LOG_DEBUG);
        ck_assert_double_eq(s.shutdown_timeout, 2.5);
        ck_assert_double_eq(s.health_stall_timeout, 0.5);
        ck_assert_uint_eq(s.max_line_bytes, 65536);
        ck_assert_uint_eq(s.max_requests_per_connection, 4);
        ck_assert_uint_eq(s.max_requests_per_uid, 5);
        ck_assert_uint_eq(s.max_connections, 6);
        ck_assert_double_eq(s.client_timeout, 7);
        ck_assert_str_eq(s.admin_group, "wheel");
        ck_assert_str_eq(s.service_group, "users");
        ck_assert_uint_eq(s.from_file, 0);
        ck_assert_uint_ne(s.from_command_line, 0);
        daemon_settings_done(&s);

        /* booleans: bare, =BOOL in every spelling, --no-; the last one given wins */
        ck_assert_int_eq(load(&s, ARGS("--no-enable-prefix-caching", "--enable-prefix-caching"), NULL, false, &err), 0);
        ck_assert(s.engine.enable_prefix_caching);
        daemon_settings_done(&s);
        static const char *const yes[] = { "true", "yes", "on", "1", "TRUE", "Yes" };
        static const char *const no[] = { "false", "no", "off", "0", "False", "OFF" };
        for (size_t i = 0; i < 6; i++) {
                char a[64], b[64];
                snprintf(a, sizeof(a), "--enable-chunked-prefill=%s", no[i]);
                snprintf(b, sizeof(b), "--enable-prefix-caching=%s", yes[i]);
                ck_assert_int_eq(load(&s, ARGS(a, "--no-enable-prefix-caching", b), NULL, false, &err), 0);
                ck_assert(!s.engine.enable_chunked_prefill);
                ck_assert(s.engine.enable_prefix_caching);
                daemon_settings_done(&s);
        }
        ck_assert_int_eq(load(&s, ARGS("--max-num-seqs", "8", "--max-num-seqs=16"), NULL, false, &err), 0);
        ck_assert_uint_eq(s.engine.max_num_seqs, 16);
        daemon_settings_done(&s);

        /* --help and --version stop parsing, whatever follows */
        ck_assert_int_eq(load(&s, ARGS("--max-num-seqs", "8", "--help", "--bogus"), NULL, false, &err), 0);
        ck_assert_int_eq(s.action, DAEMON_SETTINGS_HELP);
        daemon_settings_done(&s);
        ck_assert_int_eq(load(&s, ARGS("-V"), NULL, false, &err), 0);
        ck_assert_int_eq(s.action, DAEMON_SETTINGS_VERSION);
        daemon_settings_done(&s);
        ck_assert_int_eq(load(&s, ARGS("-h"), NULL, false, &err), 0);
        ck_assert_int_eq(s.action, DAEMON_SETTINGS_HELP);
        daemon_settings_done(&s);
}
END_TEST

START_TEST(test_flag_errors) {
        expect_flag_error(ARGS("--bogus"), "unknown or ambiguous option '--bogus'");
        expect_flag_error(ARGS("--max"), "unknown or ambiguous option '--max'");
        expect_flag_error(ARGS("-x"), "unknown option '-x'");
        expect_flag_error(ARGS("--model"), "option '--model' needs a value");
        expect_flag_error(ARGS("--no-enable-chunked-prefill=yes"),
                          "option '--no-enable-chunked-prefill=yes' takes no value");
        expect_flag_error(ARGS("--help=me"), "takes no value");
        expect_flag_error(ARGS("model.gguf"), "unexpected argument 'model.gguf'");
        expect_flag_error(ARGS("--enable-chunked-prefill", "false"), "unexpected argument 'false'");
        expect_flag_error(ARGS("--max-num-seqs", "0"), "--max-num-seqs: 0 is out of range; allowed: 1 to 4096");
        expect_flag_error(ARGS("--max-num-seqs=4097"), "--max-num-seqs: 4097 is out of range; allowed: 1 to 4096");
        expect_flag_error(ARGS("--max-num-seqs=64x"), "--max-num-seqs: '64x' is not an integer; allowed: 1 to 4096");
        expect_flag_error(ARGS("--max-num-seqs=-1"), "--max-num-seqs: -1 is out of range; allowed: 1 to 4096");
        expect_flag_error(ARGS("--max-num-seqs="), "--max-num-seqs: empty value; allowed: 1 to 4096");
        expect_flag_error(ARGS("--max-num-seqs= 8"), "'\x20""8' is not an integer");
        expect_flag_error(ARGS("--max-num-seqs=0x10"), "'0x10' is not an integer");
        expect_flag_error(ARGS("--max-num-seqs=+8"), "'+8' is not an integer");
        expect_flag_error(ARGS("--seed=-0"), "--seed: -0 is out of range; allowed: 0 to 18446744073709551615");
        expect_flag_error(ARGS("--seed=18446744073709551616"),
                          "--seed: 18446744073709551616 is out of range; allowed: 0 to 18446744073709551615");
        expect_flag_error(ARGS("--threads=99999999999999999999999"),
                          "--threads: 99999999999999999999999 is out of range; allowed: 0 (online CPUs) to 4096");
        expect_flag_error(ARGS("--max-model-len=-5"), "allowed: 0 (the model's context length) to 16777216");
        expect_flag_error(ARGS("--scheduling-policy", "lifo"),
                          "--scheduling-policy: 'lifo' is not one of fcfs, priority, slo");
        expect_flag_error(ARGS("--device=tpu"), "--device: 'tpu' is not one of cpu, cuda");
        expect_flag_error(ARGS("--gpu-memory-utilization=1"),
                          "--gpu-memory-utilization: 1 is out of range; allowed: a fraction from 0 to less than 1");
        expect_flag_error(ARGS("--tensor-parallel-size=65"), "--tensor-parallel-size: 65 is out of range; allowed: 1 to 64");
        expect_flag_error(ARGS("--bus=session"), "--bus: 'session' is not one of none, system, user");
        expect_flag_error(ARGS("--log-level=verbose"),
                          "--log-level: 'verbose' is not one of emerg, alert, crit, err, warning, notice, info, debug");
        expect_flag_error(ARGS("--enable-prefix-caching=maybe"),
                          "--enable-prefix-caching: 'maybe' is not a boolean; "
                          "allowed: true, false, yes, no, on, off, 1, 0");
        expect_flag_error(ARGS("--tensor-parallel-size=0"),
                          "--tensor-parallel-size: 0 is out of range; allowed: 1 to 64");
        expect_flag_error(ARGS("--block-size=2048"), "--block-size: 2048 is out of range; allowed: 1 to 1024");
        expect_flag_error(ARGS("--decode-stall-limit=1"),
                          "--decode-stall-limit: 1 is out of range; "
                          "allowed: 0 (no limit), or more than 1 and at most 1000");
        expect_flag_error(ARGS("--decode-stall-limit=0.5"), "0.5 is out of range");
        expect_flag_error(ARGS("--decode-stall-limit=1000.5"), "1000.5 is out of range");
        expect_flag_error(ARGS("--decode-stall-limit=nan"), "'nan' is not a number");
        expect_flag_error(ARGS("--decode-stall-limit=inf"), "'inf' is not a number");
        expect_flag_error(ARGS("--slo-aim-factor=1"),
                          "--slo-aim-factor: 1 is out of range; "
                          "allowed: 0 (at the slo), or more than 1 and at most 1000");
        expect_flag_error(ARGS("--slo-aim-factor=-2"), "-2 is out of range");
        expect_flag_error(ARGS("--slo-aim-factor=fast"), "--slo-aim-factor: 'fast' is not a number");
        expect_flag_error(ARGS("--shutdown-timeout=-1"),
                          "--shutdown-timeout: -1 is out of range; allowed: 0 to 86400 seconds");
        expect_flag_error(ARGS("--shutdown-timeout=1e999"), "1e999 is out of range");
        expect_flag_error(ARGS("--client-timeout=30s"),
                          "--client-timeout: '30s' is not a number; allowed: 0.1 to 86400 seconds");
        expect_flag_error(ARGS("--health-stall-timeout=0"),
                          "--health-stall-timeout: 0 is out of range; allowed: 0.1 to 86400 seconds");
        expect_flag_error(ARGS("--max-connections=65537"),
                          "--max-connections: 65537 is out of range; allowed: 1 to 65536");
        expect_flag_error(ARGS("--max-requests-per-uid=0"), "--max-requests-per-uid: 0 is out of range");
        expect_flag_error(ARGS("--max-requests-per-connection=abc"), "'abc' is not an integer");
        expect_flag_error(ARGS("--admin-group=a b"), "--admin-group: 'a b' is not a group name; allowed: a group name");
        expect_flag_error(ARGS("--service-group=1users"), "'1users' is not a group name");
        expect_flag_error(ARGS("--service-group=abcdefghijabcdefghijabcdefghijab"), "is not a group name"); /* 32 */
        expect_flag_error(ARGS("--model="), "--model: empty value; allowed: a path");
        expect_flag_error(ARGS("--config="), "--config: empty value");

        char long_path[200];
        memset(long_path, 'a', sizeof(long_path) - 1);
        long_path[0] = '/';
        long_path[sizeof(long_path) - 1] = 0;
        expect_flag_error(ARGS("--socket", long_path), "is 199 bytes long; allowed: a path of at most 107 bytes");
}
END_TEST

START_TEST(test_sizes) {
        static const struct {
                const char *text;
                uint64_t bytes;
        } good[] = {
                { "1048576", 1048576 },
                { "2M", 2000000 },
                { "2MB", 2000000 },
                { "256MiB", UINT64_C(256) << 20 },
                { "1G", 1000000000 },
                { "1GB", 1000000000 },
                { "3 GiB", UINT64_C(3) << 30 },
                { "3\tGiB", UINT64_C(3) << 30 },
                { "2000000B", 2000000 },
                { "1T", UINT64_C(1000000000000) },
                { "16TiB", UINT64_C(16) << 40 },
                { "4096K", 4096000 },
                { "1024KiB", 1048576 },
        };
        struct daemon_settings s;
        struct error err;
        for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++) {
                char flag[64];
                snprintf(flag, sizeof(flag), "--kv-cache-space=%s", good[i].text);
                ck_assert_int_eq(load(&s, ARGS(flag), NULL, false, &err), 0);
                ck_assert_msg(s.engine.kv_cache_space == good[i].bytes, "%s", good[i].text);
                daemon_settings_done(&s);
        }
        expect_flag_error(ARGS("--kv-cache-space=1M"), "--kv-cache-space: 1M is out of range; allowed: 1MiB to 16TiB");
        expect_flag_error(ARGS("--kv-cache-space=17TiB"), "17TiB is out of range");
        expect_flag_error(ARGS("--kv-cache-space=18446744073709551615TiB"), "18446744073709551615TiB is out of range");
        expect_flag_error(ARGS("--kv-cache-space=99999999999999999999999"), "99999999999999999999999 is out of range");
        expect_flag_error(ARGS("--kv-cache-space=-1G"), "-1G is out of range");
        expect_flag_error(ARGS("--kv-cache-space=12X"),
                          "--kv-cache-space: '12X' is not a size; allowed: 1MiB to 16TiB, in bytes, "
                          "optionally followed by K, M, G, T (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)");
        expect_flag_error(ARGS("--kv-cache-space=1.5G"), "'1.5G' is not a size");
        expect_flag_error(ARGS("--kv-cache-space=1gib"), "'1gib' is not a size");
        expect_flag_error(ARGS("--kv-cache-space=GiB"), "'GiB' is not a size");
        expect_flag_error(ARGS("--max-line-bytes=100"), "--max-line-bytes: 100 is out of range; allowed: 1KiB to 1GiB");

        /* formatting picks the largest exact binary unit */
        ck_assert_int_eq(load(&s, ARGS("--kv-cache-space=1000000000", "--max-line-bytes=3KiB"), NULL, false, &err), 0);
        expect_format(&s, "kv-cache-space", "1000000000");
        expect_format(&s, "max-line-bytes", "3KiB");
        daemon_settings_done(&s);
}
END_TEST

START_TEST(test_file) {
        struct daemon_settings s;
        struct error err;
        char *path = write_conf("asyncllmd.conf",
                                "\xef\xbb\xbf# asyncllmd.conf for a test\n"
                                "\n"
                                "   # an indented comment\n"
                                "model=/srv/models/m.gguf\n"
                                "chat-template = /etc/asyncllm/chatml.jinja\n"
                                "  max-num-seqs   =   12  \n"
                                "max-num-batched-tokens = 96\r\n"
                                "\tenable-chunked-prefill\t=\tno\n"
                                "enable-prefix-caching = off\n"
                                "kv-cache-space = 512 MiB\n"
                                "scheduling-policy = priority\n"
                                "decode-stall-limit = 0\n"
                                "bus = system\n"
                                "log-level = warning\n"
                                "socket = /run/test/a b.sock\n"
                                "admin-group = wheel\n"
                                "client-timeout = 12.5\n"
                                "   \t \n"
                                "max-line-bytes = 2097152"); /* no final newline */
        ck_assert_int_eq(load(&s, ARGS("--config", path), NULL, true, &err), 0);
        ck_assert_str_eq(s.config, path);
        ck_assert_str_eq(s.model, "/srv/models/m.gguf");
        ck_assert_str_eq(s.chat_template, "/etc/asyncllm/chatml.jinja");
        ck_assert_uint_eq(s.engine.max_num_seqs, 12);
        ck_assert_uint_eq(s.engine.max_num_batched_tokens, 96);
        ck_assert(!s.engine.enable_chunked_prefill);
        ck_assert(!s.engine.enable_prefix_caching);
        ck_assert_uint_eq(s.engine.kv_cache_space, UINT64_C(512) << 20);
        ck_assert_int_eq(s.engine.scheduling_policy, SCHEDULING_PRIORITY);
        ck_assert_double_eq(s.engine.decode_stall_limit, 0);
        ck_assert_int_eq(s.bus, DAEMON_BUS_SYSTEM);
        ck_assert_int_eq(s.log_level, LOG_WARNING);
        ck_assert_str_eq(s.socket, "/run/test/a b.sock");
        ck_assert_str_eq(s.admin_group, "wheel");
        ck_assert_double_eq(s.client_timeout, 12.5);
        ck_assert_uint_eq(s.max_line_bytes, 2 << 20);
        ck_assert_str_eq(s.service_group, "asyncllm"); /* untouched */
        daemon_settings_done(&s);

        /* the default file is read when there is no --config, and may be missing */
        ck_assert_int_eq(load(&s, NULL, path, true, &err), 0);
        ck_assert_str_eq(s.config, path);
        ck_assert_uint_eq(s.engine.max_num_seqs, 12);
        daemon_settings_done(&s);
        char *missing = test_path_join(tmpdir, "missing.conf");
        ck_assert_int_eq(load(&s, NULL, missing, true, &err), 0);
        ck_assert_ptr_null(s.config);
        ck_assert_uint_eq(s.engine.max_num_seqs, 64);
        daemon_settings_done(&s);

        /* a missing --config file is an error, and so is one that cannot be read */
        ck_assert_int_eq(load(&s, ARGS("--config", missing), path, true, &err), -ENOENT);
        ck_assert_ptr_nonnull(strstr(err.message, missing));
        ck_assert_ptr_nonnull(strstr(err.message, "named by --config"));
        ck_assert_ptr_nonnull(strstr(err.message, "No such file or directory"));
        daemon_settings_done(&s);
        ck_assert_int_lt(load(&s, ARGS("--config", tmpdir), NULL, true, &err), 0);
        ck_assert_ptr_nonnull(strstr(err.message, tmpdir));
        daemon_settings_done(&s);
        ck_assert_int_lt(load(&s, NULL, tmpdir, true, &err), 0); /* a directory is not "missing" */
        daemon_settings_done(&s);

        /* an empty file is fine */
        char *empty = write_conf("empty.conf", "");
        ck_assert_int_eq(load(&s, ARGS("--config", empty), NULL, true, &err), 0);
        ck_assert_uint_eq(s.from_file, 0);
        daemon_settings_done(&s);

        free(empty);
        free(missing);
        free(path);
}
END_TEST

START_TEST(test_file_errors) {
        expect_file_error("# fine\nmax-num-sequences = 4\n",
                          "bad.conf:2: unknown key 'max-num-sequences'; the keys are listed in asyncllmd.conf(5)");
        expect_file_error("max_num_seqs = 4\n", ":1: unknown key 'max_num_seqs'; did you mean 'max-num-seqs'?");
        expect_file_error("--max-num-seqs = 4\n", "unknown key '--max-num-seqs'; did you mean 'max-num-seqs'?");
        expect_file_error("no-enable-prefix-caching = true\n",
                          "unknown key 'no-enable-prefix-caching'; write 'enable-prefix-caching = false'");
        expect_file_error("config = /etc/other.conf\n",
                          ":1: 'config' cannot be set in a configuration file; use --config");
        expect_file_error("enable-chunked-prefill = maybe\n",
                          "bad.conf:1: enable-chunked-prefill: 'maybe' is not a boolean; "
                          "allowed: true, false, yes, no, on, off, 1, 0");
        expect_file_error("\n\nmax-num-seqs = 0\n", "bad.conf:3: max-num-seqs: 0 is out of range; allowed: 1 to 4096");
        expect_file_error("max-num-seqs = many\n", "max-num-seqs: 'many' is not an integer; allowed: 1 to 4096");
        expect_file_error("max-num-seqs = 64x\n", "max-num-seqs: '64x' is not an integer; allowed: 1 to 4096");
        expect_file_error("max-num-seqs = 64 # seats\n", "max-num-seqs: '64 # seats' is not an integer");
        expect_file_error("max-num-seqs = -3\n", "max-num-seqs: -3 is out of range; allowed: 1 to 4096");
        expect_file_error("seed = 99999999999999999999\n",
                          "seed: 99999999999999999999 is out of range; allowed: 0 to 18446744073709551615");
        expect_file_error("kv-cache-space = 10 parsecs\n",
                          "kv-cache-space: '10 parsecs' is not a size; allowed: 1MiB to 16TiB");
        expect_file_error("scheduling-policy = lifo\n",
                          ":1: scheduling-policy: 'lifo' is not one of fcfs, priority, slo");
        expect_file_error("\ndevice = tpu\n", "bad.conf:2: device: 'tpu' is not one of cpu, cuda");
        expect_file_error("tensor-parallel-size = 0\n", "bad.conf:1: tensor-parallel-size: 0 is out of range; allowed: 1 to 64");
        expect_file_error("max-num-seqs = 4\nblock-size = 8\nmax-num-seqs = 8\n",
                          "bad.conf:3: max-num-seqs = 8: the key was already set on line 1; each key may appear once");
        expect_file_error("max-num-seqs 4\n", "bad.conf:1: 'max-num-seqs 4' is not a 'key = value' line");
        expect_file_error("= 4\n", "bad.conf:1: '= 4' has no key before '='");
        expect_file_error("model =\n", "bad.conf:1: model: empty value; allowed: a path");
        expect_file_error("max-num-seqs = \n", "max-num-seqs: empty value; allowed: 1 to 4096");
}
END_TEST

START_TEST(test_file_nul_byte) {
        struct daemon_settings s;
        struct error err;
        char *path = test_path_join(tmpdir, "nul.conf");
        static const char text[] = "max-num-seqs = 4\nblock-size = 8\0x\n";
        ck_assert_int_eq(test_write_file(path, text, sizeof(text) - 1), 0);
        ck_assert_int_eq(load(&s, ARGS("--config", path), NULL, false, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "nul.conf:2: the line contains a NUL byte"));
        daemon_settings_done(&s);
        free(path);
}
END_TEST

START_TEST(test_precedence) {
        struct daemon_settings s;
        struct error err;
        char *path = write_conf("p.conf", "max-num-seqs = 12\nblock-size = 32\nlog-level = debug\n");

        /* flag > file > default */
        ck_assert_int_eq(load(&s, ARGS("--max-num-seqs", "4", "--config", path), NULL, true, &err), 0);
        ck_assert_uint_eq(s.engine.max_num_seqs, 4);   /* flag */
        ck_assert_uint_eq(s.engine.block_size, 32);    /* file */
        ck_assert_int_eq(s.log_level, LOG_DEBUG);      /* file */
        ck_assert_uint_eq(s.max_connections, 256);     /* default */
        ck_assert_uint_eq(s.from_command_line & s.from_file, 0);
        char *dump = NULL;
        size_t dump_len = 0;
        FILE *f = open_memstream(&dump, &dump_len);
        daemon_settings_dump(&s, f);
        fclose(f);
        ck_assert_ptr_nonnull(strstr(dump, "# from the command line\nmax-num-seqs = 4\n# config = "));
        ck_assert_ptr_nonnull(strstr(dump, "# from the configuration file "));
        ck_assert_ptr_nonnull(strstr(dump, "\nblock-size = 32\nlog-level = debug\n# defaults\n"));
        ck_assert_ptr_nonnull(strstr(dump, "\nmax-connections = 256\n"));
        free(dump);
        daemon_settings_done(&s);

        /* the order on the command line does not matter: --config last still loses to flags */
        ck_assert_int_eq(load(&s, ARGS("--config", path, "--no-enable-prefix-caching", "--block-size=8"), NULL, true,
                              &err),
                         0);
        ck_assert_uint_eq(s.engine.block_size, 8);
        ck_assert_uint_eq(s.engine.max_num_seqs, 12);
        daemon_settings_done(&s);

        /* a bad value in the file is an error even when a flag overrides it */
        char *bad = write_conf("bad-overridden.conf", "max-num-seqs = 0\n");
        ck_assert_int_eq(load(&s, ARGS("--max-num-seqs", "4", "--config", bad), NULL, true, &err), -ERANGE);
        ck_assert_ptr_nonnull(strstr(err.message, "bad-overridden.conf:1: max-num-seqs: 0 is out of range"));
        daemon_settings_done(&s);

        free(bad);
        free(path);
}
END_TEST

START_TEST(test_default_socket) {
        char *path;
        struct error err;

        ck_assert_int_eq(setenv("RUNTIME_DIRECTORY", "/run/asyncllm", 1), 0);
        ck_assert_int_eq(daemon_settings_default_socket(1000, &path, &err), 0);
        ck_assert_str_eq(path, "/run/asyncllm/asyncllmd.sock");
        free(path);
        ck_assert_int_eq(setenv("RUNTIME_DIRECTORY", "/run/first:/run/second", 1), 0);
        ck_assert_int_eq(daemon_settings_default_socket(0, &path, &err), 0);
        ck_assert_str_eq(path, "/run/first/asyncllmd.sock");
        free(path);

        ck_assert_int_eq(unsetenv("RUNTIME_DIRECTORY"), 0);
        ck_assert_int_eq(setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1), 0);
        ck_assert_int_eq(daemon_settings_default_socket(0, &path, &err), 0);
        ck_assert_str_eq(path, "/run/asyncllm/asyncllmd.sock");
        free(path);
        ck_assert_int_eq(daemon_settings_default_socket(1000, &path, &err), 0);
        ck_assert_str_eq(path, "/run/user/1000/asyncllm/asyncllmd.sock");
        free(path);
        ck_assert_int_eq(setenv("RUNTIME_DIRECTORY", "", 1), 0); /* empty counts as unset */
        ck_assert_int_eq(daemon_settings_default_socket(1000, &path, &err), 0);
        ck_assert_str_eq(path, "/run/user/1000/asyncllm/asyncllmd.sock");
        free(path);

        ck_assert_int_eq(unsetenv("XDG_RUNTIME_DIR"), 0);
        ck_assert_int_eq(daemon_settings_default_socket(1000, &path, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "socket: no default for uid 1000"));
        ck_assert_ptr_nonnull(strstr(err.message, "pass --socket PATH"));
        ck_assert_int_eq(daemon_settings_default_socket(0, &path, &err), 0); /* root needs neither */
        ck_assert_str_eq(path, "/run/asyncllm/asyncllmd.sock");
        free(path);

        char long_dir[120];
        memset(long_dir, 'd', sizeof(long_dir) - 1);
        long_dir[0] = '/';
        long_dir[sizeof(long_dir) - 1] = 0;
        ck_assert_int_eq(setenv("XDG_RUNTIME_DIR", long_dir, 1), 0);
        ck_assert_int_eq(daemon_settings_default_socket(1000, &path, &err), -ENAMETOOLONG);
        ck_assert_ptr_nonnull(strstr(err.message, "allowed: at most 107"));
        ck_assert_int_eq(unsetenv("XDG_RUNTIME_DIR"), 0);

        /* resolve() uses it only when no socket was set */
        struct daemon_settings s;
        ck_assert_int_eq(setenv("RUNTIME_DIRECTORY", "/run/unit", 1), 0);
        ck_assert_int_eq(load(&s, NULL, NULL, true, &err), 0);
        ck_assert_str_eq(s.socket, "/run/unit/asyncllmd.sock");
        daemon_settings_done(&s);
        ck_assert_int_eq(load(&s, ARGS("--socket=/tmp/mine.sock"), NULL, true, &err), 0);
        ck_assert_str_eq(s.socket, "/tmp/mine.sock");
        daemon_settings_done(&s);
}
END_TEST

START_TEST(test_default_model_and_threads) {
        char *path, *models = test_path_join(tmpdir, "models");
        char *model = test_path_join(models, DEFAULT_MODEL_NAME);

        /* no model in the "source tree": the installed one (/var/lib/asyncllm/models/...) */
        char *installed;
        ck_assert_int_eq(daemon_settings_default_model(NULL, &installed), 0);
        ck_assert_ptr_nonnull(strstr(installed, "/models/" DEFAULT_MODEL_NAME));
        ck_assert_ptr_null(strstr(installed, tmpdir));
        ck_assert_int_eq(daemon_settings_default_model(tmpdir, &path), 0);
        ck_assert_str_eq(path, installed);
        free(path);
        ck_assert_int_eq(daemon_settings_default_model("", &path), 0);
        ck_assert_str_eq(path, installed);
        free(path);
        /* a source tree with the model */
        ck_assert_int_eq(mkdir(models, 0755), 0);
        ck_assert_int_eq(test_write_file(model, "GGUF", 4), 0);
        ck_assert_int_eq(daemon_settings_default_model(tmpdir, &path), 0);
        ck_assert_str_eq(path, model);
        free(path);
        ck_assert_int_eq(unlink(model), 0);
        ck_assert_int_eq(rmdir(models), 0);
        free(installed);

        /* resolve(): some model path, and threads = online CPUs unless given */
        struct daemon_settings s;
        struct error err;
        ck_assert_int_eq(load(&s, NULL, NULL, true, &err), 0);
        ck_assert_ptr_nonnull(s.model);
        ck_assert_ptr_nonnull(strstr(s.model, "/models/" DEFAULT_MODEL_NAME));
        ck_assert_uint_eq(s.threads, (uint32_t) sysconf(_SC_NPROCESSORS_ONLN));
        daemon_settings_done(&s);
        ck_assert_int_eq(load(&s, ARGS("--threads=2", "--model=x.gguf"), NULL, true, &err), 0);
        ck_assert_uint_eq(s.threads, 2);
        ck_assert_str_eq(s.model, "x.gguf");
        daemon_settings_done(&s);

        free(model);
        free(models);
}
END_TEST

START_TEST(test_resolve_cross_checks) {
        struct daemon_settings s;
        struct error err;

        /* a token budget that was not set follows max-num-seqs ... */
        ck_assert_int_eq(load(&s, ARGS("--max-num-seqs=2048"), NULL, true, &err), 0);
        ck_assert_uint_eq(s.engine.max_num_batched_tokens, 2048);
        daemon_settings_done(&s);
        /* ... one that was set must hold it */
        ck_assert_int_eq(load(&s, ARGS("--max-num-seqs=1024", "--max-num-batched-tokens=512"), NULL, true, &err),
                         -EINVAL);
        ck_assert_str_eq(err.message, "max-num-batched-tokens: 512 is less than max-num-seqs (1024); "
                                      "allowed: at least max-num-seqs");
        daemon_settings_done(&s);
        char *path = write_conf("budget.conf", "max-num-batched-tokens = 16\n");
        ck_assert_int_eq(load(&s, ARGS("--config", path), NULL, true, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "max-num-batched-tokens: 16 is less than max-num-seqs (64)"));
        daemon_settings_done(&s);

        /* without chunked prefill the budget holds a whole max-model-len prompt */
        ck_assert_int_eq(load(&s, ARGS("--no-enable-chunked-prefill", "--max-model-len=2048"), NULL, true, &err), 0);
        ck_assert_uint_eq(s.engine.max_num_batched_tokens, 2048);
        daemon_settings_done(&s);
        ck_assert_int_eq(load(&s,
                              ARGS("--no-enable-chunked-prefill", "--max-model-len=2048",
                                   "--max-num-batched-tokens=1024"),
                              NULL, true, &err),
                         -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "max-num-batched-tokens: 1024 is less than max-model-len (2048)"));
        daemon_settings_done(&s);
        ck_assert_int_eq(load(&s, ARGS("--max-model-len=2048", "--max-num-batched-tokens=1024"), NULL, true, &err), 0);
        daemon_settings_done(&s);

        /* what resolve() lets through, engine_config_finalize() accepts */
        ck_assert_int_eq(load(&s, ARGS("--max-num-seqs=4096", "--decode-stall-limit=1000", "--block-size=1024"), NULL,
                              true, &err),
                         0);
        ck_assert_int_eq(engine_config_finalize(&s.engine, 8192, &err), 0);
        daemon_settings_done(&s);
        free(path);
}
END_TEST

START_TEST(test_load) {
        struct daemon_settings s;
        struct error err;
        bool usage;
        char *argv[] = { (char *) "asyncllmd", (char *) "--max-num-seqs=0", NULL };
        ck_assert_int_eq(daemon_settings_load(&s, 2, argv, &usage, &err), -ERANGE);
        ck_assert(usage);
        char *path = write_conf("l.conf", "max-num-seqs = 0\n");
        char *argv2[] = { (char *) "asyncllmd", (char *) "--config", path, NULL };
        ck_assert_int_eq(daemon_settings_load(&s, 3, argv2, &usage, &err), -ERANGE);
        ck_assert(!usage);
        char *good = write_conf("good.conf", "max-num-seqs = 3\n");
        char *argv3[] = { (char *) "asyncllmd", (char *) "--config", good, NULL };
        ck_assert_int_eq(daemon_settings_load(&s, 3, argv3, &usage, &err), 0);
        ck_assert(!usage);
        ck_assert_uint_eq(s.engine.max_num_seqs, 3);
        ck_assert_ptr_nonnull(s.socket);
        daemon_settings_done(&s);
        free(good);
        free(path);
}
END_TEST

static bool listed(const char *const *keys, unsigned n, const char *key) {
        for (unsigned i = 0; i < n; i++)
                if (strcmp(keys[i], key) == 0)
                        return true;
        return false;
}

START_TEST(test_reload) {
        struct daemon_settings cur, next;
        struct daemon_settings_changes ch;
        struct error err;
        char *path = write_conf("r.conf",
                                "log-level = info\nmax-num-seqs = 8\nmax-connections = 10\nclient-timeout = 3\n"
                                "block-size = 32\n");
        char *argv[] = { (char *) "asyncllmd", (char *) "--client-timeout", (char *) "5", (char *) "--config", path,
                         (char *) "--model=/m.gguf", NULL };
        int argc = 6;

        ck_assert_int_eq(daemon_settings_init(&cur), 0);
        cur.default_config = NULL;
        ck_assert_int_eq(daemon_settings_parse_argv(&cur, argc, argv, &err), 0);
        ck_assert_int_eq(daemon_settings_load_file(&cur, &err), 0);
        ck_assert_int_eq(daemon_settings_resolve(&cur, &err), 0);
        ck_assert_double_eq(cur.client_timeout, 5);
        const char *model = cur.model, *socket = cur.socket;

        /* nothing changed */
        ck_assert_int_eq(daemon_settings_reload(&cur, argc, argv, &next, &ch, &err), 0);
        ck_assert_uint_eq(ch.n_applied, 0);
        ck_assert_uint_eq(ch.n_need_restart, 0);
        daemon_settings_apply_reload(&cur, &next);

        /* reloadable keys take effect, the others wait for a restart, flags still win, and a
         * key taken out of the file goes back to its default */
        char *v2 = write_conf("r.conf",
                              "log-level = debug\nmax-num-seqs = 16\nmax-connections = 20\nclient-timeout = 7\n"
                              "admin-group = wheel\nshutdown-timeout = 1.5\n");
        ck_assert_int_eq(daemon_settings_reload(&cur, argc, argv, &next, &ch, &err), 0);
        ck_assert_uint_eq(ch.n_applied, 4);
        ck_assert(listed(ch.applied, ch.n_applied, "log-level"));
        ck_assert(listed(ch.applied, ch.n_applied, "max-connections"));
        ck_assert(listed(ch.applied, ch.n_applied, "admin-group"));
        ck_assert(listed(ch.applied, ch.n_applied, "shutdown-timeout"));
        ck_assert_uint_eq(ch.n_need_restart, 2);
        ck_assert(listed(ch.need_restart, ch.n_need_restart, "max-num-seqs"));
        ck_assert(listed(ch.need_restart, ch.n_need_restart, "block-size"));
        char before[64], after[64];
        ck_assert_int_eq(daemon_settings_format(&cur, "max-connections", before, sizeof(before)), 0);
        ck_assert_int_eq(daemon_settings_format(&next, "max-connections", after, sizeof(after)), 0);
        ck_assert_str_eq(before, "10");
        ck_assert_str_eq(after, "20");
        daemon_settings_apply_reload(&cur, &next);
        ck_assert_int_eq(cur.log_level, LOG_DEBUG);
        ck_assert_uint_eq(cur.max_connections, 20);
        ck_assert_str_eq(cur.admin_group, "wheel");
        ck_assert_double_eq(cur.shutdown_timeout, 1.5);
        ck_assert_double_eq(cur.client_timeout, 5);      /* the flag */
        ck_assert_uint_eq(cur.engine.max_num_seqs, 8);   /* needs a restart */
        ck_assert_uint_eq(cur.engine.block_size, 32);    /* needs a restart */
        ck_assert_ptr_eq(cur.model, model);              /* not moved */
        ck_assert_ptr_eq(cur.socket, socket);

        /* a broken file leaves everything as it was */
        char *v3 = write_conf("r.conf", "log-level = loud\n");
        ck_assert_int_eq(daemon_settings_reload(&cur, argc, argv, &next, &ch, &err), -EINVAL);
        ck_assert_ptr_nonnull(strstr(err.message, "r.conf:1: log-level: 'loud' is not one of emerg"));
        ck_assert_int_eq(cur.log_level, LOG_DEBUG);
        ck_assert_str_eq(cur.admin_group, "wheel");

        /* a file that is gone now is an error too (it was named by --config) */
        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_eq(daemon_settings_reload(&cur, argc, argv, &next, &ch, &err), -ENOENT);

        ck_assert(daemon_settings_key_reloadable("log-level"));
        ck_assert(daemon_settings_key_reloadable("service-group"));
        ck_assert(!daemon_settings_key_reloadable("max-num-seqs"));
        ck_assert(!daemon_settings_key_reloadable("nonsense"));
        ck_assert(daemon_settings_key_exists("kv-cache-space"));
        ck_assert(!daemon_settings_key_exists("kv_cache_space"));

        daemon_settings_done(&cur);
        free(v3);
        free(v2);
        free(path);
}
END_TEST

/* The slo policy's keys: the policy itself, admission, the default SLOs and the KV reserve;
 * from flags and the file, their bounds, and a restart (not SIGHUP) to change them. */
START_TEST(test_slo_keys) {
        struct daemon_settings s, next;
        struct daemon_settings_changes ch;
        struct error err;

        ck_assert_int_eq(load(&s, ARGS("--scheduling-policy=slo", "--slo-admission", "demote", "--default-slo=0.02",
                                       "--default-ttft-slo", "0.25", "--slo-kv-reserve=0", "--slo-aim-factor=0"),
                              NULL, true, &err),
                         0);
        ck_assert_int_eq(s.engine.scheduling_policy, SCHEDULING_SLO);
        ck_assert_int_eq(s.engine.slo_admission, SLO_ADMISSION_DEMOTE);
        ck_assert_double_eq(s.engine.default_slo, 0.02);
        ck_assert_double_eq(s.engine.default_ttft_slo, 0.25);
        ck_assert_double_eq(s.engine.slo_kv_reserve, 0);
        ck_assert_double_eq(s.engine.slo_aim_factor, 0);
        expect_format(&s, "scheduling-policy", "slo");
        expect_format(&s, "slo-admission", "demote");
        expect_format(&s, "default-ttft-slo", "0.25");
        daemon_settings_done(&s);

        /* the bounds themselves */
        ck_assert_int_eq(load(&s, ARGS("--default-slo=3600", "--default-ttft-slo=0.000001", "--slo-kv-reserve=0.999",
                                       "--slo-aim-factor=1000"),
                              NULL, true, &err),
                         0);
        ck_assert_double_eq(s.engine.default_slo, 3600);
        ck_assert_double_eq(s.engine.default_ttft_slo, 0.000001);
        ck_assert_double_eq(s.engine.slo_kv_reserve, 0.999);
        ck_assert_double_eq(s.engine.slo_aim_factor, 1000);
        daemon_settings_done(&s);

        char *path = write_conf("slo.conf", "scheduling-policy = slo\nslo-admission = reject\ndefault-slo = 0.1\n"
                                            "default-ttft-slo = 2\nslo-kv-reserve = 0.25\nslo-aim-factor = 3\n");
        char *argv[] = { (char *) "asyncllmd", (char *) "--config", path, NULL };
        ck_assert_int_eq(load(&s, ARGS("--config", path), NULL, true, &err), 0);
        ck_assert_int_eq(s.engine.scheduling_policy, SCHEDULING_SLO);
        ck_assert_int_eq(s.engine.slo_admission, SLO_ADMISSION_REJECT);
        ck_assert_double_eq(s.engine.default_slo, 0.1);
        ck_assert_double_eq(s.engine.default_ttft_slo, 2);
        ck_assert_double_eq(s.engine.slo_kv_reserve, 0.25);
        ck_assert_double_eq(s.engine.slo_aim_factor, 3);

        /* engine settings: a change waits for a restart */
        char *v2 = write_conf("slo.conf", "scheduling-policy = priority\nslo-admission = demote\ndefault-slo = 0.2\n"
                                          "default-ttft-slo = 3\nslo-kv-reserve = 0.5\nslo-aim-factor = 3\n");
        ck_assert_int_eq(daemon_settings_reload(&s, 3, argv, &next, &ch, &err), 0);
        ck_assert_uint_eq(ch.n_applied, 0);
        ck_assert_uint_eq(ch.n_need_restart, 5); /* slo-aim-factor is unchanged */
        ck_assert(listed(ch.need_restart, ch.n_need_restart, "scheduling-policy"));
        ck_assert(listed(ch.need_restart, ch.n_need_restart, "slo-admission"));
        ck_assert(listed(ch.need_restart, ch.n_need_restart, "default-slo"));
        ck_assert(listed(ch.need_restart, ch.n_need_restart, "default-ttft-slo"));
        ck_assert(listed(ch.need_restart, ch.n_need_restart, "slo-kv-reserve"));
        daemon_settings_apply_reload(&s, &next);
        ck_assert_int_eq(s.engine.scheduling_policy, SCHEDULING_SLO);
        ck_assert_double_eq(s.engine.slo_kv_reserve, 0.25);
        daemon_settings_done(&s);
        free(v2);
        free(path);

        expect_flag_error(ARGS("--slo-admission=drop"), "--slo-admission: 'drop' is not one of reject, demote");
        expect_flag_error(ARGS("--default-slo=0"),
                          "--default-slo: 0 is out of range; allowed: more than 0 and at most 3600 seconds");
        expect_flag_error(ARGS("--default-slo=-0.5"), "--default-slo: -0.5 is out of range");
        expect_flag_error(ARGS("--default-slo=3600.5"), "--default-slo: 3600.5 is out of range");
        expect_flag_error(ARGS("--default-slo=50ms"), "--default-slo: '50ms' is not a number");
        expect_flag_error(ARGS("--default-slo=nan"), "--default-slo: 'nan' is not a number");
        expect_flag_error(ARGS("--default-ttft-slo=0"),
                          "--default-ttft-slo: 0 is out of range; allowed: more than 0 and at most 3600 seconds");
        expect_flag_error(ARGS("--default-ttft-slo=1e9"), "--default-ttft-slo: 1e9 is out of range");
        expect_flag_error(ARGS("--slo-kv-reserve=1"),
                          "--slo-kv-reserve: 1 is out of range; allowed: a fraction from 0 to less than 1");
        expect_flag_error(ARGS("--slo-kv-reserve=-0.1"), "--slo-kv-reserve: -0.1 is out of range");
        expect_flag_error(ARGS("--slo-kv-reserve=10%"), "--slo-kv-reserve: '10%' is not a number");
        expect_flag_error(ARGS("--slo-kv-reserve="), "--slo-kv-reserve: empty value; allowed: a fraction");
        expect_file_error("slo-admission = Reject\n", "bad.conf:1: slo-admission: 'Reject' is not one of reject, demote");
        expect_file_error("default-slo = 0\n", "bad.conf:1: default-slo: 0 is out of range; allowed: more than 0");
        expect_file_error("default_ttft_slo = 1\n", "unknown key 'default_ttft_slo'; did you mean 'default-ttft-slo'?");
        expect_file_error("slo-kv-reserve = 1.5\n", "bad.conf:1: slo-kv-reserve: 1.5 is out of range");
}
END_TEST

START_TEST(test_reload_default_file) {
        /* with no --config, a default file that appears later is read by the reload */
        struct daemon_settings cur, next;
        struct daemon_settings_changes ch;
        struct error err;
        char *path = test_path_join(tmpdir, "later.conf");
        char *argv[] = { (char *) "asyncllmd", NULL };

        ck_assert_int_eq(load(&cur, NULL, path, true, &err), 0);
        ck_assert_ptr_null(cur.config);
        char *p = write_conf("later.conf", "max-requests-per-uid = 7\nseed = 3\n");
        ck_assert_int_eq(daemon_settings_reload(&cur, 1, argv, &next, &ch, &err), 0);
        ck_assert_uint_eq(ch.n_applied, 1);
        ck_assert_str_eq(ch.applied[0], "max-requests-per-uid");
        ck_assert_uint_eq(ch.n_need_restart, 1);
        ck_assert_str_eq(ch.need_restart[0], "seed");
        daemon_settings_apply_reload(&cur, &next);
        ck_assert_uint_eq(cur.max_requests_per_uid, 7);
        ck_assert_uint_eq(cur.engine.seed, 0);
        ck_assert_str_eq(cur.config, path);
        daemon_settings_done(&cur);
        free(p);
        free(path);
}
END_TEST

START_TEST(test_dump_round_trip) {
        /* what dump() writes reads back as the same settings */
        struct daemon_settings a, b;
        struct error err;
        char *conf = write_conf("a.conf",
                                "kv-cache-space = 3000000\nseed = 42\ndecode-stall-limit = 1.25\n"
                                "health-stall-timeout = 0.1\n"
                                "scheduling-policy = slo\nslo-admission = demote\ndefault-slo = 0.015\n"
                                "default-ttft-slo = 0.3\nslo-kv-reserve = 0.125\nbus = user\nlog-level = notice\n");
        ck_assert_int_eq(load(&a, ARGS("--config", conf, "--device=cpu", "--no-enable-prefix-caching"), NULL, true,
                              &err),
                         0);
        char *dumped = test_path_join(tmpdir, "dump.conf");
        FILE *f = fopen(dumped, "we");
        ck_assert_ptr_nonnull(f);
        daemon_settings_dump(&a, f);
        ck_assert_int_eq(fclose(f), 0);
        if (load(&b, ARGS("--config", dumped), NULL, true, &err) < 0)
                ck_abort_msg("%s", err.message);
        /* an unset string is commented out, else "(none)" would read back as a value */
        uint8_t *bytes;
        size_t len;
        ck_assert_int_eq(test_read_file(dumped, &bytes, &len), 0);
        char *text = strndup((char *) bytes, len); /* the file's bytes are not a C string */
        ck_assert_ptr_nonnull(text);
        ck_assert_msg(strstr(text, "\n# api-key = (none)\n"), "%s", text);
        ck_assert_msg(!strstr(text, "\napi-key = (none)"), "%s", text);
        free(text);
        free(bytes);
        for (size_t i = 0; daemon_settings_key(i); i++) {
                const char *key = daemon_settings_key(i);
                char va[512], vb[512];
                if (strcmp(key, "config") == 0)
                        continue;
                ck_assert_int_eq(daemon_settings_format(&a, key, va, sizeof(va)), 0);
                ck_assert_int_eq(daemon_settings_format(&b, key, vb, sizeof(vb)), 0);
                ck_assert_msg(strcmp(va, vb) == 0, "%s: %s then %s", key, va, vb);
        }
        ck_assert_int_eq(daemon_settings_format(&a, "no-such-key", (char[8]) { 0 }, 8), -ENOENT);
        daemon_settings_done(&b);
        daemon_settings_done(&a);
        free(dumped);
        free(conf);
}
END_TEST

START_TEST(test_http_keys) {
        /* CORS lists as JSON or comma-separated, kept as "a, b"; the admin routes' switch and key */
        struct daemon_settings s;
        struct error err;
        ck_assert_int_eq(daemon_settings_init(&s), 0);
        ck_assert_ptr_null(s.allowed_origins);
        ck_assert_str_eq(s.allowed_methods, "GET, POST");
        ck_assert_str_eq(s.allowed_headers, "*");
        ck_assert(!s.allow_credentials);
        ck_assert(!s.enable_admin_http);
        ck_assert_ptr_null(s.admin_api_key);
        ck_assert_ptr_null(s.admin_api_key_file);
        expect_format(&s, "allowed-origins", "(none)");
        daemon_settings_done(&s);

        ck_assert_int_eq(load(&s,
                              ARGS("--allowed-origins", "[\"http://a.example\", \"https://b.example:8443\"]",
                                   "--allowed-methods= GET ,POST,OPTIONS ", "--allowed-headers", "Content-Type",
                                   "--allow-credentials", "--enable-admin-http", "--admin-api-key", "sk-admin",
                                   "--admin-api-key-file=/run/credentials/admin"),
                              NULL, true, &err),
                         0);
        ck_assert_str_eq(s.allowed_origins, "http://a.example, https://b.example:8443");
        ck_assert_str_eq(s.allowed_methods, "GET, POST, OPTIONS");
        ck_assert_str_eq(s.allowed_headers, "Content-Type");
        ck_assert(s.allow_credentials);
        ck_assert(s.enable_admin_http);
        ck_assert_str_eq(s.admin_api_key, "sk-admin");
        ck_assert_str_eq(s.admin_api_key_file, "/run/credentials/admin");
        daemon_settings_done(&s);
        ck_assert_int_eq(load(&s, ARGS("--allowed-origins=*", "--no-allow-credentials", "--no-enable-admin-http"), NULL,
                              true, &err),
                         0);
        ck_assert_str_eq(s.allowed_origins, "*");
        ck_assert(!s.allow_credentials);
        ck_assert(!s.enable_admin_http);
        daemon_settings_done(&s);

        char *path = write_conf("http.conf", "allowed-origins = [\"*\"]\nallowed-headers = X-A,X-B\n"
                                             "allow-credentials = yes\nenable-admin-http = true\n"
                                             "admin-api-key-file = /etc/asyncllm/admin-key\n");
        ck_assert_int_eq(load(&s, ARGS("--config", path), NULL, true, &err), 0);
        ck_assert_str_eq(s.allowed_origins, "*");
        ck_assert_str_eq(s.allowed_headers, "X-A, X-B");
        ck_assert(s.allow_credentials);
        ck_assert(s.enable_admin_http);
        ck_assert_str_eq(s.admin_api_key_file, "/etc/asyncllm/admin-key");
        daemon_settings_done(&s);
        free(path);

        expect_flag_error(ARGS("--allowed-origins=[]"), "--allowed-origins: an empty list (leave the key out for none)");
        expect_flag_error(ARGS("--allowed-origins=a,,b"), "--allowed-origins: 'a,,b' has an empty item");
        expect_flag_error(ARGS("--allowed-origins=a,"), "has an empty item");
        expect_flag_error(ARGS("--allowed-origins=http://a b"), "has an empty item, or one with other than visible ASCII");
        expect_flag_error(ARGS("--allowed-methods=[\"GET\", 1]"), "--allowed-methods: item 1 of");
        expect_flag_error(ARGS("--allowed-headers=[\"a b\"]"), "item 0 of [\"a b\"] is not a string of visible ASCII");
        expect_flag_error(ARGS("--allowed-origins=[\"a\"] x"), "is not a JSON list of strings; allowed: a JSON list");
        expect_flag_error(ARGS("--allowed-origins=[\"a,b\"]"), "item 0 of");
        expect_flag_error(ARGS("--allowed-origins="), "--allowed-origins: empty value");
        expect_flag_error(ARGS("--enable-admin-http=maybe"), "--enable-admin-http: 'maybe' is not a boolean");
        expect_file_error("allowed-origins = [\"http://a\"\n", "is not a JSON list of strings");
}
END_TEST

START_TEST(test_help) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        daemon_settings_help(f, "asyncllmd");
        fclose(f);
        ck_assert_ptr_nonnull(strstr(text, "Usage: asyncllmd [OPTION...]"));
        ck_assert_ptr_nonnull(strstr(text, "--max-num-seqs N"));
        ck_assert_ptr_nonnull(strstr(text, "--[no-]enable-chunked-prefill"));
        ck_assert_ptr_nonnull(strstr(text, "(default: 256MiB)"));
        ck_assert_ptr_nonnull(strstr(text, "(default: 0 (online CPUs))"));
        ck_assert_ptr_nonnull(strstr(text, "(default: 0 (the model's context length))"));
        ck_assert_ptr_nonnull(strstr(text, "SIGHUP reloads it"));
        ck_assert_ptr_nonnull(strstr(text, "--version"));
        /* every key has its flag in the help */
        for (size_t i = 0; daemon_settings_key(i); i++) {
                char flag[96];
                snprintf(flag, sizeof(flag), "%s ", daemon_settings_key(i));
                ck_assert_msg(strstr(text, flag), "%s is missing from --help", flag);
        }
        free(text);
}
END_TEST

int main(void) {
        Suite *s = suite_create("settings");
        TCase *tc = tcase_create("settings");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, test_defaults);
        tcase_add_test(tc, test_flags);
        tcase_add_test(tc, test_flag_errors);
        tcase_add_test(tc, test_sizes);
        tcase_add_test(tc, test_file);
        tcase_add_test(tc, test_file_errors);
        tcase_add_test(tc, test_file_nul_byte);
        tcase_add_test(tc, test_precedence);
        tcase_add_test(tc, test_default_socket);
        tcase_add_test(tc, test_default_model_and_threads);
        tcase_add_test(tc, test_resolve_cross_checks);
        tcase_add_test(tc, test_load);
        tcase_add_test(tc, test_reload);
        tcase_add_test(tc, test_slo_keys);
        tcase_add_test(tc, test_reload_default_file);
        tcase_add_test(tc, test_dump_round_trip);
        tcase_add_test(tc, test_http_keys);
        tcase_add_test(tc, test_help);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
