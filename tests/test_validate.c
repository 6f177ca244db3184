/*
 * Input validation on crafted model files: each file is a tiny llama model
 * written with the GGUF writer and changed in one way. A file is either
 * refused with a message that names the real cause, or accepted (with a
 * warning where the README's "Input validation" says so) and then runs.
 * No shared data is needed.
 */
#include "common/check.h"
#include "runtime/fit.h"
#include "runtime/session.h"

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

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(g_path, sizeof(g_path), "%s/cllm-test-validate-%d.gguf", tmp && tmp[0] ? tmp : "/tmp",
             (int)getpid());
    cllm_log_set(capture, NULL);
    test_fifo();
    cllm_log_set(NULL, NULL);
    unlink(g_path);
    return check_summary("test_validate");
}
