/*
 * Bad model files, end to end: truncations and byte flips of the small real
 * models go through the whole path a user takes (load the model, build the
 * tokenizer, create a session, tokenize, decode). Each must give an error
 * status or run, and never crash (CI runs this under ASan + UBSan).
 *
 * The file is written once to a temporary path; a truncation is an
 * ftruncate, a flip is one pwrite and its undo, so thousands of cases run in
 * seconds.
 */
#include "common/check.h"
#include "common/refs.h"
#include "runtime/session.h"
#include "text/tokenizer.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void quiet(cllm_log_level level, const char *msg, void *ud) {
    (void)level, (void)msg, (void)ud;
}

static uint64_t g_rng = 0x1234567;
static uint64_t next_rand(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

/* The whole path; returns true if it ran, false if it stopped at an error. */
static bool try_model(const char *path, int *n_errors) {
    cllm_model *m = NULL;
    cllm_tokenizer *tok = NULL;
    cllm_session *s = NULL;
    bool ran = false;
    if (cllm_model_load(path, NULL, &m) != CLLM_OK) goto done;
    if (cllm_tokenizer_new_from_gguf(m->gguf, &tok) != CLLM_OK) goto done;
    cllm_session_params sp = cllm_session_default_params();
    sp.n_ctx = 16;
    sp.n_threads = 1;
    if (cllm_session_new(m, &sp, &s) != CLLM_OK) goto done;
    int32_t ids[16];
    size_t n = 0;
    if (cllm_tokenizer_encode(tok, "Once upon a time", 16, true, false, ids, 16, &n) != CLLM_OK) {
        goto done;
    }
    if (n == 0 || cllm_tokenizer_n_vocab(tok) != cllm_session_n_vocab(s)) goto done;
    if (cllm_session_decode(s, ids, (int64_t)n) != CLLM_OK) goto done;
    ran = cllm_session_logits(s) != NULL;
done:
    if (!ran) (*n_errors)++;
    cllm_session_free(s);
    cllm_tokenizer_free(tok);
    cllm_model_free(m);
    return ran;
}

static void fuzz_model(const char *name, int n_flips) {
    char src[4096];
    size_t size = 0;
    unsigned char *data =
        (unsigned char *)refs_read_file(refs_model_path(src, sizeof(src), name), &size);
    CHECKF(data != NULL, "cannot read %s", src);
    if (!data) return;
    char path[] = "/tmp/cllm-badfile-XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) {
        free(data);
        return;
    }
    CHECK(pwrite(fd, data, size, 0) == (ssize_t)size);

    /* the intact file runs; find where the metadata ends */
    int errors = 0;
    CHECKF(try_model(path, &errors), "%s: intact file fails: %s", name, cllm_last_error());
    cllm_gguf *g = NULL;
    CHECK(cllm_gguf_open(path, &g) == CLLM_OK);
    const size_t meta = g ? (size_t)cllm_gguf_data_offset(g) : size;
    cllm_gguf_free(g);

    cllm_log_set(quiet, NULL);
    /* truncations: every length in the metadata (sampled when it is long),
     * and a sample through the tensor data; all are errors */
    errors = 0;
    int n_trunc = 0;
    const size_t meta_step = meta > 8192 ? meta / 4096 : 1;
    for (size_t len = size - 1; len + 1 > 0; len--) {
        const bool take = len < meta ? len % meta_step == 0 || len < 512 : (size - len) % 4099 == 1;
        if (!take) continue;
        if (ftruncate(fd, (off_t)len) != 0) break;
        CHECKF(!try_model(path, &errors), "%s truncated to %zu bytes loads", name, len);
        n_trunc++;
        if (len == 0) break;
    }
    CHECK_EQ_INT(errors, n_trunc);
    CHECK(pwrite(fd, data, size, 0) == (ssize_t)size);

    /* byte flips, mostly in the metadata: an error or a run, never a crash */
    int ran = 0;
    errors = 0;
    for (int i = 0; i < n_flips; i++) {
        const size_t pos = (size_t)(next_rand() % (i % 8 ? meta : size));
        const unsigned char b = (unsigned char)(data[pos] ^ (1u << (next_rand() % 8)));
        CHECK(pwrite(fd, &b, 1, (off_t)pos) == 1);
        ran += try_model(path, &errors);
        CHECK(pwrite(fd, &data[pos], 1, (off_t)pos) == 1);
    }
    cllm_log_set(NULL, NULL);
    printf("%s: %d truncations rejected; %d flips: %d ran, %d rejected\n", name, n_trunc, n_flips,
           ran, errors);
    close(fd);
    unlink(path);
    free(data);
}

int main(void) {
    static const char *const files[] = {"stories260K.gguf", "tinyllamas-stories-260k-f32.gguf",
                                        "llama-2-tiny-random.gguf", "TinyLLama-v0.Q4_0.gguf", NULL};
    if (!refs_have(files)) return check_summary("test_badfiles");
    fuzz_model("stories260K.gguf", 1500);
    fuzz_model("tinyllamas-stories-260k-f32.gguf", 500); /* GGUF v1 */
    fuzz_model("llama-2-tiny-random.gguf", 500);
    fuzz_model("TinyLLama-v0.Q4_0.gguf", 300);
    return check_summary("test_badfiles");
}
