/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "tp-comm.h"

/* Every rank on one device: a gather copies each rank's send into a shared exchange buffer
 * and the whole buffer into each rank's recv. Host barriers order the ranks' streams: no rank
 * writes the exchange before every rank has read the last gather out of it (its read event),
 * and no rank reads it before every rank has written (its written event). */
struct loopback_comm {
        struct tp_comm base;
        uint32_t size;
        int device;
        size_t max_count;
        float *exchange; /* (size, max_count) */
        cudaEvent_t *written, *read;
        pthread_mutex_t lock;
        pthread_cond_t changed;
        uint32_t waiting;
        uint64_t generation;
        bool aborted;
};

/* Waits for every rank; false once the group is aborted. */
static bool barrier(struct loopback_comm *l) {
        pthread_mutex_lock(&l->lock);
        uint64_t generation = l->generation;
        if (!l->aborted && ++l->waiting == l->size) {
                l->waiting = 0;
                l->generation++;
                pthread_cond_broadcast(&l->changed);
        } else
                while (!l->aborted && l->generation == generation)
                        pthread_cond_wait(&l->changed, &l->lock);
        bool ok = !l->aborted;
        pthread_mutex_unlock(&l->lock);
        return ok;
}

#define TRY(call)                                                                                                   \
        do {                                                                                                        \
                cudaError_t e_ = (call);                                                                            \
                if (e_ != cudaSuccess) {                                                                            \
                        error_set(err, EIO, "loopback all-gather on rank %u: %s (%s)", rank, #call, cudaGetErrorName(e_)); \
                        comm->ops->abort(comm);                                                                     \
                        return -EIO;                                                                                \
                }                                                                                                   \
        } while (0)

static int loopback_all_gather(struct tp_comm *comm, uint32_t rank, const float *send, float *recv, size_t count,
                               struct CUstream_st *stream, struct error *err) {
        struct loopback_comm *l = (struct loopback_comm *) comm;
        if (count > l->max_count)
                return error_set(err, EINVAL, "a loopback all-gather of %zu floats, over its %zu", count, l->max_count);
        for (uint32_t j = 0; j < l->size; j++)
                TRY(cudaStreamWaitEvent(stream, l->read[j], 0));
        TRY(cudaMemcpyAsync(l->exchange + rank * count, send, count * sizeof(float), cudaMemcpyDeviceToDevice, stream));
        TRY(cudaEventRecord(l->written[rank], stream));
        if (!barrier(l))
                return error_set(err, EIO, "the tensor-parallel group was aborted: another rank failed");
        for (uint32_t j = 0; j < l->size; j++)
                TRY(cudaStreamWaitEvent(stream, l->written[j], 0));
        TRY(cudaMemcpyAsync(recv, l->exchange, l->size * count * sizeof(float), cudaMemcpyDeviceToDevice, stream));
        TRY(cudaEventRecord(l->read[rank], stream));
        if (!barrier(l))
                return error_set(err, EIO, "the tensor-parallel group was aborted: another rank failed");
        return 0;
}

static void loopback_abort(struct tp_comm *comm) {
        struct loopback_comm *l = (struct loopback_comm *) comm;
        pthread_mutex_lock(&l->lock);
        l->aborted = true;
        pthread_cond_broadcast(&l->changed);
        pthread_mutex_unlock(&l->lock);
}

static void loopback_free(struct tp_comm *comm) {
        struct loopback_comm *l = (struct loopback_comm *) comm;
        cudaSetDevice(l->device);
        for (uint32_t i = 0; i < l->size; i++) {
                if (l->written && l->written[i])
                        cudaEventDestroy(l->written[i]);
                if (l->read && l->read[i])
                        cudaEventDestroy(l->read[i]);
        }
        if (l->exchange)
                cudaFree(l->exchange);
        free(l->written);
        free(l->read);
        pthread_mutex_destroy(&l->lock);
        pthread_cond_destroy(&l->changed);
        free(l);
}

static const struct tp_comm_ops loopback_ops = { loopback_all_gather, loopback_abort, loopback_free };

extern "C" int tp_comm_loopback_new(uint32_t size, int device, size_t max_count, struct tp_comm **ret,
                                    struct error *err) {
        struct loopback_comm *l = (struct loopback_comm *) calloc(1, sizeof(*l));
        if (!l)
                return error_set(err, ENOMEM, "out of memory");
        l->base.ops = &loopback_ops;
        l->size = size;
        l->device = device;
        l->max_count = max_count;
        pthread_mutex_init(&l->lock, NULL);
        pthread_cond_init(&l->changed, NULL);
        l->written = (cudaEvent_t *) calloc(size, sizeof(cudaEvent_t));
        l->read = (cudaEvent_t *) calloc(size, sizeof(cudaEvent_t));
        cudaError_t e = l->written && l->read ? cudaSetDevice(device) : cudaErrorMemoryAllocation;
        if (e == cudaSuccess)
                e = cudaMalloc((void **) &l->exchange, size * max_count * sizeof(float));
        for (uint32_t i = 0; i < size && e == cudaSuccess; i++) {
                e = cudaEventCreateWithFlags(&l->written[i], cudaEventDisableTiming);
                if (e == cudaSuccess)
                        e = cudaEventCreateWithFlags(&l->read[i], cudaEventDisableTiming);
        }
        if (e != cudaSuccess) {
                loopback_free(&l->base);
                return error_set(err, EIO, "a loopback group of %u ranks on device %d: %s", size, device, cudaGetErrorName(e));
        }
        *ret = &l->base;
        return 0;
}
