/* SPDX-License-Identifier: MIT */
#pragma once

/* The names of an enum's values: a table indexed by the value. It ends after n entries or at
 * its first NULL entry, whichever comes first, so NULL-terminated tables pass SIZE_MAX. */

#include <stddef.h>

#define NAME_TABLE_SIZE(table) (sizeof(table) / sizeof(*(table)))

/* The name of value, or NULL past the table's end. */
const char *name_table_name(const char *const *names, size_t n, unsigned value);

/* The value named s, or -EINVAL when no entry is s. */
int name_table_find(const char *const *names, size_t n, const char *s);
