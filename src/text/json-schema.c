/* JSON Schema to GBNF, and the built-in JSON grammar. See json-schema.h. */
#include "text/json-schema.h"
#include "core/hostmem.h"
#include "text/grammar.h"
#include "text/unicode.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Limits for untrusted schemas. */
#define JS_MAX_TEXT      (1 << 22) /* bytes of schema text */
#define JS_MAX_DEPTH     64        /* nesting of JSON values and of schemas */
#define JS_MAX_DEPTH_STR "64"
#define JS_MAX_RULES     20000 /* rules of the grammar */
#define JS_MAX_PROPS     1000  /* properties of one object */

/* Whitespace is limited (one space, or a line end and up to 20 blanks of
 * indent, between tokens): a model that keeps emitting blanks would
 * otherwise never have to close anything. */
static const char k_json_grammar[] =
    "root   ::= object\n"
    "value  ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* "
    ")? \"}\"\n"
    "array  ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "char   ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
    "ws     ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n";

const char *cllm_json_grammar(void) { return k_json_grammar; }

/* ---- a JSON reader (the schema is untrusted) ---- */

typedef enum jkind { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jkind;

typedef struct jv {
    jkind kind;
    bool b;
    double num;
    char *str;        /* J_STR: decoded UTF-8; J_NUM: the number's text */
    size_t len;       /* J_STR, J_NUM: bytes of str */
    struct jv *items; /* J_ARR, J_OBJ: n values */
    char **keys;      /* J_OBJ: n keys */
    size_t n;
} jv;

typedef struct jparser {
    const char *text, *p;
    cllm_status st;
} jparser;

static void jv_free(jv *v) {
    if (!v) return;
    for (size_t i = 0; i < v->n; i++) {
        jv_free(&v->items[i]);
        if (v->keys) cllm_free(v->keys[i]);
    }
    cllm_free(v->items);
    cllm_free(v->keys);
    cllm_free(v->str);
    *v = (jv){0};
}

static bool jfail(jparser *jp, const char *what) {
    if (jp->st == CLLM_OK) {
        jp->st = cllm_error(CLLM_ERR_FORMAT, "json schema: not JSON at byte %zu: expected %s",
                            (size_t)(jp->p - jp->text), what);
    }
    return false;
}

static bool jnomem(jparser *jp) {
    if (jp->st == CLLM_OK) jp->st = cllm_error(CLLM_ERR_NOMEM, "json schema: out of memory");
    return false;
}

static void jskip(jparser *jp) {
    while (*jp->p == ' ' || *jp->p == '\t' || *jp->p == '\n' || *jp->p == '\r') jp->p++;
}

static int jhex4(const char *p) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        const char c = p[i];
        const int h = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

static int put_utf8(uint32_t cp, char *o) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string at jp->p (the opening quote) into *out, *len. */
static bool jstring(jparser *jp, char **out, size_t *len) {
    const char *q = ++jp->p;
    size_t cap = 0;
    while (*q && *q != '"') { /* an upper bound: escapes only shrink */
        if (*q == '\\' && q[1]) q++;
        q++, cap++;
    }
    char *s = cllm_malloc(4 * cap + 1);
    if (!s) return jnomem(jp);
    size_t n = 0;
    for (;;) {
        const uint8_t c = (uint8_t)*jp->p;
        if (c == '"') break;
        if (c < 0x20) {
            cllm_free(s);
            return jfail(jp, c ? "no control character in a string" : "'\"' to end a string");
        }
        if (c != '\\') {
            s[n++] = (char)c;
            jp->p++;
            continue;
        }
        const char e = jp->p[1];
        jp->p += 2;
        switch (e) {
        case '"': s[n++] = '"'; break;
        case '\\': s[n++] = '\\'; break;
        case '/': s[n++] = '/'; break;
        case 'b': s[n++] = '\b'; break;
        case 'f': s[n++] = '\f'; break;
        case 'n': s[n++] = '\n'; break;
        case 'r': s[n++] = '\r'; break;
        case 't': s[n++] = '\t'; break;
        case 'u': {
            int cp = jhex4(jp->p);
            if (cp < 0) {
                cllm_free(s);
                return jfail(jp, "four hexadecimal digits after \\u");
            }
            jp->p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && jp->p[0] == '\\' && jp->p[1] == 'u') {
                const int lo = jhex4(jp->p + 2);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    jp->p += 6;
                }
            }
            if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD; /* a lone surrogate */
            n += (size_t)put_utf8((uint32_t)cp, s + n);
            break;
        }
        default:
            cllm_free(s);
            return jfail(jp, "an escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u)");
        }
    }
    jp->p++;
    s[n] = '\0';
    if (!cllm_utf8_valid(s, n)) {
        cllm_free(s);
        return jfail(jp, "valid UTF-8 in a string");
    }
    *out = s;
    *len = n;
    return true;
}

static bool jvalue(jparser *jp, jv *v, int depth);

static bool jpush(jparser *jp, jv *v, size_t *cap, bool keyed) {
    if (v->n < *cap) return true;
    const size_t c = *cap ? 2 * *cap : 4;
    jv *items = cllm_realloc(v->items, c * sizeof(*items));
    if (!items) return jnomem(jp);
    v->items = items;
    if (keyed) {
        char **keys = cllm_realloc(v->keys, c * sizeof(*keys));
        if (!keys) return jnomem(jp);
        v->keys = keys;
    }
    *cap = c;
    return true;
}

static bool jvalue(jparser *jp, jv *v, int depth) {
    *v = (jv){0};
    if (depth > JS_MAX_DEPTH) return jfail(jp, "nesting at most " JS_MAX_DEPTH_STR " deep");
    jskip(jp);
    const char c = *jp->p;
    if (c == '{' || c == '[') {
        const bool obj = c == '{';
        v->kind = obj ? J_OBJ : J_ARR;
        size_t cap = 0;
        jp->p++;
        jskip(jp);
        if (*jp->p == (obj ? '}' : ']')) {
            jp->p++;
            return true;
        }
        for (;;) {
            if (!jpush(jp, v, &cap, obj)) return false;
            if (obj) {
                jskip(jp);
                v->keys[v->n] = NULL;
                size_t klen;
                if (*jp->p != '"') return jfail(jp, "a string key");
                if (!jstring(jp, &v->keys[v->n], &klen)) return false;
                jskip(jp);
                if (*jp->p != ':') {
                    cllm_free(v->keys[v->n]);
                    return jfail(jp, "':'");
                }
                jp->p++;
            }
            if (!jvalue(jp, &v->items[v->n], depth + 1)) {
                jv_free(&v->items[v->n]);
                if (obj) cllm_free(v->keys[v->n]);
                return false;
            }
            v->n++;
            jskip(jp);
            if (*jp->p == ',') {
                jp->p++;
                continue;
            }
            if (*jp->p == (obj ? '}' : ']')) {
                jp->p++;
                return true;
            }
            return jfail(jp, obj ? "',' or '}'" : "',' or ']'");
        }
    }
    if (c == '"') {
        v->kind = J_STR;
        return jstring(jp, &v->str, &v->len);
    }
    if (!strncmp(jp->p, "true", 4) || !strncmp(jp->p, "false", 5)) {
        v->kind = J_BOOL;
        v->b = c == 't';
        jp->p += v->b ? 4 : 5;
        return true;
    }
    if (!strncmp(jp->p, "null", 4)) {
        jp->p += 4;
        return true;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        const char *s = jp->p;
        if (*jp->p == '-') jp->p++;
        if (*jp->p == '0') {
            jp->p++;
        } else if (*jp->p >= '1' && *jp->p <= '9') {
            while (*jp->p >= '0' && *jp->p <= '9') jp->p++;
        } else {
            return jfail(jp, "a digit");
        }
        if (*jp->p == '.') {
            jp->p++;
            if (*jp->p < '0' || *jp->p > '9') return jfail(jp, "a digit after '.'");
            while (*jp->p >= '0' && *jp->p <= '9') jp->p++;
        }
        if (*jp->p == 'e' || *jp->p == 'E') {
            jp->p++;
            if (*jp->p == '+' || *jp->p == '-') jp->p++;
            if (*jp->p < '0' || *jp->p > '9') return jfail(jp, "a digit in the exponent");
            while (*jp->p >= '0' && *jp->p <= '9') jp->p++;
        }
        v->kind = J_NUM;
        v->len = (size_t)(jp->p - s);
        v->str = cllm_malloc(v->len + 1);
        if (!v->str) return jnomem(jp);
        memcpy(v->str, s, v->len);
        v->str[v->len] = '\0';
        v->num = strtod(v->str, NULL);
        return true;
    }
    return jfail(jp, "a value");
}

static const jv *jget(const jv *obj, const char *key) {
    if (!obj || obj->kind != J_OBJ) return NULL;
    for (size_t i = 0; i < obj->n; i++) {
        if (!strcmp(obj->keys[i], key)) return &obj->items[i];
    }
    return NULL;
}

/* ---- text buffers ---- */

typedef struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = cllm_realloc(b->s, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void sb_puts(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_printf(sbuf *b, const char *fmt, ...) CLLM_PRINTF(2, 3);
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof(tmp)) {
        sb_add(b, tmp, (size_t)n);
        return;
    }
    char *big = cllm_malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_add(b, big, (size_t)n);
    cllm_free(big);
}

/* A GBNF string literal of s[0, n) (the JSON text the output must hold). */
static void sb_literal(sbuf *b, const char *s, size_t n) {
    sb_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        const uint8_t c = (uint8_t)s[i];
        if (c == '"' || c == '\\') {
            const char e[2] = {'\\', (char)c};
            sb_add(b, e, 2);
        } else if (c < 0x20 || c == 0x7F) {
            sb_printf(b, "\\x%02X", c);
        } else {
            sb_add(b, (const char *)&c, 1);
        }
    }
    sb_puts(b, "\"");
}

/* The compact JSON text of v (for enum and const). */
static void sb_json(sbuf *b, const jv *v) {
    switch (v->kind) {
    case J_NULL: sb_puts(b, "null"); break;
    case J_BOOL: sb_puts(b, v->b ? "true" : "false"); break;
    case J_NUM: sb_add(b, v->str, v->len); break;
    case J_STR:
        sb_puts(b, "\"");
        for (size_t i = 0; i < v->len; i++) {
            const uint8_t c = (uint8_t)v->str[i];
            if (c == '"' || c == '\\') {
                const char e[2] = {'\\', (char)c};
                sb_add(b, e, 2);
            } else if (c < 0x20) {
                sb_printf(b, "\\u%04x", c);
            } else {
                sb_add(b, (const char *)&c, 1);
            }
        }
        sb_puts(b, "\"");
        break;
    case J_ARR:
    case J_OBJ:
        sb_puts(b, v->kind == J_ARR ? "[" : "{");
        for (size_t i = 0; i < v->n; i++) {
            if (i) sb_puts(b, ",");
            if (v->kind == J_OBJ) {
                const jv key = {.kind = J_STR, .str = v->keys[i], .len = strlen(v->keys[i])};
                sb_json(b, &key);
                sb_puts(b, ":");
            }
            sb_json(b, &v->items[i]);
        }
        sb_puts(b, v->kind == J_ARR ? "]" : "}");
        break;
    }
}

/* ---- the converter ---- */

typedef struct conv {
    const jv *root;
    sbuf rules; /* the grammar, rule after rule */
    char **names;
    size_t n_names, cap_names;
    char **ref_keys; /* $ref targets already made, and their rules */
    char **ref_rules;
    size_t n_refs, cap_refs;
    int depth;
    cllm_status st;
} conv;

/* Rules every grammar gets (unused ones cost nothing). */
static const char k_prims[] =
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* "
    ")? \"}\"\n"
    "array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "number ::= integer ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
    "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]* )\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    "ws ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n"
    "format-date ::= [0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] "
    "| \"3\" [01] )\n"
    "format-time ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" "
    "[0-9]{1,9} )? ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n"
    "format-date-time ::= format-date \"T\" format-time\n"
    "format-uuid ::= [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
    "[0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}\n";

static const char *const k_reserved[] = {
    "value",       "object",           "array",      "string", "char", "number",
    "integer",     "boolean",          "null",       "ws",     "root", "format-date",
    "format-time", "format-date-time", "format-uuid"};

static bool cfail(conv *c, cllm_status st, const char *path, const char *fmt, ...)
    CLLM_PRINTF(4, 5);
static bool cfail(conv *c, cllm_status st, const char *path, const char *fmt, ...) {
    if (c->st != CLLM_OK) return false;
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    c->st = cllm_error(st, "json schema: at %s: %s", path[0] ? path : "#", msg);
    return false;
}

static bool cnomem(conv *c) {
    if (c->st == CLLM_OK) c->st = cllm_error(CLLM_ERR_NOMEM, "json schema: out of memory");
    return false;
}

/* A new rule name from `hint` (letters, digits and '-'; made unique) into
 * out[0, 96). */
static bool rule_name(conv *c, const char *hint, char out[96]) {
    size_t n = 0;
    for (const char *p = hint; *p && n < 60; p++) {
        const char ch = *p;
        const bool ok =
            (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (ok) {
            out[n++] = ch;
        } else if (n > 0 && out[n - 1] != '-') {
            out[n++] = '-';
        }
    }
    while (n > 0 && out[n - 1] == '-') n--;
    if (n == 0) out[n++] = 'r';
    out[n] = '\0';
    for (unsigned k = 1;; k++) {
        bool taken = false;
        for (size_t i = 0; i < CLLM_ARRAY_SIZE(k_reserved) && !taken; i++) {
            taken = !strcmp(k_reserved[i], out);
        }
        for (size_t i = 0; i < c->n_names && !taken; i++) taken = !strcmp(c->names[i], out);
        if (!taken) break;
        snprintf(out + n, 96 - n, "-%u", k);
    }
    if (c->n_names >= JS_MAX_RULES) {
        return cfail(c, CLLM_ERR_TOO_LARGE, "", "more than %d rules", JS_MAX_RULES);
    }
    if (c->n_names == c->cap_names) {
        const size_t cap = c->cap_names ? 2 * c->cap_names : 32;
        char **v = cllm_realloc(c->names, cap * sizeof(*v));
        if (!v) return cnomem(c);
        c->names = v;
        c->cap_names = cap;
    }
    c->names[c->n_names] = cllm_strdup(out);
    if (!c->names[c->n_names]) return cnomem(c);
    c->n_names++;
    return true;
}

/* Adds `name ::= body`. */
static void add_rule(conv *c, const char *name, const sbuf *body) {
    sb_puts(&c->rules, name);
    sb_puts(&c->rules, " ::= ");
    sb_add(&c->rules, body->s ? body->s : "\"\"", body->s ? body->n : 2);
    sb_puts(&c->rules, "\n");
}

static const char *const k_annotations[] = {"description", "title",     "default",  "examples",
                                            "$schema",     "$id",       "$comment", "deprecated",
                                            "readOnly",    "writeOnly", "$defs",    "definitions"};

static const char *const k_keywords[] = {"type",
                                         "properties",
                                         "required",
                                         "additionalProperties",
                                         "enum",
                                         "const",
                                         "items",
                                         "prefixItems",
                                         "minItems",
                                         "maxItems",
                                         "anyOf",
                                         "oneOf",
                                         "allOf",
                                         "$ref",
                                         "minLength",
                                         "maxLength",
                                         "pattern",
                                         "format",
                                         "minimum",
                                         "maximum",
                                         "exclusiveMinimum",
                                         "exclusiveMaximum"};

static bool is_in(const char *k, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(list[i], k)) return true;
    }
    return false;
}

static bool is_annotation(const char *k) {
    return is_in(k, k_annotations, CLLM_ARRAY_SIZE(k_annotations));
}

static bool visit(conv *c, const jv *s, const char *path, const char *hint, sbuf *out);

/* A path below `path` into buf. */
static const char *subpath(char *buf, size_t cap, const char *path, const char *a, const char *b) {
    snprintf(buf, cap, "%s/%s%s%s", path[0] ? path : "#", a, b ? "/" : "", b ? b : "");
    return buf;
}

/* A nonnegative integer keyword (minItems, ...) into *out; absent: false
 * with *out untouched. */
static bool get_count(conv *c, const jv *s, const char *key, const char *path, int64_t *out,
                      bool *present) {
    const jv *v = jget(s, key);
    *present = v != NULL;
    if (!v) return true;
    if (v->kind != J_NUM || v->num < 0 || v->num != (double)(int64_t)v->num) {
        return cfail(c, CLLM_ERR_FORMAT, path, "'%s' must be a nonnegative integer", key);
    }
    if (v->num > CLLM_GRAMMAR_MAX_REPEAT) {
        return cfail(c, CLLM_ERR_UNSUPPORTED, path, "'%s' above %d is not supported", key,
                     CLLM_GRAMMAR_MAX_REPEAT);
    }
    *out = (int64_t)v->num;
    return true;
}

/* The schema a "#/$defs/x" or "#/definitions/x" reference names. */
static const jv *resolve(conv *c, const char *ref, const char *path) {
    const char *name = NULL;
    const jv *defs = NULL;
    if (!strncmp(ref, "#/$defs/", 8)) {
        defs = jget(c->root, "$defs"), name = ref + 8;
    } else if (!strncmp(ref, "#/definitions/", 14)) {
        defs = jget(c->root, "definitions"), name = ref + 14;
    } else if (!strcmp(ref, "#")) {
        return c->root;
    } else {
        cfail(c, CLLM_ERR_UNSUPPORTED, path,
              "'$ref' \"%s\": only #, #/$defs/NAME and #/definitions/NAME are supported", ref);
        return NULL;
    }
    const jv *t = jget(defs, name);
    if (!t) cfail(c, CLLM_ERR_FORMAT, path, "'$ref' \"%s\" names no definition", ref);
    return t;
}

/* The rule of the definition `ref` (made once; references may recurse). */
static bool visit_ref(conv *c, const char *ref, const char *path, sbuf *out) {
    for (size_t i = 0; i < c->n_refs; i++) {
        if (!strcmp(c->ref_keys[i], ref)) {
            sb_puts(out, c->ref_rules[i]);
            return true;
        }
    }
    const jv *t = resolve(c, ref, path);
    if (!t) return false;
    char name[96];
    const char *slash = strrchr(ref, '/');
    if (!rule_name(c, slash ? slash + 1 : "root-ref", name)) return false;
    if (c->n_refs == c->cap_refs) {
        const size_t cap = c->cap_refs ? 2 * c->cap_refs : 8;
        char **k = cllm_realloc(c->ref_keys, cap * sizeof(*k));
        if (!k) return cnomem(c);
        c->ref_keys = k;
        char **r = cllm_realloc(c->ref_rules, cap * sizeof(*r));
        if (!r) return cnomem(c);
        c->ref_rules = r;
        c->cap_refs = cap;
    }
    c->ref_keys[c->n_refs] = cllm_strdup(ref);
    c->ref_rules[c->n_refs] = cllm_strdup(name);
    if (!c->ref_keys[c->n_refs] || !c->ref_rules[c->n_refs]) {
        cllm_free(c->ref_keys[c->n_refs]);
        cllm_free(c->ref_rules[c->n_refs]);
        return cnomem(c);
    }
    c->n_refs++;
    sbuf body = {0};
    const bool ok = visit(c, t, ref, name, &body);
    if (ok) add_rule(c, name, &body);
    cllm_free(body.s);
    if (!ok) return false;
    sb_puts(out, name);
    return true;
}

/* ---- integers in a range ---- */

/* The n-digit strings >= s (ge) or <= s (!ge), s of n digits. */
static void digits_bound(sbuf *b, const char *s, size_t n, bool ge) {
    if (n == 0) {
        sb_puts(b, "\"\"");
        return;
    }
    sb_puts(b, "( ");
    sb_literal(b, s, n);
    for (size_t i = 0; i < n; i++) {
        const int d = s[i] - '0';
        if (ge ? d == 9 : d == 0) continue;
        sb_puts(b, " | ");
        if (i) {
            sb_literal(b, s, i);
            sb_puts(b, " ");
        }
        sb_printf(b, "[%d-%d]", ge ? d + 1 : 0, ge ? 9 : d - 1);
        if (n - i - 1) sb_printf(b, " [0-9]{%zu}", n - i - 1);
    }
    sb_puts(b, " )");
}

/* The n-digit strings in [a, z] (a <= z, both n digits). */
static void digits_range(sbuf *b, const char *a, const char *z, size_t n) {
    size_t k = 0;
    while (k < n && a[k] == z[k]) k++;
    if (k == n) {
        sb_literal(b, a, n);
        return;
    }
    sb_puts(b, "( ");
    if (k) {
        sb_literal(b, a, k);
        sb_puts(b, " ");
    }
    const size_t m = n - k - 1;
    const int da = a[k] - '0', dz = z[k] - '0';
    sb_puts(b, "( ");
    sb_literal(b, a + k, 1);
    sb_puts(b, " ");
    digits_bound(b, a + k + 1, m, true);
    if (da + 1 <= dz - 1) {
        sb_printf(b, " | [%d-%d]", da + 1, dz - 1);
        if (m) sb_printf(b, " [0-9]{%zu}", m);
    }
    sb_puts(b, " | ");
    sb_literal(b, z + k, 1);
    sb_puts(b, " ");
    digits_bound(b, z + k + 1, m, false);
    sb_puts(b, " ) )");
}

/* Nonnegative integers in [lo, hi] (hi < 0: no bound), without leading
 * zeros, as alternatives (each starting with " | " after the first). */
static void nonneg_range(sbuf *b, int64_t lo, int64_t hi) {
    char los[24], his[24], x[24], y[24];
    const size_t nl = (size_t)snprintf(los, sizeof(los), "%lld", (long long)lo);
    const size_t nh = hi < 0 ? 0 : (size_t)snprintf(his, sizeof(his), "%lld", (long long)hi);
    const size_t last = hi < 0 ? nl : nh;
    sb_puts(b, "( ");
    for (size_t len = nl; len <= last; len++) {
        if (len > nl) sb_puts(b, " | ");
        if (len == nl) {
            memcpy(x, los, nl + 1);
        } else {
            x[0] = '1';
            memset(x + 1, '0', len - 1);
        }
        if (hi >= 0 && len == nh) {
            memcpy(y, his, nh + 1);
        } else {
            memset(y, '9', len);
        }
        digits_range(b, x, y, len);
    }
    if (hi < 0) sb_printf(b, " | [1-9] [0-9]{%zu,}", nl);
    sb_puts(b, " )");
}

#define JS_MAX_INT 1000000000000000LL /* bounds beyond 10^15 are refused */

/* Integers in [lo, hi]; has_lo / has_hi say whether a bound exists. */
static void int_range(sbuf *b, bool has_lo, int64_t lo, bool has_hi, int64_t hi) {
    bool first = true;
    sb_puts(b, "( ");
    if (!has_lo || lo < 0) { /* negative numbers: "-" and a magnitude */
        const int64_t mag_lo = has_hi && hi < 0 ? -hi : 1;
        const int64_t mag_hi = has_lo ? -lo : -1;
        sb_puts(b, "\"-\" ");
        nonneg_range(b, mag_lo, mag_hi);
        first = false;
    }
    if (!has_hi || hi >= 0) {
        if (!first) sb_puts(b, " | ");
        nonneg_range(b, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
    }
    sb_puts(b, " )");
}

/* minimum, maximum, exclusiveMinimum, exclusiveMaximum of an integer. */
static bool visit_integer(conv *c, const jv *s, const char *path, sbuf *out) {
    bool has_lo = false, has_hi = false;
    int64_t lo = 0, hi = 0;
    static const char *const keys[] = {"minimum", "exclusiveMinimum", "maximum",
                                       "exclusiveMaximum"};
    for (int i = 0; i < 4; i++) {
        const jv *v = jget(s, keys[i]);
        if (!v) continue;
        if (v->kind != J_NUM)
            return cfail(c, CLLM_ERR_FORMAT, path, "'%s' must be a number", keys[i]);
        if (!(v->num >= (double)-JS_MAX_INT && v->num <= (double)JS_MAX_INT)) {
            return cfail(c, CLLM_ERR_UNSUPPORTED, path,
                         "'%s' %s: bounds beyond 10^15 are not supported", keys[i], v->str);
        }
        const bool is_lo = i < 2;
        double x = is_lo ? ceil(v->num) : floor(v->num);
        if (i == 1 && x == v->num) x += 1;
        if (i == 3 && x == v->num) x -= 1;
        const int64_t n = (int64_t)x;
        if (is_lo) {
            lo = has_lo && lo > n ? lo : n, has_lo = true;
        } else {
            hi = has_hi && hi < n ? hi : n, has_hi = true;
        }
    }
    if (has_lo && has_hi && lo > hi) {
        return cfail(c, CLLM_ERR_FORMAT, path, "the integer range [%lld, %lld] is empty",
                     (long long)lo, (long long)hi);
    }
    if (!has_lo && !has_hi) {
        sb_puts(out, "integer");
        return true;
    }
    int_range(out, has_lo, lo, has_hi, hi);
    return true;
}

static bool visit_number(conv *c, const jv *s, const char *path, sbuf *out) {
    static const char *const keys[] = {"minimum", "exclusiveMinimum", "maximum",
                                       "exclusiveMaximum"};
    const jv *min = jget(s, "minimum");
    for (int i = 0; i < 4; i++) {
        const jv *v = jget(s, keys[i]);
        if (v && !(i == 0 && v->kind == J_NUM && v->num == 0)) {
            return cfail(c, CLLM_ERR_UNSUPPORTED, path,
                         "'%s' on a number is not supported (only integers take bounds; a "
                         "number takes minimum 0)",
                         keys[i]);
        }
    }
    sb_puts(out, min ? "( ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )? )"
                     : "number");
    return true;
}

/* ---- pattern: a regular expression subset to GBNF ----
 *
 * The pattern matches the decoded string; the grammar writes its JSON
 * form. Characters that JSON must escape (" \ and controls) are left out of
 * classes and '.', and literal ones are written escaped: the strings made
 * are a subset of those the pattern allows, all of them valid. */

typedef struct rx {
    conv *c;
    const char *path;
    const char *src, *p;
} rx;

static bool rx_fail(rx *r, const char *what) {
    return cfail(r->c, CLLM_ERR_UNSUPPORTED, r->path,
                 "'pattern' \"%s\": %s at offset %zu (supported: literals, classes, groups, "
                 "alternation, quantifiers, ^ and $ at the ends)",
                 r->src, what, (size_t)(r->p - r->src));
}

/* One literal code point in its JSON form. */
static void rx_lit(sbuf *b, uint32_t cp) {
    char u[8];
    if (cp == '"') {
        sb_puts(b, "\"\\\\\\\"\"");
    } else if (cp == '\\') {
        sb_puts(b, "\"\\\\\\\\\"");
    } else if (cp < 0x20) {
        snprintf(u, sizeof(u), "\\u%04x", (unsigned)cp);
        sb_literal(b, u, strlen(u));
    } else {
        const int n = put_utf8(cp, u);
        sb_literal(b, u, (size_t)n);
    }
}

/* A code point at r->p (UTF-8) into *cp. */
static bool rx_char(rx *r, uint32_t *cp) {
    const uint8_t c = (uint8_t)*r->p;
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    uint32_t v = n == 1 ? c : n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (int i = 1; i < n; i++) v = (v << 6) | ((uint8_t)r->p[i] & 0x3Fu);
    r->p += n;
    *cp = v;
    return true;
}

typedef struct rx_class {
    uint32_t lo[64], hi[64];
    int n;
} rx_class;

static bool rx_class_add(rx *r, rx_class *k, uint32_t lo, uint32_t hi) {
    if (k->n == 64) return rx_fail(r, "a class of more than 64 ranges");
    k->lo[k->n] = lo, k->hi[k->n] = hi, k->n++;
    return true;
}

/* \d \w \s into k; false when `e` is none of them. */
static bool rx_shorthand(rx *r, rx_class *k, char e, bool *ok) {
    *ok = true;
    switch (e) {
    case 'd': *ok = rx_class_add(r, k, '0', '9'); return true;
    case 'w':
        *ok = rx_class_add(r, k, 'a', 'z') && rx_class_add(r, k, 'A', 'Z') &&
              rx_class_add(r, k, '0', '9') && rx_class_add(r, k, '_', '_');
        return true;
    case 's':
        *ok = rx_class_add(r, k, ' ', ' ') && rx_class_add(r, k, '\t', '\n') &&
              rx_class_add(r, k, '\r', '\r');
        return true;
    default: return false;
    }
}

/* An escaped character (after the backslash) that stands for itself. */
static bool rx_escape_char(rx *r, uint32_t *cp) {
    const char e = *r->p;
    if (e == 'n' || e == 't' || e == 'r' || e == 'f' || e == 'v') {
        *cp = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == 'f' ? '\f' : '\v';
        r->p++;
        return true;
    }
    if (e == 'u') {
        const int v = jhex4(r->p + 1);
        if (v < 0) return rx_fail(r, "\\u without four hexadecimal digits");
        *cp = (uint32_t)v;
        r->p += 5;
        return true;
    }
    if (e && strchr(".*+?()[]{}|^$\\/-\"' #&~,:;<=>!@%`", e)) {
        *cp = (uint8_t)e;
        r->p++;
        return true;
    }
    return rx_fail(r, "an escape that is not supported (\\b, a back-reference, \\p, ...)");
}

/* The class k (negated: its complement) as an expression: the characters
 * JSON writes as they are, in a GBNF class, and " and \ as escapes when
 * the class holds them. */
static bool rx_emit_class(rx *r, const rx_class *k, bool negate, sbuf *b) {
    /* membership over code points as sorted, merged ranges */
    uint32_t lo[130], hi[130];
    int n = 0;
    for (int i = 0; i < k->n; i++) { /* insertion sort by lo */
        int j = n++;
        while (j > 0 && lo[j - 1] > k->lo[i]) lo[j] = lo[j - 1], hi[j] = hi[j - 1], j--;
        lo[j] = k->lo[i], hi[j] = k->hi[i];
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && lo[i] <= hi[m - 1] + 1) {
            if (hi[i] > hi[m - 1]) hi[m - 1] = hi[i];
        } else {
            lo[m] = lo[i], hi[m] = hi[i], m++;
        }
    }
    if (negate) {
        uint32_t nlo[130], nhi[130], next = 0;
        int c = 0;
        for (int i = 0; i < m; i++) {
            if (lo[i] > next) nlo[c] = next, nhi[c] = lo[i] - 1, c++;
            next = hi[i] + 1;
        }
        if (next <= 0x10FFFF) nlo[c] = next, nhi[c] = 0x10FFFF, c++;
        memcpy(lo, nlo, sizeof(uint32_t) * (size_t)c);
        memcpy(hi, nhi, sizeof(uint32_t) * (size_t)c);
        m = c;
    }
    bool quote = false, backslash = false;
    sbuf cls = {0};
    for (int i = 0; i < m; i++) {
        uint32_t a = lo[i] < 0x20 ? 0x20 : lo[i], z = hi[i];
        if (a > z) continue;
        /* split around '"' (0x22) and '\' (0x5C) */
        const uint32_t cut[2] = {0x22, 0x5C};
        for (int j = 0; j < 2 && a <= z; j++) {
            if (cut[j] < a || cut[j] > z) continue;
            if (cut[j] == 0x22) quote = true;
            if (cut[j] == 0x5C) backslash = true;
            if (a < cut[j]) sb_printf(&cls, "\\U%08X-\\U%08X", (unsigned)a, (unsigned)cut[j] - 1);
            a = cut[j] + 1;
        }
        if (a <= z) sb_printf(&cls, "\\U%08X-\\U%08X", (unsigned)a, (unsigned)z);
    }
    const bool any = cls.n > 0;
    if (!any && !quote && !backslash) {
        cllm_free(cls.s);
        return rx_fail(r, "a class that matches no character JSON can write");
    }
    sb_puts(b, "( ");
    if (any) {
        sb_puts(b, "[");
        sb_add(b, cls.s, cls.n);
        sb_puts(b, "]");
    }
    cllm_free(cls.s);
    if (quote) {
        if (any) sb_puts(b, " | ");
        rx_lit(b, '"');
    }
    if (backslash) {
        if (any || quote) sb_puts(b, " | ");
        rx_lit(b, '\\');
    }
    sb_puts(b, " )");
    return true;
}

static bool rx_alt(rx *r, sbuf *b, int depth);

static bool rx_atom(rx *r, sbuf *b, int depth) {
    const char ch = *r->p;
    if (ch == '(') {
        r->p++;
        if (*r->p == '?') {
            if (r->p[1] == ':') {
                r->p += 2;
            } else if (r->p[1] == 'P' && r->p[2] == '<') {
                r->p = strchr(r->p, '>') ? strchr(r->p, '>') + 1 : r->p;
            } else if (r->p[1] == '<' && r->p[2] != '=' && r->p[2] != '!') {
                r->p = strchr(r->p, '>') ? strchr(r->p, '>') + 1 : r->p;
            } else {
                return rx_fail(r, "a look-around or group flag");
            }
        }
        sb_puts(b, "( ");
        if (!rx_alt(r, b, depth + 1)) return false;
        if (*r->p != ')') return rx_fail(r, "a group without ')'");
        r->p++;
        sb_puts(b, " )");
        return true;
    }
    if (ch == '[') {
        r->p++;
        rx_class k = {.n = 0};
        const bool negate = *r->p == '^';
        if (negate) r->p++;
        bool first = true;
        while (*r->p && (*r->p != ']' || first)) {
            first = false;
            uint32_t a, z;
            if (*r->p == '\\') {
                r->p++;
                bool ok;
                if (rx_shorthand(r, &k, *r->p, &ok)) {
                    if (!ok) return false;
                    r->p++;
                    continue;
                }
                if (!rx_escape_char(r, &a)) return false;
            } else {
                rx_char(r, &a);
            }
            z = a;
            if (r->p[0] == '-' && r->p[1] && r->p[1] != ']') {
                r->p++;
                if (*r->p == '\\') {
                    r->p++;
                    if (!rx_escape_char(r, &z)) return false;
                } else {
                    rx_char(r, &z);
                }
                if (z < a) return rx_fail(r, "a reversed range");
            }
            if (!rx_class_add(r, &k, a, z)) return false;
        }
        if (*r->p != ']') return rx_fail(r, "a class without ']'");
        r->p++;
        return rx_emit_class(r, &k, negate, b);
    }
    if (ch == '.') {
        r->p++;
        rx_class k = {.n = 0};
        (void)rx_class_add(r, &k, '\n', '\n');
        return rx_emit_class(r, &k, true, b);
    }
    if (ch == '\\') {
        r->p++;
        const char e = *r->p;
        rx_class k = {.n = 0};
        bool ok;
        if (rx_shorthand(r, &k, (char)(e | 0x20), &ok)) {
            if (!ok) return false;
            r->p++;
            return rx_emit_class(r, &k, e >= 'A' && e <= 'Z', b);
        }
        uint32_t cp;
        if (!rx_escape_char(r, &cp)) return false;
        rx_lit(b, cp);
        return true;
    }
    if (ch == '^' || ch == '$') return rx_fail(r, "an anchor inside the pattern");
    if (strchr("*+?{", ch)) return rx_fail(r, "a quantifier with nothing to repeat");
    uint32_t cp;
    rx_char(r, &cp);
    rx_lit(b, cp);
    return true;
}

/* A decimal count. */
static bool rx_count(rx *r, unsigned *out) {
    if (*r->p < '0' || *r->p > '9') return rx_fail(r, "a repetition without a count");
    unsigned v = 0;
    while (*r->p >= '0' && *r->p <= '9') {
        v = v * 10 + (unsigned)(*r->p++ - '0');
        if (v > CLLM_GRAMMAR_MAX_REPEAT) return rx_fail(r, "a repetition count above 10000");
    }
    *out = v;
    return true;
}

static bool rx_seq(rx *r, sbuf *b, int depth) {
    bool empty = true;
    while (*r->p && *r->p != '|' && *r->p != ')') {
        if (*r->p == '$' && r->p[1] == '\0' && depth == 0) break;
        sb_puts(b, empty ? "( " : " ( ");
        if (!rx_atom(r, b, depth)) return false;
        sb_puts(b, " )");
        empty = false;
        const char q = *r->p;
        if (q == '*' || q == '+' || q == '?') {
            sb_add(b, &q, 1);
            r->p++;
        } else if (q == '{') {
            unsigned m = 0, n = 0;
            r->p++;
            if (!rx_count(r, &m)) return false;
            n = m;
            bool open = false;
            if (*r->p == ',') {
                r->p++;
                open = *r->p == '}';
                if (!open && !rx_count(r, &n)) return false;
            }
            if (*r->p != '}') return rx_fail(r, "a repetition without '}'");
            r->p++;
            if (!open && n < m) return rx_fail(r, "a repetition {m,n} with n < m");
            if (open) {
                sb_printf(b, "{%u,}", m);
            } else {
                sb_printf(b, "{%u,%u}", m, n);
            }
        } else {
            continue;
        }
        if (*r->p == '?') r->p++; /* lazy: the same strings */
        if (*r->p == '+') return rx_fail(r, "a possessive quantifier");
        if (strchr("*?{", *r->p) && *r->p) return rx_fail(r, "a quantifier on a quantifier");
    }
    if (empty) sb_puts(b, "\"\"");
    return true;
}

static bool rx_alt(rx *r, sbuf *b, int depth) {
    if (depth > 32) return rx_fail(r, "groups nested more than 32 deep");
    if (!rx_seq(r, b, depth)) return false;
    while (*r->p == '|') {
        r->p++;
        sb_puts(b, " | ");
        if (!rx_seq(r, b, depth)) return false;
    }
    return true;
}

static bool visit_pattern(conv *c, const char *pattern, const char *path, sbuf *out) {
    rx r = {.c = c, .path = path, .src = pattern, .p = pattern};
    const bool head = *r.p == '^';
    if (head) r.p++;
    sb_puts(out, "\"\\\"\" ");
    if (!head) sb_puts(out, "char* ");
    sb_puts(out, "( ");
    if (!rx_alt(&r, out, 0)) return false;
    bool tail = false;
    if (*r.p == '$' && r.p[1] == '\0') {
        tail = true;
        r.p++;
    }
    if (*r.p)
        return rx_fail(&r, *r.p == ')' ? "a ')' without '('" : "an anchor inside the pattern");
    sb_puts(out, " )");
    if (!tail) sb_puts(out, " char*");
    sb_puts(out, " \"\\\"\"");
    return true;
}

/* ---- strings, arrays, objects ---- */

static bool visit_string(conv *c, const jv *s, const char *path, sbuf *out) {
    const jv *pattern = jget(s, "pattern"), *format = jget(s, "format");
    int64_t min = 0, max = -1;
    bool has_min, has_max;
    if (!get_count(c, s, "minLength", path, &min, &has_min) ||
        !get_count(c, s, "maxLength", path, &max, &has_max)) {
        return false;
    }
    if (!has_max) max = -1;
    if (has_min && has_max && min > max) {
        return cfail(c, CLLM_ERR_FORMAT, path, "minLength %lld is above maxLength %lld",
                     (long long)min, (long long)max);
    }
    if ((pattern || format) && (has_min || has_max)) {
        return cfail(c, CLLM_ERR_UNSUPPORTED, path,
                     "'minLength' or 'maxLength' beside '%s' is not supported",
                     pattern ? "pattern" : "format");
    }
    if (pattern && format) {
        return cfail(c, CLLM_ERR_UNSUPPORTED, path, "'pattern' beside 'format' is not supported");
    }
    if (pattern) {
        if (pattern->kind != J_STR)
            return cfail(c, CLLM_ERR_FORMAT, path, "'pattern' must be a string");
        return visit_pattern(c, pattern->str, path, out);
    }
    if (format) {
        static const char *const formats[] = {"date", "time", "date-time", "uuid"};
        if (format->kind != J_STR)
            return cfail(c, CLLM_ERR_FORMAT, path, "'format' must be a string");
        if (!is_in(format->str, formats, CLLM_ARRAY_SIZE(formats))) {
            return cfail(c, CLLM_ERR_UNSUPPORTED, path,
                         "'format' \"%s\" is not supported (date, time, date-time, uuid are)",
                         format->str);
        }
        sb_printf(out, "\"\\\"\" format-%s \"\\\"\"", format->str);
        return true;
    }
    if (!has_min && !has_max) {
        sb_puts(out, "string");
    } else if (!has_max) {
        sb_printf(out, "\"\\\"\" char{%lld,} \"\\\"\"", (long long)min);
    } else {
        sb_printf(out, "\"\\\"\" char{%lld,%lld} \"\\\"\"", (long long)min, (long long)max);
    }
    return true;
}

/* An item of an array or a value of an object: the schema's expression
 * (for `false`: nothing is allowed, *allowed = false). */
static bool visit_sub(conv *c, const jv *s, const char *path, const char *hint, sbuf *out,
                      bool *allowed) {
    *allowed = true;
    if (s && s->kind == J_BOOL && !s->b) {
        *allowed = false;
        return true;
    }
    if (!s || s->kind == J_BOOL) {
        sb_puts(out, "value");
        return true;
    }
    sb_puts(out, "( ");
    if (!visit(c, s, path, hint, out)) return false;
    sb_puts(out, " )");
    return true;
}

static bool visit_array(conv *c, const jv *s, const char *path, const char *hint, sbuf *out) {
    const jv *items = jget(s, "items"), *prefix = jget(s, "prefixItems");
    int64_t min = 0, max = -1;
    bool has_min, has_max;
    if (!get_count(c, s, "minItems", path, &min, &has_min) ||
        !get_count(c, s, "maxItems", path, &max, &has_max)) {
        return false;
    }
    if (!has_max) max = -1;
    if (prefix && prefix->kind != J_ARR) {
        return cfail(c, CLLM_ERR_FORMAT, path, "'prefixItems' must be an array");
    }
    if (items && items->kind == J_ARR) {
        return cfail(c, CLLM_ERR_UNSUPPORTED, path,
                     "'items' as an array (draft 4 tuples) is not supported: use 'prefixItems'");
    }
    char buf[512], h[128];
    size_t k = prefix ? prefix->n : 0;
    if (max >= 0 && (int64_t)k > max) k = (size_t)max;
    /* the repeated items after the prefix */
    sbuf item = {0};
    bool more = true;
    snprintf(h, sizeof(h), "%s-item", hint);
    if (!visit_sub(c, items, subpath(buf, sizeof(buf), path, "items", NULL), h, &item, &more)) {
        cllm_free(item.s);
        return false;
    }
    if (!more && min > (int64_t)k) {
        cllm_free(item.s);
        return cfail(c, CLLM_ERR_FORMAT, path, "minItems %lld with items false after %zu",
                     (long long)min, k);
    }
    if (has_min && has_max && min > max) {
        cllm_free(item.s);
        return cfail(c, CLLM_ERR_FORMAT, path, "minItems %lld is above maxItems %lld",
                     (long long)min, (long long)max);
    }
    /* tail: the items from position k on, each after a comma */
    sbuf tail = {0};
    const int64_t tmin = min > (int64_t)k ? min - (int64_t)k : 0;
    if (more && (max < 0 || max > (int64_t)k)) {
        sb_puts(&tail, "( \",\" ws ");
        sb_add(&tail, item.s, item.n);
        if (max < 0) {
            sb_printf(&tail, " ws ){%lld,}", (long long)tmin);
        } else {
            sb_printf(&tail, " ws ){%lld,%lld}", (long long)tmin, (long long)(max - (int64_t)k));
        }
    }
    bool ok = true;
    sbuf body = {0};
    sb_puts(&body, "\"[\" ws ");
    if (k == 0) {
        /* first item, then the tail with one less */
        if (more && max != 0) {
            sbuf rest = {0};
            if (max < 0) {
                sb_printf(&rest, "( \",\" ws %s ws ){%lld,}", item.s,
                          (long long)(tmin ? tmin - 1 : 0));
            } else {
                sb_printf(&rest, "( \",\" ws %s ws ){%lld,%lld}", item.s,
                          (long long)(tmin ? tmin - 1 : 0), (long long)(max - 1));
            }
            sb_printf(&body, "( %s ws %s )%s", item.s, rest.s ? rest.s : "", min > 0 ? "" : "?");
            cllm_free(rest.s);
        }
    } else {
        /* e_1 ( "," e_2 ( ... ( "," e_k tail ) ... ) ), optional from position min + 1 */
        for (size_t j = 0; j < k && ok; j++) {
            if (j) sb_puts(&body, " ( \",\" ws ");
            char hj[160];
            snprintf(hj, sizeof(hj), "%s-%zu", hint, j);
            char idx[24];
            snprintf(idx, sizeof(idx), "%zu", j);
            bool allowed;
            ok =
                visit_sub(c, &prefix->items[j], subpath(buf, sizeof(buf), path, "prefixItems", idx),
                          hj, &body, &allowed);
            if (ok && !allowed) {
                ok = cfail(c, CLLM_ERR_UNSUPPORTED, path, "a 'prefixItems' schema false");
            }
            sb_puts(&body, " ws");
        }
        if (ok && tail.n) {
            sb_puts(&body, " ");
            sb_add(&body, tail.s, tail.n);
        }
        for (size_t j = k; j-- > 1;) sb_puts(&body, (int64_t)j + 1 > min ? " )?" : " )");
        if (min == 0) {
            /* the whole list is optional: wrap what follows "[" ws */
            sbuf w = {0};
            const size_t head = strlen("\"[\" ws ");
            sb_puts(&w, "\"[\" ws ( ");
            sb_add(&w, body.s + head, body.n - head);
            sb_puts(&w, " )?");
            cllm_free(body.s);
            body = w;
        }
    }
    sb_puts(&body, " \"]\"");
    if (ok && (body.oom || item.oom || tail.oom)) ok = cnomem(c);
    if (ok) {
        char name[96];
        ok = rule_name(c, hint, name);
        if (ok) {
            add_rule(c, name, &body);
            sb_puts(out, name);
        }
    }
    cllm_free(body.s);
    cllm_free(tail.s);
    cllm_free(item.s);
    return ok;
}

static bool visit_object(conv *c, const jv *s, const char *path, const char *hint, sbuf *out) {
    const jv *props = jget(s, "properties"), *req = jget(s, "required");
    const jv *extra = jget(s, "additionalProperties");
    if (props && props->kind != J_OBJ)
        return cfail(c, CLLM_ERR_FORMAT, path, "'properties' must be an object");
    if (req && req->kind != J_ARR)
        return cfail(c, CLLM_ERR_FORMAT, path, "'required' must be an array");
    for (size_t i = 0; req && i < req->n; i++) {
        if (req->items[i].kind != J_STR) {
            return cfail(c, CLLM_ERR_FORMAT, path, "'required' must hold strings");
        }
    }
    /* the properties in order: declared, then required ones not declared */
    const size_t n_decl = props ? props->n : 0;
    size_t n = n_decl;
    for (size_t i = 0; req && i < req->n; i++) n += jget(props, req->items[i].str) == NULL;
    if (n > JS_MAX_PROPS) {
        return cfail(c, CLLM_ERR_TOO_LARGE, path, "more than %d properties", JS_MAX_PROPS);
    }
    /* extra properties: additionalProperties' schema; absent with declared
     * properties: none generated (a subset of what the schema allows) */
    sbuf ext = {0};
    bool has_ext = false;
    char buf[512], h[160];
    bool ok = true;
    if (extra ? !(extra->kind == J_BOOL && !extra->b) : n == 0) {
        snprintf(h, sizeof(h), "%s-additional", hint);
        bool allowed;
        ok = visit_sub(c, extra, subpath(buf, sizeof(buf), path, "additionalProperties", NULL), h,
                       &ext, &allowed);
        has_ext = ok && allowed;
    }
    char(*kv)[96] = n ? cllm_calloc(n, sizeof(*kv)) : NULL;
    bool *required = n ? cllm_calloc(n, sizeof(bool)) : NULL;
    if (n && (!kv || !required)) ok = ok && cnomem(c);
    for (size_t i = 0; ok && i < n; i++) {
        const char *key;
        const jv *sub;
        if (i < n_decl) {
            key = props->keys[i], sub = &props->items[i];
        } else { /* the (i - n_decl)-th required name that is not declared */
            size_t skip = i - n_decl, r = 0;
            for (;; r++) {
                if (jget(props, req->items[r].str)) continue;
                if (skip-- == 0) break;
            }
            key = req->items[r].str, sub = NULL;
        }
        for (size_t r = 0; req && r < req->n; r++) required[i] |= !strcmp(req->items[r].str, key);
        snprintf(h, sizeof(h), "%s-%s", hint, key);
        sbuf body = {0};
        const jv keyv = {.kind = J_STR, .str = (char *)key, .len = strlen(key)};
        sbuf keyjson = {0};
        sb_json(&keyjson, &keyv);
        if (keyjson.oom) ok = cnomem(c);
        if (ok) sb_literal(&body, keyjson.s, keyjson.n);
        cllm_free(keyjson.s);
        sb_puts(&body, " ws \":\" ws ");
        bool allowed = true;
        if (ok) {
            ok = visit_sub(c, sub, subpath(buf, sizeof(buf), path, "properties", key), h, &body,
                           &allowed);
        }
        if (ok && !allowed) {
            if (required[i]) {
                ok = cfail(c, CLLM_ERR_FORMAT, path, "property '%s' is required but false", key);
            } else {
                kv[i][0] = '\0'; /* never present */
            }
        } else if (ok) {
            sb_puts(&body, " ws");
            ok = body.oom ? cnomem(c) : rule_name(c, h, kv[i]);
            if (ok) {
                char kvname[96];
                snprintf(kvname, sizeof(kvname), "%s", kv[i]);
                add_rule(c, kvname, &body);
            }
        }
        cllm_free(body.s);
    }
    /* first_i: properties from i on, none written yet; rest_i: some written.
     * Built from the end; each refers to the next by name. */
    char next_first[96] = "", next_rest[96] = "";
    sbuf body = {0};
    if (ok && has_ext) {
        body.n = 0;
        sb_printf(&body, "( \",\" ws string ws \":\" ws %s ws )*", ext.s);
        snprintf(h, sizeof(h), "%s-extra-rest", hint);
        ok = rule_name(c, h, next_rest);
        if (ok) add_rule(c, next_rest, &body);
        body.n = 0;
        sb_printf(&body, "( string ws \":\" ws %s ws %s )?", ext.s, next_rest);
        snprintf(h, sizeof(h), "%s-extra-first", hint);
        ok = ok && rule_name(c, h, next_first);
        if (ok) add_rule(c, next_first, &body);
    }
    for (size_t i = n; ok && i-- > 0;) {
        if (!kv[i][0]) continue;
        char first[96], rest[96];
        snprintf(h, sizeof(h), "%s-rest", kv[i]);
        ok = rule_name(c, h, rest);
        snprintf(h, sizeof(h), "%s-first", kv[i]);
        ok = ok && rule_name(c, h, first);
        if (!ok) break;
        body.n = 0;
        if (required[i]) {
            sb_printf(&body, "\",\" ws %s %s", kv[i], next_rest);
        } else {
            sb_printf(&body, "( \",\" ws %s )? %s", kv[i], next_rest);
        }
        add_rule(c, rest, &body);
        body.n = 0;
        if (required[i]) {
            sb_printf(&body, "%s %s", kv[i], next_rest);
        } else {
            sb_printf(&body, "%s %s | %s", kv[i], next_rest, next_first[0] ? next_first : "\"\"");
        }
        add_rule(c, first, &body);
        memcpy(next_first, first, sizeof(first));
        memcpy(next_rest, rest, sizeof(rest));
    }
    if (ok) {
        body.n = 0;
        sb_printf(&body, "\"{\" ws %s \"}\"", next_first);
        char name[96];
        ok = body.oom ? cnomem(c) : rule_name(c, hint, name);
        if (ok) {
            add_rule(c, name, &body);
            sb_puts(out, name);
        }
    }
    cllm_free(body.s);
    cllm_free(ext.s);
    cllm_free(kv);
    cllm_free(required);
    return ok;
}

/* ---- allOf: merged into one schema ---- */

/* Adds schema s (its $ref followed, its allOf flattened) to the merge m. */
static bool merge_into(conv *c, jv *m, const jv *s, const char *path, int depth) {
    if (depth > JS_MAX_DEPTH) return cfail(c, CLLM_ERR_TOO_LARGE, path, "allOf nested too deep");
    if (s->kind == J_BOOL) {
        if (s->b) return true;
        return cfail(c, CLLM_ERR_UNSUPPORTED, path, "'allOf' with a false schema");
    }
    if (s->kind != J_OBJ) return cfail(c, CLLM_ERR_FORMAT, path, "a schema must be an object");
    for (size_t i = 0; i < s->n; i++) {
        const char *k = s->keys[i];
        const jv *v = &s->items[i];
        if (is_annotation(k)) continue;
        if (!strcmp(k, "$ref")) {
            if (v->kind != J_STR) return cfail(c, CLLM_ERR_FORMAT, path, "'$ref' must be a string");
            const jv *t = resolve(c, v->str, path);
            if (!t || !merge_into(c, m, t, v->str, depth + 1)) return false;
            continue;
        }
        if (!strcmp(k, "allOf")) {
            if (v->kind != J_ARR)
                return cfail(c, CLLM_ERR_FORMAT, path, "'allOf' must be an array");
            for (size_t j = 0; j < v->n; j++) {
                if (!merge_into(c, m, &v->items[j], path, depth + 1)) return false;
            }
            continue;
        }
        jv *have = (jv *)jget(m, k);
        if (have && (!strcmp(k, "properties") || !strcmp(k, "required"))) {
            if (have->kind != v->kind || (v->kind != J_OBJ && v->kind != J_ARR)) {
                return cfail(c, CLLM_ERR_FORMAT, path, "'%s' of the wrong type", k);
            }
            /* a shallow union: the merge owns only its arrays */
            for (size_t j = 0; j < v->n; j++) {
                const bool dup = v->kind == J_OBJ ? jget(have, v->keys[j]) != NULL : false;
                if (dup) {
                    return cfail(c, CLLM_ERR_UNSUPPORTED, path,
                                 "'allOf': property '%s' in two schemas cannot be merged",
                                 v->keys[j]);
                }
                jv *items = cllm_realloc(have->items, (have->n + 1) * sizeof(*items));
                if (!items) return cnomem(c);
                have->items = items;
                if (v->kind == J_OBJ) {
                    char **keys = cllm_realloc(have->keys, (have->n + 1) * sizeof(*keys));
                    if (!keys) return cnomem(c);
                    have->keys = keys;
                    have->keys[have->n] = v->keys[j];
                }
                have->items[have->n++] = v->items[j];
            }
            continue;
        }
        if (have) {
            sbuf a = {0}, b = {0};
            sb_json(&a, have), sb_json(&b, v);
            const bool same = a.s && b.s && !strcmp(a.s, b.s);
            cllm_free(a.s), cllm_free(b.s);
            if (same) continue;
            return cfail(c, CLLM_ERR_UNSUPPORTED, path,
                         "'allOf': '%s' differs between schemas and cannot be merged", k);
        }
        /* a new key: properties and required get arrays of their own */
        jv *items = cllm_realloc(m->items, (m->n + 1) * sizeof(*items));
        if (!items) return cnomem(c);
        m->items = items;
        char **keys = cllm_realloc(m->keys, (m->n + 1) * sizeof(*keys));
        if (!keys) return cnomem(c);
        m->keys = keys;
        m->keys[m->n] = (char *)k;
        m->items[m->n] = *v;
        if (!strcmp(k, "properties") || !strcmp(k, "required")) {
            jv *own = &m->items[m->n];
            own->items = NULL, own->keys = NULL, own->n = 0;
            m->n++;
            for (size_t j = 0; j < v->n; j++) {
                jv *it = cllm_realloc(own->items, (own->n + 1) * sizeof(*it));
                if (!it) return cnomem(c);
                own->items = it;
                if (v->kind == J_OBJ) {
                    char **kk = cllm_realloc(own->keys, (own->n + 1) * sizeof(*kk));
                    if (!kk) return cnomem(c);
                    own->keys = kk;
                    own->keys[own->n] = v->keys[j];
                }
                own->items[own->n++] = v->items[j];
            }
            continue;
        }
        m->n++;
    }
    return true;
}

/* Frees what merge_into allocated (not the values it points to). */
static void merge_free(jv *m) {
    for (size_t i = 0; i < m->n; i++) {
        if (!strcmp(m->keys[i], "properties") || !strcmp(m->keys[i], "required")) {
            cllm_free(m->items[i].items);
            cllm_free(m->items[i].keys);
        }
    }
    cllm_free(m->items);
    cllm_free(m->keys);
}

/* ---- one schema ---- */

static bool visit_type(conv *c, const jv *s, const char *type, const char *path, const char *hint,
                       sbuf *out) {
    if (!strcmp(type, "string")) return visit_string(c, s, path, out);
    if (!strcmp(type, "integer")) return visit_integer(c, s, path, out);
    if (!strcmp(type, "number")) return visit_number(c, s, path, out);
    if (!strcmp(type, "object")) return visit_object(c, s, path, hint, out);
    if (!strcmp(type, "array")) return visit_array(c, s, path, hint, out);
    if (!strcmp(type, "boolean") || !strcmp(type, "null")) {
        sb_puts(out, type);
        return true;
    }
    return cfail(c, CLLM_ERR_FORMAT, path, "unknown type \"%s\"", type);
}

static bool visit_inner(conv *c, const jv *s, const char *path, const char *hint, sbuf *out) {
    if (s->kind == J_BOOL) {
        if (!s->b)
            return cfail(c, CLLM_ERR_UNSUPPORTED, path, "the schema false (nothing is valid)");
        sb_puts(out, "value");
        return true;
    }
    if (s->kind != J_OBJ)
        return cfail(c, CLLM_ERR_FORMAT, path, "a schema must be an object or a boolean");
    size_t n_kw = 0;
    for (size_t i = 0; i < s->n; i++) {
        const char *k = s->keys[i];
        if (is_annotation(k)) continue;
        if (!is_in(k, k_keywords, CLLM_ARRAY_SIZE(k_keywords))) {
            return cfail(c, CLLM_ERR_UNSUPPORTED, path, "keyword '%s' is not supported", k);
        }
        n_kw++;
    }
    char buf[512];
    const jv *ref = jget(s, "$ref"), *all = jget(s, "allOf");
    if (all || (ref && n_kw > 1)) { /* merged, then visited as one schema */
        if (all && all->kind != J_ARR)
            return cfail(c, CLLM_ERR_FORMAT, path, "'allOf' must be an array");
        if (all && all->n == 1 && n_kw == 1) return visit(c, &all->items[0], path, hint, out);
        jv m = {.kind = J_OBJ};
        const bool ok = merge_into(c, &m, s, path, 0) && visit(c, &m, path, hint, out);
        merge_free(&m);
        return ok;
    }
    if (ref) {
        if (ref->kind != J_STR) return cfail(c, CLLM_ERR_FORMAT, path, "'$ref' must be a string");
        return visit_ref(c, ref->str, path, out);
    }
    const jv *cnst = jget(s, "const"), *en = jget(s, "enum");
    if (cnst || en) {
        if (en && en->kind != J_ARR)
            return cfail(c, CLLM_ERR_FORMAT, path, "'enum' must be an array");
        if (en && en->n == 0) return cfail(c, CLLM_ERR_FORMAT, path, "'enum' is empty");
        const size_t n = cnst ? 1 : en->n;
        sb_puts(out, "( ");
        for (size_t i = 0; i < n; i++) {
            sbuf t = {0};
            sb_json(&t, cnst ? cnst : &en->items[i]);
            if (t.oom) return cnomem(c);
            if (i) sb_puts(out, " | ");
            sb_literal(out, t.s, t.n);
            cllm_free(t.s);
        }
        sb_puts(out, " )");
        return true;
    }
    const jv *any = jget(s, "anyOf");
    const jv *one = jget(s, "oneOf");
    if (any || one) {
        if (any && one) return cfail(c, CLLM_ERR_UNSUPPORTED, path, "'anyOf' beside 'oneOf'");
        const jv *alts = any ? any : one;
        const char *kw = any ? "anyOf" : "oneOf";
        if (alts->kind != J_ARR || alts->n == 0) {
            return cfail(c, CLLM_ERR_FORMAT, path, "'%s' must be a non-empty array", kw);
        }
        if (n_kw > 1) {
            return cfail(c, CLLM_ERR_UNSUPPORTED, path,
                         "'%s' beside other keywords is not supported (move them into each "
                         "alternative)",
                         kw);
        }
        sb_puts(out, "( ");
        for (size_t i = 0; i < alts->n; i++) {
            char idx[24], h[160];
            snprintf(idx, sizeof(idx), "%zu", i);
            snprintf(h, sizeof(h), "%s-%zu", hint, i);
            if (i) sb_puts(out, " | ");
            sb_puts(out, "( ");
            if (!visit(c, &alts->items[i], subpath(buf, sizeof(buf), path, kw, idx), h, out)) {
                return false;
            }
            sb_puts(out, " )");
        }
        sb_puts(out, " )");
        return true;
    }
    const jv *type = jget(s, "type");
    if (type && type->kind == J_ARR) {
        sb_puts(out, "( ");
        for (size_t i = 0; i < type->n; i++) {
            if (type->items[i].kind != J_STR)
                return cfail(c, CLLM_ERR_FORMAT, path, "'type' must hold strings");
            char h[160];
            snprintf(h, sizeof(h), "%s-%s", hint, type->items[i].str);
            if (i) sb_puts(out, " | ");
            if (!visit_type(c, s, type->items[i].str, path, h, out)) return false;
        }
        sb_puts(out, " )");
        return true;
    }
    if (type && type->kind != J_STR)
        return cfail(c, CLLM_ERR_FORMAT, path, "'type' must be a string or an array");
    const char *t = type ? type->str : NULL;
    if (!t) { /* the type the keywords imply */
        if (jget(s, "properties") || jget(s, "required") || jget(s, "additionalProperties")) {
            t = "object";
        } else if (jget(s, "items") || jget(s, "prefixItems") || jget(s, "minItems") ||
                   jget(s, "maxItems")) {
            t = "array";
        } else if (jget(s, "minLength") || jget(s, "maxLength") || jget(s, "pattern") ||
                   jget(s, "format")) {
            t = "string";
        } else if (jget(s, "minimum") || jget(s, "maximum") || jget(s, "exclusiveMinimum") ||
                   jget(s, "exclusiveMaximum")) {
            t = "number";
        }
    }
    if (!t) {
        sb_puts(out, "value");
        return true;
    }
    return visit_type(c, s, t, path, hint, out);
}

static bool visit(conv *c, const jv *s, const char *path, const char *hint, sbuf *out) {
    if (++c->depth > JS_MAX_DEPTH) {
        c->depth--;
        return cfail(c, CLLM_ERR_TOO_LARGE, path, "schemas nested more than %d deep", JS_MAX_DEPTH);
    }
    const bool ok = visit_inner(c, s, path, hint, out);
    c->depth--;
    if (ok && out->oom) return cnomem(c);
    return ok;
}

cllm_status cllm_json_schema_to_grammar(const char *schema_json, char **gbnf_out) {
    if (!schema_json || !gbnf_out) return CLLM_NULL_ARG("schema_json or gbnf_out");
    if (strlen(schema_json) > JS_MAX_TEXT) {
        return cllm_error(CLLM_ERR_TOO_LARGE, "json schema: the text is over %d bytes",
                          JS_MAX_TEXT);
    }
    jparser jp = {.text = schema_json, .p = schema_json};
    jv root;
    if (!jvalue(&jp, &root, 0)) {
        jv_free(&root);
        return jp.st;
    }
    jskip(&jp);
    if (*jp.p) {
        jv_free(&root);
        jfail(&jp, "the end of the text");
        return jp.st;
    }
    conv c = {.root = &root};
    sbuf top = {0};
    bool ok = visit(&c, &root, "", "root", &top);
    if (ok) {
        sb_puts(&c.rules, "root ::= ");
        sb_add(&c.rules, top.s, top.n);
        sb_puts(&c.rules, "\n");
        sb_puts(&c.rules, k_prims);
        if (c.rules.oom) ok = cnomem(&c);
    }
    if (ok && c.rules.n > CLLM_GRAMMAR_MAX_TEXT) {
        ok = cfail(&c, CLLM_ERR_TOO_LARGE, "", "the grammar would be over %zu bytes",
                   (size_t)CLLM_GRAMMAR_MAX_TEXT);
    }
    cllm_status st = ok ? CLLM_OK : c.st;
    if (ok) { /* what the converter writes must compile */
        cllm_grammar *g = NULL;
        st = cllm_grammar_parse(c.rules.s, "root", &g);
        cllm_grammar_free(g);
    }
    for (size_t i = 0; i < c.n_names; i++) cllm_free(c.names[i]);
    for (size_t i = 0; i < c.n_refs; i++) cllm_free(c.ref_keys[i]), cllm_free(c.ref_rules[i]);
    cllm_free(c.names);
    cllm_free(c.ref_keys);
    cllm_free(c.ref_rules);
    cllm_free(top.s);
    jv_free(&root);
    if (st != CLLM_OK) {
        cllm_free(c.rules.s);
        return st;
    }
    *gbnf_out = c.rules.s;
    return CLLM_OK;
}
