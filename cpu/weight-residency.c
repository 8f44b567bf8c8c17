/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "weight-residency.h"

#define WEIGHT_CACHE_ENV "ASYNCLLM_CPU_WEIGHT_CACHE"

bool weight_residency_fits(uint64_t weight_bytes, uint64_t llc_bytes) {
        return llc_bytes > 0 && weight_bytes <= llc_bytes / 2;
}

/* The first line of attribute name of CPU 0's cache index into buf; false when it cannot
 * be read (no such index, or no sysfs). */
static bool read_cache_attribute(unsigned index, const char *name, char *buf, size_t size) {
        char path[96];
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%u/%s", index, name);
        FILE *f = fopen(path, "re");
        if (!f)
                return false;
        bool ok = fgets(buf, (int) size, f) != NULL;
        fclose(f);
        if (ok)
                buf[strcspn(buf, "\n")] = '\0';
        return ok;
}

/* sysfs names every cache of the CPU, in any order: the largest level that holds data wins.
 * Sizes read like "307200K". */
static uint64_t sysfs_last_level_cache_bytes(void) {
        uint64_t best_bytes = 0;
        long best_level = 0;
        for (unsigned index = 0; index < 16; index++) {
                char level[32], type[32], size[32];
                if (!read_cache_attribute(index, "level", level, sizeof(level)))
                        break;
                if (!read_cache_attribute(index, "type", type, sizeof(type)) || strcmp(type, "Instruction") == 0 ||
                    !read_cache_attribute(index, "size", size, sizeof(size)))
                        continue;
                char *end;
                unsigned long long n = strtoull(size, &end, 10);
                uint64_t bytes = *end == 'K' ? n << 10 : *end == 'M' ? n << 20 : *end == 'G' ? n << 30 : n;
                long l = strtol(level, NULL, 10);
                if (l > best_level) {
                        best_level = l;
                        best_bytes = bytes;
                }
        }
        return best_bytes;
}

uint64_t last_level_cache_bytes(void) {
        uint64_t bytes = sysfs_last_level_cache_bytes();
        if (bytes)
                return bytes;
        long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        return l3 > 0 ? (uint64_t) l3 : l2 > 0 ? (uint64_t) l2 : 0;
}

int weight_residency_choose(uint64_t weight_bytes, bool *keep_cached, struct error *err) {
        const char *forced = getenv(WEIGHT_CACHE_ENV);
        if (!forced || !*forced) {
                *keep_cached = weight_residency_fits(weight_bytes, last_level_cache_bytes());
                return 0;
        }
        if (strcmp(forced, "keep") == 0 || strcmp(forced, "stream") == 0) {
                *keep_cached = strcmp(forced, "keep") == 0;
                return 0;
        }
        return error_set(err, EINVAL,
                         WEIGHT_CACHE_ENV "=%s: say keep (weights stay cached between steps) or stream (non-temporal reads), "
                                          "or unset it to choose by the last-level cache's size",
                         forced);
}
