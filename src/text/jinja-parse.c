/*
 * Jinja lexer and parser: source text to a syntax tree (jinja-impl.h).
 *
 * The lexer follows Jinja2's with trim_blocks and lstrip_blocks on: a block
 * or comment tag eats the newline after it; the spaces and tabs between the
 * start of a line and a block or comment tag go, unless the tag opens with
 * '+'; '-' inside a tag's delimiter strips all whitespace on that side. The
 * source's line breaks become "\n" and one trailing newline is dropped, as
 * Jinja2 does. The parser follows Jinja2's grammar and precedence.
 */
#include "text/jinja-impl.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tokens ---- */

typedef enum tok_type {
    T_TEXT = 0,
    T_VAR_BEGIN,
    T_VAR_END,
    T_BLOCK_BEGIN,
    T_BLOCK_END,
    T_NAME,
    T_STRING,
    T_INT,
    T_FLOAT,
    T_OP,
    T_EOF,
} tok_type;

typedef struct tok {
    tok_type t;
    size_t at;
    const char *p; /* text, name or operator */
    size_t n;
    jv v; /* the value of a literal */
} tok;

typedef struct lexer {
    jj_state *st;
    const char *s;
    size_t n;
    tok *toks;
    size_t n_toks, cap;
} lexer;

static void emit(lexer *L, tok t) {
    if (L->n_toks == L->cap) {
        const size_t cap = L->cap ? L->cap * 2 : 256;
        L->toks = jj_grow(L->st, L->toks, L->n_toks * sizeof(tok), cap * sizeof(tok));
        L->cap = cap;
    }
    L->toks[L->n_toks++] = t;
}

/* Python's str.isspace for ASCII. */
static bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' ||
           (c >= 0x1c && c <= 0x1f);
}

static bool is_name0(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A string literal's body decoded as Python's unicode-escape does. */
static jv decode_string(lexer *L, const char *p, size_t n) {
    jj_buf b = {.max = JJ_MAX_ARENA};
    jj_buf_put(L->st, &b, "", 0);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\\' || i + 1 >= n) continue;
        jj_buf_put(L->st, &b, p + run, i - run);
        const char e = p[++i];
        run = i + 1;
        switch (e) {
        case '\n': break; /* a line continuation */
        case '\\': jj_buf_put(L->st, &b, "\\", 1); break;
        case '\'': jj_buf_put(L->st, &b, "'", 1); break;
        case '"': jj_buf_put(L->st, &b, "\"", 1); break;
        case 'a': jj_buf_put(L->st, &b, "\a", 1); break;
        case 'b': jj_buf_put(L->st, &b, "\b", 1); break;
        case 'f': jj_buf_put(L->st, &b, "\f", 1); break;
        case 'n': jj_buf_put(L->st, &b, "\n", 1); break;
        case 'r': jj_buf_put(L->st, &b, "\r", 1); break;
        case 't': jj_buf_put(L->st, &b, "\t", 1); break;
        case 'v': jj_buf_put(L->st, &b, "\v", 1); break;
        case 'x':
        case 'u':
        case 'U': {
            const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t c = 0;
            size_t k = 0;
            for (; k < digits && i + 1 + k < n && hexval(p[i + 1 + k]) >= 0; k++) {
                c = c * 16 + (uint32_t)hexval(p[i + 1 + k]);
            }
            if (k != digits || c > 0x10FFFF) {
                jj_fail(L->st, CLLM_ERR_FORMAT, "a string literal has a bad \\%c escape", e);
            }
            jj_buf_put_cp(L->st, &b, c);
            i += digits;
            run = i + 1;
            break;
        }
        default:
            if (e >= '0' && e <= '7') {
                uint32_t c = 0;
                size_t k = 0;
                for (; k < 3 && i + k < n && p[i + k] >= '0' && p[i + k] <= '7'; k++) {
                    c = c * 8 + (uint32_t)(p[i + k] - '0');
                }
                jj_buf_put_cp(L->st, &b, c);
                i += k - 1;
                run = i + 1;
            } else {
                run = i - 1; /* unknown: the backslash stays */
            }
        }
    }
    jj_buf_put(L->st, &b, p + run, n - run);
    return jv_str(b.p, b.n);
}

static const char *const k_ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                    "/",  "%",  "~",  "<",  ">",  "=",  ".", ",", ":",
                                    "|",  "(",  ")",  "[",  "]",  "{",  "}"};

/* Tokens of a tag from `p` to its end; returns the offset after the end
 * (and the whitespace the end strips). */
static size_t lex_tag(lexer *L, size_t p, bool block, size_t opened_at) {
    const char *s = L->s;
    const size_t n = L->n;
    char stack[JJ_MAX_NESTING];
    size_t depth = 0;
    for (;;) {
        while (p < n && is_ws(s[p])) p++;
        if (p >= n) {
            jj_fail_at(L->st, opened_at, "unexpected end of template: the tag is not closed");
        }
        const char end = block ? '%' : '}';
        if (depth == 0) {
            const bool minus = s[p] == '-', plus = s[p] == '+' && block;
            const size_t q = p + (minus || plus);
            if (q + 1 < n && s[q] == end && s[q + 1] == '}') {
                emit(L, (tok){.t = block ? T_BLOCK_END : T_VAR_END, .at = p});
                p = q + 2;
                if (minus) {
                    while (p < n && is_ws(s[p])) p++;
                } else if (block && !plus && p < n && s[p] == '\n') {
                    p++;
                }
                return p;
            }
        }
        const char c = s[p];
        if (is_name0(c)) {
            size_t e = p + 1;
            while (e < n && (is_name0(s[e]) || is_digit(s[e]))) e++;
            emit(L, (tok){.t = T_NAME, .at = p, .p = s + p, .n = e - p});
            p = e;
        } else if (c == '\'' || c == '"') {
            size_t e = p + 1;
            while (e < n && s[e] != c) e += s[e] == '\\' ? 2 : 1;
            if (e >= n) jj_fail_at(L->st, p, "unterminated string");
            emit(L, (tok){.t = T_STRING, .at = p, .v = decode_string(L, s + p + 1, e - p - 1)});
            p = e + 1;
        } else if (is_digit(c)) {
            size_t e = p;
            bool is_float = false;
            while (e < n && (is_digit(s[e]) || s[e] == '_')) e++;
            if (e + 1 < n && s[e] == '.' && is_digit(s[e + 1])) {
                is_float = true;
                e++;
                while (e < n && (is_digit(s[e]) || s[e] == '_')) e++;
            }
            if (e < n && (s[e] == 'e' || s[e] == 'E')) {
                size_t x = e + 1;
                if (x < n && (s[x] == '+' || s[x] == '-')) x++;
                if (x < n && is_digit(s[x])) {
                    is_float = true;
                    e = x;
                    while (e < n && is_digit(s[e])) e++;
                }
            }
            char num[64];
            size_t k = 0;
            for (size_t i = p; i < e && k + 1 < sizeof(num); i++) {
                if (s[i] != '_') num[k++] = s[i];
            }
            num[k] = '\0';
            tok t = {.t = is_float ? T_FLOAT : T_INT, .at = p};
            if (is_float) {
                t.v = jv_float(strtod(num, NULL));
            } else {
                char *endp;
                const long long v = strtoll(num, &endp, 10);
                if (v == LLONG_MAX) jj_fail_at(L->st, p, "integer literal too large");
                t.v = jv_int(v);
            }
            emit(L, t);
            p = e;
        } else {
            const char *op = NULL;
            for (size_t i = 0; i < CLLM_ARRAY_SIZE(k_ops) && !op; i++) {
                const size_t k = strlen(k_ops[i]);
                if (p + k <= n && memcmp(s + p, k_ops[i], k) == 0) op = k_ops[i];
            }
            if (!op) jj_fail_at(L->st, p, "unexpected char '%c'", c);
            if (op[0] == '(' || op[0] == '[' || op[0] == '{') {
                if (depth == sizeof(stack)) jj_fail_at(L->st, p, "brackets nest too deep");
                stack[depth++] = op[0] == '(' ? ')' : op[0] == '[' ? ']' : '}';
            } else if (op[0] == ')' || op[0] == ']' || op[0] == '}') {
                if (depth == 0) jj_fail_at(L->st, p, "unexpected '%c'", op[0]);
                if (stack[--depth] != op[0]) {
                    jj_fail_at(L->st, p, "unexpected '%c', expected '%c'", op[0], stack[depth]);
                }
            }
            emit(L, (tok){.t = T_OP, .at = p, .p = op, .n = strlen(op)});
            p += strlen(op);
        }
    }
}

static void lex(lexer *L) {
    const char *s = L->s;
    const size_t n = L->n;
    size_t pos = 0;
    for (;;) {
        /* the next tag */
        size_t t = pos;
        for (; t + 1 < n; t++) {
            if (s[t] == '{' && (s[t + 1] == '{' || s[t + 1] == '%' || s[t + 1] == '#')) break;
        }
        if (t + 1 >= n) {
            if (pos < n) emit(L, (tok){.t = T_TEXT, .at = pos, .p = s + pos, .n = n - pos});
            break;
        }
        const char kind = s[t + 1];
        const char sign = t + 2 < n && (s[t + 2] == '-' || s[t + 2] == '+') ? s[t + 2] : 0;
        size_t text_end = t;
        if (sign == '-') {
            while (text_end > pos && is_ws(s[text_end - 1])) text_end--;
        } else if (sign != '+' && kind != '{') {
            /* lstrip_blocks: only spaces between the line's start and the tag */
            size_t l = text_end;
            while (l > pos && s[l - 1] != '\n') l--;
            const bool line_start = l > pos || pos == 0 || s[pos - 1] == '\n';
            bool blank = true;
            for (size_t i = l; i < text_end && blank; i++) blank = is_ws(s[i]);
            if (line_start && blank) text_end = l;
        }
        if (text_end > pos)
            emit(L, (tok){.t = T_TEXT, .at = pos, .p = s + pos, .n = text_end - pos});
        size_t p = t + 2 + (sign != 0);
        if (kind == '#') {
            size_t e = p;
            while (e + 1 < n && !(s[e] == '#' && s[e + 1] == '}')) e++;
            if (e + 1 >= n) jj_fail_at(L->st, t, "missing end of comment tag");
            pos = e + 2;
            if (e > p && s[e - 1] == '-') {
                while (pos < n && is_ws(s[pos])) pos++;
            } else if (!(e > p && s[e - 1] == '+') && pos < n && s[pos] == '\n') {
                pos++;
            }
            continue;
        }
        const bool block = kind == '%';
        emit(L, (tok){.t = block ? T_BLOCK_BEGIN : T_VAR_BEGIN, .at = t});
        pos = lex_tag(L, p, block, t);
    }
    emit(L, (tok){.t = T_EOF, .at = n});
}

/* ---- parser ---- */

typedef struct parser {
    jj_state *st;
    tok *t;
    size_t i;
    int depth;
} parser;

static tok *cur(parser *P) { return &P->t[P->i]; }
static tok *peek(parser *P, size_t k) {
    size_t j = P->i + k;
    while (P->t[P->i].t != T_EOF && j > P->i && P->t[j - 1].t == T_EOF) j--;
    return &P->t[j];
}

static bool is_op(const tok *t, const char *op) {
    return t->t == T_OP && t->n == strlen(op) && memcmp(t->p, op, t->n) == 0;
}
static bool is_name(const tok *t, const char *name) {
    return t->t == T_NAME && t->n == strlen(name) && memcmp(t->p, name, t->n) == 0;
}

static const char *tok_desc(parser *P, const tok *t) {
    switch (t->t) {
    case T_TEXT: return "template data";
    case T_VAR_BEGIN: return "'{{'";
    case T_VAR_END: return "end of print statement";
    case T_BLOCK_BEGIN: return "'{%'";
    case T_BLOCK_END: return "end of statement block";
    case T_STRING: return "string";
    case T_INT: return "integer";
    case T_FLOAT: return "float";
    case T_EOF: return "end of template";
    case T_NAME:
    case T_OP: {
        char *d = jj_alloc(P->st, t->n + 3);
        d[0] = '\'';
        memcpy(d + 1, t->p, t->n);
        d[t->n + 1] = '\'';
        return d;
    }
    }
    return "?";
}

CLLM_NORETURN static void unexpected(parser *P, const char *wanted) {
    const tok *t = cur(P);
    jj_fail_at(P->st, t->at, "expected %s, got %s", wanted, tok_desc(P, t));
}

static void expect_op(parser *P, const char *op) {
    if (!is_op(cur(P), op)) {
        char w[8];
        snprintf(w, sizeof(w), "'%s'", op);
        unexpected(P, w);
    }
    P->i++;
}

static void expect_name(parser *P, const char *name) {
    if (!is_name(cur(P), name)) {
        char w[32];
        snprintf(w, sizeof(w), "'%s'", name);
        unexpected(P, w);
    }
    P->i++;
}

static const char *take_name(parser *P) {
    tok *t = cur(P);
    if (t->t != T_NAME) unexpected(P, "a name");
    char *s = jj_alloc(P->st, t->n + 1);
    memcpy(s, t->p, t->n);
    P->i++;
    return s;
}

static void block_end(parser *P) {
    if (cur(P)->t != T_BLOCK_END) unexpected(P, "end of statement block");
    P->i++;
}

static jj_node *node(parser *P, jj_type type, size_t at) {
    jj_node *n = jj_alloc(P->st, sizeof(*n));
    n->type = type;
    n->at = at;
    return n;
}

static void add_kid(parser *P, jj_node *n, jj_node *kid, const char *kw) {
    if ((n->n_kids & (n->n_kids - 1)) == 0) { /* 0, 1, 2, 4, ...: grow to the next power */
        const size_t cap = n->n_kids ? n->n_kids * 2 : 1;
        n->kids = jj_grow(P->st, n->kids, n->n_kids * sizeof(*n->kids), cap * sizeof(*n->kids));
        n->kw_names = jj_grow(P->st, n->kw_names, n->n_kids * sizeof(*n->kw_names),
                              cap * sizeof(*n->kw_names));
    }
    n->kids[n->n_kids] = kid;
    n->kw_names[n->n_kids] = kw;
    n->n_kids++;
}

static void enter(parser *P) {
    if (++P->depth > JJ_MAX_NESTING) {
        jj_fail_at(P->st, cur(P)->at, "the template nests deeper than %d", JJ_MAX_NESTING);
    }
}

static jj_node *parse_expr(parser *P, bool condexpr);
static jj_node *parse_unary(parser *P, bool with_filter);
static jj_node *parse_primary(parser *P);
static jj_node *parse_postfix(parser *P, jj_node *n);

static void parse_call_args(parser *P, jj_node *call) {
    expect_op(P, "(");
    while (!is_op(cur(P), ")")) {
        if (call->n_kids) {
            expect_op(P, ",");
            if (is_op(cur(P), ")")) break;
        }
        if (is_op(cur(P), "*") || is_op(cur(P), "**")) {
            jj_fail_at(P->st, cur(P)->at, "*args and **kwargs in calls are not supported");
        }
        const char *kw = NULL;
        if (cur(P)->t == T_NAME && is_op(peek(P, 1), "=")) {
            kw = take_name(P);
            P->i++;
        }
        add_kid(P, call, parse_expr(P, true), kw);
    }
    P->i++;
}

/* A tuple of expressions when commas follow (for, set, parentheses). */
static jj_node *parse_tuple(parser *P, bool condexpr, bool names_only) {
    const size_t at = cur(P)->at;
    jj_node *first = names_only ? parse_primary(P) : parse_expr(P, condexpr);
    if (!is_op(cur(P), ",")) return first;
    jj_node *t = node(P, E_TUPLE, at);
    add_kid(P, t, first, NULL);
    while (is_op(cur(P), ",")) {
        P->i++;
        const tok *c = cur(P);
        if (c->t == T_BLOCK_END || c->t == T_VAR_END || is_op(c, ")") || is_op(c, "=") ||
            is_name(c, "in")) {
            break;
        }
        add_kid(P, t, names_only ? parse_primary(P) : parse_expr(P, condexpr), NULL);
    }
    return t;
}

static jj_node *parse_primary(parser *P) {
    tok *t = cur(P);
    jj_node *n;
    enter(P);
    if (t->t == T_NAME) {
        P->i++;
        if (is_name(t, "true") || is_name(t, "True")) {
            n = node(P, E_LIT, t->at);
            n->lit = jv_bool(true);
        } else if (is_name(t, "false") || is_name(t, "False")) {
            n = node(P, E_LIT, t->at);
            n->lit = jv_bool(false);
        } else if (is_name(t, "none") || is_name(t, "None")) {
            n = node(P, E_LIT, t->at);
            n->lit = jv_none();
        } else {
            n = node(P, E_NAME, t->at);
            char *s = jj_alloc(P->st, t->n + 1);
            memcpy(s, t->p, t->n);
            n->name = s;
        }
    } else if (t->t == T_STRING) {
        n = node(P, E_LIT, t->at);
        n->lit = t->v;
        P->i++;
        while (cur(P)->t == T_STRING) { /* adjacent literals join */
            const jv more = cur(P)->v;
            char *s = jj_alloc(P->st, n->lit.s.n + more.s.n + 1);
            memcpy(s, n->lit.s.p, n->lit.s.n);
            memcpy(s + n->lit.s.n, more.s.p, more.s.n);
            n->lit = jv_str(s, n->lit.s.n + more.s.n);
            P->i++;
        }
    } else if (t->t == T_INT || t->t == T_FLOAT) {
        n = node(P, E_LIT, t->at);
        n->lit = t->v;
        P->i++;
    } else if (is_op(t, "(")) {
        P->i++;
        if (is_op(cur(P), ")")) {
            P->i++;
            n = node(P, E_TUPLE, t->at);
        } else {
            n = parse_tuple(P, true, false);
            if (n->type == E_TUPLE) n->at = t->at;
            expect_op(P, ")");
        }
    } else if (is_op(t, "[")) {
        P->i++;
        n = node(P, E_LIST, t->at);
        while (!is_op(cur(P), "]")) {
            if (n->n_kids) {
                expect_op(P, ",");
                if (is_op(cur(P), "]")) break;
            }
            add_kid(P, n, parse_expr(P, true), NULL);
        }
        P->i++;
    } else if (is_op(t, "{")) {
        P->i++;
        n = node(P, E_DICT, t->at);
        while (!is_op(cur(P), "}")) {
            if (n->n_kids) {
                expect_op(P, ",");
                if (is_op(cur(P), "}")) break;
            }
            add_kid(P, n, parse_expr(P, true), NULL);
            expect_op(P, ":");
            add_kid(P, n, parse_expr(P, true), NULL);
        }
        P->i++;
    } else {
        jj_fail_at(P->st, t->at, "unexpected %s", tok_desc(P, t));
    }
    P->depth--;
    return n;
}

static jj_node *parse_subscript_part(parser *P) {
    if (is_op(cur(P), ":") || is_op(cur(P), "]") || is_op(cur(P), ",")) return NULL;
    return parse_expr(P, true);
}

static jj_node *parse_postfix(parser *P, jj_node *n) {
    for (;;) {
        tok *t = cur(P);
        if (is_op(t, ".")) {
            P->i++;
            tok *a = cur(P);
            if (a->t == T_INT) {
                jj_node *g = node(P, E_ITEM, t->at);
                g->a = n;
                g->b = node(P, E_LIT, a->at);
                g->b->lit = a->v;
                P->i++;
                n = g;
            } else {
                jj_node *g = node(P, E_ATTR, t->at);
                g->a = n;
                g->name = take_name(P);
                n = g;
            }
        } else if (is_op(t, "[")) {
            P->i++;
            jj_node *start = parse_subscript_part(P);
            if (is_op(cur(P), ":")) {
                jj_node *g = node(P, E_SLICE, t->at);
                g->a = n;
                g->b = start;
                P->i++;
                g->c = parse_subscript_part(P);
                if (is_op(cur(P), ":")) {
                    P->i++;
                    g->d = parse_subscript_part(P);
                }
                n = g;
            } else {
                if (!start) unexpected(P, "an index");
                jj_node *g = node(P, E_ITEM, t->at);
                g->a = n;
                g->b = start;
                if (is_op(cur(P), ",")) { /* a[x, y]: a tuple key */
                    jj_node *tu = node(P, E_TUPLE, t->at);
                    add_kid(P, tu, start, NULL);
                    while (is_op(cur(P), ",")) {
                        P->i++;
                        if (is_op(cur(P), "]")) break;
                        add_kid(P, tu, parse_expr(P, true), NULL);
                    }
                    g->b = tu;
                }
                n = g;
            }
            expect_op(P, "]");
        } else if (is_op(t, "(")) {
            jj_node *c = node(P, E_CALL, t->at);
            c->a = n;
            parse_call_args(P, c);
            n = c;
        } else {
            return n;
        }
    }
}

static const char *dotted_name(parser *P) {
    const char *name = take_name(P);
    while (is_op(cur(P), ".") && peek(P, 1)->t == T_NAME) {
        P->i++;
        const char *more = take_name(P);
        const size_t a = strlen(name), b = strlen(more);
        char *s = jj_alloc(P->st, a + b + 2);
        memcpy(s, name, a);
        s[a] = '.';
        memcpy(s + a + 1, more, b);
        name = s;
    }
    return name;
}

static jj_node *parse_filter(parser *P, jj_node *input, size_t at) {
    jj_node *f = node(P, E_FILTER, at);
    f->a = input;
    const size_t name_at = cur(P)->at;
    f->name = dotted_name(P);
    f->at = name_at;
    if (is_op(cur(P), "(")) parse_call_args(P, f);
    return f;
}

static jj_node *parse_filter_expr(parser *P, jj_node *n) {
    for (;;) {
        tok *t = cur(P);
        if (is_op(t, "|")) {
            P->i++;
            n = parse_filter(P, n, t->at);
        } else if (is_name(t, "is")) {
            P->i++;
            jj_node *x = node(P, E_TEST, t->at);
            x->a = n;
            if (is_name(cur(P), "not")) {
                P->i++;
                x->op = 1;
            }
            const size_t name_at = cur(P)->at;
            x->name = dotted_name(P);
            x->at = name_at;
            tok *a = cur(P);
            if (is_op(a, "(")) {
                parse_call_args(P, x);
            } else if ((a->t == T_NAME || a->t == T_STRING || a->t == T_INT || a->t == T_FLOAT ||
                        is_op(a, "[") || is_op(a, "{")) &&
                       !is_name(a, "else") && !is_name(a, "or") && !is_name(a, "and")) {
                if (is_name(a, "is")) jj_fail_at(P->st, a->at, "cannot chain tests with is");
                add_kid(P, x, parse_postfix(P, parse_primary(P)), NULL);
            }
            n = x;
        } else if (is_op(t, "(")) {
            jj_node *c = node(P, E_CALL, t->at);
            c->a = n;
            parse_call_args(P, c);
            n = c;
        } else {
            return n;
        }
    }
}

static jj_node *parse_unary(parser *P, bool with_filter) {
    tok *t = cur(P);
    jj_node *n;
    enter(P);
    if (is_op(t, "-") || is_op(t, "+")) {
        P->i++;
        n = node(P, is_op(t, "-") ? E_NEG : E_POS, t->at);
        n->a = parse_unary(P, false);
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    P->depth--;
    return n;
}

static jj_node *binary(parser *P, int op, jj_node *a, jj_node *b, size_t at) {
    jj_node *n = node(P, E_BIN, at);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jj_node *parse_pow(parser *P) {
    jj_node *n = parse_unary(P, true);
    while (is_op(cur(P), "**")) {
        const size_t at = cur(P)->at;
        P->i++;
        n = binary(P, OP_POW, n, parse_unary(P, true), at);
    }
    return n;
}

static jj_node *parse_math2(parser *P) {
    jj_node *n = parse_pow(P);
    for (;;) {
        tok *t = cur(P);
        int op = is_op(t, "*")    ? OP_MUL
                 : is_op(t, "/")  ? OP_DIV
                 : is_op(t, "//") ? OP_FLOORDIV
                 : is_op(t, "%")  ? OP_MOD
                                  : -1;
        if (op < 0) return n;
        P->i++;
        n = binary(P, op, n, parse_pow(P), t->at);
    }
}

static jj_node *parse_concat(parser *P) {
    jj_node *n = parse_math2(P);
    while (is_op(cur(P), "~")) {
        const size_t at = cur(P)->at;
        P->i++;
        n = binary(P, OP_CONCAT, n, parse_math2(P), at);
    }
    return n;
}

static jj_node *parse_math1(parser *P) {
    jj_node *n = parse_concat(P);
    for (;;) {
        tok *t = cur(P);
        int op = is_op(t, "+") ? OP_ADD : is_op(t, "-") ? OP_SUB : -1;
        if (op < 0) return n;
        P->i++;
        n = binary(P, op, n, parse_concat(P), t->at);
    }
}

static jj_node *parse_compare(parser *P) {
    jj_node *n = parse_math1(P);
    jj_node *chain = NULL; /* a < b < c: (a < b) and (b < c) */
    for (;;) {
        tok *t = cur(P);
        int op = is_op(t, "==")     ? OP_EQ
                 : is_op(t, "!=")   ? OP_NE
                 : is_op(t, "<")    ? OP_LT
                 : is_op(t, "<=")   ? OP_LE
                 : is_op(t, ">")    ? OP_GT
                 : is_op(t, ">=")   ? OP_GE
                 : is_name(t, "in") ? OP_IN
                                    : -1;
        if (op < 0 && is_name(t, "not") && is_name(peek(P, 1), "in")) {
            op = OP_NOTIN;
            P->i++;
        }
        if (op < 0) return chain ? chain : n;
        P->i++;
        jj_node *rhs = parse_math1(P);
        jj_node *cmp = binary(P, op, n, rhs, t->at);
        if (chain) {
            jj_node *both = node(P, E_AND, t->at);
            both->a = chain;
            both->b = cmp;
            chain = both;
        } else {
            chain = cmp;
        }
        n = rhs;
    }
}

static jj_node *parse_not(parser *P) {
    if (is_name(cur(P), "not")) {
        jj_node *n = node(P, E_NOT, cur(P)->at);
        P->i++;
        enter(P);
        n->a = parse_not(P);
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

static jj_node *parse_and(parser *P) {
    jj_node *n = parse_not(P);
    while (is_name(cur(P), "and")) {
        jj_node *x = node(P, E_AND, cur(P)->at);
        P->i++;
        x->a = n;
        x->b = parse_not(P);
        n = x;
    }
    return n;
}

static jj_node *parse_or(parser *P) {
    jj_node *n = parse_and(P);
    while (is_name(cur(P), "or")) {
        jj_node *x = node(P, E_OR, cur(P)->at);
        P->i++;
        x->a = n;
        x->b = parse_and(P);
        n = x;
    }
    return n;
}

static jj_node *parse_expr(parser *P, bool condexpr) {
    enter(P);
    jj_node *n = parse_or(P);
    while (condexpr && is_name(cur(P), "if")) {
        jj_node *c = node(P, E_COND, cur(P)->at);
        P->i++;
        c->b = n;
        c->a = parse_or(P);
        if (is_name(cur(P), "else")) {
            P->i++;
            c->c = parse_expr(P, true);
        }
        n = c;
    }
    P->depth--;
    return n;
}

/* ---- statements ---- */

static jj_node *parse_body(parser *P, const char *const *ends);

/* Whether the parser stands on "{% name" for one of `ends`. */
static bool at_end_tag(parser *P, const char *const *ends) {
    if (cur(P)->t != T_BLOCK_BEGIN) return false;
    for (size_t i = 0; ends && ends[i]; i++) {
        if (is_name(peek(P, 1), ends[i])) return true;
    }
    return false;
}

static jj_node *parse_assign_target(parser *P) {
    const size_t at = cur(P)->at;
    jj_node *n = parse_tuple(P, false, true);
    if (n->type == E_NAME && is_op(cur(P), ".")) { /* ns.attr */
        P->i++;
        jj_node *a = node(P, E_ATTR, at);
        a->a = n;
        a->name = take_name(P);
        return a;
    }
    if (n->type == E_TUPLE) {
        for (size_t i = 0; i < n->n_kids; i++) {
            if (n->kids[i]->type != E_NAME) jj_fail_at(P->st, at, "can't assign to this target");
        }
    } else if (n->type != E_NAME) {
        jj_fail_at(P->st, at, "can't assign to this target");
    }
    return n;
}

static jj_node *parse_if(parser *P, size_t at) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    jj_node *n = node(P, N_IF, at);
    n->a = parse_expr(P, true);
    block_end(P);
    n->b = parse_body(P, ends);
    /* on "{% elif", "{% else" or "{% endif" */
    const tok *t = peek(P, 1);
    const size_t tag_at = cur(P)->at;
    P->i += 2;
    if (is_name(t, "elif")) {
        n->c = parse_if(P, tag_at);
        return n;
    }
    if (is_name(t, "else")) {
        static const char *const endif[] = {"endif", NULL};
        block_end(P);
        n->c = parse_body(P, endif);
        P->i += 2;
    }
    block_end(P);
    return n;
}

static jj_node *parse_params(parser *P, jj_node *n) {
    expect_op(P, "(");
    while (!is_op(cur(P), ")")) {
        if (n->n_kids) expect_op(P, ",");
        jj_node *p = node(P, E_NAME, cur(P)->at);
        p->name = take_name(P);
        if (is_op(cur(P), "=")) {
            P->i++;
            p->a = parse_expr(P, true);
        }
        add_kid(P, n, p, NULL);
    }
    P->i++;
    return n;
}

static jj_node *parse_statement(parser *P) {
    const tok *open = cur(P);
    P->i++;
    const tok *t = cur(P);
    const size_t at = open->at;
    if (t->t != T_NAME) unexpected(P, "a statement name");
    P->i++;
    jj_node *n;
    if (is_name(t, "if")) return parse_if(P, at);
    if (is_name(t, "for")) {
        static const char *const ends[] = {"else", "endfor", NULL};
        static const char *const endfor[] = {"endfor", NULL};
        n = node(P, N_FOR, at);
        n->a = parse_assign_target(P);
        if (n->a->type == E_ATTR) jj_fail_at(P->st, at, "can't assign to an attribute in a loop");
        expect_name(P, "in");
        n->b = parse_tuple(P, false, false);
        if (is_name(cur(P), "if")) {
            P->i++;
            n->c = parse_expr(P, true);
        }
        if (is_name(cur(P), "recursive")) {
            P->i++;
            n->op = 1;
        }
        block_end(P);
        n->d = parse_body(P, ends);
        if (is_name(peek(P, 1), "else")) {
            P->i += 2;
            block_end(P);
            n->e = parse_body(P, endfor);
        }
        P->i += 2;
        block_end(P);
        return n;
    }
    if (is_name(t, "set")) {
        jj_node *target = parse_assign_target(P);
        if (is_op(cur(P), "=")) {
            P->i++;
            n = node(P, N_SET, at);
            n->a = target;
            n->b = parse_tuple(P, true, false);
            block_end(P);
            return n;
        }
        static const char *const ends[] = {"endset", NULL};
        if (target->type != E_NAME) jj_fail_at(P->st, at, "a block set assigns one name");
        n = node(P, N_SETBLOCK, at);
        n->a = target;
        while (is_op(cur(P), "|")) {
            const size_t f_at = cur(P)->at;
            P->i++;
            n->b = parse_filter(P, n->b, f_at);
        }
        block_end(P);
        n->d = parse_body(P, ends);
        P->i += 2;
        block_end(P);
        return n;
    }
    if (is_name(t, "macro")) {
        static const char *const ends[] = {"endmacro", NULL};
        n = node(P, N_MACRO, at);
        n->name = take_name(P);
        parse_params(P, n);
        block_end(P);
        n->d = parse_body(P, ends);
        P->i += 2;
        if (cur(P)->t == T_NAME) P->i++; /* {% endmacro name %} */
        block_end(P);
        return n;
    }
    if (is_name(t, "call")) {
        static const char *const ends[] = {"endcall", NULL};
        n = node(P, N_CALLBLOCK, at);
        if (is_op(cur(P), "(")) parse_params(P, n);
        n->a = parse_expr(P, true);
        if (n->a->type != E_CALL) jj_fail_at(P->st, at, "expected a call after {%% call %%}");
        block_end(P);
        n->d = parse_body(P, ends);
        P->i += 2;
        block_end(P);
        return n;
    }
    if (is_name(t, "filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        n = node(P, N_FILTERBLOCK, at);
        n->b = parse_filter(P, NULL, cur(P)->at);
        while (is_op(cur(P), "|")) {
            const size_t f_at = cur(P)->at;
            P->i++;
            n->b = parse_filter(P, n->b, f_at);
        }
        block_end(P);
        n->d = parse_body(P, ends);
        P->i += 2;
        block_end(P);
        return n;
    }
    if (is_name(t, "break") || is_name(t, "continue")) {
        n = node(P, is_name(t, "break") ? N_BREAK : N_CONTINUE, at);
        block_end(P);
        return n;
    }
    if (is_name(t, "generation")) { /* Hugging Face's marker of assistant text */
        static const char *const ends[] = {"endgeneration", NULL};
        block_end(P);
        n = parse_body(P, ends);
        P->i += 2;
        block_end(P);
        return n;
    }
    jj_fail_at(P->st, t->at, "encountered unknown tag '%.*s'", (int)t->n, t->p);
}

static jj_node *parse_body(parser *P, const char *const *ends) {
    jj_node *body = node(P, N_BODY, cur(P)->at);
    enter(P);
    for (;;) {
        tok *t = cur(P);
        if (t->t == T_EOF) {
            if (ends) {
                size_t last = 0;
                while (ends[last + 1]) last++;
                jj_fail_at(P->st, t->at, "unexpected end of template: expected '%s'", ends[last]);
            }
            break;
        }
        if (at_end_tag(P, ends)) break;
        if (t->t == T_TEXT) {
            jj_node *x = node(P, N_TEXT, t->at);
            x->lit = jv_str(t->p, t->n);
            add_kid(P, body, x, NULL);
            P->i++;
        } else if (t->t == T_VAR_BEGIN) {
            P->i++;
            jj_node *x = node(P, N_OUT, t->at);
            x->a = parse_tuple(P, true, false);
            if (cur(P)->t != T_VAR_END) unexpected(P, "end of print statement");
            P->i++;
            add_kid(P, body, x, NULL);
        } else if (t->t == T_BLOCK_BEGIN) {
            const tok *name = peek(P, 1);
            if (name->t == T_NAME && name->n > 3 && memcmp(name->p, "end", 3) == 0) {
                jj_fail_at(P->st, name->at, "unexpected '%.*s'", (int)name->n, name->p);
            }
            if (is_name(name, "elif") || is_name(name, "else")) {
                jj_fail_at(P->st, name->at, "unexpected '%.*s'", (int)name->n, name->p);
            }
            add_kid(P, body, parse_statement(P), NULL);
        } else {
            unexpected(P, "template data or a tag");
        }
    }
    P->depth--;
    return body;
}

/*
 * Jinja2 refuses a template that names an unknown filter or test when it
 * compiles it, except inside an if statement or an inline if (its "soft"
 * frames, which a loop, macro or block inside them leaves): there the error
 * waits until the filter runs. `soft` follows the same rule.
 */
static void check_names(jj_state *st, const jj_node *n, bool soft) {
    if (!n) return;
    if (n->type == E_FILTER && !soft && !jj_filter_exists(n->name)) {
        jj_fail_at(st, n->at, "no filter named '%s'", n->name);
    }
    if (n->type == E_TEST && !soft && !jj_test_exists(n->name)) {
        jj_fail_at(st, n->at, "no test named '%s'", n->name);
    }
    bool kids_soft = soft, body_soft = soft;
    switch (n->type) {
    case N_IF:
    case E_COND: kids_soft = body_soft = true; break;
    case N_FOR:
    case N_MACRO:
    case N_CALLBLOCK:
    case N_FILTERBLOCK:
    case N_SETBLOCK: body_soft = false; break;
    default: break;
    }
    const bool for_inner = n->type == N_FOR;
    check_names(st, n->a, kids_soft);
    check_names(st, n->b, kids_soft);
    check_names(st, n->c, for_inner ? body_soft : kids_soft);
    check_names(st, n->d, n->type == E_SLICE ? kids_soft : body_soft);
    check_names(st, n->e, body_soft);
    for (size_t i = 0; i < n->n_kids; i++) {
        check_names(st, n->kids[i], n->type == N_MACRO ? body_soft : kids_soft);
    }
}

jj_node *jj_parse(jj_state *st, const char *src, size_t n) {
    lexer L = {.st = st, .s = src, .n = n};
    lex(&L);
    parser P = {.st = st, .t = L.toks};
    jj_node *body = parse_body(&P, NULL);
    check_names(st, body, false);
    return body;
}
