/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "bench-util.h"

int bench_parse_uint(const char *s, unsigned *ret) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(s, &end, 10);
        if (errno || end == s || *end || v > UINT32_MAX || *s == '-')
                return -EINVAL;
        *ret = (unsigned) v;
        return 0;
}

int bench_parse_double(const char *s, double *ret) {
        char *end;
        double v = strtod(s, &end);
        if (end == s || *end)
                return -EINVAL;
        *ret = v;
        return 0;
}

int bench_compare_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return (x > y) - (x < y);
}
