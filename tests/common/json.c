#include "common/json.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
    const char *p;
} parser;

static void skip_ws(parser *ps) {
    while (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t') ps->p++;
}

static bool parse_value(parser *ps, json *out);
static void free_members(json *j);

/* Appends a UTF-8 encoding of cp to buf at *n. */
static void put_utf8(char *buf, size_t *n, uint32_t cp) {
    if (cp < 0x80) {
        buf[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        buf[(*n)++] = (char)(0xc0 | (cp >> 6));
        buf[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        buf[(*n)++] = (char)(0xe0 | (cp >> 12));
        buf[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        buf[(*n)++] = (char)(0x80 | (cp & 0x3f));
    } else {
        buf[(*n)++] = (char)(0xf0 | (cp >> 18));
        buf[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        buf[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        buf[(*n)++] = (char)(0x80 | (cp & 0x3f));
    }
}

static bool hex4(const char *s, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        const char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return false;
    }
    *out = v;
    return true;
}

static char *parse_string(parser *ps, size_t *len) {
    if (*ps->p != '"') return NULL;
    const char *s = ++ps->p;
    size_t cap = 0;
    while (s[cap] && s[cap] != '"') cap += s[cap] == '\\' && s[cap + 1] ? 2 : 1;
    char *buf = malloc(cap + 1);
    size_t n = 0;
    while (buf && *ps->p && *ps->p != '"') {
        char c = *ps->p++;
        if (c != '\\') {
            buf[n++] = c;
            continue;
        }
        c = *ps->p++;
        switch (c) {
        case 'n': buf[n++] = '\n'; break;
        case 't': buf[n++] = '\t'; break;
        case 'r': buf[n++] = '\r'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'u': {
            uint32_t cp, lo;
            if (!hex4(ps->p, &cp)) goto fail;
            ps->p += 4;
            if (cp >= 0xd800 && cp < 0xdc00 && ps->p[0] == '\\' && ps->p[1] == 'u' &&
                hex4(ps->p + 2, &lo) && lo >= 0xdc00 && lo < 0xe000) {
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                ps->p += 6;
            }
            put_utf8(buf, &n, cp);
            break;
        }
        case 0: goto fail;
        default: buf[n++] = c; break;
        }
    }
    if (!buf || *ps->p != '"') goto fail;
    ps->p++;
    buf[n] = 0;
    *len = n;
    return buf;
fail:
    free(buf);
    return NULL;
}

static bool push(json *container, const json *v, char *key) {
    json *items = realloc(container->items, (container->len + 1) * sizeof(*items));
    if (!items) return false;
    container->items = items;
    items[container->len] = *v;
    if (container->kind == JSON_OBJ) {
        char **keys = realloc(container->keys, (container->len + 1) * sizeof(*keys));
        if (!keys) return false;
        container->keys = keys;
        keys[container->len] = key;
    }
    container->len++;
    return true;
}

static bool parse_value(parser *ps, json *out) {
    memset(out, 0, sizeof(*out));
    skip_ws(ps);
    const char c = *ps->p;
    if (c == '{' || c == '[') {
        out->kind = c == '{' ? JSON_OBJ : JSON_ARR;
        ps->p++;
        skip_ws(ps);
        if (*ps->p == (c == '{' ? '}' : ']')) {
            ps->p++;
            return true;
        }
        for (;;) {
            char *key = NULL;
            if (out->kind == JSON_OBJ) {
                skip_ws(ps);
                size_t klen;
                key = parse_string(ps, &klen);
                skip_ws(ps);
                if (!key || *ps->p != ':') {
                    free(key);
                    return false;
                }
                ps->p++;
            }
            json v;
            if (!parse_value(ps, &v) || !push(out, &v, key)) {
                free(key);
                free_members(&v);
                return false;
            }
            skip_ws(ps);
            if (*ps->p == ',') {
                ps->p++;
                continue;
            }
            if (*ps->p == (out->kind == JSON_OBJ ? '}' : ']')) {
                ps->p++;
                return true;
            }
            return false;
        }
    }
    if (c == '"') {
        out->kind = JSON_STR;
        out->str = parse_string(ps, &out->len);
        return out->str != NULL;
    }
    if (!strncmp(ps->p, "true", 4) || !strncmp(ps->p, "false", 5)) {
        out->kind = JSON_BOOL;
        out->num = c == 't';
        ps->p += c == 't' ? 4 : 5;
        return true;
    }
    if (!strncmp(ps->p, "null", 4)) {
        ps->p += 4;
        return true;
    }
    char *end;
    out->kind = JSON_NUM;
    out->num = strtod(ps->p, &end);
    if (end == ps->p) return false;
    ps->p = end;
    return true;
}

static void free_members(json *j) {
    for (size_t i = 0; i < j->len && j->items; i++) {
        free_members(&j->items[i]);
        if (j->keys) free(j->keys[i]);
    }
    free(j->items);
    free(j->keys);
    free(j->str);
}

void json_free(json *j) {
    if (!j) return;
    free_members(j);
    free(j);
}

json *json_parse(const char *text) {
    parser ps = {.p = text};
    json *root = malloc(sizeof(*root));
    if (!root) return NULL;
    if (!parse_value(&ps, root)) {
        json_free(root);
        return NULL;
    }
    return root;
}

const json *json_get(const json *obj, const char *key) {
    if (!obj || obj->kind != JSON_OBJ) return NULL;
    for (size_t i = 0; i < obj->len; i++) {
        if (!strcmp(obj->keys[i], key)) return &obj->items[i];
    }
    return NULL;
}

const json *json_at(const json *arr, size_t i) {
    if (!arr || (arr->kind != JSON_ARR && arr->kind != JSON_OBJ) || i >= arr->len) return NULL;
    return &arr->items[i];
}

const char *json_key(const json *obj, size_t i) {
    return obj && obj->kind == JSON_OBJ && i < obj->len ? obj->keys[i] : NULL;
}

size_t json_len(const json *j) {
    return j && (j->kind == JSON_ARR || j->kind == JSON_OBJ) ? j->len : 0;
}

double json_num(const json *j) {
    return j && (j->kind == JSON_NUM || j->kind == JSON_BOOL) ? j->num : 0;
}

const char *json_str(const json *j) { return j && j->kind == JSON_STR ? j->str : NULL; }
