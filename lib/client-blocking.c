/* SPDX-License-Identifier: MIT */
/* The blocking API: a request submitted like any other, then the client's loop run until
 * that request is done. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client-internal.h"

/* Runs the client's loop until done(c, data). When it stops short (an error, the timeout), the
 * request id is given up and the error that stopped the loop kept. What the loop returned. */
static int run_until_done(asyncllm_client *c, bool (*done)(const asyncllm_client *c, void *data), void *data,
                          const char *id) {
        int q = client_run_until(c, done, data);
        if (!done(c, data)) {
                char keep[CLIENT_ERROR_MAX];
                snprintf(keep, sizeof(keep), "%s", c->error);
                client_give_up(c, id);
                client_set_error(c, q, NULL, "%s", keep);
        }
        return q;
}

struct sync_generate {
        asyncllm_output_fn cb;
        void *userdata;
        bool done;
        int result;
};

static int sync_output(asyncllm_client *c, const asyncllm_output *o, void *userdata) {
        struct sync_generate *s = userdata;
        int r = s->cb ? s->cb(c, o, s->userdata) : 0;
        if (o->done) {
                s->done = true;
                s->result = o->error;
        } else if (r < 0) {
                s->done = true;
                s->result = client_set_error(c, r, NULL, "the output callback gave the request up: %s", strerror(-r));
        }
        return r;
}

static bool generate_done(const asyncllm_client *c, void *data) {
        return ((struct sync_generate *) data)->done;
}

int asyncllm_client_generate(asyncllm_client *c, const asyncllm_request *r, asyncllm_output_fn cb, void *userdata) {
        struct sync_generate s = { .cb = cb, .userdata = userdata };
        char *id = NULL;

        if (c->in_callback)
                return client_set_error(c, -EBUSY, NULL, "a blocking call from inside a callback");
        int q = client_submit_generate(c, r, sync_output, &s, &id);
        if (q < 0)
                return q;
        q = run_until_done(c, generate_done, &s, id);
        free(id);
        return s.done ? s.result : q;
}

struct sync_call {
        bool done;
        int error;
        char *result;
};

static void sync_reply(asyncllm_client *c, int error, const char *result_json, void *userdata) {
        struct sync_call *s = userdata;
        s->done = true;
        s->error = error;
        if (error == 0 && !(s->result = strdup(result_json)))
                s->error = client_set_error(c, -ENOMEM, NULL, "out of memory");
}

static bool call_done(const asyncllm_client *c, void *data) {
        return ((struct sync_call *) data)->done;
}

int asyncllm_client_call(asyncllm_client *c, const char *op, const char *args_json, char **ret_result_json) {
        struct sync_call s = { 0 };
        char *id = NULL;

        if (c->in_callback)
                return client_set_error(c, -EBUSY, NULL, "a blocking call from inside a callback");
        int q = client_submit_call(c, op, args_json, sync_reply, &s, &id);
        if (q < 0)
                return q;
        q = run_until_done(c, call_done, &s, id);
        free(id);
        if (!s.done)
                return q;
        if (s.error < 0)
                return s.error;
        if (ret_result_json)
                *ret_result_json = s.result;
        else
                free(s.result);
        return 0;
}

int asyncllm_client_abort(asyncllm_client *c, const char *request_id, bool *ret_aborted) {
        char *args, *result = NULL;
        int q = client_abort_args(c, request_id, &args);
        if (q < 0)
                return q;
        q = asyncllm_client_call(c, "abort", args, &result);
        free(args);
        if (q < 0)
                return q;
        if (ret_aborted) {
                struct json_object *o = json_tokener_parse(result), *v;
                *ret_aborted = (v = client_json_member(o, "aborted", json_type_boolean)) && json_object_get_boolean(v);
                json_object_put(o);
        }
        free(result);
        return 0;
}

int asyncllm_client_health(asyncllm_client *c, char **ret_result_json) {
        return asyncllm_client_call(c, "health", NULL, ret_result_json);
}

int asyncllm_client_stats(asyncllm_client *c, char **ret_result_json) {
        return asyncllm_client_call(c, "stats", NULL, ret_result_json);
}

int asyncllm_client_pause(asyncllm_client *c, const char *mode, bool clear_cache) {
        struct json_object *args = json_object_new_object();
        char *text = NULL;
        int q = -ENOMEM;

        if (mode && !client_id_valid(mode))
                return client_set_error(c, -EINVAL, NULL, "not a pause mode");
        if (!args || (mode && json_object_object_add(args, "mode", json_object_new_string(mode)) < 0) ||
            json_object_object_add(args, "clear_cache", json_object_new_boolean(clear_cache)) < 0 ||
            client_json_serialize(args, &text, NULL) < 0) {
                json_object_put(args);
                return client_set_error(c, -ENOMEM, NULL, "out of memory");
        }
        json_object_put(args);
        q = asyncllm_client_call(c, "pause", text, NULL);
        free(text);
        return q;
}

int asyncllm_client_resume(asyncllm_client *c) {
        return asyncllm_client_call(c, "resume", NULL, NULL);
}
