/*
 * Input validation on crafted model files: each file is a tiny llama model
 * written with the GGUF writer and changed in one way. A file is either
 * refused with a message that names the real cause, or accepted (with a
 * warning where the README's "Input validation" says so) and then runs.
 * No model file is read.
 */
#include "common/check.h"
#include "runtime/fit.h"
#include "runtime/session.h"
#include "text/tokenizer.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_path[1100]; /* the file the tests write */

/* ---- the log: warnings kept for the checks ---- */

static char g_warnings[4096];

static void capture(cllm_log_level level, const char *msg, void *ud) {
    (void)ud;
    if (level != CLLM_LOG_WARN) return;
    const size_t n = strlen(g_warnings);
    snprintf(g_warnings + n, sizeof(g_warnings) - n, "%s\n", msg);
}

/* ---- a tiny llama model ---- */

typedef struct tiny {
    int64_t n_embd, n_head, n_ff;
    int64_t block_count; /* the key */
    int n_blocks;        /* layers whose tensors are written */
    int64_t embd_rows;   /* rows of token_embd.weight (0: the vocabulary) */
    int n_tokens;        /* tokens of tokenizer.ggml.tokens */
} tiny;

static const tiny k_tiny = {
    .n_embd = 8, .n_head = 2, .n_ff = 16, .block_count = 2, .n_blocks = 2, .n_tokens = 9};

/* Token texts: <unk> <s> </s>, then "▁", "a", "b", "▁a", ... */
static const char *const k_texts[] = {"<unk>",
                                      "<s>",
                                      "</s>",
                                      "\xE2\x96\x81",
                                      "a",
                                      "b",
                                      ("\xE2\x96\x81"
                                       "a"),
                                      "ab",
                                      "ba",
                                      "c",
                                      "d",
                                      "e"};

static void set_tokens(cllm_gguf_writer *w, const char *const *texts, int n) {
    float scores[16];
    int32_t types[16];
    for (int i = 0; i < n; i++) {
        scores[i] = -(float)i;
        types[i] = i == 0  ? CLLM_TOKEN_TYPE_UNKNOWN
                   : i < 3 ? CLLM_TOKEN_TYPE_CONTROL
                           : CLLM_TOKEN_TYPE_NORMAL;
    }
    cllm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", texts, (uint64_t)n);
    cllm_gguf_writer_set_arr(w, "tokenizer.ggml.scores", CLLM_GGUF_FLOAT32, scores, (uint64_t)n);
    cllm_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", CLLM_GGUF_INT32, types, (uint64_t)n);
}

static void add(cllm_gguf_writer *w, const char *name, int64_t ne0, int64_t ne1) {
    const int64_t ne[2] = {ne0, ne1};
    cllm_status st = cllm_gguf_writer_add_tensor(w, name, CLLM_TYPE_F32, ne1 > 1 ? 2 : 1, ne, NULL);
    CHECKF(st == CLLM_OK, "%s: %s", name, cllm_last_error());
}

/* A writer holding the model `t` (weights zero); the caller changes keys. */
static cllm_gguf_writer *tiny_writer(const tiny *t) {
    cllm_gguf_writer *w = cllm_gguf_writer_new();
    CHECK(w != NULL);
    if (!w) return NULL;
    const int64_t E = t->n_embd, F = t->n_ff;
    cllm_gguf_writer_set_str(w, "general.architecture", "llama");
    cllm_gguf_writer_set_u32(w, "llama.context_length", 32);
    cllm_gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)E);
    cllm_gguf_writer_set_u32(w, "llama.block_count", (uint32_t)t->block_count);
    cllm_gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)F);
    cllm_gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)t->n_head);
    cllm_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    cllm_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    if (t->n_tokens > 0) set_tokens(w, k_texts, t->n_tokens);
    add(w, "token_embd.weight", E, t->embd_rows ? t->embd_rows : t->n_tokens);
    add(w, "output_norm.weight", E, 1);
    for (int l = 0; l < t->n_blocks; l++) {
        static const char *const names[] = {"attn_q", "attn_k", "attn_v", "attn_output"};
        char name[64];
        snprintf(name, sizeof(name), "blk.%d.attn_norm.weight", l);
        add(w, name, E, 1);
        for (int k = 0; k < 4; k++) {
            snprintf(name, sizeof(name), "blk.%d.%s.weight", l, names[k]);
            add(w, name, E, E);
        }
        snprintf(name, sizeof(name), "blk.%d.ffn_norm.weight", l);
        add(w, name, E, 1);
        snprintf(name, sizeof(name), "blk.%d.ffn_gate.weight", l);
        add(w, name, E, F);
        snprintf(name, sizeof(name), "blk.%d.ffn_up.weight", l);
        add(w, name, E, F);
        snprintf(name, sizeof(name), "blk.%d.ffn_down.weight", l);
        add(w, name, F, E);
    }
    return w;
}

/* Writes w to g_path and frees it. */
static bool write_file(cllm_gguf_writer *w) {
    if (!w) return false;
    const cllm_status st = cllm_gguf_writer_write(w, g_path);
    CHECKF(st == CLLM_OK, "write: %s", cllm_last_error());
    cllm_gguf_writer_free(w);
    return st == CLLM_OK;
}

/* Loads g_path (mapped or read); on success the model is kept in *out if
 * out is not NULL, else freed. The warnings logged meanwhile are in
 * g_warnings. */
static cllm_status load(bool mmap, cllm_model **out) {
    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = mmap;
    mp.progress = false;
    cllm_model *m = NULL;
    g_warnings[0] = '\0';
    const cllm_status st = cllm_model_load(g_path, &mp, &m);
    if (out) {
        *out = m;
    } else {
        cllm_model_free(m);
    }
    return st;
}

/* Refused with `want`, and the message holds each of the NULL-ended
 * `needles` and not `wrong` (if not NULL). */
static void expect_refused(const char *what, cllm_status want, const char *wrong,
                           const char *const *needles) {
    const cllm_status st = load(true, NULL);
    const char *msg = cllm_last_error();
    CHECKF(st == want, "%s: status %d, want %d (%s)", what, (int)st, (int)want,
           st == CLLM_OK ? "loaded" : msg);
    if (st == CLLM_OK) return;
    for (int i = 0; needles[i]; i++) {
        CHECKF(strstr(msg, needles[i]) != NULL, "%s: \"%s\" lacks \"%s\"", what, msg, needles[i]);
    }
    if (wrong) CHECKF(strstr(msg, wrong) == NULL, "%s: \"%s\" names \"%s\"", what, msg, wrong);
}

#define NEEDLES(...) ((const char *const[]){__VA_ARGS__, NULL})

/* A session of 16 positions decodes a few tokens. */
static bool runs(cllm_model *m) {
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 16;
    sp.n_threads = 1;
    cllm_session *s = NULL;
    bool ok = cllm_session_new(m, &sp, &s) == CLLM_OK;
    const int32_t ids[] = {1, 4, 5, 3};
    ok = ok && cllm_session_decode(s, ids, 4) == CLLM_OK && cllm_session_logits(s) != NULL;
    cllm_session_free(s);
    return ok;
}

/* ---- 1: tensor data not aligned for its type ---- */

/* Writes the tiny model with general.alignment `align`, a key of filler
 * chosen so that the data starts off a multiple of 4; returns false if no
 * filler does it. */
static bool write_misaligned(uint32_t align) {
    for (size_t fill = 0; fill < 8; fill++) {
        cllm_gguf_writer *w = tiny_writer(&k_tiny);
        if (!w) return false;
        cllm_gguf_writer_set_u32(w, "general.alignment", align);
        char filler[16] = "";
        memset(filler, 'x', fill);
        cllm_gguf_writer_set_str(w, "filler", filler);
        if (!write_file(w)) return false;
        cllm_gguf *g = NULL;
        if (cllm_gguf_open(g_path, &g) != CLLM_OK) return false;
        const uint64_t data = cllm_gguf_data_offset(g);
        cllm_gguf_free(g);
        if (data % 4 != 0) return true;
    }
    return false;
}

static void test_alignment(void) {
    for (uint32_t align = 1; align <= 2; align++) {
        char what[64];
        snprintf(what, sizeof(what), "general.alignment %u", align);
        CHECKF(write_misaligned(align), "%s: no misaligned file", what);
        /* refused whether the weights would be mapped or read, and by the
         * planner, which shares the weights with the load */
        cllm_model *m = NULL;
        if (load(true, &m) == CLLM_OK) {
            /* the unfixed case: under UBSan the run reports the read */
            CHECKF(false, "%s: loaded", what);
            runs(m);
            cllm_model_free(m);
        }
        expect_refused(what, CLLM_ERR_FORMAT, NULL,
                       NEEDLES("token_embd.weight", "not a multiple of the 4 bytes type f32 needs",
                               "general.alignment is"));
        CHECK(load(false, NULL) == CLLM_ERR_FORMAT);
        cllm_plan_params pp = cllm_plan_default_params();
        cllm_plan *plan = NULL;
        CHECK(cllm_plan_file(g_path, &pp, &plan) == CLLM_ERR_FORMAT && plan == NULL);
        CHECK(strstr(cllm_last_error(), "type f32 needs") != NULL);
    }
    /* alignment 4 suits f32: mapped as it is, and it runs (under UBSan:
     * without a misaligned read) */
    cllm_gguf_writer *w = tiny_writer(&k_tiny);
    if (w) cllm_gguf_writer_set_u32(w, "general.alignment", 4);
    if (!write_file(w)) return;
    cllm_model *m = NULL;
    const cllm_status st = load(true, &m);
    CHECKF(st == CLLM_OK, "alignment 4: %s", cllm_last_error());
    if (st == CLLM_OK) CHECK(runs(m));
    cllm_model_free(m);
}

/* ---- 2: a FIFO as the model ---- */

static void test_fifo(void) {
    char fifo[1200];
    snprintf(fifo, sizeof(fifo), "%s.fifo", g_path);
    unlink(fifo);
    if (mkfifo(fifo, 0600) != 0) {
        CHECKF(false, "mkfifo %s failed", fifo);
        return;
    }
    /* a hang is a failure: SIGALRM ends the test */
    alarm(30);
    cllm_gguf *g = (cllm_gguf *)&g;
    CHECK(cllm_gguf_open(fifo, &g) == CLLM_ERR_IO && g == (cllm_gguf *)&g);
    CHECKF(strstr(cllm_last_error(), "a FIFO, not a regular file") != NULL, "%s",
           cllm_last_error());
    cllm_model *m = (cllm_model *)&m;
    CHECK(cllm_model_load(fifo, NULL, &m) == CLLM_ERR_IO && m == (cllm_model *)&m);
    cllm_plan_params pp = cllm_plan_default_params();
    cllm_plan *plan = NULL;
    CHECK(cllm_plan_file(fifo, &pp, &plan) == CLLM_ERR_IO && plan == NULL);
    CHECK(strstr(cllm_last_error(), "not a regular file") != NULL);
    alarm(0);
    unlink(fifo);
}

/* ---- 6: messages that name the real cause ---- */

/* Rope scaling: an unknown type or a negative factor is refused by name; a
 * linear factor with no type (llama.cpp's default type) and YaRN run. */
static void test_rope_scaling(void) {
    cllm_gguf_writer *w = tiny_writer(&k_tiny);
    if (w) cllm_gguf_writer_set_str(w, "llama.rope.scaling.type", "dynamic");
    if (write_file(w)) {
        expect_refused("rope dynamic", CLLM_ERR_UNSUPPORTED, NULL,
                       NEEDLES("llama.rope.scaling.type \"dynamic\" is not supported",
                               "none, linear, yarn, longrope"));
    }
    w = tiny_writer(&k_tiny);
    if (w) cllm_gguf_writer_set_f32(w, "llama.rope.scaling.factor", -2.0f);
    if (write_file(w)) {
        expect_refused("rope factor -2", CLLM_ERR_FORMAT, NULL,
                       NEEDLES("llama.rope.scaling.factor (-2)"));
    }
    /* an architecture cllm does not have: the message lists those it has */
    w = tiny_writer(&k_tiny);
    if (w) cllm_gguf_writer_set_str(w, "general.architecture", "mamba");
    if (write_file(w)) {
        expect_refused("arch mamba", CLLM_ERR_UNSUPPORTED, NULL,
                       NEEDLES("architecture \"mamba\" is not supported (supported: llama",
                               "qwen2, qwen3, phi3"));
    }
    static const char *const types[] = {NULL, "yarn", "longrope", "none"};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        w = tiny_writer(&k_tiny);
        if (w && types[i]) cllm_gguf_writer_set_str(w, "llama.rope.scaling.type", types[i]);
        if (w) cllm_gguf_writer_set_f32(w, "llama.rope.scaling.factor", 4.0f);
        cllm_model *m = NULL;
        if (write_file(w) && load(true, &m) == CLLM_OK) {
            const float want = types[i] && !strcmp(types[i], "none") ? 1.0f : 0.25f;
            CHECKF(m->hp.rope_freq_scale == want && runs(m), "rope %s: freq scale %g",
                   types[i] ? types[i] : "(no type)", (double)m->hp.rope_freq_scale);
            CHECK((m->hp.rope_yarn.ext_factor != 0.0f) == (types[i] && !strcmp(types[i], "yarn")));
        } else {
            CHECKF(false, "rope %s: %s", types[i] ? types[i] : "(no type)", cllm_last_error());
        }
        cllm_model_free(m);
    }
}

static void test_messages(void) {
    /* a head size that n_embd / n_head does not give */
    tiny t = k_tiny;
    t.n_embd = 63;
    t.n_head = 8;
    if (write_file(tiny_writer(&t))) {
        expect_refused("n_embd 63, 8 heads", CLLM_ERR_FORMAT, "rope",
                       NEEDLES("llama.embedding_length 63 is not a multiple of "
                               "llama.attention.head_count 8"));
    }
    /* with the head size given, n_embd need not be a multiple of it */
    cllm_gguf_writer *w = tiny_writer(&t);
    if (w) cllm_gguf_writer_set_u32(w, "llama.attention.key_length", 8);
    if (write_file(w)) {
        expect_refused("n_embd 63, 8 heads of 8", CLLM_ERR_FORMAT, "embedding_length",
                       NEEDLES("attn_q.weight has shape"));
    }

    /* the token list: missing, empty, of another type */
    t = k_tiny;
    t.n_tokens = 0;
    t.embd_rows = 9;
    if (write_file(tiny_writer(&t))) {
        expect_refused("no tokens", CLLM_ERR_FORMAT, "missing key",
                       NEEDLES("neither tokenizer.ggml.tokens nor llama.vocab_size is set"));
    }
    w = tiny_writer(&t);
    if (w) cllm_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", k_texts, 0);
    if (write_file(w)) {
        expect_refused("empty tokens", CLLM_ERR_FORMAT, "vocab_size",
                       NEEDLES("tokenizer.ggml.tokens holds 0 tokens"));
    }
    w = tiny_writer(&t);
    const int32_t ints[9] = {0};
    if (w) cllm_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", CLLM_GGUF_INT32, ints, 9);
    if (write_file(w)) {
        expect_refused("int tokens", CLLM_ERR_FORMAT, "vocab_size",
                       NEEDLES("tokenizer.ggml.tokens is an array of int32"));
    }
    w = tiny_writer(&t);
    if (w) cllm_gguf_writer_set_u32(w, "tokenizer.ggml.tokens", 9);
    if (write_file(w)) {
        expect_refused("scalar tokens", CLLM_ERR_FORMAT, "vocab_size",
                       NEEDLES("tokenizer.ggml.tokens has type uint32"));
    }
    /* a bare weights file: the size from <arch>.vocab_size */
    w = tiny_writer(&t);
    if (w) cllm_gguf_writer_set_u32(w, "llama.vocab_size", 9);
    if (write_file(w)) {
        expect_refused("bare weights", CLLM_ERR_FORMAT, NULL,
                       NEEDLES("tokenizer.ggml.tokens: missing")); /* tokenizer.ggml.model is set */
    }

    /* fewer (or more) tokens than token_embd has rows */
    t = k_tiny;
    t.n_tokens = 8;
    t.embd_rows = 9;
    if (write_file(tiny_writer(&t))) {
        expect_refused("8 tokens, 9 rows", CLLM_ERR_FORMAT, "has shape",
                       NEEDLES("the vocabulary has 8 tokens (tokenizer.ggml.tokens) but "
                               "token_embd.weight has 9 rows"));
    }
    t.n_tokens = 10;
    if (write_file(tiny_writer(&t))) {
        expect_refused("10 tokens, 9 rows", CLLM_ERR_FORMAT, "has shape",
                       NEEDLES("the vocabulary has 10 tokens"));
    }

    /* one token: no BOS to add by default, and no add_bos_token key */
    t = k_tiny;
    t.n_tokens = 1;
    if (write_file(tiny_writer(&t))) {
        expect_refused("one token", CLLM_ERR_FORMAT, "add_bos_token is true",
                       NEEDLES("no BOS token to add",
                               "tokenizer.ggml.bos_token_id is not set and the default id 1 is "
                               "outside the vocabulary of 1 token"));
    }
    w = tiny_writer(&t);
    if (w) cllm_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    if (write_file(w)) {
        cllm_model *m = NULL;
        CHECKF(load(true, &m) == CLLM_OK, "one token, no BOS added: %s", cllm_last_error());
        if (m) CHECK(cllm_tokenizer_n_vocab(m->tok) == 1 && cllm_tokenizer_bos(m->tok) == -1);
        cllm_model_free(m);
    }
    w = tiny_writer(&k_tiny);
    if (w) cllm_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    if (w) cllm_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 0xFFFFFFFFu);
    if (write_file(w)) {
        expect_refused("add_bos_token true, bos none", CLLM_ERR_FORMAT, NULL,
                       NEEDLES("tokenizer.ggml.add_bos_token is true",
                               "tokenizer.ggml.bos_token_id is 4294967295 (no such token)"));
    }
}

/* ---- 9: accepted but questionable ---- */

static void test_questionable(void) {
    /* repeated token texts: accepted with a warning; encoding gives the last
     * id of a text, every id decodes to its own text */
    static const char *const dup[] = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b",
                                      "a",     "c",   "b"};
    cllm_gguf_writer *w = tiny_writer(&k_tiny);
    if (w) set_tokens(w, dup, 9);
    cllm_model *m = NULL;
    if (write_file(w) && load(true, &m) == CLLM_OK && m) {
        CHECKF(strstr(g_warnings, "tokenizer.ggml.tokens: 2 tokens repeat the text of an earlier "
                                  "one (the first: id 6 repeats id 4)") != NULL,
               "warnings: %s", g_warnings);
        for (int rep = 0; rep < 2; rep++) { /* deterministic */
            int32_t ids[8];
            size_t n = 0;
            CHECK(cllm_tokenizer_encode(m->tok, "ab", 2, false, false, ids, 8, &n) == CLLM_OK);
            CHECKF(n == 3 && ids[0] == 3 && ids[1] == 6 && ids[2] == 8, "%zu ids: %d %d %d", n,
                   ids[0], ids[1], ids[2]);
        }
        size_t len = 0;
        const char *p4 = cllm_tokenizer_token_to_piece(m->tok, 4, false, &len);
        CHECK(p4 && len == 1 && p4[0] == 'a');
        const char *p6 = cllm_tokenizer_token_to_piece(m->tok, 6, false, &len);
        CHECK(p6 && len == 1 && p6[0] == 'a');
        CHECK(runs(m));
    } else {
        CHECKF(false, "repeated tokens refused: %s", cllm_last_error());
    }
    cllm_model_free(m);
    m = NULL;

    /* negative EOS and UNK ids: no such token, with a warning */
    w = tiny_writer(&k_tiny);
    if (w) cllm_gguf_writer_set_i32(w, "tokenizer.ggml.eos_token_id", -1);
    if (w) cllm_gguf_writer_set_i32(w, "tokenizer.ggml.unknown_token_id", -7);
    if (write_file(w) && load(true, &m) == CLLM_OK && m) {
        CHECK(cllm_tokenizer_eos(m->tok) == -1 && cllm_tokenizer_unk(m->tok) == -1);
        CHECK(cllm_tokenizer_bos(m->tok) == 1);
        CHECKF(strstr(g_warnings, "tokenizer.ggml.eos_token_id: token id -1 is negative") &&
                   strstr(g_warnings, "tokenizer.ggml.unknown_token_id: token id -7 is negative"),
               "warnings: %s", g_warnings);
        CHECK(runs(m));
    } else {
        CHECKF(false, "negative ids refused: %s", cllm_last_error());
    }
    cllm_model_free(m);
    m = NULL;
    /* ... but a BOS that is to be added must exist */
    w = tiny_writer(&k_tiny);
    if (w) cllm_gguf_writer_set_i32(w, "tokenizer.ggml.bos_token_id", -1);
    if (write_file(w)) {
        expect_refused("negative BOS", CLLM_ERR_FORMAT, NULL,
                       NEEDLES("no BOS token to add", "tokenizer.ggml.bos_token_id is -1"));
    }
    /* 0xFFFFFFFF is how uint32 keys say "none": no warning */
    w = tiny_writer(&k_tiny);
    if (w) cllm_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);
    if (write_file(w) && load(true, &m) == CLLM_OK && m) {
        CHECK(cllm_tokenizer_pad(m->tok) == -1 && g_warnings[0] == '\0');
    } else {
        CHECKF(false, "padding id none refused: %s", cllm_last_error());
    }
    cllm_model_free(m);
    m = NULL;

    /* block_count smaller than the layers present: refused, naming the
     * first tensor of a layer past it */
    tiny t = k_tiny;
    t.block_count = 1;
    if (write_file(tiny_writer(&t))) {
        expect_refused("block_count 1, 2 layers", CLLM_ERR_FORMAT, NULL,
                       NEEDLES("tensor blk.1.attn_norm.weight belongs to layer 1, but "
                               "llama.block_count is 1"));
    }
    /* larger: the missing tensor is named */
    t.block_count = 3;
    if (write_file(tiny_writer(&t))) {
        expect_refused("block_count 3, 2 layers", CLLM_ERR_FORMAT, NULL,
                       NEEDLES("missing tensor blk.2.attn_norm.weight"));
    }
    /* a tensor the architecture does not use: a warning */
    w = tiny_writer(&k_tiny);
    if (w) add(w, "extra.weight", 4, 1);
    if (w) add(w, "blk.0.extra.weight", 4, 1);
    if (write_file(w) && load(true, &m) == CLLM_OK && m) {
        CHECKF(strstr(g_warnings, "2 tensors of the file are not used by the llama model (the "
                                  "first: extra.weight)") != NULL,
               "warnings: %s", g_warnings);
        CHECK(runs(m));
    } else {
        CHECKF(false, "unused tensors refused: %s", cllm_last_error());
    }
    cllm_model_free(m);
    m = NULL;

    /* the unchanged model loads without a warning and runs */
    if (write_file(tiny_writer(&k_tiny)) && load(true, &m) == CLLM_OK && m) {
        CHECKF(g_warnings[0] == '\0', "warnings: %s", g_warnings);
        CHECK(runs(m));
    } else {
        CHECKF(false, "the tiny model: %s", cllm_last_error());
    }
    cllm_model_free(m);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(g_path, sizeof(g_path), "%s/cllm-test-validate-%d.gguf", tmp && tmp[0] ? tmp : "/tmp",
             (int)getpid());
    cllm_log_set(capture, NULL);
    test_alignment();
    test_fifo();
    test_messages();
    test_rope_scaling();
    test_questionable();
    cllm_log_set(NULL, NULL);
    unlink(g_path);
    return check_summary("test_validate");
}
