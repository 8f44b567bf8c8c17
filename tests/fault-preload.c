/* SPDX-License-Identifier: MIT */
/* Resource failures on demand, for tests of the real daemon (tests/test-resource-faults.sh):
 * loaded with LD_PRELOAD, it makes the calls that get memory or threads fail as they would on
 * a machine out of them.
 *   ASYNCLLM_FAIL_ALLOC_AT=N     the N-th allocation (malloc, calloc, realloc, the aligned
 *                                ones, anonymous mmap), counted from main(), fails with
 *                                ENOMEM, and so do the next ASYNCLLM_FAIL_ALLOC_COUNT - 1
 *                                (default 1; 0 for every one after the N-th);
 *   ASYNCLLM_FAIL_ALLOC_MIN=B    only allocations of at least B bytes are counted;
 *   ASYNCLLM_FAIL_ALLOC_SPARE=S  allocations called from a library whose path contains S
 *                                are neither counted nor failed (json-c: docs/reliability.md
 *                                says why);
 *   ASYNCLLM_FAIL_THREAD_AT=N    the N-th pthread_create fails with EAGAIN;
 *   ASYNCLLM_FAIL_ACCEPT_FILE=P  accept4 fails with ENOMEM while the file P exists, the
 *                                client left waiting in the backlog as the kernel leaves it;
 *   ASYNCLLM_FAIL_COUNT_FILE=P   at exit, the counts ("allocations N threads N") are written
 *                                to P, to size a sweep.
 * Memory comes from glibc's own entry points (__libc_malloc and kin), so no allocation is
 * made while the interposer finds its way. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

void *__libc_malloc(size_t size);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t size);
void *__libc_memalign(size_t alignment, size_t size);
/* interposed: glibc's own declarations are in headers this file need not include */
void *memalign(size_t alignment, size_t size);
int __libc_start_main(int (*main)(int, char **, char **), int argc, char **argv, void (*init)(void),
                      void (*fini)(void), void (*rtld_fini)(void), void *stack_end);

static atomic_ulong allocations, threads;
static unsigned long fail_alloc_at, fail_alloc_count = 1, fail_thread_at;
static const char *fail_accept_file;
static size_t fail_alloc_min;
static const char *spared_library;

static unsigned long env_number(const char *name, unsigned long fallback) {
        const char *v = getenv(name);
        return v && *v ? strtoul(v, NULL, 10) : fallback;
}

/* Nothing is counted before main(): the libraries' constructors (GnuTLS's, the CUDA
 * runtime's) allocate over a thousand times and are not the daemon's code. */
static bool in_main;
static int (*real_main)(int, char **, char **);

static void read_settings(void) {
        fail_alloc_at = env_number("ASYNCLLM_FAIL_ALLOC_AT", 0);
        fail_alloc_count = env_number("ASYNCLLM_FAIL_ALLOC_COUNT", 1);
        fail_alloc_min = env_number("ASYNCLLM_FAIL_ALLOC_MIN", 0);
        fail_thread_at = env_number("ASYNCLLM_FAIL_THREAD_AT", 0);
        fail_accept_file = getenv("ASYNCLLM_FAIL_ACCEPT_FILE");
        spared_library = getenv("ASYNCLLM_FAIL_ALLOC_SPARE");
}

static int counting_main(int argc, char **argv, char **envp) {
        void *frame;
        read_settings();
        backtrace(&frame, 1); /* its first call loads libgcc_s, which allocates */
        in_main = true;
        return real_main(argc, argv, envp);
}

int __libc_start_main(int (*main)(int, char **, char **), int argc, char **argv, void (*init)(void),
                      void (*fini)(void), void (*rtld_fini)(void), void *stack_end) {
        int (*next)(int (*)(int, char **, char **), int, char **, void (*)(void), void (*)(void), void (*)(void),
                    void *) = dlsym(RTLD_NEXT, "__libc_start_main");
        real_main = main;
        return next(counting_main, argc, argv, init, fini, rtld_fini, stack_end);
}

/* Written with write(2) alone: stdio would allocate while the process ends. */
__attribute__((destructor)) static void write_counts(void) {
        const char *path = getenv("ASYNCLLM_FAIL_COUNT_FILE");
        char line[96];
        if (!path)
                return;
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
                return;
        int n = snprintf(line, sizeof(line), "allocations %lu threads %lu\n", atomic_load(&allocations),
                         atomic_load(&threads));
        if (n > 0 && write(fd, line, (size_t) n) < 0)
                n = 0;
        close(fd);
}

/* Whether the allocation was asked for by the spared library: the first caller outside this
 * file and libc (json-c's strdup() calls malloc() from libc). */
static bool spared(void) {
        void *frames[8];
        Dl_info self, info;
        if (!spared_library || !dladdr((void *) spared, &self))
                return false;
        int n = backtrace(frames, 8);
        for (int i = 1; i < n; i++) {
                if (!dladdr(frames[i], &info) || !info.dli_fname)
                        return false;
                if (strcmp(info.dli_fname, self.dli_fname) == 0 || strstr(info.dli_fname, "/libc.so"))
                        continue;
                return strstr(info.dli_fname, spared_library) != NULL;
        }
        return false;
}

/* Whether this allocation of size bytes is one to fail. */
static int allocation_fails(size_t size) {
        if (!in_main || size < fail_alloc_min || spared())
                return 0;
        unsigned long n = atomic_fetch_add(&allocations, 1) + 1;
        if (fail_alloc_at == 0 || n < fail_alloc_at)
                return 0;
        return fail_alloc_count == 0 || n - fail_alloc_at < fail_alloc_count;
}

void *malloc(size_t size) {
        if (allocation_fails(size)) {
                errno = ENOMEM;
                return NULL;
        }
        return __libc_malloc(size);
}

void *calloc(size_t n, size_t size) {
        if (allocation_fails(n * size)) {
                errno = ENOMEM;
                return NULL;
        }
        return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size) {
        if (size > 0 && allocation_fails(size)) {
                errno = ENOMEM;
                return NULL;
        }
        return __libc_realloc(p, size);
}

int posix_memalign(void **ret, size_t alignment, size_t size) {
        if (allocation_fails(size))
                return ENOMEM;
        void *p = __libc_memalign(alignment, size);
        if (!p)
                return ENOMEM;
        *ret = p;
        return 0;
}

void *aligned_alloc(size_t alignment, size_t size) {
        if (allocation_fails(size)) {
                errno = ENOMEM;
                return NULL;
        }
        return __libc_memalign(alignment, size);
}

void *memalign(size_t alignment, size_t size) {
        return aligned_alloc(alignment, size);
}

/* Only anonymous maps are memory being asked for; a file's map is not. */
void *mmap(void *addr, size_t length, int prot, int flags, int fd, off_t offset) {
        static void *(*next)(void *, size_t, int, int, int, off_t);
        if (!next)
                next = (void *(*)(void *, size_t, int, int, int, off_t)) dlsym(RTLD_NEXT, "mmap");
        if ((flags & MAP_ANONYMOUS) && allocation_fails(length)) {
                errno = ENOMEM;
                return MAP_FAILED;
        }
        return next(addr, length, prot, flags, fd, offset);
}

int pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *), void *arg) {
        static int (*next)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
        if (!next)
                next = (int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *)) dlsym(RTLD_NEXT,
                                                                                                    "pthread_create");
        if (!in_main)
                return next(thread, attr, start, arg);
        unsigned long n = atomic_fetch_add(&threads, 1) + 1;
        if (fail_thread_at != 0 && n == fail_thread_at)
                return EAGAIN;
        return next(thread, attr, start, arg);
}

int accept4(int fd, struct sockaddr *addr, socklen_t *addr_len, int flags) {
        static int (*next)(int, struct sockaddr *, socklen_t *, int);
        if (!next)
                next = (int (*)(int, struct sockaddr *, socklen_t *, int)) dlsym(RTLD_NEXT, "accept4");
        if (in_main && fail_accept_file && access(fail_accept_file, F_OK) == 0) {
                errno = ENOMEM;
                return -1;
        }
        return next(fd, addr, addr_len, flags);
}
