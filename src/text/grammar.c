/* GBNF grammars: parser and compiler, the matcher's stack sets, and the
 * vocabulary trie for token masks. See grammar.h. */
#include "text/grammar.h"
#include "core/hostmem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- compiled form ------------------------------------------------------
 *
 * Every alternative of every rule is a run of elements in `elems`, ended by
 * EL_END. An element is a kind (4 bits) and an argument (28 bits): EL_REF
 * names a rule, EL_BYTES a byte set (a 256-bit map in `sets`). A position
 * is an index into `elems`. */

enum { EL_END = 0, EL_REF = 1, EL_BYTES = 2 };
#define EL(kind, arg) (((uint32_t)(kind) << 28) | (uint32_t)(arg))
#define EL_KIND(e)    ((e) >> 28)
#define EL_ARG(e)     ((e)&0x0FFFFFFFu)

typedef struct byteset {
    uint32_t w[8];
} byteset;

static bool byteset_has(const byteset *s, uint8_t b) { return (s->w[b >> 5] >> (b & 31)) & 1u; }
static void byteset_add(byteset *s, uint8_t b) { s->w[b >> 5] |= 1u << (b & 31); }

struct cllm_grammar {
    uint32_t *elems; /* (n_elems) */
    size_t n_elems;
    uint32_t *alt_start; /* (n_alts) first position of each alternative, by rule */
    uint32_t
        *rule_alt; /* (n_rules + 1) rule r's alternatives: alt_start[rule_alt[r], rule_alt[r+1]) */
    uint32_t n_rules;
    byteset *sets; /* (n_sets) */
    uint32_t n_sets;
    uint32_t root;
};

/* ---- growable arrays ---- */

typedef struct u32vec {
    uint32_t *v;
    size_t n, cap;
} u32vec;

static bool vec_reserve(u32vec *a, size_t extra) {
    if (a->n + extra <= a->cap) return true;
    size_t cap = a->cap ? a->cap : 64;
    while (cap < a->n + extra) cap *= 2;
    uint32_t *v = cllm_realloc(a->v, cap * sizeof(uint32_t));
    if (!v) return false;
    a->v = v;
    a->cap = cap;
    return true;
}

static bool vec_push(u32vec *a, uint32_t x) {
    if (!vec_reserve(a, 1)) return false;
    a->v[a->n++] = x;
    return true;
}

static bool vec_append(u32vec *a, const uint32_t *x, size_t n) {
    if (!vec_reserve(a, n)) return false;
    if (n) memcpy(a->v + a->n, x, n * sizeof(uint32_t));
    a->n += n;
    return true;
}

static void vec_free(u32vec *a) {
    cllm_free(a->v);
    *a = (u32vec){0};
}

/* ---- the parser ---- */

typedef struct prule {
    char *name;     /* NULL for a rule made for a group, repetition or class */
    uint32_t owner; /* the named rule whose body made it (itself when named) */
    size_t used_at; /* offset of the first reference, for an undefined rule */
    bool defined;
} prule;

typedef struct parser {
    const char *text;
    const char *p;
    prule *rules;
    uint32_t n_rules, cap_rules;
    u32vec elems;     /* every alternative, each ended by EL_END */
    u32vec alt_rule;  /* (n_alts) the rule of each alternative */
    u32vec alt_start; /* (n_alts) its first position */
    byteset *sets;
    uint32_t n_sets, cap_sets;
    uint32_t *set_index; /* open addressing over sets: index + 1, 0 empty */
    uint32_t index_cap;
    uint32_t cur; /* the named rule being parsed */
    cllm_status st;
} parser;

/* line:column (1-based, columns in characters) of `at` in the text */
static void line_col(const char *text, const char *at, int *line, int *col) {
    int l = 1, c = 1;
    for (const char *q = text; q < at && *q; q++) {
        if (*q == '\n') {
            l++;
            c = 1;
        } else if (((uint8_t)*q & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

/* Records a syntax error at `at`; returns false. */
static bool fail_at(parser *ps, const char *at, const char *what) {
    int line, col;
    line_col(ps->text, at, &line, &col);
    char got[16];
    if (!*at) {
        snprintf(got, sizeof(got), "the end");
    } else if ((uint8_t)*at < 0x20) {
        snprintf(got, sizeof(got), "byte 0x%02x", (uint8_t)*at);
    } else {
        snprintf(got, sizeof(got), "'%c'", *at);
    }
    ps->st = cllm_error(CLLM_ERR_FORMAT, "grammar: line %d, column %d: %s, got %s", line, col, what,
                        got);
    return false;
}

static bool fail_nomem(parser *ps) {
    ps->st = cllm_error(CLLM_ERR_NOMEM, "grammar: out of memory");
    return false;
}

static bool fail_large(parser *ps, const char *what) {
    ps->st = cllm_error(CLLM_ERR_TOO_LARGE, "grammar: too large: %s", what);
    return false;
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* Skips blanks, line ends and # comments. */
static const char *skip_ws(const char *p) {
    for (;;) {
        if (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') {
            p++;
        } else if (*p == '#') {
            while (*p && *p != '\n') p++;
        } else {
            return p;
        }
    }
}

/* Whether p starts `name ::=` (the next rule). */
static bool at_rule_start(const char *p) {
    if (!is_name_char(*p)) return false;
    while (is_name_char(*p)) p++;
    p = skip_ws(p);
    return p[0] == ':' && p[1] == ':' && p[2] == '=';
}

static bool new_rule(parser *ps, const char *name, size_t len, uint32_t *out) {
    if (ps->n_rules >= (1u << 27)) return fail_large(ps, "too many rules");
    if (ps->n_rules == ps->cap_rules) {
        const uint32_t cap = ps->cap_rules ? 2 * ps->cap_rules : 32;
        prule *r = cllm_realloc(ps->rules, cap * sizeof(*r));
        if (!r) return fail_nomem(ps);
        ps->rules = r;
        ps->cap_rules = cap;
    }
    prule *r = &ps->rules[ps->n_rules];
    *r = (prule){.owner = ps->cur, .used_at = (size_t)-1};
    if (name) {
        r->name = cllm_malloc(len + 1);
        if (!r->name) return fail_nomem(ps);
        memcpy(r->name, name, len);
        r->name[len] = '\0';
        r->owner = ps->n_rules;
    } else {
        r->defined = true;
    }
    *out = ps->n_rules++;
    return true;
}

/* The named rule `name[0, len)`, made (undefined) at its first mention. */
static bool named_rule(parser *ps, const char *name, size_t len, uint32_t *out) {
    for (uint32_t i = 0; i < ps->n_rules; i++) {
        const char *n = ps->rules[i].name;
        if (n && strlen(n) == len && memcmp(n, name, len) == 0) {
            *out = i;
            return true;
        }
    }
    return new_rule(ps, name, len, out);
}

static uint32_t set_hash(const byteset *s) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < 8; i++) h = (h ^ s->w[i]) * 16777619u;
    return h;
}

/* The index of byte set *s, added if new. */
static bool intern_set(parser *ps, const byteset *s, uint32_t *out) {
    if (2 * (ps->n_sets + 1) > ps->index_cap) {
        const uint32_t cap = ps->index_cap ? 2 * ps->index_cap : 64;
        uint32_t *idx = cllm_calloc(cap, sizeof(uint32_t));
        if (!idx) return fail_nomem(ps);
        for (uint32_t i = 0; i < ps->n_sets; i++) {
            uint32_t h = set_hash(&ps->sets[i]) & (cap - 1);
            while (idx[h]) h = (h + 1) & (cap - 1);
            idx[h] = i + 1;
        }
        cllm_free(ps->set_index);
        ps->set_index = idx;
        ps->index_cap = cap;
    }
    uint32_t h = set_hash(s) & (ps->index_cap - 1);
    for (; ps->set_index[h]; h = (h + 1) & (ps->index_cap - 1)) {
        if (memcmp(&ps->sets[ps->set_index[h] - 1], s, sizeof(*s)) == 0) {
            *out = ps->set_index[h] - 1;
            return true;
        }
    }
    if (ps->n_sets == ps->cap_sets) {
        const uint32_t cap = ps->cap_sets ? 2 * ps->cap_sets : 64;
        byteset *v = cllm_realloc(ps->sets, cap * sizeof(*v));
        if (!v) return fail_nomem(ps);
        ps->sets = v;
        ps->cap_sets = cap;
    }
    ps->sets[ps->n_sets] = *s;
    ps->set_index[h] = ps->n_sets + 1;
    *out = ps->n_sets++;
    return true;
}

/* Appends the element of the byte range [lo, hi] to v. */
static bool push_range(parser *ps, u32vec *v, uint8_t lo, uint8_t hi) {
    byteset s = {{0}};
    for (unsigned b = lo; b <= hi; b++) byteset_add(&s, (uint8_t)b);
    uint32_t id;
    if (!intern_set(ps, &s, &id)) return false;
    if (!vec_push(v, EL(EL_BYTES, id))) return fail_nomem(ps);
    return true;
}

/* Adds rule r's alternative elems[0, n) (EL_END appended). */
static bool add_alt(parser *ps, uint32_t r, const uint32_t *elems, size_t n) {
    if (ps->elems.n + n + 1 > CLLM_GRAMMAR_MAX_ELEMS) {
        return fail_large(ps, "too many elements");
    }
    if (!vec_push(&ps->alt_rule, r) || !vec_push(&ps->alt_start, (uint32_t)ps->elems.n) ||
        !vec_append(&ps->elems, elems, n) || !vec_push(&ps->elems, EL(EL_END, 0))) {
        return fail_nomem(ps);
    }
    return true;
}

static int utf8_encode(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a string or class at ps->p (an escape or a UTF-8
 * sequence) into *cp. */
static bool parse_char(parser *ps, uint32_t *cp) {
    const char *at = ps->p;
    const uint8_t c = (uint8_t)*at;
    if (c == '\\') {
        const char e = at[1];
        int digits = 0;
        switch (e) {
        case 'n': *cp = '\n'; break;
        case 'r': *cp = '\r'; break;
        case 't': *cp = '\t'; break;
        case '\\':
        case '"':
        case '\'':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/': *cp = (uint8_t)e; break;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default: return fail_at(ps, at + 1, "expected an escape (n r t \\ \" [ ] - x u U)");
        }
        ps->p = at + 2;
        if (digits) {
            uint32_t v = 0;
            for (int i = 0; i < digits; i++) {
                const int h = hex_value(ps->p[i]);
                if (h < 0) return fail_at(ps, ps->p + i, "expected a hexadecimal digit");
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
                return fail_at(ps, at, "expected an escape of a Unicode scalar value");
            }
            ps->p += digits;
            *cp = v;
        }
        return true;
    }
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || c == 0) return fail_at(ps, at, "expected a character (valid UTF-8)");
    uint32_t v = n == 1 ? c : n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (int i = 1; i < n; i++) {
        const uint8_t d = (uint8_t)at[i];
        if ((d & 0xC0) != 0x80) return fail_at(ps, at, "expected a character (valid UTF-8)");
        v = (v << 6) | (d & 0x3Fu);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min_cp[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
        return fail_at(ps, at, "expected a character (valid UTF-8)");
    }
    ps->p = at + n;
    *cp = v;
    return true;
}

/* ---- character classes: code point ranges to UTF-8 byte rows ---- */

typedef struct cprange {
    uint32_t lo, hi;
} cprange;

static int cprange_cmp(const void *pa, const void *pb) {
    const cprange *a = pa, *b = pb;
    return (a->lo > b->lo) - (a->lo < b->lo);
}

typedef struct class_out {
    parser *ps;
    byteset ascii;
    bool has_ascii;
    uint32_t rule; /* the rule of the multi-byte rows; UINT32_MAX until one is made */
} class_out;

/* Adds [lo, hi] (both encoded with the same length, and differing only in
 * trailing bytes that span their whole range) as one row. */
static bool class_row(class_out *co, uint32_t lo, uint32_t hi) {
    uint8_t a[4], b[4];
    const int n = utf8_encode(lo, a);
    (void)utf8_encode(hi, b);
    if (n == 1) {
        for (uint32_t c = lo; c <= hi; c++) byteset_add(&co->ascii, (uint8_t)c);
        co->has_ascii = true;
        return true;
    }
    if (co->rule == UINT32_MAX && !new_rule(co->ps, NULL, 0, &co->rule)) return false;
    u32vec row = {0};
    bool ok = true;
    for (int i = 0; i < n && ok; i++) ok = push_range(co->ps, &row, a[i], b[i]);
    ok = ok && add_alt(co->ps, co->rule, row.v, row.n);
    vec_free(&row);
    return ok;
}

/* Splits [lo, hi] until each piece is one row of byte ranges (the classic
 * construction: first at the encoding lengths, then wherever a piece does
 * not cover whole blocks of continuation bytes). */
static bool class_split(class_out *co, uint32_t lo, uint32_t hi) {
    if (lo > hi) return true;
    static const uint32_t max_of_len[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++) {
        const uint32_t m = max_of_len[i];
        if (lo <= m && hi > m) return class_split(co, lo, m) && class_split(co, m + 1, hi);
    }
    const int n = lo < 0x80 ? 1 : lo < 0x800 ? 2 : lo < 0x10000 ? 3 : 4;
    for (int i = 1; i < n; i++) {
        const uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0)
                return class_split(co, lo, lo | m) && class_split(co, (lo | m) + 1, hi);
            if ((hi & m) != m)
                return class_split(co, lo, (hi & ~m) - 1) && class_split(co, hi & ~m, hi);
        }
    }
    return class_row(co, lo, hi);
}

/* The element(s) of the code point set ranges[0, n) (negated: its
 * complement) appended to item. */
static bool compile_class(parser *ps, cprange *ranges, size_t n, bool negate, const char *at,
                          u32vec *item) {
    qsort(ranges, n, sizeof(*ranges), cprange_cmp);
    size_t m = 0; /* merge overlapping and adjacent ranges */
    for (size_t i = 0; i < n; i++) {
        if (m > 0 && ranges[i].lo <= ranges[m - 1].hi + 1) {
            if (ranges[i].hi > ranges[m - 1].hi) ranges[m - 1].hi = ranges[i].hi;
        } else {
            ranges[m++] = ranges[i];
        }
    }
    class_out co = {.ps = ps, .rule = UINT32_MAX};
    /* the pieces of the set (or of its complement), without surrogates */
    uint32_t next = 0;
    for (size_t i = 0; i <= m; i++) {
        uint32_t lo, hi;
        if (negate) {
            lo = next;
            hi = i < m ? (ranges[i].lo == 0 ? 0 : ranges[i].lo - 1) : 0x10FFFF;
            if (i < m) {
                next = ranges[i].hi + 1;
                if (ranges[i].lo == 0) continue;
            }
            if (lo > hi) continue;
        } else {
            if (i == m) break;
            lo = ranges[i].lo, hi = ranges[i].hi;
        }
        bool ok;
        if (lo <= 0xDFFF && hi >= 0xD800) {
            ok = (lo < 0xD800 ? class_split(&co, lo, 0xD7FF) : true) &&
                 (hi > 0xDFFF ? class_split(&co, 0xE000, hi) : true);
        } else {
            ok = class_split(&co, lo, hi);
        }
        if (!ok) return false;
    }
    if (!co.has_ascii && co.rule == UINT32_MAX) {
        return fail_at(ps, at, "expected a character class that matches some character");
    }
    uint32_t id;
    if (co.has_ascii && !intern_set(ps, &co.ascii, &id)) return false;
    if (co.rule == UINT32_MAX) {
        if (!vec_push(item, EL(EL_BYTES, id))) return fail_nomem(ps);
        return true;
    }
    if (co.has_ascii) {
        const uint32_t e = EL(EL_BYTES, id);
        if (!add_alt(ps, co.rule, &e, 1)) return false;
    }
    if (!vec_push(item, EL(EL_REF, co.rule))) return fail_nomem(ps);
    return true;
}

/* `[...]` at ps->p into item. */
static bool parse_class(parser *ps, u32vec *item) {
    const char *open = ps->p;
    ps->p++;
    const bool negate = *ps->p == '^';
    if (negate) ps->p++;
    cprange *ranges = NULL;
    size_t n = 0, cap = 0;
    bool ok = true;
    while (ok && *ps->p != ']') {
        if (!*ps->p) {
            ok = fail_at(ps, ps->p, "expected ']' to close the character class");
            break;
        }
        uint32_t lo, hi;
        const char *at = ps->p;
        if (!parse_char(ps, &lo)) {
            ok = false;
            break;
        }
        hi = lo;
        if (ps->p[0] == '-' && ps->p[1] != ']' && ps->p[1]) {
            ps->p++;
            if (!parse_char(ps, &hi)) {
                ok = false;
                break;
            }
            if (hi < lo) {
                ok = fail_at(ps, at, "expected a range whose end is not below its start");
                break;
            }
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            cprange *r = cllm_realloc(ranges, cap * sizeof(*r));
            if (!r) {
                ok = fail_nomem(ps);
                break;
            }
            ranges = r;
        }
        ranges[n++] = (cprange){lo, hi};
    }
    if (ok) {
        ps->p++; /* ']' */
        ok = compile_class(ps, ranges, n, negate, open, item);
    }
    cllm_free(ranges);
    return ok;
}

/* `"..."` at ps->p into item: one element per byte. */
static bool parse_string(parser *ps, u32vec *item) {
    ps->p++;
    while (*ps->p != '"') {
        if (!*ps->p) return fail_at(ps, ps->p, "expected '\"' to close the string");
        uint32_t cp;
        if (!parse_char(ps, &cp)) return false;
        uint8_t b[4];
        const int n = utf8_encode(cp, b);
        for (int i = 0; i < n; i++) {
            if (!push_range(ps, item, b[i], b[i])) return false;
        }
    }
    ps->p++;
    return true;
}

static bool parse_alternatives(parser *ps, uint32_t rule, int depth);

/* A decimal count of a repetition into *out. */
static bool parse_count(parser *ps, uint32_t *out) {
    if (*ps->p < '0' || *ps->p > '9') return fail_at(ps, ps->p, "expected a number");
    uint32_t v = 0;
    while (*ps->p >= '0' && *ps->p <= '9') {
        v = v * 10 + (uint32_t)(*ps->p - '0');
        if (v > CLLM_GRAMMAR_MAX_REPEAT) {
            return fail_large(ps, "a repetition count above 10000");
        }
        ps->p++;
    }
    *out = v;
    return true;
}

/* item repeated [min, max] times (max UINT32_MAX: no bound) appended to seq. */
static bool repeat(parser *ps, const u32vec *item, uint32_t min, uint32_t max, u32vec *seq) {
    for (uint32_t i = 0; i < min; i++) {
        if (seq->n + item->n > CLLM_GRAMMAR_MAX_ELEMS) {
            return fail_large(ps, "too many elements");
        }
        if (!vec_append(seq, item->v, item->n)) return fail_nomem(ps);
    }
    if (max == min) return true;
    u32vec alt = {0};
    uint32_t r = UINT32_MAX;
    bool ok = true;
    if (max == UINT32_MAX) { /* r ::= item r | (empty) */
        ok = new_rule(ps, NULL, 0, &r) && vec_append(&alt, item->v, item->n) &&
             vec_push(&alt, EL(EL_REF, r));
        if (ok) ok = add_alt(ps, r, alt.v, alt.n) && add_alt(ps, r, NULL, 0);
    } else { /* r_k ::= item r_{k-1} | (empty), r_1 ::= item | (empty) */
        for (uint32_t k = 0; ok && k < max - min; k++) {
            const uint32_t prev = r;
            alt.n = 0;
            ok = new_rule(ps, NULL, 0, &r) && vec_append(&alt, item->v, item->n) &&
                 (prev == UINT32_MAX || vec_push(&alt, EL(EL_REF, prev)));
            if (ok) ok = add_alt(ps, r, alt.v, alt.n) && add_alt(ps, r, NULL, 0);
        }
    }
    vec_free(&alt);
    if (!ok) return ps->st == CLLM_OK ? fail_nomem(ps) : false;
    if (!vec_push(seq, EL(EL_REF, r))) return fail_nomem(ps);
    return true;
}

/* One alternative's elements into seq: items with their quantifiers, up to
 * '|', ')', the end, or (at the top) the next `name ::=`. */
static bool parse_sequence(parser *ps, u32vec *seq, int depth) {
    u32vec item = {0};
    bool ok = true;
    for (;;) {
        ps->p = skip_ws(ps->p);
        const char c = *ps->p;
        if (!c || c == '|' || c == ')' || (depth == 0 && at_rule_start(ps->p))) break;
        item.n = 0;
        const char *at = ps->p;
        if (c == '"') {
            ok = parse_string(ps, &item);
        } else if (c == '[') {
            ok = parse_class(ps, &item);
        } else if (c == '.') {
            cprange none = {0, 0};
            ps->p++;
            ok = compile_class(ps, &none, 0, true, at, &item);
        } else if (c == '(') {
            uint32_t r;
            ps->p++;
            ok = new_rule(ps, NULL, 0, &r) && parse_alternatives(ps, r, depth + 1);
            if (ok) {
                ps->p = skip_ws(ps->p);
                if (*ps->p != ')') {
                    ok = fail_at(ps, ps->p, "expected ')' to close the group");
                } else {
                    ps->p++;
                    ok = vec_push(&item, EL(EL_REF, r)) || fail_nomem(ps);
                }
            }
        } else if (is_name_char(c)) {
            const char *name = ps->p;
            while (is_name_char(*ps->p)) ps->p++;
            uint32_t r;
            ok = named_rule(ps, name, (size_t)(ps->p - name), &r);
            if (ok && ps->rules[r].used_at == (size_t)-1)
                ps->rules[r].used_at = (size_t)(name - ps->text);
            ok = ok && (vec_push(&item, EL(EL_REF, r)) || fail_nomem(ps));
        } else {
            ok = fail_at(ps, at, "expected a rule name, a \"string\", a [class], '.', '(' or '|'");
        }
        if (!ok) break;
        /* a quantifier */
        const char *q = skip_ws(ps->p);
        uint32_t min = 1, max = 1;
        if (*q == '*' || *q == '+' || *q == '?') {
            min = *q == '+' ? 1 : 0;
            max = *q == '?' ? 1 : UINT32_MAX;
            ps->p = q + 1;
        } else if (*q == '{') {
            ps->p = skip_ws(q + 1);
            if (!(ok = parse_count(ps, &min))) break;
            ps->p = skip_ws(ps->p);
            max = min;
            if (*ps->p == ',') {
                ps->p = skip_ws(ps->p + 1);
                max = UINT32_MAX;
                if (*ps->p != '}' && !(ok = parse_count(ps, &max))) break;
                ps->p = skip_ws(ps->p);
            }
            if (*ps->p != '}') {
                ok = fail_at(ps, ps->p, "expected '}' to close the repetition");
                break;
            }
            ps->p++;
            if (max < min) {
                ok = fail_at(ps, q, "expected a repetition {m,n} with m <= n");
                break;
            }
        }
        if (!(ok = repeat(ps, &item, min, max, seq))) break;
    }
    vec_free(&item);
    return ok;
}

static bool parse_alternatives(parser *ps, uint32_t rule, int depth) {
    if (depth > 256) return fail_at(ps, ps->p, "expected groups nested at most 256 deep");
    u32vec seq = {0};
    bool ok = true;
    for (;;) {
        seq.n = 0;
        if (!(ok = parse_sequence(ps, &seq, depth))) break;
        if (!(ok = add_alt(ps, rule, seq.v, seq.n))) break;
        ps->p = skip_ws(ps->p);
        if (*ps->p != '|') break;
        ps->p++;
    }
    vec_free(&seq);
    return ok;
}

static bool parse_grammar(parser *ps) {
    ps->p = skip_ws(ps->p);
    if (!*ps->p) return fail_at(ps, ps->p, "expected a rule (name ::= ...)");
    while (*ps->p) {
        const char *name = ps->p;
        while (is_name_char(*ps->p)) ps->p++;
        if (ps->p == name) return fail_at(ps, ps->p, "expected a rule name");
        const size_t len = (size_t)(ps->p - name);
        ps->p = skip_ws(ps->p);
        if (strncmp(ps->p, "::=", 3) != 0)
            return fail_at(ps, ps->p, "expected '::=' after the rule name");
        ps->p += 3;
        uint32_t r;
        if (!named_rule(ps, name, len, &r)) return false;
        if (ps->rules[r].defined) {
            int line, col;
            line_col(ps->text, name, &line, &col);
            ps->st = cllm_error(CLLM_ERR_FORMAT,
                                "grammar: line %d, column %d: rule '%s' is defined twice", line,
                                col, ps->rules[r].name);
            return false;
        }
        ps->rules[r].defined = true;
        ps->cur = r;
        if (!parse_alternatives(ps, r, 0)) return false;
        ps->p = skip_ws(ps->p);
        if (*ps->p == ')')
            return fail_at(ps, ps->p, "expected a rule name or the end ('(' missing)");
    }
    return true;
}

/* ---- checks on the compiled rules ---- */

/* Left recursion: a rule that reaches itself through first elements
 * (after rules that can match nothing) would make the matcher expand
 * forever. The graph of "r may begin with s" must have no cycle. */
static bool check_left_recursion(parser *ps, cllm_grammar *g) {
    const uint32_t nr = g->n_rules;
    uint8_t *nullable = cllm_calloc(nr, 1);
    uint8_t *color = cllm_calloc(nr, 1);
    uint32_t *stack = cllm_malloc(2 * (size_t)nr * sizeof(uint32_t));
    if (!nullable || !color || !stack) {
        cllm_free(nullable), cllm_free(color), cllm_free(stack);
        return fail_nomem(ps);
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t r = 0; r < nr; r++) {
            if (nullable[r]) continue;
            for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1] && !nullable[r]; a++) {
                const uint32_t *e = g->elems + g->alt_start[a];
                while (EL_KIND(*e) == EL_REF && nullable[EL_ARG(*e)]) e++;
                if (EL_KIND(*e) == EL_END) nullable[r] = 1, changed = true;
            }
        }
    }
    /* depth-first search; stack holds (rule, next alternative/element cursor) */
    bool ok = true;
    for (uint32_t start = 0; start < nr && ok; start++) {
        if (color[start]) continue;
        size_t sp = 0;
        stack[sp++] = start, stack[sp++] = 0;
        color[start] = 1;
        while (sp > 0 && ok) {
            const uint32_t r = stack[sp - 2];
            uint32_t cursor = stack[sp - 1];
            /* the cursor enumerates (alternative, element) pairs of r as one
             * index over its alternatives' positions */
            uint32_t next = UINT32_MAX;
            for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
                const uint32_t *e0 = g->elems + g->alt_start[a];
                for (const uint32_t *e = e0; EL_KIND(*e) == EL_REF; e++) {
                    const uint32_t pos = (uint32_t)(e - g->elems);
                    if (pos >= cursor && (next == UINT32_MAX || pos < next)) next = pos;
                    if (!nullable[EL_ARG(*e)]) break;
                }
            }
            if (next == UINT32_MAX) {
                color[r] = 2;
                sp -= 2;
                continue;
            }
            stack[sp - 1] = next + 1;
            const uint32_t s = EL_ARG(g->elems[next]);
            if (color[s] == 1) {
                const prule *pr = &ps->rules[ps->rules[s].owner];
                ps->st = cllm_error(CLLM_ERR_FORMAT,
                                    "grammar: rule '%s' is left-recursive: it can reach itself "
                                    "before reading a character (directly, through rules that "
                                    "can match nothing, or a repetition of something empty)",
                                    pr->name ? pr->name : "?");
                ok = false;
            } else if (color[s] == 0) {
                color[s] = 1;
                stack[sp++] = s, stack[sp++] = 0;
            }
        }
    }
    cllm_free(nullable), cllm_free(color), cllm_free(stack);
    return ok;
}

cllm_status cllm_grammar_parse(const char *text, const char *root, cllm_grammar **out) {
    CLLM_ASSERT(text != NULL && out != NULL);
    if (!root) root = "root";
    if (strlen(text) > CLLM_GRAMMAR_MAX_TEXT) {
        return cllm_error(CLLM_ERR_TOO_LARGE, "grammar: the text is over %zu bytes",
                          (size_t)CLLM_GRAMMAR_MAX_TEXT);
    }
    parser ps = {.text = text, .p = text};
    cllm_grammar *g = NULL;
    bool ok = parse_grammar(&ps);
    for (uint32_t r = 0; ok && r < ps.n_rules; r++) {
        if (!ps.rules[r].defined) {
            int line, col;
            line_col(text, text + ps.rules[r].used_at, &line, &col);
            ps.st = cllm_error(CLLM_ERR_FORMAT,
                               "grammar: line %d, column %d: rule '%s' is used but not defined",
                               line, col, ps.rules[r].name);
            ok = false;
        }
    }
    uint32_t root_id = UINT32_MAX;
    for (uint32_t r = 0; ok && r < ps.n_rules; r++) {
        if (ps.rules[r].name && strcmp(ps.rules[r].name, root) == 0) root_id = r;
    }
    if (ok && root_id == UINT32_MAX) {
        ps.st = cllm_error(CLLM_ERR_FORMAT, "grammar: no rule named '%s' (the start rule)", root);
        ok = false;
    }
    if (ok) {
        g = cllm_calloc(1, sizeof(*g));
        const size_t n_alts = ps.alt_rule.n;
        if (g) {
            g->n_rules = ps.n_rules;
            g->root = root_id;
            g->rule_alt = cllm_calloc((size_t)ps.n_rules + 1, sizeof(uint32_t));
            g->alt_start = cllm_malloc((n_alts ? n_alts : 1) * sizeof(uint32_t));
        }
        if (!g || !g->rule_alt || !g->alt_start) {
            ok = fail_nomem(&ps);
        } else {
            /* counting sort of the alternatives by rule, in order of appearance */
            for (size_t a = 0; a < n_alts; a++) g->rule_alt[ps.alt_rule.v[a] + 1]++;
            for (uint32_t r = 0; r < ps.n_rules; r++) g->rule_alt[r + 1] += g->rule_alt[r];
            uint32_t *fill = cllm_malloc(((size_t)ps.n_rules + 1) * sizeof(uint32_t));
            if (!fill) {
                ok = fail_nomem(&ps);
            } else {
                memcpy(fill, g->rule_alt, ((size_t)ps.n_rules + 1) * sizeof(uint32_t));
                for (size_t a = 0; a < n_alts; a++)
                    g->alt_start[fill[ps.alt_rule.v[a]]++] = ps.alt_start.v[a];
                cllm_free(fill);
                g->elems = ps.elems.v, g->n_elems = ps.elems.n;
                ps.elems = (u32vec){0};
                g->sets = ps.sets, g->n_sets = ps.n_sets;
                ps.sets = NULL;
                ok = check_left_recursion(&ps, g);
            }
        }
    }
    for (uint32_t r = 0; r < ps.n_rules; r++) cllm_free(ps.rules[r].name);
    cllm_free(ps.rules);
    vec_free(&ps.elems);
    vec_free(&ps.alt_rule);
    vec_free(&ps.alt_start);
    cllm_free(ps.sets);
    cllm_free(ps.set_index);
    if (!ok) {
        cllm_grammar_free(g);
        return ps.st;
    }
    *out = g;
    return CLLM_OK;
}

void cllm_grammar_free(cllm_grammar *g) {
    if (!g) return;
    cllm_free(g->elems);
    cllm_free(g->alt_start);
    cllm_free(g->rule_alt);
    cllm_free(g->sets);
    cllm_free(g);
}

/* ---- the matcher ----
 *
 * A stack set is a run of records [len, pos_0, .., pos_{len-1}] in the
 * arena (pos_{len-1} the top, always at an EL_BYTES element); len 0 is the
 * empty stack of a complete sentence. The current set is the arena's first
 * `cur_words` words; the sets of a walk are built after it. */

typedef struct setref {
    size_t off, end; /* arena words [off, end) */
    uint32_t n_stacks;
    bool accept; /* holds the empty stack */
} setref;

#define HT_CAP (2 * CLLM_GRAMMAR_MAX_STACKS)

struct cllm_grammar_matcher {
    const cllm_grammar *g;
    u32vec arena;
    setref cur;  /* at arena offset 0 */
    u32vec init; /* the start set's words */
    setref init_ref;
    u32vec scratch; /* stacks being expanded */
    /* merging identical stacks: slot i is in use when ht_gen[i] == gen,
     * holding the arena offset of a record */
    uint32_t *ht_gen;
    size_t *ht_off;
    uint32_t gen;
    u32vec walk; /* the trie walk's frames */
};

static uint32_t stack_hash(const uint32_t *s, uint32_t len) {
    uint32_t h = 2166136261u ^ len;
    for (uint32_t i = 0; i < len; i++) h = (h ^ s[i]) * 16777619u;
    return h;
}

static cllm_status too_many_stacks(void) {
    return cllm_error(CLLM_ERR_TOO_LARGE,
                      "grammar: more than %d parse stacks at one point (the grammar is too "
                      "ambiguous)",
                      CLLM_GRAMMAR_MAX_STACKS);
}

/* Adds stack s[0, len) to the set being built (*set), unless it holds it. */
static cllm_status emit(cllm_grammar_matcher *m, setref *set, const uint32_t *s, uint32_t len) {
    uint32_t h = stack_hash(s, len) & (HT_CAP - 1);
    for (; m->ht_gen[h] == m->gen; h = (h + 1) & (HT_CAP - 1)) {
        const uint32_t *r = m->arena.v + m->ht_off[h];
        if (r[0] == len && memcmp(r + 1, s, len * sizeof(uint32_t)) == 0) return CLLM_OK;
    }
    if (set->n_stacks >= CLLM_GRAMMAR_MAX_STACKS) return too_many_stacks();
    if (!vec_reserve(&m->arena, (size_t)len + 1)) {
        return cllm_error(CLLM_ERR_NOMEM, "grammar: out of memory");
    }
    m->ht_gen[h] = m->gen;
    m->ht_off[h] = m->arena.n;
    m->arena.v[m->arena.n++] = len;
    memcpy(m->arena.v + m->arena.n, s, len * sizeof(uint32_t));
    m->arena.n += len;
    set->end = m->arena.n;
    set->n_stacks++;
    if (len == 0) set->accept = true;
    return CLLM_OK;
}

/* Makes room for scratch words [0, total). */
static bool scratch_room(cllm_grammar_matcher *m, size_t total) {
    if (total <= m->scratch.cap) return true;
    const size_t n = m->scratch.n;
    m->scratch.n = 0;
    const bool ok = vec_reserve(&m->scratch, total);
    m->scratch.n = n;
    return ok;
}

/* Expands the stack at scratch[base, base + len) until every top is a byte
 * set, emitting each result into *set. The stack may grow in place; copies
 * for other alternatives go above it. `depth` counts the nested copies. */
static cllm_status expand(cllm_grammar_matcher *m, setref *set, size_t base, uint32_t len,
                          int depth) {
    const cllm_grammar *g = m->g;
    if (depth > CLLM_GRAMMAR_MAX_NEST) {
        return cllm_error(CLLM_ERR_TOO_LARGE,
                          "grammar: more than %d rules entered before reading a character",
                          CLLM_GRAMMAR_MAX_NEST);
    }
    for (;;) {
        uint32_t *s = m->scratch.v + base;
        if (len == 0) return emit(m, set, s, 0);
        const uint32_t pos = s[len - 1];
        const uint32_t e = g->elems[pos];
        if (EL_KIND(e) == EL_END) {
            len--;
            continue;
        }
        if (EL_KIND(e) == EL_BYTES) return emit(m, set, s, len);
        /* a reference: the continuation replaces the top (dropped when it is
         * the end of its alternative, so that right recursion stays flat),
         * and each alternative of the rule is pushed on a copy, the last one
         * in place */
        const uint32_t r = EL_ARG(e);
        uint32_t keep = len - 1;
        if (EL_KIND(g->elems[pos + 1]) != EL_END) s[keep++] = pos + 1;
        if (keep + 1 > CLLM_GRAMMAR_MAX_DEPTH) {
            return cllm_error(CLLM_ERR_TOO_LARGE, "grammar: a parse stack deeper than %d",
                              CLLM_GRAMMAR_MAX_DEPTH);
        }
        const uint32_t a0 = g->rule_alt[r], a1 = g->rule_alt[r + 1];
        if (a0 == a1) return CLLM_OK;        /* a rule without alternatives matches nothing */
        const size_t copy = base + keep + 1; /* above this stack once it holds keep + 1 */
        if (!scratch_room(m, copy + keep + 1)) {
            return cllm_error(CLLM_ERR_NOMEM, "grammar: out of memory");
        }
        for (uint32_t a = a0; a + 1 < a1; a++) {
            uint32_t *dst = m->scratch.v + copy;
            memcpy(dst, m->scratch.v + base, keep * sizeof(uint32_t));
            dst[keep] = g->alt_start[a];
            CLLM_TRY(expand(m, set, copy, keep + 1, depth + 1));
        }
        s = m->scratch.v + base;
        s[keep] = g->alt_start[a1 - 1];
        len = keep + 1;
    }
}

static void set_begin(cllm_grammar_matcher *m, setref *set) {
    *set = (setref){.off = m->arena.n, .end = m->arena.n};
    if (++m->gen == 0) { /* wrapped: clear the stamps */
        memset(m->ht_gen, 0, HT_CAP * sizeof(uint32_t));
        m->gen = 1;
    }
}

/* The set after reading byte b from *from into *to (built at the arena's end). */
static cllm_status advance(cllm_grammar_matcher *m, const setref *from, uint8_t b, setref *to) {
    const cllm_grammar *g = m->g;
    set_begin(m, to);
    for (size_t o = from->off; o < from->end;) {
        const uint32_t len = m->arena.v[o];
        const size_t rec = o;
        o += (size_t)len + 1;
        if (len == 0) continue;
        const uint32_t top = m->arena.v[rec + len];
        if (!byteset_has(&g->sets[EL_ARG(g->elems[top])], b)) continue;
        if (!scratch_room(m, (size_t)len + 1)) {
            return cllm_error(CLLM_ERR_NOMEM, "grammar: out of memory");
        }
        memcpy(m->scratch.v, m->arena.v + rec + 1, len * sizeof(uint32_t));
        m->scratch.v[len - 1] = top + 1;
        CLLM_TRY(expand(m, to, 0, len, 0));
    }
    return CLLM_OK;
}

/* The start set into the arena (which must be empty) as the current set. */
static cllm_status start_set(cllm_grammar_matcher *m) {
    const cllm_grammar *g = m->g;
    m->arena.n = 0;
    set_begin(m, &m->cur);
    for (uint32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++) {
        if (!scratch_room(m, 2)) return cllm_error(CLLM_ERR_NOMEM, "grammar: out of memory");
        m->scratch.v[0] = g->alt_start[a];
        CLLM_TRY(expand(m, &m->cur, 0, 1, 0));
    }
    return CLLM_OK;
}

cllm_status cllm_grammar_matcher_new(const cllm_grammar *g, cllm_grammar_matcher **out) {
    CLLM_ASSERT(g != NULL && out != NULL);
    cllm_grammar_matcher *m = cllm_calloc(1, sizeof(*m));
    if (!m) return cllm_error(CLLM_ERR_NOMEM, "grammar: out of memory");
    m->g = g;
    m->ht_gen = cllm_calloc(HT_CAP, sizeof(uint32_t));
    m->ht_off = cllm_malloc(HT_CAP * sizeof(size_t));
    cllm_status st = CLLM_OK;
    if (!m->ht_gen || !m->ht_off || !vec_reserve(&m->arena, 256) || !vec_reserve(&m->scratch, 64)) {
        st = cllm_error(CLLM_ERR_NOMEM, "grammar: out of memory");
    }
    if (st == CLLM_OK) st = start_set(m);
    if (st == CLLM_OK && !vec_append(&m->init, m->arena.v, m->arena.n)) {
        st = cllm_error(CLLM_ERR_NOMEM, "grammar: out of memory");
    }
    if (st != CLLM_OK) {
        cllm_grammar_matcher_free(m);
        return st;
    }
    m->init_ref = m->cur;
    *out = m;
    return CLLM_OK;
}

void cllm_grammar_matcher_free(cllm_grammar_matcher *m) {
    if (!m) return;
    vec_free(&m->arena);
    vec_free(&m->init);
    vec_free(&m->scratch);
    vec_free(&m->walk);
    cllm_free(m->ht_gen);
    cllm_free(m->ht_off);
    cllm_free(m);
}

void cllm_grammar_matcher_reset(cllm_grammar_matcher *m) {
    CLLM_ASSERT(m != NULL);
    /* the arena holds at least the start set's words (reserved when made) */
    CLLM_ASSERT(vec_reserve(&m->arena, m->init.n));
    memcpy(m->arena.v, m->init.v, m->init.n * sizeof(uint32_t));
    m->arena.n = m->init.n;
    m->cur = m->init_ref;
}

/* Reads bytes[0, len) from the current set; *last is the resulting set
 * (n_stacks 0 when they cannot follow), built after the current one. */
static cllm_status walk_bytes(cllm_grammar_matcher *m, const uint8_t *bytes, size_t len,
                              setref *last) {
    setref s = m->cur;
    for (size_t i = 0; i < len && (i == 0 || s.n_stacks > 0); i++) {
        setref next;
        const cllm_status st = advance(m, &s, bytes[i], &next);
        if (st != CLLM_OK) {
            m->arena.n = m->cur.end;
            return st;
        }
        s = next;
    }
    *last = s;
    return CLLM_OK;
}

cllm_status cllm_grammar_matcher_try(cllm_grammar_matcher *m, const void *bytes, size_t len,
                                     bool *ok) {
    CLLM_ASSERT(m != NULL && (bytes != NULL || len == 0) && ok != NULL);
    setref s;
    CLLM_TRY(walk_bytes(m, bytes, len, &s));
    *ok = s.n_stacks > 0;
    m->arena.n = m->cur.end;
    return CLLM_OK;
}

cllm_status cllm_grammar_matcher_accept(cllm_grammar_matcher *m, const void *bytes, size_t len) {
    CLLM_ASSERT(m != NULL && (bytes != NULL || len == 0));
    setref s;
    CLLM_TRY(walk_bytes(m, bytes, len, &s));
    if (s.n_stacks == 0) {
        m->arena.n = m->cur.end;
        return cllm_error(CLLM_ERR_INVALID_ARG, "grammar: the text cannot continue the grammar");
    }
    /* the new set becomes the current one, at the arena's start */
    const size_t n = s.end - s.off;
    memmove(m->arena.v, m->arena.v + s.off, n * sizeof(uint32_t));
    m->arena.n = n;
    m->cur = (setref){.off = 0, .end = n, .n_stacks = s.n_stacks, .accept = s.accept};
    return CLLM_OK;
}

bool cllm_grammar_matcher_done(const cllm_grammar_matcher *m) {
    CLLM_ASSERT(m != NULL);
    return m->cur.accept;
}

bool cllm_grammar_matcher_can_continue(const cllm_grammar_matcher *m) {
    CLLM_ASSERT(m != NULL);
    return m->cur.n_stacks > (m->cur.accept ? 1u : 0u);
}

/* ---- the vocabulary trie ---- */

struct cllm_grammar_vocab {
    int32_t n_vocab;
    char *bytes; /* the pieces, one after another */
    size_t *off; /* (n_vocab + 1) piece of id: bytes[off[id], off[id + 1]) */
    uint32_t n_nodes;
    uint32_t *node_edge; /* (n_nodes + 1) edges of node i: [node_edge[i], node_edge[i + 1]) */
    uint8_t *edge_byte;  /* (n_nodes - 1) */
    uint32_t *edge_child;
    uint32_t *node_tok; /* (n_nodes + 1) tokens ending at node i: tok[node_tok[i], node_tok[i+1]) */
    int32_t *tok;
};

void cllm_grammar_vocab_free(cllm_grammar_vocab *v) {
    if (!v) return;
    cllm_free(v->bytes);
    cllm_free(v->off);
    cllm_free(v->node_edge);
    cllm_free(v->edge_byte);
    cllm_free(v->edge_child);
    cllm_free(v->node_tok);
    cllm_free(v->tok);
    cllm_free(v);
}

const char *cllm_grammar_vocab_piece(const cllm_grammar_vocab *v, int32_t id, size_t *len) {
    CLLM_ASSERT(v != NULL && id >= 0 && id < v->n_vocab && len != NULL);
    *len = v->off[id + 1] - v->off[id];
    return v->bytes + v->off[id];
}

cllm_status cllm_grammar_vocab_new(const cllm_tokenizer *tok, cllm_grammar_vocab **out) {
    CLLM_ASSERT(tok != NULL && out != NULL);
    const int32_t n = cllm_tokenizer_n_vocab(tok);
    cllm_grammar_vocab *v = cllm_calloc(1, sizeof(*v));
    /* the building trie: first child, next sibling, byte; tokens per node as lists */
    uint32_t *child = NULL, *sibling = NULL, *order = NULL;
    uint8_t *byte = NULL;
    int32_t *first_tok = NULL, *next_tok = NULL;
    if (!v) goto nomem;
    v->n_vocab = n;
    v->off = cllm_malloc(((size_t)n + 1) * sizeof(size_t));
    if (!v->off) goto nomem;
    size_t total = 0;
    for (int32_t id = 0; id < n; id++) {
        size_t len = 0;
        (void)cllm_tokenizer_token_to_piece(tok, id, false, &len);
        v->off[id] = total;
        total += len;
    }
    v->off[n] = total;
    if (total >= UINT32_MAX - 1) {
        cllm_grammar_vocab_free(v);
        return cllm_error(CLLM_ERR_TOO_LARGE, "grammar: the vocabulary's pieces are too long");
    }
    v->bytes = cllm_malloc(total + 1);
    const size_t max_nodes = total + 1;
    child = cllm_malloc(max_nodes * sizeof(uint32_t));
    sibling = cllm_malloc(max_nodes * sizeof(uint32_t));
    byte = cllm_malloc(max_nodes);
    first_tok = cllm_malloc(max_nodes * sizeof(int32_t));
    next_tok = cllm_malloc(((size_t)n + 1) * sizeof(int32_t));
    if (!v->bytes || !child || !sibling || !byte || !first_tok || !next_tok) goto nomem;
    uint32_t nodes = 1;
    child[0] = sibling[0] = UINT32_MAX;
    first_tok[0] = -1;
    byte[0] = 0;
    for (int32_t id = 0; id < n; id++) {
        size_t len = 0;
        const char *piece = cllm_tokenizer_token_to_piece(tok, id, false, &len);
        if (len) memcpy(v->bytes + v->off[id], piece, len);
        next_tok[id] = -1;
        if (len == 0) continue;
        uint32_t cur = 0;
        for (size_t i = 0; i < len; i++) {
            const uint8_t b = (uint8_t)piece[i];
            uint32_t c = child[cur];
            while (c != UINT32_MAX && byte[c] != b) c = sibling[c];
            if (c == UINT32_MAX) {
                c = nodes++;
                byte[c] = b;
                child[c] = UINT32_MAX;
                first_tok[c] = -1;
                sibling[c] = child[cur];
                child[cur] = c;
            }
            cur = c;
        }
        next_tok[id] = first_tok[cur];
        first_tok[cur] = id;
    }
    /* flatten breadth first: the children of a node get consecutive indices */
    v->n_nodes = nodes;
    order = cllm_malloc((size_t)nodes * sizeof(uint32_t));
    v->node_edge = cllm_malloc(((size_t)nodes + 1) * sizeof(uint32_t));
    v->edge_byte = cllm_malloc((size_t)nodes);
    v->edge_child = cllm_malloc((size_t)nodes * sizeof(uint32_t));
    v->node_tok = cllm_malloc(((size_t)nodes + 1) * sizeof(uint32_t));
    v->tok = cllm_malloc(((size_t)n + 1) * sizeof(int32_t));
    if (!order || !v->node_edge || !v->edge_byte || !v->edge_child || !v->node_tok || !v->tok) {
        goto nomem;
    }
    uint32_t q_len = 1, n_edges = 0, n_tok = 0;
    order[0] = 0;
    for (uint32_t i = 0; i < nodes; i++) {
        const uint32_t old = order[i];
        v->node_edge[i] = n_edges;
        v->node_tok[i] = n_tok;
        for (uint32_t c = child[old]; c != UINT32_MAX; c = sibling[c]) {
            v->edge_byte[n_edges] = byte[c];
            v->edge_child[n_edges++] = q_len;
            order[q_len++] = c;
        }
        for (int32_t t = first_tok[old]; t >= 0; t = next_tok[t]) v->tok[n_tok++] = t;
    }
    v->node_edge[nodes] = n_edges;
    v->node_tok[nodes] = n_tok;
    cllm_free(child), cllm_free(sibling), cllm_free(byte), cllm_free(first_tok);
    cllm_free(next_tok), cllm_free(order);
    *out = v;
    return CLLM_OK;

nomem:
    cllm_free(child), cllm_free(sibling), cllm_free(byte), cllm_free(first_tok);
    cllm_free(next_tok), cllm_free(order);
    cllm_grammar_vocab_free(v);
    return cllm_error(CLLM_ERR_NOMEM, "grammar: out of memory for the vocabulary");
}

/* The bytes that some stack of *s can read next. */
static void first_bytes(const cllm_grammar_matcher *m, const setref *s, byteset *out) {
    *out = (byteset){{0}};
    for (size_t o = s->off; o < s->end;) {
        const uint32_t len = m->arena.v[o];
        if (len > 0) {
            const byteset *b = &m->g->sets[EL_ARG(m->g->elems[m->arena.v[o + len]])];
            for (int i = 0; i < 8; i++) out->w[i] |= b->w[i];
        }
        o += (size_t)len + 1;
    }
}

/* A frame of the trie walk: a node, the next edge to try, the set after
 * the node's prefix and the bytes that set can read. */
enum { WF_NODE, WF_EDGE, WF_OFF, WF_END, WF_STACKS, WF_FIRSTS, WF_WORDS = WF_FIRSTS + 8 };

static bool push_frame(cllm_grammar_matcher *m, uint32_t node, uint32_t edge, const setref *s) {
    if (!vec_reserve(&m->walk, WF_WORDS)) return false;
    uint32_t *f = m->walk.v + m->walk.n;
    f[WF_NODE] = node, f[WF_EDGE] = edge, f[WF_OFF] = (uint32_t)s->off;
    f[WF_END] = (uint32_t)s->end, f[WF_STACKS] = s->n_stacks;
    byteset firsts;
    first_bytes(m, s, &firsts);
    memcpy(f + WF_FIRSTS, firsts.w, sizeof(firsts.w));
    m->walk.n += WF_WORDS;
    return true;
}

cllm_status cllm_grammar_matcher_mask(cllm_grammar_matcher *m, const cllm_grammar_vocab *v,
                                      uint8_t *allowed, int32_t *n_allowed) {
    CLLM_ASSERT(m != NULL && v != NULL && allowed != NULL && n_allowed != NULL);
    memset(allowed, 0, ((size_t)v->n_vocab + 7) / 8);
    int32_t count = 0;
    cllm_status st = CLLM_OK;
    m->walk.n = 0;
    if (!push_frame(m, 0, v->node_edge[0], &m->cur)) {
        return cllm_error(CLLM_ERR_NOMEM, "grammar: out of memory");
    }
    while (m->walk.n > 0 && st == CLLM_OK) {
        uint32_t *f = m->walk.v + m->walk.n - WF_WORDS;
        const uint32_t node = f[WF_NODE];
        const uint32_t e = f[WF_EDGE];
        if (e == v->node_edge[node + 1]) { /* done with this node */
            m->walk.n -= WF_WORDS;
            continue;
        }
        f[WF_EDGE] = e + 1;
        const uint8_t b = v->edge_byte[e];
        if (!((f[WF_FIRSTS + (b >> 5)] >> (b & 31)) & 1u)) continue;
        const setref from = {.off = f[WF_OFF], .end = f[WF_END], .n_stacks = f[WF_STACKS]};
        m->arena.n = from.end; /* drop the sets of the previous sibling's subtree */
        setref next;
        st = advance(m, &from, b, &next);
        if (st != CLLM_OK || next.n_stacks == 0) continue;
        if (next.end > UINT32_MAX) {
            st = cllm_error(CLLM_ERR_TOO_LARGE, "grammar: the mask walk is too large");
            break;
        }
        const uint32_t c = v->edge_child[e];
        for (uint32_t t = v->node_tok[c]; t < v->node_tok[c + 1]; t++) {
            const int32_t id = v->tok[t];
            allowed[id >> 3] |= (uint8_t)(1u << (id & 7));
            count++;
        }
        if (v->node_edge[c] == v->node_edge[c + 1]) continue; /* a leaf */
        if (!push_frame(m, c, v->node_edge[c], &next)) {
            st = cllm_error(CLLM_ERR_NOMEM, "grammar: out of memory");
        }
    }
    m->arena.n = m->cur.end;
    m->walk.n = 0;
    if (st != CLLM_OK) return st;
    *n_allowed = count;
    return CLLM_OK;
}
