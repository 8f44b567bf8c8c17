/* SPDX-License-Identifier: MIT */
#pragma once

/* Small pieces the C benchmarks share. */

/* A decimal unsigned argument: 0, or -EINVAL for anything else (a sign, junk, > UINT32_MAX). */
int bench_parse_uint(const char *s, unsigned *ret);

/* A decimal floating-point argument: 0, or -EINVAL when it is not a number as a whole. */
int bench_parse_double(const char *s, double *ret);

/* qsort() order for doubles. */
int bench_compare_double(const void *a, const void *b);
