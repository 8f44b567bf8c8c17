/* SPDX-License-Identifier: MIT */
/* Fuzzes the conversion of D-Bus values to JSON (lib/bus-json.c, bus_value_to_json), which
 * turns the a{sv} params of the Generate and Complete methods into the socket protocol's
 * params. The input is read as a program: its bytes choose a tree of types and values (every
 * basic type but the file descriptor, arrays, dictionaries with every basic key type,
 * variants within variants, structs), appended to a real sd-bus message as a{sv}. The
 * conversion must give exactly the JSON this test builds from the same choices, or the
 * error the rules promise for the first value without a JSON form (-EINVAL for a struct,
 * -EDOM for a double that is not finite); and the JSON text must parse back, strictly, to
 * the same value. Built with libFuzzer, or with fuzz-main.c to replay the committed corpus
 * (tests/fuzz/bus-params) as a regression test. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bus-json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Deep enough for dictionary signatures past 64 bytes, well inside D-Bus's own limits (255
 * bytes of signature, 32 nested arrays). */
#define MAX_DEPTH 20
#define MAX_SIGNATURE 200
#define MAX_ELEMENTS 4

static void check(bool ok) {
        if (!ok)
                abort();
}

/* The input, read a byte at a time; past its end every byte is 0, the simplest choice. */
struct program {
        const uint8_t *p;
        size_t n;
};

static uint8_t take(struct program *pr) {
        if (pr->n == 0)
                return 0;
        pr->n--;
        return *pr->p++;
}

static void take_bytes(struct program *pr, void *out, size_t len) {
        for (size_t i = 0; i < len; i++)
                ((uint8_t *) out)[i] = take(pr);
}

static const char basic_types[] = "ybnqiuxtdsog";

/* Appends one complete type to sig (at *len); false when it would not fit. */
static bool choose_type(struct program *pr, unsigned depth, char *sig, size_t *len) {
        uint8_t c = take(pr) % 16;
        if (depth >= MAX_DEPTH || *len + 8 > MAX_SIGNATURE)
                c %= 12; /* basic types only */
        if (c < 12) {
                sig[(*len)++] = basic_types[c];
        } else if (c == 12) {
                sig[(*len)++] = 'v';
        } else if (c == 13) {
                sig[(*len)++] = 'a';
                return choose_type(pr, depth + 1, sig, len);
        } else if (c == 14) {
                sig[(*len)++] = 'a';
                sig[(*len)++] = '{';
                sig[(*len)++] = basic_types[take(pr) % 12];
                if (!choose_type(pr, depth + 1, sig, len))
                        return false;
                sig[(*len)++] = '}';
        } else {
                unsigned fields = 1 + take(pr) % 2;
                sig[(*len)++] = '(';
                for (unsigned i = 0; i < fields; i++)
                        if (!choose_type(pr, depth + 1, sig, len))
                                return false;
                sig[(*len)++] = ')';
        }
        sig[*len] = 0;
        return *len + 1 < MAX_SIGNATURE;
}

/* Where one complete type ends in sig. */
static const char *type_end(const char *sig) {
        if (sig[0] == 'a')
                return type_end(sig + 1);
        if (sig[0] == '(' || sig[0] == '{') {
                char close = sig[0] == '(' ? ')' : '}';
                sig++;
                while (*sig != close)
                        sig = type_end(sig);
                return sig + 1;
        }
        return sig + 1;
}

/* The expected conversion so far: the value, or the first error the rules promise. */
struct expected {
        int error;
};

static void fail_with(struct expected *e, int error) {
        if (e->error == 0)
                e->error = error;
}

/* Strings: ASCII with the characters JSON escapes, and multi-byte UTF-8. */
static void choose_string(struct program *pr, char *out, size_t size) {
        static const char *const pieces[] = { "a", "Z", "0", " ", "\"", "\\", "/", "\x01", "\x1f", "\x7f",
                                              "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "{", "\n", "key" };
        size_t n = take(pr) % 8, len = 0;
        out[0] = 0;
        for (size_t i = 0; i < n; i++) {
                const char *piece = pieces[take(pr) % (sizeof(pieces) / sizeof(pieces[0]))];
                if (len + strlen(piece) + 1 > size)
                        break;
                memcpy(out + len, piece, strlen(piece) + 1);
                len += strlen(piece);
        }
}

/* Appends a basic value of the given type and returns its JSON form (NULL with a rule's
 * error for a double that is not finite). */
static struct json_object *append_basic(sd_bus_message *m, struct program *pr, char type, struct expected *e) {
        static const char *const paths[] = { "/", "/a", "/org/asyncllm/Engine1", "/a/b_c/D9" };
        static const char *const signatures[] = { "", "s", "a{sv}", "(ii)", "aav" };
        char text[64];
        struct json_object *v = NULL;
        int r = 0;
        switch (type) {
        case 'y': {
                uint8_t x = take(pr);
                r = sd_bus_message_append_basic(m, type, &x);
                v = json_object_new_int(x);
                break;
        }
        case 'b': {
                int x = take(pr) & 1;
                r = sd_bus_message_append_basic(m, type, &x);
                v = json_object_new_boolean(x);
                break;
        }
        case 'n': {
                int16_t x;
                take_bytes(pr, &x, sizeof(x));
                r = sd_bus_message_append_basic(m, type, &x);
                v = json_object_new_int(x);
                break;
        }
        case 'q': {
                uint16_t x;
                take_bytes(pr, &x, sizeof(x));
                r = sd_bus_message_append_basic(m, type, &x);
                v = json_object_new_int(x);
                break;
        }
        case 'i': {
                int32_t x;
                take_bytes(pr, &x, sizeof(x));
                r = sd_bus_message_append_basic(m, type, &x);
                v = json_object_new_int(x);
                break;
        }
        case 'u': {
                uint32_t x;
                take_bytes(pr, &x, sizeof(x));
                r = sd_bus_message_append_basic(m, type, &x);
                v = json_object_new_int64(x);
                break;
        }
        case 'x': {
                int64_t x;
                take_bytes(pr, &x, sizeof(x));
                r = sd_bus_message_append_basic(m, type, &x);
                v = json_object_new_int64(x);
                break;
        }
        case 't': {
                uint64_t x;
                take_bytes(pr, &x, sizeof(x));
                r = sd_bus_message_append_basic(m, type, &x);
                v = json_object_new_uint64(x);
                break;
        }
        case 'd': {
                double x;
                take_bytes(pr, &x, sizeof(x));
                r = sd_bus_message_append_basic(m, type, &x);
                if (isfinite(x))
                        v = json_object_new_double(x);
                else
                        fail_with(e, -EDOM);
                break;
        }
        case 's':
                choose_string(pr, text, sizeof(text));
                r = sd_bus_message_append_basic(m, type, text);
                v = json_object_new_string(text);
                break;
        case 'o': {
                const char *path = paths[take(pr) % (sizeof(paths) / sizeof(paths[0]))];
                r = sd_bus_message_append_basic(m, type, path);
                v = json_object_new_string(path);
                break;
        }
        case 'g': {
                const char *signature = signatures[take(pr) % (sizeof(signatures) / sizeof(signatures[0]))];
                r = sd_bus_message_append_basic(m, type, signature);
                v = json_object_new_string(signature);
                break;
        }
        default:
                abort();
        }
        check(r >= 0);
        return v;
}

static struct json_object *append_value(sd_bus_message *m, struct program *pr, const char *sig, unsigned depth,
                                        struct expected *e);

/* A dictionary's key as the conversion names it: the text of the key's JSON form. */
static struct json_object *append_dict(sd_bus_message *m, struct program *pr, const char *sig, unsigned depth,
                                       struct expected *e) {
        char element[MAX_SIGNATURE + 1], *entry = element + 1; /* {KV}, then KV */
        size_t element_len = (size_t) (type_end(sig) - sig) - 1;
        memcpy(element, sig + 1, element_len);
        element[element_len] = 0;
        struct json_object *o = json_object_new_object();
        unsigned n = take(pr) % (MAX_ELEMENTS + 1);
        check(o && sd_bus_message_open_container(m, 'a', element) >= 0);
        element[element_len - 1] = 0;
        for (unsigned i = 0; i < n; i++) {
                check(sd_bus_message_open_container(m, 'e', entry) >= 0);
                struct json_object *k = append_basic(m, pr, entry[0], e);
                struct json_object *v = append_value(m, pr, entry + 1, depth + 1, e);
                if (k && v)
                        json_object_object_add(o, json_object_get_string(k), v);
                else
                        json_object_put(v);
                json_object_put(k);
                check(sd_bus_message_close_container(m) >= 0);
        }
        check(sd_bus_message_close_container(m) >= 0);
        return o;
}

static struct json_object *append_value(sd_bus_message *m, struct program *pr, const char *sig, unsigned depth,
                                        struct expected *e) {
        char contents[MAX_SIGNATURE + 1];
        size_t len = (size_t) (type_end(sig) - sig);
        if (sig[0] == 'v') {
                /* a variant's contents start a signature of their own */
                size_t n = 0;
                if (!choose_type(pr, depth, contents, &n)) {
                        /* no room left for a deeper type: a plain string */
                        strcpy(contents, "s");
                }
                check(sd_bus_message_open_container(m, 'v', contents) >= 0);
                struct json_object *v = append_value(m, pr, contents, depth + 1, e);
                check(sd_bus_message_close_container(m) >= 0);
                return v;
        }
        if (sig[0] == 'a' && sig[1] == '{')
                return append_dict(m, pr, sig, depth, e);
        if (sig[0] == 'a') {
                struct json_object *a = json_object_new_array();
                unsigned n = take(pr) % (MAX_ELEMENTS + 1);
                memcpy(contents, sig + 1, len - 1);
                contents[len - 1] = 0;
                check(a && sd_bus_message_open_container(m, 'a', contents) >= 0);
                for (unsigned i = 0; i < n; i++) {
                        struct json_object *v = append_value(m, pr, contents, depth + 1, e);
                        if (v)
                                json_object_array_add(a, v);
                }
                check(sd_bus_message_close_container(m) >= 0);
                return a;
        }
        if (sig[0] == '(') {
                memcpy(contents, sig + 1, len - 2);
                contents[len - 2] = 0;
                fail_with(e, -EINVAL);
                check(sd_bus_message_open_container(m, 'r', contents) >= 0);
                for (const char *field = contents; *field; field = type_end(field))
                        json_object_put(append_value(m, pr, field, depth + 1, e));
                check(sd_bus_message_close_container(m) >= 0);
                return NULL;
        }
        return append_basic(m, pr, sig[0], e);
}

/* Messages need a bus that has been started; one end of a socketpair is enough, nothing is
 * ever sent. */
static sd_bus *message_factory(void) {
        static sd_bus *bus;
        int fds[2];
        if (bus)
                return bus;
        check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
        check(sd_bus_new(&bus) >= 0);
        check(sd_bus_set_fd(bus, fds[0], fds[0]) >= 0);
        check(sd_bus_start(bus) >= 0);
        return bus;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct program pr = { data, size };
        struct expected e = { 0 };
        sd_bus_message *m = NULL;
        check(sd_bus_message_new_method_call(message_factory(), &m, "org.asyncllm.Engine1", "/org/asyncllm/Engine1",
                                             "org.asyncllm.Engine1", "Generate") >= 0);
        struct json_object *want = append_value(m, &pr, "a{sv}", 0, &e);
        check(sd_bus_message_seal(m, 1, 0) >= 0);
        check(sd_bus_message_rewind(m, true) >= 0);

        int r = 0;
        struct json_object *got = bus_value_to_json(m, "a{sv}", &r);
        if (e.error) {
                check(!got && r == e.error);
        } else {
                check(got && r >= 0 && json_object_equal(got, want));
                check(sd_bus_message_at_end(m, true) > 0);
                /* the text the daemon puts on its line reads back as the same value */
                const char *text = json_object_to_json_string_ext(got, JSON_C_TO_STRING_PLAIN);
                struct json_tokener *tok = json_tokener_new_ex(2 * MAX_DEPTH + 8);
                check(tok != NULL);
                json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
                struct json_object *back = json_tokener_parse_ex(tok, text, (int) strlen(text));
                check(json_tokener_get_error(tok) == json_tokener_success && json_object_equal(back, got));
                json_object_put(back);
                json_tokener_free(tok);
        }
        json_object_put(got);
        json_object_put(want);
        sd_bus_message_unref(m);
        return 0;
}
