/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
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

/* A run spinning long finds the process contended when its threads spent more than this
 * share of their time runnable but off the CPU (preempted). By time, not by the count of
 * preemptions: a daemon's frontend thread takes a core for a moment every step, two
 * preemptions a step that cost nothing, while sleeping at every barrier cost that daemon's
 * decode 60% (5.1 against 3.2 ms a token). A busy process beside takes a third. */
#define CONTENDED_SHARE 0.10
/* Runs then spent spinning briefly before one long-spinning run probes whether the
 * contention is gone: doubling while probes keep finding it. Sleeping at barriers hides
 * the contention it avoids, so a brief-spinning run cannot tell by itself. */
#define CONTENDED_RUNS_FIRST 16
#define CONTENDED_RUNS_MAX 256
/* Cache lines a barrier's spin fetches per pause: about what memory delivers to one thread in
 * a pause's time. */
#define FETCH_LINES_PER_SPIN 4

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
        unsigned contended_left; /* brief-spinning runs before the next probe */
        unsigned contended_runs; /* how many the last probe that found contention set */
        _Atomic long lost_ns;    /* this run's threads' time preempted, summed */
};

/* Nanoseconds a thread of the pool spent asleep in barriers since its share of the run
 * began: off the CPU by its own choice, which is not lost to others. */
static _Thread_local long barrier_slept_ns;

static long clock_ns(clockid_t clock) {
        struct timespec t;
        if (clock_gettime(clock, &t) < 0)
                return 0;
        return (long) t.tv_sec * 1000000000L + t.tv_nsec;
}

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
        thread_pool_barrier_fetch(pool, NULL, 0);
}

void thread_pool_barrier_fetch(struct thread_pool *pool, const void *fetch, size_t fetch_bytes) {
        const char *next = fetch, *end = fetch ? next + fetch_bytes : next;
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
                for (unsigned k = 0; k < FETCH_LINES_PER_SPIN && next < end; k++, next += 64)
                        __builtin_prefetch(next, 0, 3);
                cpu_relax();
        }
        long slept_from = clock_ns(CLOCK_MONOTONIC);
        atomic_fetch_add_explicit(&pool->barrier_sleepers, 1, memory_order_acq_rel);
        while (atomic_load_explicit(&pool->barrier_generation, memory_order_acquire) == generation)
                futex_wait(&pool->barrier_generation, generation);
        atomic_fetch_sub_explicit(&pool->barrier_sleepers, 1, memory_order_acq_rel);
        barrier_slept_ns += clock_ns(CLOCK_MONOTONIC) - slept_from;
}

/* This thread's share of the run; the time it was kept off the CPU while it wanted it (its
 * wall time less its CPU time and its sleep in barriers) goes to pool->lost_ns. */
static void run_share(struct thread_pool *pool, unsigned index) {
        long wall = clock_ns(CLOCK_MONOTONIC), cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        barrier_slept_ns = 0;
        pool->fn(pool->ctx, index, pool->n_threads);
        long lost = (clock_ns(CLOCK_MONOTONIC) - wall) - (clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu) - barrier_slept_ns;
        if (lost > 0)
                atomic_fetch_add_explicit(&pool->lost_ns, lost, memory_order_relaxed);
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
                run_share(pool, arg.index);
                if (atomic_fetch_add_explicit(&pool->run_done, 1, memory_order_acq_rel) == pool->n_threads - 2)
                        futex_wake_all(&pool->run_done);
        }
}

void thread_pool_run(struct thread_pool *pool, thread_pool_fn fn, void *ctx) {
        if (pool->n_threads == 1) {
                fn(ctx, 0, 1);
                return;
        }
        pool->barrier_spins = pool->contended_left > 0 ? BARRIER_SPINS_CONTENDED : BARRIER_SPINS_QUIET;
        pool->fn = fn;
        pool->ctx = ctx;
        long started = clock_ns(CLOCK_MONOTONIC);
        atomic_store_explicit(&pool->lost_ns, 0, memory_order_relaxed);
        atomic_store_explicit(&pool->run_done, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&pool->run_generation, 1, memory_order_release);
        futex_wake_all(&pool->run_generation);

        run_share(pool, 0);

        unsigned done;
        while ((done = atomic_load_explicit(&pool->run_done, memory_order_acquire)) != pool->n_threads - 1)
                futex_wait(&pool->run_done, done);
        if (pool->contended_left > 0) {
                pool->contended_left--;
                return;
        }
        double share = (double) atomic_load_explicit(&pool->lost_ns, memory_order_relaxed) /
                       ((double) (clock_ns(CLOCK_MONOTONIC) - started) * pool->n_threads + 1);
        if (share > CONTENDED_SHARE) {
                unsigned doubled = 2 * pool->contended_runs;
                pool->contended_runs = pool->contended_runs == 0 ? CONTENDED_RUNS_FIRST
                                       : doubled < CONTENDED_RUNS_MAX ? doubled
                                                                      : CONTENDED_RUNS_MAX;
                pool->contended_left = pool->contended_runs;
        } else
                pool->contended_runs = 0;
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
