/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "tp-comm.h"

/* One communicator per rank, all made by one ncclCommInitAll() in this process. */
struct nccl_comm {
        struct tp_comm base;
        uint32_t size;
        bool aborted;
        ncclComm_t comms[];
};

static int nccl_all_gather(struct tp_comm *c, uint32_t rank, const float *send, float *recv, size_t count,
                           struct CUstream_st *stream, struct error *err) {
        struct nccl_comm *n = (struct nccl_comm *) c;
        if (__atomic_load_n(&n->aborted, __ATOMIC_ACQUIRE))
                return error_set(err, EIO, "the tensor-parallel group was aborted: another rank failed");
        ncclResult_t r = ncclAllGather(send, recv, count, ncclFloat32, n->comms[rank], stream);
        if (r != ncclSuccess)
                return error_set(err, EIO, "NCCL all-gather on rank %u: %s", rank, ncclGetErrorString(r));
        return 0;
}

static void nccl_abort(struct tp_comm *c) {
        struct nccl_comm *n = (struct nccl_comm *) c;
        if (__atomic_exchange_n(&n->aborted, true, __ATOMIC_ACQ_REL))
                return;
        for (uint32_t i = 0; i < n->size; i++)
                ncclCommAbort(n->comms[i]);
}

static void nccl_free(struct tp_comm *c) {
        struct nccl_comm *n = (struct nccl_comm *) c;
        if (!n->aborted)
                for (uint32_t i = 0; i < n->size; i++)
                        ncclCommDestroy(n->comms[i]);
        free(n);
}

static const struct tp_comm_ops nccl_ops = { nccl_all_gather, nccl_abort, nccl_free };

extern "C" int tp_comm_nccl_new(uint32_t size, struct tp_comm **ret, struct error *err) {
        int devices = 0;
        cudaError_t e = cudaGetDeviceCount(&devices);
        if (e != cudaSuccess)
                return error_set(err, ENODEV, "no CUDA device: %s", cudaGetErrorString(e));
        if ((uint32_t) devices < size)
                return error_set(err, ENODEV, "a tensor-parallel size of %u needs %u GPUs; this machine has %d", size, size,
                                 devices);
        struct nccl_comm *n = (struct nccl_comm *) calloc(1, sizeof(*n) + size * sizeof(ncclComm_t));
        int *list = (int *) calloc(size, sizeof(int));
        if (!n || !list) {
                free(n);
                free(list);
                return error_set(err, ENOMEM, "out of memory");
        }
        for (uint32_t i = 0; i < size; i++)
                list[i] = (int) i;
        ncclResult_t r = ncclCommInitAll(n->comms, (int) size, list);
        free(list);
        if (r != ncclSuccess) {
                free(n);
                return error_set(err, EIO, "NCCL over %u GPUs: %s", size, ncclGetErrorString(r));
        }
        n->base.ops = &nccl_ops;
        n->size = size;
        *ret = &n->base;
        return 0;
}
