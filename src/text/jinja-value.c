/* Jinja values: the arena, errors, Python's str/repr, JSON in and out. */
#include "text/jinja-impl.h"
#include "core/hostmem.h"

#include <math.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena and errors ---- */

struct jj_chunk {
    jj_chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

#define JJ_CHUNK_MIN (64u << 10)

void jj_fail(jj_state *st, cllm_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->msg, sizeof(st->msg), fmt, ap);
    va_end(ap);
    st->status = status;
    longjmp(st->jump, 1);
}

void jj_fail_at(jj_state *st, size_t at, const char *fmt, ...) {
    int line = 1, col = 1;
    for (size_t i = 0; i < at && i < st->src_len; i++) {
        if (st->src[i] == '\n') {
            line++;
            col = 1;
        } else if (((unsigned char)st->src[i] & 0xC0) != 0x80) {
            col++;
        }
    }
    char what[448];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    snprintf(st->msg, sizeof(st->msg), "line %d, column %d: %s", line, col, what);
    st->status = CLLM_ERR_FORMAT;
    longjmp(st->jump, 1);
}

void *jj_alloc(jj_state *st, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n > JJ_MAX_ARENA || st->used + n > JJ_MAX_ARENA) {
        jj_fail(st, CLLM_ERR_TOO_LARGE, "the template needs more than %u MiB of memory",
                JJ_MAX_ARENA >> 20);
    }
    jj_chunk *c = st->chunks;
    if (!c || c->size - c->used < n) {
        const size_t size = n > JJ_CHUNK_MIN ? n : JJ_CHUNK_MIN;
        c = cllm_malloc(sizeof(*c) + size);
        if (!c) jj_fail(st, CLLM_ERR_NOMEM, "out of host memory");
        c->size = size;
        c->used = 0;
        c->next = st->chunks;
        st->chunks = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    st->used += n;
    memset(p, 0, n);
    return p;
}

void *jj_grow(jj_state *st, const void *p, size_t n, size_t m) {
    void *q = jj_alloc(st, m);
    if (n) memcpy(q, p, n < m ? n : m);
    return q;
}

void jj_arena_free(jj_state *st) {
    while (st->chunks) {
        jj_chunk *next = st->chunks->next;
        cllm_free(st->chunks);
        st->chunks = next;
    }
    st->used = 0;
}

/* ---- buffers ---- */

void jj_buf_put(jj_state *st, jj_buf *b, const char *s, size_t n) {
    const size_t max = b->max ? b->max : JJ_MAX_OUTPUT;
    if (n > max || b->n + n > max) {
        jj_fail(st, CLLM_ERR_TOO_LARGE, "the rendered text exceeds %zu bytes", max);
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->n + n + 1) cap *= 2;
        b->p = jj_grow(st, b->p, b->n, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

void jj_buf_puts(jj_state *st, jj_buf *b, const char *s) { jj_buf_put(st, b, s, strlen(s)); }

void jj_buf_printf(jj_state *st, jj_buf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    CLLM_ASSERT(n >= 0 && (size_t)n < sizeof(tmp));
    jj_buf_put(st, b, tmp, (size_t)n);
}

void jj_buf_put_cp(jj_state *st, jj_buf *b, uint32_t c) {
    char u[4];
    size_t n;
    if (c < 0x80) {
        u[0] = (char)c;
        n = 1;
    } else if (c < 0x800) {
        u[0] = (char)(0xC0 | (c >> 6));
        u[1] = (char)(0x80 | (c & 0x3F));
        n = 2;
    } else if (c < 0x10000) {
        u[0] = (char)(0xE0 | (c >> 12));
        u[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        u[2] = (char)(0x80 | (c & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (c >> 18));
        u[1] = (char)(0x80 | ((c >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((c >> 6) & 0x3F));
        u[3] = (char)(0x80 | (c & 0x3F));
        n = 4;
    }
    jj_buf_put(st, b, u, n);
}

size_t jj_utf8_len(const char *p, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)p[i] & 0xC0) != 0x80;
    return k;
}

size_t jj_utf8_offset(const char *p, size_t n, size_t i) {
    size_t k = 0, at = 0;
    for (; at < n; at++) {
        if (((unsigned char)p[at] & 0xC0) != 0x80) {
            if (k == i) return at;
            k++;
        }
    }
    return n;
}

/* ---- values ---- */

jv jv_cstr(const char *s) { return jv_str(s, strlen(s)); }

jv jv_str_copy(jj_state *st, const char *p, size_t n) {
    char *q = jj_alloc(st, n + 1);
    if (n) memcpy(q, p, n);
    return jv_str(q, n);
}

jv jv_new_list(jj_state *st, size_t cap) {
    jv v = {.k = JV_LIST};
    v.l = jj_alloc(st, sizeof(*v.l));
    if (cap) {
        v.l->v = jj_alloc(st, cap * sizeof(jv));
        v.l->cap = cap;
    }
    return v;
}

jv jv_new_dict(jj_state *st, size_t cap) {
    jv v = {.k = JV_DICT};
    v.d = jj_alloc(st, sizeof(*v.d));
    if (cap) {
        v.d->keys = jj_alloc(st, cap * sizeof(jv));
        v.d->vals = jj_alloc(st, cap * sizeof(jv));
        v.d->cap = cap;
    }
    return v;
}

void jv_list_push(jj_state *st, jv_list *l, jv v) {
    if (l->n == l->cap) {
        const size_t cap = l->cap ? l->cap * 2 : 4;
        l->v = jj_grow(st, l->v, l->n * sizeof(jv), cap * sizeof(jv));
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

jv *jv_dict_get(const jv_dict *d, jv key) {
    for (size_t i = 0; i < d->n; i++) {
        if (jv_eq(d->keys[i], key)) return &d->vals[i];
    }
    return NULL;
}

jv *jv_dict_get_str(const jv_dict *d, const char *key, size_t n) {
    for (size_t i = 0; i < d->n; i++) {
        const jv k = d->keys[i];
        if (k.k == JV_STR && k.s.n == n && memcmp(k.s.p, key, n) == 0) return &d->vals[i];
    }
    return NULL;
}

void jv_dict_set(jj_state *st, jv_dict *d, jv key, jv val) {
    jv *have = jv_dict_get(d, key);
    if (have) {
        *have = val;
        return;
    }
    if (d->n == d->cap) {
        const size_t cap = d->cap ? d->cap * 2 : 4;
        d->keys = jj_grow(st, d->keys, d->n * sizeof(jv), cap * sizeof(jv));
        d->vals = jj_grow(st, d->vals, d->n * sizeof(jv), cap * sizeof(jv));
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
}

const char *jv_kind_name(jv v) {
    switch (v.k) {
    case JV_UNDEF: return "undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST:
        switch (v.l->view) {
        case JV_VIEW_GENERATOR: return "generator";
        case JV_VIEW_REVERSED: return "list_reverseiterator";
        case JV_VIEW_ITEMS: return "dict_items";
        case JV_VIEW_KEYS: return "dict_keys";
        case JV_VIEW_VALUES: return "dict_values";
        default: return v.l->tuple ? "tuple" : "list";
        }
    case JV_DICT: return v.d->ns ? "Namespace" : "dict";
    case JV_FUNC: return "function";
    }
    return "?";
}

bool jv_truthy(jv v) {
    switch (v.k) {
    case JV_UNDEF:
    case JV_NONE: return false;
    case JV_BOOL: return v.b;
    case JV_INT: return v.i != 0;
    case JV_FLOAT: return v.f != 0.0;
    case JV_STR: return v.s.n != 0;
    case JV_LIST:
        return v.l->view == JV_VIEW_GENERATOR || v.l->view == JV_VIEW_REVERSED || v.l->n != 0;
    case JV_DICT: return v.d->ns || v.d->n != 0;
    case JV_FUNC: return true;
    }
    return false;
}

static bool is_num(jv v) { return v.k == JV_BOOL || v.k == JV_INT || v.k == JV_FLOAT; }

static double num_of(jv v) {
    return v.k == JV_FLOAT ? v.f : v.k == JV_INT ? (double)v.i : (double)v.b;
}

bool jv_eq(jv a, jv b) {
    if (is_num(a) && is_num(b)) {
        if (a.k != JV_FLOAT && b.k != JV_FLOAT) {
            const int64_t x = a.k == JV_INT ? a.i : a.b, y = b.k == JV_INT ? b.i : b.b;
            return x == y;
        }
        return num_of(a) == num_of(b);
    }
    if (a.k != b.k) return false;
    switch (a.k) {
    case JV_UNDEF:
    case JV_NONE: return true;
    case JV_STR: return a.s.n == b.s.n && (a.s.n == 0 || memcmp(a.s.p, b.s.p, a.s.n) == 0);
    case JV_LIST:
        if (a.l->n != b.l->n) return false;
        for (size_t i = 0; i < a.l->n; i++) {
            if (!jv_eq(a.l->v[i], b.l->v[i])) return false;
        }
        return true;
    case JV_DICT:
        if (a.d == b.d) return true;
        if (a.d->ns || b.d->ns || a.d->n != b.d->n) return false;
        for (size_t i = 0; i < a.d->n; i++) {
            const jv *o = jv_dict_get(b.d, a.d->keys[i]);
            if (!o || !jv_eq(a.d->vals[i], *o)) return false;
        }
        return true;
    case JV_FUNC: return a.fn == b.fn;
    default: return false;
    }
}

/* ---- str and repr ---- */

void jj_format_double(char *out, size_t cap, double f) {
    if (isnan(f)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(out, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    /* the shortest digits that read back as f, as Python's repr */
    char e[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    /* e: [-]d[.ddd]e[+-]xx */
    const bool neg = e[0] == '-';
    const char *p = e + neg;
    char digits[24];
    size_t nd = 0;
    for (; *p && *p != 'e'; p++) {
        if (*p != '.') digits[nd++] = *p;
    }
    const int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    size_t o = 0;
    char buf[64];
    if (neg) buf[o++] = '-';
    if (exp < -4 || exp >= 16) {
        buf[o++] = digits[0];
        if (nd > 1) {
            buf[o++] = '.';
            memcpy(buf + o, digits + 1, nd - 1);
            o += nd - 1;
        }
        o += (size_t)snprintf(buf + o, sizeof(buf) - o, "e%c%02d", exp < 0 ? '-' : '+',
                              exp < 0 ? -exp : exp);
    } else if (exp < 0) {
        buf[o++] = '0';
        buf[o++] = '.';
        for (int i = 0; i < -exp - 1; i++) buf[o++] = '0';
        memcpy(buf + o, digits, nd);
        o += nd;
    } else {
        for (int i = 0; i <= exp; i++) buf[o++] = (size_t)i < nd ? digits[i] : '0';
        buf[o++] = '.';
        if ((size_t)exp + 1 < nd) {
            memcpy(buf + o, digits + exp + 1, nd - (size_t)exp - 1);
            o += nd - (size_t)exp - 1;
        } else {
            buf[o++] = '0';
        }
    }
    buf[o] = '\0';
    snprintf(out, cap, "%s", buf);
}

/* Python's repr of a string: single quotes unless it holds ' and no ". */
static void write_str_repr(jj_state *st, jj_buf *b, const char *p, size_t n) {
    const bool has_sq = memchr(p, '\'', n) != NULL, has_dq = memchr(p, '"', n) != NULL;
    const char q = has_sq && !has_dq ? '"' : '\'';
    jj_buf_put(st, b, &q, 1);
    size_t run = 0; /* bytes copied as they are */
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)p[i];
        const char *esc = NULL;
        char hex[8];
        if (c == '\\') {
            esc = "\\\\";
        } else if (c == (unsigned char)q) {
            esc = q == '\'' ? "\\'" : "\\\"";
        } else if (c == '\n') {
            esc = "\\n";
        } else if (c == '\r') {
            esc = "\\r";
        } else if (c == '\t') {
            esc = "\\t";
        } else if (c < 0x20 || c == 0x7F) {
            snprintf(hex, sizeof(hex), "\\x%02x", c);
            esc = hex;
        }
        if (esc) {
            jj_buf_put(st, b, p + run, i - run);
            jj_buf_puts(st, b, esc);
            run = i + 1;
        }
    }
    jj_buf_put(st, b, p + run, n - run);
    jj_buf_put(st, b, &q, 1);
}

static void write_value(jj_state *st, jj_buf *b, jv v, bool repr, int depth) {
    char num[40];
    if (depth > JJ_MAX_NESTING) jj_fail(st, CLLM_ERR_TOO_LARGE, "a value nests too deep to print");
    switch (v.k) {
    case JV_UNDEF:
        if (repr) jj_buf_puts(st, b, "Undefined");
        return;
    case JV_NONE: jj_buf_puts(st, b, "None"); return;
    case JV_BOOL: jj_buf_puts(st, b, v.b ? "True" : "False"); return;
    case JV_INT: jj_buf_printf(st, b, "%lld", (long long)v.i); return;
    case JV_FLOAT:
        jj_format_double(num, sizeof(num), v.f);
        jj_buf_puts(st, b, num);
        return;
    case JV_STR:
        if (repr) {
            write_str_repr(st, b, v.s.p, v.s.n);
        } else {
            jj_buf_put(st, b, v.s.p, v.s.n);
        }
        return;
    case JV_LIST:
        if (v.l->view == JV_VIEW_GENERATOR || v.l->view == JV_VIEW_REVERSED) {
            jj_buf_printf(st, b, "<%s object>", jv_kind_name(v));
            return;
        }
        if (v.l->view) jj_buf_printf(st, b, "%s(", jv_kind_name(v));
        jj_buf_puts(st, b, v.l->tuple ? "(" : "[");
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) jj_buf_puts(st, b, ", ");
            write_value(st, b, v.l->v[i], true, depth + 1);
        }
        if (v.l->tuple && v.l->n == 1) jj_buf_puts(st, b, ",");
        jj_buf_puts(st, b, v.l->tuple ? ")" : "]");
        if (v.l->view) jj_buf_puts(st, b, ")");
        return;
    case JV_DICT:
        if (v.d->ns) {
            jj_buf_puts(st, b, "<Namespace ");
        } else {
            jj_buf_puts(st, b, "{");
        }
        for (size_t i = 0; i < v.d->n; i++) {
            if (i) jj_buf_puts(st, b, ", ");
            if (v.d->ns) {
                write_value(st, b, v.d->keys[i], false, depth + 1);
                jj_buf_puts(st, b, "=");
            } else {
                write_value(st, b, v.d->keys[i], true, depth + 1);
                jj_buf_puts(st, b, ": ");
            }
            write_value(st, b, v.d->vals[i], true, depth + 1);
        }
        jj_buf_puts(st, b, v.d->ns ? ">" : "}");
        return;
    case JV_FUNC: jj_buf_printf(st, b, "<function %s>", v.fn->name); return;
    }
}

void jv_write_str(jj_state *st, jj_buf *b, jv v) { write_value(st, b, v, false, 0); }
void jv_write_repr(jj_state *st, jj_buf *b, jv v) { write_value(st, b, v, true, 0); }

jv jv_to_str(jj_state *st, jv v) {
    if (v.k == JV_STR) return v;
    if (v.k == JV_UNDEF) return jv_str("", 0);
    jj_buf b = {0};
    jv_write_str(st, &b, v);
    return jv_str(b.p ? b.p : "", b.n);
}

/* ---- JSON out ---- */

/* The code point of the UTF-8 sequence at p[*i] (advancing *i); bytes that
 * are not UTF-8 come out one by one as themselves. */
static uint32_t utf8_next(const char *p, size_t n, size_t *i) {
    const unsigned char c = (unsigned char)p[*i];
    const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (len == 1 || *i + len > n) {
        (*i)++;
        return c;
    }
    uint32_t cp = c & (0x3F >> (len - 1));
    for (size_t k = 1; k < len; k++) cp = (cp << 6) | ((unsigned char)p[*i + k] & 0x3F);
    *i += len;
    return cp;
}

static void json_quote(jj_state *st, jj_buf *b, const char *p, size_t n, bool ascii) {
    jj_buf_put(st, b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)p[i];
        const char *esc = NULL;
        char hex[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(hex, sizeof(hex), "\\u%04x", c);
                esc = hex;
            }
        }
        if (!esc && ascii && c >= 0x80) { /* ensure_ascii: \uXXXX, pairs above U+FFFF */
            jj_buf_put(st, b, p + run, i - run);
            size_t j = i;
            const uint32_t cp = utf8_next(p, n, &j);
            if (cp >= 0x10000) {
                jj_buf_printf(st, b, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10),
                              0xDC00 + ((cp - 0x10000) & 0x3FF));
            } else {
                jj_buf_printf(st, b, "\\u%04x", cp);
            }
            run = j;
            i = j - 1;
            continue;
        }
        if (esc) {
            jj_buf_put(st, b, p + run, i - run);
            jj_buf_puts(st, b, esc);
            run = i + 1;
        }
    }
    jj_buf_put(st, b, p + run, n - run);
    jj_buf_put(st, b, "\"", 1);
}

static void json_newline(jj_state *st, jj_buf *b, int indent, int depth) {
    jj_buf_put(st, b, "\n", 1);
    for (int i = 0; i < indent * depth; i++) jj_buf_put(st, b, " ", 1);
}

void jv_write_json(jj_state *st, jj_buf *b, jv v, int indent, bool sort_keys, bool ascii,
                   const char *item_sep, const char *key_sep, int depth) {
    char num[40];
    if (!item_sep) item_sep = indent >= 0 ? "," : ", ";
    if (!key_sep) key_sep = ": ";
    if (depth > JJ_MAX_NESTING) jj_fail(st, CLLM_ERR_TOO_LARGE, "a value nests too deep for JSON");
    switch (v.k) {
    case JV_NONE: jj_buf_puts(st, b, "null"); return;
    case JV_BOOL: jj_buf_puts(st, b, v.b ? "true" : "false"); return;
    case JV_INT: jj_buf_printf(st, b, "%lld", (long long)v.i); return;
    case JV_FLOAT:
        if (isnan(v.f)) {
            jj_buf_puts(st, b, "NaN");
        } else if (isinf(v.f)) {
            jj_buf_puts(st, b, v.f < 0 ? "-Infinity" : "Infinity");
        } else {
            jj_format_double(num, sizeof(num), v.f);
            jj_buf_puts(st, b, num);
        }
        return;
    case JV_STR: json_quote(st, b, v.s.p, v.s.n, ascii); return;
    case JV_LIST:
        if (v.l->view) break;
        if (v.l->n == 0) {
            jj_buf_puts(st, b, "[]");
            return;
        }
        jj_buf_puts(st, b, "[");
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) jj_buf_puts(st, b, item_sep);
            if (indent >= 0) json_newline(st, b, indent, depth + 1);
            jv_write_json(st, b, v.l->v[i], indent, sort_keys, ascii, item_sep, key_sep, depth + 1);
        }
        if (indent >= 0) json_newline(st, b, indent, depth);
        jj_buf_puts(st, b, "]");
        return;
    case JV_DICT: {
        if (v.d->ns) break;
        if (v.d->n == 0) {
            jj_buf_puts(st, b, "{}");
            return;
        }
        size_t *order = jj_alloc(st, v.d->n * sizeof(size_t));
        for (size_t i = 0; i < v.d->n; i++) order[i] = i;
        if (sort_keys) { /* insertion sort by key (dicts of templates are small) */
            for (size_t i = 1; i < v.d->n; i++) {
                const size_t x = order[i];
                size_t j = i;
                while (j > 0) {
                    const jv ka = v.d->keys[order[j - 1]], kb = v.d->keys[x];
                    if (ka.k != JV_STR || kb.k != JV_STR) break;
                    const size_t m = ka.s.n < kb.s.n ? ka.s.n : kb.s.n;
                    int c = memcmp(ka.s.p, kb.s.p, m);
                    if (c == 0) c = ka.s.n < kb.s.n ? -1 : ka.s.n > kb.s.n;
                    if (c <= 0) break;
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = x;
            }
        }
        jj_buf_puts(st, b, "{");
        for (size_t i = 0; i < v.d->n; i++) {
            const jv k = v.d->keys[order[i]];
            if (i) jj_buf_puts(st, b, item_sep);
            if (indent >= 0) json_newline(st, b, indent, depth + 1);
            if (k.k == JV_STR) {
                json_quote(st, b, k.s.p, k.s.n, ascii);
            } else if (k.k == JV_INT || k.k == JV_FLOAT || k.k == JV_BOOL || k.k == JV_NONE) {
                jj_buf now = {0};
                jv_write_json(st, &now, k, -1, false, ascii, NULL, NULL, depth + 1);
                json_quote(st, b, now.p, now.n, ascii);
            } else {
                jj_fail(st, CLLM_ERR_FORMAT, "tojson: keys must be str, int, float, bool or None");
            }
            jj_buf_puts(st, b, key_sep);
            jv_write_json(st, b, v.d->vals[order[i]], indent, sort_keys, ascii, item_sep, key_sep,
                          depth + 1);
        }
        if (indent >= 0) json_newline(st, b, indent, depth);
        jj_buf_puts(st, b, "}");
        return;
    }
    default: break;
    }
    jj_fail(st, CLLM_ERR_FORMAT, "tojson: Object of type %s is not JSON serializable",
            jv_kind_name(v));
}

cllm_status cllm_jinja_json_quote(char **buf, size_t *len, size_t *cap, const char *s) {
    /* measure, then write: the escapes above, on a plain cllm_realloc buffer */
    size_t need = 2;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        need += *p == '"' || *p == '\\' || *p == '\n' || *p == '\r' || *p == '\t' || *p == '\b' ||
                        *p == '\f'
                    ? 2
                : *p < 0x20 ? 6
                            : 1;
    }
    if (*len + need + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + need + 1) c *= 2;
        char *nb = cllm_realloc(*buf, c);
        if (!nb) return cllm_error(CLLM_ERR_NOMEM, "chat: out of host memory");
        *buf = nb;
        *cap = c;
    }
    char *o = *buf + *len;
    *o++ = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': *o++ = '\\', *o++ = '"'; break;
        case '\\': *o++ = '\\', *o++ = '\\'; break;
        case '\n': *o++ = '\\', *o++ = 'n'; break;
        case '\r': *o++ = '\\', *o++ = 'r'; break;
        case '\t': *o++ = '\\', *o++ = 't'; break;
        case '\b': *o++ = '\\', *o++ = 'b'; break;
        case '\f': *o++ = '\\', *o++ = 'f'; break;
        default:
            if (*p < 0x20) {
                snprintf(o, 7, "\\u%04x", *p);
                o += 6;
            } else {
                *o++ = (char)*p;
            }
        }
    }
    *o++ = '"';
    *o = '\0';
    *len = (size_t)(o - *buf);
    return CLLM_OK;
}

/* ---- JSON in ---- */

typedef struct json_in {
    jj_state *st;
    const char *p, *end, *start;
} json_in;

CLLM_NORETURN static void json_fail(json_in *j, const char *what) {
    jj_fail(j->st, CLLM_ERR_FORMAT, "context JSON, byte %zu: %s", (size_t)(j->p - j->start), what);
}

static void json_ws(json_in *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) {
        j->p++;
    }
}

static bool json_lit(json_in *j, const char *w) {
    const size_t n = strlen(w);
    if ((size_t)(j->end - j->p) >= n && memcmp(j->p, w, n) == 0) {
        j->p += n;
        return true;
    }
    return false;
}

static uint32_t json_hex4(json_in *j) {
    if (j->end - j->p < 4) json_fail(j, "a short \\u escape");
    uint32_t c = 0;
    for (int i = 0; i < 4; i++) {
        const char h = *j->p++;
        c <<= 4;
        if (h >= '0' && h <= '9') {
            c |= (uint32_t)(h - '0');
        } else if (h >= 'a' && h <= 'f') {
            c |= (uint32_t)(h - 'a' + 10);
        } else if (h >= 'A' && h <= 'F') {
            c |= (uint32_t)(h - 'A' + 10);
        } else {
            json_fail(j, "a bad \\u escape");
        }
    }
    return c;
}

static jv json_string(json_in *j) {
    j->p++; /* the quote */
    jj_buf b = {.max = JJ_MAX_ARENA};
    jj_buf_put(j->st, &b, "", 0);
    for (;;) {
        const char *run = j->p;
        while (j->p < j->end && *j->p != '"' && *j->p != '\\' && (unsigned char)*j->p >= 0x20) {
            j->p++;
        }
        jj_buf_put(j->st, &b, run, (size_t)(j->p - run));
        if (j->p >= j->end) json_fail(j, "an unterminated string");
        const char c = *j->p++;
        if (c == '"') break;
        if (c != '\\') json_fail(j, "a control character in a string");
        if (j->p >= j->end) json_fail(j, "an unterminated string");
        const char e = *j->p++;
        switch (e) {
        case '"': jj_buf_put(j->st, &b, "\"", 1); break;
        case '\\': jj_buf_put(j->st, &b, "\\", 1); break;
        case '/': jj_buf_put(j->st, &b, "/", 1); break;
        case 'b': jj_buf_put(j->st, &b, "\b", 1); break;
        case 'f': jj_buf_put(j->st, &b, "\f", 1); break;
        case 'n': jj_buf_put(j->st, &b, "\n", 1); break;
        case 'r': jj_buf_put(j->st, &b, "\r", 1); break;
        case 't': jj_buf_put(j->st, &b, "\t", 1); break;
        case 'u': {
            uint32_t cp = json_hex4(j);
            if (cp >= 0xD800 && cp < 0xDC00 && j->end - j->p >= 6 && j->p[0] == '\\' &&
                j->p[1] == 'u') {
                const char *save = j->p;
                j->p += 2;
                const uint32_t lo = json_hex4(j);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                } else {
                    j->p = save;
                }
            }
            jj_buf_put_cp(j->st, &b, cp);
            break;
        }
        default: json_fail(j, "a bad escape");
        }
    }
    return jv_str(b.p, b.n);
}

static jv json_value(json_in *j, int depth) {
    if (depth > JJ_MAX_NESTING) json_fail(j, "nested too deep");
    json_ws(j);
    if (j->p >= j->end) json_fail(j, "a value expected");
    const char c = *j->p;
    if (c == '"') return json_string(j);
    if (c == '{') {
        j->p++;
        jv d = jv_new_dict(j->st, 0);
        json_ws(j);
        if (j->p < j->end && *j->p == '}') {
            j->p++;
            return d;
        }
        for (;;) {
            json_ws(j);
            if (j->p >= j->end || *j->p != '"') json_fail(j, "a key expected");
            const jv k = json_string(j);
            json_ws(j);
            if (j->p >= j->end || *j->p != ':') json_fail(j, "':' expected");
            j->p++;
            const jv v = json_value(j, depth + 1);
            jv_dict_set(j->st, d.d, k, v);
            json_ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == '}') {
                j->p++;
                return d;
            }
            json_fail(j, "',' or '}' expected");
        }
    }
    if (c == '[') {
        j->p++;
        jv l = jv_new_list(j->st, 0);
        json_ws(j);
        if (j->p < j->end && *j->p == ']') {
            j->p++;
            return l;
        }
        for (;;) {
            jv_list_push(j->st, l.l, json_value(j, depth + 1));
            json_ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == ']') {
                j->p++;
                return l;
            }
            json_fail(j, "',' or ']' expected");
        }
    }
    if (json_lit(j, "true")) return jv_bool(true);
    if (json_lit(j, "false")) return jv_bool(false);
    if (json_lit(j, "null")) return jv_none();
    if (c == '-' || (c >= '0' && c <= '9')) {
        const char *s = j->p;
        bool is_float = false;
        if (*j->p == '-') j->p++;
        while (j->p < j->end && ((*j->p >= '0' && *j->p <= '9') || *j->p == '.' || *j->p == 'e' ||
                                 *j->p == 'E' || *j->p == '+' || *j->p == '-')) {
            is_float |= *j->p == '.' || *j->p == 'e' || *j->p == 'E';
            j->p++;
        }
        char tmp[64];
        const size_t n = (size_t)(j->p - s);
        if (n == 0 || n >= sizeof(tmp)) json_fail(j, "a bad number");
        memcpy(tmp, s, n);
        tmp[n] = '\0';
        char *endp;
        if (!is_float) {
            const long long v = strtoll(tmp, &endp, 10);
            if (*endp == '\0' && !(v == LLONG_MAX || v == LLONG_MIN)) return jv_int(v);
        }
        const double f = strtod(tmp, &endp);
        if (*endp != '\0') json_fail(j, "a bad number");
        return jv_float(f);
    }
    json_fail(j, "a value expected");
}

jv jv_parse_json(jj_state *st, const char *text, size_t n) {
    json_in j = {.st = st, .p = text, .end = text + n, .start = text};
    const jv v = json_value(&j, 0);
    json_ws(&j);
    if (j.p != j.end) json_fail(&j, "text after the value");
    return v;
}
