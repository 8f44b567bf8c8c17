/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fault-injection.h"

struct fault_injection {
        struct backend inner;
        long fail_step;
        long stall_ms;
        char *stall_file;
        atomic_long steps;
};

static long env_number(const char *name) {
        const char *v = getenv(name);
        char *end;
        if (!v || !*v)
                return 0;
        long n = strtol(v, &end, 10);
        return *end || n < 0 ? 0 : n;
}

static int faulty_forward(void *impl, const struct batch *b, float **logits, struct error *err) {
        struct fault_injection *f = impl;
        long step = atomic_fetch_add(&f->steps, 1) + 1;
        if (f->fail_step && step == f->fail_step)
                return error_set(err, EIO, "injected failure in engine step %ld (ASYNCLLMD_FAULT_FAIL_STEP)", step);
        if (f->stall_ms && (!f->stall_file || access(f->stall_file, F_OK) == 0)) {
                struct timespec ts = { f->stall_ms / 1000, (f->stall_ms % 1000) * 1000000L };
                while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                        ;
        }
        return f->inner.forward(f->inner.impl, b, logits, err);
}

static int faulty_release(void *impl, unsigned what, struct error *err) {
        struct fault_injection *f = impl;
        return f->inner.release_memory(f->inner.impl, what, err);
}

static int faulty_restore(void *impl, unsigned what, struct error *err) {
        struct fault_injection *f = impl;
        return f->inner.restore_memory(f->inner.impl, what, err);
}

static void faulty_usage(void *impl, unsigned worker, struct backend_memory_usage *ret) {
        struct fault_injection *f = impl;
        f->inner.memory_usage(f->inner.impl, worker, ret);
}

int fault_injection_wrap(const struct backend *inner, struct fault_injection **ret_state, struct backend *ret) {
        long fail = env_number("ASYNCLLMD_FAULT_FAIL_STEP"), stall = env_number("ASYNCLLMD_FAULT_STALL_MS");
        const char *file = getenv("ASYNCLLMD_FAULT_STALL_FILE");
        *ret_state = NULL;
        *ret = *inner;
        if (!fail && !stall)
                return 0;
        struct fault_injection *f = calloc(1, sizeof(*f));
        if (!f || (file && *file && !(f->stall_file = strdup(file)))) {
                free(f);
                return -ENOMEM;
        }
        f->inner = *inner;
        f->fail_step = fail;
        f->stall_ms = stall;
        *ret = (struct backend) {
                .name = inner->name, .impl = f, .forward = faulty_forward, .release_memory = faulty_release,
                .restore_memory = faulty_restore, .n_workers = inner->n_workers, .memory_usage = faulty_usage,
                .kv = inner->kv, .n_embd = inner->n_embd, .kernels = inner->kernels, .weights = inner->weights,
                .weights_on_device = inner->weights_on_device,
        };
        *ret_state = f;
        return 0;
}

void fault_injection_free(struct fault_injection *f) {
        if (!f)
                return;
        free(f->stall_file);
        free(f);
}
