/* SPDX-License-Identifier: MIT */
#pragma once

/* Small helpers shared by the Check test programs. The ones that can fail call ck_abort_msg(),
 * so call them from inside a test. */

#include <stddef.h>
#include <stdint.h>

/* The real model: $ASYNCLLM_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf under
 * $top_srcdir (or $srcdir, or the current directory). Aborts the test with a hint to run
 * scripts/fetch-model when the file is missing. */
const char *test_model_path(void);

/* The backend the model tests run on: $ASYNCLLM_TEST_DEVICE ("cuda" on a GPU machine, as
 * scripts/gpu-check runs them), else "cpu". */
const char *test_device(void);

/* How many times longer than usual things may take on this run: $ASYNCLLM_TEST_SLOWDOWN (make
 * check sets it in sanitizer builds, tests/valgrind-run under memcheck), at least 1. Every
 * wall-clock margin of the tests goes through it, so that a slow machine stretches them all
 * alike. */
double test_slowdown(void);

/* seconds of wall-clock margin (a deadline, a wait for something that must happen), stretched
 * by test_slowdown(). */
double test_scaled(double seconds);

/* The monotonic time (clock.h's monotonic_seconds()) seconds of margin from now, stretched by
 * test_slowdown(): the end of a wait for something that must happen. */
double test_deadline(double seconds);

/* A fresh private directory under $TMPDIR (or /tmp); the caller removes it with
 * test_tmpdir_remove(). */
char *test_tmpdir(void);

/* Removes the directory's entries (one level deep) and the directory, and frees dir. */
void test_tmpdir_remove(char *dir);

/* "dir/name" in a malloc()ed string. */
char *test_path_join(const char *dir, const char *name);

/* Reads a whole file into a malloc()ed buffer. 0 or negative errno. */
int test_read_file(const char *path, uint8_t **ret_buf, size_t *ret_len);

/* Writes len bytes to path (created or truncated). 0 or negative errno. */
int test_write_file(const char *path, const void *buf, size_t len);
