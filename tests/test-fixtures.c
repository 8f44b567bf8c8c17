/* SPDX-License-Identifier: MIT */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "test-fixtures.h"

json_object *test_load_fixture(const char *name) {
        const char *dir = getenv("ASYNCLLM_FIXTURES");
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir && *dir ? dir : "tests/fixtures", name);
        json_object *root = json_object_from_file(path);
        ck_assert_msg(root != NULL, "cannot read fixture %s: %s", path, json_util_get_last_err());
        return root;
}
