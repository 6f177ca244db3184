/*
 * The logger from many threads at once (run under ThreadSanitizer in CI):
 *
 *  - threads that log their first messages together, while the level of
 *    the default logger is still to be read from CLLM_LOG;
 *  - a thread that swaps the log callback and its user data, and one that
 *    changes the level, while the others log: each callback only ever
 *    receives its own user data, and every message arrives whole;
 *  - cllm_last_error stays each thread's own.
 */
#include "common/check.h"
#include "core/common.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_THREADS = 6, N_MESSAGES = 2000, N_SWAPS = 2000 };

static pthread_barrier_t g_start;
static atomic_int g_mismatch;  /* a callback saw another callback's user data */
static atomic_int g_bad_text;  /* a message arrived cut or mixed */
static atomic_int g_bad_last;  /* cllm_last_error showed another thread's error */
static atomic_long g_received; /* messages the callbacks received */
static int g_ud_a, g_ud_b;

static void check_msg(const char *msg) {
    int t = -1, i = -1;
    char tail[8] = "";
    if (sscanf(msg, "thread %d message %d %7s", &t, &i, tail) != 3 || strcmp(tail, "end")) {
        atomic_fetch_add(&g_bad_text, 1);
    }
}

static void sink_a(cllm_log_level level, const char *msg, void *ud) {
    (void)level;
    if (ud != &g_ud_a) atomic_fetch_add(&g_mismatch, 1);
    check_msg(msg);
    atomic_fetch_add(&g_received, 1);
}

static void sink_b(cllm_log_level level, const char *msg, void *ud) {
    (void)level;
    if (ud != &g_ud_b) atomic_fetch_add(&g_mismatch, 1);
    check_msg(msg);
    atomic_fetch_add(&g_received, 1);
    /* a callback may log itself: below the level, through the same path */
    cllm_log(CLLM_LOG_DEBUG, "thread %d message %d end", 99, 0);
}

/* First round: the default logger, below its level (nothing printed; the
 * level is read from the environment on first use). */
static void *first_reporter(void *arg) {
    const int t = (int)(intptr_t)arg;
    pthread_barrier_wait(&g_start);
    for (int i = 0; i < N_MESSAGES / 10; i++) {
        cllm_log(CLLM_LOG_DEBUG, "thread %d message %d end", t, i);
        (void)cllm_log_get_level();
    }
    return NULL;
}

/* Second round: errors, to whichever callback is set. */
static void *reporter(void *arg) {
    const int t = (int)(intptr_t)arg;
    pthread_barrier_wait(&g_start);
    for (int i = 0; i < N_MESSAGES; i++) {
        char want[64];
        snprintf(want, sizeof(want), "thread %d message %d end", t, i);
        (void)cllm_error(CLLM_ERR_INVALID_ARG, "thread %d message %d end", t, i);
        if (strcmp(cllm_last_error(), want) != 0) atomic_fetch_add(&g_bad_last, 1);
        (void)cllm_log_get_level();
    }
    return NULL;
}

static void *swapper(void *arg) {
    (void)arg;
    pthread_barrier_wait(&g_start);
    for (int i = 0; i < N_SWAPS; i++) {
        if (i % 2)
            cllm_log_set(sink_a, &g_ud_a);
        else
            cllm_log_set(sink_b, &g_ud_b);
        cllm_log_set_level(i % 3 ? CLLM_LOG_ERROR : CLLM_LOG_WARN);
    }
    return NULL;
}

int main(void) {
    pthread_t th[N_THREADS + 1];
    pthread_barrier_init(&g_start, NULL, N_THREADS + 1);
    /* first round: every thread's first message at once, the level unread */
    for (int t = 0; t < N_THREADS; t++) {
        CHECK(pthread_create(&th[t], NULL, first_reporter, (void *)(intptr_t)t) == 0);
    }
    pthread_barrier_wait(&g_start);
    for (int t = 0; t < N_THREADS; t++) pthread_join(th[t], NULL);
    pthread_barrier_destroy(&g_start);
    const bool level_ok = cllm_log_get_level() == CLLM_LOG_WARN || getenv("CLLM_LOG") != NULL;

    /* second round: the sink and the level change while threads log
     * (never the default logger, which would print the errors) */
    cllm_log_set(sink_a, &g_ud_a);
    pthread_barrier_init(&g_start, NULL, N_THREADS + 1);
    for (int t = 0; t < N_THREADS - 1; t++) {
        CHECK(pthread_create(&th[t], NULL, reporter, (void *)(intptr_t)t) == 0);
    }
    CHECK(pthread_create(&th[N_THREADS - 1], NULL, swapper, NULL) == 0);
    pthread_barrier_wait(&g_start);
    for (int t = 0; t < N_THREADS; t++) pthread_join(th[t], NULL);
    pthread_barrier_destroy(&g_start);
    cllm_log_set(NULL, NULL);

    CHECKF(atomic_load(&g_mismatch) == 0, "%d callbacks with another's user data",
           atomic_load(&g_mismatch));
    CHECKF(atomic_load(&g_bad_text) == 0, "%d messages cut or mixed", atomic_load(&g_bad_text));
    CHECKF(atomic_load(&g_bad_last) == 0, "%d last errors of another thread",
           atomic_load(&g_bad_last));
    CHECK(level_ok);
    CHECKF(atomic_load(&g_received) > 0, "no message reached a callback");
    return check_summary("test_log_threads");
}
