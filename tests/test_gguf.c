/*
 * GGUF reader and writer: the real test models (v1, v2, v3) with their
 * metadata facts, writer round trips, copy_kv of a real vocabulary, and
 * hostile input (every truncation of the metadata, random overwrites,
 * hand-crafted bad files); none may crash or leak.
 */
#define _POSIX_C_SOURCE 200809L /* mkstemp, clock_gettime */

#include "common/check.h"
#include "common/refs.h"
#include "gguf/gguf.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ---- */

static char g_models[1024]; /* the test models directory, with a trailing '/' */
static char g_tmpdir[1024];

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void quiet_log(cllm_log_level level, const char *msg, void *user_data) {
    (void)level;
    (void)msg;
    (void)user_data;
}

/* Silences the expected errors of the hostile-input loops. */
static void log_quiet(bool quiet) { cllm_log_set(quiet ? quiet_log : NULL, NULL); }

static uint8_t *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *data = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 20;
            uint8_t *nd = realloc(data, cap);
            if (!nd) {
                free(data);
                fclose(f);
                return NULL;
            }
            data = nd;
        }
        const size_t got = fread(data + n, 1, cap - n, f);
        if (got == 0) break;
        n += got;
    }
    fclose(f);
    *size = n;
    return data;
}

static uint8_t *read_model(const char *file, size_t *size) {
    char path[1400];
    snprintf(path, sizeof(path), "%s%s", g_models, file);
    uint8_t *d = read_all(path, size);
    CHECKF(d != NULL, "cannot read %s", path);
    return d;
}

static bool write_all(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    const bool ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* A new empty temp file's path in out (removed by the caller). */
static bool temp_path(char *out, size_t out_size) {
    snprintf(out, out_size, "%s/cllm-test-gguf-XXXXXX", g_tmpdir);
    const int fd = mkstemp(out);
    if (fd < 0) return false;
    close(fd);
    return true;
}

/* Whether a temporary file of a write of `path` is left in its folder. */
static bool temp_beside(const char *path) {
    char dir[1300];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : path;
    char prefix[1300];
    snprintf(prefix, sizeof(prefix), "%s.tmp", base);
    if (slash) *slash = '\0';
    DIR *d = opendir(slash ? dir : ".");
    if (!d) return false;
    bool found = false;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strncmp(e->d_name, prefix, strlen(prefix))) found = true;
    }
    closedir(d);
    return found;
}

/* xorshift64*: fixed seeds, reproducible. */
static uint64_t rng_next(uint64_t *s) {
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 2685821657736338717ull;
}

static uint64_t rng_below(uint64_t *s, uint64_t n) { return n ? rng_next(s) % n : 0; }

/* Reads every key/value and tensor info through the accessors, checking the
 * reader's guarantees; a parse of hostile input that succeeded must hold them. */
static void walk(const cllm_gguf *g) {
    volatile uint64_t sink = 0;
    const int64_t n_kv = cllm_gguf_n_kv(g);
    for (int64_t i = 0; i < n_kv; i++) {
        const char *key = cllm_gguf_key(g, i);
        CHECK(key != NULL && key[0] != '\0');
        CHECK(cllm_gguf_find_key(g, key) == i);
        const cllm_gguf_type t = cllm_gguf_kv_type(g, i);
        switch (t) {
        case CLLM_GGUF_UINT8: sink += cllm_gguf_val_u8(g, i); break;
        case CLLM_GGUF_INT8: sink += (uint64_t)cllm_gguf_val_i8(g, i); break;
        case CLLM_GGUF_UINT16: sink += cllm_gguf_val_u16(g, i); break;
        case CLLM_GGUF_INT16: sink += (uint64_t)cllm_gguf_val_i16(g, i); break;
        case CLLM_GGUF_UINT32: sink += cllm_gguf_val_u32(g, i); break;
        case CLLM_GGUF_INT32: sink += (uint64_t)cllm_gguf_val_i32(g, i); break;
        case CLLM_GGUF_UINT64: sink += cllm_gguf_val_u64(g, i); break;
        case CLLM_GGUF_INT64: sink += (uint64_t)cllm_gguf_val_i64(g, i); break;
        case CLLM_GGUF_FLOAT32: sink += cllm_gguf_val_f32(g, i) == 0.0f; break;
        case CLLM_GGUF_FLOAT64: sink += cllm_gguf_val_f64(g, i) == 0.0; break;
        case CLLM_GGUF_BOOL: sink += cllm_gguf_val_bool(g, i); break;
        case CLLM_GGUF_STRING: {
            const char *s = cllm_gguf_val_str(g, i);
            const size_t len = cllm_gguf_val_str_len(g, i);
            CHECK(s != NULL && s[len] == '\0');
            sink += len;
            break;
        }
        case CLLM_GGUF_ARRAY: {
            const cllm_gguf_type et = cllm_gguf_arr_type(g, i);
            const uint64_t n = cllm_gguf_arr_n(g, i);
            CHECK(et < CLLM_GGUF_TYPE_COUNT && et != CLLM_GGUF_ARRAY);
            if (et == CLLM_GGUF_STRING) {
                for (uint64_t j = 0; j < n; j++) {
                    size_t len;
                    const char *s = cllm_gguf_arr_str(g, i, j, &len);
                    if (s[len] != '\0') CHECK(s[len] == '\0');
                    sink += len;
                }
            } else {
                const uint8_t *d = cllm_gguf_arr_data(g, i);
                const size_t bytes = (size_t)n * cllm_gguf_type_size(et);
                for (size_t j = 0; j < bytes; j++) sink += d[j];
                if (et == CLLM_GGUF_BOOL) {
                    for (uint64_t j = 0; j < n; j++) {
                        if (d[j] > 1) CHECK(d[j] <= 1);
                    }
                }
            }
            break;
        }
        default: CHECKF(false, "key %s has invalid type %d", key, (int)t);
        }
    }
    const uint64_t fsize = cllm_gguf_file_size(g);
    const uint64_t doff = cllm_gguf_data_offset(g);
    const size_t align = cllm_gguf_alignment(g);
    CHECK(align > 0 && (align & (align - 1)) == 0 && doff % align == 0);
    for (int64_t i = 0; i < cllm_gguf_n_tensors(g); i++) {
        const cllm_gguf_tensor_info *ti = cllm_gguf_tensor(g, i);
        CHECK(cllm_gguf_find_tensor(g, ti->name) == i);
        CHECK(ti->n_dims >= 1 && ti->n_dims <= 4);
        CHECK(cllm_type_is_valid(ti->type));
        int64_t n_el = 1;
        for (int d = 0; d < 4; d++) {
            CHECK(ti->ne[d] >= 1);
            CHECK(d < ti->n_dims || ti->ne[d] == 1);
            CHECK(!__builtin_mul_overflow(n_el, ti->ne[d], &n_el));
        }
        const cllm_type_traits *tt = cllm_type_traits_of(ti->type);
        CHECK(n_el % tt->blck_size == 0);
        CHECK(ti->size == (size_t)(n_el / tt->blck_size) * tt->type_size);
        CHECK(cllm_gguf_version(g) < 3 || ti->ne[0] % tt->blck_size == 0);
        CHECK(ti->offset % align == 0);
        CHECK(doff <= fsize && ti->offset <= fsize - doff && ti->size <= fsize - doff - ti->offset);
    }
    (void)sink;
}

/* True when key/value i of a and key/value j of b are equal (key, type, value). */
static bool kv_equal(const cllm_gguf *a, int64_t i, const cllm_gguf *b, int64_t j) {
    if (strcmp(cllm_gguf_key(a, i), cllm_gguf_key(b, j)) != 0) return false;
    const cllm_gguf_type t = cllm_gguf_kv_type(a, i);
    if (t != cllm_gguf_kv_type(b, j)) return false;
    switch (t) {
    case CLLM_GGUF_UINT8: return cllm_gguf_val_u8(a, i) == cllm_gguf_val_u8(b, j);
    case CLLM_GGUF_INT8: return cllm_gguf_val_i8(a, i) == cllm_gguf_val_i8(b, j);
    case CLLM_GGUF_UINT16: return cllm_gguf_val_u16(a, i) == cllm_gguf_val_u16(b, j);
    case CLLM_GGUF_INT16: return cllm_gguf_val_i16(a, i) == cllm_gguf_val_i16(b, j);
    case CLLM_GGUF_UINT32: return cllm_gguf_val_u32(a, i) == cllm_gguf_val_u32(b, j);
    case CLLM_GGUF_INT32: return cllm_gguf_val_i32(a, i) == cllm_gguf_val_i32(b, j);
    case CLLM_GGUF_UINT64: return cllm_gguf_val_u64(a, i) == cllm_gguf_val_u64(b, j);
    case CLLM_GGUF_INT64: return cllm_gguf_val_i64(a, i) == cllm_gguf_val_i64(b, j);
    case CLLM_GGUF_FLOAT32: {
        const float x = cllm_gguf_val_f32(a, i), y = cllm_gguf_val_f32(b, j);
        return memcmp(&x, &y, sizeof(x)) == 0;
    }
    case CLLM_GGUF_FLOAT64: {
        const double x = cllm_gguf_val_f64(a, i), y = cllm_gguf_val_f64(b, j);
        return memcmp(&x, &y, sizeof(x)) == 0;
    }
    case CLLM_GGUF_BOOL: return cllm_gguf_val_bool(a, i) == cllm_gguf_val_bool(b, j);
    case CLLM_GGUF_STRING: {
        const size_t n = cllm_gguf_val_str_len(a, i);
        return n == cllm_gguf_val_str_len(b, j) &&
               memcmp(cllm_gguf_val_str(a, i), cllm_gguf_val_str(b, j), n + 1) == 0;
    }
    case CLLM_GGUF_ARRAY: {
        const cllm_gguf_type et = cllm_gguf_arr_type(a, i);
        const uint64_t n = cllm_gguf_arr_n(a, i);
        if (et != cllm_gguf_arr_type(b, j) || n != cllm_gguf_arr_n(b, j)) return false;
        if (et != CLLM_GGUF_STRING) {
            const size_t bytes = (size_t)n * cllm_gguf_type_size(et);
            return bytes == 0 ||
                   memcmp(cllm_gguf_arr_data(a, i), cllm_gguf_arr_data(b, j), bytes) == 0;
        }
        for (uint64_t k = 0; k < n; k++) {
            size_t la, lb;
            const char *sa = cllm_gguf_arr_str(a, i, k, &la);
            const char *sb = cllm_gguf_arr_str(b, j, k, &lb);
            if (la != lb || memcmp(sa, sb, la + 1) != 0) return false;
        }
        return true;
    }
    default: return false;
    }
}

/* Same metadata and tensor infos. */
static bool gguf_equal(const cllm_gguf *a, const cllm_gguf *b) {
    if (cllm_gguf_version(a) != cllm_gguf_version(b) || cllm_gguf_n_kv(a) != cllm_gguf_n_kv(b) ||
        cllm_gguf_n_tensors(a) != cllm_gguf_n_tensors(b) ||
        cllm_gguf_alignment(a) != cllm_gguf_alignment(b) ||
        cllm_gguf_data_offset(a) != cllm_gguf_data_offset(b) ||
        cllm_gguf_file_size(a) != cllm_gguf_file_size(b)) {
        return false;
    }
    for (int64_t i = 0; i < cllm_gguf_n_kv(a); i++) {
        if (!kv_equal(a, i, b, i)) return false;
    }
    for (int64_t i = 0; i < cllm_gguf_n_tensors(a); i++) {
        const cllm_gguf_tensor_info *x = cllm_gguf_tensor(a, i), *y = cllm_gguf_tensor(b, i);
        if (strcmp(x->name, y->name) != 0 || x->type != y->type || x->n_dims != y->n_dims ||
            memcmp(x->ne, y->ne, sizeof(x->ne)) != 0 || x->offset != y->offset ||
            x->size != y->size) {
            return false;
        }
    }
    return true;
}

/* ---- the test models ---- */

typedef struct model_facts {
    const char *file;
    uint32_t version;
    const char *arch;
    uint32_t n_layer, n_embd, n_head, n_head_kv, n_ff; /* n_head_kv 0: no such key */
    uint32_t ctx;
    uint64_t n_vocab;
    int64_t n_tensors;
    cllm_type type_a;
    int n_type_a;
    cllm_type type_b;
    int n_type_b;
} model_facts;

static const model_facts k_models[] = {
    {"stories260K.gguf", 3, "llama", 5, 64, 8, 4, 172, 2048, 512, 48, CLLM_TYPE_F32, 48,
     CLLM_TYPE_F32, 0},
    {"tinyllamas-stories-260k-q8_0.gguf", 2, "llama", 5, 64, 8, 4, 172, 512, 512, 48,
     CLLM_TYPE_Q8_0, 37, CLLM_TYPE_F32, 11},
    {"tinyllamas-stories-260k-f32.gguf", 1, "llama", 5, 64, 8, 4, 172, 512, 512, 48, CLLM_TYPE_F32,
     48, CLLM_TYPE_F32, 0},
    {"TinyLLama-v0.Q4_0.gguf", 3, "llama", 8, 64, 16, 16, 256, 2048, 32000, 75, CLLM_TYPE_Q4_0, 58,
     CLLM_TYPE_F32, 17},
    {"llama-2-tiny-random.gguf", 3, "llama", 1, 8, 2, 2, 32, 4096, 32000, 12, CLLM_TYPE_F16, 9,
     CLLM_TYPE_F32, 3},
    {"vocab/ggml-vocab-llama-spm.gguf", 3, "llama", 32, 4096, 32, 32, 11008, 4096, 32000, 0,
     CLLM_TYPE_F32, 0, CLLM_TYPE_F32, 0},
    {"vocab/ggml-vocab-gpt-2.gguf", 3, "gpt2", 12, 768, 12, 0, 3072, 1024, 50257, 0, CLLM_TYPE_F32,
     0, CLLM_TYPE_F32, 0},
};

static void check_u32(const cllm_gguf *g, const char *arch, const char *suffix, uint32_t want) {
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", arch, suffix);
    uint32_t v = 0;
    const cllm_status st = cllm_gguf_get_u32(g, key, &v);
    CHECKF(st == CLLM_OK && v == want, "%s: %s = %u (status %d), want %u", cllm_gguf_name(g), key,
           v, (int)st, want);
}

static void test_models(void) {
    for (size_t m = 0; m < CLLM_ARRAY_SIZE(k_models); m++) {
        const model_facts *f = &k_models[m];
        char path[1400];
        snprintf(path, sizeof(path), "%s%s", g_models, f->file);
        cllm_gguf *g = NULL;
        const cllm_status st = cllm_gguf_open(path, &g);
        CHECKF(st == CLLM_OK, "%s: %s", path, cllm_last_error());
        if (st != CLLM_OK) continue;
        CHECK(strcmp(cllm_gguf_name(g), path) == 0);
        CHECK_EQ_INT(cllm_gguf_version(g), f->version);
        const char *arch = NULL;
        CHECK(cllm_gguf_get_str(g, "general.architecture", &arch) == CLLM_OK);
        CHECKF(arch && strcmp(arch, f->arch) == 0, "%s: arch %s", f->file, arch ? arch : "?");
        check_u32(g, f->arch, "block_count", f->n_layer);
        check_u32(g, f->arch, "embedding_length", f->n_embd);
        check_u32(g, f->arch, "attention.head_count", f->n_head);
        if (f->n_head_kv) check_u32(g, f->arch, "attention.head_count_kv", f->n_head_kv);
        check_u32(g, f->arch, "feed_forward_length", f->n_ff);
        check_u32(g, f->arch, "context_length", f->ctx);
        const int64_t tok = cllm_gguf_find_key(g, "tokenizer.ggml.tokens");
        CHECK(tok >= 0);
        if (tok >= 0) {
            CHECK(cllm_gguf_kv_type(g, tok) == CLLM_GGUF_ARRAY);
            CHECK(cllm_gguf_arr_type(g, tok) == CLLM_GGUF_STRING);
            CHECK_EQ_INT(cllm_gguf_arr_n(g, tok), f->n_vocab);
        }
        uint32_t bos = 0;
        CHECK(cllm_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &bos) == CLLM_OK);
        CHECK_EQ_INT(bos, strcmp(f->arch, "gpt2") == 0 ? 50256 : 1);
        if (f->version != 1 && strcmp(f->arch, "llama") == 0) {
            float eps = 0;
            CHECK(cllm_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &eps) == CLLM_OK);
            CHECK(eps > 0.5e-6f && eps < 2e-5f);
        }
        CHECK_EQ_INT(cllm_gguf_n_tensors(g), f->n_tensors);
        int n_a = 0, n_b = 0;
        uint64_t end = 0;
        for (int64_t i = 0; i < cllm_gguf_n_tensors(g); i++) {
            const cllm_gguf_tensor_info *ti = cllm_gguf_tensor(g, i);
            if (ti->type == f->type_a)
                n_a++;
            else if (ti->type == f->type_b)
                n_b++;
            end = CLLM_MAX(end, cllm_gguf_data_offset(g) + ti->offset + ti->size);
        }
        CHECKF(n_a == f->n_type_a && n_b == f->n_type_b, "%s: %d %s, %d %s", f->file, n_a,
               cllm_type_name(f->type_a), n_b, cllm_type_name(f->type_b));
        CHECK(end <= cllm_gguf_file_size(g));
        if (f->n_tensors > 0) {
            const int64_t e = cllm_gguf_find_tensor(g, "token_embd.weight");
            CHECK(e >= 0);
            if (e >= 0) {
                const cllm_gguf_tensor_info *ti = cllm_gguf_tensor(g, e);
                CHECK_EQ_INT(ti->n_dims, 2);
                CHECK_EQ_INT(ti->ne[0], f->n_embd);
                CHECK_EQ_INT(ti->ne[1], (int64_t)f->n_vocab);
                CHECK_EQ_INT(ti->size, cllm_row_size(ti->type, f->n_embd) * f->n_vocab);
            }
            CHECK(cllm_gguf_find_tensor(g, "no.such.tensor") == -1);
            if (f->version == 2) { /* a legacy Q8_0 tensor whose rows end inside a block */
                const int64_t k = cllm_gguf_find_tensor(g, "blk.0.ffn_down.weight");
                CHECK(k >= 0);
                if (k >= 0) {
                    const cllm_gguf_tensor_info *ti = cllm_gguf_tensor(g, k);
                    CHECK(ti->type == CLLM_TYPE_Q8_0 && ti->ne[0] == 172 && ti->ne[1] == 64);
                    CHECK_EQ_INT(ti->size, 172 * 64 / 32 * 34);
                }
            }
        }
        CHECK(cllm_gguf_find_key(g, "no.such.key") == -1);
        walk(g);

        /* the memory image parses to the same */
        size_t size = 0;
        uint8_t *data = read_model(f->file, &size);
        if (data) {
            cllm_gguf *h = NULL;
            CHECK(cllm_gguf_parse(data, size, path, &h) == CLLM_OK);
            CHECK(h && gguf_equal(g, h));
            cllm_gguf_free(h);
        }
        free(data);
        cllm_gguf_free(g);
    }

    /* v1 and v3 stories260K hold the same token embedding at their offsets */
    size_t s1 = 0, s3 = 0;
    uint8_t *d1 = read_model("tinyllamas-stories-260k-f32.gguf", &s1);
    uint8_t *d3 = read_model("stories260K.gguf", &s3);
    cllm_gguf *g1 = NULL, *g3 = NULL;
    if (d1 && d3 && cllm_gguf_parse(d1, s1, "v1", &g1) == CLLM_OK &&
        cllm_gguf_parse(d3, s3, "v3", &g3) == CLLM_OK) {
        const char *names[] = {"token_embd.weight", "output.weight", "output_norm.weight"};
        for (size_t k = 0; k < CLLM_ARRAY_SIZE(names); k++) {
            const cllm_gguf_tensor_info *a =
                cllm_gguf_tensor(g1, cllm_gguf_find_tensor(g1, names[k]));
            const cllm_gguf_tensor_info *b =
                cllm_gguf_tensor(g3, cllm_gguf_find_tensor(g3, names[k]));
            CHECK(a->size == b->size);
            CHECKF(memcmp(d1 + cllm_gguf_data_offset(g1) + a->offset,
                          d3 + cllm_gguf_data_offset(g3) + b->offset, a->size) == 0,
                   "%s differs between v1 and v3", names[k]);
        }
    } else {
        CHECK(false);
    }
    cllm_gguf_free(g1);
    cllm_gguf_free(g3);
    free(d1);
    free(d3);

    /* missing keys and type mismatches in the typed getters */
    char path[1400];
    snprintf(path, sizeof(path), "%sstories260K.gguf", g_models);
    cllm_gguf *g = NULL;
    if (cllm_gguf_open(path, &g) == CLLM_OK) {
        log_quiet(true);
        uint32_t u = 77;
        CHECK(cllm_gguf_get_u32(g, "llama.nope", &u) == CLLM_ERR_FORMAT && u == 77);
        CHECK(strstr(cllm_last_error(), "llama.nope") && strstr(cllm_last_error(), "missing"));
        CHECK(cllm_gguf_get_u32(g, "general.architecture", &u) == CLLM_ERR_FORMAT && u == 77);
        bool b = false;
        CHECK(cllm_gguf_get_bool(g, "llama.block_count", &b) == CLLM_ERR_FORMAT);
        const char *s = NULL;
        CHECK(cllm_gguf_get_str(g, "llama.block_count", &s) == CLLM_ERR_FORMAT && s == NULL);
        float fl = 0;
        CHECK(cllm_gguf_get_f32(g, "tokenizer.ggml.tokens", &fl) == CLLM_ERR_FORMAT);
        int64_t i64 = 0;
        CHECK(cllm_gguf_get_i64(g, "tokenizer.ggml.padding_token_id", &i64) == CLLM_OK &&
              i64 == 4294967295ll);
        log_quiet(false);
        cllm_gguf_free(g);
    } else {
        CHECK(false);
    }
}

/* ---- writer round trip ---- */

static void test_writer_roundtrip(void) {
    char path[1200];
    if (!temp_path(path, sizeof(path))) {
        CHECKF(false, "mkstemp in %s failed", g_tmpdir);
        return;
    }
    cllm_gguf_writer *w = cllm_gguf_writer_new();
    CHECK(w != NULL);
    if (!w) return;

    CHECK(cllm_gguf_writer_set_u32(w, "first", 1) == CLLM_OK); /* replaced below, keeps slot 0 */
    CHECK(cllm_gguf_writer_set_u8(w, "t.u8", 200) == CLLM_OK);
    CHECK(cllm_gguf_writer_set_i8(w, "t.i8", -100) == CLLM_OK);
    CHECK(cllm_gguf_writer_set_u16(w, "t.u16", 60000) == CLLM_OK);
    CHECK(cllm_gguf_writer_set_i16(w, "t.i16", -30000) == CLLM_OK);
    CHECK(cllm_gguf_writer_set_u32(w, "t.u32", 4000000000u) == CLLM_OK);
    CHECK(cllm_gguf_writer_set_i32(w, "t.i32", -2000000000) == CLLM_OK);
    CHECK(cllm_gguf_writer_set_u64(w, "t.u64", (1ull << 63) + 5) == CLLM_OK);
    CHECK(cllm_gguf_writer_set_i64(w, "t.i64", INT64_MIN + 1) == CLLM_OK);
    CHECK(cllm_gguf_writer_set_f32(w, "t.f32", 1.5f) == CLLM_OK);
    CHECK(cllm_gguf_writer_set_f64(w, "t.f64", -2.25e300) == CLLM_OK);
    CHECK(cllm_gguf_writer_set_f64(w, "t.f64small", 0.125) == CLLM_OK);
    CHECK(cllm_gguf_writer_set_bool(w, "t.bool", true) == CLLM_OK);
    CHECK(cllm_gguf_writer_set_str(w, "t.str", "hello, gguf") == CLLM_OK);
    CHECK(cllm_gguf_writer_set_str(w, "t.empty", "") == CLLM_OK);
    CHECK(cllm_gguf_writer_set_str_n(w, "t.nul", "a\0b", 3) == CLLM_OK);
    /* longer than the reader's file buffer: read directly */
    enum { BIG = 200 * 1000 };
    char *big = malloc(BIG + 1);
    for (size_t i = 0; i < BIG; i++) big[i] = (char)('a' + i % 26);
    big[BIG] = '\0';
    CHECK(cllm_gguf_writer_set_str(w, "t.big", big) == CLLM_OK);
    CHECK(cllm_gguf_writer_set_u32(w, "general.alignment", 64) == CLLM_OK);

    const uint8_t a_u8[] = {0, 1, 255};
    const int8_t a_i8[] = {-128, 127};
    const uint16_t a_u16[] = {1, 65535, 3};
    const int16_t a_i16[] = {-32768, 32767};
    const uint32_t a_u32[] = {7, 4294967295u};
    const int32_t a_i32[] = {-5, 5, INT32_MIN};
    const float a_f32[] = {0.5f, -1e30f, 3.0f};
    const uint8_t a_bool[] = {1, 0, 1, 1};
    const uint64_t a_u64[] = {UINT64_MAX, 0};
    const int64_t a_i64[] = {INT64_MIN, -1, INT64_MAX};
    const double a_f64[] = {1e-300, -0.0};
    struct {
        const char *key;
        cllm_gguf_type type;
        const void *data;
        uint64_t n;
    } arrs[] = {
        {"a.u8", CLLM_GGUF_UINT8, a_u8, 3},     {"a.i8", CLLM_GGUF_INT8, a_i8, 2},
        {"a.u16", CLLM_GGUF_UINT16, a_u16, 3},  {"a.i16", CLLM_GGUF_INT16, a_i16, 2},
        {"a.u32", CLLM_GGUF_UINT32, a_u32, 2},  {"a.i32", CLLM_GGUF_INT32, a_i32, 3},
        {"a.f32", CLLM_GGUF_FLOAT32, a_f32, 3}, {"a.bool", CLLM_GGUF_BOOL, a_bool, 4},
        {"a.u64", CLLM_GGUF_UINT64, a_u64, 2},  {"a.i64", CLLM_GGUF_INT64, a_i64, 3},
        {"a.f64", CLLM_GGUF_FLOAT64, a_f64, 2}, {"a.empty", CLLM_GGUF_INT32, NULL, 0},
    };
    for (size_t i = 0; i < CLLM_ARRAY_SIZE(arrs); i++) {
        CHECK(cllm_gguf_writer_set_arr(w, arrs[i].key, arrs[i].type, arrs[i].data, arrs[i].n) ==
              CLLM_OK);
    }
    const char *strs[] = {"<s>", "", "\xe2\x96\x81Once", "x"};
    CHECK(cllm_gguf_writer_set_arr_str(w, "a.str", strs, 4) == CLLM_OK);
    const char *strs_n[] = {"\0", "a\0\0b"};
    const size_t lens_n[] = {1, 4};
    CHECK(cllm_gguf_writer_set_arr_str_n(w, "a.strnul", strs_n, lens_n, 2) == CLLM_OK);
    CHECK(cllm_gguf_writer_set_arr_str(w, "a.strempty", NULL, 0) == CLLM_OK);
    CHECK(cllm_gguf_writer_set_str(w, "first", "replaced") == CLLM_OK);
    /* a key removed is not written; the others keep their order */
    CHECK(cllm_gguf_writer_set_u16(w, "t.gone", 7) == CLLM_OK);
    CHECK(cllm_gguf_writer_remove(w, "t.gone"));
    CHECK(!cllm_gguf_writer_remove(w, "t.gone"));

    /* bad arguments leave the writer unchanged */
    log_quiet(true);
    CHECK(cllm_gguf_writer_set_u32(w, "", 1) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_gguf_writer_set_arr(w, "bad", CLLM_GGUF_STRING, strs, 1) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_gguf_writer_set_arr(w, "bad", CLLM_GGUF_ARRAY, a_u8, 1) == CLLM_ERR_INVALID_ARG);
    const uint8_t bad_bool[] = {0, 2};
    CHECK(cllm_gguf_writer_set_arr(w, "bad", CLLM_GGUF_BOOL, bad_bool, 2) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_gguf_writer_set_arr(w, "bad", CLLM_GGUF_UINT8, a_u8, (uint64_t)1 << 40) ==
          CLLM_ERR_TOO_LARGE);
    log_quiet(false);

    /* tensors of several types and odd shapes; data patterns by index */
    struct {
        const char *name;
        cllm_type type;
        int n_dims;
        int64_t ne[4];
        bool zeros;
    } ts[] = {
        {"f32.odd", CLLM_TYPE_F32, 3, {3, 5, 7, 1}, false},
        {"f16.one", CLLM_TYPE_F16, 1, {1, 1, 1, 1}, false},
        {"q8_0", CLLM_TYPE_Q8_0, 2, {64, 3, 1, 1}, false},
        {"q4_0.4d", CLLM_TYPE_Q4_0, 4, {32, 1, 3, 2}, false},
        {"q4_k", CLLM_TYPE_Q4_K, 2, {256, 2, 1, 1}, false},
        {"i8.4d", CLLM_TYPE_I8, 4, {7, 3, 2, 5}, false},
        {"zeros.bf16", CLLM_TYPE_BF16, 2, {5, 9, 1, 1}, true},
        {"blk.0.attn_q.weight", CLLM_TYPE_F32, 2, {13, 1, 1, 1}, false},
    };
    enum { N_T = CLLM_ARRAY_SIZE(ts) };
    uint8_t *tdata[N_T] = {0};
    size_t tsize[N_T] = {0};
    for (size_t i = 0; i < N_T; i++) {
        tsize[i] = cllm_row_size(ts[i].type, ts[i].ne[0]) *
                   (size_t)(ts[i].ne[1] * ts[i].ne[2] * ts[i].ne[3]);
        if (!ts[i].zeros) {
            tdata[i] = malloc(tsize[i]);
            for (size_t k = 0; k < tsize[i]; k++) tdata[i][k] = (uint8_t)(k * 31 + i * 7 + 1);
        }
        CHECK(cllm_gguf_writer_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne,
                                          tdata[i]) == CLLM_OK);
    }
    log_quiet(true);
    const int64_t ne_bad[4] = {33, 1, 1, 1}, ne_zero[4] = {4, 0, 1, 1}, ne_ok[4] = {4, 1, 1, 1};
    CHECK(cllm_gguf_writer_add_tensor(w, "f32.odd", CLLM_TYPE_F32, 1, ne_ok, NULL) ==
          CLLM_ERR_INVALID_ARG);
    CHECK(cllm_gguf_writer_add_tensor(w, "x", CLLM_TYPE_Q4_0, 1, ne_bad, NULL) ==
          CLLM_ERR_INVALID_ARG);
    CHECK(cllm_gguf_writer_add_tensor(w, "x", CLLM_TYPE_F32, 2, ne_zero, NULL) ==
          CLLM_ERR_INVALID_ARG);
    CHECK(cllm_gguf_writer_add_tensor(w, "x", CLLM_TYPE_F32, 0, ne_ok, NULL) ==
          CLLM_ERR_INVALID_ARG);
    CHECK(cllm_gguf_writer_add_tensor(w, "x", CLLM_TYPE_F32, 5, ne_ok, NULL) ==
          CLLM_ERR_INVALID_ARG);
    CHECK(cllm_gguf_writer_add_tensor(w, "x", (cllm_type)4, 1, ne_ok, NULL) ==
          CLLM_ERR_INVALID_ARG);
    CHECK(cllm_gguf_writer_add_tensor(w, "", CLLM_TYPE_F32, 1, ne_ok, NULL) ==
          CLLM_ERR_INVALID_ARG);
    log_quiet(false);

    CHECK(cllm_gguf_writer_write(w, path) == CLLM_OK);
    CHECK(!temp_beside(path));

    cllm_gguf *g = NULL;
    const cllm_status st = cllm_gguf_open(path, &g);
    CHECKF(st == CLLM_OK, "%s", cllm_last_error());
    size_t fsize = 0;
    uint8_t *file = read_all(path, &fsize);
    CHECK(file != NULL);
    if (st == CLLM_OK && file) {
        walk(g);
        CHECK_EQ_INT(cllm_gguf_version(g), 3);
        CHECK_EQ_INT(cllm_gguf_alignment(g), 64);
        CHECK_EQ_INT(cllm_gguf_n_kv(g), 18 + CLLM_ARRAY_SIZE(arrs) + 3);
        CHECK(cllm_gguf_find_key(g, "t.gone") < 0);
        CHECK(strcmp(cllm_gguf_key(g, 0), "first") == 0);
        CHECK(strcmp(cllm_gguf_val_str(g, 0), "replaced") == 0);
        CHECK(strcmp(cllm_gguf_key(g, 1), "t.u8") == 0);
        CHECK(cllm_gguf_val_u8(g, cllm_gguf_find_key(g, "t.u8")) == 200);
        CHECK(cllm_gguf_val_i8(g, cllm_gguf_find_key(g, "t.i8")) == -100);
        CHECK(cllm_gguf_val_u16(g, cllm_gguf_find_key(g, "t.u16")) == 60000);
        CHECK(cllm_gguf_val_i16(g, cllm_gguf_find_key(g, "t.i16")) == -30000);
        CHECK(cllm_gguf_val_u32(g, cllm_gguf_find_key(g, "t.u32")) == 4000000000u);
        CHECK(cllm_gguf_val_i32(g, cllm_gguf_find_key(g, "t.i32")) == -2000000000);
        CHECK(cllm_gguf_val_u64(g, cllm_gguf_find_key(g, "t.u64")) == (1ull << 63) + 5);
        CHECK(cllm_gguf_val_i64(g, cllm_gguf_find_key(g, "t.i64")) == INT64_MIN + 1);
        CHECK(cllm_gguf_val_f32(g, cllm_gguf_find_key(g, "t.f32")) == 1.5f);
        CHECK(cllm_gguf_val_f64(g, cllm_gguf_find_key(g, "t.f64")) == -2.25e300);
        CHECK(cllm_gguf_val_bool(g, cllm_gguf_find_key(g, "t.bool")) == true);
        CHECK(strcmp(cllm_gguf_val_str(g, cllm_gguf_find_key(g, "t.str")), "hello, gguf") == 0);
        CHECK(cllm_gguf_val_str_len(g, cllm_gguf_find_key(g, "t.empty")) == 0);
        const int64_t knul = cllm_gguf_find_key(g, "t.nul");
        CHECK(cllm_gguf_val_str_len(g, knul) == 3 &&
              memcmp(cllm_gguf_val_str(g, knul), "a\0b", 4) == 0);
        CHECK(strcmp(cllm_gguf_val_str(g, cllm_gguf_find_key(g, "t.big")), big) == 0);
        for (size_t i = 0; i < CLLM_ARRAY_SIZE(arrs); i++) {
            const int64_t k = cllm_gguf_find_key(g, arrs[i].key);
            CHECKF(k >= 0, "%s", arrs[i].key);
            if (k < 0) continue;
            CHECK(cllm_gguf_kv_type(g, k) == CLLM_GGUF_ARRAY);
            CHECK(cllm_gguf_arr_type(g, k) == arrs[i].type);
            CHECK(cllm_gguf_arr_n(g, k) == arrs[i].n);
            const void *d = cllm_gguf_arr_data(g, k);
            CHECK(d != NULL && ((uintptr_t)d % 8) == 0);
            if (arrs[i].n) {
                CHECK(memcmp(d, arrs[i].data, arrs[i].n * cllm_gguf_type_size(arrs[i].type)) == 0);
            }
        }
        const int64_t ks = cllm_gguf_find_key(g, "a.str");
        CHECK(cllm_gguf_arr_type(g, ks) == CLLM_GGUF_STRING && cllm_gguf_arr_n(g, ks) == 4);
        for (uint64_t j = 0; j < 4; j++) {
            size_t len = 99;
            CHECK(strcmp(cllm_gguf_arr_str(g, ks, j, &len), strs[j]) == 0);
            CHECK(len == strlen(strs[j]));
        }
        const int64_t ksn = cllm_gguf_find_key(g, "a.strnul");
        for (uint64_t j = 0; j < 2; j++) {
            size_t len = 99;
            const char *s = cllm_gguf_arr_str(g, ksn, j, &len);
            CHECK(len == lens_n[j] && memcmp(s, strs_n[j], len) == 0 && s[len] == '\0');
        }
        CHECK(cllm_gguf_arr_n(g, cllm_gguf_find_key(g, "a.strempty")) == 0);

        /* typed getters: conversions and range checks */
        log_quiet(true);
        uint32_t u = 0;
        CHECK(cllm_gguf_get_u32(g, "t.u8", &u) == CLLM_OK && u == 200);
        CHECK(cllm_gguf_get_u32(g, "t.u16", &u) == CLLM_OK && u == 60000);
        CHECK(cllm_gguf_get_u32(g, "t.u32", &u) == CLLM_OK && u == 4000000000u);
        u = 5;
        CHECK(cllm_gguf_get_u32(g, "t.i8", &u) == CLLM_ERR_FORMAT && u == 5);
        CHECK(cllm_gguf_get_u32(g, "t.u64", &u) == CLLM_ERR_FORMAT && u == 5);
        CHECK(cllm_gguf_get_u32(g, "t.f32", &u) == CLLM_ERR_FORMAT && u == 5);
        CHECK(cllm_gguf_get_u32(g, "t.bool", &u) == CLLM_ERR_FORMAT && u == 5);
        CHECK(cllm_gguf_get_u32(g, "a.u32", &u) == CLLM_ERR_FORMAT && u == 5);
        int64_t i64 = 0;
        CHECK(cllm_gguf_get_i64(g, "t.i16", &i64) == CLLM_OK && i64 == -30000);
        CHECK(cllm_gguf_get_i64(g, "t.i64", &i64) == CLLM_OK && i64 == INT64_MIN + 1);
        CHECK(cllm_gguf_get_i64(g, "t.u32", &i64) == CLLM_OK && i64 == 4000000000ll);
        i64 = 9;
        CHECK(cllm_gguf_get_i64(g, "t.u64", &i64) == CLLM_ERR_FORMAT && i64 == 9);
        CHECK(strstr(cllm_last_error(), "t.u64") != NULL);
        float f = 0;
        CHECK(cllm_gguf_get_f32(g, "t.f32", &f) == CLLM_OK && f == 1.5f);
        CHECK(cllm_gguf_get_f32(g, "t.f64small", &f) == CLLM_OK && f == 0.125f);
        f = 4;
        CHECK(cllm_gguf_get_f32(g, "t.f64", &f) == CLLM_ERR_FORMAT && f == 4);
        CHECK(cllm_gguf_get_f32(g, "t.u8", &f) == CLLM_ERR_FORMAT && f == 4);
        bool b = false;
        CHECK(cllm_gguf_get_bool(g, "t.bool", &b) == CLLM_OK && b);
        const char *s = NULL;
        CHECK(cllm_gguf_get_str(g, "t.str", &s) == CLLM_OK && strcmp(s, "hello, gguf") == 0);
        CHECK(cllm_gguf_get_str(g, "nope", &s) == CLLM_ERR_FORMAT);
        log_quiet(false);

        /* tensors: infos, alignment, data bytes at their offsets */
        CHECK_EQ_INT(cllm_gguf_n_tensors(g), N_T);
        const uint64_t doff = cllm_gguf_data_offset(g);
        CHECK(doff % 64 == 0);
        CHECK(fsize % 64 == 0);
        for (size_t i = 0; i < N_T; i++) {
            const int64_t k = cllm_gguf_find_tensor(g, ts[i].name);
            CHECK(k == (int64_t)i);
            const cllm_gguf_tensor_info *ti = cllm_gguf_tensor(g, (int64_t)i);
            CHECK(strcmp(ti->name, ts[i].name) == 0);
            CHECK(ti->type == ts[i].type && ti->n_dims == ts[i].n_dims);
            CHECK(memcmp(ti->ne, ts[i].ne, sizeof(ti->ne)) == 0);
            CHECK(ti->size == tsize[i]);
            CHECK(ti->offset % 64 == 0);
            if (doff + ti->offset + ti->size > fsize) {
                CHECK(false);
                continue;
            }
            const uint8_t *p = file + doff + ti->offset;
            if (tdata[i]) {
                CHECKF(memcmp(p, tdata[i], tsize[i]) == 0, "tensor %s data", ts[i].name);
            } else {
                bool z = true;
                for (size_t q = 0; q < tsize[i]; q++) z = z && p[q] == 0;
                CHECK(z);
            }
        }

        /* the same image parsed from memory */
        cllm_gguf *h = NULL;
        CHECK(cllm_gguf_parse(file, fsize, "mem", &h) == CLLM_OK);
        CHECK(h && gguf_equal(g, h));
        cllm_gguf_free(h);
    }
    free(file);
    cllm_gguf_free(g);

    /* default alignment, and bad alignments */
    cllm_gguf_writer *w2 = cllm_gguf_writer_new();
    const int64_t ne1[1] = {3};
    const float v3[3] = {1, 2, 3};
    CHECK(cllm_gguf_writer_add_tensor(w2, "a", CLLM_TYPE_F32, 1, ne1, v3) == CLLM_OK);
    CHECK(cllm_gguf_writer_add_tensor(w2, "b", CLLM_TYPE_F32, 1, ne1, v3) == CLLM_OK);
    CHECK(cllm_gguf_writer_write(w2, path) == CLLM_OK);
    g = NULL;
    CHECK(cllm_gguf_open(path, &g) == CLLM_OK);
    if (g) {
        CHECK_EQ_INT(cllm_gguf_alignment(g), CLLM_GGUF_DEFAULT_ALIGNMENT);
        CHECK_EQ_INT(cllm_gguf_tensor(g, 1)->offset, 32);
        CHECK_EQ_INT(cllm_gguf_file_size(g), cllm_gguf_data_offset(g) + 64);
        cllm_gguf_free(g);
    }
    log_quiet(true);
    CHECK(cllm_gguf_writer_set_u32(w2, "general.alignment", 3) == CLLM_OK);
    CHECK(cllm_gguf_writer_write(w2, path) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_gguf_writer_set_i32(w2, "general.alignment", -8) == CLLM_OK);
    CHECK(cllm_gguf_writer_write(w2, path) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_gguf_writer_set_str(w2, "general.alignment", "32") == CLLM_OK);
    CHECK(cllm_gguf_writer_write(w2, path) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_gguf_writer_set_u8(w2, "general.alignment", 1) == CLLM_OK);
    CHECK(cllm_gguf_writer_write(w2, path) == CLLM_OK);
    /* a write that cannot be done: no file left behind */
    char bad_path[1300];
    snprintf(bad_path, sizeof(bad_path), "%s.nodir/x.gguf", path);
    CHECK(cllm_gguf_writer_write(w2, bad_path) == CLLM_ERR_IO);
    CHECK(strstr(cllm_last_error(), "x.gguf") != NULL);
    /* a write that fails part-way (the file size limit): the old file stays,
     * no .tmp is left */
    struct rlimit old_lim;
    if (getrlimit(RLIMIT_FSIZE, &old_lim) == 0) {
        void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
        struct stat before;
        CHECK(stat(path, &before) == 0);
        const int64_t ne_big[1] = {1 << 16};
        CHECK(cllm_gguf_writer_add_tensor(w2, "big", CLLM_TYPE_F32, 1, ne_big, NULL) == CLLM_OK);
        struct rlimit lim = old_lim;
        lim.rlim_cur = 8192;
        if (setrlimit(RLIMIT_FSIZE, &lim) == 0) {
            const cllm_status wst = cllm_gguf_writer_write(w2, path);
            setrlimit(RLIMIT_FSIZE, &old_lim);
            CHECKF(wst == CLLM_ERR_IO, "status %d", (int)wst);
            CHECKF(strstr(cllm_last_error(), strerror(EFBIG)) != NULL &&
                       strstr(cllm_last_error(), path) != NULL,
                   "%s", cllm_last_error());
            struct stat after;
            CHECK(stat(path, &after) == 0 && after.st_size == before.st_size);
            CHECK(!temp_beside(path));
        }
        signal(SIGXFSZ, old_handler);
    }
    log_quiet(false);
    cllm_gguf_writer_free(w2);
    free(big);

    for (size_t i = 0; i < N_T; i++) free(tdata[i]);
    cllm_gguf_writer_free(w);
    cllm_gguf_writer_free(NULL);
    cllm_gguf_free(NULL);
    remove(path);
}

/* copy_kv of a real vocabulary: same key/values, and the same bytes. */
static void test_copy_kv(void) {
    const char *files[] = {"vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-llama-spm.gguf",
                           "tinyllamas-stories-260k-f32.gguf"};
    char path[1200];
    if (!temp_path(path, sizeof(path))) {
        CHECK(false);
        return;
    }
    for (size_t f = 0; f < CLLM_ARRAY_SIZE(files); f++) {
        size_t size = 0;
        uint8_t *orig = read_model(files[f], &size);
        cllm_gguf *src = NULL;
        if (!orig || cllm_gguf_parse(orig, size, files[f], &src) != CLLM_OK) {
            CHECK(false);
            free(orig);
            continue;
        }
        cllm_gguf_writer *w = cllm_gguf_writer_new();
        CHECK(cllm_gguf_writer_set_str(w, "general.name", "to be replaced") == CLLM_OK);
        CHECK(cllm_gguf_writer_copy_kv(w, src) == CLLM_OK);
        CHECK(cllm_gguf_writer_write(w, path) == CLLM_OK);
        cllm_gguf_writer_free(w);
        cllm_gguf *dst = NULL;
        CHECK(cllm_gguf_open(path, &dst) == CLLM_OK);
        if (dst) {
            CHECK_EQ_INT(cllm_gguf_version(dst), 3);
            CHECK_EQ_INT(cllm_gguf_n_tensors(dst), 0);
            CHECK_EQ_INT(cllm_gguf_n_kv(dst), cllm_gguf_n_kv(src));
            /* general.name was set first, so it keeps slot 0 */
            const int64_t name_src = cllm_gguf_find_key(src, "general.name");
            CHECK(cllm_gguf_find_key(dst, "general.name") == 0);
            CHECK(kv_equal(src, name_src, dst, 0));
            for (int64_t i = 0; i < cllm_gguf_n_kv(src); i++) {
                const int64_t j = cllm_gguf_find_key(dst, cllm_gguf_key(src, i));
                CHECKF(j >= 0 && kv_equal(src, i, dst, j), "%s: key %s", files[f],
                       cllm_gguf_key(src, i));
            }
            cllm_gguf_free(dst);
        }
        if (cllm_gguf_n_tensors(src) == 0) {
            /* tokenizer-only v3 file: a plain copy is byte-identical */
            w = cllm_gguf_writer_new();
            CHECK(cllm_gguf_writer_copy_kv(w, src) == CLLM_OK);
            CHECK(cllm_gguf_writer_write(w, path) == CLLM_OK);
            cllm_gguf_writer_free(w);
            size_t csize = 0;
            uint8_t *copy = read_all(path, &csize);
            CHECKF(copy && csize == size && memcmp(copy, orig, size) == 0,
                   "%s: copy differs (%zu vs %zu bytes)", files[f], csize, size);
            free(copy);
        }
        cllm_gguf_free(src);
        free(orig);
    }
    remove(path);
}

/* ---- hostile input ---- */

typedef struct image {
    const char *file;
    uint8_t *data;
    size_t size;
    uint64_t meta_end; /* the data offset (metadata ends at most here) */
    uint64_t need;     /* the shortest prefix that can parse */
} image;

static image g_images[CLLM_ARRAY_SIZE(k_models)];

static void load_images(void) {
    for (size_t m = 0; m < CLLM_ARRAY_SIZE(k_models); m++) {
        image *im = &g_images[m];
        im->file = k_models[m].file;
        im->data = read_model(im->file, &im->size);
        cllm_gguf *g = NULL;
        if (!im->data || cllm_gguf_parse(im->data, im->size, im->file, &g) != CLLM_OK) {
            CHECK(false);
            continue;
        }
        im->meta_end = cllm_gguf_data_offset(g);
        /* with tensors: up to the end of the last one; without: up to the
         * last aligned boundary before the (unpadded) end of the infos */
        im->need = im->meta_end - cllm_gguf_alignment(g) + 1;
        for (int64_t i = 0; i < cllm_gguf_n_tensors(g); i++) {
            const cllm_gguf_tensor_info *ti = cllm_gguf_tensor(g, i);
            im->need = CLLM_MAX(im->need, im->meta_end + ti->offset + ti->size);
        }
        cllm_gguf_free(g);
    }
}

/* Parses a prefix of len bytes; it must fail unless it holds everything. */
static void parse_prefix(const image *im, size_t len, int64_t *n_ok) {
    cllm_gguf *g = NULL;
    const cllm_status st = cllm_gguf_parse(im->data, len, im->file, &g);
    if (st == CLLM_OK) {
        (*n_ok)++;
        CHECKF(len >= im->need, "%s: prefix of %zu bytes parsed (needs %llu)", im->file, len,
               (unsigned long long)im->need);
        cllm_gguf_free(g);
    } else {
        CHECKF(st == CLLM_ERR_FORMAT, "%s: prefix %zu: status %d", im->file, len, (int)st);
    }
}

static void test_truncation(void) {
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int64_t n_parses = 0, n_ok = 0;
    for (size_t m = 0; m < CLLM_ARRAY_SIZE(g_images); m++) {
        const image *im = &g_images[m];
        if (!im->data) continue;
        /* every length of the first 64 KiB that ends in the metadata (and
         * 1 KiB past it); every 61st after that (tensor data: all those fail
         * at the same check, after a whole parse) */
        const size_t head = CLLM_MIN(im->size, (size_t)64 * 1024);
        const size_t every = (size_t)CLLM_MIN((uint64_t)head, im->meta_end + 1024);
        for (size_t len = 0; len < head; len += len < every ? 1 : 61) {
            parse_prefix(im, len, &n_ok);
            n_parses++;
        }
        /* a sample of the rest (half of it in the metadata, where it is
         * longer than 64 KiB), and the lengths around the metadata end, the
         * end of the last tensor and the file end */
        for (int k = 0; k < 12 && im->size > head; k++) {
            const uint64_t end = (k % 2 == 0 && im->meta_end > head) ? im->meta_end : im->size;
            parse_prefix(im, head + (size_t)rng_below(&rng, end - head), &n_ok);
            n_parses++;
        }
        const uint64_t marks[] = {im->meta_end, im->need, im->size};
        for (size_t k = 0; k < CLLM_ARRAY_SIZE(marks); k++) {
            for (int d = -1; d <= 1; d++) {
                const int64_t len = (int64_t)marks[k] + d;
                if (len >= 0 && (uint64_t)len <= im->size) {
                    parse_prefix(im, (size_t)len, &n_ok);
                    n_parses++;
                }
            }
        }
    }
    CHECK(n_ok > 0); /* the whole files */
    printf("  truncation: %lld parses, %lld parsed\n", (long long)n_parses, (long long)n_ok);
}

/* Random 1-8 byte overwrites, mostly in the header/metadata/tensor infos. */
static void test_overwrites(void) {
    /* iterations per file: many for small metadata, fewer for 32000-token vocabularies */
    const int iters[] = {1500, 1500, 1500, 40, 40, 30, 30};
    _Static_assert(CLLM_ARRAY_SIZE(iters) == CLLM_ARRAY_SIZE(k_models), "one count per model");
    int64_t n_parses = 0, n_ok = 0;
    for (size_t m = 0; m < CLLM_ARRAY_SIZE(g_images); m++) {
        const image *im = &g_images[m];
        if (!im->data) continue;
        uint8_t *buf = malloc(im->size);
        memcpy(buf, im->data, im->size);
        uint64_t rng = 0x1234567ull + m * 0x9e3779b97f4a7c15ull;
        const uint64_t meta = CLLM_MIN(im->meta_end, (uint64_t)im->size);
        for (int it = 0; it < iters[m]; it++) {
            size_t pos[8];
            uint8_t old[8];
            const int n = 1 + (int)rng_below(&rng, 8);
            const int where = (int)rng_below(&rng, 10);
            uint64_t base, span;
            if (where < 2) { /* the header and the first key/values */
                base = 0;
                span = CLLM_MIN(meta, (uint64_t)256);
            } else if (where < 4) { /* the tensor infos (the end of the metadata) */
                span = CLLM_MIN(meta, (uint64_t)4096);
                base = meta - span;
            } else if (where < 9) {
                base = 0;
                span = meta;
            } else {
                base = 0;
                span = im->size;
            }
            const uint64_t start = base + rng_below(&rng, span);
            const int mode = (int)rng_below(&rng, 4);
            for (int k = 0; k < n; k++) {
                /* contiguous (a field) or scattered */
                pos[k] = (size_t)(mode < 2 ? CLLM_MIN(start + (uint64_t)k, im->size - 1)
                                           : base + rng_below(&rng, span));
                old[k] = buf[pos[k]];
                switch (mode) {
                case 0: buf[pos[k]] = (uint8_t)rng_next(&rng); break;
                case 1: buf[pos[k]] = (k == n - 1) ? 0x80 : 0xff; break; /* huge values */
                case 2: buf[pos[k]] ^= (uint8_t)(1u << rng_below(&rng, 8)); break;
                default: buf[pos[k]] = (uint8_t)rng_below(&rng, 16); break;
                }
            }
            cllm_gguf *g = NULL;
            const cllm_status st = cllm_gguf_parse(buf, im->size, im->file, &g);
            n_parses++;
            if (st == CLLM_OK) {
                n_ok++;
                walk(g);
                cllm_gguf_free(g);
            } else {
                CHECKF(st == CLLM_ERR_FORMAT || st == CLLM_ERR_UNSUPPORTED, "status %d", (int)st);
                CHECK(strncmp(cllm_last_error(), im->file, strlen(im->file)) == 0);
            }
            for (int k = n - 1; k >= 0; k--) buf[pos[k]] = old[k];
        }
        CHECK(memcmp(buf, im->data, im->size) == 0);
        free(buf);
    }
    printf("  overwrites: %lld parses, %lld parsed\n", (long long)n_parses, (long long)n_ok);
}

/* A byte buffer for hand-crafted files. */
typedef struct buf {
    uint8_t data[1 << 19];
    size_t n;
} buf;

static void b_bytes(buf *b, const void *p, size_t n) {
    CLLM_ASSERT(b->n + n <= sizeof(b->data));
    memcpy(b->data + b->n, p, n);
    b->n += n;
}
static void b_u8(buf *b, uint8_t v) { b_bytes(b, &v, 1); }
static void b_u32(buf *b, uint32_t v) {
    for (int i = 0; i < 4; i++) b_u8(b, (uint8_t)(v >> (8 * i)));
}
static void b_u64(buf *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b_u8(b, (uint8_t)(v >> (8 * i)));
}
/* A length: uint32 in v1, uint64 after. */
static void b_len(buf *b, int version, uint64_t v) {
    if (version == 1)
        b_u32(b, (uint32_t)v);
    else
        b_u64(b, v);
}
static void b_str(buf *b, int version, const char *s) {
    b_len(b, version, strlen(s));
    b_bytes(b, s, strlen(s));
}
static void b_hdr(buf *b, int version, uint64_t n_tensors, uint64_t n_kv) {
    b_bytes(b, "GGUF", 4);
    b_u32(b, (uint32_t)version);
    b_len(b, version, n_tensors);
    b_len(b, version, n_kv);
}
static void b_kv_u32(buf *b, int version, const char *key, uint32_t v) {
    b_str(b, version, key);
    b_u32(b, CLLM_GGUF_UINT32);
    b_u32(b, v);
}
static void b_pad(buf *b, size_t align) {
    while (b->n % align) b_u8(b, 0);
}
static void b_zeros(buf *b, size_t n) {
    for (size_t i = 0; i < n; i++) b_u8(b, 0);
}

typedef struct tspec {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[5];
    uint32_t type;
    uint64_t offset;
} tspec;

static void b_tensor(buf *b, int version, const tspec *t) {
    b_str(b, version, t->name);
    b_u32(b, t->n_dims);
    for (uint32_t d = 0; d < t->n_dims && d < 5; d++) b_len(b, version, t->ne[d]);
    b_u32(b, t->type);
    b_u64(b, t->offset);
}

/* A file with one key/value and the given tensors, then data_bytes of data. */
static void b_tensor_file(buf *b, int version, const tspec *ts, size_t n, size_t data_bytes) {
    b->n = 0;
    b_hdr(b, version, n, 1);
    b_kv_u32(b, version, "k", 1);
    for (size_t i = 0; i < n; i++) b_tensor(b, version, &ts[i]);
    b_pad(b, 32);
    b_zeros(b, data_bytes);
}

/* Parses b, checks the status and that the message holds `msg` (if not NULL). */
static void expect(const buf *b, cllm_status want, const char *msg, const char *what) {
    cllm_gguf *g = NULL;
    const cllm_status st = cllm_gguf_parse(b->data, b->n, "crafted.gguf", &g);
    CHECKF(st == want, "%s: status %d, want %d (%s)", what, (int)st, (int)want,
           st == CLLM_OK ? "parsed" : cllm_last_error());
    if (st == CLLM_OK) {
        walk(g);
        cllm_gguf_free(g);
    } else if (msg) {
        CHECKF(strstr(cllm_last_error(), msg) != NULL && strstr(cllm_last_error(), "crafted.gguf"),
               "%s: message \"%s\" lacks \"%s\"", what, cllm_last_error(), msg);
    }
}

static void test_crafted(void) {
    static buf b;
    const cllm_status F = CLLM_ERR_FORMAT, U = CLLM_ERR_UNSUPPORTED;

    /* header */
    b.n = 0;
    expect(&b, F, "magic", "empty");
    b_bytes(&b, "GGU", 3);
    expect(&b, F, "magic", "3 bytes");
    b.n = 0;
    b_bytes(&b, "GGML", 4);
    b_u32(&b, 3);
    b_zeros(&b, 16);
    expect(&b, F, "magic", "bad magic");
    b.n = 0;
    b_hdr(&b, 3, 0, 0);
    expect(&b, CLLM_OK, NULL, "empty v3");
    b.n = 0;
    b_hdr(&b, 1, 0, 0);
    expect(&b, CLLM_OK, NULL, "empty v1");
    b.n = 0;
    b_hdr(&b, 0, 0, 0);
    expect(&b, F, "version", "version 0");
    b.n = 0;
    b_hdr(&b, 4, 0, 0);
    expect(&b, U, "version", "version 4");
    b.n = 0;
    b_hdr(&b, 0x03000000, 0, 0);
    expect(&b, U, "big-endian", "big-endian v3");
    b.n = 0;
    b_hdr(&b, 3, 0, 0);
    b.n -= 3;
    expect(&b, F, "n_kv", "short header");

    /* counts */
    const uint64_t huge[] = {UINT64_MAX, 1ull << 63, CLLM_GGUF_MAX_KV + 1ull, 1000};
    for (size_t i = 0; i < CLLM_ARRAY_SIZE(huge); i++) {
        b.n = 0;
        b_hdr(&b, 3, 0, huge[i]);
        b_kv_u32(&b, 3, "k", 1);
        expect(&b, F, "n_kv", "huge n_kv");
        b.n = 0;
        b_hdr(&b, 3, huge[i], 0);
        b_zeros(&b, 64);
        expect(&b, F, "n_tensors", "huge n_tensors");
    }
    b.n = 0;
    b_hdr(&b, 1, 0, 0xffffffffu);
    expect(&b, F, "n_kv", "v1 huge n_kv");

    /* keys */
    b.n = 0;
    b_hdr(&b, 3, 0, 1);
    b_u64(&b, 1ull << 63);
    b_bytes(&b, "key", 3);
    b_u32(&b, CLLM_GGUF_UINT8);
    b_u8(&b, 0);
    expect(&b, F, "key: length", "key length 2^63");
    b.n = 0;
    b_hdr(&b, 3, 0, 1);
    b_u64(&b, 40);
    b_bytes(&b, "key", 3);
    b_u32(&b, CLLM_GGUF_UINT8);
    b_u8(&b, 0);
    expect(&b, F, "past the end", "key beyond the file");
    b.n = 0;
    b_hdr(&b, 3, 0, 1);
    b_str(&b, 3, "");
    b_u32(&b, CLLM_GGUF_UINT8);
    b_u8(&b, 0);
    b_zeros(&b, 8);
    expect(&b, F, "empty", "empty key");
    b.n = 0;
    b_hdr(&b, 3, 0, 1);
    b_u64(&b, 3);
    b_bytes(&b, "a\0b", 3);
    b_u32(&b, CLLM_GGUF_UINT8);
    b_u8(&b, 0);
    expect(&b, F, "NUL", "key with NUL");
    b.n = 0;
    b_hdr(&b, 3, 0, 2);
    b_kv_u32(&b, 3, "dup", 1);
    b_kv_u32(&b, 3, "dup", 2);
    expect(&b, F, "key/value 1 (dup): key: duplicate", "duplicate key");

    /* values */
    const uint32_t bad_types[] = {13, 0xffffffffu, 0x80000000u};
    for (size_t i = 0; i < CLLM_ARRAY_SIZE(bad_types); i++) {
        b.n = 0;
        b_hdr(&b, 3, 0, 1);
        b_str(&b, 3, "k");
        b_u32(&b, bad_types[i]);
        b_zeros(&b, 16);
        expect(&b, F, "value type", "bad value type");
    }
    b.n = 0;
    b_hdr(&b, 3, 0, 1);
    b_str(&b, 3, "k");
    b_u32(&b, CLLM_GGUF_STRING);
    b_u64(&b, 1ull << 63);
    b_zeros(&b, 16);
    expect(&b, F, "limit", "string length 2^63");
    b.n = 0;
    b_hdr(&b, 3, 0, 1);
    b_str(&b, 3, "k");
    b_u32(&b, CLLM_GGUF_STRING);
    b_u64(&b, 17);
    b_zeros(&b, 16);
    expect(&b, F, "past the end", "string one byte too long");
    b.n = 0;
    b_hdr(&b, 1, 0, 1);
    b_str(&b, 1, "k");
    b_u32(&b, CLLM_GGUF_STRING);
    b_u32(&b, 0xffffffffu);
    b_zeros(&b, 16);
    expect(&b, F, "value", "v1 string length 2^32-1");
    b.n = 0;
    b_hdr(&b, 3, 0, 1);
    b_str(&b, 3, "k");
    b_u32(&b, CLLM_GGUF_UINT64);
    b_zeros(&b, 7);
    expect(&b, F, "truncated", "truncated u64");
    b.n = 0;
    b_hdr(&b, 3, 0, 1);
    b_str(&b, 3, "k");
    b_u32(&b, CLLM_GGUF_BOOL);
    b_u8(&b, 2);
    expect(&b, F, "bool", "bool 2");

    /* arrays */
    struct {
        uint32_t type;
        uint64_t n;
        size_t bytes;
        cllm_status want;
        const char *msg;
    } arr_cases[] = {
        {CLLM_GGUF_UINT32, 1000, 8, F, "array length"},
        {CLLM_GGUF_UINT32, 3, 8, F, "array length"},
        {CLLM_GGUF_UINT32, 2, 8, CLLM_OK, NULL},
        {CLLM_GGUF_UINT8, 1ull << 62, 16, F, "limit"},
        {CLLM_GGUF_UINT8, UINT64_MAX, 16, F, "limit"},
        {CLLM_GGUF_STRING, CLLM_GGUF_MAX_ARRAY, 64, F, "array length"},
        {CLLM_GGUF_STRING, 9, 64, F, "array length"}, /* 8 empty strings fit, 9 do not */
        {CLLM_GGUF_STRING, 8, 64, CLLM_OK, NULL},
        {CLLM_GGUF_ARRAY, 1, 64, U, "arrays of arrays"},
        {13, 1, 64, F, "array element type"},
        {0xffffffffu, 1, 64, F, "array element type"},
        {CLLM_GGUF_BOOL, 4, 4, F, "bool"}, /* zero bytes below: fixed up to hold a 3 */
    };
    for (size_t i = 0; i < CLLM_ARRAY_SIZE(arr_cases); i++) {
        b.n = 0;
        b_hdr(&b, 3, 0, 1);
        b_str(&b, 3, "arr");
        b_u32(&b, CLLM_GGUF_ARRAY);
        b_u32(&b, arr_cases[i].type);
        b_u64(&b, arr_cases[i].n);
        b_zeros(&b, arr_cases[i].bytes);
        if (arr_cases[i].type == CLLM_GGUF_BOOL) b.data[b.n - 2] = 3;
        char what[64];
        snprintf(what, sizeof(what), "array case %zu", i);
        expect(&b, arr_cases[i].want, arr_cases[i].msg, what);
    }
    b.n = 0; /* string array element of 2^63 bytes */
    b_hdr(&b, 3, 0, 1);
    b_str(&b, 3, "arr");
    b_u32(&b, CLLM_GGUF_ARRAY);
    b_u32(&b, CLLM_GGUF_STRING);
    b_u64(&b, 2);
    b_str(&b, 3, "ok");
    b_u64(&b, 1ull << 63);
    b_zeros(&b, 16);
    expect(&b, F, "array element 1: length", "string array element length 2^63");
    b.n = 0; /* string array element past the end */
    b_hdr(&b, 3, 0, 1);
    b_str(&b, 3, "arr");
    b_u32(&b, CLLM_GGUF_ARRAY);
    b_u32(&b, CLLM_GGUF_STRING);
    b_u64(&b, 2);
    b_str(&b, 3, "ok");
    b_u64(&b, 100);
    b_zeros(&b, 99);
    expect(&b, F, "array element 1: length 100 runs past the end", "string past the end");
    b.n = 0; /* a nested array whose inner array is well-formed */
    b_hdr(&b, 3, 0, 1);
    b_str(&b, 3, "nested");
    b_u32(&b, CLLM_GGUF_ARRAY);
    b_u32(&b, CLLM_GGUF_ARRAY);
    b_u64(&b, 1);
    b_u32(&b, CLLM_GGUF_UINT8);
    b_u64(&b, 1);
    b_u8(&b, 7);
    expect(&b, U, "key/value 0 (nested): array element type", "nested arrays");
    CHECK(strstr(cllm_last_error(), "arrays of arrays") != NULL);

    /* alignment */
    struct {
        uint32_t type;
        uint64_t v;
        cllm_status want;
    } al_cases[] = {
        {CLLM_GGUF_UINT32, 0, F},          {CLLM_GGUF_UINT32, 3, F},
        {CLLM_GGUF_UINT32, 48, F},         {CLLM_GGUF_UINT32, 1u << 30, F},
        {CLLM_GGUF_INT32, 0xfffffff8u, F}, {CLLM_GGUF_FLOAT32, 0x42000000u, F},
        {CLLM_GGUF_UINT32, 64, CLLM_OK},   {CLLM_GGUF_UINT32, 1, CLLM_OK},
        {CLLM_GGUF_UINT64, 256, CLLM_OK},
    };
    for (size_t i = 0; i < CLLM_ARRAY_SIZE(al_cases); i++) {
        b.n = 0;
        b_hdr(&b, 3, 1, 1);
        b_str(&b, 3, "general.alignment");
        b_u32(&b, al_cases[i].type);
        if (al_cases[i].type == CLLM_GGUF_UINT64)
            b_u64(&b, al_cases[i].v);
        else
            b_u32(&b, (uint32_t)al_cases[i].v);
        const tspec t = {"w", 1, {4}, CLLM_TYPE_F32, 0};
        b_tensor(&b, 3, &t);
        if (al_cases[i].want == CLLM_OK) b_pad(&b, (size_t)al_cases[i].v);
        b_zeros(&b, 16);
        char what[64];
        snprintf(what, sizeof(what), "alignment case %zu", i);
        expect(&b, al_cases[i].want, al_cases[i].want ? "general.alignment" : NULL, what);
    }

    /* tensor infos */
    struct {
        tspec t;
        size_t data;
        cllm_status want;
        const char *msg;
    } t_cases[] = {
        {{"w", 2, {4, 3}, CLLM_TYPE_F32, 0}, 48, CLLM_OK, NULL},
        {{"w", 2, {4, 3}, CLLM_TYPE_F32, 0}, 47, F, "tensor 0 (w): offset"},
        {{"w", 0, {0}, CLLM_TYPE_F32, 0}, 48, F, "tensor 0 (w): n_dims"},
        {{"w", 5, {1, 1, 1, 1, 1}, CLLM_TYPE_F32, 0}, 48, F, "n_dims: 5"},
        {{"w", 0xffffffffu, {1}, CLLM_TYPE_F32, 0}, 48, F, "n_dims"},
        {{"w", 2, {4, 0}, CLLM_TYPE_F32, 0}, 48, F, "tensor 0 (w): dim 1"},
        {{"w", 2, {UINT64_MAX, 1}, CLLM_TYPE_F32, 0}, 48, F, "dim 0: -1 is not positive"},
        {{"w", 2, {1ull << 63, 1}, CLLM_TYPE_F32, 0}, 48, F, "dim 0"},
        {{"w", 2, {1ull << 32, 1ull << 32}, CLLM_TYPE_F32, 0}, 48, F, "dim 1: the element count"},
        {{"w", 4, {1ull << 16, 1ull << 16, 1ull << 16, 1ull << 16}, CLLM_TYPE_I8, 0},
         48,
         F,
         "dim 3"},
        {{"w", 1, {1ull << 62}, CLLM_TYPE_F64, 0}, 48, F, "size overflows"},
        {{"w", 1, {1ull << 40}, CLLM_TYPE_F32, 0}, 48, F, "offset"},
        {{"w", 1, {4}, 4, 0}, 48, F, "type: invalid tensor type id 4"},
        {{"w", 1, {4}, 31, 0}, 48, F, "type"},
        {{"w", 1, {4}, CLLM_TYPE_COUNT, 0}, 48, F, "type"},
        {{"w", 1, {4}, 0xffffffffu, 0}, 48, F, "type"},
        {{"w", 1, {33}, CLLM_TYPE_Q4_0, 0}, 48, F, "block size"},
        {{"w", 1, {32}, CLLM_TYPE_Q4_0, 0}, 18, CLLM_OK, NULL},
        {{"w", 1, {4}, CLLM_TYPE_F32, 1}, 48, F, "multiple of the alignment"},
        {{"w", 1, {4}, CLLM_TYPE_F32, 32}, 48, CLLM_OK, NULL},
        {{"w", 1, {4}, CLLM_TYPE_F32, 64}, 48, F, "past the end"},
        {{"w", 1, {4}, CLLM_TYPE_F32, UINT64_MAX - 31}, 48, F, "past the end"},
        {{"", 1, {4}, CLLM_TYPE_F32, 0}, 48, F, "name: is empty"},
    };
    for (size_t i = 0; i < CLLM_ARRAY_SIZE(t_cases); i++) {
        b_tensor_file(&b, 3, &t_cases[i].t, 1, t_cases[i].data);
        char what[64];
        snprintf(what, sizeof(what), "tensor case %zu", i);
        expect(&b, t_cases[i].want, t_cases[i].msg, what);
    }
    /* legacy v1/v2 quantized tensors may have rows that end inside a block */
    const tspec partial = {"w", 2, {40, 4}, CLLM_TYPE_Q8_0, 0}; /* 160 elements: 5 blocks */
    b_tensor_file(&b, 2, &partial, 1, 5 * 34);
    expect(&b, CLLM_OK, NULL, "v2 partial-block rows");
    b_tensor_file(&b, 3, &partial, 1, 5 * 34);
    expect(&b, F, "dim 0: 40 is not a multiple of the block size 32", "v3 partial-block rows");
    const tspec partial_bad = {"w", 2, {40, 3}, CLLM_TYPE_Q8_0, 0}; /* 120: not whole blocks */
    b_tensor_file(&b, 2, &partial_bad, 1, 5 * 34);
    expect(&b, F, "block size", "v2 partial last block");
    b_tensor_file(&b, 2, &partial, 1, 5 * 34 - 1);
    expect(&b, F, "past the end", "v2 partial-block rows, data short");
    /* the same through v1 (uint32 dims and lengths) */
    const tspec v1_ok = {"w", 2, {4, 3}, CLLM_TYPE_F32, 0};
    b_tensor_file(&b, 1, &v1_ok, 1, 48);
    expect(&b, CLLM_OK, NULL, "v1 tensor");
    const tspec v1_bad = {"w", 2, {4, 0}, CLLM_TYPE_F32, 0};
    b_tensor_file(&b, 1, &v1_bad, 1, 48);
    expect(&b, F, "dim 1", "v1 dim 0");
    /* duplicates, and the names in the messages */
    const tspec dup[2] = {{"a", 1, {4}, CLLM_TYPE_F32, 0}, {"a", 1, {4}, CLLM_TYPE_F32, 32}};
    b_tensor_file(&b, 3, dup, 2, 64);
    expect(&b, F, "tensor 1 (a): name: duplicate of tensor 0", "duplicate tensors");
    const tspec two[2] = {{"a", 1, {4}, CLLM_TYPE_F32, 0}, {"b", 1, {4}, CLLM_TYPE_F32, 32}};
    b_tensor_file(&b, 3, two, 2, 47);
    expect(&b, F, "tensor 1 (b): offset", "second tensor past the end");
    b_tensor_file(&b, 3, two, 2, 64);
    expect(&b, CLLM_OK, NULL, "two tensors");
    /* tensors whose data overlap, in any file order */
    const tspec inside[2] = {{"a", 1, {16}, CLLM_TYPE_F32, 0}, {"b", 1, {4}, CLLM_TYPE_F32, 32}};
    b_tensor_file(&b, 3, inside, 2, 64);
    expect(&b, F, "tensor 1 (b): offset: data [32, +16) overlaps that of tensor 0 (a) at [0, +64)",
           "tensor data inside another's");
    const tspec same[2] = {{"a", 1, {4}, CLLM_TYPE_F32, 0}, {"b", 1, {8}, CLLM_TYPE_F32, 0}};
    b_tensor_file(&b, 3, same, 2, 64);
    expect(&b, F, "tensor 1 (b): offset: data [0, +32) overlaps that of tensor 0 (a)",
           "tensors at one offset");
    const tspec rev[3] = {{"a", 1, {8}, CLLM_TYPE_F32, 64},
                          {"b", 1, {4}, CLLM_TYPE_F32, 32},
                          {"c", 1, {9}, CLLM_TYPE_F32, 0}};
    b_tensor_file(&b, 3, rev, 3, 96);
    expect(&b, F, "tensor 1 (b): offset: data [32, +16) overlaps that of tensor 2 (c) at [0, +36)",
           "tensor data overlapping the end of an earlier one");
    const tspec rev_ok[3] = {{"a", 1, {8}, CLLM_TYPE_F32, 64},
                             {"b", 1, {4}, CLLM_TYPE_F32, 32},
                             {"c", 1, {8}, CLLM_TYPE_F32, 0}};
    b_tensor_file(&b, 3, rev_ok, 3, 96);
    expect(&b, CLLM_OK, NULL, "adjacent tensors in reverse order");
    char long_name[CLLM_GGUF_MAX_NAME + 2];
    memset(long_name, 'x', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    const tspec longt = {long_name, 1, {4}, CLLM_TYPE_F32, 0};
    b_tensor_file(&b, 3, &longt, 1, 48);
    expect(&b, F, "limit", "name too long");
    long_name[CLLM_GGUF_MAX_NAME] = '\0';
    b_tensor_file(&b, 3, &longt, 1, 48);
    expect(&b, CLLM_OK, NULL, "name of the longest length");
    b_tensor_file(&b, 3, two, 2, 64); /* a name with a NUL byte */
    b.data[24 + 17 + 33 + 8] = '\0';
    expect(&b, F, "NUL", "tensor name with NUL");
    b_tensor_file(&b, 3, two, 2, 64); /* a control character is printed as '?' */
    b.data[24 + 17 + 33 + 8] = '\n';
    expect(&b, CLLM_OK, NULL, "tensor name with a newline");
    b_tensor_file(&b, 3, two, 1, 0); /* the infos end, then no data: 1 tensor past the end */
    b.n = 4 + 4 + 16 + 17 + 8 + 1 + 4 + 8 + 4 + 8;
    expect(&b, F, "data offset", "data offset past the end");

    /* many keys and tensors: look-ups, and the first repeated name reported */
    enum { N_MANY = 3000 };
    char nm[32];
    b.n = 0;
    b_hdr(&b, 3, N_MANY, N_MANY);
    for (int i = 0; i < N_MANY; i++) {
        snprintf(nm, sizeof(nm), "key.%d", (i * 7919) % N_MANY);
        b_kv_u32(&b, 3, nm, (uint32_t)i);
    }
    for (int i = 0; i < N_MANY; i++) {
        snprintf(nm, sizeof(nm), "t%d", N_MANY - i);
        const tspec t = {nm, 1, {8}, CLLM_TYPE_F32, 32 * (uint64_t)i};
        b_tensor(&b, 3, &t);
    }
    b_pad(&b, 32);
    b_zeros(&b, 32 * N_MANY);
    cllm_gguf *g = NULL;
    CHECK(cllm_gguf_parse(b.data, b.n, "many.gguf", &g) == CLLM_OK);
    if (g) {
        bool ok = true;
        for (int i = 0; i < N_MANY; i++) {
            snprintf(nm, sizeof(nm), "key.%d", (i * 7919) % N_MANY);
            ok = ok && cllm_gguf_find_key(g, nm) == i && cllm_gguf_val_u32(g, i) == (uint32_t)i;
            snprintf(nm, sizeof(nm), "t%d", N_MANY - i);
            ok = ok && cllm_gguf_find_tensor(g, nm) == i;
        }
        CHECK(ok);
        CHECK(cllm_gguf_find_key(g, "key.") == -1 && cllm_gguf_find_key(g, "key.30000") == -1);
        CHECK(cllm_gguf_find_tensor(g, "t0") == -1 && cllm_gguf_find_tensor(g, "t") == -1);
        cllm_gguf_free(g);
    }
    b.n = 0;
    b_hdr(&b, 3, 0, N_MANY);
    for (int i = 0; i < N_MANY; i++) {
        snprintf(nm, sizeof(nm), "key.%d", i == 2000 || i == 2500 ? 17 : i);
        b_kv_u32(&b, 3, nm, (uint32_t)i);
    }
    expect(&b, F, "key/value 2000 (key.17): key: duplicate of key/value 17", "many keys, dup");
    b.n = 0;
    b_hdr(&b, 3, N_MANY, 0);
    for (int i = 0; i < N_MANY; i++) {
        snprintf(nm, sizeof(nm), "t%d", i >= 2998 ? 5 : i);
        const tspec t = {nm, 1, {8}, CLLM_TYPE_F32, 32 * (uint64_t)i};
        b_tensor(&b, 3, &t);
    }
    b_pad(&b, 32);
    b_zeros(&b, 32 * N_MANY);
    expect(&b, F, "tensor 2998 (t5): name: duplicate of tensor 5", "many tensors, dup");
}

/* A few of the above through cllm_gguf_open on files. */
static void test_open_files(void) {
    char path[1200];
    if (!temp_path(path, sizeof(path))) {
        CHECK(false);
        return;
    }
    log_quiet(true);
    const image *im = &g_images[0];
    if (im->data) {
        const size_t lens[] = {0, 3, 24, 5000, (size_t)im->meta_end, im->size - 1, im->size};
        for (size_t i = 0; i < CLLM_ARRAY_SIZE(lens); i++) {
            CHECK(write_all(path, im->data, lens[i]));
            cllm_gguf *g = NULL;
            const cllm_status st = cllm_gguf_open(path, &g);
            CHECKF(st == (lens[i] >= im->need ? CLLM_OK : CLLM_ERR_FORMAT), "len %zu: %d", lens[i],
                   (int)st);
            if (st != CLLM_OK) CHECK(strstr(cllm_last_error(), path) != NULL);
            cllm_gguf_free(g);
        }
        /* an overwrite in a tensor info */
        uint8_t *copy = malloc(im->size);
        memcpy(copy, im->data, im->size);
        memset(copy + im->meta_end - 40, 0xff, 8);
        CHECK(write_all(path, copy, im->size));
        cllm_gguf *g = NULL;
        CHECK(cllm_gguf_open(path, &g) == CLLM_ERR_FORMAT && g == NULL);
        CHECK(strstr(cllm_last_error(), "tensor 47 (") != NULL);
        free(copy);
    }
    cllm_gguf *g = (cllm_gguf *)&g; /* untouched on failure */
    char missing[1300];
    snprintf(missing, sizeof(missing), "%s.missing", path);
    CHECK(cllm_gguf_open(missing, &g) == CLLM_ERR_IO && g == (cllm_gguf *)&g);
    CHECK(cllm_gguf_open(g_tmpdir, &g) == CLLM_ERR_IO && g == (cllm_gguf *)&g);
    CHECK(strstr(cllm_last_error(), "a directory, not a regular file") != NULL);
    /* a FIFO without a writer: an error at once, not an open that blocks
     * (SIGALRM ends the test if it does) */
    char fifo[1300];
    snprintf(fifo, sizeof(fifo), "%s.fifo", path);
    if (mkfifo(fifo, 0600) == 0) {
        alarm(30);
        CHECK(cllm_gguf_open(fifo, &g) == CLLM_ERR_IO && g == (cllm_gguf *)&g);
        CHECK(strstr(cllm_last_error(), "a FIFO, not a regular file") != NULL);
        alarm(0);
        remove(fifo);
    } else {
        CHECKF(false, "mkfifo %s failed", fifo);
    }
    log_quiet(false);
    remove(path);
}

int main(void) {
    refs_model_path(g_models, sizeof(g_models), "");
    const char *tmp = getenv("TMPDIR");
    snprintf(g_tmpdir, sizeof(g_tmpdir), "%s", tmp && tmp[0] ? tmp : "/tmp");

    /* without the test models only the writer and the crafted files run,
     * and the test reports itself skipped */
    const char *files[CLLM_ARRAY_SIZE(k_models) + 1];
    for (size_t m = 0; m < CLLM_ARRAY_SIZE(k_models); m++) files[m] = k_models[m].file;
    files[CLLM_ARRAY_SIZE(k_models)] = NULL;
    const bool have_models = refs_have(files);

    double t0 = now_s();
    if (have_models) test_models();
    printf("  models: %.2f s\n", now_s() - t0);
    t0 = now_s();
    test_writer_roundtrip();
    if (have_models) test_copy_kv();
    printf("  writer: %.2f s\n", now_s() - t0);

    if (have_models) load_images();
    log_quiet(true);
    t0 = now_s();
    if (have_models) test_truncation();
    printf("  truncation: %.2f s\n", now_s() - t0);
    t0 = now_s();
    if (have_models) test_overwrites();
    printf("  overwrites: %.2f s\n", now_s() - t0);
    t0 = now_s();
    test_crafted();
    log_quiet(false);
    if (have_models) test_open_files();
    printf("  crafted and files: %.2f s\n", now_s() - t0);
    for (size_t m = 0; m < CLLM_ARRAY_SIZE(g_images); m++) free(g_images[m].data);
    return check_summary("test_gguf");
}
