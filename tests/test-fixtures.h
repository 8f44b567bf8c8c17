/* SPDX-License-Identifier: MIT */
#pragma once

#include <json-c/json.h>

/* Parses tests/fixtures/NAME ($ASYNCLLM_FIXTURES/NAME); aborts the test naming the file when
 * it is missing or not JSON. The caller puts the returned object. */
json_object *test_load_fixture(const char *name);
