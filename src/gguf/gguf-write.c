/*
 * GGUF v3 writer: key/values in the order they were set, tensor infos,
 * padding to the alignment, then tensor data streamed from the callers'
 * pointers. The file is written beside `path` and renamed over it when
 * complete and synced (core/fileio.h).
 */
#include "gguf/gguf.h"
#include "core/fileio.h"
#include "core/hostmem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct wkv {
    char *key;
    cllm_gguf_type type;
    cllm_gguf_type arr_type; /* CLLM_GGUF_ARRAY only */
    uint64_t n;              /* CLLM_GGUF_ARRAY only: elements */
    uint8_t scalar[8];       /* a scalar value, little-endian */
    char *data;              /* string bytes, packed array elements, or all strings of an array */
    size_t len;              /* bytes at data */
    size_t *lens;            /* string array: bytes of each string */
} wkv;

typedef struct wtensor {
    char *name;
    cllm_type type;
    int n_dims;
    int64_t ne[4];
    const void *data; /* NULL: zeros */
    size_t size;
} wtensor;

struct cllm_gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *tensors;
    size_t n_tensors, cap_tensors;
};

static void wkv_free(wkv *kv) {
    cllm_free(kv->key);
    cllm_free(kv->data);
    cllm_free(kv->lens);
    memset(kv, 0, sizeof(*kv));
}

cllm_gguf_writer *cllm_gguf_writer_new(void) { return cllm_calloc(1, sizeof(cllm_gguf_writer)); }

void cllm_gguf_writer_free(cllm_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) wkv_free(&w->kv[i]);
    for (size_t i = 0; i < w->n_tensors; i++) cllm_free(w->tensors[i].name);
    cllm_free(w->kv);
    cllm_free(w->tensors);
    cllm_free(w);
}

static char *mem_dup(const void *p, size_t n) {
    char *d = cllm_malloc(n + 1);
    if (!d) return NULL;
    if (n) memcpy(d, p, n);
    d[n] = '\0';
    return d;
}

/* ---- key/values ---- */

static cllm_status check_key(const char *key) {
    CLLM_ASSERT(key != NULL);
    const size_t len = strlen(key);
    if (len == 0) return cllm_error(CLLM_ERR_INVALID_ARG, "gguf writer: empty key");
    if (len > CLLM_GGUF_MAX_KEY) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "gguf writer: key of %zu bytes (limit %u)", len,
                          CLLM_GGUF_MAX_KEY);
    }
    return CLLM_OK;
}

static int64_t kv_find(const cllm_gguf_writer *w, const char *key) {
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) == 0) return (int64_t)i;
    }
    return -1;
}

/* Room for `extra` more key/values. */
static cllm_status kv_reserve(cllm_gguf_writer *w, size_t extra) {
    if (extra > CLLM_GGUF_MAX_KV || w->n_kv > CLLM_GGUF_MAX_KV - extra) {
        return cllm_error(CLLM_ERR_TOO_LARGE, "gguf writer: more than %u key/values",
                          CLLM_GGUF_MAX_KV);
    }
    const size_t need = w->n_kv + extra;
    if (need <= w->cap_kv) return CLLM_OK;
    size_t cap = w->cap_kv ? w->cap_kv : 16;
    while (cap < need) cap *= 2;
    wkv *kv = cllm_realloc(w->kv, cap * sizeof(*kv));
    if (!kv) return cllm_error(CLLM_ERR_NOMEM, "gguf writer: out of memory");
    w->kv = kv;
    w->cap_kv = cap;
    return CLLM_OK;
}

/* Stores nv (owning its key and data) in place of key/value j (its key's
 * old value), or appends it (j < 0). Cannot fail: room was reserved. */
static void kv_commit_at(cllm_gguf_writer *w, wkv *nv, int64_t j) {
    if (j >= 0) {
        cllm_free(nv->key);
        nv->key = w->kv[j].key;
        w->kv[j].key = NULL;
        wkv_free(&w->kv[j]);
        w->kv[j] = *nv;
    } else {
        CLLM_ASSERT(w->n_kv < w->cap_kv);
        w->kv[w->n_kv++] = *nv;
    }
    memset(nv, 0, sizeof(*nv));
}

static void kv_commit(cllm_gguf_writer *w, wkv *nv) { kv_commit_at(w, nv, kv_find(w, nv->key)); }

/* Takes ownership of nv (freed on failure); nv->key is still to be copied. */
static cllm_status kv_set(cllm_gguf_writer *w, const char *key, wkv *nv) {
    cllm_status st = check_key(key);
    if (st == CLLM_OK && kv_find(w, key) < 0) st = kv_reserve(w, 1);
    if (st == CLLM_OK) {
        nv->key = mem_dup(key, strlen(key));
        if (!nv->key) st = cllm_error(CLLM_ERR_NOMEM, "gguf writer: out of memory");
    }
    if (st != CLLM_OK) {
        wkv_free(nv);
        return st;
    }
    kv_commit(w, nv);
    return CLLM_OK;
}

static void put_le(uint8_t *dst, uint64_t v, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = (uint8_t)(v >> (8 * i));
}

static cllm_status set_scalar(cllm_gguf_writer *w, const char *key, cllm_gguf_type type,
                              uint64_t bits) {
    CLLM_ASSERT(w != NULL);
    wkv nv = {.type = type};
    put_le(nv.scalar, bits, cllm_gguf_type_size(type));
    return kv_set(w, key, &nv);
}

cllm_status cllm_gguf_writer_set_u8(cllm_gguf_writer *w, const char *key, uint8_t v) {
    return set_scalar(w, key, CLLM_GGUF_UINT8, v);
}
cllm_status cllm_gguf_writer_set_i8(cllm_gguf_writer *w, const char *key, int8_t v) {
    return set_scalar(w, key, CLLM_GGUF_INT8, (uint8_t)v);
}
cllm_status cllm_gguf_writer_set_u16(cllm_gguf_writer *w, const char *key, uint16_t v) {
    return set_scalar(w, key, CLLM_GGUF_UINT16, v);
}
cllm_status cllm_gguf_writer_set_i16(cllm_gguf_writer *w, const char *key, int16_t v) {
    return set_scalar(w, key, CLLM_GGUF_INT16, (uint16_t)v);
}
cllm_status cllm_gguf_writer_set_u32(cllm_gguf_writer *w, const char *key, uint32_t v) {
    return set_scalar(w, key, CLLM_GGUF_UINT32, v);
}
cllm_status cllm_gguf_writer_set_i32(cllm_gguf_writer *w, const char *key, int32_t v) {
    return set_scalar(w, key, CLLM_GGUF_INT32, (uint32_t)v);
}
cllm_status cllm_gguf_writer_set_u64(cllm_gguf_writer *w, const char *key, uint64_t v) {
    return set_scalar(w, key, CLLM_GGUF_UINT64, v);
}
cllm_status cllm_gguf_writer_set_i64(cllm_gguf_writer *w, const char *key, int64_t v) {
    return set_scalar(w, key, CLLM_GGUF_INT64, (uint64_t)v);
}
cllm_status cllm_gguf_writer_set_f32(cllm_gguf_writer *w, const char *key, float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof(u));
    return set_scalar(w, key, CLLM_GGUF_FLOAT32, u);
}
cllm_status cllm_gguf_writer_set_f64(cllm_gguf_writer *w, const char *key, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof(u));
    return set_scalar(w, key, CLLM_GGUF_FLOAT64, u);
}
cllm_status cllm_gguf_writer_set_bool(cllm_gguf_writer *w, const char *key, bool v) {
    return set_scalar(w, key, CLLM_GGUF_BOOL, v ? 1u : 0u);
}

/* A string value in nv (not yet keyed). */
static cllm_status make_str(wkv *nv, const char *v, size_t len) {
    CLLM_ASSERT(v != NULL || len == 0);
    if (len > CLLM_GGUF_MAX_STRING) {
        return cllm_error(CLLM_ERR_TOO_LARGE, "gguf writer: string of %zu bytes (limit %u)", len,
                          CLLM_GGUF_MAX_STRING);
    }
    *nv = (wkv){.type = CLLM_GGUF_STRING, .len = len};
    nv->data = mem_dup(v, len);
    if (!nv->data) return cllm_error(CLLM_ERR_NOMEM, "gguf writer: out of memory");
    return CLLM_OK;
}

cllm_status cllm_gguf_writer_set_str_n(cllm_gguf_writer *w, const char *key, const char *v,
                                       size_t len) {
    CLLM_ASSERT(w != NULL);
    wkv nv;
    const cllm_status st = make_str(&nv, v, len);
    if (st != CLLM_OK) return st;
    return kv_set(w, key, &nv);
}

cllm_status cllm_gguf_writer_set_str(cllm_gguf_writer *w, const char *key, const char *v) {
    CLLM_ASSERT(v != NULL);
    return cllm_gguf_writer_set_str_n(w, key, v, strlen(v));
}

/* A numeric or bool array value in nv (not yet keyed). */
static cllm_status make_arr(wkv *nv, cllm_gguf_type type, const void *data, uint64_t n) {
    const size_t esz = cllm_gguf_type_size(type);
    if (esz == 0) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "gguf writer: array of %s: not a numeric type",
                          cllm_gguf_type_name(type));
    }
    if (n > CLLM_GGUF_MAX_ARRAY) {
        return cllm_error(CLLM_ERR_TOO_LARGE, "gguf writer: array of %llu elements (limit %u)",
                          (unsigned long long)n, CLLM_GGUF_MAX_ARRAY);
    }
    CLLM_ASSERT(data != NULL || n == 0);
    const size_t bytes = (size_t)n * esz;
    if (type == CLLM_GGUF_BOOL) {
        for (size_t j = 0; j < bytes; j++) {
            if (((const uint8_t *)data)[j] > 1) {
                return cllm_error(CLLM_ERR_INVALID_ARG,
                                  "gguf writer: bool array element %zu is not 0 or 1", j);
            }
        }
    }
    *nv = (wkv){.type = CLLM_GGUF_ARRAY, .arr_type = type, .n = n, .len = bytes};
    nv->data = mem_dup(data, bytes);
    if (!nv->data) return cllm_error(CLLM_ERR_NOMEM, "gguf writer: out of memory");
    return CLLM_OK;
}

cllm_status cllm_gguf_writer_set_arr(cllm_gguf_writer *w, const char *key, cllm_gguf_type type,
                                     const void *data, uint64_t n) {
    CLLM_ASSERT(w != NULL);
    wkv nv;
    const cllm_status st = make_arr(&nv, type, data, n);
    if (st != CLLM_OK) return st;
    return kv_set(w, key, &nv);
}

/* A string array value in nv; lens NULL: strings are NUL-terminated. */
static cllm_status make_arr_str(wkv *nv, const char *const *strs, const size_t *lens, uint64_t n) {
    if (n > CLLM_GGUF_MAX_ARRAY) {
        return cllm_error(CLLM_ERR_TOO_LARGE, "gguf writer: array of %llu strings (limit %u)",
                          (unsigned long long)n, CLLM_GGUF_MAX_ARRAY);
    }
    CLLM_ASSERT(strs != NULL || n == 0);
    *nv = (wkv){.type = CLLM_GGUF_ARRAY, .arr_type = CLLM_GGUF_STRING, .n = n};
    nv->lens = cllm_malloc((n ? (size_t)n : 1) * sizeof(size_t));
    if (!nv->lens) return cllm_error(CLLM_ERR_NOMEM, "gguf writer: out of memory");
    size_t total = 0;
    for (size_t j = 0; j < n; j++) {
        CLLM_ASSERT(strs[j] != NULL);
        const size_t len = lens ? lens[j] : strlen(strs[j]);
        if (len > CLLM_GGUF_MAX_STRING || cllm_add_overflow(total, len, &total)) {
            wkv_free(nv);
            return cllm_error(CLLM_ERR_TOO_LARGE, "gguf writer: string %zu of %zu bytes (limit %u)",
                              j, len, CLLM_GGUF_MAX_STRING);
        }
        nv->lens[j] = len;
    }
    nv->data = cllm_malloc(total ? total : 1);
    if (!nv->data) {
        wkv_free(nv);
        return cllm_error(CLLM_ERR_NOMEM, "gguf writer: out of memory");
    }
    nv->len = total;
    size_t off = 0;
    for (size_t j = 0; j < n; j++) {
        if (nv->lens[j]) memcpy(nv->data + off, strs[j], nv->lens[j]);
        off += nv->lens[j];
    }
    return CLLM_OK;
}

cllm_status cllm_gguf_writer_set_arr_str_n(cllm_gguf_writer *w, const char *key,
                                           const char *const *strs, const size_t *lens,
                                           uint64_t n) {
    CLLM_ASSERT(w != NULL);
    wkv nv;
    const cllm_status st = make_arr_str(&nv, strs, lens, n);
    if (st != CLLM_OK) return st;
    return kv_set(w, key, &nv);
}

cllm_status cllm_gguf_writer_set_arr_str(cllm_gguf_writer *w, const char *key,
                                         const char *const *strs, uint64_t n) {
    return cllm_gguf_writer_set_arr_str_n(w, key, strs, NULL, n);
}

/* The value of src's key/value i in nv (not yet keyed). */
static cllm_status copy_value(wkv *nv, const cllm_gguf *src, int64_t i) {
    const cllm_gguf_type type = cllm_gguf_kv_type(src, i);
    if (type == CLLM_GGUF_STRING) {
        return make_str(nv, cllm_gguf_val_str(src, i), cllm_gguf_val_str_len(src, i));
    }
    if (type != CLLM_GGUF_ARRAY) {
        *nv = (wkv){.type = type};
        uint64_t bits = 0;
        switch (type) {
        case CLLM_GGUF_UINT8: bits = cllm_gguf_val_u8(src, i); break;
        case CLLM_GGUF_INT8: bits = (uint8_t)cllm_gguf_val_i8(src, i); break;
        case CLLM_GGUF_UINT16: bits = cllm_gguf_val_u16(src, i); break;
        case CLLM_GGUF_INT16: bits = (uint16_t)cllm_gguf_val_i16(src, i); break;
        case CLLM_GGUF_UINT32: bits = cllm_gguf_val_u32(src, i); break;
        case CLLM_GGUF_INT32: bits = (uint32_t)cllm_gguf_val_i32(src, i); break;
        case CLLM_GGUF_UINT64: bits = cllm_gguf_val_u64(src, i); break;
        case CLLM_GGUF_INT64: bits = (uint64_t)cllm_gguf_val_i64(src, i); break;
        case CLLM_GGUF_BOOL: bits = cllm_gguf_val_bool(src, i) ? 1u : 0u; break;
        case CLLM_GGUF_FLOAT32: {
            const float f = cllm_gguf_val_f32(src, i);
            uint32_t u;
            memcpy(&u, &f, sizeof(u));
            bits = u;
            break;
        }
        case CLLM_GGUF_FLOAT64: {
            const double d = cllm_gguf_val_f64(src, i);
            memcpy(&bits, &d, sizeof(bits));
            break;
        }
        default: CLLM_ASSERT(!"unreachable");
        }
        put_le(nv->scalar, bits, cllm_gguf_type_size(type));
        return CLLM_OK;
    }
    const cllm_gguf_type et = cllm_gguf_arr_type(src, i);
    const uint64_t n = cllm_gguf_arr_n(src, i);
    if (et != CLLM_GGUF_STRING) return make_arr(nv, et, cllm_gguf_arr_data(src, i), n);
    const char **strs = cllm_malloc((n ? (size_t)n : 1) * sizeof(*strs));
    size_t *lens = cllm_malloc((n ? (size_t)n : 1) * sizeof(*lens));
    cllm_status st;
    if (!strs || !lens) {
        st = cllm_error(CLLM_ERR_NOMEM, "gguf writer: out of memory");
    } else {
        for (uint64_t j = 0; j < n; j++) strs[j] = cllm_gguf_arr_str(src, i, j, &lens[j]);
        st = make_arr_str(nv, strs, lens, n);
    }
    cllm_free(strs);
    cllm_free(lens);
    return st;
}

cllm_status cllm_gguf_writer_copy_kv(cllm_gguf_writer *w, const cllm_gguf *src) {
    CLLM_ASSERT(w != NULL && src != NULL);
    const size_t n = (size_t)cllm_gguf_n_kv(src);
    cllm_status st = kv_reserve(w, n);
    if (st != CLLM_OK) return st;
    wkv *tmp = cllm_calloc(n ? n : 1, sizeof(*tmp));
    int64_t *slot =
        cllm_malloc((n ? n : 1) * sizeof(*slot)); /* where src key i goes, -1: appended */
    if (!tmp || !slot) {
        cllm_free(tmp);
        cllm_free(slot);
        return cllm_error(CLLM_ERR_NOMEM, "gguf writer: out of memory");
    }
    /* keys already set: found through src's index, not by a scan per key */
    for (size_t i = 0; i < n; i++) slot[i] = -1;
    for (size_t j = 0; j < w->n_kv; j++) {
        const int64_t i = cllm_gguf_find_key(src, w->kv[j].key);
        if (i >= 0) slot[i] = (int64_t)j;
    }
    size_t built = 0;
    for (; built < n; built++) {
        const char *key = cllm_gguf_key(src, (int64_t)built);
        st = copy_value(&tmp[built], src, (int64_t)built);
        if (st != CLLM_OK) goto fail;
        tmp[built].key = mem_dup(key, strlen(key));
        if (!tmp[built].key) {
            wkv_free(&tmp[built]);
            st = cllm_error(CLLM_ERR_NOMEM, "gguf writer: out of memory");
            goto fail;
        }
    }
    for (size_t i = 0; i < n; i++) kv_commit_at(w, &tmp[i], slot[i]);
    cllm_free(tmp);
    cllm_free(slot);
    return CLLM_OK;

fail:
    for (size_t i = 0; i < built; i++) wkv_free(&tmp[i]);
    cllm_free(tmp);
    cllm_free(slot);
    return st;
}

bool cllm_gguf_writer_remove(cllm_gguf_writer *w, const char *key) {
    CLLM_ASSERT(w != NULL && key != NULL);
    const int64_t j = kv_find(w, key);
    if (j < 0) return false;
    wkv_free(&w->kv[j]);
    memmove(&w->kv[j], &w->kv[j + 1], (w->n_kv - (size_t)j - 1) * sizeof(*w->kv));
    w->n_kv--;
    return true;
}

/* ---- tensors ---- */

cllm_status cllm_gguf_writer_add_tensor(cllm_gguf_writer *w, const char *name, cllm_type type,
                                        int n_dims, const int64_t *ne, const void *data) {
    CLLM_ASSERT(w != NULL && name != NULL && ne != NULL);
    const size_t name_len = strlen(name);
    if (name_len == 0 || name_len > CLLM_GGUF_MAX_NAME) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "gguf writer: tensor name of %zu bytes (must be 1 to %d)", name_len,
                          CLLM_GGUF_MAX_NAME);
    }
    for (size_t i = 0; i < w->n_tensors; i++) {
        if (strcmp(w->tensors[i].name, name) == 0) {
            return cllm_error(CLLM_ERR_INVALID_ARG, "gguf writer: tensor %s added twice", name);
        }
    }
    if (!cllm_type_is_valid(type)) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "gguf writer: tensor %s: invalid type %d", name,
                          (int)type);
    }
    if (n_dims < 1 || n_dims > 4) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "gguf writer: tensor %s: n_dims %d not in [1, 4]",
                          name, n_dims);
    }
    const cllm_type_traits *tt = cllm_type_traits_of(type);
    wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}, .data = data};
    int64_t n_el = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] <= 0) {
            return cllm_error(CLLM_ERR_INVALID_ARG, "gguf writer: tensor %s: dim %d is %lld", name,
                              d, (long long)ne[d]);
        }
        if (__builtin_mul_overflow(n_el, ne[d], &n_el)) {
            return cllm_error(CLLM_ERR_TOO_LARGE, "gguf writer: tensor %s: element count overflows",
                              name);
        }
        t.ne[d] = ne[d];
    }
    if (t.ne[0] % tt->blck_size != 0) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "gguf writer: tensor %s: dim 0 (%lld) is not whole %s blocks of %lld",
                          name, (long long)t.ne[0], tt->name, (long long)tt->blck_size);
    }
    size_t size = 0;
    bool overflow = cllm_mul_overflow((size_t)(t.ne[0] / tt->blck_size), tt->type_size, &size);
    for (int d = 1; d < 4 && !overflow; d++) {
        overflow = cllm_mul_overflow(size, (size_t)t.ne[d], &size);
    }
    if (overflow) {
        return cllm_error(CLLM_ERR_TOO_LARGE, "gguf writer: tensor %s: size overflows", name);
    }
    t.size = size;
    if (w->n_tensors >= CLLM_GGUF_MAX_TENSORS) {
        return cllm_error(CLLM_ERR_TOO_LARGE, "gguf writer: more than %u tensors",
                          CLLM_GGUF_MAX_TENSORS);
    }
    if (w->n_tensors == w->cap_tensors) {
        const size_t cap = w->cap_tensors ? 2 * w->cap_tensors : 16;
        wtensor *nt = cllm_realloc(w->tensors, cap * sizeof(*nt));
        if (!nt) return cllm_error(CLLM_ERR_NOMEM, "gguf writer: out of memory");
        w->tensors = nt;
        w->cap_tensors = cap;
    }
    t.name = mem_dup(name, name_len);
    if (!t.name) return cllm_error(CLLM_ERR_NOMEM, "gguf writer: out of memory");
    w->tensors[w->n_tensors++] = t;
    return CLLM_OK;
}

/* ---- output ---- */

typedef struct wout {
    FILE *f;
    uint64_t pos;
    int err; /* errno of the first failed write, or -1 */
    bool failed;
} wout;

static void out_bytes(wout *o, const void *p, size_t n) {
    if (o->failed || n == 0) return;
    if (fwrite(p, 1, n, o->f) != n) {
        o->failed = true;
        o->err = errno;
    }
    o->pos += n;
}

static void out_u32(wout *o, uint32_t v) {
    uint8_t b[4];
    put_le(b, v, 4);
    out_bytes(o, b, 4);
}

static void out_u64(wout *o, uint64_t v) {
    uint8_t b[8];
    put_le(b, v, 8);
    out_bytes(o, b, 8);
}

static void out_str(wout *o, const char *s, size_t len) {
    out_u64(o, len);
    out_bytes(o, s, len);
}

static const uint8_t k_zeros[4096];

static void out_zeros(wout *o, uint64_t n) {
    while (n > 0 && !o->failed) {
        const size_t k = (size_t)CLLM_MIN(n, (uint64_t)sizeof(k_zeros));
        out_bytes(o, k_zeros, k);
        n -= k;
    }
}

static void out_pad(wout *o, uint64_t align) { out_zeros(o, (align - o->pos % align) % align); }

static void out_kv(wout *o, const wkv *kv) {
    out_str(o, kv->key, strlen(kv->key));
    out_u32(o, (uint32_t)kv->type);
    if (kv->type == CLLM_GGUF_STRING) {
        out_str(o, kv->data, kv->len);
    } else if (kv->type == CLLM_GGUF_ARRAY) {
        out_u32(o, (uint32_t)kv->arr_type);
        out_u64(o, kv->n);
        if (kv->arr_type == CLLM_GGUF_STRING) {
            size_t off = 0;
            for (uint64_t j = 0; j < kv->n; j++) {
                out_str(o, kv->data + off, kv->lens[j]);
                off += kv->lens[j];
            }
        } else {
            out_bytes(o, kv->data, kv->len);
        }
    } else {
        out_bytes(o, kv->scalar, cllm_gguf_type_size(kv->type));
    }
}

/* The alignment the file will use; CLLM_ERR_INVALID_ARG if general.alignment is bad. */
static cllm_status writer_alignment(const cllm_gguf_writer *w, uint64_t *out) {
    *out = CLLM_GGUF_DEFAULT_ALIGNMENT;
    const int64_t i = kv_find(w, "general.alignment");
    if (i < 0) return CLLM_OK;
    const wkv *kv = &w->kv[i];
    const size_t n = cllm_gguf_type_size(kv->type);
    const bool is_int = kv->type != CLLM_GGUF_BOOL && kv->type != CLLM_GGUF_FLOAT32 &&
                        kv->type != CLLM_GGUF_FLOAT64 && n > 0;
    uint64_t v = 0;
    for (size_t b = 0; b < n; b++) v |= (uint64_t)kv->scalar[b] << (8 * b);
    const bool negative = n > 0 &&
                          (kv->type == CLLM_GGUF_INT8 || kv->type == CLLM_GGUF_INT16 ||
                           kv->type == CLLM_GGUF_INT32 || kv->type == CLLM_GGUF_INT64) &&
                          (kv->scalar[n - 1] & 0x80);
    if (!is_int || negative || v == 0 || (v & (v - 1)) != 0 || v > CLLM_GGUF_MAX_ALIGNMENT) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "gguf writer: general.alignment must be an integer power of two in "
                          "[1, %u]",
                          CLLM_GGUF_MAX_ALIGNMENT);
    }
    *out = v;
    return CLLM_OK;
}

cllm_status cllm_gguf_writer_write(cllm_gguf_writer *w, const char *path) {
    CLLM_ASSERT(w != NULL && path != NULL);
    uint64_t align;
    cllm_status st = writer_alignment(w, &align);
    if (st != CLLM_OK) return st;
    uint64_t data_bytes = 0; /* the data section, padded */
    for (size_t i = 0; i < w->n_tensors; i++) {
        const uint64_t room = UINT64_MAX - data_bytes;
        if (w->tensors[i].size > room || (uint64_t)w->tensors[i].size + align - 1 > room) {
            return cllm_error(CLLM_ERR_TOO_LARGE, "gguf writer: tensor data exceeds 2^64 bytes");
        }
        data_bytes += (w->tensors[i].size + align - 1) / align * align;
    }

    /* a new file beside the target, renamed over it once complete and
     * synced (core/fileio.h): a failure leaves the old file as it was */
    cllm_safe_file sf;
    CLLM_TRY(cllm_safe_file_open(&sf, path));
    wout o = {.f = sf.f, .err = -1};

    out_bytes(&o, "GGUF", 4);
    out_u32(&o, 3);
    out_u64(&o, w->n_tensors);
    out_u64(&o, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) out_kv(&o, &w->kv[i]);
    uint64_t offset = 0; /* of each tensor's data, from the data section */
    for (size_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        out_str(&o, t->name, strlen(t->name));
        out_u32(&o, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) out_u64(&o, (uint64_t)t->ne[d]);
        out_u32(&o, (uint32_t)t->type);
        out_u64(&o, offset);
        offset += (t->size + align - 1) / align * align; /* no overflow: checked above */
    }
    if (w->n_tensors > 0) out_pad(&o, align); /* no data section: no padding */
    for (size_t i = 0; i < w->n_tensors && !o.failed; i++) {
        const wtensor *t = &w->tensors[i];
        if (t->data) {
            out_bytes(&o, t->data, t->size);
        } else {
            out_zeros(&o, t->size);
        }
        out_pad(&o, align);
    }

    return cllm_safe_file_commit(&sf, o.failed ? (o.err > 0 ? o.err : EIO) : 0);
}
