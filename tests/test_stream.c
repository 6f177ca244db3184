/*
 * Streamed layers (runtime/stream.h): a model planned under a budget that
 * its layers do not fit streams them through a ring of 2 slots (and once of
 * 3), and
 *  - gives the logits of the resident model bit for bit (same kernels, same
 *    order, the same weight layouts: a device that stores a matrix its own
 *    way, as the CPU stores Q4_0 / Q4_1 / Q4_K 16 rows to a group, does so
 *    for a streamed layer as for a resident one): a prompt in several
 *    batches, then greedy tokens one by one, on every model of
 *    tests/data/models and on random-weight models written by cllm-gen-model
 *    (argv[1]);
 *  - allocates what it planned, kind by kind;
 *  - under a budget half a layer short of the model, streams layers in
 *    part (some of their weights resident) and reads strictly fewer bytes
 *    per token than whole layers at the same budget (CLLM_STREAM_SPLIT=0),
 *    streamed == resident again (also in the "layouts" run below: the
 *    resident weights of a streamed layer repacked at load, the streamed
 *    ones after each read);
 *  - keeps the process's peak resident memory (VmHWM) within the budget plus
 *    a stated allowance, on a model twice the budget's size (a child
 *    process, so that nothing else the test did counts);
 *  - turns a file truncated after loading, or overwritten in place, into
 *    CLLM_ERR_IO from decode (and from cllm_model_check), and decodes again
 *    once the file is restored (in place, or renamed over);
 *  - refuses a budget too small for the ring, the state and the compute
 *    with an error that says so;
 *  - reads the same bytes with several reads in flight in pieces that no
 *    run is a multiple of (cllm_stream_reads_set): streamed == resident
 *    again, and a truncated file fails the same way; the probe reads the
 *    file at those settings, direct and buffered.
 * With "layouts" as argv[2], only the first check, on the models whose
 * matrices the CPU repacks: SmolLM2 (Q4_1, scripts/fetch-model) and
 * random-weight Q4_0 and Q4_K models; CTest runs it at every kernel level
 * (CLLM_CPU_ISA), since each level reads the repacked layout with kernels
 * of its own.
 */
#include "common/check.h"
#include "common/refs.h"
#include "runtime/fit.h"
#include "runtime/model.h"
#include "runtime/session.h"
#include "runtime/stream.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define N_CTX    64
#define N_BATCH  8
#define N_PROMPT 19 /* three batches: 8, 8, 3 */
#define N_GEN    12

static const char *g_gen;
static char g_dir[256];
/* the streamed model's reads in the last check_plan: bytes, of them cached */
static uint64_t g_last_read, g_last_cached;

static void quiet(cllm_log_level level, const char *msg, void *ud) {
    (void)level, (void)msg, (void)ud;
}

static int g_slots = 2; /* ring slots of the plans made next */
/* the sessions those plans are for */
static int g_seqs = 1;
static int64_t g_ctx = N_CTX, g_batch = N_BATCH;

static cllm_plan_params plan_params(size_t budget) {
    cllm_plan_params fp = cllm_plan_default_params();
    fp.n_ctx = g_ctx;
    fp.n_batch = g_batch;
    fp.n_seq = g_seqs;
    fp.n_threads = 2;
    fp.use_mmap = false;
    fp.stream_slots = g_slots;
    fp.read_bw = 1e9; /* no probe: the bound is not what these tests check */
    if (budget) cllm_plan_add_budget(&fp, "cpu", budget);
    return fp;
}

/* The plan at the smallest cpu budget that plans (bisection): it streams
 * as many layers as streaming can take. NULL on failure. */
static cllm_plan *smallest_plan(const char *path) {
    cllm_plan_params fp = plan_params(0);
    cllm_plan *all = NULL;
    if (cllm_plan_file(path, &fp, &all) != CLLM_OK) {
        CHECKF(false, "%s: %s", path, cllm_last_error());
        return NULL;
    }
    size_t hi = cllm_plan_device_total(all, all->n_devices - 1), lo = 0; /* hi fits */
    cllm_plan_free(all);
    cllm_log_set(quiet, NULL);
    while (hi - lo > 4096) {
        const size_t mid = lo + (hi - lo) / 2;
        fp = plan_params(mid);
        cllm_plan *p = NULL;
        if (cllm_plan_file(path, &fp, &p) == CLLM_OK) {
            hi = mid;
        } else {
            lo = mid;
        }
        cllm_plan_free(p);
    }
    cllm_log_set(NULL, NULL);
    fp = plan_params(hi);
    cllm_plan *p = NULL;
    CHECKF(cllm_plan_file(path, &fp, &p) == CLLM_OK, "%s: %s", path, cllm_last_error());
    return p;
}

static cllm_session *new_session(const cllm_model *m) {
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = N_CTX;
    sp.n_batch = N_BATCH;
    sp.n_threads = 2;
    cllm_session *s = NULL;
    CHECKF(cllm_session_new(m, &sp, &s) == CLLM_OK, "session: %s", cllm_last_error());
    return s;
}

static int32_t argmax(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++) {
        if (x[i] > x[best]) best = i;
    }
    return (int32_t)best;
}

/* The logits after the prompt and after each of N_GEN greedy tokens:
 * (1 + N_GEN) x n_vocab floats (malloc), or NULL on a failed decode. */
static float *run(const cllm_model *m) {
    cllm_session *s = new_session(m);
    if (!s) return NULL;
    const int64_t nv = cllm_session_n_vocab(s);
    float *out = malloc((size_t)(1 + N_GEN) * (size_t)nv * sizeof(float));
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = 1 + (int32_t)((i * 37 + 11) % (nv - 1));
    bool ok = out && cllm_session_decode(s, prompt, N_PROMPT) == CLLM_OK;
    for (int t = 0; ok && t <= N_GEN; t++) {
        const float *lg = cllm_session_logits(s);
        memcpy(out + (size_t)t * (size_t)nv, lg, (size_t)nv * sizeof(float));
        if (t == N_GEN) break;
        const int32_t tok = argmax(lg, nv);
        ok = cllm_session_decode(s, &tok, 1) == CLLM_OK;
    }
    CHECKF(ok, "decode: %s", cllm_last_error());
    cllm_session_free(s);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}

static int64_t vocab_of(const cllm_model *m) { return m->hp.n_vocab; }

/* Streamed with `plan` == resident (mapped), bit for bit; planned ==
 * allocated per kind. Frees the plan. */
static void check_plan(const char *path, cllm_plan *plan) {
    cllm_model_params mp = cllm_model_default_params();
    mp.progress = false;
    cllm_model *res = NULL;
    if (cllm_model_load(path, &mp, &res) != CLLM_OK) {
        CHECKF(false, "%s: %s", path, cllm_last_error());
        cllm_plan_free(plan);
        return;
    }
    cllm_model *str = NULL;
    if (plan) {
        mp.plan = plan;
        mp.use_mmap = plan->use_mmap;
        CHECKF(cllm_model_load(path, &mp, &str) == CLLM_OK, "%s: %s", path, cllm_last_error());
    }
    if (plan && str) {
        fprintf(stderr, "%s: %d of %lld layers streamed (%d in part), ring of %d\n", path,
                plan->n_streamed, (long long)plan->hp.n_layer, plan->n_partial, plan->stream_slots);
        CHECK(plan->stream_slots == CLLM_MIN(g_slots, plan->n_streamed));
        CHECK((str->stream != NULL) == (plan->n_streamed > 0));
        CHECK(str->stream_lay.n_slots == plan->stream_slots);
        float *a = run(res), *b = run(str);
        const size_t n = (size_t)(1 + N_GEN) * (size_t)vocab_of(res);
        CHECKF(a && b && memcmp(a, b, n * sizeof(float)) == 0,
               "%s: streamed logits differ from resident ones", path);
        /* planned == allocated, kind by kind, plan and session */
        cllm_session *s = new_session(str);
        if (s) {
            const cllm_memory_report r = cllm_session_memory(s);
            const cllm_plan_device *pd = &plan->devices[plan->n_devices - 1];
            for (int k = 0; k < CLLM_MEM_COUNT; k++) {
                CHECKF(r.planned[k] == r.allocated[k] && pd->bytes[k] == r.allocated[k],
                       "%s %s: plan %zu, session planned %zu, allocated %zu", path,
                       cllm_mem_kind_str(k), pd->bytes[k], r.planned[k], r.allocated[k]);
            }
            CHECK(cllm_plan_device_total(plan, plan->n_devices - 1) <= pd->budget);
        }
        cllm_session_free(s);
        uint64_t bytes = 0, cached = 0;
        if (str->stream) cllm_stream_stats(str->stream, &bytes, &cached, NULL);
        CHECK(bytes >= str->stream_lay.tensor_bytes && cached <= bytes);
        g_last_read = bytes;
        g_last_cached = cached;
        free(a);
        free(b);
    }
    cllm_model_free(str);
    cllm_model_free(res);
    cllm_plan_free(plan);
}

/* Streamed (ring of 2, every layer that streaming can take) == resident. */
static void check_model(const char *path) {
    cllm_plan *plan = smallest_plan(path);
    if (plan) {
        const int n_layer = (int)plan->hp.n_layer;
        /* a model of one layer gains nothing from streaming it */
        CHECKF(n_layer == 1 || plan->n_streamed >= CLLM_MIN(3, n_layer),
               "%s: %d of %d layers streamed", path, plan->n_streamed, n_layer);
    }
    check_plan(path, plan);
}

/* A budget half a layer short of holding every layer: whole layers would
 * stream three (the ring's two and one more) and leave most of the budget
 * unused; layers streamed in part read strictly fewer bytes per token,
 * within the budget, and compute the resident logits bit for bit. The
 * bytes of whole layers the plan reports are those of the plan made with
 * CLLM_STREAM_SPLIT=0. */
static void check_split(const char *path) {
    cllm_plan_params fp = plan_params(0);
    cllm_plan *all = NULL;
    if (cllm_plan_file(path, &fp, &all) != CLLM_OK) {
        CHECKF(false, "%s: %s", path, cllm_last_error());
        return;
    }
    size_t layer = 0; /* layer 0's weights */
    for (int i = 0; i < all->n_tensors; i++) {
        const cllm_plan_tensor *t = &all->tensors[i];
        if (!t->state && i < cllm_context_n_tensors(all->weights->ctx) &&
            cllm_weights_group(all->weights, i) == 0) {
            layer += t->bytes;
        }
    }
    const size_t budget = cllm_plan_device_total(all, all->n_devices - 1) - layer / 2;
    cllm_plan_free(all);
    fp = plan_params(budget);
    cllm_plan *split = NULL, *whole = NULL;
    CHECKF(cllm_plan_file(path, &fp, &split) == CLLM_OK, "%s: %s", path, cllm_last_error());
    CHECK(setenv("CLLM_STREAM_SPLIT", "0", 1) == 0);
    CHECKF(cllm_plan_file(path, &fp, &whole) == CLLM_OK, "%s: %s", path, cllm_last_error());
    CHECK(unsetenv("CLLM_STREAM_SPLIT") == 0);
    if (split && whole) {
        fprintf(stderr,
                "%s split: budget %zu, %d layers streamed (%d in part), %zu bytes per token, "
                "resident %zu of %zu; whole layers: %d streamed, %zu bytes per token, "
                "resident %zu\n",
                path, budget, split->n_streamed, split->n_partial, split->stream_bytes,
                split->resident_bytes, split->weight_bytes, whole->n_streamed, whole->stream_bytes,
                whole->resident_bytes);
        CHECK(whole->n_partial == 0 && whole->n_streamed >= 3);
        CHECK(split->n_partial > 0);
        CHECK(split->stream_bytes_whole == whole->stream_bytes);
        CHECKF(split->stream_bytes < whole->stream_bytes,
               "%s: %zu bytes per token in part, %zu with whole layers", path, split->stream_bytes,
               whole->stream_bytes);
        CHECK(split->resident_bytes > whole->resident_bytes);
        CHECK(cllm_plan_device_total(split, split->n_devices - 1) <= budget);
        /* every streamed tensor marked so in the map, the others not */
        int n_str = 0;
        for (int i = 0; i < split->n_tensors; i++) n_str += split->tensors[i].streamed;
        CHECK(n_str > 0);
    }
    cllm_plan_free(whole);
    check_plan(path, split);
}

static bool gen_model(const char *out, const char *shape) {
    char vocab[4096], cmd[8192];
    refs_model_path(vocab, sizeof(vocab),
                    strstr(shape, "gpt2") ? "vocab/ggml-vocab-gpt-2.gguf"
                                          : "vocab/ggml-vocab-llama-spm.gguf");
    if (access(vocab, R_OK) != 0) {
        check_missing(vocab);
        return false;
    }
    snprintf(cmd, sizeof(cmd), "'%s' --vocab '%s' --out '%s' %s", g_gen, vocab, out, shape);
    const int rc = system(cmd);
    CHECKF(rc == 0, "%s", cmd);
    return rc == 0;
}

static long vm_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    const size_t n = strlen(key);
    while (fgets(line, sizeof(line), f)) {
        if (!strncmp(line, key, n) && line[n] == ':') v = atol(line + n + 1);
    }
    fclose(f);
    return v;
}

/* Sanitizers keep shadow memory and quarantines: no peak to check there. */
#define HWM_CHECKED (!CHECK_SANITIZED)

/* The allowance over the budget: host memory that is no tensor (the
 * file's metadata and vocabulary, the tokenizer, graphs, logits, thread
 * stacks, the allocator's slack). The graphs' metadata is sized for the
 * items of a speculative draft's pass too (n_seq + CLLM_SPEC_MAX_DRAFT
 * items, each a layer's attention of its own): 2.6 MiB on the 12 layers
 * of the largest model here. */
#define HWM_ALLOWANCE_KIB (12L << 10)

/* In a child: load `path` under `budget` (streamed), decode, and check the
 * peak resident memory. */
static void check_hwm(const char *path, size_t budget) {
    fflush(NULL);
    const pid_t pid = fork();
    if (pid == 0) {
        const long base = vm_kib("VmRSS");
        cllm_plan_params fp = plan_params(budget);
        cllm_plan *plan = NULL;
        cllm_model *m = NULL;
        int rc = 1;
        if (cllm_plan_file(path, &fp, &plan) != CLLM_OK) {
            fprintf(stderr, "hwm plan: %s\n", cllm_last_error());
            _exit(1);
        }
        cllm_model_params mp = cllm_model_default_params();
        mp.progress = false;
        mp.plan = plan;
        if (cllm_model_load(path, &mp, &m) != CLLM_OK) {
            fprintf(stderr, "hwm load: %s\n", cllm_last_error());
            _exit(1);
        }
        float *lg = run(m);
        const long hwm = vm_kib("VmHWM");
        const long limit = base + (long)(budget >> 10) + HWM_ALLOWANCE_KIB;
        fprintf(stderr,
                "stream hwm: %d of %lld layers streamed, file %lld KiB, budget %zu KiB, "
                "VmRSS at start %ld KiB, VmHWM %ld KiB (over the start: %ld KiB), limit %ld KiB\n",
                plan->n_streamed, (long long)plan->hp.n_layer,
                (long long)cllm_gguf_file_size(m->gguf) >> 10, budget >> 10, base, hwm, hwm - base,
                limit);
        if (!HWM_CHECKED) fprintf(stderr, "stream hwm: not checked under a sanitizer\n");
        if (lg && plan->n_streamed > 2 && hwm > 0 && (hwm <= limit || !HWM_CHECKED)) rc = 0;
        free(lg);
        cllm_model_free(m);
        cllm_plan_free(plan);
        _exit(rc);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "peak memory over budget (see above)");
}

static bool copy_file(const char *from, const char *to) {
    size_t n = 0;
    char *data = refs_read_file(from, &n);
    if (!data) return false;
    FILE *f = fopen(to, "wb"); /* in place when it exists: same inode */
    const bool ok = f && fwrite(data, 1, n, f) == n;
    if (f) fclose(f);
    free(data);
    return ok;
}

/* A file truncated after loading: decode fails with a clear error and the
 * session stays usable; after the file is restored, decoding goes on and
 * gives the resident logits. */
static void check_truncated(const char *orig) {
    char path[512], spare[512];
    snprintf(path, sizeof(path), "%s/trunc.gguf", g_dir);
    snprintf(spare, sizeof(spare), "%s/spare.gguf", g_dir);
    if (!copy_file(orig, path)) {
        CHECKF(false, "copy %s", orig);
        return;
    }
    cllm_model_params mp = cllm_model_default_params();
    mp.progress = false;
    cllm_model *res = NULL;
    CHECK(cllm_model_load(orig, &mp, &res) == CLLM_OK);
    float *ref = res ? run(res) : NULL;
    cllm_plan *plan = smallest_plan(path);
    cllm_model *m = NULL;
    mp.plan = plan;
    if (plan) CHECK(cllm_model_load(path, &mp, &m) == CLLM_OK);
    cllm_session *s = m ? new_session(m) : NULL;
    if (!s || !ref) goto done;
    const int64_t nv = cllm_session_n_vocab(s);
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = 1 + (int32_t)((i * 37 + 11) % (nv - 1));
    CHECK(cllm_session_decode(s, prompt, N_PROMPT) == CLLM_OK);
    int32_t tok = argmax(cllm_session_logits(s), nv);

    for (int round = 0; round < 2; round++) {
        struct stat sb;
        CHECK(stat(path, &sb) == 0);
        CHECK(truncate(path, sb.st_size / 2) == 0);
        cllm_log_set(quiet, NULL);
        for (int again = 0; again < 2; again++) {
            const cllm_status st = cllm_session_decode(s, &tok, 1);
            const char *msg = cllm_last_error();
            CHECKF(st == CLLM_ERR_IO && strstr(msg, "streamed layer") && strstr(msg, "truncated"),
                   "status %d: %s", (int)st, msg);
            CHECK(cllm_session_n_past(s) == N_PROMPT);
        }
        cllm_log_set(NULL, NULL);
        if (round == 0) {
            CHECK(copy_file(orig, path)); /* written back in place */
        } else {
            CHECK(copy_file(orig, spare) && rename(spare, path) == 0); /* a new file */
        }
        CHECKF(cllm_session_decode(s, &tok, 1) == CLLM_OK, "after restore: %s", cllm_last_error());
        CHECKF(memcmp(cllm_session_logits(s), ref + (size_t)nv, (size_t)nv * sizeof(float)) == 0,
               "logits after the restore differ from the resident ones");
        CHECK(cllm_session_truncate(s, N_PROMPT) == CLLM_OK);
    }
    /* overwritten in place, the same size: the layer's bytes differ from
     * its first read's, refused (never computed with), and the model says
     * so until the file is written back */
    {
        struct stat sb;
        CHECK(stat(path, &sb) == 0);
        FILE *f = fopen(path, "r+b");
        CHECK(f != NULL);
        if (f) {
            static char junk[65536];
            memset(junk, 0x3c, sizeof(junk));
            CHECK(fseek(f, (long)(sb.st_size / 2), SEEK_SET) == 0);
            CHECK(fwrite(junk, 1, sizeof(junk), f) == sizeof(junk));
            fclose(f);
        }
        /* (a pass may still run on layers the ring read before the write:
         * the next one reads them again) */
        cllm_log_set(quiet, NULL);
        bool refused = false;
        for (int i = 0; i < 3 && !refused; i++) {
            const cllm_status st = cllm_session_decode(s, &tok, 1);
            if (st == CLLM_OK) {
                CHECK(cllm_session_truncate(s, N_PROMPT) == CLLM_OK);
                continue;
            }
            refused = st == CLLM_ERR_IO && strstr(cllm_last_error(), "differ");
            CHECKF(refused, "overwritten: %d: %s", (int)st, cllm_last_error());
            if (!refused) break;
        }
        CHECK(refused);
        CHECK(cllm_model_check(m) == CLLM_ERR_IO);
        CHECK(copy_file(orig, path));
        bool ok = false;
        for (int i = 0; i < 3 && !ok; i++) ok = cllm_session_decode(s, &tok, 1) == CLLM_OK;
        cllm_log_set(NULL, NULL);
        CHECKF(ok, "after restore: %s", cllm_last_error());
        CHECK(cllm_model_check(m) == CLLM_OK);
        CHECK(memcmp(cllm_session_logits(s), ref + (size_t)nv, (size_t)nv * sizeof(float)) == 0);
    }
done:
    cllm_session_free(s);
    cllm_model_free(m);
    cllm_model_free(res);
    cllm_plan_free(plan);
    free(ref);
    unlink(path);
}

/* A budget that cannot hold even the ring, the state and the compute. */
/* ---- one read, many tokens ------------------------------------------------ */

#define OR_CTX   128
#define OR_BATCH 16
#define OR_SEQS  4
#define OR_STEPS 8
#define OR_GEN   80 /* stories260K keeps 14 of 38 draft tokens */

static cllm_stream_usage usage_of(const cllm_model *m) {
    cllm_stream_usage u;
    memset(&u, 0, sizeof(u));
    CHECK(cllm_model_stream_usage(m, &u) == CLLM_OK);
    return u;
}

static cllm_session *or_session(const cllm_model *m, int n_seq) {
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = OR_CTX;
    sp.n_batch = OR_BATCH;
    sp.n_threads = 2;
    sp.n_seq = n_seq;
    cllm_session *s = NULL;
    CHECKF(cllm_session_new(m, &sp, &s) == CLLM_OK, "session: %s", cllm_last_error());
    return s;
}

/* The passes and bytes from u0 to u1 are those of `passes` passes that
 * each read every streamed layer once (the reads ahead of the next pass,
 * at most a ring's worth of layers, are counted when they complete, so a
 * pass of slack either way). */
static void check_reads_of(const cllm_stream_usage *u0, const cllm_stream_usage *u1,
                           uint64_t passes, const char *what) {
    const uint64_t bytes = u1->bytes_read - u0->bytes_read;
    CHECKF(u1->passes - u0->passes == passes, "%s: %llu passes, expected %llu", what,
           (unsigned long long)(u1->passes - u0->passes), (unsigned long long)passes);
    CHECKF(bytes + u1->bytes_per_pass >= passes * u1->bytes_per_pass &&
               bytes <= (passes + 1) * u1->bytes_per_pass,
           "%s: %llu bytes read in %llu passes of %llu bytes", what, (unsigned long long)bytes,
           (unsigned long long)passes, (unsigned long long)u1->bytes_per_pass);
}

/* Greedy steps of sequences [0, n_seq) of s, every one in each pass (one
 * decode_seqs of n_seq items), after a prompt of 5 ids each; each step's
 * logits of each sequence into lg[(step * OR_SEQS + k) * nv]. */
static bool or_steps(cllm_session *s, int n_seq, float *lg, cllm_stream_usage *u0,
                     cllm_stream_usage *u1, const cllm_model *m) {
    const int64_t nv = cllm_session_n_vocab(s);
    int32_t tok[OR_SEQS];
    for (int k = 0; k < n_seq; k++) {
        int32_t prompt[5];
        for (int i = 0; i < 5; i++) prompt[i] = 1 + (int32_t)((k * 101 + i * 37 + 11) % (nv - 1));
        const cllm_seq_tokens it = {k, prompt, 5};
        if (cllm_session_decode_seqs(s, &it, 1) != CLLM_OK) return false;
        tok[k] = argmax(cllm_session_seq_logits(s, k), nv);
    }
    *u0 = usage_of(m);
    for (int t = 0; t < OR_STEPS; t++) {
        cllm_seq_tokens items[OR_SEQS];
        for (int k = 0; k < n_seq; k++) items[k] = (cllm_seq_tokens){k, &tok[k], 1};
        if (cllm_session_decode_seqs(s, items, n_seq) != CLLM_OK) return false;
        for (int k = 0; k < n_seq; k++) {
            const float *l = cllm_session_seq_logits(s, k);
            memcpy(lg + ((size_t)t * OR_SEQS + (size_t)k) * (size_t)nv, l,
                   (size_t)nv * sizeof(float));
            tok[k] = argmax(l, nv);
        }
    }
    *u1 = usage_of(m);
    return true;
}

/* cllm_generate_spec greedy on `m` (spec NULL: none); the ids into *res,
 * the stream's usage around it into u0, u1. */
static bool or_generate(const cllm_model *m, const int32_t *prompt, size_t n_prompt,
                        const cllm_spec_params *spec, cllm_generate_result *res,
                        cllm_stream_usage *u0, cllm_stream_usage *u1) {
    cllm_session *s = or_session(m, 1);
    cllm_sampler_params sp = cllm_sampler_default_params();
    sp.temperature = 0;
    cllm_sampler *smp = NULL;
    cllm_spec_params off = cllm_spec_default_params();
    off.type = CLLM_SPEC_NONE;
    bool ok = s && cllm_sampler_new_model(&sp, m, &smp) == CLLM_OK;
    *u0 = usage_of(m);
    ok = ok && cllm_generate_spec(s, smp, prompt, n_prompt, OR_GEN, spec ? spec : &off, NULL, NULL,
                                  res) == CLLM_OK;
    *u1 = usage_of(m);
    CHECKF(ok, "generate: %s", cllm_last_error());
    cllm_sampler_free(smp);
    cllm_session_free(s);
    return ok;
}

/*
 * One streamed read serves every token of a pass: the sequences of a step
 * and the drafted tokens of speculative decoding. On a model whose
 * streamed layers outnumber the ring's slots (each pass reads them all):
 *  - steps of 4 sequences and of 1 each count one pass and one read of
 *    every streamed layer (cllm_model_stream_usage), so the bytes streamed
 *    per generated token fall 4 times; each sequence's logits are those of
 *    the resident model decoding it alone, bit for bit;
 *  - greedy generation with n-gram drafts on a prompt that repeats keeps
 *    drafts, takes fewer passes and fewer bytes per generated token than
 *    without, and generates the same ids (as the resident model does).
 */
static void check_one_read(const char *path) {
    g_seqs = OR_SEQS, g_ctx = OR_CTX, g_batch = OR_BATCH;
    cllm_plan *plan = smallest_plan(path);
    g_seqs = 1, g_ctx = N_CTX, g_batch = N_BATCH;
    cllm_model_params mp = cllm_model_default_params();
    mp.progress = false;
    cllm_model *res = NULL, *str = NULL;
    CHECKF(cllm_model_load(path, &mp, &res) == CLLM_OK, "%s: %s", path, cllm_last_error());
    mp.plan = plan;
    mp.use_mmap = plan ? plan->use_mmap : false;
    if (plan)
        CHECKF(cllm_model_load(path, &mp, &str) == CLLM_OK, "%s: %s", path, cllm_last_error());
    if (!res || !str) goto done;
    const cllm_stream_usage u = usage_of(str);
    CHECKF(u.n_layers == plan->n_streamed && u.n_slots == plan->stream_slots &&
               u.n_layers > u.n_slots && u.bytes_per_pass == plan->stream_bytes,
           "%s: %d layers streamed through %d slots, %llu bytes a pass (plan %llu)", path,
           u.n_layers, u.n_slots, (unsigned long long)u.bytes_per_pass,
           (unsigned long long)plan->stream_bytes);
    if (u.n_layers <= u.n_slots) goto done;
    const cllm_stream_usage ur = usage_of(res);
    CHECK(ur.n_layers == 0 && ur.bytes_read == 0 && ur.passes == 0);

    /* 4 sequences a pass against 1 */
    const int64_t nv = vocab_of(res);
    const size_t n_lg = (size_t)OR_STEPS * OR_SEQS * (size_t)nv;
    float *lg_str = calloc(n_lg, sizeof(float));
    float *lg_one = calloc(n_lg, sizeof(float));
    cllm_session *s4 = or_session(str, OR_SEQS); /* the plan's one session */
    cllm_stream_usage a0, a1, b0, b1, r0, r1;
    if (lg_str && lg_one && s4 && or_steps(s4, OR_SEQS, lg_str, &a0, &a1, str) &&
        (cllm_session_reset(s4), or_steps(s4, 1, lg_one, &b0, &b1, str))) {
        check_reads_of(&a0, &a1, OR_STEPS, "4 sequences a pass");
        check_reads_of(&b0, &b1, OR_STEPS, "1 sequence a pass");
        const double per4 = (double)(a1.bytes_read - a0.bytes_read) / (OR_STEPS * OR_SEQS);
        const double per1 = (double)(b1.bytes_read - b0.bytes_read) / OR_STEPS;
        fprintf(stderr, "%s: %.0f bytes streamed per token with 4 sequences, %.0f with 1\n", path,
                per4, per1);
        CHECKF(per4 * 2 < per1, "%s: %.0f bytes per token with 4 sequences, %.0f with 1", path,
               per4, per1);
        /* each sequence as the resident model decodes it alone */
        for (int k = 0; k < OR_SEQS; k++) {
            cllm_session *r = or_session(res, OR_SEQS);
            float *lg = calloc(n_lg, sizeof(float));
            bool ok = r && lg;
            /* sequence k alone: its prompt and steps as sequence 0 of
             * or_steps would give them, decoded as sequence k */
            if (ok) {
                int32_t prompt[5];
                for (int i = 0; i < 5; i++)
                    prompt[i] = 1 + (int32_t)((k * 101 + i * 37 + 11) % (nv - 1));
                const cllm_seq_tokens it = {k, prompt, 5};
                ok = cllm_session_decode_seqs(r, &it, 1) == CLLM_OK;
                int32_t tok = ok ? argmax(cllm_session_seq_logits(r, k), nv) : 0;
                for (int t = 0; ok && t < OR_STEPS; t++) {
                    const cllm_seq_tokens one = {k, &tok, 1};
                    ok = cllm_session_decode_seqs(r, &one, 1) == CLLM_OK;
                    if (!ok) break;
                    const float *l = cllm_session_seq_logits(r, k);
                    memcpy(lg + (size_t)t * (size_t)nv, l, (size_t)nv * sizeof(float));
                    tok = argmax(l, nv);
                }
            }
            CHECKF(ok, "resident sequence %d: %s", k, cllm_last_error());
            for (int t = 0; ok && t < OR_STEPS; t++) {
                CHECKF(!memcmp(lg + (size_t)t * (size_t)nv,
                               lg_str + ((size_t)t * OR_SEQS + (size_t)k) * (size_t)nv,
                               (size_t)nv * sizeof(float)),
                       "%s: sequence %d, step %d: streamed with 4 a pass differs from resident "
                       "alone",
                       path, k, t);
                if (k == 0) {
                    CHECKF(!memcmp(lg + (size_t)t * (size_t)nv,
                                   lg_one + (size_t)t * OR_SEQS * (size_t)nv,
                                   (size_t)nv * sizeof(float)),
                           "%s: step %d: streamed alone differs from resident alone", path, t);
                }
            }
            free(lg);
            cllm_session_free(r);
        }
    } else {
        CHECKF(false, "%s: steps of several sequences: %s", path, cllm_last_error());
    }
    cllm_session_free(s4);
    free(lg_str), free(lg_one);

    /* n-gram drafts on a prompt that repeats */
    static const char text[] = "Tom had a red ball. Tom had a red ball. Tom had a red ball. Tom "
                               "had a red ball. Tom had a";
    int32_t prompt[128];
    size_t n_prompt = 0;
    if (cllm_tokenize(str, text, strlen(text), true, false, prompt, 128, &n_prompt) != CLLM_OK) {
        CHECKF(false, "%s: tokenize: %s", path, cllm_last_error());
        goto done;
    }
    cllm_generate_result g_res = {0}, g_off = {0}, g_spec = {0};
    const cllm_spec_params spec = cllm_spec_default_params();
    if (or_generate(res, prompt, n_prompt, NULL, &g_res, &r0, &r1) &&
        or_generate(str, prompt, n_prompt, NULL, &g_off, &a0, &a1) &&
        or_generate(str, prompt, n_prompt, &spec, &g_spec, &b0, &b1)) {
        CHECKF(g_res.n_ids == g_off.n_ids && g_res.n_ids == g_spec.n_ids && g_res.n_ids > 0 &&
                   !memcmp(g_res.ids, g_off.ids, g_res.n_ids * sizeof(int32_t)) &&
                   !memcmp(g_res.ids, g_spec.ids, g_res.n_ids * sizeof(int32_t)),
               "%s: %zu ids resident, %zu streamed, %zu streamed with drafts: they differ", path,
               g_res.n_ids, g_off.n_ids, g_spec.n_ids);
        const uint64_t p_off = a1.passes - a0.passes, p_spec = b1.passes - b0.passes;
        const double n = (double)g_spec.n_ids;
        const double by_off = (double)(a1.bytes_read - a0.bytes_read) / n;
        const double by_spec = (double)(b1.bytes_read - b0.bytes_read) / n;
        fprintf(stderr,
                "%s: %zu ids, %zu of %zu draft tokens kept: %llu passes and %.0f bytes per "
                "token with drafts, %llu and %.0f without\n",
                path, g_spec.n_ids, g_spec.n_accepted, g_spec.n_drafted, (unsigned long long)p_spec,
                by_spec, (unsigned long long)p_off, by_off);
        CHECKF(g_spec.n_accepted > 0 && g_off.n_drafted == 0, "%s: %zu draft tokens kept", path,
               g_spec.n_accepted);
        /* a pass per generated token that went through the model after the
         * prompt's; with drafts, one pass for each kept token less */
        const uint64_t prompt_passes = (n_prompt + OR_BATCH - 1) / OR_BATCH;
        CHECKF(p_off == prompt_passes + g_off.n_gen_decoded &&
                   p_spec == prompt_passes + g_spec.n_gen_decoded - g_spec.n_accepted &&
                   p_spec < p_off,
               "%s: %llu passes with drafts (%zu tokens decoded, %zu kept), %llu without (%zu "
               "decoded; %llu of the prompt)",
               path, (unsigned long long)p_spec, g_spec.n_gen_decoded, g_spec.n_accepted,
               (unsigned long long)p_off, g_off.n_gen_decoded, (unsigned long long)prompt_passes);
        check_reads_of(&a0, &a1, p_off, "generation without drafts");
        check_reads_of(&b0, &b1, p_spec, "generation with drafts");
        CHECKF(by_spec < by_off, "%s: %.0f bytes per token with drafts, %.0f without", path,
               by_spec, by_off);
    }
    cllm_generate_result_free(&g_res);
    cllm_generate_result_free(&g_off);
    cllm_generate_result_free(&g_spec);
done:
    cllm_model_free(str);
    cllm_model_free(res);
    cllm_plan_free(plan);
}

static void check_too_small(const char *path) {
    cllm_plan_params fp = plan_params((size_t)1 << 20);
    cllm_plan *plan = (cllm_plan *)0x1;
    cllm_log_set(quiet, NULL);
    CHECK(cllm_plan_file(path, &fp, &plan) == CLLM_ERR_TOO_LARGE);
    cllm_log_set(NULL, NULL);
    CHECK(plan == (cllm_plan *)0x1);
    const char *msg = cllm_last_error();
    CHECKF(strstr(msg, "every layer streamed") && strstr(msg, "ring of 2 slots") &&
               strstr(msg, "short"),
           "%s", msg);
    /* bad slot counts */
    fp = plan_params(0);
    fp.stream_slots = 1;
    CHECK(cllm_plan_file(path, &fp, &plan) == CLLM_ERR_INVALID_ARG);
    fp.stream_slots = CLLM_STREAM_MAX_SLOTS + 1;
    CHECK(cllm_plan_file(path, &fp, &plan) == CLLM_ERR_INVALID_ARG);
}

/* Streamed layers are copied from the page cache where another reader left
 * the file there (a warm cache), and read from storage where it did not:
 * the resident logits either way (check_model), the bytes found in the
 * cache counted as such. The other checks run with CLLM_STREAM_PAGE_CACHE=0
 * (main), so that they read from storage although the test just wrote the
 * file. */
static void check_page_cache(const char *path) {
    /* the file in the page cache (this process wrote it: it may ask
     * mincore where cachestat is missing) */
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    if (fd >= 0) {
        char buf[1 << 16];
        while (read(fd, buf, sizeof(buf)) > 0) {
        }
        close(fd);
    }
    CHECK(unsetenv("CLLM_STREAM_PAGE_CACHE") == 0);
    check_model(path);
    fprintf(stderr, "%s: page cache on: %llu of %llu bytes read were cached\n", path,
            (unsigned long long)g_last_cached, (unsigned long long)g_last_read);
    CHECKF(g_last_cached > 0, "%s: a file in the page cache was read from storage", path);
    CHECK(setenv("CLLM_STREAM_PAGE_CACHE", "0", 1) == 0);
    check_model(path);
    CHECKF(g_last_cached == 0, "%s: CLLM_STREAM_PAGE_CACHE=0, but %llu bytes were cached", path,
           (unsigned long long)g_last_cached);
}

/* Several reads in flight, in pieces of 3 blocks (12 KiB: runs are whole
 * blocks, not whole pieces, so every run ends on a short piece). */
static void check_reads(const char *path) {
    cllm_stream_reads_set(3, 3 * CLLM_STREAM_BLOCK);
    check_model(path);
    check_truncated(path);
    for (int buffered = 0; buffered < 2; buffered++) {
        double bw = 0;
        CHECKF(cllm_stream_probe_read(path, (size_t)1 << 20, (size_t)1 << 20, 3,
                                      3 * CLLM_STREAM_BLOCK, buffered, &bw, NULL) == CLLM_OK &&
                   bw > 0,
               "probe: %s", cllm_last_error());
    }
    cllm_stream_reads_set(0, 0);
}

/* Streamed == resident on the models whose matrices the CPU stores its
 * own way at levels from AVX2 on (the file comment). */
static void check_layouts(void) {
    fprintf(stderr, "CPU features: %s\n", cllm_cpu_features());
    char path[4096];
    if (refs_fetch_model("smollm2", path, sizeof(path))) check_model(path);
    if (!g_gen) {
        check_missing("cllm-gen-model (argv[1])");
        return;
    }
    static const char *const shapes[] = {
        /* K = 256 and 768: whole Q4_K super-blocks; the output too */
        "--n-embd 256 --n-layer 4 --n-head 4 --n-head-kv 2 --n-ff 768 --n-ctx 256 "
        "--type q4_k --seed 6 --arch llama",
        "--n-embd 128 --n-layer 4 --n-head 4 --n-head-kv 2 --n-ff 384 --n-ctx 256 "
        "--type q4_0 --seed 7 --arch llama",
    };
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        snprintf(path, sizeof(path), "%s/layout-%zu.gguf", g_dir, i);
        if (gen_model(path, shapes[i])) {
            check_model(path);
            check_split(path); /* resident weights of streamed layers repacked too */
        }
        unlink(path);
    }
}

int main(int argc, char **argv) {
    g_gen = argc > 1 ? argv[1] : NULL;
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof(g_dir), "%s/cllm-test-stream-XXXXXX", tmp && *tmp ? tmp : P_tmpdir);
    if (!mkdtemp(g_dir)) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    if (argc > 2 && strcmp(argv[2], "layouts") == 0) {
        check_layouts();
        rmdir(g_dir);
        return check_summary("test_stream (layouts)");
    }
    /* reads from storage (check_page_cache reads from the page cache) */
    CHECK(setenv("CLLM_STREAM_PAGE_CACHE", "0", 1) == 0);
    char small[512], big[512];
    snprintf(small, sizeof(small), "%s/small-q8.gguf", g_dir);
    snprintf(big, sizeof(big), "%s/big-q8.gguf", g_dir);
    /* first, while the process holds little: 12 layers of 3.4 MB and 17 MB
     * of embeddings (58 MB) under a budget of 32 MiB */
    if (g_gen && gen_model(big, "--n-embd 256 --n-layer 12 --n-head 4 --n-head-kv 2 "
                                "--n-ff 4096 --n-ctx 256 --type q8_0 --seed 4 --arch llama")) {
        check_hwm(big, (size_t)32 << 20);
    }
    static const char *const models[] = {
        /* (not tinyllamas-stories-260k-q8_0.gguf: its Q8_0 rows are not
         * whole blocks, and cllm does not load it at all) */
        "stories260K.gguf",
        "tinyllamas-stories-260k-f32.gguf",
        "TinyLLama-v0.Q4_0.gguf",
        "llama-2-tiny-random.gguf",
    };
    char path[4096];
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
        refs_model_path(path, sizeof(path), models[i]);
        if (access(path, R_OK) != 0) {
            check_missing(path);
            continue;
        }
        check_model(path);
        if (i == 0) check_one_read(path); /* stories260K */
    }
    if (!g_gen) {
        check_missing("cllm-gen-model (argv[1])");
    } else {
        if (gen_model(small, "--n-embd 128 --n-layer 6 --n-head 4 --n-head-kv 2 --n-ff 512 "
                             "--n-ctx 256 --type q8_0 --seed 3 --arch llama")) {
            check_model(small);
            check_split(small);
            g_slots = 3; /* and a ring of 3 */
            check_model(small);
            g_slots = 2;
            check_truncated(small);
            check_too_small(small);
            check_reads(small);
            check_page_cache(small);
        }
        char gpt2[512];
        snprintf(gpt2, sizeof(gpt2), "%s/small-gpt2.gguf", g_dir);
        if (gen_model(gpt2, "--arch gpt2 --n-embd 128 --n-layer 5 --n-head 4 --n-ff 512 "
                            "--n-ctx 256 --type f16 --seed 5")) {
            check_model(gpt2);
        }
        unlink(gpt2);
    }
    unlink(small);
    unlink(big);
    rmdir(g_dir);
    return check_summary("test_stream");
}
