/* SPDX-License-Identifier: MIT */
#include <stdlib.h>

#include "quantile.h"

static int compare_double(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return (x > y) - (x < y);
}

double quantile_sorting(double *values, uint32_t n, double quantile) {
        if (n == 0)
                return 0;
        qsort(values, n, sizeof(*values), compare_double);
        double at = quantile * (n - 1);
        uint32_t lo = (uint32_t) at;
        uint32_t hi = lo + 1 < n ? lo + 1 : lo;
        return values[lo] + (at - lo) * (values[hi] - values[lo]);
}
