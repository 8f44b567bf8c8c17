/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja-internal.h"
#include "jinja.h"

/* Templates are a few KB; the tree of one is a few times that. */
#define PARSE_MEMORY_MAX (64u << 20)
#define NESTING_MAX 128

enum token_kind {
        TOKEN_TEXT,
        TOKEN_OPEN_STATEMENT,  /* {% or {%- */
        TOKEN_CLOSE_STATEMENT, /* %} or -%} */
        TOKEN_OPEN_EXPRESSION, /* {{ or {{- */
        TOKEN_CLOSE_EXPRESSION,
        TOKEN_COMMENT,
        TOKEN_NAME,
        TOKEN_STRING,
        TOKEN_NUMBER,
        TOKEN_PUNCT, /* text holds it: ( ) [ ] { } , . : | == != <= >= < > + - ~ * / // % = */
        TOKEN_UNARY, /* a + or - that is not binary (text) */
        TOKEN_EOF,
};

struct token {
        enum token_kind kind;
        const char *text; /* NUL-terminated copy (strings unescaped) */
        size_t len;
        size_t pos;
};

struct parser {
        struct arena *arena;
        const char *src; /* normalised source */
        size_t src_len;
        struct token *tokens;
        size_t n_tokens, cap_tokens, next;
        unsigned depth;
        struct error *err;
        int error;
        jmp_buf fail;
};

__attribute__((format(printf, 3, 4), noreturn)) static void fail_at(struct parser *p, size_t pos, const char *fmt,
                                                                      ...) {
        char what[256];
        va_list ap;
        unsigned line, column;

        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        source_position(p->src, pos, &line, &column);
        p->error = error_set(p->err, EINVAL, "chat template, line %u column %u: %s", line, column, what);
        longjmp(p->fail, 1);
}

static void *alloc(struct parser *p, size_t size) {
        void *m = arena_alloc(p->arena, size);
        if (!m) {
                p->error = error_set(p->err, ENOMEM, "out of memory parsing the chat template");
                longjmp(p->fail, 1);
        }
        return m;
}

static char *copy(struct parser *p, const char *s, size_t len) {
        char *c = alloc(p, len + 1);
        memcpy(c, s, len);
        return c;
}

/* ---- lexer: llama.cpp's rules, so that the same text comes out ---- */

static bool space(char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static bool word_char(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static bool digit(char c) {
        return c >= '0' && c <= '9';
}

static void *grow(struct parser *p, void *items, size_t n, size_t *cap, size_t item_size) {
        void *grown = arena_grow(p->arena, items, n, cap, item_size, 16);
        if (!grown) {
                p->error = error_set(p->err, ENOMEM, "out of memory parsing the chat template");
                longjmp(p->fail, 1);
        }
        return grown;
}

static void push_token(struct parser *p, enum token_kind kind, const char *text, size_t len, size_t pos) {
        p->tokens = grow(p, p->tokens, p->n_tokens, &p->cap_tokens, sizeof(*p->tokens));
        p->tokens[p->n_tokens++] = (struct token) { kind, text, len, pos };
}

static enum token_kind last_kind(const struct parser *p) {
        return p->n_tokens ? p->tokens[p->n_tokens - 1].kind : TOKEN_EOF;
}

/* A quoted string at *pos (on the quote); unescapes \n \t \r \b \f \v \\ \' \". */
static void lex_string(struct parser *p, size_t *pos) {
        const char *s = p->src;
        char quote = s[*pos];
        size_t start = *pos, i = *pos + 1, end = i;

        while (end < p->src_len && s[end] != quote)
                end += s[end] == '\\' ? 2 : 1;
        char *out = alloc(p, end - i + 1), *o = out;

        for (; i < p->src_len && s[i] != quote; i++) {
                if (s[i] != '\\') {
                        *o++ = s[i];
                        continue;
                }
                if (++i >= p->src_len)
                        break;
                switch (s[i]) {
                case 'n': *o++ = '\n'; break;
                case 't': *o++ = '\t'; break;
                case 'r': *o++ = '\r'; break;
                case 'b': *o++ = '\b'; break;
                case 'f': *o++ = '\f'; break;
                case 'v': *o++ = '\v'; break;
                case '\\': case '\'': case '"': *o++ = s[i]; break;
                default: fail_at(p, i, "unknown escape \\%c in a string", s[i]);
                }
        }
        if (i >= p->src_len)
                fail_at(p, start, "a string that is never closed");
        push_token(p, TOKEN_STRING, out, (size_t) (o - out), start);
        *pos = i + 1;
}

static size_t number_end(const struct parser *p, size_t i) {
        while (i < p->src_len && digit(p->src[i]))
                i++;
        if (i + 1 < p->src_len && p->src[i] == '.' && digit(p->src[i + 1])) {
                i++;
                while (i < p->src_len && digit(p->src[i]))
                        i++;
        }
        return i;
}

/* The text before the next tag, with the whitespace rules applied. */
static void lex_text(struct parser *p, size_t *pos) {
        const char *s = p->src;
        size_t start = *pos, end, i = *pos;
        bool rstrip_previous = false, newline_previous = false;

        if (start > 3) {
                char c0 = s[start - 3], c1 = s[start - 2], c2 = s[start - 1];
                rstrip_previous = c0 == '-' && (c1 == '%' || c1 == '}' || c1 == '#') && c2 == '}';
                newline_previous = (c1 == '#' || c1 == '%' || c1 == '-') && c2 == '}';
        }
        while (i < p->src_len && !(s[i] == '{' && i + 1 < p->src_len && strchr("%{#", s[i + 1])))
                i++;
        end = i;
        *pos = i;

        /* lstrip_blocks: blanks before a {% or {# at the start of a line go */
        if (i + 1 < p->src_len && s[i] == '{' && strchr("%#-", s[i + 1])) {
                for (size_t cur = end; cur > start; cur--) {
                        if (cur == 1) { /* llama.cpp's rule: the first line goes whole */
                                end = 0;
                                break;
                        }
                        if (s[cur - 1] == '\n') {
                                end = cur;
                                break;
                        }
                        if (!space(s[cur - 1]))
                                break;
                }
        }
        const char *text = s + start;
        size_t len = end > start ? end - start : 0;
        /* trim_blocks: one newline after a %} or #} goes */
        if (newline_previous && len > 0 && text[0] == '\n') {
                text++;
                len--;
        }
        if (rstrip_previous)
                while (len > 0 && space(*text)) {
                        text++;
                        len--;
                }
        if (i + 2 < p->src_len && s[i] == '{' && strchr("{%#", s[i + 1]) && s[i + 2] == '-')
                while (len > 0 && space(text[len - 1]))
                        len--;
        if (len > 0)
                push_token(p, TOKEN_TEXT, copy(p, text, len), len, start);
}

static const char *const punctuation[] = {
        "{%-", "-%}", "{{-", "-}}", "{%", "%}", "{{", "}}", "(", ")", "{", "}", "[", "]", ",", ".", ":", "|",
        "<=", ">=", "==", "!=", "<", ">", "+", "-", "~", "//", "*", "/", "%", "=",
};

static void lex(struct parser *p) {
        const char *s = p->src;
        size_t pos = 0, curly_depth = 0;

        while (pos < p->src_len) {
                enum token_kind last = last_kind(p);
                if (last == TOKEN_CLOSE_STATEMENT || last == TOKEN_CLOSE_EXPRESSION || last == TOKEN_COMMENT ||
                    last == TOKEN_EOF) {
                        size_t before = p->n_tokens;
                        lex_text(p, &pos);
                        if (p->n_tokens > before)
                                continue;
                        if (pos >= p->src_len)
                                break;
                }
                if (s[pos] == '{' && pos + 1 < p->src_len && s[pos + 1] == '#') {
                        const char *close = strstr(s + pos + 2, "#}");
                        if (!close)
                                fail_at(p, pos, "a comment that is never closed");
                        push_token(p, TOKEN_COMMENT, "", 0, pos);
                        pos = (size_t) (close - s) + 2;
                        continue;
                }
                if (s[pos] == '-' && (last == TOKEN_OPEN_EXPRESSION || last == TOKEN_OPEN_STATEMENT))
                        pos++;
                while (pos < p->src_len && space(s[pos]))
                        pos++;
                if (pos >= p->src_len)
                        break;

                char ch = s[pos];
                bool closing = ch == '-' && pos + 1 < p->src_len && (s[pos + 1] == '%' || s[pos + 1] == '}');
                if (!closing && (ch == '-' || ch == '+')) {
                        if (last == TOKEN_TEXT || last == TOKEN_EOF)
                                fail_at(p, pos, "unexpected '%c'", ch);
                        bool binary = last == TOKEN_NAME || last == TOKEN_NUMBER || last == TOKEN_STRING ||
                                      (last == TOKEN_PUNCT && strchr(")]", p->tokens[p->n_tokens - 1].text[0]));
                        if (!binary) {
                                size_t end = number_end(p, pos + 1);
                                if (end > pos + 1)
                                        push_token(p, TOKEN_NUMBER, copy(p, s + pos, end - pos), end - pos, pos);
                                else
                                        push_token(p, TOKEN_UNARY, ch == '-' ? "-" : "+", 1, pos);
                                pos = end;
                                continue;
                        }
                }

                bool matched = false;
                for (size_t k = 0; k < sizeof(punctuation) / sizeof(*punctuation) && !matched; k++) {
                        const char *seq = punctuation[k];
                        size_t n = strlen(seq);
                        if (strcmp(seq, "}}") == 0 && curly_depth > 0)
                                continue;
                        if (pos + n > p->src_len || memcmp(s + pos, seq, n) != 0)
                                continue;
                        enum token_kind kind = TOKEN_PUNCT;
                        if (seq[0] == '{' && seq[1] == '%')
                                kind = TOKEN_OPEN_STATEMENT;
                        else if (seq[0] == '{' && seq[1] == '{') {
                                kind = TOKEN_OPEN_EXPRESSION;
                                curly_depth = 0;
                        } else if (strcmp(seq, "%}") == 0 || strcmp(seq, "-%}") == 0)
                                kind = TOKEN_CLOSE_STATEMENT;
                        else if (strcmp(seq, "}}") == 0 || strcmp(seq, "-}}") == 0)
                                kind = TOKEN_CLOSE_EXPRESSION;
                        else if (strcmp(seq, "{") == 0)
                                curly_depth++;
                        else if (strcmp(seq, "}") == 0 && curly_depth > 0)
                                curly_depth--;
                        push_token(p, kind, seq, n, pos);
                        pos += n;
                        matched = true;
                }
                if (matched)
                        continue;
                if (ch == '\'' || ch == '"') {
                        lex_string(p, &pos);
                        continue;
                }
                if (digit(ch)) {
                        size_t end = number_end(p, pos);
                        push_token(p, TOKEN_NUMBER, copy(p, s + pos, end - pos), end - pos, pos);
                        pos = end;
                        continue;
                }
                if (word_char(ch)) {
                        size_t end = pos;
                        while (end < p->src_len && word_char(s[end]))
                                end++;
                        push_token(p, TOKEN_NAME, copy(p, s + pos, end - pos), end - pos, pos);
                        pos = end;
                        continue;
                }
                fail_at(p, pos, "unexpected character '%c'", ch);
        }
        push_token(p, TOKEN_EOF, "", 0, p->src_len);
}

/* ---- parser ---- */

static const struct token *peek(const struct parser *p) {
        return &p->tokens[p->next];
}

static const struct token *peek_at(const struct parser *p, size_t ahead) {
        size_t i = p->next + ahead;
        return &p->tokens[i < p->n_tokens ? i : p->n_tokens - 1];
}

static bool is_punct(const struct token *t, const char *s) {
        return t->kind == TOKEN_PUNCT && strcmp(t->text, s) == 0;
}

static bool is_name(const struct token *t, const char *s) {
        return t->kind == TOKEN_NAME && strcmp(t->text, s) == 0;
}

static const struct token *advance(struct parser *p) {
        const struct token *t = peek(p);
        if (t->kind != TOKEN_EOF)
                p->next++;
        return t;
}

static const char *describe(const struct token *t) {
        switch (t->kind) {
        case TOKEN_EOF: return "the end of the template";
        case TOKEN_TEXT: return "text";
        case TOKEN_STRING: return "a string";
        case TOKEN_COMMENT: return "a comment";
        default: return t->text;
        }
}

static void expect_punct(struct parser *p, const char *s) {
        if (!is_punct(peek(p), s))
                fail_at(p, peek(p)->pos, "expected '%s', found '%s'", s, describe(peek(p)));
        advance(p);
}

static const struct token *expect_name(struct parser *p) {
        if (peek(p)->kind != TOKEN_NAME)
                fail_at(p, peek(p)->pos, "expected a name, found '%s'", describe(peek(p)));
        return advance(p);
}

static void expect_close_statement(struct parser *p) {
        if (peek(p)->kind != TOKEN_CLOSE_STATEMENT)
                fail_at(p, peek(p)->pos, "expected '%%}', found '%s'", describe(peek(p)));
        advance(p);
}

static struct node *new_node(struct parser *p, enum node_kind kind, const struct token *at) {
        struct node *n = alloc(p, sizeof(*n));
        n->kind = kind;
        n->pos = at->pos;
        return n;
}

static void list_push(struct parser *p, struct node_list *l, size_t *cap, struct node *n) {
        l->items = grow(p, l->items, l->n, cap, sizeof(*l->items));
        l->items[l->n++] = n;
}

static void enter(struct parser *p) {
        if (++p->depth > NESTING_MAX)
                fail_at(p, peek(p)->pos, "nested more than %d deep", NESTING_MAX);
}

static struct node *expression(struct parser *p);

/* (args), the opening parenthesis already taken: expressions and name=expression. */
static void arguments(struct parser *p, struct node_list *args) {
        size_t cap = 0;
        while (!is_punct(peek(p), ")")) {
                struct node *arg;
                if (peek(p)->kind == TOKEN_NAME && is_punct(peek_at(p, 1), "=")) {
                        const struct token *name = advance(p);
                        advance(p);
                        arg = new_node(p, NODE_KWARG, name);
                        arg->str = name->text;
                        arg->len = name->len;
                        arg->a = expression(p);
                } else
                        arg = expression(p);
                list_push(p, args, &cap, arg);
                if (!is_punct(peek(p), ","))
                        break;
                advance(p);
        }
        expect_punct(p, ")");
}

static struct node *primary(struct parser *p) {
        const struct token *t = advance(p);
        struct node *n;
        size_t cap = 0;

        switch (t->kind) {
        case TOKEN_STRING: {
                n = new_node(p, NODE_STRING, t);
                n->str = t->text;
                n->len = t->len;
                /* adjacent literals join, as in Python */
                while (peek(p)->kind == TOKEN_STRING) {
                        const struct token *more = advance(p);
                        char *joined = alloc(p, n->len + more->len + 1);
                        memcpy(joined, n->str, n->len);
                        memcpy(joined + n->len, more->text, more->len);
                        n->str = joined;
                        n->len += more->len;
                }
                return n;
        }
        case TOKEN_NUMBER:
                if (strchr(t->text, '.')) {
                        n = new_node(p, NODE_FLOAT, t);
                        n->f = strtod(t->text, NULL);
                } else {
                        n = new_node(p, NODE_INT, t);
                        errno = 0;
                        n->i = strtoll(t->text, NULL, 10);
                        if (errno)
                                fail_at(p, t->pos, "the number %s is out of range", t->text);
                }
                return n;
        case TOKEN_NAME:
                n = new_node(p, NODE_NAME, t);
                n->str = t->text;
                n->len = t->len;
                return n;
        case TOKEN_UNARY:
                enter(p);
                n = new_node(p, t->text[0] == '-' ? NODE_NEG : NODE_TUPLE, t);
                n->a = primary(p);
                p->depth--;
                if (n->kind == NODE_TUPLE) /* unary plus: the operand itself */
                        return n->a;
                return n;
        case TOKEN_PUNCT:
                if (strcmp(t->text, "(") == 0) {
                        struct node *first = expression(p);
                        if (!is_punct(peek(p), ",")) {
                                expect_punct(p, ")");
                                return first;
                        }
                        n = new_node(p, NODE_TUPLE, t);
                        list_push(p, &n->args, &cap, first);
                        while (is_punct(peek(p), ",")) {
                                advance(p);
                                if (is_punct(peek(p), ")"))
                                        break;
                                list_push(p, &n->args, &cap, expression(p));
                        }
                        expect_punct(p, ")");
                        return n;
                }
                if (strcmp(t->text, "[") == 0) {
                        n = new_node(p, NODE_LIST, t);
                        while (!is_punct(peek(p), "]")) {
                                list_push(p, &n->args, &cap, expression(p));
                                if (!is_punct(peek(p), ","))
                                        break;
                                advance(p);
                        }
                        expect_punct(p, "]");
                        return n;
                }
                if (strcmp(t->text, "{") == 0) {
                        n = new_node(p, NODE_DICT, t);
                        while (!is_punct(peek(p), "}")) {
                                list_push(p, &n->args, &cap, expression(p));
                                expect_punct(p, ":");
                                list_push(p, &n->args, &cap, expression(p));
                                if (!is_punct(peek(p), ","))
                                        break;
                                advance(p);
                        }
                        expect_punct(p, "}");
                        return n;
                }
                break;
        default:
                break;
        }
        fail_at(p, t->pos, "expected a value, found '%s'", describe(t));
}

/* [b:c:d] or [b], the bracket already taken */
static struct node *subscript(struct parser *p, struct node *object, const struct token *at) {
        struct node *parts[3] = {};
        size_t k = 0;
        bool slice = false;

        while (!is_punct(peek(p), "]")) {
                if (is_punct(peek(p), ":")) {
                        if (++k > 2)
                                fail_at(p, peek(p)->pos, "a slice takes at most three parts");
                        slice = true;
                        advance(p);
                        continue;
                }
                if (parts[k])
                        fail_at(p, peek(p)->pos, "expected ']' or ':', found '%s'", describe(peek(p)));
                parts[k] = expression(p);
        }
        expect_punct(p, "]");
        struct node *n = new_node(p, slice ? NODE_SLICE : NODE_INDEX, at);
        n->a = object;
        n->b = parts[0];
        n->c = parts[1];
        n->d = parts[2];
        if (!slice && !n->b)
                fail_at(p, at->pos, "an empty subscript []");
        return n;
}

static struct node *postfix(struct parser *p) {
        struct node *n = primary(p);
        for (;;) {
                const struct token *t = peek(p);
                if (is_punct(t, ".")) {
                        advance(p);
                        const struct token *name = expect_name(p);
                        struct node *attr = new_node(p, NODE_ATTR, t);
                        attr->a = n;
                        attr->str = name->text;
                        attr->len = name->len;
                        n = attr;
                } else if (is_punct(t, "[")) {
                        advance(p);
                        n = subscript(p, n, t);
                } else if (is_punct(t, "(")) {
                        advance(p);
                        struct node *call = new_node(p, NODE_CALL, t);
                        call->a = n;
                        arguments(p, &call->args);
                        n = call;
                } else
                        return n;
        }
}

/* a | name [(args)] ... */
static struct node *filtered(struct parser *p) {
        struct node *n = postfix(p);
        while (is_punct(peek(p), "|")) {
                const struct token *bar = advance(p);
                const struct token *name = expect_name(p);
                struct node *f = new_node(p, NODE_FILTER, bar);
                f->a = n;
                f->str = name->text;
                f->len = name->len;
                if (is_punct(peek(p), "(")) {
                        advance(p);
                        arguments(p, &f->args);
                }
                n = f;
        }
        return n;
}

/* a is [not] name [(args) | one value] */
static struct node *tested(struct parser *p) {
        struct node *n = filtered(p);
        while (is_name(peek(p), "is")) {
                const struct token *is = advance(p);
                struct node *test = new_node(p, NODE_TEST, is);
                if (is_name(peek(p), "not")) {
                        advance(p);
                        test->op = 1;
                }
                const struct token *name = expect_name(p);
                test->a = n;
                test->str = name->text;
                test->len = name->len;
                if (is_punct(peek(p), "(")) {
                        advance(p);
                        arguments(p, &test->args);
                } else if (peek(p)->kind == TOKEN_STRING || peek(p)->kind == TOKEN_NUMBER ||
                           (peek(p)->kind == TOKEN_NAME && !is_name(peek(p), "and") && !is_name(peek(p), "or") &&
                            !is_name(peek(p), "else") && !is_name(peek(p), "if") && !is_name(peek(p), "is") &&
                            !is_name(peek(p), "in") && !is_name(peek(p), "not"))) {
                        size_t cap = 0;
                        list_push(p, &test->args, &cap, postfix(p));
                }
                n = test;
        }
        return n;
}

static struct node *binary(struct parser *p, struct node *left, int op, const struct token *at, struct node *right) {
        struct node *n = new_node(p, NODE_BINARY, at);
        n->op = op;
        n->a = left;
        n->b = right;
        return n;
}

static struct node *multiplicative(struct parser *p) {
        struct node *n = tested(p);
        for (;;) {
                const struct token *t = peek(p);
                int op = is_punct(t, "*") ? OP_MUL : is_punct(t, "/") ? OP_DIV : is_punct(t, "//") ? OP_FLOORDIV
                                                                      : is_punct(t, "%")   ? OP_MOD
                                                                                           : -1;
                if (op < 0)
                        return n;
                advance(p);
                n = binary(p, n, op, t, tested(p));
        }
}

static struct node *additive(struct parser *p) {
        struct node *n = multiplicative(p);
        for (;;) {
                const struct token *t = peek(p);
                int op = is_punct(t, "+") ? OP_ADD : is_punct(t, "-") ? OP_SUB : is_punct(t, "~") ? OP_CONCAT : -1;
                if (op < 0)
                        return n;
                advance(p);
                n = binary(p, n, op, t, multiplicative(p));
        }
}

static struct node *comparison(struct parser *p) {
        static const struct {
                const char *s;
                int op;
        } ops[] = { { "==", OP_EQ }, { "!=", OP_NE }, { "<", OP_LT }, { ">", OP_GT }, { "<=", OP_LE }, { ">=", OP_GE } };
        struct node *n = additive(p);
        for (;;) {
                const struct token *t = peek(p);
                int op = -1;
                for (size_t k = 0; k < sizeof(ops) / sizeof(*ops); k++)
                        if (is_punct(t, ops[k].s))
                                op = ops[k].op;
                if (is_name(t, "in"))
                        op = OP_IN;
                else if (is_name(t, "not") && is_name(peek_at(p, 1), "in")) {
                        advance(p);
                        op = OP_NOT_IN;
                }
                if (op < 0)
                        return n;
                advance(p);
                n = binary(p, n, op, t, additive(p));
        }
}

static struct node *negation(struct parser *p) {
        if (is_name(peek(p), "not")) {
                const struct token *t = advance(p);
                enter(p);
                struct node *n = new_node(p, NODE_NOT, t);
                n->a = negation(p);
                p->depth--;
                return n;
        }
        return comparison(p);
}

/* a or b (op OP_OR) over a and b (op OP_AND) over not a */
static struct node *logical(struct parser *p, int op) {
        const char *word = op == OP_OR ? "or" : "and";
        struct node *n = op == OP_OR ? logical(p, OP_AND) : negation(p);
        while (is_name(peek(p), word)) {
                const struct token *t = advance(p);
                n = binary(p, n, op, t, op == OP_OR ? logical(p, OP_AND) : negation(p));
        }
        return n;
}

static struct node *disjunction(struct parser *p) {
        return logical(p, OP_OR);
}

static struct node *expression(struct parser *p) {
        enter(p);
        struct node *n = disjunction(p);
        if (is_name(peek(p), "if")) {
                const struct token *t = advance(p);
                struct node *ternary = new_node(p, NODE_TERNARY, t);
                ternary->b = n;
                ternary->a = disjunction(p);
                if (is_name(peek(p), "else")) {
                        advance(p);
                        ternary->c = expression(p);
                }
                n = ternary;
        }
        p->depth--;
        return n;
}

/* ---- statements ---- */

static void block(struct parser *p, struct node_list *body, const char *const *ends);

/* after {% if: cond %} body {% elif ... | else %} ... {% endif %} */
static struct node *if_statement(struct parser *p, const struct token *at) {
        static const char *const ends[] = { "elif", "else", "endif", NULL };
        struct node *n = new_node(p, NODE_IF, at);
        n->a = expression(p);
        expect_close_statement(p);
        block(p, &n->body, ends);
        const struct token *end = expect_name(p);
        if (strcmp(end->text, "elif") == 0) {
                size_t cap = 0;
                list_push(p, &n->orelse, &cap, if_statement(p, end));
                return n;
        }
        if (strcmp(end->text, "else") == 0) {
                static const char *const endif[] = { "endif", NULL };
                expect_close_statement(p);
                block(p, &n->orelse, endif);
                expect_name(p);
        }
        expect_close_statement(p);
        return n;
}

static struct node *for_statement(struct parser *p, const struct token *at) {
        static const char *const ends[] = { "else", "endfor", NULL };
        struct node *n = new_node(p, NODE_FOR, at);
        const struct token *name = expect_name(p);
        n->target = new_node(p, NODE_NAME, name);
        n->target->str = name->text;
        n->target->len = name->len;
        if (is_punct(peek(p), ",")) {
                struct node *tuple = new_node(p, NODE_TUPLE, name);
                size_t cap = 0;
                list_push(p, &tuple->args, &cap, n->target);
                while (is_punct(peek(p), ",")) {
                        advance(p);
                        const struct token *more = expect_name(p);
                        struct node *var = new_node(p, NODE_NAME, more);
                        var->str = more->text;
                        var->len = more->len;
                        list_push(p, &tuple->args, &cap, var);
                }
                n->target = tuple;
        }
        if (!is_name(peek(p), "in"))
                fail_at(p, peek(p)->pos, "expected 'in' in a for statement, found '%s'", describe(peek(p)));
        advance(p);
        n->a = disjunction(p);
        if (is_name(peek(p), "if")) {
                advance(p);
                n->c = disjunction(p);
        }
        if (is_name(peek(p), "recursive"))
                fail_at(p, peek(p)->pos, "recursive loops are not supported");
        expect_close_statement(p);
        block(p, &n->body, ends);
        if (strcmp(expect_name(p)->text, "else") == 0) {
                static const char *const endfor[] = { "endfor", NULL };
                expect_close_statement(p);
                block(p, &n->orelse, endfor);
                expect_name(p);
        }
        expect_close_statement(p);
        return n;
}

static struct node *set_statement(struct parser *p, const struct token *at) {
        struct node *n = new_node(p, NODE_SET, at);
        const struct token *name = expect_name(p);
        n->target = new_node(p, NODE_NAME, name);
        n->target->str = name->text;
        n->target->len = name->len;
        if (is_punct(peek(p), ".")) {
                const struct token *dot = advance(p);
                const struct token *attr = expect_name(p);
                struct node *target = new_node(p, NODE_ATTR, dot);
                target->a = n->target;
                target->str = attr->text;
                target->len = attr->len;
                n->target = target;
        }
        if (!is_punct(peek(p), "="))
                fail_at(p, peek(p)->pos, "only 'set name = value' and 'set namespace.name = value' are supported");
        advance(p);
        n->a = expression(p);
        expect_close_statement(p);
        return n;
}

/* One {% ... %}, the opening tag taken; NULL for a statement that leaves nothing (generation). */
static struct node *statement(struct parser *p) {
        const struct token *t = expect_name(p);
        struct node *n = NULL;

        enter(p);
        if (strcmp(t->text, "if") == 0)
                n = if_statement(p, t);
        else if (strcmp(t->text, "for") == 0)
                n = for_statement(p, t);
        else if (strcmp(t->text, "set") == 0)
                n = set_statement(p, t);
        else if (strcmp(t->text, "break") == 0 || strcmp(t->text, "continue") == 0) {
                n = new_node(p, t->text[0] == 'b' ? NODE_BREAK : NODE_CONTINUE, t);
                expect_close_statement(p);
        } else if (strcmp(t->text, "generation") == 0 || strcmp(t->text, "endgeneration") == 0)
                expect_close_statement(p);
        else
                fail_at(p, t->pos, "the statement '%s' is not supported", t->text);
        p->depth--;
        return n;
}

/* Statements until EOF (ends NULL) or a {% NAME where NAME is in ends; leaves the parser on NAME. */
static void block(struct parser *p, struct node_list *body, const char *const *ends) {
        size_t cap = 0;
        for (;;) {
                const struct token *t = peek(p);
                struct node *n = NULL;
                switch (t->kind) {
                case TOKEN_EOF:
                        if (ends) {
                                size_t last = 0;
                                while (ends[last + 1])
                                        last++;
                                fail_at(p, t->pos, "the template ends before {%% %s %%}", ends[last]);
                        }
                        return;
                case TOKEN_TEXT:
                        advance(p);
                        n = new_node(p, NODE_TEXT, t);
                        n->str = t->text;
                        n->len = t->len;
                        break;
                case TOKEN_COMMENT:
                        advance(p);
                        break;
                case TOKEN_OPEN_EXPRESSION:
                        advance(p);
                        n = new_node(p, NODE_OUTPUT, t);
                        n->a = expression(p);
                        if (peek(p)->kind != TOKEN_CLOSE_EXPRESSION)
                                fail_at(p, peek(p)->pos, "expected '}}', found '%s'", describe(peek(p)));
                        advance(p);
                        break;
                case TOKEN_OPEN_STATEMENT: {
                        const struct token *name = peek_at(p, 1);
                        for (size_t k = 0; ends && ends[k]; k++)
                                if (is_name(name, ends[k])) {
                                        advance(p);
                                        return;
                                }
                        advance(p);
                        if (name->kind == TOKEN_NAME && strncmp(name->text, "end", 3) == 0 &&
                            strcmp(name->text, "endgeneration") != 0)
                                fail_at(p, name->pos, "{%% %s %%} without its opening statement", name->text);
                        n = statement(p);
                        break;
                }
                default:
                        fail_at(p, t->pos, "unexpected '%s' outside a tag", describe(t));
                }
                if (n)
                        list_push(p, body, &cap, n);
        }
}

int jinja_parse(const char *source, struct jinja_template **ret, struct error *err) {
        struct jinja_template *t = calloc(1, sizeof(*t));
        struct parser *p = calloc(1, sizeof(*p));
        if (!t || !p || !(t->arena = arena_new(PARSE_MEMORY_MAX))) {
                free(p);
                jinja_free(t);
                return error_set(err, ENOMEM, "out of memory parsing the chat template");
        }
        p->arena = t->arena;
        p->err = err;
        if (setjmp(p->fail)) {
                int r = p->error;
                free(p);
                jinja_free(t);
                return r;
        }

        /* llama.cpp's normalisation: CR LF and lone CR become LF; one final newline goes */
        size_t n = strlen(source);
        char *src = alloc(p, n + 1), *o = src;
        for (size_t i = 0; i < n; i++) {
                if (source[i] == '\r') {
                        *o++ = '\n';
                        if (i + 1 < n && source[i + 1] == '\n')
                                i++;
                } else
                        *o++ = source[i];
        }
        if (o > src && n > 0 && source[n - 1] == '\n')
                o--;
        *o = '\0';
        p->src = t->source = src;
        p->src_len = (size_t) (o - src);

        lex(p);
        block(p, &t->body, NULL);
        free(p);
        *ret = t;
        return 0;
}

void jinja_free(struct jinja_template *t) {
        if (!t)
                return;
        arena_free(t->arena);
        free(t);
}
