/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "test-helpers.h"

#define DEFAULT_MODEL "models/SmolLM2-135M-Instruct.Q4_1.gguf"

const char *test_model_path(void) {
        static char path[4096];
        const char *env = getenv("ASYNCLLM_MODEL");

        if (env && *env)
                snprintf(path, sizeof(path), "%s", env);
        else {
                /* automake's test driver runs in the build tree and exports srcdir. */
                const char *top = getenv("top_srcdir");
                if (!top || !*top)
                        top = getenv("srcdir");
                snprintf(path, sizeof(path), "%s/%s", top && *top ? top : ".", DEFAULT_MODEL);
        }
        if (access(path, R_OK) < 0)
                ck_abort_msg("model %s is not readable (%s): run scripts/fetch-model, or set ASYNCLLM_MODEL", path,
                             strerror(errno));
        return path;
}

const char *test_device(void) {
        const char *env = getenv("ASYNCLLM_TEST_DEVICE");
        return env && *env ? env : "cpu";
}

double test_slowdown(void) {
        const char *v = getenv("ASYNCLLM_TEST_SLOWDOWN");
        double f = v && *v ? strtod(v, NULL) : 1.0;
        return f >= 1.0 ? f : 1.0;
}

double test_scaled(double seconds) {
        return seconds * test_slowdown();
}

double test_deadline(double seconds) {
        return monotonic_seconds() + test_scaled(seconds);
}

char *test_tmpdir(void) {
        const char *base = getenv("TMPDIR");

        if (!base || !*base)
                base = "/tmp";
        char *dir = test_path_join(base, "asyncllm-test.XXXXXX");
        if (!mkdtemp(dir))
                ck_abort_msg("cannot create a directory under %s: %s", base, strerror(errno));
        return dir;
}

void test_tmpdir_remove(char *dir) {
        if (!dir)
                return;
        DIR *d = opendir(dir);
        if (d) {
                struct dirent *de;
                while ((de = readdir(d)))
                        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
                                (void) unlinkat(dirfd(d), de->d_name, 0);
                closedir(d);
        }
        (void) rmdir(dir);
        free(dir);
}

char *test_path_join(const char *dir, const char *name) {
        size_t n = strlen(dir) + 1 + strlen(name) + 1;
        char *p = malloc(n);
        if (!p)
                ck_abort_msg("out of memory");
        snprintf(p, n, "%s/%s", dir, name);
        return p;
}

int test_read_file(const char *path, uint8_t **ret_buf, size_t *ret_len) {
        struct stat st;
        int r = 0;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        if (!S_ISREG(st.st_mode)) {
                close(fd);
                return -EISDIR;
        }
        size_t len = (size_t) st.st_size;
        uint8_t *buf = malloc(len ? len : 1);
        if (!buf) {
                close(fd);
                return -ENOMEM;
        }
        for (size_t done = 0; done < len;) {
                ssize_t k = read(fd, buf + done, len - done);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0) {
                        r = k < 0 ? -errno : -EIO; /* the file shrank under us */
                        break;
                }
                done += (size_t) k;
        }
        close(fd);
        if (r < 0) {
                free(buf);
                return r;
        }
        *ret_buf = buf;
        *ret_len = len;
        return 0;
}

int test_write_file(const char *path, const void *buf, size_t len) {
        int r = 0;
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        for (size_t done = 0; done < len;) {
                ssize_t k = write(fd, (const uint8_t *) buf + done, len - done);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0) {
                        r = -errno;
                        break;
                }
                done += (size_t) k;
        }
        if (close(fd) < 0 && r == 0)
                r = -errno;
        return r;
}
