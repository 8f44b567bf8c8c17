/* SPDX-License-Identifier: MIT */
/* The generate request builder: fields kept as json-c values, serialized with the id at each
 * submission, so that one request can be sent many times. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "client-internal.h"
#include "ndjson-reader.h"

struct asyncllm_request {
        char *id;                    /* NULL: the client picks one */
        struct json_object *fields;  /* top-level members other than op, id and params */
        struct json_object *params;  /* NULL until a parameter is set */
        bool encode;                 /* op encode: a pooled vector instead of tokens */
};

static const char *const prompt_keys[] = { "prompt", "prompt_token_ids", "messages" };

static bool text_valid(const char *s) {
        return s && ndjson_utf8_valid(s, strlen(s));
}

bool client_id_valid(const char *s) {
        size_t len = s ? strlen(s) : 0;
        return len >= 1 && len <= CLIENT_ID_MAX && ndjson_utf8_valid(s, len);
}

int asyncllm_request_new(asyncllm_request **ret) {
        asyncllm_request *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        r->fields = json_object_new_object();
        if (!r->fields) {
                free(r);
                return -ENOMEM;
        }
        *ret = r;
        return 0;
}

asyncllm_request *asyncllm_request_free(asyncllm_request *r) {
        if (r) {
                free(r->id);
                json_object_put(r->fields);
                json_object_put(r->params);
                free(r);
        }
        return NULL;
}

const char *request_id(const asyncllm_request *r) {
        return r->id;
}

int asyncllm_request_set_id(asyncllm_request *r, const char *id) {
        char *copy = NULL;
        if (id) {
                if (!client_id_valid(id))
                        return -EINVAL;
                if (!(copy = strdup(id)))
                        return -ENOMEM;
        }
        free(r->id);
        r->id = copy;
        return 0;
}

/* Takes value over, on failure too. */
static int set_field(asyncllm_request *r, const char *key, struct json_object *value) {
        if (!value)
                return -ENOMEM;
        for (size_t i = 0; i < sizeof(prompt_keys) / sizeof(prompt_keys[0]); i++)
                if (strcmp(key, prompt_keys[i]) == 0)
                        for (size_t j = 0; j < sizeof(prompt_keys) / sizeof(prompt_keys[0]); j++)
                                if (j != i)
                                        json_object_object_del(r->fields, prompt_keys[j]);
        if (json_object_object_add(r->fields, key, value) < 0) {
                json_object_put(value);
                return -ENOMEM;
        }
        return 0;
}

int asyncllm_request_set_prompt(asyncllm_request *r, const char *prompt) {
        if (!prompt)
                return -EINVAL;
        if (!text_valid(prompt))
                return -EILSEQ;
        return set_field(r, "prompt", json_object_new_string(prompt));
}

int asyncllm_request_set_prompt_token_ids(asyncllm_request *r, const int32_t *ids, size_t n) {
        if (!ids && n > 0)
                return -EINVAL;
        struct json_object *a = json_object_new_array();
        if (!a)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                struct json_object *v = json_object_new_int(ids[i]);
                if (!v || json_object_array_add(a, v) < 0) {
                        json_object_put(v);
                        json_object_put(a);
                        return -ENOMEM;
                }
        }
        return set_field(r, "prompt_token_ids", a);
}

int asyncllm_request_add_message(asyncllm_request *r, const char *role, const char *content) {
        if (!role || !content)
                return -EINVAL;
        if (!text_valid(role) || !text_valid(content))
                return -EILSEQ;
        struct json_object *m = json_object_new_object();
        struct json_object *ro = json_object_new_string(role), *co = json_object_new_string(content);
        if (!m || !ro || !co || json_object_object_add(m, "role", ro) < 0) {
                json_object_put(m);
                json_object_put(ro);
                json_object_put(co);
                return -ENOMEM;
        }
        if (json_object_object_add(m, "content", co) < 0) {
                json_object_put(m);
                json_object_put(co);
                return -ENOMEM;
        }

        struct json_object *messages = NULL;
        if (!json_object_object_get_ex(r->fields, "messages", &messages) ||
            !json_object_is_type(messages, json_type_array)) {
                int q = set_field(r, "messages", json_object_new_array());
                if (q < 0) {
                        json_object_put(m);
                        return q;
                }
                json_object_object_get_ex(r->fields, "messages", &messages);
        }
        if (json_object_array_add(messages, m) < 0) {
                json_object_put(m);
                return -ENOMEM;
        }
        return 0;
}

void asyncllm_request_clear_messages(asyncllm_request *r) {
        json_object_object_del(r->fields, "messages");
}

static int set_param(asyncllm_request *r, const char *key, struct json_object *value) {
        if (!key || !*key || !text_valid(key)) {
                json_object_put(value);
                return -EINVAL;
        }
        if (!value)
                return -ENOMEM;
        if (!r->params && !(r->params = json_object_new_object())) {
                json_object_put(value);
                return -ENOMEM;
        }
        if (json_object_object_add(r->params, key, value) < 0) {
                json_object_put(value);
                return -ENOMEM;
        }
        return 0;
}

int asyncllm_request_set_param_int(asyncllm_request *r, const char *key, int64_t value) {
        return set_param(r, key, json_object_new_int64(value));
}

int asyncllm_request_set_param_double(asyncllm_request *r, const char *key, double value) {
        if (!isfinite(value))
                return -EINVAL;
        return set_param(r, key, client_json_double(value));
}

int asyncllm_request_set_param_bool(asyncllm_request *r, const char *key, bool value) {
        return set_param(r, key, json_object_new_boolean(value));
}

int asyncllm_request_set_param_string(asyncllm_request *r, const char *key, const char *value) {
        if (!value)
                return -EINVAL;
        if (!text_valid(value))
                return -EILSEQ;
        return set_param(r, key, json_object_new_string(value));
}

int asyncllm_request_set_param_json(asyncllm_request *r, const char *key, const char *json) {
        struct json_object *v;
        int q = client_json_parse(json, &v);
        if (q < 0)
                return q;
        if (!v) {
                /* null: set_param() takes NULL as out of memory, so add it here. */
                if (!key || !*key || !text_valid(key))
                        return -EINVAL;
                if (!r->params && !(r->params = json_object_new_object()))
                        return -ENOMEM;
                return json_object_object_add(r->params, key, NULL) < 0 ? -ENOMEM : 0;
        }
        return set_param(r, key, v);
}

int asyncllm_request_unset_param(asyncllm_request *r, const char *key) {
        if (!key)
                return -EINVAL;
        if (r->params)
                json_object_object_del(r->params, key);
        return 0;
}

int asyncllm_request_set_priority(asyncllm_request *r, int64_t priority) {
        return set_field(r, "priority", json_object_new_int64(priority));
}

int asyncllm_request_set_latency_sensitive(asyncllm_request *r, bool yes) {
        return set_field(r, "latency_sensitive", json_object_new_boolean(yes));
}

/* A field of seconds; 0 leaves it out (the daemon's default). */
static int set_seconds(asyncllm_request *r, const char *key, double seconds) {
        if (seconds == 0) {
                json_object_object_del(r->fields, key);
                return 0;
        }
        return set_field(r, key, client_json_double(seconds));
}

int asyncllm_request_set_slo(asyncllm_request *r, double ttft, double tpot) {
        int q;
        if (!isfinite(ttft) || !isfinite(tpot) || ttft < 0 || tpot < 0)
                return -EINVAL;
        if ((q = set_seconds(r, "ttft_slo", ttft)) < 0)
                return q;
        return set_seconds(r, "slo", tpot);
}

int asyncllm_request_set_field_json(asyncllm_request *r, const char *key, const char *json) {
        if (!key || !*key || !text_valid(key) || strcmp(key, "op") == 0 || strcmp(key, "id") == 0 ||
            strcmp(key, "params") == 0)
                return -EINVAL;
        struct json_object *v;
        int q = client_json_parse(json, &v);
        if (q < 0)
                return q;
        if (!v) {
                json_object_object_del(r->fields, key);
                return json_object_object_add(r->fields, key, NULL) < 0 ? -ENOMEM : 0;
        }
        return set_field(r, key, v);
}

int asyncllm_request_set_encode(asyncllm_request *r, const char *pooling_type, bool normalize, uint32_t dimensions) {
        int q;
        if (pooling_type && !text_valid(pooling_type))
                return -EINVAL;
        json_object_object_del(r->fields, "pooling_type");
        json_object_object_del(r->fields, "dimensions");
        if ((pooling_type && (q = set_field(r, "pooling_type", json_object_new_string(pooling_type))) < 0) ||
            (q = set_field(r, "normalize", json_object_new_boolean(normalize))) < 0 ||
            (dimensions && (q = set_field(r, "dimensions", json_object_new_int64(dimensions))) < 0))
                return q;
        r->encode = true;
        return 0;
}

static bool has_prompt(const asyncllm_request *r) {
        for (size_t i = 0; i < sizeof(prompt_keys) / sizeof(prompt_keys[0]); i++)
                if (json_object_object_get_ex(r->fields, prompt_keys[i], NULL))
                        return true;
        return false;
}

/* Adds value (a new reference) to m; drops the reference on failure. */
static int add(struct json_object *m, const char *key, struct json_object *value, bool may_be_null) {
        if (!value && !may_be_null)
                return -ENOMEM;
        if (json_object_object_add(m, key, value) < 0) {
                json_object_put(value);
                return -ENOMEM;
        }
        return 0;
}

/* The message as an object; the values are shared with r (references taken). */
static int build(const asyncllm_request *r, const char *id, struct json_object **ret) {
        struct json_object *m = json_object_new_object();
        if (!m)
                return -ENOMEM;
        if (add(m, "op", json_object_new_string(r->encode ? "encode" : "generate"), false) < 0 ||
            (id && add(m, "id", json_object_new_string(id), false) < 0))
                goto oom;
        json_object_object_foreach(r->fields, key, value)
                if (add(m, key, json_object_get(value), true) < 0)
                        goto oom;
        if (r->params && add(m, "params", json_object_get(r->params), false) < 0)
                goto oom;
        *ret = m;
        return 0;
oom:
        json_object_put(m);
        return -ENOMEM;
}

int request_serialize(const asyncllm_request *r, const char *id, char **ret, size_t *ret_len) {
        struct json_object *m;
        if (!has_prompt(r))
                return -EINVAL;
        int q = build(r, id, &m);
        if (q < 0)
                return q;
        q = client_json_serialize(m, ret, ret_len);
        json_object_put(m);
        return q;
}

int asyncllm_request_to_json(const asyncllm_request *r, char **ret) {
        return request_serialize(r, NULL, ret, NULL);
}
