/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>

#include "cpu-runner-internal.h"

static int check_memory_bits(unsigned what, struct error *err) {
        if (what & ~(unsigned) (BACKEND_MEMORY_WEIGHTS | BACKEND_MEMORY_KV_CACHE))
                return error_set(err, EINVAL, "unknown backend memory bits 0x%x", what);
        return 0;
}

/* The runner holds its model const because nothing it does changes what the model computes.
 * Neither does giving the file's pages back and mapping the same bytes again, so that goes
 * through the model's file pointer (not itself const) rather than through a new model API. */

int cpu_runner_release_memory(struct cpu_runner *r, unsigned what, struct error *err) {
        int rc = check_memory_bits(what, err);
        if (rc < 0)
                return rc;
        /* the weights first: only they can fail, and then nothing has changed */
        if (what & BACKEND_MEMORY_WEIGHTS) {
                if ((rc = gguf_release_mapping(r->model->file, err)) < 0)
                        return rc;
                packed_model_free(&r->packed);
                r->released |= BACKEND_MEMORY_WEIGHTS;
        }
        if (what & BACKEND_MEMORY_KV_CACHE) {
                kv_pool_release(r->kv);
                r->released |= BACKEND_MEMORY_KV_CACHE;
        }
        return 0;
}

int cpu_runner_restore_memory(struct cpu_runner *r, unsigned what, struct error *err) {
        int rc = check_memory_bits(what, err);
        if (rc < 0)
                return rc;
        /* restoring what is not released does nothing (and must not build a second packed copy) */
        if ((what & BACKEND_MEMORY_WEIGHTS) && (r->released & BACKEND_MEMORY_WEIGHTS)) {
                if ((rc = gguf_restore_mapping(r->model->file, err)) < 0)
                        return rc;
                if (r->use_packed && (rc = packed_model_build(r->model, r->kernels, &r->packed, err)) < 0) {
                        /* back to asleep: the state the call found */
                        struct error ignored;
                        (void) gguf_release_mapping(r->model->file, &ignored);
                        return rc;
                }
                r->released &= ~(unsigned) BACKEND_MEMORY_WEIGHTS;
        }
        if (what & BACKEND_MEMORY_KV_CACHE) {
                if ((rc = kv_pool_restore(r->kv, err)) < 0)
                        return rc;
                r->released &= ~(unsigned) BACKEND_MEMORY_KV_CACHE;
        }
        return 0;
}

void cpu_runner_memory_usage(const struct cpu_runner *r, struct backend_memory_usage *ret) {
        *ret = (struct backend_memory_usage) {
                .weights_bytes = r->released & BACKEND_MEMORY_WEIGHTS ? 0 : r->model->file->size,
                .kv_cache_bytes = kv_pool_bytes(r->kv),
                .scratch_bytes = r->scratch_bytes,
                .released = r->released,
        };
}

