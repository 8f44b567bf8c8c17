/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda-backend.h"
#include "cuda-group.h"
#include "tp-comm.h"

struct rank_worker {
        struct cuda_group *group;
        uint32_t rank;
        pthread_t thread;
        bool started;
        int rc;
        struct error err;
};

struct cuda_group {
        uint32_t size;
        struct tp_comm *comm;
        struct cuda_runner **runners;
        struct rank_worker *workers;
        char name[400];

        pthread_mutex_t lock;
        pthread_cond_t work, done;
        uint64_t step;      /* bumped for each step the workers run */
        uint32_t finished;  /* workers done with the current step */
        int first_failed;   /* the rank whose failure aborted the step, or -1 */
        bool stopping;
        const struct batch *batch;
        float *logits;      /* rank 0's */
};

static void *rank_main(void *arg) {
        struct rank_worker *w = arg;
        struct cuda_group *g = w->group;
        uint64_t seen = 0;
        for (;;) {
                pthread_mutex_lock(&g->lock);
                while (!g->stopping && g->step == seen)
                        pthread_cond_wait(&g->work, &g->lock);
                if (g->stopping) {
                        pthread_mutex_unlock(&g->lock);
                        return NULL;
                }
                seen = g->step;
                const struct batch *b = g->batch;
                pthread_mutex_unlock(&g->lock);

                float *logits = NULL;
                w->rc = cuda_runner_forward(g->runners[w->rank], b, &logits, &w->err);
                if (w->rc < 0)
                        tp_comm_abort(g->comm); /* the other ranks would wait for this one's gathers */

                pthread_mutex_lock(&g->lock);
                if (w->rc < 0 && g->first_failed < 0)
                        g->first_failed = (int) w->rank;
                if (w->rank == 0)
                        g->logits = logits;
                if (++g->finished == g->size)
                        pthread_cond_signal(&g->done);
                pthread_mutex_unlock(&g->lock);
        }
}

static int group_forward(void *impl, const struct batch *batch, float **logits, struct error *err) {
        struct cuda_group *g = impl;
        pthread_mutex_lock(&g->lock);
        g->batch = batch;
        g->finished = 0;
        g->first_failed = -1;
        g->logits = NULL;
        g->step++;
        pthread_cond_broadcast(&g->work);
        while (g->finished < g->size)
                pthread_cond_wait(&g->done, &g->lock);
        int failed = g->first_failed;
        *logits = g->logits;
        pthread_mutex_unlock(&g->lock);
        if (failed < 0)
                return 0;
        *logits = NULL;
        struct rank_worker *w = &g->workers[failed];
        return error_set(err, -w->rc, "rank %d of %u: %s", failed, g->size, w->err.message);
}

static int group_release_memory(void *impl, unsigned what, struct error *err) {
        struct cuda_group *g = impl;
        for (uint32_t i = 0; i < g->size; i++) {
                int r = cuda_runner_release_memory(g->runners[i], what, err);
                if (r < 0)
                        return error_prefix(err, r, "rank %u: ", i);
        }
        return 0;
}

static int group_restore_memory(void *impl, unsigned what, struct error *err) {
        struct cuda_group *g = impl;
        for (uint32_t i = 0; i < g->size; i++) {
                int r = cuda_runner_restore_memory(g->runners[i], what, err);
                if (r < 0)
                        return error_prefix(err, r, "rank %u: ", i);
        }
        return 0;
}

static void group_memory_usage(void *impl, unsigned worker, struct backend_memory_usage *ret) {
        struct cuda_group *g = impl;
        cuda_backend_usage(g->runners[worker < g->size ? worker : 0], ret);
}

static void group_free(void *impl) {
        struct cuda_group *g = impl;
        if (!g)
                return;
        pthread_mutex_lock(&g->lock);
        g->stopping = true;
        pthread_cond_broadcast(&g->work);
        pthread_mutex_unlock(&g->lock);
        for (uint32_t i = 0; g->workers && i < g->size; i++)
                if (g->workers[i].started)
                        pthread_join(g->workers[i].thread, NULL);
        for (uint32_t i = 0; g->runners && i < g->size; i++)
                cuda_runner_free(g->runners[i]);
        tp_comm_free(g->comm);
        pthread_mutex_destroy(&g->lock);
        pthread_cond_destroy(&g->work);
        pthread_cond_destroy(&g->done);
        free(g->runners);
        free(g->workers);
        free(g);
}

/* The floats of a rank's largest all-gather: a step's tokens of the widest slice, or the
 * logits rows the runner may grow to (one per token). */
static size_t largest_gather(const struct model *model, const struct cuda_runner_config *config, uint32_t size) {
        struct tp_shard s;
        struct error err;
        if (tp_shard_plan(&model->hp, size, 0, &s, &err) < 0)
                return 0;
        uint32_t widest = s.q.chunk;
        const uint32_t chunks[] = { s.embd.chunk, s.ff.chunk, s.vocab.chunk };
        for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++)
                if (chunks[i] > widest)
                        widest = chunks[i];
        return (size_t) config->max_batch_tokens * widest;
}

int cuda_group_backend_new(const struct model *model, const struct cuda_runner_config *config, uint32_t size,
                           bool loopback, struct backend *ret, struct error *err) {
        int r = tp_size_check(&model->hp, size, err);
        if (r < 0)
                return r;
        struct cuda_group *g = calloc(1, sizeof(*g));
        if (!g)
                return error_set(err, ENOMEM, "out of memory");
        g->size = size;
        pthread_mutex_init(&g->lock, NULL);
        pthread_cond_init(&g->work, NULL);
        pthread_cond_init(&g->done, NULL);
        g->runners = calloc(size, sizeof(*g->runners));
        g->workers = calloc(size, sizeof(*g->workers));
        if (!g->runners || !g->workers) {
                r = error_set(err, ENOMEM, "out of memory");
                goto fail;
        }
        r = loopback ? tp_comm_loopback_new(size, config->device, largest_gather(model, config, size), &g->comm, err)
                     : tp_comm_nccl_new(size, &g->comm, err);
        if (r < 0)
                goto fail;
        uint32_t n_blocks = UINT32_MAX;
        for (uint32_t i = 0; i < size; i++) {
                struct cuda_runner_config c = *config;
                c.device = loopback ? config->device : (int) i;
                c.comm = g->comm;
                if ((r = tp_shard_plan(&model->hp, size, i, &c.shard, err)) < 0 ||
                    (r = cuda_runner_new(model, &c, &g->runners[i], err)) < 0) {
                        error_prefix(err, r, "rank %u of %u: ", i, size);
                        goto fail;
                }
                if (cuda_runner_kv_blocks(g->runners[i]) < n_blocks)
                        n_blocks = cuda_runner_kv_blocks(g->runners[i]);
        }
        for (uint32_t i = 0; i < size; i++) {
                g->workers[i] = (struct rank_worker) { .group = g, .rank = i };
                if ((r = -pthread_create(&g->workers[i].thread, NULL, rank_main, &g->workers[i])) < 0) {
                        error_set(err, -r, "cannot start the worker of rank %u", i);
                        goto fail;
                }
                g->workers[i].started = true;
        }
        snprintf(g->name, sizeof(g->name), "%u x %s%s", size, cuda_runner_device_name(g->runners[0]),
                 loopback ? " (loopback)" : "");
        *ret = (struct backend) {
                .name = "cuda",
                .impl = g,
                .forward = group_forward,
                .release_memory = group_release_memory,
                .restore_memory = group_restore_memory,
                .n_workers = size,
                .memory_usage = group_memory_usage,
                .kv = {
                        .block_size = config->block_size,
                        .n_blocks = n_blocks, /* the fewest any rank holds */
                        .block_bytes = cuda_runner_block_bytes(g->runners[0]),
                },
                .kernels = g->name,
                .weights = "device",
                .weights_on_device = true,
                .free = group_free,
        };
        return 0;
fail:
        group_free(g);
        return r;
}
