/*
 * The public API (cllm.h) as a program sees it: only the public header is
 * included. Model queries and metadata, tokenization round trips, chat
 * application, the tensor table, devices, and cllm_generate against a plain
 * decode + argmax loop, with cancellation through the callback; the load's
 * progress callback.
 */
#include "cllm.h"
#include "common/check.h"
#include "common/refs.h"

#include <stdlib.h>
#include <string.h>

static void test_metadata(const cllm_model *m) {
    CHECK_EQ_INT(cllm_model_n_vocab(m), 512);
    CHECK_EQ_INT(cllm_model_n_ctx_train(m), 2048);
    CHECK_EQ_INT(cllm_model_n_layer(m), 5);
    CHECK_EQ_INT(cllm_model_n_embd(m), 64);
    CHECK(!strcmp(cllm_model_arch(m), "llama"));

    char buf[64];
    CHECK_EQ_INT(cllm_model_meta_str(m, "general.architecture", buf, sizeof(buf)), 5);
    CHECK(!strcmp(buf, "llama"));
    CHECK_EQ_INT(cllm_model_meta_str(m, "no.such.key", buf, sizeof(buf)), -1);
    CHECK_EQ_INT(cllm_model_meta_str(m, "llama.block_count", buf, sizeof(buf)), 1);
    CHECK(!strcmp(buf, "5"));
    /* cut to fit, the full length returned */
    char small[3];
    CHECK_EQ_INT(cllm_model_meta_str(m, "general.architecture", small, sizeof(small)), 5);
    CHECK(!strcmp(small, "ll"));
    CHECK(cllm_model_chat_template(m) == NULL);

    const cllm_gguf *g = cllm_model_gguf(m);
    CHECK_EQ_INT(cllm_gguf_version(g), 3);
    const int64_t tok_key = cllm_gguf_find_key(g, "tokenizer.ggml.tokens");
    CHECK(tok_key >= 0);
    if (tok_key >= 0) {
        CHECK(!strcmp(cllm_gguf_kv_type_str(g, tok_key), "array"));
        cllm_gguf_val_to_str(g, tok_key, buf, sizeof(buf));
        CHECK(!strcmp(buf, "[string x 512]"));
    }
    CHECK_EQ_INT(cllm_gguf_n_tensors(g), 48);
    uint64_t params = 0;
    for (int64_t i = 0; i < cllm_gguf_n_tensors(g); i++) {
        const cllm_tensor_desc t = cllm_gguf_tensor_desc(g, i);
        CHECK(t.type == CLLM_TYPE_F32);
        CHECK_EQ_INT(t.bytes, t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3] * 4);
        params += (uint64_t)(t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]);
    }
    CHECK_EQ_INT(params, 292800); /* the model card's parameter count */
}

static void test_tokens(const cllm_model *m) {
    const char *text = "Once upon a time, there was a cat.";
    int32_t ids[64];
    size_t n = 0;
    CHECK(cllm_tokenize(m, text, strlen(text), true, false, ids, 64, &n) == CLLM_OK);
    CHECK(n > 2 && ids[0] == cllm_token_bos(m));
    CHECK_EQ_INT(cllm_token_bos(m), 1);
    CHECK_EQ_INT(cllm_token_eos(m), 2);
    CHECK(cllm_token_is_eog(m, 2));
    CHECK(!cllm_token_is_eog(m, ids[1]));
    CHECK(cllm_token_add_bos(m));
    /* counting only, and a buffer too small */
    size_t counted = 0;
    CHECK(cllm_tokenize(m, text, strlen(text), true, false, NULL, 0, &counted) == CLLM_OK);
    CHECK_EQ_INT(counted, n);
    size_t needed = 0;
    CHECK(cllm_tokenize(m, text, strlen(text), true, false, ids, 2, &needed) == CLLM_ERR_TOO_LARGE);
    CHECK_EQ_INT(needed, n);
    /* round trip: the pieces, then detokenize without the BOS and the space prefix */
    char out[128];
    size_t len = 0;
    CHECK(cllm_detokenize(m, ids + 1, n - 1, CLLM_DETOK_STRIP_PREFIX, out, sizeof(out), &len) ==
          CLLM_OK);
    CHECKF(len == strlen(text) && !memcmp(out, text, len), "'%.*s'", (int)len, out);
    size_t plen = 0, total = 0;
    for (size_t i = 1; i < n; i++) {
        CHECK(cllm_token_to_piece(m, ids[i], false, &plen) != NULL);
        total += plen;
    }
    CHECK_EQ_INT(total, strlen(text) + 1); /* + the space prefix */
    CHECK(cllm_token_to_piece(m, 512, false, &plen) == NULL);
    const int32_t bad = 9999;
    CHECK(cllm_detokenize(m, &bad, 1, 0, out, sizeof(out), &len) == CLLM_ERR_INVALID_ARG);
}

static void test_chat(const cllm_model *m) {
    const cllm_chat_msg msgs[] = {{"user", "Hi"}};
    char *text = NULL;
    size_t len = 0;
    cllm_chat_style style = CLLM_CHAT_STYLE_COUNT;
    /* no template in this file and no style named */
    CHECK(cllm_chat_apply(m, NULL, msgs, 1, true, &text, &len, &style) == CLLM_ERR_INVALID_ARG);
    CHECK(text == NULL && style == CLLM_CHAT_STYLE_COUNT);
    CHECK(cllm_chat_apply(m, "nonsense", msgs, 1, true, &text, &len, &style) ==
          CLLM_ERR_UNSUPPORTED);
    CHECK(cllm_chat_apply(m, "chatml", msgs, 1, true, &text, &len, &style) == CLLM_OK);
    CHECK(style == CLLM_CHAT_STYLE_CHATML);
    const char *want = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
    CHECKF(text && !strcmp(text, want) && len == strlen(want), "'%s'", text ? text : "(null)");
    free(text);
}

typedef struct stop_after {
    int calls, limit;
} stop_after;

static bool count_and_stop(int32_t id, const char *text, size_t len, void *user_data) {
    (void)id, (void)text, (void)len;
    stop_after *s = user_data;
    return ++s->calls < s->limit;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static void test_generate(const cllm_model *m) {
    int32_t prompt[16];
    size_t n_prompt = 0;
    CHECK(cllm_tokenize(m, "Once upon a time", 16, true, false, prompt, 16, &n_prompt) == CLLM_OK);
    cllm_session *s = NULL;
    cllm_sampler *smp = NULL;
    cllm_sampler_params sp = cllm_sampler_default_params();
    sp.temperature = 0;
    CHECK(cllm_session_new(m, NULL, &s) == CLLM_OK);
    CHECK(cllm_sampler_new(&sp, cllm_model_n_vocab(m), &smp) == CLLM_OK);
    if (!s || !smp) goto done;
    CHECK(cllm_session_model(s) == m);

    /* the reference: decode, argmax, decode ... by hand */
    enum { N = 16 };
    int32_t want[N];
    CHECK(cllm_session_decode(s, prompt, (int64_t)n_prompt) == CLLM_OK);
    for (int i = 0; i < N; i++) {
        want[i] = argmax(cllm_session_logits(s), cllm_model_n_vocab(m));
        if (i + 1 < N) CHECK(cllm_session_decode(s, &want[i], 1) == CLLM_OK);
    }
    /* truncate to the current length is a no-op; to 0 forgets all */
    CHECK(cllm_session_truncate(s, cllm_session_n_past(s)) == CLLM_OK);
    CHECK(cllm_session_truncate(s, 0) == CLLM_OK);
    CHECK_EQ_INT(cllm_session_n_past(s), 0);

    cllm_generate_result res;
    CHECK(cllm_generate(s, smp, prompt, n_prompt, N, NULL, NULL, &res) == CLLM_OK);
    CHECK_EQ_INT(res.n_ids, N);
    CHECK(res.stop == CLLM_STOP_LENGTH);
    CHECK(res.n_ids == N && !memcmp(res.ids, want, sizeof(want)));
    CHECK_EQ_INT(cllm_session_n_past(s), (int64_t)n_prompt + N - 1);
    cllm_generate_result_free(&res);
    CHECK(res.ids == NULL && res.n_ids == 0);

    /* cancellation: the callback says stop at its third call */
    cllm_session_reset(s);
    cllm_sampler_reset(smp);
    stop_after stop = {.limit = 3};
    CHECK(cllm_generate(s, smp, prompt, n_prompt, N, count_and_stop, &stop, &res) == CLLM_OK);
    CHECK(res.stop == CLLM_STOP_CALLBACK);
    CHECK_EQ_INT(res.n_ids, 3);
    CHECK(res.n_ids == 3 && !memcmp(res.ids, want, 3 * sizeof(*want)));
    cllm_generate_result_free(&res);

    /* an empty prompt is refused, the result zeroed */
    CHECK(cllm_generate(s, smp, prompt, 0, N, NULL, NULL, &res) == CLLM_ERR_INVALID_ARG);
    CHECK(res.ids == NULL && res.n_ids == 0);

    const cllm_memory_report r = cllm_session_memory(s);
    for (int k = 0; k < CLLM_MEM_COUNT; k++) CHECK_EQ_INT(r.planned[k], r.allocated[k]);
    CHECK(r.allocated[CLLM_MEM_STATE] > 0);
done:
    cllm_sampler_free(smp);
    cllm_session_free(s);
}

static void test_devices(void) {
    const int n = cllm_device_count();
    CHECK(n >= 1);
    int n_cpu = 0;
    for (int i = 0; i < n; i++) {
        cllm_device *d = cllm_device_get(i);
        size_t free_b = 0, total_b = 0;
        cllm_device_memory(d, &free_b, &total_b);
        CHECK(total_b > 0 && free_b <= total_b);
        CHECK(cllm_device_name(d)[0] != 0);
        n_cpu += cllm_device_kind_of(d) == CLLM_DEVICE_CPU;
    }
    CHECK_EQ_INT(n_cpu, 1);
    CHECK(cllm_device_enable_test("budget=lots") == CLLM_ERR_INVALID_ARG);
    CHECK(cllm_cpu_physical_cores() >= 1);
    CHECK(cllm_cpu_features()[0] != 0);
}

/* What a load's progress callback saw. */
typedef struct progress_seen {
    int calls;
    uint64_t first, last, total;
    bool monotone, same_total;
} progress_seen;

static void on_progress(uint64_t done, uint64_t total, void *ud) {
    progress_seen *p = ud;
    if (p->calls == 0) p->first = done, p->total = total;
    if (p->calls > 0 && done < p->last) p->monotone = false;
    if (total != p->total) p->same_total = false;
    p->last = done;
    p->calls++;
}

/* From 0 to done == total, never going back, mapped and read. */
static void test_load_progress(const char *path) {
    for (int read = 0; read < 2; read++) {
        cllm_model_params mp = cllm_model_default_params();
        CHECK(mp.progress_fn == NULL);
        mp.use_mmap = !read;
        progress_seen seen = {.monotone = true, .same_total = true};
        mp.progress_fn = on_progress;
        mp.progress_user_data = &seen;
        cllm_model *m = NULL;
        CHECK(cllm_model_load(path, &mp, &m) == CLLM_OK);
        CHECK(seen.calls >= 2 && seen.first == 0 && seen.total > 0);
        CHECK(seen.monotone && seen.same_total && seen.last == seen.total);
        if (read) CHECK(seen.calls > 3); /* one call per tensor read */
        cllm_model_free(m);
    }
}

int main(void) {
    cllm_log_set_level(CLLM_LOG_ERROR);
    static const char *const files[] = {"stories260K.gguf", NULL};
    if (!refs_have(files)) return check_summary("test_api");
    char path[4096];
    cllm_model *m = NULL;
    if (cllm_model_load(refs_model_path(path, sizeof(path), "stories260K.gguf"), NULL, &m) !=
        CLLM_OK) {
        fprintf(stderr, "test_api: %s\n", cllm_last_error());
        return 1;
    }
    test_metadata(m);
    test_tokens(m);
    test_chat(m);
    test_generate(m);
    test_devices();
    test_load_progress(path);
    cllm_model_free(m);
    return check_summary("test_api");
}
