/* SPDX-License-Identifier: MIT */
/* Fuzzes the parser of asyncllmd.conf (daemon/settings.c). The input is the whole file, named
 * by --config as the daemon names it, then resolved. Beyond no crash, leak or UB:
 * - the result is 0 or a negative errno, and a failure comes with a message;
 * - a bad line (syntax, unknown or repeated key, NUL byte, bad value: EINVAL, ERANGE,
 *   ENAMETOOLONG from the file) is named as "PATH:LINE:", and LINE is the first bad line: the
 *   lines before it load, the lines up to it fail with the same result and message;
 * - a flag beats the file: with --model and --socket given as well, the result and message
 *   are the same, the two keep the flags' values and every other key has the same value;
 * - on success, what daemon_settings_dump() writes is a configuration file that loads,
 *   resolves, sets every key but config (a flag) and the unset strings (commented out) and
 *   gives each key the same value as text (daemon_settings_format()).
 * $RUNTIME_DIRECTORY is fixed, so that the default socket does not depend on who runs it.
 * Built with libFuzzer, or with fuzz-main.c to replay the committed corpus
 * (tests/fuzz/settings) as a regression test. */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "settings.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FLAG_MODEL "/fuzz/flag-model.gguf"
#define FLAG_SOCKET "/fuzz/flag.sock"

/* The configuration file: one memfd, rewritten for every load and opened afresh by name. */
static int conf_fd = -1;
static char conf_path[64];

static void check(bool ok) {
        if (!ok)
                abort();
}

static void setup_once(void) {
        if (conf_fd >= 0)
                return;
        check(setenv("RUNTIME_DIRECTORY", "/run/fuzz-settings", 1) == 0);
        conf_fd = memfd_create("fuzz-settings.conf", MFD_CLOEXEC);
        check(conf_fd >= 0);
        snprintf(conf_path, sizeof(conf_path), "/proc/self/fd/%d", conf_fd);
}

static void write_conf(const void *text, size_t len) {
        check(ftruncate(conf_fd, 0) == 0);
        for (size_t at = 0; at < len;) {
                ssize_t n = pwrite(conf_fd, (const char *) text + at, len - at, (off_t) at);
                check(n > 0);
                at += (size_t) n;
        }
}

enum stage {
        STAGE_FILE,    /* load_file failed */
        STAGE_RESOLVE, /* resolve failed */
        STAGE_DONE,
};

/* The daemon's startup with the file as it is now: parse_argv (which must take these fixed
 * flags), load_file, and resolve when asked. s always needs daemon_settings_done(). */
static int load(struct daemon_settings *s, bool with_flags, bool resolve, enum stage *stage, struct error *err) {
        char *argv[] = {
                (char *) "asyncllmd", (char *) "--config", conf_path, (char *) "--model", (char *) FLAG_MODEL,
                (char *) "--socket", (char *) FLAG_SOCKET, NULL,
        };
        int argc = with_flags ? 7 : 3;
        int r;

        argv[argc] = NULL;
        check(daemon_settings_init(s) == 0);
        s->default_config = NULL; /* never /etc */
        err->message[0] = 0;
        check(daemon_settings_parse_argv(s, argc, argv, err) == 0);
        *stage = STAGE_FILE;
        if ((r = daemon_settings_load_file(s, err)) < 0)
                return r;
        *stage = STAGE_RESOLVE;
        if (resolve && (r = daemon_settings_resolve(s, err)) < 0)
                return r;
        *stage = STAGE_DONE;
        return 0;
}

static void check_result(int r, const struct error *err) {
        check(r == 0 || (r < 0 && r > -4096));
        if (r < 0)
                check(err->message[0] != 0 && strnlen(err->message, sizeof(err->message)) < sizeof(err->message));
}

/* key's value as daemon_settings_format() gives it, never cut (malloc()ed). */
static char *format_whole(const struct daemon_settings *s, const char *key) {
        for (size_t cap = 256;; cap *= 2) {
                char *buf = malloc(cap);
                check(buf != NULL);
                check(daemon_settings_format(s, key, buf, cap) == 0);
                if (strlen(buf) < cap - 1)
                        return buf;
                free(buf);
        }
}

static bool same_value(const struct daemon_settings *a, const struct daemon_settings *b, const char *key) {
        char *va = format_whole(a, key), *vb = format_whole(b, key);
        bool same = strcmp(va, vb) == 0;
        if (!same)
                fprintf(stderr, "fuzz-settings: %s: '%.200s' then '%.200s'\n", key, va, vb);
        free(va);
        free(vb);
        return same;
}

static bool value_is(const struct daemon_settings *s, const char *key, const char *want) {
        char *v = format_whole(s, key);
        bool same = strcmp(v, want) == 0;
        free(v);
        return same;
}

/* Where line (1-based) starts in the input, and where it ends, after its '\n'; false when the
 * input has fewer lines. */
static bool find_line(const uint8_t *data, size_t size, unsigned long line, size_t *start, size_t *end) {
        size_t at = 0;
        for (unsigned long i = 1; i < line; i++) {
                const uint8_t *nl = memchr(data + at, '\n', size - at);
                if (!nl)
                        return false;
                at = (size_t) (nl - data) + 1;
        }
        if (at >= size)
                return false;
        const uint8_t *nl = memchr(data + at, '\n', size - at);
        *start = at;
        *end = nl ? (size_t) (nl - data) + 1 : size;
        return true;
}

/* A bad line is named "PATH:LINE:", and it is the first bad one. Rewrites the file. */
static void check_line_named(const uint8_t *data, size_t size, int r, const struct error *err) {
        size_t path_len = strlen(conf_path), start, end;
        const char *m = err->message;
        char *after;

        check(strncmp(m, conf_path, path_len) == 0 && m[path_len] == ':');
        check(m[path_len + 1] >= '1' && m[path_len + 1] <= '9');
        unsigned long line = strtoul(m + path_len + 1, &after, 10);
        check(*after == ':');
        check(find_line(data, size, line, &start, &end));

        struct daemon_settings s;
        struct error again;
        enum stage stage;
        /* the lines before it are a good file (their values may still not resolve) */
        write_conf(data, start);
        check(load(&s, false, false, &stage, &again) == 0);
        daemon_settings_done(&s);
        /* the lines up to it fail just as the whole file does */
        write_conf(data, end);
        check(load(&s, false, false, &stage, &again) == r);
        check(strcmp(again.message, err->message) == 0);
        daemon_settings_done(&s);
}

/* --model and --socket beat the file, whose values must still be valid: the same result and
 * message as without them, and, on success, the same settings but for those two. */
static void check_flags_win(const struct daemon_settings *plain, int r, enum stage stage, const struct error *err) {
        struct daemon_settings s;
        struct error err_flags;
        enum stage stage_flags;
        int r_flags = load(&s, true, true, &stage_flags, &err_flags);

        check(r_flags == r && stage_flags == stage);
        if (r < 0)
                check(strcmp(err_flags.message, err->message) == 0);
        else {
                check(value_is(&s, "model", FLAG_MODEL) && value_is(&s, "socket", FLAG_SOCKET));
                for (size_t i = 0; daemon_settings_key(i); i++) {
                        const char *key = daemon_settings_key(i);
                        if (strcmp(key, "model") != 0 && strcmp(key, "socket") != 0)
                                check(same_value(plain, &s, key));
                }
        }
        daemon_settings_done(&s);
}

/* What dump() writes is a file that loads back as the same settings. Rewrites the file (the
 * same path, so that config keeps its value too). */
static void check_round_trip(const struct daemon_settings *first) {
        char *text = NULL;
        size_t text_len = 0;
        FILE *f = open_memstream(&text, &text_len);
        check(f != NULL);
        daemon_settings_dump(first, f);
        check(fclose(f) == 0);
        write_conf(text, text_len);

        struct daemon_settings again;
        struct error err;
        enum stage stage;
        int r = load(&again, false, true, &stage, &err);
        if (r < 0)
                fprintf(stderr, "fuzz-settings: the dump does not load: %s\n", err.message);
        check(r == 0);
        for (size_t i = 0; daemon_settings_key(i); i++) {
                const char *key = daemon_settings_key(i);
                uint64_t bit = UINT64_C(1) << i;
                check(same_value(first, &again, key));
                /* every key came from the dump but config, from the command line, and the unset
                 * strings, which the dump comments out */
                if (!((again.from_file | again.from_command_line) & bit)) {
                        char *v = format_whole(&again, key);
                        check(strcmp(v, "(none)") == 0);
                        free(v);
                }
        }
        check((again.from_file & again.from_command_line) == 0);
        daemon_settings_done(&again);
        free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct daemon_settings s;
        struct error err;
        enum stage stage;

        setup_once();
        write_conf(data, size);
        int r = load(&s, false, true, &stage, &err);
        check_result(r, &err);
        check((r == 0) == (stage == STAGE_DONE));
        check_flags_win(&s, r, stage, &err);
        if (r < 0 && stage == STAGE_FILE && (r == -EINVAL || r == -ERANGE || r == -ENAMETOOLONG))
                check_line_named(data, size, r, &err);
        if (r == 0)
                check_round_trip(&s);
        daemon_settings_done(&s);
        return 0;
}
