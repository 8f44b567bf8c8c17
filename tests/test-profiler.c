/* SPDX-License-Identifier: MIT */
/* The profiler's trace files: valid JSON in Chrome's trace event format whether they hold
 * no span, a few or many from two threads; each span where and as long as it was recorded;
 * refusals for stop without start and for start while running; nothing left behind when
 * the file cannot be written. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "profiler.h"

static char dir[] = "/tmp/test-profiler.XXXXXX";

static char *trace_path(const char *name) {
        char *path;
        ck_assert_int_gt(asprintf(&path, "%s/%s", dir, name), 0);
        return path;
}

static void remove_trace(char *path) {
        (void) unlink(path);
        free(path);
}

/* The trace at path parsed as strict JSON (no trailing comma: the viewers and Python's json
 * refuse one), checked for the shape every trace has; its event array is returned through
 * *events (owned by the returned object). */
static json_object *read_trace(const char *path, json_object **events) {
        FILE *f = fopen(path, "re");
        ck_assert_msg(f, "%s: %s", path, strerror(errno));
        char *text = NULL;
        size_t size = 0;
        FILE *mem = open_memstream(&text, &size);
        char buf[65536];
        for (size_t n; (n = fread(buf, 1, sizeof(buf), f)) > 0;)
                fwrite(buf, 1, n, mem);
        fclose(f);
        fclose(mem);
        json_tokener *tok = json_tokener_new();
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
        json_object *trace = json_tokener_parse_ex(tok, text, (int) size);
        ck_assert_msg(trace && json_tokener_get_error(tok) == json_tokener_success, "%s is not valid JSON: %s", path,
                      json_tokener_error_desc(json_tokener_get_error(tok)));
        json_tokener_free(tok);
        free(text);
        ck_assert(json_object_object_get_ex(trace, "traceEvents", events));
        ck_assert(json_object_is_type(*events, json_type_array));
        json_object *other, *truncated;
        ck_assert(json_object_object_get_ex(trace, "otherData", &other));
        ck_assert(json_object_object_get_ex(other, "truncated", &truncated));
        ck_assert(!json_object_get_boolean(truncated));
        return trace;
}

static size_t count_phase(json_object *events, const char *phase) {
        size_t n = 0;
        for (size_t i = 0; i < json_object_array_length(events); i++) {
                json_object *ph;
                ck_assert(json_object_object_get_ex(json_object_array_get_idx(events, i), "ph", &ph));
                n += strcmp(json_object_get_string(ph), phase) == 0;
        }
        return n;
}

START_TEST(test_empty_trace_is_valid) {
        struct error err = {};
        char *path = trace_path("empty.json");
        size_t n_spans = 99;
        bool truncated = true;
        ck_assert_int_eq(profiler_start(&err), 0);
        ck_assert_int_eq(profiler_stop(path, &n_spans, &truncated, &err), 0);
        ck_assert_uint_eq(n_spans, 0);
        ck_assert(!truncated);
        json_object *events, *trace = read_trace(path, &events);
        ck_assert_uint_eq(count_phase(events, "M"), 2); /* the two tracks' names */
        ck_assert_uint_eq(count_phase(events, "X"), 0);
        json_object_put(trace);
        remove_trace(path);
}
END_TEST

START_TEST(test_spans_as_recorded) {
        struct error err = {};
        char *path = trace_path("spans.json");
        profiler_span(PROFILE_TRACK_ENGINE, "engine", "before", 0, 1, NULL, 0); /* off: dropped */
        ck_assert_int_eq(profiler_start(&err), 0);
        double t = monotonic_seconds();
        profiler_span(PROFILE_TRACK_ENGINE, "engine", "step", t + 0.001, t + 0.003, "tokens", 17);
        profiler_span(PROFILE_TRACK_FRONTEND, "frontend", "outputs", t + 0.002, t + 0.0025, NULL, 0);
        size_t n_spans;
        bool truncated;
        ck_assert_int_eq(profiler_stop(path, &n_spans, &truncated, &err), 0);
        ck_assert_uint_eq(n_spans, 2);
        profiler_span(PROFILE_TRACK_ENGINE, "engine", "after", t, t + 1, NULL, 0); /* off again */

        json_object *events, *trace = read_trace(path, &events);
        ck_assert_uint_eq(count_phase(events, "X"), 2);
        json_object *step = json_object_array_get_idx(events, 2), *v;
        ck_assert(json_object_object_get_ex(step, "name", &v));
        ck_assert_str_eq(json_object_get_string(v), "step");
        ck_assert(json_object_object_get_ex(step, "tid", &v));
        ck_assert_int_eq(json_object_get_int(v), PROFILE_TRACK_ENGINE);
        ck_assert(json_object_object_get_ex(step, "dur", &v));
        ck_assert_double_eq_tol(json_object_get_double(v), 2000, 1); /* microseconds */
        ck_assert(json_object_object_get_ex(step, "ts", &v));
        double ts = json_object_get_double(v);
        ck_assert_double_ge(ts, 1000 - 1);
        ck_assert_double_lt(ts, 1e6); /* relative to the start, not to boot */
        ck_assert(json_object_object_get_ex(step, "args", &v));
        ck_assert(json_object_object_get_ex(v, "tokens", &v));
        ck_assert_int_eq(json_object_get_int(v), 17);
        json_object *outputs = json_object_array_get_idx(events, 3);
        ck_assert(!json_object_object_get_ex(outputs, "args", &v));
        ck_assert(json_object_object_get_ex(outputs, "tid", &v));
        ck_assert_int_eq(json_object_get_int(v), PROFILE_TRACK_FRONTEND);
        json_object_put(trace);
        remove_trace(path);
}
END_TEST

START_TEST(test_refusals) {
        struct error err = {};
        size_t n_spans;
        bool truncated;
        char *path = trace_path("never.json");
        ck_assert_int_eq(profiler_stop(path, &n_spans, &truncated, &err), -ENOENT);
        ck_assert_ptr_nonnull(strstr(err.message, "start_profile first"));
        ck_assert_int_ne(access(path, F_OK), 0);
        ck_assert_int_eq(profiler_start(&err), 0);
        ck_assert_int_eq(profiler_start(&err), -EALREADY);
        ck_assert_ptr_nonnull(strstr(err.message, "stop_profile first"));
        ck_assert_int_eq(profiler_stop(path, &n_spans, &truncated, &err), 0);
        remove_trace(path);
}
END_TEST

START_TEST(test_unwritable_path) {
        struct error err = {};
        size_t n_spans;
        bool truncated;
        char *path = trace_path("missing-directory/trace.json");
        ck_assert_int_eq(profiler_start(&err), 0);
        profiler_span(PROFILE_TRACK_ENGINE, "engine", "step", 0, 1, NULL, 0);
        ck_assert_int_eq(profiler_stop(path, &n_spans, &truncated, &err), -EIO);
        ck_assert_ptr_nonnull(strstr(err.message, path));
        ck_assert_ptr_nonnull(strstr(err.message, "No such file or directory"));
        /* the profiler is off and empty: a new run starts clean */
        char *next = trace_path("next.json");
        ck_assert_int_eq(profiler_start(&err), 0);
        ck_assert_int_eq(profiler_stop(next, &n_spans, &truncated, &err), 0);
        ck_assert_uint_eq(n_spans, 0);
        remove_trace(next);
        remove_trace(path);
}
END_TEST

#define SPANS_PER_THREAD 20000

static void *record_spans(void *arg) {
        enum profile_track track = (enum profile_track) (intptr_t) arg;
        for (int i = 0; i < SPANS_PER_THREAD; i++)
                profiler_span(track, "test", "span", 0, 1e-6, "i", i);
        return NULL;
}

START_TEST(test_two_threads) {
        struct error err = {};
        char *path = trace_path("threads.json");
        ck_assert_int_eq(profiler_start(&err), 0);
        pthread_t engine, frontend;
        pthread_create(&engine, NULL, record_spans, (void *) (intptr_t) PROFILE_TRACK_ENGINE);
        pthread_create(&frontend, NULL, record_spans, (void *) (intptr_t) PROFILE_TRACK_FRONTEND);
        pthread_join(engine, NULL);
        pthread_join(frontend, NULL);
        size_t n_spans;
        bool truncated;
        ck_assert_int_eq(profiler_stop(path, &n_spans, &truncated, &err), 0);
        ck_assert_uint_eq(n_spans, 2 * SPANS_PER_THREAD);
        json_object *events, *trace = read_trace(path, &events);
        ck_assert_uint_eq(count_phase(events, "X"), 2 * SPANS_PER_THREAD);
        json_object_put(trace);
        remove_trace(path);
}
END_TEST

int main(void) {
        if (!mkdtemp(dir)) {
                perror("mkdtemp");
                return EXIT_FAILURE;
        }
        Suite *s = suite_create("profiler");
        TCase *tc = tcase_create("core");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_empty_trace_is_valid);
        tcase_add_test(tc, test_spans_as_recorded);
        tcase_add_test(tc, test_refusals);
        tcase_add_test(tc, test_unwritable_path);
        tcase_add_test(tc, test_two_threads);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_set_fork_status(sr, CK_NOFORK); /* the profiler is process-wide: one test at a time in one process */
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        (void) rmdir(dir);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
