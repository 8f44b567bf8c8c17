/* SPDX-License-Identifier: MIT */
#pragma once

/* What the Jinja parser (jinja-parse.c) hands the renderer (jinja-render.c): a syntax tree
 * whose nodes, names and literals all live in one arena, freed at once with the template.
 * The renderer allocates its values in a second arena per render, so neither needs to free
 * anything piecemeal and an error can leave from any depth (longjmp) without a leak. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct arena;

/* 0-filled memory from the arena, or NULL once its limit (bytes in all) or malloc fails. */
void *arena_alloc(struct arena *a, size_t size);
/* A new arena that refuses to hand out more than limit bytes in all; NULL without memory. */
struct arena *arena_new(size_t limit);
void arena_free(struct arena *a);
/* items (n used of *cap, each item_size bytes) with room for one more: items itself, or a
 * copy twice as large (first_cap when empty) with *cap updated; NULL past the limit. */
void *arena_grow(struct arena *a, void *items, size_t n, size_t *cap, size_t item_size, size_t first_cap);

enum node_kind {
        /* statements */
        NODE_TEXT,     /* str: text copied to the output */
        NODE_OUTPUT,   /* {{ a }} */
        NODE_IF,       /* if a: body, else: orelse (an elif is an orelse holding one NODE_IF) */
        NODE_FOR,      /* for target in a [if c]: body, else: orelse; target: NODE_NAME or NODE_TUPLE */
        NODE_SET,      /* set target = a; target: NODE_NAME or NODE_ATTR of a namespace */
        NODE_BREAK,
        NODE_CONTINUE,
        /* expressions */
        NODE_STRING,   /* str */
        NODE_INT,      /* i */
        NODE_FLOAT,    /* f */
        NODE_NAME,     /* str: a variable, or true/false/none */
        NODE_ATTR,     /* a.str */
        NODE_INDEX,    /* a[b] */
        NODE_SLICE,    /* a[b:c:d], each of b, c, d may be NULL */
        NODE_CALL,     /* a(args) */
        NODE_FILTER,   /* a | str(args) */
        NODE_TEST,     /* a is [not] str(args); op: 1 when negated */
        NODE_NOT,      /* not a */
        NODE_NEG,      /* -a */
        NODE_BINARY,   /* a op b, op one of enum binary_op */
        NODE_TERNARY,  /* b if a else c (c may be NULL) */
        NODE_LIST,     /* [args] */
        NODE_TUPLE,    /* (args) or a, b */
        NODE_DICT,     /* {args[0]: args[1], ...} */
        NODE_KWARG,    /* str=a, inside args */
};

enum binary_op {
        OP_OR, OP_AND,
        OP_EQ, OP_NE, OP_LT, OP_GT, OP_LE, OP_GE, OP_IN, OP_NOT_IN,
        OP_ADD, OP_SUB, OP_CONCAT, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD,
};

struct node_list {
        struct node **items;
        size_t n;
};

struct node {
        enum node_kind kind;
        int op;
        const char *str; /* NUL-terminated, len bytes */
        size_t len;
        int64_t i;
        double f;
        struct node *a, *b, *c, *d, *target;
        struct node_list args;   /* call/filter/test arguments, list or dict items */
        struct node_list body;   /* statements */
        struct node_list orelse; /* statements */
        size_t pos;              /* offset in the template's source, for messages */
};

struct jinja_template {
        struct arena *arena;
        const char *source; /* normalised: LF line ends, no final newline */
        struct node_list body;
};

/* The 1-based line and column of offset pos in source. */
static inline void source_position(const char *source, size_t pos, unsigned *line, unsigned *column) {
        *line = 1;
        *column = 1;
        for (size_t i = 0; i < pos && source[i]; i++) {
                if (source[i] == '\n') {
                        (*line)++;
                        *column = 1;
                } else
                        (*column)++;
        }
}
