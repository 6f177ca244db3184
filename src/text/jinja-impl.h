/*
 * The inside of the Jinja interpreter (jinja.h): the arena, values, the
 * syntax tree and the evaluator's state, shared by jinja-*.c.
 *
 * Memory: a render owns one arena; the parsed template, every value and
 * every piece of output live in it and go with it at the end, so values
 * are plain structs that may share lists and dicts (as Python's references
 * do) without counting references.
 *
 * Errors: a failure anywhere (a syntax error, a type error, raise_exception,
 * a bound, out of memory) calls jj_fail, which records the status and the
 * message and jumps back to cllm_jinja_render, the only setjmp; nothing is
 * held outside the arena between the two, so the jump leaks nothing.
 */
#ifndef CLLM_TEXT_JINJA_IMPL_H
#define CLLM_TEXT_JINJA_IMPL_H

#include "text/jinja.h"

#include <setjmp.h>

/* Bounds of one render (templates come from files). */
#define JJ_MAX_ARENA   (256u << 20) /* bytes of values, tree and output */
#define JJ_MAX_OUTPUT  (32u << 20)  /* bytes of rendered text */
#define JJ_MAX_STEPS   10000000ull  /* statements, loop iterations and calls */
#define JJ_MAX_CALL    100          /* nested macro calls */
#define JJ_MAX_NESTING 200          /* nested blocks and expressions in the source */
#define JJ_MAX_RANGE   10000000     /* items of one range() */
#define JJ_MAX_REPEAT  (16u << 20)  /* bytes of one string * n */

typedef struct jj_chunk jj_chunk;

typedef struct jj_state {
    jmp_buf jump;
    /* cllm_jinja_render's arguments, read after its setjmp */
    const char *arg_src, *arg_ctx;
    int64_t arg_now;
    cllm_status status;
    char msg[512];
    jj_chunk *chunks;
    size_t used;     /* bytes allocated in the arena */
    const char *src; /* the normalised source, for line and column */
    size_t src_len;
} jj_state;

CLLM_NORETURN void jj_fail(jj_state *st, cllm_status status, const char *fmt, ...)
    CLLM_PRINTF(3, 4);
/* As jj_fail with CLLM_ERR_FORMAT and the line and column of source offset `at`. */
CLLM_NORETURN void jj_fail_at(jj_state *st, size_t at, const char *fmt, ...) CLLM_PRINTF(3, 4);
/* n zeroed bytes from the arena (8-aligned); fails the render past the bound. */
void *jj_alloc(jj_state *st, size_t n);
/* n bytes at p grown to m bytes (a copy; the old bytes stay in the arena). */
void *jj_grow(jj_state *st, const void *p, size_t n, size_t m);
void jj_arena_free(jj_state *st);

/* ---- values ---- */

typedef enum jv_kind {
    JV_UNDEF = 0, /* Jinja's Undefined: prints "", false, iterates empty */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_DICT,
    JV_FUNC,
} jv_kind;

typedef struct jv_list jv_list;
typedef struct jv_dict jv_dict;
typedef struct jv_func jv_func;

typedef struct jv {
    jv_kind k;
    bool safe; /* a string marked safe (Jinja2's Markup): `+` escapes plain strings joined to it */
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p; /* UTF-8, not NUL-terminated; the name for JV_UNDEF (may be NULL) */
            size_t n;
        } s;
        jv_list *l;
        jv_dict *d;
        jv_func *fn;
    };
} jv;

/* What Python object a list stands for where it is not a list: Jinja2's
 * filters return generators and dict methods views, which print, index and
 * convert to JSON differently (`| list` makes a list of any). */
typedef enum jv_view {
    JV_VIEW_NONE = 0,
    JV_VIEW_GENERATOR,
    JV_VIEW_REVERSED,
    JV_VIEW_ITEMS,
    JV_VIEW_KEYS,
    JV_VIEW_VALUES,
} jv_view;

struct jv_list {
    jv *v;
    size_t n, cap;
    bool tuple; /* printed as (a, b) */
    jv_view view;
};

struct jv_dict {
    jv *keys, *vals; /* in insertion order */
    size_t n, cap;
    bool ns; /* a namespace(): attributes may be assigned */
};

typedef struct jj_node jj_node;
typedef struct jj_ev jj_ev;
typedef struct jj_args jj_args;

typedef jv (*jv_builtin_fn)(jj_ev *ev, const jj_node *at, jj_args *a);

struct jv_func {
    const char *name;
    jv_builtin_fn builtin;  /* a global function, or NULL for a macro */
    const jj_node *macro;   /* the macro's definition */
    const jj_node *caller;  /* for `caller`: the call block whose body it renders */
    struct jj_frame *frame; /* the scope the body runs in (call blocks) */
};

/* Arguments of a call: positional values and keyword values. */
struct jj_args {
    jv *pos;
    size_t n_pos;
    const char **kw_names;
    jv *kw;
    size_t n_kw;
};

static inline jv jv_undef(const char *name) {
    jv v = {.k = JV_UNDEF};
    v.s.p = name;
    v.s.n = 0;
    return v;
}
static inline jv jv_none(void) { return (jv){.k = JV_NONE}; }
static inline jv jv_bool(bool b) {
    jv v = {.k = JV_BOOL};
    v.b = b;
    return v;
}
static inline jv jv_int(int64_t i) {
    jv v = {.k = JV_INT};
    v.i = i;
    return v;
}
static inline jv jv_float(double f) {
    jv v = {.k = JV_FLOAT};
    v.f = f;
    return v;
}
static inline jv jv_str(const char *p, size_t n) {
    jv v = {.k = JV_STR};
    v.s.p = p;
    v.s.n = n;
    return v;
}

jv jv_cstr(const char *s);
jv jv_new_list(jj_state *st, size_t cap);
jv jv_new_dict(jj_state *st, size_t cap);
void jv_list_push(jj_state *st, jv_list *l, jv v);
/* Sets d[key] (replacing an equal key's value in place). */
void jv_dict_set(jj_state *st, jv_dict *d, jv key, jv val);
/* d[key] or NULL. */
jv *jv_dict_get(const jv_dict *d, jv key);
jv *jv_dict_get_str(const jv_dict *d, const char *key, size_t n);

const char *jv_kind_name(jv v);
bool jv_truthy(jv v);
/* Python's ==. */
bool jv_eq(jv a, jv b);
/* A string with a copy of p[0, n) in the arena. */
jv jv_str_copy(jj_state *st, const char *p, size_t n);

/* A growable byte buffer in the arena. */
typedef struct jj_buf {
    char *p;
    size_t n, cap;
    size_t max; /* bound on n (0: JJ_MAX_OUTPUT) */
} jj_buf;

void jj_buf_put(jj_state *st, jj_buf *b, const char *s, size_t n);
void jj_buf_puts(jj_state *st, jj_buf *b, const char *s);
void jj_buf_printf(jj_state *st, jj_buf *b, const char *fmt, ...) CLLM_PRINTF(3, 4);

/* Python's str(v) appended to b (repr for the items of lists and dicts). */
void jv_write_str(jj_state *st, jj_buf *b, jv v);
/* Python's repr(v). */
void jv_write_repr(jj_state *st, jj_buf *b, jv v);
/* str(v) as a string value (no copy for strings). */
jv jv_to_str(jj_state *st, jv v);
/* Python's repr of a float ("1.0", "1e+16", "inf"). */
void jj_format_double(char *out, size_t cap, double f);
/* json.dumps(v, ensure_ascii=ascii, indent=indent (<0: none), sort_keys);
 * separators NULL for the default. Fails on values JSON cannot hold. */
void jv_write_json(jj_state *st, jj_buf *b, jv v, int indent, bool sort_keys, bool ascii,
                   const char *item_sep, const char *key_sep, int depth);
/* Parses JSON text into a value. */
jv jv_parse_json(jj_state *st, const char *text, size_t n);

/* ---- UTF-8 strings by code point ---- */

size_t jj_utf8_len(const char *p, size_t n);
/* The byte offset of code point `i` (i <= the length). */
size_t jj_utf8_offset(const char *p, size_t n, size_t i);
/* Appends code point c as UTF-8. */
void jj_buf_put_cp(jj_state *st, jj_buf *b, uint32_t c);

/* ---- syntax tree ---- */

typedef enum jj_type {
    /* statements */
    N_BODY = 0,    /* kids: statements */
    N_TEXT,        /* lit: the text */
    N_OUT,         /* a: the expression printed */
    N_IF,          /* a: condition, b: body, c: else body or the elif's N_IF */
    N_FOR,         /* a: target, b: iterable, c: filter, d: body, e: else body; op: recursive */
    N_SET,         /* a: target (name, tuple of names, ns.attr), b: value */
    N_SETBLOCK,    /* a: target name, d: body, b: filter chain over N_NULL or NULL */
    N_MACRO,       /* name; kids: parameters (E_NAME, default in a); d: body */
    N_CALLBLOCK,   /* a: the call; kids: caller's parameters; d: body */
    N_FILTERBLOCK, /* b: filter chain over E_BODYVAL; d: body */
    N_BREAK,
    N_CONTINUE,
    /* expressions */
    E_LIT,    /* lit */
    E_NAME,   /* name */
    E_ATTR,   /* a.name */
    E_ITEM,   /* a[b] */
    E_SLICE,  /* a[b:c:d], each may be NULL */
    E_CALL,   /* a(kids; kw_names) */
    E_FILTER, /* a | name(kids; kw_names); a NULL: the body of a filter block */
    E_TEST,   /* a is [not] name(kids); op: 1 for `is not` */
    E_NOT,
    E_NEG,
    E_POS,
    E_BIN, /* a op b */
    E_AND,
    E_OR,
    E_COND, /* b if a else c (c may be NULL) */
    E_LIST, /* kids */
    E_TUPLE,
    E_DICT, /* kids: key, value, key, value ... */
} jj_type;

typedef enum jj_op {
    OP_ADD = 0,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_FLOORDIV,
    OP_MOD,
    OP_POW,
    OP_CONCAT,
    OP_EQ,
    OP_NE,
    OP_LT,
    OP_LE,
    OP_GT,
    OP_GE,
    OP_IN,
    OP_NOTIN,
} jj_op;

struct jj_node {
    jj_type type;
    int op;
    size_t at; /* source offset, for messages */
    jv lit;
    const char *name;
    jj_node *a, *b, *c, *d, *e;
    jj_node **kids;
    const char **kw_names; /* per kid: NULL for positional */
    size_t n_kids;
};

/* Parses the (normalised) source into a body; fails through st. */
jj_node *jj_parse(jj_state *st, const char *src, size_t n);

/* ---- evaluation ---- */

typedef struct jj_frame {
    struct jj_frame *parent;
    jv_dict *vars;
} jj_frame;

struct jj_ev {
    jj_state *st;
    jj_buf *out;      /* where text goes now */
    jj_frame *root;   /* the context and top-level variables */
    jv_dict *globals; /* range, namespace, ... */
    uint64_t steps;
    int call_depth;
    int loop_ctl; /* 1 break, 2 continue: pending for the innermost loop */
    int64_t now;
};

/* A render error at node `at` (its line), as jj_fail_at. */
CLLM_NORETURN void jj_eval_fail(jj_ev *ev, const jj_node *at, const char *fmt, ...)
    CLLM_PRINTF(3, 4);

jv jj_eval(jj_ev *ev, jj_frame *f, const jj_node *n);
/* Calls a function value. */
jv jj_call(jj_ev *ev, jj_frame *f, const jj_node *at, jv fn, jj_args *a);
/* Applies filter `name` to v. */
jv jj_filter(jj_ev *ev, jj_frame *f, const jj_node *at, const char *name, jv v, jj_args *a);
/* Evaluates test `name` on v. */
bool jj_test(jj_ev *ev, const jj_node *at, const char *name, jv v, jj_args *a);
/* Calls method `name` of v; *found false when v has no such method. */
jv jj_method(jj_ev *ev, const jj_node *at, jv v, const char *name, jj_args *a, bool *found);
/* Whether Jinja2 has a filter / a test of this name (the parser refuses
 * others, as Jinja2 does when it compiles a template). */
bool jj_filter_exists(const char *name);
bool jj_test_exists(const char *name);
/* Adds the global functions to d. */
void jj_add_globals(jj_ev *ev, jv_dict *d);
/* obj.name as Jinja's getattr: an item of a dict, or undefined. */
jv jj_getattr(jj_ev *ev, const jj_node *at, jv obj, const char *name);
/* obj[key] as Jinja's getitem. */
jv jj_getitem(jj_ev *ev, const jj_node *at, jv obj, jv key);
/* Iterates v (a list of items; dicts give their keys, strings their characters). */
jv_list *jj_iterate(jj_ev *ev, const jj_node *at, jv v);
/* Python's <: -1, 0, 1; fails for values of kinds that do not compare. */
int jj_compare(jj_ev *ev, const jj_node *at, jv a, jv b);
/* HTML-escapes a string as markupsafe does (& < > " '). */
jv jj_html_escape(jj_ev *ev, jv s);
/* A positional or keyword argument: a->pos[i], else the keyword `name`, else NULL. */
jv *jj_arg(jj_args *a, size_t i, const char *name);

#endif /* CLLM_TEXT_JINJA_IMPL_H */
