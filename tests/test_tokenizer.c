/*
 * Tokenizer tests: the llama.cpp vocab fixtures token for token, the prompt
 * ids of the reference outputs, round trips, the streaming detokenizer,
 * special tokens, the pre-tokenizers, bad UTF-8, over-long input and
 * malformed metadata.
 */
#include "common/check.h"
#include "common/json.h"
#include "common/refs.h"
#include "core/hostmem.h"
#include "gguf/gguf.h"
#include "text/chat.h"
#include "text/tokenizer-impl.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TMP_GGUF "test_tokenizer_tmp.gguf"

/* ---- helpers ---- */

/* rel under tests/data/models, or an absolute path as it is. */
static void model_path(char *buf, size_t cap, const char *rel) {
    if (rel[0] == '/') {
        snprintf(buf, cap, "%s", rel);
    } else {
        refs_model_path(buf, cap, rel);
    }
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 65536;
            char *b = realloc(buf, cap);
            if (!b) break;
            buf = b;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    *len = n;
    return buf;
}

static cllm_tokenizer *load_tokenizer(const char *rel) {
    char path[4096];
    model_path(path, sizeof(path), rel);
    cllm_gguf *g = NULL;
    if (cllm_gguf_open(path, &g) != CLLM_OK) {
        CHECKF(0, "cannot open %s: %s", path, cllm_last_error());
        return NULL;
    }
    cllm_tokenizer *tok = NULL;
    cllm_status st = cllm_tokenizer_new_from_gguf(g, &tok);
    CHECKF(st == CLLM_OK, "%s: %s", rel, cllm_last_error());
    cllm_gguf_free(g);
    return st == CLLM_OK ? tok : NULL;
}

/* Encodes into a fresh array (*n ids); NULL on failure. */
static int32_t *encode(const cllm_tokenizer *tok, const char *s, size_t len, bool add_special,
                       bool parse_special, size_t *n) {
    size_t need = 0;
    cllm_status st = cllm_tokenizer_encode(tok, s, len, add_special, parse_special, NULL, 0, &need);
    if (st != CLLM_OK) return NULL; /* counting only is not an error */
    int32_t *ids = malloc((need + 1) * sizeof(int32_t));
    if (!ids) return NULL;
    st = cllm_tokenizer_encode(tok, s, len, add_special, parse_special, ids, need, n);
    if (st != CLLM_OK || *n != need) {
        free(ids);
        return NULL;
    }
    return ids;
}

/* Decodes into a fresh NUL-terminated buffer. */
static char *decode(const cllm_tokenizer *tok, const int32_t *ids, size_t n, int flags,
                    size_t *len) {
    size_t need = 0;
    cllm_status st = cllm_tokenizer_decode(tok, ids, n, flags, NULL, 0, &need);
    if (st != CLLM_OK) return NULL; /* measuring only is not an error */
    char *buf = malloc(need + 1);
    if (!buf) return NULL;
    st = cllm_tokenizer_decode(tok, ids, n, flags, buf, need, len);
    if (st != CLLM_OK) {
        free(buf);
        return NULL;
    }
    buf[*len] = '\0';
    return buf;
}

static uint32_t g_rng = 12345;
static uint32_t rnd(void) {
    g_rng = g_rng * 1664525u + 1013904223u;
    return g_rng >> 8;
}

/* ---- fixtures ---- */

/* The fixture `vocab` in `dir` (NULL: tests/data/models/vocab). */
static void test_fixture(const char *dir, const char *vocab, int decode_flags) {
    char rel[4096], path[4096];
    snprintf(rel, sizeof(rel), "%s/%s", dir ? dir : "vocab", vocab);
    cllm_tokenizer *tok = load_tokenizer(rel);
    if (!tok) return;

    size_t inp_len, out_len;
    model_path(path, sizeof(path), rel);
    size_t pl = strlen(path);
    snprintf(path + pl, sizeof(path) - pl, ".inp");
    char *inp = read_file(path, &inp_len);
    snprintf(path + pl, sizeof(path) - pl, ".out");
    char *out = read_file(path, &out_len);
    CHECKF(inp && out, "cannot read the fixture files of %s", vocab);
    if (!inp || !out) goto done;

    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *s = inp, *line = out;
    int n_cases = 0, n_match = 0, n_roundtrip = 0;
    while (*s) {
        char *e = strstr(s, sep);
        if (!e) break;
        size_t len = (size_t)(e - s);
        char *nl = strchr(line, '\n');
        if (!nl) break;
        *nl = '\0';

        int32_t expect[1024];
        size_t n_expect = 0;
        for (char *p = line; *p;) {
            char *q;
            long v = strtol(p, &q, 10);
            if (q == p) break;
            if (n_expect < 1024) expect[n_expect++] = (int32_t)v;
            p = q;
        }

        size_t n = 0;
        int32_t *ids = encode(tok, s, len, false, false, &n);
        bool same = ids && n == n_expect && memcmp(ids, expect, n * sizeof(int32_t)) == 0;
        CHECKF(same, "%s case %d (\"%.*s\"): %zu ids, expected %zu", vocab, n_cases, (int)len, s, n,
               n_expect);
        if (!same && ids) {
            fprintf(stderr, "  got:     ");
            for (size_t k = 0; k < n; k++) fprintf(stderr, " %d", ids[k]);
            fprintf(stderr, "\n  expected:");
            for (size_t k = 0; k < n_expect; k++) fprintf(stderr, " %d", expect[k]);
            fprintf(stderr, "\n");
        }
        n_match += same;

        /* Every vocab here is lossless on these strings. */
        size_t dl = 0;
        char *d = ids ? decode(tok, ids, n, decode_flags, &dl) : NULL;
        bool rt = d && dl == len && memcmp(d, s, len) == 0;
        CHECKF(rt, "%s case %d: decode(encode(s)) = \"%s\"", vocab, n_cases, d ? d : "(null)");
        n_roundtrip += rt;
        free(d);
        free(ids);

        n_cases++;
        s = e + sizeof(sep) - 1;
        line = nl + 1;
    }
    CHECKF(n_cases == 46, "%s: %d cases read", vocab, n_cases);
    printf("%s: %d/%d cases match, %d round trips\n", vocab, n_match, n_cases, n_roundtrip);
done:
    free(inp);
    free(out);
    cllm_tokenizer_free(tok);
}

/* Conversations through the fixtures' own chat templates (the "chat" entries
 * of references-qwen.json: the template rendered by jinja2, then tokenized by
 * llama.cpp with special tokens): the style cllm recognises, with the
 * template's default system message when there is none, renders the same
 * text (the BOS text aside, which cllm adds as a token) and the same ids. */
static void test_llama_cpp_chats(const char dir[4096], const json *chats) {
    CHECKF(json_len(chats) >= 4, "references-qwen.json: %zu chat entries", json_len(chats));
    for (size_t c = 0; c < json_len(chats); c++) {
        const json *e = json_at(chats, c);
        const char *vocab = json_str(json_get(e, "vocab"));
        char file[8192];
        snprintf(file, sizeof(file), "%s/%s", dir, vocab);
        cllm_gguf *g = NULL;
        cllm_tokenizer *tok = NULL;
        char *def_sys = NULL, *text = NULL;
        int32_t *ids = NULL;
        if (cllm_gguf_open(file, &g) != CLLM_OK ||
            cllm_tokenizer_new_from_gguf(g, &tok) != CLLM_OK) {
            CHECKF(false, "%s: %s", vocab, cllm_last_error());
            goto next;
        }
        const int64_t k = cllm_gguf_find_key(g, "tokenizer.chat_template");
        const char *tmpl = k >= 0 ? cllm_gguf_val_str(g, k) : NULL;
        cllm_chat_style style;
        if (cllm_chat_style_detect(tmpl, &style) != CLLM_OK ||
            cllm_chat_default_system(tmpl, &def_sys) != CLLM_OK) {
            CHECKF(false, "%s: %s", vocab, cllm_last_error());
            goto next;
        }
        cllm_chat_msg msgs[8];
        size_t n = 0;
        const json *conv = json_get(e, "messages");
        if (def_sys) msgs[n++] = (cllm_chat_msg){.role = "system", .content = def_sys};
        for (size_t i = 0; i < json_len(conv) && n < 8; i++) {
            msgs[n++] = (cllm_chat_msg){.role = json_str(json_get(json_at(conv, i), "role")),
                                        .content = json_str(json_get(json_at(conv, i), "content"))};
        }
        size_t len = 0;
        if (cllm_chat_render_alloc(style, msgs, n, true, &text, &len) != CLLM_OK) {
            CHECKF(false, "%s: %s", vocab, cllm_last_error());
            goto next;
        }
        const bool add_bos = !cllm_chat_style_has_bos_text(style) && cllm_tokenizer_add_bos(tok);
        const char *want = json_str(json_get(e, "text"));
        size_t bos_len = 0;
        const char *bos =
            add_bos ? cllm_tokenizer_token_to_piece(tok, cllm_tokenizer_bos(tok), true, &bos_len)
                    : "";
        if (add_bos && strncmp(want, bos, bos_len) == 0) want += bos_len;
        CHECKF(strcmp(text, want) == 0, "%s (%s): rendered \"%s\", jinja2 \"%s\"", vocab,
               cllm_chat_style_name(style), text, want);
        size_t n_ids = 0;
        ids = encode(tok, text, len, add_bos, true, &n_ids);
        const json *want_ids = json_get(e, "ids");
        bool same = ids && n_ids == json_len(want_ids);
        for (size_t i = 0; same && i < n_ids; i++) same = ids[i] == json_num(json_at(want_ids, i));
        CHECKF(same, "%s (%s): %zu ids of the chat, llama.cpp %zu", vocab,
               cllm_chat_style_name(style), n_ids, json_len(want_ids));
        if (!same && ids) {
            fprintf(stderr, "  got:     ");
            for (size_t i = 0; i < n_ids; i++) fprintf(stderr, " %d", ids[i]);
            fprintf(stderr, "\n  llama.cpp:");
            for (size_t i = 0; i < json_len(want_ids); i++)
                fprintf(stderr, " %d", (int)json_num(json_at(want_ids, i)));
            fprintf(stderr, "\n");
        }
    next:
        free(ids);
        cllm_free(text);
        cllm_free(def_sys);
        cllm_tokenizer_free(tok);
        cllm_gguf_free(g);
    }
}

/* Prompts of our own (non-ASCII, digits, code, whitespace runs, emoji, text
 * that looks like special tokens) with each fetched fixture: llama.cpp's ids
 * from tests/data/references-qwen.json ("tokenizers", made by
 * scripts/make-references.py --set qwen). */
static void test_llama_cpp_prompts(const char dir[4096]) {
    const char *root = getenv("CLLM_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/data/references-qwen.json", root ? root : ".");
    size_t len;
    char *text = read_file(path, &len);
    json *doc = text ? json_parse(text) : NULL;
    const json *vocabs = json_get(doc, "tokenizers");
    CHECKF(json_len(vocabs) == 4, "%s: no tokenizer prompts", path);
    for (size_t v = 0; v < json_len(vocabs); v++) {
        if (strcmp(json_key(vocabs, v), "chat") == 0) {
            test_llama_cpp_chats(dir, json_at(vocabs, v));
            continue;
        }
        char file[8192];
        snprintf(file, sizeof(file), "%s/%s", dir, json_key(vocabs, v));
        cllm_tokenizer *tok = load_tokenizer(file);
        if (!tok) continue;
        const json *prompts = json_at(vocabs, v);
        int n_match = 0;
        for (size_t i = 0; i < json_len(prompts); i++) {
            const json *p = json_at(prompts, i), *want = json_get(p, "ids");
            const char *s = json_str(json_get(p, "text"));
            size_t n = 0;
            int32_t *ids = encode(tok, s, strlen(s), false, false, &n);
            bool same = ids && n == json_len(want);
            for (size_t k = 0; same && k < n; k++) same = ids[k] == json_num(json_at(want, k));
            CHECKF(same, "%s: \"%s\": %zu ids, llama.cpp %zu", json_key(vocabs, v), s, n,
                   json_len(want));
            if (!same && ids) {
                fprintf(stderr, "  got:     ");
                for (size_t k = 0; k < n; k++) fprintf(stderr, " %d", ids[k]);
                fprintf(stderr, "\n  llama.cpp:");
                for (size_t k = 0; k < json_len(want); k++)
                    fprintf(stderr, " %d", (int)json_num(json_at(want, k)));
                fprintf(stderr, "\n");
            }
            n_match += same;
            free(ids);
        }
        printf("%s: %d/%zu of our prompts as llama.cpp\n", json_key(vocabs, v), n_match,
               json_len(prompts));
        cllm_tokenizer_free(tok);
    }
    json_free(doc);
    free(text);
}

/* ---- reference prompts ---- */

static void test_reference_prompts(void) {
    static const struct {
        const char *file;
        int32_t ids[5];
    } cases[] = {
        {"stories260K.gguf", {1, 403, 407, 261, 378}},
        {"tinyllamas-stories-260k-q8_0.gguf", {1, 403, 407, 261, 378}},
        {"tinyllamas-stories-260k-f32.gguf", {1, 403, 407, 261, 378}},
        {"TinyLLama-v0.Q4_0.gguf", {1, 4612, 2619, 260, 647}},
        {"llama-2-tiny-random.gguf", {1, 9038, 2501, 263, 931}},
    };
    static const char text[] = "Once upon a time";
    for (size_t c = 0; c < CLLM_ARRAY_SIZE(cases); c++) {
        cllm_tokenizer *tok = load_tokenizer(cases[c].file);
        if (!tok) continue;
        int32_t ids[16];
        size_t n = 0;
        cllm_status st = cllm_tokenizer_encode(tok, text, strlen(text), true, false, ids, 16, &n);
        CHECK(st == CLLM_OK);
        bool same = st == CLLM_OK && n == 5 && memcmp(ids, cases[c].ids, sizeof(cases[c].ids)) == 0;
        CHECKF(same, "%s: \"%s\" -> %zu ids [%d %d %d %d %d ...]", cases[c].file, text, n, ids[0],
               ids[1], ids[2], ids[3], ids[4]);

        /* Without add_special there is no BOS; decoding restores the text. */
        st = cllm_tokenizer_encode(tok, text, strlen(text), false, false, ids, 16, &n);
        CHECK(st == CLLM_OK && n == 4 && ids[0] == cases[c].ids[1]);
        char buf[64];
        size_t len = 0;
        st = cllm_tokenizer_decode(tok, ids, n, CLLM_DETOK_STRIP_PREFIX, buf, sizeof(buf), &len);
        CHECK(st == CLLM_OK && len == strlen(text) && memcmp(buf, text, len) == 0);
        st = cllm_tokenizer_decode(tok, ids, n, 0, buf, sizeof(buf), &len);
        CHECK(st == CLLM_OK && len == strlen(text) + 1 && buf[0] == ' ');
        CHECK(cllm_tokenizer_bos(tok) == 1 && cllm_tokenizer_eos(tok) == 2);
        CHECK(cllm_tokenizer_is_eog(tok, 2) && !cllm_tokenizer_is_eog(tok, 1));
        cllm_tokenizer_free(tok);
    }
}

/* ---- SPM details ---- */

static void test_spm_api(const cllm_tokenizer *tok) {
    size_t len = 0;
    CHECK(cllm_tokenizer_kind_of(tok) == CLLM_TOKENIZER_SPM);
    CHECK(cllm_tokenizer_n_vocab(tok) == 32000);
    CHECK(cllm_tokenizer_unk(tok) == 0 && cllm_tokenizer_pad(tok) == -1);
    CHECK(cllm_tokenizer_add_bos(tok) && !cllm_tokenizer_add_eos(tok));
    const char *t = cllm_tokenizer_token_text(tok, 1, &len);
    CHECK(t && len == 3 && strcmp(t, "<s>") == 0);
    CHECK(cllm_tokenizer_token_text(tok, 32000, &len) == NULL);
    CHECK(cllm_tokenizer_token_text(tok, -1, NULL) == NULL);
    CHECK(cllm_tokenizer_find(tok, "<s>", 3) == 1);
    CHECK(cllm_tokenizer_find(tok, "\xE2\x96\x81Hello", 8) == 15043);
    CHECK(cllm_tokenizer_find(tok, "no such token", 13) == -1);
    CHECK(cllm_tokenizer_token_type(tok, 0) == CLLM_TOKEN_TYPE_UNKNOWN);
    CHECK(cllm_tokenizer_token_type(tok, 1) == CLLM_TOKEN_TYPE_CONTROL);
    CHECK(cllm_tokenizer_token_type(tok, 13) == CLLM_TOKEN_TYPE_BYTE);
    CHECK(cllm_tokenizer_token_type(tok, 99999) == CLLM_TOKEN_TYPE_COUNT);

    const char *p = cllm_tokenizer_token_to_piece(tok, 15043, false, &len);
    CHECK(p && len == 6 && memcmp(p, " Hello", 6) == 0);
    p = cllm_tokenizer_token_to_piece(tok, 13, false, &len); /* <0x0A> */
    CHECK(p && len == 1 && p[0] == '\n');
    p = cllm_tokenizer_token_to_piece(tok, 3, false, &len); /* <0x00> */
    CHECK(p && len == 1 && p[0] == '\0');
    p = cllm_tokenizer_token_to_piece(tok, 1, false, &len);
    CHECK(p && len == 0);
    p = cllm_tokenizer_token_to_piece(tok, 1, true, &len);
    CHECK(p && len == 3 && memcmp(p, "<s>", 3) == 0);
    p = cllm_tokenizer_token_to_piece(tok, 0, false, &len);
    CHECK(p && len == 3 && memcmp(p, CLLM_UTF8_REPLACEMENT, 3) == 0);
    CHECK(cllm_tokenizer_token_to_piece(tok, 32000, false, &len) == NULL);

    /* Special tokens. */
    static const char s1[] = "<s>Hello</s>";
    size_t n = 0;
    int32_t *ids = encode(tok, s1, strlen(s1), false, true, &n);
    CHECK(ids && n == 3 && ids[0] == 1 && ids[1] == 15043 && ids[2] == 2);
    free(ids);
    ids = encode(tok, s1, strlen(s1), false, false, &n);
    CHECK(ids && n > 3);
    for (size_t k = 0; ids && k < n; k++) CHECK(ids[k] != 1 && ids[k] != 2);
    char *d = ids ? decode(tok, ids, n, CLLM_DETOK_STRIP_PREFIX, &len) : NULL;
    CHECK(d && strcmp(d, s1) == 0);
    free(d);
    free(ids);
    /* Text after a special token gets the space prefix again; decoding with
     * CLLM_DETOK_SPECIAL | STRIP_PREFIX restores the input. */
    static const char s2[] = "Hi</s>there<unk>";
    ids = encode(tok, s2, strlen(s2), true, true, &n);
    CHECK(ids && n >= 5 && ids[0] == 1 && ids[n - 1] == 0);
    d = ids ? decode(tok, ids, n, CLLM_DETOK_SPECIAL | CLLM_DETOK_STRIP_PREFIX, &len) : NULL;
    CHECKF(d && strcmp(d, "<s>Hi</s>there<unk>") == 0, "\"%s\"", d ? d : "");
    free(d);
    free(ids);

    /* Empty text: nothing, or BOS alone. */
    int32_t one[4];
    CHECK(cllm_tokenizer_encode(tok, NULL, 0, false, false, one, 4, &n) == CLLM_OK && n == 0);
    CHECK(cllm_tokenizer_encode(tok, "", 0, true, false, one, 4, &n) == CLLM_OK && n == 1 &&
          one[0] == 1);
    /* Invalid arguments. */
    CHECK(cllm_tokenizer_encode(tok, NULL, 3, false, false, one, 4, &n) == CLLM_ERR_INVALID_ARG);
    int32_t bad[] = {15043, 32000};
    char buf[16];
    CHECK(cllm_tokenizer_decode(tok, bad, 2, 0, buf, sizeof(buf), &len) == CLLM_ERR_INVALID_ARG);
    /* Decode into a short buffer reports the size needed. */
    int32_t hw[] = {15043, 3186};
    CHECK(cllm_tokenizer_decode(tok, hw, 2, 0, buf, 4, &len) == CLLM_ERR_TOO_LARGE && len == 12 &&
          memcmp(buf, " Hel", 4) == 0);
}

/* ---- BPE details ---- */

static void test_bpe_api(const cllm_tokenizer *tok) {
    size_t len = 0, n = 0;
    CHECK(cllm_tokenizer_kind_of(tok) == CLLM_TOKENIZER_BPE);
    CHECK(cllm_tokenizer_pretok(tok) == CLLM_PRETOK_GPT2);
    CHECK(cllm_tokenizer_n_vocab(tok) == 50257);
    CHECK(cllm_tokenizer_bos(tok) == 50256 && cllm_tokenizer_eos(tok) == 50256);
    CHECK(!cllm_tokenizer_add_bos(tok) && !cllm_tokenizer_add_eos(tok));
    CHECK(cllm_tokenizer_is_eog(tok, 50256) && !cllm_tokenizer_is_eog(tok, 0));
    CHECK(cllm_tokenizer_is_eog(tok, cllm_tokenizer_eot(tok)));
    CHECK(!cllm_tokenizer_is_eog(tok, -1) && !cllm_tokenizer_is_eog(tok, 50257));

    int32_t id = cllm_tokenizer_find(tok, "\xC4\xA0world", 7); /* "Ġworld" */
    CHECK(id == 995);
    const char *p = cllm_tokenizer_token_to_piece(tok, id, false, &len);
    CHECK(p && len == 6 && memcmp(p, " world", 6) == 0);
    p = cllm_tokenizer_token_to_piece(tok, 50256, false, &len);
    CHECK(p && len == 0);
    p = cllm_tokenizer_token_to_piece(tok, 50256, true, &len);
    CHECK(p && len == 13 && memcmp(p, "<|endoftext|>", 13) == 0);

    static const char s1[] = "Hello<|endoftext|> world";
    int32_t *ids = encode(tok, s1, strlen(s1), true, true, &n);
    int found = 0;
    for (size_t k = 0; ids && k < n; k++) found += ids[k] == 50256;
    CHECK(ids && n == 3 && ids[1] == 50256 && ids[2] == 995 && found == 1);
    free(ids);
    ids = encode(tok, s1, strlen(s1), true, false, &n);
    found = 0;
    for (size_t k = 0; ids && k < n; k++) found += ids[k] == 50256;
    CHECK(ids && n > 3 && found == 0);
    char *d = ids ? decode(tok, ids, n, 0, &len) : NULL;
    CHECK(d && strcmp(d, s1) == 0);
    free(d);
    free(ids);
}

/* ---- streaming detokenizer ---- */

/* Pushes ids through a detokenizer; every chunk must be valid UTF-8. Returns
 * the concatenated output (NUL-terminated) and counts empty chunks. */
static char *stream(const cllm_tokenizer *tok, const int32_t *ids, size_t n, int flags,
                    int *n_empty) {
    cllm_detokenizer *d = NULL;
    if (cllm_detokenizer_new_tok(tok, flags, &d) != CLLM_OK) return NULL;
    size_t cap = 64, len = 0;
    char *all = malloc(cap);
    *n_empty = 0;
    for (size_t i = 0; i <= n && all; i++) {
        const char *t;
        size_t tl;
        if (i < n) {
            cllm_status st = cllm_detokenizer_put(d, ids[i], &t, &tl);
            CHECK(st == CLLM_OK);
            if (st != CLLM_OK) tl = 0;
        } else {
            cllm_detokenizer_flush(d, &t, &tl);
        }
        CHECKF(cllm_utf8_valid(t, tl), "chunk %zu of %zu is not valid UTF-8", i, n);
        *n_empty += tl == 0;
        if (len + tl + 1 > cap) {
            cap = 2 * (len + tl + 1);
            char *b = realloc(all, cap);
            if (!b) {
                free(all);
                all = NULL;
                break;
            }
            all = b;
        }
        memcpy(all + len, t, tl);
        len += tl;
    }
    if (all) all[len] = '\0';
    cllm_detokenizer_free(d);
    return all;
}

static void test_detokenizer(const cllm_tokenizer *spm, const cllm_tokenizer *bpe) {
    /* Characters split over byte tokens (SPM byte fallback) and over
     * byte-level BPE tokens. */
    static const char text[] = "\xF0\x9F\xA6\x99 h\xC3\xA9llo \xE4\xB8\xAD\xE6\x96\x87 "
                               "\xE2\x9C\x85 \xF0\x9F\x98\x81!";
    const cllm_tokenizer *toks[2] = {spm, bpe};
    for (int k = 0; k < 2; k++) {
        const cllm_tokenizer *tok = toks[k];
        if (!tok) continue;
        size_t n = 0;
        int32_t *ids = encode(tok, text, strlen(text), false, false, &n);
        CHECK(ids != NULL);
        if (!ids) continue;
        int n_empty = 0;
        char *s = stream(tok, ids, n, CLLM_DETOK_STRIP_PREFIX, &n_empty);
        CHECKF(s && strcmp(s, text) == 0, "stream gave \"%s\"", s ? s : "");
        CHECKF(n_empty >= 2, "%d empty chunks", n_empty); /* the emoji came in pieces */
        free(s);
        free(ids);
    }

    if (spm) {
        /* Ill-formed: E2 82 then "▁a" -> one U+FFFD then " a"; FF -> U+FFFD;
         * a truncated F0 9F at the end -> U+FFFD at flush. */
        int32_t ids[] = {3 + 0xE2, 3 + 0x82, 263, 3 + 0xFF, 3 + 0xF0, 3 + 0x9F};
        int n_empty = 0;
        char *s = stream(spm, ids, 6, 0, &n_empty);
        CHECKF(s && strcmp(s, "\xEF\xBF\xBD a\xEF\xBF\xBD\xEF\xBF\xBD") == 0, "\"%s\"", s ? s : "");
        free(s);
        /* Random ids of every type: always valid output, never a crash. */
        int32_t rids[600];
        for (int i = 0; i < 600; i++)
            rids[i] = i % 3 ? (int32_t)(3 + rnd() % 256) : (int32_t)(rnd() % 32000);
        s = stream(spm, rids, 600, CLLM_DETOK_SPECIAL, &n_empty);
        CHECK(s != NULL);
        free(s);
        cllm_detokenizer *d = NULL;
        CHECK(cllm_detokenizer_new_tok(spm, 0, &d) == CLLM_OK);
        const char *t;
        size_t tl;
        CHECK(cllm_detokenizer_put(d, 32000, &t, &tl) == CLLM_ERR_INVALID_ARG);
        CHECK(cllm_detokenizer_put(d, 3 + 0xC3, &t, &tl) == CLLM_OK && tl == 0);
        cllm_detokenizer_reset(d); /* drops the held byte */
        CHECK(cllm_detokenizer_put(d, 3 + 'x', &t, &tl) == CLLM_OK && tl == 1 && t[0] == 'x');
        cllm_detokenizer_free(d);
        cllm_detokenizer_free(NULL);
    }
    if (bpe) {
        int32_t rids[600];
        for (int i = 0; i < 600; i++) rids[i] = (int32_t)(rnd() % 50257);
        int n_empty = 0;
        char *s = stream(bpe, rids, 600, CLLM_DETOK_SPECIAL, &n_empty);
        CHECK(s != NULL);
        free(s);
    }
}

/* ---- bad UTF-8 and random bytes ---- */

static void test_random_bytes(const cllm_tokenizer *tok, bool spm) {
    static const char alphabet[] = "ab \n\t'1.<|>";
    int failures = 0;
    for (int iter = 0; iter < 300; iter++) {
        char s[64];
        size_t len = rnd() % sizeof(s);
        for (size_t i = 0; i < len; i++) {
            uint32_t r = rnd();
            s[i] =
                r % 3 ? (char)(0x80 + (r >> 4) % 128) : alphabet[(r >> 4) % (sizeof(alphabet) - 1)];
            if (r % 17 == 0) s[i] = (char)(r >> 9);
        }
        size_t n = 0;
        int32_t *ids = encode(tok, s, len, false, false, &n);
        CHECK(ids != NULL);
        if (!ids) continue;
        for (size_t k = 0; k < n; k++) CHECK(ids[k] >= 0 && ids[k] < cllm_tokenizer_n_vocab(tok));
        size_t dl = 0;
        char *d = decode(tok, ids, n, CLLM_DETOK_STRIP_PREFIX, &dl);
        /* SPM cannot tell a literal U+2581 from a space. */
        bool lossy = false;
        for (size_t i = 0; spm && i + 3 <= len; i++) lossy |= memcmp(s + i, "\xE2\x96\x81", 3) == 0;
        if (!lossy && !(d && dl == len && memcmp(d, s, len) == 0)) failures++;
        free(d);
        free(ids);
    }
    CHECKF(failures == 0, "%d random byte strings did not round-trip", failures);

    /* Specific ill-formed sequences: overlong, surrogate, truncated, > U+10FFFF. */
    static const char bad[] = "a\xC0\xAF b\xED\xA0\x80 c\xE2\x82 d\xF4\x90\x80\x80 \xFF\xFE";
    size_t n = 0, dl = 0;
    int32_t *ids = encode(tok, bad, sizeof(bad) - 1, true, true, &n);
    CHECK(ids != NULL);
    char *d = ids ? decode(tok, ids, n, CLLM_DETOK_STRIP_PREFIX, &dl) : NULL;
    CHECK(d && dl == sizeof(bad) - 1 && memcmp(d, bad, dl) == 0);
    free(d);
    free(ids);
}

/* ---- over-long input ---- */

static void test_long_input(const cllm_tokenizer *tok) {
    static const char sentence[] = "The quick brown fox jumps over the lazy dog. ";
    size_t len = 1u << 20;
    char *text = malloc(len);
    if (!text) return;
    for (size_t i = 0; i < len; i++) text[i] = sentence[i % (sizeof(sentence) - 1)];

    int32_t ids[100];
    size_t n = 0;
    cllm_status st = cllm_tokenizer_encode(tok, text, len, true, false, ids, 100, &n);
    CHECK(st == CLLM_ERR_TOO_LARGE);
    CHECK(n > 100000);
    CHECK(strstr(cllm_last_error(), "tokens") != NULL);
    int32_t *all = malloc(n * sizeof(int32_t));
    size_t n2 = 0;
    if (all) {
        st = cllm_tokenizer_encode(tok, text, len, true, false, all, n, &n2);
        CHECK(st == CLLM_OK && n2 == n && memcmp(all, ids, sizeof(ids)) == 0);
        free(all);
    }

    /* One long word, and one long run of spaces: single pieces / long merges. */
    for (size_t i = 0; i < 200000; i++) text[i] = (char)('a' + i % 7);
    size_t dl = 0;
    all = encode(tok, text, 200000, false, false, &n);
    char *d = all ? decode(tok, all, n, CLLM_DETOK_STRIP_PREFIX, &dl) : NULL;
    CHECK(d && dl == 200000 && memcmp(d, text, dl) == 0);
    free(d);
    free(all);
    memset(text, ' ', 100000);
    all = encode(tok, text, 100000, false, false, &n);
    d = all ? decode(tok, all, n, CLLM_DETOK_STRIP_PREFIX, &dl) : NULL;
    CHECK(d && dl == 100000 && memcmp(d, text, dl) == 0);
    free(d);
    free(all);
    free(text);

    /* Over the input limit: an error before any work (calloc'ed pages stay
     * untouched). */
    char *huge = calloc(CLLM_TOKENIZER_MAX_TEXT + 1, 1);
    if (huge) {
        n = 7;
        st = cllm_tokenizer_encode(tok, huge, CLLM_TOKENIZER_MAX_TEXT + 1, false, false, ids, 100,
                                   &n);
        CHECK(st == CLLM_ERR_TOO_LARGE && n == 7);
        free(huge);
    }
}

/* ---- pre-tokenizers ---- */

typedef struct split_result {
    const char *text;
    char out[512];
    size_t n;
} split_result;

static cllm_status collect(void *user_data, size_t start, size_t end) {
    split_result *r = user_data;
    size_t len = end - start;
    if (r->n + len + 2 < sizeof(r->out)) {
        memcpy(r->out + r->n, r->text + start, len);
        r->n += len;
        r->out[r->n++] = '|';
        r->out[r->n] = '\0';
    }
    return CLLM_OK;
}

static void check_split(cllm_pretok kind, const char *text, const char *expect) {
    split_result r = {text, {0}, 0};
    cllm_status st = cllm_pretok_split(kind, text, strlen(text), collect, &r);
    CHECKF(st == CLLM_OK && strcmp(r.out, expect) == 0, "pre-tokenizer %d on \"%s\": \"%s\"",
           (int)kind, text, r.out);
}

/* Expected splits made with the Python `regex` module and the patterns in
 * tokenizer.h; '|' ends each piece. */
static void test_pretokenizers(void) {
    const cllm_pretok G = CLLM_PRETOK_GPT2, L = CLLM_PRETOK_LLAMA3, S = CLLM_PRETOK_SMOLLM;
    const cllm_pretok Q = CLLM_PRETOK_QWEN2;
    const char *t1 = "Hello world, I'M here 1234567 x";
    check_split(Q, t1, "Hello| world|,| I|'M| here| |1|2|3|4|5|6|7| x|");
    check_split(L, t1, "Hello| world|,| I|'M| here| |123|456|7| x|");
    check_split(S, t1, "Hello| world|,| I|'|M| here| |1|2|3|4|5|6|7| x|");
    check_split(G, t1, "Hello| world|,| I|'|M| here| 1234567| x|");
    const char *t2 = "it's\r\n\n  \tfoo\n\n\n bar!!\n";
    check_split(L, t2, "it|'s|\r\n\n|  |\tfoo|\n\n\n| bar|!!\n|");
    check_split(S, t2, "it|'s|\r\n\n  |\t|foo|\n\n\n| bar|!!|\n|");
    check_split(G, t2, "it|'s|\r\n\n  |\t|foo|\n\n\n| bar|!!|\n|");
    const char *t3 = "a  3.14 \xC3\xA9\xC2\xBD 12ab"; /* é ½ */
    check_split(L, t3, "a| | |3|.|14| \xC3\xA9|\xC2\xBD| |12|ab|");
    check_split(Q, t3, "a| | |3|.|1|4| \xC3\xA9|\xC2\xBD| |1|2|ab|");
    check_split(S, t3, "a|  |3|.|1|4| \xC3\xA9|\xC2\xBD| |1|2|ab|");
    check_split(G, t3, "a| | 3|.|14| \xC3\xA9|\xC2\xBD| 12|ab|");
    const char *t4 = " ?!\r\nx";
    check_split(L, t4, " ?!\r\n|x|");
    check_split(S, t4, " ?!|\r|\n|x|");
    const char *t5 = "  \xC2\xA0y"; /* NBSP is whitespace */
    check_split(L, t5, "  |\xC2\xA0y|");
    check_split(G, t5, "  |\xC2\xA0|y|");
    /* Invalid bytes are "other" characters. */
    check_split(G, "a\xFF\xFE b\xC3", "a|\xFF\xFE| b|\xC3|");
    check_split(L, "\xFFword", "\xFFword|");

    /* Character classes. */
    CHECK(cllm_unicode_is_letter(0x4E2D) && cllm_unicode_is_letter(0xE9));
    CHECK(!cllm_unicode_is_letter(0x301) && !cllm_unicode_is_letter('1'));
    CHECK(cllm_unicode_is_number(0x663) && cllm_unicode_is_number(0xBD) &&
          cllm_unicode_is_number(0x2167));
    CHECK(cllm_unicode_is_space(0x3000) && cllm_unicode_is_space(0x85) &&
          !cllm_unicode_is_space(0x200B));
    CHECK(cllm_unicode_class(CLLM_UTF8_INVALID_BASE + 0xFF) == 0);
}

static void test_utf8(void) {
    uint32_t cp;
    CHECK(cllm_utf8_decode("\xC3\xA9", 2, &cp) == 2 && cp == 0xE9);
    CHECK(cllm_utf8_decode("\xF0\x9F\xA6\x99", 4, &cp) == 4 && cp == 0x1F999);
    CHECK(cllm_utf8_decode("\xC0\xAF", 2, &cp) == 1 && cp == CLLM_UTF8_INVALID_BASE + 0xC0);
    CHECK(cllm_utf8_decode("\xED\xA0\x80", 3, &cp) == 1);
    CHECK(cllm_utf8_decode("\xF4\x90\x80\x80", 4, &cp) == 1);
    CHECK(cllm_utf8_decode("\xE2\x82", 2, &cp) == 1);
    CHECK(cllm_utf8_valid("h\xC3\xA9", 3) && !cllm_utf8_valid("\xE2\x82", 2));
    char b[4];
    CHECK(cllm_utf8_encode(0x2581, b) == 3 && memcmp(b, "\xE2\x96\x81", 3) == 0);
    CHECK(cllm_utf8_encode(0xD800, b) == 0 && cllm_utf8_encode(0x110000, b) == 0);
}

/* ---- synthetic vocabularies (through the GGUF writer) ---- */

/* GPT-2's byte -> code point map, to spell byte-level tokens. */
static uint32_t byte_cp(int b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return (uint32_t)b;
    int extra = 0;
    for (int c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE)) extra++;
    return 256u + (uint32_t)extra;
}

enum { SYN_N = 262 };

/* A small byte-level BPE vocab: the 256 byte tokens, then "12", "ab",
 * "<|im_end|>" (control), "<tool>" (user-defined), "xyz", "Ġab". */
static cllm_gguf_writer *synthetic_bpe(const char *pre) {
    static char texts[SYN_N][16];
    static const char *ptrs[SYN_N];
    int32_t types[SYN_N];
    for (int b = 0; b < 256; b++) {
        size_t l = cllm_utf8_encode(byte_cp(b), texts[b]);
        texts[b][l] = '\0';
        types[b] = CLLM_TOKEN_TYPE_NORMAL;
    }
    static const char *const extra[] = {"12",
                                        "ab",
                                        "<|im_end|>",
                                        "<tool>",
                                        "xyz",
                                        ("\xC4\xA0"
                                         "ab")};
    for (int k = 0; k < 6; k++) {
        snprintf(texts[256 + k], sizeof(texts[0]), "%s", extra[k]);
        types[256 + k] = CLLM_TOKEN_TYPE_NORMAL;
    }
    types[258] = CLLM_TOKEN_TYPE_CONTROL;
    types[259] = CLLM_TOKEN_TYPE_USER_DEFINED;
    for (int i = 0; i < SYN_N; i++) ptrs[i] = texts[i];
    static const char *const merges[] = {"1 2", "a b", "\xC4\xA0 ab"};

    cllm_gguf_writer *w = cllm_gguf_writer_new();
    if (!w) return NULL;
    cllm_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    if (pre) cllm_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    cllm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", ptrs, SYN_N);
    cllm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CLLM_GGUF_INT32, types, SYN_N);
    cllm_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 3);
    return w;
}

/* A small SPM vocab: <unk> <s> </s>, then "▁", "a", "b", "▁a", "ab", "▁ab". */
static cllm_gguf_writer *synthetic_spm(void) {
    static const char *const texts[] = {"<unk>",
                                        "<s>",
                                        "</s>",
                                        "\xE2\x96\x81",
                                        "a",
                                        "b",
                                        "\xE2\x96\x81"
                                        "a",
                                        "ab",
                                        "\xE2\x96\x81"
                                        "ab"};
    float scores[] = {0, 0, 0, -1, -2, -2, -3, -4, -5};
    int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 1, 1};
    cllm_gguf_writer *w = cllm_gguf_writer_new();
    if (!w) return NULL;
    cllm_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    cllm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", texts, 9);
    cllm_gguf_writer_set_arr(w, "tokenizer.ggml.scores", CLLM_GGUF_FLOAT32, scores, 9);
    cllm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CLLM_GGUF_INT32, types, 9);
    return w;
}

/* Writes w (then frees it), reads the file back and builds a tokenizer. */
static cllm_status build(cllm_gguf_writer *w, cllm_tokenizer **out) {
    if (!w) return CLLM_ERR_NOMEM;
    cllm_status st = cllm_gguf_writer_write(w, TMP_GGUF);
    cllm_gguf_writer_free(w);
    if (st != CLLM_OK) return st;
    cllm_gguf *g = NULL;
    st = cllm_gguf_open(TMP_GGUF, &g);
    remove(TMP_GGUF);
    if (st != CLLM_OK) return st;
    st = cllm_tokenizer_new_from_gguf(g, out);
    cllm_gguf_free(g);
    return st;
}

static void check_ids(const cllm_tokenizer *tok, const char *text, bool parse_special,
                      const int32_t *expect, size_t n_expect) {
    int32_t ids[64];
    size_t n = 0;
    cllm_status st =
        cllm_tokenizer_encode(tok, text, strlen(text), false, parse_special, ids, 64, &n);
    bool same = st == CLLM_OK && n == n_expect && memcmp(ids, expect, n * sizeof(int32_t)) == 0;
    CHECKF(same, "\"%s\": %zu ids [%d %d %d ...], expected %zu", text, n, ids[0], ids[1], ids[2],
           n_expect);
}

static void test_synthetic(void) {
    const int32_t A = (int32_t)'a', B = (int32_t)'b', ONE = (int32_t)'1', TWO = (int32_t)'2';
    const int32_t sp = ' '; /* byte tokens come first, in byte order: id = byte */

    cllm_tokenizer *tok = NULL;
    /* gpt-2: "ab12" -> "ab" "12" merged. */
    cllm_status st = build(synthetic_bpe("gpt-2"), &tok);
    CHECKF(st == CLLM_OK, "%s", cllm_last_error());
    if (st == CLLM_OK) {
        check_ids(tok, "ab12", false, (int32_t[]){257, 256}, 2);
        check_ids(tok, "xyz", false, (int32_t[]){'x', 'y', 'z'}, 3);
        check_ids(tok, "a ab", false, (int32_t[]){A, 261}, 2);
        /* Control only with parse_special; user-defined always. */
        check_ids(tok, "a<|im_end|>", true, (int32_t[]){A, 258}, 2);
        check_ids(tok, "<tool>b", false, (int32_t[]){259, B}, 2);
        CHECK(cllm_tokenizer_is_eog(tok, 258) && cllm_tokenizer_eot(tok) == 258);
        CHECK(cllm_tokenizer_bos(tok) == -1 && !cllm_tokenizer_add_bos(tok));
        int32_t ids[64];
        size_t n = 0;
        CHECK(cllm_tokenizer_encode(tok, "a<|im_end|>", 11, false, false, ids, 64, &n) == CLLM_OK &&
              n == 11);
        size_t len;
        const char *p = cllm_tokenizer_token_to_piece(tok, 259, false, &len);
        CHECK(p && len == 6 && memcmp(p, "<tool>", 6) == 0);
        cllm_tokenizer_free(tok);
        tok = NULL;
    }
    /* smollm: digits one by one even though "1 2" is a merge. */
    st = build(synthetic_bpe("smollm"), &tok);
    CHECKF(st == CLLM_OK, "%s", cllm_last_error());
    if (st == CLLM_OK) {
        CHECK(cllm_tokenizer_pretok(tok) == CLLM_PRETOK_SMOLLM);
        check_ids(tok, "ab12", false, (int32_t[]){257, ONE, TWO}, 3);
        check_ids(tok, " 12 ab", false, (int32_t[]){sp, ONE, TWO, 261}, 4);
        cllm_tokenizer_free(tok);
        tok = NULL;
    }
    /* llama3: a pre-token that is a whole token skips the merges. */
    st = build(synthetic_bpe("llama-bpe"), &tok);
    CHECKF(st == CLLM_OK, "%s", cllm_last_error());
    if (st == CLLM_OK) {
        CHECK(cllm_tokenizer_pretok(tok) == CLLM_PRETOK_LLAMA3);
        check_ids(tok, "xyz", false, (int32_t[]){260}, 1);
        check_ids(tok, "ab12345", false, (int32_t[]){257, 256, '3', '4', '5'}, 5);
        cllm_tokenizer_free(tok);
        tok = NULL;
    }
    /* qwen2: digits one by one ("1 2" is a merge, never reached); unlike
     * llama3 the merges run on a pre-token that is a whole token. */
    st = build(synthetic_bpe("qwen2"), &tok);
    CHECKF(st == CLLM_OK, "%s", cllm_last_error());
    if (st == CLLM_OK) {
        CHECK(cllm_tokenizer_pretok(tok) == CLLM_PRETOK_QWEN2);
        check_ids(tok, "ab12", false, (int32_t[]){257, ONE, TWO}, 3);
        check_ids(tok, "xyz", false, (int32_t[]){'x', 'y', 'z'}, 3);
        cllm_tokenizer_free(tok);
        tok = NULL;
    }
    /* No pre key: GPT-2 with a warning. */
    st = build(synthetic_bpe(NULL), &tok);
    CHECK(st == CLLM_OK && tok && cllm_tokenizer_pretok(tok) == CLLM_PRETOK_GPT2);
    cllm_tokenizer_free(tok);
    tok = NULL;

    /* SPM: score order and the space prefix. */
    st = build(synthetic_spm(), &tok);
    CHECKF(st == CLLM_OK, "%s", cllm_last_error());
    if (st == CLLM_OK) {
        /* "▁ab": pairs "▁a" (-3) and "ab" (-4): "▁a" first, then "▁a"+"b" = "▁ab". */
        check_ids(tok, "ab", false, (int32_t[]){8}, 1);
        check_ids(tok, "ba", false, (int32_t[]){3, 5, 4}, 3);
        /* No byte tokens: an unknown character is <unk>. */
        check_ids(tok, "a\xC3\xA9", false, (int32_t[]){6, 0}, 2);
        CHECK(cllm_tokenizer_bos(tok) == 1 && cllm_tokenizer_eos(tok) == 2 &&
              cllm_tokenizer_unk(tok) == 0 && cllm_tokenizer_add_bos(tok));
        cllm_tokenizer_free(tok);
        tok = NULL;
    }
}

/* ---- malformed metadata ---- */

static void expect_fail(cllm_gguf_writer *w, cllm_status want, const char *what) {
    cllm_tokenizer *tok = (cllm_tokenizer *)&g_rng; /* must stay untouched */
    cllm_status st = build(w, &tok);
    CHECKF(st == want, "%s: status %d (%s), expected %d", what, (int)st, cllm_last_error(),
           (int)want);
    CHECK(tok == (cllm_tokenizer *)&g_rng);
    if (st == CLLM_OK && tok != (cllm_tokenizer *)&g_rng) cllm_tokenizer_free(tok);
}

static void test_malformed(void) {
    cllm_gguf_writer *w;

    w = synthetic_bpe("gpt-2");
    cllm_gguf_writer_set_str(w, "tokenizer.ggml.model", "bert");
    expect_fail(w, CLLM_ERR_UNSUPPORTED, "unknown model");

    expect_fail(synthetic_bpe("qwen2-made-up"), CLLM_ERR_UNSUPPORTED, "unknown pre");

    w = cllm_gguf_writer_new();
    cllm_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    expect_fail(w, CLLM_ERR_FORMAT, "no tokens");

    w = cllm_gguf_writer_new();
    expect_fail(w, CLLM_ERR_FORMAT, "no model");

    w = synthetic_spm();
    float four[4] = {0, 0, 0, 0};
    cllm_gguf_writer_set_arr(w, "tokenizer.ggml.scores", CLLM_GGUF_FLOAT32, four, 4);
    expect_fail(w, CLLM_ERR_FORMAT, "scores length");

    w = synthetic_spm();
    int32_t types[9] = {2, 3, 3, 1, 1, 1, 1, 1, 9};
    cllm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CLLM_GGUF_INT32, types, 9);
    expect_fail(w, CLLM_ERR_FORMAT, "token type 9");

    w = synthetic_spm();
    int32_t tokens_int[9] = {0};
    cllm_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", CLLM_GGUF_INT32, tokens_int, 9);
    expect_fail(w, CLLM_ERR_FORMAT, "tokens not strings");

    w = synthetic_spm();
    float nan_scores[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    nan_scores[4] = NAN;
    cllm_gguf_writer_set_arr(w, "tokenizer.ggml.scores", CLLM_GGUF_FLOAT32, nan_scores, 9);
    expect_fail(w, CLLM_ERR_FORMAT, "NaN score");

    w = synthetic_spm();
    cllm_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 9);
    expect_fail(w, CLLM_ERR_FORMAT, "bos out of range");

    w = synthetic_spm();
    cllm_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 1u << 31);
    expect_fail(w, CLLM_ERR_FORMAT, "eos out of range");

    w = synthetic_spm();
    cllm_gguf_writer_set_str(w, "tokenizer.ggml.bos_token_id", "1");
    expect_fail(w, CLLM_ERR_FORMAT, "bos a string");

    w = synthetic_spm();
    cllm_gguf_writer_set_u32(w, "tokenizer.ggml.add_bos_token", 1);
    expect_fail(w, CLLM_ERR_FORMAT, "add_bos not a bool");

    w = synthetic_spm();
    cllm_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 0xFFFFFFFFu);
    expect_fail(w, CLLM_ERR_FORMAT, "add_bos without bos");

    /* Tolerated: no BOS when none is added; a padding id out of range. */
    cllm_tokenizer *tok = NULL;
    w = synthetic_spm();
    cllm_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 0xFFFFFFFFu);
    cllm_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    cllm_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 1000);
    CHECK(build(w, &tok) == CLLM_OK && tok && cllm_tokenizer_bos(tok) == -1 &&
          cllm_tokenizer_pad(tok) == -1);
    cllm_tokenizer_free(tok);

    static const char *const bad_utf8[] = {"<unk>", "<s>", "</s>", "\xE2\x96", "a",
                                           "b",     "c",   "d",    "e"};
    w = synthetic_spm();
    cllm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", bad_utf8, 9);
    expect_fail(w, CLLM_ERR_FORMAT, "token not UTF-8");

    static const char *const with_nul[] = {"<unk>", "<s>", "</s>", "x\0y", "a", "b", "c", "d", "e"};
    static const size_t lens[] = {5, 3, 4, 3, 1, 1, 1, 1, 1};
    w = synthetic_spm();
    cllm_gguf_writer_set_arr_str_n(w, "tokenizer.ggml.tokens", with_nul, lens, 9);
    expect_fail(w, CLLM_ERR_FORMAT, "token with NUL");

    w = synthetic_bpe("gpt-2");
    static const char *const bad_merges[] = {"1 2", "ab"};
    cllm_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", bad_merges, 2);
    expect_fail(w, CLLM_ERR_FORMAT, "merge without a space");

    w = synthetic_bpe("gpt-2");
    static const char *const bad_merges2[] = {"1 "};
    cllm_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", bad_merges2, 1);
    expect_fail(w, CLLM_ERR_FORMAT, "merge with an empty right part");

    /* gpt2 needs merges. */
    static const char *const few[] = {"a", "b"};
    w = cllm_gguf_writer_new();
    cllm_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    cllm_gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    cllm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", few, 2);
    expect_fail(w, CLLM_ERR_FORMAT, "gpt2 without merges");

    w = cllm_gguf_writer_new();
    cllm_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    cllm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", few, 0);
    expect_fail(w, CLLM_ERR_FORMAT, "zero tokens");
}

/* Expected failures log errors; keep the output to the test's own lines
 * (cllm_last_error() still has the message). */
static void quiet_log(cllm_log_level level, const char *msg, void *user_data) {
    (void)level;
    (void)msg;
    (void)user_data;
}

int main(void) {
    if (!getenv("CLLM_LOG")) cllm_log_set(quiet_log, NULL);
    test_utf8();
    test_pretokenizers();
    test_synthetic();
    test_malformed();
    static const char *const files[] = {"vocab/ggml-vocab-llama-spm.gguf",
                                        "vocab/ggml-vocab-llama-spm.gguf.inp",
                                        "vocab/ggml-vocab-llama-spm.gguf.out",
                                        "vocab/ggml-vocab-gpt-2.gguf",
                                        "vocab/ggml-vocab-gpt-2.gguf.inp",
                                        "vocab/ggml-vocab-gpt-2.gguf.out",
                                        "stories260K.gguf",
                                        "tinyllamas-stories-260k-q8_0.gguf",
                                        "tinyllamas-stories-260k-f32.gguf",
                                        "TinyLLama-v0.Q4_0.gguf",
                                        "llama-2-tiny-random.gguf",
                                        NULL};
    if (!refs_have(files)) return check_summary("test_tokenizer");
    test_fixture(NULL, "ggml-vocab-llama-spm.gguf", CLLM_DETOK_STRIP_PREFIX);
    test_fixture(NULL, "ggml-vocab-gpt-2.gguf", 0);
    /* Qwen2, Llama 3 and Phi-3: fetched by scripts/fetch-vocab */
    char dir[4096];
    if (refs_fetch_vocab(dir, sizeof(dir))) {
        test_fixture(dir, "ggml-vocab-qwen2.gguf", 0);
        test_fixture(dir, "ggml-vocab-llama-bpe.gguf", 0);
        test_fixture(dir, "ggml-vocab-phi-3.gguf", CLLM_DETOK_STRIP_PREFIX);
        test_llama_cpp_prompts(dir);
    }
    test_reference_prompts();

    cllm_tokenizer *spm = load_tokenizer("vocab/ggml-vocab-llama-spm.gguf");
    cllm_tokenizer *bpe = load_tokenizer("vocab/ggml-vocab-gpt-2.gguf");
    if (spm) test_spm_api(spm);
    if (bpe) test_bpe_api(bpe);
    test_detokenizer(spm, bpe);
    if (spm) test_random_bytes(spm, true);
    if (bpe) test_random_bytes(bpe, false);
    if (spm) test_long_input(spm);
    if (bpe) test_long_input(bpe);
    cllm_tokenizer_free(spm);
    cllm_tokenizer_free(bpe);
    cllm_tokenizer_free(NULL);
    return check_summary("test_tokenizer");
}
