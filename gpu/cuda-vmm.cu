/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <string.h>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include "cuda-vmm.h"

/* The driver's virtual-memory calls, resolved once; all NULL where the driver lacks them. */
static struct {
        bool resolved;
        PFN_cuMemAddressReserve_v10020 reserve;
        PFN_cuMemAddressFree_v10020 address_free;
        PFN_cuMemCreate_v10020 create;
        PFN_cuMemRelease_v10020 release;
        PFN_cuMemMap_v10020 map;
        PFN_cuMemUnmap_v10020 unmap;
        PFN_cuMemSetAccess_v10020 set_access;
        PFN_cuMemGetAllocationGranularity_v10020 granularity;
} driver;

static void *entry_point(const char *name) {
        void *fn = NULL;
        enum cudaDriverEntryPointQueryResult found;
        if (cudaGetDriverEntryPointByVersion(name, &fn, 10020, cudaEnableDefault, &found) != cudaSuccess ||
            found != cudaDriverEntryPointSuccess)
                return NULL;
        return fn;
}

static bool resolve(void) {
        if (!driver.resolved) {
                driver.reserve = (PFN_cuMemAddressReserve_v10020) entry_point("cuMemAddressReserve");
                driver.address_free = (PFN_cuMemAddressFree_v10020) entry_point("cuMemAddressFree");
                driver.create = (PFN_cuMemCreate_v10020) entry_point("cuMemCreate");
                driver.release = (PFN_cuMemRelease_v10020) entry_point("cuMemRelease");
                driver.map = (PFN_cuMemMap_v10020) entry_point("cuMemMap");
                driver.unmap = (PFN_cuMemUnmap_v10020) entry_point("cuMemUnmap");
                driver.set_access = (PFN_cuMemSetAccess_v10020) entry_point("cuMemSetAccess");
                driver.granularity = (PFN_cuMemGetAllocationGranularity_v10020) entry_point("cuMemGetAllocationGranularity");
                driver.resolved = true;
        }
        return driver.reserve && driver.address_free && driver.create && driver.release && driver.map && driver.unmap &&
               driver.set_access && driver.granularity;
}

static CUmemAllocationProp device_prop(int device) {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof(prop));
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = device;
        return prop;
}

static int driver_error(struct error *err, CUresult rc, const char *what) {
        return error_set(err, rc == CUDA_ERROR_OUT_OF_MEMORY ? ENOMEM : EIO, "CUDA driver error %d in %s", (int) rc, what);
}

int vmm_region_map(struct vmm_region *r, struct error *err) {
        if (r->mapped)
                return 0;
        if (!r->stable) {
                cudaError_t e = cudaMalloc(&r->base, r->size);
                if (e != cudaSuccess) {
                        r->base = NULL;
                        return error_set(err, e == cudaErrorMemoryAllocation ? ENOMEM : EIO, "cudaMalloc of %zu MiB: %s",
                                         r->size >> 20, cudaGetErrorString(e));
                }
                r->mapped = true;
                return 0;
        }
        CUmemAllocationProp prop = device_prop(r->device);
        CUmemGenericAllocationHandle handle;
        CUresult rc = driver.create(&handle, r->size, &prop, 0);
        if (rc != CUDA_SUCCESS)
                return driver_error(err, rc, "cuMemCreate");
        if ((rc = driver.map((CUdeviceptr) r->base, r->size, 0, handle, 0)) != CUDA_SUCCESS) {
                driver.release(handle);
                return driver_error(err, rc, "cuMemMap");
        }
        CUmemAccessDesc access;
        memset(&access, 0, sizeof(access));
        access.location = prop.location;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        if ((rc = driver.set_access((CUdeviceptr) r->base, r->size, &access, 1)) != CUDA_SUCCESS) {
                driver.unmap((CUdeviceptr) r->base, r->size);
                driver.release(handle);
                return driver_error(err, rc, "cuMemSetAccess");
        }
        r->handle = handle;
        r->mapped = true;
        return 0;
}

int vmm_region_new(struct vmm_region *r, int device, size_t size, struct error *err) {
        memset(r, 0, sizeof(*r));
        r->device = device;
        r->size = size ? size : 1;
        if (resolve()) {
                CUmemAllocationProp prop = device_prop(device);
                size_t granularity = 0;
                CUresult rc = driver.granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
                if (rc == CUDA_SUCCESS && granularity) {
                        r->size = (r->size + granularity - 1) / granularity * granularity;
                        CUdeviceptr base;
                        if ((rc = driver.reserve(&base, r->size, 0, 0, 0)) == CUDA_SUCCESS) {
                                r->base = (void *) base;
                                r->stable = true;
                        }
                }
        }
        int ret = vmm_region_map(r, err);
        if (ret < 0)
                vmm_region_free(r);
        return ret;
}

int vmm_region_release(struct vmm_region *r, struct error *err) {
        if (!r->mapped)
                return 0;
        if (!r->stable) {
                cudaError_t e = cudaFree(r->base);
                r->base = NULL;
                r->mapped = false;
                return e == cudaSuccess ? 0 : error_set(err, EIO, "cudaFree: %s", cudaGetErrorString(e));
        }
        CUresult rc = driver.unmap((CUdeviceptr) r->base, r->size);
        if (rc != CUDA_SUCCESS)
                return driver_error(err, rc, "cuMemUnmap");
        r->mapped = false;
        if ((rc = driver.release((CUmemGenericAllocationHandle) r->handle)) != CUDA_SUCCESS)
                return driver_error(err, rc, "cuMemRelease");
        return 0;
}

void vmm_region_free(struct vmm_region *r) {
        if (r->mapped)
                vmm_region_release(r, NULL);
        if (r->stable && r->base)
                driver.address_free((CUdeviceptr) r->base, r->size);
        memset(r, 0, sizeof(*r));
}
