/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "thread-pool.h"

/* Pauses (about 25 ns each here) a barrier spins before it sleeps: long while the process
 * has the cores to itself, where the partner is moments away; short once its threads are
 * being preempted (more runnable threads than cores), where a spinning thread holds the
 * core its partner needs: there, 20000 made decode 10x slower than 100. */
#define BARRIER_SPINS_QUIET 20000
#define BARRIER_SPINS_CONTENDED 100

struct thread_pool {
        unsigned n_threads;
        pthread_t *threads;

        /* A run starts when run_generation changes; workers sleep on it in between. */
        _Atomic unsigned run_generation;
        _Atomic unsigned run_done;
        thread_pool_fn fn;
        void *ctx;
        _Atomic bool stopping;

        /* Barrier: threads count arrivals; the last one bumps the generation. */
        _Atomic unsigned barrier_arrived;
        _Atomic unsigned barrier_generation;
        _Atomic unsigned barrier_sleepers;
        unsigned barrier_spins; /* set before each run */
        long involuntary_switches; /* the process's, at the start of the last run */
        struct timespec last_run;
};

struct worker_arg {
        struct thread_pool *pool;
        unsigned index;
};

static void futex_wait(_Atomic unsigned *addr, unsigned expected) {
        syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic unsigned *addr) {
        syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
}

void thread_pool_barrier(struct thread_pool *pool) {
        if (pool->n_threads == 1)
                return;
        unsigned generation = atomic_load_explicit(&pool->barrier_generation, memory_order_acquire);
        if (atomic_fetch_add_explicit(&pool->barrier_arrived, 1, memory_order_acq_rel) == pool->n_threads - 1) {
                atomic_store_explicit(&pool->barrier_arrived, 0, memory_order_relaxed);
                atomic_fetch_add_explicit(&pool->barrier_generation, 1, memory_order_release);
                if (atomic_load_explicit(&pool->barrier_sleepers, memory_order_acquire) > 0)
                        futex_wake_all(&pool->barrier_generation);
                return;
        }
        for (unsigned i = 0; i < pool->barrier_spins; i++) {
                if (atomic_load_explicit(&pool->barrier_generation, memory_order_acquire) != generation)
                        return;
                cpu_relax();
        }
        atomic_fetch_add_explicit(&pool->barrier_sleepers, 1, memory_order_acq_rel);
        while (atomic_load_explicit(&pool->barrier_generation, memory_order_acquire) == generation)
                futex_wait(&pool->barrier_generation, generation);
        atomic_fetch_sub_explicit(&pool->barrier_sleepers, 1, memory_order_acq_rel);
}

static void *worker_main(void *p) {
        struct worker_arg arg = *(struct worker_arg *) p;
        struct thread_pool *pool = arg.pool;
        unsigned seen = 0;
        free(p);

        for (;;) {
                unsigned generation;
                while ((generation = atomic_load_explicit(&pool->run_generation, memory_order_acquire)) == seen)
                        futex_wait(&pool->run_generation, seen);
                seen = generation;
                if (atomic_load_explicit(&pool->stopping, memory_order_acquire))
                        return NULL;
                pool->fn(pool->ctx, arg.index, pool->n_threads);
                if (atomic_fetch_add_explicit(&pool->run_done, 1, memory_order_acq_rel) == pool->n_threads - 2)
                        futex_wake_all(&pool->run_done);
        }
}

/* Contended when the process's threads were preempted at least twice, and at least once per
 * 5 ms, since the last run began: on a quiet machine a step sees 0 or 1 preemptions (kernel
 * threads), beside a busy process 4 or more. */
static unsigned barrier_spins_now(struct thread_pool *pool) {
        struct rusage usage;
        struct timespec now;
        if (getrusage(RUSAGE_SELF, &usage) < 0 || clock_gettime(CLOCK_MONOTONIC, &now) < 0)
                return BARRIER_SPINS_CONTENDED;
        long preemptions = usage.ru_nivcsw - pool->involuntary_switches;
        double ms = (double) (now.tv_sec - pool->last_run.tv_sec) * 1e3 + (double) (now.tv_nsec - pool->last_run.tv_nsec) / 1e6;
        pool->involuntary_switches = usage.ru_nivcsw;
        pool->last_run = now;
        return preemptions >= 2 && preemptions * 5.0 >= ms ? BARRIER_SPINS_CONTENDED : BARRIER_SPINS_QUIET;
}

void thread_pool_run(struct thread_pool *pool, thread_pool_fn fn, void *ctx) {
        if (pool->n_threads == 1) {
                fn(ctx, 0, 1);
                return;
        }
        pool->barrier_spins = barrier_spins_now(pool);
        pool->fn = fn;
        pool->ctx = ctx;
        atomic_store_explicit(&pool->run_done, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&pool->run_generation, 1, memory_order_release);
        futex_wake_all(&pool->run_generation);

        fn(ctx, 0, pool->n_threads);

        unsigned done;
        while ((done = atomic_load_explicit(&pool->run_done, memory_order_acquire)) != pool->n_threads - 1)
                futex_wait(&pool->run_done, done);
}

unsigned thread_pool_size(const struct thread_pool *pool) {
        return pool->n_threads;
}

static void stop_workers(struct thread_pool *pool, unsigned started) {
        atomic_store_explicit(&pool->stopping, true, memory_order_release);
        atomic_fetch_add_explicit(&pool->run_generation, 1, memory_order_release);
        futex_wake_all(&pool->run_generation);
        for (unsigned i = 0; i < started; i++)
                pthread_join(pool->threads[i], NULL);
}

int thread_pool_new(unsigned n_threads, struct thread_pool **ret, struct error *err) {
        if (n_threads < 1 || n_threads > 1024)
                return error_set(err, EINVAL, "thread count must be in [1, 1024], got %u", n_threads);
        struct thread_pool *pool = calloc(1, sizeof(*pool));
        if (!pool)
                return error_set(err, ENOMEM, "out of memory");
        pool->n_threads = n_threads;
        pool->threads = calloc(n_threads, sizeof(*pool->threads));
        if (!pool->threads) {
                free(pool);
                return error_set(err, ENOMEM, "out of memory");
        }
        for (unsigned i = 1; i < n_threads; i++) {
                struct worker_arg *arg = malloc(sizeof(*arg));
                int r = ENOMEM;
                if (arg) {
                        *arg = (struct worker_arg) { pool, i };
                        r = pthread_create(&pool->threads[i - 1], NULL, worker_main, arg);
                }
                if (r == 0)
                        continue;
                free(arg);
                stop_workers(pool, i - 1);
                free(pool->threads);
                free(pool);
                return error_set(err, r, "cannot start worker thread %u: %s", i, strerror(r));
        }
        *ret = pool;
        return 0;
}

void thread_pool_free(struct thread_pool *pool) {
        if (!pool)
                return;
        stop_workers(pool, pool->n_threads - 1);
        free(pool->threads);
        free(pool);
}
