/* Jinja evaluator: statements, expressions, scopes, macros; the entry point. */
#include "text/jinja-impl.h"
#include "core/hostmem.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <stdio.h>
#include <time.h>

void jj_eval_fail(jj_ev *ev, const jj_node *at, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    jj_fail_at(ev->st, at ? at->at : 0, "%s", msg);
}

static void step(jj_ev *ev, const jj_node *at) {
    if (++ev->steps > JJ_MAX_STEPS) {
        (void)at;
        jj_fail(ev->st, CLLM_ERR_TOO_LARGE, "the template ran more than %llu steps",
                (unsigned long long)JJ_MAX_STEPS);
    }
}

/* ---- scopes ---- */

static jj_frame *frame_new(jj_ev *ev, jj_frame *parent) {
    jj_frame *f = jj_alloc(ev->st, sizeof(*f));
    f->parent = parent;
    f->vars = jv_new_dict(ev->st, 0).d;
    return f;
}

static jv lookup(jj_ev *ev, jj_frame *f, const char *name) {
    const size_t n = strlen(name);
    for (; f; f = f->parent) {
        jv *v = jv_dict_get_str(f->vars, name, n);
        if (v) return *v;
    }
    jv *g = jv_dict_get_str(ev->globals, name, n);
    return g ? *g : jv_undef(name);
}

static void set_var(jj_ev *ev, jj_frame *f, const char *name, jv v) {
    jv_dict_set(ev->st, f->vars, jv_cstr(name), v);
}

/* ---- attributes, items, iteration, comparison ---- */

CLLM_NORETURN static void undefined_error(jj_ev *ev, const jj_node *at, jv u) {
    if (u.s.p) jj_eval_fail(ev, at, "'%s' is undefined", u.s.p);
    jj_eval_fail(ev, at, "a value is undefined");
}

jv jj_getattr(jj_ev *ev, const jj_node *at, jv obj, const char *name) {
    if (obj.k == JV_UNDEF) undefined_error(ev, at, obj);
    if (obj.k == JV_DICT) {
        jv *v = jv_dict_get_str(obj.d, name, strlen(name));
        if (v) return *v;
    }
    /* Jinja2 names the missing attribute in the undefined value */
    char *what = jj_alloc(ev->st, strlen(name) + 64);
    snprintf(what, strlen(name) + 64, "%s object' has no attribute '%s", jv_kind_name(obj), name);
    return jv_undef(what);
}

static int64_t as_index(jv v, bool *ok) {
    *ok = v.k == JV_INT || v.k == JV_BOOL;
    return v.k == JV_INT ? v.i : v.k == JV_BOOL ? v.b : 0;
}

jv jj_getitem(jj_ev *ev, const jj_node *at, jv obj, jv key) {
    if (obj.k == JV_UNDEF) undefined_error(ev, at, obj);
    bool ok;
    if (obj.k == JV_DICT) {
        jv *v = jv_dict_get(obj.d, key);
        if (v) return *v;
    } else if (obj.k == JV_LIST && obj.l->view == JV_VIEW_NONE) {
        int64_t i = as_index(key, &ok);
        if (ok) {
            if (i < 0) i += (int64_t)obj.l->n;
            if (i >= 0 && (size_t)i < obj.l->n) return obj.l->v[i];
        }
    } else if (obj.k == JV_STR) {
        int64_t i = as_index(key, &ok);
        if (ok) {
            const int64_t len = (int64_t)jj_utf8_len(obj.s.p, obj.s.n);
            if (i < 0) i += len;
            if (i >= 0 && i < len) {
                const size_t a = jj_utf8_offset(obj.s.p, obj.s.n, (size_t)i);
                const size_t b = jj_utf8_offset(obj.s.p, obj.s.n, (size_t)i + 1);
                return jv_str(obj.s.p + a, b - a);
            }
        }
    }
    if (key.k == JV_STR) {
        char *name = jj_alloc(ev->st, key.s.n + 1);
        memcpy(name, key.s.p, key.s.n);
        return jj_getattr(ev, at, obj, name);
    }
    return jv_undef("item");
}

jv_list *jj_iterate(jj_ev *ev, const jj_node *at, jv v) {
    switch (v.k) {
    case JV_UNDEF: return jv_new_list(ev->st, 0).l;
    case JV_LIST: {
        jv l = jv_new_list(ev->st, v.l->n);
        if (v.l->n) memcpy(l.l->v, v.l->v, v.l->n * sizeof(jv));
        l.l->n = v.l->n;
        return l.l;
    }
    case JV_DICT: {
        if (v.d->ns) break;
        jv l = jv_new_list(ev->st, v.d->n);
        if (v.d->n) memcpy(l.l->v, v.d->keys, v.d->n * sizeof(jv));
        l.l->n = v.d->n;
        return l.l;
    }
    case JV_STR: {
        jv l = jv_new_list(ev->st, v.s.n);
        for (size_t i = 0; i < v.s.n;) {
            size_t j = i + 1;
            while (j < v.s.n && ((unsigned char)v.s.p[j] & 0xC0) == 0x80) j++;
            jv_list_push(ev->st, l.l, jv_str(v.s.p + i, j - i));
            i = j;
        }
        return l.l;
    }
    default: break;
    }
    jj_eval_fail(ev, at, "'%s' object is not iterable", jv_kind_name(v));
}

static bool is_num(jv v) { return v.k == JV_BOOL || v.k == JV_INT || v.k == JV_FLOAT; }
static double num(jv v) { return v.k == JV_FLOAT ? v.f : v.k == JV_INT ? (double)v.i : v.b; }
static int64_t ival(jv v) { return v.k == JV_INT ? v.i : v.b; }

int jj_compare(jj_ev *ev, const jj_node *at, jv a, jv b) {
    if (is_num(a) && is_num(b)) {
        if (a.k != JV_FLOAT && b.k != JV_FLOAT) {
            return ival(a) < ival(b) ? -1 : ival(a) > ival(b);
        }
        return num(a) < num(b) ? -1 : num(a) > num(b);
    }
    if (a.k == JV_STR && b.k == JV_STR) {
        const size_t m = a.s.n < b.s.n ? a.s.n : b.s.n;
        const int c = m ? memcmp(a.s.p, b.s.p, m) : 0;
        if (c) return c < 0 ? -1 : 1;
        return a.s.n < b.s.n ? -1 : a.s.n > b.s.n;
    }
    if (a.k == JV_LIST && b.k == JV_LIST) {
        for (size_t i = 0; i < a.l->n && i < b.l->n; i++) {
            if (!jv_eq(a.l->v[i], b.l->v[i])) return jj_compare(ev, at, a.l->v[i], b.l->v[i]);
        }
        return a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
    }
    if (a.k == JV_UNDEF) undefined_error(ev, at, a);
    if (b.k == JV_UNDEF) undefined_error(ev, at, b);
    jj_eval_fail(ev, at, "'<' not supported between instances of '%s' and '%s'", jv_kind_name(a),
                 jv_kind_name(b));
}

/* ---- operators ---- */

static jv concat_str(jj_ev *ev, jv a, jv b) {
    a = jv_to_str(ev->st, a);
    b = jv_to_str(ev->st, b);
    a.safe = b.safe = false;
    if (b.s.n == 0) return a;
    if (a.s.n == 0) return b;
    if (a.s.n + b.s.n > JJ_MAX_OUTPUT) {
        jj_fail(ev->st, CLLM_ERR_TOO_LARGE, "a string exceeds %u bytes", JJ_MAX_OUTPUT);
    }
    char *p = jj_alloc(ev->st, a.s.n + b.s.n + 1);
    memcpy(p, a.s.p, a.s.n);
    memcpy(p + a.s.n, b.s.p, b.s.n);
    return jv_str(p, a.s.n + b.s.n);
}

static jv repeat(jj_ev *ev, const jj_node *at, jv s, int64_t n) {
    if (n <= 0) return s.k == JV_STR ? jv_str("", 0) : jv_new_list(ev->st, 0);
    if (s.k == JV_STR) {
        if (s.s.n && (uint64_t)n > JJ_MAX_REPEAT / s.s.n)
            jj_eval_fail(ev, at, "a repeated string is too long");
        char *p = jj_alloc(ev->st, s.s.n * (size_t)n + 1);
        for (int64_t i = 0; i < n; i++) memcpy(p + (size_t)i * s.s.n, s.s.p, s.s.n);
        return jv_str(p, s.s.n * (size_t)n);
    }
    if (s.l->n && (uint64_t)n > JJ_MAX_RANGE / s.l->n)
        jj_eval_fail(ev, at, "a repeated list is too long");
    jv l = jv_new_list(ev->st, s.l->n * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        for (size_t j = 0; j < s.l->n; j++) jv_list_push(ev->st, l.l, s.l->v[j]);
    }
    return l;
}

static const char *const k_op_names[] = {
    [OP_ADD] = "+",       [OP_SUB] = "-", [OP_MUL] = "*",  [OP_DIV] = "/",
    [OP_FLOORDIV] = "//", [OP_MOD] = "%", [OP_POW] = "**", [OP_CONCAT] = "~",
    [OP_EQ] = "==",       [OP_NE] = "!=", [OP_LT] = "<",   [OP_LE] = "<=",
    [OP_GT] = ">",        [OP_GE] = ">=", [OP_IN] = "in",  [OP_NOTIN] = "not in",
};

static bool contains(jj_ev *ev, const jj_node *at, jv item, jv container) {
    switch (container.k) {
    case JV_UNDEF: return false;
    case JV_STR:
        if (item.k != JV_STR) {
            jj_eval_fail(ev, at, "'in <string>' requires string as left operand, not %s",
                         jv_kind_name(item));
        }
        if (item.s.n == 0) return true;
        for (size_t i = 0; i + item.s.n <= container.s.n; i++) {
            if (memcmp(container.s.p + i, item.s.p, item.s.n) == 0) return true;
        }
        return false;
    case JV_LIST:
        for (size_t i = 0; i < container.l->n; i++) {
            if (jv_eq(container.l->v[i], item)) return true;
        }
        return false;
    case JV_DICT: return jv_dict_get(container.d, item) != NULL;
    default: jj_eval_fail(ev, at, "argument of type '%s' is not iterable", jv_kind_name(container));
    }
}

static jv binop(jj_ev *ev, const jj_node *at, int op, jv a, jv b) {
    switch (op) {
    case OP_EQ: return jv_bool(jv_eq(a, b));
    case OP_NE: return jv_bool(!jv_eq(a, b));
    case OP_LT: return jv_bool(jj_compare(ev, at, a, b) < 0);
    case OP_LE: return jv_bool(jj_compare(ev, at, a, b) <= 0);
    case OP_GT: return jv_bool(jj_compare(ev, at, a, b) > 0);
    case OP_GE: return jv_bool(jj_compare(ev, at, a, b) >= 0);
    case OP_IN: return jv_bool(contains(ev, at, a, b));
    case OP_NOTIN: return jv_bool(!contains(ev, at, a, b));
    case OP_CONCAT: return concat_str(ev, a, b);
    default: break;
    }
    if (a.k == JV_UNDEF) undefined_error(ev, at, a);
    if (b.k == JV_UNDEF) undefined_error(ev, at, b);
    if (is_num(a) && is_num(b)) {
        const bool ints = a.k != JV_FLOAT && b.k != JV_FLOAT;
        const int64_t x = ints ? ival(a) : 0, y = ints ? ival(b) : 0; /* floats: no int */
        const double fx = num(a), fy = num(b);
        int64_t r;
        switch (op) {
        case OP_ADD:
            if (!ints) return jv_float(fx + fy);
            if (__builtin_add_overflow(x, y, &r)) break;
            return jv_int(r);
        case OP_SUB:
            if (!ints) return jv_float(fx - fy);
            if (__builtin_sub_overflow(x, y, &r)) break;
            return jv_int(r);
        case OP_MUL:
            if (!ints) return jv_float(fx * fy);
            if (__builtin_mul_overflow(x, y, &r)) break;
            return jv_int(r);
        case OP_DIV:
            if (fy == 0) jj_eval_fail(ev, at, "division by zero");
            return jv_float(fx / fy);
        case OP_FLOORDIV:
            if (fy == 0) jj_eval_fail(ev, at, "integer division or modulo by zero");
            if (!ints) return jv_float(floor(fx / fy));
            if (x == INT64_MIN && y == -1) break;
            r = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0))) r--;
            return jv_int(r);
        case OP_MOD:
            if (fy == 0) jj_eval_fail(ev, at, "integer division or modulo by zero");
            if (!ints) {
                double m = fmod(fx, fy);
                if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
                return jv_float(m);
            }
            if (y == -1) return jv_int(0);
            r = x % y;
            if (r != 0 && ((r < 0) != (y < 0))) r += y;
            return jv_int(r);
        case OP_POW:
            if (ints && y >= 0) {
                int64_t acc = 1;
                bool over = false;
                for (int64_t i = 0; i < y && !over; i++)
                    over = __builtin_mul_overflow(acc, x, &acc);
                if (!over) return jv_int(acc);
                break;
            }
            return jv_float(pow(fx, fy));
        }
        jj_eval_fail(ev, at, "integer overflow in '%s'", k_op_names[op]);
    }
    if (op == OP_ADD && a.k == JV_STR && b.k == JV_STR) {
        if (!a.safe && !b.safe) return concat_str(ev, a, b);
        /* Markup + str escapes the str, and the sum is Markup */
        jv r =
            concat_str(ev, a.safe ? a : jj_html_escape(ev, a), b.safe ? b : jj_html_escape(ev, b));
        r.safe = true;
        return r;
    }
    if (op == OP_ADD && a.k == JV_LIST && b.k == JV_LIST && !a.l->view && !b.l->view) {
        jv l = jv_new_list(ev->st, a.l->n + b.l->n);
        for (size_t i = 0; i < a.l->n; i++) jv_list_push(ev->st, l.l, a.l->v[i]);
        for (size_t i = 0; i < b.l->n; i++) jv_list_push(ev->st, l.l, b.l->v[i]);
        l.l->tuple = a.l->tuple;
        return l;
    }
    if (op == OP_MUL && (a.k == JV_STR || a.k == JV_LIST) && (b.k == JV_INT || b.k == JV_BOOL)) {
        return repeat(ev, at, a, ival(b));
    }
    if (op == OP_MUL && (b.k == JV_STR || b.k == JV_LIST) && (a.k == JV_INT || a.k == JV_BOOL)) {
        return repeat(ev, at, b, ival(a));
    }
    jj_eval_fail(ev, at, "unsupported operand type(s) for %s: '%s' and '%s'", k_op_names[op],
                 jv_kind_name(a), jv_kind_name(b));
}

/* ---- slices ---- */

/* Python's slice.indices for a sequence of length len. */
static void slice_indices(jj_ev *ev, const jj_node *at, jv vs, jv ve, jv vstep, int64_t len,
                          int64_t *start, int64_t *stop, int64_t *stepv) {
    bool ok = true;
    int64_t stp = 1;
    if (vstep.k != JV_UNDEF && vstep.k != JV_NONE) {
        stp = as_index(vstep, &ok);
        if (!ok) jj_eval_fail(ev, at, "slice indices must be integers or None");
        if (stp == 0) jj_eval_fail(ev, at, "slice step cannot be zero");
    }
    const int64_t lo = stp < 0 ? -1 : 0, hi = stp < 0 ? len - 1 : len;
    int64_t s = stp < 0 ? hi : lo, e = stp < 0 ? lo : hi;
    if (vs.k != JV_UNDEF && vs.k != JV_NONE) {
        s = as_index(vs, &ok);
        if (!ok) jj_eval_fail(ev, at, "slice indices must be integers or None");
        if (s < 0) {
            s += len;
            if (s < lo) s = lo;
        } else if (s > hi) {
            s = hi;
        }
    }
    if (ve.k != JV_UNDEF && ve.k != JV_NONE) {
        e = as_index(ve, &ok);
        if (!ok) jj_eval_fail(ev, at, "slice indices must be integers or None");
        if (e < 0) {
            e += len;
            if (e < lo) e = lo;
        } else if (e > hi) {
            e = hi;
        }
    }
    *start = s;
    *stop = e;
    *stepv = stp;
}

static jv slice(jj_ev *ev, const jj_node *at, jv obj, jv vs, jv ve, jv vstep) {
    if (obj.k == JV_UNDEF) undefined_error(ev, at, obj);
    int64_t s, e, stp;
    if (obj.k == JV_LIST && obj.l->view == JV_VIEW_NONE) {
        slice_indices(ev, at, vs, ve, vstep, (int64_t)obj.l->n, &s, &e, &stp);
        jv l = jv_new_list(ev->st, 0);
        for (int64_t i = s; stp > 0 ? i < e : i > e; i += stp) {
            jv_list_push(ev->st, l.l, obj.l->v[i]);
        }
        l.l->tuple = obj.l->tuple;
        return l;
    }
    if (obj.k == JV_STR) {
        const size_t len = jj_utf8_len(obj.s.p, obj.s.n);
        slice_indices(ev, at, vs, ve, vstep, (int64_t)len, &s, &e, &stp);
        if (stp == 1) {
            if (e <= s) return jv_str("", 0);
            const size_t a = jj_utf8_offset(obj.s.p, obj.s.n, (size_t)s);
            const size_t b = jj_utf8_offset(obj.s.p, obj.s.n, (size_t)e);
            return jv_str(obj.s.p + a, b - a);
        }
        jj_buf b = {0};
        jj_buf_put(ev->st, &b, "", 0);
        for (int64_t i = s; stp > 0 ? i < e : i > e; i += stp) {
            const size_t x = jj_utf8_offset(obj.s.p, obj.s.n, (size_t)i);
            const size_t y = jj_utf8_offset(obj.s.p, obj.s.n, (size_t)i + 1);
            jj_buf_put(ev->st, &b, obj.s.p + x, y - x);
        }
        return jv_str(b.p, b.n);
    }
    jj_eval_fail(ev, at, "'%s' object is not subscriptable", jv_kind_name(obj));
}

/* ---- calls ---- */

jv *jj_arg(jj_args *a, size_t i, const char *name) {
    if (i < a->n_pos) return &a->pos[i];
    for (size_t k = 0; name && k < a->n_kw; k++) {
        if (strcmp(a->kw_names[k], name) == 0) return &a->kw[k];
    }
    return NULL;
}

static void eval_args(jj_ev *ev, jj_frame *f, const jj_node *n, jj_args *a) {
    memset(a, 0, sizeof(*a));
    if (!n->n_kids) return;
    a->pos = jj_alloc(ev->st, n->n_kids * sizeof(jv));
    a->kw = jj_alloc(ev->st, n->n_kids * sizeof(jv));
    a->kw_names = jj_alloc(ev->st, n->n_kids * sizeof(char *));
    for (size_t i = 0; i < n->n_kids; i++) {
        const jv v = jj_eval(ev, f, n->kids[i]);
        if (n->kw_names[i]) {
            a->kw_names[a->n_kw] = n->kw_names[i];
            a->kw[a->n_kw++] = v;
        } else {
            a->pos[a->n_pos++] = v;
        }
    }
}

static void render(jj_ev *ev, jj_frame *f, const jj_node *n);

/* Renders `body` in frame f into a new string. */
static jv capture(jj_ev *ev, jj_frame *f, const jj_node *body) {
    jj_buf *saved = ev->out;
    jj_buf b = {0};
    jj_buf_put(ev->st, &b, "", 0);
    ev->out = &b;
    render(ev, f, body);
    ev->out = saved;
    return jv_str(b.p, b.n);
}

static jv call_macro(jj_ev *ev, const jj_node *at, jv_func *fn, jj_args *a) {
    const jj_node *m = fn->caller ? fn->caller : fn->macro;
    if (ev->call_depth >= JJ_MAX_CALL) {
        jj_fail(ev->st, CLLM_ERR_TOO_LARGE, "macro calls nest deeper than %d", JJ_MAX_CALL);
    }
    jj_frame *g = frame_new(ev, fn->frame);
    jv varargs = jv_new_list(ev->st, 0), kwargs = jv_new_dict(ev->st, 0);
    size_t used_pos = 0;
    jv caller = jv_undef("caller");
    for (size_t i = 0; i < m->n_kids; i++) {
        const jj_node *p = m->kids[i];
        jv v;
        bool have = false;
        if (i < a->n_pos) {
            v = a->pos[i];
            have = true;
            used_pos++;
        }
        for (size_t k = 0; k < a->n_kw && !have; k++) {
            if (strcmp(a->kw_names[k], p->name) == 0) {
                v = a->kw[k];
                have = true;
            }
        }
        if (!have) v = p->a ? jj_eval(ev, g, p->a) : jv_undef(p->name);
        set_var(ev, g, p->name, v);
    }
    for (size_t i = used_pos; i < a->n_pos; i++) {
        if (m->n_kids < a->n_pos && i >= m->n_kids) jv_list_push(ev->st, varargs.l, a->pos[i]);
    }
    for (size_t k = 0; k < a->n_kw; k++) {
        bool param = false;
        for (size_t i = 0; i < m->n_kids && !param; i++) {
            param = strcmp(a->kw_names[k], m->kids[i]->name) == 0;
        }
        if (param) continue;
        if (strcmp(a->kw_names[k], "caller") == 0) {
            caller = a->kw[k];
        } else {
            jv_dict_set(ev->st, kwargs.d, jv_cstr(a->kw_names[k]), a->kw[k]);
        }
    }
    set_var(ev, g, "varargs", varargs);
    set_var(ev, g, "kwargs", kwargs);
    if (caller.k != JV_UNDEF) set_var(ev, g, "caller", caller);
    (void)at;
    ev->call_depth++;
    const int saved_ctl = ev->loop_ctl;
    ev->loop_ctl = 0;
    const jv out = capture(ev, g, m->d);
    ev->loop_ctl = saved_ctl;
    ev->call_depth--;
    return out;
}

jv jj_call(jj_ev *ev, jj_frame *f, const jj_node *at, jv fn, jj_args *a) {
    (void)f;
    if (fn.k == JV_UNDEF) undefined_error(ev, at, fn);
    if (fn.k != JV_FUNC) jj_eval_fail(ev, at, "'%s' object is not callable", jv_kind_name(fn));
    step(ev, at);
    if (fn.fn->builtin) return fn.fn->builtin(ev, at, a);
    return call_macro(ev, at, fn.fn, a);
}

static jv eval_call(jj_ev *ev, jj_frame *f, const jj_node *n) {
    jj_args a;
    if (n->a->type == E_ATTR) {
        const jv obj = jj_eval(ev, f, n->a->a);
        if (obj.k == JV_UNDEF) undefined_error(ev, n, obj);
        eval_args(ev, f, n, &a);
        bool found = false;
        if (!(obj.k == JV_DICT && obj.d->ns)) {
            const jv r = jj_method(ev, n, obj, n->a->name, &a, &found);
            if (found) return r;
        }
        const jv fn = jj_getattr(ev, n, obj, n->a->name);
        if (fn.k == JV_UNDEF) {
            jj_eval_fail(ev, n, "'%s' object has no attribute '%s'", jv_kind_name(obj), n->a->name);
        }
        return jj_call(ev, f, n, fn, &a);
    }
    const jv fn = jj_eval(ev, f, n->a);
    eval_args(ev, f, n, &a);
    return jj_call(ev, f, n, fn, &a);
}

/* A filter chain over `input` (filter blocks and block sets: the innermost
 * filter's input is NULL). */
static jv apply_filters(jj_ev *ev, jj_frame *f, const jj_node *n, jv input) {
    const jv in = n->a ? apply_filters(ev, f, n->a, input) : input;
    jj_args a;
    eval_args(ev, f, n, &a);
    return jj_filter(ev, f, n, n->name, in, &a);
}

/* ---- expressions ---- */

jv jj_eval(jj_ev *ev, jj_frame *f, const jj_node *n) {
    switch (n->type) {
    case E_LIT: return n->lit;
    case E_NAME: return lookup(ev, f, n->name);
    case E_ATTR: return jj_getattr(ev, n, jj_eval(ev, f, n->a), n->name);
    case E_ITEM: {
        const jv obj = jj_eval(ev, f, n->a);
        return jj_getitem(ev, n, obj, jj_eval(ev, f, n->b));
    }
    case E_SLICE: {
        const jv obj = jj_eval(ev, f, n->a);
        const jv s = n->b ? jj_eval(ev, f, n->b) : jv_none();
        const jv e = n->c ? jj_eval(ev, f, n->c) : jv_none();
        const jv st = n->d ? jj_eval(ev, f, n->d) : jv_none();
        return slice(ev, n, obj, s, e, st);
    }
    case E_CALL: return eval_call(ev, f, n);
    case E_FILTER: {
        const jv in = jj_eval(ev, f, n->a);
        jj_args a;
        eval_args(ev, f, n, &a);
        return jj_filter(ev, f, n, n->name, in, &a);
    }
    case E_TEST: {
        const jv v = jj_eval(ev, f, n->a);
        jj_args a;
        eval_args(ev, f, n, &a);
        const bool r = jj_test(ev, n, n->name, v, &a);
        return jv_bool(n->op ? !r : r);
    }
    case E_NOT: return jv_bool(!jv_truthy(jj_eval(ev, f, n->a)));
    case E_NEG:
    case E_POS: {
        const jv v = jj_eval(ev, f, n->a);
        if (v.k == JV_UNDEF) undefined_error(ev, n, v);
        if (!is_num(v)) {
            jj_eval_fail(ev, n, "bad operand type for unary %c: '%s'", n->type == E_NEG ? '-' : '+',
                         jv_kind_name(v));
        }
        if (n->type == E_POS) return v.k == JV_BOOL ? jv_int(v.b) : v;
        if (v.k == JV_FLOAT) return jv_float(-v.f);
        if (ival(v) == INT64_MIN) jj_eval_fail(ev, n, "integer overflow");
        return jv_int(-ival(v));
    }
    case E_BIN: {
        const jv a = jj_eval(ev, f, n->a);
        return binop(ev, n, n->op, a, jj_eval(ev, f, n->b));
    }
    case E_AND: {
        const jv a = jj_eval(ev, f, n->a);
        return jv_truthy(a) ? jj_eval(ev, f, n->b) : a;
    }
    case E_OR: {
        const jv a = jj_eval(ev, f, n->a);
        return jv_truthy(a) ? a : jj_eval(ev, f, n->b);
    }
    case E_COND:
        if (jv_truthy(jj_eval(ev, f, n->a))) return jj_eval(ev, f, n->b);
        return n->c ? jj_eval(ev, f, n->c) : jv_undef("the else of an inline if");
    case E_LIST:
    case E_TUPLE: {
        jv l = jv_new_list(ev->st, n->n_kids);
        for (size_t i = 0; i < n->n_kids; i++)
            jv_list_push(ev->st, l.l, jj_eval(ev, f, n->kids[i]));
        l.l->tuple = n->type == E_TUPLE;
        return l;
    }
    case E_DICT: {
        jv d = jv_new_dict(ev->st, n->n_kids / 2);
        for (size_t i = 0; i + 1 < n->n_kids; i += 2) {
            const jv k = jj_eval(ev, f, n->kids[i]);
            if (k.k == JV_LIST && !k.l->tuple) jj_eval_fail(ev, n, "unhashable type: 'list'");
            if (k.k == JV_DICT) jj_eval_fail(ev, n, "unhashable type: 'dict'");
            jv_dict_set(ev->st, d.d, k, jj_eval(ev, f, n->kids[i + 1]));
        }
        return d;
    }
    default: break;
    }
    jj_eval_fail(ev, n, "not an expression");
}

/* ---- statements ---- */

static void assign(jj_ev *ev, jj_frame *f, const jj_node *target, jv v) {
    if (target->type == E_NAME) {
        set_var(ev, f, target->name, v);
        return;
    }
    if (target->type == E_ATTR) {
        const jv obj = lookup(ev, f, target->a->name);
        if (obj.k != JV_DICT || !obj.d->ns) {
            jj_eval_fail(ev, target, "cannot assign attribute on non-namespace object");
        }
        jv_dict_set(ev->st, obj.d, jv_cstr(target->name), v);
        return;
    }
    /* a tuple of names */
    const jv_list *items = jj_iterate(ev, target, v);
    if (items->n != target->n_kids) {
        jj_eval_fail(ev, target, "%s values to unpack (expected %zu, got %zu)",
                     items->n > target->n_kids ? "too many" : "not enough", target->n_kids,
                     items->n);
    }
    for (size_t i = 0; i < items->n; i++) set_var(ev, f, target->kids[i]->name, items->v[i]);
}

/* One frame and one loop object serve every iteration (reset each time), so
 * a long loop allocates nothing per item; a list is iterated in place. */
static void render_for(jj_ev *ev, jj_frame *f, const jj_node *n) {
    if (n->op) jj_eval_fail(ev, n, "recursive loops are not supported");
    const jv seq = jj_eval(ev, f, n->b);
    jv_list *items = seq.k == JV_LIST ? seq.l : jj_iterate(ev, n, seq);
    jj_frame *g = frame_new(ev, f);
    if (n->c) { /* for x in y if cond: the loop sees only the items that pass */
        jv kept = jv_new_list(ev->st, 0);
        for (size_t i = 0; i < items->n; i++) {
            step(ev, n);
            g->vars->n = 0;
            assign(ev, g, n->a, items->v[i]);
            if (jv_truthy(jj_eval(ev, g, n->c))) jv_list_push(ev->st, kept.l, items->v[i]);
        }
        items = kept.l;
    }
    if (items->n == 0) {
        if (n->e) render(ev, f, n->e);
        return;
    }
    const int64_t len = (int64_t)items->n;
    jv loop = jv_new_dict(ev->st, 12);
    static const char *const k_keys[] = {"index",  "index0",   "revindex", "revindex0",
                                         "first",  "last",     "length",   "depth",
                                         "depth0", "previtem", "nextitem"};
    for (size_t k = 0; k < CLLM_ARRAY_SIZE(k_keys); k++) {
        jv_dict_set(ev->st, loop.d, jv_cstr(k_keys[k]), jv_none());
    }
    jv *val = loop.d->vals; /* in k_keys' order */
    for (int64_t i = 0; i < len && (size_t)i < items->n; i++) {
        step(ev, n);
        val[0] = jv_int(i + 1);
        val[1] = jv_int(i);
        val[2] = jv_int(len - i);
        val[3] = jv_int(len - i - 1);
        val[4] = jv_bool(i == 0);
        val[5] = jv_bool(i == len - 1);
        val[6] = jv_int(len);
        val[7] = jv_int(1);
        val[8] = jv_int(0);
        val[9] = i > 0 ? items->v[i - 1] : jv_undef("loop.previtem");
        val[10] =
            i + 1 < len && (size_t)i + 1 < items->n ? items->v[i + 1] : jv_undef("loop.nextitem");
        g->vars->n = 0;
        set_var(ev, g, "loop", loop);
        assign(ev, g, n->a, items->v[i]);
        render(ev, g, n->d);
        if (ev->loop_ctl == 1) {
            ev->loop_ctl = 0;
            break;
        }
        ev->loop_ctl = 0;
    }
}

static void render(jj_ev *ev, jj_frame *f, const jj_node *n) {
    step(ev, n);
    switch (n->type) {
    case N_BODY:
        for (size_t i = 0; i < n->n_kids && !ev->loop_ctl; i++) render(ev, f, n->kids[i]);
        return;
    case N_TEXT: jj_buf_put(ev->st, ev->out, n->lit.s.p, n->lit.s.n); return;
    case N_OUT: jv_write_str(ev->st, ev->out, jj_eval(ev, f, n->a)); return;
    case N_IF:
        if (jv_truthy(jj_eval(ev, f, n->a))) {
            render(ev, f, n->b);
        } else if (n->c) {
            render(ev, f, n->c);
        }
        return;
    case N_FOR: render_for(ev, f, n); return;
    case N_SET: assign(ev, f, n->a, jj_eval(ev, f, n->b)); return;
    case N_SETBLOCK: {
        jv v = capture(ev, f, n->d);
        if (n->b) v = apply_filters(ev, f, n->b, v);
        assign(ev, f, n->a, v);
        return;
    }
    case N_MACRO: {
        jv fn = {.k = JV_FUNC};
        fn.fn = jj_alloc(ev->st, sizeof(*fn.fn));
        fn.fn->name = n->name;
        fn.fn->macro = n;
        fn.fn->frame = f;
        set_var(ev, f, n->name, fn);
        return;
    }
    case N_CALLBLOCK: {
        jv caller = {.k = JV_FUNC};
        caller.fn = jj_alloc(ev->st, sizeof(*caller.fn));
        caller.fn->name = "caller";
        caller.fn->caller = n;
        caller.fn->frame = f;
        const jj_node *call = n->a;
        jj_args a;
        eval_args(ev, f, call, &a);
        /* caller= as one more keyword argument */
        jj_args b = a;
        b.kw = jj_alloc(ev->st, (a.n_kw + 1) * sizeof(jv));
        b.kw_names = jj_alloc(ev->st, (a.n_kw + 1) * sizeof(char *));
        if (a.n_kw) {
            memcpy(b.kw, a.kw, a.n_kw * sizeof(jv));
            memcpy(b.kw_names, a.kw_names, a.n_kw * sizeof(char *));
        }
        b.kw[b.n_kw] = caller;
        b.kw_names[b.n_kw++] = "caller";
        const jv fn = jj_eval(ev, f, call->a);
        jv_write_str(ev->st, ev->out, jj_call(ev, f, call, fn, &b));
        return;
    }
    case N_FILTERBLOCK:
        jv_write_str(ev->st, ev->out, apply_filters(ev, f, n->b, capture(ev, f, n->d)));
        return;
    case N_BREAK: ev->loop_ctl = 1; return;
    case N_CONTINUE: ev->loop_ctl = 2; return;
    default: jj_eval_fail(ev, n, "not a statement");
    }
}

/* ---- entry ---- */

/* The source with "\r\n" and "\r" as "\n" and one trailing newline dropped. */
static char *normalise(jj_state *st, const char *src, size_t *n_out) {
    const size_t n = strlen(src);
    char *s = jj_alloc(st, n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            s[k++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else {
            s[k++] = src[i];
        }
    }
    if (k > 0 && s[k - 1] == '\n') k--;
    s[k] = '\0';
    *n_out = k;
    return s;
}

/* The render proper; any failure longjmps to st->jump. Returns the text. */
static char *render_all(jj_state *st, const char *template_src, const char *context_json,
                        int64_t now, size_t *len) {
    size_t n;
    const char *src = normalise(st, template_src, &n);
    st->src = src;
    st->src_len = n;
    const jj_node *body = jj_parse(st, src, n);
    jj_ev ev = {.st = st, .now = now > 0 ? now : (int64_t)time(NULL)};
    ev.globals = jv_new_dict(st, 16).d;
    jj_add_globals(&ev, ev.globals);
    ev.root = frame_new(&ev, NULL);
    if (context_json) {
        const jv ctx = jv_parse_json(st, context_json, strlen(context_json));
        if (ctx.k != JV_DICT) jj_fail(st, CLLM_ERR_FORMAT, "the context is not a JSON object");
        ev.root->vars = ctx.d;
    }
    /* the template's top-level variables live beside the context's */
    jj_frame *top = frame_new(&ev, ev.root);
    jj_buf b = {0};
    jj_buf_put(st, &b, "", 0);
    ev.out = &b;
    render(&ev, top, body);
    char *t = cllm_malloc(b.n + 1);
    if (!t) jj_fail(st, CLLM_ERR_NOMEM, "out of host memory for %zu bytes", b.n + 1);
    memcpy(t, b.p, b.n + 1);
    *len = b.n;
    return t;
}

cllm_status cllm_jinja_render(const char *template_src, const char *context_json, int64_t now,
                              char **out, size_t *out_len) {
    CLLM_ASSERT(template_src != NULL && out != NULL);
    jj_state *st = cllm_calloc(1, sizeof(*st));
    if (!st) return cllm_error(CLLM_ERR_NOMEM, "jinja: out of host memory");
    /* the arguments travel through st: nothing this frame holds in a
     * register is read after the longjmp but these (volatile) */
    st->arg_src = template_src;
    st->arg_ctx = context_json;
    st->arg_now = now;
    char *volatile text = NULL;
    volatile size_t len = 0;
    if (setjmp(st->jump) == 0) {
        size_t n = 0;
        text = render_all(st, st->arg_src, st->arg_ctx, st->arg_now, &n);
        len = n;
    }
    cllm_status status = CLLM_OK;
    if (!text) status = cllm_error(st->status, "chat template: %s", st->msg);
    jj_arena_free(st);
    cllm_free(st);
    if (status != CLLM_OK) return status;
    *out = text;
    if (out_len) *out_len = len;
    return CLLM_OK;
}
