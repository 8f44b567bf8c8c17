/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <cuda_runtime_api.h>

#include "tp-comm.h"

extern "C" int tp_comm_all_gather(struct tp_comm *comm, uint32_t rank, const float *send, float *recv, size_t count,
                                  struct CUstream_st *stream, struct error *err) {
        return comm->ops->all_gather(comm, rank, send, recv, count, stream, err);
}

extern "C" void tp_comm_abort(struct tp_comm *comm) {
        comm->ops->abort(comm);
}

extern "C" void tp_comm_free(struct tp_comm *comm) {
        if (comm)
                comm->ops->free(comm);
}
