/*
 * libFuzzer target: the tokenizers of the real vocabularies in
 * tests/data/models/vocab (Llama's SentencePiece vocabulary and GPT-2's
 * byte-level BPE) on arbitrary text and arbitrary token ids.
 *
 *     ./build-fuzz/fuzz_tokenizer -max_total_time=600 CORPUS_DIR
 *
 * The first input byte chooses: bit 0 the vocabulary (0: SentencePiece,
 * 1: BPE), bit 1 add_special, bit 2 parse_special, bits 3-4 the
 * CLLM_DETOK_* flags. The rest is the text; it is also read as a sequence
 * of little-endian int32 token ids (some out of range). Checked: counting
 * and encoding agree, every id is in range, a too-small buffer reports the
 * count needed and holds its first ids, decoding measures what it writes,
 * the streaming detokenizer only emits valid UTF-8 and refuses ids out of
 * range. The vocabularies are found in $CLLM_TEST_DATA_DIR/vocab, else in
 * the source tree's tests/data/models/vocab (its path compiled in); without them
 * every input is skipped (returns 0).
 */
#include "gguf/gguf.h"
#include "text/tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#ifndef CLLM_FUZZ_MODELS_DIR
#define CLLM_FUZZ_MODELS_DIR "tests/data/models"
#endif

#define FUZZ_REQUIRE(cond)                                                                         \
    do {                                                                                           \
        if (!(cond)) abort();                                                                      \
    } while (0)

static const char *const k_vocab_files[2] = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"};

static void quiet(cllm_log_level level, const char *msg, void *ud) {
    (void)level, (void)msg, (void)ud;
}

/* The tokenizer of vocabulary v, built once; NULL when its file is missing. */
static const cllm_tokenizer *vocab(int v) {
    static cllm_tokenizer *tok[2];
    static bool tried[2];
    if (tried[v]) return tok[v];
    tried[v] = true;
    const char *dir = getenv("CLLM_TEST_DATA_DIR");
    char path[4096];
    snprintf(path, sizeof(path), "%s/vocab/%s", dir && *dir ? dir : CLLM_FUZZ_MODELS_DIR,
             k_vocab_files[v]);
    cllm_gguf *g = NULL;
    if (cllm_gguf_open(path, &g) != CLLM_OK) {
        fprintf(stderr, "fuzz_tokenizer: %s is missing: inputs that pick it are skipped\n", path);
        return NULL;
    }
    /* the real vocabularies are valid: a failure here is a bug */
    FUZZ_REQUIRE(cllm_tokenizer_new_from_gguf(g, &tok[v]) == CLLM_OK);
    cllm_gguf_free(g);
    return tok[v];
}

/* Whether s[0..len) is well-formed UTF-8 (no overlong forms, surrogates or
 * code points past U+10FFFF). */
static bool utf8_valid(const unsigned char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        const unsigned c = s[i];
        size_t n;
        unsigned cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            n = 1, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            n = 2, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            n = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (len - i <= n) return false;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += n + 1;
    }
    return true;
}

/* ids through decode (measured, then written) and the streaming detokenizer. */
static void check_decode(const cllm_tokenizer *tok, const int32_t *ids, size_t n, int flags) {
    const int32_t n_vocab = cllm_tokenizer_n_vocab(tok);
    bool in_range = true;
    for (size_t i = 0; i < n; i++) in_range = in_range && ids[i] >= 0 && ids[i] < n_vocab;

    size_t need = 0;
    const cllm_status st = cllm_tokenizer_decode(tok, ids, n, flags, NULL, 0, &need);
    FUZZ_REQUIRE(st == (in_range ? CLLM_OK : CLLM_ERR_INVALID_ARG));
    if (st == CLLM_OK) {
        char *buf = malloc(need + 1);
        FUZZ_REQUIRE(buf != NULL);
        size_t len = 0;
        FUZZ_REQUIRE(cllm_tokenizer_decode(tok, ids, n, flags, buf, need + 1, &len) == CLLM_OK);
        FUZZ_REQUIRE(len == need);
        if (need > 0) {
            size_t len2 = 0;
            FUZZ_REQUIRE(cllm_tokenizer_decode(tok, ids, n, flags, buf, need - 1, &len2) ==
                         CLLM_ERR_TOO_LARGE);
            FUZZ_REQUIRE(len2 == need);
        }
        free(buf);
    }

    cllm_detokenizer *d = NULL;
    if (cllm_detokenizer_new_tok(tok, flags, &d) != CLLM_OK) return;
    const char *out;
    size_t len;
    for (size_t i = 0; i < n; i++) {
        const bool ok = ids[i] >= 0 && ids[i] < n_vocab;
        FUZZ_REQUIRE(cllm_detokenizer_put(d, ids[i], &out, &len) ==
                     (ok ? CLLM_OK : CLLM_ERR_INVALID_ARG));
        if (ok) FUZZ_REQUIRE(utf8_valid((const unsigned char *)out, len));
        size_t plen = 0;
        const char *piece = cllm_tokenizer_token_to_piece(tok, ids[i], (flags & 1) != 0, &plen);
        FUZZ_REQUIRE((piece != NULL) == ok);
    }
    cllm_detokenizer_flush(d, &out, &len);
    FUZZ_REQUIRE(utf8_valid((const unsigned char *)out, len));
    cllm_detokenizer_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool init;
    if (!init) {
        cllm_log_set(quiet, NULL);
        init = true;
    }
    if (size < 1) return 0;
    const cllm_tokenizer *tok = vocab(data[0] & 1);
    if (!tok) return 0;
    const bool add_special = data[0] & 2, parse_special = data[0] & 4;
    const int flags = (data[0] >> 3) & (CLLM_DETOK_SPECIAL | CLLM_DETOK_STRIP_PREFIX);
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    const int32_t n_vocab = cllm_tokenizer_n_vocab(tok);

    /* count, then encode into exactly that many, then into too few */
    size_t n = 0;
    FUZZ_REQUIRE(cllm_tokenizer_encode(tok, text, len, add_special, parse_special, NULL, 0, &n) ==
                 CLLM_OK);
    int32_t *ids = malloc((n + 1) * sizeof(*ids));
    FUZZ_REQUIRE(ids != NULL);
    size_t n2 = 0;
    FUZZ_REQUIRE(cllm_tokenizer_encode(tok, text, len, add_special, parse_special, ids, n, &n2) ==
                 CLLM_OK);
    FUZZ_REQUIRE(n2 == n);
    for (size_t i = 0; i < n; i++) FUZZ_REQUIRE(ids[i] >= 0 && ids[i] < n_vocab);
    if (n > 0) {
        int32_t *few = malloc(n * sizeof(*few));
        FUZZ_REQUIRE(few != NULL);
        size_t n3 = 0;
        FUZZ_REQUIRE(cllm_tokenizer_encode(tok, text, len, add_special, parse_special, few, n / 2,
                                           &n3) == CLLM_ERR_TOO_LARGE);
        FUZZ_REQUIRE(n3 == n);
        FUZZ_REQUIRE(memcmp(few, ids, n / 2 * sizeof(*ids)) == 0);
        free(few);
    }
    check_decode(tok, ids, n, flags);
    free(ids);

    /* the same bytes as token ids, most in range, some not */
    const size_t n_raw = len / 4;
    int32_t *raw = malloc((n_raw + 1) * sizeof(*raw));
    FUZZ_REQUIRE(raw != NULL);
    for (size_t i = 0; i < n_raw; i++) {
        uint32_t v;
        memcpy(&v, text + 4 * i, 4);
        /* the top byte's low bit keeps the id as it is (often out of range) */
        raw[i] = (v >> 24) & 1 ? (int32_t)v : (int32_t)((v & 0x7FFFFFFF) % (uint32_t)n_vocab);
    }
    check_decode(tok, raw, n_raw, flags);
    free(raw);
    return 0;
}
