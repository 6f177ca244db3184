/*
 * The fit planner on stories260K: the CPU-only plan equals what a session
 * allocates, kind by kind; a budget on the test device splits the layers;
 * impossible budgets are errors that say by how much and what would fit;
 * malformed budgets are errors.
 */
#include "backend/cpu/cpu.h"
#include "backend/test/test-backend.h"
#include "common/check.h"
#include "common/refs.h"
#include "runtime/fit.h"
#include "runtime/session.h"

#include <stdlib.h>
#include <string.h>

static void quiet(cllm_log_level level, const char *msg, void *ud) {
    (void)level, (void)msg, (void)ud;
}

static char g_path[4096];

static cllm_plan *plan_or_null(const cllm_plan_params *fp) {
    cllm_plan *plan = NULL;
    const cllm_status st = cllm_plan_file(g_path, fp, &plan);
    CHECKF(st == CLLM_OK, "plan: %s", cllm_last_error());
    return st == CLLM_OK ? plan : NULL;
}

/* The CPU-only plan is what a session of the same shape allocates. */
static void test_cpu_plan_is_exact(void) {
    cllm_plan_params fp = cllm_plan_default_params();
    fp.n_ctx = 128;
    fp.n_batch = 32;
    fp.n_threads = 2;
    fp.use_mmap = false;
    cllm_plan *plan = plan_or_null(&fp);
    if (!plan) return;
    CHECK(plan->n_devices == 1 && plan->devices[0].dev == cllm_cpu_device());
    CHECK(plan->devices[0].n_layers == 5 && plan->output_device == 0);
    CHECK(plan->n_probes >= 1 && plan->plan_ms < 100.0);

    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = false; /* weights laid out as the plan lays them out */
    cllm_model *m = NULL;
    CHECK(cllm_model_load(g_path, &mp, &m) == CLLM_OK);
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 128;
    sp.n_batch = 32;
    sp.n_threads = 2;
    cllm_session *s = NULL;
    CHECK(m && cllm_session_new(m, &sp, &s) == CLLM_OK);
    if (s) {
        const cllm_memory_report r = cllm_session_memory(s);
        for (int k = 0; k < CLLM_MEM_COUNT; k++) {
            CHECKF(plan->devices[0].bytes[k] == r.allocated[k], "%s: plan %zu, session %zu",
                   cllm_mem_kind_str(k), plan->devices[0].bytes[k], r.allocated[k]);
        }
    }
    cllm_session_free(s);
    cllm_model_free(m);

    /* two sessions: state, compute and workspace twice, weights once */
    fp.n_sessions = 2;
    cllm_plan *two = plan_or_null(&fp);
    if (two) {
        CHECK(two->devices[0].bytes[CLLM_MEM_WEIGHTS] == plan->devices[0].bytes[CLLM_MEM_WEIGHTS]);
        for (int k = CLLM_MEM_STATE; k < CLLM_MEM_COUNT; k++) {
            CHECK(two->devices[0].bytes[k] == 2 * plan->devices[0].bytes[k]);
        }
    }
    cllm_plan_free(two);

    /* a session of three sequences: three KV caches, and the compute of
     * its multi-sequence batches; exactly what such a session allocates */
    fp.n_sessions = 1;
    fp.n_seq = 3;
    cllm_plan *seqs = plan_or_null(&fp);
    mp.use_mmap = false;
    m = NULL;
    s = NULL;
    sp.n_seq = 3;
    CHECK(seqs && cllm_model_load(g_path, &mp, &m) == CLLM_OK &&
          cllm_session_new(m, &sp, &s) == CLLM_OK);
    if (seqs && s) {
        CHECK(seqs->devices[0].bytes[CLLM_MEM_STATE] == 3 * plan->devices[0].bytes[CLLM_MEM_STATE]);
        const cllm_memory_report r = cllm_session_memory(s);
        for (int k = 0; k < CLLM_MEM_COUNT; k++) {
            CHECKF(seqs->devices[0].bytes[k] == r.allocated[k] && r.planned[k] == r.allocated[k],
                   "3 sequences, %s: plan %zu, session %zu", cllm_mem_kind_str(k),
                   seqs->devices[0].bytes[k], r.allocated[k]);
        }
        char *t3 = NULL;
        size_t n3 = 0;
        FILE *f3 = open_memstream(&t3, &n3);
        cllm_plan_print(seqs, f3, true);
        fclose(f3);
        CHECK(t3 && strstr(t3, "1 session of 3 sequences") && strstr(t3, "cache_v-4.2"));
        free(t3);
    }
    cllm_session_free(s);
    cllm_model_free(m);
    cllm_plan_free(seqs);

    /* the verbose listing names every tensor once */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cllm_plan_print(plan, f, true);
    cllm_plan_print_json(plan, f, true);
    fclose(f);
    CHECK(text && strstr(text, "blk.4.ffn_down.weight") && strstr(text, "cache_v-4") &&
          strstr(text, "planned in") && strstr(text, "\"plan_ms\""));
    free(text);
    cllm_plan_free(plan);
}

/* A budget on the test device: layers from the end go there, as many as fit. */
static void test_split_plan(void) {
    cllm_test_device_config cfg = cllm_test_device_config_default();
    cfg.budget = (size_t)64 << 20;
    CHECK(cllm_test_device_enable(&cfg, NULL) == CLLM_OK);
    cllm_plan_params fp = cllm_plan_default_params();
    fp.n_ctx = 512;

    /* room for everything: all layers and the output on test0 */
    cllm_plan *plan = plan_or_null(&fp);
    if (plan) {
        CHECK(plan->n_devices == 2 && strcmp(plan->devices[0].name, "test0") == 0);
        CHECK(plan->devices[0].n_layers == 5 && plan->output_device == 0);
        CHECK(plan->input_device == 1);
        CHECK(plan->devices[0].bytes[CLLM_MEM_COMPUTE] > 0);
        CHECK(cllm_plan_device_total(plan, 0) <= plan->devices[0].budget);
    }
    cllm_plan_free(plan);

    /* a budget between: some layers, the last ones, and the output on the cpu */
    CHECK(cllm_plan_add_budget(&fp, "test0", 2600 << 10) == CLLM_OK);
    plan = plan_or_null(&fp);
    if (plan) {
        const int k = plan->devices[0].n_layers;
        CHECKF(k > 0 && k < 5, "%d layers on test0", k);
        for (int l = 0; l < 5; l++) CHECK(plan->layer_device[l] == (l >= 5 - k ? 0 : 1));
        CHECK(plan->output_device == 1 && plan->devices[0].budget_given);
        CHECK(cllm_plan_device_total(plan, 0) <= (size_t)2600 << 10);
        /* one layer more would not have fit: the total grows by at least a layer */
        const size_t per =
            (plan->devices[0].bytes[CLLM_MEM_WEIGHTS] + plan->devices[0].bytes[CLLM_MEM_STATE]) /
            (size_t)k;
        CHECK(cllm_plan_device_total(plan, 0) + per > (size_t)2600 << 10);
    }
    cllm_plan_free(plan);

    /* nothing fits on test0: everything on the cpu */
    CHECK(cllm_plan_add_budget(&fp, "test0", 1000) == CLLM_OK);
    plan = plan_or_null(&fp);
    if (plan) {
        CHECK(plan->devices[0].n_layers == 0 && cllm_plan_device_total(plan, 0) == 0);
        CHECK(plan->devices[1].n_layers == 5);
    }
    cllm_plan_free(plan);
    cllm_test_device_disable();
}

static void test_impossible(void) {
    cllm_plan_params fp = cllm_plan_default_params();
    fp.n_ctx = 2048;
    fp.stream_slots = 0; /* refuse rather than stream (test_stream covers streaming) */
    CHECK(cllm_plan_parse_mem(&fp, "cpu=3MiB") == CLLM_OK);
    cllm_plan *plan = (cllm_plan *)0x1;
    cllm_log_set(quiet, NULL);
    CHECK(cllm_plan_file(g_path, &fp, &plan) == CLLM_ERR_TOO_LARGE);
    CHECK(plan == (cllm_plan *)0x1);
    const char *msg = cllm_last_error();
    CHECKF(strstr(msg, "cpu") && strstr(msg, "short") && strstr(msg, "largest context"), "%s", msg);
    const char *at = strstr(msg, "fits these budgets is ");
    const long long best = at ? atoll(at + strlen("fits these budgets is ")) : 0;
    cllm_log_set(NULL, NULL);
    CHECK(best > 1 && best < 2048);
    /* what it says fits, fits; one more does not */
    fp.n_ctx = best;
    cllm_plan *ok = plan_or_null(&fp);
    CHECK(ok && cllm_plan_device_total(ok, 0) <= (size_t)3 << 20);
    cllm_plan_free(ok);
    fp.n_ctx = best + 1;
    cllm_log_set(quiet, NULL);
    CHECK(cllm_plan_file(g_path, &fp, &plan) == CLLM_ERR_TOO_LARGE);

    /* weights alone too large */
    CHECK(cllm_plan_parse_mem(&fp, "cpu=1MiB") == CLLM_OK);
    CHECK(cllm_plan_file(g_path, &fp, &plan) == CLLM_ERR_TOO_LARGE);
    CHECK(strstr(cllm_last_error(), "not even a context of 1") != NULL);

    /* malformed budgets */
    cllm_plan_params bad = cllm_plan_default_params();
    CHECK(cllm_plan_parse_mem(&bad, "cpu=lots") == CLLM_ERR_INVALID_ARG);
    CHECK(strstr(cllm_last_error(), "lots") != NULL);
    CHECK(cllm_plan_parse_mem(&bad, "cpu=-1G") == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_plan_parse_mem(&bad, "cpu") == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_plan_parse_mem(&bad, "=1G") == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_plan_parse_mem(&bad, "cpu=") == CLLM_ERR_INVALID_ARG);
    CHECK(bad.n_budgets == 0);
    CHECK(cllm_plan_parse_mem(&bad, "cuda7=1G") == CLLM_OK); /* unknown: the planner says */
    CHECK(cllm_plan_file(g_path, &bad, &plan) == CLLM_ERR_INVALID_ARG);
    CHECK(strstr(cllm_last_error(), "unknown device \"cuda7\"") != NULL);
    cllm_plan_params range = cllm_plan_default_params();
    range.n_sessions = 0;
    CHECK(cllm_plan_file(g_path, &range, &plan) == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_plan_file("does/not/exist.gguf", NULL, &plan) == CLLM_ERR_IO);
    cllm_log_set(NULL, NULL);
    CHECK(plan == (cllm_plan *)0x1);
}

/* A model loaded with a plan refuses sessions larger than the plan (context,
 * batch, KV type, threads, count), and a load that disagrees with the plan. */
static void test_sessions_within_plan(void) {
    cllm_plan_params fp = cllm_plan_default_params();
    fp.n_ctx = 64;
    fp.n_batch = 16;
    fp.n_threads = 1;
    fp.n_sessions = 2;
    cllm_plan *plan = plan_or_null(&fp);
    if (!plan) return;
    cllm_model_params mp = cllm_model_default_params();
    cllm_model *m = NULL;
    mp.plan = plan;
    mp.use_mmap = false; /* the plan was made for mapped weights */
    cllm_log_set(quiet, NULL);
    CHECK(cllm_model_load(g_path, &mp, &m) == CLLM_ERR_INVALID_ARG && !m);
    CHECK(strstr(cllm_last_error(), "mapped") != NULL);
    mp.use_mmap = true;
    CHECK(cllm_model_load(g_path, &mp, &m) == CLLM_OK);
    cllm_plan_free(plan); /* the model keeps what it needs */
    if (!m) goto done;
    static const struct {
        int64_t n_ctx, n_batch;
        cllm_type kv;
        int threads;
        const char *what;
    } k_over[] = {
        {512, 16, CLLM_TYPE_F16, 1, "context size 512 exceeds the 64"},
        {64, 32, CLLM_TYPE_F16, 1, "batch size 32 exceeds the 16"},
        {64, 16, CLLM_TYPE_F32, 1, "KV cache type f32/f32 (K/V)"},
        {64, 16, CLLM_TYPE_F16, 2, "CPU threads (workspace) 2 exceeds the 1"},
    };
    for (size_t i = 0; i < CLLM_ARRAY_SIZE(k_over); i++) {
        cllm_session_params sp = cllm_session_default_params();
        sp.n_ctx = k_over[i].n_ctx;
        sp.n_batch = k_over[i].n_batch;
        sp.type_k = sp.type_v = k_over[i].kv;
        sp.n_threads = k_over[i].threads;
        cllm_session *s = NULL;
        CHECKF(cllm_session_new(m, &sp, &s) == CLLM_ERR_TOO_LARGE && !s, "case %zu", i);
        CHECKF(strstr(cllm_last_error(), k_over[i].what) != NULL, "case %zu: %s", i,
               cllm_last_error());
    }
    /* within the plan: two sessions (smaller ones too), not a third */
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 64;
    sp.n_batch = 16;
    sp.n_threads = 1;
    cllm_session *a = NULL, *b = NULL, *c = NULL;
    CHECK(cllm_session_new(m, &sp, &a) == CLLM_OK);
    sp.n_ctx = 32;
    CHECK(cllm_session_new(m, &sp, &b) == CLLM_OK);
    CHECK(cllm_session_new(m, &sp, &c) == CLLM_ERR_TOO_LARGE && !c);
    CHECK(strstr(cllm_last_error(), "2 sessions are open") != NULL);
    cllm_session_free(b);
    CHECK(cllm_session_new(m, &sp, &c) == CLLM_OK); /* a slot was freed */
    cllm_session_free(c);
    cllm_session_free(a);
done:
    cllm_log_set(NULL, NULL);
    cllm_model_free(m);
}

/* The architecture records each weight's layer: the placement never parses
 * names. */
static void test_weight_groups(void) {
    cllm_model *m = NULL;
    CHECK(cllm_model_load(g_path, NULL, &m) == CLLM_OK);
    if (!m) return;
    int per_layer[8] = {0}, in = 0, out = 0;
    for (int i = 0; i < cllm_context_n_tensors(m->weights->ctx); i++) {
        const int g = cllm_weights_group(m->weights, i);
        const char *name = cllm_context_tensor(m->weights->ctx, i)->name;
        char want[16];
        if (g >= 0 && g < 8) {
            per_layer[g]++;
            snprintf(want, sizeof(want), "blk.%d.", g);
            CHECKF(strncmp(name, want, strlen(want)) == 0, "%s in layer %d", name, g);
        } else if (g == CLLM_WEIGHT_OUTPUT) {
            out++;
            CHECKF(strncmp(name, "output", 6) == 0, "%s in the output group", name);
        } else {
            in++;
            CHECKF(g == CLLM_WEIGHT_INPUT && strncmp(name, "blk.", 4) != 0, "%s: group %d", name,
                   g);
        }
    }
    for (int l = 0; l < 5; l++) CHECKF(per_layer[l] == 9, "layer %d: %d weights", l, per_layer[l]);
    CHECK(in >= 1 && out >= 1);
    cllm_model_free(m);
}

static int32_t argmax(const float *x, int64_t n) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++) {
        if (x[i] > x[best]) best = (int32_t)i;
    }
    return best;
}

static void snapshot(size_t out[2][CLLM_MEM_COUNT], cllm_device *test) {
    for (int k = 0; k < CLLM_MEM_COUNT; k++) {
        out[0][k] = cllm_device_allocated(test, k);
        out[1][k] = cllm_device_allocated(cllm_cpu_device(), k);
    }
}

/* Loads the model with the plan and runs a session: NULL on failure (with
 * everything freed). */
static cllm_status load_and_run(const cllm_plan *plan, const cllm_plan_params *fp, cllm_model **mo,
                                cllm_session **so) {
    cllm_model_params mp = cllm_model_default_params();
    mp.use_mmap = fp->use_mmap;
    mp.plan = plan;
    cllm_model *m = NULL;
    CLLM_TRY(cllm_model_load(g_path, &mp, &m));
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = fp->n_ctx;
    sp.n_batch = fp->n_batch;
    sp.n_threads = fp->n_threads;
    sp.type_k = fp->type_k, sp.type_v = fp->type_v;
    cllm_session *s = NULL;
    const cllm_status st = cllm_session_new(m, &sp, &s);
    if (st != CLLM_OK) {
        cllm_model_free(m);
        return st;
    }
    *mo = m;
    *so = s;
    return CLLM_OK;
}

/* cllm run with a plan: layers on the test device, bytes per device and kind
 * as planned, the reference tokens, and failures that leave nothing behind. */
static void test_run_with_plan(const char *json) {
    cllm_test_device_config cfg = cllm_test_device_config_default();
    cfg.budget = (size_t)64 << 20;
    cllm_device *test = NULL;
    CHECK(cllm_test_device_enable(&cfg, &test) == CLLM_OK);
    cllm_plan_params fp = cllm_plan_default_params();
    fp.n_ctx = 128;
    fp.n_batch = 64;
    fp.n_threads = 2;
    fp.type_k = fp.type_v = CLLM_TYPE_F32;
    for (int mmap = 0; mmap < 2; mmap++) {
        fp.use_mmap = mmap;
        fp.n_budgets = 0;
        /* a budget for about half of the layers */
        cllm_plan *all = plan_or_null(&fp);
        if (!all) return;
        const cllm_plan_device *t0 = &all->devices[0];
        const size_t per = (t0->bytes[CLLM_MEM_WEIGHTS] + t0->bytes[CLLM_MEM_STATE]) / 5;
        const size_t budget =
            t0->bytes[CLLM_MEM_COMPUTE] + t0->bytes[CLLM_MEM_WORKSPACE] + 5 * per / 2;
        cllm_plan_free(all);
        CHECK(cllm_plan_add_budget(&fp, "test0", budget) == CLLM_OK);
        cllm_plan *plan = plan_or_null(&fp);
        if (!plan) return;
        CHECKF(plan->devices[0].n_layers == 2, "%d layers on test0", plan->devices[0].n_layers);

        size_t before[2][CLLM_MEM_COUNT], after[2][CLLM_MEM_COUNT];
        snapshot(before, test);
        cllm_model *m = NULL;
        cllm_session *s = NULL;
        const cllm_status st = load_and_run(plan, &fp, &m, &s);
        CHECKF(st == CLLM_OK, "load and session: %s", cllm_last_error());
        if (st != CLLM_OK) {
            cllm_plan_free(plan);
            return;
        }
        snapshot(after, test);
        for (int d = 0; d < 2; d++) {
            for (int k = 0; k < CLLM_MEM_COUNT; k++) {
                CHECKF(after[d][k] - before[d][k] == plan->devices[d].bytes[k],
                       "mmap %d, %s %s: allocated %zu, planned %zu", mmap, plan->devices[d].name,
                       cllm_mem_kind_str(k), after[d][k] - before[d][k], plan->devices[d].bytes[k]);
                const cllm_memory_report r = cllm_session_memory_on(s, plan->devices[d].dev);
                CHECK(r.planned[k] == r.allocated[k] && r.planned[k] == plan->devices[d].bytes[k]);
            }
        }
        /* the reference tokens */
        int32_t prompt[16], want[32], got[32];
        const int n_prompt = refs_int_array(json, "stories260K.gguf", "prompt_ids", prompt, 16);
        CHECK(refs_int_array(json, "stories260K.gguf", "greedy_32_ids", want, 32) == 32);
        cllm_status ds = cllm_session_decode(s, prompt, n_prompt);
        for (int i = 0; i < 32 && ds == CLLM_OK; i++) {
            got[i] = argmax(cllm_session_logits(s), cllm_session_n_vocab(s));
            if (i + 1 < 32) ds = cllm_session_decode(s, &got[i], 1);
        }
        CHECKF(ds == CLLM_OK, "decode: %s", cllm_last_error());
        CHECK(ds == CLLM_OK && memcmp(got, want, sizeof(want)) == 0);
        cllm_session_free(s);
        cllm_model_free(m);
        snapshot(after, test);
        CHECK(memcmp(before, after, sizeof(before)) == 0);

        /* every allocation the plan makes on test0 fails in turn: an error,
         * and nothing stays allocated anywhere */
        cllm_log_set(quiet, NULL);
        for (int n = 1; n <= 4; n++) {
            cllm_test_device_fail_alloc(n);
            m = NULL;
            s = NULL;
            const cllm_status fs = load_and_run(plan, &fp, &m, &s);
            CHECKF(fs == CLLM_ERR_DEVICE_MEMORY, "allocation %d: status %d", n, (int)fs);
            if (fs == CLLM_OK) {
                cllm_session_free(s);
                cllm_model_free(m);
            }
            snapshot(after, test);
            CHECKF(memcmp(before, after, sizeof(before)) == 0, "allocation %d: leftovers", n);
        }
        cllm_test_device_fail_alloc(0);
        cllm_log_set(NULL, NULL);
        cllm_plan_free(plan);
    }
    cllm_test_device_disable();
}

int main(void) {
    unsetenv("CLLM_TEST_DEVICE");
    char buf[32];
    CHECK(strcmp(cllm_format_size(1536, buf, sizeof(buf)), "1.50 KiB") == 0);
    CHECK(strcmp(cllm_format_size(100, buf, sizeof(buf)), "100 B") == 0);
    static const char *const files[] = {"stories260K.gguf", "reference_outputs.json", NULL};
    if (!refs_have(files)) return check_summary("test_fit");
    refs_model_path(g_path, sizeof(g_path), "stories260K.gguf");
    test_cpu_plan_is_exact();
    test_split_plan();
    test_impossible();
    test_sessions_within_plan();
    test_weight_groups();
    char refs[4096];
    char *json =
        refs_read_file(refs_model_path(refs, sizeof(refs), "reference_outputs.json"), NULL);
    CHECK(json != NULL);
    if (json) test_run_with_plan(json);
    free(json);
    return check_summary("test_fit");
}
