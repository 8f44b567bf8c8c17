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

/* The failure of a blocking call's request, for the client's error when the call returns:
 * lines read after it in the same pass (another request's, the connection's end) replace
 * the client's error meanwhile. */
struct kept_error {
        bool has_code;
        char code[CLIENT_CODE_MAX];
        char message[CLIENT_ERROR_MAX];
};

static void keep_error(struct kept_error *k, const char *code, const char *message) {
        k->has_code = code != NULL;
        snprintf(k->code, sizeof(k->code), "%s", code ? code : "");
        snprintf(k->message, sizeof(k->message), "%s", message);
}

static int restore_error(asyncllm_client *c, int error, const struct kept_error *k) {
        return client_set_error(c, error, k->has_code ? k->code : NULL, "%s", k->message);
}

struct sync_generate {
        asyncllm_output_fn cb;
        void *userdata;
        bool done;
        int result;
        struct kept_error error;
};

static int sync_output(asyncllm_client *c, const asyncllm_output *o, void *userdata) {
        struct sync_generate *s = userdata;
        int r = s->cb ? s->cb(c, o, s->userdata) : 0;
        if (o->done) {
                s->done = true;
                s->result = o->error;
                if (o->error < 0)
                        keep_error(&s->error, o->error_code, o->error_message);
        } else if (r < 0) {
                s->done = true;
                s->result = client_set_error(c, r, NULL, "the output callback gave the request up: %s", strerror(-r));
                keep_error(&s->error, NULL, c->error);
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
        if (s.done && s.result < 0)
                return restore_error(c, s.result, &s.error);
        return s.done ? s.result : q;
}

struct sync_call {
        bool done;
        int error;
        char *result;
        struct kept_error kept;
};

static void sync_reply(asyncllm_client *c, int error, const char *result_json, void *userdata) {
        struct sync_call *s = userdata;
        s->done = true;
        s->error = error;
        if (error == 0 && !(s->result = strdup(result_json)))
                s->error = client_set_error(c, -ENOMEM, NULL, "out of memory");
        /* the client's error is the reply's during this call */
        if (s->error < 0)
                keep_error(&s->kept, asyncllm_client_error_code(c), c->error);
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
                return restore_error(c, s.error, &s.kept);
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
