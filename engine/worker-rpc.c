/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "worker-rpc.h"

typedef int (*worker_method)(const struct worker_rpc_context *ctx, unsigned worker, struct json_object *args,
                             struct json_object **ret, struct error *err);

static int method_ping(const struct worker_rpc_context *ctx, unsigned worker, struct json_object *args,
                       struct json_object **ret, struct error *err) {
        (void) ctx, (void) worker, (void) args, (void) err;
        *ret = json_object_new_string("pong");
        return 0;
}

/* Resident set size of this process, from /proc/self/statm; 0 when unreadable. */
static uint64_t process_rss_bytes(void) {
        unsigned long size, resident;
        FILE *f = fopen("/proc/self/statm", "re");
        if (!f)
                return 0;
        int n = fscanf(f, "%lu %lu", &size, &resident);
        fclose(f);
        return n == 2 ? (uint64_t) resident * (uint64_t) sysconf(_SC_PAGESIZE) : 0;
}

static int method_memory_usage(const struct worker_rpc_context *ctx, unsigned worker, struct json_object *args,
                               struct json_object **ret, struct error *err) {
        struct backend_memory_usage u;
        (void) args, (void) err;
        ctx->backend->memory_usage(ctx->backend->impl, worker, &u);
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "weights_bytes", json_object_new_uint64(u.weights_bytes));
        json_object_object_add(o, "kv_cache_bytes", json_object_new_uint64(u.kv_cache_bytes));
        json_object_object_add(o, "scratch_bytes", json_object_new_uint64(u.scratch_bytes));
        json_object_object_add(o, "weights_released", json_object_new_boolean(u.released & BACKEND_MEMORY_WEIGHTS));
        json_object_object_add(o, "kv_cache_released", json_object_new_boolean(u.released & BACKEND_MEMORY_KV_CACHE));
        json_object_object_add(o, "process_rss_bytes", json_object_new_uint64(process_rss_bytes()));
        if (u.device_total_bytes) {
                json_object_object_add(o, "device_free_bytes", json_object_new_uint64(u.device_free_bytes));
                json_object_object_add(o, "device_total_bytes", json_object_new_uint64(u.device_total_bytes));
        }
        *ret = o;
        return 0;
}

static int method_kv_cache_info(const struct worker_rpc_context *ctx, unsigned worker, struct json_object *args,
                                struct json_object **ret, struct error *err) {
        struct engine_stats s;
        (void) worker, (void) args, (void) err;
        engine_core_stats(ctx->core, &s);
        struct json_object *o = json_object_new_object();
        json_object_object_add(o, "block_size", json_object_new_int64(engine_core_block_size(ctx->core)));
        json_object_object_add(o, "num_blocks", json_object_new_int64(s.kv_blocks_total));
        json_object_object_add(o, "used_blocks", json_object_new_int64(s.kv_blocks_used));
        json_object_object_add(o, "free_blocks", json_object_new_int64(s.kv_blocks_total - s.kv_blocks_used));
        json_object_object_add(o, "cached_blocks", json_object_new_int64(s.kv_blocks_cached));
        json_object_object_add(o, "usage", json_object_new_double(s.kv_blocks_total ? (double) s.kv_blocks_used / s.kv_blocks_total : 0));
        *ret = o;
        return 0;
}

/* args: {"preempt": true} sends running requests back to waiting first. */
static int method_reset_prefix_cache(const struct worker_rpc_context *ctx, unsigned worker, struct json_object *args,
                                     struct json_object **ret, struct error *err) {
        struct json_object *preempt = NULL;
        (void) worker;
        if (args && !json_object_is_type(args, json_type_null) && !json_object_is_type(args, json_type_object))
                return error_set(err, EINVAL, "reset_prefix_cache takes an object such as {\"preempt\": true}");
        if (args && json_object_object_get_ex(args, "preempt", &preempt) && !json_object_is_type(preempt, json_type_boolean))
                return error_set(err, EINVAL, "reset_prefix_cache: preempt must be true or false");
        int r = engine_core_reset_prefix_cache(ctx->core, preempt && json_object_get_boolean(preempt));
        if (r == -EBUSY)
                return error_set(err, EBUSY, "reset_prefix_cache: running requests hold KV blocks; pass {\"preempt\": true} to recompute them");
        if (r < 0)
                return error_set(err, -r, "reset_prefix_cache failed");
        *ret = json_object_new_boolean(true);
        return 0;
}

static const struct {
        const char *name;
        worker_method fn;
        bool once; /* acts on state the workers share: run on worker 0, the others echo */
} methods[] = {
        { "ping", method_ping, false },
        { "memory_usage", method_memory_usage, false },
        { "kv_cache_info", method_kv_cache_info, true },
        { "reset_prefix_cache", method_reset_prefix_cache, true },
};

const char *worker_rpc_methods(void) {
        return "ping, memory_usage, kv_cache_info, reset_prefix_cache";
}

int worker_rpc_call(const struct worker_rpc_context *ctx, const char *method, struct json_object *args,
                    struct json_object **ret, struct error *err) {
        for (size_t m = 0; m < sizeof(methods) / sizeof(*methods); m++) {
                if (strcmp(methods[m].name, method) != 0)
                        continue;
                struct json_object *results = json_object_new_array();
                struct json_object *first = NULL;
                if (!results)
                        return error_set(err, ENOMEM, "out of memory");
                for (unsigned w = 0; w < ctx->backend->n_workers; w++) {
                        struct json_object *one = NULL;
                        int r;
                        if (methods[m].once && first)
                                one = json_object_get(first);
                        else if ((r = methods[m].fn(ctx, w, args, &one, err)) < 0) {
                                json_object_put(results);
                                return r;
                        }
                        if (!first)
                                first = one;
                        json_object_array_add(results, one);
                }
                *ret = results;
                return 0;
        }
        return error_set(err, ENOENT, "unknown worker method '%s'; known methods: %s", method, worker_rpc_methods());
}
