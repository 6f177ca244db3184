/*
 * libFuzzer target: the GGUF reader on arbitrary bytes, then every accessor
 * on what it accepted, then a tokenizer from the parsed metadata.
 *
 *     ./build-fuzz/fuzz_gguf -max_total_time=600 CORPUS_DIR
 *
 * A parse may fail (most inputs do) but never crash; on a parsed file every
 * accessor is called the way the header allows (typed values after checking
 * their type), and the results are checked against each other: every key is
 * found at its own index, every tensor by its name, every string array
 * element has the length it reports. A tokenizer that builds encodes and
 * decodes a short text and every token id.
 */
#include "gguf/gguf.h"
#include "text/tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An invariant of the reader broken: a crash the fuzzer reports. */
#define FUZZ_REQUIRE(cond)                                                                         \
    do {                                                                                           \
        if (!(cond)) abort();                                                                      \
    } while (0)

static void quiet(cllm_log_level level, const char *msg, void *ud) {
    (void)level, (void)msg, (void)ud;
}

/* Reads n bytes so that the sanitizers see every one of them. */
static unsigned touch(const void *p, size_t n) {
    const volatile unsigned char *b = p;
    unsigned sum = 0;
    for (size_t i = 0; i < n; i++) sum += b[i];
    return sum;
}

static void check_value(const cllm_gguf *g, int64_t i) {
    const cllm_gguf_type t = cllm_gguf_kv_type(g, i);
    FUZZ_REQUIRE(t >= 0 && t < CLLM_GGUF_TYPE_COUNT);
    switch (t) {
    case CLLM_GGUF_UINT8: (void)cllm_gguf_val_u8(g, i); break;
    case CLLM_GGUF_INT8: (void)cllm_gguf_val_i8(g, i); break;
    case CLLM_GGUF_UINT16: (void)cllm_gguf_val_u16(g, i); break;
    case CLLM_GGUF_INT16: (void)cllm_gguf_val_i16(g, i); break;
    case CLLM_GGUF_UINT32: (void)cllm_gguf_val_u32(g, i); break;
    case CLLM_GGUF_INT32: (void)cllm_gguf_val_i32(g, i); break;
    case CLLM_GGUF_UINT64: (void)cllm_gguf_val_u64(g, i); break;
    case CLLM_GGUF_INT64: (void)cllm_gguf_val_i64(g, i); break;
    case CLLM_GGUF_FLOAT32: (void)cllm_gguf_val_f32(g, i); break;
    case CLLM_GGUF_FLOAT64: (void)cllm_gguf_val_f64(g, i); break;
    case CLLM_GGUF_BOOL: (void)cllm_gguf_val_bool(g, i); break;
    case CLLM_GGUF_STRING: {
        const char *s = cllm_gguf_val_str(g, i);
        const size_t len = cllm_gguf_val_str_len(g, i);
        FUZZ_REQUIRE(s != NULL && s[len] == '\0');
        touch(s, len);
        break;
    }
    case CLLM_GGUF_ARRAY: {
        const cllm_gguf_type at = cllm_gguf_arr_type(g, i);
        const uint64_t n = cllm_gguf_arr_n(g, i);
        FUZZ_REQUIRE(n <= CLLM_GGUF_MAX_ARRAY);
        if (at == CLLM_GGUF_STRING) {
            for (uint64_t j = 0; j < n; j++) {
                size_t len = 0;
                const char *s = cllm_gguf_arr_str(g, i, j, &len);
                FUZZ_REQUIRE(s != NULL && s[len] == '\0');
                touch(s, len);
            }
        } else {
            const size_t es = cllm_gguf_type_size(at);
            FUZZ_REQUIRE(es > 0); /* nested arrays are refused by the reader */
            const void *p = cllm_gguf_arr_data(g, i);
            FUZZ_REQUIRE(n == 0 || p != NULL);
            if (n > 0) touch(p, (size_t)n * es);
        }
        break;
    }
    case CLLM_GGUF_TYPE_COUNT: break;
    }
    /* as text, cut and whole */
    char small[8], big[256];
    const size_t full = cllm_gguf_val_to_str(g, i, small, sizeof(small));
    FUZZ_REQUIRE(memchr(small, '\0', sizeof(small)) != NULL); /* cut, but terminated */
    FUZZ_REQUIRE(cllm_gguf_val_to_str(g, i, big, sizeof(big)) == full);
    FUZZ_REQUIRE(memchr(big, '\0', sizeof(big)) != NULL);
    (void)cllm_gguf_kv_type_str(g, i);
}

/* The typed getters by key accept or refuse, never crash. */
static void check_getters(const cllm_gguf *g, const char *key) {
    uint32_t u32;
    int64_t i64;
    float f32;
    bool b;
    const char *s;
    (void)cllm_gguf_get_u32(g, key, &u32);
    (void)cllm_gguf_get_i64(g, key, &i64);
    (void)cllm_gguf_get_f32(g, key, &f32);
    (void)cllm_gguf_get_bool(g, key, &b);
    if (cllm_gguf_get_str(g, key, &s) == CLLM_OK) FUZZ_REQUIRE(s != NULL);
}

static void check_tokenizer(const cllm_gguf *g) {
    cllm_tokenizer *tok = NULL;
    if (cllm_tokenizer_new_from_gguf(g, &tok) != CLLM_OK) return;
    const int32_t n_vocab = cllm_tokenizer_n_vocab(tok);
    FUZZ_REQUIRE(n_vocab > 0);
    static const char text[] = "Hello world! caf\xc3\xa9 12 <s>\xff";
    int32_t ids[256];
    size_t n_ids = 0;
    if (cllm_tokenizer_encode(tok, text, sizeof(text) - 1, true, true, ids, 256, &n_ids) ==
        CLLM_OK) {
        for (size_t i = 0; i < n_ids; i++) FUZZ_REQUIRE(ids[i] >= 0 && ids[i] < n_vocab);
        char buf[1024];
        size_t len = 0;
        (void)cllm_tokenizer_decode(tok, ids, n_ids, CLLM_DETOK_SPECIAL, buf, sizeof(buf), &len);
    }
    /* every token (at most the first 4096) as a piece, as text and through
     * the streaming detokenizer */
    cllm_detokenizer *d = NULL;
    if (cllm_detokenizer_new_tok(tok, 0, &d) == CLLM_OK) {
        const int32_t n = n_vocab < 4096 ? n_vocab : 4096;
        for (int32_t id = 0; id < n; id++) {
            size_t len = 0;
            const char *p = cllm_tokenizer_token_to_piece(tok, id, true, &len);
            FUZZ_REQUIRE(p != NULL || len == 0);
            if (p) touch(p, len);
            const char *t = cllm_tokenizer_token_text(tok, id, &len);
            FUZZ_REQUIRE(t != NULL);
            FUZZ_REQUIRE(cllm_tokenizer_find(tok, t, len) >= 0);
            (void)cllm_tokenizer_token_type(tok, id);
            (void)cllm_tokenizer_is_eog(tok, id);
            const char *out;
            FUZZ_REQUIRE(cllm_detokenizer_put(d, id, &out, &len) == CLLM_OK);
            touch(out, len);
        }
        const char *out;
        size_t len;
        cllm_detokenizer_flush(d, &out, &len);
        cllm_detokenizer_free(d);
    }
    cllm_tokenizer_free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool init;
    if (!init) {
        cllm_log_set(quiet, NULL); /* most inputs are refused: no log line for each */
        init = true;
    }
    cllm_gguf *g = NULL;
    if (cllm_gguf_parse(data, size, "fuzz", &g) != CLLM_OK) return 0;

    const uint32_t version = cllm_gguf_version(g);
    FUZZ_REQUIRE(version >= 1 && version <= 3);
    const size_t alignment = cllm_gguf_alignment(g);
    FUZZ_REQUIRE(alignment > 0 && (alignment & (alignment - 1)) == 0);
    FUZZ_REQUIRE(cllm_gguf_file_size(g) == size);
    (void)cllm_gguf_data_offset(g);
    FUZZ_REQUIRE(strcmp(cllm_gguf_name(g), "fuzz") == 0);

    const int64_t n_kv = cllm_gguf_n_kv(g);
    FUZZ_REQUIRE(n_kv >= 0 && n_kv <= CLLM_GGUF_MAX_KV);
    for (int64_t i = 0; i < n_kv; i++) {
        const char *key = cllm_gguf_key(g, i);
        FUZZ_REQUIRE(key != NULL && key[0] != '\0');
        FUZZ_REQUIRE(cllm_gguf_find_key(g, key) == i); /* keys are unique */
        check_value(g, i);
        check_getters(g, key);
    }
    FUZZ_REQUIRE(cllm_gguf_find_key(g, "") == -1);

    const int64_t n_tensors = cllm_gguf_n_tensors(g);
    FUZZ_REQUIRE(n_tensors >= 0 && n_tensors <= CLLM_GGUF_MAX_TENSORS);
    for (int64_t i = 0; i < n_tensors; i++) {
        const cllm_gguf_tensor_info *ti = cllm_gguf_tensor(g, i);
        FUZZ_REQUIRE(ti->n_dims >= 1 && ti->n_dims <= 4);
        FUZZ_REQUIRE(ti->offset % alignment == 0);
        FUZZ_REQUIRE(cllm_gguf_data_offset(g) + ti->offset + ti->size <= size);
        FUZZ_REQUIRE(cllm_gguf_find_tensor(g, ti->name) == i); /* names are unique */
        const cllm_tensor_desc td = cllm_gguf_tensor_desc(g, i);
        FUZZ_REQUIRE(td.bytes == ti->size && td.offset == ti->offset);
        /* the data the file holds for it */
        touch(data + cllm_gguf_data_offset(g) + ti->offset, ti->size);
    }

    check_tokenizer(g);
    cllm_gguf_free(g);
    return 0;
}
