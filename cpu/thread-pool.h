/* SPDX-License-Identifier: MIT */
#pragma once

/* A persistent pool of worker threads that all run one function together, split by thread
 * index, with barriers between phases. Workers sleep on a futex between runs (0% CPU when
 * idle); a barrier spins briefly before it sleeps, since phases inside one run are short. */

#include <stddef.h>

#include "error.h"

struct thread_pool;

typedef void (*thread_pool_fn)(void *ctx, unsigned ith, unsigned nth);

int thread_pool_new(unsigned n_threads, struct thread_pool **ret, struct error *err);
void thread_pool_free(struct thread_pool *pool);

/* Runs fn(ctx, i, n) on every thread of the pool, the caller being thread 0, and returns when
 * all have returned. Not reentrant: one run at a time. */
void thread_pool_run(struct thread_pool *pool, thread_pool_fn fn, void *ctx);

/* Inside fn: returns once every thread of the run has reached it. */
void thread_pool_barrier(struct thread_pool *pool);

/* The same, and while it spins waiting for the others it fetches [fetch, fetch + fetch_bytes)
 * into the cache: what this thread reads next, so that the memory is not idle while it waits.
 * fetch may be NULL when fetch_bytes is 0. */
void thread_pool_barrier_fetch(struct thread_pool *pool, const void *fetch, size_t fetch_bytes);
