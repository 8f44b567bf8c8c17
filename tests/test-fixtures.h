/* SPDX-License-Identifier: MIT */
#pragma once

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

/* Parses tests/fixtures/NAME ($ASYNCLLM_FIXTURES/NAME); aborts the test naming the file when
 * it is missing or not JSON. The caller puts the returned object. */
json_object *test_load_fixture(const char *name);

/* o's member key; aborts the test naming it when absent. */
json_object *test_json_field(json_object *o, const char *key);

/* The integers of a JSON array, in a calloc()ed array the caller frees (never NULL, even
 * when *n is 0). */
int32_t *test_json_ids(json_object *array, size_t *n);
