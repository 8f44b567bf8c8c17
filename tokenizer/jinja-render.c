/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja-internal.h"
#include "jinja.h"

/* Loop iterations, calls and filters in all: a thousand-message chat takes some 50,000. */
#define STEPS_MAX 1000000u
/* Recursion over values (tojson, equality, printing): lists a template nests itself. */
#define VALUE_DEPTH_MAX 128

enum value_type {
        VALUE_UNDEFINED,
        VALUE_NONE,
        VALUE_BOOL,
        VALUE_INT,
        VALUE_FLOAT,
        VALUE_STRING,
        VALUE_LIST, /* lists and tuples */
        VALUE_DICT, /* dicts, namespaces, loop */
};

struct value {
        enum value_type type;
        union {
                bool b;
                int64_t i;
                double f;
                struct {
                        const char *s;
                        size_t len;
                };
                struct list *list;
                struct dict *dict;
        };
};

struct list {
        struct value *items;
        size_t n, cap;
};

/* Insertion-ordered; keys are strings. */
struct dict {
        struct value *keys, *values;
        size_t n, cap;
};

struct scope {
        struct scope *parent;
        struct dict vars;
};

enum flow {
        FLOW_NEXT,
        FLOW_BREAK,
        FLOW_CONTINUE,
};

/* A string being built, in the arena. */
struct text {
        char *s;
        size_t len, cap;
};

struct render {
        struct arena *arena;
        const struct jinja_template *template;
        const struct jinja_chat *chat;
        struct scope *scope;
        struct text output;
        uint64_t steps;
        unsigned value_depth;
        const char *watch;
        bool watched;
        struct error *err;
        int error;
        jmp_buf fail;
};

static const struct value undefined = { .type = VALUE_UNDEFINED };

__attribute__((format(printf, 4, 5), noreturn)) static void fail(struct render *r, const struct node *at, int errnum,
                                                                   const char *fmt, ...) {
        char what[300];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        if (at) {
                unsigned line, column;
                source_position(r->template->source, at->pos, &line, &column);
                r->error = error_set(r->err, errnum, "chat template, line %u column %u: %s", line, column, what);
        } else
                r->error = error_set(r->err, errnum, "chat template: %s", what);
        longjmp(r->fail, 1);
}

static void *alloc(struct render *r, size_t size) {
        void *m = arena_alloc(r->arena, size);
        if (!m)
                fail(r, NULL, E2BIG, "rendering takes more than %u MiB", JINJA_MEMORY_MAX >> 20);
        return m;
}

static void step(struct render *r, const struct node *at) {
        if (++r->steps > STEPS_MAX)
                fail(r, at, E2BIG, "more than %u loop iterations and calls", STEPS_MAX);
}

static void enter_value(struct render *r, const struct node *at) {
        if (++r->value_depth > VALUE_DEPTH_MAX)
                fail(r, at, E2BIG, "a value nested more than %d deep", VALUE_DEPTH_MAX);
}

/* ---- values ---- */

static struct value make_bool(bool b) {
        return (struct value) { .type = VALUE_BOOL, .b = b };
}

static struct value make_int(int64_t i) {
        return (struct value) { .type = VALUE_INT, .i = i };
}

static struct value make_string(const char *s, size_t len) {
        return (struct value) { .type = VALUE_STRING, .s = s, .len = len };
}

static struct value new_string(struct render *r, const char *s, size_t len) {
        char *c = alloc(r, len + 1);
        memcpy(c, s, len);
        return make_string(c, len);
}

static struct value cstring(const char *s) {
        return make_string(s, strlen(s));
}

static struct value new_list(struct render *r) {
        return (struct value) { .type = VALUE_LIST, .list = alloc(r, sizeof(struct list)) };
}

static struct value new_dict(struct render *r) {
        return (struct value) { .type = VALUE_DICT, .dict = alloc(r, sizeof(struct dict)) };
}

static void *grow(struct render *r, void *items, size_t n, size_t *cap, size_t item_size) {
        void *grown = arena_grow(r->arena, items, n, cap, item_size, 4);
        if (!grown)
                fail(r, NULL, E2BIG, "rendering takes more than %u MiB", JINJA_MEMORY_MAX >> 20);
        return grown;
}

static void list_append(struct render *r, struct list *l, struct value v) {
        l->items = grow(r, l->items, l->n, &l->cap, sizeof(*l->items));
        l->items[l->n++] = v;
}

static bool same_string(struct value a, const char *s, size_t len) {
        return a.type == VALUE_STRING && a.len == len && memcmp(a.s, s, len) == 0;
}

static struct value *dict_find(const struct dict *d, const char *key, size_t len) {
        for (size_t k = 0; k < d->n; k++)
                if (same_string(d->keys[k], key, len))
                        return &d->values[k];
        return NULL;
}

static void dict_set(struct render *r, struct dict *d, struct value key, struct value v) {
        struct value *slot = key.type == VALUE_STRING ? dict_find(d, key.s, key.len) : NULL;
        if (slot) {
                *slot = v;
                return;
        }
        size_t values_cap = d->cap;
        d->keys = grow(r, d->keys, d->n, &d->cap, sizeof(*d->keys));
        d->values = grow(r, d->values, d->n, &values_cap, sizeof(*d->values));
        d->keys[d->n] = key;
        d->values[d->n++] = v;
}

static bool truthy(struct value v) {
        switch (v.type) {
        case VALUE_UNDEFINED:
        case VALUE_NONE: return false;
        case VALUE_BOOL: return v.b;
        case VALUE_INT: return v.i != 0;
        case VALUE_FLOAT: return v.f != 0;
        case VALUE_STRING: return v.len > 0;
        case VALUE_LIST: return v.list->n > 0;
        case VALUE_DICT: return v.dict->n > 0;
        }
        return false;
}

static const char *type_name(struct value v) {
        static const char *const names[] = { "undefined", "none", "boolean", "integer", "float", "string", "list", "dict" };
        return names[v.type];
}

static bool numeric(struct value v) {
        return v.type == VALUE_INT || v.type == VALUE_FLOAT;
}

static double as_double(struct value v) {
        return v.type == VALUE_INT ? (double) v.i : v.f;
}

static bool equal(struct render *r, struct value a, struct value b) {
        if (numeric(a) && numeric(b))
                return as_double(a) == as_double(b);
        if (a.type != b.type)
                return false;
        switch (a.type) {
        case VALUE_UNDEFINED:
        case VALUE_NONE: return true;
        case VALUE_BOOL: return a.b == b.b;
        case VALUE_STRING: return a.len == b.len && memcmp(a.s, b.s, a.len) == 0;
        case VALUE_LIST: {
                if (a.list->n != b.list->n)
                        return false;
                enter_value(r, NULL);
                bool same = true;
                for (size_t k = 0; k < a.list->n && same; k++)
                        same = equal(r, a.list->items[k], b.list->items[k]);
                r->value_depth--;
                return same;
        }
        case VALUE_DICT: {
                if (a.dict->n != b.dict->n)
                        return false;
                enter_value(r, NULL);
                bool same = true;
                for (size_t k = 0; k < a.dict->n && same; k++) {
                        struct value *v = dict_find(b.dict, a.dict->keys[k].s, a.dict->keys[k].len);
                        same = v && equal(r, a.dict->values[k], *v);
                }
                r->value_depth--;
                return same;
        }
        default: return false;
        }
}

/* ---- text building ---- */

static void text_add(struct render *r, struct text *t, const char *s, size_t len) {
        if (t->cap - t->len < len + 1) {
                if (len > JINJA_OUTPUT_MAX || t->len > JINJA_OUTPUT_MAX - len)
                        fail(r, NULL, E2BIG, "a string or the prompt longer than %u MiB", JINJA_OUTPUT_MAX >> 20);
                size_t cap = t->cap ? t->cap : 64;
                while (cap < t->len + len + 1)
                        cap *= 2;
                char *s2 = alloc(r, cap);
                if (t->len)
                        memcpy(s2, t->s, t->len);
                t->s = s2;
                t->cap = cap;
        }
        memcpy(t->s + t->len, s, len);
        t->len += len;
        t->s[t->len] = '\0';
}

static void text_addf(struct render *r, struct text *t, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void text_addf(struct render *r, struct text *t, const char *fmt, ...) {
        char buf[64];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        text_add(r, t, buf, (size_t) n);
}

static void add_float(struct render *r, struct text *t, double f) {
        char buf[64];
        snprintf(buf, sizeof(buf), "%.17g", f);
        /* the shortest form that reads back the same, with a ".0" on whole numbers, as Python */
        for (int precision = 1; precision <= 17; precision++) {
                snprintf(buf, sizeof(buf), "%.*g", precision, f);
                if (strtod(buf, NULL) == f)
                        break;
        }
        text_add(r, t, buf, strlen(buf));
        if (isfinite(f) && !strpbrk(buf, ".e"))
                text_add(r, t, ".0", 2);
}

static void add_json_string(struct render *r, struct text *t, const char *s, size_t len) {
        text_add(r, t, "\"", 1);
        for (size_t k = 0; k < len; k++) {
                unsigned char c = (unsigned char) s[k];
                switch (c) {
                case '"': text_add(r, t, "\\\"", 2); break;
                case '\\': text_add(r, t, "\\\\", 2); break;
                case '\n': text_add(r, t, "\\n", 2); break;
                case '\t': text_add(r, t, "\\t", 2); break;
                case '\r': text_add(r, t, "\\r", 2); break;
                case '\b': text_add(r, t, "\\b", 2); break;
                case '\f': text_add(r, t, "\\f", 2); break;
                default:
                        if (c < 0x20)
                                text_addf(r, t, "\\u%04x", c);
                        else
                                text_add(r, t, s + k, 1);
                }
        }
        text_add(r, t, "\"", 1);
}

static void add_newline_indent(struct render *r, struct text *t, int indent, unsigned level) {
        text_add(r, t, "\n", 1);
        for (unsigned k = 0; k < (unsigned) indent * level; k++)
                text_add(r, t, " ", 1);
}

/* JSON as Python's json.dumps writes it: ", " and ": " separators, or one item a line
 * when indent >= 0. */
static void add_json(struct render *r, struct text *t, struct value v, int indent, unsigned level) {
        switch (v.type) {
        case VALUE_UNDEFINED:
        case VALUE_NONE: text_add(r, t, "null", 4); return;
        case VALUE_BOOL: text_add(r, t, v.b ? "true" : "false", v.b ? 4 : 5); return;
        case VALUE_INT: text_addf(r, t, "%lld", (long long) v.i); return;
        case VALUE_FLOAT: add_float(r, t, v.f); return;
        case VALUE_STRING: add_json_string(r, t, v.s, v.len); return;
        case VALUE_LIST:
        case VALUE_DICT: {
                bool list = v.type == VALUE_LIST;
                size_t n = list ? v.list->n : v.dict->n;
                enter_value(r, NULL);
                text_add(r, t, list ? "[" : "{", 1);
                for (size_t k = 0; k < n; k++) {
                        if (k > 0)
                                text_add(r, t, indent >= 0 ? "," : ", ", indent >= 0 ? 1 : 2);
                        if (indent >= 0)
                                add_newline_indent(r, t, indent, level + 1);
                        if (!list) {
                                add_json(r, t, v.dict->keys[k], indent, level + 1);
                                text_add(r, t, ": ", 2);
                        }
                        add_json(r, t, list ? v.list->items[k] : v.dict->values[k], indent, level + 1);
                }
                if (indent >= 0 && n > 0)
                        add_newline_indent(r, t, indent, level);
                text_add(r, t, list ? "]" : "}", 1);
                r->value_depth--;
                return;
        }
        }
}

/* What {{ v }} prints: Python's str(), with undefined as nothing; numbers, lists and
 * dicts as JSON writes them. */
static void add_printed(struct render *r, struct text *t, struct value v) {
        if (v.type == VALUE_STRING)
                text_add(r, t, v.s, v.len);
        else if (v.type == VALUE_NONE)
                text_add(r, t, "None", 4);
        else if (v.type == VALUE_BOOL)
                text_add(r, t, v.b ? "True" : "False", v.b ? 4 : 5);
        else if (v.type != VALUE_UNDEFINED)
                add_json(r, t, v, -1, 0);
}

static struct value to_string(struct render *r, struct value v) {
        if (v.type == VALUE_STRING)
                return v;
        struct text t = {};
        add_printed(r, &t, v);
        return make_string(t.s ? t.s : "", t.len);
}

/* ---- scopes ---- */

static struct value lookup(struct render *r, const char *name, size_t len) {
        for (struct scope *s = r->scope; s; s = s->parent) {
                struct value *v = dict_find(&s->vars, name, len);
                if (v)
                        return *v;
        }
        return undefined;
}

static void assign(struct render *r, const char *name, size_t len, struct value v) {
        dict_set(r, &r->scope->vars, make_string(name, len), v);
}

static void push_scope(struct render *r) {
        struct scope *s = alloc(r, sizeof(*s));
        s->parent = r->scope;
        r->scope = s;
}

/* ---- evaluation ---- */

static struct value eval(struct render *r, const struct node *n);

static struct value watched(struct render *r, struct value v) {
        if (r->watch && v.type == VALUE_STRING && v.s == r->watch)
                r->watched = true;
        return v;
}

static bool name_is(const struct node *n, const char *s) {
        return strcmp(n->str, s) == 0;
}

/* Positional argument k and keyword argument name of a call, or undefined. */
static struct value argument(struct render *r, const struct node *call, size_t k, const char *name) {
        size_t positional = 0;
        for (size_t i = 0; i < call->args.n; i++) {
                const struct node *a = call->args.items[i];
                if (a->kind == NODE_KWARG) {
                        if (name && name_is(a, name))
                                return eval(r, a->a);
                } else if (positional++ == k)
                        return eval(r, a);
        }
        return undefined;
}

static struct value string_arg(struct render *r, const struct node *call, size_t k, const char *name,
                               const char *what) {
        struct value v = argument(r, call, k, name);
        if (v.type != VALUE_STRING)
                fail(r, call, EINVAL, "%s takes a string, not %s", what, type_name(v));
        return v;
}

static bool strip_char(unsigned char c, struct value chars) {
        if (chars.type == VALUE_STRING)
                return memchr(chars.s, c, chars.len) != NULL;
        return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static struct value strip(struct value s, bool left, bool right, struct value chars) {
        size_t start = 0, end = s.len;
        while (left && start < end && strip_char((unsigned char) s.s[start], chars))
                start++;
        while (right && end > start && strip_char((unsigned char) s.s[end - 1], chars))
                end--;
        return make_string(s.s + start, end - start);
}

static struct value change_case(struct render *r, struct value s, int mode) {
        struct value c = new_string(r, s.s, s.len);
        char *o = (char *) c.s;
        bool word_start = true;
        for (size_t k = 0; k < c.len; k++) {
                char ch = o[k];
                bool upper = mode == 'U' || (mode == 'T' && word_start) || (mode == 'C' && k == 0);
                if (upper && ch >= 'a' && ch <= 'z')
                        o[k] = (char) (ch - 'a' + 'A');
                else if (!upper && mode != 'U' && ch >= 'A' && ch <= 'Z')
                        o[k] = (char) (ch - 'A' + 'a');
                word_start = !((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9'));
        }
        return c;
}

static const char *find_bytes(const char *h, size_t hlen, const char *n, size_t nlen) {
        if (nlen == 0)
                return h;
        for (size_t k = 0; k + nlen <= hlen; k++)
                if (memcmp(h + k, n, nlen) == 0)
                        return h + k;
        return NULL;
}

static const char *rfind_bytes(const char *h, size_t hlen, const char *n, size_t nlen) {
        for (size_t k = hlen - nlen + 1; nlen <= hlen && k-- > 0;)
                if (memcmp(h + k, n, nlen) == 0)
                        return h + k;
        return NULL;
}

static struct value split(struct render *r, const struct node *at, struct value s, struct value sep,
                          struct value max, bool from_right) {
        struct value out = new_list(r);
        if (sep.type == VALUE_UNDEFINED || sep.type == VALUE_NONE)
                sep = cstring(" ");
        if (sep.type != VALUE_STRING || sep.len == 0)
                fail(r, at, EINVAL, "split() needs a non-empty string separator");
        int64_t left = max.type == VALUE_INT ? max.i : -1;
        const char *p = s.s;
        size_t len = s.len;
        struct list *l = out.list;
        while (left != 0) {
                const char *hit = from_right ? rfind_bytes(p, len, sep.s, sep.len) : find_bytes(p, len, sep.s, sep.len);
                if (!hit)
                        break;
                step(r, at);
                if (from_right) {
                        list_append(r, l, make_string(hit + sep.len, (size_t) (p + len - hit - sep.len)));
                        len = (size_t) (hit - p);
                } else {
                        list_append(r, l, make_string(p, (size_t) (hit - p)));
                        len -= (size_t) (hit - p) + sep.len;
                        p = hit + sep.len;
                }
                left--;
        }
        list_append(r, l, make_string(p, len));
        if (from_right)
                for (size_t k = 0; k < l->n / 2; k++) {
                        struct value tmp = l->items[k];
                        l->items[k] = l->items[l->n - 1 - k];
                        l->items[l->n - 1 - k] = tmp;
                }
        return out;
}

static struct value replace(struct render *r, const struct node *at, struct value s, struct value old,
                            struct value new, struct value count) {
        if (old.type != VALUE_STRING || new.type != VALUE_STRING)
                fail(r, at, EINVAL, "replace() takes two strings");
        if (old.len == 0)
                return s;
        int64_t left = count.type == VALUE_INT ? count.i : -1;
        struct text t = {};
        const char *p = s.s, *end = s.s + s.len, *hit;
        while (left != 0 && (hit = find_bytes(p, (size_t) (end - p), old.s, old.len))) {
                step(r, at);
                text_add(r, &t, p, (size_t) (hit - p));
                text_add(r, &t, new.s, new.len);
                p = hit + old.len;
                left--;
        }
        text_add(r, &t, p, (size_t) (end - p));
        return make_string(t.s, t.len);
}

static struct value dict_pairs(struct render *r, struct value d, int which) {
        struct value out = new_list(r);
        for (size_t k = 0; k < d.dict->n; k++) {
                if (which == 'k')
                        list_append(r, out.list, d.dict->keys[k]);
                else if (which == 'v')
                        list_append(r, out.list, d.dict->values[k]);
                else {
                        struct value pair = new_list(r);
                        list_append(r, pair.list, d.dict->keys[k]);
                        list_append(r, pair.list, d.dict->values[k]);
                        list_append(r, out.list, pair);
                }
        }
        return out;
}

/* object.name(args) */
static struct value method(struct render *r, const struct node *call, struct value self, const char *name) {
        if (self.type == VALUE_STRING) {
                if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip"))
                        return strip(self, name[0] != 'r', name[0] != 'l', argument(r, call, 0, "chars"));
                if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
                        struct value x = string_arg(r, call, 0, NULL, name);
                        if (x.len > self.len)
                                return make_bool(false);
                        return make_bool(memcmp(name[0] == 's' ? self.s : self.s + self.len - x.len, x.s, x.len) == 0);
                }
                if (!strcmp(name, "split") || !strcmp(name, "rsplit"))
                        return split(r, call, self, argument(r, call, 0, "sep"), argument(r, call, 1, "maxsplit"),
                                     name[0] == 'r');
                if (!strcmp(name, "upper"))
                        return change_case(r, self, 'U');
                if (!strcmp(name, "lower"))
                        return change_case(r, self, 'L');
                if (!strcmp(name, "title"))
                        return change_case(r, self, 'T');
                if (!strcmp(name, "capitalize"))
                        return change_case(r, self, 'C');
                if (!strcmp(name, "replace"))
                        return replace(r, call, self, argument(r, call, 0, NULL), argument(r, call, 1, NULL),
                                       argument(r, call, 2, "count"));
                if (!strcmp(name, "find")) {
                        struct value x = string_arg(r, call, 0, NULL, name);
                        const char *hit = find_bytes(self.s, self.len, x.s, x.len);
                        return make_int(hit ? hit - self.s : -1);
                }
        } else if (self.type == VALUE_DICT) {
                if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values"))
                        return dict_pairs(r, self, name[0] == 'i' ? 'i' : name[0]);
                if (!strcmp(name, "get")) {
                        struct value key = string_arg(r, call, 0, NULL, name);
                        struct value *v = dict_find(self.dict, key.s, key.len);
                        return v ? *v : argument(r, call, 1, "default");
                }
        } else if (self.type == VALUE_LIST) {
                if (!strcmp(name, "append")) {
                        list_append(r, self.list, argument(r, call, 0, NULL));
                        return (struct value) { .type = VALUE_NONE };
                }
        }
        fail(r, call, EINVAL, "%s has no method %s()", type_name(self), name);
}

static struct value strftime_now(struct render *r, const struct node *call) {
        struct value format = string_arg(r, call, 0, NULL, "strftime_now()");
        char buf[256];
        struct tm tm;
        time_t now = r->chat->now;
        if (!localtime_r(&now, &tm))
                fail(r, call, EINVAL, "strftime_now(): the clock is out of range");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        /* the template's own format: strftime() reads nothing but tm, whatever it holds */
        size_t n = strftime(buf, sizeof(buf), new_string(r, format.s, format.len).s, &tm);
#pragma GCC diagnostic pop
        if (n == 0)
                fail(r, call, EINVAL, "strftime_now(): cannot format the time");
        return new_string(r, buf, n);
}

/* name(args) for the global functions */
static struct value call_function(struct render *r, const struct node *call, const char *name) {
        if (!strcmp(name, "raise_exception")) {
                struct value message = to_string(r, argument(r, call, 0, NULL));
                fail(r, call, EINVAL, "raise_exception: %.*s", (int) (message.len > 200 ? 200 : message.len),
                     message.s);
        }
        if (!strcmp(name, "namespace") || !strcmp(name, "dict")) {
                struct value d = new_dict(r);
                for (size_t k = 0; k < call->args.n; k++) {
                        const struct node *a = call->args.items[k];
                        if (a->kind != NODE_KWARG)
                                fail(r, a, EINVAL, "%s() takes only name=value arguments", name);
                        dict_set(r, d.dict, make_string(a->str, a->len), eval(r, a->a));
                }
                return d;
        }
        if (!strcmp(name, "range")) {
                struct value a = argument(r, call, 0, NULL), b = argument(r, call, 1, NULL),
                             c = argument(r, call, 2, NULL);
                int64_t start = 0, stop, stride = 1;
                if (a.type != VALUE_INT || (b.type != VALUE_UNDEFINED && b.type != VALUE_INT) ||
                    (c.type != VALUE_UNDEFINED && c.type != VALUE_INT))
                        fail(r, call, EINVAL, "range() takes integers");
                if (b.type == VALUE_INT) {
                        start = a.i;
                        stop = b.i;
                } else
                        stop = a.i;
                if (c.type == VALUE_INT)
                        stride = c.i;
                if (stride == 0)
                        fail(r, call, EINVAL, "range() with a step of 0");
                struct value out = new_list(r);
                for (int64_t i = start; stride > 0 ? i < stop : i > stop; i += stride) {
                        step(r, call);
                        list_append(r, out.list, make_int(i));
                }
                return out;
        }
        if (!strcmp(name, "strftime_now"))
                return strftime_now(r, call);
        fail(r, call, EINVAL, "unknown function %s()", name);
}

static struct value attribute(struct render *r, struct value object, const char *name, size_t len) {
        if (object.type == VALUE_DICT) {
                struct value *v = dict_find(object.dict, name, len);
                return v ? watched(r, *v) : undefined;
        }
        return undefined;
}

static struct value subscript(struct render *r, const struct node *at, struct value object, struct value key) {
        if (object.type == VALUE_DICT) {
                if (key.type != VALUE_STRING)
                        return undefined;
                return attribute(r, object, key.s, key.len);
        }
        if ((object.type == VALUE_LIST || object.type == VALUE_STRING) && (key.type == VALUE_INT || key.type == VALUE_BOOL)) {
                int64_t n = object.type == VALUE_LIST ? (int64_t) object.list->n : (int64_t) object.len;
                int64_t i = key.type == VALUE_INT ? key.i : key.b;
                if (i < 0 && object.type == VALUE_LIST)
                        i += n;
                if (i < 0 || i >= n)
                        return undefined;
                if (object.type == VALUE_STRING)
                        return make_string(object.s + i, 1);
                return watched(r, object.list->items[i]);
        }
        if (object.type == VALUE_UNDEFINED || object.type == VALUE_NONE || object.type == VALUE_LIST ||
            object.type == VALUE_STRING)
                return undefined;
        fail(r, at, EINVAL, "cannot index %s", type_name(object));
}

/* Python's slice bounds for a sequence of length n. */
static struct value slice(struct render *r, const struct node *n, struct value object) {
        struct value vs[3] = { n->b ? eval(r, n->b) : undefined, n->c ? eval(r, n->c) : undefined,
                               n->d ? eval(r, n->d) : undefined };
        for (int k = 0; k < 3; k++)
                if (vs[k].type != VALUE_UNDEFINED && vs[k].type != VALUE_NONE && vs[k].type != VALUE_INT)
                        fail(r, n, EINVAL, "slice bounds must be integers");
        if (object.type != VALUE_LIST && object.type != VALUE_STRING)
                fail(r, n, EINVAL, "cannot slice %s", type_name(object));
        int64_t len = object.type == VALUE_LIST ? (int64_t) object.list->n : (int64_t) object.len;
        int64_t stride = vs[2].type == VALUE_INT ? vs[2].i : 1;
        if (stride == 0)
                fail(r, n, EINVAL, "a slice step of 0");
        int64_t lo = stride > 0 ? 0 : -1, hi = stride > 0 ? len : len - 1;
        int64_t start = stride > 0 ? lo : hi, stop = stride > 0 ? hi : lo;
        for (int k = 0; k < 2; k++) {
                if (vs[k].type != VALUE_INT)
                        continue;
                int64_t x = vs[k].i < 0 ? vs[k].i + len : vs[k].i;
                x = x < lo ? lo : x > hi ? hi : x;
                if (k == 0)
                        start = x;
                else
                        stop = x;
        }
        struct value out = object.type == VALUE_LIST ? new_list(r) : undefined;
        struct text t = {};
        for (int64_t i = start; stride > 0 ? i < stop : i > stop; i += stride) {
                step(r, n);
                if (object.type == VALUE_LIST)
                        list_append(r, out.list, object.list->items[i]);
                else
                        text_add(r, &t, object.s + i, 1);
        }
        return object.type == VALUE_LIST ? out : make_string(t.s ? t.s : "", t.len);
}

static bool member(struct render *r, const struct node *at, struct value item, struct value container) {
        switch (container.type) {
        case VALUE_UNDEFINED: return false;
        case VALUE_LIST:
                for (size_t k = 0; k < container.list->n; k++)
                        if (equal(r, item, container.list->items[k]))
                                return true;
                return false;
        case VALUE_DICT: return item.type == VALUE_STRING && dict_find(container.dict, item.s, item.len);
        case VALUE_STRING:
                if (item.type != VALUE_STRING)
                        fail(r, at, EINVAL, "'in <string>' needs a string on the left, not %s", type_name(item));
                return find_bytes(container.s, container.len, item.s, item.len) != NULL;
        default: fail(r, at, EINVAL, "'in' needs a list, dict or string on the right, not %s", type_name(container));
        }
}

static struct value arithmetic(struct render *r, const struct node *n, struct value a, struct value b) {
        bool a_null = a.type == VALUE_UNDEFINED || a.type == VALUE_NONE, b_null = b.type == VALUE_UNDEFINED || b.type == VALUE_NONE;
        bool concat = n->op == OP_ADD || n->op == OP_CONCAT;

        if (concat && ((a_null && b.type == VALUE_STRING) || (b_null && a.type == VALUE_STRING)))
                return a_null ? b : a; /* llama.cpp joins a missing value as "" */
        if (a_null || b_null)
                fail(r, n, EINVAL, "an arithmetic operation on %s", a_null ? type_name(a) : type_name(b));
        if (numeric(a) && numeric(b) && n->op != OP_CONCAT) {
                bool floats = a.type == VALUE_FLOAT || b.type == VALUE_FLOAT;
                double x = as_double(a), y = as_double(b), z;
                switch (n->op) {
                case OP_ADD: z = x + y; break;
                case OP_SUB: z = x - y; break;
                case OP_MUL: z = x * y; break;
                case OP_DIV:
                        if (y == 0)
                                fail(r, n, EINVAL, "division by zero");
                        return (struct value) { .type = VALUE_FLOAT, .f = x / y };
                case OP_FLOORDIV:
                case OP_MOD:
                        if (y == 0)
                                fail(r, n, EINVAL, "division by zero");
                        z = n->op == OP_MOD ? fmod(x, y) : floor(x / y);
                        break;
                default: fail(r, n, EINVAL, "unknown operator");
                }
                if (floats)
                        return (struct value) { .type = VALUE_FLOAT, .f = z };
                if (!(z >= -9.2e18 && z <= 9.2e18))
                        fail(r, n, EINVAL, "an integer out of range");
                return make_int((int64_t) z);
        }
        if (n->op == OP_ADD && a.type == VALUE_LIST && b.type == VALUE_LIST) {
                struct value out = new_list(r);
                for (size_t k = 0; k < a.list->n; k++)
                        list_append(r, out.list, a.list->items[k]);
                for (size_t k = 0; k < b.list->n; k++)
                        list_append(r, out.list, b.list->items[k]);
                return out;
        }
        if (concat && (a.type == VALUE_STRING || b.type == VALUE_STRING || n->op == OP_CONCAT)) {
                struct text t = {};
                add_printed(r, &t, a);
                add_printed(r, &t, b);
                return make_string(t.s ? t.s : "", t.len);
        }
        if (n->op == OP_MUL && ((a.type == VALUE_STRING && b.type == VALUE_INT) || (a.type == VALUE_INT && b.type == VALUE_STRING))) {
                struct value s = a.type == VALUE_STRING ? a : b;
                int64_t times = a.type == VALUE_INT ? a.i : b.i;
                if (times <= 0)
                        return cstring("");
                if (s.len > 0 && (uint64_t) times > JINJA_OUTPUT_MAX / s.len)
                        fail(r, n, E2BIG, "a string or the prompt longer than %u MiB", JINJA_OUTPUT_MAX >> 20);
                char *out = alloc(r, s.len * (size_t) times + 1);
                for (int64_t k = 0; k < times; k++)
                        memcpy(out + s.len * (size_t) k, s.s, s.len);
                return make_string(out, s.len * (size_t) times);
        }
        fail(r, n, EINVAL, "unsupported operands %s and %s", type_name(a), type_name(b));
}

static struct value compare(struct render *r, const struct node *n, struct value a, struct value b) {
        int order;
        if (numeric(a) && numeric(b))
                order = as_double(a) < as_double(b) ? -1 : as_double(a) > as_double(b) ? 1 : 0;
        else if (a.type == VALUE_STRING && b.type == VALUE_STRING) {
                int c = memcmp(a.s, b.s, a.len < b.len ? a.len : b.len);
                order = c ? c : a.len < b.len ? -1 : a.len > b.len ? 1 : 0;
        } else
                fail(r, n, EINVAL, "cannot order %s and %s", type_name(a), type_name(b));
        switch (n->op) {
        case OP_LT: return make_bool(order < 0);
        case OP_GT: return make_bool(order > 0);
        case OP_LE: return make_bool(order <= 0);
        default: return make_bool(order >= 0);
        }
}

static struct value binary(struct render *r, const struct node *n) {
        struct value a = eval(r, n->a);
        if (n->op == OP_AND)
                return truthy(a) ? eval(r, n->b) : a;
        if (n->op == OP_OR)
                return truthy(a) ? a : eval(r, n->b);
        struct value b = eval(r, n->b);
        switch (n->op) {
        case OP_EQ: return make_bool(equal(r, a, b));
        case OP_NE: return make_bool(!equal(r, a, b));
        case OP_IN: return make_bool(member(r, n, a, b));
        case OP_NOT_IN: return make_bool(!member(r, n, a, b));
        case OP_LT:
        case OP_GT:
        case OP_LE:
        case OP_GE: return compare(r, n, a, b);
        default: return arithmetic(r, n, a, b);
        }
}

/* v is name [args]: a test; call holds the arguments after v (args[k] is argument k+1). */
static bool test(struct render *r, const struct node *call, const char *name, struct value v, size_t first_arg) {
#define TYPE(t) (1u << (t))
        /* the tests of a value's type: the types that pass */
        static const struct {
                const char *name;
                unsigned types;
        } type_tests[] = {
                { "defined", ~TYPE(VALUE_UNDEFINED) },
                { "undefined", TYPE(VALUE_UNDEFINED) },
                { "none", TYPE(VALUE_NONE) },
                { "string", TYPE(VALUE_STRING) },
                { "number", TYPE(VALUE_INT) | TYPE(VALUE_FLOAT) },
                { "integer", TYPE(VALUE_INT) },
                { "float", TYPE(VALUE_FLOAT) },
                { "boolean", TYPE(VALUE_BOOL) },
                { "mapping", TYPE(VALUE_DICT) },
                { "iterable", TYPE(VALUE_LIST) | TYPE(VALUE_DICT) | TYPE(VALUE_STRING) },
                { "sequence", TYPE(VALUE_LIST) | TYPE(VALUE_DICT) | TYPE(VALUE_STRING) },
        };
#undef TYPE
        step(r, call);
        for (size_t k = 0; k < sizeof(type_tests) / sizeof(*type_tests); k++)
                if (!strcmp(name, type_tests[k].name))
                        return (type_tests[k].types >> v.type) & 1;
        if (!strcmp(name, "true") || !strcmp(name, "false"))
                return v.type == VALUE_BOOL && v.b == (name[0] == 't');
        if (!strcmp(name, "odd") || !strcmp(name, "even")) {
                if (v.type != VALUE_INT)
                        fail(r, call, EINVAL, "'%s' tests an integer, not %s", name, type_name(v));
                return (v.i % 2 != 0) == (name[0] == 'o');
        }
        if (!strcmp(name, "divisibleby")) {
                struct value d = argument(r, call, first_arg, NULL);
                if (v.type != VALUE_INT || d.type != VALUE_INT || d.i == 0)
                        fail(r, call, EINVAL, "'divisibleby' tests integers by a non-zero integer");
                return v.i % d.i == 0;
        }
        if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "==") || !strcmp(name, "sameas"))
                return equal(r, v, argument(r, call, first_arg, NULL));
        if (!strcmp(name, "ne") || !strcmp(name, "!="))
                return !equal(r, v, argument(r, call, first_arg, NULL));
        if (!strcmp(name, "in"))
                return member(r, call, v, argument(r, call, first_arg, NULL));
        if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
                if (v.type != VALUE_STRING)
                        return false;
                for (size_t k = 0; k < v.len; k++)
                        if ((name[0] == 'l' && v.s[k] >= 'A' && v.s[k] <= 'Z') || (name[0] == 'u' && v.s[k] >= 'a' && v.s[k] <= 'z'))
                                return false;
                return true;
        }
        fail(r, call, EINVAL, "unknown test '%s'", name);
}

static struct value as_list(struct render *r, const struct node *at, struct value v) {
        if (v.type == VALUE_LIST)
                return v;
        if (v.type == VALUE_DICT)
                return dict_pairs(r, v, 'k');
        if (v.type == VALUE_STRING) {
                struct value out = new_list(r);
                for (size_t k = 0; k < v.len; k++)
                        list_append(r, out.list, make_string(v.s + k, 1));
                return out;
        }
        if (v.type == VALUE_UNDEFINED)
                return new_list(r);
        fail(r, at, EINVAL, "%s is not iterable", type_name(v));
}

/* selectattr/rejectattr/select/reject: the items that pass (or fail) a test. */
static struct value select_items(struct render *r, const struct node *f, struct value v, bool by_attribute, bool keep) {
        struct value items = as_list(r, f, v), out = new_list(r);
        struct value attr = by_attribute ? string_arg(r, f, 0, NULL, f->str) : undefined;
        struct value test_name = argument(r, f, by_attribute ? 1 : 0, NULL);
        if (test_name.type != VALUE_UNDEFINED && test_name.type != VALUE_STRING)
                fail(r, f, EINVAL, "%s: the test must be named by a string", f->str);
        for (size_t k = 0; k < items.list->n; k++) {
                struct value item = items.list->items[k];
                struct value x = by_attribute ? attribute(r, item, attr.s, attr.len) : item;
                bool pass = test_name.type == VALUE_STRING ? test(r, f, new_string(r, test_name.s, test_name.len).s, x,
                                                                  by_attribute ? 2 : 1)
                                                           : truthy(x);
                if (pass == keep)
                        list_append(r, out.list, item);
        }
        return out;
}

static struct value filter(struct render *r, const struct node *f, struct value v);

static struct value map_items(struct render *r, const struct node *f, struct value v) {
        struct value items = as_list(r, f, v), out = new_list(r);
        struct value attr = argument(r, f, 0, "attribute");
        bool by_attribute = false;
        for (size_t k = 0; k < f->args.n; k++)
                if (f->args.items[k]->kind == NODE_KWARG && name_is(f->args.items[k], "attribute"))
                        by_attribute = true;
        if (attr.type != VALUE_STRING)
                fail(r, f, EINVAL, "map() takes attribute='name' or a filter's name");
        for (size_t k = 0; k < items.list->n; k++) {
                struct value item = items.list->items[k];
                if (by_attribute)
                        list_append(r, out.list, attribute(r, item, attr.s, attr.len));
                else {
                        struct node call = { .kind = NODE_FILTER, .str = new_string(r, attr.s, attr.len).s,
                                             .len = attr.len, .pos = f->pos };
                        list_append(r, out.list, filter(r, &call, item));
                }
        }
        return out;
}

static struct value filter(struct render *r, const struct node *f, struct value v) {
        const char *name = f->str;
        step(r, f);
        if (!strcmp(name, "trim") || !strcmp(name, "strip")) {
                if (v.type != VALUE_STRING)
                        fail(r, f, EINVAL, "trim takes a string, not %s", type_name(v));
                return strip(v, true, true, argument(r, f, 0, "chars"));
        }
        if (!strcmp(name, "length") || !strcmp(name, "count")) {
                if (v.type == VALUE_STRING)
                        return make_int((int64_t) v.len);
                if (v.type == VALUE_LIST)
                        return make_int((int64_t) v.list->n);
                if (v.type == VALUE_DICT)
                        return make_int((int64_t) v.dict->n);
                if (v.type == VALUE_UNDEFINED)
                        return make_int(0);
                fail(r, f, EINVAL, "%s has no length", type_name(v));
        }
        if (!strcmp(name, "list"))
                return as_list(r, f, v);
        if (!strcmp(name, "join")) {
                struct value items = as_list(r, f, v), sep = argument(r, f, 0, "d");
                struct value attr = argument(r, f, 1, "attribute");
                struct text t = {};
                text_add(r, &t, "", 0);
                for (size_t k = 0; k < items.list->n; k++) {
                        if (k > 0 && sep.type == VALUE_STRING)
                                text_add(r, &t, sep.s, sep.len);
                        struct value item = items.list->items[k];
                        if (attr.type == VALUE_STRING)
                                item = attribute(r, item, attr.s, attr.len);
                        add_printed(r, &t, item);
                }
                return make_string(t.s, t.len);
        }
        if (!strcmp(name, "tojson")) {
                struct value indent = argument(r, f, 0, "indent");
                struct text t = {};
                text_add(r, &t, "", 0);
                add_json(r, &t, v, indent.type == VALUE_INT && indent.i >= 0 && indent.i <= 16 ? (int) indent.i : -1, 0);
                return make_string(t.s, t.len);
        }
        if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
                return select_items(r, f, v, true, name[0] == 's');
        if (!strcmp(name, "select") || !strcmp(name, "reject"))
                return select_items(r, f, v, false, name[0] == 's');
        if (!strcmp(name, "map"))
                return map_items(r, f, v);
        if (!strcmp(name, "first") || !strcmp(name, "last")) {
                struct value items = as_list(r, f, v);
                if (items.list->n == 0)
                        return undefined;
                return items.list->items[name[0] == 'f' ? 0 : items.list->n - 1];
        }
        if (!strcmp(name, "reverse")) {
                if (v.type == VALUE_STRING) {
                        struct value s = new_string(r, v.s, v.len);
                        for (size_t k = 0; k < v.len; k++)
                                ((char *) s.s)[k] = v.s[v.len - 1 - k];
                        return s;
                }
                struct value items = as_list(r, f, v), out = new_list(r);
                for (size_t k = items.list->n; k-- > 0;)
                        list_append(r, out.list, items.list->items[k]);
                return out;
        }
        if (!strcmp(name, "lower") || !strcmp(name, "upper") || !strcmp(name, "title") || !strcmp(name, "capitalize")) {
                if (v.type != VALUE_STRING)
                        fail(r, f, EINVAL, "%s takes a string, not %s", name, type_name(v));
                return change_case(r, v, name[0] == 'l' ? 'L' : name[0] == 'u' ? 'U' : name[0] == 't' ? 'T' : 'C');
        }
        if (!strcmp(name, "replace")) {
                if (v.type != VALUE_STRING)
                        fail(r, f, EINVAL, "replace takes a string, not %s", type_name(v));
                return replace(r, f, v, argument(r, f, 0, NULL), argument(r, f, 1, NULL), argument(r, f, 2, "count"));
        }
        if (!strcmp(name, "string"))
                return to_string(r, v);
        if (!strcmp(name, "int")) {
                if (v.type == VALUE_INT)
                        return v;
                if (v.type == VALUE_FLOAT && fabs(v.f) < 9.2e18)
                        return make_int((int64_t) v.f);
                if (v.type == VALUE_BOOL)
                        return make_int(v.b);
                if (v.type == VALUE_STRING) {
                        struct value s = new_string(r, v.s, v.len);
                        char *end;
                        long long i = strtoll(s.s, &end, 10);
                        return make_int(end != s.s && *end == '\0' ? i : 0);
                }
                return make_int(0);
        }
        if (!strcmp(name, "abs")) {
                if (v.type == VALUE_INT)
                        return make_int(v.i < 0 ? -v.i : v.i);
                if (v.type == VALUE_FLOAT)
                        return (struct value) { .type = VALUE_FLOAT, .f = fabs(v.f) };
                fail(r, f, EINVAL, "abs takes a number, not %s", type_name(v));
        }
        if (!strcmp(name, "default") || !strcmp(name, "d")) {
                bool falsy_too = truthy(argument(r, f, 1, "boolean"));
                if (v.type == VALUE_UNDEFINED || (falsy_too && !truthy(v)))
                        return argument(r, f, 0, "default_value");
                return v;
        }
        if (!strcmp(name, "items")) {
                if (v.type != VALUE_DICT)
                        fail(r, f, EINVAL, "items takes a dict, not %s", type_name(v));
                return dict_pairs(r, v, 'i');
        }
        if (!strcmp(name, "safe"))
                return v;
        fail(r, f, EINVAL, "unknown filter '%s'", name);
}

static struct value eval(struct render *r, const struct node *n) {
        switch (n->kind) {
        case NODE_STRING: return make_string(n->str, n->len);
        case NODE_INT: return make_int(n->i);
        case NODE_FLOAT: return (struct value) { .type = VALUE_FLOAT, .f = n->f };
        case NODE_NAME:
                if (name_is(n, "true") || name_is(n, "True"))
                        return make_bool(true);
                if (name_is(n, "false") || name_is(n, "False"))
                        return make_bool(false);
                if (name_is(n, "none") || name_is(n, "None"))
                        return (struct value) { .type = VALUE_NONE };
                return watched(r, lookup(r, n->str, n->len));
        case NODE_ATTR: return attribute(r, eval(r, n->a), n->str, n->len);
        case NODE_INDEX: {
                struct value object = eval(r, n->a);
                return subscript(r, n, object, eval(r, n->b));
        }
        case NODE_SLICE: return slice(r, n, eval(r, n->a));
        case NODE_CALL:
                step(r, n);
                if (n->a->kind == NODE_ATTR)
                        return method(r, n, eval(r, n->a->a), n->a->str);
                if (n->a->kind == NODE_NAME)
                        return call_function(r, n, n->a->str);
                fail(r, n, EINVAL, "only functions and methods can be called");
        case NODE_FILTER: return filter(r, n, eval(r, n->a));
        case NODE_TEST: return make_bool(test(r, n, n->str, eval(r, n->a), 0) != (n->op == 1));
        case NODE_NOT: return make_bool(!truthy(eval(r, n->a)));
        case NODE_NEG: {
                struct value v = eval(r, n->a);
                if (v.type == VALUE_INT && v.i != INT64_MIN)
                        return make_int(-v.i);
                if (v.type == VALUE_FLOAT)
                        return (struct value) { .type = VALUE_FLOAT, .f = -v.f };
                fail(r, n, EINVAL, "cannot negate %s", type_name(v));
        }
        case NODE_BINARY: return binary(r, n);
        case NODE_TERNARY:
                if (truthy(eval(r, n->a)))
                        return eval(r, n->b);
                return n->c ? eval(r, n->c) : undefined;
        case NODE_LIST:
        case NODE_TUPLE: {
                struct value out = new_list(r);
                for (size_t k = 0; k < n->args.n; k++)
                        list_append(r, out.list, eval(r, n->args.items[k]));
                return out;
        }
        case NODE_DICT: {
                struct value out = new_dict(r);
                for (size_t k = 0; k + 1 < n->args.n; k += 2) {
                        struct value key = eval(r, n->args.items[k]);
                        if (key.type != VALUE_STRING)
                                fail(r, n->args.items[k], EINVAL, "dict keys must be strings");
                        dict_set(r, out.dict, key, eval(r, n->args.items[k + 1]));
                }
                return out;
        }
        default: fail(r, n, EINVAL, "a statement where a value was expected");
        }
}

/* ---- statements ---- */

static enum flow run_block(struct render *r, const struct node_list *body);

static void bind_target(struct render *r, const struct node *target, struct value item) {
        if (target->kind == NODE_NAME) {
                assign(r, target->str, target->len, item);
                return;
        }
        if (item.type != VALUE_LIST || item.list->n != target->args.n)
                fail(r, target, EINVAL, "cannot unpack %s into %zu names", type_name(item), target->args.n);
        for (size_t k = 0; k < target->args.n; k++)
                assign(r, target->args.items[k]->str, target->args.items[k]->len, item.list->items[k]);
}

static struct value loop_info(struct render *r, const struct list *items, size_t i) {
        struct value loop = new_dict(r);
        struct dict *d = loop.dict;
        size_t n = items->n;
        dict_set(r, d, cstring("index"), make_int((int64_t) i + 1));
        dict_set(r, d, cstring("index0"), make_int((int64_t) i));
        dict_set(r, d, cstring("revindex"), make_int((int64_t) (n - i)));
        dict_set(r, d, cstring("revindex0"), make_int((int64_t) (n - i - 1)));
        dict_set(r, d, cstring("first"), make_bool(i == 0));
        dict_set(r, d, cstring("last"), make_bool(i == n - 1));
        dict_set(r, d, cstring("length"), make_int((int64_t) n));
        dict_set(r, d, cstring("previtem"), i > 0 ? items->items[i - 1] : undefined);
        dict_set(r, d, cstring("nextitem"), i + 1 < n ? items->items[i + 1] : undefined);
        return loop;
}

/* One scope for the whole loop, as llama.cpp: a set inside the body outlives an iteration
 * but not the loop. */
static void run_for(struct render *r, const struct node *n) {
        struct scope *outer = r->scope;
        push_scope(r);
        struct value iterable = eval(r, n->a);
        struct value items = new_list(r);
        if (iterable.type == VALUE_DICT)
                items = dict_pairs(r, iterable, 'i');
        else if (iterable.type == VALUE_LIST)
                items = iterable;
        else if (iterable.type != VALUE_UNDEFINED)
                fail(r, n->a, EINVAL, "a for loop over %s", type_name(iterable));

        /* a dict's items bind a single name to the key */
        struct value kept = new_list(r);
        for (size_t k = 0; k < items.list->n; k++) {
                struct value item = items.list->items[k];
                if (iterable.type == VALUE_DICT && n->target->kind == NODE_NAME)
                        item = item.list->items[0];
                if (n->c) {
                        step(r, n);
                        bind_target(r, n->target, item);
                        if (!truthy(eval(r, n->c)))
                                continue;
                }
                list_append(r, kept.list, item);
        }

        bool iterated = false;
        for (size_t k = 0; k < kept.list->n; k++) {
                step(r, n);
                assign(r, "loop", 4, loop_info(r, kept.list, k));
                bind_target(r, n->target, kept.list->items[k]);
                enum flow flow = run_block(r, &n->body);
                if (flow == FLOW_BREAK)
                        break;
                if (flow == FLOW_CONTINUE)
                        continue;
                iterated = true;
        }
        r->scope = outer;
        if (!iterated)
                run_block(r, &n->orelse);
}

static void run_set(struct render *r, const struct node *n) {
        struct value v = eval(r, n->a);
        if (n->target->kind == NODE_NAME) {
                assign(r, n->target->str, n->target->len, v);
                return;
        }
        struct value ns = eval(r, n->target->a);
        if (ns.type != VALUE_DICT)
                fail(r, n->target, EINVAL, "cannot set an attribute of %s", type_name(ns));
        dict_set(r, ns.dict, make_string(n->target->str, n->target->len), v);
}

static enum flow run_block(struct render *r, const struct node_list *body) {
        for (size_t k = 0; k < body->n; k++) {
                const struct node *n = body->items[k];
                switch (n->kind) {
                case NODE_TEXT: text_add(r, &r->output, n->str, n->len); break;
                case NODE_OUTPUT: add_printed(r, &r->output, eval(r, n->a)); break;
                case NODE_IF: {
                        enum flow flow = run_block(r, truthy(eval(r, n->a)) ? &n->body : &n->orelse);
                        if (flow != FLOW_NEXT)
                                return flow;
                        break;
                }
                case NODE_FOR: run_for(r, n); break;
                case NODE_SET: run_set(r, n); break;
                case NODE_BREAK: return FLOW_BREAK;
                case NODE_CONTINUE: return FLOW_CONTINUE;
                default: fail(r, n, EINVAL, "a value where a statement was expected");
                }
        }
        return FLOW_NEXT;
}

static void define_globals(struct render *r) {
        const struct jinja_chat *c = r->chat;
        struct value messages = new_list(r);
        for (size_t k = 0; k < c->n_messages; k++) {
                struct value m = new_dict(r);
                dict_set(r, m.dict, cstring("role"), cstring(c->messages[k].role));
                dict_set(r, m.dict, cstring("content"), cstring(c->messages[k].content));
                list_append(r, messages.list, m);
        }
        assign(r, "messages", 8, messages);
        assign(r, "bos_token", 9, cstring(c->bos_token));
        assign(r, "eos_token", 9, cstring(c->eos_token));
        assign(r, "enable_thinking", 15, make_bool(c->enable_thinking));
        if (c->add_generation_prompt)
                assign(r, "add_generation_prompt", 21, make_bool(true));
        if (c->tools_empty_list)
                assign(r, "tools", 5, new_list(r));

        /* llama.cpp's extra context: today in two spellings */
        char buf[64];
        struct tm tm;
        time_t now = c->now;
        if (localtime_r(&now, &tm)) {
                assign(r, "date_string", 11, new_string(r, buf, strftime(buf, sizeof(buf), "%d %b %Y", &tm)));
                assign(r, "datetime", 8, new_string(r, buf, strftime(buf, sizeof(buf), "%b %d %Y", &tm)));
        }
}

int jinja_render(const struct jinja_template *t, const struct jinja_chat *chat, const char *watch, bool *ret_watched,
                 char **ret, struct error *err) {
        struct render *r = calloc(1, sizeof(*r));
        if (!r || !(r->arena = arena_new(JINJA_MEMORY_MAX))) {
                free(r);
                return error_set(err, ENOMEM, "out of memory rendering the chat template");
        }
        r->template = t;
        r->chat = chat;
        r->watch = watch;
        r->err = err;
        int result;
        if (setjmp(r->fail))
                result = r->error;
        else {
                push_scope(r);
                define_globals(r);
                run_block(r, &t->body);
                text_add(r, &r->output, "", 0);
                *ret = strdup(r->output.s);
                result = *ret ? 0 : error_set(err, ENOMEM, "out of memory rendering the chat template");
        }
        if (ret_watched)
                *ret_watched = r->watched;
        arena_free(r->arena);
        free(r);
        return result;
}
