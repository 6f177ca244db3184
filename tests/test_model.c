/*
 * End to end on the real models of tests/data/models: greedy tokens equal the
 * stored reference outputs, first-step logits agree, memory planned equals
 * memory allocated per kind, sessions share a model, a full context is an
 * error that corrupts nothing, bad files are errors.
 */
#include "backend/cpu/cpu.h"
#include "common/check.h"
#include "common/refs.h"
#include "runtime/session.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

static char *g_json;

static void quiet(cllm_log_level level, const char *msg, void *ud) {
    (void)level, (void)msg, (void)ud;
}

static int32_t argmax(const float *x, int64_t n) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++) {
        if (x[i] > x[best]) best = (int32_t)i;
    }
    return best;
}

/* Decodes the prompt, then n greedy tokens into out. */
static cllm_status greedy(cllm_session *s, const int32_t *prompt, int n_prompt, int32_t *out,
                          int n) {
    CLLM_TRY(cllm_session_decode(s, prompt, n_prompt));
    for (int i = 0; i < n; i++) {
        out[i] = argmax(cllm_session_logits(s), cllm_session_n_vocab(s));
        if (i + 1 < n) CLLM_TRY(cllm_session_decode(s, &out[i], 1));
    }
    return CLLM_OK;
}

typedef struct run_opts {
    bool mmap;
    bool f32_act;
    bool unfused;
    cllm_type kv_type;
    int64_t n_batch;
    int n_threads;
    float logit_tol;
} run_opts;

static void check_memory(const cllm_session *s, const char *what) {
    const cllm_memory_report r = cllm_session_memory(s);
    for (int k = 0; k < CLLM_MEM_COUNT; k++) {
        CHECKF(r.planned[k] == r.allocated[k], "%s: %s planned %zu, allocated %zu", what,
               cllm_mem_kind_str(k), r.planned[k], r.allocated[k]);
    }
    CHECKF(r.planned[CLLM_MEM_COMPUTE] > 0 && r.planned[CLLM_MEM_STATE] > 0, "%s: empty plan",
           what);
}

static void check_model(const char *file, run_opts o) {
    char path[4096], what[256];
    snprintf(what, sizeof(what),
             "%s (mmap %d, f32 act %d, unfused %d, kv %s, batch %lld, threads %d)", file, o.mmap,
             o.f32_act, o.unfused, cllm_type_name(o.kv_type), (long long)o.n_batch, o.n_threads);
    int32_t prompt[16], want[64], got[64], top_ids[5];
    float top_logits[5];
    const int n_prompt = refs_int_array(g_json, file, "prompt_ids", prompt, 16);
    const int n_want = refs_int_array(g_json, file, "greedy_32_ids", want, 64);
    const int n_top = refs_top5(g_json, file, top_ids, top_logits, 5);
    CHECKF(n_prompt > 0 && n_want == 32 && n_top == 5, "%s: reference entries", what);
    if (n_prompt <= 0 || n_want != 32 || n_top != 5) return;

    cllm_device *cpu = cllm_cpu_device();
    size_t before[CLLM_MEM_COUNT];
    for (int k = 0; k < CLLM_MEM_COUNT; k++) before[k] = cllm_device_allocated(cpu, k);

    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = o.mmap;
    cllm_model *m = NULL;
    cllm_status st = cllm_model_load(refs_model_path(path, sizeof(path), file), &mp, &m);
    CHECKF(st == CLLM_OK, "%s: load: %s", what, cllm_last_error());
    if (st != CLLM_OK) return;

    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 128;
    sp.n_batch = o.n_batch;
    sp.type_k = sp.type_v = o.kv_type;
    sp.unfused_attn = o.unfused;
    sp.n_threads = o.n_threads;
    sp.f32_activations = o.f32_act;
    cllm_session *s = NULL;
    st = cllm_session_new(m, &sp, &s);
    CHECKF(st == CLLM_OK, "%s: session: %s", what, cllm_last_error());
    if (st == CLLM_OK) {
        check_memory(s, what);
        /* the device counted exactly the planned bytes, nothing else */
        const cllm_memory_report r = cllm_session_memory(s);
        for (int k = 0; k < CLLM_MEM_COUNT; k++) {
            const size_t delta = cllm_device_allocated(cpu, k) - before[k];
            CHECKF(delta == r.planned[k], "%s: device counted %zu %s bytes, planned %zu", what,
                   delta, cllm_mem_kind_str(k), r.planned[k]);
        }

        st = cllm_session_decode(s, prompt, n_prompt);
        CHECKF(st == CLLM_OK, "%s: decode: %s", what, cllm_last_error());
        const float *logits = cllm_session_logits(s);
        if (st == CLLM_OK && logits) {
            float max_diff = 0;
            for (int i = 0; i < 5; i++) {
                const float d = fabsf(logits[top_ids[i]] - top_logits[i]);
                max_diff = d > max_diff ? d : max_diff;
            }
            CHECKF(max_diff <= o.logit_tol, "%s: first-step logits differ by %g", what,
                   (double)max_diff);
        }
        cllm_session_reset(s);
        st = greedy(s, prompt, n_prompt, got, 32);
        CHECKF(st == CLLM_OK, "%s: generate: %s", what, cllm_last_error());
        int first_diff = -1;
        for (int i = 0; i < 32 && first_diff < 0; i++) {
            if (got[i] != want[i]) first_diff = i;
        }
        CHECKF(first_diff < 0, "%s: greedy token %d is %d, reference %d", what, first_diff,
               first_diff >= 0 ? got[first_diff] : 0, first_diff >= 0 ? want[first_diff] : 0);
        cllm_session_free(s);
    }
    cllm_model_free(m);
    for (int k = 0; k < CLLM_MEM_COUNT; k++) {
        CHECKF(cllm_device_allocated(cpu, k) == before[k], "%s: %s bytes leaked", what,
               cllm_mem_kind_str(k));
    }
}

/* Q4_0 with Q8_0 activations: first-step top-5 logits near the float
 * reference (activation quantization moves them by a few hundredths). */
static void check_q8_activations(const char *file) {
    char path[4096];
    int32_t prompt[16], top_ids[5];
    float top_logits[5];
    const int n_prompt = refs_int_array(g_json, file, "prompt_ids", prompt, 16);
    CHECK(refs_top5(g_json, file, top_ids, top_logits, 5) == 5 && n_prompt > 0);
    cllm_model *m = NULL;
    if (cllm_model_load(refs_model_path(path, sizeof(path), file), NULL, &m) != CLLM_OK) {
        CHECKF(false, "load: %s", cllm_last_error());
        return;
    }
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 64;
    cllm_session *s = NULL;
    CHECK(cllm_session_new(m, &sp, &s) == CLLM_OK);
    if (s && cllm_session_decode(s, prompt, n_prompt) == CLLM_OK) {
        const float *logits = cllm_session_logits(s);
        float max_diff = 0;
        for (int i = 0; i < 5; i++)
            max_diff = fmaxf(max_diff, fabsf(logits[top_ids[i]] - top_logits[i]));
        CHECKF(max_diff < 0.15f, "%s with q8_0 activations: top-5 logits differ by %g", file,
               (double)max_diff);
        CHECK(argmax(logits, cllm_session_n_vocab(s)) == top_ids[0]);
    }
    cllm_session_free(s);
    cllm_model_free(m);
}

/* Loading a good file and starting a session logs nothing at warning level
 * or above: an optional key the file lacks (split.count, ...) is not an
 * error a library user should see on stderr. */
static int g_loud;
static void count_loud(cllm_log_level level, const char *msg, void *ud) {
    (void)msg, (void)ud;
    if (level >= CLLM_LOG_WARN) g_loud++;
}

static void test_quiet_load(const char *file) {
    char path[4096];
    cllm_model *m = NULL;
    cllm_session *s = NULL;
    g_loud = 0;
    cllm_log_set(count_loud, NULL);
    const cllm_status st = cllm_model_load(refs_model_path(path, sizeof(path), file), NULL, &m);
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 64;
    const cllm_status ss = st == CLLM_OK ? cllm_session_new(m, &sp, &s) : st;
    const int loud = g_loud;
    cllm_log_set(quiet, NULL);
    CHECKF(st == CLLM_OK && ss == CLLM_OK, "%s: %s", file, cllm_last_error());
    CHECKF(loud == 0, "%s: %d warning or error messages while loading", file, loud);
    cllm_session_free(s);
    cllm_model_free(m);
}

/* Two sessions on one model, interleaved, give the same tokens as one alone. */
static void test_shared_model(void) {
    char path[4096];
    cllm_model *m = NULL;
    if (cllm_model_load(refs_model_path(path, sizeof(path), "stories260K.gguf"), NULL, &m) !=
        CLLM_OK) {
        CHECKF(false, "load: %s", cllm_last_error());
        return;
    }
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 64;
    cllm_session *a = NULL, *b = NULL;
    CHECK(cllm_session_new(m, &sp, &a) == CLLM_OK);
    CHECK(cllm_session_new(m, &sp, &b) == CLLM_OK);
    if (a && b) {
        const int32_t pa[] = {1, 403, 407, 261, 378}, pb[] = {1, 403};
        int32_t ta = 0, tb = 0, seq_a[8], seq_b[8];
        CHECK(cllm_session_decode(a, pa, 5) == CLLM_OK);
        CHECK(cllm_session_decode(b, pb, 2) == CLLM_OK);
        for (int i = 0; i < 8; i++) {
            seq_a[i] = ta = argmax(cllm_session_logits(a), cllm_session_n_vocab(a));
            seq_b[i] = tb = argmax(cllm_session_logits(b), cllm_session_n_vocab(b));
            CHECK(cllm_session_decode(a, &ta, 1) == CLLM_OK);
            CHECK(cllm_session_decode(b, &tb, 1) == CLLM_OK);
        }
        /* b alone, from scratch, gives the same */
        cllm_session_reset(b);
        int32_t alone[8];
        CHECK(greedy(b, pa, 5, alone, 8) == CLLM_OK);
        CHECK(memcmp(alone, seq_a, sizeof(alone)) == 0);
        int32_t want[32];
        refs_int_array(g_json, "stories260K.gguf", "greedy_32_ids", want, 32);
        CHECK(memcmp(seq_a, want, sizeof(seq_a)) == 0);
        (void)seq_b;
    }
    cllm_session_free(a);
    cllm_session_free(b);
    cllm_model_free(m);
}

/* A full context is an error; the session keeps working afterwards. */
static void test_context_full(void) {
    char path[4096];
    cllm_model *m = NULL;
    if (cllm_model_load(refs_model_path(path, sizeof(path), "stories260K.gguf"), NULL, &m) !=
        CLLM_OK) {
        CHECKF(false, "load: %s", cllm_last_error());
        return;
    }
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 8;
    sp.n_batch = 4;
    cllm_session *s = NULL;
    CHECK(cllm_session_new(m, &sp, &s) == CLLM_OK);
    if (s) {
        const int32_t p[] = {1, 403, 407, 261, 378};
        CHECK(cllm_session_decode(s, p, 5) == CLLM_OK);
        float first[512];
        memcpy(first, cllm_session_logits(s), sizeof(first));
        cllm_log_set(quiet, NULL);
        const int32_t four[] = {432, 383, 286, 261};
        CHECK(cllm_session_decode(s, four, 4) == CLLM_ERR_TOO_LARGE);
        CHECK(strstr(cllm_last_error(), "context full") != NULL);
        const int32_t bad = 512;
        CHECK(cllm_session_decode(s, &bad, 1) == CLLM_ERR_INVALID_ARG);
        cllm_log_set(NULL, NULL);
        CHECK(cllm_session_n_past(s) == 5);
        CHECK(memcmp(first, cllm_session_logits(s), sizeof(first)) == 0);
        CHECK(cllm_session_decode(s, four, 3) == CLLM_OK); /* exactly fills it */
        CHECK(cllm_session_n_past(s) == 8);
    }
    cllm_session_free(s);
    cllm_model_free(m);
}

static void test_bad_files(void) {
    char path[4096];
    cllm_model *m = (cllm_model *)0x1;
    cllm_log_set(quiet, NULL);
    /* 172-wide Q8_0 rows are not whole blocks */
    cllm_status st = cllm_model_load(
        refs_model_path(path, sizeof(path), "tinyllamas-stories-260k-q8_0.gguf"), NULL, &m);
    CHECKF(st == CLLM_ERR_UNSUPPORTED, "q8_0 172-wide rows: status %d", (int)st);
    CHECK(strstr(cllm_last_error(), "172") != NULL);
    /* a tokenizer-only file has no weights */
    st = cllm_model_load(refs_model_path(path, sizeof(path), "vocab/ggml-vocab-llama-spm.gguf"),
                         NULL, &m);
    CHECK(st == CLLM_ERR_FORMAT && strstr(cllm_last_error(), "missing tensor") != NULL);
    st = cllm_model_load("does/not/exist.gguf", NULL, &m);
    CHECK(st == CLLM_ERR_IO);
    cllm_log_set(NULL, NULL);
    CHECK(m == (cllm_model *)0x1);
}

int main(void) {
    static const char *const files[] = {
        "reference_outputs.json",           "stories260K.gguf",
        "tinyllamas-stories-260k-f32.gguf", "tinyllamas-stories-260k-q8_0.gguf",
        "llama-2-tiny-random.gguf",         "TinyLLama-v0.Q4_0.gguf",
        "vocab/ggml-vocab-llama-spm.gguf",  NULL};
    if (!refs_have(files)) return check_summary("test_model");
    char path[4096];
    g_json = refs_read_file(refs_model_path(path, sizeof(path), "reference_outputs.json"), NULL);
    CHECKF(g_json != NULL, "cannot read %s", path);
    if (!g_json) return check_summary("test_model");

    const run_opts base = {
        .mmap = true, .kv_type = CLLM_TYPE_F32, .n_batch = 512, .n_threads = 2, .logit_tol = 2e-3f};
    run_opts o = base;
    check_model("stories260K.gguf", o);
    o.unfused = true;
    check_model("stories260K.gguf", o);
    o = base;
    o.mmap = false;
    o.n_batch = 2; /* the prompt in three batches */
    o.n_threads = 1;
    check_model("stories260K.gguf", o);
    o = base;
    o.kv_type = CLLM_TYPE_F16;
    o.logit_tol = 2e-2f;
    o.n_threads = 3;
    check_model("stories260K.gguf", o);
    check_model("tinyllamas-stories-260k-f32.gguf", base); /* GGUF v1 */
    o = base;
    o.kv_type = CLLM_TYPE_F16;
    o.logit_tol = 2e-2f;
    check_model("llama-2-tiny-random.gguf", o); /* F16 weights */
    /* Q4_0 weights with float activations, as the reference computes them */
    o.f32_act = true;
    check_model("TinyLLama-v0.Q4_0.gguf", o);
    /* with Q8_0 activations (the fast path) the logits stay close; the greedy
     * tokens are compared against llama.cpp's, which quantizes the same way,
     * in test_reference */
    check_q8_activations("TinyLLama-v0.Q4_0.gguf");

    static const char *const good[] = {"stories260K.gguf", "tinyllamas-stories-260k-f32.gguf",
                                       "llama-2-tiny-random.gguf", "TinyLLama-v0.Q4_0.gguf"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) test_quiet_load(good[i]);
    test_shared_model();
    test_context_full();
    test_bad_files();
    free(g_json);
    return check_summary("test_model");
}
