/*
 * Jinja builtins: the filters and tests of Jinja2 that chat templates use,
 * the methods of Python's str, dict and list they call, and the globals
 * (range, dict, namespace, raise_exception, strftime_now). Each follows
 * Python's and Jinja2's behaviour for the arguments templates pass.
 */
#include "text/jinja-impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static jj_state *S(jj_ev *ev) { return ev->st; }

static bool is_num(jv v) { return v.k == JV_BOOL || v.k == JV_INT || v.k == JV_FLOAT; }
static int64_t ival(jv v) { return v.k == JV_INT ? v.i : v.k == JV_BOOL ? v.b : (int64_t)v.f; }

static bool streq(jv v, const char *s) {
    return v.k == JV_STR && v.s.n == strlen(s) && memcmp(v.s.p, s, v.s.n) == 0;
}

static jv arg_or(jj_args *a, size_t i, const char *name, jv dflt) {
    jv *v = jj_arg(a, i, name);
    return v ? *v : dflt;
}

static bool arg_bool(jj_args *a, size_t i, const char *name, bool dflt) {
    jv *v = jj_arg(a, i, name);
    return v ? jv_truthy(*v) : dflt;
}

static jv need_str(jj_ev *ev, const jj_node *at, jv v, const char *what) {
    if (v.k != JV_STR) jj_eval_fail(ev, at, "%s must be a string, not %s", what, jv_kind_name(v));
    return v;
}

/* ---- string helpers ---- */

static bool is_space(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' ||
           (c >= 0x1c && c <= 0x1f);
}

/* Python's str.strip(chars) (chars: ASCII whitespace when NONE). */
static jv strip(jv s, jv chars, bool left, bool right) {
    const char *p = s.s.p;
    size_t n = s.s.n;
    const bool ws = chars.k != JV_STR;
#define IN_SET(c) (ws ? is_space((unsigned char)(c)) : memchr(chars.s.p, (c), chars.s.n) != NULL)
    /* chars are matched by byte; templates strip ASCII characters */
    while (left && n > 0 && IN_SET(p[0])) p++, n--;
    while (right && n > 0 && IN_SET(p[n - 1])) n--;
#undef IN_SET
    return jv_str(p, n);
}

static bool starts_with(jv s, jv pre) {
    return pre.s.n <= s.s.n && memcmp(s.s.p, pre.s.p, pre.s.n) == 0;
}
static bool ends_with(jv s, jv suf) {
    return suf.s.n <= s.s.n && memcmp(s.s.p + s.s.n - suf.s.n, suf.s.p, suf.s.n) == 0;
}

static const char *find_sub(const char *h, size_t hn, const char *n, size_t nn) {
    if (nn == 0) return h;
    for (size_t i = 0; i + nn <= hn; i++) {
        if (h[i] == n[0] && memcmp(h + i, n, nn) == 0) return h + i;
    }
    return NULL;
}

static jv replace(jj_ev *ev, const jj_node *at, jv s, jv old, jv with, int64_t count) {
    need_str(ev, at, old, "replace's first argument");
    with = jv_to_str(S(ev), with);
    jj_buf b = {0};
    jj_buf_put(S(ev), &b, "", 0);
    if (old.s.n == 0) { /* Python inserts `with` around every character */
        const jv_list *chars = jj_iterate(ev, at, s);
        int64_t done = 0;
        for (size_t i = 0; i <= chars->n; i++) {
            if (count < 0 || done < count) {
                jj_buf_put(S(ev), &b, with.s.p, with.s.n);
                done++;
            }
            if (i < chars->n) jj_buf_put(S(ev), &b, chars->v[i].s.p, chars->v[i].s.n);
        }
        return jv_str(b.p, b.n);
    }
    const char *p = s.s.p, *end = s.s.p + s.s.n;
    int64_t done = 0;
    while (count < 0 || done < count) {
        const char *hit = find_sub(p, (size_t)(end - p), old.s.p, old.s.n);
        if (!hit) break;
        jj_buf_put(S(ev), &b, p, (size_t)(hit - p));
        jj_buf_put(S(ev), &b, with.s.p, with.s.n);
        p = hit + old.s.n;
        done++;
    }
    jj_buf_put(S(ev), &b, p, (size_t)(end - p));
    return jv_str(b.p, b.n);
}

/* ASCII case mapping; other characters stay as they are. */
static jv map_case(jj_ev *ev, jv s, int mode /* 0 lower, 1 upper, 2 capitalize, 3 str.title,
                                                4 Jinja's title */) {
    char *p = jj_alloc(S(ev), s.s.n + 1);
    bool word_start = true;
    for (size_t i = 0; i < s.s.n; i++) {
        char c = s.s.p[i];
        const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        bool up = mode == 1 || (mode == 2 && i == 0) || ((mode == 3 || mode == 4) && word_start);
        if (up && c >= 'a' && c <= 'z') c = (char)(c - 'a' + 'A');
        if (!up && c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        p[i] = c;
        if (mode == 3) {
            word_start = !alpha && !((unsigned char)c >= 0x80);
        } else if (mode == 4) {
            word_start = c == '-' || is_space((unsigned char)c) || c == '(' || c == '{' ||
                         c == '[' || c == '<';
        }
    }
    return jv_str(p, s.s.n);
}

static jv split(jj_ev *ev, const jj_node *at, jv s, jv sep, int64_t maxsplit) {
    jv out = jv_new_list(S(ev), 0);
    const char *p = s.s.p, *end = s.s.p + s.s.n;
    if (sep.k != JV_STR) { /* runs of whitespace, none empty */
        int64_t done = 0;
        for (;;) {
            while (p < end && is_space((unsigned char)*p)) p++;
            if (p >= end) break;
            if (maxsplit >= 0 && done >= maxsplit) {
                const char *e = end;
                while (e > p && is_space((unsigned char)e[-1])) e--;
                jv_list_push(S(ev), out.l, jv_str(p, (size_t)(e - p)));
                break;
            }
            const char *w = p;
            while (p < end && !is_space((unsigned char)*p)) p++;
            jv_list_push(S(ev), out.l, jv_str(w, (size_t)(p - w)));
            done++;
        }
        return out;
    }
    if (sep.s.n == 0) jj_eval_fail(ev, at, "empty separator");
    int64_t done = 0;
    for (;;) {
        const char *hit = maxsplit >= 0 && done >= maxsplit
                              ? NULL
                              : find_sub(p, (size_t)(end - p), sep.s.p, sep.s.n);
        if (!hit) {
            jv_list_push(S(ev), out.l, jv_str(p, (size_t)(end - p)));
            return out;
        }
        jv_list_push(S(ev), out.l, jv_str(p, (size_t)(hit - p)));
        p = hit + sep.s.n;
        done++;
    }
}

static jv rsplit(jj_ev *ev, const jj_node *at, jv s, jv sep, int64_t maxsplit) {
    if (maxsplit < 0 || sep.k != JV_STR) return split(ev, at, s, sep, maxsplit);
    if (sep.s.n == 0) jj_eval_fail(ev, at, "empty separator");
    jv parts = jv_new_list(S(ev), 0);
    const char *start = s.s.p, *end = s.s.p + s.s.n;
    int64_t done = 0;
    while (done < maxsplit) {
        const char *hit = NULL;
        for (const char *q = end - sep.s.n; q >= start; q--) {
            if (memcmp(q, sep.s.p, sep.s.n) == 0) {
                hit = q;
                break;
            }
        }
        if (!hit) break;
        jv_list_push(S(ev), parts.l, jv_str(hit + sep.s.n, (size_t)(end - hit - sep.s.n)));
        end = hit;
        done++;
    }
    jv_list_push(S(ev), parts.l, jv_str(start, (size_t)(end - start)));
    jv out = jv_new_list(S(ev), parts.l->n);
    for (size_t i = parts.l->n; i-- > 0;) jv_list_push(S(ev), out.l, parts.l->v[i]);
    return out;
}

/* Python's str.splitlines(). */
static jv_list *splitlines(jj_ev *ev, jv s) {
    jv out = jv_new_list(S(ev), 0);
    const char *p = s.s.p, *end = s.s.p + s.s.n, *line = p;
    while (p < end) {
        const char c = *p;
        if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) {
            jv_list_push(S(ev), out.l, jv_str(line, (size_t)(p - line)));
            p += c == '\r' && p + 1 < end && p[1] == '\n' ? 2 : 1;
            line = p;
        } else {
            p++;
        }
    }
    if (line < end) jv_list_push(S(ev), out.l, jv_str(line, (size_t)(end - line)));
    return out.l;
}

/* Python's str.format with {} {0} {name} fields (no format specs). */
static jv str_format(jj_ev *ev, const jj_node *at, jv s, jj_args *a) {
    jj_buf b = {0};
    jj_buf_put(S(ev), &b, "", 0);
    size_t auto_i = 0;
    for (size_t i = 0; i < s.s.n; i++) {
        const char c = s.s.p[i];
        if ((c == '{' || c == '}') && i + 1 < s.s.n && s.s.p[i + 1] == c) {
            jj_buf_put(S(ev), &b, &c, 1);
            i++;
            continue;
        }
        if (c == '}') jj_eval_fail(ev, at, "single '}' encountered in format string");
        if (c != '{') {
            jj_buf_put(S(ev), &b, &c, 1);
            continue;
        }
        size_t e = i + 1;
        while (e < s.s.n && s.s.p[e] != '}') e++;
        if (e >= s.s.n) jj_eval_fail(ev, at, "single '{' encountered in format string");
        const char *f = s.s.p + i + 1;
        const size_t fn = e - i - 1;
        if (memchr(f, ':', fn) || memchr(f, '!', fn)) {
            jj_eval_fail(ev, at, "format specifications in str.format are not supported");
        }
        jv v;
        if (fn == 0) {
            if (auto_i >= a->n_pos) jj_eval_fail(ev, at, "str.format: not enough arguments");
            v = a->pos[auto_i++];
        } else if (f[0] >= '0' && f[0] <= '9') {
            const size_t k = (size_t)strtoul(f, NULL, 10);
            if (k >= a->n_pos) jj_eval_fail(ev, at, "str.format: index %zu out of range", k);
            v = a->pos[k];
        } else {
            char name[64];
            snprintf(name, sizeof(name), "%.*s", (int)fn, f);
            jv *kv = jj_arg(a, SIZE_MAX, name);
            if (!kv) jj_eval_fail(ev, at, "str.format: no argument '%s'", name);
            v = *kv;
        }
        jv_write_str(S(ev), &b, v);
        i = e;
    }
    return jv_str(b.p, b.n);
}

/* Python's printf-style `fmt % args` for %s, %d, %i, %r, %f and %%. */
static jv percent_format(jj_ev *ev, const jj_node *at, jv fmt, jj_args *a) {
    jj_buf b = {0};
    jj_buf_put(S(ev), &b, "", 0);
    size_t k = 0;
    for (size_t i = 0; i < fmt.s.n; i++) {
        const char c = fmt.s.p[i];
        if (c != '%' || i + 1 >= fmt.s.n) {
            jj_buf_put(S(ev), &b, &c, 1);
            continue;
        }
        const char t = fmt.s.p[++i];
        if (t == '%') {
            jj_buf_put(S(ev), &b, "%", 1);
            continue;
        }
        if (k >= a->n_pos) jj_eval_fail(ev, at, "not enough arguments for format string");
        const jv v = a->pos[k++];
        if (t == 's') {
            jv_write_str(S(ev), &b, v);
        } else if (t == 'r') {
            jv_write_repr(S(ev), &b, v);
        } else if ((t == 'd' || t == 'i') && is_num(v)) {
            jj_buf_printf(S(ev), &b, "%lld", (long long)ival(v));
        } else if (t == 'f' && is_num(v)) {
            jj_buf_printf(S(ev), &b, "%f", v.k == JV_FLOAT ? v.f : (double)ival(v));
        } else {
            jj_eval_fail(ev, at, "unsupported format character '%c'", t);
        }
    }
    return jv_str(b.p, b.n);
}

jv jj_html_escape(jj_ev *ev, jv s) {
    jj_buf b = {0};
    jj_buf_put(S(ev), &b, "", 0);
    for (size_t i = 0; i < s.s.n; i++) {
        switch (s.s.p[i]) {
        case '&': jj_buf_puts(S(ev), &b, "&amp;"); break;
        case '<': jj_buf_puts(S(ev), &b, "&lt;"); break;
        case '>': jj_buf_puts(S(ev), &b, "&gt;"); break;
        case '"': jj_buf_puts(S(ev), &b, "&#34;"); break;
        case '\'': jj_buf_puts(S(ev), &b, "&#39;"); break;
        default: jj_buf_put(S(ev), &b, s.s.p + i, 1);
        }
    }
    return jv_str(b.p, b.n);
}

/* ---- sorting ---- */

typedef struct sort_ctx {
    jj_ev *ev;
    const jj_node *at;
    bool case_sensitive;
} sort_ctx;

static jv sort_key(sort_ctx *c, jv v) {
    if (!c->case_sensitive && v.k == JV_STR) return map_case(c->ev, v, 0);
    return v;
}

/* Stable merge sort of keys[] with values[] alongside. */
static void merge_sort(sort_ctx *c, jv *keys, jv *vals, jv *tk, jv *tv, size_t n, bool reverse) {
    if (n < 2) return;
    const size_t h = n / 2;
    merge_sort(c, keys, vals, tk, tv, h, reverse);
    merge_sort(c, keys + h, vals + h, tk, tv, n - h, reverse);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int cmp = jj_compare(c->ev, c->at, keys[j], keys[i]);
        if (reverse) cmp = -cmp;
        if (cmp < 0) {
            tk[k] = keys[j], tv[k++] = vals[j++];
        } else {
            tk[k] = keys[i], tv[k++] = vals[i++];
        }
    }
    while (i < h) tk[k] = keys[i], tv[k++] = vals[i++];
    while (j < n) tk[k] = keys[j], tv[k++] = vals[j++];
    memcpy(keys, tk, n * sizeof(jv));
    memcpy(vals, tv, n * sizeof(jv));
}

static jv sorted(jj_ev *ev, const jj_node *at, jv_list *items, jv *keys, bool reverse) {
    const size_t n = items->n;
    jv out = jv_new_list(S(ev), n);
    if (!n) return out;
    jv *vals = jj_alloc(S(ev), n * sizeof(jv));
    memcpy(vals, items->v, n * sizeof(jv));
    jv *tk = jj_alloc(S(ev), n * sizeof(jv)), *tv = jj_alloc(S(ev), n * sizeof(jv));
    sort_ctx c = {.ev = ev, .at = at, .case_sensitive = true};
    merge_sort(&c, keys, vals, tk, tv, n, reverse);
    memcpy(out.l->v, vals, n * sizeof(jv));
    out.l->n = n;
    return out;
}

/* Jinja's attribute getter: "a.b.0" as item lookups. */
static jv get_path(jj_ev *ev, const jj_node *at, jv item, jv path) {
    if (path.k == JV_INT) return jj_getitem(ev, at, item, path);
    need_str(ev, at, path, "attribute");
    const char *p = path.s.p, *end = path.s.p + path.s.n;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        const char *e = dot ? dot : end;
        jv key = jv_str(p, (size_t)(e - p));
        bool digits = e > p;
        for (const char *q = p; q < e; q++) digits &= *q >= '0' && *q <= '9';
        if (digits) key = jv_int(strtoll(p, NULL, 10));
        item = jj_getitem(ev, at, item, key);
        if (!dot) break;
        p = dot + 1;
    }
    return item;
}

/* ---- filters ---- */

static jv f_tojson(jj_ev *ev, const jj_node *at, jv v, jj_args *a) {
    (void)at;
    const jv ind = arg_or(a, 0, "indent", jv_none());
    int indent = -1;
    if (ind.k == JV_INT) indent = (int)(ind.i < 0 ? 0 : ind.i > 64 ? 64 : ind.i);
    const char *item_sep = NULL, *key_sep = NULL;
    const jv seps = arg_or(a, SIZE_MAX, "separators", jv_none());
    if (seps.k == JV_LIST && seps.l->n == 2 && seps.l->v[0].k == JV_STR &&
        seps.l->v[1].k == JV_STR) {
        item_sep = jv_str_copy(S(ev), seps.l->v[0].s.p, seps.l->v[0].s.n).s.p;
        key_sep = jv_str_copy(S(ev), seps.l->v[1].s.p, seps.l->v[1].s.n).s.p;
    }
    jj_buf b = {0};
    jj_buf_put(S(ev), &b, "", 0);
    jv_write_json(S(ev), &b, v, indent, arg_bool(a, SIZE_MAX, "sort_keys", false),
                  arg_bool(a, SIZE_MAX, "ensure_ascii", false), item_sep, key_sep, 0);
    return jv_str(b.p, b.n);
}

static int64_t length_of(jj_ev *ev, const jj_node *at, jv v) {
    switch (v.k) {
    case JV_UNDEF: return 0;
    case JV_STR: return (int64_t)jj_utf8_len(v.s.p, v.s.n);
    case JV_LIST:
        if (v.l->view == JV_VIEW_GENERATOR || v.l->view == JV_VIEW_REVERSED) break;
        return (int64_t)v.l->n;
    case JV_DICT: return (int64_t)v.d->n;
    default: break;
    }
    jj_eval_fail(ev, at, "object of type '%s' has no len()", jv_kind_name(v));
}

static jv items_of(jj_ev *ev, const jj_node *at, jv v, jv_view view) {
    if (v.k == JV_UNDEF) return jv_new_list(S(ev), 0);
    if (v.k != JV_DICT || v.d->ns) jj_eval_fail(ev, at, "can only get item pairs from a mapping");
    jv out = jv_new_list(S(ev), v.d->n);
    out.l->view = view;
    for (size_t i = 0; i < v.d->n; i++) {
        jv pair = jv_new_list(S(ev), 2);
        pair.l->tuple = true;
        jv_list_push(S(ev), pair.l, v.d->keys[i]);
        jv_list_push(S(ev), pair.l, v.d->vals[i]);
        jv_list_push(S(ev), out.l, pair);
    }
    return out;
}

/* select / reject / selectattr / rejectattr */
static jv select_items(jj_ev *ev, const jj_node *at, jv v, jj_args *a, bool by_attr, bool keep) {
    /* Jinja2 iterates only a true value: none selects nothing */
    const jv_list *items = jv_truthy(v) ? jj_iterate(ev, at, v) : jv_new_list(S(ev), 0).l;
    size_t first = 0;
    jv attr = jv_none();
    if (by_attr) {
        if (a->n_pos < 1) jj_eval_fail(ev, at, "selectattr needs an attribute");
        attr = a->pos[0];
        first = 1;
    }
    const char *test = NULL;
    jj_args targs = {0};
    if (a->n_pos > first) {
        const jv t = need_str(ev, at, a->pos[first], "the test name");
        test = jv_str_copy(S(ev), t.s.p, t.s.n).s.p;
        targs.pos = a->pos + first + 1;
        targs.n_pos = a->n_pos - first - 1;
    }
    jv out = jv_new_list(S(ev), 0);
    for (size_t i = 0; i < items->n; i++) {
        const jv x = by_attr ? get_path(ev, at, items->v[i], attr) : items->v[i];
        const bool ok = test ? jj_test(ev, at, test, x, &targs) : jv_truthy(x);
        if (ok == keep) jv_list_push(S(ev), out.l, items->v[i]);
    }
    out.l->view = JV_VIEW_GENERATOR;
    return out;
}

static jv f_map(jj_ev *ev, jj_frame *f, const jj_node *at, jv v, jj_args *a) {
    const jv_list *items = jv_truthy(v) ? jj_iterate(ev, at, v) : jv_new_list(S(ev), 0).l;
    jv out = jv_new_list(S(ev), items->n);
    out.l->view = JV_VIEW_GENERATOR;
    jv *attr = jj_arg(a, SIZE_MAX, "attribute");
    if (attr) {
        const jv dflt = arg_or(a, SIZE_MAX, "default", jv_undef(NULL));
        for (size_t i = 0; i < items->n; i++) {
            jv x = get_path(ev, at, items->v[i], *attr);
            if (x.k == JV_UNDEF && dflt.k != JV_UNDEF) x = dflt;
            jv_list_push(S(ev), out.l, x);
        }
        return out;
    }
    if (a->n_pos < 1) jj_eval_fail(ev, at, "map needs a filter name or attribute=");
    const jv name = need_str(ev, at, a->pos[0], "map's filter name");
    const char *fname = jv_str_copy(S(ev), name.s.p, name.s.n).s.p;
    jj_args rest = *a;
    rest.pos = a->pos + 1;
    rest.n_pos = a->n_pos - 1;
    for (size_t i = 0; i < items->n; i++) {
        jv_list_push(S(ev), out.l, jj_filter(ev, f, at, fname, items->v[i], &rest));
    }
    return out;
}

static jv f_join(jj_ev *ev, const jj_node *at, jv v, jj_args *a) {
    const jv sep = jv_to_str(S(ev), arg_or(a, 0, "d", jv_str("", 0)));
    const jv_list *items = jj_iterate(ev, at, v);
    jv *attr = jj_arg(a, 1, "attribute");
    jj_buf b = {0};
    jj_buf_put(S(ev), &b, "", 0);
    for (size_t i = 0; i < items->n; i++) {
        if (i) jj_buf_put(S(ev), &b, sep.s.p, sep.s.n);
        jv_write_str(S(ev), &b, attr ? get_path(ev, at, items->v[i], *attr) : items->v[i]);
    }
    return jv_str(b.p, b.n);
}

static jv f_indent(jj_ev *ev, jv v, jj_args *a) {
    const jv w = arg_or(a, 0, "width", jv_int(4));
    const bool first = arg_bool(a, 1, "first", false), blank = arg_bool(a, 2, "blank", false);
    jv ind;
    if (w.k == JV_STR) {
        ind = w;
    } else {
        int64_t n = ival(w);
        n = n < 0 ? 0 : n > 256 ? 256 : n;
        char *p = jj_alloc(S(ev), (size_t)n + 1);
        memset(p, ' ', (size_t)n);
        ind = jv_str(p, (size_t)n);
    }
    jv s = jv_to_str(S(ev), v);
    s = jv_str_copy(S(ev), s.s.p, s.s.n + 0);
    /* s += "\n", then split into lines */
    jj_buf t = {0};
    jj_buf_put(S(ev), &t, s.s.p, s.s.n);
    jj_buf_put(S(ev), &t, "\n", 1);
    const jv_list *lines = splitlines(ev, jv_str(t.p, t.n));
    jj_buf b = {0};
    jj_buf_put(S(ev), &b, "", 0);
    if (first) jj_buf_put(S(ev), &b, ind.s.p, ind.s.n);
    for (size_t i = 0; i < lines->n; i++) {
        const jv line = lines->v[i];
        if (i) {
            jj_buf_put(S(ev), &b, "\n", 1);
            if (blank || line.s.n) jj_buf_put(S(ev), &b, ind.s.p, ind.s.n);
        }
        jj_buf_put(S(ev), &b, line.s.p, line.s.n);
    }
    return jv_str(b.p, b.n);
}

static jv to_int(jj_ev *ev, jv v, jv dflt) {
    switch (v.k) {
    case JV_INT: return v;
    case JV_BOOL: return jv_int(v.b);
    case JV_FLOAT:
        if (!isfinite(v.f)) return dflt;
        return jv_int((int64_t)v.f);
    case JV_STR: {
        char tmp[64];
        if (v.s.n >= sizeof(tmp)) return dflt;
        size_t k = 0;
        for (size_t i = 0; i < v.s.n; i++) {
            if (v.s.p[i] != '_') tmp[k++] = v.s.p[i];
        }
        tmp[k] = '\0';
        char *end;
        const long long i = strtoll(tmp, &end, 10);
        while (is_space((unsigned char)*end)) end++;
        if (end != tmp && *end == '\0') return jv_int(i);
        const double f = strtod(tmp, &end);
        while (is_space((unsigned char)*end)) end++;
        if (end != tmp && *end == '\0' && isfinite(f)) return jv_int((int64_t)f);
        return dflt;
    }
    default: (void)ev; return dflt;
    }
}

static jv to_float(jv v, jv dflt) {
    switch (v.k) {
    case JV_INT: return jv_float((double)v.i);
    case JV_BOOL: return jv_float(v.b);
    case JV_FLOAT: return v;
    case JV_STR: {
        char tmp[64];
        if (v.s.n >= sizeof(tmp)) return dflt;
        memcpy(tmp, v.s.p, v.s.n);
        tmp[v.s.n] = '\0';
        char *end;
        const double f = strtod(tmp, &end);
        while (is_space((unsigned char)*end)) end++;
        if (end != tmp && *end == '\0') return jv_float(f);
        return dflt;
    }
    default: return dflt;
    }
}

static jv f_round(jj_ev *ev, const jj_node *at, jv v, jj_args *a) {
    const int64_t prec = ival(arg_or(a, 0, "precision", jv_int(0)));
    const jv method = arg_or(a, 1, "method", jv_cstr("common"));
    if (!is_num(v)) jj_eval_fail(ev, at, "round needs a number, not %s", jv_kind_name(v));
    const double x = v.k == JV_FLOAT ? v.f : (double)ival(v);
    if (streq(method, "common")) {
        char tmp[400];
        snprintf(tmp, sizeof(tmp), "%.*f", (int)(prec < 0 ? 0 : prec > 30 ? 30 : prec), x);
        return jv_float(strtod(tmp, NULL));
    }
    const double m = pow(10.0, (double)prec);
    if (streq(method, "ceil")) return jv_float(ceil(x * m) / m);
    if (streq(method, "floor")) return jv_float(floor(x * m) / m);
    jj_eval_fail(ev, at, "method must be common, ceil or floor");
}

static jv f_unique(jj_ev *ev, const jj_node *at, jv v, jj_args *a) {
    const bool cs = arg_bool(a, 0, "case_sensitive", false);
    jv *attr = jj_arg(a, 1, "attribute");
    const jv_list *items = jj_iterate(ev, at, v);
    jv seen = jv_new_list(S(ev), 0), out = jv_new_list(S(ev), 0);
    sort_ctx c = {.ev = ev, .at = at, .case_sensitive = cs};
    for (size_t i = 0; i < items->n; i++) {
        jv k = attr ? get_path(ev, at, items->v[i], *attr) : items->v[i];
        k = sort_key(&c, k);
        bool dup = false;
        for (size_t j = 0; j < seen.l->n && !dup; j++) dup = jv_eq(seen.l->v[j], k);
        if (dup) continue;
        jv_list_push(S(ev), seen.l, k);
        jv_list_push(S(ev), out.l, items->v[i]);
    }
    out.l->view = JV_VIEW_GENERATOR;
    return out;
}

static jv f_sort(jj_ev *ev, const jj_node *at, jv v, jj_args *a) {
    const bool reverse = arg_bool(a, 0, "reverse", false);
    const bool cs = arg_bool(a, 1, "case_sensitive", false);
    jv *attr = jj_arg(a, 2, "attribute");
    jv_list *items = jj_iterate(ev, at, v);
    sort_ctx c = {.ev = ev, .at = at, .case_sensitive = cs};
    jv *keys = jj_alloc(S(ev), (items->n + 1) * sizeof(jv));
    for (size_t i = 0; i < items->n; i++) {
        keys[i] = sort_key(&c, attr ? get_path(ev, at, items->v[i], *attr) : items->v[i]);
    }
    return sorted(ev, at, items, keys, reverse);
}

static jv f_dictsort(jj_ev *ev, const jj_node *at, jv v, jj_args *a) {
    const bool cs = arg_bool(a, 0, "case_sensitive", false);
    const jv by = arg_or(a, 1, "by", jv_cstr("key"));
    const bool reverse = arg_bool(a, 2, "reverse", false);
    jv pairs = items_of(ev, at, v, JV_VIEW_NONE);
    const int pos = streq(by, "key") ? 0 : streq(by, "value") ? 1 : -1;
    if (pos < 0) jj_eval_fail(ev, at, "You can only sort by either \"key\" or \"value\"");
    sort_ctx c = {.ev = ev, .at = at, .case_sensitive = cs};
    jv *keys = jj_alloc(S(ev), (pairs.l->n + 1) * sizeof(jv));
    for (size_t i = 0; i < pairs.l->n; i++) keys[i] = sort_key(&c, pairs.l->v[i].l->v[pos]);
    return sorted(ev, at, pairs.l, keys, reverse);
}

static jv f_minmax(jj_ev *ev, const jj_node *at, jv v, jj_args *a, bool want_max) {
    const bool cs = arg_bool(a, 0, "case_sensitive", false);
    jv *attr = jj_arg(a, 1, "attribute");
    const jv_list *items = jj_iterate(ev, at, v);
    if (!items->n) return jv_undef("an empty sequence has no min or max");
    sort_ctx c = {.ev = ev, .at = at, .case_sensitive = cs};
    size_t best = 0;
    jv bk = sort_key(&c, attr ? get_path(ev, at, items->v[0], *attr) : items->v[0]);
    for (size_t i = 1; i < items->n; i++) {
        const jv k = sort_key(&c, attr ? get_path(ev, at, items->v[i], *attr) : items->v[i]);
        const int cmp = jj_compare(ev, at, k, bk);
        if (want_max ? cmp > 0 : cmp < 0) best = i, bk = k;
    }
    return items->v[best];
}

static const char *const k_filters[] = {
    "abs",    "attr",       "batch",       "capitalize", "center",   "count",
    "d",      "default",    "dictsort",    "e",          "escape",   "filesizeformat",
    "first",  "float",      "forceescape", "format",     "groupby",  "indent",
    "int",    "items",      "join",        "last",       "length",   "list",
    "lower",  "map",        "max",         "min",        "pprint",   "random",
    "reject", "rejectattr", "replace",     "reverse",    "round",    "safe",
    "select", "selectattr", "slice",       "sort",       "string",   "striptags",
    "sum",    "title",      "tojson",      "trim",       "truncate", "unique",
    "upper",  "urlencode",  "urlize",      "wordcount",  "wordwrap", "xmlattr",
};

bool jj_filter_exists(const char *name) {
    for (size_t i = 0; i < CLLM_ARRAY_SIZE(k_filters); i++) {
        if (strcmp(k_filters[i], name) == 0) return true;
    }
    return false;
}

#define IS(s) (strcmp(name, (s)) == 0)

jv jj_filter(jj_ev *ev, jj_frame *f, const jj_node *at, const char *name, jv v, jj_args *a) {
    if (IS("safe")) {
        v = jv_to_str(S(ev), v);
        v.safe = true;
        return v;
    }
    if (IS("tojson")) return f_tojson(ev, at, v, a);
    if (IS("length") || IS("count")) return jv_int(length_of(ev, at, v));
    if (IS("trim")) return strip(jv_to_str(S(ev), v), arg_or(a, 0, "chars", jv_none()), true, true);
    if (IS("string")) return jv_to_str(S(ev), v);
    if (IS("default") || IS("d")) {
        const jv dflt = arg_or(a, 0, "default_value", jv_str("", 0));
        const bool boolean = arg_bool(a, 1, "boolean", false);
        if (v.k == JV_UNDEF || (boolean && !jv_truthy(v))) return dflt;
        return v;
    }
    if (IS("items")) return items_of(ev, at, v, JV_VIEW_GENERATOR);
    if (IS("join")) return f_join(ev, at, v, a);
    if (IS("upper")) return map_case(ev, jv_to_str(S(ev), v), 1);
    if (IS("lower")) return map_case(ev, jv_to_str(S(ev), v), 0);
    if (IS("capitalize")) return map_case(ev, jv_to_str(S(ev), v), 2);
    if (IS("title")) return map_case(ev, jv_to_str(S(ev), v), 4);
    if (IS("replace")) {
        const jv s = jv_to_str(S(ev), v);
        if (a->n_pos < 2) jj_eval_fail(ev, at, "replace needs two arguments");
        const jv cnt = arg_or(a, 2, "count", jv_none());
        return replace(ev, at, s, jv_to_str(S(ev), a->pos[0]), a->pos[1],
                       cnt.k == JV_NONE ? -1 : ival(cnt));
    }
    if (IS("selectattr") || IS("rejectattr")) {
        return select_items(ev, at, v, a, true, IS("selectattr"));
    }
    if (IS("select") || IS("reject")) return select_items(ev, at, v, a, false, IS("select"));
    if (IS("map")) return f_map(ev, f, at, v, a);
    if (IS("first") || IS("last")) {
        const jv_list *items = jj_iterate(ev, at, v);
        if (!items->n) return jv_undef("no first item, sequence was empty");
        return items->v[IS("first") ? 0 : items->n - 1];
    }
    if (IS("list")) {
        jv out = {.k = JV_LIST};
        out.l = jj_iterate(ev, at, v);
        return out;
    }
    if (IS("reverse")) {
        if (v.k == JV_STR) {
            const jv_list *chars = jj_iterate(ev, at, v);
            jj_buf b = {0};
            jj_buf_put(S(ev), &b, "", 0);
            for (size_t i = chars->n; i-- > 0;) {
                jj_buf_put(S(ev), &b, chars->v[i].s.p, chars->v[i].s.n);
            }
            return jv_str(b.p, b.n);
        }
        const jv_list *items = jj_iterate(ev, at, v);
        jv out = jv_new_list(S(ev), items->n);
        for (size_t i = items->n; i-- > 0;) jv_list_push(S(ev), out.l, items->v[i]);
        out.l->view = JV_VIEW_REVERSED;
        return out;
    }
    if (IS("int")) return to_int(ev, v, arg_or(a, 0, "default", jv_int(0)));
    if (IS("float")) return to_float(v, arg_or(a, 0, "default", jv_float(0.0)));
    if (IS("round")) return f_round(ev, at, v, a);
    if (IS("abs")) {
        if (v.k == JV_FLOAT) return jv_float(fabs(v.f));
        if (v.k == JV_INT || v.k == JV_BOOL) return jv_int(ival(v) < 0 ? -ival(v) : ival(v));
        jj_eval_fail(ev, at, "bad operand type for abs(): '%s'", jv_kind_name(v));
    }
    if (IS("unique")) return f_unique(ev, at, v, a);
    if (IS("sort")) return f_sort(ev, at, v, a);
    if (IS("dictsort")) return f_dictsort(ev, at, v, a);
    if (IS("indent")) return f_indent(ev, v, a);
    if (IS("e") || IS("escape") || IS("forceescape")) {
        if (v.k == JV_STR && v.safe && !IS("forceescape")) return v;
        v = jj_html_escape(ev, jv_to_str(S(ev), v));
        v.safe = true;
        return v;
    }
    if (IS("min") || IS("max")) return f_minmax(ev, at, v, a, IS("max"));
    if (IS("sum")) {
        const jv_list *items = jj_iterate(ev, at, v);
        jv *attr = jj_arg(a, 0, "attribute");
        jv acc = arg_or(a, 1, "start", jv_int(0));
        jj_node op = {.type = E_BIN, .op = OP_ADD, .at = at->at};
        for (size_t i = 0; i < items->n; i++) {
            const jv x = attr ? get_path(ev, at, items->v[i], *attr) : items->v[i];
            if (!is_num(acc) || !is_num(x)) {
                jj_eval_fail(ev, at, "sum: unsupported operand types '%s' and '%s'",
                             jv_kind_name(acc), jv_kind_name(x));
            }
            acc = acc.k == JV_FLOAT || x.k == JV_FLOAT
                      ? jv_float((acc.k == JV_FLOAT ? acc.f : (double)ival(acc)) +
                                 (x.k == JV_FLOAT ? x.f : (double)ival(x)))
                      : jv_int(ival(acc) + ival(x));
        }
        (void)op;
        return acc;
    }
    if (IS("format"))
        return percent_format(ev, at, need_str(ev, at, jv_to_str(S(ev), v), "format"), a);
    if (IS("wordcount")) {
        return jv_int((int64_t)split(ev, at, jv_to_str(S(ev), v), jv_none(), -1).l->n);
    }
    if (IS("center")) {
        const jv s = jv_to_str(S(ev), v);
        const int64_t width = ival(arg_or(a, 0, "width", jv_int(80)));
        const int64_t len = (int64_t)jj_utf8_len(s.s.p, s.s.n);
        if (width <= len || width > 4096) return s;
        const int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
        jj_buf b = {0};
        for (int64_t i = 0; i < left; i++) jj_buf_put(S(ev), &b, " ", 1);
        jj_buf_put(S(ev), &b, s.s.p, s.s.n);
        for (int64_t i = 0; i < pad - left; i++) jj_buf_put(S(ev), &b, " ", 1);
        return jv_str(b.p, b.n);
    }
    if (!jj_filter_exists(name)) jj_eval_fail(ev, at, "no filter named '%s'", name);
    jj_eval_fail(ev, at, "the filter '%s' is not supported", name);
}

/* ---- tests ---- */

static const char *const k_tests[] = {
    "boolean", "callable", "defined",  "divisibleby", "eq",       "equalto", "escaped",
    "even",    "false",    "filter",   "float",       "ge",       "gt",      "greaterthan",
    "in",      "integer",  "iterable", "le",          "lessthan", "lower",   "lt",
    "mapping", "ne",       "none",     "number",      "odd",      "sameas",  "sequence",
    "string",  "test",     "true",     "undefined",   "upper",    "==",      "!=",
    "<",       "<=",       ">",        ">=",
};

bool jj_test_exists(const char *name) {
    for (size_t i = 0; i < CLLM_ARRAY_SIZE(k_tests); i++) {
        if (strcmp(k_tests[i], name) == 0) return true;
    }
    return false;
}

bool jj_test(jj_ev *ev, const jj_node *at, const char *name, jv v, jj_args *a) {
    if (IS("defined")) return v.k != JV_UNDEF;
    if (IS("undefined")) return v.k == JV_UNDEF;
    if (IS("none")) return v.k == JV_NONE;
    if (IS("string")) return v.k == JV_STR;
    if (IS("mapping")) return v.k == JV_DICT && !v.d->ns;
    if (IS("iterable"))
        return v.k == JV_UNDEF || v.k == JV_STR || v.k == JV_LIST || (v.k == JV_DICT && !v.d->ns);
    if (IS("sequence"))
        return v.k == JV_UNDEF || v.k == JV_STR || v.k == JV_LIST || (v.k == JV_DICT && !v.d->ns);
    if (IS("number")) return is_num(v);
    if (IS("integer")) return v.k == JV_INT;
    if (IS("float")) return v.k == JV_FLOAT;
    if (IS("boolean")) return v.k == JV_BOOL;
    if (IS("true")) return v.k == JV_BOOL && v.b;
    if (IS("false")) return v.k == JV_BOOL && !v.b;
    if (IS("callable")) return v.k == JV_FUNC;
    if (IS("lower") || IS("upper")) {
        if (v.k != JV_STR) return false;
        const jv m = map_case(ev, v, IS("lower") ? 0 : 1);
        return jv_eq(m, v);
    }
    if (IS("odd") || IS("even")) {
        if (v.k != JV_INT && v.k != JV_BOOL) jj_eval_fail(ev, at, "odd/even needs an integer");
        return (ival(v) % 2 != 0) == IS("odd");
    }
    if (!jj_test_exists(name)) jj_eval_fail(ev, at, "no test named '%s'", name);
    if (IS("escaped") || IS("filter") || IS("test")) {
        if (IS("filter"))
            return v.k == JV_STR && jj_filter_exists(jv_str_copy(S(ev), v.s.p, v.s.n).s.p);
        if (IS("test"))
            return v.k == JV_STR && jj_test_exists(jv_str_copy(S(ev), v.s.p, v.s.n).s.p);
        return false;
    }
    if (a->n_pos < 1) jj_eval_fail(ev, at, "the test '%s' needs an argument", name);
    const jv b = a->pos[0];
    if (IS("divisibleby")) {
        if (ival(b) == 0) jj_eval_fail(ev, at, "integer division or modulo by zero");
        return ival(v) % ival(b) == 0;
    }
    if (IS("eq") || IS("equalto") || IS("==")) return jv_eq(v, b);
    if (IS("ne") || IS("!=")) return !jv_eq(v, b);
    if (IS("sameas")) {
        if (v.k != b.k) return false;
        if (v.k == JV_LIST) return v.l == b.l;
        if (v.k == JV_DICT) return v.d == b.d;
        return jv_eq(v, b);
    }
    if (IS("in")) {
        jj_node op = {.type = E_BIN, .op = OP_IN, .at = at->at};
        (void)op;
        if (b.k == JV_STR && v.k == JV_STR) return find_sub(b.s.p, b.s.n, v.s.p, v.s.n) != NULL;
        if (b.k == JV_LIST) {
            for (size_t i = 0; i < b.l->n; i++) {
                if (jv_eq(b.l->v[i], v)) return true;
            }
            return false;
        }
        if (b.k == JV_DICT) return jv_dict_get(b.d, v) != NULL;
        if (b.k == JV_UNDEF) return false;
        jj_eval_fail(ev, at, "argument of type '%s' is not iterable", jv_kind_name(b));
    }
    const int c = jj_compare(ev, at, v, b);
    if (IS("lt") || IS("lessthan") || IS("<")) return c < 0;
    if (IS("le") || IS("<=")) return c <= 0;
    if (IS("gt") || IS("greaterthan") || IS(">")) return c > 0;
    if (IS("ge") || IS(">=")) return c >= 0;
    jj_eval_fail(ev, at, "no test named '%s'", name);
}

/* ---- methods ---- */

jv jj_method(jj_ev *ev, const jj_node *at, jv v, const char *name, jj_args *a, bool *found) {
    *found = true;
    if (v.k == JV_STR) {
        if (IS("strip") || IS("lstrip") || IS("rstrip")) {
            const jv chars = arg_or(a, 0, "chars", jv_none());
            return strip(v, chars, !IS("rstrip"), !IS("lstrip"));
        }
        if (IS("split") || IS("rsplit")) {
            const jv sep = arg_or(a, 0, "sep", jv_none());
            const int64_t maxsplit = ival(arg_or(a, 1, "maxsplit", jv_int(-1)));
            return IS("split") ? split(ev, at, v, sep, maxsplit) : rsplit(ev, at, v, sep, maxsplit);
        }
        if (IS("startswith") || IS("endswith")) {
            if (a->n_pos < 1) jj_eval_fail(ev, at, "%s needs an argument", name);
            const jv p = a->pos[0];
            if (p.k == JV_LIST && p.l->tuple) {
                for (size_t i = 0; i < p.l->n; i++) {
                    const jv x = need_str(ev, at, p.l->v[i], name);
                    if (IS("startswith") ? starts_with(v, x) : ends_with(v, x))
                        return jv_bool(true);
                }
                return jv_bool(false);
            }
            need_str(ev, at, p, name);
            return jv_bool(IS("startswith") ? starts_with(v, p) : ends_with(v, p));
        }
        if (IS("replace")) {
            if (a->n_pos < 2) jj_eval_fail(ev, at, "replace needs two arguments");
            const jv cnt = arg_or(a, 2, "count", jv_int(-1));
            return replace(ev, at, v, a->pos[0], need_str(ev, at, a->pos[1], "replace's argument"),
                           ival(cnt));
        }
        if (IS("upper")) return map_case(ev, v, 1);
        if (IS("lower")) return map_case(ev, v, 0);
        if (IS("title")) return map_case(ev, v, 3);
        if (IS("capitalize")) return map_case(ev, v, 2);
        if (IS("format")) return str_format(ev, at, v, a);
        if (IS("join")) {
            const jv_list *items = jj_iterate(ev, at, arg_or(a, 0, "iterable", jv_undef(NULL)));
            jj_buf b = {0};
            jj_buf_put(S(ev), &b, "", 0);
            for (size_t i = 0; i < items->n; i++) {
                if (i) jj_buf_put(S(ev), &b, v.s.p, v.s.n);
                const jv x = need_str(ev, at, items->v[i], "join's item");
                jj_buf_put(S(ev), &b, x.s.p, x.s.n);
            }
            return jv_str(b.p, b.n);
        }
        if (IS("find") || IS("rfind") || IS("index") || IS("count")) {
            if (a->n_pos < 1) jj_eval_fail(ev, at, "%s needs an argument", name);
            const jv sub = need_str(ev, at, a->pos[0], name);
            if (IS("count")) {
                if (sub.s.n == 0) return jv_int((int64_t)jj_utf8_len(v.s.p, v.s.n) + 1);
                int64_t k = 0;
                const char *p = v.s.p, *end = v.s.p + v.s.n, *hit;
                while ((hit = find_sub(p, (size_t)(end - p), sub.s.p, sub.s.n))) {
                    k++;
                    p = hit + sub.s.n;
                }
                return jv_int(k);
            }
            const char *hit = NULL;
            if (IS("rfind")) {
                for (size_t i = v.s.n + 1; i-- > 0 && !hit;) {
                    if (i + sub.s.n <= v.s.n && memcmp(v.s.p + i, sub.s.p, sub.s.n) == 0) {
                        hit = v.s.p + i;
                    }
                }
            } else {
                hit = find_sub(v.s.p, v.s.n, sub.s.p, sub.s.n);
            }
            if (!hit && IS("index")) jj_eval_fail(ev, at, "substring not found");
            return jv_int(hit ? (int64_t)jj_utf8_len(v.s.p, (size_t)(hit - v.s.p)) : -1);
        }
        if (IS("removeprefix") || IS("removesuffix")) {
            if (a->n_pos < 1) jj_eval_fail(ev, at, "%s needs an argument", name);
            const jv x = need_str(ev, at, a->pos[0], name);
            if (IS("removeprefix"))
                return starts_with(v, x) ? jv_str(v.s.p + x.s.n, v.s.n - x.s.n) : v;
            return ends_with(v, x) ? jv_str(v.s.p, v.s.n - x.s.n) : v;
        }
        if (IS("splitlines")) {
            jv out = {.k = JV_LIST};
            out.l = splitlines(ev, v);
            return out;
        }
        if (IS("isdigit") || IS("isalpha") || IS("isalnum") || IS("isspace") || IS("isupper") ||
            IS("islower")) {
            if (v.s.n == 0) return jv_bool(false);
            bool all = true, cased = false;
            for (size_t i = 0; i < v.s.n && all; i++) {
                const unsigned char c = (unsigned char)v.s.p[i];
                const bool up = c >= 'A' && c <= 'Z', lo = c >= 'a' && c <= 'z',
                           dig = c >= '0' && c <= '9';
                cased |= up || lo;
                if (IS("isdigit")) all = dig;
                if (IS("isalpha")) all = up || lo;
                if (IS("isalnum")) all = up || lo || dig;
                if (IS("isspace")) all = is_space(c);
                if (IS("isupper")) all = !lo;
                if (IS("islower")) all = !up;
            }
            if (IS("isupper") || IS("islower")) all = all && cased;
            return jv_bool(all);
        }
    } else if (v.k == JV_DICT && !v.d->ns) {
        if (IS("get")) {
            if (a->n_pos < 1) jj_eval_fail(ev, at, "get needs a key");
            jv *x = jv_dict_get(v.d, a->pos[0]);
            return x ? *x : arg_or(a, 1, "default", jv_none());
        }
        if (IS("items")) return items_of(ev, at, v, JV_VIEW_ITEMS);
        if (IS("keys") || IS("values")) {
            jv out = jv_new_list(S(ev), v.d->n);
            out.l->view = IS("keys") ? JV_VIEW_KEYS : JV_VIEW_VALUES;
            for (size_t i = 0; i < v.d->n; i++) {
                jv_list_push(S(ev), out.l, IS("keys") ? v.d->keys[i] : v.d->vals[i]);
            }
            return out;
        }
        if (IS("pop")) {
            if (a->n_pos < 1) jj_eval_fail(ev, at, "pop needs a key");
            for (size_t i = 0; i < v.d->n; i++) {
                if (jv_eq(v.d->keys[i], a->pos[0])) {
                    const jv r = v.d->vals[i];
                    memmove(v.d->keys + i, v.d->keys + i + 1, (v.d->n - i - 1) * sizeof(jv));
                    memmove(v.d->vals + i, v.d->vals + i + 1, (v.d->n - i - 1) * sizeof(jv));
                    v.d->n--;
                    return r;
                }
            }
            if (a->n_pos >= 2) return a->pos[1];
            jj_eval_fail(ev, at, "KeyError on pop");
        }
        if (IS("update")) {
            if (a->n_pos >= 1 && a->pos[0].k == JV_DICT) {
                const jv_dict *o = a->pos[0].d;
                for (size_t i = 0; i < o->n; i++) jv_dict_set(S(ev), v.d, o->keys[i], o->vals[i]);
            }
            for (size_t k = 0; k < a->n_kw; k++) {
                jv_dict_set(S(ev), v.d, jv_cstr(a->kw_names[k]), a->kw[k]);
            }
            return jv_none();
        }
        if (IS("copy")) {
            jv out = jv_new_dict(S(ev), v.d->n);
            for (size_t i = 0; i < v.d->n; i++)
                jv_dict_set(S(ev), out.d, v.d->keys[i], v.d->vals[i]);
            return out;
        }
    } else if (v.k == JV_LIST) {
        if (IS("append") && !v.l->tuple) {
            if (a->n_pos != 1) jj_eval_fail(ev, at, "append takes exactly one argument");
            jv_list_push(S(ev), v.l, a->pos[0]);
            return jv_none();
        }
        if (IS("extend") && !v.l->tuple) {
            const jv_list *items = jj_iterate(ev, at, arg_or(a, 0, "iterable", jv_undef(NULL)));
            for (size_t i = 0; i < items->n; i++) jv_list_push(S(ev), v.l, items->v[i]);
            return jv_none();
        }
        if (IS("pop") && !v.l->tuple) {
            if (v.l->n == 0) jj_eval_fail(ev, at, "pop from empty list");
            int64_t i = ival(arg_or(a, 0, "index", jv_int(-1)));
            if (i < 0) i += (int64_t)v.l->n;
            if (i < 0 || (size_t)i >= v.l->n) jj_eval_fail(ev, at, "pop index out of range");
            const jv r = v.l->v[i];
            memmove(v.l->v + i, v.l->v + i + 1, (v.l->n - (size_t)i - 1) * sizeof(jv));
            v.l->n--;
            return r;
        }
        if (IS("insert") && !v.l->tuple) {
            if (a->n_pos != 2) jj_eval_fail(ev, at, "insert takes two arguments");
            int64_t i = ival(a->pos[0]);
            const int64_t n = (int64_t)v.l->n;
            if (i < 0) i = i + n < 0 ? 0 : i + n;
            if (i > n) i = n;
            jv_list_push(S(ev), v.l, jv_none());
            memmove(v.l->v + i + 1, v.l->v + i, (size_t)(n - i) * sizeof(jv));
            v.l->v[i] = a->pos[1];
            return jv_none();
        }
        if (IS("index") || IS("count")) {
            if (a->n_pos < 1) jj_eval_fail(ev, at, "%s needs an argument", name);
            int64_t k = 0;
            for (size_t i = 0; i < v.l->n; i++) {
                if (jv_eq(v.l->v[i], a->pos[0])) {
                    if (IS("index")) return jv_int((int64_t)i);
                    k++;
                }
            }
            if (IS("index")) jj_eval_fail(ev, at, "value is not in list");
            return jv_int(k);
        }
        if (IS("copy")) {
            jv out = jv_new_list(S(ev), v.l->n);
            for (size_t i = 0; i < v.l->n; i++) jv_list_push(S(ev), out.l, v.l->v[i]);
            return out;
        }
    }
    *found = false;
    return jv_undef(name);
}

/* ---- globals ---- */

static jv g_range(jj_ev *ev, const jj_node *at, jj_args *a) {
    int64_t start = 0, stop, stp = 1;
    if (a->n_pos == 1) {
        stop = ival(a->pos[0]);
    } else if (a->n_pos == 2 || a->n_pos == 3) {
        start = ival(a->pos[0]);
        stop = ival(a->pos[1]);
        if (a->n_pos == 3) stp = ival(a->pos[2]);
    } else {
        jj_eval_fail(ev, at, "range expected 1 to 3 arguments, got %zu", a->n_pos);
    }
    for (size_t i = 0; i < a->n_pos; i++) {
        if (a->pos[i].k != JV_INT && a->pos[i].k != JV_BOOL) {
            jj_eval_fail(ev, at, "'%s' object cannot be interpreted as an integer",
                         jv_kind_name(a->pos[i]));
        }
    }
    if (stp == 0) jj_eval_fail(ev, at, "range() arg 3 must not be zero");
    const double count = stp > 0 ? ceil(((double)stop - (double)start) / (double)stp)
                                 : ceil(((double)start - (double)stop) / (double)-stp);
    if (count > JJ_MAX_RANGE) {
        jj_fail(S(ev), CLLM_ERR_TOO_LARGE, "range of more than %d items", JJ_MAX_RANGE);
    }
    jv out = jv_new_list(S(ev), count > 0 ? (size_t)count : 0);
    for (int64_t i = start; stp > 0 ? i < stop : i > stop; i += stp)
        jv_list_push(S(ev), out.l, jv_int(i));
    return out;
}

static jv make_dict(jj_ev *ev, const jj_node *at, jj_args *a, bool ns) {
    jv d = jv_new_dict(S(ev), a->n_kw);
    d.d->ns = ns;
    if (a->n_pos > 1) jj_eval_fail(ev, at, "expected at most 1 positional argument");
    if (a->n_pos == 1) {
        const jv src = a->pos[0];
        if (src.k == JV_DICT) {
            for (size_t i = 0; i < src.d->n; i++)
                jv_dict_set(S(ev), d.d, src.d->keys[i], src.d->vals[i]);
        } else {
            const jv_list *pairs = jj_iterate(ev, at, src);
            for (size_t i = 0; i < pairs->n; i++) {
                const jv p = pairs->v[i];
                if (p.k != JV_LIST || p.l->n != 2) jj_eval_fail(ev, at, "dict needs pairs");
                jv_dict_set(S(ev), d.d, p.l->v[0], p.l->v[1]);
            }
        }
    }
    for (size_t k = 0; k < a->n_kw; k++) jv_dict_set(S(ev), d.d, jv_cstr(a->kw_names[k]), a->kw[k]);
    return d;
}

static jv g_dict(jj_ev *ev, const jj_node *at, jj_args *a) { return make_dict(ev, at, a, false); }
static jv g_namespace(jj_ev *ev, const jj_node *at, jj_args *a) {
    return make_dict(ev, at, a, true);
}

static jv g_raise(jj_ev *ev, const jj_node *at, jj_args *a) {
    (void)at;
    const jv msg = jv_to_str(S(ev), arg_or(a, 0, "message", jv_str("", 0)));
    jj_fail(S(ev), CLLM_ERR_FORMAT, "%.*s", (int)(msg.s.n > 400 ? 400 : msg.s.n), msg.s.p);
}

static jv g_strftime_now(jj_ev *ev, const jj_node *at, jj_args *a) {
    const jv fmt =
        need_str(ev, at, arg_or(a, 0, "format", jv_undef(NULL)), "strftime_now's format");
    char cfmt[256];
    if (fmt.s.n >= sizeof(cfmt)) jj_eval_fail(ev, at, "strftime_now: format too long");
    memcpy(cfmt, fmt.s.p, fmt.s.n);
    cfmt[fmt.s.n] = '\0';
    const time_t t = (time_t)ev->now;
    struct tm tm;
    if (!localtime_r(&t, &tm)) jj_eval_fail(ev, at, "strftime_now: no local time");
    char out[512];
    const size_t n = strftime(out, sizeof(out), cfmt, &tm);
    return jv_str_copy(S(ev), out, n);
}

void jj_add_globals(jj_ev *ev, jv_dict *d) {
    static const struct {
        const char *name;
        jv_builtin_fn fn;
    } k_globals[] = {
        {"range", g_range},
        {"dict", g_dict},
        {"namespace", g_namespace},
        {"raise_exception", g_raise},
        {"strftime_now", g_strftime_now},
    };
    for (size_t i = 0; i < CLLM_ARRAY_SIZE(k_globals); i++) {
        jv f = {.k = JV_FUNC};
        f.fn = jj_alloc(S(ev), sizeof(*f.fn));
        f.fn->name = k_globals[i].name;
        f.fn->builtin = k_globals[i].fn;
        jv_dict_set(S(ev), d, jv_cstr(k_globals[i].name), f);
    }
}
