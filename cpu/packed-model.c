/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "packed-model.h"
#include "weight-residency.h"

static bool packable(const struct dot_kernels *kernels, const struct weight *w) {
        return packed_type_supported(w->type) &&
               (dot_packed_kernel_for(kernels, w->type) || dot_packed_k_kernel_for(kernels, w->type)) &&
               w->n_cols % tensor_type_info(w->type)->block_size == 0;
}

/* The file's whole pages inside [p, p + n) are dropped from this process: the mapping is
 * shared and read-only, so a later read faults the bytes back in from the page cache. */
static void drop_file_pages(const void *p, uint64_t n) {
        uintptr_t page = (uintptr_t) sysconf(_SC_PAGESIZE);
        uintptr_t begin = ((uintptr_t) p + page - 1) / page * page, end = ((uintptr_t) p + n) / page * page;
        if (end > begin)
                (void) madvise((void *) begin, end - begin, MADV_DONTNEED);
}

void packed_model_free(struct packed_model *pm) {
        if (pm->arena)
                munmap(pm->arena, pm->arena_bytes);
        free(pm->weights);
        *pm = (struct packed_model) { 0 };
}

/* Repacks every quantized matmul weight into one arena. The tied output is repacked too; the
 * token embedding lookup keeps reading the original rows. */
int packed_model_build(const struct model *m, const struct dot_kernels *kernels, struct packed_model *pm,
                       struct error *err) {
        size_t n = n_matmul_weights(m);
        uint64_t total = 0;

        pm->weights = calloc(n, sizeof(*pm->weights));
        if (!pm->weights)
                return error_set(err, ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
                const struct weight *w = matmul_weight(m, i);
                if (packable(kernels, w) && packed_weights_init(&pm->weights[i], w->type, w->n_rows, w->n_cols) == 0)
                        total += packed_weights_bytes(&pm->weights[i]);
        }
        if (total == 0)
                return 0;
        const size_t huge = 2u << 20;
        pm->arena_bytes = (total + huge - 1) / huge * huge;
        pm->arena = mmap(NULL, pm->arena_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (pm->arena == MAP_FAILED) {
                pm->arena = NULL;
                packed_model_free(pm);
                return error_set(err, ENOMEM, "cannot allocate %llu bytes for the repacked weights", (unsigned long long) total);
        }
        /* one stream per matmul: large pages spare the TLB and let the prefetch run on */
        (void) madvise(pm->arena, pm->arena_bytes, MADV_HUGEPAGE);
        int rc = weight_residency_choose(total, &pm->keep_cached, err);
        if (rc < 0) {
                packed_model_free(pm);
                return rc;
        }
        uint64_t offset = 0;
        for (size_t i = 0; i < n; i++) {
                struct packed_weights *p = &pm->weights[i];
                const struct weight *w = matmul_weight(m, i);
                if (p->n_groups == 0)
                        continue;
                packed_weights_fill(p, pm->arena + offset, w->data, w->row_bytes);
                p->keep_cached = pm->keep_cached;
                offset += packed_weights_bytes(p);
                if (m->file->mapping)
                        drop_file_pages(w->data, w->n_rows * w->row_bytes);
        }
        return 0;
}
