/* SPDX-License-Identifier: MIT */
#pragma once

/* Device memory that keeps its address when it is given back and taken again (C++, for gpu/
 * only): a virtual address range reserved once, with physical memory mapped into it and
 * unmapped through the driver's virtual-memory API (cuMemCreate, cuMemMap), reached through
 * cudaGetDriverEntryPoint so that the build never links the driver. Sleep frees the physical
 * memory of the weights and the KV pool while the CUDA graphs that captured their addresses
 * stay valid for the wake-up. Where the driver lacks the API, cudaMalloc and cudaFree stand
 * in and the address may change (vmm_region.stable says which). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "error.h"
}

struct vmm_region {
        void *base;    /* NULL before vmm_region_new() */
        size_t size;   /* bytes mapped, a multiple of the driver's granularity */
        bool mapped;   /* physical memory behind base now */
        bool stable;   /* base stays the same across release and map */
        int device;
        unsigned long long handle; /* the physical allocation (driver API) */
};

/* Reserves and maps at least size bytes on device. */
int vmm_region_new(struct vmm_region *r, int device, size_t size, struct error *err);

/* Gives the physical memory back; base stays reserved (when stable). */
int vmm_region_release(struct vmm_region *r, struct error *err);

/* Maps physical memory again at base (contents undefined). */
int vmm_region_map(struct vmm_region *r, struct error *err);

/* Releases everything, mapped or not. */
void vmm_region_free(struct vmm_region *r);
