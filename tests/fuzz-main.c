/* SPDX-License-Identifier: MIT */
/* Replays fuzz inputs without libFuzzer, as an ordinary test: every file named on the command
 * line, or found in a directory named there, goes through LLVMFuzzerTestOneInput once. With
 * no arguments the corpus is $FUZZ_CORPUS, else $ASYNCLLM_FUZZ_CORPUS/NAME where the program
 * is called fuzz-NAME. A crash is the failure; an empty or unreadable corpus fails too, so a
 * test cannot pass by replaying nothing. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test-helpers.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct tally {
        unsigned passed;
        unsigned failed;
};

static void run_file(const char *path, struct tally *t) {
        uint8_t *buf = NULL;
        size_t len = 0;
        int r = test_read_file(path, &buf, &len);
        if (r < 0) {
                fprintf(stderr, "fuzz-main: %s: cannot read: %s\n", path, strerror(-r));
                t->failed++;
                return;
        }
        LLVMFuzzerTestOneInput(buf, len);
        free(buf);
        t->passed++;
}

static int name_filter(const struct dirent *de) {
        return de->d_name[0] != '.';
}

static void run_path(const char *path, struct tally *t) {
        struct stat st;
        if (stat(path, &st) < 0) {
                fprintf(stderr, "fuzz-main: %s: %s\n", path, strerror(errno));
                t->failed++;
                return;
        }
        if (!S_ISDIR(st.st_mode)) {
                run_file(path, t);
                return;
        }
        /* In name order, so that a failing run is easy to repeat. */
        struct dirent **entries;
        int n = scandir(path, &entries, name_filter, alphasort);
        if (n < 0) {
                fprintf(stderr, "fuzz-main: %s: cannot list: %s\n", path, strerror(errno));
                t->failed++;
                return;
        }
        for (int i = 0; i < n; i++) {
                size_t len = strlen(path) + 1 + strlen(entries[i]->d_name) + 1;
                char *child = malloc(len);
                if (!child) {
                        fprintf(stderr, "fuzz-main: out of memory\n");
                        exit(EXIT_FAILURE);
                }
                snprintf(child, len, "%s/%s", path, entries[i]->d_name);
                if (stat(child, &st) == 0 && S_ISREG(st.st_mode))
                        run_file(child, t);
                free(child);
                free(entries[i]);
        }
        free(entries);
}

/* $ASYNCLLM_FUZZ_CORPUS/NAME for a program called fuzz-NAME (or lt-fuzz-NAME, libtool's). */
static char *default_corpus(const char *argv0) {
        const char *env = getenv("FUZZ_CORPUS");
        if (env && *env)
                return strdup(env);
        const char *top = getenv("ASYNCLLM_FUZZ_CORPUS");
        if (!top || !*top)
                return NULL;
        const char *base = strrchr(argv0, '/');
        base = base ? base + 1 : argv0;
        if (strncmp(base, "lt-", 3) == 0)
                base += 3;
        if (strncmp(base, "fuzz-", 5) == 0)
                base += 5;
        size_t len = strlen(top) + 1 + strlen(base) + 1;
        char *p = malloc(len);
        if (p)
                snprintf(p, len, "%s/%s", top, base);
        return p;
}

int main(int argc, char *argv[]) {
        struct tally t = { 0, 0 };

        if (argc > 1)
                for (int i = 1; i < argc; i++)
                        run_path(argv[i], &t);
        else {
                char *corpus = default_corpus(argv[0]);
                if (!corpus) {
                        fprintf(stderr, "usage: %s CORPUS_DIR|FILE... (or set FUZZ_CORPUS or ASYNCLLM_FUZZ_CORPUS)\n",
                                argv[0]);
                        return EXIT_FAILURE;
                }
                printf("fuzz-main: replaying %s\n", corpus);
                run_path(corpus, &t);
                free(corpus);
        }
        printf("fuzz-main: %u passed, %u failed\n", t.passed, t.failed);
        if (t.passed == 0) {
                fprintf(stderr, "fuzz-main: no inputs were replayed\n");
                return EXIT_FAILURE;
        }
        return t.failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
