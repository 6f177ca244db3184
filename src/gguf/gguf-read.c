/*
 * GGUF reader (versions 1, 2 and 3). The file is hostile: every count,
 * length, type, shape and offset is checked before it is used, against the
 * bytes that remain and the limits of gguf.h.
 *
 * Layout (little-endian; v1 stores counts, string and array lengths and
 * dims as uint32, v2 and v3 as uint64):
 *
 *     magic "GGUF" | u32 version | n_tensors | n_kv
 *     n_kv x      { string key | u32 type | value }
 *     n_tensors x { string name | u32 n_dims | dims[n_dims] | u32 type | u64 offset }
 *     padding to `alignment` | tensor data (offsets relative to here)
 *
 * A string is { length | bytes } without a terminator; an array value is
 * { u32 element type | length | elements }.
 */
#include "gguf/gguf.h"
#include "core/hostmem.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define READ_BUF_SIZE     ((size_t)64 * 1024)
#define ARENA_FIRST_BLOCK ((size_t)1024)
#define ARENA_MAX_BLOCK   ((size_t)1024 * 1024)

/* ---- arena: every string and array of a parsed file ---- */

typedef struct arena_block {
    struct arena_block *next;
    size_t cap;  /* bytes of data */
    size_t used; /* bytes of data handed out */
} arena_block;

/* The data of a block starts at this offset from the block (16-aligned). */
#define ARENA_HDR (((sizeof(arena_block) + 15) / 16) * 16)

typedef struct arena {
    arena_block *head; /* the block being filled */
    size_t next_cap;   /* capacity of the next regular block */
} arena;

static void arena_free(arena *a) {
    arena_block *b = a->head;
    while (b) {
        arena_block *next = b->next;
        cllm_free(b);
        b = next;
    }
    a->head = NULL;
}

/* n bytes aligned to `align` (<= 16, a power of two); NULL on OOM. */
static void *arena_alloc(arena *a, size_t n, size_t align) {
    arena_block *h = a->head;
    if (h) {
        const size_t off = cllm_align_up(h->used, align);
        if (off <= h->cap && n <= h->cap - off) {
            h->used = off + n;
            return (char *)h + ARENA_HDR + off;
        }
    }
    if (a->next_cap == 0) a->next_cap = ARENA_FIRST_BLOCK;
    const bool own_block = n > a->next_cap / 4; /* large: a block of its own */
    const size_t cap = own_block ? CLLM_MAX(n, (size_t)1) : a->next_cap;
    size_t total;
    if (cllm_add_overflow(ARENA_HDR, cap, &total)) return NULL;
    arena_block *b = cllm_malloc(total);
    if (!b) return NULL;
    b->cap = cap;
    b->used = n;
    if (own_block && h) {
        /* keep filling the current block; the large one goes behind it */
        b->next = h->next;
        h->next = b;
    } else {
        b->next = h;
        a->head = b;
        if (!own_block) a->next_cap = CLLM_MIN(a->next_cap * 2, ARENA_MAX_BLOCK);
    }
    return (char *)b + ARENA_HDR;
}

/* ---- name index: duplicate detection and look-ups ----
 * Names sorted with their entry index by a merge sort: O(n log n) string
 * comparisons in the worst case, whatever names a hostile file holds (a hash
 * table could be flooded with colliding names). */

typedef struct name_ref {
    const char *name;
    uint32_t i; /* entry index */
} name_ref;

typedef struct name_index {
    name_ref *refs; /* sorted by name, then index */
    size_t n;
} name_index;

static int name_ref_cmp(const name_ref *a, const name_ref *b) {
    const int c = strcmp(a->name, b->name);
    if (c != 0) return c;
    return (a->i > b->i) - (a->i < b->i);
}

/* Sorts refs[0, n) (bottom-up merge sort, using tmp[0, n)). */
static void name_refs_sort(name_ref *refs, name_ref *tmp, size_t n) {
    name_ref *src = refs, *dst = tmp;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            const size_t mid = CLLM_MIN(lo + w, n), hi = CLLM_MIN(lo + 2 * w, n);
            size_t a = lo, b = mid, o = lo;
            while (a < mid && b < hi) {
                dst[o++] = name_ref_cmp(&src[b], &src[a]) < 0 ? src[b++] : src[a++];
            }
            while (a < mid) dst[o++] = src[a++];
            while (b < hi) dst[o++] = src[b++];
        }
        name_ref *t = src;
        src = dst;
        dst = t;
    }
    if (src != refs) memcpy(refs, src, n * sizeof(*refs));
}

/* Sorts x->refs (filled with every entry's name and index). Returns -1, or
 * the first entry (in index order) whose name an earlier entry has; *earlier
 * then gets that entry. */
static int64_t name_index_sort(name_index *x, name_ref *tmp, int64_t *earlier) {
    name_refs_sort(x->refs, tmp, x->n);
    int64_t dup = -1;
    for (size_t k = 1; k < x->n; k++) {
        if (strcmp(x->refs[k - 1].name, x->refs[k].name) == 0 &&
            (dup < 0 || x->refs[k].i < (uint64_t)dup)) {
            dup = x->refs[k].i;
            *earlier = x->refs[k - 1].i;
        }
    }
    return dup;
}

/* Index of the entry named `name`, or -1. */
static int64_t name_index_find(const name_index *x, const char *name) {
    size_t lo = 0, hi = x->n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (strcmp(x->refs[mid].name, name) < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo < x->n && strcmp(x->refs[lo].name, name) == 0 ? (int64_t)x->refs[lo].i : -1;
}

/* ---- the parsed file ---- */

typedef struct gguf_str {
    const char *s; /* NUL-terminated */
    size_t len;
} gguf_str;

typedef struct gguf_kv {
    const char *key;
    cllm_gguf_type type;
    cllm_gguf_type arr_type; /* CLLM_GGUF_ARRAY only */
    uint64_t n;              /* CLLM_GGUF_ARRAY only: elements */
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
        float f32;
        double f64;
        bool b;
        gguf_str str;
        const void *arr;      /* numeric array: n packed elements */
        const gguf_str *strs; /* string array: n strings */
    } v;
} gguf_kv;

struct cllm_gguf {
    char *name;
    uint32_t version;
    uint64_t file_size;
    size_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    gguf_kv *kv;
    int64_t n_tensors;
    cllm_gguf_tensor_info *tensors;
    name_index kv_index;     /* built once every key is read */
    name_index tensor_index; /* built once every tensor info is read */
    arena arena;
};

static const char *const k_gguf_type_names[] = {
    [CLLM_GGUF_UINT8] = "uint8",     [CLLM_GGUF_INT8] = "int8",     [CLLM_GGUF_UINT16] = "uint16",
    [CLLM_GGUF_INT16] = "int16",     [CLLM_GGUF_UINT32] = "uint32", [CLLM_GGUF_INT32] = "int32",
    [CLLM_GGUF_FLOAT32] = "float32", [CLLM_GGUF_BOOL] = "bool",     [CLLM_GGUF_STRING] = "string",
    [CLLM_GGUF_ARRAY] = "array",     [CLLM_GGUF_UINT64] = "uint64", [CLLM_GGUF_INT64] = "int64",
    [CLLM_GGUF_FLOAT64] = "float64",
};
_Static_assert(CLLM_ARRAY_SIZE(k_gguf_type_names) == CLLM_GGUF_TYPE_COUNT, "gguf type names");

/* Bytes of one scalar of each type (0: string and array). */
static const uint8_t k_gguf_type_size[] = {
    [CLLM_GGUF_UINT8] = 1,   [CLLM_GGUF_INT8] = 1,  [CLLM_GGUF_UINT16] = 2,  [CLLM_GGUF_INT16] = 2,
    [CLLM_GGUF_UINT32] = 4,  [CLLM_GGUF_INT32] = 4, [CLLM_GGUF_FLOAT32] = 4, [CLLM_GGUF_BOOL] = 1,
    [CLLM_GGUF_STRING] = 0,  [CLLM_GGUF_ARRAY] = 0, [CLLM_GGUF_UINT64] = 8,  [CLLM_GGUF_INT64] = 8,
    [CLLM_GGUF_FLOAT64] = 8,
};
_Static_assert(CLLM_ARRAY_SIZE(k_gguf_type_size) == CLLM_GGUF_TYPE_COUNT, "gguf type sizes");

const char *cllm_gguf_type_name(cllm_gguf_type type) {
    if ((unsigned)type >= CLLM_GGUF_TYPE_COUNT) return "unknown";
    return k_gguf_type_names[type];
}

size_t cllm_gguf_type_size(cllm_gguf_type type) {
    if ((unsigned)type >= CLLM_GGUF_TYPE_COUNT) return 0;
    return k_gguf_type_size[type];
}

/* ---- reader: a memory image or a buffered FILE of known size ---- */

typedef struct reader {
    const char *name;
    const uint8_t *mem; /* memory image, or NULL */
    FILE *f;            /* file, or NULL */
    uint64_t size;      /* bytes in the image or file */
    uint64_t pos;       /* next byte to read */
    uint8_t *buf;       /* file: buffered bytes [buf_off, buf_len) start at pos */
    size_t buf_off, buf_len;
    uint32_t version;
    /* What is being read, formatted only into error messages: the item,
     * e.g. "tensor 3 (output.weight)", and an index for the field, e.g. the
     * 7 of "array element 7" (-1: none). */
    const char *item; /* NULL: the header */
    uint64_t item_i;
    gguf_str item_name; /* .s NULL: not read yet */
    int64_t what_i;
} reader;

/* Copies `s` (len bytes) for a message: at most 64 bytes, controls as '?'. */
static void printable(char *dst, size_t dst_size, const char *s, size_t len) {
    size_t o = 0;
    const size_t max = CLLM_MIN(len, (size_t)64);
    for (size_t i = 0; i < max && o + 1 < dst_size; i++) {
        const unsigned char c = (unsigned char)s[i];
        dst[o++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (len > max && o + 4 < dst_size) {
        memcpy(dst + o, "...", 3);
        o += 3;
    }
    dst[o] = '\0';
}

static void set_where(reader *r, const char *item, uint64_t i, const gguf_str *name) {
    r->item = item;
    r->item_i = i;
    r->item_name = name ? *name : (gguf_str){NULL, 0};
}

/* Logs "<file>: <item>: <what>: <message>" and returns `st`. */
static cllm_status rd_fail(const reader *r, cllm_status st, const char *what, const char *fmt, ...)
    CLLM_PRINTF(4, 5);
static cllm_status rd_fail(const reader *r, cllm_status st, const char *what, const char *fmt,
                           ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    char where[128] = "";
    if (r->item && r->item_name.s) {
        char nm[80];
        printable(nm, sizeof(nm), r->item_name.s, r->item_name.len);
        snprintf(where, sizeof(where), "%s %llu (%s): ", r->item, (unsigned long long)r->item_i,
                 nm);
    } else if (r->item) {
        snprintf(where, sizeof(where), "%s %llu: ", r->item, (unsigned long long)r->item_i);
    }
    char field[64] = "";
    if (what && r->what_i >= 0) {
        snprintf(field, sizeof(field), "%s %lld: ", what, (long long)r->what_i);
    } else if (what) {
        snprintf(field, sizeof(field), "%s: ", what);
    }
    return cllm_error(st, "%s: %s%s%s", r->name, where, field, msg);
}

static uint64_t rd_left(const reader *r) { return r->size - r->pos; }

static cllm_status rd_truncated(const reader *r, const char *what, uint64_t n) {
    return rd_fail(r, CLLM_ERR_FORMAT, what,
                   "truncated: %llu bytes needed at offset %llu, the file has %llu",
                   (unsigned long long)n, (unsigned long long)r->pos, (unsigned long long)r->size);
}

static cllm_status rd_io(const reader *r, const char *what) {
    const int err = errno;
    if (ferror(r->f)) {
        return rd_fail(r, CLLM_ERR_IO, what, "read failed at offset %llu: %s",
                       (unsigned long long)r->pos, strerror(err));
    }
    return rd_fail(r, CLLM_ERR_IO, what, "unexpected end of file at offset %llu (file changed?)",
                   (unsigned long long)r->pos);
}

/* Reads n bytes into dst (NULL: skip them). */
static cllm_status rd_bytes(reader *r, void *dst, size_t n, const char *what) {
    if (n == 0) return CLLM_OK;
    if (n > rd_left(r)) return rd_truncated(r, what, n);
    if (r->mem) {
        if (dst) memcpy(dst, r->mem + r->pos, n);
        r->pos += n;
        return CLLM_OK;
    }
    uint8_t *d = dst;
    while (n > 0) {
        if (r->buf_off == r->buf_len) {
            if (n >= READ_BUF_SIZE && d) { /* large: read directly */
                if (fread(d, 1, n, r->f) != n) return rd_io(r, what);
                r->pos += n;
                return CLLM_OK;
            }
            const size_t want = (size_t)CLLM_MIN((uint64_t)READ_BUF_SIZE, rd_left(r));
            const size_t got = fread(r->buf, 1, want, r->f);
            if (got == 0) return rd_io(r, what);
            r->buf_off = 0;
            r->buf_len = got;
        }
        const size_t k = CLLM_MIN(n, r->buf_len - r->buf_off);
        if (d) {
            memcpy(d, r->buf + r->buf_off, k);
            d += k;
        }
        r->buf_off += k;
        r->pos += k;
        n -= k;
    }
    return CLLM_OK;
}

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t le64(const uint8_t *p) { return le32(p) | ((uint64_t)le32(p + 4) << 32); }

static cllm_status rd_u32(reader *r, uint32_t *out, const char *what) {
    uint8_t b[4];
    const cllm_status st = rd_bytes(r, b, 4, what);
    if (st == CLLM_OK) *out = le32(b);
    return st;
}

static cllm_status rd_u64(reader *r, uint64_t *out, const char *what) {
    uint8_t b[8];
    const cllm_status st = rd_bytes(r, b, 8, what);
    if (st == CLLM_OK) *out = le64(b);
    return st;
}

/* A count or length: uint32 in v1, uint64 after. */
static cllm_status rd_len(reader *r, uint64_t *out, const char *what) {
    if (r->version == 1) {
        uint32_t v;
        const cllm_status st = rd_u32(r, &v, what);
        if (st == CLLM_OK) *out = v;
        return st;
    }
    return rd_u64(r, out, what);
}

static size_t len_field_size(const reader *r) { return r->version == 1 ? 4 : 8; }

/* A string of at most `max` bytes, copied NUL-terminated into the arena. */
static cllm_status rd_string(reader *r, arena *a, uint64_t max, gguf_str *out, const char *what) {
    uint64_t len;
    cllm_status st = rd_len(r, &len, what);
    if (st != CLLM_OK) return st;
    if (len > max) {
        return rd_fail(r, CLLM_ERR_FORMAT, what, "length %llu exceeds the limit of %llu bytes",
                       (unsigned long long)len, (unsigned long long)max);
    }
    if (len > rd_left(r)) {
        return rd_fail(r, CLLM_ERR_FORMAT, what,
                       "length %llu runs past the end of the file (%llu bytes left)",
                       (unsigned long long)len, (unsigned long long)rd_left(r));
    }
    char *s = arena_alloc(a, (size_t)len + 1, 1);
    if (!s) return rd_fail(r, CLLM_ERR_NOMEM, what, "out of memory");
    st = rd_bytes(r, s, (size_t)len, what);
    if (st != CLLM_OK) return st;
    s[len] = '\0';
    out->s = s;
    out->len = (size_t)len;
    return CLLM_OK;
}

/* ---- key/value pairs ---- */

static cllm_status rd_array(reader *r, cllm_gguf *g, gguf_kv *kv) {
    uint32_t et;
    cllm_status st = rd_u32(r, &et, "array element type");
    if (st != CLLM_OK) return st;
    if (et == CLLM_GGUF_ARRAY) {
        return rd_fail(r, CLLM_ERR_UNSUPPORTED, "array element type",
                       "arrays of arrays are not supported");
    }
    if (et >= CLLM_GGUF_TYPE_COUNT) {
        return rd_fail(r, CLLM_ERR_FORMAT, "array element type", "invalid type id %u", et);
    }
    uint64_t n;
    st = rd_len(r, &n, "array length");
    if (st != CLLM_OK) return st;
    if (n > CLLM_GGUF_MAX_ARRAY) {
        return rd_fail(r, CLLM_ERR_FORMAT, "array length", "%llu exceeds the limit of %u",
                       (unsigned long long)n, CLLM_GGUF_MAX_ARRAY);
    }
    /* every element takes at least min_size bytes: n * min_size <= 2^26 * 8 */
    const size_t min_size = et == CLLM_GGUF_STRING ? len_field_size(r) : k_gguf_type_size[et];
    if (n * min_size > rd_left(r)) {
        return rd_fail(r, CLLM_ERR_FORMAT, "array length",
                       "%llu elements of %s need at least %llu bytes, %llu are left",
                       (unsigned long long)n, k_gguf_type_names[et],
                       (unsigned long long)(n * min_size), (unsigned long long)rd_left(r));
    }
    kv->arr_type = (cllm_gguf_type)et;
    kv->n = n;
    if (et == CLLM_GGUF_STRING) {
        gguf_str *strs = arena_alloc(&g->arena, (size_t)n * sizeof(gguf_str), 16);
        if (!strs) return rd_fail(r, CLLM_ERR_NOMEM, "array", "out of memory");
        for (uint64_t j = 0; j < n; j++) {
            r->what_i = (int64_t)j;
            st = rd_string(r, &g->arena, CLLM_GGUF_MAX_STRING, &strs[j], "array element");
            if (st != CLLM_OK) return st;
        }
        r->what_i = -1;
        kv->v.strs = strs;
        return CLLM_OK;
    }
    const size_t bytes = (size_t)n * min_size;
    uint8_t *data = arena_alloc(&g->arena, bytes, 8);
    if (!data) return rd_fail(r, CLLM_ERR_NOMEM, "array", "out of memory");
    st = rd_bytes(r, data, bytes, "array data");
    if (st != CLLM_OK) return st;
    if (et == CLLM_GGUF_BOOL) {
        for (uint64_t j = 0; j < n; j++) {
            if (data[j] > 1) {
                return rd_fail(r, CLLM_ERR_FORMAT, "array data",
                               "element %llu: bool value %u is not 0 or 1", (unsigned long long)j,
                               data[j]);
            }
        }
    }
    kv->v.arr = data;
    return CLLM_OK;
}

static cllm_status rd_value(reader *r, cllm_gguf *g, gguf_kv *kv) {
    const cllm_gguf_type t = kv->type;
    if (t == CLLM_GGUF_STRING) {
        return rd_string(r, &g->arena, CLLM_GGUF_MAX_STRING, &kv->v.str, "value");
    }
    if (t == CLLM_GGUF_ARRAY) return rd_array(r, g, kv);
    uint8_t b[8];
    const cllm_status st = rd_bytes(r, b, k_gguf_type_size[t], "value");
    if (st != CLLM_OK) return st;
    switch (t) {
    case CLLM_GGUF_UINT8: kv->v.u8 = b[0]; break;
    case CLLM_GGUF_INT8: kv->v.i8 = (int8_t)b[0]; break;
    case CLLM_GGUF_UINT16: kv->v.u16 = le16(b); break;
    case CLLM_GGUF_INT16: kv->v.i16 = (int16_t)le16(b); break;
    case CLLM_GGUF_UINT32: kv->v.u32 = le32(b); break;
    case CLLM_GGUF_INT32: kv->v.i32 = (int32_t)le32(b); break;
    case CLLM_GGUF_UINT64: kv->v.u64 = le64(b); break;
    case CLLM_GGUF_INT64: kv->v.i64 = (int64_t)le64(b); break;
    case CLLM_GGUF_FLOAT32: {
        const uint32_t u = le32(b);
        memcpy(&kv->v.f32, &u, sizeof(u));
        break;
    }
    case CLLM_GGUF_FLOAT64: {
        const uint64_t u = le64(b);
        memcpy(&kv->v.f64, &u, sizeof(u));
        break;
    }
    case CLLM_GGUF_BOOL:
        if (b[0] > 1) {
            return rd_fail(r, CLLM_ERR_FORMAT, "value", "bool value %u is not 0 or 1", b[0]);
        }
        kv->v.b = b[0] != 0;
        break;
    default: CLLM_ASSERT(!"unreachable");
    }
    return CLLM_OK;
}

static cllm_status rd_kv(reader *r, cllm_gguf *g, uint64_t i) {
    gguf_kv *kv = &g->kv[i];
    set_where(r, "key/value", i, NULL);
    gguf_str key;
    cllm_status st = rd_string(r, &g->arena, CLLM_GGUF_MAX_KEY, &key, "key");
    if (st != CLLM_OK) return st;
    if (key.len == 0) return rd_fail(r, CLLM_ERR_FORMAT, "key", "is empty");
    if (memchr(key.s, '\0', key.len)) {
        return rd_fail(r, CLLM_ERR_FORMAT, "key", "holds a NUL byte");
    }
    set_where(r, "key/value", i, &key);
    kv->key = key.s;
    uint32_t type;
    st = rd_u32(r, &type, "value type");
    if (st != CLLM_OK) return st;
    if (type >= CLLM_GGUF_TYPE_COUNT) {
        return rd_fail(r, CLLM_ERR_FORMAT, "value type", "invalid type id %u", type);
    }
    kv->type = (cllm_gguf_type)type;
    return rd_value(r, g, kv);
}

/* Integer value of a scalar kv: *is_signed says which of *s, *u holds it. */
static bool kv_int(const gguf_kv *kv, bool *is_signed, int64_t *s, uint64_t *u) {
    *is_signed = true;
    switch (kv->type) {
    case CLLM_GGUF_UINT8:
        *is_signed = false;
        *u = kv->v.u8;
        return true;
    case CLLM_GGUF_UINT16:
        *is_signed = false;
        *u = kv->v.u16;
        return true;
    case CLLM_GGUF_UINT32:
        *is_signed = false;
        *u = kv->v.u32;
        return true;
    case CLLM_GGUF_UINT64:
        *is_signed = false;
        *u = kv->v.u64;
        return true;
    case CLLM_GGUF_INT8: *s = kv->v.i8; return true;
    case CLLM_GGUF_INT16: *s = kv->v.i16; return true;
    case CLLM_GGUF_INT32: *s = kv->v.i32; return true;
    case CLLM_GGUF_INT64: *s = kv->v.i64; return true;
    default: return false;
    }
}

static cllm_status rd_alignment(reader *r, cllm_gguf *g) {
    g->alignment = CLLM_GGUF_DEFAULT_ALIGNMENT;
    const int64_t i = name_index_find(&g->kv_index, "general.alignment");
    if (i < 0) return CLLM_OK;
    const gguf_kv *kv = &g->kv[i];
    const gguf_str key = {kv->key, strlen(kv->key)};
    set_where(r, "key/value", (uint64_t)i, &key);
    bool is_signed;
    int64_t s = 0;
    uint64_t u = 0;
    if (!kv_int(kv, &is_signed, &s, &u)) {
        return rd_fail(r, CLLM_ERR_FORMAT, NULL, "has type %s, expected an integer",
                       k_gguf_type_names[kv->type]);
    }
    if (is_signed) {
        if (s <= 0) return rd_fail(r, CLLM_ERR_FORMAT, NULL, "%lld is not positive", (long long)s);
        u = (uint64_t)s;
    }
    if (u == 0 || (u & (u - 1)) != 0 || u > CLLM_GGUF_MAX_ALIGNMENT) {
        return rd_fail(r, CLLM_ERR_FORMAT, NULL, "%llu is not a power of two in [1, %u]",
                       (unsigned long long)u, CLLM_GGUF_MAX_ALIGNMENT);
    }
    g->alignment = (size_t)u;
    return CLLM_OK;
}

/* ---- tensor infos ---- */

static cllm_status rd_tensor_info(reader *r, cllm_gguf *g, uint64_t i) {
    cllm_gguf_tensor_info *ti = &g->tensors[i];
    set_where(r, "tensor", i, NULL);
    gguf_str name;
    cllm_status st = rd_string(r, &g->arena, CLLM_GGUF_MAX_NAME, &name, "name");
    if (st != CLLM_OK) return st;
    if (name.len == 0) return rd_fail(r, CLLM_ERR_FORMAT, "name", "is empty");
    if (memchr(name.s, '\0', name.len)) {
        return rd_fail(r, CLLM_ERR_FORMAT, "name", "holds a NUL byte");
    }
    set_where(r, "tensor", i, &name);
    ti->name = name.s;

    uint32_t n_dims;
    st = rd_u32(r, &n_dims, "n_dims");
    if (st != CLLM_OK) return st;
    if (n_dims < 1 || n_dims > 4) {
        return rd_fail(r, CLLM_ERR_FORMAT, "n_dims", "%u is not in [1, 4]", n_dims);
    }
    ti->n_dims = (int)n_dims;
    int64_t n_elements = 1;
    for (int d = 0; d < 4; d++) ti->ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        const char *what = "dim";
        r->what_i = d;
        uint64_t ne;
        st = rd_len(r, &ne, what);
        if (st != CLLM_OK) return st;
        if (ne == 0 || ne > (uint64_t)INT64_MAX) {
            return rd_fail(r, CLLM_ERR_FORMAT, what, "%lld is not positive", (long long)ne);
        }
        ti->ne[d] = (int64_t)ne;
        if (__builtin_mul_overflow(n_elements, ti->ne[d], &n_elements)) {
            return rd_fail(r, CLLM_ERR_FORMAT, what,
                           "the element count overflows 64 bits (dims %lld x %lld x %lld x %lld)",
                           (long long)ti->ne[0], (long long)ti->ne[1], (long long)ti->ne[2],
                           (long long)ti->ne[3]);
        }
    }
    r->what_i = -1;

    uint32_t type;
    st = rd_u32(r, &type, "type");
    if (st != CLLM_OK) return st;
    if (!cllm_type_is_valid(type)) {
        return rd_fail(r, CLLM_ERR_FORMAT, "type", "invalid tensor type id %u", type);
    }
    ti->type = (cllm_type)type;
    const cllm_type_traits *tt = cllm_type_traits_of(ti->type);
    if (ti->ne[0] % tt->blck_size != 0) {
        /* Early writers (GGUF v1/v2) quantized whole tensors, so a row may
         * end inside a block (the v2 stories260K Q8_0 has ne[0] = 172); only
         * the element count had to be whole blocks. v3 rows are whole blocks. */
        if (r->version >= 3 || n_elements % tt->blck_size != 0) {
            r->what_i = 0;
            return rd_fail(r, CLLM_ERR_FORMAT, "dim",
                           "%lld is not a multiple of the block size %lld of type %s",
                           (long long)ti->ne[0], (long long)tt->blck_size, tt->name);
        }
    }
    /* bytes = n_elements / blck * type_size (n_elements < 2^63: the product
     * is the size in bytes of whole rows, or of the whole tensor) */
    size_t size = 0;
    if ((uint64_t)(n_elements / tt->blck_size) > SIZE_MAX ||
        cllm_mul_overflow((size_t)(n_elements / tt->blck_size), tt->type_size, &size)) {
        return rd_fail(r, CLLM_ERR_FORMAT, NULL, "the data size overflows");
    }
    ti->size = size;
    return rd_u64(r, &ti->offset, "offset");
}

/* After the infos: data offset, then every tensor's alignment and extent. */
static cllm_status check_tensor_data(reader *r, cllm_gguf *g) {
    const uint64_t a = g->alignment;
    r->item = NULL;
    if (r->pos > UINT64_MAX - a) return rd_fail(r, CLLM_ERR_FORMAT, "data offset", "overflows");
    g->data_offset = (r->pos + a - 1) / a * a;
    if (g->n_tensors > 0 && g->data_offset > g->file_size) {
        return rd_fail(r, CLLM_ERR_FORMAT, "data offset",
                       "%llu is past the end of the file (%llu bytes) but %lld tensors follow",
                       (unsigned long long)g->data_offset, (unsigned long long)g->file_size,
                       (long long)g->n_tensors);
    }
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const cllm_gguf_tensor_info *ti = &g->tensors[i];
        const gguf_str nm = {ti->name, strlen(ti->name)};
        set_where(r, "tensor", (uint64_t)i, &nm);
        if (ti->offset % a != 0) {
            return rd_fail(r, CLLM_ERR_FORMAT, "offset",
                           "%llu is not a multiple of the alignment %zu",
                           (unsigned long long)ti->offset, g->alignment);
        }
        const uint64_t room = g->file_size - g->data_offset;
        if (ti->offset > room || ti->size > room - ti->offset) {
            return rd_fail(r, CLLM_ERR_FORMAT, "offset",
                           "data [%llu, +%zu) runs past the end of the file (%llu data bytes)",
                           (unsigned long long)ti->offset, ti->size, (unsigned long long)room);
        }
    }
    return CLLM_OK;
}

/* Sorts idx[0, n) (tensor indexes) by data offset, then index (bottom-up
 * merge sort, using tmp[0, n)). */
static void offsets_sort(const cllm_gguf *g, uint32_t *idx, uint32_t *tmp, size_t n) {
    uint32_t *src = idx, *dst = tmp;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            const size_t mid = CLLM_MIN(lo + w, n), hi = CLLM_MIN(lo + 2 * w, n);
            size_t a = lo, b = mid, o = lo;
            while (a < mid && b < hi) {
                const uint64_t oa = g->tensors[src[a]].offset, ob = g->tensors[src[b]].offset;
                dst[o++] = ob < oa || (ob == oa && src[b] < src[a]) ? src[b++] : src[a++];
            }
            while (a < mid) dst[o++] = src[a++];
            while (b < hi) dst[o++] = src[b++];
        }
        uint32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != idx) memcpy(idx, src, n * sizeof(*idx));
}

/* No two tensors' data overlap: aliased tensors would break the weight
 * accounting, and no writer makes them. After check_tensor_data (every
 * extent lies in the file). */
static cllm_status check_overlaps(reader *r, cllm_gguf *g) {
    const size_t n = (size_t)g->n_tensors;
    if (n < 2) return CLLM_OK;
    uint32_t *idx = cllm_malloc(2 * n * sizeof(*idx));
    if (!idx) return rd_fail(r, CLLM_ERR_NOMEM, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) idx[i] = (uint32_t)i;
    offsets_sort(g, idx, idx + n, n);
    /* sizes are positive: without an overlap so far, the previous tensor in
     * offset order is the one that reaches furthest */
    cllm_status st = CLLM_OK;
    for (size_t k = 1; k < n && st == CLLM_OK; k++) {
        const cllm_gguf_tensor_info *a = &g->tensors[idx[k - 1]], *b = &g->tensors[idx[k]];
        if (b->offset < a->offset + a->size) {
            const gguf_str nm = {b->name, strlen(b->name)};
            char other[80];
            printable(other, sizeof(other), a->name, strlen(a->name));
            set_where(r, "tensor", idx[k], &nm);
            st = rd_fail(r, CLLM_ERR_FORMAT, "offset",
                         "data [%llu, +%zu) overlaps that of tensor %u (%s) at [%llu, +%zu)",
                         (unsigned long long)b->offset, b->size, idx[k - 1], other,
                         (unsigned long long)a->offset, a->size);
        }
    }
    cllm_free(idx);
    return st;
}

/* ---- parse ---- */

static cllm_status rd_counts(reader *r, cllm_gguf *g) {
    uint64_t n_tensors, n_kv;
    cllm_status st = rd_len(r, &n_tensors, "n_tensors");
    if (st == CLLM_OK) st = rd_len(r, &n_kv, "n_kv");
    if (st != CLLM_OK) return st;
    if (n_kv > CLLM_GGUF_MAX_KV) {
        return rd_fail(r, CLLM_ERR_FORMAT, "n_kv", "%llu exceeds the limit of %u",
                       (unsigned long long)n_kv, CLLM_GGUF_MAX_KV);
    }
    if (n_tensors > CLLM_GGUF_MAX_TENSORS) {
        return rd_fail(r, CLLM_ERR_FORMAT, "n_tensors", "%llu exceeds the limit of %u",
                       (unsigned long long)n_tensors, CLLM_GGUF_MAX_TENSORS);
    }
    /* smallest key/value: key length, a 1-byte key, type, a 1-byte value;
     * smallest tensor info: name length, a 1-byte name, n_dims, one dim,
     * type, offset */
    const uint64_t lf = len_field_size(r);
    const uint64_t min_kv = lf + 1 + 4 + 1;
    const uint64_t min_ti = lf + 1 + 4 + lf + 4 + 8;
    const uint64_t need = n_kv * min_kv + n_tensors * min_ti; /* < 2^27 */
    if (need > rd_left(r)) {
        return rd_fail(r, CLLM_ERR_FORMAT, "n_kv, n_tensors",
                       "%llu key/values and %llu tensor infos need at least %llu bytes, %llu "
                       "are left",
                       (unsigned long long)n_kv, (unsigned long long)n_tensors,
                       (unsigned long long)need, (unsigned long long)rd_left(r));
    }
    /* one block each: the entries, then their name index and its sort
     * space (bytes < 2^26 per entry kind) */
    if (n_kv > 0) {
        const size_t bytes = (size_t)n_kv * sizeof(*g->kv);
        g->kv = cllm_calloc(1, bytes + 2 * (size_t)n_kv * sizeof(name_ref));
        if (!g->kv) return rd_fail(r, CLLM_ERR_NOMEM, NULL, "out of memory");
        g->kv_index.refs = (name_ref *)(void *)((char *)g->kv + bytes);
    }
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors; /* their infos are allocated after the key/values */
    return CLLM_OK;
}

static cllm_status alloc_tensor_infos(reader *r, cllm_gguf *g) {
    if (g->n_tensors == 0) return CLLM_OK;
    const size_t bytes = (size_t)g->n_tensors * sizeof(*g->tensors);
    g->tensors = cllm_calloc(1, bytes + 2 * (size_t)g->n_tensors * sizeof(name_ref));
    if (!g->tensors) return rd_fail(r, CLLM_ERR_NOMEM, NULL, "out of memory");
    g->tensor_index.refs = (name_ref *)(void *)((char *)g->tensors + bytes);
    return CLLM_OK;
}

/* Sorts the keys; a key that an earlier one repeats is an error. */
static cllm_status index_keys(reader *r, cllm_gguf *g) {
    name_index *x = &g->kv_index;
    x->n = (size_t)g->n_kv;
    if (x->n == 0) return CLLM_OK;
    for (size_t i = 0; i < x->n; i++) x->refs[i] = (name_ref){g->kv[i].key, (uint32_t)i};
    int64_t earlier = -1;
    const int64_t dup = name_index_sort(x, x->refs + x->n, &earlier);
    if (dup < 0) return CLLM_OK;
    const gguf_str key = {g->kv[dup].key, strlen(g->kv[dup].key)};
    set_where(r, "key/value", (uint64_t)dup, &key);
    return rd_fail(r, CLLM_ERR_FORMAT, "key", "duplicate of key/value %lld", (long long)earlier);
}

/* Sorts the tensor names; a name that an earlier one repeats is an error. */
static cllm_status index_tensors(reader *r, cllm_gguf *g) {
    name_index *x = &g->tensor_index;
    x->n = (size_t)g->n_tensors;
    if (x->n == 0) return CLLM_OK;
    for (size_t i = 0; i < x->n; i++) x->refs[i] = (name_ref){g->tensors[i].name, (uint32_t)i};
    int64_t earlier = -1;
    const int64_t dup = name_index_sort(x, x->refs + x->n, &earlier);
    if (dup < 0) return CLLM_OK;
    const gguf_str name = {g->tensors[dup].name, strlen(g->tensors[dup].name)};
    set_where(r, "tensor", (uint64_t)dup, &name);
    return rd_fail(r, CLLM_ERR_FORMAT, "name", "duplicate of tensor %lld", (long long)earlier);
}

static uint32_t bswap32(uint32_t v) {
    return (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
}

static cllm_status parse(reader *r, cllm_gguf **out) {
    cllm_status st;
    const size_t name_len = strlen(r->name);
    cllm_gguf *g = cllm_calloc(1, sizeof(*g) + name_len + 1); /* the name follows */
    if (!g) return rd_fail(r, CLLM_ERR_NOMEM, NULL, "out of memory");
    g->name = (char *)(g + 1);
    memcpy(g->name, r->name, name_len + 1);
    g->file_size = r->size;

    uint8_t magic[4];
    st = rd_bytes(r, magic, 4, "magic");
    if (st != CLLM_OK) goto fail;
    if (memcmp(magic, "GGUF", 4) != 0) {
        st = rd_fail(r, CLLM_ERR_FORMAT, "magic", "not a GGUF file (no \"GGUF\" magic)");
        goto fail;
    }
    uint32_t version;
    st = rd_u32(r, &version, "version");
    if (st != CLLM_OK) goto fail;
    if (version == 0) {
        st = rd_fail(r, CLLM_ERR_FORMAT, "version", "0 is not a GGUF version");
        goto fail;
    }
    if (version > 3) {
        const uint32_t swapped = bswap32(version);
        if (swapped >= 1 && swapped <= 3) {
            st = rd_fail(r, CLLM_ERR_UNSUPPORTED, "version",
                         "big-endian GGUF (version %u byte-swapped) is not supported", swapped);
        } else {
            st = rd_fail(r, CLLM_ERR_UNSUPPORTED, "version", "%u is not supported (1 to 3 are)",
                         version);
        }
        goto fail;
    }
    r->version = version;
    g->version = version;

    st = rd_counts(r, g);
    if (st != CLLM_OK) goto fail;
    for (int64_t i = 0; i < g->n_kv; i++) {
        st = rd_kv(r, g, (uint64_t)i);
        if (st != CLLM_OK) goto fail;
    }
    st = index_keys(r, g);
    if (st == CLLM_OK) st = rd_alignment(r, g);
    if (st == CLLM_OK) st = alloc_tensor_infos(r, g);
    if (st != CLLM_OK) goto fail;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        st = rd_tensor_info(r, g, (uint64_t)i);
        if (st != CLLM_OK) goto fail;
    }
    st = index_tensors(r, g);
    if (st == CLLM_OK) st = check_tensor_data(r, g);
    if (st == CLLM_OK) st = check_overlaps(r, g);
    if (st != CLLM_OK) goto fail;
    *out = g;
    return CLLM_OK;

fail:
    cllm_gguf_free(g);
    return st;
}

cllm_status cllm_gguf_parse(const void *data, size_t size, const char *name, cllm_gguf **out) {
    CLLM_ASSERT(out != NULL && (data != NULL || size == 0));
    static const uint8_t empty[1];
    reader r = {
        .name = name ? name : "<memory>",
        .mem = data ? data : empty,
        .size = size,
        .what_i = -1,
    };
    return parse(&r, out);
}

/* What a file that is not a regular file is, for the message. */
static const char *file_kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "a special file";
}

cllm_status cllm_gguf_open(const char *path, cllm_gguf **out) {
    if (!path || !out) return CLLM_NULL_ARG("path or out");
    reader r = {.name = path, .what_i = -1};
    /* O_NONBLOCK: opening a FIFO without a writer would otherwise block
     * before the file could be checked; it is cleared for the reads */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return rd_fail(&r, CLLM_ERR_IO, NULL, "cannot open: %s", strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        const int err = errno;
        close(fd);
        return rd_fail(&r, CLLM_ERR_IO, NULL, "cannot stat: %s", strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return rd_fail(&r, CLLM_ERR_IO, NULL, "%s, not a regular file", file_kind(sb.st_mode));
    }
    const int flags = fcntl(fd, F_GETFL);
    FILE *f = NULL;
    if (flags == -1 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == -1 || !(f = fdopen(fd, "rb"))) {
        const int err = errno;
        close(fd);
        return rd_fail(&r, CLLM_ERR_IO, NULL, "cannot open: %s", strerror(err));
    }
    r.f = f;
    r.size = (uint64_t)sb.st_size;
    r.buf = cllm_malloc(READ_BUF_SIZE);
    cllm_status st = r.buf ? parse(&r, out) : rd_fail(&r, CLLM_ERR_NOMEM, NULL, "out of memory");
    cllm_free(r.buf);
    fclose(f);
    return st;
}

void cllm_gguf_free(cllm_gguf *g) {
    if (!g) return;
    arena_free(&g->arena);
    cllm_free(g->kv); /* and its name index */
    cllm_free(g->tensors);
    cllm_free(g);
}

/* ---- accessors ---- */

uint32_t cllm_gguf_version(const cllm_gguf *g) { return g ? g->version : 0; }
const char *cllm_gguf_name(const cllm_gguf *g) { return g->name; }
uint64_t cllm_gguf_file_size(const cllm_gguf *g) { return g->file_size; }
size_t cllm_gguf_alignment(const cllm_gguf *g) { return g ? g->alignment : 0; }
uint64_t cllm_gguf_data_offset(const cllm_gguf *g) { return g ? g->data_offset : 0; }

int64_t cllm_gguf_n_kv(const cllm_gguf *g) { return g ? g->n_kv : 0; }

static const gguf_kv *kv_at(const cllm_gguf *g, int64_t i) {
    CLLM_ASSERTF(i >= 0 && i < g->n_kv, "%s: key/value index %lld out of [0, %lld)", g->name,
                 (long long)i, (long long)g->n_kv);
    return &g->kv[i];
}

/* The kv at i, asserted to have `type`. */
static const gguf_kv *kv_typed(const cllm_gguf *g, int64_t i, cllm_gguf_type type) {
    const gguf_kv *kv = kv_at(g, i);
    CLLM_ASSERTF(kv->type == type, "%s: key %s has type %s, read as %s", g->name, kv->key,
                 k_gguf_type_names[kv->type], k_gguf_type_names[type]);
    return kv;
}

const char *cllm_gguf_key(const cllm_gguf *g, int64_t i) { return g ? kv_at(g, i)->key : NULL; }
cllm_gguf_type cllm_gguf_kv_type(const cllm_gguf *g, int64_t i) { return kv_at(g, i)->type; }

int64_t cllm_gguf_find_key(const cllm_gguf *g, const char *key) {
    if (!g || !key) return -1;
    return name_index_find(&g->kv_index, key);
}

uint8_t cllm_gguf_val_u8(const cllm_gguf *g, int64_t i) {
    return kv_typed(g, i, CLLM_GGUF_UINT8)->v.u8;
}
int8_t cllm_gguf_val_i8(const cllm_gguf *g, int64_t i) {
    return kv_typed(g, i, CLLM_GGUF_INT8)->v.i8;
}
uint16_t cllm_gguf_val_u16(const cllm_gguf *g, int64_t i) {
    return kv_typed(g, i, CLLM_GGUF_UINT16)->v.u16;
}
int16_t cllm_gguf_val_i16(const cllm_gguf *g, int64_t i) {
    return kv_typed(g, i, CLLM_GGUF_INT16)->v.i16;
}
uint32_t cllm_gguf_val_u32(const cllm_gguf *g, int64_t i) {
    return kv_typed(g, i, CLLM_GGUF_UINT32)->v.u32;
}
int32_t cllm_gguf_val_i32(const cllm_gguf *g, int64_t i) {
    return kv_typed(g, i, CLLM_GGUF_INT32)->v.i32;
}
uint64_t cllm_gguf_val_u64(const cllm_gguf *g, int64_t i) {
    return kv_typed(g, i, CLLM_GGUF_UINT64)->v.u64;
}
int64_t cllm_gguf_val_i64(const cllm_gguf *g, int64_t i) {
    return kv_typed(g, i, CLLM_GGUF_INT64)->v.i64;
}
float cllm_gguf_val_f32(const cllm_gguf *g, int64_t i) {
    return kv_typed(g, i, CLLM_GGUF_FLOAT32)->v.f32;
}
double cllm_gguf_val_f64(const cllm_gguf *g, int64_t i) {
    return kv_typed(g, i, CLLM_GGUF_FLOAT64)->v.f64;
}
bool cllm_gguf_val_bool(const cllm_gguf *g, int64_t i) {
    return kv_typed(g, i, CLLM_GGUF_BOOL)->v.b;
}
const char *cllm_gguf_val_str(const cllm_gguf *g, int64_t i) {
    return kv_typed(g, i, CLLM_GGUF_STRING)->v.str.s;
}
size_t cllm_gguf_val_str_len(const cllm_gguf *g, int64_t i) {
    return kv_typed(g, i, CLLM_GGUF_STRING)->v.str.len;
}

cllm_gguf_type cllm_gguf_arr_type(const cllm_gguf *g, int64_t i) {
    return kv_typed(g, i, CLLM_GGUF_ARRAY)->arr_type;
}
uint64_t cllm_gguf_arr_n(const cllm_gguf *g, int64_t i) {
    return kv_typed(g, i, CLLM_GGUF_ARRAY)->n;
}
const void *cllm_gguf_arr_data(const cllm_gguf *g, int64_t i) {
    const gguf_kv *kv = kv_typed(g, i, CLLM_GGUF_ARRAY);
    CLLM_ASSERTF(kv->arr_type != CLLM_GGUF_STRING, "%s: key %s: string array read as data", g->name,
                 kv->key);
    return kv->v.arr;
}
const char *cllm_gguf_arr_str(const cllm_gguf *g, int64_t i, uint64_t j, size_t *len) {
    const gguf_kv *kv = kv_typed(g, i, CLLM_GGUF_ARRAY);
    CLLM_ASSERTF(kv->arr_type == CLLM_GGUF_STRING, "%s: key %s: %s array read as strings", g->name,
                 kv->key, k_gguf_type_names[kv->arr_type]);
    CLLM_ASSERTF(j < kv->n, "%s: key %s: element %llu out of %llu", g->name, kv->key,
                 (unsigned long long)j, (unsigned long long)kv->n);
    if (len) *len = kv->v.strs[j].len;
    return kv->v.strs[j].s;
}

/* ---- typed look-ups ---- */

static cllm_status get_fail(const cllm_gguf *g, const char *key, const char *fmt, ...)
    CLLM_PRINTF(3, 4);
static cllm_status get_fail(const cllm_gguf *g, const char *key, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return cllm_error(CLLM_ERR_FORMAT, "%s: key %s: %s", g->name, key, msg);
}

static const gguf_kv *get_kv(const cllm_gguf *g, const char *key) {
    CLLM_ASSERT(g != NULL && key != NULL);
    const int64_t i = name_index_find(&g->kv_index, key);
    return i < 0 ? NULL : &g->kv[i];
}

/* The integer value of `key` in [lo, hi] (signed view) or <= uhi (unsigned). */
static cllm_status get_int(const cllm_gguf *g, const char *key, int64_t lo, uint64_t hi,
                           const char *want, int64_t *s_out, uint64_t *u_out, bool *neg) {
    const gguf_kv *kv = get_kv(g, key);
    if (!kv) return get_fail(g, key, "missing");
    bool is_signed;
    int64_t s = 0;
    uint64_t u = 0;
    if (!kv_int(kv, &is_signed, &s, &u)) {
        return get_fail(g, key, "has type %s, expected an integer", k_gguf_type_names[kv->type]);
    }
    if (is_signed && s < 0) {
        if (s < lo) return get_fail(g, key, "value %lld does not fit in %s", (long long)s, want);
        *neg = true;
        *s_out = s;
        return CLLM_OK;
    }
    if (is_signed) u = (uint64_t)s;
    if (u > hi)
        return get_fail(g, key, "value %llu does not fit in %s", (unsigned long long)u, want);
    *neg = false;
    *u_out = u;
    return CLLM_OK;
}

cllm_status cllm_gguf_get_u32(const cllm_gguf *g, const char *key, uint32_t *out) {
    int64_t s = 0;
    uint64_t u = 0;
    bool neg = false;
    const cllm_status st = get_int(g, key, 0, UINT32_MAX, "uint32", &s, &u, &neg);
    if (st == CLLM_OK) *out = (uint32_t)u;
    return st;
}

cllm_status cllm_gguf_get_i64(const cllm_gguf *g, const char *key, int64_t *out) {
    int64_t s = 0;
    uint64_t u = 0;
    bool neg = false;
    const cllm_status st = get_int(g, key, INT64_MIN, INT64_MAX, "int64", &s, &u, &neg);
    if (st == CLLM_OK) *out = neg ? s : (int64_t)u;
    return st;
}

cllm_status cllm_gguf_get_f32(const cllm_gguf *g, const char *key, float *out) {
    const gguf_kv *kv = get_kv(g, key);
    if (!kv) return get_fail(g, key, "missing");
    if (kv->type == CLLM_GGUF_FLOAT32) {
        *out = kv->v.f32;
        return CLLM_OK;
    }
    if (kv->type == CLLM_GGUF_FLOAT64) {
        const double d = kv->v.f64;
        if (isfinite(d) && fabs(d) > FLT_MAX) {
            return get_fail(g, key, "value %g does not fit in float32", d);
        }
        *out = (float)d;
        return CLLM_OK;
    }
    return get_fail(g, key, "has type %s, expected float32 or float64",
                    k_gguf_type_names[kv->type]);
}

cllm_status cllm_gguf_get_bool(const cllm_gguf *g, const char *key, bool *out) {
    const gguf_kv *kv = get_kv(g, key);
    if (!kv) return get_fail(g, key, "missing");
    if (kv->type != CLLM_GGUF_BOOL) {
        return get_fail(g, key, "has type %s, expected bool", k_gguf_type_names[kv->type]);
    }
    *out = kv->v.b;
    return CLLM_OK;
}

cllm_status cllm_gguf_get_str(const cllm_gguf *g, const char *key, const char **out) {
    const gguf_kv *kv = get_kv(g, key);
    if (!kv) return get_fail(g, key, "missing");
    if (kv->type != CLLM_GGUF_STRING) {
        return get_fail(g, key, "has type %s, expected string", k_gguf_type_names[kv->type]);
    }
    *out = kv->v.str.s;
    return CLLM_OK;
}

/* ---- tensor infos ---- */

int64_t cllm_gguf_n_tensors(const cllm_gguf *g) { return g ? g->n_tensors : 0; }

const cllm_gguf_tensor_info *cllm_gguf_tensor(const cllm_gguf *g, int64_t i) {
    CLLM_ASSERTF(i >= 0 && i < g->n_tensors, "%s: tensor index %lld out of [0, %lld)", g->name,
                 (long long)i, (long long)g->n_tensors);
    return &g->tensors[i];
}

int64_t cllm_gguf_find_tensor(const cllm_gguf *g, const char *name) {
    CLLM_ASSERT(name != NULL);
    return name_index_find(&g->tensor_index, name);
}
