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

json_object *test_json_field(json_object *o, const char *key) {
        json_object *v;
        ck_assert_msg(json_object_object_get_ex(o, key, &v), "fixture lacks \"%s\"", key);
        return v;
}

int32_t *test_json_ids(json_object *array, size_t *n) {
        *n = json_object_array_length(array);
        int32_t *ids = calloc(*n ? *n : 1, sizeof(int32_t));
        ck_assert_ptr_nonnull(ids);
        for (size_t i = 0; i < *n; i++)
                ids[i] = json_object_get_int(json_object_array_get_idx(array, i));
        return ids;
}
