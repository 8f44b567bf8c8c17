/* SPDX-License-Identifier: MIT */
#pragma once

/* The all-gathers between the ranks of a tensor-parallel group (model/tensor-parallel.h):
 * over NCCL, one rank per device; or a loopback that runs every rank on one device, each on
 * its own host thread and stream, so that one GPU tests the group's arithmetic (NCCL takes
 * one rank per device). A plain C interface; the stream is a cudaStream_t. */

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "error.h"

struct CUstream_st;
struct tp_comm;

/* size ranks on devices 0 .. size - 1. */
int tp_comm_nccl_new(uint32_t size, struct tp_comm **ret, struct error *err);
/* size ranks on device, gathers of at most max_count floats a rank. */
int tp_comm_loopback_new(uint32_t size, int device, size_t max_count, struct tp_comm **ret, struct error *err);

/* recv = every rank's send (count floats each), rank after rank, enqueued on rank's stream;
 * every rank calls it, in the same order. -EIO once the group is aborted. */
int tp_comm_all_gather(struct tp_comm *comm, uint32_t rank, const float *send, float *recv, size_t count,
                       struct CUstream_st *stream, struct error *err);

/* Ends every gather in flight or to come with an error, so that the ranks do not wait for one
 * that failed: called by the rank that fails. For good: the group is dead. */
void tp_comm_abort(struct tp_comm *comm);

void tp_comm_free(struct tp_comm *comm);

#ifdef __cplusplus
}

/* The implementations' table (C++ only). */
struct tp_comm_ops {
        int (*all_gather)(struct tp_comm *comm, uint32_t rank, const float *send, float *recv, size_t count,
                          struct CUstream_st *stream, struct error *err);
        void (*abort)(struct tp_comm *comm);
        void (*free)(struct tp_comm *comm);
};

struct tp_comm {
        const struct tp_comm_ops *ops;
};
#endif
