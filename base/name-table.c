/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>

#include "name-table.h"

const char *name_table_name(const char *const *names, size_t n, unsigned value) {
        for (size_t i = 0; i < n && names[i]; i++)
                if (i == value)
                        return names[i];
        return NULL;
}

int name_table_find(const char *const *names, size_t n, const char *s) {
        for (size_t i = 0; i < n && names[i]; i++)
                if (strcmp(names[i], s) == 0)
                        return (int) i;
        return -EINVAL;
}
