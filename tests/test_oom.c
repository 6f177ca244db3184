/*
 * Host out-of-memory, at every allocation (core/hostmem.h; SQLite's fault
 * injection is the model). For each model: run the whole scenario
 *
 *     plan -> load -> tokenizer -> chat template -> encode -> session ->
 *     decode -> sampler -> generate -> detokenize -> free
 *
 * once clean (the reference), once counting its host allocations (N_total),
 * then once for every N in 1..N_total with the N-th allocation failing
 * ("transient": the ones after it succeed again), and once for every N with
 * every allocation from the N-th on failing ("persistent"). Every run must
 * stop at its first failing step with an out-of-memory status (CLLM_ERR_NOMEM,
 * or CLLM_ERR_DEVICE_MEMORY where the allocation was a CPU buffer: the CPU
 * device's memory), report the failure (never swallow it), leave the failed
 * call's output parameter untouched, leave no device bytes allocated, and
 * leak nothing (LeakSanitizer, in the sanitizer build); a run that succeeds
 * gives the clean run's tokens and text.
 *
 * Decoding allocates nothing (the session planned its memory up front), and
 * the test checks that. Should that change, a decode that fails must keep
 * the session as it was: same n_past, the logits it had before (none before
 * this first decode), and a decode of the same
 * tokens afterwards gives the clean run's logits bit for bit.
 *
 * One thread everywhere (plan, session), so that the allocation count is
 * the same on every run; the CPU backend's worker threads allocate nothing
 * anyway, and its thread pool is created in cllm_backend_cpu_new.
 *
 * Usage: test_oom [MODEL_FILE...]  (default: the models listed below)
 */
#include "backend/cpu/cpu.h"
#include "common/check.h"
#include "common/refs.h"
#include "core/hostmem.h"
#include "text/chat.h"
#include "runtime/fit.h"
#include "runtime/generate.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
    STEP_NONE = 0,
    STEP_PLAN,
    STEP_LOAD,
    STEP_TOKENIZER,
    STEP_CHAT,
    STEP_ENCODE,
    STEP_SESSION,
    STEP_DECODE,
    STEP_SAMPLER,
    STEP_GENERATE,
    STEP_DETOK,
    STEP_COUNT
};

static const char *const k_step_names[] = {
    [STEP_NONE] = "none",           [STEP_PLAN] = "plan",        [STEP_LOAD] = "load",
    [STEP_TOKENIZER] = "tokenizer", [STEP_CHAT] = "chat",        [STEP_ENCODE] = "encode",
    [STEP_SESSION] = "session",     [STEP_DECODE] = "decode",    [STEP_SAMPLER] = "sampler",
    [STEP_GENERATE] = "generate",   [STEP_DETOK] = "detokenize",
};
_Static_assert(CLLM_ARRAY_SIZE(k_step_names) == STEP_COUNT, "step names");

#define N_GEN      4
#define MAX_PROMPT 256

typedef struct model_case {
    const char *file;
    bool mmap;
    bool vocab_only; /* a tokenizer fixture without weights: open, tokenize, detokenize */
} model_case;

/* The models of tests/data/models that the other tests use (not the Q8_0 file,
 * whose rows are not whole blocks: it does not load), one of them without
 * mmap, and a byte-level BPE tokenizer fixture. */
static const model_case k_models[] = {
    {.file = "stories260K.gguf", .mmap = true},
    {.file = "tinyllamas-stories-260k-f32.gguf", .mmap = false},
    {.file = "TinyLLama-v0.Q4_0.gguf", .mmap = true},
    {.file = "llama-2-tiny-random.gguf", .mmap = true},
    {.file = "vocab/ggml-vocab-gpt-2.gguf", .vocab_only = true}, /* byte-level BPE */
};

/* What one run of the scenario did. */
typedef struct outcome {
    int step;         /* the first step that failed; STEP_NONE if none */
    cllm_status st;   /* its status */
    int64_t injected; /* failures the hook injected up to that point */
    int64_t n_prompt;
    int32_t prompt[MAX_PROMPT];
    int64_t n_chat_ids;
    int32_t gen[N_GEN];
    size_t n_gen;
    char text[256];
    size_t text_len;
    /* a failed decode: what the session held afterwards, and whether a
     * decode of the same tokens then matched the clean logits */
    int64_t n_past_after_fail;
    bool logits_after_fail;
    bool redecode_ok;
    int64_t decode_allocs; /* host allocations cllm_session_decode made */
} outcome;

/* The clean run's logits after the prompt (the "objects unchanged" check). */
static float *g_ref_logits;
static int64_t g_ref_n_vocab;

static void quiet(cllm_log_level level, const char *msg, void *ud) {
    (void)level, (void)msg, (void)ud;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Output parameters start as this and must stay so when the call fails. */
static char g_sentinel;
#define SENTINEL ((void *)&g_sentinel)

/* Runs `call`, which writes its result through `&tmp` (starting as the
 * sentinel); on success the result moves to `dst`, on failure tmp must be
 * untouched. */
#define STEP_OUT(id, dst, tmp, call)                                                               \
    do {                                                                                           \
        tmp = SENTINEL;                                                                            \
        const cllm_status step_st_ = (call);                                                       \
        if (step_st_ != CLLM_OK) {                                                                 \
            CHECKF(tmp == SENTINEL, "%s: a failed step %s wrote its output", path,                 \
                   k_step_names[id]);                                                              \
            o->step = (id);                                                                        \
            o->st = step_st_;                                                                      \
            goto done;                                                                             \
        }                                                                                          \
        dst = tmp;                                                                                 \
    } while (0)

#define STEP(id, expr)                                                                             \
    do {                                                                                           \
        const cllm_status step_st_ = (expr);                                                       \
        if (step_st_ != CLLM_OK) {                                                                 \
            o->step = (id);                                                                        \
            o->st = step_st_;                                                                      \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

/* The whole scenario on `path`; stops at the first failing step. */
static void scenario(const char *path, bool use_mmap, outcome *o) {
    memset(o, 0, sizeof(*o));
    cllm_plan *plan = NULL;
    cllm_model *m = NULL;
    cllm_tokenizer *tok = NULL;
    char *chat = NULL;
    cllm_session *s = NULL;
    cllm_sampler *smp = NULL;
    cllm_generate_result gr;
    memset(&gr, 0, sizeof(gr));

    cllm_plan_params pp = cllm_plan_default_params();
    pp.n_ctx = 64;
    pp.n_batch = 4;
    pp.n_threads = 1;
    pp.use_mmap = use_mmap;
    cllm_plan *plan_out;
    STEP_OUT(STEP_PLAN, plan, plan_out, cllm_plan_file(path, &pp, &plan_out));

    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = use_mmap;
    mp.progress = false;
    mp.plan = plan;
    cllm_model *m_out;
    STEP_OUT(STEP_LOAD, m, m_out, cllm_model_load(path, &mp, &m_out));
    if (!m->tok) {
        o->step = STEP_TOKENIZER;
        o->st = CLLM_ERR_FORMAT; /* the models used here all carry one */
        goto done;
    }

    /* a second tokenizer from the same metadata, besides the model's */
    cllm_tokenizer *tok_out;
    STEP_OUT(STEP_TOKENIZER, tok, tok_out, cllm_tokenizer_new_from_gguf(m->gguf, &tok_out));

    const cllm_chat_msg msgs[] = {
        {"system", "You tell short stories."},
        {"user", "Tell me a story about a cat."},
    };
    size_t chat_len = 0;
    char *chat_out;
    STEP_OUT(STEP_CHAT, chat, chat_out,
             cllm_chat_render_alloc(CLLM_CHAT_STYLE_LLAMA2, msgs, CLLM_ARRAY_SIZE(msgs), true,
                                    &chat_out, &chat_len));
    int32_t chat_ids[MAX_PROMPT];
    size_t n_chat = 0;
    STEP(STEP_ENCODE,
         cllm_tokenizer_encode(tok, chat, chat_len, false, true, chat_ids, MAX_PROMPT, &n_chat));
    o->n_chat_ids = (int64_t)n_chat;
    static const char k_prompt[] = "Once upon a time";
    size_t n_prompt = 0;
    STEP(STEP_ENCODE, cllm_tokenizer_encode(m->tok, k_prompt, strlen(k_prompt), true, false,
                                            o->prompt, MAX_PROMPT, &n_prompt));
    o->n_prompt = (int64_t)n_prompt;
    if (n_prompt < 2) {
        o->step = STEP_ENCODE;
        o->st = CLLM_ERR_FORMAT;
        goto done;
    }

    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 64;
    sp.n_batch = 4; /* the prompt takes two batches: a failure may hit the second */
    sp.n_threads = 1;
    cllm_session *s_out;
    STEP_OUT(STEP_SESSION, s, s_out, cllm_session_new(m, &sp, &s_out));

    /* the prompt but its last token, which cllm_generate decodes */
    const int64_t n_first = (int64_t)n_prompt - 1;
    const int64_t count_before_decode = cllm_hostmem_count();
    cllm_status st = cllm_session_decode(s, o->prompt, n_first);
    o->decode_allocs = cllm_hostmem_count() - count_before_decode;
    if (st != CLLM_OK) {
        o->step = STEP_DECODE;
        o->st = st;
        o->injected = cllm_hostmem_failures();
        o->n_past_after_fail = cllm_session_n_past(s);
        o->logits_after_fail = cllm_session_logits(s) != NULL;
        cllm_hostmem_fail_at(-1, false); /* allocations work again */
        const float *l = NULL;
        o->redecode_ok = cllm_session_decode(s, o->prompt, n_first) == CLLM_OK &&
                         (l = cllm_session_logits(s)) != NULL && g_ref_logits &&
                         cllm_session_n_past(s) == n_first &&
                         memcmp(l, g_ref_logits, (size_t)g_ref_n_vocab * sizeof(float)) == 0;
        goto done;
    }
    if (!g_ref_logits) { /* the clean run keeps its logits */
        g_ref_n_vocab = cllm_session_n_vocab(s);
        g_ref_logits = malloc((size_t)g_ref_n_vocab * sizeof(float));
        if (g_ref_logits) {
            memcpy(g_ref_logits, cllm_session_logits(s), (size_t)g_ref_n_vocab * sizeof(float));
        }
    }

    cllm_sampler_params smpp = cllm_sampler_default_params();
    smpp.seed = 1234;
    smpp.repeat_penalty = 1.1f;
    cllm_sampler *smp_out;
    STEP_OUT(STEP_SAMPLER, smp, smp_out,
             cllm_sampler_new(&smpp, (int32_t)cllm_session_n_vocab(s), &smp_out));

    st = cllm_generate(s, smp, &o->prompt[n_first], 1, N_GEN, NULL, NULL, &gr);
    if (st != CLLM_OK) {
        /* the contract: the result is zeroed on failure */
        CHECKF(gr.ids == NULL && gr.n_ids == 0, "%s: generate failed with a result", path);
    }
    STEP(STEP_GENERATE, st);
    o->n_gen = CLLM_MIN(gr.n_ids, (size_t)N_GEN);
    memcpy(o->gen, gr.ids, o->n_gen * sizeof(int32_t));
    STEP(STEP_DETOK, cllm_tokenizer_decode(tok, gr.ids, gr.n_ids, CLLM_DETOK_STRIP_PREFIX, o->text,
                                           sizeof(o->text) - 1, &o->text_len));

done:
    if (o->step != STEP_DECODE) o->injected = cllm_hostmem_failures();
    cllm_generate_result_free(&gr);
    cllm_sampler_free(smp);
    cllm_session_free(s);
    cllm_free(chat);
    cllm_tokenizer_free(tok);
    cllm_model_free(m);
    cllm_plan_free(plan);
}

/* The scenario of a tokenizer fixture: metadata, tokenizer, encode (special
 * tokens parsed), streaming detokenizer. */
static void vocab_scenario(const char *path, outcome *o) {
    memset(o, 0, sizeof(*o));
    cllm_gguf *g = NULL, *g_out;
    cllm_tokenizer *tok = NULL, *tok_out;
    cllm_detokenizer *d = NULL, *d_out;
    STEP_OUT(STEP_LOAD, g, g_out, cllm_gguf_open(path, &g_out));
    STEP_OUT(STEP_TOKENIZER, tok, tok_out, cllm_tokenizer_new_from_gguf(g, &tok_out));
    static const char k_text[] = "Hello world! It's 2024: na\xc3\xafve caf\xc3\xa9, 3.14159 "
                                 "<|endoftext|>\ttabs and\n\nnew lines   ";
    size_t n = 0;
    STEP(STEP_ENCODE,
         cllm_tokenizer_encode(tok, k_text, strlen(k_text), true, true, o->prompt, MAX_PROMPT, &n));
    o->n_prompt = (int64_t)n;
    STEP_OUT(STEP_DETOK, d, d_out, cllm_detokenizer_new_tok(tok, CLLM_DETOK_SPECIAL, &d_out));
    for (size_t i = 0; i <= n; i++) {
        const char *text;
        size_t len;
        if (i < n) {
            STEP(STEP_DETOK, cllm_detokenizer_put(d, o->prompt[i], &text, &len));
        } else {
            cllm_detokenizer_flush(d, &text, &len);
        }
        len = CLLM_MIN(len, sizeof(o->text) - 1 - o->text_len);
        memcpy(o->text + o->text_len, text, len);
        o->text_len += len;
    }
done:
    o->injected = cllm_hostmem_failures();
    cllm_detokenizer_free(d);
    cllm_tokenizer_free(tok);
    cllm_gguf_free(g);
}

static void run_case(const model_case *mc, const char *path, outcome *o) {
    if (mc->vocab_only) {
        vocab_scenario(path, o);
    } else {
        scenario(path, mc->mmap, o);
    }
}

/* Bytes of every kind the CPU device holds. */
static size_t cpu_bytes(void) {
    size_t n = 0;
    for (int k = 0; k < CLLM_MEM_COUNT; k++) n += cllm_device_allocated(cllm_cpu_device(), k);
    return n;
}

static bool same_result(const outcome *a, const outcome *b) {
    return a->step == STEP_NONE && b->step == STEP_NONE && a->n_prompt == b->n_prompt &&
           memcmp(a->prompt, b->prompt, (size_t)a->n_prompt * sizeof(int32_t)) == 0 &&
           a->n_chat_ids == b->n_chat_ids && a->n_gen == b->n_gen &&
           memcmp(a->gen, b->gen, a->n_gen * sizeof(int32_t)) == 0 && a->text_len == b->text_len &&
           memcmp(a->text, b->text, a->text_len) == 0;
}

/* One faulty run: the n-th allocation fails (and every later one with
 * `repeat`). Returns false if a check failed. */
static bool faulty_run(const model_case *mc, const char *path, int64_t n, bool repeat,
                       const outcome *ref, size_t bytes_before, int hits[STEP_COUNT]) {
    const char *file = mc->file;
    const int failed_before = g_checks_failed;
    outcome o;
    cllm_hostmem_fail_at(n, repeat);
    run_case(mc, path, &o);
    cllm_hostmem_fail_at(-1, false);
    const char *mode = repeat ? "persistent" : "transient";
    hits[o.step]++;
    CHECKF(o.injected >= 1, "%s, %s failure at %lld: the allocation was never made", file, mode,
           (long long)n);
    CHECKF(o.step != STEP_NONE, "%s, %s failure at %lld: swallowed, nothing reported an error",
           file, mode, (long long)n);
    CHECKF(o.step == STEP_NONE || o.st == CLLM_ERR_NOMEM || o.st == CLLM_ERR_DEVICE_MEMORY,
           "%s, %s failure at %lld: step %s returned %s, not an out-of-memory status", file, mode,
           (long long)n, k_step_names[o.step], cllm_status_str(o.st));
    if (o.step == STEP_NONE) {
        CHECKF(same_result(&o, ref), "%s, %s failure at %lld: a different result", file, mode,
               (long long)n);
    }
    if (o.step == STEP_DECODE) {
        CHECKF(o.n_past_after_fail == 0 && !o.logits_after_fail,
               "%s, %s failure at %lld: the failed decode left n_past %lld, logits %d", file, mode,
               (long long)n, (long long)o.n_past_after_fail, o.logits_after_fail);
        CHECKF(o.redecode_ok, "%s, %s failure at %lld: decoding again gave other logits", file,
               mode, (long long)n);
    }
    CHECKF(cpu_bytes() == bytes_before, "%s, %s failure at %lld: %zu device bytes left", file, mode,
           (long long)n, cpu_bytes() - bytes_before);
    return g_checks_failed == failed_before;
}

static void check_model(const model_case *mc) {
    char path[4096];
    refs_model_path(path, sizeof(path), mc->file);
    free(g_ref_logits);
    g_ref_logits = NULL;
    const size_t bytes_before = cpu_bytes();

    /* the reference (also warms up what is initialised once per process),
     * then the count */
    outcome ref, counted;
    run_case(mc, path, &ref);
    CHECKF(ref.step == STEP_NONE, "%s: the clean run failed at %s: %s (%s)", mc->file,
           k_step_names[ref.step], cllm_status_str(ref.st), cllm_last_error());
    if (ref.step != STEP_NONE) return;
    CHECKF(mc->vocab_only ? ref.n_prompt > 0 && ref.text_len > 0 : ref.n_gen == N_GEN,
           "%s: %lld prompt ids, %zu tokens generated", mc->file, (long long)ref.n_prompt,
           ref.n_gen);
    const double t0 = now_ms();
    cllm_hostmem_fail_at(0, false);
    run_case(mc, path, &counted);
    const int64_t total = cllm_hostmem_count();
    cllm_hostmem_fail_at(-1, false);
    const double t_clean = now_ms() - t0;
    CHECKF(same_result(&counted, &ref), "%s: the counted run differs from the clean run", mc->file);
    /* the session planned its memory up front: decoding allocates nothing
     * (so the decode step below can only fail if that changes) */
    CHECKF(counted.decode_allocs == 0, "%s: decode made %lld host allocations", mc->file,
           (long long)counted.decode_allocs);
    CHECKF(counted.injected == 0 && total > 0, "%s: %lld allocations, %lld failures", mc->file,
           (long long)total, (long long)counted.injected);

    int hits[2][STEP_COUNT] = {{0}};
    int bad = 0;
    const double t1 = now_ms();
    for (int repeat = 0; repeat < 2; repeat++) {
        for (int64_t n = 1; n <= total; n++) {
            if (!faulty_run(mc, path, n, repeat, &ref, bytes_before, hits[repeat])) {
                if (++bad >= 20) {
                    fprintf(stderr, "%s: too many failures, stopping\n", mc->file);
                    return;
                }
            }
        }
    }
    const double t_faults = now_ms() - t1;
    printf("%s (%s): %lld host allocations per run (%.1f ms clean); 2 x %lld faulty runs in "
           "%.2f s\n",
           mc->file,
           mc->vocab_only ? "tokenizer"
           : mc->mmap     ? "mmap"
                          : "read",
           (long long)total, t_clean, (long long)total, t_faults / 1e3);
    for (int repeat = 0; repeat < 2; repeat++) {
        printf("  %-10s failures reported by:", repeat ? "persistent" : "transient");
        for (int i = 0; i < STEP_COUNT; i++) {
            if (hits[repeat][i]) printf(" %s %d", k_step_names[i], hits[repeat][i]);
        }
        printf("\n");
    }
}

int main(int argc, char **argv) {
    cllm_log_set(quiet, NULL);
    (void)cllm_registry_count(); /* discovered once per process: not part of the scenario */

    model_case given[16];
    const model_case *models = k_models;
    size_t n_models = CLLM_ARRAY_SIZE(k_models);
    if (argc > 1) {
        n_models = 0;
        for (int i = 1; i < argc && n_models < CLLM_ARRAY_SIZE(given); i++) {
            given[n_models++] = (model_case){
                .file = argv[i], .mmap = true, .vocab_only = strncmp(argv[i], "vocab/", 6) == 0};
        }
        models = given;
    }
    bool missing = false;
    for (size_t i = 0; i < n_models; i++) {
        const char *const files[] = {models[i].file, NULL};
        if (!refs_have(files)) missing = true;
    }
    if (missing) return check_summary("test_oom");

    for (size_t i = 0; i < n_models; i++) check_model(&models[i]);
    free(g_ref_logits);
    return check_summary("test_oom");
}
