/*
 * Quantized and BF16 KV caches (cllm_session_params.type_k / type_v), on
 * random models written by cllm-gen-model (argv[1]): a llama (heads of 64,
 * grouped) and a gemma3 with a sliding window (its local layers' caches
 * are rings), both with sharper attention (--qk-std) so that another
 * rounding of the keys shows in the logits.
 *
 *  - logits against the F16 cache after a prompt read in batches and
 *    greedy steps (teacher-forced by the F16 session): within a bound per
 *    type, stated below, and not equal (the blocks are really written);
 *    with two sequences in one session, each sequence against its own;
 *  - a truncated sequence, decoded again, equals a session that never saw
 *    the dropped tokens;
 *  - memory: planned == allocated per kind, the state exactly the rows of
 *    the types (blocks of 32 values: Q8_0 34 bytes, Q4_0 18), the plan of
 *    cllm_plan_file equal to the session; on the test device (a budget
 *    for some layers) the plan's bytes per device are what is allocated,
 *    and the logits those of the CPU alone;
 *  - refused with a message: a type that is not a KV type, a block type
 *    with heads that are not whole blocks, the unfused attention with a
 *    quantized cache, a session whose cache is larger than its model's
 *    plan.
 * Run at every kernel level (CLLM_CPU_ISA), like test_seqs.
 */
#include "backend/cpu/cpu.h"
#include "backend/test/test-backend.h"
#include "cllm.h"
#include "common/check.h"
#include "common/refs.h"
#include "runtime/fit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N_CTX = 128, N_BATCH = 16, N_PROMPT = 40, N_STEPS = 24 };

static void quiet(cllm_log_level level, const char *msg, void *ud) {
    (void)level, (void)msg, (void)ud;
}

/* max |a - b| / max |b| */
static double rel_diff(const float *a, const float *b, int64_t n) {
    double d = 0, scale = 1e-6;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    return d / scale;
}

static int32_t argmax(const float *x, int64_t n) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++) {
        if (x[i] > x[best]) best = (int32_t)i;
    }
    return best;
}

static cllm_session *session(const cllm_model *m, cllm_type k, cllm_type v, int n_seq) {
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = N_CTX;
    sp.n_batch = N_BATCH;
    sp.n_threads = 2;
    sp.n_seq = n_seq;
    sp.type_k = k, sp.type_v = v;
    cllm_session *s = NULL;
    CHECKF(cllm_session_new(m, &sp, &s) == CLLM_OK, "session %s/%s: %s", cllm_type_name(k),
           cllm_type_name(v), cllm_last_error());
    return s;
}

typedef struct kv_case {
    cllm_type k, v;
    double bound; /* largest logit difference from the F16 cache, of their scale */
} kv_case;

/* The bounds: Q8_0 keeps about 8 bits of a block's range, Q4_0 about 4,
 * BF16 8 bits of mantissa (F16: 11). Measured on these models (heads of 64,
 * --qk-std 0.1, 64 positions): Q8_0 up to 6e-3, Q4_0 2e-2, BF16 5e-3 of the
 * logits' scale; each bound 2.5 times that. */
static const kv_case k_cases[] = {
    {CLLM_TYPE_Q8_0, CLLM_TYPE_Q8_0, 1.5e-2}, {CLLM_TYPE_Q4_0, CLLM_TYPE_Q4_0, 5e-2},
    {CLLM_TYPE_BF16, CLLM_TYPE_BF16, 1.2e-2}, {CLLM_TYPE_Q8_0, CLLM_TYPE_F16, 1.5e-2},
    {CLLM_TYPE_F16, CLLM_TYPE_Q4_0, 5e-2},    {CLLM_TYPE_Q4_0, CLLM_TYPE_Q8_0, 5e-2},
};

/* Bytes of a K or V cache row of n values of type t. */
static size_t row_bytes(cllm_type t, int64_t n) {
    switch (t) {
    case CLLM_TYPE_F16:
    case CLLM_TYPE_BF16: return (size_t)n * 2;
    case CLLM_TYPE_Q8_0: return (size_t)n / 32 * 34;
    case CLLM_TYPE_Q4_0: return (size_t)n / 32 * 18;
    default: return (size_t)n * 4;
    }
}

/* One model, one case: logits against F16, two sequences, truncation, memory. */
static void check_case(const cllm_model *m, const char *name, const kv_case *c, int64_t kv_dim,
                       const int64_t *layer_rows, int n_layer) {
    cllm_session *ref = session(m, CLLM_TYPE_F16, CLLM_TYPE_F16, 1);
    cllm_session *q = session(m, c->k, c->v, 1);
    cllm_session *two = session(m, c->k, c->v, 2);
    cllm_session *alone = session(m, c->k, c->v, 1);
    if (!ref || !q || !two || !alone) goto done;
    const int64_t n_vocab = cllm_model_n_vocab(m);

    /* memory: exact, and the rows of the types */
    const cllm_memory_report r = cllm_session_memory(q);
    for (int k = 0; k < CLLM_MEM_COUNT; k++) CHECK_EQ_INT(r.planned[k], r.allocated[k]);
    size_t state = 0;
    for (int l = 0; l < n_layer; l++)
        state += (size_t)layer_rows[l] * (row_bytes(c->k, kv_dim) + row_bytes(c->v, kv_dim));
    CHECKF(r.allocated[CLLM_MEM_STATE] >= state &&
               r.allocated[CLLM_MEM_STATE] < state + (size_t)(2 * n_layer) * 256,
           "%s %s/%s: state %zu bytes, the rows hold %zu", name, cllm_type_name(c->k),
           cllm_type_name(c->v), r.allocated[CLLM_MEM_STATE], state);
    CHECK_EQ_INT(cllm_session_memory(two).allocated[CLLM_MEM_STATE],
                 2 * r.allocated[CLLM_MEM_STATE]);

    /* a prompt in batches of N_BATCH, then greedy steps of the F16 session */
    int32_t tok[N_PROMPT + N_STEPS];
    for (int i = 0; i < N_PROMPT; i++) tok[i] = (int32_t)((37 * i + 11) % n_vocab);
    double worst = 0;
    bool differs = false;
    CHECK(cllm_session_decode(ref, tok, N_PROMPT) == CLLM_OK);
    CHECK(cllm_session_decode(q, tok, N_PROMPT) == CLLM_OK);
    /* sequence 1 of `two` reads the same prompt beside another on sequence 0 */
    int32_t other[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) other[i] = (int32_t)((53 * i + 5) % n_vocab);
    for (int at = 0; at < N_PROMPT; at += N_BATCH / 2) {
        const cllm_seq_tokens items[2] = {{0, other + at, N_BATCH / 2}, {1, tok + at, N_BATCH / 2}};
        CHECKF(cllm_session_decode_seqs(two, items, 2) == CLLM_OK, "%s", cllm_last_error());
    }
    for (int step = 0;; step++) {
        const float *a = cllm_session_logits(q), *b = cllm_session_logits(ref);
        if (!a || !b) break;
        const double d = rel_diff(a, b, n_vocab);
        worst = fmax(worst, d);
        differs = differs || d > 0;
        const double d2 = rel_diff(cllm_session_seq_logits(two, 1), a, n_vocab);
        CHECKF(d2 < 2e-3, "%s %s/%s step %d: sequence 1 of two differs by %.3g", name,
               cllm_type_name(c->k), cllm_type_name(c->v), step, d2);
        if (step == N_STEPS) break;
        const int32_t next = argmax(b, n_vocab), next0 = (int32_t)((step * 7 + 3) % n_vocab);
        tok[N_PROMPT + step] = next;
        CHECK(cllm_session_decode(ref, &next, 1) == CLLM_OK);
        CHECK(cllm_session_decode(q, &next, 1) == CLLM_OK);
        const cllm_seq_tokens items[2] = {{0, &next0, 1}, {1, &next, 1}};
        CHECK(cllm_session_decode_seqs(two, items, 2) == CLLM_OK);
    }
    CHECKF(worst <= c->bound && differs, "%s %s/%s: logits %.3g of their scale from F16 (bound %g)",
           name, cllm_type_name(c->k), cllm_type_name(c->v), worst, c->bound);
    fprintf(stderr, "%s K %s V %s: largest difference from F16 %.3g of the scale\n", name,
            cllm_type_name(c->k), cllm_type_name(c->v), worst);

    /* truncated by 6 (a sliding window's ring keeps only so many) and 8
     * more tokens: a session that only saw those */
    const int64_t keep = cllm_session_seq_n_past(q, 0) - 6;
    CHECKF(cllm_session_truncate(q, keep) == CLLM_OK, "%s", cllm_last_error());
    CHECK(cllm_session_decode(q, tok + 30, 8) == CLLM_OK);
    /* the kept rows written as q wrote them: the prompt, then one at a time */
    CHECK(cllm_session_decode(alone, tok, N_PROMPT) == CLLM_OK);
    for (int64_t i = N_PROMPT; i < keep; i++)
        CHECK(cllm_session_decode(alone, &tok[i], 1) == CLLM_OK);
    CHECK(cllm_session_decode(alone, tok + 30, 8) == CLLM_OK);
    const float *a = cllm_session_logits(q), *b = cllm_session_logits(alone);
    CHECKF(a && b && rel_diff(a, b, n_vocab) < 1e-4, "%s %s/%s: truncation differs by %.3g", name,
           cllm_type_name(c->k), cllm_type_name(c->v), a && b ? rel_diff(a, b, n_vocab) : -1.0);
done:
    cllm_session_free(alone);
    cllm_session_free(two);
    cllm_session_free(q);
    cllm_session_free(ref);
}

/* A plan of the same shape is what the session allocates, kind by kind. */
static void check_plan(const char *path, const kv_case *c) {
    cllm_plan_params fp = cllm_plan_default_params();
    fp.n_ctx = N_CTX;
    fp.n_batch = N_BATCH;
    fp.n_threads = 2;
    fp.use_mmap = false;
    fp.type_k = c->k, fp.type_v = c->v;
    cllm_plan *plan = NULL;
    CHECKF(cllm_plan_file(path, &fp, &plan) == CLLM_OK, "%s", cllm_last_error());
    if (!plan) return;
    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = false;
    mp.plan = plan;
    cllm_model *m = NULL;
    CHECKF(cllm_model_load(path, &mp, &m) == CLLM_OK, "%s", cllm_last_error());
    cllm_session *s = m ? session(m, c->k, c->v, 1) : NULL;
    if (s) {
        const cllm_memory_report r = cllm_session_memory(s);
        for (int k = 0; k < CLLM_MEM_COUNT; k++) {
            CHECKF(plan->devices[plan->n_devices - 1].bytes[k] == r.allocated[k],
                   "%s/%s %s: plan %zu, session %zu", cllm_type_name(c->k), cllm_type_name(c->v),
                   cllm_mem_kind_str(k), plan->devices[plan->n_devices - 1].bytes[k],
                   r.allocated[k]);
        }
        /* a larger cache than planned is refused */
        cllm_session *big = NULL;
        cllm_session_params sp = cllm_session_default_params();
        sp.n_ctx = N_CTX, sp.n_batch = N_BATCH, sp.n_threads = 2;
        sp.type_k = sp.type_v = CLLM_TYPE_F32;
        cllm_log_set(quiet, NULL);
        CHECK(cllm_session_new(m, &sp, &big) == CLLM_ERR_TOO_LARGE && !big);
        cllm_log_set(NULL, NULL);
        CHECKF(strstr(cllm_last_error(), "KV cache type") != NULL, "%s", cllm_last_error());
    }
    cllm_session_free(s);
    cllm_model_free(m);
    cllm_plan_free(plan);
}

/* Some layers on the test device: planned == allocated per device and kind,
 * and the logits of the CPU alone (the test device computes with the CPU's
 * kernels, its caches quantized the same way). */
static void check_test_device(const char *path, const kv_case *c) {
    cllm_test_device_config cfg = cllm_test_device_config_default();
    cfg.budget = (size_t)64 << 20;
    cllm_device *test = NULL;
    CHECK(cllm_test_device_enable(&cfg, &test) == CLLM_OK);
    if (!test) return;
    cllm_plan_params fp = cllm_plan_default_params();
    fp.n_ctx = N_CTX, fp.n_batch = N_BATCH, fp.n_threads = 2, fp.use_mmap = false;
    fp.type_k = c->k, fp.type_v = c->v;
    cllm_plan *all = NULL;
    CHECKF(cllm_plan_file(path, &fp, &all) == CLLM_OK, "%s", cllm_last_error());
    if (!all) goto off;
    const cllm_plan_device *t0 = &all->devices[0];
    const size_t per = (t0->bytes[CLLM_MEM_WEIGHTS] + t0->bytes[CLLM_MEM_STATE]) / 2;
    const size_t budget = t0->bytes[CLLM_MEM_COMPUTE] + t0->bytes[CLLM_MEM_WORKSPACE] + per;
    cllm_plan_free(all);
    CHECK(cllm_plan_add_budget(&fp, "test0", budget) == CLLM_OK);
    cllm_plan *plan = NULL;
    CHECKF(cllm_plan_file(path, &fp, &plan) == CLLM_OK, "%s", cllm_last_error());
    if (!plan) goto off;
    CHECKF(plan->devices[0].n_layers >= 1 && plan->devices[0].bytes[CLLM_MEM_STATE] > 0,
           "%d layers and %zu bytes of KV cache on test0", plan->devices[0].n_layers,
           plan->devices[0].bytes[CLLM_MEM_STATE]);
    size_t before[2][CLLM_MEM_COUNT];
    for (int k = 0; k < CLLM_MEM_COUNT; k++) {
        before[0][k] = cllm_device_allocated(test, k);
        before[1][k] = cllm_device_allocated(cllm_cpu_device(), k);
    }
    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = false;
    mp.plan = plan;
    cllm_model *m = NULL, *cpu = NULL;
    CHECKF(cllm_model_load(path, &mp, &m) == CLLM_OK, "%s", cllm_last_error());
    cllm_session *s = m ? session(m, c->k, c->v, 1) : NULL;
    if (s) {
        for (int k = 0; k < CLLM_MEM_COUNT; k++) {
            const size_t got[2] = {cllm_device_allocated(test, k) - before[0][k],
                                   cllm_device_allocated(cllm_cpu_device(), k) - before[1][k]};
            for (int d = 0; d < 2; d++) {
                const cllm_plan_device *pd = &plan->devices[d == 0 ? 0 : plan->n_devices - 1];
                CHECKF(pd->bytes[k] == got[d], "%s %s: plan %zu, allocated %zu", pd->name,
                       cllm_mem_kind_str(k), pd->bytes[k], got[d]);
            }
        }
    }
    mp.plan = NULL;
    CHECKF(cllm_model_load(path, &mp, &cpu) == CLLM_OK, "%s", cllm_last_error());
    cllm_session *sc = cpu ? session(cpu, c->k, c->v, 1) : NULL;
    if (s && sc) {
        const int64_t n_vocab = cllm_model_n_vocab(m);
        int32_t tok[N_PROMPT];
        for (int i = 0; i < N_PROMPT; i++) tok[i] = (int32_t)((29 * i + 3) % n_vocab);
        CHECK(cllm_session_decode(s, tok, N_PROMPT) == CLLM_OK);
        CHECK(cllm_session_decode(sc, tok, N_PROMPT) == CLLM_OK);
        for (int i = 0; i < 4; i++) {
            CHECK(cllm_session_decode(s, &tok[i], 1) == CLLM_OK);
            CHECK(cllm_session_decode(sc, &tok[i], 1) == CLLM_OK);
        }
        const float *a = cllm_session_logits(s), *b = cllm_session_logits(sc);
        CHECKF(a && b && rel_diff(a, b, n_vocab) < 1e-5, "test device: logits differ by %.3g",
               a && b ? rel_diff(a, b, n_vocab) : -1.0);
    }
    cllm_session_free(sc);
    cllm_model_free(cpu);
    cllm_session_free(s);
    cllm_model_free(m);
    cllm_plan_free(plan);
off:
    cllm_test_device_disable();
}

/* Types and heads a cache cannot have, each refused with what is wrong. */
static void check_refused(const cllm_model *m, const cllm_model *odd_heads) {
    static const struct {
        cllm_type k, v;
        bool unfused, odd;
        const char *what;
    } bad[] = {
        {CLLM_TYPE_Q4_K, CLLM_TYPE_F16, false, false, "K cache type q4_k is not supported"},
        {CLLM_TYPE_F16, CLLM_TYPE_I32, false, false, "V cache type i32 is not supported"},
        {CLLM_TYPE_F16, (cllm_type)99, false, false, "V cache type ? is not supported"},
        {CLLM_TYPE_Q8_0, CLLM_TYPE_F16, false, true, "a multiple of 32"},
        {CLLM_TYPE_F16, CLLM_TYPE_Q4_0, false, true, "a multiple of 32"},
        {CLLM_TYPE_Q8_0, CLLM_TYPE_F16, true, false, "unfused attention"},
        {CLLM_TYPE_F16, CLLM_TYPE_BF16, true, false, "unfused attention"},
    };
    cllm_log_set(quiet, NULL);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cllm_session_params sp = cllm_session_default_params();
        sp.n_ctx = N_CTX;
        sp.type_k = bad[i].k, sp.type_v = bad[i].v;
        sp.unfused_attn = bad[i].unfused;
        cllm_session *s = NULL;
        CHECKF(cllm_session_new(bad[i].odd ? odd_heads : m, &sp, &s) == CLLM_ERR_INVALID_ARG && !s,
               "case %zu", i);
        CHECKF(strstr(cllm_last_error(), bad[i].what) != NULL, "case %zu: %s", i,
               cllm_last_error());
    }
    cllm_log_set(NULL, NULL);
}

static bool gen_model(const char *gen, const char *vocab, const char *path, const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "'%s' --vocab '%s' --out '%s' %s", gen, vocab, path, args);
    const bool ok = system(cmd) == 0;
    CHECKF(ok, "%s", cmd);
    return ok;
}

int main(int argc, char **argv) {
    const char *gen = argc > 1 ? argv[1] : NULL;
    char vocab[4096], dir[512], llama[1024], gemma[1024], odd[1024];
    refs_model_path(vocab, sizeof(vocab), "vocab/ggml-vocab-llama-spm.gguf");
    if (!gen || !*gen || access(vocab, R_OK) != 0) {
        check_missing(gen && *gen ? vocab : "cllm-gen-model (argv[1])");
        return check_summary("test_kvq");
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/cllm-test-kvq-XXXXXX", tmp && *tmp ? tmp : P_tmpdir);
    CHECK(mkdtemp(dir) != NULL);
    snprintf(llama, sizeof(llama), "%s/llama.gguf", dir);
    snprintf(gemma, sizeof(gemma), "%s/gemma3.gguf", dir);
    snprintf(odd, sizeof(odd), "%s/odd.gguf", dir);
    /* llama: heads of 64, 2 kv heads (rows of 128 values); gemma3: layers
     * 0-4 local with a window of 8 (rings of 8 + 16 - 1 rows), 5 global */
    bool ok = gen_model(gen, vocab, llama,
                        "--n-embd 256 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 512 "
                        "--n-ctx 256 --type q8_0 --seed 3 --qk-std 0.1");
    ok = ok && gen_model(gen, vocab, gemma,
                         "--arch gemma3 --n-embd 256 --n-layer 6 --n-head 4 --n-head-kv 2 "
                         "--n-ff 512 --n-ctx 256 --swa 8 --type f32 --seed 5 --qk-std 0.1");
    ok = ok && gen_model(gen, vocab, odd,
                         "--n-embd 160 --n-layer 1 --n-head 4 --n-head-kv 2 --n-ff 256 "
                         "--n-ctx 256 --type f32 --seed 1");
    cllm_model *ml = NULL, *mg = NULL, *mo = NULL;
    if (ok) {
        CHECKF(cllm_model_load(llama, NULL, &ml) == CLLM_OK, "%s", cllm_last_error());
        CHECKF(cllm_model_load(gemma, NULL, &mg) == CLLM_OK, "%s", cllm_last_error());
        CHECKF(cllm_model_load(odd, NULL, &mo) == CLLM_OK, "%s", cllm_last_error());
    }
    if (ml && mg && mo) {
        const int64_t rows_llama[2] = {N_CTX, N_CTX};
        const int64_t ring = 8 + N_BATCH - 1;
        const int64_t rows_gemma[6] = {ring, ring, ring, ring, ring, N_CTX};
        for (size_t i = 0; i < sizeof(k_cases) / sizeof(k_cases[0]); i++) {
            check_case(ml, "llama", &k_cases[i], 128, rows_llama, 2);
            check_case(mg, "gemma3", &k_cases[i], 128, rows_gemma, 6);
        }
        check_refused(ml, mo);
        check_plan(llama, &k_cases[0]);
        check_plan(gemma, &k_cases[1]);
        check_test_device(llama, &k_cases[3]);
    }
    cllm_model_free(mo);
    cllm_model_free(mg);
    cllm_model_free(ml);
    remove(llama);
    remove(gemma);
    remove(odd);
    rmdir(dir);
    return check_summary("test_kvq");
}
